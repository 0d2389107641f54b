/* Lua binding of process event streams: core.events_open() returns a
 * "takana.Events" userdata; events become tables only when read. */

/***
 * Event streams, from C.
 * @module takana
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "binding.h"

/* Events moved from the kernel per read() call: bounds one drain so a storm
 * cannot keep a reader in one loop forever. */
#define READ_BATCH 65536

struct levents {
	struct tk_handle h; /* first: the handle base; h.fd is ev.fd */
	struct tk_events ev;
};

static const char *const type_names[TK_EV_TYPES] = {
	[TK_EV_FORK] = "fork", [TK_EV_EXEC] = "exec", [TK_EV_EXIT] = "exit",
	[TK_EV_COMM] = "comm", [TK_EV_LOST] = "lost",
};

static struct levents *events_check(lua_State *L, int idx)
{
	return (struct levents *)tk_handle_check(L, idx, TK_EVENTS_MT);
}

static void events_release(lua_State *L, struct tk_handle *h)
{
	(void)L;
	tk_events_close(&((struct levents *)h)->ev);
}

static void set_u64(lua_State *L, const char *key, uint64_t v)
{
	lua_pushinteger(L, tk_u64_int(v));
	lua_setfield(L, -2, key);
}

/* exec: argv from the NUL-separated bytes read (a cut last argument is
 * kept, argv_truncated says so). */
static void argv_push(lua_State *L, const struct tk_event *e)
{
	const char *p = e->argv, *end = e->argv + e->argv_len;
	lua_Integer n = 0;

	lua_createtable(L, 8, 0);
	while (p < end) {
		const char *nul = memchr(p, '\0', (size_t)(end - p));
		size_t len = (size_t)((nul ? nul : end) - p);

		lua_pushlstring(L, p, len);
		lua_rawseti(L, -2, ++n);
		p += len + 1;
	}
}

/* The generator of event_fill, from TK_EVENT_FIELDS: whether a row's field
 * is there, and how its value is pushed. */
