/* The BPF snapshot tiers (bpf_snapshot.c). */
#ifndef TAKANA_BPF_SNAPSHOT_H
#define TAKANA_BPF_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "snapshot.h"

enum tk_bpf_tier {
	TK_TIER_KFUNC,   /* task iterator kfuncs in a SEC("syscall") program */
	TK_TIER_ITER,    /* iter/task link read through an iterator fd */
	TK_TIER_COUNT
};

struct tk_bpf_tier_info {
	int loaded;
	uint64_t load_ns;    /* first load: open, verify, attach */
	uint64_t runs;       /* snapshots taken */
	size_t capacity;     /* kfunc: records the array holds now */
	int selectable;      /* the loaded program tests the field selection */
	int selectable_err;  /* kfunc: -errno of the failed load with the tests, or 0 */
	unsigned loads;      /* objects loaded so far (kfunc reloads to grow or select) */
	uint32_t insns;      /* the loaded program's instructions, as verified */
};

/* The BPF tiers' load information; a failed load is remembered, as is
 * its reason. Thread-safe. */
void tk_bpf_info(enum tk_bpf_tier tier, struct tk_bpf_tier_info *info);
/* Reloads the kfunc tier with room for this many records before its next
 * run (the array still grows past it when needed). */
int tk_bpf_kfunc_set_capacity(size_t capacity);
/* Unloads both tiers; the next snapshot loads again. */
void tk_bpf_release(void);

/* Their entries in tk_snap_backends (snapshot.h). */
extern const struct tk_snap_backend tk_snap_backend_kfunc, tk_snap_backend_iter;

#endif
