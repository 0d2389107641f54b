/* Every place where the kernel's types differ between the versions takana
 * runs on, in one file (as libbpf-tools' core_fixes.bpf.h): each variant is
 * a ___flavour type libbpf relocates against the running kernel's BTF, or a
 * bpf_core_field_exists / bpf_core_type_exists test that libbpf turns into
 * a constant at load (the branch not taken is dropped by the verifier),
 * with the kernel version that needs it. vmlinux_min.h declares the types
 * as the newest kernels have them. */
#ifndef TAKANA_CORE_FIXES_BPF_H
#define TAKANA_CORE_FIXES_BPF_H

#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

/* Before 5.14 ("sched: Change task_struct::state"): task_struct::state, a
 * long; since, __state, an unsigned int. */
struct task_struct___state_long {
	long state;
};

/* Before 6.2: the rss counters are atomic longs in an mm_rss_stat; since
 * ("mm: convert mm's rss stats into percpu_counter"), percpu_counters. */
typedef struct {
	long counter;
} atomic_long_t;

struct mm_rss_stat {
	atomic_long_t count[4];
};

struct mm_struct___atomic_rss {
	struct mm_rss_stat rss_stat;
};

/* Since 6.18: mm_struct::flags is an mm_flags_t bitmap; before, a plain
 * word. */
struct mm_flags_word {
	unsigned long __mm_flags[1];
};

struct mm_struct___flags_bitmap {
	struct mm_flags_word flags;
};

/* Pid numbering beyond vmlinux_min.h, for pid_nr_ns() in the events
 * program: the same layout on 6.1 and later; since 6.5 numbers[] is a
 * flexible array, so a level's entry is found by the relocated offset and
 * size, not by indexing a one-element array. */
struct ns_common___tk {
	unsigned int inum;
};

struct pid_namespace___tk {
	struct ns_common___tk ns;
};

struct upid___tk {
	int nr;
	struct pid_namespace___tk *ns;
};

struct pid___tk {
	unsigned int level;
	struct upid___tk numbers[1];
};

/* task_struct::loginuid exists only with CONFIG_AUDIT (6.1 and later
 * alike; Debian's kernels have it). */
struct task_struct___audit {
	kuid_t loginuid;
};

#pragma clang attribute pop

/* The task's state word (get_task_state()), before or after 5.14. */
static __always_inline __u32 task_state_word(struct task_struct *t)
{
	if (bpf_core_field_exists(t->__state))
		return t->__state;
	return (__u32)((struct task_struct___state_long *)t)->state;
}

#define MM_FILEPAGES      0
#define MM_ANONPAGES      1
#define MM_SHMEMPAGES     3

static __always_inline __u64 counter_positive(__s64 v)
{
	return v > 0 ? (__u64)v : 0;
}

/* get_mm_rss(): file + anon + shmem pages, each read as
 * percpu_counter_read_positive() (6.2+) or atomic_long_read() before.
 * The pre-6.2 counters are read with bpf_probe_read_kernel: before 6.2 the
 * verifier cannot walk a direct load through an array of the typedef
 * atomic_long_t ("Type 'atomic_long_t' is not a struct", seen on 6.1). */
static __always_inline __u64 mm_rss_pages(struct mm_struct *mm)
{
	if (bpf_core_type_exists(struct mm_rss_stat)) {
		struct mm_struct___atomic_rss *old = (void *)mm;

		return counter_positive(BPF_CORE_READ(old, rss_stat.count[MM_FILEPAGES].counter)) +
		       counter_positive(BPF_CORE_READ(old, rss_stat.count[MM_ANONPAGES].counter)) +
		       counter_positive(BPF_CORE_READ(old, rss_stat.count[MM_SHMEMPAGES].counter));
	}
	return counter_positive(mm->rss_stat[MM_FILEPAGES].count) +
	       counter_positive(mm->rss_stat[MM_ANONPAGES].count) +
	       counter_positive(mm->rss_stat[MM_SHMEMPAGES].count);
}

/* mm_struct's first flags word, before or after 6.18. */
static __always_inline unsigned long mm_flags_word(struct mm_struct *mm)
{
	struct mm_struct___flags_bitmap *bitmap = (void *)mm;

	if (bpf_core_field_exists(bitmap->flags))
		return bitmap->flags.__mm_flags[0];
	return mm->flags;
}

/* Since 5.17 ("kthread: Generalize pf_io_worker so it can point to struct
 * kthread") a kernel thread's struct kthread is task_struct::worker_private.
 * Before, there is none to read here: false, and the caller keeps comm. */
static __always_inline bool task_has_worker_private(struct task_struct *t)
{
	return bpf_core_field_exists(t->worker_private);
}

/* Since 6.9 a workqueue worker knows the workqueue it rescues for
 * (worker::rescue_wq), and a rescuer's comm is "kworker/R-" and a
 * truncated wq name that /proc completes. */
static __always_inline bool worker_has_rescue_wq(struct worker *w)
{
	return bpf_core_field_exists(w->rescue_wq);
}

/* The task's audit login uid into *out; false when the kernel has none to
 * give (CONFIG_AUDIT off: the events stream says why, from user space). */
static __always_inline bool task_loginuid(struct task_struct *t, __u32 *out)
{
	struct task_struct___audit *a = (void *)t;

	if (!bpf_core_field_exists(a->loginuid))
		return false;
	*out = BPF_CORE_READ(a, loginuid.val);
	return true;
}

#endif
