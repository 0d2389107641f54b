/* takana.delta and snap:filter over record buffers (snapshot_query.h). */
#include <stdlib.h>

#include "snapshot_query.h"

static uint64_t sub_floor(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

struct delta_ctx {
	struct tk_delta *out;
	double interval;
};

static int delta_record(void *ctx, enum tk_join what, const struct tk_record *ra,
                        const struct tk_record *rb)
{
	struct delta_ctx *d = ctx;
	struct tk_delta *o = d->out;
	struct tk_delta_cpu *c;

	if (what == TK_JOIN_GONE) {
		o->exited[o->nexited++] = ra->pid;
		return 0;
	}
	if (what == TK_JOIN_NEW) {
		o->started[o->nstarted++] = rb->pid;
		return 0;
	}
	c = &o->cpu[o->ncpu++];
	c->pid = rb->pid;
	c->utime_ns = sub_floor(rb->utime_ns, ra->utime_ns);
	c->stime_ns = sub_floor(rb->stime_ns, ra->stime_ns);
	c->cpu_ns = c->utime_ns + c->stime_ns;
	c->share = d->interval > 0 ? (double)c->cpu_ns / d->interval : 0.0;
	return 0;
}

void tk_snapshot_delta(const struct tk_recbuf *a, const struct tk_recbuf *b,
                       uint64_t interval_ns, struct tk_delta *out)
{
	struct delta_ctx d = { out, (double)interval_ns };

	out->ncpu = out->nstarted = out->nexited = 0;
	tk_recbuf_join(a, b, delta_record, &d);
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

int tk_filter_cgroup_ids(const char *rel, int recursive, uint64_t **ids, size_t *n)
{
	int err = tk_cgroup_subtree_ids(rel, recursive, ids, n);

	if (err < 0)
		return err;
	qsort(*ids, *n, sizeof **ids, u64_cmp);
	return 0;
}

size_t tk_snapshot_filter(const struct tk_recbuf *rb, const struct tk_filter *f, size_t *out)
{
	size_t n = 0;

	for (size_t i = 0; i < rb->len; i++) {
		const struct tk_record *r = &rb->recs[i];

		if (f->ids != NULL && (r->cgroup_id == 0 ||
		    bsearch(&r->cgroup_id, f->ids, f->nids, sizeof *f->ids, u64_cmp) == NULL))
			continue;
		if (f->has_uid && r->uid != f->uid)
			continue;
		out[n++] = i;
	}
	return n;
}
