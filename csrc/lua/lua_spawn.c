/* Lua binding of takana.spawn: reads the options into a struct
 * tk_spawn_opts that the clone3 child applies before exec (process.c).
 *
 * Every string and descriptor the child needs is copied here: options are
 * read with lua_getfield, whose __index can run Lua code that drops the
 * caller's strings and collects them, or closes a file and opens another
 * in its number, so no pointer into a Lua string and no caller's fd may
 * outlive the option read that produced it. Nested option tables (env,
 * rlimits, groups, fds) are read raw. */
/***
 * spawn, from C.
 * @module takana
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <math.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "binding.h"
#include "cgroup.h"
#include "fdio.h"
#include "process.h"
#include "util.h"

#define NRLIMITS 16           /* entries of tk_rlimit_names */
#define EXTRA_FD_MAX 65535    /* highest target of fds = {[n] = ...} */
#define PW_BUF_MAX (1 << 20)  /* getpwnam_r/getgrnam_r buffer, grown to this */

struct spawn_state {
	struct tk_spawn_opts o;
	char **argv;           /* owned strings, argc of them */
	size_t argc;
	char **envp;           /* owned strings, envc of them; NULL: environ */
	size_t envc;
	char *cwd;
	char *cgroup_path;     /* for messages */
	gid_t *groups;
	struct tk_spawn_rlimit rlimits[NRLIMITS];
	struct tk_spawn_fd *extra; /* sources owned, closed after the spawn */
	size_t nextra;
	int owned[3];          /* stdio fds opened or duplicated here */
	int nowned;
};

static void strings_free(char **v, size_t n)
{
	if (v == NULL)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static void spawn_state_free(struct spawn_state *st)
{
	for (int i = 0; i < st->nowned; i++)
		close(st->owned[i]);
	st->nowned = 0;
	for (size_t i = 0; i < st->nextra; i++)
		close(st->extra[i].source);
	free(st->extra);
	st->extra = NULL;
	st->nextra = 0;
	if (st->o.cgroup_fd >= 0)
		close(st->o.cgroup_fd);
	st->o.cgroup_fd = -1;
	strings_free(st->argv, st->argc);
	strings_free(st->envp, st->envc);
	free(st->cwd);
	free(st->cgroup_path);
	free(st->groups);
	st->argv = st->envp = NULL;
	st->argc = st->envc = 0;
	st->cwd = st->cgroup_path = NULL;
	st->groups = NULL;
}

/* The state lives in a userdata whose __gc frees it, so a raised error
 * between here and the spawn leaks nothing. */
static int spawn_state_gc(lua_State *L)
{
	spawn_state_free(lua_touserdata(L, 1));
	return 0;
}

static struct spawn_state *spawn_state_new(lua_State *L)
{
	struct spawn_state *st = lua_newuserdatauv(L, sizeof *st, 0);

	memset(st, 0, sizeof *st);
	st->o.cgroup_fd = -1;
	st->o.pgroup = -1;
	lua_newtable(L);
	lua_pushcfunction(L, spawn_state_gc);
	lua_setfield(L, -2, "__gc");
	lua_setmetatable(L, -2);
	return st;
}

/* "bad argument #1 to 'spawn' (<message>)": 'spawn', or the name in
 * upvalue 1 of the running function (core.ids's resolver, for a caller
 * that checks spawn's options under its own name). */
static int spawn_error(lua_State *L, const char *fmt, ...)
{
	const char *fname = lua_type(L, lua_upvalueindex(1)) == LUA_TSTRING
	                    ? lua_tostring(L, lua_upvalueindex(1)) : "spawn";
	va_list ap;

	va_start(ap, fmt);
	lua_pushvfstring(L, fmt, ap);
	va_end(ap);
	return luaL_error(L, "bad argument #1 to '%s' (%s)", fname, lua_tostring(L, -1));
}

static void *spawn_alloc(lua_State *L, size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);
	if (p == NULL)
		luaL_error(L, "spawn: out of memory");
	return p;
}

static const char *checked_string(lua_State *L, int idx, const char *what)
{
	size_t len;
	const char *s;

	if (lua_type(L, idx) != LUA_TSTRING)
		spawn_error(L, "%s: string expected, got %s", what, luaL_typename(L, idx));
	s = lua_tolstring(L, idx, &len);
	if (strlen(s) != len)
		spawn_error(L, "%s contains a NUL byte", what);
	return s;
}

/* A malloc'ed copy of the string at idx, owned by the spawn state. */
static char *owned_string(lua_State *L, int idx, const char *what)
{
	char *copy = strdup(checked_string(L, idx, what));
	if (copy == NULL)
		luaL_error(L, "spawn: out of memory");
	return copy;
}

/* "option 'x': <want> expected, got <type>": the option's own type. */
static int option_type_error(lua_State *L, const char *name, const char *want, int idx)
{
	return spawn_error(L, "option '%s': %s expected, got %s", name, want, luaL_typename(L, idx));
}

/* An integer in lo..hi at idx (an integral float too), or raises. */
static lua_Integer option_int(lua_State *L, int idx, const char *name, lua_Integer lo, lua_Integer hi)
{
	int isnum;
	lua_Integer v = lua_tointegerx(L, idx, &isnum);

	if (lua_type(L, idx) != LUA_TNUMBER || !isnum)
		option_type_error(L, name, "integer", idx);
	if (v < lo || v > hi)
		spawn_error(L, "option '%s': %I out of range %I..%I", name, v, lo, hi);
	return v;
}

