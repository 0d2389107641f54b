/* cgroup ids to paths. A cgroup2 id is its kernfs node id: the inode number
 * of its directory and the payload of its file handle. With
 * CAP_DAC_READ_SEARCH, open_by_handle_at opens the directory straight from
 * the id; without it, a walk of the hierarchy reads the ids from readdir's
 * d_ino (no open per directory but the ones descended into). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cgroup.h"
#include "cgroup_path.h"
#include "util.h"

/* include/linux/exportfs.h: the handle kernfs encodes, a u64 id. */
#define FILEID_KERNFS 0xfe
#define CG_MAX_DEPTH 128

static int fd_path(int fd, char *out, size_t cap)
{
	char link[64];
	ssize_t n;

	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	n = readlink(link, out, cap);
	if (n < 0)
		return -errno;
	if ((size_t)n >= cap)
		return -ENAMETOOLONG;
	out[n] = '\0';
	return 0;
}

int tk_cg_path_by_handle(int mount_fd, uint64_t id, char *out, size_t cap)
{
	struct {
		struct file_handle fh;
		unsigned char bytes[8];
	} h;
	char mnt[4096];
	struct stat st;
	uint64_t got;
	size_t mlen;
	int fd, r;

	h.fh.handle_bytes = sizeof id;
	h.fh.handle_type = FILEID_KERNFS;
	memcpy(h.fh.f_handle, &id, sizeof id);
	fd = (int)syscall(SYS_open_by_handle_at, mount_fd, &h.fh, O_PATH | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = fstat(fd, &st) < 0 ? -errno : 0;
	/* A handle of a file inside a cgroup would open too: directories only. */
	if (r == 0 && !S_ISDIR(st.st_mode))
		r = -ENOTDIR;
	if (r == 0)
		r = tk_cg_id(fd, &got);
	if (r == 0 && got != id)
		r = -ESTALE;
	if (r == 0)
		r = fd_path(fd, out, cap);
	close(fd);
	if (r == 0)
		r = fd_path(mount_fd, mnt, sizeof mnt);
	if (r < 0)
		return r;
	/* The path as this process sees it, beneath the mount: the rest. A
	 * cgroup outside the mount's view (another cgroup namespace) does not
	 * start with it. */
	mlen = strlen(mnt);
	if (strcmp(mnt, "/") == 0)
		mlen = 0;
	if (strncmp(out, mnt, mlen) != 0 || (out[mlen] != '/' && out[mlen] != '\0'))
		return -EXDEV;
	memmove(out, out + mlen + (out[mlen] == '/'), strlen(out + mlen + (out[mlen] == '/')) + 1);
	return 0;
}

struct idwalk {
	int budget, depth;
	tk_cg_id_cb cb;
	void *ctx;
	char path[4096];
	size_t len;
};

static int idwalk_child(void *ctx, int parent_fd, const char *name, uint64_t ino)
{
	struct idwalk *w = ctx;
	size_t n = strlen(name), len = w->len;
	int cfd, r;

	if (w->budget-- <= 0)
		return -E2BIG;
	/* A path past PATH_MAX names nothing a caller could use, nor does any
	 * below it: that subtree is left out, not the whole walk failed (one
	 * user's deep delegated subtree would break every lookup). */
	if (len + n + 2 > sizeof w->path)
		return 0;
	if (len > 0)
		w->path[w->len++] = '/';
	memcpy(w->path + w->len, name, n + 1);
	w->len += n;
	r = w->cb(w->ctx, ino, w->path);
	if (r == 0 && w->depth < CG_MAX_DEPTH) {
		cfd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		/* Removed since the listing, or another user's we may not
		 * enter: nothing below it to name, and the walk goes on. */
		if (cfd < 0 && errno != ENOENT && errno != EACCES)
			r = -errno;
		if (cfd >= 0) {
			w->depth++;
			r = tk_cg_each_subdir(cfd, idwalk_child, w);
			w->depth--;
			close(cfd);
		}
	}
	w->len = len;
	w->path[len] = '\0';
	return r;
}

int tk_cg_walk_ids(int mount_fd, int max_dirs, tk_cg_id_cb cb, void *ctx)
{
	struct idwalk w;
	uint64_t root;
	int r;

	w.budget = max_dirs;
	w.depth = 0;
	w.cb = cb;
	w.ctx = ctx;
	w.path[0] = '\0';
	w.len = 0;
	r = tk_cg_id(mount_fd, &root);
	if (r == 0)
		r = cb(ctx, root, "");
	if (r == 0)
		r = tk_cg_each_subdir(mount_fd, idwalk_child, &w);
	return r;
}

/* ---- the resolver ------------------------------------------------------------ */

/* The cache: id -> the cgroup's directory as an absolute path (the mount's
 * plus the cgroup's), in an open-addressed table (ids are never 0). An
 * entry whose cgroup is gone keeps its id with no path (a tombstone, so
 * probes pass it) until the table is rebuilt. */

void tk_cgpath_cache_init(struct tk_cgpath_cache *c)
{
	memset(c, 0, sizeof *c);
	c->by_handle = -1;
	c->watch_fd = -1;
}

static void cache_drop(struct tk_cgpath_cache *c)
{
	for (size_t i = 0; i < c->cap; i++)
		free(c->v[i].abs);
	free(c->v);
	c->v = NULL;
	c->len = 0;
	c->cap = 0;
}

static void watch_close(struct tk_cgpath_cache *c)
{
	if (c->watch_fd >= 0)
		close(c->watch_fd);
	c->watch_fd = -1;
}

void tk_cgpath_cache_free(struct tk_cgpath_cache *c)
{
	cache_drop(c);
	free(c->mount);
	watch_close(c);
	if (c->fork_page != NULL)
		munmap(c->fork_page, TK_CGPATH_PAGE);
	tk_cgpath_cache_init(c);
}

/* The removal watch: an inotify descriptor with IN_DELETE on the parent
 * of every cached cgroup, which the kernel queues before rmdir returns
 * (from any process or mount namespace: the marks are on the inodes). An
 * empty queue (one read) means no cached answer can have gone stale since
 * the last check; any event (a removal anywhere watched, an overflow, an
 * unmount) starts a new generation, in which each entry is checked again
 * by its fstatat once. A forked child shares the parent's queue, where
 * its reads would steal the parent's news: a page the kernel wipes in a
 * child (MADV_WIPEONFORK; else the pid) tells it, and the child starts a
 * watch of its own. Without inotify every hit is checked by fstatat. */
static void watch_start(struct tk_cgpath_cache *c)
{
	c->watch_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (c->fork_page == NULL) {
		void *p = mmap(NULL, TK_CGPATH_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		               -1, 0);

		if (p != MAP_FAILED && madvise(p, TK_CGPATH_PAGE, MADV_WIPEONFORK) == 0)
			c->fork_page = p;
		else if (p != MAP_FAILED)
			munmap(p, TK_CGPATH_PAGE);
	}
	if (c->fork_page != NULL)
		*(volatile unsigned char *)c->fork_page = 1;
	c->owner = getpid();
	c->gen++;
}

/* Whether the watch vouches for entries checked in this generation: drains
 * the queue first. */
static int watch_fresh(struct tk_cgpath_cache *c)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t n;

	if (c->watch_fd >= 0 && (c->fork_page != NULL ? *(volatile unsigned char *)c->fork_page == 0
	                                              : getpid() != c->owner)) {
		/* A forked child: the entries were vouched for by the parent's
		 * queue, which stays the parent's. */
		watch_close(c);
		cache_drop(c);
		c->watch_tried = 0;
	}
	if (c->watch_fd < 0) {
		if (c->watch_tried)
			return 0;
		c->watch_tried = 1;
		watch_start(c);
		if (c->watch_fd < 0)
			return 0;
	}
	while ((n = read(c->watch_fd, buf, sizeof buf)) > 0)
		c->gen++;
	if (n < 0 && errno != EAGAIN && errno != EINTR) {
		watch_close(c);
		return 0;
	}
	return 1;
}

