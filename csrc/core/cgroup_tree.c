/* A cgroup subtree kept open: a directory fd per cgroup, kept true by
 * inotify (IN_CREATE/IN_DELETE/IN_MOVED_* on every directory) and by
 * listing a directory again whenever the watch cannot vouch for it. A
 * listing is the truth; the watch only says which listings can be saved. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cgroup.h"
#include "cgroup_tree.h"
#include "self.h"
#include "util.h"

#define WATCH_MASK (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | \
                    IN_MOVE_SELF | IN_ONLYDIR)

/* ---- the indexes: path -> node and wd -> node ----------------------------- */

static size_t hash_str(const char *s)
{
	uint64_t h = 14695981039346656037ull;   /* FNV-1a */

	while (*s)
		h = (h ^ (unsigned char)*s++) * 1099511628211ull;
	return (size_t)(h ^ (h >> 32));
}

static size_t hash_int(int v)
{
	uint32_t h = (uint32_t)v * 2654435761u;

	return h;
}

static void index_put(int *slot, size_t cap, size_t h, int i)
{
	size_t k = h & (cap - 1);

	while (slot[k] >= 0)
		k = (k + 1) & (cap - 1);
	slot[k] = i;
}

/* Both indexes again from the nodes not DEAD, room for twice as many. */
static int index_rebuild(struct tk_cg_tree *t)
{
	size_t cap = 64;
	int *p, *w;

	while (cap < (t->len + 1) * 2)
		cap *= 2;
	p = malloc(cap * sizeof *p);
	w = malloc(cap * sizeof *w);
	if (p == NULL || w == NULL) {
		free(p);
		free(w);
		return -ENOMEM;
	}
	memset(p, 0xff, cap * sizeof *p);
	memset(w, 0xff, cap * sizeof *w);
	for (size_t i = 0; i < t->len; i++) {
		if (t->v[i].state == TK_CG_NODE_DEAD)
			continue;
		index_put(p, cap, hash_str(t->v[i].path), (int)i);
		if (t->v[i].wd >= 0)
			index_put(w, cap, hash_int(t->v[i].wd), (int)i);
	}
	free(t->by_path);
	free(t->by_wd);
	t->by_path = p;
	t->by_wd = w;
	t->by_path_cap = t->by_wd_cap = cap;
	return 0;
}

/* The node not DEAD at path, or -1. */
static int find_path(const struct tk_cg_tree *t, const char *path)
{
	size_t cap = t->by_path_cap;

	for (size_t k = hash_str(path) & (cap - 1); t->by_path[k] >= 0; k = (k + 1) & (cap - 1)) {
		const struct tk_cg_node *n = &t->v[t->by_path[k]];
		if (n->state != TK_CG_NODE_DEAD && strcmp(n->path, path) == 0)
			return t->by_path[k];
	}
	return -1;
}

/* The node not DEAD watched by wd, or -1. */
static int find_wd(const struct tk_cg_tree *t, int wd)
{
	size_t cap = t->by_wd_cap;

	for (size_t k = hash_int(wd) & (cap - 1); t->by_wd[k] >= 0; k = (k + 1) & (cap - 1)) {
		const struct tk_cg_node *n = &t->v[t->by_wd[k]];
		if (n->state != TK_CG_NODE_DEAD && n->wd == wd)
			return t->by_wd[k];
	}
	return -1;
}

/* ---- nodes ---------------------------------------------------------------- */

/* The watch of node i, or wd -1 (listed on every sync) with the reason
 * kept: inotify_add_watch takes a path, and /proc/self/fd/N is this very
 * directory, never another one made since under its name. */
static void watch_add(struct tk_cg_tree *t, size_t i)
{
	char link[64];
	int wd;

	t->v[i].wd = -1;
	if (t->inotify_fd < 0)
		return;
	snprintf(link, sizeof link, "/proc/self/fd/%d", t->v[i].fd);
	wd = inotify_add_watch(t->inotify_fd, link, WATCH_MASK);
	if (wd < 0) {
		if (t->watch_err == 0) {
			t->watch_err = -errno;
			t->watch_step = "inotify_add_watch";
		}
		return;
	}
	t->v[i].wd = wd;
}

