/* One process, read through its /proc directory fd. The directory is opened
 * between pidfd_open and a liveness check of that pidfd: if the process
 * still runs after the open, the pid could not have been reused meanwhile,
 * so the directory is its own. A /proc directory fd stays bound to the
 * process it was opened for (the kernel keeps its struct pid), so every
 * later openat answers for that process or fails; it never answers for a
 * newer process that reused the number. Calls that take a pid (prlimit,
 * sched_*affinity) are bracketed by liveness checks instead. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cgroup.h"
#include "process.h"
#include "procinfo.h"
#include "util.h"

/* Files larger than this are refused: cmdline and environ are bounded by
 * the exec limits (a quarter of the stack rlimit), far below it. */
#define READ_MAX ((size_t)64 << 20)
#define AFFINITY_CPUS 8192

int tk_pref_alive(const struct tk_pref *p)
{
	int r = tk_pidfd_alive(p->pidfd);

	if (r < 0)
		return r;
	return r ? 0 : -ESRCH;
}

int tk_pref_after(const struct tk_pref *p, int r)
{
	int a = tk_pref_alive(p);

	if (a == -ESRCH)
		return -ESRCH;
	return r;
}

void tk_pref_close(struct tk_pref *p)
{
	if (p->dirfd >= 0)
		close(p->dirfd);
	if (p->pidfd >= 0)
		close(p->pidfd);
	p->dirfd = p->pidfd = -1;
}

int tk_pref_open(pid_t pid, int pidfd, struct tk_pref *out)
{
	char path[32];
	int r, r2;

	out->pidfd = out->dirfd = -1;
	out->pid = pid;
	if (pidfd < 0) {
		pidfd = tk_pidfd_open(pid);
		if (pidfd < 0)
			return pidfd;
	} else {
		int fpid;
		r = tk_pidfd_pid(pidfd, &fpid);
		if (r < 0) {
			close(pidfd);
			return r;
		}
		out->pid = fpid;
	}
	out->pidfd = pidfd;
	snprintf(path, sizeof path, "/proc/%d", (int)out->pid);
	out->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	r = out->dirfd < 0 ? -errno : 0;
	/* Not reaped yet (a zombie counts: its /proc directory is still its
	 * own, and it can still be waited for): signal 0 through the pidfd says
	 * so, EPERM included (it exists, it is another user's). */
	r2 = tk_pidfd_signal(pidfd, 0);
	if (r2 == -ESRCH)
		r = -ESRCH;
	else if (r2 < 0 && r2 != -EPERM && r == 0)
		r = r2;
	if (r < 0)
		tk_pref_close(out);
	return r;
}

