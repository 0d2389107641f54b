/* cgroup ids for snapshots: where the cgroup2 hierarchy is mounted, a
 * process's cgroup id from /proc/<pid>/cgroup (for the /proc tier, which has
 * no kernel pointer to read it from), the ids of a subtree (snap:filter) and
 * the path of an id (snap:cgroup).
 *
 * A cgroup's id is its kernfs node id, which is also the inode number of
 * its directory on every cgroup2 mount (64-bit kernels): a stat gives it
 * without opening anything. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "cgroup.h"
#include "core.h"

#define CGROUP2_SUPER_MAGIC 0x63677270
#define MOUNTINFO_MAX (1u << 20)

/* ---- the mount ------------------------------------------------------------ */

static pthread_mutex_t mount_lock = PTHREAD_MUTEX_INITIALIZER;
static char mount_cached[TK_CG_PATH_MAX];

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape(char *s)
{
	char *out = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*out++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*out++ = *s;
		}
	}
	*out = '\0';
}

/* The first cgroup2 mount, unless a later one is rooted at our namespace's
 * root (as lua/takana/cgroup.lua chooses). */
static int mount_scan(char *out, size_t cap)
{
	char *text = malloc(MOUNTINFO_MAX), *line, *save = NULL;
	size_t len = 0;
	int fd, found = 0;
	ssize_t n;

	if (text == NULL)
		return -ENOMEM;
	fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		free(text);
		return -errno;
	}
	while (len < MOUNTINFO_MAX - 1 && (n = read(fd, text + len, MOUNTINFO_MAX - 1 - len)) > 0)
		len += (size_t)n;
	close(fd);
	text[len] = '\0';
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char root[TK_CG_PATH_MAX], mnt[TK_CG_PATH_MAX], fstype[64];
		const char *dash = strstr(line, " - ");
		size_t mlen;

		if (dash == NULL || sscanf(dash + 3, "%63s", fstype) != 1 || strcmp(fstype, "cgroup2") != 0)
			continue;
		if (sscanf(line, "%*s %*s %*s %4095s %4095s", root, mnt) != 2)
			continue;
		unescape(mnt);
		mlen = strlen(mnt);
		if (mlen >= cap || (found && strcmp(root, "/") != 0))
			continue;
		memcpy(out, mnt, mlen + 1);
		found = 1;
		if (strcmp(root, "/") == 0)
			break;
	}
	free(text);
	return found ? 0 : -ENOENT;
}

int tk_cgroup2_mount(char *out, size_t cap)
{
	struct statfs sfs;
	int err = 0;

	pthread_mutex_lock(&mount_lock);
	/* A statfs confirms the last answer; mountinfo is read only when
	 * there was none or it stopped being cgroup2. */
	if (mount_cached[0] == '\0' || statfs(mount_cached, &sfs) < 0 ||
	    sfs.f_type != CGROUP2_SUPER_MAGIC) {
		mount_cached[0] = '\0';
		err = mount_scan(mount_cached, sizeof mount_cached);
		if (err < 0)
			mount_cached[0] = '\0';
	}
	if (err == 0) {
		size_t len = strlen(mount_cached);

		if (len < cap)
			memcpy(out, mount_cached, len + 1);
		else
			err = -ENAMETOOLONG;
	}
	pthread_mutex_unlock(&mount_lock);
	return err;
}

/* ---- path -> id, for one /proc scan ---------------------------------------- */

struct tk_cgid_entry {
	char *path;
	uint64_t hash;
	uint64_t id;
};

static uint64_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull;   /* FNV-1a */

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h | 1;   /* 0 marks an empty slot */
}

int tk_cgid_cache_open(struct tk_cgid_cache *c)
{
	char mnt[TK_CG_PATH_MAX];
	int err;

	memset(c, 0, sizeof *c);
	c->mount_fd = -1;
	err = tk_cgroup2_mount(mnt, sizeof mnt);
	if (err == -ENOENT)
		return 0;      /* no hierarchy: every id reads 0 */
	if (err < 0)
		return err;
	c->mount_fd = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return c->mount_fd < 0 ? -errno : 0;
}

void tk_cgid_cache_close(struct tk_cgid_cache *c)
{
	for (size_t i = 0; i < c->cap; i++)
		free(c->slots[i].path);
	free(c->slots);
	if (c->mount_fd >= 0)
		close(c->mount_fd);
	memset(c, 0, sizeof *c);
	c->mount_fd = -1;
}

