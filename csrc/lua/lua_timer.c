/* Lua binding of takana.timer (a timerfd on CLOCK_MONOTONIC) and of the
 * clocks: now() for intervals, boottime_ns() for comparing with snapshot and
 * event times, realtime() for wall-clock stamps. */

/***
 * Timers and clocks, from C.
 * @module takana
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "binding.h"
#include "clock.h"
#include "timer.h"
#include "wait.h"

struct ltimer {
	struct tk_handle h;   /* first: the shared close/poll protocol */
};

static struct ltimer *timer_check(lua_State *L, int idx)
{
	return (struct ltimer *)tk_handle_check(L, idx, TK_TIMER_MT);
}

/* Seconds to ns. A delay of 0 becomes 1 ns: a timerfd reads 0 as "disarm",
 * a caller means "now". */
static uint64_t seconds_check(lua_State *L, int idx, const char *what, int zero_means_now)
{
	lua_Number t = luaL_checknumber(L, idx);
	uint64_t ns;

	if (!(t >= 0 && t <= TK_TIMEOUT_MAX_S))
		luaL_argerror(L, idx, lua_pushfstring(L, "%s must be 0..1 year (seconds)", what));
	ns = (uint64_t)llround(t * 1e9);
	if (ns == 0 && (zero_means_now || t > 0))
		ns = 1;
	return ns;
}

/* (after, every) at idx, idx+1; every nil or 0: one-shot. */
static int timer_args(lua_State *L, int idx, uint64_t *after, uint64_t *every)
{
	*after = seconds_check(L, idx, "after", 1);
	*every = lua_isnoneornil(L, idx + 1) ? 0 : seconds_check(L, idx + 1, "every", 0);
	return 0;
}

/*** Arms the timer again, replacing what was set; unread expirations are
 * dropped.
 * @function timer:set
 * @number after seconds until the first expiration (0: at once)
 * @number[opt] every seconds between the following ones; nil or 0: once
 * @treturn[1] true
 * @treturn[2] nil, message, errno */
static int timer_set(lua_State *L)
{
	struct ltimer *t = timer_check(L, 1);
	uint64_t after, every;
	int r;

	timer_args(L, 2, &after, &every);
	tk_check_nargs(L, 3);
	r = tk_timer_set(t->h.fd, after, every);
	if (r < 0)
		return tk_push_error(L, "timer: set", r);
	lua_pushboolean(L, 1);
	return 1;
}

/*** Disarms the timer; unread expirations are dropped.
 * @function timer:cancel
 * @treturn[1] true
 * @treturn[2] nil, message, errno */
static int timer_cancel(lua_State *L)
{
	struct ltimer *t = timer_check(L, 1);
	int r;

	tk_check_nargs(L, 1);
	r = tk_timer_set(t->h.fd, 0, 0);
	if (r < 0)
		return tk_push_error(L, "timer: cancel", r);
	lua_pushboolean(L, 1);
	return 1;
}

/*** Expirations since the last read (or set), and resets the count.
 * @function timer:read
 * @number[opt] timeout seconds to wait for one (0..1 year); nil or absent:
 *   do not wait (a drain: unlike every other timeout, where nil waits forever)
 * @treturn[1] int expirations, 0 when none yet
 * @treturn[2] nil, message, errno */
static int timer_read(lua_State *L)
{
	struct ltimer *t = timer_check(L, 1);
	/* nil does not wait, as documented: explicit here, against the
	 * parser's nil (forever). */
	int64_t wait_ms = luaL_opt(L, tk_timeout_check, 2, 0);
	int64_t deadline = tk_deadline_ms(wait_ms), n;

	tk_check_nargs(L, 2);
	for (;;) {
		int r;

		n = tk_timer_read(t->h.fd);
		if (n != 0 || wait_ms == 0)
			break;
		r = tk_wait_fd(t->h.fd, POLLIN, deadline);
		if (r < 0)
			return tk_push_error(L, "timer: poll", r);
		if (r == 0)
			break;
	}
	if (n < 0)
		return tk_push_error(L, "timer: read", (int)n);
	lua_pushinteger(L, (lua_Integer)n);
	return 1;
}

/*** Seconds until the next expiration and the period.
 * @function timer:remaining
 * @treturn[1] number seconds to the next expiration (0: one is due now)
 * @treturn[1] number the period (0 for a one-shot)
 * @treturn[2] nil when disarmed (cancelled, or a one-shot that fired)
 * @treturn[3] nil, message, errno */