int tk_pref_read(const struct tk_pref *p, const char *name, char **buf, size_t *len)
{
	size_t cap = 0, n = 0;
	char *b = NULL;
	int fd, r = 0;

	*buf = NULL;
	*len = 0;
	fd = openat(p->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return tk_pref_after(p, -errno);
	for (;;) {
		ssize_t got;
		if (n + 1 >= cap) {
			char *nb;
			if (cap > READ_MAX / 2) {
				r = -EFBIG;
				break;
			}
			nb = tk_grow(b, &cap, n + 2, 1, 4096);
			if (nb == NULL) {
				r = -ENOMEM;
				break;
			}
			b = nb;
		}
		got = read(fd, b + n, cap - n - 1);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			break;
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}
	close(fd);
	r = tk_pref_after(p, r);
	if (r < 0) {
		free(b);
		return r;
	}
	b[n] = '\0';
	*buf = b;
	*len = n;
	return 0;
}

int tk_pref_readlink(const struct tk_pref *p, const char *name, char **out)
{
	size_t cap = 0, need = 256;
	char *b = NULL;
	int r = 0;

	*out = NULL;
	for (;;) {
		char *nb = tk_grow(b, &cap, need, 1, 256);
		ssize_t n;
		if (nb == NULL) {
			r = -ENOMEM;
			break;
		}
		b = nb;
		n = readlinkat(p->dirfd, name, b, cap);
		if (n < 0) {
			r = -errno;
			break;
		}
		if ((size_t)n < cap) {
			b[n] = '\0';
			break;
		}
		if (cap >= (size_t)PATH_MAX * 16) {
			r = -ENAMETOOLONG;
			break;
		}
		need = cap + 1;
	}
	r = tk_pref_after(p, r);
	if (r < 0) {
		free(b);
		return r;
	}
	*out = b;
	return 0;
}

int tk_pref_write(const struct tk_pref *p, const char *name, const char *value, size_t len)
{
	int fd = openat(p->dirfd, name, O_WRONLY | O_CLOEXEC | O_NOCTTY);
	int r = 0;

	if (fd < 0)
		return tk_pref_after(p, -errno);
	if (write(fd, value, len) < 0)
		r = -errno;
	close(fd);
	return tk_pref_after(p, r);
}

static int fd_number(const char *s)
{
	const char *end = s + strlen(s);
	uint64_t v;

	if (tk_parse_u64(s, end, INT_MAX, &v) != end)
		return -1;
	return (int)v;
}

int tk_pref_fds(const struct tk_pref *p, int targets, tk_fd_cb cb, void *ctx)
{
	struct dirent *de;
	DIR *d;
	int fd, count = 0, r = 0;
	char target[PATH_MAX];

	fd = openat(p->dirfd, "fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return tk_pref_after(p, -errno);
	d = fdopendir(fd);
	if (d == NULL) {
		r = -errno;
		close(fd);
		return tk_pref_after(p, r);
	}
	for (;;) {
		int n;
		errno = 0;
		de = readdir(d);
		if (de == NULL) {
			if (errno != 0)
				r = -errno;
			break;
		}
		n = fd_number(de->d_name);
		if (n < 0)
			continue;
		if (targets) {
			ssize_t len = readlinkat(dirfd(d), de->d_name, target, sizeof target - 1);
			/* Closed since the listing: not one of its descriptors any more. */
			if (len < 0 && errno == ENOENT)
				continue;
			if (len < 0) {
				r = -errno;
				break;
			}
			target[len] = '\0';
		}
		count++;
		if (cb != NULL) {
			r = cb(ctx, n, targets ? target : NULL);
			if (r < 0)
				break;
		}
	}
	closedir(d);
	r = tk_pref_after(p, r);
	return r < 0 ? r : count;
}

int tk_pref_affinity_get(const struct tk_pref *p, int *cpus, int *n, int cap)
{
	size_t size = CPU_ALLOC_SIZE(AFFINITY_CPUS);
	cpu_set_t *set = CPU_ALLOC(AFFINITY_CPUS);
	int r = 0, k = 0;

	if (set == NULL)
		return -ENOMEM;
	r = tk_pref_alive(p);
	if (r == 0 && sched_getaffinity(p->pid, size, set) < 0)
		r = -errno;
	r = tk_pref_after(p, r);
	for (int c = 0; r == 0 && c < AFFINITY_CPUS && k < cap; c++)
		if (CPU_ISSET_S((size_t)c, size, set))
			cpus[k++] = c;
	CPU_FREE(set);
	*n = k;
	return r;
}

int tk_pref_affinity_set(const struct tk_pref *p, const int *cpus, int n)
{
	size_t size = CPU_ALLOC_SIZE(AFFINITY_CPUS);
	cpu_set_t *set = CPU_ALLOC(AFFINITY_CPUS);
	int r;

	if (set == NULL)
		return -ENOMEM;
	CPU_ZERO_S(size, set);
	for (int i = 0; i < n; i++) {
		if (cpus[i] < 0 || cpus[i] >= AFFINITY_CPUS) {
			CPU_FREE(set);
			return -EINVAL;
		}
		CPU_SET_S((size_t)cpus[i], size, set);
	}
	r = tk_pref_alive(p);
	if (r == 0 && sched_setaffinity(p->pid, size, set) < 0)
		r = -errno;
	CPU_FREE(set);
	return tk_pref_after(p, r);
}

static uint64_t from_rlim(rlim_t v)
{
	return v == RLIM_INFINITY ? UINT64_MAX : (uint64_t)v;
}

static rlim_t to_rlim(uint64_t v)
{
	return v == UINT64_MAX ? RLIM_INFINITY : (rlim_t)v;
}

int tk_pref_prlimit(const struct tk_pref *p, int resource, const struct tk_rlim *set,
                    struct tk_rlim *old)
{
	struct rlimit nv, ov;
	int r = tk_pref_alive(p);

	if (r < 0)
		return r;
	if (set != NULL) {
		nv.rlim_cur = to_rlim(set->soft);
		nv.rlim_max = to_rlim(set->hard);
	}
	if (prlimit(p->pid, (__rlimit_resource_t)resource, set ? &nv : NULL, &ov) < 0)
		r = -errno;
	r = tk_pref_after(p, r);
	if (r == 0 && old != NULL) {
		old->soft = from_rlim(ov.rlim_cur);
		old->hard = from_rlim(ov.rlim_max);
	}
	return r;
}

/* ---- parsers ---------------------------------------------------------------- */

/* Calls fn for every "key:<blanks>value" line; the value runs to the end of
 * the line. Lines without ':' are passed with an empty key length of 0 and
 * ignored by every caller. */
typedef void (*line_fn)(void *ctx, const char *key, size_t klen, const char *val, size_t vlen);

static void each_line(const char *buf, size_t len, line_fn fn, void *ctx)
{
	const char *p = buf, *end = buf + len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		const char *colon = memchr(p, ':', (size_t)(le - p));
		if (colon != NULL) {
			const char *v = colon + 1;
			while (v < le && (*v == ' ' || *v == '\t'))
				v++;
			fn(ctx, p, (size_t)(colon - p), v, (size_t)(le - v));
		}
		p = le + 1;
	}
}

static int key_is(const char *key, size_t klen, const char *want)
{
	return strlen(want) == klen && memcmp(key, want, klen) == 0;
}

/* A decimal u64 at the start of s; -EBADMSG on none or overflow. Sets
 * *used to the characters read. */
static int dec_u64(const char *s, size_t len, uint64_t *out, size_t *used)
{
	const char *end = tk_parse_u64(s, s + len, UINT64_MAX, out);

	if (end == NULL)
		return -EBADMSG;
	if (used)
		*used = (size_t)(end - s);
	return 0;
}

static int hex_u64(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;
	size_t i = 0;

	for (; i < len; i++) {
		char c = s[i];
		unsigned d;
		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			d = (unsigned)(c - 'A' + 10);
		else
			break;
		if (v >> 60)
			return -EBADMSG;
		v = v << 4 | d;
	}
	if (i == 0)
		return -EBADMSG;
	*out = v;
	return 0;
}

/* "<n> kB" -> bytes */
static int kb_bytes(const char *s, size_t len, uint64_t *out)
{
	uint64_t v;

	if (dec_u64(s, len, &v, NULL) < 0 || v > UINT64_MAX / 1024)
		return -EBADMSG;
	*out = v * 1024;
	return 0;
}

/* Four tab-separated ids. */
static int ids4(const char *s, size_t len, int64_t out[4])
{
	size_t i = 0;

	for (int k = 0; k < 4; k++) {
		uint64_t v;
		size_t used;
		while (i < len && (s[i] == ' ' || s[i] == '\t'))
			i++;
		if (dec_u64(s + i, len - i, &v, &used) < 0 || v > UINT32_MAX)
			return -EBADMSG;
		out[k] = (int64_t)v;
		i += used;
	}
	return 0;
}

const char *const tk_sigmask_names[TK_SIGMASKS] = { "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt" };

struct status_ctx {
	struct tk_status *st;
	int bad;
};

static void status_line(void *ctx, const char *k, size_t kl, const char *v, size_t vl)
{
	struct status_ctx *c = ctx;
	struct tk_status *st = c->st;
	int r = 0;

	if (key_is(k, kl, "Uid")) {
		r = ids4(v, vl, st->uid);
		st->have |= TK_ST_IDS;
	} else if (key_is(k, kl, "Gid")) {
		r = ids4(v, vl, st->gid);
	} else if (key_is(k, kl, "voluntary_ctxt_switches")) {
		r = dec_u64(v, vl, &st->ctxsw_voluntary, NULL);
		st->have |= TK_ST_CTXSW;
	} else if (key_is(k, kl, "nonvoluntary_ctxt_switches")) {
		r = dec_u64(v, vl, &st->ctxsw_involuntary, NULL);
	} else if (key_is(k, kl, "VmHWM")) {
		r = kb_bytes(v, vl, &st->vmhwm_bytes);
		st->have |= TK_ST_VM;
	} else if (key_is(k, kl, "VmRSS")) {
		r = kb_bytes(v, vl, &st->vmrss_bytes);
	} else if (key_is(k, kl, "VmSwap")) {
		r = kb_bytes(v, vl, &st->vmswap_bytes);
	} else if (key_is(k, kl, "Threads")) {
		r = dec_u64(v, vl, &st->threads, NULL);
	} else {
		for (int i = 0; i < TK_SIGMASKS; i++) {
			if (key_is(k, kl, tk_sigmask_names[i])) {
				r = hex_u64(v, vl, &st->sig[i]);
				st->have |= TK_ST_SIG;
			}
		}
	}
	if (r < 0)
		c->bad = 1;
}

int tk_status_parse(const char *buf, size_t len, struct tk_status *out)
{
	struct status_ctx c = { out, 0 };

	memset(out, 0, sizeof *out);
	for (int i = 0; i < 4; i++)
		out->uid[i] = out->gid[i] = -1;
	each_line(buf, len, status_line, &c);
	if (c.bad || !(out->have & TK_ST_IDS))
		return -EBADMSG;
	return 0;
}

struct io_ctx {
	struct tk_io *io;
	int seen, bad;
};

static void io_line(void *ctx, const char *k, size_t kl, const char *v, size_t vl)
{
	static const char *const names[] = { "rchar", "wchar", "syscr", "syscw", "read_bytes",
	                                     "write_bytes", "cancelled_write_bytes" };
	struct io_ctx *c = ctx;
	uint64_t *slots[] = { &c->io->rchar, &c->io->wchar, &c->io->syscr, &c->io->syscw,
	                      &c->io->read_bytes, &c->io->write_bytes,
	                      &c->io->cancelled_write_bytes };

	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (key_is(k, kl, names[i])) {
			if (dec_u64(v, vl, slots[i], NULL) < 0)
				c->bad = 1;
			c->seen |= 1 << i;
		}
	}
}

