/* Loading a BPF object (bpf_load.c), the same way for the snapshot tiers,
 * the events object and the argv program: its light skeleton first (no BTF
 * read in this process: the kernel relocates), then libbpf's skeleton when
 * the light one failed for a reason libbpf may not meet; and, around
 * either, one lock that captures libbpf's messages for the reason of a
 * failed load. */
#ifndef TAKANA_BPF_LOAD_H
#define TAKANA_BPF_LOAD_H

#ifndef TK_NO_BPF
#include <stdbool.h>
#include <stddef.h>

/* One skeleton's steps. skel is the skeleton bpftool generated; ctx is the
 * caller's (what setup reads, where adopt stores what it keeps). */
struct tk_bpf_skel_ops {
	void *(*open)(void);                       /* NULL and errno (or ENOMEM) */
	int (*setup)(void *skel, void *ctx);       /* between open and load: rodata, map sizes */
	int (*load)(void *skel);
	int (*attach)(void *skel, void *ctx);      /* NULL: nothing attached at load */
	/* Takes the loaded object into ctx: >= 0 (returned by tk_bpf_load), or
	 * -errno, after which the skeleton is destroyed. */
	int (*adopt)(void *skel, void *ctx);
	void (*destroy)(void *skel);               /* NULL-safe */
};

struct tk_bpf_loader {
	const char *name;                          /* for TAKANA_BPF_DEBUG */
	struct tk_bpf_skel_ops light;              /* open NULL: no light skeleton */
	struct tk_bpf_skel_ops libbpf;
};

/* The open, load and destroy steps of a skeleton named skel (takana_iter,
 * takana_iter_light), as the table's untyped functions; attach too when
 * the skeleton's own attach is the one wanted. */
#define TK_BPF_SKEL_STEPS(skel)                                              \
	static void *skel##_open_step(void) { return skel##__open(); }          \
	static int skel##_load_step(void *s) { return skel##__load(s); }        \
	static void skel##_destroy_step(void *s) { skel##__destroy(s); }
#define TK_BPF_SKEL_ATTACH_STEP(skel)                                        \
	static int skel##_attach_step(void *s, void *ctx)                       \
	{                                                                        \
		(void)ctx;                                                       \
		return skel##__attach(s);                                        \
	}

/* Opens, sets up, loads, attaches and adopts l's object: through the light
 * skeleton unless TAKANA_BPF_LOADER=libbpf or there is none, then through
 * libbpf's unless the light one's failure was final. adopt's result, or
 * -errno. Called between tk_bpf_load_begin and tk_bpf_load_end. */
int tk_bpf_load(const struct tk_bpf_loader *l, void *ctx);

/* A load between these two is serialised with libbpf's messages captured,
 * and tk_bpf_explain writes the reason of a failed one: needs is a kernel
 * BTF type of kind needs_kind the program cannot work without, there since
 * Linux `since`. */
void tk_bpf_load_begin(void);
void tk_bpf_load_end(void);
/* Notes a failure of the load under way for tk_bpf_explain, as libbpf's
 * last message would be. */
void tk_bpf_load_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A load failed for want of descriptors or memory: worth another try. */
bool tk_bpf_load_transient(int err);
void tk_bpf_explain(const char *needs, int needs_kind, const char *since,
                    int err, char *why, size_t why_len);
/* Whether to try an object's light skeleton first (TAKANA_BPF_LOADER), and
 * whether a light load's failure would be libbpf's too (no retry then). */
int tk_bpf_light_wanted(void);
int tk_bpf_light_final(int err);
#endif

#endif
