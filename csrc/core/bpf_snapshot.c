/* The BPF snapshot tiers: loading (lazily, once per process, under a lock),
 * running, and copying records into a tk_recbuf; and, when a tier cannot
 * work here, a reason a person can act on.
 *
 * kfunc: a SEC("syscall") program run with BPF_PROG_TEST_RUN writes every
 *        process into an mmapable array; the records are copied out of the
 *        mapping while the tier's lock is held.
 * iter:  an iter/task link; each snapshot creates an iterator fd and reads
 *        fixed-size records from it.
 * And these two's entries in the table of snapshot backends (snapshot.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "bpf_snapshot.h"
#include "fork.h"
#include "host.h"
#include "util.h"

#ifdef TK_NO_BPF

static int bpf_run(const struct tk_snap_backend *b, const struct tk_snap_req *req,
                   struct tk_recbuf *out, char *why, size_t why_len)
{
	(void)req;
	(void)out;
	(void)b;
	snprintf(why, why_len, "this takana was built without BPF (make BPF=0)");
	return -ENOTSUP;
}

void tk_bpf_info(enum tk_bpf_tier tier, struct tk_bpf_tier_info *info)
{
	(void)tier;
	memset(info, 0, sizeof *info);
}

int tk_bpf_kfunc_set_capacity(size_t capacity)
{
	(void)capacity;
	return -ENOTSUP;
}

void tk_bpf_release(void)
{
}


#else

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "bpf_load.h"
#include "skeletons.h"

#define WHY_LEN 320
/* iter/task reads: whole records only, and at least the kernel's 32 KiB
 * seq buffer so one read() is one trip through the kernel's batch. */
#define ITER_READ_RECORDS 256

/* The iter tier's records before threads are folded into their leaders. */
struct wire_buf {
	struct tk_wire_record *recs;
	size_t len;
	size_t cap;
};

struct tier {
	/* what differs between the tiers */
	int (*load)(struct tier *t);
	int (*run)(struct tier *t, uint32_t fields, struct tk_recbuf *out, char *why,
	           size_t why_len);
	void (*unload)(struct tier *t);
	const char *needs, *since;    /* the kernel function it cannot work without */
	pthread_mutex_t lock;
	int state;                    /* 0 not tried, 1 loaded, <0 -errno of the load */
	unsigned loads;               /* objects loaded (kfunc reloads to grow or select) */
	unsigned shortages;           /* loads failed for want of descriptors or memory */
	int shortage_err;             /* the last such failure, and when */
	int selectable_err;           /* kfunc: the reload with the tests failed so; no more tries */
	/* whether the loaded program tests the field selection (iter always;
	 * kfunc once a snapshot asked for fewer than every field) */
	bool selectable;
	bool selectable_wanted;       /* kfunc: reload before the next run */
	bool inherited;               /* loaded by the parent of a fork() */
	uint64_t shortage_ns;
	char why[WHY_LEN];
	uint64_t load_ns;             /* the first load, verification included */
	uint64_t runs;
	/* both: the loaded object, through a light skeleton or libbpf's */
	struct takana_kfunc_light *kfunc_light;
	struct takana_kfunc *kfunc;
	struct takana_iter_light *iter_light;
	int prog_fd;
	volatile uint32_t *foreign_pidns;  /* in the object's .bss */
	volatile uint32_t *want_fields;    /* in its .data: the field selection */
	/* kfunc */
	volatile uint32_t *total;
	volatile uint32_t *descents;  /* where the walk left pid order (the program's comment) */
	volatile uint32_t *descent_at;
	const struct tk_wire_record *records;  /* read-only mapping of the array */
	size_t mapped_bytes;
	size_t capacity;
	size_t capacity_wanted;       /* set for a reload before the next run */
	/* iter */
	struct takana_iter *iter;
	struct bpf_link *link;
	int link_fd;
	struct tk_wire_record *readbuf;
	struct wire_buf leaders;      /* one iteration's records, by kind */
	struct wire_buf threads;
	/* both: pid-order scratch (keys and radix buffer) */
	uint64_t *order;
	size_t order_cap;
};

/* Current thread count (an upper bound on processes) from /proc/loadavg. */
static size_t estimate_processes(void)
{
	struct tk_loadavg l;

	if (tk_loadavg_read(&l) < 0 || l.tasks == 0 || l.tasks > SIZE_MAX)
		return 4096;
	return (size_t)l.tasks;
}

