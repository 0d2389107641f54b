/* cgroup v2 files: opened beneath the mount with no way out, and read with
 * pread on kept descriptors (their parsers are in cgroup_parse.c). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>
#include <linux/openat2.h>

#include "cgroup.h"
#include "clock.h"
#include "process.h"
#include "util.h"

#define CGROUP2_SUPER_MAGIC 0x63677270

int tk_cg_open(int mount_fd, const char *rel, int *out_fd)
{
	struct open_how how;
	struct statfs sfs;
	long fd;

	memset(&how, 0, sizeof how);
	how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
	how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
	              RESOLVE_NO_XDEV;
	fd = syscall(SYS_openat2, mount_fd, rel, &how, sizeof how);
	if (fd < 0 && errno == ENOSYS) {
		/* Before 5.6: the caller refused "..", absolute paths and empty
		 * components lexically; refuse symlinks here and check below
		 * that we are still on cgroup2. */
		fd = openat(mount_fd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	}
	if (fd < 0)
		return -errno;
	if (fstatfs((int)fd, &sfs) < 0 || sfs.f_type != CGROUP2_SUPER_MAGIC) {
		close((int)fd);
		return -EXDEV;
	}
	*out_fd = (int)fd;
	return 0;
}

int tk_cg_mount_open(const char *mount)
{
	int fd = open(mount, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

int tk_cg_fd_is_v2(int fd)
{
	struct statfs sfs;

	return fstatfs(fd, &sfs) == 0 && sfs.f_type == CGROUP2_SUPER_MAGIC;
}

int tk_cg_file_open(int dirfd, const char *file)
{
	int fd = openat(dirfd, file, O_RDONLY | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

/* pread at 0 into buf; -EFBIG when the file does not fit. */
static int cg_pread(int fd, char *buf, size_t cap, size_t *len)
{
	ssize_t n = pread(fd, buf, cap, 0);

	*len = 0;
	if (n < 0)
		return errno ? -errno : -EIO;
	if ((size_t)n == cap)
		return -EFBIG;
	*len = (size_t)n;
	return 0;
}

int tk_cg_read_kept(int dirfd, const char *file, int *fd, int keep, char *buf, size_t cap,
                    size_t *len)
{
	int err;

	*len = 0;
	if (*fd < 0) {
		err = tk_cg_file_open(dirfd, file);
		if (err < 0)
			return err;
		*fd = err;
	}
	err = cg_pread(*fd, buf, cap, len);
	if (err == 0)
		return 0;
	if (!keep) {
		close(*fd);
		*fd = -1;
	}
	/* A controller disabled since: the file is gone (ENODEV). */
	return err == -ENODEV ? -ENOENT : err;
}

int tk_cg_read_once(int dirfd, const char *file, char *buf, size_t cap, size_t *len)
{
	int fd = -1, err = tk_cg_read_kept(dirfd, file, &fd, 0, buf, cap, len);

	if (fd >= 0)
		close(fd);
	return err;
}

int tk_cg_read_each(int dirfd, const char *file, tk_chunk_cb cb, void *ctx)
{
	char buf[8192];
	int fd = tk_cg_file_open(dirfd, file), err = 0;

	if (fd < 0)
		return fd;
	for (;;) {
		ssize_t n = read(fd, buf, sizeof buf);
		if (n < 0) {
			err = -errno;
			break;
		}
		if (n == 0)
			break;
		err = cb(ctx, buf, (size_t)n);
		if (err != 0)
			break;
	}
	close(fd);
	return err;
}

int tk_cg_mkdir(int dirfd, const char *name)
{
	return mkdirat(dirfd, name, 0755) < 0 ? -errno : 0;
}

int tk_cg_removed(int dirfd)
{
	/* Every cgroup, the root included, has cgroup.controllers. */
	return faccessat(dirfd, "cgroup.controllers", F_OK, 0) < 0 &&
	       (errno == ENOENT || errno == ENODEV);
}

int tk_cg_rmdir(int mount_fd, const char *rel, int dirfd)
{
	const char *slash = strrchr(rel, '/');
	const char *name = slash ? slash + 1 : rel;
	char parent[4096];
	struct stat want, got;
	int pfd = -1, err;

	if (*name == '\0' || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return -EINVAL;
	if (slash) {
		size_t n = (size_t)(slash - rel);
		if (n >= sizeof parent)
			return -ENAMETOOLONG;
		memcpy(parent, rel, n);
		parent[n] = '\0';
	} else {
		strcpy(parent, ".");
	}
	err = tk_cg_open(mount_fd, parent, &pfd);
	if (err < 0)
		return err;
	/* The name may have been removed and made again since the handle was
	 * opened: remove only the directory this handle holds. */
	if (fstat(dirfd, &want) == 0 && fstatat(pfd, name, &got, AT_SYMLINK_NOFOLLOW) == 0) {
		if (want.st_dev != got.st_dev || want.st_ino != got.st_ino)
			err = -ESTALE;
		else if (unlinkat(pfd, name, AT_REMOVEDIR) < 0)
			err = -errno;
	} else {
		err = -errno;
	}
	close(pfd);
	return err;
}

int tk_cg_id(int dirfd, uint64_t *id)
{
	struct {
		struct file_handle fh;
		unsigned char bytes[64];
	} h;
	int mount_id;

	h.fh.handle_bytes = sizeof h.bytes;
	if (syscall(SYS_name_to_handle_at, dirfd, "", &h.fh, &mount_id, AT_EMPTY_PATH) < 0)
		return -errno;
	/* kernfs hands out its 64-bit node id, which is the cgroup id. */
	if (h.fh.handle_bytes != sizeof *id)
		return -EOPNOTSUPP;
	memcpy(id, h.fh.f_handle, sizeof *id);
	return 0;
}

struct procs_parse {
	tk_pid_cb cb;
	void *ctx;
	long cur;
	int digits;
};

/* cgroup.procs: one decimal pid a line, split anywhere between reads. */
static int procs_chunk(void *ctx, const char *buf, size_t len)
{
	struct procs_parse *p = ctx;
	int r = 0;

	for (size_t i = 0; i < len && r == 0; i++) {
		if (buf[i] >= '0' && buf[i] <= '9') {
			p->cur = p->cur * 10 + (buf[i] - '0');
			if (p->cur > 0x7fffffff)
				return -EBADMSG;
			p->digits++;
		} else if (buf[i] == '\n' && p->digits > 0) {
			r = p->cb(p->ctx, (int)p->cur);
			p->cur = 0;
			p->digits = 0;
		} else {
			return -EBADMSG;
		}
	}
	return r;
}

/* Streams dirfd's cgroup.procs through cb, a pid at a time: the file can
 * hold many thousands of pids. */
static int procs_each(int dirfd, tk_pid_cb cb, void *ctx)
{
	struct procs_parse p = { cb, ctx, 0, 0 };
	int r = tk_cg_read_each(dirfd, "cgroup.procs", procs_chunk, &p);

	if (r == 0 && p.digits > 0)
		r = cb(ctx, (int)p.cur);
	return r;
}

static int pid_is(void *ctx, int pid)
{
	return pid == *(int *)ctx;
}

int tk_cg_has_pid(int dirfd, int pid)
{
	return procs_each(dirfd, pid_is, &pid);
}

int tk_cg_each_subdir(int fd, tk_cg_subdir_cb cb, void *ctx)
{
	/* A fresh open file description: a dup would share (and leave at the
	 * end) the directory offset of a handle's kept fd. */
	int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d;
	struct dirent *de;
	int r = 0;

	if (dfd < 0)
		return -errno;
	d = fdopendir(dfd);
	if (d == NULL) {
		r = -errno;
		close(dfd);
		return r;
	}
	while (r == 0 && (errno = 0, de = readdir(d)) != NULL) {
		if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		r = cb(ctx, fd, de->d_name, (uint64_t)de->d_ino);
	}
	if (r == 0 && de == NULL && errno != 0)
		r = -errno;
	closedir(d);
	return r;
}

#define TK_CG_MAX_DEPTH 128

struct walk {
	int budget, depth;
	tk_pid_cb cb;
	void *ctx;
};

static int walk_dir(struct walk *w, int fd);

static int walk_child(void *ctx, int parent_fd, const char *name, uint64_t ino)
{
	struct walk *w = ctx;
	int cfd = -1, r = tk_cg_open(parent_fd, name, &cfd);

	(void)ino;
	if (r == -ENOENT)
		return 0;   /* removed meanwhile */
	if (r < 0)
		return r;
	w->depth++;
	r = walk_dir(w, cfd);
	w->depth--;
	close(cfd);
	return r;
}

static int walk_dir(struct walk *w, int fd)
{
	int r;

	if (w->budget-- <= 0)
		return -E2BIG;
	if (w->depth > TK_CG_MAX_DEPTH)
		return -ELOOP;
	r = procs_each(fd, w->cb, w->ctx);
	if (r == -ENOENT || r == -ENODEV)
		return 0;
	if (r != 0)
		return r;
	return tk_cg_each_subdir(fd, walk_child, w);
}

int tk_cg_walk_procs(int dirfd, int max_dirs, tk_pid_cb cb, void *ctx)
{
	struct walk w = { max_dirs, 0, cb, ctx };
	return walk_dir(&w, dirfd);
}

struct children {
	tk_name_cb cb;
	void *ctx;
};

static int child_name(void *ctx, int parent_fd, const char *name, uint64_t ino)
{
	struct children *c = ctx;

	(void)parent_fd;
	(void)ino;
	return c->cb(c->ctx, name);
}

int tk_cg_children(int dirfd, tk_name_cb cb, void *ctx)
{
	struct children c = { cb, ctx };
	return tk_cg_each_subdir(dirfd, child_name, &c);
}

/* ---- cgroup-wide signal ------------------------------------------------- */

/* pidfds open at once while a listing is checked: far below a login's
 * 1,024 descriptors. */
#define SIGNAL_BATCH 128
/* Descriptors a listing of a shallow subtree opens at once. */
#define SIGNAL_SPARE 4

/* A set of pids (> 0): open addressing, grown at half load. */
struct pidset {
	int *slot;
	size_t cap, len;
};

static size_t pid_hash(int pid, size_t cap)
{
	return (size_t)((uint32_t)pid * 2654435761u) & (cap - 1);
}

static int pidset_has(const struct pidset *s, int pid)
{
	if (s->cap == 0)
		return 0;
	for (size_t i = pid_hash(pid, s->cap);; i = (i + 1) & (s->cap - 1)) {
		if (s->slot[i] == pid)
			return 1;
		if (s->slot[i] == 0)
			return 0;
	}
}

static int pidset_add(struct pidset *s, int pid)
{
	size_t i;

	if ((s->len + 1) * 2 > s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		int *slot = calloc(cap, sizeof *slot);
		if (slot == NULL)
			return -ENOMEM;
		for (size_t k = 0; k < s->cap; k++) {
			if (s->slot[k] == 0)
				continue;
			for (i = pid_hash(s->slot[k], cap); slot[i] != 0; i = (i + 1) & (cap - 1))
				;
			slot[i] = s->slot[k];
		}
		free(s->slot);
		s->slot = slot;
		s->cap = cap;
	}
	for (i = pid_hash(pid, s->cap); s->slot[i] != 0; i = (i + 1) & (s->cap - 1)) {
		if (s->slot[i] == pid)
			return 0;
	}
	s->slot[i] = pid;
	s->len++;
	return 0;
}

static void pidset_clear(struct pidset *s)
{
	if (s->cap)
		memset(s->slot, 0, s->cap * sizeof *s->slot);
	s->len = 0;
}

struct pidlist {
	int *v;
	size_t len, cap;
	int skip;
};

static int pidlist_add(void *ctx, int pid)
{
	struct pidlist *l = ctx;
	int *v;

	/* 0: a process outside our pid namespace, which no pidfd reaches. */
	if (pid <= 0 || pid == l->skip)
		return 0;
	v = tk_grow(l->v, &l->cap, l->len + 1, sizeof *v, 256);
	if (v == NULL)
		return -ENOMEM;
	l->v = v;
	l->v[l->len++] = pid;
	return 0;
}

static int pidset_add_cb(void *ctx, int pid)
{
	return pid > 0 ? pidset_add(ctx, pid) : 0;
}

static void pause_ms(long ms)
{
	struct timespec ts = { 0, ms * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Closes up to k of the pidfds fds[1..*n) from the end, keeping the first:
 * the listing that follows needs a few descriptors too. Those pids wait
 * for the next round. */
static void give_back(const int *fds, size_t *n, int k)
{
	while (k-- > 0 && *n > 1) {
		(*n)--;
		if (fds[*n] >= 0)
			close(fds[*n]);
	}
}

/* Signals pids[0..n) (at most SIGNAL_BATCH): each is opened as a pidfd,
 * the subtree is listed once more, and only the pidfds whose pid is still
 * listed get the signal. Returns how many of the pids were handled (and
 * marked seen): fewer than n at the descriptor limit, the rest waiting for
 * the next round. A negative errno on failure. */
static int signal_batch(int dirfd, int sig, int max_dirs, const int *pids, size_t n,
                        struct pidset *seen, struct pidset *still,
                        struct tk_cg_signal_result *res)
{
	int fds[SIGNAL_BATCH];
	int r = 0;

	for (size_t i = 0; i < n; i++) {
		int fd = tk_pidfd_open(pids[i]);
		if (fd == -EMFILE || fd == -ENFILE) {
			if (i == 0)
				return fd;
			n = i;
			give_back(fds, &n, SIGNAL_SPARE);
			break;
		}
		fds[i] = fd;
	}
	for (;;) {
		pidset_clear(still);
		r = tk_cg_walk_procs(dirfd, max_dirs, pidset_add_cb, still);
		if ((r != -EMFILE && r != -ENFILE) || n == 1)
			break;
		give_back(fds, &n, SIGNAL_SPARE);
	}
	for (size_t i = 0; i < n; i++) {
		if (fds[i] < 0) {
			/* ESRCH: gone before it could be opened. */
			if (r == 0 && fds[i] != -ESRCH && res->failed_err == 0) {
				res->failed_err = fds[i];
				res->failed_pid = pids[i];
			}
		} else {
			if (r == 0 && pidset_has(still, pids[i])) {
				int e = tk_pidfd_signal(fds[i], sig);
				if (e == 0) {
					res->signalled++;
				} else if (e != -ESRCH && res->failed_err == 0) {
					res->failed_err = e;
					res->failed_pid = pids[i];
				}
			}
			close(fds[i]);
		}
		if (r == 0)
			r = pidset_add(seen, pids[i]);
	}
	return r < 0 ? r : (int)n;
}

int tk_cg_signal(int dirfd, int sig, int skip_pid, int max_dirs, int max_rounds,
                 int64_t timeout_ms, struct tk_cg_signal_result *res)
{
	/* Pauses before the confirming listings, in ms. */
	static const long confirm_ms[] = { 1, 4 };
	struct pidset seen = { NULL, 0, 0 }, still = { NULL, 0, 0 };
	struct pidlist list = { NULL, 0, 0, skip_pid };
	int64_t deadline = tk_monotonic_ms() + timeout_ms;
	size_t quiet = 0;
	int r = 0;

	memset(res, 0, sizeof *res);
	for (;;) {
		size_t fresh = 0;

		if (res->rounds >= max_rounds || tk_monotonic_ms() > deadline) {
			r = -EBUSY;
			break;
		}
		res->rounds++;
		list.len = 0;
		r = tk_cg_walk_procs(dirfd, max_dirs, pidlist_add, &list);
		if (r < 0)
			break;
		res->listed = (int)list.len;
		/* Compacted in place to the pids not signalled yet. */
		for (size_t i = 0; i < list.len; i++) {
			if (!pidset_has(&seen, list.v[i]))
				list.v[fresh++] = list.v[i];
		}
		if (fresh == 0) {
			/* Nobody left who could be forking, or confirmed twice. */
			if (list.len == 0 || quiet == sizeof confirm_ms / sizeof *confirm_ms)
				break;
			pause_ms(confirm_ms[quiet++]);
			continue;
		}
		quiet = 0;
		for (size_t i = 0; i < fresh && r >= 0;) {
			size_t n = fresh - i < SIGNAL_BATCH ? fresh - i : SIGNAL_BATCH;
			r = signal_batch(dirfd, sig, max_dirs, list.v + i, n, &seen, &still, res);
			if (r >= 0 && (size_t)r < n)
				break;   /* out of descriptors: the rest next round */
			i += n;
		}
		if (r < 0)
			break;
	}
	free(list.v);
	free(seen.slot);
	free(still.slot);
	return r;
}

struct find {
	int budget, depth, pid;
	uint64_t id;
	const char *suffix;
	char *out;
	size_t cap, len;
};

static int find_dir(struct find *f, int fd);

static int find_child(void *ctx, int parent_fd, const char *name, uint64_t ino)
{
	struct find *f = ctx;
	size_t n = strlen(name), len = f->len;
	int cfd = -1, r;

	(void)ino;
	if (len + n + 2 > f->cap)
		return -ENAMETOOLONG;
	r = tk_cg_open(parent_fd, name, &cfd);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	if (len > 0)
		f->out[f->len++] = '/';
	memcpy(f->out + f->len, name, n + 1);
	f->len += n;
	f->depth--;
	r = find_dir(f, cfd);
	f->depth++;
	close(cfd);
	if (r <= 0) {
		f->len = len;
		f->out[len] = '\0';
	}
	return r;
}

/* > 0: found (f->out holds the path), 0: not here, < 0: error. */
static int find_dir(struct find *f, int fd)
{
	int sfd = fd, r;

	if (f->budget-- <= 0)
		return -E2BIG;
	if (f->depth > 0)
		return tk_cg_each_subdir(fd, find_child, f);
	if (*f->suffix) {
		r = tk_cg_open(fd, f->suffix, &sfd);
		if (r == -ENOENT)
			return 0;
		if (r < 0)
			return r;
	}
	if (f->id) {
		uint64_t id = 0;
		r = tk_cg_id(sfd, &id);
		r = r < 0 ? r : id == f->id;
	} else {
		r = tk_cg_has_pid(sfd, f->pid);
	}
	if (sfd != fd)
		close(sfd);
	if (r == -ENOENT || r == -ENODEV)
		r = 0;
	if (r > 0 && *f->suffix) {
		size_t n = strlen(f->suffix);
		if (f->len + n + 2 > f->cap)
			return -ENAMETOOLONG;
		if (f->len > 0)
			f->out[f->len++] = '/';
		memcpy(f->out + f->len, f->suffix, n + 1);
		f->len += n;
	}
	return r;
}

int tk_cg_find(int mount_fd, int depth, const char *suffix, int pid, uint64_t id,
               int max_dirs, char *out, size_t cap)
{
	struct find f = { max_dirs, depth, pid, id, suffix, out, cap, 0 };
	int r;

	if (cap == 0 || depth < 0 || depth > TK_CG_MAX_DEPTH || (pid <= 0 && id == 0))
		return -EINVAL;
	out[0] = '\0';
	r = find_dir(&f, mount_fd);
	return r > 0 ? 0 : r == 0 ? -ENOENT : r;
}

int tk_pidfd_pid(int pidfd, int *pid)
{
	char path[64], buf[1024];
	const char *p;
	ssize_t n;
	long v;

	snprintf(path, sizeof path, "/proc/self/fdinfo/%d", pidfd);
	n = tk_read_small(AT_FDCWD, path, buf, sizeof buf);
	if (n < 0)
		return (int)n;
	p = strstr(buf, "\nPid:\t");
	if (p == NULL)
		return -EBADF;
	v = strtol(p + 6, NULL, 10);
	if (v == -1)
		return -ESRCH;
	if (v == 0)
		return -EXDEV;
	if (v < 0 || v > 0x7fffffff)
		return -EBADMSG;
	*pid = (int)v;
	return 0;
}

/* PIDFD_GET_INFO's first version (64 bytes); later kernels append fields
 * and accept this size. */
struct tk_pidfd_info {
	uint64_t mask;
	uint64_t cgroupid;
	uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
	uint32_t spare0;
};
#define TK_PIDFD_GET_INFO _IOWR(0xFF, 11, struct tk_pidfd_info)
#define TK_PIDFD_INFO_CGROUPID (1ULL << 2)

int tk_pidfd_cgroup_id(int pidfd, uint64_t *id)
{
	struct tk_pidfd_info info;

	memset(&info, 0, sizeof info);
	info.mask = TK_PIDFD_INFO_CGROUPID;
	if (ioctl(pidfd, TK_PIDFD_GET_INFO, &info) < 0)
		return -errno;
	if (!(info.mask & TK_PIDFD_INFO_CGROUPID) || info.cgroupid == 0)
		return -EOPNOTSUPP;
	*id = info.cgroupid;
	return 0;
}
