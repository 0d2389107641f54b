/* pidfds and spawn. A child is created with clone3(CLONE_VM | CLONE_VFORK |
 * CLONE_PIDFD | CLONE_CLEAR_SIGHAND [| CLONE_INTO_CGROUP]) on a small
 * separate stack: the parent's memory is shared, not copied, so the cost is
 * flat however large the parent is, and the parent sleeps until the child
 * execs or exits. The child reports an exec failure by writing errno into
 * the shared memory before _exit, so it reaches the caller synchronously. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/sched.h>

#include "cgroup.h"
#include "clock.h"
#include "proc_stat.h"
#include "process.h"
#include "recbuf.h"
#include "util.h"
#include "wait.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

int tk_pidfd_open(pid_t pid)
{
	long fd = syscall(SYS_pidfd_open, pid, 0);
	return fd < 0 ? -errno : (int)fd;
}

int tk_pidfd_signal(int pidfd, int sig)
{
	return syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) < 0 ? -errno : 0;
}

/* A pidfd turns readable once the process has exited (zombie or reaped);
 * unlike kill(pid, 0) this is false for a zombie too. */
int tk_pidfd_alive(int pidfd)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };
	int r = poll(&p, 1, 0);
	if (r < 0)
		return -errno;
	return r == 0;
}

int tk_pidfd_of_sender(pid_t pid, const struct timespec *sent_realtime)
{
	struct timespec real, boot;
	struct tk_units units;
	struct tk_record rec;
	char path[32], buf[1024];
	uint64_t sent_ns, real_ns, boot_ns;
	ssize_t n;
	int fd = tk_pidfd_open(pid), r;

	if (fd < 0)
		return fd;
	/* The queueing time on the boot clock /proc's start times use: now's
	 * boottime less how long ago the message was stamped. */
	clock_gettime(CLOCK_REALTIME, &real);
	clock_gettime(CLOCK_BOOTTIME, &boot);
	real_ns = (uint64_t)real.tv_sec * 1000000000u + (uint64_t)real.tv_nsec;
	boot_ns = (uint64_t)boot.tv_sec * 1000000000u + (uint64_t)boot.tv_nsec;
	sent_ns = (uint64_t)sent_realtime->tv_sec * 1000000000u + (uint64_t)sent_realtime->tv_nsec;
	/* A wall clock stepped back since the stamp: the queueing time is not
	 * known, and neither is the sender. */
	if (real_ns < sent_ns || real_ns - sent_ns > boot_ns) {
		close(fd);
		return -ESRCH;
	}
	sent_ns = boot_ns - (real_ns - sent_ns);
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	n = tk_read_small(AT_FDCWD, path, buf, sizeof buf);
	r = n < 0 ? (int)n : 0;
	if (r == 0) {
		tk_units_init(&units);
		r = tk_stat_parse(buf, (size_t)n, &units, &rec);
	}
	/* Alive after the read: the stat read was the pidfd's process. */
	if (r == 0 && tk_pidfd_alive(fd) != 1)
		r = -ESRCH;
	if (r == 0 && rec.start_ns > sent_ns)
		r = -ESRCH; /* started after the message: not its sender */
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

/* The raw syscall: its fifth argument, which glibc's waitid() does not
 * pass, returns the reaped child's rusage. */
static int waitid_pidfd(int pidfd, int flags, siginfo_t *info, struct rusage *ru)
{
	for (;;) {
		memset(info, 0, sizeof *info);
		if (ru != NULL)
			memset(ru, 0, sizeof *ru);
		if (syscall(SYS_waitid, P_PIDFD, pidfd, info, WEXITED | flags, ru) == 0)
			return 0;
		if (errno != EINTR)
			return -errno;
	}
}

static uint64_t timeval_ns(struct timeval tv)
{
	return (uint64_t)tv.tv_sec * 1000000000u + (uint64_t)tv.tv_usec * 1000u;
}

int tk_pidfd_wait(int pidfd, int64_t timeout_ms, struct tk_exit *out)
{
	struct rusage ru;
	siginfo_t info;
	int r;

	if (timeout_ms >= 0) {
		int64_t deadline = tk_deadline_ms(timeout_ms);
		/* WNOHANG first: a non-child fails with ECHILD now, not after the timeout. */
		r = waitid_pidfd(pidfd, WNOHANG, &info, &ru);
		if (r < 0)
			return r;
		if (info.si_pid != 0)
			goto done;
		r = tk_wait_fd(pidfd, POLLIN, deadline);
		if (r < 0)
			return r;
		if (r == 0)
			return -ETIMEDOUT;
	}
	r = waitid_pidfd(pidfd, 0, &info, &ru);
	if (r < 0)
		return r;
done:
	out->signaled = info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED;
	out->core = info.si_code == CLD_DUMPED;
	out->code = info.si_status;
	out->utime_ns = timeval_ns(ru.ru_utime);
	out->stime_ns = timeval_ns(ru.ru_stime);
	out->maxrss_bytes = (uint64_t)ru.ru_maxrss * 1024u; /* KiB */
	return 0;
}

/* The pid of a child of this process that has exited and is not yet
 * reaped, left unreaped (WNOWAIT): 0 when there is none (or no child).
 * One call finds one zombie however many children are alive, where
 * walking /proc/self/task/<tid>/children costs a call per child. */
int tk_child_exited(void)
{
	siginfo_t info;

	for (;;) {
		memset(&info, 0, sizeof info);
		if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) == 0)
			return info.si_pid;
		if (errno == ECHILD)
			return 0;
		if (errno != EINTR)
			return -errno;
	}
}

