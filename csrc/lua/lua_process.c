/* Lua binding of takana.process: one process held by a pidfd, read lazily
 * through its /proc directory fd (procinfo.c). Every method reads on call;
 * once the process has exited each returns nil, message, ESRCH, never
 * another process's data. */
/***
 * takana.process, from C.
 * @module takana
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pwd.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "binding.h"
#include "fdio.h"
#include "process.h"
#include "procinfo.h"

struct lproc {
	/* first: the handle base (o.h.fd: the pidfd, readable once the process
	 * exits) and what pidfd methods run on */
	struct tk_pidfd_obj o;
	int dirfd;           /* /proc/<pid>, opened while the pidfd's process ran */
};

#define AFFINITY_MAX 8192

static void proc_release(lua_State *L, struct tk_handle *h)
{
	struct lproc *p = (struct lproc *)h;
	(void)L;
	if (p->dirfd >= 0)
		close(p->dirfd);
	p->dirfd = -1;
	close(h->fd);
}

static struct lproc *proc_check(lua_State *L, int idx)
{
	return (struct lproc *)tk_handle_check(L, idx, TK_PROCESS_MT);
}

static struct tk_pref pref_of(const struct lproc *p)
{
	struct tk_pref r = { p->o.h.fd, p->dirfd, p->o.pid };
	return r;
}

/* The failure convention with a message that names the process and says
 * what to do. */
static int proc_error(lua_State *L, const struct lproc *p, const char *what, int r)
{
	int e = r < 0 ? -r : r;

	lua_pushnil(L);
	if (e == ESRCH)
		lua_pushfstring(L, "process %d: %s: the process has exited (its pid may belong to "
		                "another process now)", (int)p->o.pid, what);
	else if (e == EACCES || e == EPERM)
		lua_pushfstring(L, "process %d: %s: %s (another user's process: run as its owner, "
		                "or as root)", (int)p->o.pid, what, strerror(e));
	else
		lua_pushfstring(L, "process %d: %s: %s", (int)p->o.pid, what, strerror(e));
	lua_pushinteger(L, e);
	return 3;
}

/* The same wording for the pidfd methods the object shares (signal,
 * alive): o is the first member of a struct lproc. */
static int proc_fail(lua_State *L, const struct tk_pidfd_obj *o, const char *what, int err)
{
	return proc_error(L, (const struct lproc *)o, what, err);
}

/* Reads a whole file of the process into a Lua string left on the stack
 * (*buf points into it: nothing to free when a later push raises); on
 * failure pushes the error triple instead and returns 3. */
static int read_or_push(lua_State *L, const struct lproc *p, const char *file, const char **buf,
                        size_t *len)
{
	struct tk_pref pr = pref_of(p);
	char *raw;
	int r = tk_pref_read(&pr, file, &raw, len);

	if (r < 0)
		return proc_error(L, p, file, r);
	lua_pushlstring(L, raw, *len);
	free(raw);
	*buf = lua_tostring(L, -1);
	return 0;
}

/* Opens the process into a new userdata left on the stack; returns 0 or a
 * negative errno (the userdata is then a closed handle). */
static int proc_push_open(lua_State *L, pid_t pid, int from_pidfd, struct lproc **out)
{
	struct lproc *p = lua_newuserdatauv(L, sizeof *p, 0);
	struct tk_pref pr;
	int fd = -1, r;

	memset(p, 0, sizeof *p);
	tk_handle_init(&p->o.h, "process", "r", proc_release);
	p->o.fail = proc_fail;
	p->dirfd = -1;
	p->o.pid = pid;
	luaL_setmetatable(L, TK_PROCESS_MT);
	*out = p;
	/* Duplicated only now that nothing can raise before it is owned. */
	if (from_pidfd >= 0) {
		fd = tk_fd_dup(from_pidfd);
		if (fd < 0)
			return fd;
	}
	r = tk_pref_open(pid, fd, &pr);
	if (r < 0)
		return r;
	p->o.h.fd = pr.pidfd;
	p->dirfd = pr.dirfd;
	p->o.pid = pr.pid;
	tk_handle_opened(L, pr.dirfd > pr.pidfd ? pr.dirfd : pr.pidfd);
	return 0;
}