static void argv_option(lua_State *L, struct spawn_state *st)
{
	lua_Integer argc = (lua_Integer)lua_rawlen(L, 1);

	luaL_argcheck(L, argc >= 1, 1, "program name expected at t[1]");
	luaL_argcheck(L, argc < 65536, 1, "too many arguments");
	st->argv = spawn_alloc(L, (size_t)argc + 1, sizeof *st->argv);
	for (lua_Integer i = 1; i <= argc; i++) {
		if (lua_rawgeti(L, 1, i) != LUA_TSTRING)
			spawn_error(L, "t[%I]: string expected, got %s", i, luaL_typename(L, -1));
		st->argv[i - 1] = owned_string(L, -1, "argument");
		st->argc++;
		lua_pop(L, 1);
	}
	luaL_argcheck(L, st->argv[0][0] != '\0', 1, "program name is empty");
	st->o.argv = st->argv;
}

/* ---- env ----------------------------------------------------------------- */

static void env_name_check(lua_State *L, const char *k, const char *what)
{
	if (*k == '\0' || strchr(k, '=') != NULL)
		spawn_error(L, "%s '%s' is empty or has '='", what, k);
}

/* Appends an owned "K=v" (the string at the top, popped) to envp, which
 * has room for cap entries. */
static void env_append(lua_State *L, struct spawn_state *st, size_t cap)
{
	/* A finalizer run by an allocation here could add entries. */
	if (st->envc == cap)
		spawn_error(L, "env changed while it was read");
	st->envp[st->envc++] = owned_string(L, -1, "env entry");
	lua_pop(L, 1);
}

static size_t table_count(lua_State *L, int idx)
{
	size_t n = 0;

	lua_pushnil(L);
	while (lua_next(L, idx)) {
		n++;
		lua_pop(L, 1);
	}
	return n;
}

/* env = {"K=v", ...} or {K = "v"}: the whole environment. */
static void env_replace(lua_State *L, struct spawn_state *st, int t)
{
	size_t n = table_count(L, t);

	st->envp = spawn_alloc(L, n + 1, sizeof *st->envp);
	/* lua_next runs no Lua code: the table cannot change under it. */
	lua_pushnil(L);
	while (lua_next(L, t)) {
		const char *v = checked_string(L, -1, "env value");
		if (lua_type(L, -2) == LUA_TSTRING) {
			const char *k = checked_string(L, -2, "env name");
			env_name_check(L, k, "env name");
			lua_pushfstring(L, "%s=%s", k, v);
		} else {
			if (strchr(v, '=') == NULL)
				spawn_error(L, "env entry '%s' is not NAME=value", v);
			lua_pushvalue(L, -1);
		}
		env_append(L, st, n);
		lua_pop(L, 1);
	}
}

static int string_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* env = {add = {K = "v"}, remove = {"K2"}}: environ without the removed
 * names and the added ones, then the added ones sorted by name. drop (a
 * set of names) is built first at the top of the stack. */
static void env_merge(lua_State *L, struct spawn_state *st, int add, int remove)
{
	size_t nenv = 0, cap, first;
	int drop;

	lua_newtable(L);
	drop = lua_gettop(L);
	for (lua_Integer i = 1; remove && lua_rawgeti(L, remove, i) != LUA_TNIL; i++) {
		env_name_check(L, checked_string(L, -1, "env.remove name"), "env.remove name");
		lua_pushboolean(L, 1);
		lua_rawset(L, drop);
	}
	if (remove)
		lua_pop(L, 1);
	if (remove && (size_t)lua_rawlen(L, remove) != table_count(L, remove))
		spawn_error(L, "env.remove: an array of names expected");
	while (environ[nenv] != NULL)
		nenv++;
	cap = nenv + (add ? table_count(L, add) : 0);
	st->envp = spawn_alloc(L, cap + 1, sizeof *st->envp);
	for (lua_pushnil(L); add && lua_next(L, add); lua_pop(L, 1)) {
		const char *k = checked_string(L, -2, "env.add name");
		checked_string(L, -1, "env.add value");
		env_name_check(L, k, "env.add name");
		lua_pushvalue(L, -2);
		lua_pushboolean(L, 1);
		lua_rawset(L, drop);
	}
	for (size_t i = 0; i < nenv && environ[i] != NULL; i++) {
		const char *eq = strchr(environ[i], '=');
		lua_pushlstring(L, environ[i], eq ? (size_t)(eq - environ[i]) : strlen(environ[i]));
		if (lua_rawget(L, drop) == LUA_TNIL) {
			lua_pushstring(L, environ[i]);
			env_append(L, st, cap);
		}
		lua_pop(L, 1);
	}
	first = st->envc;
	for (lua_pushnil(L); add && lua_next(L, add); lua_pop(L, 1)) {
		lua_pushfstring(L, "%s=%s", lua_tostring(L, -2), lua_tostring(L, -1));
		env_append(L, st, cap);
	}
	qsort(st->envp + first, st->envc - first, sizeof *st->envp, string_cmp);
	lua_pop(L, 1);
}

static void env_option(lua_State *L, struct spawn_state *st)
{
	int t, add = 0, remove = 0;

	if (lua_getfield(L, 1, "env") == LUA_TNIL) {
		lua_pop(L, 1);
		return;
	}
	if (!lua_istable(L, -1))
		option_type_error(L, "env", "a table of NAME = value strings", -1);
	t = lua_gettop(L);
	/* The merge form has table values at add/remove; a variable named
	 * "add" in the map form has a string. */
	lua_pushliteral(L, "add");
	if (lua_rawget(L, t) == LUA_TTABLE)
		add = t + 1;
	lua_pushliteral(L, "remove");
	if (lua_rawget(L, t) == LUA_TTABLE)
		remove = t + 2;
	if (add || remove) {
		if (table_count(L, t) != (size_t)(!lua_isnil(L, t + 1)) + (size_t)(!lua_isnil(L, t + 2)))
			spawn_error(L, "env: {add = {...}, remove = {...}} takes nothing else");
		if (!add && !lua_isnil(L, t + 1))
			option_type_error(L, "env.add", "table", t + 1);
		if (!remove && !lua_isnil(L, t + 2))
			option_type_error(L, "env.remove", "table", t + 2);
		env_merge(L, st, add, remove);
	} else {
		env_replace(L, st, t);
	}
	lua_settop(L, t - 1);
}