/* ---- spawn ----------------------------------------------------------------- */

const struct tk_rlimit_name tk_rlimit_names[] = {
	{ "as", RLIMIT_AS, "setrlimit as" },
	{ "core", RLIMIT_CORE, "setrlimit core" },
	{ "cpu", RLIMIT_CPU, "setrlimit cpu" },
	{ "data", RLIMIT_DATA, "setrlimit data" },
	{ "fsize", RLIMIT_FSIZE, "setrlimit fsize" },
	{ "locks", RLIMIT_LOCKS, "setrlimit locks" },
	{ "memlock", RLIMIT_MEMLOCK, "setrlimit memlock" },
	{ "msgqueue", RLIMIT_MSGQUEUE, "setrlimit msgqueue" },
	{ "nice", RLIMIT_NICE, "setrlimit nice" },
	{ "nofile", RLIMIT_NOFILE, "setrlimit nofile" },
	{ "nproc", RLIMIT_NPROC, "setrlimit nproc" },
	{ "rss", RLIMIT_RSS, "setrlimit rss" },
	{ "rtprio", RLIMIT_RTPRIO, "setrlimit rtprio" },
	{ "rttime", RLIMIT_RTTIME, "setrlimit rttime" },
	{ "sigpending", RLIMIT_SIGPENDING, "setrlimit sigpending" },
	{ "stack", RLIMIT_STACK, "setrlimit stack" },
	{ NULL, 0, NULL },
};

#define CHILD_STACK ((size_t)64 * 1024)

struct child_ctx {
	const struct tk_spawn_opts *o;
	sigset_t mask;
	sigset_t child_mask;       /* empty: what the service starts with */
	pid_t parent;              /* for the pdeathsig check */
	int *moved;                /* scratch: 3 + nextra_fds, allocated by the parent */
	volatile int err;          /* written by the child before _exit */
	const char *volatile step; /* what failed, for the message */
	int report_fd;             /* fork mode: err and step go here; -1 under vfork */
};

/* What a child in its own memory (fork mode) writes before exiting 127. */
struct child_report {
	int err;
	const char *step;          /* a literal: the same address in the parent */
};

/* In the child: runs on its own stack in the parent's memory. Only
 * async-signal-safe calls, no allocation. */
