/* Lua binding of takana.signals: signals delivered through a signalfd, so a
 * script without a signal handler (Lua has none) can catch TERM, HUP or
 * CHLD and poll for them next to its other descriptors. */

/***
 * Signals through a signalfd, from C.
 * @module takana
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "binding.h"
#include "clock.h"
#include "signals.h"
#include "wait.h"

struct lsignals {
	struct tk_handle h;   /* first: the shared close/poll protocol */
	tk_sigbits set;
	int held;             /* the holds below are still counted */
	pthread_t owner;      /* the thread whose mask holds them */
};

static struct lsignals *signals_check(lua_State *L, int idx)
{
	return (struct lsignals *)tk_handle_check(L, idx, TK_SIGNALS_MT);
}

/* A mask is per thread: only the thread that blocked the signals can give
 * them back. Closed elsewhere (a luv thread's state collected by another
 * thread), the descriptor goes and the mask of the owner stays blocked. */
static void signals_release(lua_State *L, struct tk_handle *h)
{
	struct lsignals *s = (struct lsignals *)h;

	(void)L;
	close(h->fd);
	if (s->held && pthread_equal(s->owner, pthread_self()))
		tk_signals_release(s->set);
	s->held = 0;
}

static void set_int(lua_State *L, const char *k, lua_Integer v)
{
	lua_pushinteger(L, v);
	lua_setfield(L, -2, k);
}

static const char *child_state(int code)
{
	switch (code) {
	case CLD_EXITED: return "exited";
	case CLD_KILLED: return "killed";
	case CLD_DUMPED: return "dumped";
	case CLD_TRAPPED: return "trapped";
	case CLD_STOPPED: return "stopped";
	case CLD_CONTINUED: return "continued";
	default: return NULL;
	}
}

static void siginfo_push(lua_State *L, const struct signalfd_siginfo *si)
{
	int sig = (int)si->ssi_signo;

	lua_createtable(L, 0, 8);
	set_int(L, "signo", sig);
	tk_signal_push_name(L, sig);
	lua_setfield(L, -2, "name");
	set_int(L, "code", si->ssi_code);
	set_int(L, "pid", si->ssi_pid);
	set_int(L, "uid", si->ssi_uid);
	set_int(L, "status", si->ssi_status);
	if (sig == SIGCHLD && child_state(si->ssi_code) != NULL) {
		lua_pushstring(L, child_state(si->ssi_code));
		lua_setfield(L, -2, "child");
	}
	if (si->ssi_code == SI_QUEUE) {
		set_int(L, "value", si->ssi_int);
	}
}

/* Reads one: pushes a table (1), nothing (0, none pending) or the error
 * triple (3). */
static int signals_read_one(lua_State *L, struct lsignals *s, int64_t wait_ms)
{
	struct signalfd_siginfo si;
	int64_t deadline = tk_deadline_ms(wait_ms);

	for (;;) {
		int r = tk_signals_read(s->h.fd, &si);
		if (r < 0)
			return tk_push_error(L, "signals: read", r);
		if (r > 0) {
			siginfo_push(L, &si);
			return 1;
		}
		if (wait_ms == 0)
			return 0;
		/* Another reader of the same signal may take it first: wait for
		 * what is left of the timeout, then try again. */
		r = tk_wait_fd(s->h.fd, POLLIN, deadline);
		if (r < 0)
			return tk_push_error(L, "signals: poll", r);
		if (r == 0)
			return 0;
	}
}

/*** Takes one pending signal.
 * @function signals:read
 * @number[opt] timeout seconds to wait for one (0..1 year); nil or absent:
 *   do not wait (a drain: unlike every other timeout, where nil waits forever)
 * @treturn[1] table `signo`, `name` ("TERM"), `code` (`si_code`: 0 for kill(),
 *   `SI_QUEUE` -1, `SI_TKILL` -6, `CLD_*` for CHLD), `pid` and `uid` of the sender
 *   (the child for CHLD), `status` (CHLD: the exit code, or the signal that
 *   killed or stopped it), `child` (CHLD: "exited", "killed", "dumped",
 *   "stopped", "trapped" or "continued"), `value` (sigqueue's integer)
 * @treturn[2] nil when none arrived
 * @treturn[3] nil, message, errno */
