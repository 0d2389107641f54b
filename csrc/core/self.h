/* The calling process's own settings a supervisor changes and gives back:
 * the child-subreaper flag and the descriptor limit, each held by a count
 * of users (supervisors of any Lua state share the process), and whether
 * /proc numbers pids as our pid namespace does. */
#ifndef TAKANA_SELF_H
#define TAKANA_SELF_H

#include <sys/resource.h>

/* PR_GET_CHILD_SUBREAPER into *on (0 or 1): 0 or -errno. */
int tk_subreaper_get(int *on);
/* PR_SET_CHILD_SUBREAPER: 0 or -errno. */
int tk_subreaper_set(int on);
/* One more user of the flag (on), or one fewer: the first sets it if it
 * was clear, the last one clears it again if the first set it. 0, or
 * -errno with *step ("PR_GET_CHILD_SUBREAPER" or "PR_SET_CHILD_SUBREAPER")
 * and the count unchanged. Not thread-safe: Lua states of one thread. */
int tk_subreaper_hold(int on, const char **step);

/* RLIMIT_NOFILE now: 0 or -errno. */
int tk_nofile_get(rlim_t *soft, rlim_t *hard);
/* One more user of a raised descriptor limit (on), or one fewer. The
 * first raises the soft limit to the hard one (at most 2^20, the default
 * fs.nr_open), the last puts back the soft limit from before the first.
 * *before: that earlier soft limit; *hard: the hard limit. 0, or -errno
 * with *step ("getrlimit" or "setrlimit") and the count unchanged. */
int tk_nofile_hold(int on, rlim_t *before, rlim_t *hard, const char **step);

/* 1 when /proc's "self" is our pid (a /proc mounted from another pid
 * namespace names other processes by the same numbers), else 0. */
int tk_proc_is_ours(void);

#endif