/* Puts abs's parent (abs itself for the mount's root) under the watch. */
static int watch_add(struct tk_cgpath_cache *c, char *abs, size_t off)
{
	char *slash = abs[off] ? strrchr(abs + off, '/') : NULL;
	int wd;

	if (c->watch_fd < 0)
		return 0;
	if (slash != NULL) {
		if (slash == abs) {
			wd = inotify_add_watch(c->watch_fd, "/", IN_DELETE | IN_ONLYDIR);
		} else {
			*slash = '\0';
			wd = inotify_add_watch(c->watch_fd, abs, IN_DELETE | IN_ONLYDIR);
			*slash = '/';
		}
	} else {
		wd = inotify_add_watch(c->watch_fd, abs, IN_DELETE | IN_ONLYDIR);
	}
	return wd >= 0;
}

static size_t slot_hash(uint64_t id, size_t cap)
{
	return (size_t)((id * 0x9e3779b97f4a7c15ull) >> 17) & (cap - 1);
}

/* The slot holding id, or the empty one where it would go (cap > len). */
static struct tk_cgpath_entry *slot_of(const struct tk_cgpath_cache *c, uint64_t id)
{
	size_t i = slot_hash(id, c->cap);

	while (c->v[i].id != 0 && c->v[i].id != id)
		i = (i + 1) & (c->cap - 1);
	return &c->v[i];
}

