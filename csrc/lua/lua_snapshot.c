/* Lua binding of snapshots: one userdata holding every record, record
 * views that read fields straight from it, and the delta between two
 * snapshots. Tables are only built when the caller asks for them. */

/***
 * Snapshots and records, from C.
 * @module takana
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "binding.h"
#include "snapshot_query.h"

struct lsnap {
	struct tk_recbuf rb;
	uint32_t fields;       /* TK_F_* bits asked for, plus TK_F_IDENTITY: reading another raises */
	uint64_t time_ns;
	const char *backend;   /* static string */
	int collected;         /* __gc ran: the records are freed */
	struct tk_children children;   /* built by the first snap:children */
};

/* In every record whatever the selection: an identity check (snap:process,
 * a pid reused between two snapshots) needs pid and start_ns, and every
 * backend reads them (TK_F_ALWAYS). */
#define TK_F_IDENTITY (TK_F(PID) | TK_F(START))

/* A movable view of one record. Its user value keeps the snapshot alive;
 * it holds an index, not a pointer, and every access checks the snapshot,
 * because a finalizer can resurrect a view after its snapshot's __gc ran
 * (both unreachable in one cycle, the other object finalized later). */
struct lrecord {
	size_t idx;            /* record shown: next - 1; none while next == 0 */
	size_t next;           /* iteration position when used by snap:each() */
};

static uint32_t member_u32(const struct tk_record *r, const struct tk_field_desc *d)
{
	uint32_t v;
	memcpy(&v, (const char *)r + d->offset, sizeof v);
	return v;
}

static uint64_t member_u64(const struct tk_record *r, const struct tk_field_desc *d)
{
	uint64_t v;
	memcpy(&v, (const char *)r + d->offset, sizeof v);
	return v;
}

/* The record's cmdline as a table, or nil. Its bytes are copied first, to
 * the C stack when short, else to a Lua string: the table's allocations
 * can run a finalizer that frees text. */
static void cmdline_push(lua_State *L, const struct tk_record *r, const char *text)
{
	char small[512];

	if (r->cmdline_len == TK_CMDLINE_NONE || text == NULL) {
		lua_pushnil(L);
	} else if (r->cmdline_len <= sizeof small) {
		memcpy(small, text + r->cmdline_off, r->cmdline_len);
		tk_push_argv(L, small, r->cmdline_len);
	} else {
		size_t len;
		const char *copy;

		lua_pushlstring(L, text + r->cmdline_off, r->cmdline_len);
		copy = lua_tolstring(L, -1, &len);
		tk_push_argv(L, copy, len);
		lua_remove(L, -2);
	}
}

/* The one check of a field against a snapshot's selection, for record
 * views, record tables, filter{}, delta() and snap:cgroup alike: a field
 * left out raises, naming it and the selection, where a nil would read
 * as "false" or "none" (p.kthread, p.cgroup_id). who: the message's
 * prefix ("" or "filter{uid=}: "...). */
static void field_need(lua_State *L, uint32_t fields, int id, const char *who)
{
	luaL_Buffer b;

	if (fields & (1u << id))
		return;
	luaL_buffinit(L, &b);
	for (int i = 0; i < TK_FLD_COUNT; i++) {
		if (!(fields & (1u << i)))
			continue;
		if (luaL_bufflen(&b) > 0)
			luaL_addstring(&b, ", ");
		luaL_addstring(&b, tk_record_fields[i].name);
	}
	luaL_pushresult(&b);
	luaL_error(L, "%sfield '%s' is not in this snapshot's selection (%s): add it to "
	           "fields = {...}", who, tk_record_fields[id].name, lua_tostring(L, -1));
}

/* A selected field's value: nil only for a cgroup_id of 0 (no cgroup2
 * hierarchy mounted, or a cgroup outside this namespace's) and a cmdline
 * that could not be read. text: the snapshot's, for cmdline. */
static void field_push(lua_State *L, const struct tk_record *r, int id, uint32_t fields,
                       const char *text)
{
	const struct tk_field_desc *d = &tk_record_fields[id];

	field_need(L, fields, id, "");
	switch (d->kind) {
	case TK_KIND_U32: lua_pushinteger(L, member_u32(r, d)); break;
	case TK_KIND_S32: lua_pushinteger(L, (int32_t)member_u32(r, d)); break;
	case TK_KIND_U64:
	case TK_KIND_NS:
	case TK_KIND_BYTES: lua_pushinteger(L, tk_u64_int(member_u64(r, d))); break;
	case TK_KIND_CGROUP: {
		uint64_t id64 = member_u64(r, d);
		if (id64 == 0)
			lua_pushnil(L);
		else
			lua_pushinteger(L, tk_u64_int(id64));
		break;
	}
	case TK_KIND_STATE: {
		char c = (char)member_u32(r, d);
		lua_pushlstring(L, &c, 1);
		break;
	}
	case TK_KIND_COMM: lua_pushlstring(L, r->comm, r->comm_len); break;
	case TK_KIND_KTHREAD: lua_pushboolean(L, r->flags & TK_REC_KTHREAD); break;
	case TK_KIND_CMDLINE: cmdline_push(L, r, text); break;
	default: lua_pushnil(L); break;
	}
}

/* A record table's __index. upvalue 1: its selection; upvalue 2: field
 * name -> id. A field outside the selection raises; any other missing key
 * (a selected field that reads nil, a name that is no field) is nil. */
static int record_table_index(lua_State *L)
{
	uint32_t fields = (uint32_t)lua_tointeger(L, lua_upvalueindex(1));

	lua_pushvalue(L, 2);
	if (lua_rawget(L, lua_upvalueindex(2)) == LUA_TNUMBER)
		field_need(L, fields, (int)lua_tointeger(L, -1), "");
	lua_pushnil(L);
	return 1;
}

/* Pushes the metatable of record tables of this selection: one per
 * selection, kept in the registry's table under record_table_key. */
static const char record_table_key = 0;

