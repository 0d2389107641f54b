/* A snapshot's cmdline field, read after the walk: by the argv BPF program
 * where a BPF tier walked and it loads (one test run copies every
 * process's argument area), else from /proc/<pid>/cmdline, where the
 * record's start time confirms the process that answered. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cmdline.h"
#include "fork.h"
#include "proc_scan.h"
#include "proc_stat.h"
#include "recbuf.h"
#include "util.h"

#ifndef TK_NO_BPF
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include "takana_argv.h"
#include "bpf_load.h"
#include "skeletons.h"
#endif

/* 1 when the record's process still holds its pid now (its start time, as
 * /proc shows it, is the record's): pid reuse needs its holder reaped, so
 * whatever was opened by this pid since the walk was that process's. 0 when
 * another, or none, holds it; -errno when /proc cannot be read (out of
 * descriptors). */
static int proc_same_process(int proc_fd, const struct tk_record *r, const struct tk_units *u)
{
	char path[32], buf[4096];
	struct tk_record now;
	ssize_t n;
	int fd;

	snprintf(path, sizeof path, "%u/stat", r->pid);
	fd = openat(proc_fd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return tk_cmdline_missing(errno) ? 0 : -errno;
	n = read(fd, buf, sizeof buf);
	close(fd);
	if (n <= 0 || (size_t)n == sizeof buf || tk_stat_parse(buf, (size_t)n, u, &now) < 0)
		return 0;
	return tk_same_process(r, &now, u->ns_per_tick);
}

/* One record's arguments from /proc, appended to out->text; nil (NONE)
 * for a process gone, or hidden from us (hidepid). -errno when /proc cannot
 * be read: out of descriptors is not "gone". */
static int proc_cmdline(int proc_fd, const struct tk_units *u, struct tk_recbuf *out,
                        struct tk_record *r)
{
	char path[32];
	size_t start = out->text_len;
	int fd, err, same;

	r->cmdline_len = TK_CMDLINE_NONE;
	snprintf(path, sizeof path, "%u/cmdline", r->pid);
	fd = openat(proc_fd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return tk_cmdline_missing(errno) ? 0 : -errno;
	err = tk_cmdline_read(fd, out, r);
	close(fd);
	if (err < 0 && !tk_cmdline_missing(-err))
		return err;
	/* init never changes hands (and its record may be /proc's, in ticks,
	 * where BPF does not see it). */
	same = err < 0 ? 0 : r->pid == 1 ? 1 : proc_same_process(proc_fd, r, u);
	if (same <= 0) {
		r->cmdline_len = TK_CMDLINE_NONE;
		out->text_len = start;
	}
	return same < 0 ? same : 0;
}

#ifndef TK_NO_BPF
/* The argv program, loaded on first use and kept for the process. */
static struct {
	pthread_mutex_t lock;
	int state;                    /* 0 not tried, 1 loaded, <0 -errno of the load */
	bool inherited;               /* loaded by the parent of a fork() */
	unsigned loads;
	char why[400];
	struct takana_argv *skel;
	struct tk_argv_slot *slots;   /* mmaped */
	const char *text;             /* mmaped read-only */
	int prog_fd;
} argv_prog = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void argv_unload(void)
{
	if (argv_prog.text != NULL)
		munmap((void *)(uintptr_t)argv_prog.text, TK_ARGV_TEXT);
	if (argv_prog.slots != NULL)
		munmap(argv_prog.slots, sizeof(struct tk_argv_slot) * TK_ARGV_SLOTS);
	takana_argv__destroy(argv_prog.skel);
	argv_prog.text = NULL;
	argv_prog.slots = NULL;
	argv_prog.skel = NULL;
	argv_prog.state = 0;
}

TK_BPF_SKEL_STEPS(takana_argv)

static int argv_setup(void *skel, void *ctx)
{
	(void)ctx;
	return bpf_program__set_flags(((struct takana_argv *)skel)->progs.read_argv, BPF_F_SLEEPABLE);
}

/* The skeleton maps .bss; the arrays are mapped here. */
static int argv_adopt(void *skel, void *ctx)
{
	struct takana_argv *s = skel;
	void *slots, *text;
	int err;

	(void)ctx;
	slots = mmap(NULL, sizeof(struct tk_argv_slot) * TK_ARGV_SLOTS, PROT_READ | PROT_WRITE,
	             MAP_SHARED, bpf_map__fd(s->maps.slots), 0);
	if (slots == MAP_FAILED)
		return -errno;
	text = mmap(NULL, TK_ARGV_TEXT, PROT_READ, MAP_SHARED, bpf_map__fd(s->maps.text), 0);
	if (text == MAP_FAILED) {
		err = -errno;
		munmap(slots, sizeof(struct tk_argv_slot) * TK_ARGV_SLOTS);
		return err;
	}
	argv_prog.skel = s;
	argv_prog.slots = slots;
	argv_prog.text = text;
	argv_prog.prog_fd = bpf_program__fd(s->progs.read_argv);
	argv_prog.loads++;
	return 0;
}

/* Sleepable, which the light skeleton cannot load: libbpf's only. */
static const struct tk_bpf_loader argv_loader = {
	.name = "argv",
	.libbpf = { takana_argv_open_step, argv_setup, takana_argv_load_step,
	            NULL, argv_adopt, takana_argv_destroy_step },
};

static int argv_load(void)
{
	return tk_bpf_load(&argv_loader, NULL);
}

/* One run over records [first, first + n): what it read goes into out's
 * text; the rest of those records stay for /proc. Returns how many records
 * it finished (a full text stops it early), or -errno. */
static long argv_run(struct tk_recbuf *out, size_t first, size_t n, uint8_t *ask_proc)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts);
	uint32_t done;
	char *at;
	int err;

	for (size_t i = 0; i < n; i++) {
		const struct tk_record *r = &out->recs[first + i];

		/* A record from /proc (a hidden init) has a start time in
		 * ticks, which the program's exact test would not match. */
		argv_prog.slots[i].pid = r->pid == 1 && out->from_proc ? 0 : r->pid;
		/* The program compares with the kernel's clock. */
		argv_prog.slots[i].start_ns = r->start_ns - (uint64_t)out->boot_offset_ns;
		argv_prog.slots[i].status = TK_ARGV_ASK_PROC;
	}
	argv_prog.skel->bss->count = (uint32_t)n;
	if (bpf_prog_test_run_opts(argv_prog.prog_fd, &opts) != 0)
		return -errno;
	done = argv_prog.skel->bss->next;
	if (done > n || argv_prog.skel->bss->used > TK_ARGV_TEXT)
		return -EIO;
	/* Checked before any record is touched: a run that fails leaves them
	 * all to /proc. */
	for (uint32_t i = 0; i < done; i++) {
		const struct tk_argv_slot *sl = &argv_prog.slots[i];

		if (sl->status == TK_ARGV_OK &&
		    (sl->off > TK_ARGV_TEXT || sl->len > TK_ARGV_TEXT - sl->off))
			return -EIO;
	}
	err = tk_recbuf_text_reserve(out, argv_prog.skel->bss->used, &at);
	if (err < 0)
		return err;
	for (uint32_t i = 0; i < done; i++) {
		const struct tk_argv_slot *sl = &argv_prog.slots[i];
		struct tk_record *r = &out->recs[first + i];

		switch (sl->status) {
		case TK_ARGV_OK:
			r->cmdline_off = (uint32_t)out->text_len;
			r->cmdline_len = sl->len;
			memcpy(out->text + out->text_len, argv_prog.text + sl->off, sl->len);
			out->text_len += sl->len;
			out->cmdline_by_bpf++;
			break;
		case TK_ARGV_EMPTY:
			r->cmdline_off = 0;
			r->cmdline_len = 0;
			out->cmdline_by_bpf++;
			break;
		case TK_ARGV_GONE:
			r->cmdline_len = TK_CMDLINE_NONE;
			break;
		default:
			ask_proc[first + i] = 1;
			break;
		}
	}
	return done;
}

