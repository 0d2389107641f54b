/* Descriptors another process handed us (SCM_RIGHTS on a notify socket:
 * systemd-notify's barrier, or anything a sender likes), closed on a thread
 * of their own. The last close of a file can block as long as its sender
 * wants (a TCP socket with SO_LINGER whose peer never reads; a FUSE file
 * whose FLUSH is never answered), and it runs in the thread that makes it:
 * a supervisor's loop must never make it. One short-lived thread a message
 * closes that message's descriptors; a socket counts its own in flight, so
 * a sender that makes closes hang stalls only the sockets it can reach. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fd_drop.h"

struct tk_fd_drops {
	atomic_int inflight; /* messages whose descriptors are still closing */
	atomic_int refs;     /* the socket's, and one a closing thread */
};

struct drop_job {
	struct tk_fd_drops *owner;
	size_t n;
	int fds[];
};

struct tk_fd_drops *tk_fd_drops_new(void)
{
	struct tk_fd_drops *d = malloc(sizeof *d);

	if (d) {
		atomic_init(&d->inflight, 0);
		atomic_init(&d->refs, 1);
	}
	return d;
}

void tk_fd_drops_put(struct tk_fd_drops *d)
{
	if (d && atomic_fetch_sub(&d->refs, 1) == 1)
		free(d);
}

int tk_fd_drops_inflight(const struct tk_fd_drops *d)
{
	return d ? atomic_load(&d->inflight) : 0;
}

/* The kernel's limit on unix sockets passed inside unix sockets. */
#define NEST_MAX 4
/* Messages read out of one passed unix socket before it is closed as it
 * is (its sender may keep filling it). */
#define DRAIN_MAX 1024
#define SCM_FDS_MAX 253

/* Closes fd so that no wait its sender set up is ours to sit through: a
 * lingering socket is reset; a unix socket is emptied first, each
 * descriptor queued in it defused the same way (a TCP socket with
 * SO_LINGER inside a unix socket would otherwise be released, and waited
 * for, by this close). What still blocks (a FUSE file whose FLUSH is never
 * answered) blocks only the calling thread. */
static void defuse_close(int fd, int depth)
{
	struct linger off = { 0, 0 };
	int domain = 0;
	socklen_t len = sizeof domain;

	(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &off, sizeof off);
	if (depth < NEST_MAX && getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 &&
	    domain == AF_UNIX) {
		for (int m = 0; m < DRAIN_MAX; m++) {
			union {
				char b[CMSG_SPACE(SCM_FDS_MAX * sizeof(int))];
				struct cmsghdr align;
			} ctl;
			char byte;
			struct iovec iov = { &byte, 1 };
			struct msghdr mh;
			memset(&mh, 0, sizeof mh);
			mh.msg_iov = &iov;
			mh.msg_iovlen = 1;
			mh.msg_control = ctl.b;
			mh.msg_controllen = sizeof ctl.b;
			if (recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) <= 0)
				break;
			for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
				size_t n;
				if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
					continue;
				n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
				for (size_t i = 0; i < n; i++) {
					int inner;
					memcpy(&inner, CMSG_DATA(c) + i * sizeof inner, sizeof inner);
					defuse_close(inner, depth + 1);
				}
			}
		}
	}
	close(fd);
}

void tk_fd_close_defused(int fd)
{
	defuse_close(fd, 0);
}

static void *drop_main(void *arg)
{
	struct drop_job *job = arg;

	for (size_t i = 0; i < job->n; i++)
		defuse_close(job->fds[i], 0);
	atomic_fetch_sub(&job->owner->inflight, 1);
	tk_fd_drops_put(job->owner);
	free(job);
	return NULL;
}

int tk_fd_drop(struct tk_fd_drops *d, const int *fds, size_t n)
{
	struct drop_job *job;
	pthread_attr_t attr;
	sigset_t all, old;
	pthread_t t;
	int err;

	if (n == 0)
		return 0;
	job = malloc(sizeof *job + n * sizeof *fds);
	if (job == NULL)
		return -ENOMEM;
	job->owner = d;
	job->n = n;
	memcpy(job->fds, fds, n * sizeof *fds);
	atomic_fetch_add(&d->inflight, 1);
	atomic_fetch_add(&d->refs, 1);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, (size_t)64 * 1024);
	/* No signal is ever this thread's to take. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = -pthread_create(&t, &attr, drop_main, job);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (err < 0) {
		atomic_fetch_sub(&d->inflight, 1);
		atomic_fetch_sub(&d->refs, 1);
		free(job);
	}
	return err;
}
