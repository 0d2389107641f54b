/* Lua binding of the descriptors a supervisor needs besides pidfds and
 * cgroups: AF_UNIX sockets (a SOCK_DGRAM notify socket that reads the
 * sender's SCM_CREDENTIALS, a SOCK_STREAM control socket that reads
 * SO_PEERCRED), pipes whose read end never blocks, and an epoll set that
 * gathers them all behind one descriptor for foreign event loops.
 * Every descriptor is O_CLOEXEC and non-blocking on our side; a write end
 * handed to a child stays blocking, since the child's programs expect it. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "binding.h"
#include "process.h"
#include "safe_dir.h"

enum ux_kind { UX_DGRAM, UX_LISTEN, UX_STREAM, UX_EPOLL };

static const char *const kind_names[] = { "datagram socket", "listening socket", "stream socket",
	                                   "epoll set" };

struct lunix {
	struct tk_handle h; /* first: the handle base */
	enum ux_kind kind;
	int sender_pidfds; /* datagrams carry SCM_PIDFD */
	struct tk_fd_drops *drops; /* datagram sockets: passed fds closing */
};

#define MAX_READ (1 << 20)
#define EPOLL_BATCH 64

static struct lunix *ux_check(lua_State *L, int idx)
{
	return (struct lunix *)tk_handle_check(L, idx, TK_UNIX_MT);
}

/* close, __gc and __close (lua_handle.c): the socket, and its share of
 * the count its closing threads still hold. */
static void ux_release(lua_State *L, struct tk_handle *h)
{
	struct lunix *u = (struct lunix *)h;

	(void)L;
	/* A datagram socket's queue may still hold what senders passed,
	 * released by its last close: that close is a closing thread's too. */
	if (u->drops == NULL || tk_fd_drop(u->drops, &h->fd, 1) < 0) {
		if (u->drops)
			tk_fd_close_defused(h->fd);
		else
			close(h->fd);
	}
	tk_fd_drops_put(u->drops);
	u->drops = NULL;
}

static struct lunix *ux_new(lua_State *L, int fd, enum ux_kind kind)
{
	struct lunix *u = lua_newuserdatauv(L, sizeof *u, 0);
	tk_handle_init(&u->h, kind_names[kind], "r", ux_release);
	u->h.fd = fd;
	u->kind = kind;
	u->sender_pidfds = 0;
	u->drops = NULL;
	luaL_setmetatable(L, TK_UNIX_MT);
	return u;
}

static void ux_require(lua_State *L, struct lunix *u, enum ux_kind kind, const char *fname)
{
	if (u->kind != kind)
		luaL_error(L, "%s: not a %s descriptor (this one is %s)", fname, kind_names[kind],
		           kind_names[u->kind]);
}

/* Fills a sockaddr_un; a path that does not fit raises, since it is the
 * caller's to choose a shorter one (108 bytes, NUL included). */
static socklen_t ux_addr(lua_State *L, int idx, struct sockaddr_un *sa)
{
	size_t len;
	const char *path = luaL_checklstring(L, idx, &len);

	if (len == 0 || memchr(path, '\0', len))
		luaL_argerror(L, idx, "a socket path without NUL bytes expected");
	if (len >= sizeof sa->sun_path)
		luaL_argerror(L, idx, lua_pushfstring(L, "socket path longer than %d bytes",
		                                      (int)sizeof sa->sun_path - 1));
	memset(sa, 0, sizeof *sa);
	sa->sun_family = AF_UNIX;
	memcpy(sa->sun_path, path, len);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
}

#ifndef SO_PASSPIDFD
#define SO_PASSPIDFD 76
#endif
#ifndef SCM_PIDFD
#define SCM_PIDFD 0x04
#endif

/* Messages of one socket whose passed descriptors are still closing (each
 * on its thread, fd_drop.c) beyond which it is not read (recv says EBUSY):
 * closes stuck on its senders' files would otherwise fill our descriptor
 * table, and the kernel closes what does not fit in the reader's thread. */
#define DROPS_INFLIGHT_MAX 16

