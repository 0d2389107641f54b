/* The record array behind a snapshot: grown while a backend fills it, then
 * sorted by pid once so lookups are binary searches; the record's field
 * table; and tk_snapshot_take, what every backend's snapshot goes through. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"
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

__extension__ typedef unsigned __int128 u128;

/* kernel/sched/cputime.c cputime_adjust(), without storing prev (that
 * stays the kernel's): the precise runtime split in the sampled ratio,
 * never below the split /proc reported last. */
void tk_cputime_split(uint64_t rtime, uint64_t prev_ut, uint64_t prev_st, uint64_t *utime,
                      uint64_t *stime)
{
	uint64_t ut = *utime, st = *stime;

	if (prev_ut + prev_st >= rtime) {
		*utime = prev_ut;
		*stime = prev_st;
		return;
	}
	if (st == 0) {
		/* all of it is utime: st stays 0 and ut = rtime - st below */
	} else if (ut == 0) {
		st = rtime;
	} else {
		uint64_t product;

		/* 128-bit division is a libgcc call; most products fit in 64. */
		if (!__builtin_mul_overflow(st, rtime, &product))
			st = product / (st + ut);
		else
			st = (uint64_t)((u128)st * rtime / (st + ut));
		if (st > rtime)
			st = rtime;
	}
	if (st < prev_st)
		st = prev_st;
	ut = rtime - st;
	if (ut < prev_ut) {
		ut = prev_ut;
		st = rtime - ut;
	}
	*utime = ut;
	*stime = st;
}