static void kfunc_unload(struct tier *t)
{
	free(t->order);
	t->order = NULL;
	t->order_cap = 0;
	if (t->records != NULL)
		munmap((void *)(uintptr_t)t->records, t->mapped_bytes);
	t->records = NULL;
	takana_kfunc_light__destroy(t->kfunc_light);
	t->kfunc_light = NULL;
	takana_kfunc__destroy(t->kfunc);
	t->kfunc = NULL;
	t->prog_fd = -1;
	t->total = t->foreign_pidns = t->want_fields = t->descents = t->descent_at = NULL;
	t->capacity = 0;
}

static void iter_unload(struct tier *t)
{
	free(t->order);
	t->order = NULL;
	t->order_cap = 0;
	bpf_link__destroy(t->link);
	t->link = NULL;
	takana_iter_light__destroy(t->iter_light);   /* closes link_fd too */
	t->iter_light = NULL;
	takana_iter__destroy(t->iter);
	t->iter = NULL;
	t->prog_fd = t->link_fd = -1;
	t->foreign_pidns = t->want_fields = NULL;
	free(t->readbuf);
	t->readbuf = NULL;
	free(t->leaders.recs);
	free(t->threads.recs);
	memset(&t->leaders, 0, sizeof t->leaders);
	memset(&t->threads, 0, sizeof t->threads);
}

/* What a kfunc load is given (setup) and takes (adopt). */
struct kfunc_load_ctx {
	struct tier *t;
	size_t capacity, page;
};

TK_BPF_SKEL_STEPS(takana_kfunc_light)
TK_BPF_SKEL_STEPS(takana_kfunc)
TK_BPF_SKEL_STEPS(takana_iter_light)
TK_BPF_SKEL_ATTACH_STEP(takana_iter_light)
TK_BPF_SKEL_STEPS(takana_iter)

static int kfunc_light_setup(void *skel, void *ctx)
{
	struct takana_kfunc_light *s = skel;
	const struct kfunc_load_ctx *c = ctx;

	s->rodata->page_size = c->page;
	s->rodata->fill_all = !c->t->selectable;
	s->maps.records.max_entries = (uint32_t)c->capacity;
	return 0;
}

/* Returns the records map's fd, which kfunc_load maps. */
static int kfunc_light_adopt(void *skel, void *ctx)
{
	struct takana_kfunc_light *s = skel;
	struct tier *t = ((struct kfunc_load_ctx *)ctx)->t;

	t->kfunc_light = s;
	t->prog_fd = s->progs.snapshot_kfunc.prog_fd;
	t->total = &s->bss->total;
	t->descents = &s->bss->descents;
	t->descent_at = s->bss->descent_at;
	t->foreign_pidns = &s->bss->foreign_pidns;
	t->want_fields = &s->data->want_fields;
	return s->maps.records.map_fd;
}

static int kfunc_libbpf_setup(void *skel, void *ctx)
{
	struct takana_kfunc *s = skel;
	const struct kfunc_load_ctx *c = ctx;

	s->rodata->page_size = c->page;
	s->rodata->fill_all = !c->t->selectable;
	return bpf_map__set_max_entries(s->maps.records, (uint32_t)c->capacity);
}

static int kfunc_libbpf_adopt(void *skel, void *ctx)
{
	struct takana_kfunc *s = skel;
	struct tier *t = ((struct kfunc_load_ctx *)ctx)->t;

	t->kfunc = s;
	t->prog_fd = bpf_program__fd(s->progs.snapshot_kfunc);
	t->total = &s->bss->total;
	t->descents = &s->bss->descents;
	t->descent_at = s->bss->descent_at;
	t->foreign_pidns = &s->bss->foreign_pidns;
	t->want_fields = &s->data->want_fields;
	return bpf_map__fd(s->maps.records);
}

static const struct tk_bpf_loader kfunc_loader = {
	.name = "kfunc",
	.light = { takana_kfunc_light_open_step, kfunc_light_setup, takana_kfunc_light_load_step,
	           NULL, kfunc_light_adopt, takana_kfunc_light_destroy_step },
	.libbpf = { takana_kfunc_open_step, kfunc_libbpf_setup, takana_kfunc_load_step,
	            NULL, kfunc_libbpf_adopt, takana_kfunc_destroy_step },
};

static int kfunc_load(struct tier *t, size_t capacity)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	struct kfunc_load_ctx ctx = { t, capacity, page };
	size_t bytes;
	void *map;
	int fd = tk_bpf_load(&kfunc_loader, &ctx);

	if (fd < 0)
		return fd;
	bytes = (capacity * sizeof(struct tk_wire_record) + page - 1) / page * page;
	map = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		int err = -errno;

		kfunc_unload(t);
		tk_bpf_load_note("mmap of the record array: %s", strerror(-err));
		return err;
	}
	t->records = map;
	t->mapped_bytes = bytes;
	t->capacity = capacity;
	t->loads++;
	return 0;
}