/* The kernel's SCM_MAX_FD: room for all a message may pass, since those
 * that do not fit are closed by the kernel in the reader's thread. */
#define SCM_FDS_MAX 253

/* A socket bound at name beneath the checked directory dirfd (lua_dir.c's
 * dir:bind): a datagram socket whose every message names its sender, or a
 * listening stream socket. Pushes it, or nil, msg, errno. A datagram
 * socket asks for the sender's pidfd (SCM_PIDFD, 6.5+); before that, for
 * the time each message was queued, against which recv checks that the
 * pid it names still is the sender (by_start_time: that way on any
 * kernel, for the specs of older ones). */
int tk_unix_bind(lua_State *L, int dirfd, const char *dir_path, const char *name, int dgram,
                 mode_t mode, uid_t uid, gid_t gid, int by_start_time)
{
	int one = 1, fd, r = 0, pidfds = 0;
	struct tk_fd_drops *drops = NULL;
	struct lunix *u;

	fd = socket(AF_UNIX, (dgram ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return tk_push_error(L, dgram ? "notify socket" : "control socket", -errno);
	if (dgram) {
		pidfds = !by_start_time &&
		         setsockopt(fd, SOL_SOCKET, SO_PASSPIDFD, &one, sizeof one) == 0;
		if (setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) < 0 ||
		    (!pidfds && setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) < 0))
			r = -errno;
		/* Passed descriptors are taken (systemd-notify's barrier passes
		 * one and waits for its close) and closed off this thread. */
		if (r == 0 && (drops = tk_fd_drops_new()) == NULL)
			r = -ENOMEM;
	}
	if (r == 0)
		r = tk_dir_bind(dirfd, dir_path, name, fd, mode, uid, gid);
	if (r == 0 && !dgram && listen(fd, 64) < 0)
		r = -errno;
	if (r < 0) {
		close(fd);
		tk_fd_drops_put(drops);
		return tk_push_error(L, lua_pushfstring(L, "%s %s/%s", dgram ? "bind" : "listen",
		                                        dir_path ? dir_path : ".", name), r);
	}
	u = ux_new(L, fd, dgram ? UX_DGRAM : UX_LISTEN);
	u->sender_pidfds = pidfds;
	u->drops = drops;
	return 1;
}

/*** Connects a stream socket to path; the result is non-blocking.
 * @function unix_connect
 * @string path
 * @treturn[1] socket
 * @treturn[2] nil, message, errno */
