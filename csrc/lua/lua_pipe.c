/* Pipe objects: a spawned child's stdin, stdout or stderr with
 * stdin/stdout/stderr = "pipe". Our end is non-blocking, so an event loop
 * (takana.poll, cqueues, luv) never stalls on a child that writes slowly or
 * reads nothing; read_all and read_line are the blocking conveniences,
 * with a timeout. Conventions (doc/reference.md has them too):
 *   read([max])  a string of what is there now (up to max, 64 KiB), "" when
 *                nothing is there yet, nil at end of file, or nil, msg,
 *                errno on an error;
 *   lines()      iterates over the complete lines there now; a partial
 *                last line stays buffered until its end arrives or EOF;
 *   write(s)     bytes written (maybe fewer than #s), or nil, msg, EAGAIN
 *                when the pipe is full; never SIGPIPE. */
/***
 * Pipe objects of spawned children, from C.
 * @module takana
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "binding.h"
#include "clock.h"
#include "fdio.h"
#include "process.h"
#include "util.h"
#include "wait.h"

#define PIPE_CHUNK ((size_t)64 * 1024)
#define PIPE_READ_MAX ((lua_Integer)TK_BYTES_MAX)

struct lpipe {
	struct tk_handle h;  /* first: the handle base (lua_handle.c) */
	int writable;        /* our end is the write end (a child's stdin) */
	int eof;             /* read(2) returned 0 */
	char *buf;           /* read from the pipe, not yet returned */
	size_t len, cap;
};

static void pipe_release(lua_State *L, struct tk_handle *h)
{
	struct lpipe *p = (struct lpipe *)h;

	(void)L;
	close(h->fd);
	free(p->buf);
	p->buf = NULL;
	p->len = p->cap = 0;
}

struct tk_handle *tk_pipe_new(lua_State *L, int writable)
{
	struct lpipe *p = lua_newuserdatauv(L, sizeof *p, 0);

	memset(p, 0, sizeof *p);
	tk_handle_init(&p->h, "pipe", writable ? "w" : "r", pipe_release);
	p->writable = writable;
	luaL_setmetatable(L, TK_PIPE_MT);
	return &p->h;
}

static struct lpipe *pipe_check(lua_State *L, int idx, int want_writable)
{
	struct lpipe *p = (struct lpipe *)tk_handle_check(L, idx, TK_PIPE_MT);

	if (p->writable != want_writable)
		luaL_error(L, want_writable ? "attempt to write to the read end of a pipe (a child's "
		                              "stdout or stderr)"
		                            : "attempt to read from the write end of a pipe (a child's stdin)");
	return p;
}

/* One read(2) of up to want bytes appended to the buffer: bytes read, 0 at
 * end of file, or -errno (-EAGAIN: nothing there now). */
static ssize_t pipe_fill(struct lpipe *p, size_t want)
{
	ssize_t n;

	if (p->cap - p->len < want) {
		char *b = tk_grow(p->buf, &p->cap, p->len + want, 1, PIPE_CHUNK);
		if (b == NULL)
			return -ENOMEM;
		p->buf = b;
	}
	n = tk_fd_read(p->h.fd, p->buf + p->len, want);
	if (n < 0)
		return n;
	if (n == 0)
		p->eof = 1;
	p->len += (size_t)n;
	return n;
}

/* Pushes the first n buffered bytes and drops them (and skip more). */
static void buf_take(lua_State *L, struct lpipe *p, size_t n, size_t skip)
{
	lua_pushlstring(L, p->buf, n);
	/* Nothing was ever buffered (buf still NULL): nothing to move. */
	if (p->len > 0)
		memmove(p->buf, p->buf + n + skip, p->len - n - skip);
	p->len -= n + skip;
}

/*** Reads what the child has written so far, without blocking.
 * @function pipe:read
 * @tparam[opt=65536] int|string max bytes at most (1..2^30), or "a"/"l"
 * @treturn[1] string what is there now; "" when nothing is there yet (poll
 *   the pipe, then read again)
 * @treturn[2] nil at end of file (the child closed its end and all was read)
 * @treturn[3] nil, "read: message", errno */
static int pipe_read_line(lua_State *L);
static int pipe_read_all(lua_State *L);

