/* cgroup v2 file access (cgroup.c): the C core behind takana.cgroup. */
#ifndef TAKANA_CGROUP_H
#define TAKANA_CGROUP_H

#include <stddef.h>
#include <stdint.h>

/* Opens rel beneath mount_fd as a cgroup2 directory: openat2 with
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
 * RESOLVE_NO_XDEV, or a checked openat before Linux 5.6. -EXDEV when the
 * result is not on cgroup2. */
int tk_cg_open(int mount_fd, const char *rel, int *out_fd);
/* open(2) of the cgroup2 mount directory, or of a cgroup directory by
 * its full path (spawn's cgroup option): the fd, or -errno. */
int tk_cg_mount_open(const char *mount);
/* 1 when fd is on the cgroup2 filesystem, 0 when it is not or fstatfs
 * fails. */
int tk_cg_fd_is_v2(int fd);
/* A file of dirfd opened for reading: the fd, or -errno. */
int tk_cg_file_open(int dirfd, const char *file);
/* Reads dirfd/file whole into buf through *fd, which is opened first when
 * -1 and kept for the next read. A read that fails closes *fd again unless
 * keep is set (the descriptor someone polls must stay). A file gone (a
 * controller disabled since: ENODEV) reads as -ENOENT; -EFBIG when the
 * file does not fit in cap. */
int tk_cg_read_kept(int dirfd, const char *file, int *fd, int keep, char *buf, size_t cap,
                    size_t *len);
/* Reads dirfd/file whole into buf through a descriptor opened for this
 * read alone (a tree keeps no file open): as tk_cg_read_kept. */
int tk_cg_read_once(int dirfd, const char *file, char *buf, size_t cap, size_t *len);
/* Reads dirfd/file to its end, a chunk at a time through cb; cb returns 0
 * to go on, anything else stops the read and is returned. */
typedef int (*tk_chunk_cb)(void *ctx, const char *buf, size_t len);
int tk_cg_read_each(int dirfd, const char *file, tk_chunk_cb cb, void *ctx);
/* mkdir(2) of a child cgroup (mode 0755) named name beneath dirfd. */
int tk_cg_mkdir(int dirfd, const char *name);
/* 1 when dirfd's cgroup was removed (its cgroup.controllers is gone). */
int tk_cg_removed(int dirfd);

/* rmdir of the directory dirfd is open on, reached as rel beneath
 * mount_fd: the parent is opened beneath the mount (tk_cg_open), and the
 * entry must still be dirfd's directory (-ESTALE otherwise). rel comes from
 * the handle, never from a caller. */
int tk_cg_rmdir(int mount_fd, const char *rel, int dirfd);
/* The cgroup's id: its kernfs node id, the id BPF helpers and
 * PIDFD_GET_INFO report. */
int tk_cg_id(int dirfd, uint64_t *id);
/* 1 when pid is listed in dirfd's cgroup.procs, 0 when it is not. */
int tk_cg_has_pid(int dirfd, int pid);
/* Calls cb for every pid in the cgroup.procs of dirfd and of each
 * descendant (parents before children), at most max_dirs directories
 * (-E2BIG past that). A directory removed meanwhile is skipped. cb returns
 * 0 to go on, anything else stops the walk and is returned. */
typedef int (*tk_pid_cb)(void *ctx, int pid);
int tk_cg_walk_procs(int dirfd, int max_dirs, tk_pid_cb cb, void *ctx);
/* Calls cb with the name of every child cgroup (subdirectory) of dirfd, in
 * directory order. cb returns 0 to go on. */
typedef int (*tk_name_cb)(void *ctx, const char *name);
int tk_cg_children(int dirfd, tk_name_cb cb, void *ctx);

struct tk_cg_signal_result {
	int signalled;   /* processes the signal was delivered to */
	int rounds;      /* listings of the subtree that were taken */
	int listed;      /* processes (skip_pid aside) in the last listing */
	int failed_pid;  /* the first process the kernel refused the signal to */
	int failed_err;  /* ... and why (negative errno), 0 when none */
};
/* Sends sig to every process of dirfd's cgroup and its descendants but
 * skip_pid, listing the subtree's cgroup.procs again and again until no
 * process appears that was not signalled yet (then twice more after a
 * short pause: a fork that passed its signal check just before the parent
 * was signalled shows its child a moment later). Each pid is opened as a
 * pidfd first and signalled only if the subtree still lists it after
 * that, so a pid reused by a process elsewhere is never signalled.
 * A pid reused inside the subtree during the call is signalled once.
 * 0 when quiet; -EBUSY after max_rounds listings or past timeout_ms with
 * processes still appearing; another negative errno on failure. res holds
 * the counts either way. */
int tk_cg_signal(int dirfd, int sig, int skip_pid, int max_dirs, int max_rounds,
                 int64_t timeout_ms, struct tk_cg_signal_result *res);

/* The directory exactly depth levels beneath mount_fd whose subpath suffix
 * ("" for itself) lists pid in its cgroup.procs (pid > 0), or has cgroup id
 * id (id != 0). Writes that path, relative to the mount, into out. -ENOENT
 * when none does, -E2BIG past max_dirs directories. */
int tk_cg_find(int mount_fd, int depth, const char *suffix, int pid, uint64_t id,
               int max_dirs, char *out, size_t cap);

/* The pid a pidfd refers to, in our pid namespace, from
 * /proc/self/fdinfo/<fd>: -ESRCH once the process was reaped ("Pid: -1"),
 * -EXDEV when it is outside our pid namespace ("Pid: 0"), -EBADF when fd is
 * not a pidfd. */
int tk_pidfd_pid(int pidfd, int *pid);
/* The cgroup id of a pidfd's process, by PIDFD_GET_INFO (Linux 6.13):
 * -ENOTTY or -EINVAL before that, -ESRCH once the process was reaped. */
int tk_pidfd_cgroup_id(int pidfd, uint64_t *id);

/* Each subdirectory of fd, its name and inode number (a cgroup's id), in
 * readdir order; stops at the first non-zero return. */
typedef int (*tk_cg_subdir_cb)(void *ctx, int parent_fd, const char *name, uint64_t ino);
int tk_cg_each_subdir(int fd, tk_cg_subdir_cb cb, void *ctx);

#endif
