// SPDX-License-Identifier: GPL-2.0
/* Process events for takana.events{backend="bpf"}: fork, exec, exit and
 * comm from BTF tracepoints into a ring buffer (Linux >= 5.8). Threads are
 * folded into processes here: a fork that creates a thread is not an event,
 * and exit is reported once per process, by a thread that finds the group
 * dead, with the process's final CPU times, peak rss and cgroup. Pids are
 * those of the reader's pid namespace. */
#include "takana_task.bpf.h"
#include <bpf/bpf_tracing.h>
#include "takana_event.h"

char LICENSE[] SEC("license") = "GPL";

#define SIGNAL_GROUP_EXIT 0x4u
#define BPF_NOEXIST       1u          /* bpf_map_update_elem: create only */
#define EEXIST            17
#define MAP_TYPE_LRU_HASH 9           /* BPF_MAP_TYPE_LRU_HASH, not in vmlinux_min.h */
/* Each CPU evicts only from its own list, so a claim is never taken from
 * under a CPU by another's batch. On Debian's 6.1 a storm still showed two
 * exits for one process now and then, cause not found; the reader drops
 * the second by (pid, start) (events.c, exit_seen_before). */
#define BPF_F_NO_COMMON_LRU (1u << 1)

/* max_entries (the ring's bytes, a power of two) is set by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, TK_EV_RING_DEFAULT);
} events SEC(".maps");

/* Exit claims: one entry per process whose group was found dead, keyed so
 * that a later process cannot match an old entry (a signal_struct is
 * reused at once by the slab, a pid after wrapping, both never together
 * with the leader's start time). Entries matter for microseconds, until
 * the group's last thread has passed the tracepoint; the LRU drops them
 * afterwards. max_entries is set by the loader. */
struct exit_key {
	__u64 signal;          /* the signal_struct's address */
	__u64 start_ns;        /* the group leader's start_boottime */
	__u32 tgid;
	__u32 pad;
};

struct {
	__uint(type, MAP_TYPE_LRU_HASH);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(max_entries, 8192);
	__type(key, struct exit_key);
	__type(value, __u8);
} exit_claims SEC(".maps");

/* Reservations that failed because the ring was full, by event type. */
__u64 lost[TK_EV_TYPES];

/* The inode number of the reader's pid namespace when it is not the
 * initial one (0 then): pids are translated into it. Set by the loader. */
const volatile __u32 reader_pidns = 0;

/* The ___tk flavours of pid numbering are in takana_core_fixes.bpf.h. */
#define MAX_PID_NS_LEVEL 32

/* pid_nr_ns(): the number a struct pid has in the reader's namespace, 0
 * when it has none there (a process outside it, as getppid() says 0 for a
 * parent outside). A pid is numbered in its own namespace and every one
 * above it, numbers[0] being the initial one's. */
static __always_inline __u32 pid_in_reader_ns(struct pid *pid)
{
	struct pid___tk *p = (void *)pid;
	unsigned int level;

	if (!p)
		return 0;
	level = BPF_CORE_READ(p, level);
	for (unsigned int i = 1; i < MAX_PID_NS_LEVEL; i++) {
		struct upid___tk *u;

		if (i > level)
			break;
		u = (void *)p + bpf_core_field_offset(struct pid___tk, numbers) +
		    i * bpf_core_type_size(struct upid___tk);
		if (BPF_CORE_READ(u, ns, ns.inum) == reader_pidns)
			return (__u32)BPF_CORE_READ(u, nr);
	}
	return 0;
}

struct event_ids {
	__u32 pid, tid, ppid;
};

/* The task's ids as the reader numbers them; false when the task is not
 * in the reader's namespace (then it is not the reader's event). */
static __always_inline bool event_ids(struct task_struct *t, struct event_ids *ids)
{
	if (!reader_pidns) {
		ids->pid = t->tgid;
		ids->tid = t->pid;
		ids->ppid = t->real_parent->tgid;
		return true;
	}
	ids->pid = pid_in_reader_ns(t->group_leader->thread_pid);
	ids->tid = pid_in_reader_ns(t->thread_pid);
	ids->ppid = pid_in_reader_ns(t->real_parent->group_leader->thread_pid);
	return ids->pid != 0 && ids->tid != 0;
}

/* size: TK_EV_BASE_SIZE, or the whole event for exec (its argv). */
static __always_inline struct tk_event *event_reserve(__u32 type, struct task_struct *t,
                                                      __u64 size)
{
	struct event_ids ids;
	struct tk_event *e;

	if (!event_ids(t, &ids))
		return NULL;
	e = bpf_ringbuf_reserve(&events, size, 0);
	if (!e) {
		if (type < TK_EV_TYPES)
			__sync_fetch_and_add(&lost[type], 1);
		return NULL;
	}
	/* Ring memory is not zeroed; argv is, up to argv_len, by its read. */
	__builtin_memset(e, 0, TK_EV_BASE_SIZE);
	e->type = type;
	e->time_ns = bpf_ktime_get_boot_ns();
	e->pid = ids.pid;
	e->tid = ids.tid;
	e->ppid = ids.ppid;
	return e;
}

static __always_inline void event_comm(struct tk_event *e, const char *comm)
{
	bpf_probe_read_kernel_str(e->comm, sizeof e->comm, comm);
	e->flags |= TK_EVF_COMM;
}

