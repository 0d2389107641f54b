/* The base of every descriptor-owning object (pidfd, cgroup handle, event
 * stream, and what comes after): one close that serves close, __gc and
 * __close, and the poll protocol of takana.poll, cqueues and luv. Each class
 * keeps only what is its own. */

/***
 * What every descriptor-owning object shares.
 * @module takana
 */
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "binding.h"
#include "self.h"

/* Registry key: a set of the handle classes' metatables. */
#define CLASSES "takana.handle_classes"

void tk_handle_init(struct tk_handle *h, const char *kind, const char *poll_events,
                    void (*release)(lua_State *L, struct tk_handle *h))
{
	h->fd = -1;
	h->kind = kind;
	h->poll_events = poll_events;
	h->release = release;
	h->polls = NULL;
}

/* Objects created since the last collection forced by descriptor pressure. */
static _Atomic long created_since_collect;

void tk_handle_opened(lua_State *L, int fd)
{
	long created = atomic_fetch_add(&created_since_collect, 1) + 1;
	rlim_t soft, hard;

	/* Descriptors are numbered lowest free first, so a new one this high
	 * means nearly all below it are taken: with a 1,024 soft limit, a loop
	 * that leaves its objects to the collector runs out long before the
	 * collector sees any memory worth its while. A full collection then;
	 * at most once per an eighth of the limit of new objects, so a program
	 * that really holds that many does not pay one per object. */
	/* The soft limit is above fd: too few objects for limit/8 are too
	 * few for fd/8, and that needs no getrlimit on each object. */
	if (fd < 64 || created < fd / 8 || tk_nofile_get(&soft, &hard) < 0 || soft == RLIM_INFINITY)
		return;
	if ((rlim_t)fd < soft / 4 * 3 || (rlim_t)created < soft / 8)
		return;
	atomic_store(&created_since_collect, 0);
	lua_gc(L, LUA_GCCOLLECT);
}

struct tk_handle *tk_handle_check(lua_State *L, int idx, const char *mt)
{
	struct tk_handle *h = luaL_checkudata(L, idx, mt);

	if (h->fd < 0)
		luaL_error(L, "attempt to use a closed %s", h->kind);
	return h;
}

/* cqueues keeps every descriptor it has polled in its epoll set and fails
 * its whole loop ("unable to update event disposition: Bad file
 * descriptor") once one is closed under it; cqueues.cancel(fd) makes it
 * forget the descriptor. A no-op when cqueues is not loaded. luv has no such
 * registry: its poll handle must be stopped by its owner. */
void tk_handle_forget_fd(lua_State *L, int fd)
{
	if (fd < 0)
		return;
	lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
	if (lua_getfield(L, -1, "cqueues") == LUA_TTABLE &&
	    lua_getfield(L, -1, "cancel") == LUA_TFUNCTION) {
		lua_pushinteger(L, fd);
		if (lua_pcall(L, 1, 0, 0) != LUA_OK)
			lua_pop(L, 1); /* closing must not fail: the fd goes anyway */
		lua_pop(L, 2);
		return;
	}
	lua_pop(L, 3);
}

struct tk_handle *tk_handle_test(lua_State *L, int idx)
{
	struct tk_handle *h = lua_touserdata(L, idx);
	int is_handle = 0;

	/* `pidfd.close(snapshot)` must not read a snapshot as a handle. */
	if (h != NULL && lua_getmetatable(L, idx)) {
		lua_getfield(L, LUA_REGISTRYINDEX, CLASSES);
		lua_pushvalue(L, -2);
		is_handle = lua_rawget(L, -2) == LUA_TBOOLEAN;
		lua_pop(L, 3);
	}
	return is_handle ? h : NULL;
}

/* close, __gc and __close (which passes the error object as a second
 * argument): safe to call twice, and on a handle whose open failed. */
static int handle_release(lua_State *L)
{
	struct tk_handle *h = tk_handle_test(L, 1);

	if (h == NULL)
		return luaL_typeerror(L, 1, "takana handle");
	if (h->fd >= 0) {
		/* Out of every poller first: a registration left behind would
		 * fire for whatever file later gets this descriptor's number
		 * (or for this file, while a fork()ed child still holds it). */
		tk_poller_forget(h);
		tk_handle_forget_fd(L, h->fd);
		if (h->release != NULL)
			h->release(L, h);
		else
			close(h->fd);
		h->fd = -1;
	}
	return 0;
}