static int open_error(lua_State *L, lua_Integer pid, int r)
{
	lua_pushnil(L);
	if (r == -ESRCH)
		lua_pushfstring(L, "process %d: no such process (it has exited)", (int)pid);
	else if (r == -EXDEV)
		lua_pushfstring(L, "process: the pidfd's process is outside this pid namespace");
	else if (r == -EBADF)
		lua_pushfstring(L, "process: the descriptor is not a pidfd");
	else if (r == -EINVAL || r == -ENOENT)
		lua_pushfstring(L, "process %d: %s (a thread id? pass its process id; or /proc "
		                "shows another pid namespace)", (int)pid, strerror(-r));
	else
		lua_pushfstring(L, "process %d: %s", (int)pid, strerror(-r));
	lua_pushinteger(L, r == -EXDEV ? ESRCH : -r);
	return 3;
}

/*** Opens one process: a pidfd, then its /proc directory, then a check that
 * the pidfd's process still runs, so the directory is that process's.
 * @function process
 * @tparam int|pidfd who a pid, or a pidfd object (its descriptor is duplicated)
 * @treturn[1] process with `.pid`
 * @treturn[2] nil, message, errno (ESRCH: no such process, or it has exited) */
static int l_process(lua_State *L)
{
	struct lproc *p;
	struct tk_handle *ph;
	lua_Integer pid = 0;
	int r;

	tk_check_nargs(L, 1);
	ph = luaL_testudata(L, 1, TK_PIDFD_MT);
	if (ph != NULL) {
		if (ph->fd < 0)
			return luaL_argerror(L, 1, "the pidfd is closed");
		lua_getfield(L, 1, "pid");
		pid = lua_tointeger(L, -1);
		lua_pop(L, 1);
	} else {
		if (!lua_isinteger(L, 1))
			return luaL_typeerror(L, 1, "pid or pidfd");
		pid = lua_tointeger(L, 1);
		luaL_argcheck(L, pid > 0 && pid <= INT32_MAX, 1, "pid out of range");
	}
	r = proc_push_open(L, (pid_t)pid, ph != NULL ? ph->fd : -1, &p);
	if (r < 0)
		return open_error(L, pid, r);
	return 1;
}

void tk_push_argv(lua_State *L, const char *buf, size_t len)
{
	size_t start = 0;
	lua_Integer n = 0;

	lua_createtable(L, 8, 0);
	/* A NUL ends each argument; an unterminated last one (setproctitle) is
	 * kept too. "" alone is the one-byte file "\0". */
	if (len > 0) {
		size_t end = buf[len - 1] == '\0' ? len - 1 : len;
		for (size_t i = 0; i <= end; i++) {
			if (i == end || buf[i] == '\0') {
				lua_pushlstring(L, buf + start, i - start);
				lua_rawseti(L, -2, ++n);
				start = i + 1;
			}
		}
	}
}

/*** The command line: every argument, empty ones included.
 * A process that rewrote its arguments (setproctitle) shows what it wrote.
 * @function process:cmdline
 * @treturn[1] {string,...} (empty for a kernel thread)
 * @treturn[2] nil, message, errno */
static int proc_cmdline(lua_State *L)
{
	struct lproc *p = proc_check(L, 1);
	const char *buf;
	size_t len;

	tk_check_nargs(L, 1);
	if (read_or_push(L, p, "cmdline", &buf, &len))
		return 3;
	tk_push_argv(L, buf, len);
	return 1;
}

/*** The command name (`/proc/<pid>/comm`, at most 15 bytes, as the process
 * set it), without its newline.
 * @function process:comm
 * @treturn[1] string
 * @treturn[2] nil, message, errno */
static int proc_comm(lua_State *L)
{
	struct lproc *p = proc_check(L, 1);
	const char *buf;
	size_t len;

	tk_check_nargs(L, 1);
	if (read_or_push(L, p, "comm", &buf, &len))
		return 3;
	if (len > 0 && buf[len - 1] == '\n')
		len--;
	lua_pushlstring(L, buf, len);
	return 1;
}

static int proc_link(lua_State *L, const char *name)
{
	struct lproc *p = proc_check(L, 1);
	struct tk_pref pr = pref_of(p);
	char *s;
	int r;

	tk_check_nargs(L, 1);
	r = tk_pref_readlink(&pr, name, &s);
	if (r < 0)
		return proc_error(L, p, name, r);
	lua_pushstring(L, s);
	free(s);
	return 1;
}

/*** The path of the executable (" (deleted)" appended by the kernel when it
 * was removed).
 * @function process:exe
 * @treturn[1] string
 * @treturn[2] nil, message, errno (ENOENT for a kernel thread, EACCES for
 *   another user's process) */