static void record_table_mt(lua_State *L, uint32_t fields)
{
	if (lua_rawgetp(L, LUA_REGISTRYINDEX, &record_table_key) != LUA_TTABLE) {
		lua_pop(L, 1);
		lua_newtable(L);
		lua_pushvalue(L, -1);
		lua_rawsetp(L, LUA_REGISTRYINDEX, &record_table_key);
	}
	if (lua_rawgeti(L, -1, fields) == LUA_TTABLE) {
		lua_remove(L, -2);
		return;
	}
	lua_pop(L, 1);
	lua_createtable(L, 0, 1);
	lua_pushinteger(L, fields);
	luaL_getmetatable(L, TK_RECORD_MT);
	lua_getfield(L, -1, "__index");
	lua_getupvalue(L, -1, 1);   /* the views' field name -> id */
	lua_replace(L, -3);
	lua_pop(L, 1);
	lua_pushcclosure(L, record_table_index, 2);
	lua_setfield(L, -2, "__index");
	lua_pushvalue(L, -1);
	lua_rawseti(L, -3, fields);
	lua_remove(L, -2);
}

/* Every allocation below may run a collection step, and with it any
 * finalizer, which can reach a snapshot's __gc by hand: read from copies. */
static void record_table_push(lua_State *L, const struct tk_record *r, uint32_t fields,
                              const char *text)
{
	struct tk_record rec = *r;
	int want_cmdline = (fields & TK_F(CMDLINE)) != 0;

	/* First, while text is certainly there. */
	if (want_cmdline)
		cmdline_push(L, &rec, text);
	lua_createtable(L, 0, TK_FLD_COUNT);
	for (int id = 0; id < TK_FLD_COUNT; id++) {
		if (!(fields & (1u << id)))
			continue;
		if (id == TK_FLD_CMDLINE) {
			if (lua_isnil(L, -2))
				continue;
			lua_pushvalue(L, -2);
		} else {
			field_push(L, &rec, id, fields, NULL);
		}
		lua_setfield(L, -2, tk_record_fields[id].name);
	}
	if (want_cmdline)
		lua_remove(L, -2);
	record_table_mt(L, fields);
	lua_setmetatable(L, -2);
}

static struct lsnap *snap_alive(lua_State *L, struct lsnap *s)
{
	if (s->collected)
		luaL_error(L, "snapshot used after its __gc ran (it was collected or finalized "
		              "by hand): keep the snapshot referenced while you use it or its records");
	return s;
}

/* Every method but __gc and __tostring: a collected snapshot raises. */
static struct lsnap *snap_check(lua_State *L, int idx)
{
	return snap_alive(L, luaL_checkudata(L, idx, TK_SNAPSHOT_MT));
}

int tk_snapshot_start_ns(lua_State *L, int idx, uint32_t pid, uint64_t *start_ns)
{
	const struct tk_record *r = tk_recbuf_find(&snap_check(L, idx)->rb, pid);

	if (r == NULL)
		return 0;
	*start_ns = r->start_ns;
	return 1;
}

static uint32_t pid_check(lua_State *L, int idx)
{
	lua_Integer pid = luaL_checkinteger(L, idx);
	luaL_argcheck(L, pid > 0 && pid <= INT32_MAX, idx, "pid out of range");
	return (uint32_t)pid;
}

/* ---- record views -------------------------------------------------------- */

/* The snapshot a view belongs to (its user value), or NULL. */
static struct lsnap *record_snap(lua_State *L, int idx)
{
	struct lsnap *s;

	lua_getiuservalue(L, idx, 1);
	s = luaL_testudata(L, -1, TK_SNAPSHOT_MT);
	lua_pop(L, 1);   /* still referenced by the view's user value */
	return s;
}

/* The record the view shows, checked against its snapshot on every use. */
static const struct tk_record *record_check(lua_State *L, int idx, uint32_t *fields,
                                            const char **text)
{
	struct lrecord *r = luaL_checkudata(L, idx, TK_RECORD_MT);
	struct lsnap *s = record_snap(L, idx);

	if (s == NULL)
		luaL_error(L, "record view without a snapshot");
	snap_alive(L, s);
	if (r->next == 0)
		luaL_error(L, "record view used before its iteration started");
	if (r->idx >= s->rb.len)
		luaL_error(L, "record view past the end of its snapshot");
	*fields = s->fields;
	*text = s->rb.text;
	return &s->rb.recs[r->idx];
}

/* upvalue 1: field name -> id; upvalue 2: methods */
static int record_index(lua_State *L)
{
	uint32_t fields;
	const char *text;
	const struct tk_record *r = record_check(L, 1, &fields, &text);

	lua_pushvalue(L, 2);
	if (lua_rawget(L, lua_upvalueindex(1)) == LUA_TNUMBER) {
		field_push(L, r, (int)lua_tointeger(L, -1), fields, text);
		return 1;
	}
	lua_pushvalue(L, 2);
	lua_rawget(L, lua_upvalueindex(2));
	return 1;
}

/*** Copies the record the view points at into a new table.
 * @function record:totable
 * @treturn table the record's fields */
static int record_totable(lua_State *L)
{
	uint32_t fields;
	const char *text;
	const struct tk_record *r = record_check(L, 1, &fields, &text);
	tk_check_nargs(L, 1);
	record_table_push(L, r, fields, text);
	return 1;
}

static int record_tostring(lua_State *L)
{
	struct lrecord *r = luaL_checkudata(L, 1, TK_RECORD_MT);
	struct lsnap *s = record_snap(L, 1);

	if (s == NULL || s->collected)
		lua_pushliteral(L, "takana.Record (snapshot collected)");
	else if (r->next == 0 || r->idx >= s->rb.len)
		lua_pushliteral(L, "takana.Record (unset)");
	else if (s->fields & TK_F(COMM)) {
		/* The pid is read first: pushing the comm may run a finalizer
		 * that frees the snapshot's records. */
		int pid = (int)s->rb.recs[r->idx].pid;

		lua_pushlstring(L, s->rb.recs[r->idx].comm, s->rb.recs[r->idx].comm_len);
		lua_pushfstring(L, "takana.Record (pid %d, %s)", pid, lua_tostring(L, -1));
	} else {
		lua_pushfstring(L, "takana.Record (pid %d)", (int)s->rb.recs[r->idx].pid);
	}
	return 1;
}