static int l_unix_connect(lua_State *L)
{
	struct sockaddr_un sa;
	socklen_t len = ux_addr(L, 1, &sa);
	int fd, r;

	tk_check_nargs(L, 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return tk_push_error(L, "connect", -errno);
	do
		r = connect(fd, (const struct sockaddr *)&sa, len);
	while (r < 0 && errno == EINTR);
	if (r < 0 || fcntl(fd, F_SETFL, O_NONBLOCK) < 0) {
		r = -errno;
		close(fd);
		return tk_push_error(L, lua_pushfstring(L, "connect %s", sa.sun_path), r);
	}
	ux_new(L, fd, UX_STREAM);
	return 1;
}

/* core.pipe() -> read end, write end: spawn's pipe objects (lua_pipe.c),
 * the read end non-blocking for this process, the write end blocking for
 * the child it is handed to (an s6 notification fd). */
static int l_pipe(lua_State *L)
{
	int p[2];

	tk_check_nargs(L, 0);
	if (pipe2(p, O_CLOEXEC) < 0)
		return tk_push_error(L, "pipe", -errno);
	if (fcntl(p[0], F_SETFL, O_NONBLOCK) < 0) {
		int e = -errno;
		close(p[0]);
		close(p[1]);
		return tk_push_error(L, "pipe", e);
	}
	tk_pipe_new(L, 0)->fd = p[0];
	tk_pipe_new(L, 1)->fd = p[1];
	return 2;
}

/*** An epoll set: one descriptor, readable when any member is ready, to
 * hand to cqueues or luv.
 * @function epoll
 * @treturn[1] epoll
 * @treturn[2] nil, message, errno */
static int l_epoll(lua_State *L)
{
	int fd;

	tk_check_nargs(L, 0);
	fd = epoll_create1(EPOLL_CLOEXEC);
	if (fd < 0)
		return tk_push_error(L, "epoll", -errno);
	ux_new(L, fd, UX_EPOLL);
	return 1;
}

/*** Adds a descriptor to the set, watched for input, or for priority data
 * when pri is true (cgroup.events changes).
 * @function epoll:add
 * @int fd
 * @bool[opt] pri */
static int ux_epoll_add(lua_State *L)
{
	struct lunix *u = ux_check(L, 1);
	lua_Integer fd = luaL_checkinteger(L, 2);
	struct epoll_event ev;

	tk_check_nargs(L, 3);
	ux_require(L, u, UX_EPOLL, "add");
	if (fd < 0 || fd > INT32_MAX)
		luaL_argerror(L, 2, "a descriptor expected");
	memset(&ev, 0, sizeof ev);
	ev.events = lua_toboolean(L, 3) ? EPOLLPRI : EPOLLIN;
	ev.data.fd = (int)fd;
	if (epoll_ctl(u->h.fd, EPOLL_CTL_ADD, (int)fd, &ev) < 0)
		return tk_push_error(L, "epoll add", -errno);
	lua_pushboolean(L, 1);
	return 1;
}

/*** Removes a descriptor from the set (before it is closed).
 * @function epoll:del
 * @int fd */
static int ux_epoll_del(lua_State *L)
{
	struct lunix *u = ux_check(L, 1);
	lua_Integer fd = luaL_checkinteger(L, 2);

	tk_check_nargs(L, 2);
	ux_require(L, u, UX_EPOLL, "del");
	if (fd < 0 || fd > INT32_MAX)
		luaL_argerror(L, 2, "a descriptor expected");
	if (epoll_ctl(u->h.fd, EPOLL_CTL_DEL, (int)fd, NULL) < 0)
		return tk_push_error(L, "epoll del", -errno);
	lua_pushboolean(L, 1);
	return 1;
}

/*** Waits up to timeout seconds (nil: forever, 0: just look).
 * @function epoll:wait
 * @number[opt] timeout
 * @treturn[1] {fd,...} the ready descriptors (empty on timeout or EINTR)
 * @treturn[2] nil, message, errno */
static int ux_epoll_wait(lua_State *L)
{
	struct lunix *u = ux_check(L, 1);
	struct epoll_event evs[EPOLL_BATCH];
	int ms = -1, n;

	tk_check_nargs(L, 2);
	ux_require(L, u, UX_EPOLL, "wait");
	if (!lua_isnoneornil(L, 2)) {
		lua_Number t = luaL_checknumber(L, 2);
		if (!(t >= 0 && t <= 86400.0 * 24))
			luaL_argerror(L, 2, "timeout must be 0..24 days (seconds), or nil");
		ms = (int)(t * 1000.0 + 0.999);
	}
	n = epoll_wait(u->h.fd, evs, EPOLL_BATCH, ms);
	if (n < 0 && errno != EINTR)
		return tk_push_error(L, "epoll wait", -errno);
	lua_createtable(L, n > 0 ? n : 0, 0);
	for (int i = 0; i < n; i++) {
		lua_pushinteger(L, evs[i].data.fd);
		lua_rawseti(L, -2, i + 1);
	}
	return 1;
}

/* What one message's control data says of its sender. */
struct sender {
	struct ucred uc;
	int pidfd;            /* SCM_PIDFD, or -1 */
	struct timespec sent; /* SCM_TIMESTAMPNS (CLOCK_REALTIME), or zero */
};

static void sender_read(struct msghdr *mh, struct sender *s, struct tk_fd_drops *drops)
{
	s->uc = (struct ucred){ 0, (uid_t)-1, (gid_t)-1 };
	s->pidfd = -1;
	s->sent = (struct timespec){ 0, 0 };
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level != SOL_SOCKET)
			continue;
		if (c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len >= CMSG_LEN(sizeof s->uc))
			memcpy(&s->uc, CMSG_DATA(c), sizeof s->uc);
		else if (c->cmsg_type == SCM_PIDFD && c->cmsg_len >= CMSG_LEN(sizeof(int)))
			memcpy(&s->pidfd, CMSG_DATA(c), sizeof(int));
		else if (c->cmsg_type == SCM_TIMESTAMPNS && c->cmsg_len >= CMSG_LEN(sizeof s->sent))
			memcpy(&s->sent, CMSG_DATA(c), sizeof s->sent);
		else if (c->cmsg_type == SCM_RIGHTS) {
			/* Descriptors nobody asked for: closed, never here (the
			 * last close may block as long as their sender likes). */
			size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			int fds[SCM_FDS_MAX];
			if (n > SCM_FDS_MAX)
				n = SCM_FDS_MAX;
			memcpy(fds, CMSG_DATA(c), n * sizeof(int));
			/* No thread to be had: defused and closed here. */
			if (tk_fd_drop(drops, fds, n) < 0)
				for (size_t i = 0; i < n; i++)
					tk_fd_close_defused(fds[i]);
		}
	}
}

