/* Baselines in plain C for the benches, loaded into the same Lua process as
 * takana so contender and baseline alternate within one run. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/netlink.h>
#include <signal.h>
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>

#include "clock.h"
#include "proc_scan.h"
#include "proc_stat.h"
#include "takana_event.h"
#include "util.h"

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int is_pid(const char *s)
{
	if (*s == '\0')
		return 0;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return 0;
	return 1;
}

/* open + read + close + parse of one stat file; 0 on success. */
static int stat_path_read(const char *path, const struct tk_units *units, struct tk_record *rec)
{
	char buf[4096];
	ssize_t len;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	len = read(fd, buf, sizeof buf);
	close(fd);
	return len > 0 ? tk_stat_parse(buf, (size_t)len, units, rec) : -1;
}

/* The seed's path A: readdir(/proc), then open/read/close/parse each stat. */
static int l_plain_scan(lua_State *L)
{
	struct tk_units units;
	char path[64];
	long n = 0;
	uint64_t t0;
	DIR *d;
	struct dirent *e;

	tk_units_init(&units);
	t0 = now_ns();
	d = opendir("/proc");
	if (d == NULL)
		return luaL_error(L, "opendir /proc failed");
	while ((e = readdir(d)) != NULL) {
		struct tk_record rec;

		if (!is_pid(e->d_name))
			continue;
		snprintf(path, sizeof path, "/proc/%.20s/stat", e->d_name);
		if (stat_path_read(path, &units, &rec) == 0)
			n++;
	}
	closedir(d);
	lua_pushinteger(L, n);
	lua_pushinteger(L, (lua_Integer)(now_ns() - t0));
	return 2;
}

/* The floor: readdir(/proc) alone, opening nothing. */
static int l_readdir_floor(lua_State *L)
{
	long n = 0;
	uint64_t t0 = now_ns();
	DIR *d = opendir("/proc");
	struct dirent *e;

	if (d == NULL)
		return luaL_error(L, "opendir /proc failed");
	while ((e = readdir(d)) != NULL)
		n += is_pid(e->d_name);
	closedir(d);
	lua_pushinteger(L, n);
	lua_pushinteger(L, (lua_Integer)(now_ns() - t0));
	return 2;
}


/* What a BPF snapshot adds on a host that hides init from BPF: one pread
 * of /proc/1/stat on a kept descriptor, and its parse (init_stat_read()). */
static int init_stat_fd = -1;

static int l_init_stat_read(lua_State *L)
{
	struct tk_units units;
	struct tk_record rec;
	char buf[4096];
	ssize_t len;
	uint64_t t0;

	tk_units_init(&units);
	if (init_stat_fd < 0)
		init_stat_fd = open("/proc/1/stat", O_RDONLY | O_CLOEXEC);
	if (init_stat_fd < 0)
		return luaL_error(L, "open /proc/1/stat: %s", strerror(errno));
	t0 = now_ns();
	len = pread(init_stat_fd, buf, sizeof buf, 0);
	if (len <= 0 || tk_stat_parse(buf, (size_t)len, &units, &rec) != 0)
		return luaL_error(L, "read /proc/1/stat failed");
	lua_pushinteger(L, 1);
	lua_pushinteger(L, (lua_Integer)(now_ns() - t0));
	return 2;
}

/* takana's own hidden-init path (init_from_proc(full)): init's record
 * from /proc/1/stat through a kept scanner, with its owner and cgroup id
 * when full, as a BPF snapshot of the full record pays for it. */
static struct tk_proc_scanner init_scanner = { .proc_fd = -1, .init_fd = -1,
                                               .init_cgroup_fd = -1 };

static int l_init_from_proc(lua_State *L)
{
	int full = lua_toboolean(L, 1);
	struct tk_record rec;
	uint64_t t0, id;

	if (init_scanner.proc_fd < 0 && tk_proc_scanner_init(&init_scanner, "/proc") < 0)
		return luaL_error(L, "open /proc: %s", strerror(errno));
	t0 = now_ns();
	if (tk_proc_scan_init(&init_scanner, &rec, full) < 0 ||
	    (full && tk_proc_scan_init_cgroup_id(&init_scanner, &id) < 0))
		return luaL_error(L, "init from /proc failed");
	lua_pushinteger(L, 1);
	lua_pushinteger(L, (lua_Integer)(now_ns() - t0));
	return 2;
}

