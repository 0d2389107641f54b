/* The calling process's own settings that a supervisor reads or changes:
 * its ids, the child-subreaper flag, its descriptor limit and the
 * environment. */
#define _GNU_SOURCE
#include <string.h>
#include <unistd.h>

#include "binding.h"
#include "self.h"

/* environ: declared by unistd.h under _GNU_SOURCE. */


/** Makes this process the reaper of its orphaned descendants
 * (PR_SET_CHILD_SUBREAPER), or says whether it is.
 * A process whose parent exits is re-parented to the nearest living
 * subreaper ancestor instead of init, so a supervisor sees (and must reap)
 * what its services double-fork. The flag is not inherited by children and
 * survives exec.
 * @function subreaper
 * @tparam[opt] boolean on set (true) or clear (false); absent: query
 * @treturn[1] boolean the flag (query), or true (set)
 * @treturn[2] nil, "subreaper: message", errno */
static int l_subreaper(lua_State *L)
{
	int on = 0, r;

	tk_check_nargs(L, 1);
	if (lua_isnone(L, 1)) {
		r = tk_subreaper_get(&on);
		if (r < 0)
			return tk_push_error(L, "subreaper: PR_GET_CHILD_SUBREAPER", r);
		lua_pushboolean(L, on != 0);
		return 1;
	}
	luaL_checktype(L, 1, LUA_TBOOLEAN);
	r = tk_subreaper_set(lua_toboolean(L, 1));
	if (r < 0)
		return tk_push_error(L, "subreaper: PR_SET_CHILD_SUBREAPER", r);
	lua_pushboolean(L, 1);
	return 1;
}

/** This process's environment as a table, read from `environ` (so what a
 * C library's setenv changed is seen; /proc/self/environ shows only what
 * exec received). An entry without '=' is skipped; a name set twice keeps
 * its first value, as getenv does.
 * @function environ
 * @treturn table name -> value */
static int l_environ(lua_State *L)
{
	tk_check_nargs(L, 0);
	lua_newtable(L);
	for (char **e = environ; e != NULL && *e != NULL; e++) {
		const char *eq = strchr(*e, '=');
		if (eq == NULL || eq == *e)
			continue;
		lua_pushlstring(L, *e, (size_t)(eq - *e));
		lua_pushvalue(L, -1);
		if (lua_rawget(L, -3) != LUA_TNIL) {
			lua_pop(L, 2);
			continue;
		}
		lua_pop(L, 1);
		lua_pushstring(L, eq + 1);
		lua_rawset(L, -3);
	}
	return 1;
}

/* The subreaper flag belongs to the process, and subreaper supervisors of
 * any Lua state share it: the first hold sets it if it was clear, the last
 * release clears it again (self.c counts them). */
/* core.subreaper_hold(true | false) -> true | nil, message, errno */
static int l_subreaper_hold(lua_State *L)
{
	const char *step = NULL;
	int r;

	tk_check_nargs(L, 1);
	luaL_checktype(L, 1, LUA_TBOOLEAN);
	r = tk_subreaper_hold(lua_toboolean(L, 1), &step);
	if (r < 0)
		return tk_push_error(L, lua_pushfstring(L, "subreaper: %s", step), r);
	lua_pushboolean(L, 1);
	return 1;
}

/* Each service costs a supervisor about six descriptors (its cgroup, a
 * pidfd, two output pipes, a notify socket): a login's 1,024 fits about
 * 150. The soft limit goes up to the hard one (at most 2^20, the default
 * fs.nr_open), as systemd raises its own, and services get back the soft
 * limit this process had (select() users among them expect 1,024).
 * core.nofile_hold(true) -> soft before, hard; core.nofile_hold(false)
 * releases; core.nofile_hold() -> soft now, hard. */
static int l_nofile_hold(lua_State *L)
{
	rlim_t soft, hard;
	const char *step = "getrlimit";
	int r;

	tk_check_nargs(L, 1);
	if (lua_isnone(L, 1)) {
		r = tk_nofile_get(&soft, &hard);
		if (r < 0)
			return tk_push_error(L, "nofile: getrlimit", r);
		lua_pushinteger(L, (lua_Integer)soft);
		lua_pushinteger(L, (lua_Integer)hard);
		return 2;
	}
	luaL_checktype(L, 1, LUA_TBOOLEAN);
	r = tk_nofile_hold(lua_toboolean(L, 1), &soft, &hard, &step);
	if (r < 0)
		return tk_push_error(L, lua_pushfstring(L, "nofile: %s", step), r);
	if (!lua_toboolean(L, 1)) {
		lua_pushboolean(L, 1);
		return 1;
	}
	lua_pushinteger(L, (lua_Integer)soft);
	lua_pushinteger(L, (lua_Integer)hard);
	return 2;
}

/* core.getpid(): the caller's pid, as cgroup.procs lists it. */
static int l_getpid(lua_State *L)
{
	tk_check_nargs(L, 0);
	lua_pushinteger(L, getpid());
	return 1;
}

/* core.geteuid(): whom a control socket's peer must be (or root). */
static int l_geteuid(lua_State *L)
{
	tk_check_nargs(L, 0);
	lua_pushinteger(L, geteuid());
	return 1;
}

/* core.proc_is_ours(): whether /proc numbers pids as this process's pid
 * namespace does (its "self" is our pid): a /proc mounted from another
 * namespace names other processes by the same numbers. */
static int l_proc_is_ours(lua_State *L)
{
	tk_check_nargs(L, 0);
	lua_pushboolean(L, tk_proc_is_ours());
	return 1;
}

void tk_self_open_lib(lua_State *L)
{
	static const luaL_Reg funcs[] = {
		{ "getpid", l_getpid },
		{ "geteuid", l_geteuid },
		{ "proc_is_ours", l_proc_is_ours },
		{ "subreaper_hold", l_subreaper_hold },
		{ "subreaper", l_subreaper },
		{ "nofile_hold", l_nofile_hold },
		{ "environ", l_environ },
		{ NULL, NULL },
	};

	luaL_setfuncs(L, funcs, 0);
}
