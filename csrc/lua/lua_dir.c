/* Lua binding of safe_dir.c: a directory opened once and checked, and the
 * files and sockets made beneath it (a supervisor's runtime sockets and
 * logs, the CLI's textfile). Plain Lua (io.open, os.rename) follows links
 * another user planted; nothing here does. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "binding.h"
#include "safe_dir.h"

struct ldir {
	struct tk_handle h; /* first: the handle base */
	int made;           /* dir_open made the directory itself */
	char path[PATH_MAX];
};

static struct ldir *dir_check(lua_State *L, int idx)
{
	return (struct ldir *)tk_handle_check(L, idx, TK_DIR_MT);
}

static const char *name_arg(lua_State *L, int idx)
{
	size_t len;
	const char *name = luaL_checklstring(L, idx, &len);

	if (tk_name_check(name, len) < 0)
		luaL_argerror(L, idx, "a plain file name expected (no '/' or NUL, not '.' or '..', "
		              "at most 255 bytes)");
	return name;
}

static mode_t mode_arg(lua_State *L, int idx, lua_Integer dflt)
{
	lua_Integer m = luaL_optinteger(L, idx, dflt);

	if (m < 0 || m > 0777)
		luaL_argerror(L, idx, "a permission mode 0..0777 expected");
	return (mode_t)m;
}

/* nil, "ctx: why" (or strerror), errno; returns 3. */
static int push_refusal(lua_State *L, const char *ctx, int err, const char *why)
{
	if (why[0] == '\0')
		return tk_push_error(L, ctx, err);
	lua_pushnil(L);
	lua_pushfstring(L, "%s: %s", ctx, why);
	lua_pushinteger(L, -err);
	return 3;
}

/*** Opens a directory and checks that nobody but root and this user can
 * change what is in it (refused with the reason otherwise: a symbolic link
 * where `private` wants none, an owner that is another user, a mode others
 * can write without the sticky bit).
 * @function dir_open
 * @string path
 * @tparam[opt] table opts `create` (make what is missing), `private` (the
 *   directory is this user's own, every component from / is trusted, and
 *   it gets `mode`), `mode` (for what is made; default 0700)
 * @treturn[1] dir
 * @treturn[2] nil, message, errno */
static int l_dir_open(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	char why[TK_WHY_LEN];
	int flags = 0, fd;
	mode_t mode = 0700;
	struct ldir *d;

	tk_check_nargs(L, 2);
	if (strlen(path) >= PATH_MAX || strlen(path) != lua_rawlen(L, 1))
		luaL_argerror(L, 1, "a path without NUL bytes, shorter than PATH_MAX, expected");
	if (!lua_isnoneornil(L, 2)) {
		luaL_checktype(L, 2, LUA_TTABLE);
		if (lua_getfield(L, 2, "create") != LUA_TNIL && lua_toboolean(L, -1))
			flags |= TK_DIR_CREATE;
		if (lua_getfield(L, 2, "private") != LUA_TNIL && lua_toboolean(L, -1))
			flags |= TK_DIR_PRIVATE;
		lua_getfield(L, 2, "mode");
		mode = mode_arg(L, -1, 0700);
		lua_pop(L, 3);
	}
	d = lua_newuserdatauv(L, sizeof *d, 0);
	d->made = 0;
	tk_handle_init(&d->h, "directory", "r", NULL);
	luaL_setmetatable(L, TK_DIR_MT);
	fd = tk_dir_open(path, flags, mode, d->path, &d->made, why);
	if (fd < 0)
		return push_refusal(L, lua_pushfstring(L, "directory %s", path), fd, why);
	if (!(flags & TK_DIR_PRIVATE))
		snprintf(d->path, sizeof d->path, "%s", path);
	d->h.fd = fd;
	tk_handle_opened(L, fd);
	return 1;
}

/*** The directory's path (links resolved for a private one): what to hand
 * to others, such as a service's NOTIFY_SOCKET.
 * @function dir:path */
static int dir_path(lua_State *L)
{
	struct ldir *d = dir_check(L, 1);

	tk_check_nargs(L, 1);
	lua_pushstring(L, d->path);
	return 1;
}