static void child_exec_path(struct child_ctx *c)
{
	const struct tk_spawn_opts *o = c->o;
	const char *file = o->argv[0];
	const char *path;
	char buf[PATH_MAX];
	int seen_eacces = 0;

	if (strchr(file, '/') != NULL) {
		execve(file, o->argv, o->envp);
		c->err = errno;
		return;
	}
	path = o->search_path ? o->search_path : "/usr/local/bin:/usr/bin:/bin";
	for (const char *p = path;; p++) {
		const char *end = strchrnul(p, ':');
		size_t dlen = (size_t)(end - p), flen = strlen(file);
		if (dlen + flen + 2 <= sizeof buf) {
			if (dlen == 0) {
				memcpy(buf, file, flen + 1);
			} else {
				memcpy(buf, p, dlen);
				buf[dlen] = '/';
				memcpy(buf + dlen + 1, file, flen + 1);
			}
			execve(buf, o->argv, o->envp);
			if (errno == EACCES)
				seen_eacces = 1;
			else if (errno != ENOENT && errno != ENOTDIR && errno != ENAMETOOLONG) {
				c->err = errno;
				return;
			}
		}
		p = end;
		if (*p == '\0')
			break;
	}
	c->err = seen_eacces ? EACCES : ENOENT;
}

/* Puts the stdio sources on 0..2 and the extra ones on their targets. Every
 * source is first moved above the highest target, so a source that is
 * itself a target number is not overwritten by an earlier dup2; then
 * everything else from 3 up is closed (takana's own fds are CLOEXEC anyway,
 * this catches the caller's inherited ones). The moved copies are closed
 * with the rest. */
static int child_fds(struct child_ctx *c)
{
	const struct tk_spawn_opts *o = c->o;
	size_t n = o->nextra_fds;
	int base = 3, lo = 3;

	if (n > 0 && o->extra_fds[n - 1].target >= base)
		base = o->extra_fds[n - 1].target + 1;
	/* The report pipe may have a target's number: above them all, it
	 * survives the dup2s, and it closes itself at exec. */
	if (c->report_fd >= 0 && (c->report_fd = fcntl(c->report_fd, F_DUPFD_CLOEXEC, base)) < 0)
		return -1;
	for (size_t i = 0; i < 3 + n; i++) {
		int src = i < 3 ? o->fds[i] : o->extra_fds[i - 3].source;
		c->moved[i] = -1;
		if (src >= 0 && (c->moved[i] = fcntl(src, F_DUPFD_CLOEXEC, base)) < 0)
			return -1;
	}
	for (size_t i = 0; i < 3 + n; i++) {
		int target = i < 3 ? (int)i : o->extra_fds[i - 3].target;
		if (c->moved[i] >= 0 && dup2(c->moved[i], target) < 0)
			return -1;
	}
	/* Close the gaps between the targets (sorted, distinct) and the
	 * report pipe, then the rest. */
	for (size_t i = 0; i <= n; i++) {
		int t = i < n ? o->extra_fds[i].target : c->report_fd;
		if (t < 0)
			continue;
		if (t > lo && syscall(SYS_close_range, lo, t - 1, 0) < 0 && errno != ENOSYS)
			return -1;
		lo = t + 1;
	}
	if (syscall(SYS_close_range, lo, ~0u, 0) < 0 && errno != ENOSYS)
		return -1;
	return 0;
}

/* In fork mode the parent cannot see c->err: the child writes it. SIGPIPE
 * is blocked first, so a parent that stopped waiting (exec_wait_ms) makes
 * this EPIPE, and the exit stays 127. */
static void child_report(struct child_ctx *c)
{
	struct child_report rep = { c->err, c->step };
	sigset_t pipe;

	if (c->report_fd < 0)
		return;
	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	sigprocmask(SIG_BLOCK, &pipe, NULL);
	if (write(c->report_fd, &rep, sizeof rep) < 0)
		return;
}

/* Limits, then credentials: a hard limit can only be raised while still
 * privileged, and setgroups/setgid need privilege that setuid drops.
 * PR_SET_PDEATHSIG comes after them because the kernel clears it when
 * the credentials change. */
