/* libFuzzer harness: safe_dir's name check and its path walk. The walk
 * runs over a small tree made once in a fresh directory (links of this
 * user's to inside and outside it, a regular file, a loop of links), with
 * the fuzzed path beneath that tree or absolute, and never creates
 * anything (no TK_DIR_CREATE, so no mode is ever set). Invariants: a name
 * the check passes is one plain entry; an opened directory is the one its
 * resolved path names, a path without links, "." or ".." components. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safe_dir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char base[PATH_MAX];

static void tree_remove(void)
{
	static const char *const names[] = { "a/file", "a/up", "in", "out", "loop" };
	int fd = open(base, O_RDONLY | O_DIRECTORY);

	if (fd < 0)
		return;
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		unlinkat(fd, names[i], 0);
	unlinkat(fd, "a/b", AT_REMOVEDIR);
	unlinkat(fd, "a", AT_REMOVEDIR);
	close(fd);
	rmdir(base);
}

static void tree_make(void)
{
	char tmpl[] = "/tmp/takana-fuzz-XXXXXX";
	int fd;

	if (!mkdtemp(tmpl) || !realpath(tmpl, base))
		abort();
	fd = open(base, O_RDONLY | O_DIRECTORY);
	if (fd < 0 || mkdirat(fd, "a", 0755) < 0 || mkdirat(fd, "a/b", 0700) < 0 ||
	    symlinkat("a/b", fd, "in") < 0 || symlinkat("/tmp", fd, "out") < 0 ||
	    symlinkat("loop", fd, "loop") < 0 || symlinkat("../a", fd, "a/up") < 0 ||
	    close(openat(fd, "a/file", O_WRONLY | O_CREAT | O_EXCL, 0600)) < 0)
		abort();
	close(fd);
	atexit(tree_remove);
}

static void check_name(const char *s, size_t len)
{
	if (tk_name_check(s, len) != 0)
		return;
	if (len == 0 || len > NAME_MAX || memchr(s, '/', len) || memchr(s, '\0', len) ||
	    (len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
		abort();
}

static void check_walk(const char *path, int flags)
{
	char resolved[PATH_MAX], why[TK_WHY_LEN], real[PATH_MAX];
	struct stat by_fd, by_path;
	int fd = tk_dir_open(path, flags, 0700, resolved, NULL, why);

	if (fd < 0) {
		if (memchr(why, '\0', sizeof why) == NULL)
			abort();
		return;
	}
	/* The path handed out has no link, "." or ".." in it, and names the
	 * very directory the descriptor holds. */
	if (resolved[0] != '/' || strstr(resolved, "/./") || strstr(resolved, "/../") ||
	    !realpath(resolved, real) || strcmp(real, resolved) != 0)
		abort();
	if (fstat(fd, &by_fd) < 0 || stat(resolved, &by_path) < 0 || !S_ISDIR(by_fd.st_mode) ||
	    by_fd.st_dev != by_path.st_dev || by_fd.st_ino != by_path.st_ino)
		abort();
	close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[PATH_MAX];
	size_t bl;

	if (base[0] == '\0')
		tree_make();
	check_name((const char *)data, size);
	bl = strlen(base);
	if (size == 0 || bl + 1 + size >= sizeof path || memchr(data, '\0', size))
		return 0;
	/* Relative to the tree, or absolute as given. */
	if (data[0] == '/') {
		memcpy(path, data, size);
		path[size] = '\0';
	} else {
		memcpy(path, base, bl);
		path[bl] = '/';
		memcpy(path + bl + 1, data, size);
		path[bl + 1 + size] = '\0';
	}
	check_walk(path, 0);
	check_walk(path, TK_DIR_PRIVATE);
	return 0;
}
