/* The mount table's watch (mounts_watch.h). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mounts_watch.h"

/* Whether w->fd is still the file the watch opened. */
static int watch_valid(const struct tk_mounts_watch *w)
{
	struct stat st;

	return w->fd >= 0 && fstat(w->fd, &st) == 0 && st.st_dev == w->dev && st.st_ino == w->ino;
}

void tk_mounts_watch_close(struct tk_mounts_watch *w)
{
	if (watch_valid(w))
		close(w->fd);
	w->fd = -1;
}

int tk_mounts_watch_changed(struct tk_mounts_watch *w)
{
	struct pollfd pfd;
	struct stat st;
	int valid = watch_valid(w);

	if (valid && w->owner == getpid()) {
		pfd.fd = w->fd;
		pfd.events = POLLPRI;
		pfd.revents = 0;
		if (poll(&pfd, 1, 0) == 0)
			return 0;
		/* POLLPRI|POLLERR: changed, and that news is now consumed. */
		if (!(pfd.revents & POLLNVAL))
			return 1;
	}
	/* The first call, a descriptor gone bad, or a forked child. */
	if (valid)
		close(w->fd);
	w->fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
	if (w->fd >= 0 && fstat(w->fd, &st) == 0) {
		w->dev = st.st_dev;
		w->ino = st.st_ino;
	} else if (w->fd >= 0) {
		close(w->fd);
		w->fd = -1;
	}
	w->owner = getpid();
	return 1;
}