/* Room for one more id: a table at most half full, rebuilt without its
 * tombstones when it grows. */
static int cache_room(struct tk_cgpath_cache *c)
{
	struct tk_cgpath_entry *old = c->v, *v;
	size_t oldcap = c->cap, live = 0, cap = 64;

	if ((c->len + 1) * 2 <= c->cap)
		return 0;
	for (size_t i = 0; i < oldcap; i++)
		live += old[i].abs != NULL;
	while (cap < (live + 1) * 4)
		cap *= 2;
	v = calloc(cap, sizeof *v);
	if (v == NULL)
		return -ENOMEM;
	c->v = v;
	c->cap = cap;
	c->len = 0;
	for (size_t i = 0; i < oldcap; i++) {
		if (old[i].abs == NULL)
			continue;
		*slot_of(c, old[i].id) = old[i];
		c->len++;
	}
	free(old);
	return 0;
}

/* Caches id's path: rel is relative to the mount ("" for its root). */
static int cache_put(struct tk_cgpath_cache *c, uint64_t id, const char *rel)
{
	size_t mlen, rlen = strlen(rel);
	struct tk_cgpath_entry *e;
	char *abs;
	int r;

	if (c->mount == NULL)
		return -EINVAL;
	/* First: in a forked child it empties the cache. */
	watch_fresh(c);
	r = cache_room(c);
	if (r < 0)
		return r;
	mlen = strlen(c->mount);
	abs = malloc(mlen + rlen + 2);
	if (abs == NULL)
		return -ENOMEM;
	/* A mount at "/" adds nothing before the cgroup's "/a/b". */
	if (strcmp(c->mount, "/") == 0)
		mlen = 0;
	memcpy(abs, c->mount, mlen);
	abs[mlen] = '/';
	memcpy(abs + mlen + 1, rel, rlen + 1);
	if (rlen == 0 && mlen > 0)
		abs[mlen] = '\0';
	e = slot_of(c, id);
	if (e->id == 0)
		c->len++;
	free(e->abs);
	e->id = id;
	e->abs = abs;
	e->off = mlen;
	/* Watched from now on, and checked once by fstatat at its first use
	 * (a generation before this one): a removal between the resolver's
	 * answer and the watch is seen by that check, any later one by the
	 * watch. */
	e->watched = watch_add(c, abs, mlen);
	e->gen = c->gen - 1;
	return 0;
}

/* Whether the cached abs still names cgroup id: one fstatat, since a
 * cgroup2 directory's inode number is its id (kernfs), on the mount's
 * filesystem. Where the two differ (a kernel whose inode numbers are not
 * the ids), the id is read from a handle as the resolver reads it. */
