/* The one wait for a descriptor: what pidfd waits, timer and signal reads
 * and pipe reads block in. */
#ifndef TAKANA_WAIT_H
#define TAKANA_WAIT_H

#include <stdint.h>

/* Waits until fd has one of events (POLLIN, POLLPRI, POLLOUT) or the
 * CLOCK_MONOTONIC deadline_ms passes (tk_deadline_ms; -1: none): poll's
 * revents (> 0), 0 at the deadline, or -errno. An EINTR waits again towards
 * the same deadline; a deadline already past still polls once. */
int tk_wait_fd(int fd, short events, int64_t deadline_ms);

#endif
