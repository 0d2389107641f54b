/* Lua binding of cgroup handles: the directory fd, kept fds on the files
 * cg:stat() reads, raw read/write, mkdir and rmdir. Policy (diagnosis,
 * verification, lifecycle loops) lives in lua/takana/cgroup.lua. */

/***
 * cgroup handles, from C.
 * @module takana.cgroup
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "binding.h"
#include "cgroup.h"
#include "cgroup_parse.h"
#include "cgroup_path.h"
#include "cgroup_tree.h"
#include "mounts_watch.h"
#include "util.h"

#define READ_BUF TK_CGROUP_STAT_BUF

/* The layout of cg:stat(), the one list of its sections and keys (the
 * binding reads it, core.cgroup_stat exports it to cg:why(), `takana
 * cgroup` and tools/docgen.lua): X(ID, file, section, key, kind, anchor),
 * read in this order (a section's rows adjacent). key NULL: the file is
 * the whole section. A section whose anchor file is absent is left out and
 * its other files are not read; a section without one is there when any
 * of its files is. A new key is one line here. */
#define TK_STAT_FILES(X) \
	X(CPU_STAT,      "cpu.stat",        "cpu",      NULL,      KV,     0) \
	X(MEM_CURRENT,   "memory.current",  "memory",   "current", VALUE,  1) \
	X(MEM_PEAK,      "memory.peak",     "memory",   "peak",    VALUE,  0) \
	X(MEM_MAX,       "memory.max",      "memory",   "max",     VALUE,  0) \
	X(MEM_HIGH,      "memory.high",     "memory",   "high",    VALUE,  0) \
	X(MEM_EVENTS,    "memory.events",   "memory",   "events",  KV,     0) \
	X(PIDS_CURRENT,  "pids.current",    "pids",     "current", VALUE,  1) \
	X(PIDS_MAX,      "pids.max",        "pids",     "max",     VALUE,  0) \
	X(PIDS_PEAK,     "pids.peak",       "pids",     "peak",    VALUE,  0) \
	X(CPU_PRESSURE,  "cpu.pressure",    "pressure", "cpu",     PSI,    0) \
	X(MEM_PRESSURE,  "memory.pressure", "pressure", "memory",  PSI,    0) \
	X(IO_PRESSURE,   "io.pressure",     "pressure", "io",      PSI,    0) \
	X(EVENTS,        "cgroup.events",   "events",   NULL,      EVENTS, 0)

#define CGF_ENUM(id, file, section, key, kind, anchor) CGF_##id,
enum cg_file { TK_STAT_FILES(CGF_ENUM) CGF_COUNT };
#undef CGF_ENUM

/* How a file of cg:stat() becomes Lua: a table of its "key value" lines,
 * one value, a table of its pressure lines, or cgroup.events (a key-value
 * table whose two flags are booleans). */
enum stat_kind { SK_KV, SK_VALUE, SK_PSI, SK_EVENTS };

