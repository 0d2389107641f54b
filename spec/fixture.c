/* Fixture process for specs and benches: takes a name, threads, CPU time,
 * memory, children, then prints "ready <pid> [extra pids]" and waits to be
 * killed. Every fixture dies with its parent (PR_SET_PDEATHSIG) and after
 * --life seconds at most, so a crashed spec leaves nothing behind. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/cn_proc.h>
#include <linux/sched.h>
#include <sys/syscall.h>
#include <linux/connector.h>
#include <linux/netlink.h>
#include <sys/socket.h>

static long burn_ms;
/* "ready" is printed only after every live thread has burned its share,
 * so specs read settled CPU times. */
static pthread_barrier_t burned;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Burns thread CPU time, measured on the thread's own clock. */
static void burn(long ms)
{
	struct timespec ts;
	double until;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	until = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 + (double)ms / 1000.0;
	for (;;) {
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
		if ((double)ts.tv_sec + (double)ts.tv_nsec / 1e9 >= until)
			break;
	}
}

static void *thread_block(void *arg)
{
	(void)arg;
	burn(burn_ms);
	pthread_barrier_wait(&burned);
	for (;;)
		pause();
	return NULL;
}

static void *thread_exit(void *arg)
{
	(void)arg;
	burn(burn_ms);
	return NULL;
}

static void *thread_spin(void *arg)
{
	(void)arg;
	for (;;)
		;
	return NULL;
}

/* --thread-storm N: N children one after another, each starting 4 spinning
 * threads and then calling exit_group while they run, so several threads
 * of one process exit at once (the bpf exit event must still come once). */
static int thread_storm(long n)
{
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	for (long i = 0; i < n; i++) {
		pid_t c = fork();
		if (c == 0) {
			pthread_t t;
			for (int k = 0; k < 4; k++)
				pthread_create(&t, NULL, thread_spin, NULL);
			usleep(1000);
			_exit(7);
		}
		if (c < 0)
			return 1;
		printf("child %d\n", (int)c);
		waitpid(c, NULL, 0);
	}
	printf("done\n");
	fflush(stdout);
	return 0;
}

/* --cn-send PORTID MODE PID: one forged proc connector message, unicast from
 * this (non-kernel) sender to PORTID. MODE: exit (of PID), seq (a jump of 2^31
 * on cpu 0), cpu (cpu = 200,000,000). The stream must drop all three. */
static int cn_send(unsigned portid, const char *mode, int pid)
{
	char buf[NLMSG_SPACE(sizeof(struct cn_msg) + sizeof(struct proc_event))]
		__attribute__((aligned(8)));
	struct nlmsghdr *nh = (void *)buf;
	struct cn_msg *cn = NLMSG_DATA(nh);
	struct proc_event *ev = (void *)cn->data;
	struct sockaddr_nl dst = { .nl_family = AF_NETLINK, .nl_pid = portid };
	struct timespec ts;
	int fd = socket(PF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_CONNECTOR);

	if (fd < 0)
		return 1;
	memset(buf, 0, sizeof buf);
	nh->nlmsg_len = NLMSG_LENGTH(sizeof *cn + sizeof *ev);
	nh->nlmsg_type = NLMSG_DONE;
	cn->id.idx = CN_IDX_PROC;
	cn->id.val = CN_VAL_PROC;
	cn->len = sizeof *ev;
	cn->seq = strcmp(mode, "seq") == 0 ? 0x7ffffff0u : 0;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ev->timestamp_ns = (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
	if (strcmp(mode, "exit") == 0) {
		ev->what = PROC_EVENT_EXIT;
		ev->event_data.exit.process_pid = pid;
		ev->event_data.exit.process_tgid = pid;
		ev->event_data.exit.parent_pid = getppid();
		ev->event_data.exit.parent_tgid = getppid();
	} else {
		ev->what = PROC_EVENT_FORK;
		ev->cpu = strcmp(mode, "cpu") == 0 ? 200000000u : 0;
		ev->event_data.fork.parent_pid = ev->event_data.fork.parent_tgid = 1;
		ev->event_data.fork.child_pid = ev->event_data.fork.child_tgid = pid;
	}
	if (sendto(fd, buf, nh->nlmsg_len, 0, (struct sockaddr *)&dst, sizeof dst) < 0) {
		fprintf(stderr, "fixture: cn-send: %s\n", strerror(errno));
		return 1;
	}
	printf("sent %s\n", mode);
	return 0;
}

static void die_with_parent(unsigned life)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	alarm(life);
}

/* A child with the pid asked for (clone3 set_tid, in our pid namespace:
 * root), sleeping until its parent dies; -1 with errno. */
static pid_t child_at(pid_t want, unsigned life)
{
	struct clone_args args;
	pid_t tid = want, c;

	memset(&args, 0, sizeof args);
	args.exit_signal = SIGCHLD;
	args.set_tid = (uint64_t)(uintptr_t)&tid;
	args.set_tid_size = 1;
	c = (pid_t)syscall(SYS_clone3, &args, sizeof args);
	if (c == 0) {
		die_with_parent(life);
		for (;;)
			pause();
	}
	return c;
}

