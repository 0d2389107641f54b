/* cgroup ids to paths. A cgroup2 id is its kernfs node id: the inode number
 * of its directory and the payload of its file handle. With
 * CAP_DAC_READ_SEARCH, open_by_handle_at opens the directory straight from
 * the id; without it, a walk of the hierarchy reads the ids from readdir's
 * d_ino (no open per directory but the ones descended into). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cgroup.h"
#include "cgroup_path.h"

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
	if (len + n + 2 > sizeof w->path)
		return -ENAMETOOLONG;
	if (len > 0)
		w->path[w->len++] = '/';
	memcpy(w->path + w->len, name, n + 1);
	w->len += n;
	r = w->cb(w->ctx, ino, w->path);
	if (r == 0 && w->depth < CG_MAX_DEPTH) {
		cfd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		/* Removed since the listing: nothing below it either. */
		if (cfd < 0 && errno != ENOENT)
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
