/* timerfds: the C core behind takana.timer. */
#ifndef TAKANA_TIMER_H
#define TAKANA_TIMER_H

#include <stdint.h>

/* timerfds on CLOCK_MONOTONIC. after_ns 0 disarms (callers wanting "now"
 * pass 1); every_ns 0 makes a one-shot. */
int tk_timer_open(void);
int tk_timer_set(int fd, uint64_t after_ns, uint64_t every_ns);
int tk_timer_get(int fd, uint64_t *next_ns, uint64_t *every_ns);
/* Expirations since the last read or set: a count, 0 when none, or -errno. */
int64_t tk_timer_read(int fd);

#endif