static int each_next(lua_State *L)
{
	struct lsnap *s = snap_alive(L, lua_touserdata(L, lua_upvalueindex(1)));
	struct lrecord *r = lua_touserdata(L, lua_upvalueindex(2));

	if (r->next >= s->rb.len)
		return 0;
	r->idx = r->next++;
	lua_pushvalue(L, lua_upvalueindex(2));
	return 1;
}

/*** Iterates over every record in pid order.
 * The value yielded is a view that moves with the loop: read its fields
 * inside the loop body, or keep `rec:totable()` (or `snap:get(pid)`).
 * @function snapshot:each
 * @usage for p in snap:each() do print(p.pid, p.comm) end */
static int snap_each(lua_State *L)
{
	struct lrecord *r;

	snap_check(L, 1);
	tk_check_nargs(L, 1);
	lua_pushvalue(L, 1);
	r = lua_newuserdatauv(L, sizeof *r, 1);
	r->idx = 0;
	r->next = 0;
	luaL_setmetatable(L, TK_RECORD_MT);
	lua_pushvalue(L, 1);
	lua_setiuservalue(L, -2, 1);
	lua_pushcclosure(L, each_next, 2);
	return 1;
}

/*** The record of one process.
 * @function snapshot:get
 * @int pid
 * @treturn[1] table the record
 * @treturn[2] nil when the pid is not in the snapshot */
static int snap_get(lua_State *L)
{
	struct lsnap *s = snap_check(L, 1);
	lua_Integer pid = luaL_checkinteger(L, 2);
	const struct tk_record *r = NULL;

	tk_check_nargs(L, 2);
	if (pid > 0 && pid <= INT32_MAX)
		r = tk_recbuf_find(&s->rb, (uint32_t)pid);
	if (r == NULL)
		lua_pushnil(L);
	else
		record_table_push(L, r, s->fields, s->rb.text);
	return 1;
}

/*** Every record as an array of tables, in pid order.
 * @function snapshot:totable */
