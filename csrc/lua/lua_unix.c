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
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "binding.h"
#include "epoll_set.h"
#include "fdio.h"
#include "process.h"
#include "unix_socket.h"

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
#define RECV_FDS_MAX 16

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
	tk_unix_close(h->fd, u->drops);
	tk_fd_drops_put(u->drops);
	u->drops = NULL;
}

/* Created closed: a memory error leaves nothing open. */
static struct lunix *ux_new(lua_State *L, enum ux_kind kind)
{
	struct lunix *u = lua_newuserdatauv(L, sizeof *u, 0);
	tk_handle_init(&u->h, kind_names[kind], "r", ux_release);
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

/* The socket path at idx; one that does not fit raises, since it is the
 * caller's to choose a shorter one (108 bytes, NUL included). */
static const char *ux_path(lua_State *L, int idx)
{
	size_t len;
	const char *path = luaL_checklstring(L, idx, &len);

	if (len == 0 || memchr(path, '\0', len))
		luaL_argerror(L, idx, "a socket path without NUL bytes expected");
	if (len >= sizeof((struct sockaddr_un *)NULL)->sun_path)
		luaL_argerror(L, idx, lua_pushfstring(L, "socket path longer than %d bytes",
		              (int)sizeof((struct sockaddr_un *)NULL)->sun_path - 1));
	return path;
}

/* Messages of one socket whose passed descriptors are still closing (each
 * on its thread, fd_drop.c) beyond which it is not read (recv says EBUSY):
 * closes stuck on its senders' files would otherwise fill our descriptor
 * table, and the kernel closes what does not fit in the reader's thread. */
#define DROPS_INFLIGHT_MAX 16

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
	int fd, pidfds;
	struct tk_fd_drops *drops;
	const char *step;
	struct lunix *u;

	u = ux_new(L, dgram ? UX_DGRAM : UX_LISTEN);
	fd = tk_unix_socket_bind(dirfd, dir_path, name, dgram, mode, uid, gid, by_start_time,
	                         &pidfds, &drops, &step);
	if (fd < 0 && strcmp(step, "socket") == 0)
		return tk_push_error(L, dgram ? "notify socket" : "control socket", fd);
	if (fd < 0)
		return tk_push_error(L, lua_pushfstring(L, "%s %s/%s", dgram ? "bind" : "listen",
		                                        dir_path ? dir_path : ".", name), fd);
	u->h.fd = fd;
	u->sender_pidfds = pidfds;
	u->drops = drops;
	return 1;
}

/*** Connects a stream socket to path; the result is non-blocking.
 * @function unix_connect
 * @string path
 * @number[opt] timeout seconds to wait while the listener's accept queue is
 *   full (nil: no bound); then nil, message, ETIMEDOUT
 * @treturn[1] socket
 * @treturn[2] nil, message, errno */
static int l_unix_connect(lua_State *L)
{
	const char *path = ux_path(L, 1), *step;
	int64_t timeout_ms = tk_timeout_check(L, 2);
	struct lunix *u;
	int fd;

	tk_check_nargs(L, 2);
	u = ux_new(L, UX_STREAM);
	fd = tk_unix_connect(path, timeout_ms, &step);
	if (fd < 0 && strcmp(step, "socket") == 0)
		return tk_push_error(L, "connect", fd);
	if (fd < 0)
		return tk_push_error(L, lua_pushfstring(L, "connect %s", path), fd);
	u->h.fd = fd;
	return 1;
}

/* core.pipe() -> read end, write end: spawn's pipe objects (lua_pipe.c),
 * the read end non-blocking for this process, the write end blocking for
 * the child it is handed to (an s6 notification fd). */
static int l_pipe(lua_State *L)
{
	struct tk_handle *r, *w;
	int p[2], e;

	tk_check_nargs(L, 0);
	/* Both objects first, closed: a memory error leaves nothing open. */
	r = tk_pipe_new(L, 0);
	w = tk_pipe_new(L, 1);
	e = tk_pipe_pair(p, 0);
	if (e < 0)
		return tk_push_error(L, "pipe", e);
	r->fd = p[0];
	w->fd = p[1];
	return 2;
}

