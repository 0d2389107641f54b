/* Lua binding of cgroup handles: the directory fd, kept fds on the files
 * cg:stat() reads, raw read/write, mkdir and rmdir. Policy (diagnosis,
 * verification, lifecycle loops) lives in lua/takana/cgroup.lua. */

/***
 * cgroup handles, from C.
 * @module takana.cgroup
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "binding.h"
#include "cgroup.h"

#define READ_BUF 8192

enum cg_file {
	CGF_CPU_STAT, CGF_MEM_CURRENT, CGF_MEM_PEAK, CGF_MEM_MAX, CGF_MEM_HIGH,
	CGF_MEM_EVENTS, CGF_PIDS_CURRENT, CGF_PIDS_MAX, CGF_PIDS_PEAK,
	CGF_CPU_PRESSURE, CGF_MEM_PRESSURE, CGF_IO_PRESSURE, CGF_EVENTS, CGF_COUNT
};

static const char *const cg_files[CGF_COUNT] = {
	"cpu.stat", "memory.current", "memory.peak", "memory.max", "memory.high",
	"memory.events", "pids.current", "pids.max", "pids.peak",
	"cpu.pressure", "memory.pressure", "io.pressure", "cgroup.events",
};

struct lcgroup {
	int dirfd;              /* -1 once closed */
	int mountfd;
	int fds[CGF_COUNT];     /* -1: not open (absent or not tried yet) */
};

static struct lcgroup *cg_check(lua_State *L, int idx)
{
	struct lcgroup *cg = luaL_checkudata(L, idx, TK_CGROUP_MT);
	if (cg->dirfd < 0)
		luaL_error(L, "attempt to use a closed cgroup handle");
	return cg;
}

