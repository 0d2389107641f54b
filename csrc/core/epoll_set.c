/* epoll sets and the one-shot wait of takana.poll (epoll_set.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include "epoll_set.h"
#include "clock.h"

int tk_epoll_open(void)
{
	int fd = epoll_create1(EPOLL_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

int tk_epoll_add(int ep, int fd, int pri)
{
	struct epoll_event ev;

	memset(&ev, 0, sizeof ev);
	ev.events = pri ? EPOLLPRI : EPOLLIN;
	ev.data.fd = fd;
	return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

int tk_epoll_del(int ep, int fd)
{
	return epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL) < 0 ? -errno : 0;
}

int tk_epoll_ready(int ep, int *fds, int max, int64_t timeout_ms)
{
	struct epoll_event evs[64];
	int64_t deadline = tk_deadline_ms(timeout_ms);
	int n;

	if (max > (int)(sizeof evs / sizeof evs[0]))
		max = (int)(sizeof evs / sizeof evs[0]);
	/* epoll_wait takes an int of milliseconds: a longer wait goes on in
	 * slices until something is ready or the deadline passes. */
	do
		n = epoll_wait(ep, evs, max, tk_timeout_slice(timeout_ms, deadline));
	while (n == 0 && timeout_ms > 0 && tk_monotonic_ms() < deadline);
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	for (int i = 0; i < n; i++)
		fds[i] = evs[i].data.fd;
	return n;
}

int tk_epoll_ctl(int ep, enum tk_ep_op op, int fd, unsigned what, uint64_t data)
{
	static const int ops[] = { EPOLL_CTL_ADD, EPOLL_CTL_MOD, EPOLL_CTL_DEL };
	struct epoll_event ev;

	memset(&ev, 0, sizeof ev);
	ev.events = ((what & TK_EP_IN) ? EPOLLIN : 0u) | ((what & TK_EP_PRI) ? EPOLLPRI : 0u) |
	            ((what & TK_EP_OUT) ? EPOLLOUT : 0u);
	ev.data.u64 = data;
	return epoll_ctl(ep, ops[op], fd, &ev) < 0 ? -errno : 0;
}

int tk_epoll_wait_data(int ep, uint64_t *data, int max, int64_t timeout_ms)
{
	struct epoll_event evs[TK_EP_BATCH];
	int64_t deadline = timeout_ms > 0 ? tk_deadline_ms(timeout_ms) : 0;
	int n;

	if (max > TK_EP_BATCH)
		max = TK_EP_BATCH;
	do
		n = epoll_wait(ep, evs, max, tk_timeout_slice(timeout_ms, deadline));
	while (n == 0 && timeout_ms > 0 && tk_monotonic_ms() < deadline);
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	for (int i = 0; i < n; i++)
		data[i] = evs[i].data.u64;
	return n;
}

int tk_fd_identity(int fd, uint64_t *dev, uint64_t *ino)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	*dev = (uint64_t)st.st_dev;
	*ino = (uint64_t)st.st_ino;
	return 0;
}

/* Takes fds[0..n) out of the borrowed set ep again (a descriptor listed
 * twice was added once: its second DEL fails, which is expected). */
static void poll_fds_unregister(int ep, const int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++)
		(void)epoll_ctl(ep, EPOLL_CTL_DEL, fds[i], NULL);
}

int tk_poll_fds(int kept, const int *fds, const enum tk_poll_want *want, size_t n,
                int64_t timeout_ms, unsigned char *ready, const char **step)
{
	struct epoll_event *evs, one[8];
	int64_t deadline = 0;
	int ep = kept, nev, e, count = 0;

	memset(ready, 0, n);
	evs = n <= sizeof one / sizeof one[0] ? one : calloc(n, sizeof *evs);
	if (evs == NULL) {
		*step = "malloc";
		return -ENOMEM;
	}
	if (ep < 0)
		ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0) {
		e = -errno;
		if (evs != one)
			free(evs);
		*step = "epoll_create1";
		return e;
	}
	for (size_t i = 0; i < n; i++) {
		struct epoll_event ev = { .events = EPOLLIN };

		if (want[i] == TK_POLL_OUT)
			ev.events = EPOLLOUT;
		else if (want[i] == TK_POLL_PRI)
			ev.events = EPOLLPRI;
		ev.data.fd = fds[i];
		/* The same descriptor twice is one registration; both indexes
		 * are reported below. */
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) < 0 && errno != EEXIST) {
			e = -errno;
			if (kept < 0)
				close(ep);
			else
				poll_fds_unregister(ep, fds, i);
			if (evs != one)
				free(evs);
			*step = "epoll_ctl";
			return e;
		}
	}
	if (timeout_ms > 0)
		deadline = tk_monotonic_ms() + timeout_ms;
	for (;;) {
		nev = epoll_wait(ep, evs, n > 0 ? (int)n : 1, tk_timeout_slice(timeout_ms, deadline));
		if (nev < 0 && errno != EINTR)
			break;
		if (nev > 0 || timeout_ms == 0 || (timeout_ms > 0 && tk_monotonic_ms() >= deadline))
			break;
	}
	e = errno;
	if (kept < 0)
		close(ep);
	else
		poll_fds_unregister(ep, fds, n);
	if (nev < 0 && e != EINTR) {
		if (evs != one)
			free(evs);
		*step = "epoll_wait";
		return -e;
	}
	for (size_t i = 0; i < n && nev > 0; i++) {
		for (int k = 0; k < nev; k++) {
			if (evs[k].data.fd == fds[i]) {
				ready[i] = 1;
				count++;
				break;
			}
		}
	}
	if (evs != one)
		free(evs);
	return count;
}