static int proc_exe(lua_State *L)
{
	return proc_link(L, "exe");
}

/*** The working directory.
 * @function process:cwd
 * @treturn[1] string
 * @treturn[2] nil, message, errno (EACCES for another user's process) */
static int proc_cwd(lua_State *L)
{
	return proc_link(L, "cwd");
}

/*** The environment it was started with (changes it made later through
 * setenv are not visible: the kernel shows the initial block).
 * @function process:environ
 * @treturn[1] table name -> value (entries without '=' are skipped)
 * @treturn[2] nil, message, errno (EACCES for another user's process) */
static int proc_environ(lua_State *L)
{
	struct lproc *p = proc_check(L, 1);
	const char *buf;
	size_t len;

	tk_check_nargs(L, 1);
	if (read_or_push(L, p, "environ", &buf, &len))
		return 3;
	lua_createtable(L, 0, 16);
	for (size_t i = 0; i < len;) {
		const char *e = buf + i;
		size_t elen = strnlen(e, len - i);
		const char *eq = memchr(e, '=', elen);
		if (eq != NULL && eq != e) {
			lua_pushlstring(L, e, (size_t)(eq - e));
			lua_pushlstring(L, eq + 1, elen - (size_t)(eq - e) - 1);
			lua_rawset(L, -3);
		}
		i += elen + 1;
	}
	return 1;
}

static void ids_push(lua_State *L, const int64_t v[4], const char *field)
{
	static const char *const names[4] = { "real", "effective", "saved", "fs" };

	lua_createtable(L, 0, 4);
	for (int i = 0; i < 4; i++) {
		lua_pushinteger(L, v[i]);
		lua_setfield(L, -2, names[i]);
	}
	lua_setfield(L, -2, field);
}

static void int_field(lua_State *L, const char *name, uint64_t v)
{
	lua_pushinteger(L, tk_u64_int(v));
	lua_setfield(L, -2, name);
}

/* A named uint64_t of a parsed struct. */
struct u64_field {
	const char *name;
	size_t off;
};

static int io_parse(const char *buf, size_t len, void *out)
{
	return tk_io_parse(buf, len, out);
}

static int smaps_rollup_parse(const char *buf, size_t len, void *out)
{
	return tk_smaps_rollup_parse(buf, len, out);
}

/* Reads <pid>/file of the process at argument 1, parses it into out (size
 * bytes, zeroed first) and pushes the fields as a table, or nil, msg, errno. */
static int parsed_push(lua_State *L, const char *file,
                       int (*parse)(const char *, size_t, void *), void *out, size_t size,
                       const struct u64_field *fields)
{
	struct lproc *p = proc_check(L, 1);
	const char *buf;
	size_t len;
	int r, n = 0;

	tk_check_nargs(L, 1);
	if (read_or_push(L, p, file, &buf, &len))
		return 3;
	memset(out, 0, size);
	r = parse(buf, len, out);
	if (r < 0)
		return proc_error(L, p, file, r);
	while (fields[n].name != NULL)
		n++;
	lua_createtable(L, 0, n);
	for (int i = 0; i < n; i++) {
		const char *field = (const char *)out + fields[i].off;
		int_field(L, fields[i].name, *(const uint64_t *)(const void *)field);
	}
	return 1;
}

/*** Identity, scheduling and memory lines of `/proc/<pid>/status`.
 * Signal masks are integers, bit n-1 set for signal n (as the kernel prints
 * them in hex): test with `mask & (1 << (sig - 1)) ~= 0`. Signal 64 is the
 * sign bit, so a mask with it set is negative.
 * @function process:status
 * @treturn[1] table `uids` and `gids` (`{real=, effective=, saved=, fs=}`),
 *   `ctx_switches` (`{voluntary=, involuntary=}`), `threads`,
 *   `vmrss_bytes`, `vmhwm_bytes`, `vmswap_bytes` (absent for kernel
 *   threads), `sigpnd`, `shdpnd`, `sigblk`, `sigign`, `sigcgt`
 * @treturn[2] nil, message, errno */