static int signals_read(lua_State *L)
{
	struct lsignals *s = signals_check(L, 1);
	/* nil does not wait, as documented: explicit here, against the
	 * parser's nil (forever). */
	int64_t wait_ms = luaL_opt(L, tk_timeout_check, 2, 0);
	int n;

	tk_check_nargs(L, 2);
	n = signals_read_one(L, s, wait_ms);
	if (n == 0)
		lua_pushnil(L);
	return n == 0 ? 1 : n;
}

/* upvalue 1: the object */
static int signals_iter(lua_State *L)
{
	struct lsignals *s = luaL_checkudata(L, lua_upvalueindex(1), TK_SIGNALS_MT);
	int n;

	if (s->h.fd < 0)
		return 0;
	n = signals_read_one(L, s, 0);
	if (n == 3)
		return luaL_error(L, "%s", lua_tostring(L, -2));
	return n;
}

/*** Iterates over the signals pending now, without waiting:
 * `for sig in sigs:each() do ... end`. A read failure (never seen in
 * practice: a signalfd read fails only with EAGAIN) raises.
 * @function signals:each */
static int signals_each(lua_State *L)
{
	signals_check(L, 1);
	tk_check_nargs(L, 1);
	lua_pushvalue(L, 1);
	lua_pushcclosure(L, signals_iter, 1);
	return 1;
}

/*** The signals this object holds, as names in number order.
 * @function signals:list */
static int signals_list(lua_State *L)
{
	struct lsignals *s = signals_check(L, 1);
	int n = 0;

	tk_check_nargs(L, 1);
	lua_newtable(L);
	for (int sig = 1; sig <= 64; sig++) {
		if (s->set & TK_SIGBIT(sig)) {
			tk_signal_push_name(L, sig);
			lua_rawseti(L, -2, ++n);
		}
	}
	return 1;
}

static int signals_tostring(lua_State *L)
{
	struct lsignals *s = luaL_checkudata(L, 1, TK_SIGNALS_MT);
	luaL_Buffer b;
	int first = 1;

	if (s->h.fd < 0) {
		lua_pushliteral(L, TK_SIGNALS_MT " (closed)");
		return 1;
	}
	luaL_buffinit(L, &b);
	luaL_addstring(&b, TK_SIGNALS_MT " (");
	for (int sig = 1; sig <= 64; sig++) {
		if (!(s->set & TK_SIGBIT(sig)))
			continue;
		if (!first)
			luaL_addchar(&b, ',');
		first = 0;
		tk_signal_push_name(L, sig);
		luaL_addvalue(&b);
	}
	lua_pushfstring(L, "; fd %d)", s->h.fd);
	luaL_addvalue(&b);
	luaL_pushresult(&b);
	return 1;
}

/* takana.signals{...}: subscribes to signals through a signalfd (its LDoc
 * is in lua/takana/init.lua, once; doc/reference.md "Signals, timers,
 * clocks" has the details). */
