/* The few kernel types takana's BPF programs read, declared by hand with
 * preserve_access_index so libbpf relocates every field against the running
 * kernel's BTF (CO-RE). Committed instead of a `bpftool btf dump` of the
 * build host: the build must not depend on the build host's kernel.
 *
 * Only the fields read are declared; their order and offsets here mean
 * nothing. Renamed or retyped fields are declared here as the newest
 * kernels have them; their older variants (___flavour types and the tests
 * that choose) are in takana_core_fixes.bpf.h. */
#ifndef TAKANA_VMLINUX_MIN_H
#define TAKANA_VMLINUX_MIN_H

typedef signed char __s8;
typedef unsigned char __u8;
typedef short __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
#define true 1
#define false 0

enum bpf_map_type {
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_RINGBUF = 27,
};

enum {
	BPF_F_MMAPABLE = 1u << 10,
};

/* include/linux/pid.h */
enum pid_type {
	PIDTYPE_PID,
	PIDTYPE_TGID,
	PIDTYPE_PGID,
	PIDTYPE_SID,
	PIDTYPE_MAX,
};

/* kernel/bpf/task_iter.c */
enum {
	BPF_TASK_ITER_ALL_PROCS,
	BPF_TASK_ITER_ALL_THREADS,
	BPF_TASK_ITER_PROC_THREADS,
};

/* Opaque kfunc iterator state: the verifier matches it by name and size. */
struct bpf_iter_num {
	__u64 __opaque[1];
} __attribute__((aligned(8)));

struct bpf_iter_task {
	__u64 __opaque[3];
} __attribute__((aligned(8)));

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

typedef struct {
	__u32 val;
} kuid_t;

typedef struct {
	__u32 val;
} kgid_t;

struct cred {
	kuid_t euid;
	kgid_t egid;
};

struct upid {
	int nr;
};

struct pid {
	unsigned int level;
	struct upid numbers[1];
};

struct prev_cputime {
	__u64 utime;
	__u64 stime;
};

typedef struct {
	int counter;
} atomic_t;

struct list_head {
	struct list_head *next;
	struct list_head *prev;
};

struct signal_struct {
	atomic_t live;
	struct list_head thread_head;      /* 6.6+ */
	int group_exit_code;
	unsigned int flags;
	unsigned long maxrss;
	int nr_threads;
	struct prev_cputime prev_cputime;
	unsigned long long sum_sched_runtime;
	struct pid *pids[PIDTYPE_MAX];
	__u64 utime;
	__u64 stime;
	unsigned long min_flt;
	unsigned long maj_flt;
};

/* Since 6.2 the rss counters are percpu_counters; before, atomic longs. */
struct percpu_counter {
	__s64 count;
};

struct mm_struct {
	unsigned long arg_start;
	unsigned long arg_end;
	unsigned long hiwater_rss;
	unsigned long total_vm;
	unsigned long flags;          /* before 6.18: a plain word */
	struct percpu_counter rss_stat[4];
};

struct sched_entity {
	__u64 sum_exec_runtime;
};

/* kernel/kthread.c: a kernel thread's longer name (5.17+: worker_private). */
struct kthread {
	void *data;
	char *full_name;
};

/* kernel/workqueue_internal.h: what /proc appends to a worker's name. */
struct work_struct;
struct worker_pool;

struct workqueue_struct {
	char name[32];
};

struct worker {
	struct work_struct *current_work;
	struct worker_pool *pool;
	struct workqueue_struct *rescue_wq;
	char desc[32];
};

struct kernfs_node {
	__u64 id;
};

struct cgroup {
	struct kernfs_node *kn;
};

struct css_set {
	struct cgroup *dfl_cgrp;
};

struct linux_binprm {
	const char *filename;
};

struct task_struct {
	unsigned int __state;
	int exit_code;
	unsigned int in_execve: 1;
	struct css_set *cgroups;
	int exit_state;
	unsigned int flags;
	int static_prio;
	int pid;
	int tgid;
	struct task_struct *real_parent;
	struct task_struct *group_leader;
	struct pid *thread_pid;
	struct list_head thread_node;      /* 6.6+ */
	struct mm_struct *mm;
	struct signal_struct *signal;
	const struct cred *real_cred;
	const struct cred *cred;
	struct sched_entity se;
	void *worker_private;
	__u64 utime;
	__u64 stime;
	__u64 start_boottime;
	__u64 self_exec_id;
	unsigned long min_flt;
	unsigned long maj_flt;
	char comm[16];
};

struct seq_file;

struct bpf_iter_meta {
	struct seq_file *seq;
	__u64 session_id;
	__u64 seq_num;
};

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
};

#pragma clang attribute pop

#endif