static int child_creds(struct child_ctx *c)
{
	const struct tk_spawn_opts *o = c->o;

	for (size_t i = 0; i < o->nrlimits; i++) {
		c->step = o->rlimits[i].step;
		if (setrlimit(o->rlimits[i].resource, &o->rlimits[i].lim) < 0)
			return -1;
	}
	c->step = "setgroups";
	if (o->set_groups && setgroups(o->ngroups, o->groups) < 0)
		return -1;
	c->step = "setgid";
	if (o->set_gid && setresgid(o->gid, o->gid, o->gid) < 0)
		return -1;
	c->step = "setuid";
	if (o->set_uid && setresuid(o->uid, o->uid, o->uid) < 0)
		return -1;
	c->step = "pdeathsig";
	if (o->pdeathsig > 0) {
		if (prctl(PR_SET_PDEATHSIG, (unsigned long)o->pdeathsig, 0, 0, 0) < 0)
			return -1;
		/* The parent may have died before the prctl: then nobody will
		 * send the signal, so it is sent now. */
		if (getppid() != c->parent)
			kill(getpid(), o->pdeathsig);
	}
	c->step = "no_new_privs";
	if (o->no_new_privs && prctl(PR_SET_NO_NEW_PRIVS, 1UL, 0UL, 0UL, 0UL) < 0)
		return -1;
	if (o->set_umask)
		umask(o->umask);
	return 0;
}

static int child_main(void *arg)
{
	struct child_ctx *c = arg;
	const struct tk_spawn_opts *o = c->o;

	c->step = "setsid";
	if (o->setsid && setsid() < 0)
		goto fail;
	c->step = "setpgid";
	if (o->pgroup >= 0 && setpgid(0, o->pgroup) < 0)
		goto fail;
	/* Descriptors before limits: a low nofile limit would refuse the
	 * copies above the targets. */
	c->step = "dup2";
	if (child_fds(c) < 0)
		goto fail;
	if (child_creds(c) < 0)
		goto fail;
	/* After the uid change: the keyring belongs to the service's user.
	 * KEYCTL_JOIN_SESSION_KEYRING (1) with no name makes an anonymous one. */
	c->step = "keyring";
	if (o->private_keyring && syscall(SYS_keyctl, 1, NULL) < 0 &&
	    errno != ENOSYS && errno != EPERM && errno != EACCES)
		goto fail;
	/* As the new user, like systemd's WorkingDirectory=. */
	c->step = "chdir";
	if (o->cwd != NULL && chdir(o->cwd) < 0)
		goto fail;
	/* A service starts as systemd starts one: every disposition default
	 * and nothing blocked, whatever the supervisor inherited or set up.
	 * CLONE_CLEAR_SIGHAND resets handled signals only (clone(2) not even
	 * those); an ignored one (SIGPIPE, SIGHUP under nohup or an event
	 * loop) would survive exec, and a blocked one (TERM blocked by
	 * `env --block-signal`, a signalfd loop, a wrapper) would make the
	 * stop's TERM wait in vain. posix_spawn with POSIX_SPAWN_SETSIGDEF of
	 * every signal and an empty POSIX_SPAWN_SETSIGMASK does the same on
	 * the fallback path. */
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;
		if (sig == SIGKILL || sig == SIGSTOP)
			continue;
		if (sigaction(sig, NULL, &sa) == 0 && sa.sa_handler != SIG_DFL) {
			sa.sa_handler = SIG_DFL;
			sa.sa_flags = 0;
			sigaction(sig, &sa, NULL);
		}
	}
	sigprocmask(SIG_SETMASK, &c->child_mask, NULL);
	c->step = NULL;
	child_exec_path(c);
	child_report(c);
	_exit(127);
fail:
	c->err = errno;
	child_report(c);
	_exit(127);
}

#if defined(__x86_64__)
/* clone3 with a new stack must not return through C frames in the child:
 * the child starts on the fresh stack, calls fn(arg) and exits there. */