static int proc_status(lua_State *L)
{
	static const char *const sig_fields[TK_SIGMASKS] = { "sigpnd", "shdpnd", "sigblk",
	                                                     "sigign", "sigcgt" };
	struct lproc *p = proc_check(L, 1);
	struct tk_status st;
	const char *buf;
	size_t len;
	int r;

	tk_check_nargs(L, 1);
	if (read_or_push(L, p, "status", &buf, &len))
		return 3;
	memset(&st, 0, sizeof st);
	r = tk_status_parse(buf, len, &st);
	if (r < 0)
		return proc_error(L, p, "status", r);
	lua_createtable(L, 0, 12);
	ids_push(L, st.uid, "uids");
	ids_push(L, st.gid, "gids");
	if (st.have & TK_ST_CTXSW) {
		lua_createtable(L, 0, 2);
		int_field(L, "voluntary", st.ctxsw_voluntary);
		int_field(L, "involuntary", st.ctxsw_involuntary);
		lua_setfield(L, -2, "ctx_switches");
	}
	int_field(L, "threads", st.threads);
	if (st.have & TK_ST_VM) {
		int_field(L, "vmrss_bytes", st.vmrss_bytes);
		int_field(L, "vmhwm_bytes", st.vmhwm_bytes);
		int_field(L, "vmswap_bytes", st.vmswap_bytes);
	}
	if (st.have & TK_ST_SIG) {
		for (int i = 0; i < TK_SIGMASKS; i++) {
			/* the bit pattern, not a saturated number */
			lua_pushinteger(L, (lua_Integer)st.sig[i]);
			lua_setfield(L, -2, sig_fields[i]);
		}
	}
	return 1;
}

/*** I/O counters (`/proc/<pid>/io`).
 * @function process:io
 * @treturn[1] table `rchar`, `wchar`, `syscr`, `syscw`, `read_bytes`,
 *   `write_bytes`, `cancelled_write_bytes`
 * @treturn[2] nil, message, errno (EACCES for another user's process) */
static int proc_io(lua_State *L)
{
#define IO_FIELD(f) { #f, offsetof(struct tk_io, f) }
	static const struct u64_field fields[] = {
		IO_FIELD(rchar), IO_FIELD(wchar), IO_FIELD(syscr), IO_FIELD(syscw),
		IO_FIELD(read_bytes), IO_FIELD(write_bytes), IO_FIELD(cancelled_write_bytes),
		{ NULL, 0 },
	};
#undef IO_FIELD
	struct tk_io io;

	return parsed_push(L, "io", io_parse, &io, sizeof io, fields);
}

struct fds_ctx {
	lua_State *L;
	lua_Integer n;
};

static int fd_push(void *ctx, int fd, const char *target)
{
	struct fds_ctx *c = ctx;

	lua_createtable(c->L, 0, 2);
	lua_pushinteger(c->L, fd);
	lua_setfield(c->L, -2, "fd");
	lua_pushstring(c->L, target);
	lua_setfield(c->L, -2, "target");
	lua_rawseti(c->L, -2, ++c->n);
	return 0;
}

/*** Open descriptors: the count, or with `{list=true}` each one with what
 * it refers to, in descriptor order.
 * @function process:fds
 * @tparam[opt] table opts `{list = true}`
 * @treturn[1] int|{{fd=n, target=string},...}
 * @treturn[2] nil, message, errno (EACCES for another user's process) */
static int proc_fds(lua_State *L)
{
	struct lproc *p = proc_check(L, 1);
	struct tk_pref pr = pref_of(p);
	struct fds_ctx c = { L, 0 };
	int list = 0, r;

	tk_check_nargs(L, 2);
	if (!lua_isnoneornil(L, 2)) {
		luaL_checktype(L, 2, LUA_TTABLE);
		lua_pushnil(L);
		while (lua_next(L, 2)) {
			if (lua_type(L, -2) != LUA_TSTRING || strcmp(lua_tostring(L, -2), "list") != 0)
				return luaL_argerror(L, 2, lua_pushfstring(L, "unknown option '%s'",
				                     luaL_tolstring(L, -2, NULL)));
			if (!lua_isboolean(L, -1))
				return luaL_argerror(L, 2, "option 'list': boolean expected");
			list = lua_toboolean(L, -1);
			lua_pop(L, 1);
		}
	}
	if (!list) {
		r = tk_pref_fds(&pr, 0, NULL, NULL);
		if (r < 0)
			return proc_error(L, p, "fd", r);
		lua_pushinteger(L, r);
		return 1;
	}
	lua_newtable(L);
	r = tk_pref_fds(&pr, 1, fd_push, &c);
	if (r < 0)
		return proc_error(L, p, "fd", r);
	/* readdir of /proc/<pid>/fd lists in descriptor order already. */
	return 1;
}

