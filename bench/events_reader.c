/* bench/events.lua's bare-C reader: the floor takana's event latency is
 * measured against, in the same session. It takes fork events the way
 * takana does, but with nothing between the wakeup and the event:
 *
 *   bpf:       takana's own events object (the libbpf skeleton), on_fork
 *              alone attached, its ring's fd in an epoll set;
 *   connector: a NETLINK_CONNECTOR socket listening to proc events, in an
 *              epoll set;
 *   connector-ids: the same, reading what takana's connector fork events
 *              carry and the socket does not: the child's uid and gid (an
 *              fstatat of /proc/<pid>) and its loginuid, before the stamp.
 *
 * It then starts `spec/fixture --trickle N` (a child every 20 ms), blocks in
 * epoll_wait, and for each fork whose parent is that generator prints the
 * latency from the kernel's stamp to the reader, and from the stamp to the
 * return from the epoll_wait that brought it: "lat <ns> <wake ns>". The
 * wakeup is the kernel's (and the scheduler's placement of the two
 * processes); what follows it is the reader's. It ends after N forks, or
 * 2 s without one.
 *
 * usage: bench/events_reader bpf|connector|connector-ids N */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/netlink.h>
#include <linux/types.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef TK_NO_BPF
#include <bpf/libbpf.h>
#include "takana_event.h"
#include "takana_events.skel.h"
#endif

static pid_t gen;
static long want, got;
static uint64_t *lats, *wakes;
/* When the last epoll_wait returned, in each backend's clock. */
static uint64_t woke_boot, woke_mono;

static uint64_t clock_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void record(uint64_t lat, uint64_t wake)
{
	if (got < want) {
		wakes[got] = wake;
		lats[got++] = lat;
	}
}

static pid_t start_generator(long n)
{
	char num[32];
	pid_t pid;

	snprintf(num, sizeof num, "%ld", n);
	pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		if (null >= 0)
			dup2(null, 1);
		execl("./spec/fixture", "fixture", "--trickle", num, (char *)NULL);
		_exit(127);
	}
	return pid;
}

#ifndef TK_NO_BPF
static int on_sample(void *ctx, void *data, size_t size)
{
	const struct tk_event *e = data;
	uint64_t now = clock_ns(CLOCK_BOOTTIME);

	(void)ctx;
	if (size >= offsetof(struct tk_event, time_ns) + sizeof e->time_ns && e->type == TK_EV_FORK && gen != 0 && e->ppid == (uint32_t)gen)
		record(now - e->time_ns, woke_boot > e->time_ns ? woke_boot - e->time_ns : 0);
	return 0;
}

static int run_bpf(int ep)
{
	struct takana_events *s = takana_events__open();
	struct ring_buffer *rb;
	struct epoll_event ev = { .events = EPOLLIN };
	struct stat st;

	if (s == NULL)
		return -errno;
	s->rodata->page_size = (uint64_t)sysconf(_SC_PAGESIZE);
	if (stat("/proc/self/ns/pid", &st) == 0 && st.st_ino != 0xEFFFFFFCu)
		s->rodata->reader_pidns = (uint32_t)st.st_ino;
	if (takana_events__load(s) < 0 || bpf_program__attach(s->progs.on_fork) == NULL)
		return -errno;
	rb = ring_buffer__new(bpf_map__fd(s->maps.events), on_sample, NULL, NULL);
	if (rb == NULL)
		return -errno;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, bpf_map__fd(s->maps.events), &ev) < 0)
		return -errno;
	gen = start_generator(want);
	while (got < want) {
		struct epoll_event out;
		int n = epoll_wait(ep, &out, 1, 2000);

		woke_boot = clock_ns(CLOCK_BOOTTIME);
		if (n == 0)
			break;
		if (n > 0)
			ring_buffer__consume(rb);
	}
	return 0;
}
#else
static int run_bpf(int ep)
{
	(void)ep;
	return -EOPNOTSUPP;
}
#endif