/* ---- user, group, groups ------------------------------------------------- */

/* One getpw*_r or getgr*_r call: by id when id >= 0, else by name. */
typedef int (*id_get_fn)(const char *name, long long id, void *ent, char *buf, size_t size,
                         void **res);

static int pw_get(const char *name, long long id, void *ent, char *buf, size_t size, void **res)
{
	struct passwd *r = NULL;
	int err = id >= 0 || name == NULL ? getpwuid_r((uid_t)id, ent, buf, size, &r)
	                                  : getpwnam_r(name, ent, buf, size, &r);

	*res = r;
	return err;
}

static int gr_get(const char *name, long long id, void *ent, char *buf, size_t size, void **res)
{
	struct group *r = NULL;
	int err = id >= 0 || name == NULL ? getgrgid_r((gid_t)id, ent, buf, size, &r)
	                                  : getgrnam_r(name, ent, buf, size, &r);

	*res = r;
	return err;
}

/* Calls get with a buffer grown until the entry fits. Returns the entry in
 * *ent (strings in *buf, freed by the caller) or NULL. */
static void *id_lookup(id_get_fn get, const char *name, long long want_id, void *ent, char **buf)
{
	size_t cap = 0;
	void *res = NULL;

	for (size_t size = 1024; size <= PW_BUF_MAX; size *= 2) {
		int r;
		char *b = tk_grow(*buf, &cap, size, 1, 1024);
		if (b == NULL)
			return NULL;
		*buf = b;
		r = get(name, want_id, ent, b, size, &res);
		if (r != ERANGE)
			return r == 0 ? res : NULL;
	}
	return NULL;
}

static struct passwd *pw_lookup(const char *name, long long want_uid, struct passwd *pw, char **buf)
{
	return id_lookup(pw_get, name, want_uid, pw, buf);
}

static struct group *gr_lookup(const char *name, long long want_gid, struct group *gr, char **buf)
{
	return id_lookup(gr_get, name, want_gid, gr, buf);
}

/* A numeric id in a string ("65534"), as chown(1) takes it; -1 otherwise. */
static long long numeric_id(const char *s)
{
	const char *end = s + strlen(s);
	uint64_t v;

	if (tk_parse_u64(s, end, (uid_t)-2, &v) != end)
		return -1;
	return (long long)v;
}

/* The group at idx (name or gid) as a gid, or raises. */
static gid_t group_resolve(lua_State *L, int idx, const char *what)
{
	struct group gr;
	char *buf = NULL;
	const char *name;
	long long id;

	if (lua_type(L, idx) == LUA_TNUMBER)
		return (gid_t)option_int(L, idx, what, 0, (lua_Integer)(gid_t)-2);
	name = checked_string(L, idx, what);
	id = gr_lookup(name, -1, &gr, &buf) ? (long long)gr.gr_gid : numeric_id(name);
	free(buf);
	if (id < 0)
		spawn_error(L, "unknown group '%s'", name);
	return (gid_t)id;
}

/* groups = {name or gid, ...} */
static void groups_option(lua_State *L, struct spawn_state *st, int t)
{
	size_t n = (size_t)lua_rawlen(L, t);
	long max = sysconf(_SC_NGROUPS_MAX);

	if (n != table_count(L, t))
		spawn_error(L, "option 'groups': an array of group names or gids expected");
	if (max > 0 && n > (size_t)max)
		spawn_error(L, "option 'groups': more than %d groups", (int)max);
	st->groups = spawn_alloc(L, n, sizeof *st->groups);
	for (size_t i = 0; i < n; i++) {
		lua_rawgeti(L, t, (lua_Integer)i + 1);
		st->groups[i] = group_resolve(L, -1, "groups entry");
		lua_pop(L, 1);
	}
	st->o.ngroups = n;
	st->o.set_groups = 1;
}

/* The user's supplementary groups, as initgroups(3) would set them. */
static void groups_default(lua_State *L, struct spawn_state *st, const char *name, gid_t gid)
{
	int n = 32;

	for (;;) {
		int want = n;
		free(st->groups);
		st->groups = spawn_alloc(L, (size_t)n, sizeof *st->groups);
		if (getgrouplist(name, gid, st->groups, &n) >= 0)
			break;
		if (n <= want)
			n = want * 2;
		if (n > 65536)
			spawn_error(L, "user '%s' is in too many groups", name);
	}
	st->o.ngroups = (size_t)n;
	st->o.set_groups = 1;
}

/* setgroups needs CAP_SETGID even to set the same list: skip it then, so
 * an unprivileged caller may name its own user. */
static void groups_skip_if_same(struct spawn_state *st)
{
	gid_t cur[256];
	int n = getgroups(256, cur);

	if (n < 0 || (size_t)n != st->o.ngroups)
		return;
	for (size_t i = 0; i < st->o.ngroups; i++) {
		int found = 0;
		for (int k = 0; k < n && !found; k++)
			found = cur[k] == st->groups[i];
		if (!found)
			return;
	}
	st->o.set_groups = 0;
}

/* The user at idx (name or uid): 1 with *uid, *gid and its name pushed
 * when it has a passwd entry; 0 with *uid and nil pushed for a bare uid.
 * Raises for an unknown name. */
