/* timerfds on CLOCK_MONOTONIC: the C core behind takana.timer. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "timer.h"

int tk_timer_open(void)
{
	int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static struct timespec ns_to_ts(uint64_t ns)
{
	struct timespec ts;

	ts.tv_sec = (time_t)(ns / 1000000000u);
	ts.tv_nsec = (long)(ns % 1000000000u);
	return ts;
}

int tk_timer_set(int fd, uint64_t after_ns, uint64_t every_ns)
{
	struct itimerspec its;

	its.it_value = ns_to_ts(after_ns);
	its.it_interval = ns_to_ts(every_ns);
	return timerfd_settime(fd, 0, &its, NULL) < 0 ? -errno : 0;
}

int tk_timer_get(int fd, uint64_t *next_ns, uint64_t *every_ns)
{
	struct itimerspec its;

	if (timerfd_gettime(fd, &its) < 0)
		return -errno;
	*next_ns = (uint64_t)its.it_value.tv_sec * 1000000000u + (uint64_t)its.it_value.tv_nsec;
	*every_ns = (uint64_t)its.it_interval.tv_sec * 1000000000u + (uint64_t)its.it_interval.tv_nsec;
	return 0;
}

int64_t tk_timer_read(int fd)
{
	uint64_t count;
	ssize_t n;

	do
		n = read(fd, &count, sizeof count);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN ? 0 : -errno;
	if (n != (ssize_t)sizeof count)
		return -EIO;
	return count > INT64_MAX ? INT64_MAX : (int64_t)count;
}