int tk_io_parse(const char *buf, size_t len, struct tk_io *out)
{
	struct io_ctx c = { out, 0, 0 };

	memset(out, 0, sizeof *out);
	each_line(buf, len, io_line, &c);
	return c.bad || c.seen != 0x7f ? -EBADMSG : 0;
}

struct smaps_ctx {
	struct tk_memfull *m;
	uint64_t pclean, pdirty;
	int seen, bad;
};

static void smaps_line(void *ctx, const char *k, size_t kl, const char *v, size_t vl)
{
	struct smaps_ctx *c = ctx;
	uint64_t *slot = NULL;
	int bit = 0;

	if (key_is(k, kl, "Rss")) { slot = &c->m->rss; bit = 1; }
	else if (key_is(k, kl, "Pss")) { slot = &c->m->pss; bit = 2; }
	else if (key_is(k, kl, "Swap")) { slot = &c->m->swap; bit = 4; }
	else if (key_is(k, kl, "Private_Clean")) { slot = &c->pclean; bit = 8; }
	else if (key_is(k, kl, "Private_Dirty")) { slot = &c->pdirty; bit = 16; }
	if (slot == NULL)
		return;
	if (kb_bytes(v, vl, slot) < 0)
		c->bad = 1;
	c->seen |= bit;
}

