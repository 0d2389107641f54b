/* The process event shared by the event backends: the BPF ring buffer
 * records, the proc connector parser and the snapshot-diff poller all fill
 * this layout, and the binding turns it into a Lua table. Fixed-width types
 * only, so it compiles for BPF and for user space. */
#ifndef TAKANA_EVENT_H
#define TAKANA_EVENT_H

#ifndef __bpf__
#include <linux/types.h>
#endif

enum tk_event_type {
	TK_EV_FORK = 1,     /* a new process (not a new thread) */
	TK_EV_EXEC,
	TK_EV_EXIT,         /* the whole process ended (bpf) or its leader exited (connector) */
	TK_EV_COMM,         /* a process renamed itself (prctl PR_SET_NAME, /proc/<pid>/comm) */
	TK_EV_LOST,         /* events were dropped; count in lost */
	TK_EV_TYPES
};

#define TK_EV_BIT(type) (1u << (type))

/* flags */
#define TK_EVF_EXITED    0x01u   /* exit: exit_code is valid */
#define TK_EVF_SIGNALED  0x02u   /* exit: exit_signal is valid */
#define TK_EVF_CORE      0x04u   /* exit: dumped core */
#define TK_EVF_ACCT      0x08u   /* exit: utime/stime/maxrss/cgroup_id are valid */
#define TK_EVF_OBSERVED  0x10u   /* synthesised from snapshots: seen, not witnessed */
#define TK_EVF_COMM      0x20u   /* comm is valid */
#define TK_EVF_OVERRUN   0x40u   /* lost: a buffer overran; how many is not known yet */
#define TK_EVF_CGROUP    0x80u   /* fork, exec: cgroup_id is valid */
#define TK_EVF_ARGV      0x100u  /* exec: argv holds argv_len bytes of the arguments */
#define TK_EVF_ARGV_TRUNC 0x200u /* exec: the arguments went on past argv */
#define TK_EVF_ARGV_LOST 0x400u  /* exec (connector): its arguments could not be read as
                                  * its own (gone, or exec'd again, before the read) */
#define TK_EVF_FROM_PROC 0x800u  /* exec (connector): filename, argv and comm were read
                                  * from /proc after the exec, not at it */
#define TK_EVF_WHO       0x1000u /* fork, exec: uid and gid are valid */
#define TK_EVF_LOGINUID  0x2000u /* fork, exec: loginuid is valid */
#define TK_EVF_WHO_LOST  0x4000u /* fork, exec (connector): the ids could not be read as
                                  * this process's (gone before the read, or voided
                                  * with an exec's argv) */

#define TK_EV_COMM_LEN 16
#define TK_EV_FILENAME_LEN 128
/* The arguments as the process's arg area holds them, each NUL-terminated:
 * room for 16 arguments of 31 bytes, or fewer longer ones. */
#define TK_EV_ARGV_LEN 512

struct tk_event {
	__u32 type;           /* enum tk_event_type */
	__u32 flags;          /* TK_EVF_* */
	__u32 pid;            /* thread-group id */
	__u32 tid;
	__u32 ppid;           /* 0 when unknown */
	__u32 exit_code;      /* exit(2) status, when TK_EVF_EXITED */
	__u32 exit_signal;    /* terminating signal, when TK_EVF_SIGNALED */
	/* fork, exec (TK_EVF_WHO): the effective ids, as the initial user
	 * namespace numbers them; loginuid (TK_EVF_LOGINUID) the audit login
	 * uid, 4294967295 when none was ever set. */
	__u32 uid;
	__u64 time_ns;        /* CLOCK_BOOTTIME */
	/* exit, bpf only (TK_EVF_ACCT): raw sums, split in user space */
	__u64 utime_ns;
	__u64 stime_ns;
	__u64 runtime_ns;
	__u64 maxrss_bytes;
	__u64 cgroup_id;      /* cgroup v2 id (the inode number of its directory) */
	__u64 lost;           /* TK_EV_LOST: how many (0 with TK_EVF_OVERRUN) */
	__u64 start_ns;       /* exit, bpf only: the process's start (CLOCK_BOOTTIME) */
	char comm[TK_EV_COMM_LEN];
	char filename[TK_EV_FILENAME_LEN];   /* exec; empty otherwise */
	__u32 gid;
	__u32 loginuid;
	__u32 argv_len;       /* exec, TK_EVF_ARGV: bytes used in argv */
	__u32 pad;
	/* Last: every other event type is sent without it (TK_EV_BASE_SIZE). */
	char argv[TK_EV_ARGV_LEN];
};

#define TK_EV_BASE_SIZE __builtin_offsetof(struct tk_event, argv)

/* The fields a reader finds in an event table, in order: one row each,
 * X(name, member, kind, types, when, flags).
 *   member: the struct tk_event member read; for kind BOOL the flag whose
 *           presence is the value.
 *   kind:   TYPE (the type's name), INT, STR (a NUL-padded array), BOOL,
 *           ARGV (the NUL-separated argv_len bytes of argv, as a list),
 *           FROM (for the flag `member`: "proc-later" when set, else "exec"),
 *           REALTIME (the CLOCK_BOOTTIME `member` as CLOCK_REALTIME, by the
 *           clocks' offset when the stream was read; never on the wire).
 *   types:  TK_EV_BIT of the event types that carry it.
 *   when:   ALWAYS; ANY or ALL of `flags` set; NONE of them set; NONZERO
 *           (the member is not 0 or empty).
 *   by:     the backends that fill it (TK_EVB_*), for at least one of its
 *           types: core.event_field_backends, which spec/06-events checks
 *           on each backend.
 * The layout above is the wire's; this list is the reader's view of it. */
#define TK_EVB_BPF  0x1u
#define TK_EVB_CONN 0x2u
#define TK_EVB_POLL 0x4u
#define TK_EVB_ALL  (TK_EVB_BPF | TK_EVB_CONN | TK_EVB_POLL)
#define TK_EVB_EXEC (TK_EVB_BPF | TK_EVB_CONN)
#define TK_EV_ANY_TYPE (TK_EV_BIT(TK_EV_FORK) | TK_EV_BIT(TK_EV_EXEC) | TK_EV_BIT(TK_EV_EXIT) | \
                        TK_EV_BIT(TK_EV_COMM) | TK_EV_BIT(TK_EV_LOST))
