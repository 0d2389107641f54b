/* A cgroup subtree kept open (cgroup_tree.c), behind takana.cgroup.tree:
 * one directory fd per cgroup, followed as cgroups come and go by an
 * inotify watch on each directory; a directory the watch cannot vouch for
 * (no inotify, a full queue, a watch refused) is listed again instead.
 * The files read from each cgroup are kept open only while the process
 * has more than half of RLIMIT_NOFILE free (a pread on a kept descriptor
 * costs a third of an openat, pread and close), and are given back first
 * when a new cgroup needs its directory descriptor. No Lua. */
#ifndef TAKANA_CGROUP_TREE_H
#define TAKANA_CGROUP_TREE_H

#include <stddef.h>
#include <stdint.h>

/* Descriptors a tree leaves free below RLIMIT_NOFILE's soft limit: the
 * reads of a stat and a directory listing need one or two at a time. */
#define TK_CG_TREE_SPARE 8
/* The longest path a tree keeps, as takana.cgroup(path) takes them. */
#define TK_CG_TREE_PATH_MAX 4095

enum tk_cg_node_state {
	TK_CG_NODE_LIVE,      /* fd open */
	TK_CG_NODE_SKIPPED,   /* left out with its subtree: err says why */
	TK_CG_NODE_DEAD,      /* removed; gone at the next compaction */
};

struct tk_cg_node {
	char *path;          /* "/a/b" relative to the mount, "/" its root */
	int fd;              /* the directory, while LIVE */
	int *files;          /* the kept file fds, nslots of them (-1: none); NULL */
	int wd;              /* its inotify watch; -1: listed on every sync */
	int parent;          /* index of the parent node; -1 for the tree's root */
	int nchildren;       /* child nodes not DEAD */
	int err;             /* SKIPPED: why (negative errno) */
	unsigned seen;       /* the listing of its parent that last saw it */
	uint64_t ino;        /* the directory's inode number: the cgroup id */
	enum tk_cg_node_state state;
	int dirty;           /* its children are to be listed again */
};

/* Nodes are kept parents before children (a node is appended after its
 * parent, and compaction keeps the order): one forward pass reaches a
 * subtree. */
struct tk_cg_tree {
	struct tk_cg_node *v;
	size_t len, cap;
	size_t live, dead;
	size_t kept;         /* file fds kept, all nodes together */
	int nslots;          /* files a node may keep open (tk_cg_tree_read's slots) */
	long keep_below;     /* a file fd this high or higher is not kept */
	int *by_path;        /* open addressing over v: path -> index, -1 empty */
	size_t by_path_cap;
	int *by_wd;          /* wd -> index, -1 empty */
	size_t by_wd_cap;
	int inotify_fd;      /* -1: none, watch_err says why */
	int watch_err;       /* the first refusal of inotify (negative errno) */
	const char *watch_step; /* ... and the call that refused */
	int all_dirty;       /* the queue overflowed: list every directory */
	unsigned long overflows; /* how often it did */
	int root_moved;      /* the root was renamed: its paths are stale */
	unsigned gen;
	/* The failure of the last sync: the node it concerns and what failed. */
	const char *fail_path;
	const char *fail_step;
	long nofile;         /* RLIMIT_NOFILE's soft limit at the last sync */
};

/* Opens the tree rooted at root_fd (a cgroup2 directory, owned by the tree
 * from now on, closed even on failure) whose path is root_path ("/" or
 * "/a/b"), and walks it. 0, or -errno with fail_path/fail_step set (then
 * tk_cg_tree_close still frees it). -EMFILE when RLIMIT_NOFILE leaves too
 * few descriptors for one per cgroup. */
int tk_cg_tree_open(struct tk_cg_tree *t, int root_fd, const char *root_path, int nslots);
/* Reads file of LIVE node i whole into buf, through the descriptor kept in
 * slot (0 <= slot < nslots), opened first when there is none and kept
 * after if the budget allows. As tk_cg_read_kept: -ENOENT when the file
 * is absent or its cgroup removed. */
int tk_cg_tree_read(struct tk_cg_tree *t, size_t i, int slot, const char *file, char *buf,
                    size_t cap, size_t *len);
/* Brings the tree up to date: reads the inotify queue and lists again the
 * directories it names (every one after an overflow, and those without a
 * watch). 0, or -errno with fail_path/fail_step set; the tree stays usable
 * and what failed is tried again by the next sync. -ENOENT when the root
 * was removed, -ESTALE when it was renamed. */
int tk_cg_tree_sync(struct tk_cg_tree *t);
/* Marks node i for a new listing of its parent at the next sync: a stat
 * found its directory gone before the watch said so. */
void tk_cg_tree_suspect(struct tk_cg_tree *t, size_t i);
/* Closes every descriptor and frees the tree; safe twice. */
void tk_cg_tree_close(struct tk_cg_tree *t);

#endif