static int iter_light_setup(void *skel, void *ctx)
{
	(void)ctx;
	((struct takana_iter_light *)skel)->rodata->page_size = (uint64_t)sysconf(_SC_PAGESIZE);
	return 0;
}

static int iter_light_adopt(void *skel, void *ctx)
{
	struct takana_iter_light *s = skel;
	struct tier *t = ctx;

	t->iter_light = s;
	t->prog_fd = s->progs.snapshot_iter.prog_fd;
	t->link_fd = s->links.snapshot_iter_fd;
	t->foreign_pidns = &s->bss->foreign_pidns;
	t->want_fields = &s->data->want_fields;
	return 0;
}

static int iter_libbpf_setup(void *skel, void *ctx)
{
	(void)ctx;
	((struct takana_iter *)skel)->rodata->page_size = (uint64_t)sysconf(_SC_PAGESIZE);
	return 0;
}

static int iter_libbpf_attach(void *skel, void *ctx)
{
	struct tier *t = ctx;

	t->link = bpf_program__attach_iter(((struct takana_iter *)skel)->progs.snapshot_iter, NULL);
	return t->link == NULL ? -errno : 0;
}

static int iter_libbpf_adopt(void *skel, void *ctx)
{
	struct takana_iter *s = skel;
	struct tier *t = ctx;

	t->iter = s;
	t->prog_fd = bpf_program__fd(s->progs.snapshot_iter);
	t->link_fd = bpf_link__fd(t->link);
	t->foreign_pidns = &s->bss->foreign_pidns;
	t->want_fields = &s->data->want_fields;
	return 0;
}

static const struct tk_bpf_loader iter_loader = {
	.name = "iter",
	.light = { takana_iter_light_open_step, iter_light_setup, takana_iter_light_load_step,
	           takana_iter_light_attach_step, iter_light_adopt, takana_iter_light_destroy_step },
	.libbpf = { takana_iter_open_step, iter_libbpf_setup, takana_iter_load_step,
	            iter_libbpf_attach, iter_libbpf_adopt, takana_iter_destroy_step },
};

static int iter_load(struct tier *t)
{
	int err;

	t->readbuf = malloc(ITER_READ_RECORDS * sizeof *t->readbuf);
	if (t->readbuf == NULL)
		return -ENOMEM;
	err = tk_bpf_load(&iter_loader, t);
	if (err < 0)
		iter_unload(t);
	else
		t->loads++;
	return err;
}

static size_t with_headroom(size_t n)
{
	return n + n / 2 + 256;
}

/* What a kfunc load makes: kept aside while another one is tried. */
struct kfunc_objects {
	struct takana_kfunc_light *light;
	struct takana_kfunc *skel;
	int prog_fd;
	volatile uint32_t *total, *foreign_pidns, *want_fields, *descents, *descent_at;
	const struct tk_wire_record *records;
	size_t mapped_bytes, capacity;
};

/* Takes the loaded objects out of the tier, which then holds none. */
static struct kfunc_objects kfunc_objects_take(struct tier *t)
{
	struct kfunc_objects o = { t->kfunc_light, t->kfunc, t->prog_fd, t->total, t->foreign_pidns,
	                           t->want_fields, t->descents, t->descent_at, t->records,
	                           t->mapped_bytes, t->capacity };

	t->kfunc_light = NULL;
	t->kfunc = NULL;
	t->prog_fd = -1;
	t->records = NULL;
	return o;
}

static void kfunc_objects_put(struct tier *t, const struct kfunc_objects *o)
{
	t->kfunc_light = o->light;
	t->kfunc = o->skel;
	t->prog_fd = o->prog_fd;
	t->total = o->total;
	t->foreign_pidns = o->foreign_pidns;
	t->want_fields = o->want_fields;
	t->descents = o->descents;
	t->descent_at = o->descent_at;
	t->records = o->records;
	t->mapped_bytes = o->mapped_bytes;
	t->capacity = o->capacity;
}

/* The program with the selection's tests replaces the one without only
 * once it has loaded: until then, and for good if it cannot load, the one
 * without serves every selection (user space hides what was not asked). */
static int kfunc_reload_selectable(struct tier *t)
{
	struct kfunc_objects old = kfunc_objects_take(t);
	int err;

	t->selectable = true;
	err = kfunc_load(t, old.capacity);
	if (err == 0) {
		if (old.records != NULL)
			munmap((void *)(uintptr_t)old.records, old.mapped_bytes);
		takana_kfunc_light__destroy(old.light);
		takana_kfunc__destroy(old.skel);
		return 0;
	}
	kfunc_objects_put(t, &old);
	t->selectable = false;
	t->selectable_err = err;
	return 0;
}