static int snap_totable(lua_State *L)
{
	struct lsnap *s = snap_check(L, 1);

	tk_check_nargs(L, 1);
	lua_createtable(L, (int)s->rb.len, 0);
	/* Checked again on each turn: a finalizer run by an allocation can
	 * call __gc by hand. */
	for (size_t i = 0; snap_alive(L, s) && i < s->rb.len; i++) {
		record_table_push(L, &s->rb.recs[i], s->fields, s->rb.text);
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	return 1;
}

/*** The children of a process, in pid order.
 * @function snapshot:children
 * @int pid
 * @bool[opt=false] recursive include grandchildren and further descendants
 * @treturn[1] {int,...} pids (breadth-first when recursive)
 * @treturn[2] nil when pid is not in the snapshot
 * @raise when the snapshot was taken without `ppid` */
static int snap_children(lua_State *L)
{
	struct lsnap *s = snap_check(L, 1);
	uint32_t pid = pid_check(L, 2);
	int recursive = lua_toboolean(L, 3);
	const struct tk_record *root;
	size_t at;

	tk_check_nargs(L, 3);
	if (!lua_isnoneornil(L, 3))
		luaL_checktype(L, 3, LUA_TBOOLEAN);
	field_need(L, s->fields, TK_FLD_PPID, "snapshot:children: ");
	root = tk_recbuf_find(&s->rb, pid);
	if (root == NULL) {
		lua_pushnil(L);
		return 1;
	}
	at = (size_t)(root - s->rb.recs);
	/* Once per snapshot: a tree walked from pid 1 stays O(n). */
	if (s->children.start == NULL) {
		if (tk_children_build(&s->rb, &s->children) < 0 || s->children.start == NULL)
			return luaL_error(L, "snapshot:children: out of memory");
	}
	if (!recursive) {
		uint32_t k = s->children.start[at], end = s->children.end[at];

		lua_createtable(L, (int)(end - k), 0);
		/* The index goes with the records if a finalizer calls __gc. */
		for (lua_Integer n = 1; snap_alive(L, s) && k < end; k++, n++) {
			lua_pushinteger(L, s->rb.recs[s->children.kids[k]].pid);
			lua_rawseti(L, -2, n);
		}
		return 1;
	}
	{
		/* Scratch in userdata: a raise while the table fills leaks nothing. */
		size_t len = s->rb.len, nout;
		unsigned char *seen = lua_newuserdatauv(L, len ? len : 1, 0);
		uint32_t *out = lua_newuserdatauv(L, (len ? len : 1) * sizeof *out, 0);

		/* The allocations may have run a finalizer that called __gc. */
		snap_alive(L, s);
		nout = tk_children_descendants(&s->children, len, at, seen, out);
		lua_createtable(L, nout > INT32_MAX ? INT32_MAX : (int)nout, 0);
		for (size_t i = 0; snap_alive(L, s) && i < nout; i++) {
			lua_pushinteger(L, s->rb.recs[out[i]].pid);
			lua_rawseti(L, -2, (lua_Integer)i + 1);
		}
	}
	return 1;
}

/* A cgroup path as a caller gives it ("a/b", "/a/b", "/" or ""), checked
 * lexically before the kernel's own checks (tk_cg_open): relative to the
 * mount, plain names only. */
static void cgroup_rel(lua_State *L, int idx, const char *what, char *out, size_t cap)
{
	size_t len, o = 0;
	const char *p = luaL_checklstring(L, idx, &len);
	const char *end = p + len;

	if (memchr(p, '\0', len) != NULL)
		luaL_error(L, "%s: cgroup path contains a NUL byte", what);
	if (len >= cap)
		luaL_error(L, "%s: cgroup path longer than %d bytes", what, (int)cap - 1);
	while (p < end) {
		const char *slash = memchr(p, '/', (size_t)(end - p));
		size_t n = (size_t)((slash ? slash : end) - p);

		if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			luaL_error(L, "%s: cgroup path component '%s' refused: paths stay beneath "
			           "the cgroup2 mount", what, n == 1 ? "." : "..");
		if (n > 0) {
			if (o > 0)
				out[o++] = '/';
			memcpy(out + o, p, n);
			o += n;
		}
		p += n + (slash != NULL);
	}
	out[o] = '\0';
}

static void filter_needs(lua_State *L, const struct lsnap *s, int fld, const char *opt)
{
	if (!(s->fields & (1u << fld)))
		field_need(L, s->fields, fld, lua_pushfstring(L, "filter{%s=}: ", opt));
}

/*** The pids of the records that match every criterion given, in pid
 * order; no table is built per record.
 * @function snapshot:filter
 * @tparam table criteria `cgroup` (a path beneath the cgroup2 mount, "a/b"),
 *   `recursive` (with cgroup: its whole subtree), `uid` (integer) and `comm`
 *   (a Lua pattern, string.find's)
 * @treturn[1] {int,...} pids
 * @treturn[2] nil, `"filter: cgroup <path>: <why>"`, errno when the cgroup
 *   cannot be read (ENOENT: no such cgroup, or no cgroup2 mount) */
struct filter {
	const char *cg, *pattern;
	int recursive, has_recursive;
	struct tk_filter c;    /* what C answers: cgroup ids and uid */
};

/* The criteria table at 2, checked: a wrong key or type raises. */
static void filter_options(lua_State *L, struct filter *f)
{
	lua_pushnil(L);
	while (lua_next(L, 2) != 0) {
		const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;

		if (k != NULL && strcmp(k, "cgroup") == 0) {
			luaL_argexpected(L, lua_type(L, -1) == LUA_TSTRING, 2, "string for option 'cgroup'");
			f->cg = lua_tostring(L, -1);
		} else if (k != NULL && strcmp(k, "recursive") == 0) {
			luaL_argexpected(L, lua_isboolean(L, -1), 2, "boolean for option 'recursive'");
			f->recursive = lua_toboolean(L, -1);
			f->has_recursive = 1;
		} else if (k != NULL && strcmp(k, "uid") == 0) {
			lua_Integer uid;

			luaL_argexpected(L, lua_isinteger(L, -1), 2, "integer for option 'uid'");
			uid = lua_tointeger(L, -1);
			luaL_argcheck(L, uid >= 0 && uid <= (lua_Integer)UINT32_MAX, 2, "uid out of range");
			f->c.uid = (uint32_t)uid;
			f->c.has_uid = 1;
		} else if (k != NULL && strcmp(k, "comm") == 0) {
			luaL_argexpected(L, lua_type(L, -1) == LUA_TSTRING, 2, "string for option 'comm'");
			f->pattern = lua_tostring(L, -1);
		} else {
			lua_pushvalue(L, -2);
			luaL_argerror(L, 2, lua_pushfstring(L, "unknown option '%s' (cgroup, recursive, "
			              "uid or comm)", luaL_tolstring(L, -1, NULL)));
		}
		lua_pop(L, 1);
	}
	if (f->has_recursive && f->cg == NULL)
		luaL_argerror(L, 2, "option 'recursive' needs 'cgroup'");
}

/* string.find, the library's own, into slot 3: a bad pattern raises here,
 * before any record. */
static void filter_pattern(lua_State *L, const struct filter *f)
{
	lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
	lua_getfield(L, -1, "string");
	lua_getfield(L, -1, "find");
	lua_replace(L, 3);
	lua_settop(L, 3);
	lua_pushvalue(L, 3);
	lua_pushliteral(L, "");
	lua_pushstring(L, f->pattern);
	lua_call(L, 2, 0);
}

/* The ids of the cgroup (and its subtree), sorted, into f->c.ids, held by
 * Lua (slot 4), so a raise below leaks nothing. Returns 0, or pushes nil,
 * message, errno and returns 3. */
static int filter_cgroup_ids(lua_State *L, struct filter *f)
{
	char rel[TK_CG_PATH_MAX];
	uint64_t *heap, *ids;
	int err;

	lua_getfield(L, 2, "cgroup");
	cgroup_rel(L, -1, "filter", rel, sizeof rel);
	lua_pop(L, 1);
	err = tk_filter_cgroup_ids(rel, f->recursive, &heap, &f->c.nids);
	if (err < 0) {
		char ctx[96];

		snprintf(ctx, sizeof ctx, "filter: cgroup /%.60s%s", rel, strlen(rel) > 60 ? "..." : "");
		return tk_push_error(L, ctx, err);
	}
	ids = lua_newuserdatauv(L, f->c.nids * sizeof *ids + 1, 0);
	if (f->c.nids > 0)
		memcpy(ids, heap, f->c.nids * sizeof *ids);
	free(heap);
	f->c.ids = ids;
	return 0;
}

/* The comm pattern, string.find's (slot 3), on one record C matched. */
static int filter_comm(lua_State *L, const struct filter *f, const struct tk_record *r)
{
	int hit;

	lua_pushvalue(L, 3);
	lua_pushlstring(L, r->comm, r->comm_len);
	lua_pushstring(L, f->pattern);
	lua_call(L, 2, 1);
	hit = !lua_isnil(L, -1);
	lua_pop(L, 1);
	return hit;
}

static int snap_filter(lua_State *L)
{
	struct lsnap *s = snap_check(L, 1);
	struct filter f = { 0 };
	lua_Integer n = 0;
	size_t *hits, nhits;

	luaL_checktype(L, 2, LUA_TTABLE);
	tk_check_nargs(L, 2);
	filter_options(L, &f);
	if (f.c.has_uid)
		filter_needs(L, s, TK_FLD_UID, "uid");
	if (f.pattern != NULL) {
		filter_needs(L, s, TK_FLD_COMM, "comm");
		filter_pattern(L, &f);
	}
	lua_settop(L, 3);
	if (f.cg != NULL) {
		filter_needs(L, s, TK_FLD_CGROUP, "cgroup");
		if (filter_cgroup_ids(L, &f) != 0)
			return 3;
	}
	/* The criteria table stays in slot 2: it holds the pattern. */
	hits = lua_newuserdatauv(L, (snap_alive(L, s)->rb.len + 1) * sizeof *hits, 0);
	nhits = tk_snapshot_filter(&snap_alive(L, s)->rb, &f.c, hits);
	lua_newtable(L);
	/* The pattern's calls and the pushes can run a finalizer that calls
	 * the snapshot's __gc: checked before each record is read. */
	for (size_t k = 0; k < nhits; k++) {
		const struct tk_record *r = &snap_alive(L, s)->rb.recs[hits[k]];
		uint32_t pid = r->pid;

		if (f.pattern != NULL && !filter_comm(L, &f, r))
			continue;
		lua_pushinteger(L, pid);
		lua_rawseti(L, -2, ++n);
	}
	return 1;
}

/*** The path of a process's cgroup, from its record's `cgroup_id`, as
 * takana.cgroup.path gives it, from the same cache (about 0.5 us a call
 * after the first). Raises when the snapshot was taken without `cgroup_id`.
 * @function snapshot:cgroup
 * @int pid
 * @treturn[1] string takana's one spelling of a cgroup: "/" for the root
 *   of the cgroup2 mount, else "/a/b" relative to it (as `handle.path`)
 * @treturn[2] nil, message, errno: ESRCH when pid is not in the snapshot,
 *   ENOENT when its cgroup is gone or has no path here (no cgroup2 mount) */
static int snap_cgroup(lua_State *L)
{
	struct lsnap *s = snap_check(L, 1);
	uint32_t pid = pid_check(L, 2);
	const struct tk_record *r;
	char mnt[TK_CG_PATH_MAX];
	uint64_t id;
	int err;

	tk_check_nargs(L, 2);
	field_need(L, s->fields, TK_FLD_CGROUP, "snapshot:cgroup: ");
	r = tk_recbuf_find(&s->rb, pid);
	if (r == NULL) {
		lua_pushnil(L);
		lua_pushfstring(L, "cgroup: pid %d is not in the snapshot", (int)pid);
		lua_pushinteger(L, ESRCH);
		return 3;
	}
	id = r->cgroup_id;
	if (id == 0) {
		lua_pushnil(L);
		lua_pushfstring(L, "cgroup: pid %d has no cgroup2 cgroup beneath a mount here "
		                "(no cgroup2 hierarchy is mounted, or it is outside this cgroup namespace)",
		                (int)pid);
		lua_pushinteger(L, ENOENT);
		return 3;
	}
	/* The resolver takana.cgroup.path uses (cgroup_path.c), beneath the
	 * mount cgroup_id.c read the ids against: its cache first, which
	 * needs no look at the mount table. */
	if (tk_cgroup_path_cached_push(L, id))
		return 1;
	err = tk_cgroup2_mount(mnt, sizeof mnt);
	if (err == -ENOENT) {
		lua_pushnil(L);
		lua_pushliteral(L, "cgroup: no cgroup2 hierarchy is mounted (see /proc/self/mountinfo)");
		lua_pushinteger(L, ENOENT);
		return 3;
	}
	if (err < 0)
		return tk_push_error(L, "cgroup: /proc/self/mountinfo", err);
	return tk_cgroup_path_push(L, mnt, id);
}

static int snap_len(lua_State *L)
{
	struct lsnap *s = snap_check(L, 1);
	lua_pushinteger(L, (lua_Integer)s->rb.len);
	return 1;
}

/* Safe to call twice (a script can reach it through getmetatable). */
static int snap_gc(lua_State *L)
{
	struct lsnap *s = luaL_checkudata(L, 1, TK_SNAPSHOT_MT);
	tk_recbuf_free(&s->rb);
	tk_children_free(&s->children);
	s->collected = 1;
	return 0;
}

static int snap_tostring(lua_State *L)
{
	struct lsnap *s = luaL_checkudata(L, 1, TK_SNAPSHOT_MT);
	if (s->collected)
		lua_pushfstring(L, "takana.Snapshot (%s, collected)", s->backend);
	else
		lua_pushfstring(L, "takana.Snapshot (%s, %d processes)", s->backend,
		                (int)s->rb.len);
	return 1;
}

/* upvalue 1: methods */
static int snap_index(lua_State *L)
{
	struct lsnap *s = snap_check(L, 1);
	/* lua_tostring would turn a number key into a string in place. */
	const char *key = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;

	if (key != NULL) {
		if (strcmp(key, "backend") == 0) {
			lua_pushstring(L, s->backend);
			return 1;
		}
		if (strcmp(key, "time_ns") == 0) {
			lua_pushinteger(L, tk_u64_int(s->time_ns));
			return 1;
		}
		if (strcmp(key, "vanished") == 0) {
			lua_pushinteger(L, (lua_Integer)s->rb.vanished);
			return 1;
		}
		if (strcmp(key, "denied") == 0) {
			lua_pushinteger(L, (lua_Integer)s->rb.denied);
			return 1;
		}
		if (strcmp(key, "from_proc") == 0) {
			lua_pushinteger(L, (lua_Integer)s->rb.from_proc);
			return 1;
		}
		if (strcmp(key, "fields") == 0) {
			lua_newtable(L);
			for (int id = 0; id < TK_FLD_COUNT; id++) {
				if (!(s->fields & (1u << id)))
					continue;
				lua_pushstring(L, tk_record_fields[id].name);
				lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
			}
			return 1;
		}
		if (strcmp(key, "cmdline_from") == 0) {
			lua_pushstring(L, s->rb.cmdline_from);
			return 1;
		}
		if (strcmp(key, "cmdline_by_bpf") == 0 || strcmp(key, "cmdline_by_proc") == 0) {
			if (!(s->fields & TK_F(CMDLINE)))
				lua_pushnil(L);
			else
				lua_pushinteger(L, (lua_Integer)(key[11] == 'b' ? s->rb.cmdline_by_bpf
				                                                : s->rb.cmdline_by_proc));
			return 1;
		}
	}
	lua_pushvalue(L, 2);
	lua_rawget(L, lua_upvalueindex(1));
	return 1;
}

/* ---- delta ------------------------------------------------------------- */

/* CPU used by each process between two snapshots.
 * @function delta
 * @tparam snapshot old
 * @tparam snapshot new
 * @treturn table `{interval_ns=, cpu_ns={[pid]=ns}, utime_ns={[pid]=ns},
 *   stime_ns={[pid]=ns}, share={[pid]=fraction of one CPU}, started={pid...},
 *   exited={pid...}}`. A pid reused between the two counts as exited and started. */
static int l_delta(lua_State *L)
{
	struct lsnap *a = snap_check(L, 1), *b = snap_check(L, 2);
	struct tk_delta d = { 0 };
	uint64_t interval;
	int t;

	tk_check_nargs(L, 2);
	luaL_argcheck(L, b->time_ns >= a->time_ns, 2, "new snapshot is older than old");
	for (int k = 1; k <= 2; k++) {
		const struct lsnap *x = k == 1 ? a : b;
		const char *who = k == 1 ? "delta(old, new): old: " : "delta(old, new): new: ";

		field_need(L, x->fields, TK_FLD_UTIME, who);
		field_need(L, x->fields, TK_FLD_STIME, who);
	}
	interval = b->time_ns - a->time_ns;

	/* The answer first, into room Lua holds (a raise leaks nothing); the
	 * allocation may have run a finalizer, hence the checks. */
	d.cpu = lua_newuserdatauv(L, (b->rb.len + 1) * sizeof *d.cpu, 0);
	d.started = lua_newuserdatauv(L, (b->rb.len + 1) * sizeof *d.started, 0);
	d.exited = lua_newuserdatauv(L, (a->rb.len + 1) * sizeof *d.exited, 0);
	tk_snapshot_delta(&snap_alive(L, a)->rb, &snap_alive(L, b)->rb, interval, &d);

	lua_createtable(L, 0, 7);
	t = lua_gettop(L);
	lua_pushinteger(L, tk_u64_int(interval));
	lua_setfield(L, t, "interval_ns");
	lua_newtable(L); /* t+1 cpu_ns */
	lua_newtable(L); /* t+2 utime_ns */
	lua_newtable(L); /* t+3 stime_ns */
	lua_newtable(L); /* t+4 share */
	lua_newtable(L); /* t+5 started */
	lua_newtable(L); /* t+6 exited */
	/* A finalizer run by a push can call either snapshot's __gc by hand:
	 * both are checked on each record, as a method on a collected snapshot
	 * raises. */
	for (size_t k = 0; k < d.ncpu; k++) {
		const struct tk_delta_cpu *c = &d.cpu[k];

		snap_alive(L, a);
		snap_alive(L, b);
		lua_pushinteger(L, tk_u64_int(c->cpu_ns));
		lua_rawseti(L, t + 1, c->pid);
		lua_pushinteger(L, tk_u64_int(c->utime_ns));
		lua_rawseti(L, t + 2, c->pid);
		lua_pushinteger(L, tk_u64_int(c->stime_ns));
		lua_rawseti(L, t + 3, c->pid);
		lua_pushnumber(L, c->share);
		lua_rawseti(L, t + 4, c->pid);
	}
	for (size_t k = 0; k < d.nstarted; k++) {
		snap_alive(L, a);
		snap_alive(L, b);
		lua_pushinteger(L, d.started[k]);
		lua_rawseti(L, t + 5, (lua_Integer)k + 1);
	}
	for (size_t k = 0; k < d.nexited; k++) {
		snap_alive(L, a);
		snap_alive(L, b);
		lua_pushinteger(L, d.exited[k]);
		lua_rawseti(L, t + 6, (lua_Integer)k + 1);
	}
	snap_alive(L, a);
	snap_alive(L, b);
	lua_setfield(L, t, "exited");
	lua_setfield(L, t, "started");
	lua_setfield(L, t, "share");
	lua_setfield(L, t, "stime_ns");
	lua_setfield(L, t, "utime_ns");
	lua_setfield(L, t, "cpu_ns");
	return 1;
}

/* The records live outside Lua's heap, so the collector does not see them:
 * a loop taking snapshots of 10,000 processes would pile up megabytes of
 * garbage between collections. Tell it, as if they were Lua allocations:
 * before the new snapshot exists, with the size of the last one. A step
 * taken while the new snapshot was on the stack (after filling it) never
 * finalized any (Lua 5.4.4: a loop of kfunc snapshots at 10,000 processes
 * grew by 1.5 MB a snapshot until a full collection). */
static _Atomic size_t last_snapshot_kib;

static void gc_account(lua_State *L)
{
	size_t kib = atomic_load_explicit(&last_snapshot_kib, memory_order_relaxed);

	if (kib > 0)
		lua_gc(L, LUA_GCSTEP, kib > INT32_MAX ? INT32_MAX : (int)kib);
}

static void gc_remember(const struct tk_recbuf *rb)
{
	atomic_store_explicit(&last_snapshot_kib, (rb->cap * sizeof *rb->recs + rb->text_cap) / 1024,
	                      memory_order_relaxed);
}

/* ---- the /proc backend --------------------------------------------------- */

static int scanner_gc(lua_State *L)
{
	struct tk_proc_scanner *s = luaL_checkudata(L, 1, TK_SCANNER_MT);
	tk_proc_scanner_close(s);
	return 0;
}

static uint32_t fields_check(lua_State *L, int idx, uint32_t dflt)
{
	lua_Integer f = luaL_optinteger(L, idx, dflt);

	luaL_argcheck(L, f > 0 && f <= TK_F_ALL, idx, "field bits out of range");
	return (uint32_t)f;
}

/* A snapshot through b, or nil, "snapshot: <name> backend unavailable:
 * <reason>", errno, reason: the reason alone comes fourth, for the probe,
 * so no one strips the prefix. upvalue 1: the /proc scanner */
static int snapshot_push(lua_State *L, const struct tk_snap_backend *b, uint32_t fields,
                         int use_cache)
{
	struct tk_snap_req req = {
		.fields = fields,
		.use_cache = use_cache,
		.sc = luaL_checkudata(L, lua_upvalueindex(1), TK_SCANNER_MT),
	};
	char why[448];
	struct lsnap *s;
	int err;

	gc_account(L);
	s = lua_newuserdatauv(L, sizeof *s, 0);
	memset(s, 0, sizeof *s);
	s->backend = b->name;
	s->fields = fields | TK_F_IDENTITY;
	luaL_setmetatable(L, TK_SNAPSHOT_MT);
	err = tk_snapshot_take(b, &req, &s->rb, &s->time_ns, why, sizeof why);
	if (err < 0) {
		lua_pushnil(L);
		lua_pushfstring(L, "snapshot: %s backend unavailable: %s", b->name, why);
		lua_pushinteger(L, -err);
		lua_pushstring(L, why);
		return 4;
	}
	gc_remember(&s->rb);
	return 1;
}

static const struct tk_snap_backend *backend_check(lua_State *L, int idx)
{
	const char *name = luaL_checkstring(L, idx);
	const struct tk_snap_backend *b = tk_snap_backend_find(name);

	if (b == NULL)
		luaL_argerror(L, idx, lua_pushfstring(L, "invalid option '%s'", name));
	return b;
}

/* core.snapshot_take(backend[, fields[, use_cache]]): what takana.snapshot
 * runs; use_cache (proc: keep <pid>/stat fds open) defaults to true. */
static int l_snapshot_take(lua_State *L)
{
	const struct tk_snap_backend *b = backend_check(L, 1);
	uint32_t fields = fields_check(L, 2, b->default_fields);
	int use_cache = lua_isnoneornil(L, 3) || lua_toboolean(L, 3);

	tk_check_nargs(L, 3);
	return snapshot_push(L, b, fields, use_cache);
}

/* core.bpf_info(backend) -> {loaded=, selectable=, selectable_error=, loads=, insns=, load_ns=,
 * runs=, capacity=}, or nil
 * for a backend that loads nothing (proc) */
static int l_bpf_info(lua_State *L)
{
	const struct tk_snap_backend *b = backend_check(L, 1);
	struct tk_bpf_tier_info info;

	tk_check_nargs(L, 1);
	if (b->tier < 0) {
		lua_pushnil(L);
		return 1;
	}
	tk_bpf_info((enum tk_bpf_tier)b->tier, &info);
	lua_createtable(L, 0, 7);
	lua_pushboolean(L, info.loaded);
	lua_setfield(L, -2, "loaded");
	lua_pushboolean(L, info.selectable);
	lua_setfield(L, -2, "selectable");
	if (info.selectable_err != 0) {
		/* Not an error of the snapshot: the program without the tests
		 * serves every selection, only slower. */
		lua_pushstring(L, strerror(-info.selectable_err));
		lua_setfield(L, -2, "selectable_error");
	}
	lua_pushinteger(L, info.loads);
	lua_setfield(L, -2, "loads");
	lua_pushinteger(L, info.insns);
	lua_setfield(L, -2, "insns");
	lua_pushinteger(L, tk_u64_int(info.load_ns));
	lua_setfield(L, -2, "load_ns");
	lua_pushinteger(L, tk_u64_int(info.runs));
	lua_setfield(L, -2, "runs");
	lua_pushinteger(L, (lua_Integer)info.capacity);
	lua_setfield(L, -2, "capacity");
	return 1;
}

/* core.argv_info() -> {state = "not tried" | "loaded" | "failed", error = msg,
 * loads = n}: the program that reads a BPF snapshot's cmdline field. */
static int l_argv_info(lua_State *L)
{
	char why[512];
	unsigned loads;
	int state = tk_cmdline_bpf_state(&loads, why, sizeof why);

	tk_check_nargs(L, 0);
	lua_createtable(L, 0, 3);
	lua_pushinteger(L, loads);
	lua_setfield(L, -2, "loads");
	lua_pushstring(L, state == 0 ? "not tried" : state > 0 ? "loaded" : "failed");
	lua_setfield(L, -2, "state");
	if (state < 0) {
		lua_pushstring(L, why);
		lua_setfield(L, -2, "error");
	}
	return 1;
}

/* core.bpf_kfunc_capacity(n): reload the kfunc tier with room for n
 * records before its next run (for specs of the growth path). */
static int l_bpf_kfunc_capacity(lua_State *L)
{
	lua_Integer n = luaL_checkinteger(L, 1);
	int err;

	tk_check_nargs(L, 1);
	luaL_argcheck(L, n > 0, 1, "capacity must be positive");
	err = tk_bpf_kfunc_set_capacity((size_t)n);
	if (err < 0)
		return tk_push_error(L, "bpf_kfunc_capacity", err);
	lua_pushboolean(L, 1);
	return 1;
}

/* core.bpf_release(): unload both tiers and the argv program now (they load
 * again on use). */
static int l_bpf_release(lua_State *L)
{
	tk_check_nargs(L, 0);
	tk_bpf_release();
	tk_cmdline_release();
	return 0;
}

/* core.stat_parse(text): the parser alone, for specs and tools. */
static int l_stat_parse(lua_State *L)
{
	size_t len;
	const char *text = luaL_checklstring(L, 1, &len);
	struct tk_units units;
	struct tk_record rec;
	int err;

	tk_check_nargs(L, 1);
	tk_units_init(&units);
	err = tk_stat_parse(text, len, &units, &rec);
	if (err < 0)
		return tk_push_error(L, "stat_parse", err);
	record_table_push(L, &rec, TK_F_WALK, NULL);
	return 1;
}

/* core.snapshot_from_stat({line, ...}): a snapshot (backend "stat") of
 * the given /proc/<pid>/stat lines, parsed as the proc backend parses them
 * (uid 0: it is not in the text). For tools reading saved /proc text, and
 * for specs of what a non-atomic /proc scan can record. */
static int l_snapshot_from_stat(lua_State *L)
{
	struct tk_units units;
	struct lsnap *s;
	lua_Integer n;

	luaL_checktype(L, 1, LUA_TTABLE);
	tk_check_nargs(L, 1);
	n = (lua_Integer)lua_rawlen(L, 1);
	tk_units_init(&units);
	gc_account(L);
	/* Created first: its __gc frees the records if a bad line raises. */
	s = lua_newuserdatauv(L, sizeof *s, 0);
	memset(s, 0, sizeof *s);
	s->fields = TK_F_WALK;
	s->backend = "stat";
	luaL_setmetatable(L, TK_SNAPSHOT_MT);
	s->time_ns = tk_boottime_ns();
	for (lua_Integer i = 1; i <= n; i++) {
		struct tk_record rec, *slot;
		size_t len;
		const char *text;

		if (lua_rawgeti(L, 1, i) != LUA_TSTRING)
			luaL_argerror(L, 1, lua_pushfstring(L, "line %I: string expected", i));
		text = lua_tolstring(L, -1, &len);
		if (tk_stat_parse(text, len, &units, &rec) < 0)
			luaL_argerror(L, 1, lua_pushfstring(L, "line %I: not a /proc/<pid>/stat line", i));
		lua_pop(L, 1);
		slot = tk_recbuf_push(&s->rb);
		if (slot == NULL)
			return luaL_error(L, "snapshot_from_stat: out of memory");
		*slot = rec;
	}
	tk_recbuf_sort(&s->rb);
	gc_remember(&s->rb);
	return 1;
}

/* Open descriptors of the /proc fd cache: this state's snapshots' (`fds`),
 * every /proc reader's in the process together, poll event streams
 * included (`process_fds`), and the budget they share (`limit`).
 * @function proc_cache_info
 * @treturn table `{fds=n, process_fds=n, limit=n}` */
static int l_proc_cache_info(lua_State *L)
{
	struct tk_proc_scanner *sc = luaL_checkudata(L, lua_upvalueindex(1), TK_SCANNER_MT);

	tk_check_nargs(L, 0);
	lua_createtable(L, 0, 3);
	lua_pushinteger(L, (lua_Integer)sc->cache_len);
	lua_setfield(L, -2, "fds");
	lua_pushinteger(L, (lua_Integer)tk_proc_cached_fds_total());
	lua_setfield(L, -2, "process_fds");
	lua_pushinteger(L, (lua_Integer)sc->cache_limit);
	lua_setfield(L, -2, "limit");
	return 1;
}

/* Closes every cached /proc descriptor; the next snapshot reopens them.
 * @function proc_cache_close */
static int l_proc_cache_close(lua_State *L)
{
	struct tk_proc_scanner *sc = luaL_checkudata(L, lua_upvalueindex(1), TK_SCANNER_MT);

	tk_check_nargs(L, 0);
	tk_proc_scanner_drop_cache(sc);
	return 0;
}

static void snapshot_mt_open(lua_State *L)
{
	static const luaL_Reg snap_methods[] = {
		{ "get", snap_get },
		{ "each", snap_each },
		{ "children", snap_children },
		{ "totable", snap_totable },
		{ "filter", snap_filter },
		{ "cgroup", snap_cgroup },
		{ NULL, NULL },
	};

	luaL_newmetatable(L, TK_SNAPSHOT_MT);
	luaL_newlib(L, snap_methods);
	lua_pushcfunction(L, tk_snapshot_process);
	lua_setfield(L, -2, "process");
	lua_pushcclosure(L, snap_index, 1);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, snap_len);
	lua_setfield(L, -2, "__len");
	lua_pushcfunction(L, snap_gc);
	lua_setfield(L, -2, "__gc");
	lua_pushcfunction(L, snap_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pop(L, 1);
}

static void record_mt_open(lua_State *L)
{
	luaL_newmetatable(L, TK_RECORD_MT);
	lua_createtable(L, 0, TK_FLD_COUNT);
	for (int id = 0; id < TK_FLD_COUNT; id++) {
		lua_pushinteger(L, id);
		lua_setfield(L, -2, tk_record_fields[id].name);
	}
	lua_createtable(L, 0, 1);
	lua_pushcfunction(L, record_totable);
	lua_setfield(L, -2, "totable");
	lua_pushcclosure(L, record_index, 2);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, record_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pop(L, 1);
}

/* The functions sharing this state's /proc scanner (an upvalue), into the
 * table on top. */
static void scanner_funcs_open(lua_State *L)
{
	static const luaL_Reg scanner_funcs[] = {
		{ "snapshot_take", l_snapshot_take },
		{ "proc_cache_info", l_proc_cache_info },
		{ "proc_cache_close", l_proc_cache_close },
		{ NULL, NULL },
	};
	struct tk_proc_scanner *sc;

	luaL_newmetatable(L, TK_SCANNER_MT);
	lua_pushcfunction(L, scanner_gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);

	/* One scanner per Lua state: its fd cache is state, not a global. */
	sc = lua_newuserdatauv(L, sizeof *sc, 0);
	tk_proc_scanner_unopened(sc);
	luaL_setmetatable(L, TK_SCANNER_MT);
	luaL_setfuncs(L, scanner_funcs, 1);
}

/* The lists the Lua side iterates: core.record_fields and
 * core.snapshot_backends, in order. */
static void name_lists_open(lua_State *L)
{
	lua_createtable(L, TK_FLD_COUNT, 0);
	for (int id = 0; id < TK_FLD_COUNT; id++) {
		lua_pushstring(L, tk_record_fields[id].name);
		lua_rawseti(L, -2, id + 1);
	}
	lua_setfield(L, -2, "record_fields");
	lua_newtable(L);
	for (int i = 0; tk_snap_backends[i] != NULL; i++) {
		lua_pushstring(L, tk_snap_backends[i]->name);
		lua_rawseti(L, -2, i + 1);
	}
	lua_setfield(L, -2, "snapshot_backends");
}

void tk_snapshot_open_lib(lua_State *L)
{
	static const luaL_Reg funcs[] = {
		{ "delta", l_delta },
		{ "stat_parse", l_stat_parse },
		{ "snapshot_from_stat", l_snapshot_from_stat },
		{ "bpf_info", l_bpf_info },
		{ "argv_info", l_argv_info },
		{ "bpf_kfunc_capacity", l_bpf_kfunc_capacity },
		{ "bpf_release", l_bpf_release },
		{ NULL, NULL },
	};

	snapshot_mt_open(L);
	record_mt_open(L);
	scanner_funcs_open(L);
	name_lists_open(L);
	luaL_setfuncs(L, funcs, 0);
#ifdef TK_NO_BPF
	lua_pushboolean(L, 0);
#else
	lua_pushboolean(L, 1);
#endif
	lua_setfield(L, -2, "bpf_built");
}