static int pipe_read(lua_State *L)
{
	struct lpipe *p = pipe_check(L, 1, 0);
	lua_Integer max;
	luaL_Buffer b;
	ssize_t n;
	char *out;

	/* io's formats, for scripts written when this was a FILE*: the
	 * blocking forms, spelled out. */
	if (lua_type(L, 2) == LUA_TSTRING) {
		const char *fmt = lua_tostring(L, 2);
		tk_check_nargs(L, 2);
		if (*fmt == '*')
			fmt++;
		if (strcmp(fmt, "a") == 0 || strcmp(fmt, "l") == 0) {
			lua_settop(L, 1);
			return *fmt == 'a' ? pipe_read_all(L) : pipe_read_line(L);
		}
		return luaL_argerror(L, 2, "max bytes, \"a\" or \"l\" expected");
	}
	max = luaL_optinteger(L, 2, (lua_Integer)PIPE_CHUNK);
	luaL_argcheck(L, max >= 1 && max <= PIPE_READ_MAX, 2, "max must be 1..2^30 bytes");
	tk_check_nargs(L, 2);
	if (p->len > 0) {
		buf_take(L, p, p->len < (size_t)max ? p->len : (size_t)max, 0);
		return 1;
	}
	if (p->eof) {
		lua_pushnil(L);
		return 1;
	}
	out = luaL_buffinitsize(L, &b, (size_t)max);
	n = tk_fd_read(p->h.fd, out, (size_t)max);
	if (n == -EAGAIN) {
		lua_pushliteral(L, "");
		return 1;
	}
	if (n < 0)
		return tk_push_error(L, "read", (int)n);
	if (n == 0) {
		p->eof = 1;
		lua_pushnil(L);
		return 1;
	}
	luaL_pushresultsize(&b, (size_t)n);
	return 1;
}

enum line_result { LINE_PUSHED, LINE_AGAIN, LINE_END };

/* The next line (without its "\n") from the buffer, reading the pipe as
 * long as it has data and no line is complete. A line longer than maxlen
 * comes in pieces of maxlen, so a child that never writes a newline cannot
 * grow the buffer without bound. At end of file the partial last line is
 * a line. *err is set (and LINE_END returned) on a read error. */
static enum line_result line_next(lua_State *L, struct lpipe *p, size_t maxlen, int *err)
{
	size_t scanned = 0;

	*err = 0;
	for (;;) {
		char *nl = p->len > scanned ? memchr(p->buf + scanned, '\n', p->len - scanned) : NULL;
		ssize_t n;
		if (nl != NULL && (size_t)(nl - p->buf) <= maxlen) {
			buf_take(L, p, (size_t)(nl - p->buf), 1);
			return LINE_PUSHED;
		}
		if (p->len >= maxlen) {
			buf_take(L, p, maxlen, 0);
			return LINE_PUSHED;
		}
		if (p->eof) {
			if (p->len == 0)
				return LINE_END;
			buf_take(L, p, p->len, 0);
			return LINE_PUSHED;
		}
		scanned = p->len;
		n = pipe_fill(p, PIPE_CHUNK);
		if (n == -EAGAIN)
			return LINE_AGAIN;
		if (n < 0) {
			*err = (int)-n;
			return LINE_END;
		}
	}
}

/* upvalues: the pipe, maxlen */
static int lines_iter(lua_State *L)
{
	struct lpipe *p = pipe_check(L, lua_upvalueindex(1), 0);
	int err;

	if (line_next(L, p, (size_t)lua_tointeger(L, lua_upvalueindex(2)), &err) == LINE_PUSHED)
		return 1;
	if (err != 0)
		return luaL_error(L, "lines: read: %s", strerror(err));
	lua_pushnil(L);
	return 1;
}

/*** Iterates over the complete lines there now, without blocking; a
 * partial last line stays buffered until its newline arrives (or EOF,
 * which makes it a line). The loop ends when no complete line is left:
 * poll and iterate again; `pipe:eof()` says whether more can come.
 * @function pipe:lines
 * @int[opt=65536] maxlen a longer line comes in pieces of maxlen bytes
 * @treturn function iterator giving lines without "\n"; raises on a read error */
static int pipe_lines(lua_State *L)
{
	lua_Integer maxlen = luaL_optinteger(L, 2, (lua_Integer)PIPE_CHUNK);

	pipe_check(L, 1, 0);
	luaL_argcheck(L, maxlen >= 1 && maxlen <= PIPE_READ_MAX, 2, "maxlen must be 1..2^30 bytes");
	tk_check_nargs(L, 2);
	lua_settop(L, 2);
	lua_pushinteger(L, maxlen);
	lua_replace(L, 2);
	lua_pushcclosure(L, lines_iter, 2);
	return 1;
}

/* Waits until the pipe is readable or the deadline passes: 1, 0 at the
 * deadline, or -errno. */
static int pipe_wait(struct lpipe *p, int64_t deadline)
{
	int r = tk_wait_fd(p->h.fd, POLLIN, deadline);

	return r > 0 ? 1 : r;
}

