/* envtool: unsetenv, fork, alarm, _exit, waitpid and unshare_time for the specs. Under `make test-asan` lua5.4
 * runs with the sanitizer runtimes in LD_PRELOAD; the specs' children
 * (sh, curl, node_exporter, the fixture) must not inherit them. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>

static int l_unsetenv(lua_State *L)
{
	lua_pushboolean(L, unsetenv(luaL_checkstring(L, 1)) == 0);
	return 1;
}

/* fork() for the specs of what a child inherits: the pid (0 in the child). */
static int l_fork(lua_State *L)
{
	lua_pushinteger(L, fork());
	return 1;
}

/* alarm(seconds): a forked child that hangs dies instead of the suite. */
static int l_alarm(lua_State *L)
{
	alarm((unsigned)luaL_checkinteger(L, 1));
	return 0;
}

static int l_exit(lua_State *L)
{
	_exit((int)luaL_checkinteger(L, 1));
}

/* The exit code of a child, or -1. */
static int l_waitpid(lua_State *L)
{
	int status;

	if (waitpid((pid_t)luaL_checkinteger(L, 1), &status, 0) < 0 || !WIFEXITED(status))
		lua_pushinteger(L, -1);
	else
		lua_pushinteger(L, WEXITSTATUS(status));
	return 1;
}

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

/* unshare(CLONE_NEWTIME): the caller's children get a new time namespace
 * (its offsets writable until the first enters it); true, or nil and why. */
static int l_unshare_time(lua_State *L)
{
	if (unshare(CLONE_NEWTIME) == 0) {
		lua_pushboolean(L, 1);
		return 1;
	}
	lua_pushnil(L);
	lua_pushstring(L, strerror(errno));
	return 2;
}

__attribute__((visibility("default"))) int luaopen_envtool(lua_State *L);

int luaopen_envtool(lua_State *L)
{
	static const luaL_Reg funcs[] = {
		{ "unsetenv", l_unsetenv }, { "fork", l_fork }, { "exit", l_exit },
		{ "alarm", l_alarm }, { "waitpid", l_waitpid }, { "unshare_time", l_unshare_time },
		{ NULL, NULL },
	};

	luaL_newlib(L, funcs);
	return 1;
}
