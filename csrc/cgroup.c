/* cgroup v2 files: opened beneath the mount with no way out, read with pread
 * on kept descriptors, and parsed by pure functions (flat-keyed files and
 * pressure lines). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <linux/openat2.h>

#include "cgroup.h"

#define CGROUP2_SUPER_MAGIC 0x63677270

int tk_cg_open(int mount_fd, const char *rel, int *out_fd)
{
	struct open_how how;
	struct statfs sfs;
	long fd;

	memset(&how, 0, sizeof how);
	how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
	how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
	              RESOLVE_NO_XDEV;
	fd = syscall(SYS_openat2, mount_fd, rel, &how, sizeof how);
	if (fd < 0 && errno == ENOSYS) {
		/* Before 5.6: the caller refused "..", absolute paths and empty
		 * components lexically; refuse symlinks here and check below
		 * that we are still on cgroup2. */
		fd = openat(mount_fd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	}
	if (fd < 0)
		return -errno;
	if (fstatfs((int)fd, &sfs) < 0 || sfs.f_type != CGROUP2_SUPER_MAGIC) {
		close((int)fd);
		return -EXDEV;
	}
	*out_fd = (int)fd;
	return 0;
}

int tk_cg_read(int fd, char *buf, size_t cap, size_t *len)
{
	ssize_t n = pread(fd, buf, cap, 0);

	*len = 0;
	if (n < 0)
		return errno ? -errno : -EIO;
	if ((size_t)n == cap)
		return -EFBIG;
	*len = (size_t)n;
	return 0;
}

int tk_cg_write(int dirfd, const char *file, const char *value, size_t len)
{
	int fd = openat(dirfd, file, O_WRONLY | O_CLOEXEC);
	ssize_t n;
	int err = 0;

	if (fd < 0)
		return -errno;
	n = write(fd, value, len);
	if (n < 0)
		err = -errno;
	else if ((size_t)n != len)
		err = -EIO;
	close(fd);
	return err;
}

/* Lines of "key value": one space, value without spaces, no empty key. */
int tk_kv_parse(const char *buf, size_t len, tk_kv_cb cb, void *ctx)
{
	const char *p = buf, *end = buf + len;

	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		const char *sp;
		if (eol == NULL)
			eol = end;
		sp = memchr(p, ' ', (size_t)(eol - p));
		if (sp == NULL || sp == p || sp + 1 >= eol || memchr(sp + 1, ' ', (size_t)(eol - sp - 1)))
			return -EBADMSG;
		cb(ctx, p, (size_t)(sp - p), sp + 1, (size_t)(eol - sp - 1));
		p = eol + 1;
	}
	return 0;
}

static int parse_fixed2(const char **pp, const char *end, double *out)
{
	const char *p = *pp;
	double v = 0, scale = 1;
	int digits = 0, frac = 0;

	while (p < end && ((*p >= '0' && *p <= '9') || (*p == '.' && !frac))) {
		if (*p == '.') {
			frac = 1;
		} else {
			v = v * 10 + (*p - '0');
			if (frac)
				scale *= 10;
			digits++;
		}
		p++;
		if (digits > 18)
			return -EBADMSG;
	}
	if (digits == 0)
		return -EBADMSG;
	*out = v / scale;
	*pp = p;
	return 0;
}

static int expect_word(const char **pp, const char *end, const char *w)
{
	size_t n = strlen(w);
	if ((size_t)(end - *pp) < n || memcmp(*pp, w, n) != 0)
		return -EBADMSG;
	*pp += n;
	return 0;
}

/* "some avg10=0.00 avg60=0.00 avg300=0.00 total=123" (or "full ..."). */
int tk_psi_parse_line(const char *line, size_t len, struct tk_psi_line *out)
{
	const char *p = line, *end = line + len;
	struct tk_psi_line r;
	uint64_t total = 0;
	int digits = 0;

	if (len > 0 && line[len - 1] == '\n')
		end--;
	if (expect_word(&p, end, "some ") == 0)
		r.full = 0;
	else if (expect_word(&p, end, "full ") == 0)
		r.full = 1;
	else
		return -EBADMSG;
	if (expect_word(&p, end, "avg10=") < 0 || parse_fixed2(&p, end, &r.avg10) < 0 ||
	    expect_word(&p, end, " avg60=") < 0 || parse_fixed2(&p, end, &r.avg60) < 0 ||
	    expect_word(&p, end, " avg300=") < 0 || parse_fixed2(&p, end, &r.avg300) < 0 ||
	    expect_word(&p, end, " total=") < 0)
		return -EBADMSG;
	while (p < end && *p >= '0' && *p <= '9') {
		unsigned d = (unsigned)(*p - '0');
		if (total > (UINT64_MAX - d) / 10)
			return -EBADMSG;
		total = total * 10 + d;
		p++;
		digits++;
	}
	if (digits == 0 || p != end)
		return -EBADMSG;
	r.total_us = total;
	*out = r;
	return 0;
}