/* As the snapshot tiers (bpf_snapshot.c tiers_fork): a child of fork() would share the
 * slots and the text with its parent, so it loads its own. */
static void argv_fork(enum tk_fork_phase phase)
{
	if (phase == TK_FORK_PREPARE) {
		pthread_mutex_lock(&argv_prog.lock);
		return;
	}
	if (phase == TK_FORK_CHILD)
		argv_prog.inherited = argv_prog.state > 0;
	pthread_mutex_unlock(&argv_prog.lock);
}

__attribute__((constructor)) static void argv_fork_register(void)
{
	tk_fork_register(TK_FORK_RANK_ARGV, argv_fork);
}

/* Every record through the argv program, those it leaves marked in
 * ask_proc; -errno (with why) when it cannot run at all. */
static int argv_fill(struct tk_recbuf *out, uint8_t *ask_proc, char *why, size_t why_len)
{
	int err = 0;

	pthread_mutex_lock(&argv_prog.lock);
	if (argv_prog.inherited) {
		argv_unload();
		argv_prog.inherited = false;
	}
	if (argv_prog.state == 0) {
		tk_bpf_load_begin();
		err = argv_load();
		if (err < 0)
			/* bpf_iter_num_new is 6.4; a syscall program may call
			 * bpf_task_from_pid since 6.10. */
			tk_bpf_explain("bpf_iter_num_new", BTF_KIND_FUNC, "6.10", err, argv_prog.why,
			               sizeof argv_prog.why);
		tk_bpf_load_end();
		/* A shortage passes: the next snapshot tries again. */
		argv_prog.state = err == 0 ? 1 : tk_bpf_load_transient(err) ? 0 : err;
		if (err < 0)
			snprintf(why, why_len, "the argv program did not load: %s", argv_prog.why);
	} else if (argv_prog.state < 0) {
		err = argv_prog.state;
		snprintf(why, why_len, "the argv program did not load: %s", argv_prog.why);
	}
	for (size_t first = 0; err == 0 && first < out->len;) {
		size_t n = out->len - first;
		long done = argv_run(out, first, n < TK_ARGV_SLOTS ? n : TK_ARGV_SLOTS, ask_proc);

		/* A run that fails leaves its records, and the rest, to /proc;
		 * what earlier runs read stays. */
		if (done <= 0) {
			memset(ask_proc + first, 1, out->len - first);
			break;
		}
		first += (size_t)done;
	}
	pthread_mutex_unlock(&argv_prog.lock);
	return err;
}