static long clone3_run(struct clone_args *args, int (*fn)(void *), void *arg)
{
	register long rax __asm__("rax") = SYS_clone3;
	register void *rdi __asm__("rdi") = args;
	register long rsi __asm__("rsi") = sizeof *args;
	register int (*r12)(void *) __asm__("r12") = fn;
	register void *r13 __asm__("r13") = arg;

	__asm__ volatile(
		"syscall\n\t"
		"test %%rax, %%rax\n\t"
		"jnz 1f\n\t"
		"xor %%ebp, %%ebp\n\t"
		"mov %%r13, %%rdi\n\t"
		"call *%%r12\n\t"
		"mov %%eax, %%edi\n\t"
		"mov $60, %%eax\n\t"
		"syscall\n\t"
		"hlt\n"
		"1:\n\t"
		: "+r"(rax)
		: "r"(rdi), "r"(rsi), "r"(r12), "r"(r13)
		: "rcx", "r11", "memory");
	return rax;
}
#define HAVE_CLONE3_RUN 1
#endif

/* Under vfork the child shares the parent's memory and the parent sleeps
 * until it execs; in fork mode (report_fd set) it has a copy. */
#define CHILD_CLONE_FLAGS(c) ((c)->report_fd >= 0 ? 0 : CLONE_VM | CLONE_VFORK)

static int spawn_clone3(const struct tk_spawn_opts *o, struct child_ctx *c,
                        pid_t *pid, int *pidfd)
{
#ifdef HAVE_CLONE3_RUN
	struct clone_args args;
	char *stack;
	long r;

	stack = malloc(CHILD_STACK);
	if (stack == NULL)
		return -ENOMEM;
	memset(&args, 0, sizeof args);
	args.flags = CHILD_CLONE_FLAGS(c) | CLONE_PIDFD | CLONE_CLEAR_SIGHAND;
	args.pidfd = (uint64_t)(uintptr_t)pidfd;
	args.exit_signal = SIGCHLD;
	args.stack = (uint64_t)(uintptr_t)stack;
	args.stack_size = CHILD_STACK;
	if (o->cgroup_fd >= 0) {
		args.flags |= CLONE_INTO_CGROUP;
		args.cgroup = (uint64_t)o->cgroup_fd;
	}
	r = clone3_run(&args, child_main, c);
	free(stack);
	if (r < 0)
		return (int)r;
	*pid = (pid_t)r;
	return 0;
#else
	(void)o; (void)c; (void)pid; (void)pidfd;
	return -ENOSYS;
#endif
}

/* clone(2) for where clone3 is refused (Docker's default seccomp profile
 * answers ENOSYS) and the options need child_main: the same child, minus
 * CLONE_CLEAR_SIGHAND and CLONE_INTO_CGROUP, which clone(2) lacks. The
 * child resets every handler itself (signals are blocked until then), as
 * glibc's posix_spawn does. */
static int spawn_clone(struct child_ctx *c, pid_t *pid, int *pidfd)
{
	char *stack = malloc(CHILD_STACK);
	int r;

	if (stack == NULL)
		return -ENOMEM;
	r = clone(child_main, stack + CHILD_STACK, CHILD_CLONE_FLAGS(c) | CLONE_PIDFD | SIGCHLD,
	          c, pidfd);
	r = r < 0 ? -errno : r;
	free(stack);
	if (r < 0)
		return r;
	*pid = (pid_t)r;
	return 0;
}

/* Only with cgroup_fallback = "attach": a move after the fact, for the
 * paths without CLONE_INTO_CGROUP. On failure the child is killed and
 * reaped, and its pidfd closed. */
static int attach_after(const struct tk_spawn_opts *o, pid_t pid, int pidfd)
{
	char num[16];
	int len = snprintf(num, sizeof num, "%d", (int)pid);
	int err = tk_cg_write(o->cgroup_fd, "cgroup.procs", num, (size_t)len);

	if (err < 0) {
		tk_pidfd_signal(pidfd, SIGKILL);
		waitpid(pid, NULL, 0);
		close(pidfd);
	}
	return err;
}