static int timer_remaining(lua_State *L)
{
	struct ltimer *t = timer_check(L, 1);
	uint64_t next, every;
	int r;

	tk_check_nargs(L, 1);
	r = tk_timer_get(t->h.fd, &next, &every);
	if (r < 0)
		return tk_push_error(L, "timer: get", r);
	/* A periodic timer reads 0 to go while an expiration is due and not yet
	 * forwarded (seen on 6.1 under TCG at a 1 ms period): still armed. */
	if (next == 0 && every == 0) {
		lua_pushnil(L);
		return 1;
	}
	lua_pushnumber(L, (lua_Number)next / 1e9);
	lua_pushnumber(L, (lua_Number)every / 1e9);
	return 2;
}

/* takana.timer(after, every): a timerfd on CLOCK_MONOTONIC (its LDoc is in
 * lua/takana/init.lua, once). */
static int l_timer(lua_State *L)
{
	uint64_t after = 0, every = 0;
	struct ltimer *t;
	int fd, r;

	if (!lua_isnoneornil(L, 1))
		timer_args(L, 1, &after, &every);
	else
		luaL_argcheck(L, lua_isnoneornil(L, 2), 2, "a period needs a first delay ('after')");
	tk_check_nargs(L, 2);
	t = lua_newuserdatauv(L, sizeof *t, 0);
	memset(t, 0, sizeof *t);
	tk_handle_init(&t->h, "timer", "r", NULL);
	luaL_setmetatable(L, TK_TIMER_MT);
	fd = tk_timer_open();
	if (fd < 0)
		return tk_push_error(L, "timer: timerfd_create", fd);
	t->h.fd = fd;
	if (after != 0) {
		r = tk_timer_set(fd, after, every);
		if (r < 0)
			return tk_push_error(L, "timer: set", r);   /* the object closes it when collected */
	}
	return 1;
}

/* takana.now(): CLOCK_MONOTONIC in seconds (LDoc in lua/takana/init.lua). */
static int l_now(lua_State *L)
{
	tk_check_nargs(L, 0);
	lua_pushnumber(L, (lua_Number)tk_clock_ns(CLOCK_MONOTONIC) / 1e9);
	return 1;
}

/* takana.boottime_ns(): CLOCK_BOOTTIME in ns, the clock of snapshot and
 * event `time_ns` and record `start_ns` (LDoc in lua/takana/init.lua). */
static int l_boottime_ns(lua_State *L)
{
	tk_check_nargs(L, 0);
	lua_pushinteger(L, tk_u64_int(tk_boottime_ns()));
	return 1;
}

/* takana.realtime(): CLOCK_REALTIME in seconds since the epoch, with the
 * fraction os.time() lacks (LDoc in lua/takana/init.lua). */
static int l_realtime(lua_State *L)
{
	struct timespec ts;

	tk_check_nargs(L, 0);
	clock_gettime(CLOCK_REALTIME, &ts);
	lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec / 1e9);
	return 1;
}

/* core.to_realtime(ns): a CLOCK_BOOTTIME stamp in ns as CLOCK_REALTIME ns,
 * by the clocks' offset now (LDoc in lua/takana/init.lua). */
static int l_to_realtime(lua_State *L)
{
	lua_Integer ns = luaL_checkinteger(L, 1);
	int64_t offset;

	tk_check_nargs(L, 1);
	offset = tk_realtime_offset_ns();
	luaL_argcheck(L, ns >= 0, 1, "a CLOCK_BOOTTIME stamp in ns is never negative");
	luaL_argcheck(L, offset < 0 || ns <= LUA_MAXINTEGER - offset, 1,
	              "ns too large: its wall-clock time would not fit an integer");
	lua_pushinteger(L, ns + (lua_Integer)offset);
	return 1;
}

void tk_timer_open_lib(lua_State *L)
{
	static const luaL_Reg methods[] = {
		{ "read", timer_read },
		{ "set", timer_set },
		{ "cancel", timer_cancel },
		{ "remaining", timer_remaining },
		{ NULL, NULL },
	};
	static const luaL_Reg funcs[] = {
		{ "timer", l_timer },
		{ "now", l_now },
		{ "boottime_ns", l_boottime_ns },
		{ "realtime", l_realtime },
		{ "to_realtime", l_to_realtime },
		{ NULL, NULL },
	};

	tk_handle_newclass(L, TK_TIMER_MT, methods, NULL, NULL);
	lua_pop(L, 1);
	luaL_setfuncs(L, funcs, 0);
}