/*** Whether dir_open made the directory (not the ones above it): what a
 * caller that cleans up after itself may remove again.
 * @function dir:made */
static int dir_made(lua_State *L)
{
	struct ldir *d = dir_check(L, 1);

	tk_check_nargs(L, 1);
	lua_pushboolean(L, d->made);
	return 1;
}

static int stream_close(lua_State *L)
{
	luaL_Stream *s = luaL_checkudata(L, 1, LUA_FILEHANDLE);
	int r = fclose(s->f);

	return luaL_fileresult(L, r == 0, NULL);
}

/*** Opens name beneath the directory for appending, as a Lua file (io
 * library methods): made with `mode` when missing, else only a regular
 * file owned by this user with one link; never through a link.
 * @function dir:append
 * @string name
 * @int[opt=0640] mode
 * @treturn[1] file
 * @treturn[2] nil, message, errno */
static int dir_append(lua_State *L)
{
	struct ldir *d = dir_check(L, 1);
	const char *name = name_arg(L, 2);
	mode_t mode = mode_arg(L, 3, 0640);
	char why[TK_WHY_LEN];
	luaL_Stream *s;
	int fd;

	tk_check_nargs(L, 3);
	s = lua_newuserdatauv(L, sizeof *s, 0);
	s->f = NULL;
	s->closef = NULL; /* closed until it holds a stream */
	luaL_setmetatable(L, LUA_FILEHANDLE);
	fd = tk_dir_open_file(d->h.fd, name, 1, mode, why);
	if (fd < 0)
		return push_refusal(L, lua_pushfstring(L, "%s/%s", d->path, name), fd, why);
	s->f = fdopen(fd, "a");
	if (!s->f) {
		int e = -errno;
		close(fd);
		return tk_push_error(L, lua_pushfstring(L, "%s/%s", d->path, name), e);
	}
	s->closef = stream_close;
	return 1;
}

/*** Renames from to to, both beneath the directory (rotation).
 * @function dir:rename
 * @treturn[1] true
 * @treturn[2] nil, message, errno */
static int dir_rename(lua_State *L)
{
	struct ldir *d = dir_check(L, 1);
	const char *from = name_arg(L, 2), *to = name_arg(L, 3);
	int r;

	tk_check_nargs(L, 3);
	r = tk_dir_rename(d->h.fd, from, to);
	if (r < 0)
		return tk_push_error(L, lua_pushfstring(L, "rename %s/%s", d->path, from), r);
	lua_pushboolean(L, 1);
	return 1;
}

/*** Removes name beneath the directory (never what a link points to).
 * @function dir:unlink
 * @treturn[1] true
 * @treturn[2] nil, message, errno (ENOENT: there was none) */
static int dir_unlink(lua_State *L)
{
	struct ldir *d = dir_check(L, 1);
	const char *name = name_arg(L, 2);
	int r;

	tk_check_nargs(L, 2);
	r = tk_dir_unlink(d->h.fd, name);
	if (r < 0)
		return tk_push_error(L, lua_pushfstring(L, "unlink %s/%s", d->path, name), r);
	lua_pushboolean(L, 1);
	return 1;
}

/*** Binds a unix socket at name beneath the directory: "dgram" (a notify
 * socket whose messages name their sender, socket:recv) or "listen" (a
 * control socket, socket:accept). The node never has a wider mode than
 * `mode`, and gets `uid`/`gid` when given (a service of another user may
 * then reach it, and nobody else).
 * @function dir:bind
 * @string name
 * @string kind "dgram" or "listen"
 * @tparam[opt] table opts `mode` (default 0600), `uid`, `gid`; `sender =
 *   "start time"` tells senders as kernels before 6.5 must (socket:recv)
 * @treturn[1] socket
 * @treturn[2] nil, message, errno */