/* Appends a node (path: owned by the tree now, freed on failure) and
 * indexes it: its index, or -ENOMEM. */
static int node_add(struct tk_cg_tree *t, int parent, char *path, int fd, uint64_t ino,
                    enum tk_cg_node_state state, int err)
{
	struct tk_cg_node *v, *n;
	size_t i;

	/* Room in the indexes first: a failure leaves the tree as it was. */
	if ((t->len + 2) * 2 > t->by_path_cap) {
		int r = index_rebuild(t);
		if (r < 0) {
			free(path);
			return r;
		}
	}
	v = tk_grow(t->v, &t->cap, t->len + 1, sizeof *v, 64);
	if (v == NULL) {
		free(path);
		return -ENOMEM;
	}
	t->v = v;
	i = t->len++;
	n = &t->v[i];
	memset(n, 0, sizeof *n);
	n->path = path;
	n->fd = fd;
	n->wd = -1;
	n->parent = parent;
	n->err = err;
	n->ino = ino;
	n->state = state;
	n->seen = t->gen;
	n->dirty = state == TK_CG_NODE_LIVE;
	if (parent >= 0)
		t->v[parent].nchildren++;
	index_put(t->by_path, t->by_path_cap, hash_str(path), (int)i);
	if (state == TK_CG_NODE_LIVE) {
		t->live++;
		watch_add(t, i);
		if (n->wd >= 0)
			index_put(t->by_wd, t->by_wd_cap, hash_int(n->wd), (int)i);
	}
	return (int)i;
}

/* Closes the file fds node i keeps. */
static void files_drop(struct tk_cg_tree *t, size_t i)
{
	struct tk_cg_node *n = &t->v[i];

	if (n->files == NULL)
		return;
	for (int k = 0; k < t->nslots; k++) {
		if (n->files[k] >= 0) {
			close(n->files[k]);
			t->kept--;
		}
	}
	free(n->files);
	n->files = NULL;
}

/* Every kept file fd, given back for directories: 1 when any was. */
static int files_drop_all(struct tk_cg_tree *t)
{
	size_t had = t->kept;

	for (size_t i = 0; i < t->len; i++)
		files_drop(t, i);
	return had > 0;
}

static void node_release(struct tk_cg_tree *t, size_t i)
{
	struct tk_cg_node *n = &t->v[i];

	files_drop(t, i);
	if (n->state == TK_CG_NODE_LIVE) {
		/* The kernel drops the watch of a removed directory itself, and
		 * then this fails (EINVAL): nothing to do either way. */
		if (n->wd >= 0)
			(void)inotify_rm_watch(t->inotify_fd, n->wd);
		close(n->fd);
		n->fd = -1;
		t->live--;
	}
	if (n->parent >= 0)
		t->v[n->parent].nchildren--;
	n->state = TK_CG_NODE_DEAD;
	t->dead++;
}

/* Node i and everything beneath it. */
static void subtree_kill(struct tk_cg_tree *t, size_t i)
{
	if (t->v[i].state == TK_CG_NODE_DEAD)
		return;
	node_release(t, i);
	for (size_t j = i + 1; j < t->len; j++) {
		if (t->v[j].state != TK_CG_NODE_DEAD && t->v[j].parent >= 0 &&
		    t->v[t->v[j].parent].state == TK_CG_NODE_DEAD)
			node_release(t, j);
	}
}

static int fail(struct tk_cg_tree *t, size_t i, const char *step, int err)
{
	t->fail_path = t->v[i].path;
	t->fail_step = step;
	return err;
}

/* Opens the child name of node p and appends it: 0 (also when it is gone
 * already, or left out as SKIPPED), or -errno for a failure of the tree. */