/* fork + exec + wait: the cost grows with the parent's touched memory. */
static int l_fork_exec_wait(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	uint64_t t0 = now_ns();
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		char *argv[] = { (char *)(uintptr_t)path, NULL };
		execve(path, argv, environ);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return luaL_error(L, "fork failed");
	lua_pushinteger(L, 1);
	lua_pushinteger(L, (lua_Integer)(now_ns() - t0));
	return 2;
}

static int l_posix_spawn_wait(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	char *argv[] = { (char *)(uintptr_t)path, NULL };
	uint64_t t0 = now_ns();
	pid_t pid;
	int st;

	if (posix_spawn(&pid, path, NULL, NULL, argv, environ) != 0 || waitpid(pid, &st, 0) < 0)
		return luaL_error(L, "posix_spawn failed");
	lua_pushinteger(L, 1);
	lua_pushinteger(L, (lua_Integer)(now_ns() - t0));
	return 2;
}

/* kill(pid, 0) n times: the liveness check a C supervisor would write. */
static int l_kill0_loop(lua_State *L)
{
	pid_t pid = (pid_t)luaL_checkinteger(L, 1);
	lua_Integer n = luaL_checkinteger(L, 2);
	uint64_t t0 = now_ns();

	for (lua_Integer i = 0; i < n; i++)
		kill(pid, 0);
	lua_pushinteger(L, n);
	lua_pushinteger(L, (lua_Integer)(now_ns() - t0));
	return 2;
}

/* Sums utime+stime of the given pids from /proc/<pid>/stat: the O(N) way
 * of accounting a unit. */
static int l_sum_stat(lua_State *L)
{
	struct tk_units units;
	char path[64];
	lua_Integer n = (lua_Integer)lua_rawlen(L, 1);
	uint64_t t0, sum = 0;

	tk_units_init(&units);
	t0 = now_ns();
	for (lua_Integer i = 1; i <= n; i++) {
		struct tk_record rec;

		lua_rawgeti(L, 1, i);
		snprintf(path, sizeof path, "/proc/%d/stat", (int)lua_tointeger(L, -1));
		lua_pop(L, 1);
		if (stat_path_read(path, &units, &rec) == 0)
			sum += rec.utime_ns + rec.stime_ns;
	}
	lua_pushinteger(L, (lua_Integer)sum);
	lua_pushinteger(L, (lua_Integer)(now_ns() - t0));
	return 2;
}

#ifndef TK_NO_BPF
/* Paths B and D of the seed's table: the BPF programs takana embeds, driven
 * bare from C (own instances, no copy into a snapshot, no sort), so the
 * bench shows what takana adds on top of the kernel interface. */
#include <errno.h>
#include <sys/mman.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "skeletons.h"

#define RAW_CAPACITY 32768

static struct takana_kfunc *raw_kfunc;
static const struct tk_wire_record *raw_records;
static size_t raw_mapped;
static struct takana_iter *raw_iter;
static struct bpf_link *raw_link;
static struct tk_wire_record raw_buf[256];

static int silent(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	(void)level;
	(void)fmt;
	(void)ap;
	return 0;
}

/* bpf_raw_load() -> kfunc load ns, iter load ns (open, verify, attach) */
static int l_bpf_raw_load(lua_State *L)
{
	uint64_t t0, t1;
	void *map;

	libbpf_set_print(silent);
	t0 = now_ns();
	raw_kfunc = takana_kfunc__open();
	if (raw_kfunc == NULL)
		return luaL_error(L, "kfunc open: %s", strerror(errno));
	raw_kfunc->rodata->page_size = (uint64_t)sysconf(_SC_PAGESIZE);
	/* With the selection's tests: D and D6 run the same program (its load
	 * is therefore the slower of takana's two, and libbpf's). */
	raw_kfunc->rodata->fill_all = 0;
	bpf_map__set_max_entries(raw_kfunc->maps.records, RAW_CAPACITY);
	if (takana_kfunc__load(raw_kfunc) != 0)
		return luaL_error(L, "kfunc load failed (root? BTF?)");
	raw_mapped = RAW_CAPACITY * sizeof *raw_records;
	map = mmap(NULL, raw_mapped, PROT_READ, MAP_SHARED, bpf_map__fd(raw_kfunc->maps.records), 0);
	if (map == MAP_FAILED)
		return luaL_error(L, "mmap: %s", strerror(errno));
	raw_records = map;
	t1 = now_ns();
	raw_iter = takana_iter__open();
	if (raw_iter == NULL)
		return luaL_error(L, "iter open: %s", strerror(errno));
	raw_iter->rodata->page_size = (uint64_t)sysconf(_SC_PAGESIZE);
	if (takana_iter__load(raw_iter) != 0)
		return luaL_error(L, "iter load failed");
	raw_link = bpf_program__attach_iter(raw_iter->progs.snapshot_iter, NULL);
	if (raw_link == NULL)
		return luaL_error(L, "iter attach: %s", strerror(errno));
	lua_pushinteger(L, (lua_Integer)(t1 - t0));
	lua_pushinteger(L, (lua_Integer)(now_ns() - t1));
	return 2;
}

