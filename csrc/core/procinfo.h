/* One process held by a pidfd and read through its /proc directory fd: the
 * C core behind takana.process. No Lua; negative errno. */
#ifndef TAKANA_PROCINFO_H
#define TAKANA_PROCINFO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A process reference (systemd's pidref discipline): the pidfd names the
 * process, the directory fd was opened while the pidfd's process was alive,
 * so it is that process's /proc directory and no other's. */
struct tk_pref {
	int pidfd;
	int dirfd;
	pid_t pid;
};

/* Opens pid (pidfd < 0) or adopts pidfd (owned by the reference from here
 * on, closed on failure; pid is then read from its fdinfo). -ESRCH when the
 * process was reaped before or while the directory opened; a zombie opens
 * (its reads then say -ESRCH, but it can be waited for). */
int tk_pref_open(pid_t pid, int pidfd, struct tk_pref *out);
void tk_pref_close(struct tk_pref *p);
/* 0 while the process runs, -ESRCH once it has exited (zombie or reaped). */
int tk_pref_alive(const struct tk_pref *p);
/* r when the process still runs, else -ESRCH: the check after every read
 * and every pid-addressed call (prlimit, sched_*affinity). */
int tk_pref_after(const struct tk_pref *p, int r);

/* The whole file dirfd/name, malloc'ed and NUL-terminated (*buf, *len). */
int tk_pref_read(const struct tk_pref *p, const char *name, char **buf, size_t *len);
/* readlinkat(dirfd, name), malloc'ed. */
int tk_pref_readlink(const struct tk_pref *p, const char *name, char **out);
/* One write(2) of value to dirfd/name. */
int tk_pref_write(const struct tk_pref *p, const char *name, const char *value, size_t len);

/* Descriptors: cb(ctx, fd, target) for each (target NULL unless
 * targets is set), in the kernel's order; returns the count. */
typedef int (*tk_fd_cb)(void *ctx, int fd, const char *target);
int tk_pref_fds(const struct tk_pref *p, int targets, tk_fd_cb cb, void *ctx);

/* CPU affinity: cpus[] of the cpu numbers, *n in/out. */
int tk_pref_affinity_get(const struct tk_pref *p, int *cpus, int *n, int cap);
int tk_pref_affinity_set(const struct tk_pref *p, const int *cpus, int n);

/* prlimit on the pid, checked alive before and after. */
struct tk_rlim {
	uint64_t soft, hard;   /* UINT64_MAX: unlimited */
};
int tk_pref_prlimit(const struct tk_pref *p, int resource, const struct tk_rlim *set,
                    struct tk_rlim *old);

/* ---- pure parsers ---------------------------------------------------------- */

#define TK_SIGMASKS 5
struct tk_status {
	int64_t uid[4], gid[4];          /* real, effective, saved, fs; -1 absent */
	uint64_t ctxsw_voluntary, ctxsw_involuntary;
	uint64_t vmswap_bytes, vmhwm_bytes, vmrss_bytes;
	uint64_t threads;
	uint64_t sig[TK_SIGMASKS];       /* SigPnd ShdPnd SigBlk SigIgn SigCgt */
	unsigned have;                   /* TK_ST_* bits of what was found */
};
#define TK_ST_IDS 1u
#define TK_ST_CTXSW 2u
#define TK_ST_VM 4u        /* VmHWM/VmRSS/VmSwap: absent for kernel threads */
#define TK_ST_SIG 8u
extern const char *const tk_sigmask_names[TK_SIGMASKS];
int tk_status_parse(const char *buf, size_t len, struct tk_status *out);

struct tk_io {
	uint64_t rchar, wchar, syscr, syscw, read_bytes, write_bytes, cancelled_write_bytes;
};
int tk_io_parse(const char *buf, size_t len, struct tk_io *out);

struct tk_memfull {
	uint64_t rss, pss, uss, swap;    /* bytes */
};
int tk_smaps_rollup_parse(const char *buf, size_t len, struct tk_memfull *out);

/* /proc/<pid>/limits: the kernel prints the resources in RLIMIT_* order. */
#define TK_NLIMITS 16
extern const char *const tk_limit_names[TK_NLIMITS];   /* "cpu", "fsize", ... */
int tk_limits_parse(const char *buf, size_t len, struct tk_rlim out[TK_NLIMITS], int *n);

/* The "0::" line of /proc/<pid>/cgroup: *path points into buf. -ENOENT when
 * there is none (no cgroup2 hierarchy). */
int tk_cgroup2_path(const char *buf, size_t len, const char **path, size_t *plen);

/* The pids of a whitespace-separated list (/proc/<pid>/task/<tid>/children)
 * in order, each cb(ctx, pid); a token that is no pid is skipped. Returns
 * 0, or what cb stopped with. */
typedef int (*tk_pidlist_cb)(void *ctx, uint32_t pid);
int tk_pid_list_parse(const char *buf, size_t len, tk_pidlist_cb cb, void *ctx);

/* ---- by pid number (where no pidfd is held) -------------------------------- */

/* The "0::" path of /proc/<pid>/cgroup (pid 0: self) into out: 1, or 0
 * when the process is in no cgroup2 hierarchy; -errno of the file's open
 * or read (-ENOENT: no such process), -ENAMETOOLONG past cap. */
int tk_proc_cgroup2_read(pid_t pid, char *out, size_t cap);
/* The children of thread tid of this process (CONFIG_PROC_CHILDREN):
 * /proc/self/task/<tid>/children through tk_pid_list_parse. */
int tk_task_children(pid_t tid, tk_pidlist_cb cb, void *ctx);

#endif