static const struct stat_file {
	const char *file, *section, *key;
	enum stat_kind kind;
	int anchor;
} stat_layout[CGF_COUNT] = {
#define CGF_ROW(id, file, section, key, kind, anchor) \
	[CGF_##id] = { file, section, key, SK_##kind, anchor },
	TK_STAT_FILES(CGF_ROW)
#undef CGF_ROW
};

/* core.cgroup_stat: the layout's rows in order, {file=, section=, key=,
 * kind=, anchor=} (key nil: the file is the section). */
static void stat_layout_push(lua_State *L)
{
	static const char *const kinds[] = { "kv", "value", "psi", "events" };

	lua_createtable(L, CGF_COUNT, 0);
	for (int f = 0; f < CGF_COUNT; f++) {
		const struct stat_file *sf = &stat_layout[f];

		lua_createtable(L, 0, 5);
		lua_pushstring(L, sf->file);
		lua_setfield(L, -2, "file");
		lua_pushstring(L, sf->section);
		lua_setfield(L, -2, "section");
		if (sf->key != NULL) {
			lua_pushstring(L, sf->key);
			lua_setfield(L, -2, "key");
		}
		lua_pushstring(L, kinds[sf->kind]);
		lua_setfield(L, -2, "kind");
		lua_pushboolean(L, sf->anchor);
		lua_setfield(L, -2, "anchor");
		lua_rawseti(L, -2, f + 1);
	}
}

/* Keys renamed with their values rescaled, so every duration is in ns. */
static const struct key_unit {
	const char *suffix, *to;
	lua_Integer scale;
} key_units[] = {
	{ "_usec", "_ns", 1000 },
};

struct lcgroup {
	/* First: the handle base (lua_handle.c). Its fd is the directory fd,
	 * the handle's identity; the descriptor to poll is cgroup.events,
	 * fds[CGF_EVENTS], opened by fileno(). */
	struct tk_handle h;
	int mountfd;
	int fds[CGF_COUNT];     /* -1: not open (absent or not tried yet) */
};

static struct lcgroup *cg_check(lua_State *L, int idx)
{
	return (struct lcgroup *)tk_handle_check(L, idx, TK_CGROUP_MT);
}

/* Where the stat files are read: a handle's directory and kept fds, or a
 * node of a tree (tree set), which keeps its own within a budget. */
struct stat_src {
	int dirfd;
	int *fds;
	struct tk_cg_tree *tree;
	size_t node;
};

/* Reads one of the stat files. -ENOENT when absent. */
static int cg_file_read(const struct stat_src *src, int f, char *buf, size_t *len)
{
	if (src->tree != NULL)
		return tk_cg_tree_read(src->tree, src->node, f, stat_layout[f].file, buf, READ_BUF, len);
	/* cgroup.events goes only with the cgroup: its fd, the one polled,
	 * stays, so an event loop never holds a closed descriptor. */
	return tk_cg_read_kept(src->dirfd, stat_layout[f].file, &src->fds[f], f == CGF_EVENTS, buf,
	                       READ_BUF, len);
}

/* "max" stays the string "max"; numbers become integers. */
static void value_push(lua_State *L, const char *v, size_t len)
{
	char tmp[32];
	char *end;
	long long n;

	while (len > 0 && (v[len - 1] == '\n' || v[len - 1] == ' '))
		len--;
	if (len == 3 && memcmp(v, "max", 3) == 0) {
		lua_pushliteral(L, "max");
		return;
	}
	if (len > 0 && len < sizeof tmp) {
		memcpy(tmp, v, len);
		tmp[len] = '\0';
		errno = 0;
		n = strtoll(tmp, &end, 10);
		if (errno == 0 && *end == '\0') {
			lua_pushinteger(L, (lua_Integer)n);
			return;
		}
	}
	lua_pushlstring(L, v, len);
}

/* kv callback: sets t[key] = value, renamed and rescaled by key_units. */
static void kv_set(void *ctx, const char *key, size_t klen, const char *val, size_t vlen)
{
	lua_State *L = ctx;

	value_push(L, val, vlen);
	for (size_t i = 0; i < sizeof key_units / sizeof key_units[0]; i++) {
		const struct key_unit *u = &key_units[i];
		size_t slen = strlen(u->suffix);

		if (klen <= slen || memcmp(key + klen - slen, u->suffix, slen) != 0)
			continue;
		if (lua_isinteger(L, -1)) {
			lua_Integer v = lua_tointeger(L, -1);
			lua_pop(L, 1);
			lua_pushinteger(L, v > LUA_MAXINTEGER / u->scale ? LUA_MAXINTEGER : v * u->scale);
		}
		lua_pushlstring(L, key, klen - slen);
		lua_pushstring(L, u->to);
		lua_concat(L, 2);
		lua_insert(L, -2);
		lua_rawset(L, -3);
		return;
	}
	lua_pushlstring(L, key, klen);
	lua_insert(L, -2);
	lua_rawset(L, -3);
}

/* Pushes a table of a flat-keyed file, or nothing and returns the error. */
static int kv_file_push(lua_State *L, const struct stat_src *src, int f, char *buf)
{
	size_t len;
	int err = cg_file_read(src, f, buf, &len);

	if (err < 0)
		return err;
	lua_newtable(L);
	err = tk_kv_parse(buf, len, kv_set, L);
	if (err < 0) {
		lua_pop(L, 1);
		return err;
	}
	return 0;
}

/* The first failure of cg:stat() other than an absent file: reported, not
 * turned into a missing section. absent: a file was missing and none was
 * read after it, so the cgroup may have been removed during the reads. */
struct stat_error {
	int err;
	int file;
	int absent;
};

static int stat_note(struct stat_error *se, int f, int err)
{
	if (err == -ENOENT)
		se->absent = 1;
	else if (err == 0)
		se->absent = 0;
	if (err < 0 && err != -ENOENT && se->err == 0) {
		se->err = err;
		se->file = f;
	}
	return err;
}

static int single_push(lua_State *L, const struct stat_src *src, int f, char *buf,
                       struct stat_error *se)
{
	size_t len;

	if (stat_note(se, f, cg_file_read(src, f, buf, &len)) < 0)
		return 0;
	value_push(L, buf, len);
	return 1;
}

/* A pressure line as {avg10, avg60, avg300, total_ns}, room for nrec keys. */
static void psi_line_push(lua_State *L, const struct tk_psi_line *line, int nrec)
{
	lua_createtable(L, 0, nrec);
	lua_pushnumber(L, line->avg10);
	lua_setfield(L, -2, "avg10");
	lua_pushnumber(L, line->avg60);
	lua_setfield(L, -2, "avg60");
	lua_pushnumber(L, line->avg300);
	lua_setfield(L, -2, "avg300");
	lua_pushinteger(L, (lua_Integer)line->total_us * 1000);
	lua_setfield(L, -2, "total_ns");
}

static int psi_push(lua_State *L, const struct stat_src *src, int f, char *buf,
                    struct stat_error *se)
{
	size_t len;
	const char *p, *end;

	if (stat_note(se, f, cg_file_read(src, f, buf, &len)) < 0)
		return 0;
	lua_newtable(L);
	for (p = buf, end = buf + len; p < end;) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		struct tk_psi_line line;
		if (eol == NULL)
			eol = end;
		if (tk_psi_parse_line(p, (size_t)(eol - p), &line) == 0) {
			psi_line_push(L, &line, 4);
			lua_setfield(L, -2, line.full ? "full" : "some");
		} else if (eol > p) {
			stat_note(se, f, -EBADMSG);
		}
		p = eol + 1;
	}
	return 1;
}

/* Pushes the handle's cgroup.events as {populated=bool, frozen=bool}
 * (every key the kernel gives; the two known ones as booleans), or
 * nothing and returns the error. */
static int events_push(lua_State *L, const struct stat_src *src, char *buf)
{
	int err = kv_file_push(L, src, CGF_EVENTS, buf);

	if (err < 0)
		return err;
	for (int i = 0; i < 2; i++) {
		const char *k = i ? "frozen" : "populated";
		if (lua_getfield(L, -1, k) == LUA_TNUMBER) {
			int b = lua_tointeger(L, -1) != 0;
			lua_pop(L, 1);
			lua_pushboolean(L, b);
			lua_setfield(L, -2, k);
		} else {
			lua_pop(L, 1);
		}
	}
	return 0;
}

/* Pushes file f as stat_layout says and returns 1, or pushes nothing and
 * returns 0 (the failure noted in se unless the file is absent). */