/* Reads one of the stat files through its kept fd. -ENOENT when absent. */
static int cg_file_read(struct lcgroup *cg, int f, char *buf, size_t *len)
{
	int err;

	*len = 0;
	if (cg->fds[f] < 0) {
		cg->fds[f] = openat(cg->dirfd, cg_files[f], O_RDONLY | O_CLOEXEC);
		if (cg->fds[f] < 0)
			return -errno;
	}
	err = tk_cg_read(cg->fds[f], buf, READ_BUF, len);
	if (err < 0) {
		/* A controller disabled since: the file is gone (ENODEV). */
		close(cg->fds[f]);
		cg->fds[f] = -1;
		return err == -ENODEV ? -ENOENT : err;
	}
	return 0;
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

/* kv callback: sets t[key] = value; keys ending in _usec become _ns. */
static void kv_set(void *ctx, const char *key, size_t klen, const char *val, size_t vlen)
{
	lua_State *L = ctx;

	if (klen > 5 && memcmp(key + klen - 5, "_usec", 5) == 0) {
		value_push(L, val, vlen);
		if (lua_isinteger(L, -1)) {
			lua_Integer us = lua_tointeger(L, -1);
			lua_pop(L, 1);
			lua_pushinteger(L, us > LUA_MAXINTEGER / 1000 ? LUA_MAXINTEGER : us * 1000);
		}
		lua_pushlstring(L, key, klen - 5);
		lua_pushliteral(L, "_ns");
		lua_concat(L, 2);
	} else {
		value_push(L, val, vlen);
		lua_pushlstring(L, key, klen);
	}
	lua_insert(L, -2);
	lua_rawset(L, -3);
}

/* Pushes a table of a flat-keyed file, or nothing and returns the error. */
static int kv_file_push(lua_State *L, struct lcgroup *cg, int f, char *buf)
{
	size_t len;
	int err = cg_file_read(cg, f, buf, &len);

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
 * turned into a missing section. */
struct stat_error {
	int err;
	int file;
};

static int stat_note(struct stat_error *se, int f, int err)
{
	if (err < 0 && err != -ENOENT && se->err == 0) {
		se->err = err;
		se->file = f;
	}
	return err;
}

static int single_field(lua_State *L, struct lcgroup *cg, int f, const char *name, char *buf,
                        struct stat_error *se)
{
	size_t len;

	if (stat_note(se, f, cg_file_read(cg, f, buf, &len)) < 0)
		return 0;
	value_push(L, buf, len);
	lua_setfield(L, -2, name);
	return 1;
}

static int psi_push(lua_State *L, struct lcgroup *cg, int f, char *buf, struct stat_error *se)
{
	size_t len;
	const char *p, *end;

	if (stat_note(se, f, cg_file_read(cg, f, buf, &len)) < 0)
		return 0;
	lua_newtable(L);
	for (p = buf, end = buf + len; p < end;) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		struct tk_psi_line line;
		if (eol == NULL)
			eol = end;
		if (tk_psi_parse_line(p, (size_t)(eol - p), &line) == 0) {
			lua_createtable(L, 0, 4);
			lua_pushnumber(L, line.avg10);
			lua_setfield(L, -2, "avg10");
			lua_pushnumber(L, line.avg60);
			lua_setfield(L, -2, "avg60");
			lua_pushnumber(L, line.avg300);
			lua_setfield(L, -2, "avg300");
			lua_pushinteger(L, (lua_Integer)line.total_us * 1000);
			lua_setfield(L, -2, "total_ns");
			lua_setfield(L, -2, line.full ? "full" : "some");
		} else if (eol > p) {
			stat_note(se, f, -EBADMSG);
		}
		p = eol + 1;
	}
	return 1;
}

/*** Reads the unit's accounting: sections `cpu`, `memory`, `pids`,
 * `pressure`, `events`. A section whose files are absent is absent;
 * `cg:why(section)` says why.
 * @function cgroup:stat
 * @treturn[1] table
 * @treturn[2] nil, "stat <file>: message", errno when a present file cannot
 *   be read or parsed */
static int cg_stat(lua_State *L)
{
	struct lcgroup *cg = cg_check(L, 1);
	struct stat_error se = { 0, 0 };
	char *buf;
	int have;

	tk_check_nargs(L, 1);
	buf = lua_newuserdatauv(L, READ_BUF, 0);
	lua_createtable(L, 0, 5);

	if (stat_note(&se, CGF_CPU_STAT, kv_file_push(L, cg, CGF_CPU_STAT, buf)) == 0)
		lua_setfield(L, -2, "cpu");

	lua_createtable(L, 0, 5);
	have = single_field(L, cg, CGF_MEM_CURRENT, "current", buf, &se);
	if (have) {
		single_field(L, cg, CGF_MEM_PEAK, "peak", buf, &se);
		single_field(L, cg, CGF_MEM_MAX, "max", buf, &se);
		single_field(L, cg, CGF_MEM_HIGH, "high", buf, &se);
		if (stat_note(&se, CGF_MEM_EVENTS, kv_file_push(L, cg, CGF_MEM_EVENTS, buf)) == 0)
			lua_setfield(L, -2, "events");
		lua_setfield(L, -2, "memory");
	} else {
		lua_pop(L, 1);
	}

	lua_createtable(L, 0, 3);
	if (single_field(L, cg, CGF_PIDS_CURRENT, "current", buf, &se)) {
		single_field(L, cg, CGF_PIDS_MAX, "max", buf, &se);
		single_field(L, cg, CGF_PIDS_PEAK, "peak", buf, &se);
		lua_setfield(L, -2, "pids");
	} else {
		lua_pop(L, 1);
	}

	lua_createtable(L, 0, 3);
	have = psi_push(L, cg, CGF_CPU_PRESSURE, buf, &se);
	if (have)
		lua_setfield(L, -2, "cpu");
	if (psi_push(L, cg, CGF_MEM_PRESSURE, buf, &se)) {
		lua_setfield(L, -2, "memory");
		have = 1;
	}
	if (psi_push(L, cg, CGF_IO_PRESSURE, buf, &se)) {
		lua_setfield(L, -2, "io");
		have = 1;
	}
	if (have)
		lua_setfield(L, -2, "pressure");
	else
		lua_pop(L, 1);

	if (stat_note(&se, CGF_EVENTS, kv_file_push(L, cg, CGF_EVENTS, buf)) == 0) {
		/* populated/frozen as booleans */
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
		lua_setfield(L, -2, "events");
	}
	if (se.err < 0)
		return tk_push_error(L, lua_pushfstring(L, "stat %s", cg_files[se.file]), se.err);
	/* Every cgroup, the root included, has cgroup.controllers: a handle
	 * whose directory was removed finds none, and that is an error, not a
	 * cgroup without sections. */
	if (faccessat(cg->dirfd, "cgroup.controllers", F_OK, 0) < 0 &&
	    (errno == ENOENT || errno == ENODEV)) {
		lua_getiuservalue(L, 1, 1);
		lua_pushnil(L);
		lua_pushfstring(L, "stat /%s: the cgroup was removed (its directory is gone); "
		                "open it again once it is recreated", lua_tostring(L, -2));
		lua_pushinteger(L, ENOENT);
		return 3;
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
static int cg_get(lua_State *L)
{
	struct lcgroup *cg = cg_check(L, 1);
	const char *file = luaL_checkstring(L, 2);
	luaL_Buffer b;
	char *buf;
	ssize_t n;
	int fd;

	file_name_check(L, 2);
	tk_check_nargs(L, 2);
	fd = openat(cg->dirfd, file, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int saved = errno; /* the message allocates */
		return tk_push_error(L, lua_pushfstring(L, "get %s", file), -saved);
	}
	luaL_buffinit(L, &b);
	for (;;) {
		buf = luaL_prepbuffsize(&b, READ_BUF);
		n = read(fd, buf, READ_BUF);
		if (n < 0) {
			int e = errno;
			close(fd);
			return tk_push_error(L, lua_pushfstring(L, "get %s", file), -e);
		}
		if (n == 0)
			break;
		luaL_addsize(&b, (size_t)n);
	}
	close(fd);
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
	err = tk_cg_write(cg->dirfd, file, value, len);
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

	file_name_check(L, 2);
	tk_check_nargs(L, 2);
	if (mkdirat(cg->dirfd, name, 0755) < 0) {
		int saved = errno; /* the message allocates */
		return tk_push_error(L, lua_pushfstring(L, "mkdir %s", name), -saved);
	}
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
	err = tk_cg_rmdir(cg->mountfd, rel, cg->dirfd);
	if (err < 0)
		return tk_push_error(L, "remove", err);
	lua_pushboolean(L, 1);
	return 1;
}

/* core.cgroup_id(cg) -> id | nil, msg, errno */
static int l_cgroup_id(lua_State *L)
{
	struct lcgroup *cg = cg_check(L, 1);
	uint64_t id;
	int err;

	tk_check_nargs(L, 1);
	err = tk_cg_id(cg->dirfd, &id);
	if (err < 0)
		return tk_push_error(L, "cgroup id", err);
	lua_pushinteger(L, tk_u64_int(id));
	return 1;
}

/* core.cgroup_has_pid(cg, pid) -> boolean | nil, msg, errno */
static int l_cgroup_has_pid(lua_State *L)
{
	struct lcgroup *cg = cg_check(L, 1);
	lua_Integer pid = luaL_checkinteger(L, 2);
	int r;

	tk_check_nargs(L, 2);
	luaL_argcheck(L, pid > 0 && pid <= 0x7fffffff, 2, "pid out of range");
	r = tk_cg_has_pid(cg->dirfd, (int)pid);
	if (r < 0)
		return tk_push_error(L, "cgroup.procs", r);
	lua_pushboolean(L, r);
	return 1;
}

static int procs_append(void *ctx, int pid)
{
	lua_State *L = ctx;

	lua_pushinteger(L, pid);
	lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
	return 0;
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
	r = tk_cg_walk_procs(cg->dirfd, (int)max, procs_append, L);
	if (r < 0)
		return tk_push_error(L, "cgroup.procs", r);
	return 1;
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
	mfd = open(mount, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (mfd < 0) {
		int saved = errno; /* the message allocates */
		return tk_push_error(L, lua_pushfstring(L, "open %s", mount), -saved);
	}
	r = tk_cg_find(mfd, (int)depth, suffix, (int)pid, (uint64_t)id, (int)max, out, 4096);
	close(mfd);
	if (r < 0)
		return tk_push_error(L, "search", r);
	lua_pushstring(L, out);
	return 1;
}

/* core.is_pidfd(v): whether v is a takana pidfd (spawned children are). */
static int l_is_pidfd(lua_State *L)
{
	tk_check_nargs(L, 1);
	lua_pushboolean(L, luaL_testudata(L, 1, TK_PIDFD_MT) != NULL);
	return 1;
}

/* core.getpid(): the caller's pid, as cgroup.procs lists it. */
static int l_getpid(lua_State *L)
{
	tk_check_nargs(L, 0);
	lua_pushinteger(L, getpid());
	return 1;
}

/* core.pidfd_pid(fd) -> pid | nil, msg, errno (ESRCH once reaped) */
static int l_pidfd_pid(lua_State *L)
{
	lua_Integer fd = luaL_checkinteger(L, 1);
	int pid, r;

	tk_check_nargs(L, 1);
	luaL_argcheck(L, fd >= 0 && fd <= 0x7fffffff, 1, "descriptor out of range");
	r = tk_pidfd_pid((int)fd, &pid);
	if (r < 0)
		return tk_push_error(L, "pidfd", r);
	lua_pushinteger(L, pid);
	return 1;
}

/* core.pidfd_cgroup_id(fd) -> id | nil, msg, errno (ENOTTY/EINVAL before
 * Linux 6.13) */
static int l_pidfd_cgroup_id(lua_State *L)
{
	lua_Integer fd = luaL_checkinteger(L, 1);
	uint64_t id;
	int r;

	tk_check_nargs(L, 1);
	luaL_argcheck(L, fd >= 0 && fd <= 0x7fffffff, 1, "descriptor out of range");
	r = tk_pidfd_cgroup_id((int)fd, &id);
	if (r < 0)
		return tk_push_error(L, "PIDFD_GET_INFO", r);
	lua_pushinteger(L, tk_u64_int(id));
	return 1;
}

/*** The cgroup.events descriptor: priority-readable (`events()` is "p")
 * when populated or frozen changes.
 * @function cgroup:fileno */
static int cg_fileno(lua_State *L)
{
	struct lcgroup *cg = cg_check(L, 1);

	tk_check_nargs(L, 1);
	if (cg->fds[CGF_EVENTS] < 0) {
		cg->fds[CGF_EVENTS] = openat(cg->dirfd, "cgroup.events", O_RDONLY | O_CLOEXEC);
		if (cg->fds[CGF_EVENTS] < 0) {
			int e = errno;
			lua_getiuservalue(L, 1, 1);
			if (e == ENOENT && *lua_tostring(L, -1) == '\0')
				return luaL_argerror(L, 1, "the root cgroup has no cgroup.events, so there is "
				                     "nothing to poll; poll a child cgroup instead");
			return tk_push_error(L, lua_pushfstring(L, "fileno /%s: cgroup.events",
			                                        lua_tostring(L, -1)), -e);
		}
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
	if (cg->dirfd < 0)
		return luaL_error(L, "bad argument #1 to 'spawn' (cgroup: the handle is closed)");
	return cg->dirfd;
}

static int cg_events(lua_State *L)
{
	cg_check(L, 1);
	tk_check_nargs(L, 1);
	lua_pushliteral(L, "p");
	return 1;
}

static int cg_timeout(lua_State *L)
{
	cg_check(L, 1);
	tk_check_nargs(L, 1);
	lua_pushnil(L);
	return 1;
}

/*** Closes the handle and its kept descriptors; safe to call twice.
 * Serves __gc and __close too.
 * @function cgroup:close */
static int cg_close(lua_State *L)
{
	struct lcgroup *cg = luaL_checkudata(L, 1, TK_CGROUP_MT);

	for (int i = 0; i < CGF_COUNT; i++) {
		if (cg->fds[i] >= 0)
			close(cg->fds[i]);
		cg->fds[i] = -1;
	}
	if (cg->dirfd >= 0)
		close(cg->dirfd);
	if (cg->mountfd >= 0)
		close(cg->mountfd);
	cg->dirfd = cg->mountfd = -1;
	return 0;
}

/* cg:close() as a method takes no arguments; __close gets two. */
static int cg_close_method(lua_State *L)
{
	tk_check_nargs(L, 1);
	return cg_close(L);
}

static int cg_tostring(lua_State *L)
{
	struct lcgroup *cg = luaL_checkudata(L, 1, TK_CGROUP_MT);
	lua_getiuservalue(L, 1, 1);
	lua_pushfstring(L, "takana.Cgroup (/%s%s)", lua_tostring(L, -1),
	                cg->dirfd < 0 ? ", closed" : "");
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
	cg->dirfd = cg->mountfd = -1;
	for (int i = 0; i < CGF_COUNT; i++)
		cg->fds[i] = -1;
	luaL_setmetatable(L, TK_CGROUP_MT);
	cg->mountfd = open(mount, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cg->mountfd < 0) {
		int saved = errno; /* the message allocates */
		return tk_push_error(L, lua_pushfstring(L, "cgroup: open %s", mount), -saved);
	}
	err = tk_cg_open(cg->mountfd, *rel ? rel : ".", &cg->dirfd);
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
	lua_createtable(L, 0, 5);
	lua_pushstring(L, line.full ? "full" : "some");
	lua_setfield(L, -2, "kind");
	lua_pushnumber(L, line.avg10);
	lua_setfield(L, -2, "avg10");
	lua_pushnumber(L, line.avg60);
	lua_setfield(L, -2, "avg60");
	lua_pushnumber(L, line.avg300);
	lua_setfield(L, -2, "avg300");
	lua_pushinteger(L, (lua_Integer)line.total_us * 1000);
	lua_setfield(L, -2, "total_ns");
	return 1;
}

void tk_cgroup_open(lua_State *L)
{
	static const luaL_Reg methods[] = {
		{ "stat", cg_stat },
		{ "get", cg_get },
		{ "fileno", cg_fileno },
		{ "pollfd", cg_fileno },
		{ "events", cg_events },
		{ "timeout", cg_timeout },
		{ "close", cg_close_method },
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
		{ "getpid", l_getpid },
		{ "is_pidfd", l_is_pidfd },
		{ "pidfd_cgroup_id", l_pidfd_cgroup_id },
		{ "kv_parse", l_kv_parse },
		{ "psi_parse", l_psi_parse },
		{ NULL, NULL },
	};

	luaL_newmetatable(L, TK_CGROUP_MT);
	luaL_newlib(L, methods);
	/* The Lua front adds its methods to this same table. */
	lua_pushvalue(L, -1);
	lua_setfield(L, -4, "cgroup_methods");
	lua_pushcclosure(L, cg_index, 1);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, cg_close);
	lua_setfield(L, -2, "__gc");
	lua_pushcfunction(L, cg_close);
	lua_setfield(L, -2, "__close");
	lua_pushcfunction(L, cg_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pop(L, 1);
	luaL_setfuncs(L, funcs, 0);
}