/* D: one BPF_PROG_TEST_RUN, then one pass over the records in place. */
static int l_kfunc_raw(lua_State *L)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts);
	uint64_t t0 = now_ns(), acc = 0;
	uint32_t n, i;

	if (bpf_prog_test_run_opts(bpf_program__fd(raw_kfunc->progs.snapshot_kfunc), &opts) != 0)
		return luaL_error(L, "test run: %s", strerror(errno));
	n = raw_kfunc->bss->total;
	if (n > RAW_CAPACITY)
		return luaL_error(L, "more than %d processes", RAW_CAPACITY);
	for (i = 0; i < n; i++)
		acc += raw_records[i].rec.pid + raw_records[i].rec.utime_ns;
	lua_pushinteger(L, (lua_Integer)n + (lua_Integer)(acc & 0));
	lua_pushinteger(L, (lua_Integer)(now_ns() - t0));
	return 2;
}

/* Dp: pid only (kfunc_raw_pids()): the program told to fill no field but
 * what it always writes (pid, start, state, flags), then one pass reading
 * the pids in place: the floor of takana.snapshot{fields = {"pid"}}. */
static int l_kfunc_raw_pids(lua_State *L)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts);
	uint64_t t0 = now_ns(), acc = 0;
	uint32_t n, i;

	raw_kfunc->data->want_fields = TK_F(PID);
	if (bpf_prog_test_run_opts(bpf_program__fd(raw_kfunc->progs.snapshot_kfunc), &opts) != 0)
		return luaL_error(L, "test run: %s", strerror(errno));
	n = raw_kfunc->bss->total;
	raw_kfunc->data->want_fields = TK_F_ALL;
	if (n > RAW_CAPACITY)
		return luaL_error(L, "more than %d processes", RAW_CAPACITY);
	for (i = 0; i < n; i++)
		acc += raw_records[i].rec.pid;
	lua_pushinteger(L, (lua_Integer)n + (lua_Integer)(acc & 0));
	lua_pushinteger(L, (lua_Integer)(now_ns() - t0));
	return 2;
}

/* D6: the same program told to fill six fields (kfunc_raw_fields(mask):
 * pid, ppid, comm, state, utime, stime), then one pass reading those six
 * in place: what a C program walking those fields costs. */
static int l_kfunc_raw_fields(lua_State *L)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts);
	uint32_t mask = (uint32_t)luaL_checkinteger(L, 1);
	uint64_t t0 = now_ns(), acc = 0;
	uint32_t n, i;

	raw_kfunc->data->want_fields = mask;
	if (bpf_prog_test_run_opts(bpf_program__fd(raw_kfunc->progs.snapshot_kfunc), &opts) != 0)
		return luaL_error(L, "test run: %s", strerror(errno));
	n = raw_kfunc->bss->total;
	raw_kfunc->data->want_fields = TK_F_ALL;
	if (n > RAW_CAPACITY)
		return luaL_error(L, "more than %d processes", RAW_CAPACITY);
	for (i = 0; i < n; i++) {
		const struct tk_record *r = &raw_records[i].rec;
		acc += r->pid + r->ppid + (unsigned char)r->comm[0] + r->state + r->utime_ns + r->stime_ns;
	}
	lua_pushinteger(L, (lua_Integer)n + (lua_Integer)(acc & 0));
	lua_pushinteger(L, (lua_Integer)(now_ns() - t0));
	return 2;
}