/* The array is sized from the process count, or as a run that outgrew it
 * asked (capacity_wanted); the selection's tests are kept from the first
 * snapshot that wanted fewer than every field on. */
static int kfunc_reload(struct tier *t)
{
	size_t capacity = t->capacity_wanted ? t->capacity_wanted
	                                     : with_headroom(estimate_processes());
	bool for_selection = t->state > 0 && t->selectable_wanted && !t->capacity_wanted;

	t->selectable_wanted = false;
	if (for_selection)
		return kfunc_reload_selectable(t);
	t->capacity_wanted = 0;
	kfunc_unload(t);
	return kfunc_load(t, capacity);
}

#define LOAD_SHORTAGE_RETRIES 16
#define LOAD_SHORTAGE_PAUSE_NS 1000000000ull

/* Loads a tier on first use; a failed load is remembered with its reason
 * unless it was a passing shortage. Called with t->lock held. */
static int tier_ensure_loaded(struct tier *t)
{
	uint64_t start;
	int err;

	if (t->inherited) {
		t->unload(t);
		t->state = 0;
		t->inherited = false;
	}
	if (t->state < 0)
		return t->state;
	/* Only kfunc asks for a reload: to grow its array, or to test the
	 * selection. */
	if (t->state > 0 && !t->capacity_wanted && !t->selectable_wanted)
		return 0;
	/* After a run of shortages, one attempt a second at most: a load costs
	 * tens of ms, and a supervisor under descriptor pressure snapshots often. */
	if (t->shortages >= LOAD_SHORTAGE_RETRIES &&
	    tk_clock_ns(CLOCK_MONOTONIC) - t->shortage_ns < LOAD_SHORTAGE_PAUSE_NS)
		/* A loaded program that need not grow still serves. */
		return t->state > 0 && !t->capacity_wanted ? 0 : t->shortage_err;
	tk_bpf_load_begin();
	start = tk_clock_ns(CLOCK_MONOTONIC);
	err = t->load(t);
	if (err == 0 && t->load_ns == 0)
		t->load_ns = tk_clock_ns(CLOCK_MONOTONIC) - start;
	if (err != 0) {
		tk_bpf_explain(t->needs, BTF_KIND_FUNC, t->since, err, t->why, WHY_LEN);
		/* A shortage of descriptors or memory passes: a later snapshot
		 * tries again (at once for the first few, then once a second).
		 * Anything else (no BTF, EPERM, a kernel too old, the
		 * verifier's refusal) will not change while this process runs,
		 * and is remembered. */
		if (tk_bpf_load_transient(err)) {
			t->shortages++;
			t->shortage_err = err;
			t->shortage_ns = tk_clock_ns(CLOCK_MONOTONIC);
			t->state = 0;
		} else {
			t->state = err;
		}
	} else {
		t->state = 1;
		t->shortages = 0;
	}
	tk_bpf_load_end();
	return err;
}

static int reject_foreign_pidns(char *why, size_t why_len)
{
	snprintf(why, why_len, "the caller is not in the initial pid namespace, "
	         "where BPF sees pids; /proc shows this namespace's");
	return -EXDEV;
}

static int recbuf_reserve(struct tk_recbuf *rb, size_t n)
{
	struct tk_record *recs;

	if (rb->cap - rb->len >= n)
		return 0;
	recs = realloc(rb->recs, (rb->len + n) * sizeof *recs);
	if (recs == NULL)
		return -ENOMEM;
	rb->recs = recs;
	rb->cap = rb->len + n;
	return 0;
}

/* Length of a NUL-terminated comm within 16 bytes, a word at a time. */
static uint32_t comm16_len(const char *comm)
{
	uint64_t words[2];

	memcpy(words, comm, sizeof words);
	for (int i = 0; i < 2; i++) {
		/* The lowest byte flagged here is the first NUL. */
		uint64_t zero = (words[i] - 0x0101010101010101ull) & ~words[i] & 0x8080808080808080ull;
		if (zero)
			return (uint32_t)(i * 8 + (__builtin_ctzll(zero) >> 3));
	}
	return 16;
}

/* The order of w by pid: an LSD radix sort of (pid << 32 | index) keys, a
 * byte a pass, costs far less than sorting the records themselves. */
static int pid_sort(struct tier *t, const struct tk_wire_record *w, size_t n,
                    const uint64_t **order)
{
	uint64_t *keys;
	uint32_t max_pid = 0;

	if (t->order_cap < n) {
		/* n keys and the radix sort's n more */
		uint64_t *k = tk_grow(t->order, &t->order_cap, n, 2 * sizeof *k, 512);
		if (k == NULL)
			return -ENOMEM;
		t->order = k;
	}
	keys = t->order;
	for (size_t i = 0; i < n; i++) {
		keys[i] = (uint64_t)w[i].rec.pid << 32 | i;
		if (w[i].rec.pid > max_pid)
			max_pid = w[i].rec.pid;
	}
	*order = tk_pid_keys_sort(keys, keys + n, n, max_pid);
	return 0;
}

