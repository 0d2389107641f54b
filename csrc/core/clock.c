/* The clocks: nanoseconds of any clock (CLOCK_BOOTTIME stamps records and
 * events), and CLOCK_MONOTONIC in milliseconds, the clock of every timeout. */
#define _GNU_SOURCE
#include <stdint.h>
#include <time.h>

#include "clock.h"

int64_t tk_monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t tk_deadline_ms(int64_t timeout_ms)
{
	return timeout_ms < 0 ? -1 : tk_monotonic_ms() + timeout_ms;
}

int tk_timeout_slice(int64_t timeout_ms, int64_t deadline_ms)
{
	int64_t left;

	if (timeout_ms < 0)
		return -1;
	if (timeout_ms == 0)
		return 0;
	left = deadline_ms - tk_monotonic_ms();
	if (left <= 0)
		return 0;
	return left > INT32_MAX ? INT32_MAX : (int)left;
}

uint64_t tk_clock_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t tk_boottime_ns(void)
{
	return tk_clock_ns(CLOCK_BOOTTIME);
}

int64_t tk_realtime_offset_ns(void)
{
	/* The boottime read between two realtime reads: the offset is off by
	 * half their distance at most, not by the whole of it. */
	int64_t r1 = (int64_t)tk_clock_ns(CLOCK_REALTIME);
	int64_t b = (int64_t)tk_clock_ns(CLOCK_BOOTTIME);
	int64_t r2 = (int64_t)tk_clock_ns(CLOCK_REALTIME);

	return r1 + (r2 - r1) / 2 - b;
}