int tk_smaps_rollup_parse(const char *buf, size_t len, struct tk_memfull *out)
{
	struct smaps_ctx c = { out, 0, 0, 0, 0 };

	memset(out, 0, sizeof *out);
	/* A process without an address space (a kernel thread) has an empty file. */
	if (len == 0)
		return 0;
	each_line(buf, len, smaps_line, &c);
	if (c.bad || c.seen != 31 || c.pclean > UINT64_MAX - c.pdirty)
		return -EBADMSG;
	out->uss = c.pclean + c.pdirty;
	return 0;
}

const char *const tk_limit_names[TK_NLIMITS] = {
	"cpu", "fsize", "data", "stack", "core", "rss", "nproc", "nofile", "memlock", "as",
	"locks", "sigpending", "msgqueue", "nice", "rtprio", "rttime",
};

/* The row titles of fs/proc/base.c's lnames[], in RLIMIT_* order. */
static const char *const limit_rows[TK_NLIMITS] = {
	"Max cpu time", "Max file size", "Max data size", "Max stack size", "Max core file size",
	"Max resident set", "Max processes", "Max open files", "Max locked memory",
	"Max address space", "Max file locks", "Max pending signals", "Max msgqueue size",
	"Max nice priority", "Max realtime priority", "Max realtime timeout",
};

