/* luaopen_takana_core: the only exported symbol. Each concern registers its
 * functions from its own lua_*.c file. */
#include <errno.h>
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

int luaopen_takana_core(lua_State *L)
{
	lua_newtable(L);
	lua_pushliteral(L, TK_VERSION);
	lua_setfield(L, -2, "_VERSION");
	lua_pushcfunction(L, l_monotime);
	lua_setfield(L, -2, "monotime");
	errno_open(L);
	tk_snapshot_open(L);
	tk_process_open(L);
	tk_cgroup_open(L);
	tk_events_open_lib(L);
	tk_file_open(L);
	return 1;
}
