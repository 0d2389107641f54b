/* The floor under tree:stat() (bench/cgroup.lua): the same directories held
 * open, and the same files of each opened, read with one pread and closed,
 * with no parsing and no Lua. One warm pass, then one timed pass. With -k,
 * the files present are opened once and kept, and each pass is a pread on
 * each (an absent file is tried again each pass): what tree:stat() asks of
 * the kernel when its budget lets it keep them.
 *
 * usage: cgroup_floor [-k] FILE,FILE,... DIR...
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

/* kept: NULL, or ndirs * nfiles descriptors (-1: not open), kept open. */
static void pass(const int *dirs, int ndirs, char **files, int nfiles, int *kept, long *read_n,
                 long *absent)
{
	char buf[8192];

	*read_n = *absent = 0;
	for (int d = 0; d < ndirs; d++) {
		for (int f = 0; f < nfiles; f++) {
			int fd = kept != NULL ? kept[d * nfiles + f] : -1;
			if (fd < 0)
				fd = openat(dirs[d], files[f], O_RDONLY | O_CLOEXEC);
			if (fd < 0) {
				(*absent)++;
				continue;
			}
			if (pread(fd, buf, sizeof buf, 0) >= 0)
				(*read_n)++;
			if (kept != NULL)
				kept[d * nfiles + f] = fd;
			else
				close(fd);
		}
	}
}

int main(int argc, char **argv)
{
	char *files[64], *list, *tok, *save = NULL;
	int nfiles = 0, ndirs, *dirs, *kept = NULL, keep = 0;
	long read_n, absent;
	long long t0, t1;

	if (argc > 1 && strcmp(argv[1], "-k") == 0) {
		keep = 1;
		argv++;
		argc--;
	}
	if (argc < 3) {
		fprintf(stderr, "usage: cgroup_floor [-k] FILE,FILE,... DIR...\n");
		return 2;
	}
	ndirs = argc - 2;
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
	if (keep) {
		kept = malloc((size_t)ndirs * (size_t)nfiles * sizeof *kept);
		if (kept == NULL)
			return 1;
		memset(kept, 0xff, (size_t)ndirs * (size_t)nfiles * sizeof *kept);
	}
	pass(dirs, ndirs, files, nfiles, kept, &read_n, &absent);
	t0 = now_ns();
	pass(dirs, ndirs, files, nfiles, kept, &read_n, &absent);
	t1 = now_ns();
	printf("%lld %ld %ld\n", t1 - t0, read_n, absent);
	return 0;
}