/*** Memory from `/proc/<pid>/smaps_rollup`: what the process would free if
 * it exited (uss), its proportional share (pss), resident and swapped.
 * @function process:memory_full
 * @treturn[1] table `rss_bytes`, `pss_bytes`, `uss_bytes` (`Private_Clean` +
 *   `Private_Dirty`), `swap_bytes`; zeros for a kernel thread
 * @treturn[2] nil, message, errno (EACCES for another user's process) */
static int proc_memory_full(lua_State *L)
{
	static const struct u64_field fields[] = {
		{ "rss_bytes", offsetof(struct tk_memfull, rss) },
		{ "pss_bytes", offsetof(struct tk_memfull, pss) },
		{ "uss_bytes", offsetof(struct tk_memfull, uss) },
		{ "swap_bytes", offsetof(struct tk_memfull, swap) },
		{ NULL, 0 },
	};
	struct tk_memfull m;

	return parsed_push(L, "smaps_rollup", smaps_rollup_parse, &m, sizeof m, fields);
}

static void limit_value_push(lua_State *L, uint64_t v)
{
	if (v == UINT64_MAX)
		lua_pushnumber(L, HUGE_VAL);
	else
		lua_pushinteger(L, tk_u64_int(v));
}

/*** Resource limits, from `/proc/<pid>/limits` (readable for any process).
 * Unlimited is `math.huge`, so `soft < n` compares as it reads.
 * @function process:limits
 * @treturn[1] table name -> `{soft=, hard=}`; names as in prlimit(1) and
 *   luaposix: cpu, fsize, data, stack, core, rss, nproc, nofile, memlock,
 *   as, locks, sigpending, msgqueue, nice, rtprio, rttime
 * @treturn[2] nil, message, errno */
static int proc_limits(lua_State *L)
{
	struct lproc *p = proc_check(L, 1);
	struct tk_rlim lim[TK_NLIMITS];
	const char *buf;
	size_t len;
	int r, n;

	tk_check_nargs(L, 1);
	if (read_or_push(L, p, "limits", &buf, &len))
		return 3;
	r = tk_limits_parse(buf, len, lim, &n);
	if (r < 0)
		return proc_error(L, p, "limits", r);
	lua_createtable(L, 0, TK_NLIMITS);
	for (int i = 0; i < TK_NLIMITS; i++) {
		lua_createtable(L, 0, 2);
		limit_value_push(L, lim[i].soft);
		lua_setfield(L, -2, "soft");
		limit_value_push(L, lim[i].hard);
		lua_setfield(L, -2, "hard");
		lua_setfield(L, -2, tk_limit_names[i]);
	}
	return 1;
}

/* A limit value: a non-negative integer, math.huge or "unlimited". */
static uint64_t limit_check(lua_State *L, int idx)
{
	if (lua_type(L, idx) == LUA_TSTRING) {
		luaL_argcheck(L, strcmp(lua_tostring(L, idx), "unlimited") == 0, idx,
		              "a number, math.huge or 'unlimited' expected");
		return UINT64_MAX;
	}
	if (lua_type(L, idx) == LUA_TNUMBER && !lua_isinteger(L, idx)) {
		luaL_argcheck(L, lua_tonumber(L, idx) == HUGE_VAL, idx,
		              "an integer, math.huge or 'unlimited' expected");
		return UINT64_MAX;
	}
	{
		lua_Integer v = luaL_checkinteger(L, idx);
		luaL_argcheck(L, v >= 0, idx, "limit must not be negative");
		return (uint64_t)v;
	}
}

static int limit_index(lua_State *L, int idx)
{
	size_t len;
	const char *name = luaL_checklstring(L, idx, &len);

	for (int i = 0; i < TK_NLIMITS; i++)
		if (strlen(tk_limit_names[i]) == len && strcmp(name, tk_limit_names[i]) == 0)
			return i;
	return luaL_argerror(L, idx, lua_pushfstring(L, "unknown limit '%s' (cpu, fsize, data, "
	                     "stack, core, rss, nproc, nofile, memlock, as, locks, sigpending, "
	                     "msgqueue, nice, rtprio or rttime)", name));
}