/* posix_spawn + pidfd_open: for kernels or sandboxes without clone3. The
 * pid is ours (an unreaped child) until we wait, so pidfd_open cannot race
 * with pid reuse here. */
static int spawn_posix(const struct tk_spawn_opts *o, pid_t *pid, int *pidfd)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
	sigset_t all, none;
	int err, copy[3], slot = 3;

	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&attr);
	err = 0;
	if (o->cwd != NULL)
		err = posix_spawn_file_actions_addchdir_np(&fa, o->cwd);
	/* Through copies first, so sources that are themselves 0..2
	 * survive: each on the lowest number from 3 that is no source (a
	 * copy on a source not copied yet lost it: fixed copies at 100..102
	 * did, in a process with 100 fds open; copies above every source
	 * failed, EBADF, past RLIMIT_NOFILE). At most 3..8; closefrom(3)
	 * drops them. */
	for (int i = 0; i < 3; i++) {
		copy[i] = -1;
		if (o->fds[i] < 0)
			continue;
		while (slot == o->fds[0] || slot == o->fds[1] || slot == o->fds[2])
			slot++;
		copy[i] = slot++;
	}
	for (int i = 0; i < 3 && err == 0; i++)
		if (copy[i] >= 0)
			err = posix_spawn_file_actions_adddup2(&fa, o->fds[i], copy[i]);
	for (int i = 0; i < 3 && err == 0; i++)
		if (copy[i] >= 0)
			err = posix_spawn_file_actions_adddup2(&fa, copy[i], i);
	if (err == 0)
		err = posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	sigfillset(&all);
	posix_spawnattr_setsigdefault(&attr, &all);
	/* As child_main: nothing blocked. */
	sigemptyset(&none);
	posix_spawnattr_setsigmask(&attr, &none);
	if (o->setsid)
		flags |= POSIX_SPAWN_SETSID;
	if (o->pgroup >= 0) {
		flags |= POSIX_SPAWN_SETPGROUP;
		posix_spawnattr_setpgroup(&attr, o->pgroup);
	}
	posix_spawnattr_setflags(&attr, flags);
	if (err == 0) {
		/* posix_spawnp searches the PATH of environ: use the caller's. */
		if (o->search_path != NULL)
			err = posix_spawnp(pid, o->argv[0], &fa, &attr, o->argv, o->envp);
		else
			err = posix_spawn(pid, o->argv[0], &fa, &attr, o->argv, o->envp);
	}
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (err != 0)
		return -err;
	*pidfd = tk_pidfd_open(*pid);
	if (*pidfd < 0) {
		int e = *pidfd;
		kill(*pid, SIGKILL);
		waitpid(*pid, NULL, 0);
		return e;
	}
	return o->cgroup_fd >= 0 ? attach_after(o, *pid, *pidfd) : 0;
}

int tk_spawn_needs_child(const struct tk_spawn_opts *o)
{
	return o->set_groups || o->set_gid || o->set_uid || o->set_umask || o->nrlimits > 0 ||
	       o->pdeathsig > 0 || o->no_new_privs || o->nextra_fds > 0 || o->private_keyring;
}

/* Fork mode: 0 once the child has exec'd (EOF: the pipe closed at exec),
 * 1 with rep filled when it failed, -ETIMEDOUT past wait_ms, or -errno. */
static int child_await_exec(int fd, int wait_ms, struct child_report *rep)
{
	int64_t deadline = tk_deadline_ms(wait_ms);

	for (;;) {
		int r = tk_wait_fd(fd, POLLIN, deadline);
		ssize_t n;
		if (r < 0)
			return r;
		if (r == 0)
			return -ETIMEDOUT;
		n = read(fd, rep, sizeof *rep);
		if (n == (ssize_t)sizeof *rep)
			return 1;
		if (n == 0)
			return 0;
		if (n < 0 && errno != EINTR && errno != EAGAIN)
			return -errno;
	}
}

