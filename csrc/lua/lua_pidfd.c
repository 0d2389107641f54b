/* Lua binding of pidfds and poll. A spawned child (lua_spawn.c) is a pidfd
 * object whose user value holds its pipe objects (lua_pipe.c); they are
 * owners of their own, so closing the child does not close them. */

/***
 * pidfds, from C.
 * @module takana
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdint.h>

#include "binding.h"
#include "clock.h"
#include "epoll_set.h"
#include "process.h"

struct lpidfd {
	struct tk_pidfd_obj o; /* first: the handle base and what process objects share */
	const char *mechanism;
};

static struct lpidfd *pidfd_check(lua_State *L, int idx)
{
	return (struct lpidfd *)tk_handle_check(L, idx, TK_PIDFD_MT);
}

/* A pidfd's failure: "ctx: strerror", as tk_push_error words it. */
static int pidfd_fail(lua_State *L, const struct tk_pidfd_obj *o, const char *what, int err)
{
	(void)o;
	return tk_push_error(L, what, err);
}

/* Created closed, then filled: an allocation failure leaves nothing open. */
static struct lpidfd *pidfd_new(lua_State *L);

void tk_pidfd_new(lua_State *L)
{
	pidfd_new(L);
}

void tk_pidfd_fill(lua_State *L, int idx, int fd, pid_t pid, const char *mechanism)
{
	struct lpidfd *p = luaL_checkudata(L, idx, TK_PIDFD_MT);

	p->o.h.fd = fd;
	p->o.pid = pid;
	p->mechanism = mechanism;
	tk_handle_opened(L, fd);
}

static struct lpidfd *pidfd_new(lua_State *L)
{
	struct lpidfd *p = lua_newuserdatauv(L, sizeof *p, 1);
	memset(p, 0, sizeof *p);
	tk_handle_init(&p->o.h, "pidfd", "r", NULL);
	p->o.fail = pidfd_fail;
	luaL_setmetatable(L, TK_PIDFD_MT);
	return p;
}

/* Opens a pidfd on a process.
 * @function pidfd
 * @int pid
 * @treturn[1] pidfd
 * @treturn[2] nil
 * @treturn[2] string "pidfd PID: No such process"
 * @treturn[2] int errno (ESRCH gone, EINVAL a thread id before Linux 6.9)
 * (pidfd_open(2)) */
static int l_pidfd(lua_State *L)
{
	lua_Integer pid = luaL_checkinteger(L, 1);
	struct lpidfd *p;
	int fd;

	tk_check_nargs(L, 1);
	luaL_argcheck(L, pid > 0 && pid <= INT32_MAX, 1, "pid out of range");
	p = pidfd_new(L);
	fd = tk_pidfd_open((pid_t)pid);
	if (fd < 0) {
		char ctx[32];
		snprintf(ctx, sizeof ctx, "pidfd %d", (int)pid);
		return tk_push_error(L, ctx, fd);
	}
	p->o.h.fd = fd;
	p->o.pid = (pid_t)pid;
	p->mechanism = "pidfd_open";
	tk_handle_opened(L, fd);
	return 1;
}

/*** Sends a signal through the pidfd: never to a process that reused the pid.
 * @function pidfd:signal
 * @tparam int|string sig number or name ("TERM", "SIGKILL"); 0 checks
 * @treturn[1] true
 * @treturn[2] nil, message, errno (ESRCH once the process is gone) */
static int pidfd_signal(lua_State *L)
{
	return tk_pidfd_obj_signal(L, &pidfd_check(L, 1)->o);
}

int tk_pidfd_obj_signal(lua_State *L, struct tk_pidfd_obj *o)
{
	int sig = tk_signal_check(L, 2);
	int r;

	tk_check_nargs(L, 2);
	r = tk_pidfd_signal(o->h.fd, sig);
	if (r < 0)
		return o->fail(L, o, "signal", r);
	lua_pushboolean(L, 1);
	return 1;
}

/*** Whether the process is still running (false once it has exited, even
 * before it is reaped).
 * @function pidfd:alive */
static int pidfd_alive(lua_State *L)
{
	return tk_pidfd_obj_alive(L, &pidfd_check(L, 1)->o);
}

int tk_pidfd_obj_alive(lua_State *L, struct tk_pidfd_obj *o)
{
	int r;

	tk_check_nargs(L, 1);
	r = tk_pidfd_alive(o->h.fd);
	if (r < 0)
		return o->fail(L, o, "alive", r);
	lua_pushboolean(L, r);
	return 1;
}

/* The exit record of pidfd:wait() and process:wait(), one row a field:
 * exit_push fills them, core.exit_fields exports them (the supervisor's
 * exit record and the docs, tools/docgen.lua, take them from there). */
#define TK_EXIT_FIELDS(X) \
	X(exited, "true when the process exited (then `code`)") \
	X(code, "its exit status (0-255), when it exited") \
	X(signaled, "true when a signal ended it (then `signal` and `core`)") \
	X(signal, "the number of the signal that ended it") \
	X(core, "true when it dumped core, when a signal ended it")

