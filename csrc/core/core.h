/* takana's C core: plain C, no Lua. Functions return 0 or a negative errno;
 * the binding files (lua_*.c) turn them into Lua values. */
#ifndef TAKANA_CORE_H
#define TAKANA_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "takana_record.h"
#include "takana_event.h"
#include "fork.h"
#include "util.h"

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
	char *text;        /* the records' cmdline bytes (cmdline_off/_len) */
	size_t text_len, text_cap;
	const char *cmdline_from;  /* "bpf" or "proc": who read them; NULL: not asked */
	size_t cmdline_by_bpf;     /* records whose cmdline the argv program read */
	size_t cmdline_by_proc;    /* ... and /proc, after a BPF walk or by a /proc one */
	/* What a BPF walk added to the kernel's start times: our time
	 * namespace's boottime offset, as /proc adds it (0 for /proc's). */
	int64_t boot_offset_ns;
};

struct tk_record *tk_recbuf_push(struct tk_recbuf *rb);   /* NULL on ENOMEM */
void tk_recbuf_free(struct tk_recbuf *rb);
/* Sorts by pid and drops duplicate pids; which duplicate stays is
 * unspecified (qsort is not stable). */
void tk_recbuf_sort(struct tk_recbuf *rb);
/* Inserts in pid order unless the pid is there already. Requires a sorted
 * buffer; linear, for the odd record added after a sort. */
int tk_recbuf_insert(struct tk_recbuf *rb, const struct tk_record *rec);
/* Room for n more bytes of cmdline text at *at, not yet counted in
 * text_len. 0, -E2BIG or -ENOMEM. */
int tk_recbuf_text_reserve(struct tk_recbuf *rb, size_t n, char **at);
/* Binary search; NULL when absent. Requires a sorted buffer. */
const struct tk_record *tk_recbuf_find(const struct tk_recbuf *rb, uint32_t pid);
/* Sorts n keys (pid << 32 | anything), stable, by pid; every pid must be
 * <= max_pid. tmp holds n keys too; returns whichever buffer holds the
 * result. */
const uint64_t *tk_pid_keys_sort(uint64_t *keys, uint64_t *tmp, size_t n, uint32_t max_pid);

/* Every record's children, record indexes grouped by parent, each group in
 * pid order: built once for a sorted buffer in O(n), then a record's
 * children are kids[start[i] .. end[i]). A record whose ppid is its own
 * pid is nobody's child, not even its own. */
struct tk_children {
	uint32_t *start, *end;
	uint32_t *kids;
};
int tk_children_build(const struct tk_recbuf *rb, struct tk_children *c);   /* 0 or -ENOMEM */
void tk_children_free(struct tk_children *c);
/* Every descendant of record root of the n indexed, breadth-first, each
 * once even when the records hold a parent cycle. Writes record indexes to
 * out (room for n) and returns their count; seen holds n bytes. O(n). */
size_t tk_children_descendants(const struct tk_children *c, size_t n, size_t root,
                               unsigned char *seen, uint32_t *out);

/* A merge of two snapshots (both in pid order), record by record in pid
 * order: a process only in a (gone), only in b (new), or in both (same: the
 * same pid and start time within a clock tick). A pid reused between the
 * two is gone, then new. fn's first nonzero return stops the walk and is
 * returned. fn may free either buffer (the walk then sees it empty) if it
 * checks for that before it reads the records it is given. */
enum tk_join { TK_JOIN_GONE, TK_JOIN_NEW, TK_JOIN_SAME };
typedef int (*tk_join_fn)(void *ctx, enum tk_join what, const struct tk_record *a,
                          const struct tk_record *b);
int tk_recbuf_join(const struct tk_recbuf *a, const struct tk_recbuf *b, tk_join_fn fn, void *ctx);

/* Sets out's utime/stime: a BPF record's precise runtime split as /proc
 * splits it. tk_cputime_split is the same on raw values: *utime and *stime
 * hold the sampled sums and receive the split of rtime, never below the
 * previous split (prev_ut, prev_st; 0, 0 when there was none). */
void tk_cputime_adjust(const struct tk_wire_record *w, struct tk_record *out);
void tk_cputime_split(uint64_t rtime, uint64_t prev_ut, uint64_t prev_st, uint64_t *utime,
                      uint64_t *stime);

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
	size_t cache_limit;          /* process-wide budget; 0 disables the cache */
	struct tk_fd_entry *next;    /* scratch for the cache being rebuilt */
	struct tk_units units;
	int bad_pid;                 /* pid whose stat failed to parse, for the message */
	int init_fd;                 /* /proc/1/stat for tk_proc_scan_init, -1 until used */
	int init_cgroup_fd;          /* /proc/1/cgroup for tk_init_cgroup_id, the same */
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
 * identity). Returns 0 or -errno. */
