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

void tk_cgpath_cache_init(struct tk_cgpath_cache *c)
{
	memset(c, 0, sizeof *c);
	c->by_handle = -1;
}

static void cache_drop(struct tk_cgpath_cache *c)
{
	for (size_t i = 0; i < c->len; i++)
		free(c->v[i].path);
	free(c->v);
	c->v = NULL;
	c->len = 0;
}

void tk_cgpath_cache_free(struct tk_cgpath_cache *c)
{
	cache_drop(c);
	free(c->mount);
	tk_cgpath_cache_init(c);
}

static int entry_cmp(const void *a, const void *b)
{
	const struct tk_cgpath_entry *x = a, *y = b;

	return x->id < y->id ? -1 : x->id > y->id;
}

static const char *cache_find(const struct tk_cgpath_cache *c, uint64_t id)
{
	struct tk_cgpath_entry key = { id, NULL }, *e;

	if (c->len == 0)
		return NULL;
	e = bsearch(&key, c->v, c->len, sizeof *c->v, entry_cmp);
	return e ? e->path : NULL;
}

struct collect {
	struct tk_cgpath_entry *v;
	size_t len, cap;
};

static int collect_id(void *ctx, uint64_t id, const char *rel)
{
	struct collect *w = ctx;
	struct tk_cgpath_entry *v = tk_grow(w->v, &w->cap, w->len + 1, sizeof *v, 64);

	if (v == NULL)
		return -ENOMEM;
	w->v = v;
	v[w->len].id = id;
	v[w->len].path = strdup(rel);
	if (v[w->len].path == NULL)
		return -ENOMEM;
	w->len++;
	return 0;
}

static int copy_out(const char *rel, char *out, size_t cap)
{
	size_t n = strlen(rel);

	if (n >= cap)
		return -ENAMETOOLONG;
	memcpy(out, rel, n + 1);
	return 0;
}

/* Whether the cached rel still names cgroup id beneath the mount. */
static int still(int mfd, const char *rel, uint64_t id)
{
	uint64_t got;
	int fd, r = tk_cg_open(mfd, *rel ? rel : ".", &fd);

	if (r < 0)
		return 0;
	r = tk_cg_id(fd, &got);
	close(fd);
	return r == 0 && got == id;
}

int tk_cgroup_id_path(struct tk_cgpath_cache *c, const char *mount, uint64_t id, char *out,
                      size_t cap, enum tk_cgpath_step *step)
{
	struct collect w = { NULL, 0, 0 };
	const char *rel;
	int mfd = tk_cg_mount_open(mount), r;

	if (mfd < 0) {
		*step = c->by_handle != 0 ? TK_CGPATH_OPEN : TK_CGPATH_WALK_OPEN;
		return mfd;
	}
	if (c->by_handle != 0) {
		r = tk_cg_path_by_handle(mfd, id, out, cap);
		if (r == 0) {
			c->by_handle = 1;
			goto done;
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
	if (c->mount == NULL || strcmp(c->mount, mount) != 0) {
		cache_drop(c);
		free(c->mount);
		c->mount = strdup(mount);
		if (c->mount == NULL) {
			*step = TK_CGPATH_WALK;
			r = -ENOMEM;
			goto done;
		}
	}
	rel = cache_find(c, id);
	if (rel != NULL && still(mfd, rel, id)) {
		r = copy_out(rel, out, cap);
		*step = TK_CGPATH_WALK;
		goto done;
	}
	r = tk_cg_walk_ids(mfd, TK_CGPATH_MAX_DIRS, collect_id, &w);
	if (r < 0) {
		struct tk_cgpath_cache partial = { NULL, w.v, w.len, 0 };

		cache_drop(&partial);
		*step = TK_CGPATH_WALK;
		goto done;
	}
	cache_drop(c);
	c->v = w.v;
	c->len = w.len;
	if (c->len > 1)
		qsort(c->v, c->len, sizeof *c->v, entry_cmp);
	rel = cache_find(c, id);
	if (rel == NULL) {
		*step = TK_CGPATH_MISSING;
		r = -ENOENT;
	} else {
		*step = TK_CGPATH_WALK;
		r = copy_out(rel, out, cap);
	}
done:
	close(mfd);
	return r;
}
