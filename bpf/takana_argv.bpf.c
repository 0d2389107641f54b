// SPDX-License-Identifier: GPL-2.0
/* A snapshot's cmdline field: after a BPF walk, each record's argument area
 * copied from its process's memory (bpf_copy_from_user_task, which may
 * fault pages in: the program is sleepable) in one BPF_PROG_TEST_RUN. Each
 * process is found again by pid and must have the record's start time, so a
 * reused pid never answers for it. Linux >= 6.10 (bpf_task_from_pid from a
 * syscall program); the loader sets BPF_F_SLEEPABLE. */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include "takana_argv.h"

char LICENSE[] SEC("license") = "GPL";

struct argv_text {
	char bytes[TK_ARGV_TEXT];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct tk_argv_slot);
	__uint(max_entries, TK_ARGV_SLOTS);
} slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct argv_text);
	__uint(max_entries, 1);
} text SEC(".maps");

__u32 count;       /* in: slots [0, count) */
__u32 next;        /* out: the first slot not done (count when all were) */
__u32 used;        /* out: bytes of text used */

extern struct task_struct *bpf_task_from_pid(__s32 pid) __ksym;
extern void bpf_task_release(struct task_struct *p) __ksym;
extern int bpf_iter_num_new(struct bpf_iter_num *it, int start, int end) __ksym;
extern int *bpf_iter_num_next(struct bpf_iter_num *it) __ksym;
extern void bpf_iter_num_destroy(struct bpf_iter_num *it) __ksym;

static __always_inline __u32 argv_copy(struct tk_argv_slot *s, struct task_struct *t,
                                       struct argv_text *tx, __u32 off)
{
	struct mm_struct *mm;
	__u64 exec_id, start, end, last;

	if (t->start_boottime != s->start_ns)
		return TK_ARGV_GONE;
	mm = t->mm;
	if (!mm)
		return TK_ARGV_EMPTY;
	exec_id = t->self_exec_id;
	start = mm->arg_start;
	end = mm->arg_end;
	if (end <= start)
		return TK_ARGV_EMPTY;     /* get_mm_cmdline(): nothing to show */
	last = end - start - 1;     /* bounded below too, for the verifier */
	if (last >= TK_ARGV_MAX)
		return TK_ARGV_ASK_PROC;
	if (bpf_copy_from_user_task(tx->bytes + off, (__u32)last + 1, (void *)start, t, 0) != 0)
		return TK_ARGV_ASK_PROC;
	/* An exec meanwhile replaced the memory read; an area not ended by a
	 * NUL was rewritten, and /proc then reads on past its end. */
	if (t->self_exec_id != exec_id || t->mm != mm || tx->bytes[off + last] != '\0')
		return TK_ARGV_ASK_PROC;
	s->off = off;
	s->len = (__u32)last + 1;
	used = off + (__u32)last + 1;
	return TK_ARGV_OK;
}

SEC("syscall")
int read_argv(void *ctx)
{
	struct argv_text *tx;
	struct bpf_iter_num it;
	__u32 zero = 0;
	int *i;

	used = 0;
	next = count;
	tx = bpf_map_lookup_elem(&text, &zero);
	if (!tx)
		return 0;
	bpf_iter_num_new(&it, 0, count < TK_ARGV_SLOTS ? (int)count : (int)TK_ARGV_SLOTS);
	while ((i = bpf_iter_num_next(&it))) {
		__u32 k = (__u32)*i, off = used;
		struct tk_argv_slot *s = bpf_map_lookup_elem(&slots, &k);
		struct task_struct *t;

		if (!s)
			break;
		if (off > TK_ARGV_TEXT - TK_ARGV_MAX) {
			next = k;
			break;
		}
		t = bpf_task_from_pid((__s32)s->pid);
		if (!t) {
			s->status = TK_ARGV_ASK_PROC;
			continue;
		}
		s->status = argv_copy(s, t, tx, off);
		bpf_task_release(t);
	}
	bpf_iter_num_destroy(&it);
	return 0;
}
