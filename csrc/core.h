/* takana's C core: plain C, no Lua. Functions return 0 or a negative errno;
 * the binding files (lua_*.c) turn them into Lua values. */
#ifndef TAKANA_CORE_H
#define TAKANA_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "../bpf/takana_record.h"

/* ---- /proc/<pid>/stat parser (proc_stat.c) ---------------------------- */

struct tk_units {
	uint64_t ns_per_tick;   /* 1e9 / sysconf(_SC_CLK_TCK) */
	uint64_t page_size;
};

/* Parses one /proc/<pid>/stat line. On success fills *out completely (uid is
 * left 0: it does not come from the text) and returns 0; on malformed input
 * returns -EBADMSG, for a dead task (state X) -ESRCH, and leaves *out
 * untouched. Pure: reads only buf[0..len). */
int tk_stat_parse(const char *buf, size_t len, const struct tk_units *units,
                  struct tk_record *out);

void tk_units_init(struct tk_units *units);

/* ---- growable record array (snapshot.c) ---------------------------------- */

struct tk_recbuf {
	struct tk_record *recs;
	size_t len;
	size_t cap;
	size_t vanished;   /* listed, then gone before it could be read */
	size_t denied;     /* listed, but not readable (hidepid=1 and the like) */
	size_t from_proc;  /* hidden from a BPF walk, read from /proc instead */
};

struct tk_record *tk_recbuf_push(struct tk_recbuf *rb);   /* NULL on ENOMEM */
void tk_recbuf_free(struct tk_recbuf *rb);
/* Sorts by pid and drops duplicate pids (keeping the first seen). */
void tk_recbuf_sort(struct tk_recbuf *rb);
/* Inserts in pid order unless the pid is there already. Requires a sorted
 * buffer; linear, for the odd record added after a sort. */
int tk_recbuf_insert(struct tk_recbuf *rb, const struct tk_record *rec);
/* Binary search; NULL when absent. Requires a sorted buffer. */
const struct tk_record *tk_recbuf_find(const struct tk_recbuf *rb, uint32_t pid);

uint64_t tk_boottime_ns(void);

/* Sets out's utime/stime: a BPF record's precise runtime split as /proc
 * splits it. */
void tk_cputime_adjust(const struct tk_wire_record *w, struct tk_record *out);

/* ---- /proc backend (proc_scan.c) ---------------------------------------- */

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
	size_t cache_limit;          /* 0 disables the cache */
	struct tk_fd_entry *next;    /* scratch for the cache being rebuilt */
	struct tk_units units;
	int bad_pid;                 /* pid whose stat failed to parse, for the message */
	int init_fd;                 /* /proc/1/stat for tk_proc_scan_init, -1 until used */
};

int tk_proc_scanner_init(struct tk_proc_scanner *s, const char *proc_path);
void tk_proc_scanner_close(struct tk_proc_scanner *s);
/* Closes every cached fd; the scanner stays usable. */
void tk_proc_scanner_drop_cache(struct tk_proc_scanner *s);
/* Reads init's record, keeping /proc/1/stat open (init never changes
 * identity). Returns 0 or -errno. */
int tk_proc_scan_init(struct tk_proc_scanner *s, struct tk_record *out);
/* Appends one record per live thread-group leader. With use_cache, stat fds
 * are kept open between scans (pread at 0 on the next scan). */
int tk_proc_scan(struct tk_proc_scanner *s, struct tk_recbuf *out, int use_cache);

/* ---- BPF backends (bpf_snapshot.c) --------------------------------------- */

enum tk_bpf_tier {
	TK_TIER_KFUNC,   /* task iterator kfuncs in a SEC("syscall") program */
	TK_TIER_ITER,    /* iter/task link read through an iterator fd */
	TK_TIER_COUNT
};

struct tk_bpf_tier_info {
	int loaded;
	uint64_t load_ns;    /* first load: open, verify, attach */
	uint64_t runs;       /* snapshots taken */
	size_t capacity;     /* kfunc: records the array holds now */
};

/* Appends one record per process using a BPF tier, sorted by pid. The tier
 * is loaded on first use, once per process; a failed load is remembered.
 * Thread-safe. On failure returns -errno with a reason in why. */
int tk_bpf_snapshot(enum tk_bpf_tier tier, struct tk_recbuf *out, char *why, size_t why_len);
void tk_bpf_info(enum tk_bpf_tier tier, struct tk_bpf_tier_info *info);
/* Reloads the kfunc tier with room for this many records before its next
 * run (the array still grows past it when needed). */
int tk_bpf_kfunc_set_capacity(size_t capacity);
/* Unloads both tiers; the next snapshot loads again. */
void tk_bpf_release(void);

#endif
