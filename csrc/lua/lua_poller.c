/* Lua binding of pollers: one epoll set kept across waits, its
 * registrations kept with it (takana.poller), and the set takana.poll
 * borrows for each call. A wait makes no set, registers nothing and, when
 * nothing is ready, allocates nothing. */

/***
 * Pollers.
 * @module takana
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "binding.h"
#include "epoll_set.h"

/* The poller's uservalues: slot -> object, object -> slot, and the table
 * wait() returns, reused. */
enum { UV_OBJS = 1, UV_INDEX, UV_READY, UV_COUNT = UV_READY };

/* Registry key: the poller takana.poll borrows. */
#define SHARED_KEY "takana.poll_set"

struct lpoller;

/* One object in one poller, owned by the poller. A takana handle lists its
 * registrations too (h->polls), so that its close takes them out. */
struct tk_poll_reg {
	struct lpoller *owner;
	struct tk_handle *h;        /* NULL: a raw descriptor or a foreign object */
	struct tk_poll_reg *hnext;  /* the handle's next registration */
	int fd;
	uint32_t slot;              /* in owner->regs and the objects table */
	uint32_t gen;               /* beside the slot in epoll's data */
	int dead;                   /* its handle was closed: out of the set */
	uint64_t dev, ino;          /* raw and foreign: the file registered */
};

struct lpoller {
	struct tk_handle h;         /* first: the handle base; h.fd is the set */
	struct tk_poll_reg **regs;  /* by slot, from 1; NULL: free */
	uint32_t cap;               /* slots 1..cap-1 exist */
	uint32_t ndead;             /* dead registrations not yet dropped */
	uint32_t gen;
	lua_Integer nlast;          /* entries the result table holds */
	pid_t pid;                  /* the process that made the set */
};

static struct lpoller *poller_check(lua_State *L, int idx)
{
	return (struct lpoller *)tk_handle_check(L, idx, TK_POLLER_MT);
}

static void reg_unlink(struct tk_poll_reg *r)
{
	if (r->h == NULL)
		return;
	for (struct tk_poll_reg **pp = &r->h->polls; *pp != NULL; pp = &(*pp)->hnext) {
		if (*pp == r) {
			*pp = r->hnext;
			break;
		}
	}
	r->h = NULL;
	r->hnext = NULL;
}

void tk_poller_forget(struct tk_handle *h)
{
	while (h->polls != NULL) {
		struct tk_poll_reg *r = h->polls;

		h->polls = r->hnext;
		r->hnext = NULL;
		r->h = NULL;
		/* The descriptor is still open: DEL finds this very file. */
		if (r->owner->h.fd >= 0)
			(void)tk_epoll_ctl(r->owner->h.fd, TK_EP_DEL, r->fd, 0, 0);
		r->dead = 1;
		r->owner->ndead++;
	}
}

/* Drops r from p (at pidx) and its tables; setting nil allocates nothing,
 * so this never raises. */
static void reg_drop(lua_State *L, struct lpoller *p, int pidx, struct tk_poll_reg *r)
{
	lua_getiuservalue(L, pidx, UV_OBJS);
	lua_getiuservalue(L, pidx, UV_INDEX);
	lua_rawgeti(L, -2, r->slot);
	lua_pushnil(L);
	lua_rawset(L, -3);
	lua_pushnil(L);
	lua_rawseti(L, -3, r->slot);
	lua_pop(L, 2);
	p->regs[r->slot] = NULL;
	if (r->dead)
		p->ndead--;
	reg_unlink(r);
	free(r);
}

/* Drops what closed handles left: they are out of the set already. */
static void poller_sweep(lua_State *L, struct lpoller *p, int pidx)
{
	for (uint32_t s = 1; p->ndead > 0 && s < p->cap; s++)
		if (p->regs[s] != NULL && p->regs[s]->dead)
			reg_drop(L, p, pidx, p->regs[s]);
}

/* A raw descriptor or a foreign object's: whether fd still is the file
 * registered. One closed under the poller, and its number given to
 * another file, must not be reported (nor taken out by number). */
static int reg_same_file(const struct tk_poll_reg *r)
{
	uint64_t dev, ino;

	return tk_fd_identity(r->fd, &dev, &ino) == 0 && dev == r->dev && ino == r->ino;
}

/* close, __gc and __close: the registrations go (the objects stay open,
 * they are not the poller's), then the set. */
