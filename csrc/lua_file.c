/* Lua binding of the one file write the CLI makes as root: a textfile for
 * node_exporter, replaced atomically in a directory other users may see.
 * Plain Lua (io.open + os.rename) follows a symlink planted at the
 * temporary name and truncates its target; this goes through a directory
 * fd, creates an unguessable name exclusively without following links,
 * and renames within that same directory. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "binding.h"

#define TMP_RANDOM 12
#define TMP_TRIES 100

/* A directory another user can write lets that user plant names, so it is
 * refused unless the sticky bit stops them touching ours and its owner is
 * one we trust anyway. Returns 0, or -EPERM with *mode set. */
static int dir_check(int dirfd, mode_t *mode, uid_t *owner)
{
	struct stat st;

	if (fstat(dirfd, &st) < 0)
		return -errno;
	*mode = st.st_mode & 07777;
	*owner = st.st_uid;
	if (!(st.st_mode & (S_IWGRP | S_IWOTH)))
		return 0;
	if ((st.st_mode & S_ISVTX) && (st.st_uid == geteuid() || st.st_uid == 0))
		return 0;
	return -EPERM;
}

/* "." name "." and TMP_RANDOM letters from getrandom: not predictable, so
 * not plantable; a dot name, so a collector reading *.prom skips it. */
static int tmp_name(char *out, size_t out_len, const char *name)
{
	static const char alphabet[] =
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	unsigned char rnd[TMP_RANDOM];
	size_t len = strlen(name);

	if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
		return errno ? -errno : -EIO;
	if (len + TMP_RANDOM + 3 > out_len)
		return -ENAMETOOLONG;
	out[0] = '.';
	memcpy(out + 1, name, len);
	out[len + 1] = '.';
	for (size_t i = 0; i < TMP_RANDOM; i++)
		out[len + 2 + i] = alphabet[rnd[i] % (sizeof alphabet - 1)];
	out[len + 2 + TMP_RANDOM] = '\0';
	return 0;
}

static int write_all(int fd, const char *data, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, data, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		data += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Writes data to a fresh temporary name in dirfd and renames it to name.
 * Returns 0 or -errno, with *step naming the call that failed. */
static int file_replace(int dirfd, const char *name, const char *data, size_t data_len,
                        const char **step)
{
	char tmp[NAME_MAX + 1];
	int fd = -1, err = 0;

	*step = "create";
	for (int tries = 0; fd < 0 && tries < TMP_TRIES; tries++) {
		err = tmp_name(tmp, sizeof tmp, name);
		if (err < 0)
			break;
		/* O_EXCL: never an existing file or link, O_NOFOLLOW besides. */
		fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
		err = fd < 0 ? -errno : 0;
		if (err != -EEXIST)
			break;
	}
	if (fd < 0)
		return err;
	*step = "write";
	err = write_all(fd, data, data_len);
	/* Data on disk before the name points at it: after a crash the
	 * collector sees the old file or the new one, never an empty one. */
	if (err == 0) {
		*step = "fsync";
		err = fsync(fd) < 0 ? -errno : 0;
	}
	if (close(fd) < 0 && err == 0) {
		*step = "close";
		err = -errno;
	}
	if (err == 0) {
		*step = "rename";
		err = renameat(dirfd, tmp, dirfd, name) < 0 ? -errno : 0;
	}
	if (err < 0)
		unlinkat(dirfd, tmp, 0);
	return err;
}

/* Opens dir into *dirfd, or closes it again and pushes nil, msg, errno
 * (returning 3) when it cannot be opened or others could write into it. */
static int textfile_dir_open(lua_State *L, const char *dir, int *dirfd)
{
	char mode_text[8];
	mode_t mode = 0;
	uid_t owner = 0;
	int err;

	*dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (*dirfd < 0) {
		int saved = errno; /* the message allocates */
		return tk_push_error(L, lua_pushfstring(L, "textfile directory %s", dir), saved);
	}
	err = dir_check(*dirfd, &mode, &owner);
	if (err == 0)
		return 0;
	close(*dirfd);
	if (err != -EPERM)
		return tk_push_error(L, lua_pushfstring(L, "textfile directory %s", dir), err);
	snprintf(mode_text, sizeof mode_text, "%04o", (unsigned)mode);
	lua_pushnil(L);
	lua_pushfstring(L, "textfile directory %s: writable by group or others (mode %s, "
	                "owner uid %d), so another user could plant or swap files in it; "
	                "remove that permission (chmod go-w), or make it sticky (chmod +t) "
	                "and owned by root or uid %d", dir, mode_text, (int)owner, (int)geteuid());
	lua_pushinteger(L, EPERM);
	return 3;
}

/* core.textfile_write(dir, name, data) -> true | nil, msg, errno.
 * DIR/name ends up holding exactly data, or is left as it was. */
static int l_textfile_write(lua_State *L)
{
	size_t name_len, data_len;
	const char *dir = luaL_checkstring(L, 1);
	const char *name = luaL_checklstring(L, 2, &name_len);
	const char *data = luaL_checklstring(L, 3, &data_len);
	const char *step;
	int dirfd, err, nret;

	tk_check_nargs(L, 3);
	luaL_argcheck(L, name_len > 0 && name_len + TMP_RANDOM + 3 <= NAME_MAX &&
	              strlen(name) == name_len && strchr(name, '/') == NULL &&
	              strcmp(name, ".") != 0 && strcmp(name, "..") != 0, 2,
	              "a plain file name expected (no '/', NUL, '.' or '..', at most 240 bytes)");

	nret = textfile_dir_open(L, dir, &dirfd);
	if (nret > 0)
		return nret;
	err = file_replace(dirfd, name, data, data_len, &step);
	if (err == 0) {
		/* The rename itself is durable once the directory is synced; a
		 * filesystem that cannot sync directories says EINVAL. */
		step = "fsync of the directory";
		err = fsync(dirfd) < 0 && errno != EINVAL ? -errno : 0;
	}
	close(dirfd);
	if (err < 0)
		return tk_push_error(L, lua_pushfstring(L, "textfile %s/%s: %s", dir, name, step), err);
	lua_pushboolean(L, 1);
	return 1;
}

void tk_file_open(lua_State *L)
{
	lua_pushcfunction(L, l_textfile_write);
	lua_setfield(L, -2, "textfile_write");
}
