/* Files and sockets beneath a checked directory descriptor (safe_dir.h).
 * The defects this closes were one mistake in three places (a root
 * supervisor chmod()ing a socket by path, appending to a log through a
 * planted symlink, and trusting a runtime directory another user made
 * first): a privileged process used a name someone else could change. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "safe_dir.h"

#define TMP_RANDOM 12
#define TMP_TRIES 100

int tk_name_check(const char *name, size_t len)
{
	if (len == 0 || len > NAME_MAX || memchr(name, '\0', len) || memchr(name, '/', len))
		return -EINVAL;
	if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
		return -EINVAL;
	return 0;
}

/* Fills why (TK_WHY_LEN bytes) when the caller asked for a reason; a
 * reason longer than that is cut (the return value is looked at, so the
 * compiler does not warn of the cut it cannot rule out). */
#define why_set(why, ...)                                                       \
	do {                                                                    \
		if ((why) && snprintf((why), TK_WHY_LEN, __VA_ARGS__) < 0)      \
			(why)[0] = '\0';                                        \
	} while (0)

/* Whether a directory's entries are safe to use: writable by no group or
 * other user, unless sticky and owned by root or this uid (then others can
 * only touch their own names, which every open beneath it checks), as
 * logrotate decides. With owned, its owner must be root or this uid as
 * well: a path handed to others names only what they cannot change.
 * 0, or -EPERM / -ENOTDIR with why. */
static int dir_trusted(int fd, const char *what, int owned, char *why)
{
	struct stat st;
	uid_t me = geteuid();
	int ours;

	if (fstat(fd, &st) < 0)
		return -errno;
	ours = st.st_uid == 0 || st.st_uid == me;
	if (!S_ISDIR(st.st_mode)) {
		why_set(why, "%s is not a directory (mode %lo)", what, (unsigned long)st.st_mode);
		return -ENOTDIR;
	}
	if (owned && !ours) {
		why_set(why, "%s is owned by uid %lu, not by root or uid %lu: its owner could plant "
		        "links or swap names in it", what, (unsigned long)st.st_uid, (unsigned long)me);
		return -EPERM;
	}
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !((st.st_mode & S_ISVTX) && ours)) {
		why_set(why, "%s is writable by group or others (mode %04lo, owner uid %lu), so another "
		        "user could plant links or swap names in it: remove that permission (chmod go-w), "
		        "or make it sticky (chmod +t) and owned by root or uid %lu", what,
		        (unsigned long)(st.st_mode & 07777), (unsigned long)st.st_uid, (unsigned long)me);
		return -EPERM;
	}
	return 0;
}

#define LINKS_MAX 40 /* as the kernel's own path walk */

/* The state of one walk: the directory reached, its path without links,
 * and whether this walk made it. */
struct walk {
	int fd;
	int made;
	char path[PATH_MAX];
};

/* Appends comp to w->path. */
static int walk_append(struct walk *w, const char *comp, size_t cl)
{
	size_t rl = strlen(w->path);

	if (rl + 1 + cl >= sizeof w->path)
		return -ENAMETOOLONG;
	w->path[rl] = '/';
	memcpy(w->path + rl + 1, comp, cl + 1);
	return 0;
}

/* Follows the link comp beneath w->fd, owned by root or this uid, by
 * putting its target in front of what is left of the path (rest, p). */
static int walk_link(struct walk *w, const char *comp, const struct stat *st, char *rest,
                     char **p, char *why)
{
	char target[PATH_MAX];
	size_t left = strlen(*p);
	ssize_t n;

	if (st->st_uid != 0 && st->st_uid != geteuid()) {
		why_set(why, "%s/%s is a symbolic link owned by uid %lu: another user's link is not "
		        "followed", w->path, comp, (unsigned long)st->st_uid);
		return -ELOOP;
	}
	n = readlinkat(w->fd, comp, target, sizeof target - 1);
	if (n < 0)
		return -errno;
	if ((size_t)n + 1 + left >= sizeof target)
		return -ENAMETOOLONG;
	if (left) {
		target[n++] = '/';
		memcpy(target + n, *p, left);
		n += (ssize_t)left;
	}
	target[n] = '\0';
	memcpy(rest, target, (size_t)n + 1);
	*p = rest;
	if (rest[0] == '/') {
		int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		close(w->fd);
		w->fd = fd;
		w->path[0] = '\0';
	}
	return 0;
}

/* Walks path from / (a relative one through the working directory's path)
 * one component at a time,
 * never following a link the way the kernel would: a link is followed
 * only when root or this uid owns it, so no other user's link redirects
 * the walk (fs.protected_symlinks may be off). With TK_DIR_PRIVATE every
 * directory passed must be trusted and owned (dir_trusted). What is
 * missing is made when TK_DIR_CREATE (the last with mode). 0 with w->fd
 * open, or -errno with why. */
