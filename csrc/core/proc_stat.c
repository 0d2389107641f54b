/* Hand-written parser for /proc/<pid>/stat (proc(5)). No sscanf: the comm
 * field may hold spaces, parentheses and newlines, so it is everything
 * between the first '(' and the LAST ')', and every number is checked for
 * overflow. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "proc_stat.h"
#include "util.h"

/* Kernel threads carry PF_KTHREAD in the stat flags field (include/linux/sched.h). */
#define PF_KTHREAD 0x00200000u

struct cursor {
	const char *p;
	const char *end;
};

static int parse_u64(struct cursor *c, uint64_t *out)
{
	const char *p = tk_parse_u64(c->p, c->end, UINT64_MAX, out);

	if (p == NULL)
		return -EBADMSG;
	c->p = p;
	return 0;
}

static int parse_i64(struct cursor *c, int64_t *out)
{
	uint64_t mag;
	int neg = 0;

	if (c->p < c->end && *c->p == '-') {
		neg = 1;
		c->p++;
	}
	if (parse_u64(c, &mag) < 0)
		return -EBADMSG;
	if (neg) {
		if (mag > (uint64_t)INT64_MAX + 1)
			return -EBADMSG;
		*out = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
	} else {
		if (mag > INT64_MAX)
			return -EBADMSG;
		*out = (int64_t)mag;
	}
	return 0;
}

/* Every field after comm is separated by exactly one space. */
static int expect_space(struct cursor *c)
{
	if (c->p >= c->end || *c->p != ' ')
		return -EBADMSG;
	c->p++;
	return 0;
}

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
	if (a != 0 && b > UINT64_MAX / a)
		return UINT64_MAX;
	return a * b;
}

static int fits_u32(int64_t v)
{
	return v >= 0 && v <= (int64_t)UINT32_MAX;
}

/* Fields 4..24 of proc(5), in order, as read after "state ". */
enum {
	F_PPID, F_PGRP, F_SESSION, F_TTY, F_TPGID, F_FLAGS, F_MINFLT, F_CMINFLT,
	F_MAJFLT, F_CMAJFLT, F_UTIME, F_STIME, F_CUTIME, F_CSTIME, F_PRIORITY,
	F_NICE, F_NTHREADS, F_ITREAL, F_START, F_VSIZE, F_RSS, F_COUNT
};

/* Reads "pid (comm) state" into rec; the cursor is left after the state. */
static int parse_head(struct cursor *c, struct tk_record *rec)
{
	const char *open, *close = NULL;
	uint64_t pid;
	size_t comm_len;

	if (parse_u64(c, &pid) < 0 || pid == 0 || pid > INT32_MAX)
		return -EBADMSG;
	if (expect_space(c) < 0 || c->p >= c->end || *c->p != '(')
		return -EBADMSG;
	open = c->p;
	for (const char *q = c->end; q > open + 1;) {
		q--;
		if (*q == ')') {
			close = q;
			break;
		}
	}
	if (close == NULL)
		return -EBADMSG;
	comm_len = (size_t)(close - open - 1);
	if (comm_len >= TK_COMM_LEN)
		comm_len = TK_COMM_LEN - 1;
	memcpy(rec->comm, open + 1, comm_len);
	rec->comm_len = (uint32_t)comm_len;
	rec->pid = (uint32_t)pid;

	c->p = close + 1;
	if (expect_space(c) < 0 || c->p >= c->end)
		return -EBADMSG;
	if ((unsigned char)*c->p < 'A' || (unsigned char)*c->p > 'z')
		return -EBADMSG;
	rec->state = (uint32_t)(unsigned char)*c->p++;
	/* A task already reaped but still reachable prints state X with ppid 0
	 * and pgrp/session -1: it is gone, not malformed. */
	if (rec->state == 'X')
		return -ESRCH;
	return 0;
}

/* Reads fields 4..24 into f and checks the ranges the record needs. */
static int parse_fields(struct cursor *c, int64_t f[F_COUNT])
{
	for (int i = 0; i < F_COUNT; i++) {
		if (expect_space(c) < 0 || parse_i64(c, &f[i]) < 0)
			return -EBADMSG;
	}
	/* Later fields exist on every kernel we support but are not needed;
	 * what follows must still look like the rest of the line. */
	if (c->p < c->end && *c->p != ' ' && *c->p != '\n')
		return -EBADMSG;

	/* A task whose pids were already detached (reaped, mid-release) can
	 * still print a line, with state Z and pgrp and session -1: gone. */
	if (f[F_PGRP] == -1 && f[F_SESSION] == -1)
		return -ESRCH;
	if (!fits_u32(f[F_PPID]) || !fits_u32(f[F_PGRP]) || !fits_u32(f[F_SESSION]) ||
	    !fits_u32(f[F_NTHREADS]) || f[F_NICE] < -20 || f[F_NICE] > 19 ||
	    f[F_MINFLT] < 0 || f[F_MAJFLT] < 0 || f[F_UTIME] < 0 || f[F_STIME] < 0 ||
	    f[F_START] < 0 || f[F_RSS] < 0)
		return -EBADMSG;
	return 0;
}

int tk_stat_parse(const char *buf, size_t len, const struct tk_units *units,
                  struct tk_record *out)
{
	struct tk_record rec;
	struct cursor c;
	int64_t f[F_COUNT];
	int err;

	if (buf == NULL || units == NULL || out == NULL)
		return -EINVAL;
	c.p = buf;
	c.end = buf + len;
	memset(&rec, 0, sizeof rec);
	err = parse_head(&c, &rec);
	if (err < 0)
		return err;
	err = parse_fields(&c, f);
	if (err < 0)
		return err;

	rec.ppid = (uint32_t)f[F_PPID];
	rec.pgid = (uint32_t)f[F_PGRP];
	rec.sid = (uint32_t)f[F_SESSION];
	rec.nthreads = (uint32_t)f[F_NTHREADS];
	rec.nice = (uint32_t)(int32_t)f[F_NICE];
	rec.flags = ((uint64_t)f[F_FLAGS] & PF_KTHREAD) ? TK_REC_KTHREAD : 0;
	rec.minflt = (uint64_t)f[F_MINFLT];
	rec.majflt = (uint64_t)f[F_MAJFLT];
	rec.utime_ns = mul_sat((uint64_t)f[F_UTIME], units->ns_per_tick);
	rec.stime_ns = mul_sat((uint64_t)f[F_STIME], units->ns_per_tick);
	rec.start_ns = mul_sat((uint64_t)f[F_START], units->ns_per_tick);
	/* vsize is printed unsigned; parse_i64 refused anything above INT64_MAX. */
	rec.vsize_bytes = (uint64_t)f[F_VSIZE];
	rec.rss_bytes = mul_sat((uint64_t)f[F_RSS], units->page_size);

	*out = rec;
	return 0;
}

void tk_units_init(struct tk_units *units)
{
	long hz = sysconf(_SC_CLK_TCK);
	long page = sysconf(_SC_PAGESIZE);

	units->ns_per_tick = hz > 0 ? 1000000000ull / (uint64_t)hz : 10000000ull;
	units->page_size = page > 0 ? (uint64_t)page : 4096;
}
