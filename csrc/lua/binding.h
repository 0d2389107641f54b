/* Shared declarations of the Lua binding files (lua_*.c). Everything here is
 * hidden; only luaopen_takana_core is exported from the module. */
#ifndef TAKANA_BINDING_H
#define TAKANA_BINDING_H

#include <lua.h>
#include <lauxlib.h>
#include <stdint.h>
#include <sys/types.h>

#include "core.h"
#include "process.h"

#ifdef __clang_analyzer__
/* The static analyzer does not know that these longjmp out of the caller;
 * without this it follows impossible paths past every argument check. */
__attribute__((noreturn)) int tk_analyzer_noreturn(void);
#define luaL_error(...) (luaL_error(__VA_ARGS__), tk_analyzer_noreturn())
#define luaL_argerror(L, arg, msg) (luaL_argerror(L, arg, msg), tk_analyzer_noreturn())
#endif

/* Metatable names: one constant each, checked in every method. */
#define TK_SNAPSHOT_MT "takana.Snapshot"
#define TK_RECORD_MT "takana.Record"
#define TK_SCANNER_MT "takana.ProcScanner"
#define TK_PIDFD_MT "takana.Pidfd"
#define TK_CGROUP_MT "takana.Cgroup"
#define TK_EVENTS_MT "takana.Events"
#define TK_UNIX_MT "takana.Unix"
#define TK_PROCESS_MT "takana.Process"
#define TK_SIGNALS_MT "takana.Signals"
#define TK_TIMER_MT "takana.Timer"
#define TK_PIPE_MT "takana.Pipe"
#define TK_DIR_MT "takana.Dir"
#define TK_PRESSURE_TRIGGER_MT "takana.PressureTrigger"
#define TK_CGROUP_TREE_MT "takana.CgroupTree"
#define TK_POLLER_MT "takana.Poller"

/* A kernel counter as a Lua integer, saturating rather than wrapping. */
static inline lua_Integer tk_u64_int(uint64_t v)
{
	return v > (uint64_t)LUA_MAXINTEGER ? LUA_MAXINTEGER : (lua_Integer)v;
}

/* Pushes nil, "ctx: strerror(-err)", -err and returns 3: the runtime
 * failure convention of every function in the module. */
int tk_push_error(lua_State *L, const char *ctx, int err);
/* Raises "bad argument #i (no more than n arguments expected)" on extras. */
void tk_check_nargs(lua_State *L, int max);
/* /proc/<pid>/cmdline's bytes as the array of arguments process:cmdline()
 * and the snapshot's cmdline field give (lua_process.c). */
void tk_push_argv(lua_State *L, const char *buf, size_t len);
/* A signal by number (0..NSIG-1) or name ("TERM", "SIGTERM", "term"):
 * tk_signal_parse returns it, or -1 with *why set (a static string);
 * tk_signal_check raises a bad-argument error instead. */
int tk_signal_parse(lua_State *L, int idx, const char **why);
int tk_signal_check(lua_State *L, int idx);
/* Pushes "TERM", "RTMIN+2", or the number as a string when it has no name. */
void tk_signal_push_name(lua_State *L, int sig);

struct tk_poll_reg;

/* The first member of every userdata that owns a descriptor
 * (lua_handle.c). fd is the one to poll, -1 once closed. */
struct tk_handle {
	int fd;
	const char *kind;        /* in messages: "pidfd", "event stream" */
	const char *poll_events; /* cqueues' events(): "r", "w" or "p" */
	/* Closes fd and frees the rest; NULL: close(fd) is all there is. */
	void (*release)(lua_State *L, struct tk_handle *h);
	/* The pollers it is registered in (lua_poller.c): closing the
	 * object takes it out of them before its descriptor goes. */
	struct tk_poll_reg *polls;
};

/* Sets h closed (fd -1) with its class's constants. */
void tk_handle_init(struct tk_handle *h, const char *kind, const char *poll_events,
                    void (*release)(lua_State *L, struct tk_handle *h));
/* Call once a new object holds its descriptors (fd: the highest): near
 * RLIMIT_NOFILE, objects only the collector would close are collected. */
void tk_handle_opened(lua_State *L, int fd);
/* The open handle of class mt at idx; raises "attempt to use a closed
 * <kind>" once closed. */
struct tk_handle *tk_handle_check(lua_State *L, int idx, const char *mt);
/* Tells cqueues, when loaded, to drop fd before it is closed. */
void tk_handle_forget_fd(lua_State *L, int fd);
/* The takana handle at idx, open or closed, or NULL for anything else. */
struct tk_handle *tk_handle_test(lua_State *L, int idx);
/* lua_poller.c: takes h out of every poller it is registered in (called
 * by the handle's close, before its descriptors are closed). */
void tk_poller_forget(struct tk_handle *h);
/* The epoll set this Lua state's takana.poll borrows for each call
 * (made at the first, and again in a child of fork(), which must not
 * share its parent's): its fd, or -errno. */
int tk_poller_shared_fd(lua_State *L);
void tk_poller_open_lib(lua_State *L);
/* Creates metatable mt with close/__gc/__close, fileno/pollfd, events,
 * timeout and __tostring, then methods (which may override those). index,
 * when given, is __index with the methods table as upvalue 1; tostring,
 * when given, replaces the default. Leaves the methods table on the stack. */
void tk_handle_newclass(lua_State *L, const char *mt, const luaL_Reg *methods,
                        lua_CFunction index, lua_CFunction tostring);

/* Registrars, one per binding file, all named tk_<object>_open_lib (the
 * core's tk_<object>_open opens the object itself: tk_pidfd_open,
 * tk_timer_open). Each adds its functions to the module table on the top
 * of the stack. */
