/* Small pieces every core file needs once: growing an array, reading a
 * decimal, reading a small file and our time namespace's clock offsets,
 * each written here once. */
#ifndef TAKANA_UTIL_H
#define TAKANA_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

/* Returns v regrown to hold at least `need` elements of `elem` bytes
 * (doubling from `first`) and updates *cap, or NULL with v and *cap left as
 * they were (out of memory, the size would overflow, or elem is 0). */
void *tk_grow(void *v, size_t *cap, size_t need, size_t elem, size_t first);

/* Reads the decimal digits at [p, end) into *out; returns the first byte
 * after them, or NULL when there is no digit or the value exceeds `max`. */
const char *tk_parse_u64(const char *p, const char *end, uint64_t max, uint64_t *out);

/* Reads a small file (path relative to dirfd, or AT_FDCWD) with one read
 * into buf, NUL-terminated (at most cap - 1 bytes): its length, or -errno. */
ssize_t tk_read_small(int dirfd, const char *path, char *buf, size_t cap);
/* Reads a whole file (path relative to dirfd, or AT_FDCWD), at most max
 * bytes of it, into *out, malloc'ed and NUL-terminated: its length, or
 * -errno (*out NULL). */
ssize_t tk_read_all(int dirfd, const char *path, size_t max, char **out);

/* The clock offsets of the calling process's time namespace (unshare -T):
 * its CLOCK_MONOTONIC and CLOCK_BOOTTIME, and the times /proc shows, are
 * the kernel's own clocks plus these, while what BPF programs and the proc
 * connector hand up is the kernel's own. Both 0 without time namespaces
 * (no CONFIG_TIME_NS, before Linux 5.6, or /proc not mounted). Read once
 * per process (again in a child of fork()); thread-safe. -errno, with why,
 * when they cannot be known. */
struct tk_timens {
	int64_t monotonic_ns;
	int64_t boottime_ns;
};
int tk_timens_offsets(struct tk_timens *out, char *why, size_t why_len);

/* Writes value to file beneath dirfd (a cgroup's control files) in one
 * write(): 0, -errno, or -EIO when the write was short. */
int tk_cg_write(int dirfd, const char *file, const char *value, size_t len);

#endif
