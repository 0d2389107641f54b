/* The /proc snapshot backend (proc_scan.c): a scan of /proc/<pid>/stat
 * through cached descriptors, its snapshot backend entry, and the reading
 * of a <pid>/cmdline. */
#ifndef TAKANA_PROC_SCAN_H
#define TAKANA_PROC_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proc_stat.h"
#include "recbuf.h"
#include "snapshot.h"

struct tk_cgid_cache;

struct tk_fd_entry {
	uint32_t pid;
	int fd;
};

struct tk_proc_scanner {
	int proc_fd;                 /* O_DIRECTORY fd of /proc, -1 when closed */
	char *dents;                 /* getdents64 buffer */
	size_t dents_cap;
	struct tk_fd_entry *cache;   /* open <pid>/stat fds, sorted by pid */
	size_t cache_len;
	size_t cache_cap;
	size_t cache_limit;          /* process-wide budget; 0 disables the cache */
	struct tk_fd_entry *next;    /* scratch for the cache being rebuilt */
	struct tk_units units;
	int bad_pid;                 /* pid whose stat failed to parse, for the message */
	int init_fd;                 /* /proc/1/stat for tk_proc_scan_init, -1 until used */
	int init_cgroup_fd;          /* /proc/1/cgroup for tk_init_cgroup_id, the same */
	struct tk_cgid_cache *init_cgids;  /* the cgroup2 mount for it, kept between
	                                    * snapshots, NULL until used */
	unsigned init_cgids_gen;     /* tk_cgroup2_mount_generation() when opened */
	struct tk_cgid_cache *cgids; /* set: fill cgroup_id from <pid>/cgroup */
	int want_cmdline;            /* set: fill cmdline from <pid>/cmdline */
	unsigned fork_generation;    /* of the process that opened proc_fd */
};

/* A scanner that holds nothing, to be opened on first use. */
void tk_proc_scanner_unopened(struct tk_proc_scanner *s);
int tk_proc_scanner_init(struct tk_proc_scanner *s, const char *proc_path);
void tk_proc_scanner_close(struct tk_proc_scanner *s);
/* Closes every cached fd; the scanner stays usable. */
void tk_proc_scanner_drop_cache(struct tk_proc_scanner *s);
/* Descriptors cached by every scanner of the process together. */
size_t tk_proc_cached_fds_total(void);
/* Opens the caller's scanner on first use; the cgroup id cache it was lent
 * stays lent. */
int tk_proc_scanner_ensure_open(struct tk_proc_scanner *s);
/* Reads init's record, keeping /proc/1/stat open (init never changes
 * identity); its uid (the owner of /proc/1, a stat more) only when
 * want_uid, else 0. Returns 0 or -errno. */
int tk_proc_scan_init(struct tk_proc_scanner *s, struct tk_record *out, int want_uid);
/* Init's cgroup id (0 when no cgroup2 hierarchy is mounted or it is not
 * beneath the mount), through the scanner's kept descriptors. 0 or -errno. */
int tk_proc_scan_init_cgroup_id(struct tk_proc_scanner *s, uint64_t *id);
/* Appends one record per live thread-group leader. With use_cache, stat fds
 * are kept open between scans (pread at 0 on the next scan). */
int tk_proc_scan(struct tk_proc_scanner *s, struct tk_recbuf *out, int use_cache);

/* An error that leaves a cmdline nil: the process is gone, or hidden. */
bool tk_cmdline_missing(int errnum);
/* Reads a <pid>/cmdline fd to its end into out->text, for r. 0, or -errno
 * (-ESRCH: the process was reaped). */
int tk_cmdline_read(int fd, struct tk_recbuf *out, struct tk_record *r);

/* The proc backend's entry in tk_snap_backends (snapshot.h). */
extern const struct tk_snap_backend tk_snap_backend_proc;

#endif
