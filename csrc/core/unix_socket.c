/* AF_UNIX sockets: the notify socket, the control socket and its
 * connections (unix_socket.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "fd_drop.h"
#include "process.h"
#include "safe_dir.h"
#include "unix_socket.h"

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59
#endif
#ifndef SO_PASSPIDFD
#define SO_PASSPIDFD 76
#endif
#ifndef SCM_PIDFD
#define SCM_PIDFD 0x04
#endif

int tk_unix_socket_bind(int dirfd, const char *dir_path, const char *name, int dgram, mode_t mode,
                 uid_t uid, gid_t gid, int by_start_time, int *pidfds,
                 struct tk_fd_drops **drops, const char **step)
{
	int one = 1, fd, r = 0;

	*pidfds = 0;
	*drops = NULL;
	*step = "socket";
	fd = socket(AF_UNIX, (dgram ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	*step = "bind";
	if (dgram) {
		*pidfds = !by_start_time &&
		          setsockopt(fd, SOL_SOCKET, SO_PASSPIDFD, &one, sizeof one) == 0;
		if (setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) < 0 ||
		    (!*pidfds && setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) < 0))
			r = -errno;
		/* Passed descriptors are taken (systemd-notify's barrier passes
		 * one and waits for its close) and closed off this thread. */
		if (r == 0 && (*drops = tk_fd_drops_new()) == NULL)
			r = -ENOMEM;
	}
	if (r == 0)
		r = tk_dir_bind(dirfd, dir_path, name, fd, mode, uid, gid);
	if (r == 0 && !dgram && listen(fd, 64) < 0)
		r = -errno;
	if (r < 0) {
		close(fd);
		tk_fd_drops_put(*drops);
		*drops = NULL;
		*pidfds = 0;
		return r;
	}
	return fd;
}

int tk_unix_connect(const char *path, int64_t timeout_ms, const char **step)
{
	struct sockaddr_un sa;
	size_t len = strlen(path);
	int64_t deadline = tk_deadline_ms(timeout_ms);
	int fd, r;

	*step = "connect";
	if (len >= sizeof sa.sun_path)
		return -ENAMETOOLONG;
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, path, len);
	*step = "socket";
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	*step = "connect";
	for (;;) {
		/* A listener whose accept queue is full (a wedged supervisor)
		 * keeps a blocking AF_UNIX connect waiting; the kernel bounds
		 * that wait by SO_SNDTIMEO, and then says EAGAIN. */
		if (timeout_ms >= 0) {
			int left = tk_timeout_slice(timeout_ms, deadline);
			struct timeval tv = { .tv_sec = left / 1000, .tv_usec = (suseconds_t)(left % 1000) * 1000 };

			if (left == 0) {
				r = -ETIMEDOUT;
				break;
			}
			if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0) {
				r = -errno;
				break;
			}
		}
		r = connect(fd, (const struct sockaddr *)&sa,
		            (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1));
		if (r == 0)
			r = fcntl(fd, F_SETFL, O_NONBLOCK) < 0 ? -errno : 0;
		else
			r = errno == EAGAIN && timeout_ms >= 0 ? -ETIMEDOUT : -errno;
		if (r != -EINTR)
			break;
	}
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

int tk_unix_peer_groups(int fd, gid_t *groups, int max)
{
	socklen_t len = (socklen_t)((size_t)max * sizeof *groups);

	/* The connecting process's supplementary groups as they were at
	 * connect (Linux 4.13); ERANGE says how many there are. */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
		return errno == ERANGE ? (int)(len / sizeof *groups) : -errno;
	return (int)(len / sizeof *groups);
}

int tk_unix_accept(int lfd, pid_t *pid, uid_t *uid, gid_t *gid, const char **step)
{
	struct ucred uc;
	socklen_t len = sizeof uc;
	int fd;

	*step = "accept";
	do
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	while (fd < 0 && errno == EINTR);
	if (fd < 0)
		return -errno;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0) {
		int e = -errno;
		close(fd);
		*step = "accept: SO_PEERCRED";
		return e;
	}
	*pid = uc.pid;
	*uid = uc.uid;
	*gid = uc.gid;
	return fd;
}

/* The cmsg walk by hand rather than CMSG_NXTHDR: a header is used only
 * when all of it, and the length it claims, lies within the buffer. */