/* What takana's connector reads of a fork's child (events.c who_from_proc). */
static void ids_read(int proc_fd, uint32_t pid)
{
	char path[40], buf[32];
	struct stat st;
	int fd;

	snprintf(path, sizeof path, "%u", pid);
	if (fstatat(proc_fd, path, &st, 0) < 0)
		return;
	snprintf(path, sizeof path, "%u/loginuid", pid);
	fd = openat(proc_fd, path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (read(fd, buf, sizeof buf) < 0)
			buf[0] = '\0';
		close(fd);
	}
}

static int run_connector(int ep, int ids)
{
	int proc_fd = ids ? open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;

	struct sockaddr_nl sa = { .nl_family = AF_NETLINK, .nl_groups = CN_IDX_PROC, .nl_pid = 0 };
	char req[NLMSG_SPACE(sizeof(struct cn_msg) + sizeof(enum proc_cn_mcast_op))]
		__attribute__((aligned(8)));
	struct nlmsghdr *nl = (struct nlmsghdr *)req;
	struct cn_msg *cn = NLMSG_DATA(nl);
	enum proc_cn_mcast_op op = PROC_CN_MCAST_LISTEN;
	struct epoll_event ev = { .events = EPOLLIN };
	int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_CONNECTOR);

	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
		return -errno;
	memset(req, 0, sizeof req);
	nl->nlmsg_len = NLMSG_LENGTH(sizeof *cn + sizeof op);
	nl->nlmsg_type = NLMSG_DONE;
	nl->nlmsg_pid = (uint32_t)getpid();
	cn->id.idx = CN_IDX_PROC;
	cn->id.val = CN_VAL_PROC;
	cn->len = sizeof op;
	memcpy(cn->data, &op, sizeof op);
	if (send(fd, req, nl->nlmsg_len, 0) < 0)
		return -errno;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
		return -errno;
	gen = start_generator(want);
	while (got < want) {
		struct epoll_event out;
		char buf[8192] __attribute__((aligned(8)));
		int n = epoll_wait(ep, &out, 1, 2000);
		ssize_t len;

		woke_mono = clock_ns(CLOCK_MONOTONIC);
		if (n == 0)
			break;
		while ((len = recv(fd, buf, sizeof buf, 0)) > 0) {
			uint64_t now = clock_ns(CLOCK_MONOTONIC);

			for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)len);
			     h = NLMSG_NEXT(h, len)) {
				struct cn_msg *m = NLMSG_DATA(h);
				struct proc_event *pe = (struct proc_event *)m->data;

				if (pe->what == PROC_EVENT_FORK && pe->event_data.fork.child_pid ==
				    pe->event_data.fork.child_tgid && gen != 0 &&
				    pe->event_data.fork.parent_tgid == gen) {
					if (proc_fd >= 0) {
						ids_read(proc_fd, pe->event_data.fork.child_tgid);
						now = clock_ns(CLOCK_MONOTONIC);
					}
					record(now - pe->timestamp_ns, woke_mono > pe->timestamp_ns ?
					       woke_mono - pe->timestamp_ns : 0);
				}
			}
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	int ep, err;

	if (argc != 3 || (strcmp(argv[1], "bpf") != 0 && strcmp(argv[1], "connector") != 0 &&
	                  strcmp(argv[1], "connector-ids") != 0)) {
		fprintf(stderr, "usage: %s bpf|connector|connector-ids N\n", argv[0]);
		return 2;
	}
	want = atol(argv[2]);
	lats = calloc((size_t)(want > 0 ? want : 1), sizeof *lats);
	wakes = calloc((size_t)(want > 0 ? want : 1), sizeof *wakes);
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (lats == NULL || wakes == NULL || ep < 0)
		return 1;
	err = strcmp(argv[1], "bpf") == 0 ? run_bpf(ep) : run_connector(ep, strcmp(argv[1], "connector-ids") == 0);
	if (err < 0) {
		printf("unavailable %s\n", strerror(-err));
		return 1;
	}
	if (gen > 0)
		waitpid(gen, NULL, 0);
	for (long i = 0; i < got; i++)
		printf("lat %llu %llu\n", (unsigned long long)lats[i], (unsigned long long)wakes[i]);
	return 0;
}