static void poller_release(lua_State *L, struct tk_handle *h)
{
	struct lpoller *p = (struct lpoller *)h;

	for (uint32_t s = 1; s < p->cap; s++) {
		if (p->regs[s] != NULL) {
			reg_unlink(p->regs[s]);
			free(p->regs[s]);
		}
	}
	free(p->regs);
	p->regs = NULL;
	p->cap = 0;
	p->ndead = 0;
	close(h->fd);
	/* handle_release's object, at 1: what it held is garbage now. */
	for (int uv = 1; uv <= UV_COUNT; uv++) {
		lua_pushnil(L);
		lua_setiuservalue(L, 1, uv);
	}
}

/* Pushes a new poller, or nil, message, errno. */
static int poller_push(lua_State *L, const char *ctx)
{
	struct lpoller *p = lua_newuserdatauv(L, sizeof *p, UV_COUNT);
	int fd;

	memset(p, 0, sizeof *p);
	tk_handle_init(&p->h, "poller", "r", poller_release);
	luaL_setmetatable(L, TK_POLLER_MT);
	for (int uv = 1; uv <= UV_COUNT; uv++) {
		lua_newtable(L);
		lua_setiuservalue(L, -2, uv);
	}
	fd = tk_epoll_open();
	if (fd == -EMFILE || fd == -ENFILE) {
		/* Objects dropped without close() may hold the descriptors. */
		lua_gc(L, LUA_GCCOLLECT);
		fd = tk_epoll_open();
	}
	if (fd < 0)
		return tk_push_error(L, ctx, fd);
	p->h.fd = fd;
	p->pid = getpid();
	tk_handle_opened(L, fd);
	return 1;
}

/*** A poller: one epoll set kept across waits, for a loop that waits on
 * the same objects again and again (`takana.poll` registers its list anew
 * at each call). It is pollable itself (`:fileno()`, "r"), so it nests in
 * cqueues, luv or another poller. Objects registered stay their owner's:
 * closing one takes it out of every poller (a later `remove` returns
 * false), and closing the poller closes none of them. A child of fork()
 * shares its parent's set: make a new poller there.
 * @function poller
 * @treturn[1] poller `:add(obj[, events])`, `:modify(obj, events)`,
 *   `:remove(obj)`, `:wait([timeout])`, `:fileno()`, the cqueues
 *   protocol, `:close()`
 * @treturn[2] nil, "poller: message", errno */
static int l_poller(lua_State *L)
{
	tk_check_nargs(L, 0);
	return poller_push(L, "poller");
}

int tk_poller_shared_fd(lua_State *L)
{
	struct lpoller *p;
	int fd;

	lua_getfield(L, LUA_REGISTRYINDEX, SHARED_KEY);
	p = luaL_testudata(L, -1, TK_POLLER_MT);
	if (p != NULL && p->h.fd >= 0 && p->pid == getpid()) {
		fd = p->h.fd;
		lua_pop(L, 1);
		return fd;
	}
	lua_pop(L, 1);
	if (poller_push(L, "poll") != 1) {
		fd = (int)-lua_tointeger(L, -1);
		lua_pop(L, 4); /* the closed poller, nil, message, errno */
		return fd;
	}
	fd = ((struct lpoller *)lua_touserdata(L, -1))->h.fd;
	lua_setfield(L, LUA_REGISTRYINDEX, SHARED_KEY);
	return fd;
}

/* What to wait for, from cqueues' letters: r (readable), w (writable), p
 * (priority data: cgroup.events, PSI triggers). 0 for anything else. */
static unsigned events_parse(const char *s)
{
	unsigned what = 0;

	if (*s == '\0')
		return 0;
	for (; *s != '\0'; s++) {
		if (*s == 'r')
			what |= TK_EP_IN;
		else if (*s == 'w')
			what |= TK_EP_OUT;
		else if (*s == 'p')
			what |= TK_EP_PRI;
		else
			return 0;
	}
	return what;
}

static unsigned events_check(lua_State *L, int idx)
{
	unsigned what = events_parse(luaL_checkstring(L, idx));

	if (what == 0)
		luaL_argerror(L, idx, "events: \"r\", \"w\" or \"p\" expected (or letters of them: \"rw\")");
	return what;
}

/* The slot of the object at idx in p (at pidx), 0 when not registered. */
static uint32_t index_slot(lua_State *L, int pidx, int idx)
{
	lua_Integer slot;

	lua_getiuservalue(L, pidx, UV_INDEX);
	lua_pushvalue(L, idx);
	lua_rawget(L, -2);
	slot = lua_tointeger(L, -1);
	lua_pop(L, 2);
	return (uint32_t)slot;
}

