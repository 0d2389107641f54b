/* Lua binding of pidfds, spawn and poll. A spawned child is a pidfd object
 * whose user value holds its pipe ends. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <stdint.h>

#include "binding.h"
#include "process.h"

#define CGROUP2_SUPER_MAGIC 0x63677270

struct lpidfd {
	struct tk_handle h; /* first: the handle base (lua_handle.c) */
	pid_t pid;
	int reaped;       /* status below is final */
	struct tk_exit status;
	const char *mechanism;
};

static struct lpidfd *pidfd_check(lua_State *L, int idx)
{
	return (struct lpidfd *)tk_handle_check(L, idx, TK_PIDFD_MT);
}

/* Created closed, then filled: an allocation failure leaves nothing open. */
static struct lpidfd *pidfd_new(lua_State *L)
{
	struct lpidfd *p = lua_newuserdatauv(L, sizeof *p, 1);
	memset(p, 0, sizeof *p);
	tk_handle_init(&p->h, "pidfd", "r", NULL);
	luaL_setmetatable(L, TK_PIDFD_MT);
	return p;
}

/* Converts seconds (nil = forever) to milliseconds, rounding up. A year
 * is 3.2e10 ms, past an int: the waits below take it in slices. */
static int64_t timeout_ms_check(lua_State *L, int idx)
{
	lua_Number s;

	if (lua_isnoneornil(L, idx))
		return -1;
	s = luaL_checknumber(L, idx);
	luaL_argcheck(L, s >= 0 && s <= TK_TIMEOUT_MAX_S, idx, "timeout must be 0..1 year (seconds)");
	return (int64_t)ceil(s * 1000.0);
}

/* Signal by number or by name: "TERM", "SIGTERM", "term". */
static int signal_check(lua_State *L, int idx)
{
	if (lua_type(L, idx) == LUA_TNUMBER) {
		lua_Integer n = luaL_checkinteger(L, idx);
		luaL_argcheck(L, n >= 0 && n < NSIG, idx, "signal number out of range");
		return (int)n;
	} else {
		size_t len;
		const char *name = luaL_checklstring(L, idx, &len);
		char up[16];
		const char *base;

		luaL_argcheck(L, len < sizeof up && strlen(name) == len, idx, "unknown signal name");
		for (size_t i = 0; i <= len; i++)
			up[i] = (char)((name[i] >= 'a' && name[i] <= 'z') ? name[i] - 32 : name[i]);
		base = strncmp(up, "SIG", 3) == 0 ? up + 3 : up;
		for (int s = 1; s < SIGRTMIN; s++) {
			const char *abbrev = sigabbrev_np(s);
			if (abbrev != NULL && strcmp(abbrev, base) == 0)
				return s;
		}
		return luaL_argerror(L, idx, lua_pushfstring(L, "unknown signal name '%s'", name));
	}
}

/*** Opens a pidfd on a process.
 * @function pidfd
 * @int pid
 * @treturn[1] pidfd
 * @treturn[2] nil
 * @treturn[2] string "pidfd <pid>: No such process"
 * @treturn[2] int errno (ESRCH gone, EINVAL a thread id before Linux 6.9)
 * @see pidfd_open(2) */
static int l_pidfd(lua_State *L)
{
	lua_Integer pid = luaL_checkinteger(L, 1);
	struct lpidfd *p;
	int fd;

	tk_check_nargs(L, 1);
	luaL_argcheck(L, pid > 0 && pid <= INT32_MAX, 1, "pid out of range");
	p = pidfd_new(L);
	fd = tk_pidfd_open((pid_t)pid);
	if (fd < 0) {
		char ctx[32];
		snprintf(ctx, sizeof ctx, "pidfd %d", (int)pid);
		return tk_push_error(L, ctx, fd);
	}
	p->h.fd = fd;
	p->pid = (pid_t)pid;
	p->mechanism = "pidfd_open";
	return 1;
}

/*** Sends a signal through the pidfd: never to a process that reused the pid.
 * @function pidfd:signal
 * @tparam int|string sig number or name ("TERM", "SIGKILL"); 0 checks
 * @treturn[1] true
 * @treturn[2] nil, message, errno (ESRCH once the process is gone) */
