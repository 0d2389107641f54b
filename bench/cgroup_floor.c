/* The floor under tree:stat() (bench/cgroup.lua): the same directories held
 * open, and the same files of each opened, read with one pread and closed,
 * with no parsing and no Lua. One warm pass, then one timed pass.
 *
 * usage: cgroup_floor FILE,FILE,... DIR...
 * prints: <ns of the timed pass> <files read> <files absent> */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void pass(const int *dirs, int ndirs, char **files, int nfiles, long *read_n, long *absent)
{
	char buf[8192];

	*read_n = *absent = 0;
	for (int d = 0; d < ndirs; d++) {
		for (int f = 0; f < nfiles; f++) {
			int fd = openat(dirs[d], files[f], O_RDONLY | O_CLOEXEC);
			if (fd < 0) {
				(*absent)++;
				continue;
			}
			if (pread(fd, buf, sizeof buf, 0) >= 0)
				(*read_n)++;
			close(fd);
		}
	}
}

int main(int argc, char **argv)
{
	char *files[64], *list, *tok, *save = NULL;
	int nfiles = 0, ndirs = argc - 2, *dirs;
	long read_n, absent;
	long long t0, t1;

	if (argc < 3) {
		fprintf(stderr, "usage: %s FILE,FILE,... DIR...\n", argv[0]);
		return 2;
	}
	list = argv[1];
	for (tok = strtok_r(list, ",", &save); tok != NULL && nfiles < 64;
	     tok = strtok_r(NULL, ",", &save))
		files[nfiles++] = tok;
	dirs = calloc((size_t)ndirs, sizeof *dirs);
	if (dirs == NULL)
		return 1;
	for (int d = 0; d < ndirs; d++) {
		dirs[d] = open(argv[d + 2], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dirs[d] < 0) {
			perror(argv[d + 2]);
			return 1;
		}
	}
	pass(dirs, ndirs, files, nfiles, &read_n, &absent);
	t0 = now_ns();
	pass(dirs, ndirs, files, nfiles, &read_n, &absent);
	t1 = now_ns();
	printf("%lld %ld %ld\n", t1 - t0, read_n, absent);
	return 0;
}
