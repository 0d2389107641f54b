// SPDX-License-Identifier: GPL-2.0
/* The iter/task snapshot tier (Linux >= 5.8): read() on an iterator fd
 * yields fixed-size records. The iterator visits every thread, so a thread
 * that is not its group's leader yields a TK_REC_THREAD record carrying
 * only its times and faults, which user space adds to its leader. */
#include "takana_task.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* The fields to fill (TK_F_* bits), set by user space before each run: a
 * global, not .rodata, so one loaded program serves every selection. */
__u32 want_fields = TK_F_WALK;

SEC("iter/task")
int snapshot_iter(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *t = ctx->task;
	struct tk_wire_record w = {};

	/* The reader is the same for the whole walk: ask once. */
	if (!t || (ctx->meta->seq_num == 0 ? reader_in_foreign_pidns() : foreign_pidns))
		return 0;
	if (t->pid != t->tgid) {
		/* A thread adds only its times and faults. */
		if (!WANTS(&want_fields, TK_F_THREADS))
			return 0;
		w.rec.pid = t->tgid;
		w.rec.flags = TK_REC_THREAD;
		record_add_thread(&w, t);
	} else {
		record_fill(t, t, &w, &want_fields);
	}
	bpf_seq_write(seq, &w, sizeof w);
	return 0;
}
