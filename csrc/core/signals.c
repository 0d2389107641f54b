/* signalfd subscriptions with per-thread hold counts.
 *
 * A signal mask belongs to a thread, not to the process: blocking here
 * covers the calling thread only. A signal sent to the process goes to any
 * thread that has it unblocked, and reaches the signalfd only when none
 * has; so the counts below are per thread, like the mask they track. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "signals.h"
#include "util.h"

#define TK_SIG_MAX 64

struct holds {
	unsigned count[TK_SIG_MAX + 1];
	tk_sigbits blocked_before;   /* blocked when its first hold was taken */
	tk_sigbits held;             /* count[sig] > 0 */
};

static _Thread_local struct holds holds;

const char *tk_signal_refused(int sig)
{
	if (sig < 1 || sig > TK_SIG_MAX || sig >= NSIG)
		return "not a signal number (1..64)";
	if (sig == SIGKILL || sig == SIGSTOP)
		return "it cannot be caught, blocked or ignored";
	if (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL)
		return "it reports this process's own faults, which a signalfd never receives";
	if (sig >= 32 && sig < SIGRTMIN)
		return "the C library reserves it for its threads";
	if (sig > SIGRTMAX)
		return "above SIGRTMAX";
	return NULL;
}

static void bits_to_set(tk_sigbits bits, sigset_t *set)
{
	sigemptyset(set);
	for (int s = 1; s <= TK_SIG_MAX; s++)
		if (bits & TK_SIGBIT(s))
			sigaddset(set, s);
}

/* The SigBlk line of /proc/self/task/<tid>/status; -1 when unreadable. */
static int task_blocked(int taskdir, const char *tid, tk_sigbits *out)
{
	char path[64], buf[2048];
	const char *line;

	snprintf(path, sizeof path, "%s/status", tid);
	if (tk_read_small(taskdir, path, buf, sizeof buf) <= 0)
		return -1;
	line = strstr(buf, "\nSigBlk:");
	if (line == NULL)
		return -1;
	*out = (tk_sigbits)strtoull(line + 8, NULL, 16);
	return 0;
}

int tk_signals_check_threads(tk_sigbits set, pid_t *tid, int *sig)
{
	pid_t self = gettid();
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int found = 0;

	if (d == NULL)
		return 0;   /* no /proc: nothing to tell */
	while (!found && (e = readdir(d)) != NULL) {
		tk_sigbits blocked, open;
		pid_t t = (pid_t)atoi(e->d_name);

		if (t <= 0 || t == self || task_blocked(dirfd(d), e->d_name, &blocked) < 0)
			continue;
		open = set & ~blocked;
		if (open != 0) {
			*tid = t;
			*sig = __builtin_ctzll(open) + 1;
			found = 1;
		}
	}
	closedir(d);
	return found;
}

int tk_signals_open(tk_sigbits set)
{
	sigset_t want, old;
	int fd, err;

	bits_to_set(set, &want);
	err = pthread_sigmask(SIG_BLOCK, &want, &old);
	if (err != 0)
		return -err;
	fd = signalfd(-1, &want, SFD_NONBLOCK | SFD_CLOEXEC);
	if (fd < 0) {
		err = errno;
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		return -err;
	}
	for (int s = 1; s <= TK_SIG_MAX; s++) {
		if (!(set & TK_SIGBIT(s)))
			continue;
		if (holds.count[s]++ == 0) {
			holds.held |= TK_SIGBIT(s);
			if (sigismember(&old, s))
				holds.blocked_before |= TK_SIGBIT(s);
			else
				holds.blocked_before &= ~TK_SIGBIT(s);
		}
	}
	return fd;
}

void tk_signals_release(tk_sigbits set)
{
	tk_sigbits unblock = 0;
	sigset_t s;

	for (int sig = 1; sig <= TK_SIG_MAX; sig++) {
		if (!(set & TK_SIGBIT(sig)) || holds.count[sig] == 0)
			continue;
		if (--holds.count[sig] == 0) {
			holds.held &= ~TK_SIGBIT(sig);
			if (!(holds.blocked_before & TK_SIGBIT(sig)))
				unblock |= TK_SIGBIT(sig);
		}
	}
	if (unblock) {
		bits_to_set(unblock, &s);
		pthread_sigmask(SIG_UNBLOCK, &s, NULL);
	}
}

int tk_signals_read(int fd, struct signalfd_siginfo *out)
{
	ssize_t n;

	do
		n = read(fd, out, sizeof *out);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN ? 0 : -errno;
	return n == (ssize_t)sizeof *out ? 1 : -EIO;
}
