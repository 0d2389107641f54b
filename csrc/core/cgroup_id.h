/* cgroup ids (cgroup_id.c): the cgroup2 mount, and /proc/<pid>/cgroup paths
 * to ids. */
#ifndef TAKANA_CGROUP_ID_H
#define TAKANA_CGROUP_ID_H

#include <stddef.h>
#include <stdint.h>

#define TK_CG_PATH_MAX 4096

/* Where the cgroup2 hierarchy is mounted (/sys/fs/cgroup, or
 * /sys/fs/cgroup/unified on a hybrid host); -ENOENT when nowhere. The
 * answer is kept and confirmed by one statfs a call. */
int tk_cgroup2_mount(char *out, size_t cap);
/* Changes whenever tk_cgroup2_mount's answer may have: a cache opened on the
 * mount (tk_cgid_cache_open) is good while it does not. */
unsigned tk_cgroup2_mount_generation(void);

/* /proc/<pid>/cgroup paths to ids for one scan: most processes share a few
 * cgroups, so each path is looked up (a stat beneath the mount) once. */
struct tk_cgid_cache {
	int mount_fd;                    /* -1: no cgroup2 mount, every id is 0 */
	char *mount_root;                /* mountinfo's root field of that mount */
	char *anc;                       /* beneath a mount rooted above our cgroup */
	int anc_depth;                   /* namespace: see cgroup_id.c locate_anc */
	struct tk_cgid_entry *slots;
	size_t len, cap;
};

int tk_cgid_cache_open(struct tk_cgid_cache *c);
void tk_cgid_cache_close(struct tk_cgid_cache *c);
/* The id of a path as /proc/<pid>/cgroup prints it; 0 when it is not
 * beneath the mount (outside our cgroup namespace, outside the mount's
 * root, or gone). */
int tk_cgid_of_path(struct tk_cgid_cache *c, const char *path, size_t len, uint64_t *id);
/* The id of pid's cgroup2 cgroup through proc_fd; -ESRCH when gone. */
int tk_proc_cgroup_id(int proc_fd, uint32_t pid, struct tk_cgid_cache *c, uint64_t *id);
/* Init's cgroup id, for a BPF tier that cannot see init: its cgroup file
 * kept open in *fd (-1 until then: init never changes identity), the path
 * looked up beneath c's mount as tk_cgid_of_path does, but never through
 * its cache of paths, so c may be kept for many snapshots. 0 or -errno. */
int tk_init_cgroup_id(int proc_fd, int *fd, struct tk_cgid_cache *c, uint64_t *id);
/* The id of rel (beneath the mount; "" is its root) and, when recursive,
 * of every cgroup beneath it: a malloc'd array the caller frees. */
int tk_cgroup_subtree_ids(const char *rel, int recursive, uint64_t **ids, size_t *n);

#endif