/* The descriptor of the object at idx, for add: a raw descriptor, a takana
 * handle (whose fileno() may open it: a cgroup's cgroup.events) or
 * anything with fileno(). Sets *h and *what (the object's own events(),
 * when the caller gave none). Returns 1 with the fd in *fd, or pushes nil,
 * message, errno and returns 3. */
static int target_fd(lua_State *L, int idx, int *fd, struct tk_handle **h, unsigned *what)
{
	int t = lua_type(L, idx), ev_given = *what != 0;

	*h = NULL;
	if (t == LUA_TNUMBER) {
		lua_Integer n = lua_isinteger(L, idx) ? lua_tointeger(L, idx) : -1;

		if (n < 0 || n > INT32_MAX)
			luaL_argerror(L, idx, "a descriptor (integer 0..2^31-1) expected");
		*fd = (int)n;
		if (!ev_given)
			*what = TK_EP_IN;
		return 1;
	}
	*h = tk_handle_test(L, idx);
	if (*h != NULL && (*h)->fd < 0)
		luaL_error(L, "attempt to use a closed %s", (*h)->kind);
	if (*h == NULL && t != LUA_TTABLE && !(t == LUA_TUSERDATA && luaL_getmetafield(L, idx, "__index") != LUA_TNIL))
		luaL_argerror(L, idx, lua_pushfstring(L, "pollable object or descriptor expected, got %s",
		                                      luaL_typename(L, idx)));
	if (t == LUA_TUSERDATA && *h == NULL)
		lua_pop(L, 1); /* __index */
	if (lua_getfield(L, idx, "fileno") != LUA_TFUNCTION)
		luaL_argerror(L, idx, lua_pushfstring(L, "pollable object expected (a %s without fileno())",
		                                      luaL_typename(L, idx)));
	lua_pushvalue(L, idx);
	lua_call(L, 1, 3);
	if (lua_isnil(L, -3) && lua_isstring(L, -2)) {
		lua_pushnil(L);
		lua_pushfstring(L, "poller add: %s", lua_tostring(L, -3));
		lua_pushvalue(L, -3);
		return 3;
	}
	if (!lua_isinteger(L, -3) || lua_tointeger(L, -3) < 0 || lua_tointeger(L, -3) > INT32_MAX)
		luaL_argerror(L, idx, "the object's fileno() gave no descriptor");
	*fd = (int)lua_tointeger(L, -3);
	lua_pop(L, 3);
	if (ev_given)
		return 1;
	if (*h != NULL) {
		*what = events_parse((*h)->poll_events);
	} else {
		/* A foreign object's events(), when it has one; as takana.poll
		 * reads it: anything but "w" and "p" is "r". */
		*what = TK_EP_IN;
		if (lua_getfield(L, idx, "events") == LUA_TFUNCTION) {
			lua_pushvalue(L, idx);
			lua_call(L, 1, 1);
			if (lua_type(L, -1) == LUA_TSTRING && events_parse(lua_tostring(L, -1)) != 0)
				*what = events_parse(lua_tostring(L, -1));
		}
		lua_pop(L, 1);
	}
	if (*what == 0)
		*what = TK_EP_IN;
	return 1;
}

/* A free slot of p, the table of slots grown as needed: the slot, or 0
 * when out of memory. */
static uint32_t slot_take(struct lpoller *p)
{
	uint32_t s, cap;
	struct tk_poll_reg **regs;

	for (s = 1; s < p->cap; s++)
		if (p->regs[s] == NULL)
			return s;
	if (p->cap >= UINT32_MAX / 2)
		return 0;
	cap = p->cap < 16 ? 16 : p->cap * 2;
	regs = realloc(p->regs, cap * sizeof(struct tk_poll_reg *));
	if (regs == NULL)
		return 0;
	memset(regs + p->cap, 0, (cap - p->cap) * sizeof(struct tk_poll_reg *));
	s = p->cap > 0 ? p->cap : 1;
	p->regs = regs;
	p->cap = cap;
	return s;
}