/*** An epoll set: one descriptor, readable when any member is ready, to
 * hand to cqueues or luv.
 * @function epoll
 * @treturn[1] epoll
 * @treturn[2] nil, message, errno */
static int l_epoll(lua_State *L)
{
	struct lunix *u;
	int fd;

	tk_check_nargs(L, 0);
	u = ux_new(L, UX_EPOLL);
	fd = tk_epoll_open();
	if (fd < 0)
		return tk_push_error(L, "epoll", fd);
	u->h.fd = fd;
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
	int r;

	tk_check_nargs(L, 3);
	ux_require(L, u, UX_EPOLL, "add");
	if (fd < 0 || fd > INT32_MAX)
		luaL_argerror(L, 2, "a descriptor expected");
	r = tk_epoll_add(u->h.fd, (int)fd, lua_toboolean(L, 3));
	if (r < 0)
		return tk_push_error(L, "epoll add", r);
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
	int r;

	tk_check_nargs(L, 2);
	ux_require(L, u, UX_EPOLL, "del");
	if (fd < 0 || fd > INT32_MAX)
		luaL_argerror(L, 2, "a descriptor expected");
	r = tk_epoll_del(u->h.fd, (int)fd);
	if (r < 0)
		return tk_push_error(L, "epoll del", r);
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
	int fds[EPOLL_BATCH];
	int64_t ms;
	int n;

	tk_check_nargs(L, 2);
	ux_require(L, u, UX_EPOLL, "wait");
	ms = tk_timeout_check(L, 2);
	n = tk_epoll_ready(u->h.fd, fds, EPOLL_BATCH, ms);
	if (n < 0)
		return tk_push_error(L, "epoll wait", n);
	lua_createtable(L, n, 0);
	for (int i = 0; i < n; i++) {
		lua_pushinteger(L, fds[i]);
		lua_rawseti(L, -2, i + 1);
	}
	return 1;
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
 * @treturn[2] nil, message, errno (EAGAIN: nothing pending; EMSGSIZE: a
 *   datagram longer than 4,096 bytes, dropped whole; EBUSY: not read
 *   now, as descriptors passed by senders, closed on a thread of their own,
 *   are stuck closing) */
static int ux_recv(lua_State *L)
{
	struct lunix *u = ux_check(L, 1);
	char buf[4096];
	struct tk_unix_sender s;
	const char *how = u->sender_pidfds ? "scm_pidfd" : "start time";
	ssize_t n;

	tk_check_nargs(L, 1);
	ux_require(L, u, UX_DGRAM, "recv");
	if (tk_fd_drops_inflight(u->drops) >= DROPS_INFLIGHT_MAX)
		return tk_push_error(L, "recv: descriptors its senders passed are still being closed", -EBUSY);
	/* The sender's object first: a memory error once it holds a
	 * descriptor would leak it. */
	tk_pidfd_new(L); /* 2 */
	n = tk_unix_recv(u->h.fd, buf, sizeof buf, u->drops, u->sender_pidfds, &s);
	if (n < 0)
		return tk_push_error(L, "recv", (int)n);
	if (s.pidfd >= 0)
		tk_pidfd_fill(L, 2, s.pidfd, s.pid, how);
	lua_pushlstring(L, buf, (size_t)n);
	lua_pushinteger(L, s.pid);
	lua_pushinteger(L, (lua_Integer)(int)s.uid);
	lua_pushinteger(L, (lua_Integer)(int)s.gid);
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
	struct lunix *c;
	const char *step;
	pid_t pid = 0;
	uid_t uid = (uid_t)-1;
	gid_t gid = (gid_t)-1;
	int fd;

	tk_check_nargs(L, 1);
	ux_require(L, u, UX_LISTEN, "accept");
	c = ux_new(L, UX_STREAM);
	fd = tk_unix_accept(u->h.fd, &pid, &uid, &gid, &step);
	if (fd < 0)
		return tk_push_error(L, step, fd);
	c->h.fd = fd;
	lua_pushinteger(L, pid);
	lua_pushinteger(L, (lua_Integer)(int)uid);
	lua_pushinteger(L, (lua_Integer)(int)gid);
	return 4;
}

/*** The connected peer's supplementary groups, as they were when it
 * connected (SO_PEERGROUPS): what a control socket that admits a group
 * checks beside the peer's uid and primary gid.
 * @function socket:peer_groups
 * @treturn[1] {integer,...} gids
 * @treturn[2] nil, message, errno */
static int ux_peer_groups(lua_State *L)
{
	struct lunix *u = ux_check(L, 1);
	gid_t small[64], *groups = small;
	int max = 64, n;

	tk_check_nargs(L, 1);
	ux_require(L, u, UX_STREAM, "peer_groups");
	for (;;) {
		n = tk_unix_peer_groups(u->h.fd, groups, max);
		if (n <= max)
			break;
		if (groups != small)
			free(groups);
		max = n;
		groups = malloc((size_t)max * sizeof *groups);
		if (groups == NULL)
			return tk_push_error(L, "peer_groups", -ENOMEM);
	}
	if (n < 0) {
		if (groups != small)
			free(groups);
		return tk_push_error(L, "peer_groups: SO_PEERGROUPS", n);
	}
	lua_createtable(L, n, 0);
	for (int i = 0; i < n; i++) {
		lua_pushinteger(L, (lua_Integer)groups[i]);
		lua_rawseti(L, -2, i + 1);
	}
	if (groups != small)
		free(groups);
	return 1;
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
	n = tk_fd_read(u->h.fd, p, (size_t)max);
	if (n < 0)
		return tk_push_error(L, "read", (int)n);
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
	n = tk_unix_send(u->h.fd, s, len);
	if (n < 0)
		return tk_push_error(L, "write", (int)n);
	lua_pushinteger(L, n);
	return 1;
}

/*** Writes data with a descriptor attached (SCM_RIGHTS): how a
 * supervisor hands a service's output pipe to its logger. The receiver
 * gets its own descriptor for the same open file; ours stays open.
 * @function socket:send_fd
 * @string data at least one byte (the descriptor travels with the first)
 * @tparam handle obj a takana handle (a pipe, a socket...) whose descriptor is passed
 * @treturn[1] int bytes written (maybe fewer than given)
 * @treturn[2] nil, message, errno (EAGAIN: full; EPIPE: the peer left) */
static int ux_send_fd(lua_State *L)
{
	struct lunix *u = ux_check(L, 1);
	size_t len;
	const char *s = luaL_checklstring(L, 2, &len);
	struct tk_handle *h = tk_handle_test(L, 3);
	ssize_t n;

	tk_check_nargs(L, 3);
	if (u->kind != UX_STREAM)
		luaL_error(L, "send_fd: not a stream (this one is %s)", kind_names[u->kind]);
	if (len == 0)
		luaL_argerror(L, 2, "at least one byte expected");
	if (h == NULL)
		return luaL_typeerror(L, 3, "takana handle");
	if (h->fd < 0)
		return luaL_argerror(L, 3, "attempt to pass a closed handle");
	n = tk_unix_send_fd(u->h.fd, s, len, h->fd);
	if (n < 0)
		return tk_push_error(L, "send_fd", (int)n);
	lua_pushinteger(L, n);
	return 1;
}

/*** Reads what is there, up to max bytes (default 64 KiB, at most 1 MiB),
 * with the descriptors passed along (SCM_RIGHTS) as pipe read ends
 * (non-blocking, close-on-exec; `pipe:read` reads them).
 * @function socket:recv_fds
 * @int[opt] max
 * @treturn[1] string data, "" at end of file
 * @treturn[1] {pipe,...} the descriptors received with it (maybe none)
 * @treturn[2] nil, message, errno (EAGAIN: nothing yet) */
static int ux_recv_fds(lua_State *L)
{
	struct lunix *u = ux_check(L, 1);
	lua_Integer max = luaL_optinteger(L, 2, 65536);
	int fds[TK_SCM_FDS_MAX];
	struct tk_handle *slots[RECV_FDS_MAX];
	size_t nfds = 0;
	luaL_Buffer b;
	ssize_t n;
	char *p;

	tk_check_nargs(L, 2);
	if (u->kind != UX_STREAM)
		luaL_error(L, "recv_fds: not a stream (this one is %s)", kind_names[u->kind]);
	if (max < 1 || max > MAX_READ)
		luaL_argerror(L, 2, "1..1048576 bytes expected");
	lua_settop(L, 2);
	/* Closed pipe objects first, one a descriptor a message may carry: a
	 * memory error once descriptors arrived would leak them. (A stream
	 * read stops after the first message that passed descriptors; more
	 * than RECV_FDS_MAX in it are closed by the kernel, MSG_CTRUNC.) */
	lua_createtable(L, RECV_FDS_MAX, 0); /* 3: the pipes */
	for (int i = 0; i < RECV_FDS_MAX; i++) {
		slots[i] = tk_pipe_new(L, 0);
		lua_rawseti(L, 3, i + 1);
	}
	p = luaL_buffinitsize(L, &b, (size_t)max);
	n = tk_unix_recv_fds(u->h.fd, p, (size_t)max, fds, &nfds);
	if (n < 0)
		return tk_push_error(L, "recv_fds", (int)n);
	for (size_t i = 0; i < nfds; i++) {
		/* Ours non-blocking, for an event loop (the flag is the open
		 * file's: the sender's end was non-blocking already). */
		int fl = fcntl(fds[i], F_GETFL);
		if (fl >= 0)
			(void)fcntl(fds[i], F_SETFL, fl | O_NONBLOCK);
		if (i >= RECV_FDS_MAX) {
			close(fds[i]);
			continue;
		}
		slots[i]->fd = fds[i];
	}
	for (size_t i = nfds < RECV_FDS_MAX ? nfds : RECV_FDS_MAX; i < RECV_FDS_MAX; i++) {
		lua_pushnil(L);
		lua_rawseti(L, 3, (lua_Integer)i + 1);
	}
	luaL_pushresultsize(&b, (size_t)n); /* the buffer's slot sits above 3 */
	if (nfds > 0)
		tk_handle_opened(L, fds[nfds - 1]);
	lua_pushvalue(L, 3);
	return 2;
}

/*** The connected peer's credentials (SO_PEERCRED): of who connected, on
 * an accepted socket; of who listened, on a connected one.
 * @function socket:peer
 * @treturn[1] int pid
 * @treturn[1] int uid
 * @treturn[1] int gid
 * @treturn[2] nil, message, errno */
static int ux_peer(lua_State *L)
{
	struct lunix *u = ux_check(L, 1);
	pid_t pid = 0;
	uid_t uid = (uid_t)-1;
	gid_t gid = (gid_t)-1;
	int r;

	tk_check_nargs(L, 1);
	ux_require(L, u, UX_STREAM, "peer");
	r = tk_unix_peer_cred(u->h.fd, &pid, &uid, &gid);
	if (r < 0)
		return tk_push_error(L, "peer: SO_PEERCRED", r);
	lua_pushinteger(L, pid);
	lua_pushinteger(L, (lua_Integer)(int)uid);
	lua_pushinteger(L, (lua_Integer)(int)gid);
	return 3;
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
		{ "peer_groups", ux_peer_groups },
		{ "read", ux_read },
		{ "write", ux_write },
		{ "send_fd", ux_send_fd },
		{ "recv_fds", ux_recv_fds },
		{ "peer", ux_peer },
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