#define EXIT_FIELD_ROW(name, doc) { #name, doc },
static const struct {
	const char *name, *doc;
} exit_fields[] = { TK_EXIT_FIELDS(EXIT_FIELD_ROW) };

static void exit_push(lua_State *L, const struct tk_exit *e)
{
#define EXIT_FIELD_SET(field) (lua_setfield(L, -2, exit_fields[EXIT_##field].name))
	enum {
#define EXIT_FIELD_ENUM(name, doc) EXIT_##name,
		TK_EXIT_FIELDS(EXIT_FIELD_ENUM)
	};

	lua_createtable(L, 0, 3);
	if (e->signaled) {
		lua_pushboolean(L, 1);
		EXIT_FIELD_SET(signaled);
		lua_pushinteger(L, e->code);
		EXIT_FIELD_SET(signal);
		lua_pushboolean(L, e->core);
		EXIT_FIELD_SET(core);
	} else {
		lua_pushboolean(L, 1);
		EXIT_FIELD_SET(exited);
		lua_pushinteger(L, e->code);
		EXIT_FIELD_SET(code);
	}
#undef EXIT_FIELD_SET
}

/* core.exit_fields: {{name=, doc=}...}, the exit record's fields in order. */
static void exit_fields_push(lua_State *L)
{
	lua_createtable(L, (int)(sizeof exit_fields / sizeof exit_fields[0]), 0);
	for (size_t i = 0; i < sizeof exit_fields / sizeof exit_fields[0]; i++) {
		lua_createtable(L, 0, 2);
		lua_pushstring(L, exit_fields[i].name);
		lua_setfield(L, -2, "name");
		lua_pushstring(L, exit_fields[i].doc);
		lua_setfield(L, -2, "doc");
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
}

/*** Waits for a child to exit and reaps it. The exit record's fields
 * (core.exit_fields):
 *
 * <!-- schema:wait-record -->
 * - `exited` true when the process exited (then `code`)
 * - `code` its exit status (0-255), when it exited
 * - `signaled` true when a signal ended it (then `signal` and `core`)
 * - `signal` the number of the signal that ended it
 * - `core` true when it dumped core, when a signal ended it
 * <!-- /schema:wait-record -->
 *
 * @function pidfd:wait
 * @number[opt] timeout seconds (0..1 year); nil waits forever
 * @treturn[1] table `{exited=true, code=n}` or `{signaled=true, signal=n, core=bool}`;
 *   the same table again on later calls
 * @treturn[2] nil, "wait: process PID still running after T s", ETIMEDOUT
 * @treturn[3] nil, message, errno (ECHILD: not a child of this process)
 * (waitid(2) on the pidfd) */
static int pidfd_wait(lua_State *L)
{
	return tk_pidfd_obj_wait(L, &pidfd_check(L, 1)->o);
}

/* Reaps once into o->status, then returns the same table on every call. */
int tk_pidfd_obj_wait(lua_State *L, struct tk_pidfd_obj *o)
{
	int64_t timeout = tk_timeout_check(L, 2);
	int r;

	tk_check_nargs(L, 2);
	if (!o->reaped) {
		r = tk_pidfd_wait(o->h.fd, timeout, &o->status);
		if (r == -ETIMEDOUT) {
			char secs[32];
			snprintf(secs, sizeof secs, "%g", (double)timeout / 1000.0);
			lua_pushnil(L);
			lua_pushfstring(L, "wait: process %d still running after %s s (wait again, "
			                "or signal it)", (int)o->pid, secs);
			lua_pushinteger(L, ETIMEDOUT);
			return 3;
		}
		if (r == -ECHILD) {
			lua_pushnil(L);
			lua_pushfstring(L, "wait: process %d is not a child of this process", (int)o->pid);
			lua_pushinteger(L, ECHILD);
			return 3;
		}
		if (r < 0)
			return tk_push_error(L, "wait", r);
		o->reaped = 1;
	}
	exit_push(L, &o->status);
	return 1;
}

/*** What the reaped child used, from the reaping waitid's rusage: its own
 * CPU and peak RSS, with those of the descendants it reaped itself.
 * @function pidfd:usage
 * @treturn[1] table `{utime_ns=, stime_ns=, maxrss_bytes=}`
 * @treturn[2] nil before `wait` has reaped it */
static int pidfd_usage(lua_State *L)
{
	struct lpidfd *p = luaL_checkudata(L, 1, TK_PIDFD_MT);

	tk_check_nargs(L, 1);
	if (!p->o.reaped) {
		lua_pushnil(L);
		return 1;
	}
	lua_createtable(L, 0, 3);
	lua_pushinteger(L, tk_u64_int(p->o.status.utime_ns));
	lua_setfield(L, -2, "utime_ns");
	lua_pushinteger(L, tk_u64_int(p->o.status.stime_ns));
	lua_setfield(L, -2, "stime_ns");
	lua_pushinteger(L, tk_u64_int(p->o.status.maxrss_bytes));
	lua_setfield(L, -2, "maxrss_bytes");
	return 1;
}

static int pidfd_tostring(lua_State *L)
{
	struct lpidfd *p = luaL_checkudata(L, 1, TK_PIDFD_MT);
	if (p->o.h.fd < 0)
		lua_pushfstring(L, "takana.Pidfd (pid %d, closed)", (int)p->o.pid);
	else
		lua_pushfstring(L, "takana.Pidfd (pid %d, fd %d)", (int)p->o.pid, p->o.h.fd);
	return 1;
}

/* upvalue 1: methods. Fields: pid, mechanism, then the user value's
 * stdin/stdout/stderr. */
static int pidfd_index(lua_State *L)
{
	struct lpidfd *p = luaL_checkudata(L, 1, TK_PIDFD_MT);

	if (lua_type(L, 2) == LUA_TSTRING) {
		const char *key = lua_tostring(L, 2);
		if (strcmp(key, "pid") == 0) {
			lua_pushinteger(L, p->o.pid);
			return 1;
		}
		if (strcmp(key, "mechanism") == 0) {
			lua_pushstring(L, p->mechanism);
			return 1;
		}
	}
	lua_pushvalue(L, 2);
	if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL)
		return 1;
	if (lua_getiuservalue(L, 1, 1) == LUA_TTABLE) {
		lua_pushvalue(L, 2);
		lua_rawget(L, -2);
		return 1;
	}
	lua_pushnil(L);
	return 1;
}

