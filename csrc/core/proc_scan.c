/* The /proc snapshot backend: one getdents64 pass over /proc, then each
 * <pid>/stat read relative to the /proc dirfd and parsed by proc_stat.c.
 *
 * Warm path: stat fds stay open between scans and are re-read with pread at
 * offset 0, which skips the path walk and the open/close that dominate the
 * cold cost. A cached fd is bound to its process, not to the pid number, so
 * once that process is gone pread fails (ESRCH) even if the pid was reused,
 * and the pid is reopened.
 *
 * Every scanner of the process (the snapshot binding's, each poll event
 * stream's) draws on one budget, a quarter of RLIMIT_NOFILE: more readers
 * must not take more of the caller's descriptors. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cgroup_id.h"
#include "fork.h"
#include "proc_scan.h"
#include "util.h"

#define DENTS_BUF ((size_t)64 * 1024)
/* A stat line is ~300 bytes; kworker names and 20-digit fields stay far below this. */
#define STAT_BUF 4096
#define CACHE_HARD_LIMIT 65536

/* Descriptors held by the caches of every scanner in the process. */
static atomic_size_t cached_fds_total;

size_t tk_proc_cached_fds_total(void)
{
	return atomic_load(&cached_fds_total);
}

static size_t cache_limit_from_rlimit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 0;
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur / 4 > CACHE_HARD_LIMIT)
		return CACHE_HARD_LIMIT;
	/* Leave three quarters of the descriptor budget to the caller. */
	return (size_t)(rl.rlim_cur / 4);
}

void tk_proc_scanner_unopened(struct tk_proc_scanner *s)
{
	memset(s, 0, sizeof *s);
	s->proc_fd = s->init_fd = s->init_cgroup_fd = -1;
}

int tk_proc_scanner_init(struct tk_proc_scanner *s, const char *proc_path)
{
	tk_proc_scanner_unopened(s);
	s->proc_fd = open(proc_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->proc_fd < 0)
		return -errno;
	s->dents = malloc(DENTS_BUF);
	if (s->dents == NULL) {
		close(s->proc_fd);
		s->proc_fd = -1;
		return -ENOMEM;
	}
	s->dents_cap = DENTS_BUF;
	s->cache_limit = cache_limit_from_rlimit();
	s->fork_generation = tk_fork_generation();
	tk_units_init(&s->units);
	return 0;
}

void tk_proc_scanner_drop_cache(struct tk_proc_scanner *s)
{
	for (size_t i = 0; i < s->cache_len; i++)
		close(s->cache[i].fd);
	atomic_fetch_sub(&cached_fds_total, s->cache_len);
	s->cache_len = 0;
	if (s->init_fd >= 0)
		close(s->init_fd);
	if (s->init_cgroup_fd >= 0)
		close(s->init_cgroup_fd);
	s->init_fd = s->init_cgroup_fd = -1;
	if (s->init_cgids != NULL) {
		tk_cgid_cache_close(s->init_cgids);
		free(s->init_cgids);
		s->init_cgids = NULL;
	}
}

void tk_proc_scanner_close(struct tk_proc_scanner *s)
{
	tk_proc_scanner_drop_cache(s);
	if (s->proc_fd >= 0)
		close(s->proc_fd);
	s->proc_fd = -1;
	free(s->dents);
	free(s->cache);
	free(s->next);
	s->dents = NULL;
	s->cache = s->next = NULL;
	s->cache_cap = 0;
}

static int parse_pid(const char *name, uint32_t *pid)
{
	const char *end = name + strlen(name);
	uint64_t v;

	if (tk_parse_u64(name, end, UINT32_MAX, &v) != end || v == 0)
		return -1;
	*pid = (uint32_t)v;
	return 0;
}

/* Gone processes read as ENOENT (before open) or ESRCH (after). */
static int vanished(int err)
{
	return err == ENOENT || err == ESRCH;
}