/* --descents N: N times a child by fork(), then one given a lower free pid
 * than it (child_at): the task list, in creation order, leaves pid order N
 * times, as after a pid wrap. Prints "ready <self> <children in creation
 * order>". */
static int descents(long n, unsigned life)
{
	pid_t low = 301;   /* RESERVED_PIDS: below, the kernel hands out none after a wrap */

	printf("ready %d", (int)getpid());
	for (long i = 0; i < n; i++) {
		pid_t high = fork(), c = -1;

		if (high == 0) {
			die_with_parent(life);
			for (;;)
				pause();
		}
		if (high < 0)
			return 1;
		for (; low < high; low++) {
			c = child_at(low, life);
			if (c >= 0 || errno != EEXIST)
				break;
		}
		if (c < 0) {
			fprintf(stderr, "fixture: clone3 set_tid below %d: %s\n", (int)high,
			        low < high ? strerror(errno) : "no free pid");
			return 1;
		}
		low++;
		printf(" %d %d", (int)high, (int)c);
	}
	printf("\n");
	fflush(stdout);
	for (;;)
		pause();
}

static void usage(void)
{
	fprintf(stderr, "usage: fixture [--name N] [--threads N] [--exited-threads N] "
	                "[--burn-ms MS] [--touch-mb MB] [--zombie] [--nice N] [--setsid] "
	                "[--spin] [--tree] [--argv-unterminated] [--rename NAME (0.2 s after ready)] [--herd N] [--churn SECONDS] [--trickle N] [--life SECONDS] [--thread-storm N] [--cn-send PORTID exit|seq|cpu PID] [--descents N] "
	                "[--chdir DIR] [--nofile SOFT] [--oom-adj N] [--open N] [-- ARGS (ignored)]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *name = NULL, *rename_to = NULL;
	long threads = 0, exited_threads = 0, touch_mb = 0, herd = 0, nice_v = 0, trickle = 0;
	double churn_s = 0;
	unsigned life = 60;
	int zombie = 0, do_setsid = 0, set_nice = 0, spin = 0, tree = 0, unterminate = 0;
	const char *chdir_to = NULL, *oom_adj = NULL;
	long nofile = -1, open_n = 0;
	pid_t zombie_pid = 0;
	pthread_t t;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--zombie") == 0) { zombie = 1; continue; }
		if (strcmp(a, "--setsid") == 0) { do_setsid = 1; continue; }
		if (strcmp(a, "--spin") == 0) { spin = 1; continue; }
		if (strcmp(a, "--tree") == 0) { tree = 1; continue; }
		if (strcmp(a, "--argv-unterminated") == 0) { unterminate = 1; continue; }
		/* The rest are argv for the process-object specs (spaces, empty
		 * strings): carried, not read. */
		if (strcmp(a, "--") == 0)
			break;
		if (strcmp(a, "--cn-send") == 0 && i + 3 < argc)
			return cn_send((unsigned)strtoul(argv[i + 1], NULL, 10), argv[i + 2], atoi(argv[i + 3]));
		if (strcmp(a, "--descents") == 0 && v != NULL) {
			die_with_parent(life);
			return descents(atol(v), life);
		}
		if (strcmp(a, "--thread-storm") == 0 && v != NULL) {
			die_with_parent(life);
			return thread_storm(atol(v));
		}
		if (v == NULL)
			usage();
		i++;
		if (strcmp(a, "--name") == 0) name = v;
		else if (strcmp(a, "--threads") == 0) threads = atol(v);
		else if (strcmp(a, "--rename") == 0) rename_to = v;
		else if (strcmp(a, "--exited-threads") == 0) exited_threads = atol(v);
		else if (strcmp(a, "--burn-ms") == 0) burn_ms = atol(v);
		else if (strcmp(a, "--touch-mb") == 0) touch_mb = atol(v);
		else if (strcmp(a, "--herd") == 0) herd = atol(v);
		else if (strcmp(a, "--churn") == 0) churn_s = atof(v);
		else if (strcmp(a, "--trickle") == 0) trickle = atol(v);
		else if (strcmp(a, "--nice") == 0) { nice_v = atol(v); set_nice = 1; }
		else if (strcmp(a, "--life") == 0) life = (unsigned)atol(v);
		else if (strcmp(a, "--chdir") == 0) chdir_to = v;
		else if (strcmp(a, "--nofile") == 0) nofile = atol(v);
		else if (strcmp(a, "--oom-adj") == 0) oom_adj = v;
		else if (strcmp(a, "--open") == 0) open_n = atol(v);
		else usage();
	}
	die_with_parent(life);
	/* The NUL ending the argument area becomes a space, as a title set
	 * over argv can leave it: /proc then reads on into the environment. */
	if (unterminate)
		argv[argc - 1][strlen(argv[argc - 1])] = ' ';
	if (do_setsid)
		setsid();
	if (set_nice)
		setpriority(PRIO_PROCESS, 0, (int)nice_v);
	if (name != NULL)
		prctl(PR_SET_NAME, name);
	/* Known values for takana.process, compared with psutil's. */
	if (chdir_to != NULL && chdir(chdir_to) < 0)
		return 1;
	if (nofile >= 0) {
		struct rlimit rl;
		getrlimit(RLIMIT_NOFILE, &rl);
		rl.rlim_cur = (rlim_t)nofile;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			return 1;
	}
	if (oom_adj != NULL) {
		int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
		if (fd < 0 || write(fd, oom_adj, strlen(oom_adj)) < 0)
			return 1;
		close(fd);
	}
	for (long i = 0; i < open_n; i++)
		if (open("/dev/null", O_RDONLY) < 0)
			return 1;
	for (long i = 0; i < exited_threads; i++) {
		pthread_create(&t, NULL, thread_exit, NULL);
		pthread_join(t, NULL);
	}
	pthread_barrier_init(&burned, NULL, (unsigned)threads + 1);
	for (long i = 0; i < threads; i++)
		pthread_create(&t, NULL, thread_block, NULL);
	burn(burn_ms);
	pthread_barrier_wait(&burned);
	if (touch_mb > 0) {
		size_t len = (size_t)touch_mb << 20;
		char *p = malloc(len);
		if (p == NULL)
			return 1;
		memset(p, 0x5a, len);
	}
	if (zombie) {
		zombie_pid = fork();
		if (zombie_pid == 0)
			_exit(7);
		/* "ready" only once it is a zombie (a slow guest printed it while
		 * the child still ran); WNOWAIT leaves it unreaped. */
		if (zombie_pid > 0) {
			siginfo_t si;
			while (waitid(P_PID, (id_t)zombie_pid, &si, WEXITED | WNOWAIT) < 0 && errno == EINTR)
				;
		}
	}
	for (long i = 0; i < herd; i++) {
		pid_t c = fork();
		if (c == 0) {
			die_with_parent(life);
			for (;;)
				pause();
		}
		if (c < 0) {
			fprintf(stderr, "fixture: fork: %s\n", strerror(errno));
			return 1;
		}
	}
	if (tree) {
		/* A known family for the event specs, one child at a time so the
		 * order of their events is fixed: exec, exit 3, SIGKILL, rename. */
		pid_t kids[4];
		struct rusage ru[4];
		kids[0] = fork();
		if (kids[0] == 0) {
			execl("/bin/true", "true", (char *)NULL);
			_exit(127);
		}
		wait4(kids[0], NULL, 0, &ru[0]);
		kids[1] = fork();
		if (kids[1] == 0)
			_exit(3);
		wait4(kids[1], NULL, 0, &ru[1]);
		kids[2] = fork();
		if (kids[2] == 0)
			for (;;)
				pause();
		kill(kids[2], SIGKILL);
		wait4(kids[2], NULL, 0, &ru[2]);
		kids[3] = fork();
		if (kids[3] == 0) {
			prctl(PR_SET_NAME, "renamed");
			_exit(0);
		}
		wait4(kids[3], NULL, 0, &ru[3]);
		printf("ready %d %d %d %d %d\n", (int)getpid(), (int)kids[0], (int)kids[1],
		       (int)kids[2], (int)kids[3]);
		/* What wait4(2) says of each child's peak rss, in KiB. */
		printf("maxrss %ld %ld %ld %ld\n", ru[0].ru_maxrss, ru[1].ru_maxrss,
		       ru[2].ru_maxrss, ru[3].ru_maxrss);
		fflush(stdout);
		return 0;
	}
	if (trickle > 0) {
		/* One child every 20 ms, each living 300 ms: for latency
		 * measurements that a 10 Hz poller can see too. */
		printf("ready %d\n", (int)getpid());
		fflush(stdout);
		for (long i = 0; i < trickle; i++) {
			pid_t c = fork();
			if (c == 0) {
				usleep(300000);
				_exit(0);
			}
			usleep(20000);
			while (waitpid(-1, NULL, WNOHANG) > 0)
				;
		}
		while (wait(NULL) > 0)
			;
		printf("done %ld\n", trickle);
		fflush(stdout);
		return 0;
	}
	if (churn_s > 0) {
		/* Short-lived children as fast as possible, reaped, until time is up. */
		double end = now_s() + churn_s;
		long forks = 0;
		printf("ready %d\n", (int)getpid());
		fflush(stdout);
		while (now_s() < end) {
			/* vfork: no page tables to copy, so the storm is about
			 * process events, not memory. */
			pid_t c = vfork();
			if (c == 0)
				_exit(0);
			if (c > 0) {
				waitpid(c, NULL, 0);
				forks++;
			}
		}
		printf("forks %ld\n", forks);
		fflush(stdout);
		return 0;
	}
	if (zombie)
		printf("ready %d %d\n", (int)getpid(), (int)zombie_pid);
	else
		printf("ready %d\n", (int)getpid());
	fflush(stdout);
	if (rename_to != NULL) {
		usleep(200000);
		prctl(PR_SET_NAME, rename_to);
	}
	while (spin)
		burn(1000);
	for (;;)
		pause();
}