#define WHEN_ALWAYS(e, m, kind, f) 1
#define WHEN_ANY(e, m, kind, f) (((e)->flags & (f)) != 0)
#define WHEN_ALL(e, m, kind, f) (((e)->flags & (f)) == (f))
#define WHEN_NONE(e, m, kind, f) (((e)->flags & (f)) == 0)
#define WHEN_NONZERO(e, m, kind, f) NONZERO_##kind(e, m)
#define NONZERO_INT(e, m) ((e)->m != 0)
#define NONZERO_STR(e, m) ((e)->m[0] != '\0')
#define PUSH_TYPE(L, e, m) lua_pushstring(L, type_name((e)->m))
#define PUSH_INT(L, e, m) lua_pushinteger(L, tk_u64_int((e)->m))
#define PUSH_STR(L, e, m) lua_pushlstring(L, (e)->m, strnlen((e)->m, sizeof (e)->m))
#define PUSH_BOOL(L, e, m) lua_pushboolean(L, ((e)->flags & (m)) != 0)
#define PUSH_ARGV(L, e, m) argv_push(L, e)
#define PUSH_FROM(L, e, m) lua_pushstring(L, ((e)->flags & (m)) ? "proc-later" : "exec")
#define PUSH_REALTIME(L, e, m) lua_pushinteger(L, realtime_of((e)->m, realtime_offset))
#define FIELD_PUSH(name, member, kind, types, when, flags, by)              \
	if (((types) & bit) != 0 && WHEN_##when(e, member, kind, flags)) { \
		PUSH_##kind(L, e, member);                                  \
		lua_setfield(L, -2, #name);                                 \
	}

static const char *type_name(uint32_t type)
{
	return type < TK_EV_TYPES && type_names[type] ? type_names[type] : "?";
}

/* A CLOCK_BOOTTIME stamp as CLOCK_REALTIME: both in ns since their epochs,
 * far from lua_Integer's range either way. */
static lua_Integer realtime_of(uint64_t boot_ns, int64_t offset)
{
	return (lua_Integer)tk_u64_int(boot_ns) + (lua_Integer)offset;
}

/* Sets e's fields in the table on top. */
static void event_fill(lua_State *L, const struct tk_event *e, int64_t realtime_offset)
{
	/* A type this reader does not know (never queued) shows as "?" with
	 * what any process event may carry. */
	uint32_t bit = e->type < TK_EV_TYPES ? TK_EV_BIT(e->type) : TK_EV_PROC_TYPES;

	TK_EVENT_FIELDS(FIELD_PUSH)
}

/* core.event_fields: per type name, the fields its events may carry, in
 * TK_EVENT_FIELDS's order. */
static void event_fields_push(lua_State *L)
{
	lua_createtable(L, 0, TK_EV_TYPES);
	for (int t = TK_EV_FORK; t < TK_EV_TYPES; t++) {
		uint32_t bit = TK_EV_BIT(t);
		lua_Integer n = 0;

		lua_newtable(L);
#define FIELD_NAME(name, member, kind, types, when, flags, by) \
		if (((types) & bit) != 0) {                   \
			lua_pushliteral(L, #name);             \
			lua_rawseti(L, -2, ++n);               \
		}
		TK_EVENT_FIELDS(FIELD_NAME)
#undef FIELD_NAME
		lua_setfield(L, -2, type_names[t]);
	}
}

/* core.event_field_backends: per field, the backends that fill it (the
 * row's `by`), as names. */
static void event_field_backends_push(lua_State *L)
{
	static const struct {
		uint32_t bit;
		const char *backend;
	} by_name[] = { { TK_EVB_BPF, "bpf" }, { TK_EVB_CONN, "connector" }, { TK_EVB_POLL, "poll" } };

	lua_newtable(L);
#define FIELD_BY(name, member, kind, types, when, flags, by)       \
	lua_newtable(L);                                              \
	for (size_t i = 0, n = 0; i < sizeof by_name / sizeof by_name[0]; i++) { \
		if (((by) & by_name[i].bit) != 0) {                   \
			lua_pushstring(L, by_name[i].backend);        \
			lua_rawseti(L, -2, (lua_Integer)++n);         \
		}                                                     \
	}                                                             \
	lua_setfield(L, -2, #name);
	TK_EVENT_FIELDS(FIELD_BY)
#undef FIELD_BY
}

/* What a stream holds outside Lua's heap, in KiB, for the collector: its
 * kernel buffer, and its descriptors, which run out long before memory
 * does (1,024 is a login's limit). A descriptor is weighed as 64 KiB so
 * that dropped streams are collected well before a few dozen of them
 * exhaust a login's descriptors. */
static int stream_cost_kib(const struct tk_events *ev)
{
	size_t kib = ev->held_bytes / 1024 + (size_t)ev->held_fds * 64;

	return kib > INT32_MAX ? INT32_MAX : (int)kib;
}

/* The backend named at arg, as luaL_checkoption would find it. */
static const struct tk_ev_ops *backend_check(lua_State *L, int arg)
{
	const char *name = luaL_checkstring(L, arg);

	for (const struct tk_ev_ops *const *b = tk_ev_backends; *b != NULL; b++)
		if (strcmp((*b)->name, name) == 0)
			return *b;
	luaL_argerror(L, arg, lua_pushfstring(L, "invalid option '%s'", name));
	return NULL;
}

/* core.events_open(backend, mask, interval, buffer[, skipped[, queue]]) ->
 * stream | nil, message, errno, reason. The message is "events: <backend>
 * backend unavailable: <reason>"; the reason alone comes fourth, for
 * stream.skipped and the probe, so no one strips the prefix. skipped: the
 * reasons better backends were passed over, kept as stream.skipped; queue:
 * events held at most. */
static int l_events_open(lua_State *L)
{
	const struct tk_ev_ops *backend = backend_check(L, 1);
	lua_Integer mask = luaL_checkinteger(L, 2);
	double interval = luaL_optnumber(L, 3, 0.1);
	lua_Integer buffer = luaL_optinteger(L, 4, 0);
	lua_Integer queue = luaL_optinteger(L, 6, 0);
	struct levents *e;
	char why[320] = "";
	int err;

	tk_check_nargs(L, 6);
	if (!lua_isnoneornil(L, 5))
		luaL_checktype(L, 5, LUA_TTABLE);
	luaL_argcheck(L, mask > 0 && mask < (1 << TK_EV_LOST), 2, "no event types");
	luaL_argcheck(L, buffer >= 0 && (size_t)buffer <= TK_BYTES_MAX, 4, "buffer must be 0..1 GiB");
	luaL_argcheck(L, queue >= 0 && (size_t)queue <= TK_EVENTS_QUEUE_MAX, 6,
	              "queue must be 0..16777216 events");
	e = lua_newuserdatauv(L, sizeof *e, 2); /* skipped, the read iterator */
	memset(e, 0, sizeof *e);
	tk_handle_init(&e->h, "event stream", "r", events_release);
	e->ev.fd = -1;
	e->ev.closed = 1;
	luaL_setmetatable(L, TK_EVENTS_MT);
	if (lua_istable(L, 5)) {
		lua_pushvalue(L, 5);
		lua_setiuservalue(L, -2, 1);
	}
	err = tk_events_open(&e->ev, backend, (uint32_t)mask, interval,
	                     (size_t)buffer, (size_t)queue, why, sizeof why);
	if (err == -EMFILE || err == -ENFILE) {
		/* Streams dropped without close() may hold the descriptors:
		 * collect them, once, and try again. */
		lua_gc(L, LUA_GCCOLLECT);
		why[0] = '\0';
		err = tk_events_open(&e->ev, backend, (uint32_t)mask,
		                     interval, (size_t)buffer, (size_t)queue, why, sizeof why);
	}
	if (err < 0) {
		const char *reason = why[0] ? why : strerror(-err);

		lua_pushnil(L);
		lua_pushfstring(L, "events: %s backend unavailable: %s", backend->name, reason);
		lua_pushinteger(L, -err);
		lua_pushstring(L, reason);
		return 4;
	}
	e->h.fd = e->ev.fd;
	/* Its descriptors and ring are invisible to the collector: tell it,
	 * as the snapshots do with their records. */
	lua_gc(L, LUA_GCSTEP, stream_cost_kib(&e->ev));
	return 1;
}

/* Room for a fork or exit event's fields (a hint: an exec's, with more, grow it). */
#define EVENT_TABLE_FIELDS 12

/* upvalue 1: the stream (events_read makes the iterator); 2: the table
 * for the next event, or nil. That table is made when a drain ends, after
 * the reader's work: the first event after a wakeup then fills a table
 * instead of allocating one on caches the wait left cold (bench/events.lua:
 * an allocation there is about half of what a Lua reader adds to the
 * kernel's wakeup). Each event is still a table of its own. */
static int events_iter(lua_State *L)
{
	struct levents *e = lua_touserdata(L, lua_upvalueindex(1));
	const struct tk_event *ev;
	struct tk_event copy;

	if (e->h.fd < 0)
		return 0;
	ev = tk_events_next(&e->ev);
	if (ev == NULL) {
		if (lua_type(L, lua_upvalueindex(2)) != LUA_TTABLE) {
			lua_createtable(L, 0, EVENT_TABLE_FIELDS);
			lua_replace(L, lua_upvalueindex(2));
		}
		return 0;
	}
	/* event_fill allocates (strings), and a finalizer run by the collector
	 * there may close or read this stream, freeing the queue ev points
	 * into. */
	memcpy(&copy, ev, tk_event_bytes(ev));
	if (lua_type(L, lua_upvalueindex(2)) == LUA_TTABLE) {
		lua_pushvalue(L, lua_upvalueindex(2));
		lua_pushnil(L);
		lua_replace(L, lua_upvalueindex(2));
	} else {
		lua_createtable(L, 0, EVENT_TABLE_FIELDS);
	}
	event_fill(L, &copy, e->ev.realtime_offset_ns);
	return 1;
}

/*** Drains what is ready, without blocking, up to the queue's bound.
 * @function events:read
 * @treturn[1] function an iterator of event tables
 * @treturn[2] nil, `"events: read (<backend>): <why>"`, errno on a runtime failure */
static int events_read(lua_State *L)
{
	struct levents *e = events_check(L, 1);
	int err;

	tk_check_nargs(L, 1);
	err = tk_events_fill(&e->ev, READ_BATCH);
	if (err < 0) {
		char ctx[48];

		snprintf(ctx, sizeof ctx, "events: read (%s)", e->ev.ops->name);
		if (err == -EXDEV) {
			lua_pushnil(L);
			lua_pushfstring(L, "%s: the stream was opened before a fork(), by the parent; "
			                "open another in this process", ctx);
			lua_pushinteger(L, EXDEV);
			return 3;
		}
		return tk_push_error(L, ctx, err);
	}
	/* One iterator per stream, made at the first read: a read allocates
	 * nothing of its own. */
	if (lua_getiuservalue(L, 1, 2) != LUA_TFUNCTION) {
		lua_pop(L, 1);
		lua_pushvalue(L, 1);
		lua_pushnil(L);
		lua_pushcclosure(L, events_iter, 2);
		lua_pushvalue(L, -1);
		lua_setiuservalue(L, 1, 2);
	}
	return 1;
}

/*** Events known lost since the last call (the count resets): the sum of
 * the lost events' counts, a nil count (a connector overrun, size not yet
 * known) counting as 1. The connector's sequence gaps later give the exact
 * number, and the next lost event carries what the overruns' 1s did not
 * cover; so the total is exact once every CPU has sent again.
 * @function events:lost */
static int events_lost(lua_State *L)
{
	struct levents *e = events_check(L, 1);
	uint64_t n;

	tk_check_nargs(L, 1);
	n = tk_events_take_lost(&e->ev);
	lua_pushinteger(L, tk_u64_int(n));
	return 1;
}

/*** Counters: `received`, `lost` (all time, counted as lost() counts),
 * `lost_by_type` (bpf), `overruns` (connector ENOBUFS), `malformed`,
 * `spoofed` (connector messages not from the kernel, dropped), `who_lost`
 * (connector fork and exec events whose ids could not be read: `who_lost`),
 * `queued` (read from the kernel, not yet taken), `queue` (its bound),
 * `buffer` bytes.
 * @function events:stats */
static int events_stats(lua_State *L)
{
	struct levents *e = events_check(L, 1);

	tk_check_nargs(L, 1);
	lua_createtable(L, 0, 10);
	set_u64(L, "received", e->ev.received);
	set_u64(L, "lost", e->ev.lost_total);
	set_u64(L, "overruns", e->ev.overruns);
	set_u64(L, "malformed", e->ev.malformed);
	set_u64(L, "spoofed", e->ev.spoofed);
	set_u64(L, "duplicates", e->ev.duplicates);
	set_u64(L, "who_lost", e->ev.who_lost);
	set_u64(L, "queued", tk_events_queued(&e->ev));
	set_u64(L, "queue", e->ev.qmax);
	if (e->ev.ring_bytes != 0) {  /* a ring (bpf), whose program counts by type */
		set_u64(L, "buffer", e->ev.ring_bytes);
		lua_createtable(L, 0, TK_EV_LOST);
		for (int t = TK_EV_FORK; t < TK_EV_LOST; t++) {
			lua_pushinteger(L, (lua_Integer)e->ev.lost_by_type[t]);
			lua_setfield(L, -2, type_names[t]);
		}
		lua_setfield(L, -2, "lost_by_type");
	}
	return 1;
}

static int events_tostring(lua_State *L)
{
	struct levents *e = luaL_checkudata(L, 1, TK_EVENTS_MT);

	if (e->h.fd >= 0)
		lua_pushfstring(L, "takana.Events (%s, fd %d)", e->ev.ops->name, e->ev.fd);
	else
		lua_pushliteral(L, "takana.Events (closed)");
	return 1;
}

/* upvalue 1: methods */
static int events_index(lua_State *L)
{
	struct levents *e;
	const char *key;

	/* Methods first: ev:read() comes here at every wakeup. */
	lua_pushvalue(L, 2);
	if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL)
		return 1;
	e = luaL_checkudata(L, 1, TK_EVENTS_MT);
	key = lua_tostring(L, 2);
	if (key != NULL && strcmp(key, "backend") == 0) {
		lua_pushstring(L, e->ev.ops->name);
		return 1;
	}
	if (key != NULL && strcmp(key, "unavailable") == 0) {
		/* Fields its backend fills but this kernel cannot give, and why. */
		lua_newtable(L);
		if (e->ev.loginuid_why[0] != '\0') {
			lua_pushstring(L, e->ev.loginuid_why);
			lua_setfield(L, -2, "loginuid");
		}
		return 1;
	}
	if (key != NULL && strcmp(key, "skipped") == 0) {
		if (lua_getiuservalue(L, 1, 1) != LUA_TTABLE) {
			lua_pop(L, 1);
			lua_newtable(L);
		}
		return 1;
	}
	lua_pushnil(L);
	return 1;
}

void tk_events_open_lib(lua_State *L)
{
	static const luaL_Reg methods[] = {
		{ "read", events_read },
		{ "lost", events_lost },
		{ "stats", events_stats },
		{ NULL, NULL },
	};

	tk_handle_newclass(L, TK_EVENTS_MT, methods, events_index, events_tostring);
	lua_pop(L, 1);
	lua_pushcfunction(L, l_events_open);
	lua_setfield(L, -2, "events_open");
	lua_createtable(L, 0, TK_EV_LOST);
	for (int t = TK_EV_FORK; t < TK_EV_LOST; t++) {
		lua_pushinteger(L, TK_EV_BIT(t));
		lua_setfield(L, -2, type_names[t]);
	}
	lua_setfield(L, -2, "event_bits");
	event_fields_push(L);
	lua_setfield(L, -2, "event_fields");
	event_field_backends_push(L);
	lua_setfield(L, -2, "event_field_backends");
	/* The backends' names, best first: the order events{} tries them in. */
	lua_newtable(L);
	for (lua_Integer i = 0; tk_ev_backends[i] != NULL; i++) {
		lua_pushstring(L, tk_ev_backends[i]->name);
		lua_rawseti(L, -2, i + 1);
	}
	lua_setfield(L, -2, "event_backends");
	/* The bounds events{} checks before opening. */
	lua_pushnumber(L, TK_EVENTS_INTERVAL_MIN);
	lua_setfield(L, -2, "event_interval_min");
	lua_pushnumber(L, TK_EVENTS_INTERVAL_MAX);
	lua_setfield(L, -2, "event_interval_max");
	lua_pushinteger(L, (lua_Integer)TK_BYTES_MAX);
	lua_setfield(L, -2, "event_buffer_max");
	lua_pushinteger(L, (lua_Integer)TK_EVENTS_QUEUE_MAX);
	lua_setfield(L, -2, "event_queue_max");
}