/* A process whose mm is gone (a zombie, or one in exit; stat then shows
 * vsize 0) has its <pid>/stat owned by root, whoever it belongs to. The
 * owner of the <pid> directory is still its euid, which is what uid means
 * for every backend. The directory is looked up by number, so read the
 * stat fd again afterwards: if it still reads, the process was not reaped,
 * and its pid could not have been reused in between. */
static int mmless_owner(struct tk_proc_scanner *s, uint32_t pid, int fd, struct tk_record *rec)
{
	char path[16], buf[64];
	struct stat st;

	snprintf(path, sizeof path, "%u", pid);
	if (fstatat(s->proc_fd, path, &st, 0) < 0)
		return vanished(errno) ? -ESRCH : -errno;
	if (pread(fd, buf, sizeof buf, 0) <= 0)
		return -ESRCH;
	rec->uid = (uint32_t)st.st_uid;
	return 0;
}

/* Reads <pid>/stat through *fd (reopening when the cached fd is stale) and
 * fills rec. Returns 0, -ESRCH when the process is gone, or another -errno. */
static int stat_read(struct tk_proc_scanner *s, uint32_t pid, int *fd,
                     struct tk_record *rec, int want_uid)
{
	char buf[STAT_BUF];
	char path[32];
	struct stat st;
	ssize_t n = -1;
	int err;

	if (*fd >= 0) {
		n = pread(*fd, buf, sizeof buf, 0);
		if (n <= 0) {
			close(*fd);
			*fd = -1;
		}
	}
	if (*fd < 0) {
		snprintf(path, sizeof path, "%u/stat", pid);
		*fd = openat(s->proc_fd, path, O_RDONLY | O_CLOEXEC);
		if (*fd < 0)
			return vanished(errno) ? -ESRCH : -errno;
		n = pread(*fd, buf, sizeof buf, 0);
		if (n <= 0) {
			err = n == 0 ? ESRCH : errno;
			close(*fd);
			*fd = -1;
			return vanished(err) ? -ESRCH : -err;
		}
	}
	/* The fd is bound to one process, so the owner and the text below
	 * describe the same process even if the pid is reused meanwhile. */
	st.st_uid = 0;
	if (want_uid && fstat(*fd, &st) < 0)
		return vanished(errno) ? -ESRCH : -errno;
	err = (size_t)n == sizeof buf ? -EBADMSG : tk_stat_parse(buf, (size_t)n, &s->units, rec);
	if (err == -EBADMSG)
		s->bad_pid = (int)pid;
	if (err < 0)
		return err;
	if (rec->pid != pid)
		return -ESRCH;
	rec->uid = (uint32_t)st.st_uid;
	if (want_uid && st.st_uid == 0 && !(rec->flags & TK_REC_KTHREAD) && rec->vsize_bytes == 0) {
		err = mmless_owner(s, pid, *fd, rec);
		if (err < 0)
			return err;
	}
	/* Read by number, so a pid reused since the stat read could answer;
	 * the id is of a process that lived a moment ago either way. */
	if (s->cgids != NULL) {
		uint64_t id;

		err = tk_proc_cgroup_id(s->proc_fd, pid, s->cgids, &id);
		if (err == -ESRCH)
			return err;
		rec->cgroup_id = id;
	}
	return 0;
}

/* One pass over /proc: where we are in the old cache, the new cache being
 * built, and how many descriptors it may keep. */
struct scan {
	size_t ci, next_len, budget;
	uint32_t last_pid;
	int use_cache;
};