/* Runs child_main through clone3 (legacy: clone) and collects what it
 * reported. 0 with pid and pidfd in res, or -errno.
 *
 * A child that changes its uid runs in fork mode, in its own copy of
 * memory: from its setuid to its exec, the service's user may signal it,
 * and a SIGSTOP there would hold a vfork parent asleep for as long (a
 * supervisor's whole loop). Its exec is then awaited on a pipe for at most
 * exec_wait_ms; past that the child is returned unconfirmed, and an exec
 * that fails later shows only as its exit status, 127. */
static int spawn_child(const struct tk_spawn_opts *o, struct tk_spawn_result *res, int legacy)
{
	struct child_ctx c;
	struct child_report rep = { 0, NULL };
	sigset_t all;
	pid_t pid = -1;
	int pidfd = -1, report[2] = { -1, -1 }, r;

	memset(&c, 0, sizeof c);
	c.o = o;
	c.parent = getpid();
	c.report_fd = -1;
	if (o->set_uid && o->uid != geteuid()) {
		if (pipe2(report, O_CLOEXEC) < 0)
			return -errno;
		c.report_fd = report[1];
	}
	c.moved = calloc(3 + o->nextra_fds, sizeof *c.moved);
	if (c.moved == NULL)
		return -ENOMEM;
	/* No handler may run in the child before CLONE_CLEAR_SIGHAND and
	 * exec take effect: block everything around the clone. */
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &c.mask);
	sigemptyset(&c.child_mask);
	r = legacy ? spawn_clone(&c, &pid, &pidfd) : spawn_clone3(o, &c, &pid, &pidfd);
	sigprocmask(SIG_SETMASK, &c.mask, NULL);
	free(c.moved);
	if (report[1] >= 0)
		close(report[1]);
	if (r < 0) {
		if (report[0] >= 0)
			close(report[0]);
		return r;
	}
	if (report[0] >= 0) {
		int w = child_await_exec(report[0], o->exec_wait_ms, &rep);
		close(report[0]);
		if (w == -ETIMEDOUT)
			res->exec_unconfirmed = 1;
		else if (w < 0)
			rep.err = -w, rep.step = "exec report";
		/* A failed child exits 127 at once, unless stopped: KILL wakes it. */
		if (rep.err != 0)
			tk_pidfd_signal(pidfd, SIGKILL);
	} else {
		rep.err = c.err;
		rep.step = c.step;
	}
	if (rep.err != 0) {
		/* The child reported its errno and exited 127: reap it. */
		waitpid(pid, NULL, 0);
		close(pidfd);
		res->exec_failed = 1;
		res->failed_step = rep.step;
		return -rep.err;
	}
	if (legacy && o->cgroup_fd >= 0 && (r = attach_after(o, pid, pidfd)) < 0)
		return r;
	res->pid = pid;
	res->pidfd = pidfd;
	return 0;
}

int tk_spawn(const struct tk_spawn_opts *o, struct tk_spawn_result *res)
{
	pid_t pid = -1;
	int pidfd = -1, r;

	res->pid = -1;
	res->pidfd = -1;
	res->mechanism = "clone3";
	res->exec_failed = 0;
	res->failed_step = NULL;
	res->exec_unconfirmed = 0;
	if (!o->force_posix_spawn) {
		r = spawn_child(o, res, 0);
		if (r == 0 || res->exec_failed || (r != -ENOSYS && r != -E2BIG && r != -EPERM))
			return r;
		/* clone3 missing or refused (seccomp): the portable paths. */
	}
	if (o->cgroup_fd >= 0 && !o->cgroup_attach_fallback)
		return -EOPNOTSUPP;
	if (tk_spawn_needs_child(o)) {
		res->mechanism = "clone";
		return spawn_child(o, res, 1);
	}
	res->mechanism = "posix_spawn";
	r = spawn_posix(o, &pid, &pidfd);
	if (r < 0) {
		res->exec_failed = 1;
		return r;
	}
	res->pid = pid;
	res->pidfd = pidfd;
	return 0;
}
