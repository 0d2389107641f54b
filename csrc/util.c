#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

ssize_t tk_read_small(int dirfd, const char *path, char *buf, size_t cap)
{
	ssize_t n;
	int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	n = read(fd, buf, cap - 1);
	if (n < 0)
		n = -errno;
	close(fd);
	if (n >= 0)
		buf[n] = '\0';
	return n;
}

void *tk_grow(void *v, size_t *cap, size_t need, size_t elem, size_t first)
{
	size_t n = *cap ? *cap : first;
	void *grown;

	if (need <= *cap)
		return v;
	while (n < need) {
		if (n > SIZE_MAX / 2)
			return NULL;
		n *= 2;
	}
	if (elem == 0 || n > SIZE_MAX / elem)
		return NULL;
	grown = realloc(v, n * elem);
	if (grown == NULL)
		return NULL;
	*cap = n;
	return grown;
}

const char *tk_parse_u64(const char *p, const char *end, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (p >= end || *p < '0' || *p > '9')
		return NULL;
	for (; p < end && *p >= '0' && *p <= '9'; p++) {
		unsigned digit = (unsigned)(*p - '0');
		if (v > (max - digit) / 10)
			return NULL;
		v = v * 10 + digit;
	}
	*out = v;
	return p;
}