static int next_push(struct tk_proc_scanner *s, size_t *len, uint32_t pid, int fd)
{
	/* Both arrays share cache_cap, so each grows from the same old cap. */
	size_t cap = s->cache_cap, cap_next = s->cache_cap;
	struct tk_fd_entry *a = tk_grow(s->cache, &cap, *len + 1, sizeof *a, 256);

	if (a == NULL)
		return -ENOMEM;
	s->cache = a;
	a = tk_grow(s->next, &cap_next, *len + 1, sizeof *a, 256);
	if (a == NULL)
		return -ENOMEM;
	s->next = a;
	s->cache_cap = cap;
	s->next[*len].pid = pid;
	s->next[*len].fd = fd;
	(*len)++;
	return 0;
}

int tk_proc_scan_init(struct tk_proc_scanner *s, struct tk_record *out, int want_uid)
{
	if (s->proc_fd < 0)
		return -EBADF;
	return stat_read(s, 1, &s->init_fd, out, want_uid);
}

int tk_proc_scan_init_cgroup_id(struct tk_proc_scanner *s, uint64_t *id)
{
	unsigned gen = tk_cgroup2_mount_generation();
	int err;

	*id = 0;
	if (s->proc_fd < 0)
		return -EBADF;
	/* Opened once, not at every snapshot (a statfs, an open and a close):
	 * again only when the mount may have changed. */
	if (s->init_cgids != NULL && s->init_cgids_gen != gen) {
		tk_cgid_cache_close(s->init_cgids);
		free(s->init_cgids);
		s->init_cgids = NULL;
	}
	if (s->init_cgids == NULL) {
		struct tk_cgid_cache *c = malloc(sizeof *c);

		if (c == NULL)
			return -ENOMEM;
		err = tk_cgid_cache_open(c);
		if (err < 0) {
			free(c);
			return err;
		}
		s->init_cgids = c;
		s->init_cgids_gen = tk_cgroup2_mount_generation();
	}
	return tk_init_cgroup_id(s->proc_fd, &s->init_cgroup_fd, s->init_cgids, id);
}

/* What the other scanners hold is not ours to use, and what we may take is
 * reserved now, in the shared total, so two scans that start together
 * cannot both take the whole budget; the reservation becomes what we
 * really kept when the scan ends. */
static size_t budget_reserve(const struct tk_proc_scanner *s)
{
	size_t total = atomic_load(&cached_fds_total), others, budget;

	do {
		others = total - s->cache_len;
		budget = others < s->cache_limit ? s->cache_limit - others : 0;
	} while (!atomic_compare_exchange_weak(&cached_fds_total, &total, others + budget));
	return budget;
}

/* Out of descriptors: give the cached ones back and go on cold. */
static void cache_give_back(struct tk_proc_scanner *s, struct scan *sc)
{
	while (sc->ci < s->cache_len)
		close(s->cache[sc->ci++].fd);
	for (size_t i = 0; i < sc->next_len; i++)
		close(s->next[i].fd);
	sc->next_len = 0;
	sc->use_cache = 0;
	s->cache_limit /= 2;
}

/* <pid>/cmdline, opened before the stat is read and read after it: a
 * read that succeeds proves its process still held the pid after the stat
 * was opened (or, cached, read), so both are one process's. */
static int cmdline_open(struct tk_proc_scanner *s, struct scan *sc, uint32_t pid)
{
	char path[32];
	int fd;

	snprintf(path, sizeof path, "%u/cmdline", pid);
	fd = openat(s->proc_fd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
		cache_give_back(s, sc);
		fd = openat(s->proc_fd, path, O_RDONLY | O_CLOEXEC);
	}
	return fd < 0 ? -errno : fd;
}

/* fd: cmdline_open's answer. Out of descriptors or memory ends the scan,
 * as for the stat; gone (or hidden) leaves the cmdline nil. */
static int cmdline_finish(int fd, struct tk_recbuf *out, struct tk_record *rec)
{
	size_t mark = out->text_len;
	int err = fd >= 0 ? tk_cmdline_read(fd, out, rec) : fd;

	if (err < 0 && !tk_cmdline_missing(-err))
		return err;
	if (err < 0) {
		rec->cmdline_len = TK_CMDLINE_NONE;
		out->text_len = mark;
	} else {
		out->cmdline_by_proc++;
	}
	return 0;
}