/* ---- poll ------------------------------------------------------------------ */

/* core.poll_fds({fd...}, timeout_s[, {pri...}]) -> {index...} of the ready
 * ones: readable, or with pri[i] true, priority-readable (cgroup.events),
 * or with pri[i] "w", writable (a stdin pipe). */
static int l_poll_fds(lua_State *L)
{
	lua_Integer n;
	int64_t timeout;
	int *fds, ready;
	enum tk_poll_want *want;
	unsigned char *hit;
	const char *step;
	size_t m;

	luaL_checktype(L, 1, LUA_TTABLE);
	timeout = tk_timeout_check(L, 2);
	if (!lua_isnoneornil(L, 3))
		luaL_checktype(L, 3, LUA_TTABLE);
	tk_check_nargs(L, 3);
	n = (lua_Integer)lua_rawlen(L, 1);
	m = (size_t)(n > 0 ? n : 1);
	/* Scratch held by Lua: a raise below leaks nothing. */
	fds = lua_newuserdatauv(L, m * (sizeof *fds + sizeof *want + sizeof *hit), 0);
	want = (enum tk_poll_want *)(void *)(fds + m);
	hit = (unsigned char *)(want + m);
	for (lua_Integer i = 1; i <= n; i++) {
		want[i - 1] = TK_POLL_IN;
		if (lua_istable(L, 3)) {
			int t = lua_rawgeti(L, 3, i);
			if (t == LUA_TSTRING && strcmp(lua_tostring(L, -1), "w") == 0)
				want[i - 1] = TK_POLL_OUT;
			else if (t != LUA_TNIL && lua_toboolean(L, -1))
				want[i - 1] = TK_POLL_PRI;
			lua_pop(L, 1);
		}
		lua_rawgeti(L, 1, i);
		fds[i - 1] = (int)lua_tointeger(L, -1);
		lua_pop(L, 1);
	}
	/* A kept set, borrowed and left empty: making and closing one per
	 * call was most of a wakeup's cost (issue 26). */
	ready = tk_poll_fds(tk_poller_shared_fd(L), fds, want, (size_t)(n > 0 ? n : 0), timeout, hit,
	                    &step);
	if (ready < 0)
		return tk_push_error(L, lua_pushfstring(L, "poll: %s", step), ready);
	lua_createtable(L, ready, 0);
	for (lua_Integer i = 1, k = 0; i <= n; i++) {
		if (hit[i - 1]) {
			lua_pushinteger(L, i);
			lua_rawseti(L, -2, ++k);
		}
	}
	return 1;
}

void tk_pidfd_open_lib(lua_State *L)
{
	static const luaL_Reg methods[] = {
		{ "signal", pidfd_signal },
		{ "alive", pidfd_alive },
		{ "wait", pidfd_wait },
		{ "usage", pidfd_usage },
		{ NULL, NULL },
	};
	static const luaL_Reg funcs[] = {
		{ "pidfd", l_pidfd },
		{ "poll_fds", l_poll_fds },
		{ NULL, NULL },
	};

	tk_handle_newclass(L, TK_PIDFD_MT, methods, pidfd_index, pidfd_tostring);
	lua_pop(L, 1);
	luaL_setfuncs(L, funcs, 0);
	exit_fields_push(L);
	lua_setfield(L, -2, "exit_fields");
}