static int child_open(struct tk_cg_tree *t, size_t p, const char *name)
{
	const char *base = t->v[p].path;
	size_t blen = strcmp(base, "/") == 0 ? 0 : strlen(base), nlen = strlen(name);
	struct stat st;
	char *path = malloc(blen + nlen + 2);
	int fd = -1, r;

	if (path == NULL)
		return -ENOMEM;
	memset(&st, 0, sizeof st);
	snprintf(path, blen + nlen + 2, "%.*s/%s", (int)blen, base, name);
	/* Too long for takana.cgroup(path) to open: left out, said so. */
	if (blen + nlen + 1 > TK_CG_TREE_PATH_MAX) {
		r = node_add(t, (int)p, path, -1, 0, TK_CG_NODE_SKIPPED, -ENAMETOOLONG);
		return r < 0 ? r : 0;
	}
	r = tk_cg_open(t->v[p].fd, name, &fd);
	/* Kept file fds give way to a cgroup's directory. */
	if ((r == -EMFILE || (r == 0 && t->nofile > 0 && fd >= t->nofile - TK_CG_TREE_SPARE)) &&
	    files_drop_all(t)) {
		if (r == 0)
			close(fd);
		fd = -1;
		r = tk_cg_open(t->v[p].fd, name, &fd);
	}
	if (r == -ENOENT) {
		free(path);
		return 0;   /* removed since the listing */
	}
	if (r == -EMFILE || r == -ENFILE || r == -ENOMEM) {
		free(path);
		return fail(t, p, "open a child directory", r);
	}
	if (r == 0 && t->nofile > 0 && fd >= t->nofile - TK_CG_TREE_SPARE) {
		close(fd);
		free(path);
		return fail(t, p, "descriptor budget", -EMFILE);
	}
	if (r == 0 && fstat(fd, &st) < 0) {
		r = -errno;
		close(fd);
	}
	/* EACCES above all (a subtree delegated to another user), or a mount
	 * on top of it (EXDEV): left out with the reason. */
	if (r < 0) {
		r = node_add(t, (int)p, path, -1, 0, TK_CG_NODE_SKIPPED, r);
		return r < 0 ? r : 0;
	}
	r = node_add(t, (int)p, path, fd, (uint64_t)st.st_ino, TK_CG_NODE_LIVE, 0);
	if (r < 0)
		close(fd);
	return r < 0 ? r : 0;
}

struct entry {
	size_t off;          /* the name, in names */
	uint64_t ino;
};

struct listing {
	struct entry *e;
	size_t len, cap;
	char *names;
	size_t nlen, ncap;
};

static int listing_add(void *ctx, int parent_fd, const char *name, uint64_t ino)
{
	struct listing *l = ctx;
	size_t n = strlen(name) + 1;
	struct entry *e = tk_grow(l->e, &l->cap, l->len + 1, sizeof *e, 16);
	char *names;

	(void)parent_fd;
	if (e == NULL)
		return -ENOMEM;
	l->e = e;
	names = tk_grow(l->names, &l->ncap, l->nlen + n, 1, 512);
	if (names == NULL)
		return -ENOMEM;
	l->names = names;
	memcpy(l->names + l->nlen, name, n);
	l->e[l->len].off = l->nlen;
	l->e[l->len].ino = ino;
	l->len++;
	l->nlen += n;
	return 0;
}

/* Lists node i's directory and brings its children in line: new ones
 * opened (and listed in their turn: they are dirty), gone or replaced
 * ones dropped with their subtrees. */
