// SPDX-License-Identifier: GPL-2.0
/* The kfunc snapshot tier: one BPF_PROG_TEST_RUN walks every thread-group
 * leader with the open-coded task iterator (6.7; Linux >= 6.10 lets a
 * syscall program call bpf_task_acquire) and writes the records into an
 * mmapable array that user space reads in place. */
#include "vmlinux_min.h"

/* Set at load: 1 while every snapshot has wanted every field. The verifier
 * then drops the selection's tests (3.5 ms of verification on 6.18 instead
 * of 8.0), and the first snapshot with a selection loads the program again
 * with them. (Debian 6.12's verifier under TCG once did not finish the
 * tests in 400 s: that was its BTF searches, which record_fill avoids.) */
const volatile __u32 fill_all = 0;
#define TK_FILL_ALL fill_all
#include "takana_task.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* The fields asked for (TK_F_* bits), set by user space before each run. */
__u32 want_fields = TK_F_WALK;

extern int bpf_iter_task_new(struct bpf_iter_task *it, struct task_struct *task,
                             unsigned int flags) __weak __ksym;
extern struct task_struct *bpf_iter_task_next(struct bpf_iter_task *it) __weak __ksym;
extern void bpf_iter_task_destroy(struct bpf_iter_task *it) __weak __ksym;
extern struct task_struct *bpf_task_acquire(struct task_struct *p) __ksym;
extern void bpf_task_release(struct task_struct *p) __ksym;
extern void bpf_rcu_read_lock(void) __ksym;
extern void bpf_rcu_read_unlock(void) __ksym;
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

/* max_entries is set by the loader from the process count, with headroom. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct tk_wire_record);
	__uint(max_entries, 1);
} records SEC(".maps");

/* Processes seen in the last run, counted past the map's capacity so the
 * loader can grow it and run again instead of truncating. */
__u32 total;

/* Where the walk leaves pid order: the task list is in creation order, so
 * pids rise along it except after a wrap (or two forks racing between
 * their pid and their place on the list). descent_at holds the index of
 * each record whose pid is below the one before, the first
 * TK_KFUNC_DESCENTS of them; descents counts them all. User space merges
 * the ascending runs between (none: the array is in pid order). */
__u32 last_pid;
__u32 descents;
__u32 descent_at[TK_KFUNC_DESCENTS];

/* The thread iterator wants a trusted task; the outer iterator's is only
 * RCU-protected, so hold a reference while walking. */
static __always_inline void add_other_threads(struct task_struct *t, struct tk_wire_record *w)
{
	struct task_struct *leader = bpf_task_acquire(t);
	struct bpf_iter_task it;
	struct task_struct *th;

	if (!leader)
		return;
	bpf_iter_task_new(&it, leader, BPF_TASK_ITER_PROC_THREADS);
	while ((th = bpf_iter_task_next(&it))) {
		if (th->pid != th->tgid)
			record_add_thread(w, th);
	}
	bpf_iter_task_destroy(&it);
	bpf_task_release(leader);
}

/* thread_group_empty() (6.6+, as is this tier): the leader is the last
 * on its thread list. An address, not a load of signal_struct's line
 * holding nr_threads. */
static __always_inline bool has_other_threads(struct task_struct *t)
{
	__u64 head = (__u64)t->signal + bpf_core_field_offset(struct signal_struct, thread_head);

	return (__u64)t->thread_node.next != head;
}

static __always_inline void record_task(struct task_struct *t, __u32 idx, volatile __u32 *want)
{
	struct tk_wire_record *w = bpf_map_lookup_elem(&records, &idx);

	struct task_struct *u;

	if (!w)
		return;
	/* Pointer fields are read through an untrusted alias (the cast is a
	 * register move once verified): the searches record_fill's comment
	 * describes were 73% of this program's 76 ms verification on 6.18. */
	u = bpf_rdonly_cast(t, bpf_core_type_id_kernel(struct task_struct));
	record_fill(t, u, w, want);
	if (WANTS(want, TK_F_THREADS) && has_other_threads(u))
		add_other_threads(t, w);
}

SEC("syscall")
int snapshot_kfunc(void *ctx)
{
	struct bpf_iter_task it;
	struct task_struct *t;

	total = 0;
	descents = 0;
	last_pid = 0;
	if (reader_in_foreign_pidns())
		return 0;
	bpf_rcu_read_lock();
	bpf_iter_task_new(&it, NULL, BPF_TASK_ITER_ALL_PROCS);
	while ((t = bpf_iter_task_next(&it))) {
		__u32 pid, k;

		if (t->tgid == 0)       /* the idle task; /proc does not list it */
			continue;
		/* The index counts in the global, not a stack variable: a
		 * stack counter used as a map key is tracked precisely, so
		 * no two iterations' states match and the verifier walked
		 * the body ~3.5x as often (6,915 instructions against 1,999). */
		record_task(t, total++, &want_fields);
		/* Nothing held across record_task, and no test of k against
		 * the array's end: either multiplied the walk's states (44 ms
		 * of verification instead of 11), and a call to a function
		 * doing it cost ~10 ns a task. The slot at k takes every index
		 * until a descent keeps it; past the array's end the marks
		 * wrap, and user space, seeing more descents than marks,
		 * sorts. */
		pid = t->tgid;
		k = descents;
		descent_at[k & (TK_KFUNC_DESCENTS - 1)] = total - 1;
		if (pid < last_pid)
			descents = k + 1;
		last_pid = pid;
	}
	bpf_iter_task_destroy(&it);
	bpf_rcu_read_unlock();
	return 0;
}