/*** Sets a resource limit with prlimit(2), then reads it back.
 * prlimit addresses the pid: the call is bracketed by liveness checks of
 * the pidfd, so it never reaches another process unless this one exits, is
 * reaped and its pid reused within that window (impossible for our own
 * unreaped children).
 * @function process:setlimit
 * @string name as in `limits()`
 * @tparam int|number|string soft an integer, `math.huge` or "unlimited"
 * @tparam[opt] int|number|string hard default: the current hard limit
 * @treturn[1] table the limit now in force, `{soft=, hard=}`
 * @treturn[2] nil, message, errno (EPERM raising a hard limit without
 *   `CAP_SYS_RESOURCE`, or another user's process; EINVAL soft above hard) */
static int proc_setlimit(lua_State *L)
{
	struct lproc *p = proc_check(L, 1);
	int res = limit_index(L, 2);
	struct tk_pref pr = pref_of(p);
	struct tk_rlim set, now = { 0, 0 };
	int r;

	tk_check_nargs(L, 4);
	set.soft = limit_check(L, 3);
	if (lua_isnoneornil(L, 4)) {
		r = tk_pref_prlimit(&pr, res, NULL, &now);
		if (r < 0)
			return proc_error(L, p, "setlimit", r);
		set.hard = now.hard;
	} else {
		set.hard = limit_check(L, 4);
	}
	if (set.soft > set.hard)
		return luaL_argerror(L, 3, "soft limit above the hard limit");
	r = tk_pref_prlimit(&pr, res, &set, NULL);
	if (r == 0)
		r = tk_pref_prlimit(&pr, res, NULL, &now);
	if (r == -EPERM) {
		lua_pushnil(L);
		lua_pushfstring(L, "process %d: setlimit %s: %s (raising a hard limit needs "
		                "CAP_SYS_RESOURCE; so does another user's process)", (int)p->o.pid,
		                tk_limit_names[res], strerror(EPERM));
		lua_pushinteger(L, EPERM);
		return 3;
	}
	if (r < 0) {
		char what[64];
		snprintf(what, sizeof what, "setlimit %s", tk_limit_names[res]);
		return proc_error(L, p, what, r);
	}
	lua_createtable(L, 0, 2);
	limit_value_push(L, now.soft);
	lua_setfield(L, -2, "soft");
	limit_value_push(L, now.hard);
	lua_setfield(L, -2, "hard");
	return 1;
}

static int read_int(lua_State *L, struct lproc *p, const char *file)
{
	const char *buf;
	char *end;
	size_t len;
	long v;

	if (read_or_push(L, p, file, &buf, &len))
		return 3;
	errno = 0;
	v = strtol(buf, &end, 10);
	if (end == buf || errno != 0) {
		return proc_error(L, p, file, -EBADMSG);
	}
	lua_pushinteger(L, v);
	return 1;
}

/*** The kernel's OOM badness score (0..2000).
 * @function process:oom_score
 * @treturn[1] int
 * @treturn[2] nil, message, errno */
static int proc_oom_score(lua_State *L)
{
	struct lproc *p = proc_check(L, 1);
	tk_check_nargs(L, 1);
	return read_int(L, p, "oom_score");
}

/*** Reads or sets `oom_score_adj` (-1000..1000) through the process's own
 * /proc directory. Set: written, then read back.
 * @function process:oom_score_adj
 * @int[opt] n the new value
 * @treturn[1] int the value in force
 * @treturn[2] nil, message, errno (EACCES lowering it without
 *   `CAP_SYS_RESOURCE`, or another user's process) */
static int proc_oom_score_adj(lua_State *L)
{
	struct lproc *p = proc_check(L, 1);

	tk_check_nargs(L, 2);
	if (!lua_isnoneornil(L, 2)) {
		struct tk_pref pr = pref_of(p);
		lua_Integer n = luaL_checkinteger(L, 2);
		char num[16];
		int len, r;
		luaL_argcheck(L, n >= -1000 && n <= 1000, 2, "oom_score_adj must be -1000..1000");
		len = snprintf(num, sizeof num, "%d", (int)n);
		r = tk_pref_write(&pr, "oom_score_adj", num, (size_t)len);
		if (r < 0)
			return proc_error(L, p, "oom_score_adj", r);
	}
	return read_int(L, p, "oom_score_adj");
}

/*** The CPUs the process may run on, or sets them.
 * @function process:affinity
 * @tparam[opt] {int,...} cpus cpu numbers to allow
 * @treturn[1] {int,...} the cpus allowed, ascending (after a set: read back)
 * @treturn[2] nil, message, errno (EINVAL: no allowed cpu is online;
 *   EPERM: another user's process) */
