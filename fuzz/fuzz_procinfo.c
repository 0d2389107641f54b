/* libFuzzer harness: the /proc/<pid> parsers behind takana.process
 * (status, io, smaps_rollup, limits, the cgroup "0::" line), on the same
 * inputs. */
#include <stdlib.h>
#include <string.h>

#include "procinfo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size ? size : 1);
	struct tk_status st;
	struct tk_io io;
	struct tk_memfull m;
	struct tk_rlim lim[TK_NLIMITS];
	const char *path;
	size_t plen;
	int n;

	if (buf == NULL)
		return 0;
	memcpy(buf, data, size);
	tk_status_parse(buf, size, &st);
	tk_io_parse(buf, size, &io);
	tk_smaps_rollup_parse(buf, size, &m);
	if (tk_limits_parse(buf, size, lim, &n) == 0 && (n < 1 || n > TK_NLIMITS))
		abort();
	/* The path lies within the input. */
	if (tk_cgroup2_path(buf, size, &path, &plen) == 0 &&
	    (path < buf || path + plen > buf + size))
		abort();
	free(buf);
	return 0;
}
