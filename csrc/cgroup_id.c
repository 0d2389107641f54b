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
#include "util.h"

#define CGROUP2_SUPER_MAGIC 0x63677270
#define MOUNTINFO_MAX (1u << 20)

/* ---- the mount ------------------------------------------------------------ */

static pthread_mutex_t mount_lock = PTHREAD_MUTEX_INITIALIZER;
static char mount_cached[TK_CG_PATH_MAX];

void tk_cgroup_mount_fork(enum tk_fork_phase phase)
{
	if (phase == TK_FORK_PREPARE)
		pthread_mutex_lock(&mount_lock);
	else
		pthread_mutex_unlock(&mount_lock);
}

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
	err = tk_cg_mount_open(mnt);
	if (err < 0)
		return err;
	c->mount_fd = err;
	return 0;
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

/* A path as /proc/<pid>/cgroup shows it, relative to our cgroup namespace,
 * made relative to the mount's root ("." for the root); NULL for one
 * leading "/..", which goes above the mount's root and has no directory
 * beneath it (id 0). */
static const char *path_beneath_mount(const char *path)
{
	const char *rel = path;

	while (*rel == '/')
		rel++;
	if (strcmp(rel, "..") == 0 || strncmp(rel, "../", 3) == 0 || strstr(rel, "/../") != NULL)
		return NULL;
	return *rel ? rel : ".";
}

static uint64_t path_stat_id(int dirfd, const char *rel)
{
	struct stat st;

	if (rel == NULL || fstatat(dirfd, rel, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
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
	c->slots[i].id = path_stat_id(c->mount_fd, path_beneath_mount(copy));
	c->len++;
	*id = c->slots[i].id;
	return 0;
}

/* The unified hierarchy's line of a <pid>/cgroup file, "0::/path" (on a
 * hybrid host after the v1 lines): the path, or NULL. */
static char *v2_cgroup_path(char *buf, size_t n, size_t *len)
{
	char *line, *end;

	for (line = buf; line < buf + n; line = end + 1) {
		end = memchr(line, '\n', (size_t)(buf + n - line));
		if (end == NULL)
			end = buf + n;
		if (end - line >= 3 && memcmp(line, "0::", 3) == 0) {
			*len = (size_t)(end - line - 3);
			return line + 3;
		}
	}
	return NULL;
}

int tk_proc_cgroup_id(int proc_fd, uint32_t pid, struct tk_cgid_cache *c, uint64_t *id)
{
	char path[32], buf[4096], *cg;
	size_t len;
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
	cg = v2_cgroup_path(buf, (size_t)n, &len);
	return cg != NULL ? tk_cgid_of_path(c, cg, len, id) : 0;
}

int tk_init_cgroup_id(int proc_fd, int *fd, const char *mount, uint64_t *id)
{
	char buf[4096], full[TK_CG_PATH_MAX], *cg;
	const char *rel;
	size_t len;
	ssize_t n;

	*id = 0;
	if (*fd < 0) {
		*fd = openat(proc_fd, "1/cgroup", O_RDONLY | O_CLOEXEC);
		if (*fd < 0)
			return -errno;
	}
	n = pread(*fd, buf, sizeof buf - 1, 0);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	cg = v2_cgroup_path(buf, (size_t)n, &len);
	if (cg == NULL)
		return 0;
	/* No cache to open for one path: the whole path, one stat. */
	cg[len] = '\0';
	rel = path_beneath_mount(cg);
	if (rel != NULL && (size_t)snprintf(full, sizeof full, "%s/%s", mount, rel) >= sizeof full)
		return 0;
	*id = path_stat_id(AT_FDCWD, rel != NULL ? full : NULL);
	return 0;
}

/* ---- subtree ids ----------------------------------------------------------- */

struct ids {
	uint64_t *v;
	size_t len, cap;
};

static int ids_push(void *ctx, uint64_t id, const char *rel)
{
	struct ids *w = ctx;
	uint64_t *v;

	(void)rel;
	v = tk_grow(w->v, &w->cap, w->len + 1, sizeof *v, 64);
	if (v == NULL)
		return -ENOMEM;
	w->v = v;
	w->v[w->len++] = id;
	return 0;
}

#define WALK_MAX_DIRS 65536

int tk_cgroup_subtree_ids(const char *rel, int recursive, uint64_t **ids, size_t *n)
{
	char mnt[TK_CG_PATH_MAX];
	struct ids w;
	int mount_fd, fd, err;

	*ids = NULL;
	*n = 0;
	err = tk_cgroup2_mount(mnt, sizeof mnt);
	if (err < 0)
		return err;
	mount_fd = tk_cg_mount_open(mnt);
	if (mount_fd < 0)
		return mount_fd;
	err = tk_cg_open(mount_fd, *rel ? rel : ".", &fd);
	close(mount_fd);
	if (err < 0)
		return err;
	memset(&w, 0, sizeof w);
	if (recursive) {
		err = tk_cg_walk_ids(fd, WALK_MAX_DIRS, ids_push, &w);
	} else {
		uint64_t id;

		err = tk_cg_id(fd, &id);
		if (err == 0)
			err = ids_push(&w, id, "");
	}
	close(fd);
	if (err < 0) {
		free(w.v);
		return err;
	}
	*ids = w.v;
	*n = w.len;
	return 0;
}
