/* libFuzzer harness: the /proc/<pid>/stat parser. On error the record must
 * be untouched; on success every field comes from inside the buffer. */
#include <stdlib.h>
#include <string.h>

#include "proc_stat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct tk_units units = { 10000000, 4096 };
	struct tk_record rec, sentinel;
	/* A copy of exactly size bytes: ASan catches any read past it. */
	char *buf = malloc(size ? size : 1);
	int err;

	if (buf == NULL)
		return 0;
	memcpy(buf, data, size);
	memset(&sentinel, 0xa5, sizeof sentinel);
	rec = sentinel;
	err = tk_stat_parse(buf, size, &units, &rec);
	if (err < 0 && memcmp(&rec, &sentinel, sizeof rec) != 0)
		abort();        /* a failed parse filled the record partially */
	if (err == 0 && (rec.comm_len > sizeof rec.comm || rec.state == 0))
		abort();
	free(buf);
	return 0;
}
