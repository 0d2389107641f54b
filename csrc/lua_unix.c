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
#include <unistd.h>

#include "binding.h"

enum ux_kind { UX_DGRAM, UX_LISTEN, UX_STREAM, UX_EPOLL };

static const char *const kind_names[] = { "datagram socket", "listening socket", "stream socket",
	                                   "epoll set" };

struct lunix {
	struct tk_handle h; /* first: the handle base */
	enum ux_kind kind;
};

#define MAX_READ (1 << 20)
#define EPOLL_BATCH 64

static struct lunix *ux_check(lua_State *L, int idx)
{
	return (struct lunix *)tk_handle_check(L, idx, TK_UNIX_MT);
}

static struct lunix *ux_new(lua_State *L, int fd, enum ux_kind kind)
{
	struct lunix *u = lua_newuserdatauv(L, sizeof *u, 0);
	tk_handle_init(&u->h, kind_names[kind], "r", NULL);
	u->h.fd = fd;
	u->kind = kind;
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

static mode_t ux_mode(lua_State *L, int idx, mode_t dflt)
{
	lua_Integer m = luaL_optinteger(L, idx, dflt);
	if (m < 0 || m > 0777)
		luaL_argerror(L, idx, "a permission mode 0..0777 expected");
	return (mode_t)m;
}

/* Binds with a umask that leaves nothing wider than `mode`, so the socket
 * is never reachable with looser permissions, even for a moment. */
static int bind_mode(int fd, const struct sockaddr_un *sa, socklen_t len, mode_t mode)
{
	mode_t old = umask((mode_t)(~mode & 0777));
	int r = bind(fd, (const struct sockaddr *)sa, len);
	int e = errno;
	umask(old);
	if (r < 0)
		return -e;
	if (chmod(sa->sun_path, mode) < 0)
		return -errno;
	return 0;
}

/* A socket of kind UX_DGRAM or UX_LISTEN bound at the path of argument 1
 * with the mode of argument 2; pushes it, or nil, msg, errno. */
static int ux_bound(lua_State *L, enum ux_kind kind, mode_t default_mode)
{
	struct sockaddr_un sa;
	socklen_t len = ux_addr(L, 1, &sa);
	mode_t mode = ux_mode(L, 2, default_mode);
	int dgram = kind == UX_DGRAM, one = 1, fd, r;

	tk_check_nargs(L, 2);
	fd = socket(AF_UNIX, (dgram ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return tk_push_error(L, dgram ? "notify socket" : "control socket", -errno);
	if (dgram && setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) < 0) {
		r = -errno;
		close(fd);
		return tk_push_error(L, "notify socket: SO_PASSCRED", r);
	}
	r = bind_mode(fd, &sa, len, mode);
	if (r == 0 && !dgram && listen(fd, 64) < 0)
		r = -errno;
	if (r < 0) {
		close(fd);
		return tk_push_error(L, lua_pushfstring(L, "%s %s", dgram ? "bind" : "listen",
		                                        sa.sun_path), r);
	}
	ux_new(L, fd, kind);
	return 1;
}

/*** A datagram socket bound at path, with SO_PASSCRED: each datagram
 * carries its sender's pid, uid and gid (sd_notify's NOTIFY_SOCKET).
 * @function unix_dgram
 * @string path where to bind (must not exist)
 * @int[opt=0666] mode permissions of the socket file
 * @treturn[1] socket
 * @treturn[2] nil, message, errno */
static int l_unix_dgram(lua_State *L)
{
	return ux_bound(L, UX_DGRAM, 0666);
}

/*** A listening stream socket at path (mode 0600 by default).
 * @function unix_listen
 * @string path
 * @int[opt=0600] mode
 * @treturn[1] socket
 * @treturn[2] nil, message, errno */
static int l_unix_listen(lua_State *L)
{
	return ux_bound(L, UX_LISTEN, 0600);
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

/* The credentials of one SCM_CREDENTIALS message, or zeros. */
static void push_creds(lua_State *L, struct msghdr *mh)
{
	struct ucred uc = { 0, (uid_t)-1, (gid_t)-1 };

	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
		    c->cmsg_len >= CMSG_LEN(sizeof uc))
			memcpy(&uc, CMSG_DATA(c), sizeof uc);
		else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			/* Descriptors nobody asked for would leak: close them. */
			size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < n; i++) {
				int fd;
				memcpy(&fd, CMSG_DATA(c) + i * sizeof fd, sizeof fd);
				close(fd);
			}
		}
	}
	lua_pushinteger(L, uc.pid);
	lua_pushinteger(L, (lua_Integer)(int)uc.uid);
	lua_pushinteger(L, (lua_Integer)(int)uc.gid);
}

/*** Reads one datagram with its sender's credentials.
 * @function socket:recv
 * @treturn[1] string data
 * @treturn[1] int sender pid
 * @treturn[1] int uid
 * @treturn[1] int gid
 * @treturn[2] nil, message, errno (EAGAIN: nothing pending) */
static int ux_recv(lua_State *L)
{
	struct lunix *u = ux_check(L, 1);
	char buf[4096];
	union {
		char b[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(16 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { buf, sizeof buf };
	struct msghdr mh;
	ssize_t n;

	tk_check_nargs(L, 1);
	ux_require(L, u, UX_DGRAM, "recv");
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
	lua_pushlstring(L, buf, (size_t)n);
	push_creds(L, &mh);
	return 4;
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

void tk_unix_open(lua_State *L)
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
		{ "unix_dgram", l_unix_dgram },
		{ "unix_listen", l_unix_listen },
		{ "unix_connect", l_unix_connect },
		{ "pipe", l_pipe },
		{ "epoll", l_epoll },
		{ NULL, NULL },
	};

	tk_handle_newclass(L, TK_UNIX_MT, methods, NULL, NULL);
	lua_pop(L, 1);
	luaL_setfuncs(L, funcs, 0);
}
