/* cgroup ids to paths (cgroup_path.c). */
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
 * beneath it, parents first, at most max_dirs (-E2BIG past that). */
typedef int (*tk_cg_id_cb)(void *ctx, uint64_t id, const char *rel);
int tk_cg_walk_ids(int mount_fd, int max_dirs, tk_cg_id_cb cb, void *ctx);

#endif
