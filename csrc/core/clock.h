/* The clocks: nanoseconds of any clock, CLOCK_MONOTONIC in milliseconds,
 * and the deadlines timeouts become. */
#ifndef TAKANA_CLOCK_H
#define TAKANA_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Timeouts are accepted up to a year. poll and epoll_wait take an int of
 * milliseconds (24.8 days at most), so longer waits go in slices towards a
 * CLOCK_MONOTONIC deadline instead of wrapping to a negative, endless one. */
#define TK_TIMEOUT_MAX_S (86400.0 * 365)
int64_t tk_monotonic_ms(void);
/* The deadline of a timeout that starts now: -1 (none) when timeout_ms < 0,
 * else tk_monotonic_ms() + timeout_ms. */
int64_t tk_deadline_ms(int64_t timeout_ms);
/* The next poll timeout: -1 for forever (timeout_ms < 0), else the time left
 * to deadline_ms (0 once past it), at most INT32_MAX. */
int tk_timeout_slice(int64_t timeout_ms, int64_t deadline_ms);

uint64_t tk_clock_ns(clockid_t clock);
uint64_t tk_boottime_ns(void);
/* CLOCK_REALTIME minus CLOCK_BOOTTIME now: what turns a boottime stamp
 * (events, snapshots, start times) into wall-clock time. Both clocks run
 * through suspend, so it moves only when the wall clock is set or slewed;
 * it includes our time namespace's boottime offset, as our stamps do. */
int64_t tk_realtime_offset_ns(void);

#endif