int tk_proc_scan_init(struct tk_proc_scanner *s, struct tk_record *out);
/* Appends one record per live thread-group leader. With use_cache, stat fds
 * are kept open between scans (pread at 0 on the next scan). */
int tk_proc_scan(struct tk_proc_scanner *s, struct tk_recbuf *out, int use_cache);

/* ---- cgroup ids (cgroup_id.c) -------------------------------------------- */

#define TK_CG_PATH_MAX 4096

/* Where the cgroup2 hierarchy is mounted (/sys/fs/cgroup, or
 * /sys/fs/cgroup/unified on a hybrid host); -ENOENT when nowhere. The
 * answer is kept and confirmed by one statfs a call. */
int tk_cgroup2_mount(char *out, size_t cap);

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
 * looked up as tk_cgid_of_path does. 0 or -errno. */
int tk_init_cgroup_id(int proc_fd, int *fd, struct tk_cgid_cache *c, uint64_t *id);
/* The id of rel (beneath the mount; "" is its root) and, when recursive,
 * of every cgroup beneath it: a malloc'd array the caller frees. */
int tk_cgroup_subtree_ids(const char *rel, int recursive, uint64_t **ids, size_t *n);

/* ---- the record's fields (snapshot.c), from TK_FIELDS -------------------- */

struct tk_field_desc {
	const char *name;        /* as Lua sees it */
	uint16_t offset;         /* of its member in struct tk_record */
	uint8_t kind;            /* enum tk_field_kind */
};

/* Indexed by enum tk_field, in the order core.record_fields lists them. */
extern const struct tk_field_desc tk_record_fields[TK_FLD_COUNT];

/* Zeroes every field of rec outside fields (TK_F_* bits); the pid and the
 * kthread bit stay. */
void tk_record_mask(struct tk_record *rec, uint32_t fields);

/* ---- snapshot backends (snapshot.c; the table in bpf_snapshot.c) -------- */

struct tk_snap_req {
	uint32_t fields;               /* TK_F_* bits asked for */
	int use_cache;                 /* proc: keep <pid>/stat fds open between scans */
	struct tk_proc_scanner *sc;    /* the caller's /proc scanner: proc reads
	                                * through it, a BPF tier reads a hidden init */
};

struct tk_snap_backend {
	const char *name;              /* snapshot{backend = name} */
	uint32_t default_fields;       /* when the caller names none */
	int tier;                      /* enum tk_bpf_tier: loads (tk_bpf_info), or -1 */
	int may_hide_init;             /* the kernel may hide init from it: read /proc then */
	/* Appends the records to an empty out, in any order, each pid once;
	 * returns 0, or -errno with the message (after "snapshot: ") in why. */
	int (*run)(const struct tk_snap_backend *b, const struct tk_snap_req *req,
	           struct tk_recbuf *out, char *why, size_t why_len);
};

/* Best first; the last (proc) works wherever /proc is mounted. Ends with
 * NULL. Each backend's entry is in its own file: bpf_snapshot.c, proc_scan.c. */
extern const struct tk_snap_backend *const tk_snap_backends[];
extern const struct tk_snap_backend tk_snap_backend_kfunc, tk_snap_backend_iter;
extern const struct tk_snap_backend tk_snap_backend_proc;
const struct tk_snap_backend *tk_snap_backend_find(const char *name);

/* One snapshot through b, for every backend alike: the time stamp
 * (CLOCK_BOOTTIME, before the walk), the cgroup id lookups when cgroup_id
 * is asked for (0 for every record when no cgroup2 hierarchy is mounted),
 * pid order, and init from /proc when b's walk could not see it. On failure
 * out is freed and why holds the message after "snapshot: ". */
int tk_snapshot_take(const struct tk_snap_backend *b, const struct tk_snap_req *req,
                     struct tk_recbuf *out, uint64_t *time_ns, char *why, size_t why_len);

/* ---- the cmdline field (cmdline.c) ---------------------------------------- */

/* After a BPF walk (whose pids are global: the tiers refuse a foreign pid
 * namespace), fills every record's cmdline_off/_len (TK_CMDLINE_NONE for a
 * process gone before its turn), the counts and out->cmdline_from: through
 * the argv BPF program where it loads, else, and for what it leaves, from
 * /proc through sc. 0, or -errno with why. The proc walk reads cmdline
 * itself (tk_proc_scanner.want_cmdline). */
int tk_cmdline_fill(struct tk_recbuf *out, struct tk_proc_scanner *sc, char *why, size_t why_len);
/* An error that leaves a cmdline nil: the process is gone, or hidden. */
bool tk_cmdline_missing(int errnum);
/* Reads a <pid>/cmdline fd to its end into out->text, for r. 0, or -errno
 * (-ESRCH: the process was reaped). */