/* B: bpf_iter_create + read() to the end, counting thread-group leaders. */
static int l_iter_raw(lua_State *L)
{
	uint64_t t0 = now_ns();
	long leaders = 0;
	ssize_t got;
	int fd = bpf_iter_create(bpf_link__fd(raw_link));

	if (fd < 0)
		return luaL_error(L, "iter create: %s", strerror(errno));
	while ((got = read(fd, raw_buf, sizeof raw_buf)) != 0) {
		if (got < 0) {
			if (errno == EAGAIN || errno == EINTR)
				continue;
			close(fd);
			return luaL_error(L, "iter read: %s", strerror(errno));
		}
		for (size_t i = 0; i < (size_t)got / sizeof *raw_buf; i++)
			leaders += !(raw_buf[i].rec.flags & TK_REC_THREAD);
	}
	close(fd);
	lua_pushinteger(L, leaders);
	lua_pushinteger(L, (lua_Integer)(now_ns() - t0));
	return 2;
}
#endif

/* An exec storm: a generator process whose workers posix_spawn
 * /bin/true with ten known arguments, paced to `rate` a second in all, for
 * `seconds`; exec_storm_wait() gives how many ran. The workers' pids are
 * shared so the bench can tell the storm's execs from the host's. */
#include <sys/mman.h>

#define STORM_WORKERS_MAX 16

struct storm_shared {
	long count[STORM_WORKERS_MAX];
	int workers[STORM_WORKERS_MAX];
	int nworkers;
};

static struct storm_shared *storm;
static pid_t storm_pid = -1;

static const char *const storm_argv[] = {
	"/bin/true", "storm", "a b", "", "arg-4", "arg-5", "arg-6", "arg-7", "arg-8", "arg-9", NULL,
};

static void storm_worker(int idx, double rate, double seconds)
{
	uint64_t start = now_ns(), end = start + (uint64_t)(seconds * 1e9);
	double gap = 1e9 / rate;
	long n = 0;

	for (;;) {
		uint64_t due = start + (uint64_t)(gap * (double)n), now = now_ns();
		pid_t pid;
		int st;

		if (now >= end)
			break;
		if (due > now) {
			struct timespec ts = { (time_t)((due - now) / 1000000000ull), (long)((due - now) % 1000000000ull) };
			nanosleep(&ts, NULL);
		}
		if (posix_spawn(&pid, storm_argv[0], NULL, NULL, (char *const *)(uintptr_t)storm_argv, environ) != 0)
			continue;
		waitpid(pid, &st, 0);
		storm->count[idx] = ++n;
	}
	_exit(0);
}

