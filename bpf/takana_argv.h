/* What the argv program (takana_argv.bpf.c) and user space (csrc/core/cmdline.c)
 * share: one slot per record, and the text the arguments are copied to. */
#ifndef TAKANA_ARGV_H
#define TAKANA_ARGV_H

#ifndef __bpf__
#include <linux/types.h>
#endif

/* A process's argument area, at most, copied here; a longer one is read
 * from /proc. */
#define TK_ARGV_MAX 4096u
/* The text one run fills; a run stops at the slot that might not fit, and
 * user space runs again from there. */
#define TK_ARGV_TEXT (1u << 20)
/* Slots per run. */
#define TK_ARGV_SLOTS 16384u

enum tk_argv_status {
	TK_ARGV_OK,        /* text[off, off + len) is the argument area, NUL-ended */
	TK_ARGV_EMPTY,     /* no memory (a kernel thread, a zombie): no arguments */
	TK_ARGV_GONE,      /* the pid is another process's now */
	TK_ARGV_ASK_PROC,  /* not found by pid (hidden, or gone), not copied, longer
	                    * than TK_ARGV_MAX, rewritten (setproctitle), or exec'd
	                    * meanwhile: /proc/<pid>/cmdline answers */
};

struct tk_argv_slot {
	__u32 pid;         /* in */
	__u32 status;      /* out: enum tk_argv_status */
	__u64 start_ns;    /* in: the record's start time, which the process must have */
	__u32 off;         /* out */
	__u32 len;
};

#endif