void tk_snapshot_open_lib(lua_State *L);
void tk_pidfd_open_lib(lua_State *L);
void tk_cgroup_open_lib(lua_State *L);
void tk_events_open_lib(lua_State *L);
/* What a buffer for one file of cg:stat() holds (lua_cgroup.c). */
#define TK_CGROUP_STAT_BUF 8192
/* Pushes the cg:stat() table of node of tree t, read through the tree's
 * kept descriptors (lua_cgroup.c, for lua_cgroup_tree.c); buf holds
 * TK_CGROUP_STAT_BUF bytes. 0, or the first failure (negative errno,
 * *file the file) with the table pushed anyway. *absent: a file was
 * missing and none was read after it, so the cgroup may be gone. */
struct tk_cg_tree;
int tk_cgroup_stat_push(lua_State *L, struct tk_cg_tree *t, size_t node, char *buf,
                        const char **file, int *absent);
/* The number of files cg:stat() reads: the slots a tree keeps per node. */
int tk_cgroup_stat_files(void);
/* takana.core.cgroup_tree (lua_cgroup_tree.c). */
void tk_cgroup_tree_open_lib(lua_State *L);
/* The directory fd of the cgroup handle at idx (lua_cgroup.c); raises when
 * it is none or closed. */
int tk_cgroup_dirfd(lua_State *L, int idx);
void tk_dir_open_lib(lua_State *L);
/* lua_unix.c, for lua_dir.c: a socket bound at name beneath dirfd (a
 * datagram socket when dgram, else listening); pushes it or nil, msg, errno.
 * by_start_time: senders told by start time even where SCM_PIDFD exists. */
int tk_unix_bind(lua_State *L, int dirfd, const char *dir_path, const char *name, int dgram,
                 mode_t mode, uid_t uid, gid_t gid, int by_start_time);
void tk_unix_open_lib(lua_State *L);
void tk_signals_open_lib(lua_State *L);
void tk_timer_open_lib(lua_State *L);
/* lua_pressure.c; after tk_cgroup_open_lib, whose handle methods it adds to. */
void tk_pressure_open_lib(lua_State *L);
void tk_self_open_lib(lua_State *L);

/* The one timeout parser (lua_time.c): seconds, 0..1 year, at idx as
 * milliseconds rounded up; raises on anything else. nil or absent waits
 * forever (TK_WAIT_FOREVER), as doc/reference.md's "Error convention" says. The drains
 * signals:read and timer:read document nil as "do not wait": they take
 * luaL_opt(L, tk_timeout_check, idx, 0), the default explicit at the call. */
#define TK_WAIT_FOREVER ((int64_t)-1)
int64_t tk_timeout_check(lua_State *L, int idx);

/* What pidfds and process objects have in common, their first member: both
 * run the same signal, alive and wait (lua_pidfd.c) on it. */
struct tk_pidfd_obj {
	struct tk_handle h; /* first: the handle base; h.fd is the pidfd */
	pid_t pid;
	int reaped;         /* status below is final */
	struct tk_exit status;
	/* Pushes nil, message, errno for the failure err (-errno) of method
	 * what, in the wording of the object's class; returns 3. */
	int (*fail)(lua_State *L, const struct tk_pidfd_obj *o, const char *what, int err);
};
/* :signal(sig), :alive() and :wait([timeout]) of the object o at index 1. */
int tk_pidfd_obj_signal(lua_State *L, struct tk_pidfd_obj *o);
int tk_pidfd_obj_alive(lua_State *L, struct tk_pidfd_obj *o);
int tk_pidfd_obj_wait(lua_State *L, struct tk_pidfd_obj *o);
/* takana.process (lua_process.c), and snap:process for lua_snapshot.c. */
void tk_process_open_lib(lua_State *L);
int tk_snapshot_process(lua_State *L);
/* The start time of pid's record in the snapshot at idx (raising for a
 * non-snapshot), whatever its field selection: 1, or 0 when pid is not in
 * it (lua_snapshot.c). */
int tk_snapshot_start_ns(lua_State *L, int idx, uint32_t pid, uint64_t *start_ns);
/* core.cgroup_path_by_handle, core.cgroup_ids, core.cgroup_path and
 * core.cgroup_path_cached (lua_cgroup.c). */
void tk_cgroup_path_open_lib(lua_State *L);
/* The path of cgroup id beneath mount, "/a/b" ("/": its root), from
 * cgroup_path.c's resolver with this Lua state's cache: pushes it and
 * returns 1, or pushes nil, "cgroup.path: ...", errno and returns 3. */
int tk_cgroup_path_push(lua_State *L, const char *mount, uint64_t id);
/* The cache's answer alone, checked against the id: pushes it and returns
 * 1, or pushes nothing and returns 0 (the resolver must be asked). */
int tk_cgroup_path_cached_push(lua_State *L, uint64_t id);
/* Registrar of lua_host.c: the host's and processes' small /proc files. */
void tk_host_open_lib(lua_State *L);

void tk_spawn_open_lib(lua_State *L);
void tk_pipe_open_lib(lua_State *L);

/* lua_pidfd.c, for lua_spawn.c: a closed pidfd object pushed, then
 * filled once the child exists (an allocation failure leaves no child
 * without an owner). */
void tk_pidfd_new(lua_State *L);
void tk_pidfd_fill(lua_State *L, int idx, int fd, pid_t pid, const char *mechanism);
/* lua_pipe.c: a closed pipe object pushed (writable: a child's stdin);
 * the caller stores the fd in the returned handle, which owns it. */
struct tk_handle *tk_pipe_new(lua_State *L, int writable);

#endif
