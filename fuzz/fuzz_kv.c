/* libFuzzer harness: the cgroup flat-keyed ("key value") parser, the
 * pressure line parser and the whole pressure file's (pressure.c), on the
 * same inputs. */
#include <stdlib.h>
#include <string.h>

#include "cgroup_parse.h"
#include "pressure.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct span {
	const char *start, *end;
	size_t pairs;
};

static void check_pair(void *ctx, const char *key, size_t klen, const char *val, size_t vlen)
{
	struct span *s = ctx;

	/* Every key and value lies within the input; keys are never empty. */
	if (klen == 0 || key < s->start || key + klen > s->end || val < s->start || val + vlen > s->end)
		abort();
	s->pairs++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size ? size : 1);
	struct tk_psi_line line;
	struct tk_pressure pressure;
	struct span span;

	if (buf == NULL)
		return 0;
	memcpy(buf, data, size);
	span.start = buf;
	span.end = buf + size;
	span.pairs = 0;
	tk_kv_parse(buf, size, check_pair, &span);
	tk_psi_parse_line(buf, size, &line);
	/* A file parsed has its "some" line; averages are never negative. */
	if (tk_pressure_parse(buf, size, &pressure) == 0 &&
	    (!pressure.have_some || pressure.some.avg10 < 0 || pressure.some.full))
		abort();
	free(buf);
	return 0;
}
