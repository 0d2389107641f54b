/* One snapshot through whichever backend (tk_snapshot_take), and the table
 * of the backends, best first. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "bpf_snapshot.h"
#include "cgroup_id.h"
#include "cmdline.h"
#include "proc_scan.h"
#include "snapshot.h"
#include "util.h"

/* The room a BPF walk left for init, unused. */
static int drop_init_room(struct tk_recbuf *out)
{
	if (out->init_room) {
		out->len--;
		memmove(&out->recs[0], &out->recs[1], out->len * sizeof *out->recs);
		out->init_room = 0;
	}
	return 0;
}

/* Init is always there in the initial pid namespace, yet some kernels hide
 * it from BPF (seen on a Firecracker guest's 6.18, whose init is its sandbox
 * agent: neither the task list, the pid table walk nor bpf_task_from_pid(1)
 * finds it). Its record then comes from /proc and is counted in from_proc,
 * rather than a snapshot silently missing pid 1. want_id: whether its
 * cgroup_id is looked up (a cgroup2 hierarchy is mounted). out is in pid
 * order. */
static int add_hidden_init(struct tk_proc_scanner *sc, uint32_t fields, int want_id,
                           struct tk_recbuf *out, char *why, size_t why_len)
{
	struct tk_record rec;
	int err;

	if (tk_recbuf_find(out, 1) != NULL)
		return drop_init_room(out);
	err = tk_proc_scanner_ensure_open(sc);
	if (err == 0)
		err = tk_proc_scan_init(sc, &rec, (fields & TK_F(UID)) != 0);
	/* As for every /proc record, a cgroup that cannot be read is nil (id
	 * 0) and the record stays. */
	if (err == 0 && want_id) {
		uint64_t id = 0;

		(void)tk_proc_scan_init_cgroup_id(sc, &id);
		rec.cgroup_id = id;
	}
	if (err == -EACCES || err == -EPERM) {
		out->denied++;
		return drop_init_room(out);
	}
	if (err == 0) {
		tk_record_mask(&rec, fields);
		if (out->init_room) {
			out->recs[0] = rec;
			out->init_room = 0;
		} else {
			err = tk_recbuf_insert(out, &rec);
		}
	}
	if (err < 0) {
		snprintf(why, why_len, "init is hidden from BPF here; reading /proc/1: %s",
		         strerror(-err));
		return err;
	}
	out->from_proc++;
	return 0;
}

int tk_snapshot_take(const struct tk_snap_backend *b, const struct tk_snap_req *req,
                     struct tk_recbuf *out, uint64_t *time_ns, char *why, size_t why_len)
{
	struct tk_proc_scanner *sc = req->sc;
	int want_cgroup = (req->fields & TK_F(CGROUP)) != 0;
	/* <pid>/cgroup is read when cgroup_id is asked for: by proc for every
	 * record, through a cache of paths; by a BPF tier for a hidden init. */
	int proc_ids = want_cgroup && !b->may_hide_init;
	struct tk_cgid_cache cgids;
	char mnt[TK_CG_PATH_MAX];
	int err = 0, unmounted = 0;

	*time_ns = tk_boottime_ns();
	if (proc_ids) {
		err = tk_cgid_cache_open(&cgids);
		unmounted = err == 0 && cgids.mount_fd < 0;
	} else if (want_cgroup) {
		err = tk_cgroup2_mount(mnt, sizeof mnt);
		unmounted = err == -ENOENT;
		err = unmounted ? 0 : err;
	}
	if (err < 0) {
		snprintf(why, why_len, "find the cgroup2 mount: %s", strerror(-err));
		return err;
	}
	sc->cgids = proc_ids ? &cgids : NULL;
	err = b->run(b, req, out, why, why_len);
	if (proc_ids)
		tk_cgid_cache_close(&cgids);
	sc->cgids = NULL;
	if (err == 0 && !b->may_hide_init)
		(void)drop_init_room(out);
	if (err == 0 && !b->in_order)
		tk_recbuf_sort(out);
	if (err == 0 && b->may_hide_init)
		err = add_hidden_init(sc, (req->fields | TK_F_ALWAYS) & TK_F_WALK,
		                      want_cgroup && !unmounted, out, why, why_len);
	/* After a BPF walk; the proc walk read cmdline as it went. */
	if (err == 0 && (req->fields & TK_F(CMDLINE)) && b->tier >= 0) {
		err = tk_proc_scanner_ensure_open(sc);
		if (err < 0)
			snprintf(why, why_len, "open /proc: %s", strerror(-err));
		else
			err = tk_cmdline_fill(out, sc, why, why_len);
	}
	if (err < 0) {
		tk_recbuf_free(out);
		return err;
	}
	/* Each cmdline read reserved room for a long one. */
	if (out->text_cap > out->text_len + 4096) {
		char *text = realloc(out->text, out->text_len ? out->text_len : 1);

		if (text != NULL) {
			out->text = text;
			out->text_cap = out->text_len ? out->text_len : 1;
		}
	}
	/* No cgroup2 hierarchy mounted: every process is still in the default
	 * hierarchy's root, which BPF reads as id 1, but no path leads to it.
	 * The ids read 0 (nil), as /proc's do. */
	for (size_t i = 0; unmounted && i < out->len; i++)
		out->recs[i].cgroup_id = 0;
	return 0;
}

/* ---- the snapshot backends, best first ------------------------------------ */

const struct tk_snap_backend *const tk_snap_backends[] = {
	&tk_snap_backend_kfunc, &tk_snap_backend_iter, &tk_snap_backend_proc, NULL,
};

const struct tk_snap_backend *tk_snap_backend_find(const char *name)
{
	for (int i = 0; tk_snap_backends[i] != NULL; i++)
		if (strcmp(tk_snap_backends[i]->name, name) == 0)
			return tk_snap_backends[i];
	return NULL;
}