static int pidfd_signal(lua_State *L)
{
	struct lpidfd *p = pidfd_check(L, 1);
	int sig = signal_check(L, 2);
	int r;

	tk_check_nargs(L, 2);
	r = tk_pidfd_signal(p->h.fd, sig);
	if (r < 0)
		return tk_push_error(L, "signal", r);
	lua_pushboolean(L, 1);
	return 1;
}

/*** Whether the process is still running (false once it has exited, even
 * before it is reaped).
 * @function pidfd:alive */
static int pidfd_alive(lua_State *L)
{
	struct lpidfd *p = pidfd_check(L, 1);
	int r;

	tk_check_nargs(L, 1);
	r = tk_pidfd_alive(p->h.fd);
	if (r < 0)
		return tk_push_error(L, "alive", r);
	lua_pushboolean(L, r);
	return 1;
}

static void exit_push(lua_State *L, const struct tk_exit *e)
{
	lua_createtable(L, 0, 3);
	if (e->signaled) {
		lua_pushboolean(L, 1);
		lua_setfield(L, -2, "signaled");
		lua_pushinteger(L, e->code);
		lua_setfield(L, -2, "signal");
		lua_pushboolean(L, e->core);
		lua_setfield(L, -2, "core");
	} else {
		lua_pushboolean(L, 1);
		lua_setfield(L, -2, "exited");
		lua_pushinteger(L, e->code);
		lua_setfield(L, -2, "code");
	}
}

/*** Waits for a child to exit and reaps it.
 * @function pidfd:wait
 * @number[opt] timeout seconds (0..1 year); nil waits forever
 * @treturn[1] table `{exited=true, code=n}` or `{signaled=true, signal=n, core=bool}`;
 *   the same table again on later calls
 * @treturn[2] nil, "wait: process <pid> still running after <t> s", ETIMEDOUT
 * @treturn[3] nil, message, errno (ECHILD: not a child of this process)
 * @see waitid(2) */
static int pidfd_wait(lua_State *L)
{
	struct lpidfd *p = pidfd_check(L, 1);
	int64_t timeout = timeout_ms_check(L, 2);
	int r;

	tk_check_nargs(L, 2);
	if (!p->reaped) {
		r = tk_pidfd_wait(p->h.fd, timeout, &p->status);
		if (r == -ETIMEDOUT) {
			char secs[32];
			snprintf(secs, sizeof secs, "%g", (double)timeout / 1000.0);
			lua_pushnil(L);
			lua_pushfstring(L, "wait: process %d still running after %s s (wait again, "
			                "or signal it)", (int)p->pid, secs);
			lua_pushinteger(L, ETIMEDOUT);
			return 3;
		}
		if (r == -ECHILD) {
			lua_pushnil(L);
			lua_pushfstring(L, "wait: process %d is not a child of this process", (int)p->pid);
			lua_pushinteger(L, ECHILD);
			return 3;
		}
		if (r < 0)
			return tk_push_error(L, "wait", r);
		p->reaped = 1;
	}
	exit_push(L, &p->status);
	return 1;
}

static int pidfd_tostring(lua_State *L)
{
	struct lpidfd *p = luaL_checkudata(L, 1, TK_PIDFD_MT);
	if (p->h.fd < 0)
		lua_pushfstring(L, "takana.Pidfd (pid %d, closed)", (int)p->pid);
	else
		lua_pushfstring(L, "takana.Pidfd (pid %d, fd %d)", (int)p->pid, p->h.fd);
	return 1;
}

/* upvalue 1: methods. Fields: pid, mechanism, then the user value's
 * stdin/stdout/stderr. */
static int pidfd_index(lua_State *L)
{
	struct lpidfd *p = luaL_checkudata(L, 1, TK_PIDFD_MT);

	if (lua_type(L, 2) == LUA_TSTRING) {
		const char *key = lua_tostring(L, 2);
		if (strcmp(key, "pid") == 0) {
			lua_pushinteger(L, p->pid);
			return 1;
		}
		if (strcmp(key, "mechanism") == 0) {
			lua_pushstring(L, p->mechanism);
			return 1;
		}
	}
	lua_pushvalue(L, 2);
	if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL)
		return 1;
	if (lua_getiuservalue(L, 1, 1) == LUA_TTABLE) {
		lua_pushvalue(L, 2);
		lua_rawget(L, -2);
		return 1;
	}
	lua_pushnil(L);
	return 1;
}

