/* The record array behind a snapshot: grown while a backend fills it, then
 * sorted by pid once so lookups are binary searches; its children index and
 * the merge of two of them; the record's field table; and the CPU time
 * split of a BPF record, as /proc splits it. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc_stat.h"
#include "recbuf.h"
#include "util.h"

struct tk_record *tk_recbuf_push(struct tk_recbuf *rb)
{
	if (rb->len == rb->cap) {
		struct tk_record *recs = tk_grow(rb->recs, &rb->cap, rb->len + 1, sizeof *recs, 512);
		if (recs == NULL)
			return NULL;
		rb->recs = recs;
	}
	return &rb->recs[rb->len++];
}

void tk_recbuf_free(struct tk_recbuf *rb)
{
	free(rb->recs);
	free(rb->text);
	rb->recs = NULL;
	rb->text = NULL;
	rb->len = rb->cap = rb->text_len = rb->text_cap = 0;
	rb->init_room = 0;
}

static int record_cmp(const void *a, const void *b)
{
	uint32_t pa = ((const struct tk_record *)a)->pid;
	uint32_t pb = ((const struct tk_record *)b)->pid;
	return (pa > pb) - (pa < pb);
}

void tk_recbuf_sort(struct tk_recbuf *rb)
{
	size_t i, out;
	int sorted = 1;

	/* /proc lists pids in ascending order already; skip the sort then. */
	for (i = 1; i < rb->len && sorted; i++)
		sorted = rb->recs[i - 1].pid < rb->recs[i].pid;
	if (sorted)
		return;
	qsort(rb->recs, rb->len, sizeof *rb->recs, record_cmp);
	for (i = 1, out = 1; i < rb->len; i++) {
		if (rb->recs[i].pid == rb->recs[out - 1].pid)
			continue;
		if (out != i)
			rb->recs[out] = rb->recs[i];
		out++;
	}
	if (rb->len > 0)
		rb->len = out;
}

/* LSD radix sort on the pid bits only, a byte at a time, for as many bytes
 * as the largest pid has: two passes for pids below 65536, three up to
 * PID_MAX_LIMIT (2^22). 256 buckets keep a small snapshot's sort cheap; the
 * buffers swap roles instead of copying back after each pass. */
#define RADIX_BITS 8
#define RADIX_SIZE (1u << RADIX_BITS)

const uint64_t *tk_pid_keys_sort(uint64_t *keys, uint64_t *tmp, size_t n, uint32_t max_pid)
{
	for (unsigned shift = 32; shift < 64; shift += RADIX_BITS) {
		size_t count[RADIX_SIZE + 1] = { 0 };
		uint64_t *swap;
		size_t i;

		if (shift > 32 && (max_pid >> (shift - 32)) == 0)
			break;
		for (i = 0; i < n; i++)
			count[((keys[i] >> shift) & (RADIX_SIZE - 1)) + 1]++;
		for (i = 1; i <= RADIX_SIZE; i++)
			count[i] += count[i - 1];
		for (i = 0; i < n; i++)
			tmp[count[(keys[i] >> shift) & (RADIX_SIZE - 1)]++] = keys[i];
		swap = keys;
		keys = tmp;
		tmp = swap;
	}
	return keys;
}

int tk_recbuf_insert(struct tk_recbuf *rb, const struct tk_record *rec)
{
	size_t at = 0;

	while (at < rb->len && rb->recs[at].pid < rec->pid)
		at++;
	if (at < rb->len && rb->recs[at].pid == rec->pid)
		return 0;
	if (tk_recbuf_push(rb) == NULL)
		return -ENOMEM;
	memmove(&rb->recs[at + 1], &rb->recs[at], (rb->len - 1 - at) * sizeof *rb->recs);
	rb->recs[at] = *rec;
	return 0;
}

