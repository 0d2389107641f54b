/* Filling one tk_record from a task_struct, shared by the kfunc and the
 * iter/task programs so both mean exactly what /proc/<pid>/stat means
 * (fs/proc/array.c do_task_stat, fs/proc/base.c task_dump_owner). */
#ifndef TAKANA_TASK_BPF_H
#define TAKANA_TASK_BPF_H

#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "takana_core_fixes.bpf.h"
#include "takana_record.h"

#define PF_WQ_WORKER      0x00000020u
#define PF_KTHREAD        0x00200000u
#define TASK_REPORT       0x7fu       /* RUNNING..PARKED, the states /proc reports */
#define TASK_REPORT_IDLE  0x80u
#define TASK_IDLE         0x402u      /* UNINTERRUPTIBLE | NOLOAD */
#define TASK_RTLOCK_WAIT  0x1000u
#define MMF_DUMPABLE_MASK 3ul
#define SUID_DUMP_USER    1ul
#define NICE_BASE         120         /* MAX_RT_PRIO + NICE_WIDTH / 2 */

/* Set by the loader before load. */
const volatile __u64 page_size = 4096;

/* Set when the reader is not in the initial pid namespace: the records'
 * pids would then be global numbers, not the caller's. */
__u32 foreign_pidns;

static __always_inline bool reader_in_foreign_pidns(void)
{
	struct task_struct *me = bpf_get_current_task_btf();

	if (me->thread_pid->level == 0)
		return false;
	foreign_pidns = 1;
	return true;
}

/* get_task_state(): the highest reported bit picks the letter. */
static __always_inline __u32 task_state_letter(struct task_struct *t)
{
	__u32 st, rep;

	st = task_state_word(t);
	rep = (st | (__u32)t->exit_state) & TASK_REPORT;
	if (st == TASK_IDLE)
		rep = TASK_REPORT_IDLE;
	else if (st == TASK_RTLOCK_WAIT)
		rep = 2;
	if (rep & 0x80) return 'I';
	if (rep & 0x40) return 'P';
	if (rep & 0x20) return 'Z';
	if (rep & 0x10) return 'X';
	if (rep & 0x08) return 't';
	if (rep & 0x04) return 'T';
	if (rep & 0x02) return 'D';
	if (rep & 0x01) return 'S';
	return 'R';
}

/* The owner /proc/<pid> shows: root for kernel threads and for processes
 * that are not dumpable (setuid, PR_SET_DUMPABLE 0), else the euid. */
static __always_inline __u32 task_owner_uid(struct task_struct *t, struct task_struct *pt,
                                            struct mm_struct *mm)
{
	if (t->flags & PF_KTHREAD)
		return 0;
	if (mm && (mm_flags_word(mm) & MMF_DUMPABLE_MASK) != SUID_DUMP_USER)
		return 0;
	return pt->cred->euid.val;
}

static __always_inline __u32 pid_number(struct pid *pid)
{
	return pid ? (__u32)pid->numbers[0].nr : 0;
}

#define RESCUER_PREFIX_LEN 10          /* "kworker/R-" */

static __always_inline bool comm_is_rescuer(const char *comm)
{
	return comm[0] == 'k' && comm[1] == 'w' && comm[2] == 'o' && comm[3] == 'r' &&
	       comm[4] == 'k' && comm[5] == 'e' && comm[6] == 'r' && comm[7] == '/' &&
	       comm[8] == 'R' && comm[9] == '-';
}

/* proc_task_name(): a kernel thread shows its full name (kthread->full_name,
 * up to 63 bytes); a workqueue worker shows its id, "kworker/R-<wq name>"
 * for a rescuer, then "+desc" while it runs a work item or "-desc" after
 * (wq_worker_comm). Read without the workqueue's locks, so a worker's
 * suffix may lag one work item behind /proc's. */
static __always_inline void kthread_name(struct task_struct *t, struct tk_record *r)
{
	struct workqueue_struct *rescue_wq;
	struct kthread *k;
	struct worker *w;
	char *full_name;
	__u32 off;
	long n;

	if (!task_has_worker_private(t))
		return;
	k = BPF_CORE_READ(t, worker_private);
	if (!k)
		return;
	if (!(t->flags & PF_WQ_WORKER)) {
		full_name = BPF_CORE_READ(k, full_name);
		if (!full_name)
			return;
		n = bpf_probe_read_kernel_str(r->comm, sizeof r->comm, full_name);
		r->comm_len = n > 0 ? (__u32)n - 1 : 0;
		return;
	}
	w = BPF_CORE_READ(k, data);
	if (!w)
		return;
	/* Before 6.9 a rescuer's comm is the wq name itself and /proc shows
	 * just that (seen on Debian's 6.1: "rcu_gp"). */
	if (worker_has_rescue_wq(w) && comm_is_rescuer(r->comm) &&
	    (rescue_wq = BPF_CORE_READ(w, rescue_wq))) {
		n = bpf_probe_read_kernel_str(&r->comm[RESCUER_PREFIX_LEN], sizeof rescue_wq->name,
		                              &rescue_wq->name);
		if (n > 0)
			r->comm_len = RESCUER_PREFIX_LEN + (__u32)n - 1;
	}
	if (!BPF_CORE_READ(w, pool))
		return;
	/* Constant read sizes keep the verifier's bounds simple; /proc cuts
	 * the name at 63 bytes too. */
	off = r->comm_len;
	if (off < sizeof r->comm - 1 - sizeof w->desc)
		n = bpf_probe_read_kernel_str(&r->comm[off + 1], sizeof w->desc, &w->desc);
	else if (off < sizeof r->comm - 1 - 16)
		n = bpf_probe_read_kernel_str(&r->comm[off + 1], 16, &w->desc);
	else
		return;
	if (n <= 1)
		return;
	r->comm[off] = BPF_CORE_READ(w, current_work) ? '+' : '-';
	r->comm_len = off + (__u32)n;
}

