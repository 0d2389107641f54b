/* Lua binding of cgroup trees (cgroup_tree.c): takana.cgroup.tree's
 * object, whose stat() reads every cgroup in one call through the same
 * code as cg:stat() (tk_cgroup_stat_push). Documented in
 * lua/takana/cgroup.lua, beside takana.cgroup.tree. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "binding.h"
#include "cgroup.h"
#include "cgroup_tree.h"

struct ltree {
	/* First: the handle base. Its fd is the one to poll: the inotify
	 * descriptor, or the root's directory when there is none (fileno()
	 * then says why instead of giving it). */
	struct tk_handle h;
	struct tk_cg_tree t;
};

static struct ltree *tree_check(lua_State *L, int idx)
{
	return (struct ltree *)tk_handle_check(L, idx, TK_CGROUP_TREE_MT);
}

/* Pushes nil, "<what> <path>: ...", errno for the failure r of the tree's
 * last sync (or open), and returns 3. */
static int tree_error(lua_State *L, const struct tk_cg_tree *t, const char *what, int r)
{
	const char *path = t->fail_path != NULL ? t->fail_path : "?";
	const char *step = t->fail_step != NULL ? t->fail_step : "walk";

	if (r == -EMFILE && strcmp(step, "descriptor budget") == 0) {
		lua_pushnil(L);
		lua_pushfstring(L, "%s %s: a tree keeps one directory descriptor per cgroup, and at "
		                "%d cgroups (opening the children of %s) fewer than %d of "
		                "RLIMIT_NOFILE's %d were left free: raise the soft limit (ulimit -n) "
		                "or take a smaller subtree", what, t->len > 0 ? t->v[0].path : "?",
		                (int)t->live, path, TK_CG_TREE_SPARE, (int)t->nofile);
		lua_pushinteger(L, EMFILE);
		return 3;
	}
	if (r == -EMFILE || r == -ENFILE) {
		lua_pushnil(L);
		lua_pushfstring(L, "%s %s: %s %s: %s (the tree holds %d directory descriptors)", what,
		                t->len > 0 ? t->v[0].path : "?", step, path, strerror(-r),
		                (int)t->live);
		lua_pushinteger(L, -r);
		return 3;
	}
	if (r == -ENOENT && strcmp(step, "removed") == 0) {
		lua_pushnil(L);
		lua_pushfstring(L, "%s %s: the cgroup was removed (its directory is gone); open the "
		                "tree again once it is recreated", what, path);
		lua_pushinteger(L, ENOENT);
		return 3;
	}
	if (r == -ESTALE) {
		lua_pushnil(L);
		lua_pushfstring(L, "%s %s: the cgroup was renamed, so every path of the tree is "
		                "stale; open the tree again by its new name", what, path);
		lua_pushinteger(L, ESTALE);
		return 3;
	}
	return tk_push_error(L, lua_pushfstring(L, "%s %s: %s", what, path, step), r);
}

/* The highest descriptor the tree holds, for tk_handle_opened. */
static int tree_top_fd(const struct ltree *lt)
{
	int top = lt->t.inotify_fd;

	for (size_t i = 0; i < lt->t.len; i++)
		if (lt->t.v[i].state == TK_CG_NODE_LIVE && lt->t.v[i].fd > top)
			top = lt->t.v[i].fd;
	return top;
}

static void tree_release(lua_State *L, struct tk_handle *h)
{
	(void)L;
	tk_cg_tree_close(&((struct ltree *)h)->t);
}

/* tree:stat() -> {[path] = cg:stat()-shaped table} | nil, msg, errno */
static int tree_stat(lua_State *L)
{
	struct ltree *lt = tree_check(L, 1);
	struct tk_cg_tree *t = &lt->t;
	char *buf;
	int r;

	tk_check_nargs(L, 1);
	r = tk_cg_tree_sync(t);
	if (r < 0)
		return tree_error(L, t, "tree:stat", r);
	buf = lua_newuserdatauv(L, TK_CGROUP_STAT_BUF, 0);
	lua_createtable(L, 0, (int)t->live);
	for (size_t i = 0; i < t->len; i++) {
		const struct tk_cg_node *n = &t->v[i];
		const char *file;
		int absent;

		if (n->state != TK_CG_NODE_LIVE)
			continue;
		r = tk_cgroup_stat_push(L, t, i, buf, &file, &absent);
		/* Removed during the reads (the kernel says ENOENT or ENODEV
		 * then): left out, and its parent listed at the next sync. */
		if ((r < 0 || absent) && tk_cg_removed(n->fd)) {
			lua_pop(L, 1);
			if (i == 0) {
				t->fail_path = n->path;
				t->fail_step = "removed";
				return tree_error(L, t, "tree:stat", -ENOENT);
			}
			tk_cg_tree_suspect(t, i);
			continue;
		}
		if (r < 0)
			return tk_push_error(L, lua_pushfstring(L, "tree:stat %s: stat %s", n->path, file), r);
		lua_setfield(L, -2, n->path);
	}
	return 1;
}

