/* AF_UNIX sockets a supervisor needs: a datagram notify socket whose
 * every message names its sender (SCM_CREDENTIALS, SCM_PIDFD or the time
 * it was queued), a listening control socket whose connections carry their
 * peer's SO_PEERCRED, and the stream reads and writes on those. Every
 * descriptor is O_CLOEXEC; our ends are non-blocking. */
#ifndef TAKANA_UNIX_SOCKET_H
#define TAKANA_UNIX_SOCKET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

struct tk_fd_drops;

/* The kernel's SCM_MAX_FD: room for all a message may pass, since those
 * that do not fit are closed by the kernel in the reader's thread. */
#define TK_SCM_FDS_MAX 253

/* A socket bound at name beneath the checked directory dirfd (safe_dir.c's
 * tk_dir_bind; dir_path only for its fallback): a datagram socket (dgram)
 * or a listening stream socket. A datagram socket asks for its senders'
 * pidfds (SCM_PIDFD, 6.5+; *pidfds says whether it got them) unless
 * by_start_time, else for the time each message was queued; it takes the
 * descriptors senders pass (*drops, closed off the reading thread). The
 * fd, or -errno with *step ("socket": making it; "bind": the rest). */
int tk_unix_socket_bind(int dirfd, const char *dir_path, const char *name, int dgram, mode_t mode,
                 uid_t uid, gid_t gid, int by_start_time, int *pidfds,
                 struct tk_fd_drops **drops, const char **step);

/* A stream socket connected to path (NUL-terminated, shorter than
 * sun_path), then made non-blocking: the fd, or -errno (-ENAMETOOLONG for
 * a path that does not fit, -ETIMEDOUT when a listener whose accept queue
 * is full took no connection within timeout_ms; < 0 waits forever) with
 * *step ("socket" or "connect"). */
int tk_unix_connect(const char *path, int64_t timeout_ms, const char **step);

/* accept4 on a listening socket (non-blocking, O_CLOEXEC) with the peer's
 * SO_PEERCRED: the fd, or -errno with *step ("accept" or
 * "accept: SO_PEERCRED"). */
int tk_unix_accept(int lfd, pid_t *pid, uid_t *uid, gid_t *gid, const char **step);

/* The peer's supplementary groups (SO_PEERGROUPS) of a connected stream
 * socket, at most max of them into groups: how many it has (more than max:
 * call again with room for that many), or -errno. */
int tk_unix_peer_groups(int fd, gid_t *groups, int max);

/* What one datagram's control data says of its sender. */
struct tk_unix_sender {
	pid_t pid;            /* SCM_CREDENTIALS, or 0 */
	uid_t uid;            /* or (uid_t)-1 */
	gid_t gid;            /* or (gid_t)-1 */
	int pidfd;            /* SCM_PIDFD, or -1 */
	struct timespec sent; /* SCM_TIMESTAMPNS (CLOCK_REALTIME), or zero */
};

/* Parses control data as recvmsg(2) left it (ctl: aligned for a struct
 * cmsghdr; len: msg_controllen) into *s, and the descriptors SCM_RIGHTS
 * passed into fds (at most TK_SCM_FDS_MAX; *nfds their count), which the
 * caller owns from here. A header whose length runs past len ends the
 * parse. Reads nothing beyond ctl + len, calls nothing. */
void tk_unix_cmsg_parse(const void *ctl, size_t len, struct tk_unix_sender *s, int *fds,
                        size_t *nfds);

/* One datagram, without blocking, into buf (cap bytes; a longer one is cut
 * short), with its sender in *s. Descriptors it passed are handed to drops
 * (closed on a thread of their own, or here defused). The sender's pidfd
 * is kept only when it names a live process in our pid namespace; without
 * sender_pidfds one is opened on the pid and kept only when that process
 * started before the message was queued. Bytes read, or -errno (-EAGAIN:
 * nothing pending). */
ssize_t tk_unix_recv(int fd, void *buf, size_t cap, struct tk_fd_drops *drops, int sender_pidfds,
                     struct tk_unix_sender *s);

/* send(2) on a stream socket that never blocks nor raises SIGPIPE, retried
 * on EINTR: bytes written (maybe fewer), or -errno. */
ssize_t tk_unix_send(int fd, const void *buf, size_t len);

/* send(2) of buf on a connected stream socket with descriptor passfd
 * attached (SCM_RIGHTS), never blocking nor raising SIGPIPE: bytes written
 * (the descriptor went with the first of them), or -errno. */
ssize_t tk_unix_send_fd(int fd, const void *buf, size_t len, int passfd);

/* recvmsg(2) on a stream socket, without blocking, into buf (cap bytes),
 * the descriptors passed with those bytes (O_CLOEXEC, at most
 * TK_SCM_FDS_MAX) into fds, *nfds their count, the caller's from here.
 * Bytes read (0 at end of file), or -errno. */
ssize_t tk_unix_recv_fds(int fd, void *buf, size_t cap, int *fds, size_t *nfds);

/* The connected peer's SO_PEERCRED (who connected, or who listened for a
 * socket that connected): 0, or -errno. */
int tk_unix_peer_cred(int fd, pid_t *pid, uid_t *uid, gid_t *gid);

/* Closes a socket. With drops (a datagram socket's), the last close, which
 * releases what its queue still holds, happens on a closing thread, or
 * defused here when none can be had; drops is not released. */
void tk_unix_close(int fd, struct tk_fd_drops *drops);

#endif
