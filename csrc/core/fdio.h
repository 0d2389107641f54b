/* Plain descriptor calls the bindings need, each with its EINTR retry and
 * its flags written once: reads and writes of pipes and sockets, pipes,
 * /dev/null and duplicates. Each returns what the call does, or -errno. */
#ifndef TAKANA_FDIO_H
#define TAKANA_FDIO_H

#include <stddef.h>
#include <sys/types.h>

/* read(2), retried on EINTR: bytes read, 0 at end of file, or -errno. */
ssize_t tk_fd_read(int fd, void *buf, size_t len);
/* write(2), retried on EINTR, with SIGPIPE held back: a reader that left
 * gives -EPIPE here instead of killing the caller. A SIGPIPE that was
 * already pending (someone else's) is left pending. */
ssize_t tk_fd_write_nosigpipe(int fd, const void *buf, size_t len);
/* pipe2(O_CLOEXEC) into p (read end, write end), with p[nonblock_end]
 * made non-blocking (O_NONBLOCK belongs to the open file description: the
 * other end stays blocking for the child it is handed to). 0 or -errno,
 * nothing left open. */
int tk_pipe_pair(int p[2], int nonblock_end);
/* /dev/null opened read-write, O_CLOEXEC: the fd, or -errno. */
int tk_devnull_open(void);
/* fcntl F_DUPFD_CLOEXEC at 3 or above: the new fd, or -errno. */
int tk_fd_dup(int fd);
/* Whether fd is an open descriptor (F_GETFD): 1 or 0. */
int tk_fd_valid(int fd);

#endif