static int path_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* tree:paths() -> {"/a", "/a/b", ...} sorted | nil, msg, errno */
static int tree_paths(lua_State *L)
{
	struct ltree *lt = tree_check(L, 1);
	struct tk_cg_tree *t = &lt->t;
	const char **v;
	size_t n = 0;
	int r;

	tk_check_nargs(L, 1);
	r = tk_cg_tree_sync(t);
	if (r < 0)
		return tree_error(L, t, "tree:paths", r);
	v = lua_newuserdatauv(L, (t->live + 1) * sizeof *v, 0);
	for (size_t i = 0; i < t->len; i++)
		if (t->v[i].state == TK_CG_NODE_LIVE)
			v[n++] = t->v[i].path;
	qsort(v, n, sizeof *v, path_cmp);
	lua_createtable(L, (int)n, 0);
	for (size_t i = 0; i < n; i++) {
		lua_pushstring(L, v[i]);
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	return 1;
}

/* tree:refresh() -> true | nil, msg, errno */
static int tree_refresh(lua_State *L)
{
	struct ltree *lt = tree_check(L, 1);
	int r;

	tk_check_nargs(L, 1);
	r = tk_cg_tree_sync(&lt->t);
	if (r < 0)
		return tree_error(L, &lt->t, "tree:refresh", r);
	lua_pushboolean(L, 1);
	return 1;
}

/* Which limit a refused watch most likely met. */
static const char *watch_hint(const struct tk_cg_tree *t)
{
	if (t->inotify_fd < 0 && t->watch_err == -EMFILE)
		return " (fs.inotify.max_user_instances, or the descriptor limit)";
	if (t->inotify_fd >= 0 && t->watch_err == -ENOSPC)
		return " (fs.inotify.max_user_watches)";
	return "";
}

/* tree:fileno() -> the inotify descriptor | nil, msg, errno without one */
static int tree_fileno(lua_State *L)
{
	struct ltree *lt = tree_check(L, 1);

	tk_check_nargs(L, 1);
	if (lt->t.inotify_fd < 0)
		return tk_push_error(L, lua_pushfstring(L, "tree:fileno %s: nothing to poll, %s failed%s "
		                     "(each call lists every directory instead)", lt->t.v[0].path,
		                     lt->t.watch_step, watch_hint(&lt->t)), lt->t.watch_err);
	lua_pushinteger(L, lt->t.inotify_fd);
	return 1;
}

struct skip {
	const char *path;   /* first: path_cmp compares it */
	int err;
};

/* tree.skipped: {{path=, errno=, error=}...} sorted by path. */
static void skipped_push(lua_State *L, const struct tk_cg_tree *t)
{
	struct skip *v;
	size_t n = 0;

	v = lua_newuserdatauv(L, (t->len + 1) * sizeof *v, 0);
	for (size_t i = 0; i < t->len; i++) {
		if (t->v[i].state == TK_CG_NODE_SKIPPED) {
			v[n].path = t->v[i].path;
			v[n++].err = t->v[i].err;
		}
	}
	qsort(v, n, sizeof *v, path_cmp);
	lua_createtable(L, (int)n, 0);
	for (size_t i = 0; i < n; i++) {
		lua_createtable(L, 0, 3);
		lua_pushstring(L, v[i].path);
		lua_setfield(L, -2, "path");
		lua_pushinteger(L, -v[i].err);
		lua_setfield(L, -2, "errno");
		lua_pushstring(L, v[i].err == -ENAMETOOLONG ? "its path is longer than 4095 bytes"
		                                            : strerror(-v[i].err));
		lua_setfield(L, -2, "error");
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	lua_remove(L, -2);
}

/* Fields: path, mount, fds, overflows, skipped, watch; upvalue 1: the
 * methods. */
static int tree_index(lua_State *L)
{
	struct ltree *lt = luaL_checkudata(L, 1, TK_CGROUP_TREE_MT);

	if (lua_type(L, 2) == LUA_TSTRING) {
		const char *k = lua_tostring(L, 2);
		if (strcmp(k, "path") == 0) {
			lua_getiuservalue(L, 1, 1);
			return 1;
		}
		if (strcmp(k, "mount") == 0) {
			lua_getiuservalue(L, 1, 2);
			return 1;
		}
		if (strcmp(k, "overflows") == 0) {
			tree_check(L, 1);
			lua_pushinteger(L, (lua_Integer)lt->t.overflows);
			return 1;
		}
		if (strcmp(k, "fds") == 0) {
			tree_check(L, 1);
			lua_pushinteger(L, (lua_Integer)(lt->t.live + lt->t.kept) + (lt->t.inotify_fd >= 0));
			return 1;
		}
		if (strcmp(k, "skipped") == 0 || strcmp(k, "watch") == 0) {
			tree_check(L, 1);
			if (k[0] == 's') {
				skipped_push(L, &lt->t);
			} else if (lt->t.watch_err == 0) {
				lua_pushboolean(L, 1);
			} else {
				lua_pushfstring(L, "%s: %s%s: %s", lt->t.watch_step, strerror(-lt->t.watch_err),
				                watch_hint(&lt->t), lt->t.inotify_fd < 0
				                ? "every directory is listed again on each call"
				                : "the directories without a watch are listed again on each call");
			}
			return 1;
		}
	}
	lua_pushvalue(L, 2);
	lua_rawget(L, lua_upvalueindex(1));
	return 1;
}

static int tree_tostring(lua_State *L)
{
	struct ltree *lt = luaL_checkudata(L, 1, TK_CGROUP_TREE_MT);

	lua_getiuservalue(L, 1, 1);
	if (lt->h.fd < 0)
		lua_pushfstring(L, "takana.CgroupTree (%s, closed)", lua_tostring(L, -1));
	else
		lua_pushfstring(L, "takana.CgroupTree (%s, %d cgroups)", lua_tostring(L, -1),
		                (int)lt->t.live);
	return 1;
}

/* core.cgroup_tree(mount, relpath) or core.cgroup_tree(handle) -> tree |
 * nil, msg, errno: relpath already checked lexically by the Lua side (""
 * is the mount's root); a cgroup handle's own directory is the root, with
 * its path and mount, whatever was made under that name since. */
static int l_cgroup_tree(lua_State *L)
{
	const char *mount, *rel, *path;
	struct tk_handle *cg = NULL;
	struct ltree *lt;
	int fd = -1, r;

	if (lua_type(L, 1) == LUA_TUSERDATA) {
		if (luaL_testudata(L, 1, TK_CGROUP_MT) == NULL)
		{
			lua_pushfstring(L, "bad argument #1 to 'cgroup.tree' (path or cgroup handle "
			                "expected, got %s)", luaL_typename(L, 1));
			return lua_error(L);
		}
		cg = tk_handle_check(L, 1, TK_CGROUP_MT);
		tk_check_nargs(L, 1);
		lua_getfield(L, 1, "mount");
		lua_getfield(L, 1, "relpath");
		/* mount, relpath, then the handle, which stays referenced. */
		lua_insert(L, 1);
		lua_insert(L, 1);
	} else {
		tk_check_nargs(L, 2);
	}
	mount = luaL_checkstring(L, 1);
	rel = luaL_checkstring(L, 2);
	lt = lua_newuserdatauv(L, sizeof *lt, 2);
	tk_handle_init(&lt->h, "cgroup tree", "r", tree_release);
	memset(&lt->t, 0, sizeof lt->t);
	lt->t.inotify_fd = -1;
	luaL_setmetatable(L, TK_CGROUP_TREE_MT);
	lua_pushfstring(L, "/%s", rel);
	lua_setiuservalue(L, -2, 1);
	lua_pushstring(L, mount);
	lua_setiuservalue(L, -2, 2);
	lua_getiuservalue(L, -1, 1);
	path = lua_tostring(L, -1);
	lua_pop(L, 1);   /* still referenced by the user value */
	if (cg != NULL) {
		r = tk_cg_open(cg->fd, ".", &fd);
	} else {
		int mfd = tk_cg_mount_open(mount);
		if (mfd < 0)
			return tk_push_error(L, lua_pushfstring(L, "cgroup.tree: open %s", mount), mfd);
		r = tk_cg_open(mfd, *rel ? rel : ".", &fd);
		close(mfd);
	}
	if (r == -EXDEV)
		return tk_push_error(L, lua_pushfstring(L, "cgroup.tree %s: leaves the cgroup2 mount", path), r);
	if (r < 0)
		return tk_push_error(L, lua_pushfstring(L, "cgroup.tree %s", path), r);
	r = tk_cg_tree_open(&lt->t, fd, path, tk_cgroup_stat_files());
	if (r < 0) {
		r = tree_error(L, &lt->t, "cgroup.tree", r);
		tk_cg_tree_close(&lt->t);
		return r;
	}
	lt->h.fd = lt->t.inotify_fd >= 0 ? lt->t.inotify_fd : lt->t.v[0].fd;
	tk_handle_opened(L, tree_top_fd(lt));
	return 1;
}

void tk_cgroup_tree_open_lib(lua_State *L)
{
	static const luaL_Reg methods[] = {
		{ "stat", tree_stat },
		{ "paths", tree_paths },
		{ "refresh", tree_refresh },
		{ "fileno", tree_fileno },
		{ "pollfd", tree_fileno },
		{ NULL, NULL },
	};

	tk_handle_newclass(L, TK_CGROUP_TREE_MT, methods, tree_index, tree_tostring);
	lua_pop(L, 1);
	lua_pushcfunction(L, l_cgroup_tree);
	lua_setfield(L, -2, "cgroup_tree");
}
