/* The pure parsers of cgroup v2 files: flat-keyed files (memory.stat,
 * cpu.stat, ...) and pressure lines (*.pressure). Reached by the fuzzers. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "cgroup_parse.h"
#include "util.h"

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
	uint64_t total;

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
	p = tk_parse_u64(p, end, UINT64_MAX, &total);
	if (p != end)
		return -EBADMSG;
	r.total_us = total;
	*out = r;
	return 0;
}