/*** Registers obj: a takana object (pidfd, process, child, event stream,
 * cgroup handle, signals, timer, pressure trigger, pipe, socket, poller),
 * anything else with `fileno()`, or a raw descriptor (an integer). Waits
 * for what events says, or for what the object's `events()` says ("r" for
 * a raw descriptor). Registering an object twice raises; one descriptor
 * under two objects is the kernel's EEXIST. Remove a raw descriptor (or a
 * foreign object's) before closing it: the poller cannot see that close,
 * and only tells, when it fires, that the number is no longer the file it
 * registered (a closed takana object is taken out by its close).
 * @function poller:add
 * @param obj
 * @string[opt] events "r", "w", "p", or letters of them ("rw")
 * @treturn[1] true
 * @treturn[2] nil, "poller add: message", errno (EBADF: not open; EEXIST:
 *   the descriptor is registered already; EPERM: a regular file, which
 *   epoll cannot wait for) */
static int poller_add(lua_State *L)
{
	struct lpoller *p = poller_check(L, 1);
	struct tk_handle *h;
	struct tk_poll_reg *r;
	unsigned what = 0;
	uint32_t slot;
	int fd, err;

	tk_check_nargs(L, 3);
	luaL_argcheck(L, !lua_isnoneornil(L, 2), 2, "pollable object or descriptor expected, got nil");
	if (!lua_isnoneornil(L, 3))
		what = events_check(L, 3);
	poller_sweep(L, p, 1);
	if (index_slot(L, 1, 2) != 0)
		luaL_argerror(L, 2, "already registered in this poller (modify() changes its events)");
	if (target_fd(L, 2, &fd, &h, &what) != 1)
		return 3;
	/* fileno() may have run Lua code: the poller, or the handle, closed. */
	if (p->h.fd < 0)
		luaL_error(L, "attempt to use a closed poller");
	if (h != NULL && h->fd < 0)
		luaL_error(L, "attempt to use a closed %s", h->kind);
	if (index_slot(L, 1, 2) != 0)
		luaL_argerror(L, 2, "already registered in this poller (modify() changes its events)");
	slot = slot_take(p);
	if (slot == 0)
		return tk_push_error(L, "poller add", -ENOMEM);
	/* The tables first: a memory error there raises with nothing held. */
	lua_getiuservalue(L, 1, UV_OBJS);
	lua_pushvalue(L, 2);
	lua_rawseti(L, -2, slot);
	lua_getiuservalue(L, 1, UV_INDEX);
	lua_pushvalue(L, 2);
	lua_pushinteger(L, slot);
	lua_rawset(L, -3);
	lua_pop(L, 2);
	r = calloc(1, sizeof *r);
	err = r == NULL ? -ENOMEM : 0;
	if (err == 0 && h == NULL)
		err = tk_fd_identity(fd, &r->dev, &r->ino);
	if (err == 0) {
		r->gen = ++p->gen;
		err = tk_epoll_ctl(p->h.fd, TK_EP_ADD, fd, what, (uint64_t)slot | (uint64_t)r->gen << 32);
	}
	if (err < 0) {
		lua_getiuservalue(L, 1, UV_OBJS);
		lua_pushnil(L);
		lua_rawseti(L, -2, slot);
		lua_getiuservalue(L, 1, UV_INDEX);
		lua_pushvalue(L, 2);
		lua_pushnil(L);
		lua_rawset(L, -3);
		lua_pop(L, 2);
		free(r);
		return tk_push_error(L, "poller add", err);
	}
	r->owner = p;
	r->fd = fd;
	r->slot = slot;
	if (h != NULL) {
		r->h = h;
		r->hnext = h->polls;
		h->polls = r;
	}
	p->regs[slot] = r;
	lua_pushboolean(L, 1);
	return 1;
}

/* The live registration of the object at 2, or a raise. */
static struct tk_poll_reg *reg_check(lua_State *L, struct lpoller *p)
{
	struct tk_handle *h = tk_handle_test(L, 2);
	uint32_t slot;

	luaL_argcheck(L, !lua_isnoneornil(L, 2), 2, "pollable object or descriptor expected, got nil");
	if (h != NULL && h->fd < 0)
		luaL_error(L, "attempt to use a closed %s", h->kind);
	poller_sweep(L, p, 1);
	slot = index_slot(L, 1, 2);
	if (slot == 0)
		luaL_argerror(L, 2, "not registered in this poller");
	return p->regs[slot];
}

/*** Changes what a registered object is waited for.
 * @function poller:modify
 * @param obj
 * @string events "r", "w", "p", or letters of them
 * @treturn[1] true
 * @treturn[2] nil, "poller modify: message", errno (EBADF: a raw
 *   descriptor closed since add, now dropped) */