static int user_resolve(lua_State *L, int idx, uid_t *uid, gid_t *gid)
{
	struct passwd pw, *found;
	char *buf = NULL;
	long long id = -1;
	const char *name = NULL;

	if (lua_type(L, idx) == LUA_TNUMBER)
		id = option_int(L, idx, "user", 0, (lua_Integer)(uid_t)-2);
	else
		name = checked_string(L, idx, "user");
	found = pw_lookup(name, id, &pw, &buf);
	if (found == NULL && name != NULL && (id = numeric_id(name)) >= 0)
		found = pw_lookup(NULL, id, &pw, &buf);
	if (found != NULL) {
		*uid = found->pw_uid;
		*gid = found->pw_gid;
		lua_pushstring(L, found->pw_name);
	} else {
		*uid = (uid_t)id;
		lua_pushnil(L);
	}
	free(buf);
	if (found == NULL && id < 0)
		spawn_error(L, "unknown user '%s'", name);
	return found != NULL;
}

/* user = name or uid; group = name or gid; groups = {...}. Resolved here,
 * in the parent, so a bad name raises; the child only sets the ids. */
static void ids_option(lua_State *L, struct spawn_state *st)
{
	int user = lua_getfield(L, 1, "user") != LUA_TNIL ? lua_gettop(L) : 0;
	int group = lua_getfield(L, 1, "group") != LUA_TNIL ? lua_gettop(L) : 0;
	int groups = lua_getfield(L, 1, "groups") != LUA_TNIL ? lua_gettop(L) : 0;

	if (groups && !lua_istable(L, groups))
		option_type_error(L, "groups", "table", groups);
	if (group) {
		st->o.gid = group_resolve(L, group, "group");
		st->o.set_gid = 1;
	}
	if (groups)
		groups_option(L, st, groups);
	if (user) {
		gid_t pw_gid = 0;
		int found = user_resolve(L, user, &st->o.uid, &pw_gid);
		if (!found && !group)
			spawn_error(L, "user %d has no passwd entry: give group too", (int)st->o.uid);
		st->o.set_uid = 1;
		if (!group) {
			st->o.gid = pw_gid;
			st->o.set_gid = 1;
		}
		if (!groups && found)
			groups_default(L, st, lua_tostring(L, -1), st->o.gid);
		else if (!groups) /* no passwd entry: no supplementary groups */
			st->o.set_groups = 1;
		lua_pop(L, 1);
	}
	st->o.groups = st->groups;
	if (st->o.set_groups)
		groups_skip_if_same(st);
	lua_pop(L, 3);
}

/* ---- limits, umask, pdeathsig, no_new_privs -------------------------------- */

/* One limit value: a non-negative integer, "unlimited" or math.huge. */
static rlim_t rlimit_value(lua_State *L, int idx, const char *name)
{
	if (lua_type(L, idx) == LUA_TSTRING && strcmp(lua_tostring(L, idx), "unlimited") == 0)
		return RLIM_INFINITY;
	if (lua_type(L, idx) == LUA_TNUMBER && !lua_isinteger(L, idx) &&
	    lua_tonumber(L, idx) == HUGE_VAL)
		return RLIM_INFINITY;
	if (lua_type(L, idx) != LUA_TNUMBER)
		spawn_error(L, "rlimits.%s: integer, 'unlimited' or math.huge expected, got %s", name,
		            luaL_typename(L, idx));
	return (rlim_t)option_int(L, idx, name, 0, LUA_MAXINTEGER);
}

/* rlimits = {nofile = 1024 | {soft, hard}, ...}: one number sets both, as
 * prlimit(1) and systemd's Limit*= do. Applied in the order of
 * tk_rlimit_names, whatever order the table iterates in. */
static void rlimits_option(lua_State *L, struct spawn_state *st)
{
	int t;
	size_t n = 0;

	if (lua_getfield(L, 1, "rlimits") == LUA_TNIL) {
		lua_pop(L, 1);
		return;
	}
	if (!lua_istable(L, -1))
		option_type_error(L, "rlimits", "table", -1);
	t = lua_gettop(L);
	if (table_count(L, t) > NRLIMITS)
		spawn_error(L, "option 'rlimits': more entries than limits");
	for (const struct tk_rlimit_name *r = tk_rlimit_names; r->name != NULL; r++) {
		struct tk_spawn_rlimit *out = &st->rlimits[n];
		lua_pushstring(L, r->name);
		if (lua_rawget(L, t) == LUA_TNIL) {
			lua_pop(L, 1);
			continue;
		}
		if (lua_type(L, -1) == LUA_TTABLE) {
			if (lua_rawlen(L, -1) != 2 || table_count(L, lua_gettop(L)) != 2)
				spawn_error(L, "rlimits.%s: {soft, hard} expected", r->name);
			lua_rawgeti(L, -1, 1);
			lua_rawgeti(L, -2, 2);
			out->lim.rlim_cur = rlimit_value(L, -2, r->name);
			out->lim.rlim_max = rlimit_value(L, -1, r->name);
			lua_pop(L, 2);
			if (out->lim.rlim_cur != RLIM_INFINITY &&
			    (out->lim.rlim_max != RLIM_INFINITY && out->lim.rlim_cur > out->lim.rlim_max))
				spawn_error(L, "rlimits.%s: soft limit above the hard one", r->name);
			if (out->lim.rlim_cur == RLIM_INFINITY && out->lim.rlim_max != RLIM_INFINITY)
				spawn_error(L, "rlimits.%s: soft limit above the hard one", r->name);
		} else {
			out->lim.rlim_cur = out->lim.rlim_max = rlimit_value(L, -1, r->name);
		}
		out->resource = r->resource;
		out->step = r->step;
		n++;
		lua_pop(L, 1);
	}
	/* Every key was one of the names: the count matches. */
	if (n != table_count(L, t)) {
		for (lua_pushnil(L); lua_next(L, t); lua_pop(L, 1)) {
			size_t klen = 0;
			const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &klen) : NULL;
			int known = 0;
			for (const struct tk_rlimit_name *r = tk_rlimit_names; r->name && k && !known; r++)
				known = klen == strlen(r->name) && memcmp(k, r->name, klen) == 0;
			if (!known)
				spawn_error(L, "option 'rlimits': unknown limit '%s' (as, core, cpu, data, fsize, "
				            "locks, memlock, msgqueue, nice, nofile, nproc, rss, rtprio, rttime, "
				            "sigpending, stack)", luaL_tolstring(L, -2, NULL));
		}
		spawn_error(L, "option 'rlimits': changed while it was read");
	}
	st->o.rlimits = st->rlimits;
	st->o.nrlimits = n;
	lua_pop(L, 1);
}