static int still(const struct tk_cgpath_cache *c, const char *abs, uint64_t id)
{
	struct stat st;
	uint64_t got;
	int fd, r;

	if (fstatat(AT_FDCWD, abs, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode) ||
	    st.st_dev != c->dev)
		return 0;
	if ((uint64_t)st.st_ino == id)
		return 1;
	fd = open(abs, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return 0;
	r = tk_cg_id(fd, &got);
	close(fd);
	return r == 0 && got == id;
}

const char *tk_cgpath_cached(struct tk_cgpath_cache *c, uint64_t id)
{
	struct tk_cgpath_entry *e;
	int fresh;

	if (c->len == 0 || id == 0)
		return NULL;
	/* First: in a forked child it empties the cache. */
	fresh = watch_fresh(c);
	if (c->len == 0)
		return NULL;
	e = slot_of(c, id);
	if (e->abs == NULL)
		return NULL;
	if (fresh && e->watched && e->gen == c->gen)
		return e->abs[e->off] ? e->abs + e->off : "/";
	e->gen = c->gen;
	if (!still(c, e->abs, id)) {
		/* Removed (or its name now another cgroup's): asked again. */
		free(e->abs);
		e->abs = NULL;
		return NULL;
	}
	return e->abs[e->off] ? e->abs + e->off : "/";
}

struct collect {
	struct tk_cgpath_cache *c;
};

static int collect_id(void *ctx, uint64_t id, const char *rel)
{
	struct collect *w = ctx;

	return cache_put(w->c, id, rel);
}

static int copy_out(const char *path, char *out, size_t cap)
{
	size_t n = strlen(path);

	if (n >= cap)
		return -ENAMETOOLONG;
	memcpy(out, path, n + 1);
	return 0;
}

/* The cache from now on serves mount (whose filesystem is mfd's). */
static int cache_mount(struct tk_cgpath_cache *c, const char *mount, int mfd)
{
	struct stat st;

	if (c->mount != NULL && strcmp(c->mount, mount) == 0)
		return 0;
	cache_drop(c);
	free(c->mount);
	c->mount = NULL;
	if (fstat(mfd, &st) < 0)
		return -errno;
	c->mount = strdup(mount);
	if (c->mount == NULL)
		return -ENOMEM;
	c->dev = st.st_dev;
	return 0;
}

int tk_cgroup_id_path(struct tk_cgpath_cache *c, const char *mount, uint64_t id, char *out,
                      size_t cap, enum tk_cgpath_step *step)
{
	struct collect w = { c };
	const char *hit;
	char rel[4096] = "";
	int mfd, r;

	if (c->mount != NULL && strcmp(c->mount, mount) == 0) {
		hit = tk_cgpath_cached(c, id);
		if (hit != NULL) {
			*step = TK_CGPATH_WALK;
			return copy_out(hit, out, cap);
		}
	}
	mfd = tk_cg_mount_open(mount);
	if (mfd < 0) {
		*step = c->by_handle != 0 ? TK_CGPATH_OPEN : TK_CGPATH_WALK_OPEN;
		return mfd;
	}
	r = cache_mount(c, mount, mfd);
	if (r < 0) {
		*step = TK_CGPATH_OPEN;
		goto done;
	}
	if (c->by_handle != 0) {
		r = tk_cg_path_by_handle(mfd, id, rel, sizeof rel);
		if (r == 0) {
			c->by_handle = 1;
			goto found;
		}
		*step = TK_CGPATH_HANDLE;
		if (r == -ESTALE || r == -ENOENT) {
			r = -ENOENT;
			goto done;
		}
		/* Refused (no CAP_DAC_READ_SEARCH, or no such call): the walk
		 * from now on. Outside the mount's view: the walk this time. */
		if (r == -EPERM || r == -EACCES || r == -EOPNOTSUPP || r == -ENOSYS)
			c->by_handle = 0;
		else if (r != -EXDEV)
			goto done;
	}
	/* A walk: every cgroup's path, cached afresh. */
	cache_drop(c);
	r = tk_cg_walk_ids(mfd, TK_CGPATH_MAX_DIRS, collect_id, &w);
	if (r < 0) {
		cache_drop(c);
		*step = TK_CGPATH_WALK;
		goto done;
	}
	hit = tk_cgpath_cached(c, id);
	if (hit == NULL) {
		*step = TK_CGPATH_MISSING;
		r = -ENOENT;
	} else {
		*step = TK_CGPATH_WALK;
		r = copy_out(hit, out, cap);
	}
	goto done;
found:
	r = cache_put(c, id, rel);
	hit = r == 0 ? tk_cgpath_cached(c, id) : NULL;
	if (hit != NULL) {
		r = copy_out(hit, out, cap);
	} else {
		/* Not cached (no memory, or gone already): spelled here. */
		*step = TK_CGPATH_HANDLE;
		r = snprintf(out, cap, "/%s", rel) >= (int)cap ? -ENAMETOOLONG : 0;
	}
done:
	close(mfd);
	return r;
}
