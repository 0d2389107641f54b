#include "util.h"

#include <stdlib.h>

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