/* exec_storm_start(rate, seconds[, workers]) -> generator pid */
static int l_exec_storm_start(lua_State *L)
{
	double rate = luaL_checknumber(L, 1), seconds = luaL_checknumber(L, 2);
	int workers = (int)luaL_optinteger(L, 3, 4);

	luaL_argcheck(L, workers > 0 && workers <= STORM_WORKERS_MAX, 3, "1..16 workers");
	if (storm == NULL) {
		storm = mmap(NULL, sizeof *storm, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (storm == MAP_FAILED) {
			storm = NULL;
			return luaL_error(L, "mmap: %s", strerror(errno));
		}
	}
	memset(storm, 0, sizeof *storm);
	storm->nworkers = workers;
	storm_pid = fork();
	if (storm_pid < 0)
		return luaL_error(L, "fork: %s", strerror(errno));
	if (storm_pid == 0) {
		for (int i = 0; i < workers; i++) {
			pid_t w = fork();
			if (w == 0)
				storm_worker(i, rate / workers, seconds);
			storm->workers[i] = w;
		}
		while (wait(NULL) > 0)
			;
		_exit(0);
	}
	lua_pushinteger(L, storm_pid);
	return 1;
}

/* exec_storm_workers() -> {pid, ...} once started (0 while not yet forked) */
static int l_exec_storm_workers(lua_State *L)
{
	lua_newtable(L);
	for (int i = 0; storm && i < storm->nworkers; i++) {
		lua_pushinteger(L, storm->workers[i]);
		lua_rawseti(L, -2, i + 1);
	}
	return 1;
}

/* exec_storm_alive() -> bool ; exec_storm_wait() -> execs run */
static int l_exec_storm_alive(lua_State *L)
{
	int st;

	lua_pushboolean(L, storm_pid > 0 && waitpid(storm_pid, &st, WNOHANG) == 0);
	return 1;
}

static int l_exec_storm_wait(lua_State *L)
{
	long total = 0;
	int st;

	if (storm_pid > 0)
		waitpid(storm_pid, &st, 0);
	storm_pid = -1;
	for (int i = 0; storm && i < storm->nworkers; i++)
		total += storm->count[i];
	lua_pushinteger(L, total);
	return 1;
}

/* bench/events.lua's Lua floor: the least a Lua reader of fork events pays
 * between a wakeup and the event in Lua. The wait and the kernel's buffer
 * are C's (floor_wait: epoll_wait, then the ring or the socket read, the
 * generator's forks kept as stamps); the Lua loop then builds one table of
 * a fork event's fields per stamp and calls floor_took, which takes the
 * latency then. What takana adds over this is its own. */
static struct {
	int ep, sock;
	clockid_t clock;              /* the backend's stamps' */
	uint32_t gen;
	uint64_t woke;
	uint64_t stamp[64];
	int nstamps, next;
#ifndef TK_NO_BPF
	struct ring_buffer *ring;
#endif
} floor_r = { .ep = -1, .sock = -1 };

static uint64_t floor_clock(void)
{
	struct timespec ts;

	clock_gettime(floor_r.clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void floor_stamp(uint64_t t)
{
	if (floor_r.nstamps < (int)(sizeof floor_r.stamp / sizeof floor_r.stamp[0]))
		floor_r.stamp[floor_r.nstamps++] = t;
}

#ifndef TK_NO_BPF
static int floor_sample(void *ctx, void *data, size_t size)
{
	const struct tk_event *e = data;

	(void)ctx;
	if (size >= TK_EV_BASE_SIZE && e->type == TK_EV_FORK && e->ppid == floor_r.gen)
		floor_stamp(e->time_ns);
	return 0;
}
#endif

static void floor_close(void)
{
#ifndef TK_NO_BPF
	ring_buffer__free(floor_r.ring);
	floor_r.ring = NULL;
#endif
	if (floor_r.sock >= 0)
		close(floor_r.sock);
	if (floor_r.ep >= 0)
		close(floor_r.ep);
	floor_r.sock = floor_r.ep = -1;
}

/* floor_open("bpf", ring_fd) (a solo bpf stream's fileno, the ring's own,
 * left unread by its stream) or floor_open("connector"): a proc connector
 * socket of its own. */
static int l_floor_open(lua_State *L)
{
	const char *kind = luaL_checkstring(L, 1);
	struct epoll_event ev = { .events = EPOLLIN };
	int fd;

	floor_close();
	floor_r.nstamps = floor_r.next = 0;
	floor_r.ep = epoll_create1(EPOLL_CLOEXEC);
	if (strcmp(kind, "bpf") == 0) {
#ifndef TK_NO_BPF
		fd = (int)luaL_checkinteger(L, 2);
		floor_r.clock = CLOCK_BOOTTIME;
		floor_r.ring = ring_buffer__new(fd, floor_sample, NULL, NULL);
		if (floor_r.ring == NULL)
			return luaL_error(L, "floor_open: not a ring: %s", strerror(errno));
#else
		return luaL_error(L, "floor_open: built without BPF");
#endif
	} else {
		struct sockaddr_nl sa = { .nl_family = AF_NETLINK, .nl_groups = CN_IDX_PROC };
		char req[NLMSG_SPACE(sizeof(struct cn_msg) + sizeof(enum proc_cn_mcast_op))]
			__attribute__((aligned(8))) = { 0 };
		struct nlmsghdr *nl = (struct nlmsghdr *)req;
		struct cn_msg *cn = NLMSG_DATA(nl);
		enum proc_cn_mcast_op op = PROC_CN_MCAST_LISTEN;

		nl->nlmsg_len = NLMSG_LENGTH(sizeof *cn + sizeof op);
		nl->nlmsg_type = NLMSG_DONE;
		nl->nlmsg_pid = (uint32_t)getpid();
		cn->id.idx = CN_IDX_PROC;
		cn->id.val = CN_VAL_PROC;
		cn->len = sizeof op;
		memcpy(cn->data, &op, sizeof op);
		floor_r.clock = CLOCK_MONOTONIC;
		fd = floor_r.sock = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_CONNECTOR);
		if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || send(fd, req, nl->nlmsg_len, 0) < 0)
			return luaL_error(L, "floor_open: connector: %s", strerror(errno));
	}
	if (floor_r.ep < 0 || epoll_ctl(floor_r.ep, EPOLL_CTL_ADD, fd, &ev) < 0)
		return luaL_error(L, "floor_open: epoll: %s", strerror(errno));
	return 0;
}

/* floor_wait(ms, gen) -> how many forks of gen are ready, each to be taken. */
static int l_floor_wait(lua_State *L)
{
	struct epoll_event out;
	int n;

	floor_r.gen = (uint32_t)luaL_checkinteger(L, 2);
	n = epoll_wait(floor_r.ep, &out, 1, (int)luaL_checkinteger(L, 1));

	floor_r.woke = floor_clock();
	floor_r.nstamps = floor_r.next = 0;
#ifndef TK_NO_BPF
	if (n > 0 && floor_r.ring != NULL)
		ring_buffer__consume(floor_r.ring);
#endif
	if (n > 0 && floor_r.sock >= 0) {
		char buf[8192] __attribute__((aligned(8)));
		ssize_t len;

		while ((len = recv(floor_r.sock, buf, sizeof buf, 0)) > 0)
			for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)len);
			     h = NLMSG_NEXT(h, len)) {
				const struct proc_event *pe = (const void *)((const struct cn_msg *)NLMSG_DATA(h))->data;

				if (pe->what == PROC_EVENT_FORK &&
				    pe->event_data.fork.child_pid == pe->event_data.fork.child_tgid &&
				    (uint32_t)pe->event_data.fork.parent_tgid == floor_r.gen)
					floor_stamp(pe->timestamp_ns);
			}
	}
	lua_pushinteger(L, floor_r.nstamps);
	return 1;
}

