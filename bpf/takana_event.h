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
#define TK_EVF_ARGV_LOST 0x400u  /* exec (connector): gone before its arguments were read */

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
	__u32 pad;
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
	__u32 argv_len;       /* exec, TK_EVF_ARGV: bytes used in argv */
	__u32 pad2;
	/* Last: every other event type is sent without it (TK_EV_BASE_SIZE). */
	char argv[TK_EV_ARGV_LEN];
};

#define TK_EV_BASE_SIZE __builtin_offsetof(struct tk_event, argv)

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
