/* One snapshot through any backend (snapshot.c), and the table of them. */
#ifndef TAKANA_SNAPSHOT_H
#define TAKANA_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "recbuf.h"

struct tk_proc_scanner;

struct tk_snap_req {
	uint32_t fields;               /* TK_F_* bits asked for */
	int use_cache;                 /* proc: keep <pid>/stat fds open between scans */
	struct tk_proc_scanner *sc;    /* the caller's /proc scanner: proc reads
	                                * through it, a BPF tier reads a hidden init */
};

struct tk_snap_backend {
	const char *name;              /* snapshot{backend = name} */
	uint32_t default_fields;       /* when the caller names none */
	int tier;                      /* enum tk_bpf_tier: loads (tk_bpf_info), or -1 */
	int may_hide_init;             /* the kernel may hide init from it: read /proc then */
	int in_order;                  /* run gives pid order already: no sort after */
	/* Appends the records to an empty out, in any order (in pid order
	 * when in_order), each pid once; returns 0, or -errno with the reason
	 * in why. */
	int (*run)(const struct tk_snap_backend *b, const struct tk_snap_req *req,
	           struct tk_recbuf *out, char *why, size_t why_len);
};

/* Best first; the last (proc) works wherever /proc is mounted. Ends with
 * NULL. Each backend's entry is in its own file: bpf_snapshot.h,
 * proc_scan.h. */
extern const struct tk_snap_backend *const tk_snap_backends[];
const struct tk_snap_backend *tk_snap_backend_find(const char *name);

/* One snapshot through b, for every backend alike: the time stamp
 * (CLOCK_BOOTTIME, before the walk), the cgroup id lookups when cgroup_id
 * is asked for (0 for every record when no cgroup2 hierarchy is mounted),
 * pid order, and init from /proc when b's walk could not see it. On failure
 * out is freed and why holds the reason b cannot give a snapshot (the
 * binding words it "snapshot: <name> backend unavailable: <reason>"). */
int tk_snapshot_take(const struct tk_snap_backend *b, const struct tk_snap_req *req,
                     struct tk_recbuf *out, uint64_t *time_ns, char *why, size_t why_len);

#endif