static int poller_modify(lua_State *L)
{
	struct lpoller *p = poller_check(L, 1);
	unsigned what = events_check(L, 3);
	struct tk_poll_reg *r;
	int err;

	tk_check_nargs(L, 3);
	r = reg_check(L, p);
	if (r->h == NULL && !reg_same_file(r)) {
		reg_drop(L, p, 1, r);
		return tk_push_error(L, "poller modify: the descriptor was closed since add", -EBADF);
	}
	err = tk_epoll_ctl(p->h.fd, TK_EP_MOD, r->fd, what, (uint64_t)r->slot | (uint64_t)r->gen << 32);
	if (err < 0)
		return tk_push_error(L, "poller modify", err);
	lua_pushboolean(L, 1);
	return 1;
}

/*** Takes obj out of the poller.
 * @function poller:remove
 * @param obj
 * @treturn boolean true when it was registered, false when not (or no
 *   longer: closing an object takes it out) */
static int poller_remove(lua_State *L)
{
	struct lpoller *p = poller_check(L, 1);
	struct tk_poll_reg *r;
	uint32_t slot;

	tk_check_nargs(L, 2);
	luaL_argcheck(L, !lua_isnoneornil(L, 2), 2, "pollable object or descriptor expected, got nil");
	poller_sweep(L, p, 1);
	slot = index_slot(L, 1, 2);
	if (slot == 0) {
		lua_pushboolean(L, 0);
		return 1;
	}
	r = p->regs[slot];
	/* A raw descriptor closed since add: its number may be another
	 * file's now, which DEL would take out instead. */
	if (r->h != NULL || reg_same_file(r))
		(void)tk_epoll_ctl(p->h.fd, TK_EP_DEL, r->fd, 0, 0);
	reg_drop(L, p, 1, r);
	lua_pushboolean(L, 1);
	return 1;
}

/*** Waits until registered objects are ready, at most timeout seconds.
 * Returns the same table at every call of this poller, refilled (copy
 * what you keep past the next wait): a wait that finds nothing ready
 * allocates nothing. At most 64 objects per call; the others stay ready
 * for the next (registrations are level-triggered).
 * @function poller:wait
 * @number[opt] timeout seconds, 0 to 1 year; nil waits forever
 * @treturn[1] {obj,...} the ready objects (empty on timeout, EINTR, or a
 *   wakeup for a raw descriptor closed under the poller, which is dropped)
 * @treturn[1] int how many
 * @treturn[2] nil, "poller wait: message", errno */
static int poller_wait(lua_State *L)
{
	struct lpoller *p = poller_check(L, 1);
	uint64_t data[TK_EP_BATCH];
	lua_Integer k = 0;
	int64_t ms;
	int n;

	tk_check_nargs(L, 2);
	ms = tk_timeout_check(L, 2);
	poller_sweep(L, p, 1);
	n = tk_epoll_wait_data(p->h.fd, data, TK_EP_BATCH, ms);
	if (n < 0)
		return tk_push_error(L, "poller wait", n);
	lua_settop(L, 1);
	lua_getiuservalue(L, 1, UV_READY); /* 2 */
	lua_getiuservalue(L, 1, UV_OBJS);  /* 3 */
	for (int i = 0; i < n; i++) {
		uint32_t slot = (uint32_t)data[i], gen = (uint32_t)(data[i] >> 32);
		struct tk_poll_reg *r = slot < p->cap ? p->regs[slot] : NULL;

		if (r == NULL || r->gen != gen || r->dead)
			continue;
		if (r->h == NULL && !reg_same_file(r)) {
			reg_drop(L, p, 1, r);
			continue;
		}
		lua_rawgeti(L, 3, slot);
		lua_rawseti(L, 2, ++k);
	}
	for (lua_Integer j = k + 1; j <= p->nlast; j++) {
		lua_pushnil(L);
		lua_rawseti(L, 2, j);
	}
	p->nlast = k;
	lua_settop(L, 2);
	lua_pushinteger(L, k);
	return 2;
}

void tk_poller_open_lib(lua_State *L)
{
	static const luaL_Reg methods[] = {
		{ "add", poller_add },
		{ "modify", poller_modify },
		{ "remove", poller_remove },
		{ "wait", poller_wait },
		{ NULL, NULL },
	};

	tk_handle_newclass(L, TK_POLLER_MT, methods, NULL, NULL);
	lua_pop(L, 1);
	lua_pushcfunction(L, l_poller);
	lua_setfield(L, -2, "poller");
}
