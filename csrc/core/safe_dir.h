/* Files and sockets beneath a directory descriptor that was checked: the
 * one way a privileged takana creates anything (runtime sockets, logs,
 * textfiles). A path another user can change is never used by name: the
 * directory is opened once, its owner and mode checked, and every name
 * beneath it is opened with O_NOFOLLOW through that descriptor. */
#ifndef TAKANA_SAFE_DIR_H
#define TAKANA_SAFE_DIR_H

#include <stddef.h>
#include <sys/types.h>

/* tk_dir_open flags. */
enum {
	/* Missing directories are made (mkdir; the last with `mode`). */
	TK_DIR_CREATE = 1,
	/* A directory of this user's own: the last component is owned by the
	 * effective uid and writable by no group or other user; every
	 * component from / down is owned by root or this uid and writable by
	 * nobody else unless sticky, so that its path (handed to services and
	 * clients) names what was checked. */
	TK_DIR_PRIVATE = 2,
};

/* Why a refusal was made, for a message a person can act on. */
#define TK_WHY_LEN 256

/* Whether name is one plain entry: not empty, at most NAME_MAX bytes, no
 * '/' or NUL, not "." or "..". 0 or -EINVAL. */
int tk_name_check(const char *name, size_t len);

/* Opens the directory at path (O_DIRECTORY, O_CLOEXEC), walked one
 * component at a time: a symbolic link is followed only when root or this
 * uid owns it. The directory is refused when others can write it, unless
 * sticky and owned by root or this uid. A directory made here gets `mode`
 * (and *made, when not NULL, is 1); one that exists keeps its own.
 * *resolved (PATH_MAX bytes, may be NULL) gets the path without links.
 * Returns the fd, or -errno; a refusal (-EPERM, -ELOOP, -ENOTDIR) fills
 * why. */
int tk_dir_open(const char *path, int flags, mode_t mode, char *resolved, int *made, char *why);

/* Opens the regular file name beneath dirfd for writing (O_APPEND when
 * append), creating it with `mode` (set by fchmod, whatever the umask):
 * never through a symbolic link, never a FIFO, device or directory, and
 * only a file owned by this uid with one link (a hard link to another
 * file would redirect the writes). Returns the fd (blocking, O_CLOEXEC),
 * or -errno; a refusal fills why. */
int tk_dir_open_file(int dirfd, const char *name, int append, mode_t mode, char *why);

/* Binds the AF_UNIX socket sockfd at name beneath dirfd (dir_path: the
 * directory's path, used only where /proc is not mounted), replacing a
 * stale entry there. The node gets `mode` before it is reachable (fchmod
 * of the socket before bind), then exactly `mode` and, when uid is not
 * -1, that owner and group (fchownat, never following a link). -errno. */
int tk_dir_bind(int dirfd, const char *dir_path, const char *name, int sockfd, mode_t mode,
                uid_t uid, gid_t gid);

/* renameat/unlinkat of plain names within dirfd: 0 or -errno. */
int tk_dir_rename(int dirfd, const char *from, const char *to);
int tk_dir_unlink(int dirfd, const char *name);

/* Replaces name beneath dirfd with exactly data: written to a fresh
 * unguessable name (O_EXCL, O_NOFOLLOW), synced, then renamed over name
 * within dirfd. 0 or -errno, with *step naming the call that failed. */
int tk_dir_replace(int dirfd, const char *name, const char *data, size_t len, mode_t mode,
                   const char **step);

#endif