static int limit_value(const char **p, const char *end, uint64_t *out)
{
	const char *s = *p;
	size_t used;

	while (s < end && *s == ' ')
		s++;
	if ((size_t)(end - s) >= 9 && memcmp(s, "unlimited", 9) == 0) {
		*out = UINT64_MAX;
		*p = s + 9;
		return 0;
	}
	if (dec_u64(s, (size_t)(end - s), out, &used) < 0)
		return -EBADMSG;
	*p = s + used;
	return 0;
}

int tk_limits_parse(const char *buf, size_t len, struct tk_rlim out[TK_NLIMITS], int *n)
{
	const char *p = buf, *end = buf + len;
	unsigned seen = 0;

	*n = 0;
	for (int i = 0; i < TK_NLIMITS; i++)
		out[i].soft = out[i].hard = 0;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		for (int i = 0; i < TK_NLIMITS; i++) {
			size_t nlen = strlen(limit_rows[i]);
			const char *q = p + nlen;
			if ((size_t)(le - p) <= nlen || memcmp(p, limit_rows[i], nlen) != 0 || *q != ' ')
				continue;
			if (limit_value(&q, le, &out[i].soft) < 0 || limit_value(&q, le, &out[i].hard) < 0)
				return -EBADMSG;
			if (!(seen & (1u << i)))
				(*n)++;
			seen |= 1u << i;
			break;
		}
		p = le + 1;
	}
	return *n > 0 ? 0 : -EBADMSG;
}

int tk_cgroup2_path(const char *buf, size_t len, const char **path, size_t *plen)
{
	const char *p = buf, *end = buf + len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		if (le - p >= 3 && memcmp(p, "0::", 3) == 0) {
			*path = p + 3;
			*plen = (size_t)(le - p - 3);
			return 0;
		}
		p = le + 1;
	}
	return -ENOENT;
}

int tk_pid_list_parse(const char *buf, size_t len, tk_pidlist_cb cb, void *ctx)
{
	const char *p = buf, *end = buf + len;

	while (p < end) {
		uint64_t pid;
		const char *q;
		int r;

		if (*p < '0' || *p > '9') {
			p++;
			continue;
		}
		q = tk_parse_u64(p, end, UINT32_MAX, &pid);
		if (q == NULL) {
			/* Too long for a pid: skip its digits. */
			while (p < end && *p >= '0' && *p <= '9')
				p++;
			continue;
		}
		r = cb(ctx, (uint32_t)pid);
		if (r != 0)
			return r;
		p = q;
	}
	return 0;
}

/* Far more than a cgroup file holds (a path is under 4 KiB a hierarchy). */
#define PROC_CGROUP_MAX (1u << 20)

int tk_proc_cgroup2_read(pid_t pid, char *out, size_t cap)
{
	char name[40], *text;
	const char *cg;
	size_t len;
	ssize_t n;
	int r = 0;

	if (pid == 0)
		snprintf(name, sizeof name, "/proc/self/cgroup");
	else
		snprintf(name, sizeof name, "/proc/%d/cgroup", (int)pid);
	n = tk_read_all(AT_FDCWD, name, PROC_CGROUP_MAX, &text);
	if (n < 0)
		return (int)n;
	if (tk_cgroup2_path(text, (size_t)n, &cg, &len) == 0) {
		r = len < cap ? 1 : -ENAMETOOLONG;
		if (r == 1) {
			memcpy(out, cg, len);
			out[len] = '\0';
		}
	}
	free(text);
	return r;
}

int tk_task_children(pid_t tid, tk_pidlist_cb cb, void *ctx)
{
	char name[48], *text;
	ssize_t n;
	int r;

	snprintf(name, sizeof name, "/proc/self/task/%d/children", (int)tid);
	n = tk_read_all(AT_FDCWD, name, 1u << 24, &text);
	if (n < 0)
		return (int)n;
	r = tk_pid_list_parse(text, (size_t)n, cb, ctx);
	free(text);
	return r;
}
