/* Baselines in plain C for the benches, loaded into the same Lua process as
 * takana so contender and baseline alternate within one run. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>

#include "core.h"

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
		{ "now_ns", l_now_ns },
		{ "fork_exec_wait", l_fork_exec_wait },
		{ "posix_spawn_wait", l_posix_spawn_wait },
		{ "kill0_loop", l_kill0_loop },
		{ "sum_stat", l_sum_stat },
		{ NULL, NULL },
	};
	luaL_newlib(L, funcs);
	return 1;
}