/*** Closes the object; safe to call twice. `__gc` and `__close` do the
 * same, and a closed object raises "attempt to use a closed ..." on use.
 * @function handle:close */
static int handle_close(lua_State *L)
{
	tk_check_nargs(L, 1);
	return handle_release(L);
}

/* upvalue 1: the metatable name */
static struct tk_handle *handle_self(lua_State *L)
{
	return tk_handle_check(L, 1, lua_tostring(L, lua_upvalueindex(1)));
}

/*** The descriptor to poll: readable (or, for a cgroup, POLLPRI) when the
 * object has something to say.
 * @function handle:fileno */
/*** The same as `fileno()`, by the name cqueues looks for.
 * @function handle:pollfd */
static int handle_fileno(lua_State *L)
{
	struct tk_handle *h = handle_self(L);

	tk_check_nargs(L, 1);
	lua_pushinteger(L, h->fd);
	return 1;
}

/*** What to wait for on `fileno()`, in cqueues' words: "r" (readable) or
 * "p" (priority: a cgroup's cgroup.events). With luv, start a `uv.new_poll`
 * with the same letter: `poll:start("p", cb)` for a cgroup.
 * @function handle:events */
static int handle_events(lua_State *L)
{
	struct tk_handle *h = handle_self(L);

	tk_check_nargs(L, 1);
	lua_pushstring(L, h->poll_events);
	return 1;
}

/*** nil: the object sets no deadline of its own (cqueues' protocol).
 * @function handle:timeout */
static int handle_timeout(lua_State *L)
{
	handle_self(L);
	tk_check_nargs(L, 1);
	lua_pushnil(L);
	return 1;
}

static int handle_tostring(lua_State *L)
{
	struct tk_handle *h = lua_touserdata(L, 1);

	lua_getfield(L, lua_upvalueindex(1), "__name");
	if (h->fd < 0)
		lua_pushfstring(L, "%s (closed)", lua_tostring(L, -1));
	else
		lua_pushfstring(L, "%s (fd %d)", lua_tostring(L, -1), h->fd);
	return 1;
}

void tk_handle_newclass(lua_State *L, const char *mt, const luaL_Reg *methods,
                        lua_CFunction index, lua_CFunction tostring)
{
	static const luaL_Reg base[] = {
		{ "fileno", handle_fileno },
		{ "pollfd", handle_fileno },
		{ "events", handle_events },
		{ "timeout", handle_timeout },
		{ NULL, NULL },
	};

	luaL_newmetatable(L, mt);
	if (luaL_getsubtable(L, LUA_REGISTRYINDEX, CLASSES) == 0) {
		lua_pushliteral(L, "k"); /* weak keys: a state may be closed */
		lua_setfield(L, -2, "__mode");
		lua_pushvalue(L, -1);
		lua_setmetatable(L, -2);
	}
	lua_pushvalue(L, -2);
	lua_pushboolean(L, 1);
	lua_rawset(L, -3);
	lua_pop(L, 1);
	lua_newtable(L);
	lua_pushstring(L, mt);
	luaL_setfuncs(L, base, 1);
	lua_pushcfunction(L, handle_close);
	lua_setfield(L, -2, "close");
	/* The class's own methods come last, so they may override the base's. */
	luaL_setfuncs(L, methods, 0);
	lua_pushvalue(L, -1);
	if (index != NULL)
		lua_pushcclosure(L, index, 1);
	lua_setfield(L, -3, "__index");
	lua_pushcfunction(L, handle_release);
	lua_setfield(L, -3, "__gc");
	lua_pushcfunction(L, handle_release);
	lua_setfield(L, -3, "__close");
	if (tostring != NULL) {
		lua_pushcfunction(L, tostring);
	} else {
		lua_pushvalue(L, -2);
		lua_pushcclosure(L, handle_tostring, 1);
	}
	lua_setfield(L, -3, "__tostring");
	lua_remove(L, -2);
}
