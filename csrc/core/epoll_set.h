/* epoll, the two ways takana uses it: a set kept open across waits (a
 * poller, one descriptor a foreign event loop polls for all of a
 * supervisor's), and a wait on a list of descriptors (takana.poll), which
 * borrows a kept set for the call. */
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

/* What a poller registration waits for, or'ed; ready reports always add
 * hang-up and error, as epoll does. */
#define TK_EP_IN 1u
#define TK_EP_PRI 2u
#define TK_EP_OUT 4u
/* The most registrations one tk_epoll_wait_data reports; more stay ready
 * for the next (every registration is level-triggered). */
#define TK_EP_BATCH 64
/* ADD (op 0), MOD (op 1) or DEL (op 2) of fd with what (TK_EP_*) and the
 * caller's data, reported back by tk_epoll_wait_data: 0 or -errno. */
enum tk_ep_op { TK_EP_ADD, TK_EP_MOD, TK_EP_DEL };
int tk_epoll_ctl(int ep, enum tk_ep_op op, int fd, unsigned what, uint64_t data);
/* Waits as tk_epoll_ready does, reporting each ready registration's data
 * (at most TK_EP_BATCH): their count, 0 on timeout or EINTR, or -errno. */
int tk_epoll_wait_data(int ep, uint64_t *data, int max, int64_t timeout_ms);
/* The file behind fd, to tell it from a later one given the same number
 * once fd is closed: 0, or -errno (EBADF: closed). */
int tk_fd_identity(int fd, uint64_t *dev, uint64_t *ino);

/* What tk_poll_fds waits for on each descriptor. */
enum tk_poll_want { TK_POLL_IN, TK_POLL_PRI, TK_POLL_OUT };

/* Waits until one of fds[0..n) is ready for what want[i] says, at most
 * timeout_ms (-1: forever; longer than an int in slices towards a
 * CLOCK_MONOTONIC deadline). ready[i] is set to 1 for each ready index, 0
 * for the others; a descriptor listed twice is one registration, and both
 * of its indexes are reported. ep: an empty kept set to borrow (left empty
 * again), or -1 for one made and closed for the call: creating and closing
 * a set costs tens of microseconds (issue 26 measured 12 us to make and
 * fill one, 18 us to close it). The count of ready indexes (0 on timeout or EINTR), or -errno
 * with *step ("epoll_create1", "epoll_ctl" or "epoll_wait"; "malloc" for
 * -ENOMEM). */
int tk_poll_fds(int ep, const int *fds, const enum tk_poll_want *want, size_t n,
                int64_t timeout_ms, unsigned char *ready, const char **step);

#endif