static int proc_affinity(lua_State *L)
{
	struct lproc *p = proc_check(L, 1);
	struct tk_pref pr = pref_of(p);
	int *cpus, n = 0, r;

	tk_check_nargs(L, 2);
	lua_settop(L, 2);
	cpus = lua_newuserdatauv(L, sizeof *cpus * AFFINITY_MAX, 0);
	if (!lua_isnoneornil(L, 2)) {
		lua_Integer len;
		luaL_checktype(L, 2, LUA_TTABLE);
		len = (lua_Integer)lua_rawlen(L, 2);
		luaL_argcheck(L, len >= 1 && len <= AFFINITY_MAX, 2, "1..8192 cpu numbers expected");
		for (lua_Integer i = 1; i <= len; i++) {
			lua_Integer c;
			lua_rawgeti(L, 2, i);
			if (!lua_isinteger(L, -1))
				return luaL_argerror(L, 2, "cpu numbers must be integers");
			c = lua_tointeger(L, -1);
			lua_pop(L, 1);
			luaL_argcheck(L, c >= 0 && c < AFFINITY_MAX, 2, "cpu number out of range (0..8191)");
			cpus[i - 1] = (int)c;
		}
		r = tk_pref_affinity_set(&pr, cpus, (int)len);
		if (r < 0)
			return proc_error(L, p, "affinity", r);
	}
	r = tk_pref_affinity_get(&pr, cpus, &n, AFFINITY_MAX);
	if (r < 0)
		return proc_error(L, p, "affinity", r);
	lua_createtable(L, n, 0);
	for (int i = 0; i < n; i++) {
		lua_pushinteger(L, cpus[i]);
		lua_rawseti(L, -2, i + 1);
	}
	return 1;
}

/*** The cgroup2 path, as `/proc/<pid>/cgroup`'s "0::" line shows it
 * (relative to the reader's cgroup namespace; "/" is its root).
 * `takana.cgroup(path)` opens it.
 * @function process:cgroup
 * @treturn[1] string
 * @treturn[2] nil, message, errno (ENOENT: no cgroup2 hierarchy) */
static int proc_cgroup(lua_State *L)
{
	struct lproc *p = proc_check(L, 1);
	const char *path;
	const char *buf;
	size_t len, plen;
	int r;

	tk_check_nargs(L, 1);
	if (read_or_push(L, p, "cgroup", &buf, &len))
		return 3;
	r = tk_cgroup2_path(buf, len, &path, &plen);
	if (r == 0)
		lua_pushlstring(L, path, plen);
	if (r < 0)
		return proc_error(L, p, "cgroup", r);
	return 1;
}

/*** Sends a signal through the pidfd (never to a process that reused the pid).
 * @function process:signal
 * @tparam int|string sig number or name ("TERM", "SIGKILL"); 0 checks
 * @treturn[1] true
 * @treturn[2] nil, message, errno */
static int proc_signal(lua_State *L)
{
	return tk_pidfd_obj_signal(L, &proc_check(L, 1)->o);
}

/*** Whether the process still runs (false once it exited, even unreaped).
 * @function process:alive */
static int proc_alive(lua_State *L)
{
	return tk_pidfd_obj_alive(L, &proc_check(L, 1)->o);
}

/*** Waits for a child to exit and reaps it; as `pidfd:wait`.
 * @function process:wait
 * @number[opt] timeout seconds (0..1 year); nil waits forever */
static int proc_wait(lua_State *L)
{
	return tk_pidfd_obj_wait(L, &proc_check(L, 1)->o);
}

/* upvalue 1: methods */
static int proc_index(lua_State *L)
{
	struct lproc *p = luaL_checkudata(L, 1, TK_PROCESS_MT);

	if (lua_type(L, 2) == LUA_TSTRING && strcmp(lua_tostring(L, 2), "pid") == 0) {
		lua_pushinteger(L, p->o.pid);
		return 1;
	}
	lua_pushvalue(L, 2);
	lua_rawget(L, lua_upvalueindex(1));
	return 1;
}

static int proc_tostring(lua_State *L)
{
	struct lproc *p = luaL_checkudata(L, 1, TK_PROCESS_MT);

	if (p->o.h.fd < 0)
		lua_pushfstring(L, "takana.Process (pid %d, closed)", (int)p->o.pid);
	else
		lua_pushfstring(L, "takana.Process (pid %d, pidfd %d)", (int)p->o.pid, p->o.h.fd);
	return 1;
}