int tk_cmdline_bpf_state(unsigned *loads, char *why, size_t why_len)
{
	int state;

	pthread_mutex_lock(&argv_prog.lock);
	state = argv_prog.state;
	*loads = argv_prog.loads;
	snprintf(why, why_len, "%s", state < 0 ? argv_prog.why : "");
	pthread_mutex_unlock(&argv_prog.lock);
	return state;
}

/* Also run when the module is unloaded or the process exits, as the
 * tiers' tk_bpf_release. */
__attribute__((destructor)) void tk_cmdline_release(void)
{
	pthread_mutex_lock(&argv_prog.lock);
	argv_unload();
	argv_prog.inherited = false;
	pthread_mutex_unlock(&argv_prog.lock);
}
#else
static int argv_fill(struct tk_recbuf *out, uint8_t *ask_proc, char *why, size_t why_len)
{
	(void)out;
	(void)ask_proc;
	snprintf(why, why_len, "built without BPF");
	return -ENOTSUP;
}

int tk_cmdline_bpf_state(unsigned *loads, char *why, size_t why_len)
{
	*loads = 0;
	snprintf(why, why_len, "built without BPF");
	return -ENOTSUP;
}

void tk_cmdline_release(void)
{
}
#endif

int tk_cmdline_fill(struct tk_recbuf *out, struct tk_proc_scanner *sc, char *why, size_t why_len)
{
	struct tk_units units;
	uint8_t *ask_proc = calloc(out->len ? out->len : 1, 1);
	int from_bpf, err = 0;

	if (ask_proc == NULL)
		return -ENOMEM;
	tk_units_init(&units);
	from_bpf = argv_fill(out, ask_proc, why, why_len) == 0;
	out->cmdline_from = from_bpf ? "bpf" : "proc";
	for (size_t i = 0; i < out->len && err == 0; i++) {
		if (from_bpf && !ask_proc[i])
			continue;
		err = proc_cmdline(sc->proc_fd, &units, out, &out->recs[i]);
		if (err == -EMFILE || err == -ENFILE) {
			tk_proc_scanner_drop_cache(sc);
			err = proc_cmdline(sc->proc_fd, &units, out, &out->recs[i]);
		}
		if (err == 0 && out->recs[i].cmdline_len != TK_CMDLINE_NONE)
			out->cmdline_by_proc++;
	}
	free(ask_proc);
	if (err < 0)
		snprintf(why, why_len, "reading cmdline from /proc: %s", strerror(-err));
	return err;
}