static int boolean_option(lua_State *L, const char *name)
{
	int v = 0;

	if (lua_getfield(L, 1, name) != LUA_TNIL) {
		if (!lua_isboolean(L, -1))
			option_type_error(L, name, "boolean", -1);
		v = lua_toboolean(L, -1);
	}
	lua_pop(L, 1);
	return v;
}

/* cwd, setsid, pgroup, cgroup_fallback, umask, pdeathsig, no_new_privs */
static void scalar_options(lua_State *L, struct spawn_state *st)
{
	if (lua_getfield(L, 1, "cwd") != LUA_TNIL)
		st->cwd = owned_string(L, -1, "cwd");
	st->o.cwd = st->cwd;
	lua_pop(L, 1);
	st->o.setsid = boolean_option(L, "setsid");
	switch (lua_getfield(L, 1, "pgroup")) {
	case LUA_TNIL: break;
	case LUA_TBOOLEAN: st->o.pgroup = lua_toboolean(L, -1) ? 0 : -1; break;
	case LUA_TNUMBER: {
		lua_Integer g = lua_tointeger(L, -1);
		luaL_argcheck(L, lua_isinteger(L, -1) && g > 0 && g <= INT32_MAX, 1, "pgroup out of range");
		st->o.pgroup = (pid_t)g;
		break;
	}
	default: option_type_error(L, "pgroup", "boolean or pgid", -1);
	}
	lua_pop(L, 1);
	if (st->o.setsid && st->o.pgroup >= 0)
		luaL_argerror(L, 1, "setsid and pgroup are exclusive");
	if (lua_getfield(L, 1, "cgroup_fallback") != LUA_TNIL) {
		const char *v = checked_string(L, -1, "cgroup_fallback");
		luaL_argcheck(L, strcmp(v, "attach") == 0 || strcmp(v, "error") == 0, 1,
		              "cgroup_fallback must be 'attach' or 'error'");
		st->o.cgroup_attach_fallback = strcmp(v, "attach") == 0;
	}
	lua_pop(L, 1);
	if (lua_getfield(L, 1, "_fallback") != LUA_TNIL)
		st->o.force_posix_spawn = lua_toboolean(L, -1);
	lua_pop(L, 1);
	if (lua_getfield(L, 1, "umask") != LUA_TNIL) {
		lua_Integer m = option_int(L, -1, "umask", LUA_MININTEGER, LUA_MAXINTEGER);
		if (m < 0 || m > 0777)
			spawn_error(L, "option 'umask': 0..0o777 expected, got %I (write 0o22 as "
			            "tonumber(\"022\", 8))", m);
		st->o.umask = (mode_t)m;
		st->o.set_umask = 1;
	}
	lua_pop(L, 1);
	if (lua_getfield(L, 1, "pdeathsig") != LUA_TNIL) {
		const char *why;
		st->o.pdeathsig = tk_signal_parse(L, -1, &why);
		if (st->o.pdeathsig <= 0)
			spawn_error(L, "option 'pdeathsig': a signal name or number 1..%d expected",
			            (int)NSIG - 1);
	}
	lua_pop(L, 1);
	st->o.no_new_privs = boolean_option(L, "no_new_privs");
	st->o.exec_wait_ms = 1000;
	if (lua_getfield(L, 1, "exec_timeout") != LUA_TNIL) {
		lua_Number t = lua_tonumber(L, -1);
		if (lua_type(L, -1) != LUA_TNUMBER)
			option_type_error(L, "exec_timeout", "number of seconds", -1);
		if (!(t >= 0))
			spawn_error(L, "option 'exec_timeout': seconds >= 0 expected");
		st->o.exec_wait_ms = t >= (lua_Number)INT32_MAX / 1000 ? -1 : (int)(t * 1000);
	}
	lua_pop(L, 1);
	if (lua_getfield(L, 1, "keyring") != LUA_TNIL) {
		const char *v = checked_string(L, -1, "keyring");
		luaL_argcheck(L, strcmp(v, "private") == 0 || strcmp(v, "inherit") == 0, 1,
		              "keyring must be 'private' or 'inherit'");
		st->o.private_keyring = strcmp(v, "private") == 0;
	}
	lua_pop(L, 1);
}

/* ---- descriptors ----------------------------------------------------------- */

static const char *const stdio_names[3] = { "stdin", "stdout", "stderr" };

/* The descriptor of the value at idx: an fd number, a Lua file or any
 * object with :fileno() (which may run Lua code: the caller holds only
 * its own copies). Raises when there is none. */