/* Reads one pid, reusing its cached fd, and keeps the fd for the next scan
 * while the budget allows; with want_cmdline, its arguments into out's
 * text. Returns what stat_read returned. */
static int scan_pid(struct tk_proc_scanner *s, struct scan *sc, uint32_t pid,
                    struct tk_record *rec, struct tk_recbuf *out)
{
	int fd = -1, cmdline_fd = -ENOENT, r;

	/* Cached pids below this one are gone: /proc lists in pid order. */
	while (sc->ci < s->cache_len && s->cache[sc->ci].pid < pid)
		close(s->cache[sc->ci++].fd);
	if (sc->ci < s->cache_len && s->cache[sc->ci].pid == pid)
		fd = s->cache[sc->ci++].fd;

	if (s->want_cmdline)
		cmdline_fd = cmdline_open(s, sc, pid);
	r = stat_read(s, pid, &fd, rec, 1);
	if (r == -EMFILE || r == -ENFILE) {
		cache_give_back(s, sc);
		r = stat_read(s, pid, &fd, rec, 1);
	}
	if (r == 0 && s->want_cmdline)
		r = cmdline_finish(cmdline_fd, out, rec);
	if (cmdline_fd >= 0)
		close(cmdline_fd);
	if (fd >= 0) {
		if (sc->use_cache && pid > sc->last_pid && sc->next_len < sc->budget &&
		    next_push(s, &sc->next_len, pid, fd) == 0)
			sc->last_pid = pid;
		else
			close(fd);
	}
	return r;
}

/* Files one stat_read result: a record, a vanished or denied count, or the
 * error that ends the scan. */
static int scan_result(struct tk_recbuf *out, int r, const struct tk_record *rec)
{
	struct tk_record *slot;

	if (r == -ESRCH) {
		out->vanished++;
		return 0;
	}
	if (r == -EACCES || r == -EPERM) {
		out->denied++;
		return 0;
	}
	if (r < 0)
		return r;
	slot = tk_recbuf_push(out);
	if (slot == NULL)
		return -ENOMEM;
	*slot = *rec;
	return 0;
}

/* Reads the pid directories in one getdents64 buffer of n bytes. */
static int scan_dents(struct tk_proc_scanner *s, struct scan *sc, ssize_t n,
                      struct tk_recbuf *out)
{
	for (ssize_t off = 0; off < n;) {
		struct dirent64 *d = (struct dirent64 *)(void *)(s->dents + off);
		struct tk_record rec;
		uint32_t pid;
		int err;

		off += d->d_reclen;
		if (d->d_type != DT_DIR || parse_pid(d->d_name, &pid) < 0)
			continue;
		err = scan_result(out, scan_pid(s, sc, pid, &rec, out), &rec);
		if (err < 0)
			return err;
	}
	return 0;
}

int tk_proc_scan(struct tk_proc_scanner *s, struct tk_recbuf *out, int use_cache)
{
	struct scan sc = { .use_cache = use_cache };
	struct tk_fd_entry *t;
	int err = 0;

	if (s->proc_fd < 0)
		return -EBADF;
	/* A child of fork() shares the directory's offset with its parent:
	 * two scans at once would each miss pids. (The cached stat fds are
	 * read with pread, which has no offset.) */
	if (s->fork_generation != tk_fork_generation()) {
		int fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		if (fd < 0)
			return -errno;
		close(s->proc_fd);
		s->proc_fd = fd;
		s->fork_generation = tk_fork_generation();
	}
	if (!use_cache)
		tk_proc_scanner_drop_cache(s);
	if (lseek(s->proc_fd, 0, SEEK_SET) < 0)
		return -errno;
	sc.budget = budget_reserve(s);

	for (;;) {
		ssize_t n = getdents64(s->proc_fd, s->dents, s->dents_cap);
		if (n <= 0) {
			err = n < 0 ? -errno : 0;
			break;
		}
		err = scan_dents(s, &sc, n, out);
		if (err < 0)
			break;
	}
	while (sc.ci < s->cache_len)
		close(s->cache[sc.ci++].fd);
	/* The rebuilt list becomes the cache; swap so both buffers are reused. */
	t = s->cache;
	s->cache = s->next;
	s->next = t;
	atomic_fetch_add(&cached_fds_total, sc.next_len);
	atomic_fetch_sub(&cached_fds_total, sc.budget);
	s->cache_len = sc.next_len;
	return err;
}

