/* The host's own small files, each read and parsed here once: the Lua side
 * asks for the answers (takana.probe, snapshot{backend = "cheapest"},
 * cgroup:why), the BPF tiers for the task count. */
#define _GNU_SOURCE
#include "host.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "util.h"

/* "0.52": the integer and two decimals as hundredths. */
static const char *load_centi(const char *p, const char *end, uint64_t *out)
{
	uint64_t whole, frac;
	const char *q = tk_parse_u64(p, end, UINT64_MAX / 1000, &whole);

	if (q == NULL || q >= end || *q != '.' || end - q < 3)
		return NULL;
	if (q[1] < '0' || q[1] > '9' || q[2] < '0' || q[2] > '9')
		return NULL;
	frac = (uint64_t)(q[1] - '0') * 10 + (uint64_t)(q[2] - '0');
	*out = whole * 100 + frac;
	return q + 3;
}

int tk_loadavg_parse(const char *buf, size_t len, struct tk_loadavg *out)
{
	const char *p = buf, *end = buf + len;
	struct tk_loadavg l;

	for (int i = 0; i < 3; i++) {
		p = load_centi(p, end, &l.load_centi[i]);
		if (p == NULL || p >= end || *p != ' ')
			return -EBADMSG;
		p++;
	}
	p = tk_parse_u64(p, end, UINT64_MAX, &l.running);
	if (p == NULL || p >= end || *p != '/')
		return -EBADMSG;
	p = tk_parse_u64(p + 1, end, UINT64_MAX, &l.tasks);
	if (p == NULL || p >= end || *p != ' ')
		return -EBADMSG;
	p = tk_parse_u64(p + 1, end, UINT64_MAX, &l.last_pid);
	if (p == NULL)
		return -EBADMSG;
	*out = l;
	return 0;
}

int tk_loadavg_read(struct tk_loadavg *out)
{
	char buf[128];
	ssize_t n = tk_read_small(AT_FDCWD, "/proc/loadavg", buf, sizeof buf);

	if (n < 0)
		return (int)n;
	return tk_loadavg_parse(buf, (size_t)n, out);
}

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r';
}

/* Skips the blanks at p (at least one): NULL when there is none. */
static const char *blanks(const char *p, const char *end)
{
	const char *q = p;

	while (q < end && is_space(*q))
		q++;
	return q > p ? q : NULL;
}

int tk_proc_cgroups_parse(const char *buf, size_t len, tk_ctrl_cb cb, void *ctx)
{
	const char *p = buf, *end = buf + len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end, *name = p, *q = p, *name_end;
		uint64_t hier, count, enabled;

		while (q < le && !is_space(*q))
			q++;
		name_end = q;
		if (q > name && (q = blanks(q, le)) != NULL &&
		    (q = tk_parse_u64(q, le, UINT64_MAX, &hier)) != NULL && (q = blanks(q, le)) != NULL &&
		    (q = tk_parse_u64(q, le, UINT64_MAX, &count)) != NULL &&
		    (q = blanks(q, le)) != NULL &&
		    tk_parse_u64(q, le, UINT64_MAX, &enabled) != NULL) {
			int r = cb(ctx, name, (size_t)(name_end - name), hier, enabled == 1);

			if (r != 0)
				return r;
		}
		p = le + 1;
	}
	return 0;
}

int tk_proc_cgroups_read(tk_ctrl_cb cb, void *ctx)
{
	char *text;
	ssize_t n = tk_read_all(AT_FDCWD, "/proc/cgroups", 1u << 20, &text);
	int r;

	if (n < 0)
		return (int)n;
	r = tk_proc_cgroups_parse(text, (size_t)n, cb, ctx);
	free(text);
	return r;
}

int tk_kernel_release(char *out, size_t cap)
{
	struct utsname uts;

	if (uname(&uts) != 0)
		return -errno;
	if (strlen(uts.release) >= cap)
		return -ENAMETOOLONG;
	memcpy(out, uts.release, strlen(uts.release) + 1);
	return 0;
}

int tk_btf_readable(void)
{
	int fd = open("/sys/kernel/btf/vmlinux", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

/* A read, the way a reader of the file would find it refused: -errno, or
 * the count of bytes read. */
static ssize_t read_some(const char *path)
{
	char buf[64];

	return tk_read_small(AT_FDCWD, path, buf, sizeof buf);
}

int tk_psi_readable(void)
{
	ssize_t n = read_some("/proc/pressure/cpu");

	return n < 0 ? (int)n : 0;
}

/* An empty stat line is no /proc either. */
int tk_proc_readable(void)
{
	ssize_t n = read_some("/proc/self/stat");

	return n < 0 ? (int)n : n > 0 ? 0 : -ENODATA;
}