static int cache_grow(struct tk_cgid_cache *c)
{
	size_t cap = c->cap ? c->cap * 2 : 64;
	struct tk_cgid_entry *slots = calloc(cap, sizeof *slots);

	if (slots == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < c->cap; i++) {
		size_t j;

		if (c->slots[i].hash == 0)
			continue;
		for (j = c->slots[i].hash & (cap - 1); slots[j].hash; j = (j + 1) & (cap - 1))
			;
		slots[j] = c->slots[i];
	}
	free(c->slots);
	c->slots = slots;
	c->cap = cap;
	return 0;
}

/* A path as /proc/<pid>/cgroup shows it, relative to our cgroup namespace:
 * one leading "/..", which goes above the mount's root, has no directory
 * beneath the mount (id 0). */
static uint64_t path_stat_id(int mount_fd, const char *path)
{
	const char *rel = path;
	struct stat st;

	while (*rel == '/')
		rel++;
	if (strcmp(rel, "..") == 0 || strncmp(rel, "../", 3) == 0 || strstr(rel, "/../") != NULL)
		return 0;
	if (fstatat(mount_fd, *rel ? rel : ".", &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
		return 0;
	return (uint64_t)st.st_ino;
}

int tk_cgid_of_path(struct tk_cgid_cache *c, const char *path, size_t len, uint64_t *id)
{
	uint64_t h;
	size_t i;
	char *copy;

	*id = 0;
	if (c->mount_fd < 0 || len == 0 || memchr(path, '\0', len) != NULL)
		return 0;
	if (c->len * 2 >= c->cap && cache_grow(c) < 0)
		return -ENOMEM;
	h = hash_bytes(path, len);
	for (i = h & (c->cap - 1); c->slots[i].hash; i = (i + 1) & (c->cap - 1)) {
		if (c->slots[i].hash == h && strncmp(c->slots[i].path, path, len) == 0 &&
		    c->slots[i].path[len] == '\0') {
			*id = c->slots[i].id;
			return 0;
		}
	}
	copy = strndup(path, len);
	if (copy == NULL)
		return -ENOMEM;
	c->slots[i].path = copy;
	c->slots[i].hash = h;
	c->slots[i].id = path_stat_id(c->mount_fd, copy);
	c->len++;
	*id = c->slots[i].id;
	return 0;
}

int tk_proc_cgroup_id(int proc_fd, uint32_t pid, struct tk_cgid_cache *c, uint64_t *id)
{
	char path[32], buf[4096];
	const char *line, *end;
	ssize_t n;
	int fd;

	*id = 0;
	if (c->mount_fd < 0)
		return 0;
	snprintf(path, sizeof path, "%u/cgroup", pid);
	fd = openat(proc_fd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n < 0)
		return errno == ESRCH ? -ESRCH : -errno;
	buf[n] = '\0';
	/* The unified hierarchy's line is "0::/path"; on a hybrid host it
	 * comes after the v1 lines. */
	for (line = buf; line < buf + n; line = end + 1) {
		end = memchr(line, '\n', (size_t)(buf + n - line));
		if (end == NULL)
			end = buf + n;
		if (end - line >= 3 && memcmp(line, "0::", 3) == 0)
			return tk_cgid_of_path(c, line + 3, (size_t)(end - line - 3), id);
	}
	return 0;
}

/* ---- subtree ids and id -> path --------------------------------------------- */

struct walk {
	uint64_t *ids;
	size_t len, cap;
	size_t max_dirs;
	uint64_t want;         /* find: the id looked for */
	char *path;            /* find: the path so far, relative to the mount */
	size_t path_cap;
};

static int ids_push(struct walk *w, uint64_t id)
{
	if (w->len == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 64;
		uint64_t *ids = realloc(w->ids, cap * sizeof *ids);

		if (ids == NULL)
			return -ENOMEM;
		w->ids = ids;
		w->cap = cap;
	}
	w->ids[w->len++] = id;
	return 0;
}

/* Depth-first under dirfd (which the walk closes). Collects every
 * directory's id, or with want set stops at the directory whose id it is
 * (returns 1, its path in w->path). A directory removed meanwhile is
 * skipped. */
static int walk_dir(struct walk *w, int dir_fd, size_t path_len)
{
	DIR *d = fdopendir(dir_fd);
	struct dirent *e;
	int r = 0;

	if (d == NULL) {
		close(dir_fd);
		return -errno;
	}
	while (r == 0 && (e = readdir(d)) != NULL) {
		struct stat st;
		size_t n;
		int fd;

		if (e->d_type != DT_DIR || strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (w->len >= w->max_dirs) {
			r = -E2BIG;
			break;
		}
		fd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0) {
			if (errno == ENOENT || errno == ENOTDIR)
				continue;
			r = -errno;
			break;
		}
		if (fstat(fd, &st) < 0) {
			r = -errno;
			close(fd);
			break;
		}
		r = ids_push(w, (uint64_t)st.st_ino);
		if (r < 0) {
			close(fd);
			break;
		}
		if (w->want) {
			n = strlen(e->d_name);
			if (path_len + n + 2 > w->path_cap) {
				close(fd);
				r = -ENAMETOOLONG;
				break;
			}
			w->path[path_len] = '/';
			memcpy(w->path + path_len + 1, e->d_name, n + 1);
			if ((uint64_t)st.st_ino == w->want) {
				close(fd);
				r = 1;
				break;
			}
			r = walk_dir(w, fd, path_len + 1 + n);
			if (r == 0)
				w->path[path_len] = '\0';
		} else {
			r = walk_dir(w, fd, 0);
		}
	}
	closedir(d);
	return r;
}

#define WALK_MAX_DIRS 65536

int tk_cgroup_subtree_ids(const char *rel, int recursive, uint64_t **ids, size_t *n)
{
	char mnt[TK_CG_PATH_MAX];
	struct walk w;
	struct stat st;
	int mount_fd, fd, err;

	*ids = NULL;
	*n = 0;
	err = tk_cgroup2_mount(mnt, sizeof mnt);
	if (err < 0)
		return err;
	mount_fd = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (mount_fd < 0)
		return -errno;
	err = tk_cg_open(mount_fd, *rel ? rel : ".", &fd);
	close(mount_fd);
	if (err < 0)
		return err;
	memset(&w, 0, sizeof w);
	w.max_dirs = WALK_MAX_DIRS;
	if (fstat(fd, &st) < 0)
		err = -errno;
	if (err == 0)
		err = ids_push(&w, (uint64_t)st.st_ino);
	if (err == 0 && recursive)
		err = walk_dir(&w, fd, 0);
	else
		close(fd);
	if (err < 0) {
		free(w.ids);
		return err;
	}
	*ids = w.ids;
	*n = w.len;
	return 0;
}

/* The last paths found: one walk of the hierarchy per new cgroup at most,
 * each answer checked by a stat before it is given again. */
#define PATH_CACHE 64

static struct {
	uint64_t id;
	char *path;
} path_cache[PATH_CACHE];
static unsigned path_cache_next;

int tk_cgroup_id_path(uint64_t id, char *out, size_t cap)
{
	char mnt[TK_CG_PATH_MAX];
	struct walk w;
	int mount_fd, err;

	err = tk_cgroup2_mount(mnt, sizeof mnt);
	if (err < 0)
		return err;
	mount_fd = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (mount_fd < 0)
		return -errno;
	pthread_mutex_lock(&mount_lock);
	for (unsigned i = 0; i < PATH_CACHE; i++) {
		if (path_cache[i].path != NULL && path_cache[i].id == id &&
		    path_stat_id(mount_fd, path_cache[i].path) == id) {
			size_t len = strlen(path_cache[i].path);

			err = len < cap ? 0 : -ENAMETOOLONG;
			if (err == 0)
				memcpy(out, path_cache[i].path, len + 1);
			pthread_mutex_unlock(&mount_lock);
			close(mount_fd);
			return err;
		}
	}
	pthread_mutex_unlock(&mount_lock);
	if (path_stat_id(mount_fd, "/") == id) {
		close(mount_fd);
		if (cap < 2)
			return -ENAMETOOLONG;
		memcpy(out, "/", 2);
		return 0;
	}
	memset(&w, 0, sizeof w);
	w.max_dirs = WALK_MAX_DIRS;
	w.want = id;
	w.path = out;
	w.path_cap = cap;
	out[0] = '\0';
	err = walk_dir(&w, mount_fd, 0);
	free(w.ids);
	if (err == 0)
		return -ENOENT;
	if (err < 0)
		return err;
	pthread_mutex_lock(&mount_lock);
	free(path_cache[path_cache_next].path);
	path_cache[path_cache_next].path = strdup(out);
	path_cache[path_cache_next].id = id;
	path_cache_next = (path_cache_next + 1) % PATH_CACHE;
	pthread_mutex_unlock(&mount_lock);
	return 0;
}

/* The kept paths, freed when the module is unloaded (Lua closes it at
 * exit), so nothing outlives it. */
__attribute__((destructor)) static void path_cache_free(void)
{
	for (unsigned i = 0; i < PATH_CACHE; i++) {
		free(path_cache[i].path);
		path_cache[i].path = NULL;
	}
}