/* The list of signals at argument 1 as a set; raises on anything else. */
static tk_sigbits signals_set_check(lua_State *L)
{
	tk_sigbits set = 0;
	lua_Integer n;

	luaL_checktype(L, 1, LUA_TTABLE);
	tk_check_nargs(L, 1);
	n = (lua_Integer)lua_rawlen(L, 1);
	lua_pushnil(L);
	while (lua_next(L, 1) != 0) {
		lua_pop(L, 1);
		if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > n) {
			lua_pushfstring(L, "unknown option '%s' (a list of signals expected)",
			                luaL_tolstring(L, -1, NULL));
			luaL_argerror(L, 1, lua_tostring(L, -1));
		}
	}
	luaL_argcheck(L, n > 0, 1, "at least one signal expected");
	for (lua_Integer i = 1; i <= n; i++) {
		const char *why;
		int sig;

		lua_rawgeti(L, 1, i);
		sig = tk_signal_parse(L, -1, &why);
		if (sig < 0) {
			if (lua_type(L, -1) == LUA_TSTRING)
				lua_pushfstring(L, "entry %d: %s '%s'", (int)i, why, lua_tostring(L, -1));
			else if (lua_type(L, -1) == LUA_TNUMBER)
				lua_pushfstring(L, "entry %d: %s", (int)i, why);
			else
				lua_pushfstring(L, "entry %d: %s, got %s", (int)i, why, luaL_typename(L, -1));
			luaL_argerror(L, 1, lua_tostring(L, -1));
		}
		why = tk_signal_refused(sig);
		if (why != NULL) {
			tk_signal_push_name(L, sig);
			lua_pushfstring(L, "entry %d: %s cannot be subscribed: %s", (int)i,
			                lua_tostring(L, -1), why);
			luaL_argerror(L, 1, lua_tostring(L, -1));
		}
		lua_pop(L, 1);
		set |= TK_SIGBIT(sig);
	}
	return set;
}

/* Why this process could not see the signals of set: pushes nil, msg,
 * errno and returns 3, or returns 0 when nothing stands in the way. */
static int signals_unreachable(lua_State *L, tk_sigbits set)
{
	pid_t tid;
	int sig;

	if (set & TK_SIGBIT(SIGCHLD)) {
		struct sigaction sa;
		/* Ignored, CHLD is never sent: the kernel reaps each child itself
		 * (and pidfd waits fail with ECHILD). Not ours to change silently. */
		if (sigaction(SIGCHLD, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN) {
			lua_pushnil(L);
			lua_pushliteral(L, "signals: CHLD is ignored in this process (SIG_IGN, kept across "
			                "exec from the parent), so the kernel reaps children itself and "
			                "sends no CHLD: start it with the default disposition (e.g. "
			                "`env --default-signal=CHLD`)");
			lua_pushinteger(L, EINVAL);
			return 3;
		}
	}
	if (tk_signals_check_threads(set, &tid, &sig)) {
		lua_pushnil(L);
		tk_signal_push_name(L, sig);
		lua_pushfstring(L, "signals: thread %d of this process has %s unblocked, and a %s sent "
		                "to the process may go to it instead: subscribe before other threads "
		                "start (they inherit the mask), or block it in them",
		                (int)tid, lua_tostring(L, -1), lua_tostring(L, -1));
		lua_remove(L, -2);
		lua_pushinteger(L, EBUSY);
		return 3;
	}
	return 0;
}

static int l_signals(lua_State *L)
{
	tk_sigbits set = signals_set_check(L);
	struct lsignals *s;
	int fd, nret;

	nret = signals_unreachable(L, set);
	if (nret > 0)
		return nret;
	s = lua_newuserdatauv(L, sizeof *s, 0);
	memset(s, 0, sizeof *s);
	tk_handle_init(&s->h, "signals object", "r", signals_release);
	luaL_setmetatable(L, TK_SIGNALS_MT);
	fd = tk_signals_open(set);
	if (fd < 0)
		return tk_push_error(L, "signals: signalfd", fd);
	s->h.fd = fd;
	s->set = set;
	s->owner = pthread_self();
	s->held = 1;
	return 1;
}

void tk_signals_open_lib(lua_State *L)
{
	static const luaL_Reg methods[] = {
		{ "read", signals_read },
		{ "each", signals_each },
		{ "list", signals_list },
		{ NULL, NULL },
	};

	tk_handle_newclass(L, TK_SIGNALS_MT, methods, NULL, signals_tostring);
	lua_pop(L, 1);
	lua_pushcfunction(L, l_signals);
	lua_setfield(L, -2, "signals");
}