static int fd_of(lua_State *L, int idx, const char *what)
{
	luaL_Stream *s;
	int fd = -1;

	idx = lua_absindex(L, idx);
	if (lua_type(L, idx) == LUA_TNUMBER) {
		lua_Integer v = lua_tointeger(L, idx);
		if (lua_isinteger(L, idx) && v >= 0 && v <= INT32_MAX)
			fd = (int)v;
	} else if ((s = luaL_testudata(L, idx, LUA_FILEHANDLE)) != NULL) {
		if (s->closef != NULL) {
			fflush(s->f);
			fd = fileno(s->f);
		}
	} else if (lua_type(L, idx) == LUA_TTABLE ||
	           (lua_type(L, idx) == LUA_TUSERDATA && luaL_getmetafield(L, idx, "__index") != LUA_TNIL &&
	            (lua_pop(L, 1), 1))) {
		if (lua_getfield(L, idx, "fileno") == LUA_TFUNCTION) {
			lua_pushvalue(L, idx);
			lua_call(L, 1, 1);
			if (lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 0 &&
			    lua_tointeger(L, -1) <= INT32_MAX)
				fd = (int)lua_tointeger(L, -1);
		}
		lua_pop(L, 1);
	}
	if (!tk_fd_valid(fd))
		spawn_error(L, "%s: an open fd, a file or an object with :fileno() expected", what);
	return fd;
}

static int extra_fd_cmp(const void *a, const void *b)
{
	const struct tk_spawn_fd *x = a, *y = b;
	return (x->target > y->target) - (x->target < y->target);
}

/* fds = {[3] = f, ...}: the table is copied raw first, then each value's
 * descriptor is duplicated, so a fileno() that edits the table or closes
 * a file changes nothing we hold. Returns 0 or -errno (*target set). */
static int fds_option(lua_State *L, struct spawn_state *st, int *target)
{
	int t, copy;
	size_t n;

	if (lua_getfield(L, 1, "fds") == LUA_TNIL) {
		lua_pop(L, 1);
		return 0;
	}
	if (!lua_istable(L, -1))
		option_type_error(L, "fds", "table", -1);
	t = lua_gettop(L);
	n = table_count(L, t);
	lua_createtable(L, 0, (int)(n < 1024 ? n : 1024));
	copy = lua_gettop(L);
	for (lua_pushnil(L); lua_next(L, t); ) {
		lua_Integer k = lua_isinteger(L, -2) ? lua_tointeger(L, -2) : -1;
		if (k < 3 || k > EXTRA_FD_MAX)
			spawn_error(L, "option 'fds': keys must be descriptor numbers 3..%d (stdin, stdout "
			            "and stderr have their own options), got %s", EXTRA_FD_MAX,
			            luaL_tolstring(L, -2, NULL));
		lua_pushvalue(L, -2);
		lua_insert(L, -2);
		lua_rawset(L, copy);
	}
	st->extra = spawn_alloc(L, n, sizeof *st->extra);
	for (lua_pushnil(L); lua_next(L, copy); lua_pop(L, 1)) {
		char what[32];
		int fd, dup;
		if (st->nextra == n)
			spawn_error(L, "fds changed while it was read");
		snprintf(what, sizeof what, "fds[%d]", (int)lua_tointeger(L, -2));
		fd = fd_of(L, -1, what);
		*target = (int)lua_tointeger(L, -2);
		if ((dup = tk_fd_dup(fd)) < 0)
			return dup;
		st->extra[st->nextra].target = *target;
		st->extra[st->nextra++].source = dup;
	}
	qsort(st->extra, st->nextra, sizeof *st->extra, extra_fd_cmp);
	st->o.extra_fds = st->extra;
	st->o.nextra_fds = st->nextra;
	lua_settop(L, t - 1);
	return 0;
}

/* The caller's descriptor, duplicated: a later option's __index may close
 * the file and open another in its number before the child starts. */
static int stdio_own(struct spawn_state *st, int i, int fd, const char **step)
{
	int dup = tk_fd_dup(fd);

	if (dup < 0) {
		*step = "dup";
		return dup;
	}
	st->owned[st->nowned++] = dup;
	st->o.fds[i] = dup;
	return 0;
}

/* "pipe": our end goes straight into a pipe object in io (the table at
 * io_idx), which owns it from here on; the child's end is owned by st. */
static int stdio_pipe(lua_State *L, struct spawn_state *st, int i, int io_idx, const char **step)
{
	struct tk_handle *h = tk_pipe_new(L, i == 0);
	int p[2];

	int r;

	lua_setfield(L, io_idx, stdio_names[i]);
	/* Ours only non-blocking: O_NONBLOCK is per open file description,
	 * and the child's end is a description of its own. */
	r = tk_pipe_pair(p, i == 0 ? 1 : 0);
	if (r < 0) {
		*step = "pipe";
		return r;
	}
	h->fd = i == 0 ? p[1] : p[0];
	st->o.fds[i] = i == 0 ? p[0] : p[1];
	st->owned[st->nowned++] = st->o.fds[i];
	return 0;
}

/* Misuse raises; a descriptor that cannot be made returns -errno with the
 * step in *step. */
static int stdio_option(lua_State *L, struct spawn_state *st, int i, int io_idx, const char **step)
{
	int t = lua_getfield(L, 1, stdio_names[i]), r = 0;

	st->o.fds[i] = -1;
	if (t == LUA_TSTRING) {
		const char *v = lua_tostring(L, -1);
		if (strcmp(v, "inherit") == 0) {
		} else if (strcmp(v, "null") == 0) {
			int fd = tk_devnull_open();
			if (fd < 0) {
				*step = "open /dev/null";
				r = fd;
			} else {
				st->owned[st->nowned++] = fd;
				st->o.fds[i] = fd;
			}
		} else if (strcmp(v, "pipe") == 0) {
			r = stdio_pipe(L, st, i, io_idx, step);
		} else {
			spawn_error(L, "%s: 'inherit', 'null', 'pipe', an fd or a file expected, got '%s'",
			            stdio_names[i], v);
		}
	} else if (t != LUA_TNIL) {
		r = stdio_own(st, i, fd_of(L, -1, stdio_names[i]), step);
	}
	lua_pop(L, 1);
	return r;
}

/* ---- cgroup ---------------------------------------------------------------- */