static int dir_bind(lua_State *L)
{
	static const char *const kinds[] = { "listen", "dgram", NULL };
	struct ldir *d = dir_check(L, 1);
	const char *name = name_arg(L, 2);
	int dgram = luaL_checkoption(L, 3, NULL, kinds);
	mode_t mode = 0600;
	uid_t uid = (uid_t)-1;
	gid_t gid = (gid_t)-1;
	int by_start_time = 0;

	tk_check_nargs(L, 4);
	if (!lua_isnoneornil(L, 4)) {
		luaL_checktype(L, 4, LUA_TTABLE);
		lua_getfield(L, 4, "mode");
		mode = mode_arg(L, -1, 0600);
		if (lua_getfield(L, 4, "uid") != LUA_TNIL) {
			lua_Integer v = luaL_checkinteger(L, -1);
			luaL_argcheck(L, v >= 0 && v < INT32_MAX, 4, "uid out of range");
			uid = (uid_t)v;
		}
		if (lua_getfield(L, 4, "gid") != LUA_TNIL) {
			lua_Integer v = luaL_checkinteger(L, -1);
			luaL_argcheck(L, v >= 0 && v < INT32_MAX, 4, "gid out of range");
			gid = (gid_t)v;
		}
		if (lua_getfield(L, 4, "sender") != LUA_TNIL) {
			const char *how = luaL_checkstring(L, -1);
			luaL_argcheck(L, strcmp(how, "start time") == 0 || strcmp(how, "scm_pidfd") == 0, 4,
			              "sender: \"scm_pidfd\" or \"start time\" expected");
			by_start_time = how[0] == 's' && how[1] == 't';
		}
		lua_pop(L, 4);
	}
	return tk_unix_bind(L, d->h.fd, d->path, name, dgram, mode, uid, gid, by_start_time);
}

/*** Replaces name beneath the directory with exactly data: a fresh
 * unguessable name written, synced and renamed over it (a reader sees the
 * old file or the new one).
 * @function dir:replace
 * @string name
 * @string data
 * @int[opt=0644] mode
 * @treturn[1] true
 * @treturn[2] nil, message, errno */
static int dir_replace(lua_State *L)
{
	struct ldir *d = dir_check(L, 1);
	const char *name = name_arg(L, 2);
	size_t len;
	const char *data = luaL_checklstring(L, 3, &len);
	mode_t mode = mode_arg(L, 4, 0644);
	const char *step;
	int r;

	tk_check_nargs(L, 4);
	luaL_argcheck(L, strlen(name) <= NAME_MAX - 16, 2, "a name of at most 239 bytes expected");
	r = tk_dir_replace(d->h.fd, name, data, len, mode, &step);
	if (r < 0)
		return tk_push_error(L, lua_pushfstring(L, "%s/%s: %s", d->path, name, step), r);
	lua_pushboolean(L, 1);
	return 1;
}

/* core.textfile_write(dir, name, data) -> true | nil, msg, errno: the
 * CLI's node_exporter textfile, through the same directory checks. */
static int l_textfile_write(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	const char *name = name_arg(L, 2);
	size_t len;
	const char *data = luaL_checklstring(L, 3, &len);
	char why[TK_WHY_LEN];
	const char *step;
	int fd, r;

	tk_check_nargs(L, 3);
	luaL_argcheck(L, strlen(name) <= NAME_MAX - 16, 2, "a name of at most 239 bytes expected");
	fd = tk_dir_open(path, 0, 0, NULL, NULL, why);
	if (fd < 0)
		return push_refusal(L, lua_pushfstring(L, "textfile directory %s", path), fd, why);
	r = tk_dir_replace(fd, name, data, len, 0644, &step);
	close(fd);
	if (r < 0)
		return tk_push_error(L, lua_pushfstring(L, "textfile %s/%s: %s", path, name, step), r);
	lua_pushboolean(L, 1);
	return 1;
}

void tk_dir_open_lib(lua_State *L)
{
	static const luaL_Reg methods[] = {
		{ "path", dir_path },
		{ "made", dir_made },
		{ "append", dir_append },
		{ "rename", dir_rename },
		{ "unlink", dir_unlink },
		{ "bind", dir_bind },
		{ "replace", dir_replace },
		{ NULL, NULL },
	};

	tk_handle_newclass(L, TK_DIR_MT, methods, NULL, NULL);
	lua_pop(L, 1);
	lua_pushcfunction(L, l_dir_open);
	lua_setfield(L, -2, "dir_open");
	lua_pushcfunction(L, l_textfile_write);
	lua_setfield(L, -2, "textfile_write");
}