static int node_list(struct tk_cg_tree *t, size_t i, struct listing *l)
{
	char path[TK_CG_TREE_PATH_MAX + 1];
	size_t blen = strcmp(t->v[i].path, "/") == 0 ? 0 : strlen(t->v[i].path);
	size_t before;
	int seen = 0, r;

	l->len = l->nlen = 0;
	r = tk_cg_each_subdir(t->v[i].fd, listing_add, l);
	if (r == -ENOENT || r == -ENODEV) {
		if (i == 0)
			return fail(t, i, "list", -ENOENT);
		subtree_kill(t, i);   /* removed */
		return 0;
	}
	if (r < 0)
		return fail(t, i, "list", r);
	t->gen++;
	memcpy(path, t->v[i].path, blen);
	for (size_t k = 0; k < l->len; k++) {
		const char *name = l->names + l->e[k].off;
		size_t nlen = strlen(name);
		int j = -1;

		if (blen + nlen + 1 <= TK_CG_TREE_PATH_MAX) {
			path[blen] = '/';
			memcpy(path + blen + 1, name, nlen + 1);
			j = find_path(t, path);
		}
		if (j >= 0 && t->v[j].state == TK_CG_NODE_LIVE && t->v[j].ino == l->e[k].ino) {
			t->v[j].seen = t->gen;
			seen++;
			continue;
		}
		/* Replaced (made again under the name), or left out last time
		 * (tried again: a mode or a limit may have changed). */
		if (j >= 0)
			subtree_kill(t, (size_t)j);
		before = t->len;
		r = child_open(t, i, name);
		if (r < 0)
			return r;
		seen += t->len > before;
	}
	if (t->v[i].nchildren > seen) {
		for (size_t j = i + 1; j < t->len; j++) {
			if (t->v[j].parent == (int)i && t->v[j].state != TK_CG_NODE_DEAD &&
			    t->v[j].seen != t->gen)
				subtree_kill(t, j);
		}
	}
	t->v[i].dirty = 0;
	return 0;
}

/* Drops the DEAD nodes, keeping the order (parents first). */
static int compact(struct tk_cg_tree *t)
{
	int *map;
	size_t k = 0;

	if (t->dead == 0)
		return 0;
	map = malloc(t->len * sizeof *map);
	if (map == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < t->len; i++) {
		if (t->v[i].state == TK_CG_NODE_DEAD) {
			free(t->v[i].path);
			map[i] = -1;
			continue;
		}
		map[i] = (int)k;
		t->v[k] = t->v[i];
		if (t->v[k].parent >= 0)
			t->v[k].parent = map[t->v[k].parent];
		k++;
	}
	free(map);
	t->len = k;
	t->dead = 0;
	return index_rebuild(t);
}

/* Reads the whole inotify queue: which directories to list again. */
static void drain(struct tk_cg_tree *t)
{
	char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));

	if (t->inotify_fd < 0)
		return;
	for (;;) {
		ssize_t n = read(t->inotify_fd, buf, sizeof buf);
		const struct inotify_event *ev;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			/* EAGAIN: drained. Anything else: the queue cannot be
			 * trusted, so every directory is listed. */
			if (n < 0 && errno != EAGAIN)
				t->all_dirty = 1;
			return;
		}
		for (size_t off = 0; off + sizeof *ev <= (size_t)n; off += sizeof *ev + ev->len) {
			int j;

			ev = (const struct inotify_event *)(const void *)(buf + off);
			if (ev->mask & (IN_Q_OVERFLOW | IN_UNMOUNT)) {
				t->overflows += (ev->mask & IN_Q_OVERFLOW) != 0;
				t->all_dirty = 1;
				continue;
			}
			j = find_wd(t, ev->wd);
			if (j < 0)
				continue;
			if ((ev->mask & IN_ISDIR) &&
			    (ev->mask & (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO)))
				t->v[j].dirty = 1;
			if (ev->mask & IN_MOVE_SELF) {
				if (j == 0)
					t->root_moved = 1;
				else
					t->v[t->v[j].parent].dirty = 1;
			}
			if (ev->mask & (IN_DELETE_SELF | IN_IGNORED)) {
				/* The watch is gone with its directory; until the
				 * parent's listing drops it, the node is listed. */
				t->v[j].wd = -1;
				if (j > 0)
					t->v[t->v[j].parent].dirty = 1;
			}
		}
	}
}