/* ---- spawn ---------------------------------------------------------------- */

static int stream_close(lua_State *L)
{
	luaL_Stream *s = luaL_checkudata(L, 1, LUA_FILEHANDLE);
	int ok = fclose(s->f) == 0;
	return luaL_fileresult(L, ok, NULL);
}

/* Wraps fd in a Lua file; on failure closes fd and returns 0. */
static int stream_push(lua_State *L, int fd, const char *mode)
{
	luaL_Stream *s = lua_newuserdatauv(L, sizeof *s, 0);
	s->closef = NULL;
	luaL_setmetatable(L, LUA_FILEHANDLE);
	s->f = fdopen(fd, mode);
	if (s->f == NULL) {
		close(fd);
		lua_pop(L, 1);
		return 0;
	}
	s->closef = stream_close;
	return 1;
}

/* Every string the child needs (argv, env, cwd) is copied here: options
 * are read with lua_getfield, whose __index can run Lua code that drops the
 * caller's strings and collects them, so no pointer into a Lua string may
 * outlive the option read that produced it. */
struct spawn_state {
	struct tk_spawn_opts o;
	char **argv;           /* owned strings, argc of them */
	size_t argc;
	char **envp;           /* owned strings, envc of them; NULL: environ */
	size_t envc;
	char *cwd;
	char *cgroup_path;     /* for messages */
	int owned[8];          /* fds opened here, closed after the spawn */
	int nowned;
	int parent_end[3];     /* our ends of "pipe" streams, -1 otherwise */
};

