/* The /proc/<pid>/stat parser (proc_stat.c). */
#ifndef TAKANA_PROC_STAT_H
#define TAKANA_PROC_STAT_H

#include <stddef.h>
#include <stdint.h>

#include "takana_record.h"

struct tk_units {
	uint64_t ns_per_tick;   /* 1e9 / sysconf(_SC_CLK_TCK) */
	uint64_t page_size;
};

/* Parses one /proc/<pid>/stat line. On success fills *out completely (uid is
 * left 0: it does not come from the text) and returns 0; on malformed input
 * returns -EBADMSG, for a dead task (state X) -ESRCH, and leaves *out
 * untouched. Pure: reads only buf[0..len). */
int tk_stat_parse(const char *buf, size_t len, const struct tk_units *units,
                  struct tk_record *out);

void tk_units_init(struct tk_units *units);

#endif