void tk_cputime_adjust(const struct tk_wire_record *w, struct tk_record *out)
{
	uint64_t ut = w->rec.utime_ns, st = w->rec.stime_ns;

	tk_cputime_split(w->runtime_ns, w->prev_utime_ns, w->prev_stime_ns, &ut, &st);
	out->utime_ns = ut;
	out->stime_ns = st;
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

uint64_t tk_clock_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t tk_boottime_ns(void)
{
	return tk_clock_ns(CLOCK_BOOTTIME);
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

/* ---- one snapshot, whichever backend ---------------------------------------- */

/* The caller's scanner opens on first use; the cgroup id cache it was
 * lent stays lent. */
static int scanner_ensure_open(struct tk_proc_scanner *sc)
{
	struct tk_cgid_cache *cgids = sc->cgids;
	int want_cmdline = sc->want_cmdline, err;

	if (sc->proc_fd >= 0)
		return 0;
	err = tk_proc_scanner_init(sc, "/proc");
	sc->cgids = cgids;
	sc->want_cmdline = want_cmdline;
	return err;
}

int tk_snap_proc_run(const struct tk_snap_backend *b, const struct tk_snap_req *req,
                     struct tk_recbuf *out, char *why, size_t why_len)
{
	struct tk_proc_scanner *sc = req->sc;
	int err;

	(void)b;
	err = scanner_ensure_open(sc);
	if (err < 0) {
		snprintf(why, why_len, "open /proc: %s", strerror(-err));
		return err;
	}
	sc->want_cmdline = (req->fields & TK_F(CMDLINE)) != 0;
	out->boot_offset_ns = 0;
	err = tk_proc_scan(sc, out, req->use_cache);
	sc->want_cmdline = 0;
	if (req->fields & TK_F(CMDLINE))
		out->cmdline_from = "proc";
	if (err == -EBADMSG)
		snprintf(why, why_len, "parse /proc/%d/stat: %s", sc->bad_pid, strerror(-err));
	else if (err < 0)
		snprintf(why, why_len, "read /proc: %s", strerror(-err));
	return err;
}

/* Init is always there in the initial pid namespace, yet some kernels hide
 * it from BPF (seen on a Firecracker guest's 6.18, whose init is its sandbox
 * agent: neither the task list, the pid table walk nor bpf_task_from_pid(1)
 * finds it). Its record then comes from /proc and is counted in from_proc,
 * rather than a snapshot silently missing pid 1. want_id: whether its
 * cgroup_id is looked up (a cgroup2 hierarchy is mounted). out is in pid
 * order. */
static int add_hidden_init(struct tk_proc_scanner *sc, uint32_t fields, int want_id,
                           struct tk_recbuf *out, char *why, size_t why_len)
{
	struct tk_record rec;
	int err;

	if (tk_recbuf_find(out, 1) != NULL)
		return 0;
	err = scanner_ensure_open(sc);
	if (err == 0)
		err = tk_proc_scan_init(sc, &rec);
	/* As for every /proc record, a cgroup that cannot be read is nil (id
	 * 0) and the record stays. */
	if (err == 0 && want_id) {
		struct tk_cgid_cache cgids;
		uint64_t id = 0;

		if (tk_cgid_cache_open(&cgids) == 0) {
			(void)tk_init_cgroup_id(sc->proc_fd, &sc->init_cgroup_fd, &cgids, &id);
			tk_cgid_cache_close(&cgids);
		}
		rec.cgroup_id = id;
	}
	if (err == -EACCES || err == -EPERM) {
		out->denied++;
		return 0;
	}
	if (err == 0) {
		tk_record_mask(&rec, fields);
		err = tk_recbuf_insert(out, &rec);
	}
	if (err < 0) {
		snprintf(why, why_len, "init is hidden from BPF here; reading /proc/1: %s",
		         strerror(-err));
		return err;
	}
	out->from_proc++;
	return 0;
}

int tk_snapshot_take(const struct tk_snap_backend *b, const struct tk_snap_req *req,
                     struct tk_recbuf *out, uint64_t *time_ns, char *why, size_t why_len)
{
	struct tk_proc_scanner *sc = req->sc;
	int want_cgroup = (req->fields & TK_F(CGROUP)) != 0;
	/* <pid>/cgroup is read when cgroup_id is asked for: by proc for every
	 * record, through a cache of paths; by a BPF tier for a hidden init. */
	int proc_ids = want_cgroup && !b->may_hide_init;
	struct tk_cgid_cache cgids;
	char mnt[TK_CG_PATH_MAX];
	int err = 0, unmounted = 0;

	*time_ns = tk_boottime_ns();
	if (proc_ids) {
		err = tk_cgid_cache_open(&cgids);
		unmounted = err == 0 && cgids.mount_fd < 0;
	} else if (want_cgroup) {
		err = tk_cgroup2_mount(mnt, sizeof mnt);
		unmounted = err == -ENOENT;
		err = unmounted ? 0 : err;
	}
	if (err < 0) {
		snprintf(why, why_len, "find the cgroup2 mount: %s", strerror(-err));
		return err;
	}
	sc->cgids = proc_ids ? &cgids : NULL;
	err = b->run(b, req, out, why, why_len);
	if (proc_ids)
		tk_cgid_cache_close(&cgids);
	sc->cgids = NULL;
	if (err == 0)
		tk_recbuf_sort(out);
	if (err == 0 && b->may_hide_init)
		err = add_hidden_init(sc, (req->fields | TK_F_ALWAYS) & TK_F_WALK,
		                      want_cgroup && !unmounted, out, why, why_len);
	/* After a BPF walk; the proc walk read cmdline as it went. */
	if (err == 0 && (req->fields & TK_F(CMDLINE)) && b->tier >= 0) {
		err = scanner_ensure_open(sc);
		if (err < 0)
			snprintf(why, why_len, "open /proc: %s", strerror(-err));
		else
			err = tk_cmdline_fill(out, sc, why, why_len);
	}
	if (err < 0) {
		tk_recbuf_free(out);
		return err;
	}
	/* Each cmdline read reserved room for a long one. */
	if (out->text_cap > out->text_len + 4096) {
		char *text = realloc(out->text, out->text_len ? out->text_len : 1);

		if (text != NULL) {
			out->text = text;
			out->text_cap = out->text_len ? out->text_len : 1;
		}
	}
	/* No cgroup2 hierarchy mounted: every process is still in the default
	 * hierarchy's root, which BPF reads as id 1, but no path leads to it.
	 * The ids read 0 (nil), as /proc's do. */
	for (size_t i = 0; unmounted && i < out->len; i++)
		out->recs[i].cgroup_id = 0;
	return 0;
}

/* ---- two snapshots side by side ----------------------------------------------- */

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