/* Misuse raises; a path that cannot be opened returns -errno. */
static int cgroup_option(lua_State *L, struct spawn_state *st)
{
	int t = lua_getfield(L, 1, "cgroup");
	int fd;

	if (t == LUA_TNIL) {
		lua_pop(L, 1);
		return 0;
	}
	if (t == LUA_TSTRING) {
		st->cgroup_path = owned_string(L, -1, "cgroup");
		fd = tk_cg_mount_open(st->cgroup_path);
		if (fd < 0)
			return fd;
	} else {
		/* A takana.cgroup handle: its directory fd. */
		if (luaL_testudata(L, -1, TK_CGROUP_MT) == NULL)
			spawn_error(L, "cgroup: path or takana.cgroup handle expected");
		lua_getfield(L, -1, "path");
		if (lua_type(L, -1) == LUA_TSTRING)
			st->cgroup_path = owned_string(L, -1, "cgroup path");
		lua_pop(L, 1);
		fd = tk_fd_dup(tk_cgroup_dirfd(L, -1));
		if (fd < 0)
			return fd;
	}
	st->o.cgroup_fd = fd;
	if (!tk_cg_fd_is_v2(fd))
		luaL_argerror(L, 1, "cgroup: not a directory of the cgroup2 hierarchy");
	lua_pop(L, 1);
	return 0;
}

static void cgroup_error_context(struct spawn_state *st, int r, char *ctx, size_t len)
{
	if (st->cgroup_path == NULL)
		snprintf(ctx, len, "spawn %s: cgroup handle: duplicate its descriptor", st->argv[0]);
	else if (r == -ENOENT)
		snprintf(ctx, len, "spawn %s: cgroup %s does not exist (create it first, "
		         "e.g. with cgroup:mkdir())", st->argv[0], st->cgroup_path);
	else
		snprintf(ctx, len, "spawn %s: cgroup %s", st->argv[0], st->cgroup_path);
}

/* ---- spawn ----------------------------------------------------------------- */

/* The message of a failed spawn: the object, the cause and what to do. */
static void spawn_error_context(struct spawn_state *st, const struct tk_spawn_result *res,
                                int r, char *ctx, size_t len)
{
	const char *prog = st->argv[0];
	const char *cg = st->cgroup_path ? st->cgroup_path : "(handle)";

	if (res->failed_step != NULL && strcmp(res->failed_step, "chdir") == 0)
		snprintf(ctx, len, "spawn %s: chdir %s", prog, st->cwd);
	else if (res->failed_step != NULL)
		snprintf(ctx, len, "spawn %s: %s", prog, res->failed_step);
	else if (st->o.cgroup_fd >= 0 && !res->exec_failed && (r == -ENOENT || r == -ENODEV))
		snprintf(ctx, len, "spawn %s: cgroup %s was removed (recreate it or pick another)",
		         prog, cg);
	else if (st->o.cgroup_fd >= 0 && !res->exec_failed && (r == -EACCES || r == -EPERM))
		snprintf(ctx, len, "spawn %s: entering cgroup %s needs write access to its "
		         "cgroup.procs and to the common ancestor's (run as root or delegate the "
		         "cgroup to this user)", prog, cg);
	else if (st->o.cgroup_fd >= 0 && !res->exec_failed && r == -EBUSY)
		snprintf(ctx, len, "spawn %s: cgroup %s has controllers enabled for its children "
		         "(no internal processes: spawn into a leaf cgroup)", prog, cg);
	else
		snprintf(ctx, len, "spawn %s", prog);
	if (r == -EOPNOTSUPP && st->o.cgroup_fd >= 0 && !st->o.cgroup_attach_fallback)
		snprintf(ctx, len, "spawn %s: clone3 unavailable, a cgroup cannot be "
		         "entered atomically (pass cgroup_fallback='attach' to move it after start)",
		         prog);
}

/* Every option but argv, in an order where a failure that returns (not
 * raises) comes after all the raising checks that do not open anything. */
static int spawn_options(lua_State *L, struct spawn_state *st, int io_idx)
{
	int r, target = 0;

	env_option(L, st);
	st->o.envp = st->envp ? st->envp : environ;
	st->o.search_path = getenv("PATH");
	scalar_options(L, st);
	ids_option(L, st);
	rlimits_option(L, st);
	r = fds_option(L, st, &target);
	if (r < 0) {
		char ctx[256];
		snprintf(ctx, sizeof ctx, "spawn %s: dup fds[%d]", st->argv[0], target);
		return tk_push_error(L, ctx, r);
	}
	for (int i = 0; i < 3; i++) {
		const char *step = NULL;
		r = stdio_option(L, st, i, io_idx, &step);
		if (r < 0) {
			char ctx[256];
			snprintf(ctx, sizeof ctx, "spawn %s: %s for %s", st->argv[0], step, stdio_names[i]);
			return tk_push_error(L, ctx, r);
		}
	}
	r = cgroup_option(L, st);
	if (r < 0) {
		char ctx[512];
		cgroup_error_context(st, r, ctx, sizeof ctx);
		return tk_push_error(L, ctx, r);
	}
	return 0;
}

