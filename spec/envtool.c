/* envtool: unsetenv for the spec helper. Under `make test-asan` lua5.4
 * runs with the sanitizer runtimes in LD_PRELOAD; the specs' children
 * (sh, curl, node_exporter, the fixture) must not inherit them. */
#include <stdlib.h>

#include <lua.h>
#include <lauxlib.h>

static int l_unsetenv(lua_State *L)
{
	lua_pushboolean(L, unsetenv(luaL_checkstring(L, 1)) == 0);
	return 1;
}

__attribute__((visibility("default"))) int luaopen_envtool(lua_State *L);

int luaopen_envtool(lua_State *L)
{
	lua_newtable(L);
	lua_pushcfunction(L, l_unsetenv);
	lua_setfield(L, -2, "unsetenv");
	return 1;
}