void tk_unix_cmsg_parse(const void *ctl, size_t len, struct tk_unix_sender *s, int *fds,
                        size_t *nfds)
{
	const char *p = ctl, *end = p + len;

	s->pid = 0;
	s->uid = (uid_t)-1;
	s->gid = (gid_t)-1;
	s->pidfd = -1;
	s->sent = (struct timespec){ 0, 0 };
	*nfds = 0;
	while ((size_t)(end - p) >= sizeof(struct cmsghdr)) {
		struct cmsghdr c;
		const char *data = p + CMSG_LEN(0);
		size_t dlen;

		memcpy(&c, p, sizeof c);
		if (c.cmsg_len < CMSG_LEN(0) || c.cmsg_len > (size_t)(end - p))
			break;
		dlen = c.cmsg_len - CMSG_LEN(0);
		if (c.cmsg_level == SOL_SOCKET) {
			if (c.cmsg_type == SCM_CREDENTIALS && dlen >= sizeof(struct ucred)) {
				struct ucred uc;
				memcpy(&uc, data, sizeof uc);
				s->pid = uc.pid;
				s->uid = uc.uid;
				s->gid = uc.gid;
			} else if (c.cmsg_type == SCM_PIDFD && dlen >= sizeof(int)) {
				memcpy(&s->pidfd, data, sizeof(int));
			} else if (c.cmsg_type == SCM_TIMESTAMPNS && dlen >= sizeof s->sent) {
				memcpy(&s->sent, data, sizeof s->sent);
			} else if (c.cmsg_type == SCM_RIGHTS) {
				size_t n = dlen / sizeof(int);
				if (n > TK_SCM_FDS_MAX - *nfds)
					n = TK_SCM_FDS_MAX - *nfds;
				memcpy(fds + *nfds, data, n * sizeof(int));
				*nfds += n;
			}
		}
		/* The next header starts at the aligned end of this one. */
		if (CMSG_ALIGN(c.cmsg_len) >= (size_t)(end - p))
			break;
		p += CMSG_ALIGN(c.cmsg_len);
	}
}

ssize_t tk_unix_recv(int fd, void *buf, size_t cap, struct tk_fd_drops *drops, int sender_pidfds,
                     struct tk_unix_sender *s)
{
	union {
		char b[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(sizeof(int)) +
		       CMSG_SPACE(sizeof(struct timespec)) + CMSG_SPACE(TK_SCM_FDS_MAX * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	int fds[TK_SCM_FDS_MAX];
	size_t nfds;
	struct iovec iov = { buf, cap };
	struct msghdr mh;
	ssize_t n;

	memset(&mh, 0, sizeof mh);
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = ctl.b;
	mh.msg_controllen = sizeof ctl.b;
	do
		n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	tk_unix_cmsg_parse(ctl.b, mh.msg_controllen, s, fds, &nfds);
	/* Descriptors nobody asked for: closed, never here (the last close
	 * may block as long as their sender likes); with no thread to be had,
	 * defused and closed here. */
	if (nfds > 0 && tk_fd_drop(drops, fds, nfds) < 0)
		for (size_t i = 0; i < nfds; i++)
			tk_fd_close_defused(fds[i]);
	/* A sender in no pid namespace of ours, or gone already (newer
	 * kernels give pidfds of exited processes): none to speak of. */
	if (s->pidfd >= 0 && (s->pid <= 0 || tk_pidfd_alive(s->pidfd) != 1)) {
		close(s->pidfd);
		s->pidfd = -1;
	}
	/* A datagram longer than the buffer arrives cut short: what remains
	 * could mean something else ("WATCHDOG_USEC=1000000000" read as
	 * "WATCHDOG_USEC=1"), so none of it is given, as systemd drops it. */
	if (mh.msg_flags & MSG_TRUNC) {
		if (s->pidfd >= 0)
			close(s->pidfd);
		s->pidfd = -1;
		return -EMSGSIZE;
	}
	if (!sender_pidfds && s->pid > 0 && s->sent.tv_sec > 0)
		s->pidfd = tk_pidfd_of_sender(s->pid, &s->sent);
	return n;
}

ssize_t tk_unix_send(int fd, const void *buf, size_t len)
{
	ssize_t n;

	do
		n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : n;
}

ssize_t tk_unix_send_fd(int fd, const void *buf, size_t len, int passfd)
{
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { (void *)(uintptr_t)buf, len };
	struct msghdr mh;
	struct cmsghdr *c;
	ssize_t n;

	memset(&mh, 0, sizeof mh);
	memset(&ctl, 0, sizeof ctl);
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = ctl.b;
	mh.msg_controllen = sizeof ctl.b;
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &passfd, sizeof(int));
	do
		n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : n;
}

ssize_t tk_unix_recv_fds(int fd, void *buf, size_t cap, int *fds, size_t *nfds)
{
	union {
		char b[CMSG_SPACE(TK_SCM_FDS_MAX * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct tk_unix_sender s;
	struct iovec iov = { buf, cap };
	struct msghdr mh;
	ssize_t n;

	*nfds = 0;
	memset(&mh, 0, sizeof mh);
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = ctl.b;
	mh.msg_controllen = sizeof ctl.b;
	do
		n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	tk_unix_cmsg_parse(ctl.b, mh.msg_controllen, &s, fds, nfds);
	/* (a stream socket carries no pidfd unless asked: none kept) */
	if (s.pidfd >= 0)
		close(s.pidfd);
	return n;
}

int tk_unix_peer_cred(int fd, pid_t *pid, uid_t *uid, gid_t *gid)
{
	struct ucred uc;
	socklen_t len = sizeof uc;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0)
		return -errno;
	*pid = uc.pid;
	*uid = uc.uid;
	*gid = uc.gid;
	return 0;
}

void tk_unix_close(int fd, struct tk_fd_drops *drops)
{
	/* A datagram socket's queue may still hold what senders passed,
	 * released by its last close: that close is a closing thread's too. */
	if (drops == NULL)
		close(fd);
	else if (tk_fd_drop(drops, &fd, 1) < 0)
		tk_fd_close_defused(fd);
}
