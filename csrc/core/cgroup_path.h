/* The path of a cgroup from its id, for every caller (takana.cgroup.path,
 * snap:cgroup, takana.cgroup(id)): open_by_handle_at where the kernel lets
 * this process, else a walk of the hierarchy, whose answers are cached
 * and checked against the id before they are given again. No Lua. */
#ifndef TAKANA_CGROUP_PATH_H
#define TAKANA_CGROUP_PATH_H

#include <stddef.h>
#include <stdint.h>

/* The path of cgroup id beneath mount_fd, relative to it ("" for the
 * mount's root), by open_by_handle_at: -EPERM without CAP_DAC_READ_SEARCH,
 * -ESTALE (or -ENOENT) when no such cgroup exists, -EXDEV when it lies
 * outside the mount's view. */
int tk_cg_path_by_handle(int mount_fd, uint64_t id, char *out, size_t cap);
/* Calls cb(ctx, id, relpath) for the mount's root ("") and every cgroup
 * beneath it, parents first, at most max_dirs (-E2BIG past that). A subtree
 * past PATH_MAX, or one this process may not enter, is left out. */
typedef int (*tk_cg_id_cb)(void *ctx, uint64_t id, const char *rel);
int tk_cg_walk_ids(int mount_fd, int max_dirs, tk_cg_id_cb cb, void *ctx);

/* What a walk may visit: far more than any real hierarchy. */
#define TK_CGPATH_MAX_DIRS 100000

struct tk_cgpath_entry {
	uint64_t id;
	char *path;
};
/* Owned by its caller (one a Lua state): what the last walk found beneath
 * mount, and whether open_by_handle_at works here. */
struct tk_cgpath_cache {
	char *mount;
	struct tk_cgpath_entry *v;   /* sorted by id */
	size_t len;
	int by_handle;               /* -1 untried, 0 refused, 1 works */
};
void tk_cgpath_cache_init(struct tk_cgpath_cache *c);
void tk_cgpath_cache_free(struct tk_cgpath_cache *c);

/* Which step failed, for the caller's message. */
enum tk_cgpath_step {
	TK_CGPATH_OPEN = 1,   /* opening the mount (before open_by_handle_at) */
	TK_CGPATH_HANDLE,     /* open_by_handle_at; -ENOENT: no cgroup has the id */
	TK_CGPATH_WALK_OPEN,  /* opening the mount for the walk */
	TK_CGPATH_WALK,       /* the walk */
	TK_CGPATH_MISSING,    /* the walk found no cgroup with the id: -ENOENT */
};

/* The path of cgroup id beneath mount (relative to it, "" for its root)
 * into out, or -errno with *step set. */
int tk_cgroup_id_path(struct tk_cgpath_cache *c, const char *mount, uint64_t id, char *out,
                      size_t cap, enum tk_cgpath_step *step);

#endif
