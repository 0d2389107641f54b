/* Lua binding of pressure stall information: takana.pressure and
 * cg:pressure (the core reads and parses), takana.pressure_trigger and
 * cg:pressure_trigger (the kernel's PSI triggers, as handle objects). */

/***
 * Pressure stall information (PSI), from C.
 * @module takana
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <string.h>

#include "binding.h"
#include "clock.h"
#include "pressure.h"

struct ltrigger {
	struct tk_handle h;   /* first: the shared close/poll protocol */
};

/* The resource named by s (len bytes), spelled exactly (no prefix, no
 * NUL inside), or -1. */
static int resource_find(const char *s, size_t len)
{
	for (int r = 0; r < TK_PRESSURE_COUNT; r++)
		if (strlen(tk_pressure_name(r)) == len && memcmp(s, tk_pressure_name(r), len) == 0)
			return r;
	return -1;
}

#define RESOURCES "\"cpu\", \"memory\" or \"io\""

/* The resource at idx; raises on anything else. */
static int resource_check(lua_State *L, int idx)
{
	size_t len;
	const char *s = luaL_checklstring(L, idx, &len);
	int r = resource_find(s, len);

	if (r < 0)
		luaL_argerror(L, idx, lua_pushfstring(L, "resource must be " RESOURCES ", got \"%s\"", s));
	return r;
}

/* The cgroup handle at 1: its directory fd; raises when closed. */
static int cgroup_dirfd(lua_State *L)
{
	return tk_handle_check(L, 1, TK_CGROUP_MT)->fd;
}

/* Pushes "pressure: /proc/pressure/<r>" or "cgroup <path>: <r>.pressure":
 * the file an error message names. */
static const char *where_push(lua_State *L, int dirfd, int resource)
{
	if (dirfd < 0)
		return lua_pushfstring(L, "pressure: /proc/pressure/%s", tk_pressure_name(resource));
	lua_getfield(L, 1, "path");
	lua_pushfstring(L, "cgroup %s: %s.pressure", luaL_optstring(L, -1, "?"), tk_pressure_name(resource));
	lua_remove(L, -2);
	return lua_tostring(L, -1);
}

/* nil, message, errno for a read or open of a pressure file that failed,
 * saying which of PSI's absences it is. */
static int pressure_fail(lua_State *L, int dirfd, int resource, int err)
{
	const char *where = where_push(L, dirfd, resource);
	const char *why;

	if (err == -ENOENT && dirfd < 0)
		why = "absent: the kernel has no PSI (CONFIG_PSI off, or booted with psi=0)";
	else if (err == -ENOENT)
		why = "absent: no PSI (CONFIG_PSI off, psi=0), PSI off in this cgroup "
		      "(cgroup.pressure 0), or the cgroup was removed";
	else if (err == -EOPNOTSUPP)
		why = "PSI is disabled (psi=0 on the kernel command line)";
	else if (err == -EBADMSG)
		why = "not in the format of a pressure file";
	else
		return tk_push_error(L, where, err);
	return tk_push_error(L, lua_pushfstring(L, "%s %s", where, why), err);
}

static void line_push(lua_State *L, const struct tk_psi_line *line)
{
	lua_createtable(L, 0, 4);
	/* The kernel's percentages, as fractions. */
	lua_pushnumber(L, line->avg10 / 100);
	lua_setfield(L, -2, "avg10");
	lua_pushnumber(L, line->avg60 / 100);
	lua_setfield(L, -2, "avg60");
	lua_pushnumber(L, line->avg300 / 100);
	lua_setfield(L, -2, "avg300");
	lua_pushinteger(L, tk_u64_int(line->total_us));
	lua_setfield(L, -2, "total_us");
}

static int pressure_push(lua_State *L, int dirfd, int resource)
{
	struct tk_pressure p;
	int err = tk_pressure_read(dirfd, resource, &p);

	if (err < 0)
		return pressure_fail(L, dirfd, resource, err);
	lua_createtable(L, 0, 2);
	line_push(L, &p.some);
	lua_setfield(L, -2, "some");
	if (p.have_full) {
		line_push(L, &p.full);
		lua_setfield(L, -2, "full");
	}
	return 1;
}

/** The host's pressure stall information for one resource, from
 * `/proc/pressure/<resource>`.
 *
 * Each line is `{avg10=, avg60=, avg300=, total_us=}`: the share of the
 * last 10, 60 and 300 seconds during which some (or all) non-idle tasks
 * were stalled on the resource, as a fraction 0..1 (the kernel's 1.23
 * percent reads 0.0123), and the total stall time in microseconds (an
 * integer that only grows). `full` is absent where the kernel gives no
 * "full" line: cpu before Linux 5.13. (cg:stat()'s `pressure` section keeps
 * its own units: percentages and `total_ns`.)
 * @function pressure
 * @string resource "cpu", "memory" or "io"
 * @treturn[1] table `{some = {avg10=, avg60=, avg300=, total_us=}, full = {...}}`
 * @treturn[2] nil, "pressure: /proc/pressure/memory absent: ...", errno:
 *   ENOENT where the kernel has no PSI (CONFIG_PSI off, or psi=0 on
 *   kernels that then leave /proc/pressure out), EOPNOTSUPP where PSI is
 *   disabled and the file is still there
 * @see pressure_trigger
 * @usage local mem = assert(takana.pressure("memory"))
 * if mem.some.avg10 > 0.10 then print("10 s memory stall above 10 %") end */
