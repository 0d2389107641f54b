/* cgroup ids to paths. A cgroup2 id is its kernfs node id: the inode number
 * of its directory and the payload of its file handle. With
 * CAP_DAC_READ_SEARCH, open_by_handle_at opens the directory straight from
 * the id; without it, a walk of the hierarchy reads the ids from readdir's
 * d_ino (no open per directory but the ones descended into). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cgroup.h"

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
	int budget;
	tk_cg_id_cb cb;
	void *ctx;
	char path[4096];
	size_t len;
};

static int idwalk_dir(struct idwalk *w, int fd, int depth)
{
	int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *de;
	DIR *d;
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
		size_t n = strlen(de->d_name), len = w->len;
		int cfd;
		if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (w->budget-- <= 0) {
			r = -E2BIG;
			break;
		}
		if (len + n + 2 > sizeof w->path) {
			r = -ENAMETOOLONG;
			break;
		}
		if (len > 0)
			w->path[w->len++] = '/';
		memcpy(w->path + w->len, de->d_name, n + 1);
		w->len += n;
		r = w->cb(w->ctx, (uint64_t)de->d_ino, w->path);
		if (r == 0 && depth < CG_MAX_DEPTH) {
			cfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
			/* Removed since the listing: nothing below it either. */
			if (cfd < 0 && errno != ENOENT)
				r = -errno;
			if (cfd >= 0) {
				r = idwalk_dir(w, cfd, depth + 1);
				close(cfd);
			}
		}
		w->len = len;
		w->path[len] = '\0';
	}
	if (r == 0 && de == NULL && errno != 0)
		r = -errno;
	closedir(d);
	return r;
}

int tk_cg_walk_ids(int mount_fd, int max_dirs, tk_cg_id_cb cb, void *ctx)
{
	struct idwalk w;
	uint64_t root;
	int r;

	w.budget = max_dirs;
	w.cb = cb;
	w.ctx = ctx;
	w.path[0] = '\0';
	w.len = 0;
	r = tk_cg_id(mount_fd, &root);
	if (r == 0)
		r = cb(ctx, root, "");
	if (r == 0)
		r = idwalk_dir(&w, mount_fd, 0);
	return r;
}
