/* The one wait for a descriptor, in slices towards a deadline: poll takes
 * an int of milliseconds, timeouts go up to a year (clock.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdint.h>

#include "clock.h"
#include "wait.h"

/* poll's timeout: -1 without a deadline, else the time left (0 once past),
 * at most INT32_MAX. */
static int slice(int64_t deadline_ms)
{
	int64_t left;

	if (deadline_ms < 0)
		return -1;
	left = deadline_ms - tk_monotonic_ms();
	if (left <= 0)
		return 0;
	return left > INT32_MAX ? INT32_MAX : (int)left;
}

int tk_wait_fd(int fd, short events, int64_t deadline_ms)
{
	struct pollfd p = { .fd = fd, .events = events };

	for (;;) {
		int r = poll(&p, 1, slice(deadline_ms));
		if (r > 0)
			return p.revents;
		if (r < 0 && errno != EINTR)
			return -errno;
		if (deadline_ms >= 0 && tk_monotonic_ms() >= deadline_ms)
			return 0;
	}
}