int tk_cmdline_read(int fd, struct tk_recbuf *out, struct tk_record *r);
/* The argv program: 0 not tried, 1 loaded, -errno (and why) of its load;
 * loads: how many times it loaded in this process. */
int tk_cmdline_bpf_state(unsigned *loads, char *why, size_t why_len);
void tk_cmdline_release(void);
/* The same process: the same pid and a start time within one clock tick. */
int tk_same_process(const struct tk_record *a, const struct tk_record *b, uint64_t tick);


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
	int selectable;      /* the loaded program tests the field selection */
	int selectable_err;  /* kfunc: -errno of the failed load with the tests, or 0 */
	unsigned loads;      /* objects loaded so far (kfunc reloads to grow or select) */
	uint32_t insns;      /* the loaded program's instructions, as verified */
};

/* The BPF tiers' load information; a failed load is remembered, as is
 * its reason. Thread-safe. */
void tk_bpf_info(enum tk_bpf_tier tier, struct tk_bpf_tier_info *info);
/* Reloads the kfunc tier with room for this many records before its next
 * run (the array still grows past it when needed). */
int tk_bpf_kfunc_set_capacity(size_t capacity);
/* Unloads both tiers; the next snapshot loads again. */
void tk_bpf_release(void);


/* Descriptors handed to us by another process, closed on short-lived
 * threads of their own (fd_drop.c): their last close may block as long as
 * the sender wants. A socket holds a tk_fd_drops (refcounted with its
 * threads); tk_fd_drop: 0, or -errno with the fds left to the caller;
 * tk_fd_drops_inflight: its messages still closing. */
struct tk_fd_drops;
struct tk_fd_drops *tk_fd_drops_new(void);
void tk_fd_drops_put(struct tk_fd_drops *d);
int tk_fd_drops_inflight(const struct tk_fd_drops *d);
int tk_fd_drop(struct tk_fd_drops *d, const int *fds, size_t n);
/* What a closing thread does, in the caller's: a lingering socket reset,
 * a unix socket emptied and what it held defused first, then close. */
void tk_fd_close_defused(int fd);


/* ---- process events (events.c) -------------------------------------------- */

/* The most bytes one buffer or read may hold (an event stream's buffer, a
 * pipe read): 1 GiB. */
#define TK_BYTES_MAX ((size_t)1 << 30)
/* poll's interval, in seconds. */
#define TK_EVENTS_INTERVAL_MIN 0.001
#define TK_EVENTS_INTERVAL_MAX 86400.0
/* The connector's socket receive buffer when no size is asked for. */
#define TK_EVENTS_CN_BUFFER_DEFAULT ((size_t)16 << 20)
/* The most events a stream holds in user space. */
#define TK_EVENTS_QUEUE_MAX ((size_t)1 << 24)

/* One proc connector message, decoded. */
struct tk_cn_message {
	uint32_t what;        /* PROC_EVENT_* */
	uint32_t cpu;
	uint32_t seq;         /* per-CPU sequence number: gaps are losses */
	uint32_t ack;
	uint32_t ack_err;     /* PROC_EVENT_NONE: the kernel's answer to LISTEN */
	int thread;           /* fork/exit of a thread, not of a process */
	struct tk_event event;  /* type 0 for events takana does not report */
};

struct tk_cn_seq {
	uint32_t next;
	uint32_t seen;
};

struct tk_events;

/* An event backend: how a stream of its kind opens, moves ready events
 * into the queue, and lets go of what it holds. */
struct tk_ev_ops {
	const char *name;
	/* buffer: ring bytes (bpf) or socket receive buffer (connector), 0
	 * for the default; interval: poll's tick in seconds. Sets ev->fd, the
	 * descriptor to poll, and ev->held_*. */
	int (*open)(struct tk_events *ev, double interval, size_t buffer, char *why,
	            size_t why_len);
	int (*fill)(struct tk_events *ev, size_t max);
	/* Closes ev->fd and frees the backend's part; after a failed open too. */
	void (*close)(struct tk_events *ev);
};

/* The backends, best first (the order "auto" tries them in), NULL-ended. */
extern const struct tk_ev_ops *const tk_ev_backends[];

/* bpf: one loaded object per process (and ring size), shared by its
 * streams; events another stream's fill took from the ring wait in this
 * one's inbox (under the object's lock) and wake_fd says so. */
