/* luaopen_takana_core: the only exported symbol. Each concern registers its
 * functions from its own lua_*.c file. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "binding.h"

#define TK_VERSION "0.1.0"

int tk_push_error(lua_State *L, const char *ctx, int err)
{
	int e = err < 0 ? -err : err;

	lua_pushnil(L);
	lua_pushfstring(L, "%s: %s", ctx, strerror(e));
	lua_pushinteger(L, e);
	return 3;
}

void tk_check_nargs(lua_State *L, int max)
{
	if (lua_gettop(L) > max)
		luaL_argerror(L, max + 1, lua_pushfstring(L, "no more than %d argument%s expected",
		                                        max, max == 1 ? "" : "s"));
}

int tk_signal_parse(lua_State *L, int idx, const char **why)
{
	if (lua_type(L, idx) == LUA_TNUMBER) {
		lua_Integer n;
		if (!lua_isinteger(L, idx)) {
			*why = "signal number must be an integer";
			return -1;
		}
		n = lua_tointeger(L, idx);
		if (n < 0 || n >= NSIG) {
			*why = "signal number out of range";
			return -1;
		}
		return (int)n;
	} else if (lua_type(L, idx) == LUA_TSTRING) {
		size_t len;
		const char *name = lua_tolstring(L, idx, &len);
		char up[16];
		const char *base;

		*why = "unknown signal name";
		if (len >= sizeof up || strlen(name) != len)
			return -1;
		for (size_t i = 0; i <= len; i++)
			up[i] = (char)((name[i] >= 'a' && name[i] <= 'z') ? name[i] - 32 : name[i]);
		base = strncmp(up, "SIG", 3) == 0 ? up + 3 : up;
		for (int s = 1; s < SIGRTMIN; s++) {
			const char *abbrev = sigabbrev_np(s);
			if (abbrev != NULL && strcmp(abbrev, base) == 0)
				return s;
		}
		return -1;
	}
	*why = "signal number or name expected";
	return -1;
}

int tk_signal_check(lua_State *L, int idx)
{
	const char *why;
	int sig = tk_signal_parse(L, idx, &why);

	if (sig < 0) {
		if (lua_type(L, idx) == LUA_TSTRING)
			luaL_argerror(L, idx, lua_pushfstring(L, "%s '%s'", why, lua_tostring(L, idx)));
		else if (lua_type(L, idx) == LUA_TNUMBER)
			luaL_argerror(L, idx, why);
		else
			luaL_argerror(L, idx, lua_pushfstring(L, "%s, got %s", why, luaL_typename(L, idx)));
	}
	return sig;
}

void tk_signal_push_name(lua_State *L, int sig)
{
	const char *abbrev = sig > 0 && sig < SIGRTMIN ? sigabbrev_np(sig) : NULL;

	if (abbrev != NULL)
		lua_pushstring(L, abbrev);
	else if (sig >= SIGRTMIN && sig <= SIGRTMAX)
		lua_pushfstring(L, sig == SIGRTMIN ? "RTMIN" : "RTMIN+%d", sig - SIGRTMIN);
	else
		lua_pushfstring(L, "%d", sig);
}

/* core.monotime(): CLOCK_MONOTONIC seconds, for timeouts in the Lua front. */
static int l_monotime(lua_State *L)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec / 1e9);
	return 1;
}

/* core.errno: the constants the third return value is compared with, so
 * Lua code and specs name them instead of writing numbers. */
static void errno_open(lua_State *L)
{
#define E(name) { #name, name }
	static const struct { const char *name; int value; } codes[] = {
		E(EPERM), E(ENOENT), E(ESRCH), E(EINTR), E(EIO), E(ENXIO), E(E2BIG),
		E(ENOEXEC), E(EBADF), E(ECHILD), E(EAGAIN), E(ENOMEM), E(EACCES),
		E(EFAULT), E(EBUSY), E(EEXIST), E(EXDEV), E(ENODEV), E(ENOTDIR),
		E(EISDIR), E(EINVAL), E(ENFILE), E(EMFILE), E(ENOSPC), E(ESPIPE),
		E(EROFS), E(EPIPE), E(ERANGE), E(EDEADLK), E(ENAMETOOLONG), E(ENOSYS),
		E(ENOTEMPTY), E(ELOOP), E(ENODATA), E(EBADMSG), E(EOVERFLOW),
		E(EOPNOTSUPP), E(ENOBUFS), E(ENOTCONN), E(ECONNREFUSED), E(ETIMEDOUT),
		E(ESTALE), E(ECANCELED), E(EPROTO), E(EADDRINUSE),
	};
#undef E
	lua_createtable(L, 0, (int)(sizeof codes / sizeof codes[0]));
	for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
		lua_pushinteger(L, codes[i].value);
		lua_setfield(L, -2, codes[i].name);
	}
	lua_setfield(L, -2, "errno");
}

__attribute__((visibility("default"))) int luaopen_takana_core(lua_State *L);

/* Keeps this module mapped until the process exits: threads of its own
 * (fd_drop.c's closes, which may outlive the Lua state that started them)
 * must never run code lua_close() has unloaded. */
static const char module_anchor; /* an address inside this module */

static void module_pin(void)
{
	Dl_info info;

	if (dladdr(&module_anchor, &info) && info.dli_fname)
		(void)dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

int luaopen_takana_core(lua_State *L)
{
	module_pin();
	tk_fork_watch();
	lua_newtable(L);
	lua_pushliteral(L, TK_VERSION);
	lua_setfield(L, -2, "_VERSION");
	lua_pushcfunction(L, l_monotime);
	lua_setfield(L, -2, "monotime");
	errno_open(L);
	tk_snapshot_open(L);
	tk_process_open(L);
	tk_procinfo_open(L);
	tk_cgroup_path_open(L);
	tk_host_open(L);
	tk_cgroup_open(L);
	tk_events_open_lib(L);
	tk_dir_open_lib(L);
	tk_signals_open_lib(L);
	tk_timer_open_lib(L);
	tk_self_open(L);
	tk_unix_open(L);
	return 1;
}