/* ---- the proc snapshot backend --------------------------------------------- */

/* The caller's scanner opens on first use; the cgroup id cache it was
 * lent stays lent. */
int tk_proc_scanner_ensure_open(struct tk_proc_scanner *sc)
{
	struct tk_cgid_cache *cgids = sc->cgids;
	int want_cmdline = sc->want_cmdline, err;

	if (sc->proc_fd >= 0)
		return 0;
	err = tk_proc_scanner_init(sc, "/proc");
	sc->cgids = cgids;
	sc->want_cmdline = want_cmdline;
	return err;
}

static int proc_run(const struct tk_snap_backend *b, const struct tk_snap_req *req,
                     struct tk_recbuf *out, char *why, size_t why_len)
{
	struct tk_proc_scanner *sc = req->sc;
	int err;

	(void)b;
	err = tk_proc_scanner_ensure_open(sc);
	if (err < 0) {
		snprintf(why, why_len, "open /proc: %s", strerror(-err));
		return err;
	}
	sc->want_cmdline = (req->fields & TK_F(CMDLINE)) != 0;
	out->boot_offset_ns = 0;
	err = tk_proc_scan(sc, out, req->use_cache);
	sc->want_cmdline = 0;
	if (req->fields & TK_F(CMDLINE))
		out->cmdline_from = "proc";
	if (err == -EBADMSG)
		snprintf(why, why_len, "parse /proc/%d/stat: %s", sc->bad_pid, strerror(-err));
	else if (err < 0)
		snprintf(why, why_len, "read /proc: %s", strerror(-err));
	return err;
}

/* By default every field but cgroup_id: reading <pid>/cgroup too would
 * double the cost of every /proc snapshot. */
const struct tk_snap_backend tk_snap_backend_proc = {
	.name = "proc", .default_fields = TK_F_WALK & ~TK_F(CGROUP), .tier = -1, .run = proc_run,
};

/* ---- <pid>/cmdline ---------------------------------------------------------- */

/* cmdline can be as long as the exec limits allow (a quarter of the
 * stack rlimit). The first read takes what nearly every process has: each
 * read() copies from the process's memory afresh, so an exec between two
 * would join two command lines. */
#define PROC_READ_FIRST (128u << 10)

bool tk_cmdline_missing(int errnum)
{
	return errnum == ENOENT || errnum == ESRCH || errnum == EACCES || errnum == EPERM;
}

int tk_cmdline_read(int fd, struct tk_recbuf *out, struct tk_record *r)
{
	size_t start = out->text_len, len = 0, want = PROC_READ_FIRST;
	char *at;
	ssize_t n;
	int err;

	r->cmdline_len = TK_CMDLINE_NONE;
	for (;;) {
		err = tk_recbuf_text_reserve(out, len + want, &at);
		if (err < 0)
			return err;
		n = read(fd, out->text + start + len, want);
		if (n < 0)
			return -errno;
		len += (size_t)n;
		/* Short is the end: both of the kernel's readers stop there. */
		if ((size_t)n < want)
			break;
		want *= 2;
	}
	r->cmdline_off = (uint32_t)start;
	r->cmdline_len = (uint32_t)len;
	out->text_len = start + len;
	return 0;
}