/* Who the process is: its objective credentials' effective ids (what
 * /proc/<pid>/status shows second on its Uid and Gid lines, and what the
 * snapshots' uid means), fixed by this point (copy_creds in fork,
 * commit_creds before this tracepoint in exec), and its login uid. */
static __always_inline void event_who(struct tk_event *e, struct task_struct *t)
{
	const struct cred *c = t->real_cred;

	e->uid = c->euid.val;
	e->gid = c->egid.val;
	e->flags |= TK_EVF_WHO;
	if (task_loginuid(t, &e->loginuid))
		e->flags |= TK_EVF_LOGINUID;
}

/* getrusage's ru_maxrss: signal->maxrss gets the exiting thread's high
 * water mark in do_exit(); if this tracepoint runs before that, the mm is
 * still attached and gives it. */
static __always_inline __u64 exit_maxrss_pages(struct task_struct *p, struct signal_struct *sig)
{
	struct mm_struct *mm = p->mm;
	__u64 pages = sig->maxrss;

	if (mm) {
		__u64 rss = mm_rss_pages(mm);
		__u64 hiwater = mm->hiwater_rss > rss ? mm->hiwater_rss : rss;

		if (hiwater > pages)
			pages = hiwater;
	}
	return pages;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	struct tk_event *e;

	if (child->pid != child->tgid)
		return 0;
	e = event_reserve(TK_EV_FORK, child, TK_EV_BASE_SIZE);
	if (!e)
		return 0;
	event_comm(e, child->comm);
	event_who(e, child);
	e->cgroup_id = BPF_CORE_READ(child, cgroups, dfl_cgrp, kn, id);
	e->flags |= TK_EVF_CGROUP;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, int old_pid, struct linux_binprm *bprm)
{
	struct tk_event *e = event_reserve(TK_EV_EXEC, p, sizeof(struct tk_event));
	struct mm_struct *mm;
	__u64 start, len;

	if (!e)
		return 0;
	event_comm(e, p->comm);
	event_who(e, p);
	bpf_probe_read_kernel_str(e->filename, sizeof e->filename, BPF_CORE_READ(bprm, filename));
	e->cgroup_id = BPF_CORE_READ(p, cgroups, dfl_cgrp, kn, id);
	e->flags |= TK_EVF_CGROUP;
	/* The new image's arguments, copied onto its stack by execve just
	 * before this tracepoint: present, and nobody can have changed them
	 * yet (a read at receipt races the program's own exit and exec). */
	mm = BPF_CORE_READ(p, mm);
	start = BPF_CORE_READ(mm, arg_start);
	len = BPF_CORE_READ(mm, arg_end) - start;
	if (len > TK_EV_ARGV_LEN) {
		len = TK_EV_ARGV_LEN;
		e->flags |= TK_EVF_ARGV_TRUNC;
	}
	if (len > 0 && bpf_probe_read_user(e->argv, len, (void *)start) == 0) {
		e->argv_len = (__u32)len;
		e->flags |= TK_EVF_ARGV;
	}
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	struct signal_struct *sig = p->signal;
	struct tk_event *e;
	struct exit_key key = {};
	__u8 one = 1;
	__u32 status;

	/* do_exit() counts the thread out of signal->live before this
	 * tracepoint: zero means the whole process is gone. Several threads
	 * exiting at once can all see zero, though; the one whose decrement
	 * reached zero (group_dead) is known only inside do_exit() (6.16
	 * passes it to this tracepoint, 6.1 does not; taskstats_exit() and
	 * acct_process() get it but depend on kernel options). So the first
	 * thread to see zero claims the exit, atomically: an insert that
	 * fails when the key exists. */
	if (sig->live.counter != 0)
		return 0;
	key.signal = (__u64)sig;
	key.start_ns = p->group_leader->start_boottime;
	key.tgid = p->tgid;
	/* Only a claim already there stops this one: if the map cannot take
	 * it, a duplicate is better than a missed exit. */
	if (bpf_map_update_elem(&exit_claims, &key, &one, BPF_NOEXIST) == -EEXIST)
		return 0;
	e = event_reserve(TK_EV_EXIT, p, TK_EV_BASE_SIZE);
	if (!e)
		return 0;
	status = (sig->flags & SIGNAL_GROUP_EXIT) ? sig->group_exit_code : p->exit_code;
	tk_event_exit_status(e, status);
	/* Threads already released have added their times to signal_struct;
	 * one still on its way out beside this one (the same exit_group) adds
	 * its own after this point and is missed. */
	e->utime_ns = sig->utime + p->utime;
	e->stime_ns = sig->stime + p->stime;
	e->runtime_ns = sig->sum_sched_runtime + p->se.sum_exec_runtime;
	e->maxrss_bytes = exit_maxrss_pages(p, sig) * page_size;
	e->cgroup_id = BPF_CORE_READ(p, cgroups, dfl_cgrp, kn, id);
	e->start_ns = key.start_ns;
	e->flags |= TK_EVF_ACCT;
	event_comm(e, p->comm);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tp_btf/task_rename")
int BPF_PROG(on_rename, struct task_struct *task, const char *comm)
{
	struct tk_event *e;

	/* exec renames too; that is the exec event, not a comm event. */
	if (BPF_CORE_READ_BITFIELD(task, in_execve))
		return 0;
	e = event_reserve(TK_EV_COMM, task, TK_EV_BASE_SIZE);
	if (!e)
		return 0;
	event_comm(e, comm);
	bpf_ringbuf_submit(e, 0);
	return 0;
}
