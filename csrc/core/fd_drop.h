/* Closing descriptors another process handed us (fd_drop.c). */
#ifndef TAKANA_FD_DROP_H
#define TAKANA_FD_DROP_H

#include <stddef.h>

/* Descriptors handed to us by another process, closed on short-lived
 * threads of their own (fd_drop.c): their last close may block as long as
 * the sender wants. A socket holds a tk_fd_drops (refcounted with its
 * threads); tk_fd_drop: 0, or -errno with the fds left to the caller;
 * tk_fd_drops_inflight: its messages still closing. */
struct tk_fd_drops;
struct tk_fd_drops *tk_fd_drops_new(void);
void tk_fd_drops_put(struct tk_fd_drops *d);
int tk_fd_drops_inflight(const struct tk_fd_drops *d);
int tk_fd_drop(struct tk_fd_drops *d, const int *fds, size_t n);
/* What a closing thread does, in the caller's: a lingering socket reset,
 * a unix socket emptied and what it held defused first, then close. */
void tk_fd_close_defused(int fd);

#endif