static int stat_file_push(lua_State *L, const struct stat_src *src, int f, char *buf,
                          struct stat_error *se)
{
	switch (stat_layout[f].kind) {
	case SK_KV:
		return stat_note(se, f, kv_file_push(L, src, f, buf)) == 0;
	case SK_VALUE:
		return single_push(L, src, f, buf, se);
	case SK_PSI:
		return psi_push(L, src, f, buf, se);
	case SK_EVENTS:
		return stat_note(se, f, events_push(L, src, buf)) == 0;
	}
	return 0;
}

/* Sets the section table on top into the result beneath it when it holds
 * anything, else drops it. */
static void section_close(lua_State *L, const char *section, int have)
{
	if (section == NULL)
		return;
	if (have)
		lua_setfield(L, -2, section);
	else
		lua_pop(L, 1);
}

/* Fills the table on top with the sections of stat_layout. */
static void stat_sections(lua_State *L, const struct stat_src *src, char *buf,
                          struct stat_error *se)
{
	const char *open = NULL;  /* the section whose table is on top */
	int have = 0, skip = 0;

	for (int f = 0; f < CGF_COUNT; f++) {
		const struct stat_file *sf = &stat_layout[f];

		if (open != NULL && strcmp(open, sf->section) == 0) {
			if (skip)
				continue;
		} else {
			section_close(L, open, have);
			open = NULL;
			if (sf->key != NULL) {
				lua_newtable(L);
				open = sf->section;
				have = skip = 0;
			}
		}
		if (!stat_file_push(L, src, f, buf, se)) {
			skip = sf->anchor;
			continue;
		}
		lua_setfield(L, -2, sf->key != NULL ? sf->key : sf->section);
		have = 1;
	}
	section_close(L, open, have);
}

/*** Reads the unit's accounting: sections `cpu`, `memory`, `pids`,
 * `pressure`, `events`. A section whose files are absent is absent;
 * `cg:why(section)` says why. What each holds (`TK_STAT_FILES`):
 *
 * <!-- schema:cgroup-stat -->
 * - `cpu` `cpu.stat`: a table of its `key value` lines, integers (`*_usec` keys as `*_ns`, in ns)
 * - `memory.current` `memory.current` (the section's anchor): an integer, or `"max"`
 * - `memory.peak` `memory.peak`: an integer, or `"max"`
 * - `memory.max` `memory.max`: an integer, or `"max"`
 * - `memory.high` `memory.high`: an integer, or `"max"`
 * - `memory.events` `memory.events`: a table of its `key value` lines, integers (`*_usec` keys as
 *   `*_ns`, in ns)
 * - `pids.current` `pids.current` (the section's anchor): an integer, or `"max"`
 * - `pids.max` `pids.max`: an integer, or `"max"`
 * - `pids.peak` `pids.peak`: an integer, or `"max"`
 * - `pressure.cpu` `cpu.pressure`: `{some = {avg10, avg60, avg300, total_ns}, full = {...}}`
 * - `pressure.memory` `memory.pressure`: `{some = {avg10, avg60, avg300, total_ns}, full = {...}}`
 * - `pressure.io` `io.pressure`: `{some = {avg10, avg60, avg300, total_ns}, full = {...}}`
 * - `events` `cgroup.events`: its `key value` lines; `populated` and `frozen` booleans
 * <!-- /schema:cgroup-stat -->
 *
 * @function cgroup:stat
 * @treturn[1] table
 * @treturn[2] nil, `"stat <file>: message"`, errno when a present file cannot
 *   be read or parsed */
static int cg_stat(lua_State *L)
{
	struct lcgroup *cg = cg_check(L, 1);
	struct stat_src src = { cg->h.fd, cg->fds, NULL, 0 };
	struct stat_error se = { 0, 0, 0 };
	char *buf;

	tk_check_nargs(L, 1);
	buf = lua_newuserdatauv(L, READ_BUF, 0);
	lua_createtable(L, 0, 5);
	stat_sections(L, &src, buf, &se);
	if (se.err < 0)
		return tk_push_error(L, lua_pushfstring(L, "stat %s", stat_layout[se.file].file),
		                     se.err);
	/* A handle whose directory was removed finds no cgroup.controllers,
	 * and that is an error, not a cgroup without sections. */
	if (tk_cg_removed(cg->h.fd)) {
		lua_getiuservalue(L, 1, 1);
		lua_pushnil(L);
		lua_pushfstring(L, "stat /%s: the cgroup was removed (its directory is gone); "
		                "open it again once it is recreated", lua_tostring(L, -2));
		lua_pushinteger(L, ENOENT);
		return 3;
	}
	return 1;
}

int tk_cgroup_stat_files(void)
{
	return CGF_COUNT;
}

int tk_cgroup_stat_push(lua_State *L, struct tk_cg_tree *t, size_t node, char *buf,
                        const char **file, int *absent)
{
	struct stat_src src = { -1, NULL, t, node };
	struct stat_error se = { 0, 0, 0 };

	lua_createtable(L, 0, 5);
	stat_sections(L, &src, buf, &se);
	*absent = se.absent;
	*file = stat_layout[se.file].file;
	return se.err;
}

/*** Reads cgroup.events alone, through the descriptor `fileno()` polls:
 * reading it is what re-arms that descriptor's POLLPRI, so a loop that
 * polls and then calls `state()` never misses a change. (`events()` is
 * taken: it is cqueues' pollable protocol and answers "p".)
 * @function cgroup:state
 * @treturn[1] table `{populated = bool, frozen = bool}`
 * @treturn[2] nil, "state /path: message", errno (ENOENT for the root
 *   cgroup, which has no cgroup.events, and for a removed cgroup) */