static void strings_free(char **v, size_t n)
{
	if (v == NULL)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static void spawn_state_free(struct spawn_state *st)
{
	for (int i = 0; i < st->nowned; i++)
		close(st->owned[i]);
	st->nowned = 0;
	for (int i = 0; i < 3; i++) {
		if (st->parent_end[i] >= 0)
			close(st->parent_end[i]);
		st->parent_end[i] = -1;
	}
	if (st->o.cgroup_fd >= 0)
		close(st->o.cgroup_fd);
	st->o.cgroup_fd = -1;
	strings_free(st->argv, st->argc);
	strings_free(st->envp, st->envc);
	free(st->cwd);
	free(st->cgroup_path);
	st->argv = st->envp = NULL;
	st->argc = st->envc = 0;
	st->cwd = st->cgroup_path = NULL;
}

/* The state lives in a userdata whose __gc frees it, so a raised error
 * between here and the spawn leaks nothing. */
static int spawn_state_gc(lua_State *L)
{
	spawn_state_free(lua_touserdata(L, 1));
	return 0;
}

static const char *checked_string(lua_State *L, int idx, const char *what)
{
	size_t len;
	const char *s;

	if (lua_type(L, idx) != LUA_TSTRING)
		luaL_error(L, "bad argument #1 to 'spawn' (%s: string expected, got %s)", what,
		           luaL_typename(L, idx));
	s = lua_tolstring(L, idx, &len);
	if (strlen(s) != len)
		luaL_error(L, "bad argument #1 to 'spawn' (%s contains a NUL byte)", what);
	return s;
}

/* A malloc'ed copy of the string at idx, owned by the spawn state. */
static char *owned_string(lua_State *L, int idx, const char *what)
{
	char *copy = strdup(checked_string(L, idx, what));
	if (copy == NULL)
		luaL_error(L, "spawn: out of memory");
	return copy;
}

/* "bad argument #1 to 'spawn' (option 'x': <want> expected, got <type>)":
 * the option's own type, not the table's. */
static int option_type_error(lua_State *L, const char *name, const char *want, int idx)
{
	return luaL_error(L, "bad argument #1 to 'spawn' (option '%s': %s expected, got %s)",
	                  name, want, luaL_typename(L, idx));
}

static const char *const stdio_names[3] = { "stdin", "stdout", "stderr" };

/* Misuse raises; a descriptor that cannot be made returns -errno with the
 * step in *step. */
/* The caller's descriptor, duplicated: a later option's __index may close
 * the file and open another in its number before the child starts. */
static int stdio_own(struct spawn_state *st, int i, int fd, const char **step)
{
	int dup = fcntl(fd, F_DUPFD_CLOEXEC, 3);

	if (dup < 0) {
		*step = stdio_names[i];
		return -errno;
	}
	st->owned[st->nowned++] = dup;
	st->o.fds[i] = dup;
	return 0;
}

static int stdio_option(lua_State *L, struct spawn_state *st, int i, const char **step)
{
	int t = lua_getfield(L, 1, stdio_names[i]);

	st->o.fds[i] = -1;
	if (t == LUA_TNIL) {
		/* inherit */
	} else if (t == LUA_TSTRING) {
		const char *v = lua_tostring(L, -1);
		if (strcmp(v, "inherit") == 0) {
		} else if (strcmp(v, "null") == 0) {
			int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
			if (fd < 0) {
				*step = "open /dev/null";
				return -errno;
			}
			st->owned[st->nowned++] = fd;
			st->o.fds[i] = fd;
		} else if (strcmp(v, "pipe") == 0) {
			int p[2];
			if (pipe2(p, O_CLOEXEC) < 0) {
				*step = "pipe";
				return -errno;
			}
			/* the child reads stdin's read end and writes the others */
			st->o.fds[i] = i == 0 ? p[0] : p[1];
			st->parent_end[i] = i == 0 ? p[1] : p[0];
			st->owned[st->nowned++] = st->o.fds[i];
		} else {
			luaL_error(L, "bad argument #1 to 'spawn' (%s: 'inherit', 'null', 'pipe', "
			              "an fd or a file expected, got '%s')", stdio_names[i], v);
		}
	} else if (t == LUA_TNUMBER) {
		lua_Integer fd = lua_tointeger(L, -1);
		if (!lua_isinteger(L, -1) || fd < 0 || fd > INT32_MAX || fcntl((int)fd, F_GETFD) < 0)
			luaL_error(L, "bad argument #1 to 'spawn' (%s: not an open descriptor)", stdio_names[i]);
		return stdio_own(st, i, (int)fd, step);
	} else {
		luaL_Stream *s = luaL_testudata(L, -1, LUA_FILEHANDLE);
		if (s == NULL || s->closef == NULL) {
			luaL_error(L, "bad argument #1 to 'spawn' (%s: 'inherit', 'null', 'pipe', "
			              "an fd or an open file expected)", stdio_names[i]);
		} else {
			fflush(s->f);
			lua_pop(L, 1);
			return stdio_own(st, i, fileno(s->f), step);
		}
	}
	lua_pop(L, 1);
	return 0;
}

/* Misuse raises; a path that cannot be opened returns -errno. */
static int cgroup_option(lua_State *L, struct spawn_state *st)
{
	int t = lua_getfield(L, 1, "cgroup");
	struct statfs sfs;
	int fd;

	if (t == LUA_TNIL) {
		lua_pop(L, 1);
		return 0;
	}
	if (t == LUA_TSTRING) {
		st->cgroup_path = owned_string(L, -1, "cgroup");
		fd = open(st->cgroup_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			return -errno;
	} else {
		/* A takana.cgroup handle: its directory fd. */
		if (luaL_testudata(L, -1, TK_CGROUP_MT) == NULL)
			luaL_error(L, "bad argument #1 to 'spawn' (cgroup: path or takana.cgroup handle expected)");
		lua_getfield(L, -1, "path");
		if (lua_type(L, -1) == LUA_TSTRING)
			st->cgroup_path = owned_string(L, -1, "cgroup path");
		lua_pop(L, 1);
		fd = fcntl(tk_cgroup_dirfd(L, -1), F_DUPFD_CLOEXEC, 3);
		if (fd < 0)
			return -errno;
	}
	st->o.cgroup_fd = fd;
	if (fstatfs(fd, &sfs) < 0 || sfs.f_type != CGROUP2_SUPER_MAGIC)
		luaL_argerror(L, 1, "cgroup: not a directory of the cgroup2 hierarchy");
	lua_pop(L, 1);
	return 0;
}

static void env_option(lua_State *L, struct spawn_state *st)
{
	size_t n = 0;

	if (lua_getfield(L, 1, "env") == LUA_TNIL) {
		lua_pop(L, 1);
		return;
	}
	if (!lua_istable(L, -1))
		option_type_error(L, "env", "a table of NAME = value strings", -1);
	lua_pushnil(L);
	while (lua_next(L, -2)) {
		n++;
		lua_pop(L, 1);
	}
	st->envp = calloc(n + 1, sizeof *st->envp);
	if (st->envp == NULL)
		luaL_error(L, "spawn: out of memory");
	/* lua_next runs no Lua code: the table cannot change under it. */
	lua_pushnil(L);
	while (lua_next(L, -2)) {
		const char *v;
		/* A finalizer run by an allocation here could add entries. */
		if (st->envc == n)
			luaL_error(L, "bad argument #1 to 'spawn' (env changed while it was read)");
		v = checked_string(L, -1, "env value");
		if (lua_type(L, -2) == LUA_TSTRING) {
			const char *k = checked_string(L, -2, "env name");
			if (*k == '\0' || strchr(k, '=') != NULL)
				luaL_error(L, "bad argument #1 to 'spawn' (env name '%s' is empty or has '=')", k);
			lua_pushfstring(L, "%s=%s", k, v);
		} else {
			if (strchr(v, '=') == NULL)
				luaL_error(L, "bad argument #1 to 'spawn' (env entry '%s' is not NAME=value)", v);
			lua_pushvalue(L, -1);
		}
		st->envp[st->envc] = owned_string(L, -1, "env entry");
		st->envc++;
		lua_pop(L, 2);
	}
	lua_pop(L, 1);
}

/* The message of a failed spawn: the object, the cause and what to do. */
static void spawn_error_context(struct spawn_state *st, const struct tk_spawn_result *res,
                                int r, char *ctx, size_t len)
{
	const char *prog = st->argv[0];
	const char *cg = st->cgroup_path ? st->cgroup_path : "(handle)";

	if (res->failed_step != NULL && strcmp(res->failed_step, "chdir") == 0)
		snprintf(ctx, len, "spawn %s: chdir %s", prog, st->cwd);
	else if (res->failed_step != NULL)
		snprintf(ctx, len, "spawn %s: %s", prog, res->failed_step);
	else if (st->o.cgroup_fd >= 0 && !res->exec_failed && (r == -ENOENT || r == -ENODEV))
		snprintf(ctx, len, "spawn %s: cgroup %s was removed (recreate it or pick another)",
		         prog, cg);
	else if (st->o.cgroup_fd >= 0 && !res->exec_failed && (r == -EACCES || r == -EPERM))
		snprintf(ctx, len, "spawn %s: entering cgroup %s needs write access to its "
		         "cgroup.procs and to the common ancestor's (run as root or delegate the "
		         "cgroup to this user)", prog, cg);
	else if (st->o.cgroup_fd >= 0 && !res->exec_failed && r == -EBUSY)
		snprintf(ctx, len, "spawn %s: cgroup %s has controllers enabled for its children "
		         "(no internal processes: spawn into a leaf cgroup)", prog, cg);
	else
		snprintf(ctx, len, "spawn %s", prog);
	if (r == -EOPNOTSUPP && st->o.cgroup_fd >= 0)
		snprintf(ctx, len, "spawn %s: clone3 unavailable, a cgroup cannot be "
		         "entered atomically (pass cgroup_fallback='attach' to move it after start)",
		         prog);
}

/*** Starts a program: clone3 + CLONE_VFORK on a small stack, straight into
 * a cgroup when asked, exec errors returned here.
 * @function spawn
 * @tparam table t `{prog, arg1, ..., env=, cwd=, cgroup=, stdin=, stdout=,
 *   stderr=, setsid=, pgroup=, cgroup_fallback=}`
 * @treturn[1] pidfd the child, with `.pid`, `.mechanism`, and `.stdin` /
 *   `.stdout` / `.stderr` files for "pipe"
 * @treturn[2] nil, "spawn prog: message", errno */
static int l_spawn(lua_State *L)
{
	struct spawn_state *st;
	struct tk_spawn_result res;
	struct lpidfd *p;
	lua_Integer argc;
	int r;

	luaL_checktype(L, 1, LUA_TTABLE);
	tk_check_nargs(L, 1);
	argc = (lua_Integer)lua_rawlen(L, 1);
	luaL_argcheck(L, argc >= 1, 1, "program name expected at t[1]");
	luaL_argcheck(L, argc < 65536, 1, "too many arguments");

	st = lua_newuserdatauv(L, sizeof *st, 0);
	memset(st, 0, sizeof *st);
	st->o.cgroup_fd = -1;
	st->o.pgroup = -1;
	st->parent_end[0] = st->parent_end[1] = st->parent_end[2] = -1;
	lua_newtable(L);
	lua_pushcfunction(L, spawn_state_gc);
	lua_setfield(L, -2, "__gc");
	lua_setmetatable(L, -2);

	st->argv = calloc((size_t)argc + 1, sizeof *st->argv);
	if (st->argv == NULL)
		return luaL_error(L, "spawn: out of memory");
	for (lua_Integer i = 1; i <= argc; i++) {
		if (lua_rawgeti(L, 1, i) != LUA_TSTRING)
			luaL_error(L, "bad argument #1 to 'spawn' (t[%I]: string expected, got %s)", i,
			           luaL_typename(L, -1));
		st->argv[i - 1] = owned_string(L, -1, "argument");
		st->argc++;
		lua_pop(L, 1);
	}
	luaL_argcheck(L, st->argv[0][0] != '\0', 1, "program name is empty");

	env_option(L, st);
	st->o.envp = st->envp ? st->envp : environ;
	st->o.argv = st->argv;
	st->o.search_path = getenv("PATH");
	if (lua_getfield(L, 1, "cwd") != LUA_TNIL)
		st->cwd = owned_string(L, -1, "cwd");
	st->o.cwd = st->cwd;
	lua_pop(L, 1);
	if (lua_getfield(L, 1, "setsid") != LUA_TNIL) {
		if (!lua_isboolean(L, -1))
			option_type_error(L, "setsid", "boolean", -1);
		st->o.setsid = lua_toboolean(L, -1);
	}
	lua_pop(L, 1);
	switch (lua_getfield(L, 1, "pgroup")) {
	case LUA_TNIL: break;
	case LUA_TBOOLEAN: st->o.pgroup = lua_toboolean(L, -1) ? 0 : -1; break;
	case LUA_TNUMBER: {
		lua_Integer g = lua_tointeger(L, -1);
		luaL_argcheck(L, lua_isinteger(L, -1) && g > 0 && g <= INT32_MAX, 1, "pgroup out of range");
		st->o.pgroup = (pid_t)g;
		break;
	}
	default: option_type_error(L, "pgroup", "boolean or pgid", -1);
	}
	lua_pop(L, 1);
	if (lua_getfield(L, 1, "cgroup_fallback") != LUA_TNIL) {
		const char *v = checked_string(L, -1, "cgroup_fallback");
		luaL_argcheck(L, strcmp(v, "attach") == 0 || strcmp(v, "error") == 0, 1,
		              "cgroup_fallback must be 'attach' or 'error'");
		st->o.cgroup_attach_fallback = strcmp(v, "attach") == 0;
	}
	lua_pop(L, 1);
	if (lua_getfield(L, 1, "_fallback") != LUA_TNIL)
		st->o.force_posix_spawn = lua_toboolean(L, -1);
	lua_pop(L, 1);
	if (st->o.setsid && st->o.pgroup >= 0)
		luaL_argerror(L, 1, "setsid and pgroup are exclusive");
	for (int i = 0; i < 3; i++) {
		const char *step = NULL;
		r = stdio_option(L, st, i, &step);
		if (r < 0) {
			char ctx[256];
			snprintf(ctx, sizeof ctx, "spawn %s: %s for %s", st->argv[0], step, stdio_names[i]);
			spawn_state_free(st);
			return tk_push_error(L, ctx, r);
		}
	}
	r = cgroup_option(L, st);
	if (r < 0) {
		char ctx[512];
		if (st->cgroup_path == NULL)
			snprintf(ctx, sizeof ctx, "spawn %s: cgroup handle: duplicate its descriptor",
			         st->argv[0]);
		else if (r == -ENOENT)
			snprintf(ctx, sizeof ctx, "spawn %s: cgroup %s does not exist (create it first, "
			         "e.g. with cgroup:mkdir())", st->argv[0], st->cgroup_path);
		else
			snprintf(ctx, sizeof ctx, "spawn %s: cgroup %s", st->argv[0], st->cgroup_path);
		spawn_state_free(st);
		return tk_push_error(L, ctx, r);
	}

	p = pidfd_new(L);
	r = tk_spawn(&st->o, &res);
	if (r < 0) {
		char ctx[512];
		spawn_error_context(st, &res, r, ctx, sizeof ctx);
		spawn_state_free(st);
		return tk_push_error(L, ctx, r);
	}
	p->h.fd = res.pidfd;
	p->pid = res.pid;
	p->mechanism = res.mechanism;

	lua_createtable(L, 0, 3);
	for (int i = 0; i < 3; i++) {
		if (st->parent_end[i] < 0)
			continue;
		if (stream_push(L, st->parent_end[i], i == 0 ? "w" : "r"))
			lua_setfield(L, -2, stdio_names[i]);
		st->parent_end[i] = -1;
	}
	lua_setiuservalue(L, -2, 1);
	spawn_state_free(st);
	return 1;
}

/* ---- poll ------------------------------------------------------------------ */

/* core.poll_fds({fd...}, timeout_s[, {pri...}]) -> {index...} of the ready
 * ones: readable, or with pri[i] true, priority-readable (cgroup.events). */
static int l_poll_fds(lua_State *L)
{
	lua_Integer n;
	int64_t timeout, deadline = 0;
	int ep, ready, nready = 0;
	struct epoll_event *evs;

	luaL_checktype(L, 1, LUA_TTABLE);
	timeout = timeout_ms_check(L, 2);
	if (!lua_isnoneornil(L, 3))
		luaL_checktype(L, 3, LUA_TTABLE);
	tk_check_nargs(L, 3);
	n = (lua_Integer)lua_rawlen(L, 1);
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		return tk_push_error(L, "poll: epoll_create1", -errno);
	evs = lua_newuserdatauv(L, sizeof *evs * (size_t)(n > 0 ? n : 1), 0);
	for (lua_Integer i = 1; i <= n; i++) {
		struct epoll_event ev = { .events = EPOLLIN };
		if (lua_istable(L, 3)) {
			if (lua_rawgeti(L, 3, i) != LUA_TNIL && lua_toboolean(L, -1))
				ev.events = EPOLLPRI;
			lua_pop(L, 1);
		}
		lua_rawgeti(L, 1, i);
		ev.data.fd = (int)lua_tointeger(L, -1);
		lua_pop(L, 1);
		/* The same descriptor twice is one registration; both indexes are
		 * reported below. */
		if (epoll_ctl(ep, EPOLL_CTL_ADD, ev.data.fd, &ev) < 0 && errno != EEXIST) {
			int e = errno;
			close(ep);
			return tk_push_error(L, "poll: epoll_ctl", -e);
		}
	}
	if (timeout > 0)
		deadline = tk_monotonic_ms() + timeout;
	for (;;) {
		ready = epoll_wait(ep, evs, n > 0 ? (int)n : 1, tk_timeout_slice(timeout, deadline));
		if (ready < 0 && errno != EINTR)
			break;
		if (ready > 0 || timeout == 0 || (timeout > 0 && tk_monotonic_ms() >= deadline))
			break;
	}
	if (ready < 0 && errno == EINTR)
		ready = 0;
	close(ep);
	if (ready < 0)
		return tk_push_error(L, "poll: epoll_wait", -errno);
	lua_newtable(L);
	for (lua_Integer i = 1; i <= n && ready > 0; i++) {
		int fd;
		lua_rawgeti(L, 1, i);
		fd = (int)lua_tointeger(L, -1);
		lua_pop(L, 1);
		for (int k = 0; k < ready; k++) {
			if (evs[k].data.fd == fd) {
				lua_pushinteger(L, i);
				lua_rawseti(L, -2, ++nready);
				break;
			}
		}
	}
	return 1;
}

void tk_process_open(lua_State *L)
{
	static const luaL_Reg methods[] = {
		{ "signal", pidfd_signal },
		{ "alive", pidfd_alive },
		{ "wait", pidfd_wait },
		{ NULL, NULL },
	};
	static const luaL_Reg funcs[] = {
		{ "pidfd", l_pidfd },
		{ "spawn", l_spawn },
		{ "poll_fds", l_poll_fds },
		{ NULL, NULL },
	};

	tk_handle_newclass(L, TK_PIDFD_MT, methods, pidfd_index, pidfd_tostring);
	lua_pop(L, 1);
	luaL_setfuncs(L, funcs, 0);
}
