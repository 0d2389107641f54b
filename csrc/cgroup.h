/* cgroup v2 file access and parsers: the C core behind takana.cgroup. */
#ifndef TAKANA_CGROUP_H
#define TAKANA_CGROUP_H

#include <stddef.h>
#include <stdint.h>

/* Opens rel beneath mount_fd as a cgroup2 directory: openat2 with
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
 * RESOLVE_NO_XDEV, or a checked openat before Linux 5.6. -EXDEV when the
 * result is not on cgroup2. */
int tk_cg_open(int mount_fd, const char *rel, int *out_fd);
/* pread at 0 into buf; -EFBIG when the file does not fit. */
int tk_cg_read(int fd, char *buf, size_t cap, size_t *len);
/* One write(2) of value into dirfd/file. */
int tk_cg_write(int dirfd, const char *file, const char *value, size_t len);

typedef void (*tk_kv_cb)(void *ctx, const char *key, size_t klen,
                         const char *val, size_t vlen);
/* Flat-keyed "key value" lines; -EBADMSG on anything else (pure). */
int tk_kv_parse(const char *buf, size_t len, tk_kv_cb cb, void *ctx);

struct tk_psi_line {
	int full;                 /* 0: "some", 1: "full" */
	double avg10, avg60, avg300;
	uint64_t total_us;
};
/* One pressure line; -EBADMSG on anything else (pure). */
int tk_psi_parse_line(const char *line, size_t len, struct tk_psi_line *out);

#endif