const struct tk_record *tk_recbuf_find(const struct tk_recbuf *rb, uint32_t pid)
{
	size_t lo = 0, hi = rb->len;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		uint32_t p = rb->recs[mid].pid;
		if (p == pid)
			return &rb->recs[mid];
		if (p < pid)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* Each kind's member size: a line of TK_FIELDS whose member does not
 * match its kind fails to compile here. */
#define TK_KIND_SIZE_U32 4
#define TK_KIND_SIZE_S32 4
#define TK_KIND_SIZE_U64 8
#define TK_KIND_SIZE_NS 8
#define TK_KIND_SIZE_BYTES 8
#define TK_KIND_SIZE_CGROUP 8
#define TK_KIND_SIZE_STATE 4
#define TK_KIND_SIZE_COMM TK_COMM_LEN
#define TK_KIND_SIZE_KTHREAD 4
#define TK_KIND_SIZE_CMDLINE 4
#define FIELD_CHECK(id, name, member, kind) \
	_Static_assert(sizeof(((struct tk_record *)0)->member) == TK_KIND_SIZE_##kind, \
	               "record field " #name ": member size does not match kind " #kind);
TK_FIELDS(FIELD_CHECK)
#undef FIELD_CHECK

#define FIELD_DESC(id, name, member, kind) \
	[TK_FLD_##id] = { #name, offsetof(struct tk_record, member), TK_KIND_##kind },
const struct tk_field_desc tk_record_fields[TK_FLD_COUNT] = { TK_FIELDS(FIELD_DESC) };
#undef FIELD_DESC

void tk_record_mask(struct tk_record *r, uint32_t fields)
{
	/* The pid is the record's identity, and the kthread bit shares flags
	 * with what the backends need: neither is cleared. */
	fields |= TK_F(PID) | TK_F(KTHREAD);
	/* Straight-line stores of constant sizes: this runs on every record of
	 * a BPF snapshot with a selection (a loop over the table was 12x). */
#define FIELD_CLEAR(id, name, member, kind) \
	if (!(fields & TK_F(id))) \
		memset(&r->member, 0, sizeof r->member);
	TK_FIELDS(FIELD_CLEAR)
#undef FIELD_CLEAR
	if (!(fields & TK_F(COMM)))
		r->comm_len = 0;
}

int tk_children_build(const struct tk_recbuf *rb, struct tk_children *c)
{
	size_t n = rb->len, m = 0, j = 0;
	uint64_t *keys = malloc((n ? n : 1) * 2 * sizeof *keys);
	uint32_t *block = malloc((n ? n : 1) * 3 * sizeof *block);
	const uint64_t *by_ppid;
	uint32_t max_ppid = 0;

	if (keys == NULL || block == NULL) {
		free(keys);
		free(block);
		return -ENOMEM;
	}
	c->start = block;
	c->end = block + n;
	c->kids = block + 2 * n;
	/* Group the records by parent: a stable sort of (ppid, index) keys
	 * keeps each group in pid order. */
	for (size_t i = 0; i < n; i++) {
		const struct tk_record *r = &rb->recs[i];
		if (r->ppid == r->pid)
			continue;
		keys[m++] = (uint64_t)r->ppid << 32 | i;
		if (r->ppid > max_ppid)
			max_ppid = r->ppid;
	}
	by_ppid = tk_pid_keys_sort(keys, keys + n, m, max_ppid);
	for (size_t k = 0; k < m; k++)
		c->kids[k] = (uint32_t)by_ppid[k];
	/* Both lists ascend: one merge gives every record its children. */
	for (size_t i = 0; i < n; i++) {
		uint32_t pid = rb->recs[i].pid;
		while (j < m && (uint32_t)(by_ppid[j] >> 32) < pid)
			j++;
		c->start[i] = (uint32_t)j;
		while (j < m && (uint32_t)(by_ppid[j] >> 32) == pid)
			j++;
		c->end[i] = (uint32_t)j;
	}
	free(keys);
	return 0;
}

void tk_children_free(struct tk_children *c)
{
	free(c->start);
	c->start = c->end = c->kids = NULL;
}

size_t tk_children_descendants(const struct tk_children *c, size_t n, size_t root,
                               unsigned char *seen, uint32_t *out)
{
	size_t head = 0, nout = 0;

	memset(seen, 0, n);
	/* Breadth-first over out itself; a record is visited once, so a parent
	 * cycle (a /proc scan straddling pid reuse can record A.ppid = B and
	 * B.ppid = A) ends instead of looping. */
	seen[root] = 1;
	for (size_t at = root;;) {
		for (uint32_t k = c->start[at]; k < c->end[at]; k++) {
			uint32_t kid = c->kids[k];
			if (!seen[kid]) {
				seen[kid] = 1;
				out[nout++] = kid;
			}
		}
		if (head == nout)
			break;
		at = out[head++];
	}
	return nout;
}

/* Room for n more bytes of cmdline text at *at (not counted in text_len
 * until the caller adds them). */
int tk_recbuf_text_reserve(struct tk_recbuf *rb, size_t n, char **at)
{
	if (rb->text_len + n > UINT32_MAX)
		return -E2BIG;
	if (rb->text_len + n > rb->text_cap) {
		char *text = tk_grow(rb->text, &rb->text_cap, rb->text_len + n, 1, 1 << 16);
		if (text == NULL)
			return -ENOMEM;
		rb->text = text;
	}
	*at = rb->text + rb->text_len;
	return 0;
}

/* The same process: the same pid and a start time within one clock tick.
 * /proc gives start times in ticks and BPF in ns, so the slack lets a record
 * from either backend match the other's; two records of one backend match
 * only when equal (ticks are whole, BPF's ns exact). A pid reused within
 * one tick of its last start would need the whole pid space to wrap in
 * that time, so a reused pid (a later start) still reads as another
 * process. */
int tk_same_process(const struct tk_record *a, const struct tk_record *b, uint64_t tick)
{
	uint64_t d = a->start_ns > b->start_ns ? a->start_ns - b->start_ns
	                                        : b->start_ns - a->start_ns;
	return a->pid == b->pid && d < tick;
}

int tk_recbuf_join(const struct tk_recbuf *a, const struct tk_recbuf *b, tk_join_fn fn, void *ctx)
{
	struct tk_units units;
	size_t i = 0, j = 0;
	int ret = 0;

	tk_units_init(&units);
	/* The lengths are read again on every turn: fn may free either. */
	while (ret == 0 && (i < a->len || j < b->len)) {
		const struct tk_record *ra = i < a->len ? &a->recs[i] : NULL;
		const struct tk_record *rb = j < b->len ? &b->recs[j] : NULL;

		if (rb == NULL || (ra != NULL && ra->pid < rb->pid)) {
			i++;
			ret = fn(ctx, TK_JOIN_GONE, ra, NULL);
		} else if (ra == NULL || rb->pid < ra->pid) {
			j++;
			ret = fn(ctx, TK_JOIN_NEW, NULL, rb);
		} else if (!tk_same_process(ra, rb, units.ns_per_tick)) {
			i++;
			j++;
			ret = fn(ctx, TK_JOIN_GONE, ra, NULL);
			if (ret == 0)
				ret = fn(ctx, TK_JOIN_NEW, NULL, rb);
		} else {
			i++;
			j++;
			ret = fn(ctx, TK_JOIN_SAME, ra, rb);
		}
	}
	return ret;
}