static int l_pressure(lua_State *L)
{
	int resource = resource_check(L, 1);

	tk_check_nargs(L, 1);
	return pressure_push(L, -1, resource);
}

/* cg:pressure(resource): documented in lua/takana/cgroup.lua, the page of
 * the handle's methods. */
static int cg_pressure(lua_State *L)
{
	int dirfd = cgroup_dirfd(L);
	int resource = resource_check(L, 2);

	tk_check_nargs(L, 2);
	return pressure_push(L, dirfd, resource);
}

/* A number field of the options table at idx (a number, not a string
 * that reads as one); the caller checks its range. */
static lua_Number opt_number(lua_State *L, int idx, const char *key)
{
	lua_Number v;
	int isnum;

	lua_getfield(L, idx, key);
	v = lua_tonumberx(L, -1, &isnum);
	if (!isnum || lua_type(L, -1) != LUA_TNUMBER)
		luaL_argerror(L, idx, lua_pushfstring(L, "'%s' must be a number, got %s", key, luaL_typename(L, -1)));
	lua_pop(L, 1);
	return v;
}

struct trigger_args {
	int resource, full;
	uint64_t stall_us, window_us;
};

/* {resource=, kind=, stall=, window=} at idx; raises on anything else. */
static void trigger_args_check(lua_State *L, int idx, struct trigger_args *a)
{
	static const char *const keys[] = { "resource", "kind", "stall", "window", NULL };
	lua_Number stall, window;
	int top;

	luaL_checktype(L, idx, LUA_TTABLE);
	lua_pushnil(L);
	while (lua_next(L, idx) != 0) {
		int known = 0;

		if (lua_type(L, -2) == LUA_TSTRING) {
			size_t len;
			const char *k = lua_tolstring(L, -2, &len);

			for (int i = 0; keys[i] != NULL; i++)
				known |= strlen(keys[i]) == len && memcmp(k, keys[i], len) == 0;
		}
		if (!known)
			luaL_argerror(L, idx, lua_pushfstring(L, "unknown option '%s' (resource, kind, stall, window)",
			                                      luaL_tolstring(L, -2, NULL)));
		lua_pop(L, 1);
	}
	top = lua_gettop(L);
	lua_getfield(L, idx, "resource");
	if (lua_type(L, -1) != LUA_TSTRING)
		luaL_argerror(L, idx, lua_pushfstring(L, "'resource' must be a string, got %s", luaL_typename(L, -1)));
	{
		size_t len;
		const char *res = lua_tolstring(L, -1, &len);

		a->resource = resource_find(res, len);
		if (a->resource < 0)
			luaL_argerror(L, idx, lua_pushfstring(L, "'resource' must be " RESOURCES ", got \"%s\"", res));
	}
	lua_getfield(L, idx, "kind");
	if (lua_isnil(L, -1)) {
		a->full = 0;
	} else {
		size_t len = 0;
		const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;

		if (k == NULL || strlen(k) != len || (strcmp(k, "some") != 0 && strcmp(k, "full") != 0))
			luaL_argerror(L, idx, "'kind' must be \"some\" or \"full\"");
		a->full = strcmp(k, "full") == 0;
	}
	lua_settop(L, top);
	stall = opt_number(L, idx, "stall");
	window = opt_number(L, idx, "window");
	/* NaN fails both comparisons. */
	if (!(window >= TK_PSI_WINDOW_MIN_US / 1e6 && window <= TK_PSI_WINDOW_MAX_US / 1e6))
		luaL_argerror(L, idx, "'window' must be 0.5..10 (seconds; the kernel's range)");
	if (!(stall > 0 && stall <= 1))
		luaL_argerror(L, idx, "'stall' must be a fraction of the window, 0 < stall <= 1");
	a->window_us = (uint64_t)llround(window * 1e6);
	a->stall_us = (uint64_t)llround(stall * (double)a->window_us);
	if (a->stall_us == 0)
		a->stall_us = 1;
}

static int trigger_new(lua_State *L, int dirfd, int opts)
{
	struct trigger_args a;
	struct ltrigger *t;
	int fd;

	trigger_args_check(L, opts, &a);
	tk_check_nargs(L, opts);
	t = lua_newuserdatauv(L, sizeof *t, 0);
	memset(t, 0, sizeof *t);
	tk_handle_init(&t->h, "pressure trigger", "p", NULL);
	luaL_setmetatable(L, TK_PRESSURE_TRIGGER_MT);
	fd = tk_pressure_trigger_open(dirfd, a.resource, a.full, a.stall_us, a.window_us);
	if (fd == -EINVAL && a.window_us % TK_PSI_UNPRIV_WINDOW_US != 0) {
		where_push(L, dirfd, a.resource);
		return tk_push_error(L, lua_pushfstring(L, "%s: trigger with a window of %f s refused: "
		                                           "without CAP_SYS_RESOURCE the kernel takes only "
		                                           "windows that are multiples of 2 s",
		                                        lua_tostring(L, -1), (lua_Number)a.window_us / 1e6), fd);
	}
	if (fd == -EPERM) {
		where_push(L, dirfd, a.resource);
		return tk_push_error(L, lua_pushfstring(L, "%s: a trigger needs CAP_SYS_RESOURCE before "
		                                           "Linux 6.5 (later kernels take unprivileged ones "
		                                           "with windows in multiples of 2 s)",
		                                        lua_tostring(L, -1)), fd);
	}
	if (fd < 0)
		return pressure_fail(L, dirfd, a.resource, fd);
	t->h.fd = fd;
	tk_handle_opened(L, fd);
	return 1;
}