/* iter/task walks pids upward, so its leaders are in pid order unless a
 * read was resumed. *order is NULL when w is in pid order already. */
static int pid_order(struct tier *t, const struct tk_wire_record *w, size_t n,
                     const uint64_t **order)
{
	size_t i;

	*order = NULL;
	for (i = 1; i < n && w[i - 1].rec.pid < w[i].rec.pid; i++)
		;
	return i >= n ? 0 : pid_sort(t, w, n, order);
}

/* A field's case in wire_copy: a plain assignment for most kinds; comm is
 * measured; cmdline (read after the walk) and the kthread bit (in flags,
 * always copied) have none. */
#define WIRE_CASE_PLAIN(id, m) case TK_FLD_##id: r->m = w->rec.m; break;
#define WIRE_CASE_U32(id, m) WIRE_CASE_PLAIN(id, m)
#define WIRE_CASE_S32(id, m) WIRE_CASE_PLAIN(id, m)
#define WIRE_CASE_U64(id, m) WIRE_CASE_PLAIN(id, m)
#define WIRE_CASE_NS(id, m) WIRE_CASE_PLAIN(id, m)
#define WIRE_CASE_BYTES(id, m) WIRE_CASE_PLAIN(id, m)
#define WIRE_CASE_CGROUP(id, m) WIRE_CASE_PLAIN(id, m)
#define WIRE_CASE_STATE(id, m) WIRE_CASE_PLAIN(id, m)
#define WIRE_CASE_COMM(id, m) \
	case TK_FLD_##id: \
		if (w->rec.comm_len == TK_WIRE_COMM_NUL) { \
			memcpy(r->m, w->rec.m, 16); \
			r->comm_len = comm16_len(r->m); \
		} else { \
			memcpy(r->m, w->rec.m, sizeof r->m); \
			r->comm_len = w->rec.comm_len; \
		} \
		break;
#define WIRE_CASE_CMDLINE(id, m)
#define WIRE_CASE_KTHREAD(id, m)

/* One wire record to a snapshot record in a single pass: the fields asked
 * for, the comm measured, the CPU time split as /proc does, the start time
 * moved to our time namespace's clock. fields holds TK_F_ALWAYS. The
 * others are not written: every reader checks the selection first (a field
 * not asked for raises in Lua), and zeroing them stored 176 bytes a record
 * where a pid-only snapshot asks for 24. */
static inline __attribute__((always_inline)) void
wire_copy(struct tk_record *r, const struct tk_wire_record *w, uint32_t fields, uint64_t boot_offset)
{
	if (fields == TK_F_WALK) {
		*r = w->rec;
		if (r->comm_len == TK_WIRE_COMM_NUL)
			r->comm_len = comm16_len(r->comm);
	} else {
		/* The selected fields one by one: a test of each of the 18
		 * was most of a small selection's copy. The times are split
		 * below. */
		uint32_t rest = fields & ~(TK_F_ALWAYS | TK_F(CMDLINE) | TK_F(UTIME) | TK_F(STIME));

		r->pid = w->rec.pid;
		r->flags = w->rec.flags;
		r->start_ns = w->rec.start_ns;
		r->state = w->rec.state;
		for (; rest != 0; rest &= rest - 1) {
			switch (__builtin_ctz(rest)) {
#define FIELD_COPY(id, name, member, kind) WIRE_CASE_##kind(id, member)
			TK_FIELDS(FIELD_COPY)
#undef FIELD_COPY
			default:
				break;
			}
		}
	}
	r->start_ns += boot_offset;
	if (fields & (TK_F(UTIME) | TK_F(STIME))) {
		uint64_t ut = w->rec.utime_ns, st = w->rec.stime_ns;

		tk_cputime_split(w->runtime_ns, w->prev_utime_ns, w->prev_stime_ns, &ut, &st);
		r->utime_ns = (fields & TK_F(UTIME)) ? ut : 0;
		r->stime_ns = (fields & TK_F(STIME)) ? st : 0;
	}
}

/* Appends w to out (room reserved) unless it repeats the last pid (a
 * resumed iter/task read can give one twice) or is being reaped: a process
 * in EXIT_DEAD, or with no thread left in its signal_struct, is still on
 * the task list for a moment; /proc skips it as vanished, and so do we. */
