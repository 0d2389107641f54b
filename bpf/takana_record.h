/* The process record shared by every snapshot backend: the /proc parser in
 * csrc/ and the BPF programs in bpf/ fill exactly this layout, so a record
 * means the same thing whichever backend produced it.
 *
 * Only fixed-width types, no kernel or libc types: the same header compiles
 * for the BPF target and for user space. Units are fixed here, once:
 * nanoseconds for times, bytes for memory. */
#ifndef TAKANA_RECORD_H
#define TAKANA_RECORD_H

/***
 * The process record.
 * @module takana
 */

#ifdef __bpf__
/* vmlinux-style types come from the BPF side's own type header. */
#else
#include <linux/types.h>
#endif

/* /proc decorates kernel workers' names ("kworker/0:1-events") up to the
 * kernel's 64-byte extended comm; task->comm itself holds 16. */
#define TK_COMM_LEN 64

/* flags */
#define TK_REC_KTHREAD 0x1u
/* iter/task only, never in a snapshot: one non-leader thread's times and
 * faults, to be added to the record of its thread group (pid). */
#define TK_REC_THREAD  0x2u

struct tk_record {
	__u32 pid;          /* thread-group id */
	__u32 ppid;
	__u32 pgid;
	__u32 sid;
	__u32 uid;          /* effective uid as /proc shows it (owner of /proc/<pid>) */
	__u32 nthreads;
	__u32 state;        /* the one-letter state /proc shows, as ASCII */
	__u32 flags;        /* TK_REC_* */
	__u64 start_ns;     /* since boot, CLOCK_BOOTTIME */
	__u64 utime_ns;     /* whole process: live threads plus exited ones */
	__u64 stime_ns;
	__u64 rss_bytes;
	__u64 vsize_bytes;
	__u64 minflt;
	__u64 majflt;
	__u64 cgroup_id;    /* cgroup v2 id (kernfs node id, the inode number of its
	                     * directory); 0 when no cgroup2 hierarchy is mounted */
	__u32 cmdline_off;  /* cmdline: its bytes in the snapshot's text (tk_recbuf) */
	__u32 cmdline_len;  /* TK_CMDLINE_NONE: not read (gone before its turn) */
	__u32 nice;         /* two's-complement int32 (-20..19) */
	__u32 comm_len;     /* bytes used in comm (comm may hold any byte, even NUL-free newlines) */
	char comm[TK_COMM_LEN];
};

/* How a member reads in Lua, and how tk_record_mask clears it. */
enum tk_field_kind {
	TK_KIND_U32,       /* __u32, an integer */
	TK_KIND_S32,       /* __u32 holding a two's-complement int32 (nice) */
	TK_KIND_U64,       /* __u64 count */
	TK_KIND_NS,        /* __u64 nanoseconds */
	TK_KIND_BYTES,     /* __u64 bytes */
	TK_KIND_CGROUP,    /* __u64 cgroup id; 0 (no id here) reads nil */
	TK_KIND_STATE,     /* __u32 holding one ASCII letter: a 1-byte string */
	TK_KIND_COMM,      /* char[TK_COMM_LEN] with comm_len: a string */
	TK_KIND_KTHREAD,   /* the TK_REC_KTHREAD bit of flags: a boolean */
	TK_KIND_CMDLINE,   /* cmdline_off/_len into the snapshot's text: an array */
};

#define TK_CMDLINE_NONE 0xffffffffu

/*** One process in a snapshot: what `snap:get(pid)`, `rec:totable()` and
 * the views `snap:each()` yields hold. Every backend fills every field with
 * the same meaning and unit; a field left out of `fields = {...}` reads nil.
 * @table record
 * @field pid the process id (tgid)
 * @field ppid the parent's pid
 * @field pgid the process group
 * @field sid the session
 * @field uid the effective uid: the owner of `/proc/<pid>`
 * @field state the letter /proc shows (`R`, `S`, `D`, `Z`, `T`, `t`, `X`, `I`)
 * @field comm the command name (at most 15 bytes, as the kernel keeps it)
 * @field nthreads the number of threads
 * @field nice the nice value, -20..19
 * @field start_ns start time, ns since boot
 * @field utime_ns user CPU of the whole process (all threads, exited ones included)
 * @field stime_ns system CPU likewise
 * @field rss_bytes resident memory
 * @field vsize_bytes virtual memory
 * @field minflt minor faults
 * @field majflt major faults
 * @field kthread true for a kernel thread
 * @field cgroup_id the cgroup2 id of its cgroup (the inode number of the
 *   cgroup's directory under the cgroup2 mount); nil when no cgroup2
 *   hierarchy is mounted, or the cgroup is outside this cgroup namespace's
 *   view; proc backend: only when named in `fields`
 * @field cmdline its arguments, `{string,...}` as `process:cmdline()` gives
 *   them (`{}` for a kernel thread or a zombie); only when named in
 *   `fields`, on every backend; nil for a process that exited before its
 *   arguments were read
 */

