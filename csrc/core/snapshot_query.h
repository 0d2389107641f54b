/* Questions asked of snapshots' record buffers, answered without Lua:
 * the CPU each process used between two snapshots (takana.delta), and
 * which records match a filter's cgroup and uid (snap:filter). */
#ifndef TAKANA_SNAPSHOT_QUERY_H
#define TAKANA_SNAPSHOT_QUERY_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"

/* One process in both snapshots: what it used in between. */
struct tk_delta_cpu {
	uint32_t pid;
	uint64_t utime_ns, stime_ns, cpu_ns; /* cpu_ns: their sum */
	double share;                       /* cpu_ns / interval_ns: of one CPU */
};

/* The caller's room: cpu and started for b->len entries, exited for
 * a->len; tk_snapshot_delta sets the counts. */
struct tk_delta {
	struct tk_delta_cpu *cpu;
	uint32_t *started, *exited;
	size_t ncpu, nstarted, nexited;
};

/* The delta from a to b (both in pid order), interval_ns apart (0: every
 * share is 0). A process is the same in both when its pid and start time
 * are (tk_recbuf_join); a pid reused in between counts as exited and
 * started. Counters that went backwards count as 0. */
void tk_snapshot_delta(const struct tk_recbuf *a, const struct tk_recbuf *b,
                       uint64_t interval_ns, struct tk_delta *out);

/* The criteria of a filter that C answers. */
struct tk_filter {
	const uint64_t *ids; /* the cgroups' ids, sorted (tk_filter_cgroup_ids); NULL: any */
	size_t nids;
	int has_uid;
	uint32_t uid;
};

/* The ids of the cgroup rel (beneath the cgroup2 mount; "" is its root)
 * and, when recursive, of its subtree, sorted for tk_snapshot_filter: a
 * malloc'd array the caller frees. 0 or -errno. */
int tk_filter_cgroup_ids(const char *rel, int recursive, uint64_t **ids, size_t *n);

/* The indexes of rb's records that match f, in pid order, into out (room
 * for rb->len): their count. A record with no cgroup id (0) matches no
 * cgroup. */
size_t tk_snapshot_filter(const struct tk_recbuf *rb, const struct tk_filter *f, size_t *out);

#endif
