/* The host's and processes' small /proc and /sys files, for the Lua side:
 * host.c, mountinfo.c and procinfo.c read and parse them; this file only
 * turns their answers into Lua values. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"
#include "host.h"
#include "mountinfo.h"
#include "procinfo.h"
#include "process.h"

/* core.loadavg() -> {load1, load5, load15, running, tasks, last_pid}
 * (/proc/loadavg; tasks counts threads) | nil, msg, errno */
static int l_loadavg(lua_State *L)
{
	static const char *const loads[3] = { "load1", "load5", "load15" };
	struct tk_loadavg l;
	int r;

	tk_check_nargs(L, 0);
	r = tk_loadavg_read(&l);
	if (r < 0)
		return tk_push_error(L, "/proc/loadavg", r);
	lua_createtable(L, 0, 6);
	for (int i = 0; i < 3; i++) {
		lua_pushnumber(L, (lua_Number)l.load_centi[i] / 100);
		lua_setfield(L, -2, loads[i]);
	}
	lua_pushinteger(L, tk_u64_int(l.running));
	lua_setfield(L, -2, "running");
	lua_pushinteger(L, tk_u64_int(l.tasks));
	lua_setfield(L, -2, "tasks");
	lua_pushinteger(L, tk_u64_int(l.last_pid));
	lua_setfield(L, -2, "last_pid");
	return 1;
}

static int ctrl_set(void *ctx, const char *name, size_t len, uint64_t hierarchy, int enabled)
{
	lua_State *L = ctx;

	lua_pushlstring(L, name, len);
	lua_createtable(L, 0, 2);
	lua_pushinteger(L, tk_u64_int(hierarchy));
	lua_setfield(L, -2, "hierarchy");
	lua_pushboolean(L, enabled);
	lua_setfield(L, -2, "enabled");
	lua_rawset(L, -3);
	return 0;
}

/* core.proc_cgroups() -> {ctrl = {hierarchy = n, enabled = bool}}
 * (/proc/cgroups; hierarchy 0 is v2) | nil, msg, errno */
static int l_proc_cgroups(lua_State *L)
{
	int r;

	tk_check_nargs(L, 0);
	lua_newtable(L);
	r = tk_proc_cgroups_read(ctrl_set, L);
	if (r < 0)
		return tk_push_error(L, "/proc/cgroups", r);
	return 1;
}

/* core.kernel_release() -> "6.1.0-..." | nil, msg, errno */
static int l_kernel_release(lua_State *L)
{
	char rel[256];
	int r;

	tk_check_nargs(L, 0);
	r = tk_kernel_release(rel, sizeof rel);
	if (r < 0)
		return tk_push_error(L, "uname", r);
	lua_pushstring(L, rel);
	return 1;
}

static int readable_push(lua_State *L, const char *path, int r)
{
	tk_check_nargs(L, 0);
	if (r < 0)
		return tk_push_error(L, path, r);
	lua_pushboolean(L, 1);
	return 1;
}

/* core.btf_readable(), core.psi_readable(), core.proc_readable() -> true
 * | nil, msg, errno: /sys/kernel/btf/vmlinux opens, /proc/pressure/cpu
 * reads, /proc/self/stat reads (and is not empty). */
static int l_btf_readable(lua_State *L)
{
	return readable_push(L, "/sys/kernel/btf/vmlinux", tk_btf_readable());
}

static int l_psi_readable(lua_State *L)
{
	return readable_push(L, "/proc/pressure/cpu", tk_psi_readable());
}

static int l_proc_readable(lua_State *L)
{
	return readable_push(L, "/proc/self/stat", tk_proc_readable());
}

/* core.cgroup_mounts() -> {v2 = path|nil, v2_root = root|nil,
 * v1 = {ctrl = path}} | nil, "cgroup: /proc/self/mountinfo: ...", errno */
static int l_cgroup_mounts(lua_State *L)
{
	struct tk_cgroup_mounts m;
	int r;

	tk_check_nargs(L, 0);
	r = tk_cgroup_mounts_read(&m);
	if (r < 0)
		return tk_push_error(L, "cgroup: /proc/self/mountinfo", r);
	lua_createtable(L, 0, 3);
	lua_createtable(L, 0, (int)m.nv1);
	for (size_t i = 0; i < m.nv1; i++) {
		lua_pushstring(L, m.v1[i].point);
		lua_setfield(L, -2, m.v1[i].ctrl);
	}
	lua_setfield(L, -2, "v1");
	if (m.v2 != NULL) {
		lua_pushstring(L, m.v2);
		lua_setfield(L, -2, "v2");
		lua_pushstring(L, m.v2_root);
		lua_setfield(L, -2, "v2_root");
	}
	tk_cgroup_mounts_free(&m);
	return 1;
}