/* The selection is read afresh at every test: a value kept in a register
 * would carry what each branch taught the verifier about its bits, and the
 * paths through a record would multiply past the verifier's budget. */
#ifndef TK_FILL_ALL
#define TK_FILL_ALL 0
#endif
/* TK_FILL_ALL: a value known at load that makes every test true, which the
 * verifier then drops (the kfunc program's fill_all). */
#define WANTS(want, bits) (TK_FILL_ALL || (*(want) & (bits)))

/* The leader's view of its process; the caller adds the other threads
 * (record_add_thread) when there are any. want: the TK_F_* fields to fill.
 * A load is skipped, with the cache lines behind it, when no selected field
 * needs it; what is not filled holds whatever the slot held before.
 * pt is t again, or an untrusted alias of it (bpf_rdonly_cast) through
 * which the pointer fields are read: a pointer loaded from a trusted or RCU
 * task makes the verifier search the kernel's BTF by name for the fields
 * marked safe, linearly and up to four times, and through an alias it does
 * not (the load is then a checked one, so scalars stay on t). */
static __always_inline void record_fill(struct task_struct *t, struct task_struct *pt,
                                        struct tk_wire_record *w, volatile __u32 *want)
{
	struct tk_record *r = &w->rec;
	struct mm_struct *mm = NULL;
	long len;

	r->pid = t->tgid;
	r->flags = (t->flags & PF_KTHREAD) ? TK_REC_KTHREAD : 0;
	r->start_ns = t->start_boottime;
	r->state = task_state_letter(t);
	if (WANTS(want, TK_F(PPID)))
		r->ppid = pt->real_parent->tgid;
	if (WANTS(want, TK_F(NICE)))
		r->nice = (__u32)(t->static_prio - NICE_BASE);
	if (WANTS(want, (TK_F_MM | TK_F(UID))))
		mm = pt->mm;
	if (WANTS(want, TK_F(UID)))
		r->uid = task_owner_uid(t, pt, mm);
	if (WANTS(want, TK_F_SIGNAL)) {
		struct signal_struct *sig = pt->signal;

		/* Its own cache line: read only when asked for (the reader's
		 * check for a process with no thread left needs it then). */
		if (WANTS(want, TK_F(NTHREADS)))
			r->nthreads = sig->nr_threads;
		if (WANTS(want, (TK_F(PGID) | TK_F(SID)))) {
			r->pgid = pid_number(sig->pids[PIDTYPE_PGID]);
			r->sid = pid_number(sig->pids[PIDTYPE_SID]);
		}
		if (WANTS(want, (TK_F(UTIME) | TK_F(STIME)))) {
			/* signal_struct holds the totals of threads that already exited. */
			r->utime_ns = sig->utime + t->utime;
			r->stime_ns = sig->stime + t->stime;
			w->runtime_ns = sig->sum_sched_runtime + t->se.sum_exec_runtime;
			w->prev_utime_ns = sig->prev_cputime.utime;
			w->prev_stime_ns = sig->prev_cputime.stime;
		}
		if (WANTS(want, (TK_F(MINFLT) | TK_F(MAJFLT)))) {
			r->minflt = sig->min_flt + t->min_flt;
			r->majflt = sig->maj_flt + t->maj_flt;
		}
	}
	if (WANTS(want, TK_F_MM)) {
		if (mm) {
			r->rss_bytes = mm_rss_pages(mm) * page_size;
			r->vsize_bytes = mm->total_vm * page_size;
		} else {
			r->rss_bytes = 0;
			r->vsize_bytes = 0;
		}
	}
	if (WANTS(want, TK_F(CGROUP)))
		r->cgroup_id = pt->cgroups->dfl_cgrp->kn->id;
	if (!(WANTS(want, TK_F(COMM))))
		return;
	if (t->flags & PF_KTHREAD) {
		len = bpf_probe_read_kernel_str(r->comm, sizeof t->comm, t->comm);
		r->comm_len = len > 0 ? (__u32)len - 1 : 0;
		kthread_name(t, r);
	} else {
		/* Two loads, not a string helper call: user space finds the NUL
		 * (TK_WIRE_COMM_NUL). */
		((__u64 *)r->comm)[0] = ((const __u64 *)t->comm)[0];
		((__u64 *)r->comm)[1] = ((const __u64 *)t->comm)[1];
		r->comm_len = TK_WIRE_COMM_NUL;
	}
}

static __always_inline void record_add_thread(struct tk_wire_record *w, struct task_struct *th)
{
	tk_wire_add_thread(w, th->utime, th->stime, th->se.sum_exec_runtime, th->min_flt,
	                   th->maj_flt);
}

#endif
