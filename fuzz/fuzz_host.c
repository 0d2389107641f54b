/* libFuzzer harness: the parsers of the host's files the Lua side asks the
 * core about (mountinfo.c: mountinfo, whose mount points any user can
 * choose in a user namespace or through FUSE; host.c: /proc/loadavg and
 * /proc/cgroups; procinfo.c: a task's children list), on the same inputs. */
#include <stdlib.h>
#include <string.h>

#include "host.h"
#include "mountinfo.h"
#include "procinfo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct span {
	const char *start, *end;
};

/* Every field is a NUL-terminated string within the (copied) input. */
static int check_mount(void *ctx, const struct tk_mount *m)
{
	const struct span *s = ctx;
	const char *f[4] = { m->root, m->point, m->fstype, m->options };

	for (int i = 0; i < 4; i++) {
		if (f[i] == NULL || f[i] < s->start || f[i] + strlen(f[i]) > s->end)
			abort();
	}
	return 0;
}

static int check_ctrl(void *ctx, const char *name, size_t len, uint64_t hierarchy, int enabled)
{
	const struct span *s = ctx;

	(void)hierarchy;
	if (len == 0 || name < s->start || name + len > s->end || (enabled != 0 && enabled != 1))
		abort();
	return 0;
}

static int count_pid(void *ctx, uint32_t pid)
{
	(void)pid;
	(*(size_t *)ctx)++;
	return 0;
}

/* A fresh copy, NUL-terminated one past size (room for the last line). */
static char *copy(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1);

	if (buf != NULL) {
		memcpy(buf, data, size);
		buf[size] = '\0';
	}
	return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tk_cgroup_mounts m;
	struct tk_loadavg l;
	struct span s;
	char hidepid[16], *buf;
	size_t pids = 0;
	int r;

	if ((buf = copy(data, size)) == NULL)
		return 0;
	s.start = buf;
	s.end = buf + size;
	/* A last line without a newline is parsed from a copy of its own:
	 * its fields lie outside the input, and are not checked. */
	if (size == 0 || buf[size - 1] == '\n')
		tk_mountinfo_parse(buf, size, check_mount, &s);
	free(buf);

	if ((buf = copy(data, size)) == NULL)
		return 0;
	if (tk_cgroup_mounts_parse(buf, size, &m) == 0) {
		if ((m.v2 == NULL) != (m.v2_root == NULL) || m.nv1 > m.v1_cap)
			abort();
		for (size_t i = 0; i < m.nv1; i++) {
			if (m.v1[i].ctrl[0] == '\0' || strchr(m.v1[i].ctrl, ',') != NULL)
				abort();
		}
		tk_cgroup_mounts_free(&m);
	}
	free(buf);

	if ((buf = copy(data, size)) == NULL)
		return 0;
	r = tk_proc_hidepid_parse(buf, size, hidepid, sizeof hidepid);
	if (r == 1 && strlen(hidepid) >= sizeof hidepid)
		abort();
	free(buf);

	if ((buf = copy(data, size)) == NULL)
		return 0;
	s.start = buf;
	s.end = buf + size;
	if (tk_loadavg_parse(buf, size, &l) == 0 && l.load_centi[0] > UINT64_MAX / 10)
		abort();
	tk_proc_cgroups_parse(buf, size, check_ctrl, &s);
	tk_pid_list_parse(buf, size, count_pid, &pids);
	if (pids > size)
		abort();
	free(buf);
	return 0;
}
