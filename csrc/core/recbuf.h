/* The record array behind a snapshot (recbuf.c): grown while a backend
 * fills it, sorted by pid, indexed by parent, merged with another; the
 * record's field table; the CPU time split of a BPF record. */
#ifndef TAKANA_RECBUF_H
#define TAKANA_RECBUF_H

#include <stddef.h>
#include <stdint.h>

#include "takana_record.h"

struct tk_recbuf {
	struct tk_record *recs;
	size_t len;
	size_t cap;
	size_t vanished;   /* listed, then gone before it could be read */
	size_t denied;     /* listed, but not readable (hidepid=1 and the like) */
	size_t from_proc;  /* hidden from a BPF walk, read from /proc instead */
	char *text;        /* the records' cmdline bytes (cmdline_off/_len) */
	size_t text_len, text_cap;
	const char *cmdline_from;  /* "bpf" or "proc": who read them; NULL: not asked */
	size_t cmdline_by_bpf;     /* records whose cmdline the argv program read */
	size_t cmdline_by_proc;    /* ... and /proc, after a BPF walk or by a /proc one */
	/* What a BPF walk added to the kernel's start times: our time
	 * namespace's boottime offset, as /proc adds it (0 for /proc's). */
	int64_t boot_offset_ns;
	/* A BPF walk that did not see init leaves recs[0] for it, with pid 0:
	 * its record from /proc then goes in without moving every other one
	 * (a 1.8 MB memmove at 10,000 processes). tk_snapshot_take fills or
	 * drops it. */
	int init_room;
};

struct tk_record *tk_recbuf_push(struct tk_recbuf *rb);   /* NULL on ENOMEM */
void tk_recbuf_free(struct tk_recbuf *rb);
/* Sorts by pid and drops duplicate pids; which duplicate stays is
 * unspecified (qsort is not stable). */
void tk_recbuf_sort(struct tk_recbuf *rb);
/* Inserts in pid order unless the pid is there already. Requires a sorted
 * buffer; linear, for the odd record added after a sort. */
int tk_recbuf_insert(struct tk_recbuf *rb, const struct tk_record *rec);
/* Room for n more bytes of cmdline text at *at, not yet counted in
 * text_len. 0, -E2BIG or -ENOMEM. */
int tk_recbuf_text_reserve(struct tk_recbuf *rb, size_t n, char **at);
/* Binary search; NULL when absent. Requires a sorted buffer. */
const struct tk_record *tk_recbuf_find(const struct tk_recbuf *rb, uint32_t pid);
/* Sorts n keys (pid << 32 | anything), stable, by pid; every pid must be
 * <= max_pid. tmp holds n keys too; returns whichever buffer holds the
 * result. */
const uint64_t *tk_pid_keys_sort(uint64_t *keys, uint64_t *tmp, size_t n, uint32_t max_pid);

/* Every record's children, record indexes grouped by parent, each group in
 * pid order: built once for a sorted buffer in O(n), then a record's
 * children are kids[start[i] .. end[i]). A record whose ppid is its own
 * pid is nobody's child, not even its own. */
struct tk_children {
	uint32_t *start, *end;
	uint32_t *kids;
};
int tk_children_build(const struct tk_recbuf *rb, struct tk_children *c);   /* 0 or -ENOMEM */
void tk_children_free(struct tk_children *c);
/* Every descendant of record root of the n indexed, breadth-first, each
 * once even when the records hold a parent cycle. Writes record indexes to
 * out (room for n) and returns their count; seen holds n bytes. O(n). */
size_t tk_children_descendants(const struct tk_children *c, size_t n, size_t root,
                               unsigned char *seen, uint32_t *out);

/* A merge of two snapshots (both in pid order), record by record in pid
 * order: a process only in a (gone), only in b (new), or in both (same: the
 * same pid and start time within a clock tick). A pid reused between the
 * two is gone, then new. fn's first nonzero return stops the walk and is
 * returned. fn may free either buffer (the walk then sees it empty) if it
 * checks for that before it reads the records it is given. */
enum tk_join { TK_JOIN_GONE, TK_JOIN_NEW, TK_JOIN_SAME };
typedef int (*tk_join_fn)(void *ctx, enum tk_join what, const struct tk_record *a,
                          const struct tk_record *b);
int tk_recbuf_join(const struct tk_recbuf *a, const struct tk_recbuf *b, tk_join_fn fn, void *ctx);

/* A BPF record's precise runtime split as /proc splits it: *utime and
 * *stime hold the sampled sums and receive the split of rtime, never below
 * the previous split (prev_ut, prev_st; 0, 0 when there was none).
 * kernel/sched/cputime.c cputime_adjust(), without storing prev (that
 * stays the kernel's). Inline: a BPF snapshot runs it on every record, and
 * the call was half its cost. */
__extension__ typedef unsigned __int128 tk_u128;

static inline void tk_cputime_split(uint64_t rtime, uint64_t prev_ut, uint64_t prev_st,
                                    uint64_t *utime, uint64_t *stime)
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
			st = (uint64_t)((tk_u128)st * rtime / (st + ut));
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

/* The same process: the same pid and a start time within one clock tick. */
int tk_same_process(const struct tk_record *a, const struct tk_record *b, uint64_t tick);

/* The record's fields, from TK_FIELDS. */
struct tk_field_desc {
	const char *name;        /* as Lua sees it */
	uint16_t offset;         /* of its member in struct tk_record */
	uint8_t kind;            /* enum tk_field_kind */
};

/* Indexed by enum tk_field, in the order core.record_fields lists them. */
extern const struct tk_field_desc tk_record_fields[TK_FLD_COUNT];

/* Zeroes every field of rec outside fields (TK_F_* bits); the pid and the
 * kthread bit stay. */
void tk_record_mask(struct tk_record *rec, uint32_t fields);

#endif
