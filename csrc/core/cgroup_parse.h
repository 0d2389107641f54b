/* The pure parsers of cgroup v2 files (cgroup_parse.c). */
#ifndef TAKANA_CGROUP_PARSE_H
#define TAKANA_CGROUP_PARSE_H

#include <stddef.h>
#include <stdint.h>

typedef void (*tk_kv_cb)(void *ctx, const char *key, size_t klen,
                         const char *val, size_t vlen);
/* Flat-keyed "key value" lines; -EBADMSG on anything else (pure). */
int tk_kv_parse(const char *buf, size_t len, tk_kv_cb cb, void *ctx);

struct tk_psi_line {
	int full;                 /* 0: "some", 1: "full" */
	double avg10, avg60, avg300;
	uint64_t total_us;
};
/* One pressure line; -EBADMSG on anything else (pure). */
int tk_psi_parse_line(const char *line, size_t len, struct tk_psi_line *out);

#endif
