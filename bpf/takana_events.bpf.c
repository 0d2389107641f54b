// SPDX-License-Identifier: GPL-2.0
/* Process events for takana.events{backend="bpf"}: fork, exec, exit and
 * comm from BTF tracepoints into a ring buffer (Linux >= 5.8). Threads are
 * folded into processes here: a fork that creates a thread is not an event,
 * and exit is reported once, by the last thread of the group, with the
 * process's final CPU times, peak rss and cgroup. */
#include "takana_task.bpf.h"
#include <bpf/bpf_tracing.h>
#include "takana_event.h"

char LICENSE[] SEC("license") = "GPL";

#define SIGNAL_GROUP_EXIT 0x4u

/* max_entries (the ring's bytes, a power of two) is set by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} events SEC(".maps");

/* Reservations that failed because the ring was full, by event type. */
__u64 lost[TK_EV_TYPES];

static __always_inline struct tk_event *event_reserve(__u32 type, struct task_struct *t)
{
	struct tk_event *e = bpf_ringbuf_reserve(&events, sizeof *e, 0);

	if (!e) {
		if (type < TK_EV_TYPES)
			__sync_fetch_and_add(&lost[type], 1);
		return NULL;
	}
	/* Ring memory is not zeroed. */
	__builtin_memset(e, 0, sizeof *e);
	e->type = type;
	e->time_ns = bpf_ktime_get_boot_ns();
	e->pid = t->tgid;
	e->tid = t->pid;
	e->ppid = t->real_parent->tgid;
	return e;
}

static __always_inline void event_comm(struct tk_event *e, const char *comm)
{
	bpf_probe_read_kernel_str(e->comm, sizeof e->comm, comm);
	e->flags |= TK_EVF_COMM;
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
	e = event_reserve(TK_EV_FORK, child);
	if (!e)
		return 0;
	event_comm(e, child->comm);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, int old_pid, struct linux_binprm *bprm)
{
	struct tk_event *e = event_reserve(TK_EV_EXEC, p);

	if (!e)
		return 0;
	event_comm(e, p->comm);
	bpf_probe_read_kernel_str(e->filename, sizeof e->filename, BPF_CORE_READ(bprm, filename));
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	struct signal_struct *sig = p->signal;
	struct tk_event *e;
	__u32 status;

	/* do_exit() counts the thread out of signal->live before this
	 * tracepoint: zero means the whole process is gone. */
	if (sig->live.counter != 0)
		return 0;
	e = event_reserve(TK_EV_EXIT, p);
	if (!e)
		return 0;
	status = (sig->flags & SIGNAL_GROUP_EXIT) ? sig->group_exit_code : p->exit_code;
	tk_event_exit_status(e, status);
	/* The other threads' times are in signal_struct by now. */
	e->utime_ns = sig->utime + p->utime;
	e->stime_ns = sig->stime + p->stime;
	e->runtime_ns = sig->sum_sched_runtime + p->se.sum_exec_runtime;
	e->maxrss_bytes = exit_maxrss_pages(p, sig) * page_size;
	e->cgroup_id = BPF_CORE_READ(p, cgroups, dfl_cgrp, kn, id);
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
	e = event_reserve(TK_EV_COMM, task);
	if (!e)
		return 0;
	event_comm(e, comm);
	bpf_ringbuf_submit(e, 0);
	return 0;
}
