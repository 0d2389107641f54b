/* The one timeout parser of the binding: every method that waits takes its
 * timeout through it, so a timeout means the same everywhere
 * (doc/reference.md "Error convention"). */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>

#include "binding.h"
#include "clock.h"

int64_t tk_timeout_check(lua_State *L, int idx)
{
	lua_Number s;

	if (lua_isnoneornil(L, idx))
		return TK_WAIT_FOREVER;
	s = luaL_checknumber(L, idx);
	luaL_argcheck(L, s >= 0 && s <= TK_TIMEOUT_MAX_S, idx, "timeout must be 0..1 year (seconds)");
	/* A year is 3.2e10 ms, past an int: the waits take it in slices. */
	return (int64_t)ceil(s * 1000.0);
}