/** A PSI trigger on the host's pressure: pollable, it fires when the tasks
 * stalled on the resource for `stall` of any `window`.
 *
 * The kernel's trigger (write `"some|full <stall_us> <window_us>"` to
 * `/proc/pressure/<resource>`, then poll POLLPRI): `takana.poll{trig}`,
 * cqueues and luv wait on it (`events()` is "p"; luv:
 * `uv.new_poll(trig:fileno()):start("p", cb)`). The kernel hands each
 * firing out once, to whichever poll sees it first: a trigger that a loop
 * returned has fired, and its `:read()` then says false. It fires at most
 * once per window.
 *
 * Without `CAP_SYS_RESOURCE` (a user, or root without it, as in many
 * containers) the kernel takes only windows that are multiples of 2 s (2,
 * 4, 6, 8 or 10): any other window returns nil, a message naming that
 * rule, EINVAL.
 * @function pressure_trigger
 * @tparam table t `{resource=, kind=, stall=, window=}`: resource "cpu",
 *   "memory" or "io"; kind "some" (the default: some tasks stalled) or
 *   "full" (all non-idle tasks stalled); stall the stalled share of the
 *   window, a fraction 0 < stall <= 1 (0.15 of a 2 s window: 300 ms);
 *   window in seconds, 0.5..10
 * @treturn[1] trigger `:read([timeout])`, `:fileno()`, the cqueues
 *   protocol, `:close()`
 * @treturn[2] nil, message, errno (EINVAL: the window, see above; EPERM:
 *   no `CAP_SYS_RESOURCE` before Linux 6.5; EACCES: a cgroup's file is
 *   root's; ENOENT/EOPNOTSUPP: no PSI)
 * @usage local trig = assert(takana.pressure_trigger{resource = "memory",
 *   stall = 0.10, window = 2})
 * while #assert(takana.poll({trig}, 60)) > 0 do
 *   print("memory stalled 10 % of the last 2 s")
 * end */
static int l_pressure_trigger(lua_State *L)
{
	return trigger_new(L, -1, 1);
}

/* cg:pressure_trigger{...}: documented in lua/takana/cgroup.lua. */
static int cg_pressure_trigger(lua_State *L)
{
	int dirfd = cgroup_dirfd(L);

	return trigger_new(L, dirfd, 2);
}

/*** Whether the trigger fired since it was last polled.
 * @function trigger:read
 * @number[opt] timeout seconds to wait for a firing (0..1 year); nil or
 *   absent: do not wait (a drain, as `timer:read`)
 * @treturn[1] boolean true when it fired, false when not
 * @treturn[2] nil, message, errno when the trigger is broken (its cgroup
 *   was removed: ENODEV) */
static int trigger_read(lua_State *L)
{
	struct ltrigger *t = (struct ltrigger *)tk_handle_check(L, 1, TK_PRESSURE_TRIGGER_MT);
	int64_t wait_ms = luaL_opt(L, tk_timeout_check, 2, 0);
	int r;

	tk_check_nargs(L, 2);
	r = tk_pressure_trigger_wait(t->h.fd, tk_deadline_ms(wait_ms));
	if (r < 0)
		return tk_push_error(L, "pressure trigger: broken (its file is gone: the cgroup was removed)", r);
	lua_pushboolean(L, r);
	return 1;
}

void tk_pressure_open_lib(lua_State *L)
{
	static const luaL_Reg methods[] = {
		{ "read", trigger_read },
		{ NULL, NULL },
	};
	static const luaL_Reg funcs[] = {
		{ "pressure", l_pressure },
		{ "pressure_trigger", l_pressure_trigger },
		{ NULL, NULL },
	};
	static const luaL_Reg cgroup_methods[] = {
		{ "pressure", cg_pressure },
		{ "pressure_trigger", cg_pressure_trigger },
		{ NULL, NULL },
	};

	tk_handle_newclass(L, TK_PRESSURE_TRIGGER_MT, methods, NULL, NULL);
	lua_pop(L, 1);
	luaL_setfuncs(L, funcs, 0);
	/* The cgroup handle's methods (tk_cgroup_open_lib left them here). */
	lua_getfield(L, -1, "cgroup_methods");
	luaL_checktype(L, -1, LUA_TTABLE);
	luaL_setfuncs(L, cgroup_methods, 0);
	lua_pop(L, 1);
}