static inline __attribute__((always_inline)) void
wire_emit(const struct tk_wire_record *w, uint32_t fields, struct tk_recbuf *out)
{
	/* The copy waits on the array's cache lines, records 200 bytes apart:
	 * 10-20% less time at 10,000 processes with this. */
	__builtin_prefetch(w + 8);
	if (out->len > 0 && out->recs[out->len - 1].pid == w->rec.pid)
		return;
	if (w->rec.state == 'X' || ((fields & TK_F(NTHREADS)) && w->rec.nthreads == 0)) {
		out->vanished++;
		return;
	}
	wire_copy(&out->recs[out->len++], w, fields, (uint64_t)out->boot_offset_ns);
}

/* Room for init at recs[0] when the walk's lowest pid is not 1 (recbuf.h);
 * out is empty, with room reserved. */
static void init_room_make(struct tk_recbuf *out, uint32_t lowest_pid)
{
	if (lowest_pid == 1)
		return;
	memset(&out->recs[0], 0, sizeof out->recs[0]);
	out->len = 1;
	out->init_room = 1;
}

/* Wire records to snapshot records, in pid order (by order, or as they
 * are when it is NULL). */
static int wire_finish(const struct tk_wire_record *w, size_t n, const uint64_t *order,
                       uint32_t fields, struct tk_recbuf *out)
{
	/* One more: init, when hidden from BPF, is inserted afterwards, and a
	 * full array would double (a 1.6 MB copy at 10,000 processes). */
	int err = recbuf_reserve(out, n + 1);

	if (err < 0)
		return err;
	init_room_make(out, n == 0 ? 0 : order ? w[(uint32_t)order[0]].rec.pid : w[0].rec.pid);
	if (order == NULL)
		for (size_t i = 0; i < n; i++)
			wire_emit(&w[i], fields, out);
	else
		for (size_t i = 0; i < n; i++)
			wire_emit(&w[(uint32_t)order[i]], fields, out);
	return 0;
}

/* The kfunc walk's records in pid order: the ascending runs its program
 * marked (descent_at) merged while they are copied, with no sort and no
 * second pass; 1 run, the common case, is a straight copy. Returns 1 when
 * the marks cannot be used (too many runs), for a sort instead. */
static int wire_merge(struct tier *t, const struct tk_wire_record *w, size_t n, uint32_t fields,
                      struct tk_recbuf *out)
{
	size_t head[TK_KFUNC_DESCENTS + 1], end[TK_KFUNC_DESCENTS + 1], k = 0;
	uint32_t descents = *t->descents, lowest;
	int err;

	if (descents > TK_KFUNC_DESCENTS)
		return 1;
	head[0] = 0;
	for (uint32_t j = 0; j < descents; j++) {
		size_t at = t->descent_at[j];

		if (at <= head[k] || at >= n)
			return 1;
		end[k++] = at;
		head[k] = at;
	}
	end[k++] = n;
	err = recbuf_reserve(out, n + 1);
	if (err < 0)
		return err;
	lowest = n == 0 ? 0 : w[0].rec.pid;
	for (size_t j = 1; j < k; j++)
		if (w[head[j]].rec.pid < lowest)
			lowest = w[head[j]].rec.pid;
	init_room_make(out, lowest);
	if (k == 1) {
		for (size_t i = 0; i < n; i++)
			wire_emit(&w[i], fields, out);
		return 0;
	}
	/* A few runs: the one with the lowest head gives records until its
	 * pid passes the next lowest head (runs interleave in stretches, so
	 * mostly one comparison a record); an exhausted run is dropped. */
	while (k > 1) {
		uint32_t low = UINT32_MAX, next = UINT32_MAX;
		size_t best = 0;

		for (size_t j = 0; j < k; j++) {
			uint32_t pid = w[head[j]].rec.pid;

			if (pid < low) {
				next = low;
				low = pid;
				best = j;
			} else if (pid < next) {
				next = pid;
			}
		}
		do
			wire_emit(&w[head[best]++], fields, out);
		while (head[best] < end[best] && w[head[best]].rec.pid < next);
		if (head[best] == end[best]) {
			head[best] = head[k - 1];
			end[best] = end[k - 1];
			k--;
		}
	}
	for (size_t i = head[0]; i < end[0]; i++)
		wire_emit(&w[i], fields, out);
	return 0;
}

