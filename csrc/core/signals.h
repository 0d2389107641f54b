/* Signals as descriptors: the C core behind takana.signals. */
#ifndef TAKANA_SIGNALS_H
#define TAKANA_SIGNALS_H

#include <signal.h>
#include <stdint.h>
#include <sys/signalfd.h>
#include <sys/types.h>

/* A set of signals 1..64 as bits (sig - 1): what a signalfd subscription
 * holds. */
typedef uint64_t tk_sigbits;
#define TK_SIGBIT(sig) ((tk_sigbits)1 << ((sig) - 1))

/* NULL when sig can be subscribed, else why not (KILL and STOP cannot be
 * caught, fault signals never reach a signalfd, 32..SIGRTMIN-1 belong to
 * the C library's threads). */
const char *tk_signal_refused(int sig);

/* 1 with *tid and *sig set when another thread of this process has one of
 * set unblocked: a process-directed signal may then go to it and never
 * reach a signalfd. 0 otherwise, or when /proc cannot tell. */
int tk_signals_check_threads(tk_sigbits set, pid_t *tid, int *sig);
/* Blocks the signals in this thread and opens a non-blocking, close-on-exec
 * signalfd on them: the fd, or -errno with the mask unchanged. Each signal
 * is counted per thread: the first hold remembers whether it was blocked
 * before, so the last release knows whether to unblock it. */
int tk_signals_open(tk_sigbits set);
/* Drops one hold of each signal in set (in this thread); a signal whose last
 * hold goes is unblocked unless it was blocked before the first. Signals
 * still pending are then delivered with their disposition. */
void tk_signals_release(tk_sigbits set);
/* Reads one signal: 1, 0 when none is pending, or -errno. */
int tk_signals_read(int fd, struct signalfd_siginfo *out);

#endif