static int timeout_error(lua_State *L, const char *what, int64_t timeout_ms)
{
	char secs[32];

	snprintf(secs, sizeof secs, "%g", (double)timeout_ms / 1000.0);
	lua_pushnil(L);
	lua_pushfstring(L, "%s: nothing more after %s s (what was read stays buffered: "
	                "call again)", what, secs);
	lua_pushinteger(L, ETIMEDOUT);
	return 3;
}

/*** Blocks until the next complete line (or end of file) arrives.
 * @function pipe:read_line
 * @number[opt] timeout seconds (0..1 year); nil waits forever
 * @treturn[1] string the line without "\n" (at EOF, the partial last line)
 * @treturn[2] nil at end of file
 * @treturn[3] nil, message, errno (ETIMEDOUT: the partial line stays buffered) */
static int pipe_read_line(lua_State *L)
{
	struct lpipe *p = pipe_check(L, 1, 0);
	int64_t timeout = tk_timeout_check(L, 2);
	int64_t deadline = tk_deadline_ms(timeout);

	tk_check_nargs(L, 2);
	for (;;) {
		int err, r;
		enum line_result lr = line_next(L, p, (size_t)PIPE_READ_MAX, &err);
		if (lr == LINE_PUSHED)
			return 1;
		if (err != 0)
			return tk_push_error(L, "read_line", -err);
		if (lr == LINE_END) {
			lua_pushnil(L);
			return 1;
		}
		r = pipe_wait(p, deadline);
		if (r < 0)
			return tk_push_error(L, "read_line: poll", r);
		if (r == 0)
			return timeout_error(L, "read_line", timeout);
	}
}

/*** Blocks until end of file and returns everything not read yet.
 * @function pipe:read_all
 * @number[opt] timeout seconds (0..1 year); nil waits forever
 * @treturn[1] string (empty when all was read before)
 * @treturn[2] nil, message, errno (ETIMEDOUT: what came stays buffered) */
static int pipe_read_all(lua_State *L)
{
	struct lpipe *p = pipe_check(L, 1, 0);
	int64_t timeout = tk_timeout_check(L, 2);
	int64_t deadline = tk_deadline_ms(timeout);

	tk_check_nargs(L, 2);
	while (!p->eof) {
		ssize_t n = pipe_fill(p, PIPE_CHUNK);
		int r;
		if (n >= 0)
			continue;
		if (n != -EAGAIN)
			return tk_push_error(L, "read_all", (int)n);
		r = pipe_wait(p, deadline);
		if (r < 0)
			return tk_push_error(L, "read_all: poll", r);
		if (r == 0)
			return timeout_error(L, "read_all", timeout);
	}
	buf_take(L, p, p->len, 0);
	return 1;
}

/*** Whether the end was reached: the child closed its end and every byte
 * was returned. Before that, "" from read() means "not yet".
 * @function pipe:eof */
static int pipe_eof(lua_State *L)
{
	struct lpipe *p = pipe_check(L, 1, 0);

	tk_check_nargs(L, 1);
	lua_pushboolean(L, p->eof && p->len == 0);
	return 1;
}

/*** Writes without blocking: as much of s as fits now.
 * @function pipe:write
 * @string s
 * @treturn[1] int bytes written (1..#s; 0 for "")
 * @treturn[2] nil, "write: pipe full ...", EAGAIN (poll for writable: events() is "w")
 * @treturn[3] nil, "write: Broken pipe", EPIPE once the child closed its end */
static int pipe_write(lua_State *L)
{
	struct lpipe *p = pipe_check(L, 1, 1);
	size_t len;
	const char *s = luaL_checklstring(L, 2, &len);
	ssize_t n;

	tk_check_nargs(L, 2);
	if (len == 0) {
		lua_pushinteger(L, 0);
		return 1;
	}
	n = tk_fd_write_nosigpipe(p->h.fd, s, len);
	if (n == -EAGAIN) {
		lua_pushnil(L);
		lua_pushliteral(L, "write: pipe full (wait until it is writable: takana.poll, or "
		                   "events() 'w' in cqueues, then write the rest)");
		lua_pushinteger(L, EAGAIN);
		return 3;
	}
	if (n < 0)
		return tk_push_error(L, "write", (int)n);
	lua_pushinteger(L, (lua_Integer)n);
	return 1;
}

void tk_pipe_open_lib(lua_State *L)
{
	static const luaL_Reg methods[] = {
		{ "read", pipe_read },
		{ "lines", pipe_lines },
		{ "read_line", pipe_read_line },
		{ "read_all", pipe_read_all },
		{ "eof", pipe_eof },
		{ "write", pipe_write },
		{ NULL, NULL },
	};

	tk_handle_newclass(L, TK_PIPE_MT, methods, NULL, NULL);
	lua_pop(L, 1);
}
