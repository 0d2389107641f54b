/* epoll, the two ways takana uses it: a set kept open (one descriptor a
 * foreign event loop polls for all of a supervisor's), and a one-shot wait
 * on a list of descriptors (takana.poll). */
#ifndef TAKANA_EPOLL_SET_H
#define TAKANA_EPOLL_SET_H

#include <stddef.h>
#include <stdint.h>

/* An epoll set (O_CLOEXEC): its fd, or -errno. */
int tk_epoll_open(void);
/* Watches fd for input, or for priority data when pri (cgroup.events
 * changes): 0 or -errno. */
int tk_epoll_add(int ep, int fd, int pri);
/* Stops watching fd: 0 or -errno. */
int tk_epoll_del(int ep, int fd);
/* Waits up to timeout_ms (-1: forever) for ready descriptors, into fds
 * (max of them): their count, 0 on timeout or EINTR, or -errno. */
int tk_epoll_ready(int ep, int *fds, int max, int64_t timeout_ms);

/* What tk_poll_fds waits for on each descriptor. */
enum tk_poll_want { TK_POLL_IN, TK_POLL_PRI, TK_POLL_OUT };

/* Waits until one of fds[0..n) is ready for what want[i] says, at most
 * timeout_ms (-1: forever; longer than an int in slices towards a
 * CLOCK_MONOTONIC deadline). ready[i] is set to 1 for each ready index, 0
 * for the others; a descriptor listed twice is one registration, and both
 * of its indexes are reported. The count of ready indexes (0 on timeout or
 * EINTR), or -errno with *step ("epoll_create1", "epoll_ctl" or
 * "epoll_wait"; "malloc" for -ENOMEM). */
int tk_poll_fds(const int *fds, const enum tk_poll_want *want, size_t n, int64_t timeout_ms,
                unsigned char *ready, const char **step);

#endif
