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
#include "cgroup_id.h"
#include "cgroup_path.h"
#include "fork.h"
#include "mountinfo.h"
#include "procinfo.h"
#include "util.h"

#define CGROUP2_SUPER_MAGIC 0x63677270

/* ---- the mount ------------------------------------------------------------ */

static pthread_mutex_t mount_lock = PTHREAD_MUTEX_INITIALIZER;
static char mount_cached[TK_CG_PATH_MAX];
/* The mount's root as mountinfo's 4th field shows it: relative to our
 * cgroup namespace's root, "/../.." when it was mounted above it. */
static char mount_root_cached[TK_CG_PATH_MAX];
/* Bumped whenever mountinfo was read for the answer again. */
static unsigned mount_generation;

static void mount_fork(enum tk_fork_phase phase)
{
	if (phase == TK_FORK_PREPARE)
		pthread_mutex_lock(&mount_lock);
	else
		pthread_mutex_unlock(&mount_lock);
}

__attribute__((constructor)) static void mount_fork_register(void)
{
	tk_fork_register(TK_FORK_RANK_CGROUP_MOUNT, mount_fork);
}

/* The cgroup2 mount as mountinfo.c chooses it, for takana.cgroup too. */
static int mount_scan(char *out, size_t cap, char *root_out, size_t root_cap)
{
	struct tk_cgroup_mounts m;
	int err = tk_cgroup_mounts_read(&m);

	if (err < 0)
		return err;
	if (m.v2 == NULL)
		err = -ENOENT;
	else if (strlen(m.v2) >= cap || strlen(m.v2_root) >= root_cap)
		err = -ENAMETOOLONG;
	if (err == 0) {
		memcpy(out, m.v2, strlen(m.v2) + 1);
		memcpy(root_out, m.v2_root, strlen(m.v2_root) + 1);
	}
	tk_cgroup_mounts_free(&m);
	return err;
}

/* root, when not NULL, gets the mount's root (TK_CG_PATH_MAX bytes). */
static int mount_and_root(char *out, size_t cap, char *root)
{
	struct statfs sfs;
	int err = 0;

	pthread_mutex_lock(&mount_lock);
	/* A statfs confirms the last answer; mountinfo is read only when
	 * there was none or it stopped being cgroup2. */
	if (mount_cached[0] == '\0' || statfs(mount_cached, &sfs) < 0 ||
	    sfs.f_type != CGROUP2_SUPER_MAGIC) {
		mount_cached[0] = '\0';
		mount_generation++;
		err = mount_scan(mount_cached, sizeof mount_cached, mount_root_cached,
		                 sizeof mount_root_cached);
		if (err < 0)
			mount_cached[0] = '\0';
	}
	if (err == 0) {
		size_t len = strlen(mount_cached);

		if (len < cap)
			memcpy(out, mount_cached, len + 1);
		else
			err = -ENAMETOOLONG;
		if (root != NULL)
			memcpy(root, mount_root_cached, strlen(mount_root_cached) + 1);
	}
	pthread_mutex_unlock(&mount_lock);
	return err;
}

int tk_cgroup2_mount(char *out, size_t cap)
{
	return mount_and_root(out, cap, NULL);
}