static int cg_state(lua_State *L)
{
	struct lcgroup *cg = cg_check(L, 1);
	struct stat_src src = { cg->h.fd, cg->fds, NULL, 0 };
	char *buf;
	int err;

	tk_check_nargs(L, 1);
	buf = lua_newuserdatauv(L, READ_BUF, 0);
	err = events_push(L, &src, buf);
	if (err < 0) {
		lua_getiuservalue(L, 1, 1);
		if (*lua_tostring(L, -1) == '\0' && err == -ENOENT)
			return tk_push_error(L, "state /: the root cgroup has no cgroup.events", err);
		if (err == -ENOENT)
			return tk_push_error(L, lua_pushfstring(L, "state /%s: the cgroup was removed "
			                     "(cgroup.events is gone)", lua_tostring(L, -1)), err);
		return tk_push_error(L, lua_pushfstring(L, "state /%s: cgroup.events",
		                                        lua_tostring(L, -1)), err);
	}
	return 1;
}

static int file_name_check(lua_State *L, int idx)
{
	size_t len;
	const char *name = luaL_checklstring(L, idx, &len);

	if (len == 0 || len > 255 || strlen(name) != len || strchr(name, '/') != NULL ||
	    strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return luaL_argerror(L, idx, "a plain file or directory name expected");
	return 0;
}

/*** Raw content of any file of the unit.
 * @function cgroup:get
 * @string file e.g. "cgroup.controllers"
 * @treturn[1] string
 * @treturn[2] nil, message, errno */
static int buffer_add(void *ctx, const char *chunk, size_t len)
{
	luaL_addlstring(ctx, chunk, len);
	return 0;
}

static int cg_get(lua_State *L)
{
	struct lcgroup *cg = cg_check(L, 1);
	const char *file = luaL_checkstring(L, 2);
	luaL_Buffer b;
	int err;

	file_name_check(L, 2);
	tk_check_nargs(L, 2);
	luaL_buffinit(L, &b);
	err = tk_cg_read_each(cg->h.fd, file, buffer_add, &b);
	if (err < 0)
		return tk_push_error(L, lua_pushfstring(L, "get %s", file), err);
	luaL_pushresult(&b);
	return 1;
}

/* The internals below are functions of takana.core, not methods: a handle
 * shows only the documented API. Each one still keeps to the path rules:
 * plain names inside the handle's own directory, and rmdir only of the
 * handle's own directory. */

/* core.cgroup_write(cg, file, value) -> true | nil, msg, errno (the Lua
 * side diagnoses). */
static int l_cgroup_write(lua_State *L)
{
	struct lcgroup *cg = cg_check(L, 1);
	const char *file = luaL_checkstring(L, 2);
	size_t len;
	const char *value = luaL_checklstring(L, 3, &len);
	int err;

	file_name_check(L, 2);
	tk_check_nargs(L, 3);
	err = tk_cg_write(cg->h.fd, file, value, len);
	if (err < 0)
		return tk_push_error(L, file, err);
	lua_pushboolean(L, 1);
	return 1;
}

/* core.cgroup_mkdir(cg, name) -> true | nil, msg, errno */
static int l_cgroup_mkdir(lua_State *L)
{
	struct lcgroup *cg = cg_check(L, 1);
	const char *name = luaL_checkstring(L, 2);
	int err;

	file_name_check(L, 2);
	tk_check_nargs(L, 2);
	err = tk_cg_mkdir(cg->h.fd, name);
	if (err < 0)
		return tk_push_error(L, lua_pushfstring(L, "mkdir %s", name), err);
	lua_pushboolean(L, 1);
	return 1;
}

/* core.cgroup_rmdir(cg): removes the handle's own directory, found again
 * beneath the mount by the path it was opened with. */
static int l_cgroup_rmdir(lua_State *L)
{
	struct lcgroup *cg = cg_check(L, 1);
	const char *rel;
	int err;

	tk_check_nargs(L, 1);
	lua_getiuservalue(L, 1, 1);
	rel = lua_tostring(L, -1);
	if (rel == NULL || *rel == '\0')
		return tk_push_error(L, "remove", -EINVAL);
	err = tk_cg_rmdir(cg->mountfd, rel, cg->h.fd);
	if (err < 0)
		return tk_push_error(L, "remove", err);
	lua_pushboolean(L, 1);
	return 1;
}

/* A cgroup id, or nil, "ctx: msg", errno when err < 0. */
static int id_push(lua_State *L, const char *ctx, int err, uint64_t id)
{
	if (err < 0)
		return tk_push_error(L, ctx, err);
	lua_pushinteger(L, tk_u64_int(id));
	return 1;
}

/* core.cgroup_id(cg) -> id | nil, msg, errno */
static int l_cgroup_id(lua_State *L)
{
	struct lcgroup *cg = cg_check(L, 1);
	uint64_t id;
	int err;

	tk_check_nargs(L, 1);
	err = tk_cg_id(cg->h.fd, &id);
	return id_push(L, "cgroup id", err, id);
}

/* core.cgroup_has_pid(cg, pid) -> boolean | nil, msg, errno */
static int l_cgroup_has_pid(lua_State *L)
{
	struct lcgroup *cg = cg_check(L, 1);
	lua_Integer pid = luaL_checkinteger(L, 2);
	int r;

	tk_check_nargs(L, 2);
	luaL_argcheck(L, pid > 0 && pid <= 0x7fffffff, 2, "pid out of range");
	r = tk_cg_has_pid(cg->h.fd, (int)pid);
	if (r < 0)
		return tk_push_error(L, "cgroup.procs", r);
	lua_pushboolean(L, r);
	return 1;
}

/* Appends the value on top to the list beneath it. */
static int list_append(lua_State *L)
{
	lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
	return 0;
}

static int procs_append(void *ctx, int pid)
{
	lua_pushinteger(ctx, pid);
	return list_append(ctx);
}

/* core.cgroup_subtree_procs(cg, max_dirs) -> {pid...} of the cgroup and
 * its descendants | nil, msg, errno */
static int l_cgroup_subtree_procs(lua_State *L)
{
	struct lcgroup *cg = cg_check(L, 1);
	lua_Integer max = luaL_checkinteger(L, 2);
	int r;

	tk_check_nargs(L, 2);
	luaL_argcheck(L, max > 0 && max <= 1 << 20, 2, "directory bound out of range");
	lua_newtable(L);
	r = tk_cg_walk_procs(cg->h.fd, (int)max, procs_append, L);
	if (r < 0)
		return tk_push_error(L, "cgroup.procs", r);
	return 1;
}

/* Opens the cgroup2 mount into *mfd: 0, or pushes nil, msg, errno and
 * returns 3. */
static int mount_open_push(lua_State *L, const char *mount, int *mfd)
{
	*mfd = tk_cg_mount_open(mount);
	if (*mfd < 0)
		return tk_push_error(L, lua_pushfstring(L, "open %s", mount), *mfd);
	return 0;
}

/* core.cgroup_find(mount, depth, suffix, pid, id, max_dirs) -> relative
 * path | nil, msg, errno */
static int l_cgroup_find(lua_State *L)
{
	const char *mount = luaL_checkstring(L, 1);
	lua_Integer depth = luaL_checkinteger(L, 2);
	const char *suffix = luaL_checkstring(L, 3);
	lua_Integer pid = luaL_checkinteger(L, 4);
	lua_Integer id = luaL_checkinteger(L, 5);
	lua_Integer max = luaL_checkinteger(L, 6);
	char *out;
	int mfd, r;

	tk_check_nargs(L, 6);
	luaL_argcheck(L, depth >= 0 && depth <= 128, 2, "depth out of range");
	luaL_argcheck(L, pid >= 0 && pid <= 0x7fffffff, 4, "pid out of range");
	luaL_argcheck(L, max > 0 && max <= 1 << 20, 6, "directory bound out of range");
	out = lua_newuserdatauv(L, 4096, 0);
	if (mount_open_push(L, mount, &mfd))
		return 3;
	r = tk_cg_find(mfd, (int)depth, suffix, (int)pid, (uint64_t)id, (int)max, out, 4096);
	close(mfd);
	if (r < 0)
		return tk_push_error(L, "search", r);
	lua_pushstring(L, out);
	return 1;
}

/* core.cgroup_signal(cg, sig, skip_pid, max_rounds, timeout_s) ->
 * {signalled=, rounds=, listed=, errno=?, failed_pid=?, failed_errno=?}:
 * errno/error are set when the rounds stopped early (EBUSY: the bound),
 * the failed_ fields when the kernel refused a signal to some process. */
static int l_cgroup_signal(lua_State *L)
{
	struct lcgroup *cg = cg_check(L, 1);
	lua_Integer sig = luaL_checkinteger(L, 2);
	lua_Integer skip = luaL_checkinteger(L, 3);
	lua_Integer rounds = luaL_checkinteger(L, 4);
	struct tk_cg_signal_result res;
	int64_t timeout_ms;
	int r;

	/* Required: a bound, never the parser's nil (forever). */
	(void)luaL_checknumber(L, 5);
	timeout_ms = tk_timeout_check(L, 5);
	tk_check_nargs(L, 5);
	luaL_argcheck(L, sig >= 0 && sig < 65, 2, "signal number out of range");
	luaL_argcheck(L, skip >= 0 && skip <= 0x7fffffff, 3, "pid out of range");
	luaL_argcheck(L, rounds > 0 && rounds <= 1 << 20, 4, "round bound out of range");
	r = tk_cg_signal(cg->h.fd, (int)sig, (int)skip, 100000, (int)rounds, timeout_ms, &res);
	lua_createtable(L, 0, 6);
	lua_pushinteger(L, res.signalled);
	lua_setfield(L, -2, "signalled");
	lua_pushinteger(L, res.rounds);
	lua_setfield(L, -2, "rounds");
	lua_pushinteger(L, res.listed);
	lua_setfield(L, -2, "listed");
	if (r < 0) {
		lua_pushinteger(L, -r);
		lua_setfield(L, -2, "errno");
		lua_pushstring(L, strerror(-r));
		lua_setfield(L, -2, "error");
	}
	if (res.failed_err < 0) {
		lua_pushinteger(L, res.failed_pid);
		lua_setfield(L, -2, "failed_pid");
		lua_pushinteger(L, -res.failed_err);
		lua_setfield(L, -2, "failed_errno");
		lua_pushstring(L, strerror(-res.failed_err));
		lua_setfield(L, -2, "failed_error");
	}
	return 1;
}

static int child_append(void *ctx, const char *name)
{
	lua_pushstring(ctx, name);
	return list_append(ctx);
}

/* core.cgroup_children(cg) -> {name...} in directory order | nil, msg,
 * errno */
static int l_cgroup_children(lua_State *L)
{
	struct lcgroup *cg = cg_check(L, 1);
	int r;

	tk_check_nargs(L, 1);
	lua_newtable(L);
	r = tk_cg_children(cg->h.fd, child_append, L);
	if (r < 0)
		return tk_push_error(L, "children", r);
	return 1;
}

/* core.is_pidfd(v): whether v is a takana pidfd (spawned children are). */
static int l_is_pidfd(lua_State *L)
{
	tk_check_nargs(L, 1);
	lua_pushboolean(L, luaL_testudata(L, 1, TK_PIDFD_MT) != NULL);
	return 1;
}

/* The descriptor argument of the pidfd_ functions. */
static int pidfd_arg(lua_State *L)
{
	lua_Integer fd = luaL_checkinteger(L, 1);

	tk_check_nargs(L, 1);
	luaL_argcheck(L, fd >= 0 && fd <= 0x7fffffff, 1, "descriptor out of range");
	return (int)fd;
}

/* core.pidfd_pid(fd) -> pid | nil, msg, errno (ESRCH once reaped) */
static int l_pidfd_pid(lua_State *L)
{
	int pid, r = tk_pidfd_pid(pidfd_arg(L), &pid);

	if (r < 0)
		return tk_push_error(L, "pidfd", r);
	lua_pushinteger(L, pid);
	return 1;
}

/* core.pidfd_cgroup_id(fd) -> id | nil, msg, errno (ENOTTY/EINVAL before
 * Linux 6.13) */
static int l_pidfd_cgroup_id(lua_State *L)
{
	uint64_t id;
	int r = tk_pidfd_cgroup_id(pidfd_arg(L), &id);

	return id_push(L, "PIDFD_GET_INFO", r, id);
}

/*** The descriptor to poll: the cgroup's cgroup.events, which the kernel
 * marks priority-readable (POLLPRI, with POLLERR) when `populated` or
 * `frozen` changes. It is a regular file, so it is always readable too:
 * polled for input ("r") it wakes at once, forever. Poll it for POLLPRI:
 *
 * * `takana.poll{cg}` does (it asks `cg:events()`, which is "p");
 * * cqueues: `cqueues.poll(cg)` reads `pollfd()` and `events()` ("p")
 *   itself; closing the handle tells cqueues to forget the descriptor;
 * * luv: `uv.new_poll(cg:fileno()):start("p", cb)` -- "p", never "r";
 *   stop the poll handle before closing the cgroup handle.
 *
 * After each wake, read the state with `cg:state()` (or `cg:stat()`): the
 * read, through this same descriptor, re-arms it; a level-triggered loop
 * that does not read wakes again at once. `cg:get("cgroup.events")`
 * opens another descriptor and does not re-arm this one.
 * @function cgroup:fileno
 * @treturn[1] int descriptor
 * @treturn[2] nil, "fileno /path: cgroup.events: message", errno
 * @raise for the root cgroup, which has no cgroup.events */
static int cg_fileno(lua_State *L)
{
	struct lcgroup *cg = cg_check(L, 1);

	tk_check_nargs(L, 1);
	if (cg->fds[CGF_EVENTS] < 0) {
		int fd = tk_cg_file_open(cg->h.fd, stat_layout[CGF_EVENTS].file);
		if (fd < 0) {
			lua_getiuservalue(L, 1, 1);
			if (fd == -ENOENT && *lua_tostring(L, -1) == '\0')
				return luaL_argerror(L, 1, "the root cgroup has no cgroup.events, so there is "
				                     "nothing to poll; poll a child cgroup instead");
			return tk_push_error(L, lua_pushfstring(L, "fileno /%s: cgroup.events",
			                                        lua_tostring(L, -1)), fd);
		}
		cg->fds[CGF_EVENTS] = fd;
	}
	lua_pushinteger(L, cg->fds[CGF_EVENTS]);
	return 1;
}

/* The directory fd of a cgroup handle at idx, for spawn's
 * CLONE_INTO_CGROUP: raises when idx is no open handle. */
int tk_cgroup_dirfd(lua_State *L, int idx)
{
	struct lcgroup *cg = luaL_testudata(L, idx, TK_CGROUP_MT);

	if (cg == NULL)
		return luaL_error(L, "bad argument #1 to 'spawn' (cgroup: path or takana.cgroup handle expected)");
	if (cg->h.fd < 0)
		return luaL_error(L, "bad argument #1 to 'spawn' (cgroup: the handle is closed)");
	return cg->h.fd;
}

/* The base's release: every kept descriptor, cgroup.events (the polled
 * one) told to cqueues first, the directory and the mount. */
static void cg_release(lua_State *L, struct tk_handle *h)
{
	struct lcgroup *cg = (struct lcgroup *)h;

	tk_handle_forget_fd(L, cg->fds[CGF_EVENTS]);
	for (int i = 0; i < CGF_COUNT; i++) {
		if (cg->fds[i] >= 0)
			close(cg->fds[i]);
		cg->fds[i] = -1;
	}
	if (cg->mountfd >= 0)
		close(cg->mountfd);
	cg->mountfd = -1;
	close(h->fd);
}

static int cg_tostring(lua_State *L)
{
	struct lcgroup *cg = luaL_checkudata(L, 1, TK_CGROUP_MT);
	lua_getiuservalue(L, 1, 1);
	lua_pushfstring(L, "takana.Cgroup (/%s%s)", lua_tostring(L, -1),
	                cg->h.fd < 0 ? ", closed" : "");
	return 1;
}

/* upvalue 1: methods. Fields: path ("/" + relative path), mount. */
static int cg_index(lua_State *L)
{
	luaL_checkudata(L, 1, TK_CGROUP_MT);
	if (lua_type(L, 2) == LUA_TSTRING) {
		const char *k = lua_tostring(L, 2);
		if (strcmp(k, "path") == 0) {
			lua_getiuservalue(L, 1, 1);
			lua_pushfstring(L, "/%s", lua_tostring(L, -1));
			return 1;
		}
		if (strcmp(k, "relpath") == 0) {
			lua_getiuservalue(L, 1, 1);
			return 1;
		}
		if (strcmp(k, "mount") == 0) {
			lua_getiuservalue(L, 1, 2);
			return 1;
		}
	}
	lua_pushvalue(L, 2);
	lua_rawget(L, lua_upvalueindex(1));
	return 1;
}

/* core.cgroup_open(mount, relpath): relpath already checked lexically by
 * the Lua side; "" or "." is the mount root itself. */
static int l_cgroup_open(lua_State *L)
{
	const char *mount = luaL_checkstring(L, 1);
	const char *rel = luaL_checkstring(L, 2);
	struct lcgroup *cg;
	int err;

	tk_check_nargs(L, 2);
	cg = lua_newuserdatauv(L, sizeof *cg, 2);
	tk_handle_init(&cg->h, "cgroup handle", "p", cg_release);
	cg->mountfd = -1;
	for (int i = 0; i < CGF_COUNT; i++)
		cg->fds[i] = -1;
	luaL_setmetatable(L, TK_CGROUP_MT);
	err = tk_cg_mount_open(mount);
	if (err < 0)
		return tk_push_error(L, lua_pushfstring(L, "cgroup: open %s", mount), err);
	cg->mountfd = err;
	err = tk_cg_open(cg->mountfd, *rel ? rel : ".", &cg->h.fd);
	if (err < 0) {
		close(cg->mountfd);
		cg->mountfd = -1;
		if (err == -EXDEV)
			return tk_push_error(L, lua_pushfstring(L, "cgroup /%s: leaves the cgroup2 mount", rel), err);
		if (err == -ELOOP)
			return tk_push_error(L, lua_pushfstring(L, "cgroup /%s: refusing a symlink", rel), err);
		return tk_push_error(L, lua_pushfstring(L, "cgroup /%s", rel), err);
	}
	lua_pushstring(L, rel);
	lua_setiuservalue(L, -2, 1);
	lua_pushstring(L, mount);
	lua_setiuservalue(L, -2, 2);
	tk_handle_opened(L, cg->h.fd);
	return 1;
}

/* core.kv_parse(text) and core.psi_parse(line): the parsers alone. */
static int l_kv_parse(lua_State *L)
{
	size_t len;
	const char *s = luaL_checklstring(L, 1, &len);
	int err;

	lua_newtable(L);
	err = tk_kv_parse(s, len, kv_set, L);
	if (err < 0)
		return tk_push_error(L, "kv_parse", err);
	return 1;
}

static int l_psi_parse(lua_State *L)
{
	size_t len;
	const char *s = luaL_checklstring(L, 1, &len);
	struct tk_psi_line line;
	int err = tk_psi_parse_line(s, len, &line);

	if (err < 0)
		return tk_push_error(L, "psi_parse", err);
	psi_line_push(L, &line, 5);
	lua_pushstring(L, line.full ? "full" : "some");
	lua_setfield(L, -2, "kind");
	return 1;
}

static int mounts_watch_gc(lua_State *L)
{
	tk_mounts_watch_close(lua_touserdata(L, 1));
	return 0;
}

/* core.mounts_changed(): whether this process's mount table may have
 * changed since the last call (true the first time, and whenever that
 * cannot be told). The kernel flags /proc/self/mountinfo with POLLPRI once
 * per mount or unmount in its namespace, so a parsed copy of the table
 * stays good until then: one poll instead of a read and a parse of every
 * mount on each cgroup open. The news is consumed: cgroup.lua's cache is
 * the one caller. Not seen: a switch to another mount namespace (setns,
 * unshare), which takana never makes. */
static int l_mounts_changed(lua_State *L)
{
	struct tk_mounts_watch *w = lua_touserdata(L, lua_upvalueindex(1));

	tk_check_nargs(L, 0);
	lua_pushboolean(L, tk_mounts_watch_changed(w));
	return 1;
}

void tk_cgroup_open_lib(lua_State *L)
{
	static const luaL_Reg methods[] = {
		{ "stat", cg_stat },
		{ "get", cg_get },
		{ "state", cg_state },
		{ "fileno", cg_fileno },
		{ "pollfd", cg_fileno },
		{ NULL, NULL },
	};
	static const luaL_Reg funcs[] = {
		{ "cgroup_open", l_cgroup_open },
		{ "cgroup_write", l_cgroup_write },
		{ "cgroup_mkdir", l_cgroup_mkdir },
		{ "cgroup_rmdir", l_cgroup_rmdir },
		{ "cgroup_id", l_cgroup_id },
		{ "cgroup_has_pid", l_cgroup_has_pid },
		{ "cgroup_subtree_procs", l_cgroup_subtree_procs },
		{ "cgroup_find", l_cgroup_find },
		{ "pidfd_pid", l_pidfd_pid },
		{ "is_pidfd", l_is_pidfd },
		{ "pidfd_cgroup_id", l_pidfd_cgroup_id },
		{ "kv_parse", l_kv_parse },
		{ "cgroup_signal", l_cgroup_signal },
		{ "cgroup_children", l_cgroup_children },
		{ "psi_parse", l_psi_parse },
		{ NULL, NULL },
	};

	static const struct tk_mounts_watch init = TK_MOUNTS_WATCH_INIT;
	struct tk_mounts_watch *w;

	tk_handle_newclass(L, TK_CGROUP_MT, methods, cg_index, cg_tostring);
	/* The Lua front adds its methods to this same table. */
	lua_setfield(L, -2, "cgroup_methods");
	luaL_setfuncs(L, funcs, 0);

	w = lua_newuserdatauv(L, sizeof *w, 0);
	*w = init;
	lua_createtable(L, 0, 1);
	lua_pushcfunction(L, mounts_watch_gc);
	lua_setfield(L, -2, "__gc");
	lua_setmetatable(L, -2);
	lua_pushcclosure(L, l_mounts_changed, 1);
	lua_setfield(L, -2, "mounts_changed");
	stat_layout_push(L);
	lua_setfield(L, -2, "cgroup_stat");
}

/* ---- cgroup ids to paths (cgroup_path.c) ---------------------------------- */

static lua_Integer cg_id_check(lua_State *L, int idx)
{
	lua_Integer id = luaL_checkinteger(L, idx);
	luaL_argcheck(L, id > 0, idx, "cgroup id must be positive");
	return id;
}

/* core.cgroup_path_by_handle(mount, id) -> relpath | nil, msg, errno */
static int l_cgroup_path_by_handle(lua_State *L)
{
	const char *mount = luaL_checkstring(L, 1);
	lua_Integer id = cg_id_check(L, 2);
	char *out;
	int mfd, r;

	tk_check_nargs(L, 2);
	out = lua_newuserdatauv(L, 4096, 0);
	if (mount_open_push(L, mount, &mfd))
		return 3;
	r = tk_cg_path_by_handle(mfd, (uint64_t)id, out, 4096);
	close(mfd);
	if (r < 0)
		return tk_push_error(L, "open_by_handle_at", r);
	lua_pushstring(L, out);
	return 1;
}

static int id_set(void *ctx, uint64_t id, const char *rel)
{
	lua_State *L = ctx;

	lua_pushstring(L, rel);
	lua_rawseti(L, -2, tk_u64_int(id));
	return 0;
}

/* core.cgroup_ids(mount, max_dirs) -> {[id] = relpath} | nil, msg, errno */
static int l_cgroup_ids(lua_State *L)
{
	const char *mount = luaL_checkstring(L, 1);
	lua_Integer max = luaL_checkinteger(L, 2);
	int mfd, r;

	tk_check_nargs(L, 2);
	luaL_argcheck(L, max > 0 && max <= 1 << 20, 2, "directory bound out of range");
	lua_newtable(L);
	if (mount_open_push(L, mount, &mfd))
		return 3;
	r = tk_cg_walk_ids(mfd, (int)max, id_set, L);
	close(mfd);
	if (r < 0)
		return tk_push_error(L, "walk", r);
	return 1;
}

/* The resolver's cache of this Lua state, in the registry under its own
 * address: one for takana.cgroup.path and snap:cgroup alike. */
static const char cgpath_key = 0;

static int cgpath_gc(lua_State *L)
{
	tk_cgpath_cache_free(lua_touserdata(L, 1));
	return 0;
}

static struct tk_cgpath_cache *cgpath_cache(lua_State *L)
{
	struct tk_cgpath_cache *c;

	if (lua_rawgetp(L, LUA_REGISTRYINDEX, &cgpath_key) == LUA_TUSERDATA) {
		c = lua_touserdata(L, -1);
		lua_pop(L, 1);
		return c;
	}
	lua_pop(L, 1);
	c = lua_newuserdatauv(L, sizeof *c, 0);
	tk_cgpath_cache_init(c);
	lua_newtable(L);
	lua_pushcfunction(L, cgpath_gc);
	lua_setfield(L, -2, "__gc");
	lua_setmetatable(L, -2);
	lua_rawsetp(L, LUA_REGISTRYINDEX, &cgpath_key);
	return c;
}

int tk_cgroup_path_cached_push(lua_State *L, uint64_t id)
{
	const char *path = tk_cgpath_cached(cgpath_cache(L), id);

	if (path == NULL)
		return 0;
	lua_pushstring(L, path);
	return 1;
}

int tk_cgroup_path_push(lua_State *L, const char *mount, uint64_t id)
{
	struct tk_cgpath_cache *c = cgpath_cache(L);
	enum tk_cgpath_step step = TK_CGPATH_WALK;
	char *out = lua_newuserdatauv(L, 4096, 0);
	const char *ctx;
	int r = tk_cgroup_id_path(c, mount, id, out, 4096, &step);

	if (r == 0) {
		lua_pushstring(L, out);
		return 1;
	}
	switch (step) {
	case TK_CGPATH_OPEN:
		ctx = lua_pushfstring(L, "cgroup.path: open %s", mount);
		break;
	case TK_CGPATH_HANDLE:
		if (r == -ENOENT) {
			lua_pushnil(L);
			lua_pushfstring(L, "cgroup.path: no cgroup has id %I (removed?)", tk_u64_int(id));
			lua_pushinteger(L, ENOENT);
			return 3;
		}
		ctx = "cgroup.path: open_by_handle_at";
		break;
	case TK_CGPATH_WALK_OPEN:
		ctx = lua_pushfstring(L, "cgroup.path: walking %s: open %s", mount, mount);
		break;
	case TK_CGPATH_MISSING:
		lua_pushnil(L);
		lua_pushfstring(L, "cgroup.path: no cgroup beneath %s has id %I (removed?)", mount,
		                tk_u64_int(id));
		lua_pushinteger(L, ENOENT);
		return 3;
	default:
		ctx = lua_pushfstring(L, "cgroup.path: walking %s: walk", mount);
		break;
	}
	return tk_push_error(L, ctx, r);
}

/* core.cgroup_path_cached(id) -> path | nil: the cache's answer alone,
 * checked against the id, before takana.cgroup.path looks up the mount. */
static int l_cgroup_path_cached(lua_State *L)
{
	lua_Integer id = cg_id_check(L, 1);

	tk_check_nargs(L, 1);
	if (!tk_cgroup_path_cached_push(L, (uint64_t)id))
		lua_pushnil(L);
	return 1;
}

/* core.cgroup_path(mount, id) -> "/a/b" ("/": the mount's root) | nil, msg, errno */
static int l_cgroup_path(lua_State *L)
{
	const char *mount = luaL_checkstring(L, 1);
	lua_Integer id = cg_id_check(L, 2);

	tk_check_nargs(L, 2);
	return tk_cgroup_path_push(L, mount, (uint64_t)id);
}

void tk_cgroup_path_open_lib(lua_State *L)
{
	static const luaL_Reg funcs[] = {
		{ "cgroup_path_by_handle", l_cgroup_path_by_handle },
		{ "cgroup_ids", l_cgroup_ids },
		{ "cgroup_path", l_cgroup_path },
		{ "cgroup_path_cached", l_cgroup_path_cached },
		{ NULL, NULL },
	};
	luaL_setfuncs(L, funcs, 0);
}