int tk_cg_tree_sync(struct tk_cg_tree *t)
{
	struct listing l = { NULL, 0, 0, NULL, 0, 0 };
	rlim_t soft, hard;
	int r = 0, c;

	t->fail_path = t->len > 0 ? t->v[0].path : "/";
	t->fail_step = NULL;
	if (t->len == 0 || t->v[0].state != TK_CG_NODE_LIVE)
		return -EBADF;
	drain(t);
	if (t->root_moved)
		return fail(t, 0, "renamed", -ESTALE);
	/* No event says the root itself was removed: cgroupfs sends no
	 * IN_DELETE_SELF (its inode outlives the directory). */
	if (tk_cg_removed(t->v[0].fd))
		return fail(t, 0, "removed", -ENOENT);
	t->nofile = tk_nofile_get(&soft, &hard) == 0 && soft < 0x7fffffff ? (long)soft : 0;
	t->keep_below = t->nofile > 0 ? t->nofile / 2 : 0x7fffffff;
	if (t->all_dirty) {
		for (size_t i = 0; i < t->len; i++)
			t->v[i].dirty = 1;
		t->all_dirty = 0;
	}
	/* t->len grows as new directories are found: they are listed too. */
	for (size_t i = 0; i < t->len && r == 0; i++) {
		if (t->v[i].state == TK_CG_NODE_LIVE && (t->v[i].dirty || t->v[i].wd < 0))
			r = node_list(t, i, &l);
	}
	free(l.e);
	free(l.names);
	if (r == -ENOENT && t->fail_path == t->v[0].path)
		t->fail_step = "removed";
	/* The failed node's path is still needed: compacted next time. */
	c = r == 0 ? compact(t) : 0;
	return r < 0 ? r : c;
}

void tk_cg_tree_suspect(struct tk_cg_tree *t, size_t i)
{
	if (i < t->len && t->v[i].parent >= 0)
		t->v[t->v[i].parent].dirty = 1;
}

int tk_cg_tree_read(struct tk_cg_tree *t, size_t i, int slot, const char *file, char *buf,
                    size_t cap, size_t *len)
{
	struct tk_cg_node *n = &t->v[i];
	int *fd, was, r;

	if (n->files == NULL && slot >= 0 && slot < t->nslots) {
		n->files = malloc((size_t)t->nslots * sizeof *n->files);
		if (n->files != NULL)
			memset(n->files, 0xff, (size_t)t->nslots * sizeof *n->files);
	}
	if (n->files == NULL || slot < 0 || slot >= t->nslots)
		return tk_cg_read_once(n->fd, file, buf, cap, len);
	fd = &n->files[slot];
	was = *fd >= 0;
	r = tk_cg_read_kept(n->fd, file, fd, 0, buf, cap, len);
	if (!was && *fd >= 0) {
		if (*fd >= t->keep_below) {
			close(*fd);
			*fd = -1;
		} else {
			t->kept++;
		}
	} else if (was && *fd < 0) {
		t->kept--;   /* closed by the failed read */
	}
	return r;
}

int tk_cg_tree_open(struct tk_cg_tree *t, int root_fd, const char *root_path, int nslots)
{
	struct stat st;
	char *path;
	int r;

	memset(t, 0, sizeof *t);
	t->nslots = nslots;
	t->fail_path = root_path;
	t->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (t->inotify_fd < 0) {
		/* EMFILE here is fs.inotify.max_user_instances, not the
		 * descriptor limit: the tree lists every directory instead. */
		t->watch_err = -errno;
		t->watch_step = "inotify_init1";
	}
	path = strdup(root_path);
	if (path == NULL || fstat(root_fd, &st) < 0) {
		r = path == NULL ? -ENOMEM : -errno;
		free(path);
		close(root_fd);
		t->fail_step = "open";
		return r;
	}
	r = node_add(t, -1, path, root_fd, (uint64_t)st.st_ino, TK_CG_NODE_LIVE, 0);
	if (r < 0) {
		close(root_fd);
		return r;
	}
	return tk_cg_tree_sync(t);
}

void tk_cg_tree_close(struct tk_cg_tree *t)
{
	for (size_t i = 0; i < t->len; i++) {
		files_drop(t, i);
		if (t->v[i].state == TK_CG_NODE_LIVE)
			close(t->v[i].fd);
		free(t->v[i].path);
	}
	free(t->v);
	free(t->by_path);
	free(t->by_wd);
	if (t->inotify_fd >= 0)
		close(t->inotify_fd);
	memset(t, 0, sizeof *t);
	t->inotify_fd = -1;
}