/*** Starts a program: clone3 + CLONE_VFORK on a small stack, straight into
 * a cgroup when asked; every option is applied in the child before exec,
 * and its failure (or exec's) is returned here, never left to a child that
 * exits 127. `prog` without '/' is searched in the caller's PATH.
 *
 * - `stdin`/`stdout`/`stderr`: "inherit" (default), "null", "pipe" (a
 *   non-blocking pipe object), an fd, a Lua file or an object with `:fileno()`.
 * - `env`: `{"K=v", ...}` or `{K = "v"}` replaces the environment;
 *   `{add = {K = "v"}, remove = {"K2"}}` edits the inherited one (the added
 *   names come last, sorted).
 * - `user` (name or uid), `group` (name or gid), `groups` (names or gids;
 *   default with `user`: that user's supplementary groups, as initgroups):
 *   set in the child with setgroups, setgid, setuid in that order.
 * - `umask` (0..0o777), `rlimits = {nofile = n | {soft, hard} | "unlimited"
 *   | math.huge, ...}` (prlimit's names: as core cpu data fsize locks memlock
 *   msgqueue nice nofile nproc rss rtprio rttime sigpending stack; one number
 *   sets both), `pdeathsig` (a signal name or number, sent when the thread
 *   that spawned exits), `no_new_privs = true`, `keyring = "private"` (a new
 *   session keyring of its own, as systemd's KeyringMode=private; default
 *   "inherit"; skipped where the kernel or a seccomp filter has none).
 * - `exec_timeout` (seconds, default 1; `math.huge`: for ever): with a
 *   `user` other than the caller's, the child runs in its own copy of
 *   memory (fork, not vfork), since from its setuid to its exec that user
 *   may stop it; spawn waits this long for the exec. Past it the child is
 *   returned with `.exec_unconfirmed = true`, and an exec that fails later
 *   shows only as exit status 127.
 * - `fds = {[3] = f, ...}`: more descriptors (fd, file or `:fileno()`) at
 *   the numbers 3..65535; every other descriptor is closed in the child.
 * - `setsid`, `pgroup` (true: a new group; or a pgid), `cgroup` (a
 *   takana.cgroup handle, or a path as `takana.cgroup(path)` takes it:
 *   relative to the cgroup2 mount, "/" being the mount's root; a path that
 *   begins with the mount point itself, "/sys/fs/cgroup/x", is that
 *   directory), `cgroup_fallback` ("attach" to move the child after the
 *   start where clone3 is unavailable).
 * @function spawn
 * @tparam table t `{prog, arg1, ..., env=, cwd=, cgroup=, stdin=, stdout=,
 *   stderr=, setsid=, pgroup=, cgroup_fallback=, user=, group=, groups=,
 *   umask=, rlimits=, pdeathsig=, no_new_privs=, keyring=, exec_timeout=, fds=}`
 * @treturn[1] pidfd the child, with `.pid`, `.mechanism` ("clone3";
 *   "clone" or "posix_spawn" where clone3 is refused), and `.stdin` /
 *   `.stdout` / `.stderr` pipe objects for "pipe": their own owners, so
 *   closing the child leaves them open
 * @treturn[2] nil, "spawn prog: step: message", errno (step: "setuid",
 *   "setrlimit nofile", "chdir /x", ...; none for exec itself)
 */
static int l_spawn(lua_State *L)
{
	struct spawn_state *st;
	struct tk_spawn_result res;
	int r;

	luaL_checktype(L, 1, LUA_TTABLE);
	tk_check_nargs(L, 1);
	st = spawn_state_new(L);           /* 2 */
	lua_createtable(L, 0, 3);          /* 3: the child's pipe objects */
	argv_option(L, st);
	if (spawn_options(L, st, 3) != 0) {
		spawn_state_free(st);
		return 3;
	}
	tk_pidfd_new(L);                   /* 4 */
	r = tk_spawn(&st->o, &res);
	if (r < 0) {
		char ctx[512];
		spawn_error_context(st, &res, r, ctx, sizeof ctx);
		spawn_state_free(st);
		return tk_push_error(L, ctx, r);
	}
	tk_pidfd_fill(L, 4, res.pidfd, res.pid, res.mechanism);
	if (res.exec_unconfirmed) {
		lua_pushboolean(L, 1);
		lua_setfield(L, 3, "exec_unconfirmed");
	}
	lua_pushvalue(L, 3);
	lua_setiuservalue(L, 4, 1);
	spawn_state_free(st);
	return 1;
}

/* ids_resolve(user, group), upvalue 1 the function name errors give. */
static int ids_resolve(lua_State *L)
{
	int has_user = !lua_isnoneornil(L, 1), has_group = !lua_isnoneornil(L, 2);
	uid_t uid = 0;
	gid_t gid = 0, pw_gid = 0;

	if (has_group)
		gid = group_resolve(L, 2, "group");
	if (has_user) {
		int found = user_resolve(L, 1, &uid, &pw_gid);
		lua_pop(L, 1);
		if (!found && !has_group)
			spawn_error(L, "user %d has no passwd entry: give group too", (int)uid);
		if (!has_group) {
			gid = pw_gid;
			has_group = 1;
		}
	}
	if (has_user)
		lua_pushinteger(L, uid);
	else
		lua_pushnil(L);
	if (has_group)
		lua_pushinteger(L, gid);
	else
		lua_pushnil(L);
	return 2;
}

/* core.ids(user, group[, fname]) -> uid, gid: the ids spawn{user=, group=}
 * would set (a user's own group when group is nil); nil for what is not
 * given. Raises, as spawn does, for a name with no entry, as argument 1 of
 * fname (default "spawn"): the supervisor's service() raises it as its own,
 * with no message to rewrite. */
static int l_ids(lua_State *L)
{
	tk_check_nargs(L, 3);
	lua_settop(L, 3);
	if (lua_isnil(L, 3)) {
		lua_pushliteral(L, "spawn");
		lua_replace(L, 3);
	}
	luaL_checktype(L, 3, LUA_TSTRING);
	lua_pushcclosure(L, ids_resolve, 1);
	lua_insert(L, 1);
	lua_call(L, 2, 2);
	return 2;
}

void tk_spawn_open_lib(lua_State *L)
{
	lua_pushcfunction(L, l_spawn);
	lua_setfield(L, -2, "spawn");
	lua_pushcfunction(L, l_ids);
	lua_setfield(L, -2, "ids");
}