/* floor_took() -> latency ns, wakeup ns of the next stamp floor_wait kept. */
static int l_floor_took(lua_State *L)
{
	uint64_t now = floor_clock(), t;

	if (floor_r.next >= floor_r.nstamps)
		return luaL_error(L, "floor_took: no stamp left");
	t = floor_r.stamp[floor_r.next++];
	lua_pushinteger(L, (lua_Integer)(now - t));
	lua_pushinteger(L, (lua_Integer)(floor_r.woke > t ? floor_r.woke - t : 0));
	return 2;
}

static int l_floor_close(lua_State *L)
{
	(void)L;
	floor_close();
	return 0;
}

static int l_boottime_ns(lua_State *L)
{
	lua_pushinteger(L, (lua_Integer)tk_boottime_ns());
	return 1;
}

static int l_now_ns(lua_State *L)
{
	lua_pushinteger(L, (lua_Integer)now_ns());
	return 1;
}

__attribute__((visibility("default"))) int luaopen_takana_bench(lua_State *L);

int luaopen_takana_bench(lua_State *L)
{
	static const luaL_Reg funcs[] = {
		{ "plain_scan", l_plain_scan },
		{ "readdir_floor", l_readdir_floor },
		{ "init_stat_read", l_init_stat_read },
		{ "init_from_proc", l_init_from_proc },
		{ "now_ns", l_now_ns },
		{ "boottime_ns", l_boottime_ns },
		{ "fork_exec_wait", l_fork_exec_wait },
		{ "posix_spawn_wait", l_posix_spawn_wait },
		{ "kill0_loop", l_kill0_loop },
		{ "sum_stat", l_sum_stat },
		{ "exec_storm_start", l_exec_storm_start },
		{ "exec_storm_workers", l_exec_storm_workers },
		{ "exec_storm_alive", l_exec_storm_alive },
		{ "exec_storm_wait", l_exec_storm_wait },
		{ "floor_open", l_floor_open },
		{ "floor_wait", l_floor_wait },
		{ "floor_took", l_floor_took },
		{ "floor_close", l_floor_close },
		{ NULL, NULL },
	};
	luaL_newlib(L, funcs);
#ifndef TK_NO_BPF
	lua_pushcfunction(L, l_bpf_raw_load);
	lua_setfield(L, -2, "bpf_raw_load");
	lua_pushcfunction(L, l_kfunc_raw);
	lua_setfield(L, -2, "kfunc_raw");
	lua_pushcfunction(L, l_kfunc_raw_pids);
	lua_setfield(L, -2, "kfunc_raw_pids");
	lua_pushcfunction(L, l_kfunc_raw_fields);
	lua_setfield(L, -2, "kfunc_raw_fields");
	lua_pushcfunction(L, l_iter_raw);
	lua_setfield(L, -2, "iter_raw");
#endif
	return 1;
}
