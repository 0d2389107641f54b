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

/* core.signum(sig) -> the signal number of a name or number; raises on
 * anything else (the Lua side words the error for its own function). */
static int l_signum(lua_State *L)
{
	int sig = tk_signal_check(L, 1);

	tk_check_nargs(L, 1);
	lua_pushinteger(L, sig);
	return 1;
}

/* core.monotime(): CLOCK_MONOTONIC seconds, for timeouts in the Lua front. */
static int l_monotime(lua_State *L)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec / 1e9);
	return 1;
}

/* The highest errno a syscall returns (the kernel's MAX_ERRNO): names are
 * looked up below it. */
#define ERRNO_MAX 4095

/* core.errno: errno numbers and their stable names, both ways:
 * errno.EMFILE == 24 and errno[24] == "EMFILE". The third value of a
 * runtime failure is the number (luaposix's convention, so existing
 * comparisons hold); the name is what a message never has to be searched
 * for. Every name the C library knows is there, with its aliases
 * (EWOULDBLOCK, EDEADLOCK, ENOTSUP) by name only: a number maps back to
 * one name, the C library's. */
static void errno_open(lua_State *L)
{
#define E(name) { #name, name }
	static const struct { const char *name; int value; } aliases[] = {
		E(EWOULDBLOCK), E(EDEADLOCK), E(ENOTSUP),
	};
#undef E
	lua_createtable(L, 160, 160);
	for (int e = 1; e <= ERRNO_MAX; e++) {
		const char *name = strerrorname_np(e);

		if (name == NULL)
			continue;
		lua_pushinteger(L, e);
		lua_setfield(L, -2, name);
		lua_pushstring(L, name);
		lua_rawseti(L, -2, e);
	}
	for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
		lua_pushinteger(L, aliases[i].value);
		lua_setfield(L, -2, aliases[i].name);
	}
	lua_setfield(L, -2, "errno");
}

/* core.strerror(n): the C library's text for errno n, the one messages
 * end with, for Lua code that words a failure from its number. */
static int l_strerror(lua_State *L)
{
	lua_Integer e = luaL_checkinteger(L, 1);

	tk_check_nargs(L, 1);
	luaL_argcheck(L, e >= 0 && e <= ERRNO_MAX, 1, "errno out of range (0..4095)");
	lua_pushstring(L, strerror((int)e));
	return 1;
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
	lua_pushcfunction(L, l_signum);
	lua_setfield(L, -2, "signum");
	errno_open(L);
	lua_pushcfunction(L, l_strerror);
	lua_setfield(L, -2, "strerror");
	tk_snapshot_open_lib(L);
	tk_pidfd_open_lib(L);
	tk_spawn_open_lib(L);
	tk_pipe_open_lib(L);
	tk_process_open_lib(L);
	tk_cgroup_path_open_lib(L);
	tk_host_open_lib(L);
	tk_cgroup_open_lib(L);
	tk_cgroup_tree_open_lib(L);
	tk_pressure_open_lib(L);
	tk_events_open_lib(L);
	tk_dir_open_lib(L);
	tk_signals_open_lib(L);
	tk_timer_open_lib(L);
	tk_self_open_lib(L);
	tk_unix_open_lib(L);
	tk_poller_open_lib(L);
	return 1;
}
