/* pidfds and spawn: the C core behind takana.pidfd and takana.spawn. */
#ifndef TAKANA_PROCESS_H
#define TAKANA_PROCESS_H

#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

struct tk_exit {
	int signaled;   /* killed by a signal (code is the signal) */
	int core;       /* ... and dumped core */
	int code;       /* exit code, or the signal number */
	/* From the reaping waitid's rusage: the child's CPU and peak RSS,
	 * with those of the descendants it reaped itself. */
	uint64_t utime_ns, stime_ns, maxrss_bytes;
};

int tk_pidfd_open(pid_t pid);                    /* fd or -errno */
int tk_pidfd_signal(int pidfd, int sig);         /* 0 or -errno */
int tk_pidfd_alive(int pidfd);                   /* 1, 0 or -errno */
/* A pidfd on pid, only when that process started no later than
 * sent_realtime (a datagram's SCM_TIMESTAMPNS): the sender of that
 * message, not a later process given its pid. fd, or -ESRCH / -errno. */
struct timespec;
int tk_pidfd_of_sender(pid_t pid, const struct timespec *sent_realtime);
/* Reaps a child through its pidfd. timeout_ms < 0 waits forever;
 * -ETIMEDOUT when it ran out, -ECHILD for a process that is not our child. */
int tk_pidfd_wait(int pidfd, int64_t timeout_ms, struct tk_exit *out);
int tk_child_exited(void);

/* One resource limit to set in the child (setrlimit). */
struct tk_spawn_rlimit {
	int resource;               /* RLIMIT_* */
	struct rlimit lim;
	const char *step;           /* "setrlimit nofile": a static string, for the message */
};

/* An extra descriptor for the child: source becomes target (>= 3). */
struct tk_spawn_fd {
	int target;
	int source;
};

/* rlimit names as prlimit(1) spells them; NULL-terminated. */
struct tk_rlimit_name {
	const char *name;
	int resource;
	const char *step;
};
extern const struct tk_rlimit_name tk_rlimit_names[];

struct tk_spawn_opts {
	char *const *argv;          /* argv[0] is the program: a path, or a name searched in search_path */
	char *const *envp;
	const char *search_path;    /* PATH for names without '/'; NULL: fixed default */
	const char *cwd;            /* NULL: inherit */
	int fds[3];                 /* what becomes the child's 0, 1, 2; -1 inherits */
	int cgroup_fd;              /* -1: the parent's cgroup */
	int cgroup_attach_fallback; /* allow a non-atomic move when clone3 is unavailable */
	int setsid;
	pid_t pgroup;               /* -1: none; 0: a new group led by the child; >0 join */
	int force_posix_spawn;      /* for specs of the fallback */
	/* Credentials and limits, applied in the child in this order:
	 * rlimits, setgroups, setgid, setuid, pdeathsig, no_new_privs, umask,
	 * chdir. Without clone3 they go through clone(2), not posix_spawn. */
	int set_groups;             /* setgroups(ngroups, groups) */
	const gid_t *groups;
	size_t ngroups;
	int set_gid, set_uid;
	gid_t gid;
	uid_t uid;
	int set_umask;
	mode_t umask;
	const struct tk_spawn_rlimit *rlimits;
	size_t nrlimits;
	int pdeathsig;              /* 0: none */
	int no_new_privs;
	/* A new anonymous session keyring, joined as the new user, so that a
	 * service does not possess its supervisor's (systemd's
	 * KeyringMode=private); skipped where the kernel or a seccomp filter
	 * has no keyrings (ENOSYS, EPERM, EACCES), as systemd skips it. */
	int private_keyring;
	const struct tk_spawn_fd *extra_fds;  /* sorted by target, targets distinct */
	size_t nextra_fds;
	/* With set_uid, how long the parent waits for the exec (ms; < 0:
	 * for ever). See spawn_child. */
	int exec_wait_ms;
};

struct tk_spawn_result {
	pid_t pid;
	int pidfd;
	const char *mechanism;      /* "clone3", "clone" or "posix_spawn" */
	int exec_failed;            /* the error came from the child, not the clone */
	const char *failed_step;    /* "chdir", "setsid", ... or NULL for exec itself */
	int exec_unconfirmed;       /* exec_wait_ms passed before the child reached exec */
};

/* 0 with pid and pidfd set, or -errno. Exec errors (ENOENT, EACCES, a bad
 * cwd) are returned here, never left to a child exiting 127. -EOPNOTSUPP
 * when a cgroup is asked for and only the non-atomic fallback remains. */
int tk_spawn(const struct tk_spawn_opts *o, struct tk_spawn_result *res);
/* Whether o asks for what only takana's own child applies (credentials,
 * limits, extra fds): without clone3 that child then runs through clone(2)
 * (mechanism "clone") instead of posix_spawn. */
int tk_spawn_needs_child(const struct tk_spawn_opts *o);

#endif