static int kfunc_run(struct tier *t, uint32_t fields, struct tk_recbuf *out, char *why,
                     size_t why_len)
{
	for (;;) {
		LIBBPF_OPTS(bpf_test_run_opts, opts);
		uint32_t total;
		int err;

		if (t->prog_fd < 0)
			return -EBADF;
		*t->want_fields = fields;
		if (bpf_prog_test_run_opts(t->prog_fd, &opts) != 0) {
			err = -errno;
			snprintf(why, why_len, "BPF_PROG_TEST_RUN: %s", strerror(errno));
			return err;
		}
		if (*t->foreign_pidns)
			return reject_foreign_pidns(why, why_len);
		total = *t->total;
		if (total <= t->capacity) {
			const uint64_t *order;

			err = wire_merge(t, t->records, total, fields, out);
			if (err <= 0)
				return err;
			err = pid_sort(t, t->records, total, &order);
			return err < 0 ? err : wire_finish(t->records, total, order, fields, out);
		}
		/* More processes than room: grow, reload, run again. */
		t->capacity_wanted = with_headroom(total);
		err = tier_ensure_loaded(t);
		if (err < 0) {
			snprintf(why, why_len, "growing the record array to %zu: %s", with_headroom(total), t->why);
			return err;
		}
	}
}

static int wire_push(struct wire_buf *wb, const struct tk_wire_record *rec)
{
	if (wb->len == wb->cap) {
		struct tk_wire_record *recs = tk_grow(wb->recs, &wb->cap, wb->len + 1, sizeof *recs, 512);
		if (recs == NULL)
			return -ENOMEM;
		wb->recs = recs;
	}
	wb->recs[wb->len++] = *rec;
	return 0;
}

/* The leader of pid, by binary search in pid order. */
static struct tk_wire_record *leader_find(struct wire_buf *wb, const uint64_t *order, uint32_t pid)
{
	size_t lo = 0, hi = wb->len;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		struct tk_wire_record *w = &wb->recs[order ? (uint32_t)order[mid] : mid];

		if (w->rec.pid == pid)
			return w;
		if (w->rec.pid < pid)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static int iter_read_all(struct tier *t, int fd, char *why, size_t why_len)
{
	for (;;) {
		ssize_t n = read(fd, t->readbuf, ITER_READ_RECORDS * sizeof *t->readbuf);
		size_t i, count;

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n < 0) {
			snprintf(why, why_len, "read of the task iterator: %s", strerror(errno));
			return -errno;
		}
		if (n == 0)
			return 0;
		if ((size_t)n % sizeof *t->readbuf != 0) {
			snprintf(why, why_len, "task iterator returned %zd bytes, not whole records", n);
			return -EBADMSG;
		}
		count = (size_t)n / sizeof *t->readbuf;
		for (i = 0; i < count; i++) {
			const struct tk_wire_record *w = &t->readbuf[i];
			int err = wire_push((w->rec.flags & TK_REC_THREAD) ? &t->threads : &t->leaders, w);
			if (err < 0)
				return err;
		}
	}
}

static int iter_run(struct tier *t, uint32_t fields, struct tk_recbuf *out, char *why,
                    size_t why_len)
{
	const uint64_t *order;
	size_t i;
	int fd, err;

	*t->want_fields = fields;
	fd = bpf_iter_create(t->link_fd);

	if (fd < 0) {
		err = -errno;
		snprintf(why, why_len, "bpf_iter_create: %s", strerror(errno));
		return err;
	}
	t->leaders.len = t->threads.len = 0;
	err = iter_read_all(t, fd, why, why_len);
	close(fd);
	if (err < 0)
		return err;
	if (*t->foreign_pidns)
		return reject_foreign_pidns(why, why_len);
	err = pid_order(t, t->leaders.recs, t->leaders.len, &order);
	if (err < 0)
		return err;
	/* A thread whose leader is missing (it exited between two reads) has
	 * no process left to count toward, like /proc's vanished entries. */
	for (i = 0; i < t->threads.len; i++) {
		const struct tk_wire_record *th = &t->threads.recs[i];
		struct tk_wire_record *leader = leader_find(&t->leaders, order, th->rec.pid);
		if (leader == NULL)
			continue;
		tk_wire_add_thread(leader, th->rec.utime_ns, th->rec.stime_ns, th->runtime_ns,
		                   th->rec.minflt, th->rec.majflt);
	}
	return wire_finish(t->leaders.recs, t->leaders.len, order, fields, out);
}

static struct tier tiers[TK_TIER_COUNT] = {
	[TK_TIER_KFUNC] = { .load = kfunc_reload, .run = kfunc_run, .unload = kfunc_unload,
	                    .needs = "bpf_iter_task_new", .since = "6.10",
	                    .lock = PTHREAD_MUTEX_INITIALIZER, .prog_fd = -1, .link_fd = -1 },
	[TK_TIER_ITER] = { .load = iter_load, .run = iter_run, .unload = iter_unload,
	                   .needs = "bpf_iter_task", .since = "5.8", .selectable = true,
	                   .lock = PTHREAD_MUTEX_INITIALIZER, .prog_fd = -1, .link_fd = -1 },
};