/*** Reads one datagram with its sender's credentials, and the sender itself
 * as a pidfd: the kernel's (SCM_PIDFD, 6.5+), or else one opened on the pid
 * and kept only when that process started before the message was queued
 * (so not a later process that was given a dead sender's pid; /proc's start
 * times are in clock ticks, so one started within a tick after the message
 * is not told apart).
 * @function socket:recv
 * @treturn[1] string data
 * @treturn[1] int sender pid
 * @treturn[1] int uid
 * @treturn[1] int gid
 * @treturn[1] pidfd|nil the sender, nil when it is gone or cannot be told
 * @treturn[1] string how the sender is told: "scm_pidfd" or "start time"
 * @treturn[2] nil, message, errno (EAGAIN: nothing pending; EBUSY: not read
 *   now, as descriptors passed by senders, closed on a thread of their own,
 *   are stuck closing) */
static int ux_recv(lua_State *L)
{
	struct lunix *u = ux_check(L, 1);
	char buf[4096];
	union {
		char b[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(sizeof(int)) +
		       CMSG_SPACE(sizeof(struct timespec)) + CMSG_SPACE(SCM_FDS_MAX * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { buf, sizeof buf };
	struct msghdr mh;
	struct sender s;
	const char *how = u->sender_pidfds ? "scm_pidfd" : "start time";
	ssize_t n;

	tk_check_nargs(L, 1);
	ux_require(L, u, UX_DGRAM, "recv");
	if (tk_fd_drops_inflight(u->drops) >= DROPS_INFLIGHT_MAX)
		return tk_push_error(L, "recv: descriptors its senders passed are still being closed", -EBUSY);
	/* The sender's object first: a memory error once it holds a
	 * descriptor would leak it. */
	tk_pidfd_new(L); /* 2 */
	memset(&mh, 0, sizeof mh);
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = ctl.b;
	mh.msg_controllen = sizeof ctl.b;
	do
		n = recvmsg(u->h.fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return tk_push_error(L, "recv", -errno);
	sender_read(&mh, &s, u->drops);
	/* A sender in no pid namespace of ours, or gone already (newer
	 * kernels give pidfds of exited processes): none to speak of. */
	if (s.pidfd >= 0 && (s.uc.pid <= 0 || tk_pidfd_alive(s.pidfd) != 1)) {
		close(s.pidfd);
		s.pidfd = -1;
	}
	if (!u->sender_pidfds && s.uc.pid > 0 && s.sent.tv_sec > 0)
		s.pidfd = tk_pidfd_of_sender(s.uc.pid, &s.sent);
	if (s.pidfd >= 0)
		tk_pidfd_fill(L, 2, s.pidfd, s.uc.pid, how);
	lua_pushlstring(L, buf, (size_t)n);
	lua_pushinteger(L, s.uc.pid);
	lua_pushinteger(L, (lua_Integer)(int)s.uc.uid);
	lua_pushinteger(L, (lua_Integer)(int)s.uc.gid);
	if (s.pidfd >= 0)
		lua_pushvalue(L, 2);
	else
		lua_pushnil(L);
	lua_pushstring(L, how);
	return 6;
}

/*** Accepts a connection and reads its peer's credentials (SO_PEERCRED).
 * @function socket:accept
 * @treturn[1] socket the connection (non-blocking)
 * @treturn[1] int pid
 * @treturn[1] int uid
 * @treturn[1] int gid
 * @treturn[2] nil, message, errno (EAGAIN: none waiting) */
static int ux_accept(lua_State *L)
{
	struct lunix *u = ux_check(L, 1);
	struct ucred uc;
	socklen_t len = sizeof uc;
	int fd;

	tk_check_nargs(L, 1);
	ux_require(L, u, UX_LISTEN, "accept");
	do
		fd = accept4(u->h.fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	while (fd < 0 && errno == EINTR);
	if (fd < 0)
		return tk_push_error(L, "accept", -errno);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0) {
		int e = -errno;
		close(fd);
		return tk_push_error(L, "accept: SO_PEERCRED", e);
	}
	ux_new(L, fd, UX_STREAM);
	lua_pushinteger(L, uc.pid);
	lua_pushinteger(L, (lua_Integer)(int)uc.uid);
	lua_pushinteger(L, (lua_Integer)(int)uc.gid);
	return 4;
}

/*** Reads what is there, up to max bytes (default 64 KiB, at most 1 MiB).
 * @function socket:read
 * @int[opt] max
 * @treturn[1] string data, "" at end of file
 * @treturn[2] nil, message, errno (EAGAIN: nothing yet) */
static int ux_read(lua_State *L)
{
	struct lunix *u = ux_check(L, 1);
	lua_Integer max = luaL_optinteger(L, 2, 65536);
	luaL_Buffer b;
	ssize_t n;
	char *p;

	tk_check_nargs(L, 2);
	if (u->kind != UX_STREAM)
		luaL_error(L, "read: not a stream (this one is %s)", kind_names[u->kind]);
	if (max < 1 || max > MAX_READ)
		luaL_argerror(L, 2, "1..1048576 bytes expected");
	p = luaL_buffinitsize(L, &b, (size_t)max);
	do
		n = read(u->h.fd, p, (size_t)max);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return tk_push_error(L, "read", -errno);
	luaL_pushresultsize(&b, (size_t)n);
	return 1;
}

/*** Writes what the descriptor takes now, never raising SIGPIPE.
 * @function socket:write
 * @string data
 * @treturn[1] int bytes written (maybe fewer than given)
 * @treturn[2] nil, message, errno (EAGAIN: full; EPIPE: the peer left) */
static int ux_write(lua_State *L)
{
	struct lunix *u = ux_check(L, 1);
	size_t len;
	const char *s = luaL_checklstring(L, 2, &len);
	ssize_t n;

	tk_check_nargs(L, 2);
	if (u->kind != UX_STREAM)
		luaL_error(L, "write: not a stream (this one is %s)", kind_names[u->kind]);
	do
		n = send(u->h.fd, s, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return tk_push_error(L, "write", -errno);
	lua_pushinteger(L, n);
	return 1;
}

/*** What the descriptor is: "datagram socket", "stream socket"...
 * @function socket:kind */
static int ux_kind(lua_State *L)
{
	struct lunix *u = ux_check(L, 1);
	lua_pushstring(L, kind_names[u->kind]);
	return 1;
}

void tk_unix_open_lib(lua_State *L)
{
	static const luaL_Reg methods[] = {
		{ "recv", ux_recv },
		{ "accept", ux_accept },
		{ "read", ux_read },
		{ "write", ux_write },
		{ "add", ux_epoll_add },
		{ "del", ux_epoll_del },
		{ "wait", ux_epoll_wait },
		{ "kind", ux_kind },
		{ NULL, NULL },
	};
	static const luaL_Reg funcs[] = {
		{ "unix_connect", l_unix_connect },
		{ "pipe", l_pipe },
		{ "epoll", l_epoll },
		{ NULL, NULL },
	};

	tk_handle_newclass(L, TK_UNIX_MT, methods, NULL, NULL);
	lua_pop(L, 1);
	luaL_setfuncs(L, funcs, 0);
}