struct tk_ev_bpf {
	void *shared;                /* struct tk_ev_shared * */
	uint64_t lost_seen[TK_EV_TYPES];
	int wake_fd;                 /* eventfd, in fd's epoll set beside the ring */
	struct tk_event *inbox;
	size_t inlen, incap;
	uint64_t indropped;          /* inbox full: lost for this stream */
};

/* connector: an exec event of the current read whose filename and argv came
 * from /proc, until a later message of its pid says they may not be its own. */
struct tk_cn_exec {
	uint32_t pid;                /* 0: a free slot */
	uint32_t gen;                /* the read it belongs to; others' are free */
	uint64_t pos;                /* its queue position (tk_events.qbase + index);
	                              * UINT64_MAX once settled */
	uint64_t read_ns;            /* CLOCK_BOOTTIME when /proc was read */
};

struct tk_ev_cn {
	struct tk_cn_seq *seq;       /* one per possible CPU, sized at open */
	size_t ncpu;
	int listening;
	uint32_t *pid;               /* exec streams: pid -> ppid from forks seen, */
	uint32_t *ppid;              /* seeded from /proc at open (open addressing) */
	size_t pcap, plen;
	int64_t mono_offset_ns;      /* our time namespace's CLOCK_MONOTONIC offset */
	struct tk_cn_exec *execs;    /* exec streams: by pid (open addressing) */
	size_t ecap, elen;           /* elen: slots of generation gen */
	uint32_t gen;
	int blind;                   /* an overrun's messages are not all drained yet */
	int drained;                 /* the last fill read the socket empty */
};

struct tk_ev_poll {
	struct tk_proc_scanner scanner;
	int scanner_open;
	struct tk_recbuf prev, next;
};

struct tk_events {
	const struct tk_ev_ops *ops; /* kept once closed: the stream's backend */
	uint32_t mask;               /* TK_EV_BIT of the wanted types */
	int fd;                      /* pollable: ring epoll fd, netlink socket or timerfd */
	int closed;
	struct tk_event *queue;      /* decoded, not yet read */
	size_t qhead, qlen, qcap;
	uint64_t qbase;              /* events moved off the queue's front: an event's
	                              * position qbase + index holds while it is queued */
	size_t qmax;                 /* a fill stops reading the kernel here */
	uint64_t qdropped;           /* poll: events past qmax, reported lost */
	uint64_t received;           /* events queued, lost markers excluded */
	uint64_t lost;               /* since the last tk_events_take_lost */
	uint64_t lost_total;
	uint64_t lost_by_type[TK_EV_TYPES];  /* bpf only: the program knows the type */
	uint64_t overruns;           /* connector: ENOBUFS seen */
	uint64_t malformed;          /* messages that did not parse */
	uint64_t spoofed;            /* connector: messages not sent by the kernel */
	uint64_t duplicates;         /* bpf: second exits of one process, dropped */
	uint64_t overrun_credit;     /* connector: overruns reported lost as 1 each,
	                              * not yet matched by a sequence gap */
	size_t ring_bytes;           /* bpf: its ring's size; 0 for the others */
	/* What the stream holds outside the heap, for the binding to tell
	 * the collector: kernel buffer bytes (as charged) and descriptors. */
	size_t held_bytes;
	unsigned held_fds;
	union {                      /* the part of ops's backend */
		struct tk_ev_bpf bpf;
		struct tk_ev_cn cn;
		struct tk_ev_poll poll;
	};
};

/* Parses one netlink datagram of the proc connector. Returns 1 with *out
 * filled, 0 for a message that is not a proc event, -EBADMSG for a
 * malformed one. Pure: reads only buf[0..len). */
int tk_cn_parse(const void *buf, size_t len, struct tk_cn_message *out);

/* Opens a stream; on failure returns -errno with a reason in why. buffer:
 * ring bytes (bpf) or socket receive buffer (connector), 0 for default.
 * queue: events held in user space at most, 0 for TK_EVENTS_QUEUE. */
#define TK_EVENTS_QUEUE 16384
int tk_events_open(struct tk_events *ev, const struct tk_ev_ops *ops, uint32_t mask,
                   double interval, size_t buffer, size_t queue, char *why, size_t why_len);
/* Moves up to max ready events into the queue, without blocking; never past
 * the queue's bound: what does not fit stays in the kernel's buffer, where
 * its loss is counted (poll, which has no such buffer, reports it lost). */
int tk_events_fill(struct tk_events *ev, size_t max);
/* The next queued event, or NULL. Valid until the next fill. */
const struct tk_event *tk_events_next(struct tk_events *ev);
/* Events (lost markers included) queued and not yet read. */
size_t tk_events_queued(const struct tk_events *ev);
/* Returns and resets the count of events known lost. */
uint64_t tk_events_take_lost(struct tk_events *ev);
void tk_events_close(struct tk_events *ev);

#endif