/* A child of fork() shares its parent's programs and maps: the records
 * array and the selection global would take both processes' runs at once.
 * The child drops its copies and loads its own at its first snapshot. */
static void tiers_fork(enum tk_fork_phase phase)
{
	if (phase == TK_FORK_PREPARE) {
		for (int i = 0; i < TK_TIER_COUNT; i++)
			pthread_mutex_lock(&tiers[i].lock);
		return;
	}
	for (int i = TK_TIER_COUNT - 1; i >= 0; i--) {
		if (phase == TK_FORK_CHILD)
			tiers[i].inherited = tiers[i].state > 0;
		pthread_mutex_unlock(&tiers[i].lock);
	}
}

__attribute__((constructor)) static void tiers_fork_register(void)
{
	tk_fork_register(TK_FORK_RANK_TIERS, tiers_fork);
}

/* A snapshot backend's run for either tier: records in pid order, with the
 * fields asked for and TK_F_ALWAYS, the others unwritten. The tier loads on
 * first use, once per process. */
static int bpf_run(const struct tk_snap_backend *b, const struct tk_snap_req *req,
                   struct tk_recbuf *out, char *why, size_t why_len)
{
	struct tier *t = &tiers[b->tier];
	uint32_t fields = (req->fields | TK_F_ALWAYS) & TK_F_WALK;
	char reason[WHY_LEN + 64];
	struct tk_timens offsets;
	int err;

	/* The programs read the kernel's start_boottime; /proc and
	 * clock_gettime() add our time namespace's offset. */
	err = tk_timens_offsets(&offsets, why, why_len);
	if (err < 0)
		return err;
	out->boot_offset_ns = offsets.boottime_ns;
	pthread_mutex_lock(&t->lock);
	if (fields != TK_F_WALK && !t->selectable && t->selectable_err == 0)
		t->selectable_wanted = true;
	err = tier_ensure_loaded(t);
	if (err < 0)
		snprintf(reason, sizeof reason, "%s", t->why);
	else
		err = t->run(t, fields, out, reason, sizeof reason);
	if (err == 0)
		t->runs++;
	pthread_mutex_unlock(&t->lock);
	if (err < 0)
		snprintf(why, why_len, "%s", reason);
	return err;
}

void tk_bpf_info(enum tk_bpf_tier tier, struct tk_bpf_tier_info *info)
{
	struct tier *t = &tiers[tier];

	pthread_mutex_lock(&t->lock);
	info->loaded = t->state > 0;
	info->load_ns = t->load_ns;
	info->runs = t->runs;
	info->capacity = t->capacity;
	info->selectable = t->state > 0 && t->selectable;
	info->selectable_err = t->selectable_err;
	info->loads = t->loads;
	info->insns = 0;
	if (t->state > 0 && t->prog_fd >= 0) {
		struct bpf_prog_info pi;
		uint32_t len = sizeof pi;

		memset(&pi, 0, sizeof pi);
		if (bpf_obj_get_info_by_fd(t->prog_fd, &pi, &len) == 0)
			info->insns = pi.xlated_prog_len / 8;
	}
	pthread_mutex_unlock(&t->lock);
}

int tk_bpf_kfunc_set_capacity(size_t capacity)
{
	struct tier *t = &tiers[TK_TIER_KFUNC];

	if (capacity == 0 || capacity > UINT32_MAX / sizeof(struct tk_wire_record))
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	t->capacity_wanted = capacity;
	pthread_mutex_unlock(&t->lock);
	return 0;
}

/* Closes every program, map and link: nothing is pinned, so the kernel
 * frees them. Also run when the module is unloaded or the process exits. */
__attribute__((destructor)) void tk_bpf_release(void)
{
	for (int i = 0; i < TK_TIER_COUNT; i++) {
		pthread_mutex_lock(&tiers[i].lock);
		tiers[i].unload(&tiers[i]);
		tiers[i].state = 0;
		if (i == TK_TIER_KFUNC) {
			tiers[i].selectable = tiers[i].selectable_wanted = false;
			tiers[i].selectable_err = 0;
		}
		pthread_mutex_unlock(&tiers[i].lock);
	}
}

#endif

/* ---- the BPF snapshot backends (snapshot.c lists them) --------------------- */

const struct tk_snap_backend tk_snap_backend_kfunc = {
	.name = "kfunc", .default_fields = TK_F_WALK, .tier = TK_TIER_KFUNC,
	.may_hide_init = 1, .in_order = 1, .run = bpf_run,
};

const struct tk_snap_backend tk_snap_backend_iter = {
	.name = "iter", .default_fields = TK_F_WALK, .tier = TK_TIER_ITER,
	.may_hide_init = 1, .in_order = 1, .run = bpf_run,
};