static int walk(const char *path, int flags, mode_t mode, struct walk *w, char *why)
{
	int private = flags & TK_DIR_PRIVATE, err = 0, links = 0;
	char rest[PATH_MAX], *p = rest;
	size_t pl = strlen(path);

	w->fd = -1;
	w->made = 0;
	w->path[0] = '\0';
	/* A relative path is walked from / too, through the working
	 * directory's own path: its ancestors are checked like any other. */
	if (path[0] != '/') {
		size_t cl;
		if (!getcwd(rest, sizeof rest))
			return errno ? -errno : -ENOENT;
		cl = strlen(rest);
		if (cl + 1 + pl >= sizeof rest)
			return -ENAMETOOLONG;
		rest[cl] = '/';
		memcpy(rest + cl + 1, path, pl + 1);
	} else if (pl >= sizeof rest) {
		return -ENAMETOOLONG;
	} else {
		memcpy(rest, path, pl + 1);
	}
	w->fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (w->fd < 0)
		return -errno;
	if (private)
		err = dir_trusted(w->fd, "/", 1, why);
	while (err == 0) {
		struct stat st;
		char *comp, *end;
		size_t cl;
		int nfd;

		while (*p == '/')
			p++;
		if (*p == '\0')
			break;
		comp = p;
		end = strchr(p, '/');
		cl = end ? (size_t)(end - p) : strlen(p);
		p = end ? end + 1 : p + cl;
		if (end)
			*end = '\0';
		if (strcmp(comp, ".") == 0)
			continue;
		if (strcmp(comp, "..") == 0) {
			/* Up into what was checked on the way down. */
			char *slash = strrchr(w->path, '/');
			nfd = openat(w->fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (nfd < 0) {
				err = -errno;
				break;
			}
			close(w->fd);
			w->fd = nfd;
			if (slash)
				*slash = '\0';
			continue;
		}
		w->made = 0;
		if (fstatat(w->fd, comp, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			err = -errno;
			if (err != -ENOENT || !(flags & TK_DIR_CREATE))
				break;
			if (mkdirat(w->fd, comp, *p ? 0755 : mode) < 0 && errno != EEXIST) {
				err = -errno;
				break;
			}
			w->made = 1;
			err = fstatat(w->fd, comp, &st, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
			if (err < 0)
				break;
		}
		if (S_ISLNK(st.st_mode)) {
			err = ++links > LINKS_MAX ? -ELOOP : walk_link(w, comp, &st, rest, &p, why);
			continue;
		}
		nfd = openat(w->fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (nfd < 0) {
			err = -errno;
			if (err == -ENOTDIR)
				why_set(why, "%s/%s is not a directory", w->path, comp);
			break;
		}
		close(w->fd);
		w->fd = nfd;
		err = walk_append(w, comp, cl);
		if (err == 0 && private)
			err = dir_trusted(w->fd, w->path, 1, why);
	}
	if (err == 0 && w->path[0] == '\0') {
		w->path[0] = '/';
		w->path[1] = '\0';
	}
	if (err < 0) {
		close(w->fd);
		w->fd = -1;
	}
	return err;
}

int tk_dir_open(const char *path, int flags, mode_t mode, char *resolved, int *made, char *why)
{
	struct walk w;
	struct stat st;
	int err;

	if (why)
		why[0] = '\0';
	w.path[0] = '\0';
	err = walk(path, flags, mode, &w, why);
	if (err < 0)
		return err;
	if (resolved)
		memcpy(resolved, w.path, strlen(w.path) + 1);
	if (made)
		*made = w.made;
	if (!(flags & TK_DIR_PRIVATE)) {
		err = dir_trusted(w.fd, path, 0, why);
	} else if (fstat(w.fd, &st) < 0) {
		err = -errno;
	} else if (st.st_uid != geteuid()) {
		why_set(why, "%s is owned by uid %lu, not by this uid %lu", w.path,
		        (unsigned long)st.st_uid, (unsigned long)geteuid());
		err = -EPERM;
	} else if (!w.made && (st.st_mode & (S_IWGRP | S_IWOTH))) {
		/* Sticky is not enough here: its path is handed to others. */
		why_set(why, "%s is writable by group or others (mode %04lo): a private directory "
		        "must not be (chmod go-w)", w.path, (unsigned long)(st.st_mode & 07777));
		err = -EPERM;
	}
	/* Made here: its mode is ours, whatever the umask took. An existing
	 * directory keeps the mode its owner gave it. */
	if (err == 0 && w.made && fchmod(w.fd, mode) < 0)
		err = -errno;
	if (err < 0) {
		close(w.fd);
		return err;
	}
	return w.fd;
}

int tk_dir_open_file(int dirfd, const char *name, int append, mode_t mode, char *why)
{
	int base = O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (append ? O_APPEND : 0);
	struct stat st;
	int fd, err = 0;

	if (why)
		why[0] = '\0';
	if (tk_name_check(name, strlen(name)) < 0)
		return -EINVAL;
	fd = openat(dirfd, name, base | O_CREAT | O_EXCL, mode);
	if (fd >= 0) {
		/* Made here: its mode is ours to set, whatever the umask took. */
		if (fchmod(fd, mode) < 0)
			err = -errno;
	} else if (errno == EEXIST) {
		/* O_NONBLOCK: a FIFO planted here fails (ENXIO) instead of
		 * blocking the loop until someone opens its other end. */
		fd = openat(dirfd, name, base);
	}
	if (fd < 0) {
		err = -errno;
		if (err == -ELOOP)
			why_set(why, "%s is a symbolic link", name);
		else if (err == -ENXIO)
			why_set(why, "%s is a FIFO or socket", name);
		return err;
	}
	if (err == 0 && fstat(fd, &st) < 0)
		err = -errno;
	if (err == 0 && !S_ISREG(st.st_mode)) {
		why_set(why, "%s is not a regular file (mode %lo)", name, (unsigned long)st.st_mode);
		err = -EPERM;
	} else if (err == 0 && st.st_uid != geteuid()) {
		why_set(why, "%s is owned by uid %lu, not by this uid %lu", name, (unsigned long)st.st_uid,
		        (unsigned long)geteuid());
		err = -EPERM;
	} else if (err == 0 && st.st_nlink != 1) {
		why_set(why, "%s has %lu links: a hard link would send the writes to another file",
		        name, (unsigned long)st.st_nlink);
		err = -EPERM;
	}
	if (err == 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0)
		err = -errno;
	if (err < 0) {
		close(fd);
		return err;
	}
	return fd;
}

int tk_dir_bind(int dirfd, const char *dir_path, const char *name, int sockfd, mode_t mode,
                uid_t uid, gid_t gid)
{
	struct sockaddr_un sa;
	struct stat st;
	size_t len = strlen(name);
	int n, r;

	if (tk_name_check(name, len) < 0)
		return -EINVAL;
	/* A stale node of an earlier run: the directory is ours alone, so
	 * whatever is there is ours to replace (unlinkat follows nothing). */
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode) &&
	    unlinkat(dirfd, name, 0) < 0)
		return -errno;
	/* Linux gives a new socket node the socket inode's mode less the
	 * umask: never wider than `mode`, even for the moment before the
	 * fchmodat below, and no process-wide umask window. */
	if (fchmod(sockfd, mode) < 0)
		return -errno;
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	/* Through the directory's descriptor: the path above it is not walked
	 * again (and a long one fits, which sun_path's 108 bytes would not). */
	n = snprintf(sa.sun_path, sizeof sa.sun_path, "/proc/self/fd/%d/%s", dirfd, name);
	if (n < 0 || (size_t)n >= sizeof sa.sun_path)
		return -ENAMETOOLONG;
	r = bind(sockfd, (struct sockaddr *)&sa, sizeof sa);
	if (r < 0 && errno == ENOENT && dir_path && access("/proc/self/fd", F_OK) < 0) {
		/* No /proc: the checked directory by name (nobody else can
		 * change it, so its name still means it). */
		n = snprintf(sa.sun_path, sizeof sa.sun_path, "%s/%s", dir_path, name);
		if (n < 0 || (size_t)n >= sizeof sa.sun_path)
			return -ENAMETOOLONG;
		r = bind(sockfd, (struct sockaddr *)&sa, sizeof sa);
	}
	if (r < 0)
		return -errno;
	/* The directory is ours alone: the node just bound is still this one. */
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (!S_ISSOCK(st.st_mode))
		return -EEXIST;
	if ((st.st_mode & 07777) != mode && fchmodat(dirfd, name, mode, 0) < 0)
		return -errno;
	if (uid != (uid_t)-1 && fchownat(dirfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	return 0;
}

int tk_dir_rename(int dirfd, const char *from, const char *to)
{
	if (tk_name_check(from, strlen(from)) < 0 || tk_name_check(to, strlen(to)) < 0)
		return -EINVAL;
	return renameat(dirfd, from, dirfd, to) < 0 ? -errno : 0;
}

int tk_dir_unlink(int dirfd, const char *name)
{
	if (tk_name_check(name, strlen(name)) < 0)
		return -EINVAL;
	return unlinkat(dirfd, name, 0) < 0 ? -errno : 0;
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

int tk_dir_replace(int dirfd, const char *name, const char *data, size_t len, mode_t mode,
                   const char **step)
{
	char tmp[NAME_MAX + 1];
	int fd = -1, err = 0;

	*step = "name";
	if (tk_name_check(name, strlen(name)) < 0)
		return -EINVAL;
	*step = "create";
	for (int tries = 0; fd < 0 && tries < TMP_TRIES; tries++) {
		err = tmp_name(tmp, sizeof tmp, name);
		if (err < 0)
			break;
		/* O_EXCL: never an existing file or link, O_NOFOLLOW besides. */
		fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
		err = fd < 0 ? -errno : 0;
		if (err != -EEXIST)
			break;
	}
	if (fd < 0)
		return err;
	*step = "write";
	err = write_all(fd, data, len);
	if (err == 0 && fchmod(fd, mode) < 0)
		err = -errno;
	/* Data on disk before the name points at it: after a crash a reader
	 * sees the old file or the new one, never an empty one. */
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
	if (err == 0) {
		/* The rename is durable once the directory is synced; a
		 * filesystem that cannot sync directories says EINVAL. */
		*step = "fsync of the directory";
		err = fsync(dirfd) < 0 && errno != EINVAL ? -errno : 0;
	}
	return err;
}