unsigned tk_cgroup2_mount_generation(void)
{
	unsigned gen;

	pthread_mutex_lock(&mount_lock);
	gen = mount_generation;
	pthread_mutex_unlock(&mount_lock);
	return gen;
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

#define ANC_UNTRIED (-2)

int tk_cgid_cache_open(struct tk_cgid_cache *c)
{
	char mnt[TK_CG_PATH_MAX], root[TK_CG_PATH_MAX];
	int err;

	memset(c, 0, sizeof *c);
	c->mount_fd = -1;
	c->anc_depth = ANC_UNTRIED;
	err = mount_and_root(mnt, sizeof mnt, root);
	if (err == -ENOENT)
		return 0;      /* no hierarchy: every id reads 0 */
	if (err < 0)
		return err;
	c->mount_root = strdup(root);
	if (c->mount_root == NULL)
		return -ENOMEM;
	err = tk_cg_mount_open(mnt);
	if (err < 0) {
		free(c->mount_root);
		c->mount_root = NULL;
		return err;
	}
	c->mount_fd = err;
	return 0;
}

void tk_cgid_cache_close(struct tk_cgid_cache *c)
{
	for (size_t i = 0; i < c->cap; i++)
		free(c->slots[i].path);
	free(c->slots);
	free(c->mount_root);
	free(c->anc);
	if (c->mount_fd >= 0)
		close(c->mount_fd);
	memset(c, 0, sizeof *c);
	c->mount_fd = -1;
	c->anc_depth = ANC_UNTRIED;
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

/* The unified hierarchy's line of a <pid>/cgroup file, "0::/path" (on a
 * hybrid host after the v1 lines): the path, or NULL (procinfo.c parses). */
static const char *v2_cgroup_path(const char *buf, size_t n, size_t *len)
{
	const char *path;

	return tk_cgroup2_path(buf, n, &path, len) == 0 ? path : NULL;
}

/* How many ".." components lead path (the kernel prints shortest paths,
 * so ".." only leads); *rest is what follows, without a leading "/". */
static int ups(const char *path, const char **rest)
{
	int k = 0;

	while (*path == '/')
		path++;
	while (path[0] == '.' && path[1] == '.' && (path[2] == '/' || path[2] == '\0')) {
		k++;
		path += 2;
		while (*path == '/')
			path++;
	}
	*rest = path;
	return k;
}

static int has_dotdot(const char *path)
{
	const char *p;

	for (p = path; (p = strstr(p, "..")) != NULL; p += 2) {
		/* A name may contain "..": only a whole component climbs. */
		if ((p[2] == '/' || p[2] == '\0') && (p == path || p[-1] == '/'))
			return 1;
	}
	return 0;
}

/* The length of path's first n components (path has at least n). */
static size_t components_len(const char *path, int n)
{
	const char *p = path;

	for (; n > 0; n--) {
		const char *slash = strchr(p, '/');

		if (slash == NULL)
			return strlen(path);
		p = slash + 1;
	}
	return p > path ? (size_t)(p - path - 1) : 0;
}

/* Our own cgroup2 path as /proc/self/cgroup prints it, NUL-terminated. */
static int self_cgroup(char *out, size_t cap)
{
	char buf[4096];
	const char *cg;
	size_t len;
	ssize_t n = tk_read_small(AT_FDCWD, "/proc/self/cgroup", buf, sizeof buf);

	if (n < 0)
		return (int)n;
	cg = v2_cgroup_path(buf, (size_t)n, &len);
	if (cg == NULL || len >= cap)
		return -ENOENT;
	memcpy(out, cg, len);
	out[len] = '\0';
	return 0;
}

#define FIND_MAX_DIRS 100000

/* The mount shows the hierarchy from k levels above our cgroup namespace's
 * root, and no file names the directories in between: the one holding
 * our own process is searched for beneath the mount (as cgroup.lua's
 * locate does for one process), at most once a scan. c->anc becomes the
 * path beneath the mount of our namespace root's j-th ancestor, j being
 * how far above that root our own cgroup is (0 unless someone outside
 * moved us out), and c->anc_depth its depth, k - j; -1 when not found. */
static void locate_anc(struct tk_cgid_cache *c, int k)
{
	char self[TK_CG_PATH_MAX], again[TK_CG_PATH_MAX], *found;
	const char *rest;
	int j, r;

	c->anc_depth = -1;
	if (self_cgroup(self, sizeof self) < 0)
		return;
	j = ups(self, &rest);
	if (j > k || has_dotdot(rest) || (found = malloc(TK_CG_PATH_MAX)) == NULL)
		return;
	r = tk_cg_find(c->mount_fd, k - j, rest, (int)getpid(), 0, FIND_MAX_DIRS, found,
	               TK_CG_PATH_MAX);
	/* Moved meanwhile, the directory found could be the one we left for a
	 * namesake at the same depth: trust it only if nothing changed. */
	if (r == 0 && self_cgroup(again, sizeof again) == 0 && strcmp(self, again) == 0) {
		found[components_len(found, k - j)] = '\0';
		c->anc = found;
		c->anc_depth = k - j;
		return;
	}
	free(found);
}

/* Where path (as /proc/<pid>/cgroup prints it, relative to our cgroup
 * namespace's root) lies beneath the mount, whose root mountinfo prints
 * relative to that same root: into out, "." for the mount's root.
 * -ENOENT when this mount cannot show that cgroup: its id is then unknown
 * (0), never the id of whatever directory the path names from the mount's
 * root (the host's root cgroup, for "/" under a mount rooted at "/.."). */
static int path_beneath_mount(struct tk_cgid_cache *c, const char *path, char *out, size_t cap)
{
	const char *prest, *mrest;
	int j = ups(path, &prest), k = ups(c->mount_root, &mrest), w;
	size_t n;

	if (has_dotdot(prest) || has_dotdot(mrest) || j > k)
		return -ENOENT;
	if (j == k) {
		/* Both below the same directory: the mount's root must lead. */
		n = strlen(mrest);
		if (n > 0) {
			if (strncmp(prest, mrest, n) != 0 || (prest[n] != '/' && prest[n] != '\0'))
				return -ENOENT;
			for (prest += n; *prest == '/'; prest++)
				;
		}
		w = snprintf(out, cap, "%s", *prest ? prest : ".");
	} else {
		/* The mount's root is k - j levels above the directory the path
		 * climbs to, if it is that directory's ancestor at all. */
		if (*mrest)
			return -ENOENT;
		if (c->anc_depth == ANC_UNTRIED)
			locate_anc(c, k);
		if (c->anc_depth < k - j)
			return -ENOENT;
		n = components_len(c->anc, k - j);
		w = snprintf(out, cap, "%.*s%s%s", (int)n, c->anc, *prest ? "/" : "", prest);
	}
	return w < 0 || (size_t)w >= cap ? -ENAMETOOLONG : 0;
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
	char rel[TK_CG_PATH_MAX];
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
	c->slots[i].id = path_beneath_mount(c, copy, rel, sizeof rel) == 0
	                 ? path_stat_id(c->mount_fd, rel) : 0;
	c->len++;
	*id = c->slots[i].id;
	return 0;
}

int tk_proc_cgroup_id(int proc_fd, uint32_t pid, struct tk_cgid_cache *c, uint64_t *id)
{
	char path[32], buf[4096];
	const char *cg;
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

int tk_init_cgroup_id(int proc_fd, int *fd, struct tk_cgid_cache *c, uint64_t *id)
{
	char buf[4096], rel[TK_CG_PATH_MAX];
	const char *cg;
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
	cg = v2_cgroup_path(buf, (size_t)n, &len);
	if (cg == NULL || len == 0 || memchr(cg, '\0', len) != NULL || c->mount_fd < 0)
		return 0;
	/* Looked up afresh, not through the cache of paths: c may serve many
	 * snapshots, and a cgroup removed and made again has a new id. */
	buf[(size_t)(cg - buf) + len] = '\0';   /* within the n bytes read */
	free(c->anc);
	c->anc = NULL;
	c->anc_depth = ANC_UNTRIED;
	if (path_beneath_mount(c, cg, rel, sizeof rel) == 0)
		*id = path_stat_id(c->mount_fd, rel);
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
