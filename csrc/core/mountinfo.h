/* /proc/self/mountinfo: the one parser of it, and the answers takana draws
 * from it (where the cgroup hierarchies are mounted, how /proc is). No Lua;
 * negative errno. */
#ifndef TAKANA_MOUNTINFO_H
#define TAKANA_MOUNTINFO_H

#include <stddef.h>

/* One line: the mount's root inside its filesystem and its mount point
 * (both unescaped), the filesystem type and the superblock options (as
 * printed). Pointers into the text being parsed. */
struct tk_mount {
	const char *root, *point, *fstype, *options;
};
/* Returns 0 to go on, anything else to stop the walk with that value. */
typedef int (*tk_mount_cb)(void *ctx, const struct tk_mount *m);

/* Walks text[0..len) (modified in place: fields are cut and unescaped);
 * malformed lines are skipped. Returns 0, or what cb stopped with. Pure. */
int tk_mountinfo_parse(char *text, size_t len, tk_mount_cb cb, void *ctx);
/* The same over /proc/self/mountinfo as it reads now. */
int tk_mountinfo_each(tk_mount_cb cb, void *ctx);

/* Where cgroup hierarchies are mounted. v2: the first cgroup2 mount,
 * unless a later one is rooted at our cgroup namespace's root (a container
 * that remounted cgroup2 over the host's); v2_root its root ("/", or
 * "/.." when it shows the hierarchy from above our namespace's root).
 * v1: each v1 mount's controllers (its superblock options other than
 * rw/ro and key=value ones), the first mount of each, in mountinfo order.
 * Every string malloc'ed; v2 and v2_root NULL without a cgroup2 mount. */
struct tk_cgroup_v1 {
	char *ctrl, *point;
};
struct tk_cgroup_mounts {
	char *v2, *v2_root;
	struct tk_cgroup_v1 *v1;
	size_t nv1, v1_cap;
};
int tk_cgroup_mounts_parse(char *text, size_t len, struct tk_cgroup_mounts *out);
int tk_cgroup_mounts_read(struct tk_cgroup_mounts *out);
void tk_cgroup_mounts_free(struct tk_cgroup_mounts *m);

/* The hidepid= option of the proc mount at /proc (the last such mount's)
 * into out: 1, or 0 when that mount has none or /proc is no proc mount. */
int tk_proc_hidepid_parse(char *text, size_t len, char *out, size_t cap);
int tk_proc_hidepid(char *out, size_t cap);

#endif