/* The record's fields as Lua sees them, in the order they are listed (the
 * order of core.record_fields, of record tables and of the selection bits
 * the programs test): X(ID, name, member, kind). One line here is a field
 * for the binding, the mask and the specs; the struct above stays written
 * by hand because its layout is the wire format (BPF objects, the mmaped
 * array) and is ordered for alignment and for the copy out of the array
 * (what every selection reads, pid, state, flags and start_ns, in its
 * first 40 bytes), not for reading. A new integer
 * field: a member above, its @field line and a line here, its BPF fill
 * (takana_task.bpf.h) and its /proc fill (csrc/core/proc_stat.c). */
#define TK_FIELDS(X) \
	X(PID, pid, pid, U32) \
	X(PPID, ppid, ppid, U32) \
	X(PGID, pgid, pgid, U32) \
	X(SID, sid, sid, U32) \
	X(UID, uid, uid, U32) \
	X(STATE, state, state, STATE) \
	X(COMM, comm, comm, COMM) \
	X(NTHREADS, nthreads, nthreads, U32) \
	X(NICE, nice, nice, S32) \
	X(START, start_ns, start_ns, NS) \
	X(UTIME, utime_ns, utime_ns, NS) \
	X(STIME, stime_ns, stime_ns, NS) \
	X(RSS, rss_bytes, rss_bytes, BYTES) \
	X(VSIZE, vsize_bytes, vsize_bytes, BYTES) \
	X(MINFLT, minflt, minflt, U64) \
	X(MAJFLT, majflt, majflt, U64) \
	X(KTHREAD, kthread, flags, KTHREAD) \
	X(CGROUP, cgroup_id, cgroup_id, CGROUP) \
	X(CMDLINE, cmdline, cmdline_len, CMDLINE)

#define TK_FIELD_ENUM(id, name, member, kind) TK_FLD_##id,
enum tk_field { TK_FIELDS(TK_FIELD_ENUM) TK_FLD_COUNT };
#undef TK_FIELD_ENUM
_Static_assert(TK_FLD_COUNT < 32, "a field selection (TK_F_ALL) is a 32-bit mask");

/* A selection of fields (snapshot{fields=...}): one bit per tk_field. */
#define TK_F(id) (1u << TK_FLD_##id)
#define TK_F_ALL ((1u << TK_FLD_COUNT) - 1u)
/* What a walk fills: every field but cmdline, which a pass after the walk
 * reads (tk_cmdline_fill), only when named. */
#define TK_F_WALK (TK_F_ALL & ~TK_F(CMDLINE))
/* Read whatever is selected: identity (pid, start) and liveness (state)
 * cost nothing beyond the task itself, and deltas and the reaping check
 * need them; they are exposed only when asked for. */
#define TK_F_ALWAYS (TK_F(PID) | TK_F(START) | TK_F(STATE) | TK_F(KTHREAD))
/* Field groups by the kernel structure they are loaded from. */
#define TK_F_SIGNAL (TK_F(PGID) | TK_F(SID) | TK_F(NTHREADS) | TK_F(UTIME) | TK_F(STIME) | \
                     TK_F(MINFLT) | TK_F(MAJFLT))
#define TK_F_THREADS (TK_F(UTIME) | TK_F(STIME) | TK_F(MINFLT) | TK_F(MAJFLT))
#define TK_F_MM (TK_F(RSS) | TK_F(VSIZE))

/* What the BPF programs write: the record with utime_ns/stime_ns still the
 * kernel's raw tick-sampled sums, plus what user space needs to split the
 * precise runtime as /proc does (tk_cputime_split in csrc/core/recbuf.c). */
/* In a wire record's comm_len: the comm is NUL-terminated within its first
 * 16 bytes; user space measures it. */
#define TK_WIRE_COMM_NUL 0xffffffffu

/* The kfunc program notes where its walk leaves pid order, up to this many
 * times; past that user space sorts. */
#define TK_KFUNC_DESCENTS 16   /* a power of 2 */

struct tk_wire_record {
	struct tk_record rec;
	__u64 runtime_ns;       /* sum_exec_runtime, whole process */
	__u64 prev_utime_ns;    /* signal->prev_cputime: the split /proc reported last */
	__u64 prev_stime_ns;
};

/* The one fold of a non-leader thread into its process's record: what the
 * kfunc program adds from each thread's task, what the iter program puts
 * in a TK_REC_THREAD record, and what user space adds from that record to
 * its leader's (TK_F_THREADS are the fields it feeds). */
static inline __attribute__((always_inline)) void
tk_wire_add_thread(struct tk_wire_record *w, __u64 utime_ns, __u64 stime_ns,
                   __u64 runtime_ns, __u64 minflt, __u64 majflt)
{
	w->rec.utime_ns += utime_ns;
	w->rec.stime_ns += stime_ns;
	w->runtime_ns += runtime_ns;
	w->rec.minflt += minflt;
	w->rec.majflt += majflt;
}

#endif