/* core.proc_hidepid() -> the hidepid= value of the proc mount at /proc,
 * false when it has none | nil, msg, errno */
static int l_proc_hidepid(lua_State *L)
{
	char value[64];
	int r;

	tk_check_nargs(L, 0);
	r = tk_proc_hidepid(value, sizeof value);
	if (r < 0)
		return tk_push_error(L, "/proc/self/mountinfo", r);
	if (r == 0)
		lua_pushboolean(L, 0);
	else
		lua_pushstring(L, value);
	return 1;
}

/* A pid argument: a positive integer, or "self" (0) where self is allowed. */
static pid_t pid_arg(lua_State *L, int idx, int self)
{
	lua_Integer pid;

	if (self && lua_type(L, idx) == LUA_TSTRING && strcmp(lua_tostring(L, idx), "self") == 0)
		return 0;
	if (!lua_isinteger(L, idx))
		luaL_argerror(L, idx, lua_pushfstring(L, "pid%s expected, got %s", self ? " or \"self\"" : "",
		                                      luaL_typename(L, idx)));
	pid = lua_tointeger(L, idx);
	luaL_argcheck(L, pid > 0 && pid <= 0x7fffffff, idx, "pid out of range");
	return (pid_t)pid;
}

/* core.proc_cgroup(pid|"self") -> the "0::" path of /proc/<pid>/cgroup,
 * false when the process is in no cgroup2 hierarchy | nil,
 * "/proc/<pid>/cgroup: ...", errno (ENOENT: no such process) */
static int l_proc_cgroup(lua_State *L)
{
	pid_t pid = pid_arg(L, 1, 1);
	char *path, name[40];
	int r;

	tk_check_nargs(L, 1);
	path = lua_newuserdatauv(L, 4096, 0);
	r = tk_proc_cgroup2_read(pid, path, 4096);
	if (r < 0) {
		if (pid == 0)
			snprintf(name, sizeof name, "/proc/self/cgroup");
		else
			snprintf(name, sizeof name, "/proc/%d/cgroup", (int)pid);
		return tk_push_error(L, name, r);
	}
	if (r == 0)
		lua_pushboolean(L, 0);
	else
		lua_pushstring(L, path);
	return 1;
}

static int pid_append(void *ctx, uint32_t pid)
{
	lua_State *L = ctx;

	lua_pushinteger(L, (lua_Integer)pid);
	lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
	return 0;
}

/* core.task_children(tid) -> {pid...}: the children of this process's
 * thread tid (/proc/self/task/<tid>/children) | nil, msg, errno */
static int l_task_children(lua_State *L)
{
	pid_t tid = pid_arg(L, 1, 0);
	char name[48];
	int r;

	tk_check_nargs(L, 1);
	lua_newtable(L);
	r = tk_task_children(tid, pid_append, L);
	if (r < 0) {
		snprintf(name, sizeof name, "/proc/self/task/%d/children", (int)tid);
		return tk_push_error(L, name, r);
	}
	return 1;
}

/* core.child_exited() -> pid | false: a child of this process that has
 * exited and is not yet reaped (left so), false when none | nil, msg, errno */
static int l_child_exited(lua_State *L)
{
	int r;

	tk_check_nargs(L, 0);
	r = tk_child_exited();
	if (r < 0)
		return tk_push_error(L, "waitid", r);
	if (r == 0)
		lua_pushboolean(L, 0);
	else
		lua_pushinteger(L, r);
	return 1;
}

void tk_host_open_lib(lua_State *L)
{
	static const luaL_Reg funcs[] = {
		{ "loadavg", l_loadavg },
		{ "proc_cgroups", l_proc_cgroups },
		{ "kernel_release", l_kernel_release },
		{ "btf_readable", l_btf_readable },
		{ "psi_readable", l_psi_readable },
		{ "proc_readable", l_proc_readable },
		{ "cgroup_mounts", l_cgroup_mounts },
		{ "proc_hidepid", l_proc_hidepid },
		{ "proc_cgroup", l_proc_cgroup },
		{ "task_children", l_task_children },
		{ "child_exited", l_child_exited },
		{ NULL, NULL },
	};
	luaL_setfuncs(L, funcs, 0);
}