#define TK_EV_PROC_TYPES (TK_EV_ANY_TYPE & ~TK_EV_BIT(TK_EV_LOST))
#define TK_EV_WHO_TYPES (TK_EV_BIT(TK_EV_FORK) | TK_EV_BIT(TK_EV_EXEC))
#define TK_EVENT_FIELDS(X) \
	X(type,           type,              TYPE, TK_EV_ANY_TYPE,        ALWAYS,  0, TK_EVB_ALL) \
	X(time_ns,        time_ns,           INT,  TK_EV_ANY_TYPE,        ALWAYS,  0, TK_EVB_ALL) \
	X(realtime_ns,    time_ns,           REALTIME, TK_EV_ANY_TYPE,    ALWAYS,  0, TK_EVB_ALL) \
	X(count,          lost,              INT,  TK_EV_BIT(TK_EV_LOST), NONE,    TK_EVF_OVERRUN, TK_EVB_BPF | TK_EVB_CONN) \
	X(overrun,        TK_EVF_OVERRUN,    BOOL, TK_EV_BIT(TK_EV_LOST), ANY,     TK_EVF_OVERRUN, TK_EVB_CONN) \
	X(pid,            pid,               INT,  TK_EV_PROC_TYPES,      ALWAYS,  0, TK_EVB_ALL) \
	X(tid,            tid,               INT,  TK_EV_PROC_TYPES,      ALWAYS,  0, TK_EVB_ALL) \
	X(ppid,           ppid,              INT,  TK_EV_PROC_TYPES,      NONZERO, 0, TK_EVB_ALL) \
	X(comm,           comm,              STR,  TK_EV_PROC_TYPES,      ANY,     TK_EVF_COMM, TK_EVB_ALL) \
	X(uid,            uid,               INT,  TK_EV_WHO_TYPES,       ANY,     TK_EVF_WHO, TK_EVB_EXEC) \
	X(gid,            gid,               INT,  TK_EV_WHO_TYPES,       ANY,     TK_EVF_WHO, TK_EVB_EXEC) \
	X(loginuid,       loginuid,          INT,  TK_EV_WHO_TYPES,       ANY,     TK_EVF_LOGINUID, TK_EVB_EXEC) \
	X(who_lost,       TK_EVF_WHO_LOST,   BOOL, TK_EV_WHO_TYPES,       ANY,     TK_EVF_WHO_LOST, TK_EVB_CONN) \
	X(filename,       filename,          STR,  TK_EV_BIT(TK_EV_EXEC), NONZERO, 0, TK_EVB_EXEC) \
	X(argv_from,      TK_EVF_FROM_PROC,  FROM, TK_EV_BIT(TK_EV_EXEC), ALWAYS,  0, TK_EVB_EXEC) \
	X(argv_lost,      TK_EVF_ARGV_LOST,  BOOL, TK_EV_BIT(TK_EV_EXEC), ANY,     TK_EVF_ARGV_LOST, TK_EVB_CONN) \
	X(argv,           argv,              ARGV, TK_EV_BIT(TK_EV_EXEC), ANY,     TK_EVF_ARGV, TK_EVB_EXEC) \
	X(argv_truncated, TK_EVF_ARGV_TRUNC, BOOL, TK_EV_BIT(TK_EV_EXEC), ALL,     TK_EVF_ARGV | TK_EVF_ARGV_TRUNC, TK_EVB_EXEC) \
	X(cgroup_id,      cgroup_id,         INT,  TK_EV_PROC_TYPES & ~TK_EV_BIT(TK_EV_COMM), \
	                                                                  ANY,     TK_EVF_CGROUP | TK_EVF_ACCT, TK_EVB_BPF) \
	X(code,           exit_code,         INT,  TK_EV_BIT(TK_EV_EXIT), ANY,     TK_EVF_EXITED, TK_EVB_EXEC) \
	X(signal,         exit_signal,       INT,  TK_EV_BIT(TK_EV_EXIT), ANY,     TK_EVF_SIGNALED, TK_EVB_EXEC) \
	X(core,           TK_EVF_CORE,       BOOL, TK_EV_BIT(TK_EV_EXIT), ANY,     TK_EVF_SIGNALED, TK_EVB_EXEC) \
	X(utime_ns,       utime_ns,          INT,  TK_EV_BIT(TK_EV_EXIT), ANY,     TK_EVF_ACCT, TK_EVB_BPF) \
	X(stime_ns,       stime_ns,          INT,  TK_EV_BIT(TK_EV_EXIT), ANY,     TK_EVF_ACCT, TK_EVB_BPF) \
	X(maxrss_bytes,   maxrss_bytes,      INT,  TK_EV_BIT(TK_EV_EXIT), ANY,     TK_EVF_ACCT, TK_EVB_BPF) \
	X(start_ns,       start_ns,          INT,  TK_EV_BIT(TK_EV_EXIT), ANY,     TK_EVF_ACCT, TK_EVB_BPF) \
	X(observed,       TK_EVF_OBSERVED,   BOOL, TK_EV_PROC_TYPES & ~TK_EV_BIT(TK_EV_EXEC), \
	                                                                  ANY,     TK_EVF_OBSERVED, TK_EVB_POLL)

/* A bpf stream's ring buffer when no size is asked for: 4 MiB. */
#define TK_EV_RING_DEFAULT (1u << 22)

/* Decodes an exit status in wait(2)'s format (task->exit_code) into the
 * event: for the BPF program and the proc connector parser alike. */
static inline void tk_event_exit_status(struct tk_event *e, __u32 status)
{
	if (status & 0x7f) {
		e->exit_signal = status & 0x7f;
		e->flags |= TK_EVF_SIGNALED | ((status & 0x80) ? TK_EVF_CORE : 0);
	} else {
		e->exit_code = (status >> 8) & 0xff;
		e->flags |= TK_EVF_EXITED;
	}
}

#endif
