/* Pressure stall information: the host's and cgroups' pressure files and
 * the kernel's PSI triggers, the C core behind takana.pressure. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "pressure.h"
#include "wait.h"

static const char *const names[TK_PRESSURE_COUNT] = { "cpu", "memory", "io" };

const char *tk_pressure_name(int resource)
{
	return resource >= 0 && resource < TK_PRESSURE_COUNT ? names[resource] : NULL;
}

int tk_pressure_parse(const char *buf, size_t len, struct tk_pressure *out)
{
	const char *p = buf, *end = buf + len;
	struct tk_pressure r;

	memset(&r, 0, sizeof r);
	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		struct tk_psi_line line;

		if (eol == NULL)
			eol = end;
		if (tk_psi_parse_line(p, (size_t)(eol - p), &line) < 0)
			return -EBADMSG;
		if (line.full) {
			r.full = line;
			r.have_full = 1;
		} else {
			r.some = line;
			r.have_some = 1;
		}
		p = eol + 1;
	}
	if (!r.have_some)
		return -EBADMSG;
	*out = r;
	return 0;
}

/* The host's file, or the cgroup's beneath dirfd without following a
 * symlink: a cgroup directory is the caller's, its entries the kernel's. */
static int pressure_open(int dirfd, int resource, int flags)
{
	char path[32];
	int fd;

	if (tk_pressure_name(resource) == NULL)
		return -EINVAL;
	if (dirfd < 0) {
		snprintf(path, sizeof path, "/proc/pressure/%s", names[resource]);
		fd = open(path, flags | O_CLOEXEC);
	} else {
		snprintf(path, sizeof path, "%s.pressure", names[resource]);
		fd = openat(dirfd, path, flags | O_CLOEXEC | O_NOFOLLOW);
	}
	return fd < 0 ? -errno : fd;
}

int tk_pressure_read(int dirfd, int resource, struct tk_pressure *out)
{
	/* Two lines of at most ~90 bytes; room to tell a longer file. */
	char buf[512];
	ssize_t n;
	int fd = pressure_open(dirfd, resource, O_RDONLY);

	if (fd < 0)
		return fd;
	do
		n = read(fd, buf, sizeof buf);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		n = -errno;
	close(fd);
	if (n < 0)
		return (int)n;
	if ((size_t)n == sizeof buf)
		return -EBADMSG;
	return tk_pressure_parse(buf, (size_t)n, out);
}

int tk_pressure_trigger_open(int dirfd, int resource, int full, uint64_t stall_us,
                             uint64_t window_us)
{
	char text[64];
	int len, fd, err;
	ssize_t n;

	len = snprintf(text, sizeof text, "%s %llu %llu", full ? "full" : "some",
	               (unsigned long long)stall_us, (unsigned long long)window_us);
	if (len < 0 || (size_t)len >= sizeof text)
		return -EINVAL;
	fd = pressure_open(dirfd, resource, O_RDWR | O_NONBLOCK);
	if (fd < 0)
		return fd;
	/* The NUL goes too: the kernel reads the buffer as a C string. */
	do
		n = write(fd, text, (size_t)len + 1);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

int tk_pressure_trigger_wait(int fd, int64_t deadline_ms)
{
	int r = tk_wait_fd(fd, POLLPRI, deadline_ms);
	char c;

	if (r < 0)
		return r;
	if (r & (POLLERR | POLLNVAL)) {
		/* The trigger is gone with its file (kernfs: -ENODEV); a read
		 * says why. */
		if (pread(fd, &c, 1, 0) < 0)
			return -errno;
		return -ENODEV;
	}
	return (r & POLLPRI) != 0;
}
