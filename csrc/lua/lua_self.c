/* The calling process's own settings that a supervisor reads or changes:
 * its ids, the child-subreaper flag, its descriptor limit and the
 * environment. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "binding.h"

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
	int on = 0;

	tk_check_nargs(L, 1);
	if (lua_isnone(L, 1)) {
		if (prctl(PR_GET_CHILD_SUBREAPER, &on, 0, 0, 0) < 0)
			return tk_push_error(L, "subreaper: PR_GET_CHILD_SUBREAPER", -errno);
		lua_pushboolean(L, on != 0);
		return 1;
	}
	luaL_checktype(L, 1, LUA_TBOOLEAN);
	on = lua_toboolean(L, 1);
	if (prctl(PR_SET_CHILD_SUBREAPER, (unsigned long)on, 0, 0, 0) < 0)
		return tk_push_error(L, "subreaper: PR_SET_CHILD_SUBREAPER", -errno);
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
 * release clears it again. */
static struct {
	int users;
	int ours;
} subreaper_holds;

/* core.subreaper_hold(true | false) -> true | nil, message, errno */
static int l_subreaper_hold(lua_State *L)
{
	int on = 0;

	tk_check_nargs(L, 1);
	luaL_checktype(L, 1, LUA_TBOOLEAN);
	if (!lua_toboolean(L, 1)) {
		if (subreaper_holds.users > 0 && --subreaper_holds.users == 0 && subreaper_holds.ours) {
			prctl(PR_SET_CHILD_SUBREAPER, 0UL, 0, 0, 0);
			subreaper_holds.ours = 0;
		}
		lua_pushboolean(L, 1);
		return 1;
	}
	if (subreaper_holds.users == 0) {
		if (prctl(PR_GET_CHILD_SUBREAPER, &on, 0, 0, 0) < 0)
			return tk_push_error(L, "subreaper: PR_GET_CHILD_SUBREAPER", -errno);
		if (!on && prctl(PR_SET_CHILD_SUBREAPER, 1UL, 0, 0, 0) < 0)
			return tk_push_error(L, "subreaper: PR_SET_CHILD_SUBREAPER", -errno);
		subreaper_holds.ours = !on;
	}
	subreaper_holds.users++;
	lua_pushboolean(L, 1);
	return 1;
}

/* The descriptor limit a supervisor raised, counted like the subreaper
 * flag: the soft limit before the first hold, put back by the last. */
static struct {
	int users, ours;
	rlim_t before;
} nofile_holds;

/* Each service costs a supervisor about six descriptors (its cgroup, a
 * pidfd, two output pipes, a notify socket): a login's 1,024 fits about
 * 150. The soft limit goes up to the hard one (at most 2^20, the default
 * fs.nr_open), as systemd raises its own, and services get back the soft
 * limit this process had (select() users among them expect 1,024).
 * core.nofile_hold(true) -> soft before, hard; core.nofile_hold(false)
 * releases; core.nofile_hold() -> soft now, hard. */
static int l_nofile_hold(lua_State *L)
{
	struct rlimit rl;

	tk_check_nargs(L, 1);
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return tk_push_error(L, "nofile: getrlimit", -errno);
	if (lua_isnone(L, 1)) {
		lua_pushinteger(L, (lua_Integer)rl.rlim_cur);
		lua_pushinteger(L, (lua_Integer)rl.rlim_max);
		return 2;
	}
	luaL_checktype(L, 1, LUA_TBOOLEAN);
	if (!lua_toboolean(L, 1)) {
		if (nofile_holds.users > 0 && --nofile_holds.users == 0 && nofile_holds.ours) {
			rl.rlim_cur = nofile_holds.before;
			setrlimit(RLIMIT_NOFILE, &rl);
			nofile_holds.ours = 0;
		}
		lua_pushboolean(L, 1);
		return 1;
	}
	if (nofile_holds.users == 0) {
		rlim_t want = rl.rlim_max < ((rlim_t)1 << 20) ? rl.rlim_max : ((rlim_t)1 << 20);
		nofile_holds.before = rl.rlim_cur;
		nofile_holds.ours = 0;
		if (want > rl.rlim_cur) {
			struct rlimit up = { want, rl.rlim_max };
			if (setrlimit(RLIMIT_NOFILE, &up) < 0)
				return tk_push_error(L, "nofile: setrlimit", -errno);
			nofile_holds.ours = 1;
		}
	}
	nofile_holds.users++;
	lua_pushinteger(L, (lua_Integer)nofile_holds.before);
	lua_pushinteger(L, (lua_Integer)rl.rlim_max);
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
	char buf[32];
	ssize_t n;

	tk_check_nargs(L, 0);
	n = readlink("/proc/self", buf, sizeof buf - 1);
	if (n > 0)
		buf[n] = '\0';
	lua_pushboolean(L, n > 0 && strtol(buf, NULL, 10) == (long)getpid());
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
