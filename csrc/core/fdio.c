/* Plain descriptor calls for the bindings (fdio.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "fdio.h"

ssize_t tk_fd_read(int fd, void *buf, size_t len)
{
	ssize_t n;

	do
		n = read(fd, buf, len);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : n;
}

ssize_t tk_fd_write_nosigpipe(int fd, const void *buf, size_t len)
{
	sigset_t pipe_set, old, pending;
	ssize_t n;
	int e, was_pending;

	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
	sigpending(&pending);
	was_pending = sigismember(&pending, SIGPIPE);
	do
		n = write(fd, buf, len);
	while (n < 0 && errno == EINTR);
	e = errno;
	if (n < 0 && e == EPIPE && !was_pending) {
		struct timespec zero = { 0, 0 };
		while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
			;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return n < 0 ? -e : n;
}

int tk_pipe_pair(int p[2], int nonblock_end)
{
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	if (fcntl(p[nonblock_end], F_SETFL, O_NONBLOCK) < 0) {
		int e = -errno;
		close(p[0]);
		close(p[1]);
		p[0] = p[1] = -1;
		return e;
	}
	return 0;
}

int tk_devnull_open(void)
{
	int fd = open("/dev/null", O_RDWR | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

int tk_fd_dup(int fd)
{
	int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);

	return d < 0 ? -errno : d;
}

int tk_fd_valid(int fd)
{
	return fd >= 0 && fcntl(fd, F_GETFD) >= 0;
}
