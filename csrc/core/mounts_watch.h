/* A watch on this process's mount table: /proc/self/mountinfo held open
 * and polled for POLLPRI, which the kernel raises once per mount or
 * unmount in its namespace. A parsed copy of the table (cgroup_id.c's, or
 * a Lua cache) stays good until then. */
#ifndef TAKANA_MOUNTS_WATCH_H
#define TAKANA_MOUNTS_WATCH_H

#include <sys/types.h>

/* The file held open, the pid that opened it, and the file's identity (a
 * descriptor number some other code closed and reused is not ours to
 * poll or close). Starts as TK_MOUNTS_WATCH_INIT. */
struct tk_mounts_watch {
	int fd;
	pid_t owner;
	dev_t dev;
	ino_t ino;
};
#define TK_MOUNTS_WATCH_INIT { -1, 0, 0, 0 }

/* Whether the mount table may have changed since the last call: 1 the
 * first time, and whenever that cannot be told; else 0. The news is
 * consumed. In a forked child (whose inherited descriptor shares the
 * parent's open file, so that a poll would consume the parent's news) the
 * file is opened again. Not seen: a switch to another mount namespace
 * (setns, unshare). */
int tk_mounts_watch_changed(struct tk_mounts_watch *w);
/* Closes the file if it still is the watch's. */
void tk_mounts_watch_close(struct tk_mounts_watch *w);

#endif
