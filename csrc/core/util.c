#include "clock.h"
#include "fork.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

ssize_t tk_read_all(int dirfd, const char *path, size_t max, char **out)
{
	size_t len = 0, cap = 0;
	char *text = NULL, *grown;
	ssize_t n;
	int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC), err = 0;

	*out = NULL;
	if (fd < 0)
		return -errno;
	while (len < max) {
		if (len + 1 >= cap) {
			grown = tk_grow(text, &cap, len + 4096, 1, 4096);
			if (grown == NULL) {
				err = -ENOMEM;
				break;
			}
			text = grown;
		}
		n = read(fd, text + len, cap - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			err = -errno;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	if (err == 0 && text == NULL && (text = malloc(1)) == NULL)
		err = -ENOMEM;
	if (err < 0) {
		free(text);
		return err;
	}
	if (len > max)
		len = max;
	text[len] = '\0';
	*out = text;
	return (ssize_t)len;
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

static int timens_fail(int err, const char *what, char *why, size_t why_len)
{
	snprintf(why, why_len, "our time namespace's clock offsets: %s: %s", what, strerror(err));
	return -err;
}

static int timens_read(struct tk_timens *out, char *why, size_t why_len)
{
	static const char *const self = "/proc/self/ns/time", *const kids = "/proc/self/ns/time_for_children";
	struct stat own, before, after;
	char buf[256] = "", name[16];
	long long sec, nsec;
	ssize_t n;

	memset(out, 0, sizeof *out);
	if (stat(self, &own) < 0)
		return errno == ENOENT ? 0 : timens_fail(errno, self, why, why_len);
	if (stat(kids, &before) < 0)
		return timens_fail(errno, kids, why, why_len);
	/* timens_offsets shows the namespace our children get, which is ours
	 * except between an unshare(CLONE_NEWTIME) and the next exec; what we
	 * are in then has no file to read. */
	if (own.st_dev != before.st_dev || own.st_ino != before.st_ino) {
		snprintf(why, why_len, "our time namespace's clock offsets: this process unshared "
		         "its time namespace (CLONE_NEWTIME) without an exec since, so only its "
		         "children's can be read; load takana before unsharing, or exec");
		return -ENOTSUP;
	}
	n = tk_read_small(AT_FDCWD, "/proc/self/timens_offsets", buf, sizeof buf);
	if (n < 0)
		return timens_fail((int)-n, "/proc/self/timens_offsets", why, why_len);
	/* An unshare by another thread meanwhile would have shown its own. */
	if (stat(kids, &after) < 0)
		return timens_fail(errno, kids, why, why_len);
	if (after.st_ino != before.st_ino)
		return timens_fail(EAGAIN, "the namespace changed while it was read", why, why_len);
	/* "monotonic <s> <ns>", then "boottime <s> <ns>"; ns in [0, 1e9). */
	for (const char *line = buf; *line != '\0';) {
		const char *nl = strchr(line, '\n');

		if (sscanf(line, "%15s %lld %lld", name, &sec, &nsec) != 3)
			return timens_fail(EBADMSG, "/proc/self/timens_offsets", why, why_len);
		if (strcmp(name, "monotonic") == 0)
			out->monotonic_ns = (int64_t)sec * 1000000000 + nsec;
		else if (strcmp(name, "boottime") == 0)
			out->boottime_ns = (int64_t)sec * 1000000000 + nsec;
		if (nl == NULL)
			break;
		line = nl + 1;
	}
	return 0;
}

/* The namespace can change only across fork() or exec, each of which starts
 * afresh here (a new fork generation; a new process image). Readers race
 * only with writers of the same values: the stamp (generation + 1) is
 * stored after them. */
static atomic_uint timens_stamp;
static _Atomic int64_t timens_monotonic, timens_boottime;

int tk_timens_offsets(struct tk_timens *out, char *why, size_t why_len)
{
	unsigned gen = tk_fork_generation() + 1;
	int err;

	if (atomic_load(&timens_stamp) == gen) {
		out->monotonic_ns = atomic_load(&timens_monotonic);
		out->boottime_ns = atomic_load(&timens_boottime);
		return 0;
	}
	err = timens_read(out, why, why_len);
	if (err < 0)
		return err;
	atomic_store(&timens_monotonic, out->monotonic_ns);
	atomic_store(&timens_boottime, out->boottime_ns);
	atomic_store(&timens_stamp, gen);
	return 0;
}

/* Learnt at load, our time namespace's offsets stay known after an
 * unshare(CLONE_NEWTIME), which hides them until the next exec. A failure
 * is reported by the first use that needs them. */
__attribute__((constructor)) static void timens_learn(void)
{
	struct tk_timens offsets;
	char why[160];

	(void)tk_timens_offsets(&offsets, why, sizeof why);
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
