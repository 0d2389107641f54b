/* The calling process's own settings (self.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "self.h"

int tk_subreaper_get(int *on)
{
	int v = 0;

	if (prctl(PR_GET_CHILD_SUBREAPER, &v, 0, 0, 0) < 0)
		return -errno;
	*on = v != 0;
	return 0;
}

int tk_subreaper_set(int on)
{
	return prctl(PR_SET_CHILD_SUBREAPER, (unsigned long)(on != 0), 0, 0, 0) < 0 ? -errno : 0;
}

/* The flag belongs to the process: counted, not per caller. */
static struct {
	int users;
	int ours;
} subreaper_holds;

int tk_subreaper_hold(int on, const char **step)
{
	int was = 0, r;

	if (!on) {
		if (subreaper_holds.users > 0 && --subreaper_holds.users == 0 && subreaper_holds.ours) {
			(void)tk_subreaper_set(0);
			subreaper_holds.ours = 0;
		}
		return 0;
	}
	if (subreaper_holds.users == 0) {
		*step = "PR_GET_CHILD_SUBREAPER";
		r = tk_subreaper_get(&was);
		if (r < 0)
			return r;
		*step = "PR_SET_CHILD_SUBREAPER";
		if (!was && (r = tk_subreaper_set(1)) < 0)
			return r;
		subreaper_holds.ours = !was;
	}
	subreaper_holds.users++;
	return 0;
}

int tk_nofile_get(rlim_t *soft, rlim_t *hard)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -errno;
	*soft = rl.rlim_cur;
	*hard = rl.rlim_max;
	return 0;
}

/* The soft limit before the first hold, put back by the last. */
static struct {
	int users, ours;
	rlim_t before;
} nofile_holds;

int tk_nofile_hold(int on, rlim_t *before, rlim_t *hard, const char **step)
{
	struct rlimit rl;

	*step = "getrlimit";
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -errno;
	*hard = rl.rlim_max;
	if (!on) {
		if (nofile_holds.users > 0 && --nofile_holds.users == 0 && nofile_holds.ours) {
			rl.rlim_cur = nofile_holds.before;
			(void)setrlimit(RLIMIT_NOFILE, &rl);
			nofile_holds.ours = 0;
		}
		*before = nofile_holds.before;
		return 0;
	}
	if (nofile_holds.users == 0) {
		rlim_t want = rl.rlim_max < ((rlim_t)1 << 20) ? rl.rlim_max : ((rlim_t)1 << 20);
		nofile_holds.before = rl.rlim_cur;
		nofile_holds.ours = 0;
		if (want > rl.rlim_cur) {
			struct rlimit up = { want, rl.rlim_max };
			*step = "setrlimit";
			if (setrlimit(RLIMIT_NOFILE, &up) < 0)
				return -errno;
			nofile_holds.ours = 1;
		}
	}
	nofile_holds.users++;
	*before = nofile_holds.before;
	return 0;
}

int tk_proc_is_ours(void)
{
	char buf[32];
	ssize_t n = readlink("/proc/self", buf, sizeof buf - 1);

	if (n <= 0)
		return 0;
	buf[n] = '\0';
	return strtol(buf, NULL, 10) == (long)getpid();
}