/*** The process of a snapshot's record, refused when the live process with
 * that pid is not the one recorded (its start time differs: the pid was
 * reused since the snapshot).
 * @function snapshot:process
 * @int pid
 * @treturn[1] process
 * @treturn[2] nil, message, ESRCH (not in the snapshot, exited, or reused) */
int tk_snapshot_process(lua_State *L)
{
	struct tk_units units;
	struct tk_record rec;
	struct lproc *p;
	lua_Integer pid;
	uint64_t start_ns;
	const char *buf;
	size_t len;
	int r;

	luaL_checkudata(L, 1, TK_SNAPSHOT_MT);
	pid = luaL_checkinteger(L, 2);
	tk_check_nargs(L, 2);
	luaL_argcheck(L, pid > 0 && pid <= INT32_MAX, 2, "pid out of range");
	/* From the record itself: a snapshot of selected fields reads start_ns
	 * nil, yet always has it. */
	if (!tk_snapshot_start_ns(L, 1, (uint32_t)pid, &start_ns)) {
		lua_pushnil(L);
		lua_pushfstring(L, "process %d: not in the snapshot", (int)pid);
		lua_pushinteger(L, ESRCH);
		return 3;
	}
	r = proc_push_open(L, (pid_t)pid, -1, &p);
	if (r < 0)
		return open_error(L, pid, r);
	if (read_or_push(L, p, "stat", &buf, &len))
		return 3;
	tk_units_init(&units);
	r = tk_stat_parse(buf, len, &units, &rec);
	lua_pop(L, 1);   /* the stat text: the process is on top again */
	if (r < 0)
		return proc_error(L, p, "stat", r);
	/* /proc truncates the start to clock ticks; BPF records keep ns. */
	if (start_ns / units.ns_per_tick != rec.start_ns / units.ns_per_tick) {
		lua_pushnil(L);
		lua_pushfstring(L, "process %d: not the process in the snapshot (it started at "
		                "%I ns, the snapshot's at %I ns: the pid was reused)", (int)pid,
		                (lua_Integer)rec.start_ns, (lua_Integer)start_ns);
		lua_pushinteger(L, ESRCH);
		return 3;
	}
	return 1;
}

/* core.user_name(uid) -> the passwd name, or nil when there is none
 * (getpwuid_r: no static buffer shared with other callers). */
static int l_user_name(lua_State *L)
{
	lua_Integer uid = luaL_checkinteger(L, 1);
	struct passwd pw, *res = NULL;
	long max = sysconf(_SC_GETPW_R_SIZE_MAX);
	size_t cap = max > 0 ? (size_t)max : 4096;
	char *buf;
	int r;

	tk_check_nargs(L, 1);
	luaL_argcheck(L, uid >= 0 && uid <= UINT32_MAX, 1, "uid out of range");
	for (;;) {
		buf = lua_newuserdatauv(L, cap, 0);
		r = getpwuid_r((uid_t)uid, &pw, buf, cap, &res);
		if (r != ERANGE || cap >= ((size_t)1 << 20))
			break;
		lua_pop(L, 1);
		cap *= 4;
	}
	if (r != 0 || res == NULL) {
		lua_pushnil(L);
		return 1;
	}
	lua_pushstring(L, pw.pw_name);
	return 1;
}

void tk_process_open_lib(lua_State *L)
{
	static const luaL_Reg methods[] = {
		{ "cmdline", proc_cmdline },
		{ "comm", proc_comm },
		{ "exe", proc_exe },
		{ "cwd", proc_cwd },
		{ "environ", proc_environ },
		{ "status", proc_status },
		{ "io", proc_io },
		{ "fds", proc_fds },
		{ "memory_full", proc_memory_full },
		{ "limits", proc_limits },
		{ "setlimit", proc_setlimit },
		{ "oom_score", proc_oom_score },
		{ "oom_score_adj", proc_oom_score_adj },
		{ "affinity", proc_affinity },
		{ "cgroup", proc_cgroup },
		{ "signal", proc_signal },
		{ "alive", proc_alive },
		{ "wait", proc_wait },
		{ NULL, NULL },
	};

	tk_handle_newclass(L, TK_PROCESS_MT, methods, proc_index, proc_tostring);
	lua_pop(L, 1);
	lua_pushcfunction(L, l_process);
	lua_setfield(L, -2, "process");
	lua_pushcfunction(L, l_user_name);
	lua_setfield(L, -2, "user_name");
}
