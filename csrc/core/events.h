/* Process events (events.c): the backends (BPF ring buffer, proc
 * connector, snapshot diff) behind one stream. */
#ifndef TAKANA_EVENTS_H
#define TAKANA_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "takana_event.h"
#include "proc_scan.h"
#include "recbuf.h"

/* The most bytes one buffer or read may hold (an event stream's buffer, a
 * pipe read): 1 GiB. */
#define TK_BYTES_MAX ((size_t)1 << 30)
/* poll's interval, in seconds. */
#define TK_EVENTS_INTERVAL_MIN 0.001
#define TK_EVENTS_INTERVAL_MAX 86400.0
/* The connector's socket receive buffer when no size is asked for. */
#define TK_EVENTS_CN_BUFFER_DEFAULT ((size_t)16 << 20)
/* The most events a stream holds in user space. */
#define TK_EVENTS_QUEUE_MAX ((size_t)1 << 24)

/* One proc connector message, decoded. */
struct tk_cn_message {
	uint32_t what;        /* PROC_EVENT_* */
	uint32_t cpu;
	uint32_t seq;         /* per-CPU sequence number: gaps are losses */
	uint32_t ack;
	uint32_t ack_err;     /* PROC_EVENT_NONE: the kernel's answer to LISTEN */
	int thread;           /* fork/exit of a thread, not of a process */
	int ids;              /* PROC_EVENT_UID/GID: the thread event.tid of
	                       * process event.pid changed its ids (type 0) */
	struct tk_event event;  /* type 0 for events takana does not report */
};

struct tk_cn_seq {
	uint32_t next;
	uint32_t seen;
};

struct tk_events;

/* An event backend: how a stream of its kind opens, moves ready events
 * into the queue, and lets go of what it holds. */
struct tk_ev_ops {
	const char *name;
	/* buffer: ring bytes (bpf) or socket receive buffer (connector), 0
	 * for the default; interval: poll's tick in seconds. Sets ev->fd, the
	 * descriptor to poll, and ev->held_*. */
	int (*open)(struct tk_events *ev, double interval, size_t buffer, char *why,
	            size_t why_len);
	int (*fill)(struct tk_events *ev, size_t max);
	/* Closes ev->fd and frees the backend's part; after a failed open too. */
	void (*close)(struct tk_events *ev);
};

/* The backends, best first (the order "auto" tries them in), NULL-ended. */
extern const struct tk_ev_ops *const tk_ev_backends[];

/* bpf: the first stream of a ring size has a loaded object to itself, and
 * its fd is the ring's own (solo); the later ones share a second object:
 * events another stream's fill took from the ring wait in this one's inbox
 * (under the object's lock) and wake_fd says so. */
struct tk_ev_bpf {
	void *shared;                /* struct tk_ev_shared * */
	uint64_t lost_seen[TK_EV_TYPES];
	int solo;                    /* fd is the ring's, the object's to close */
	int wake_fd;                 /* shared: eventfd, in fd's epoll set beside
	                              * the ring; solo: -1 */
	struct tk_event *inbox;
	size_t inlen, incap;
	uint64_t indropped;          /* inbox full: lost for this stream */
};

/* connector: one /proc read made for a queued event. */
struct tk_cn_read {
	uint64_t pos;                /* its event's queue position (tk_events.qbase +
	                              * index); UINT64_MAX: none, or settled */
	uint64_t read_ns;            /* CLOCK_BOOTTIME when /proc was read */
};

/* connector: the reads of the current drain for a pid's exec (filename,
 * argv, comm, ids) and fork (ids), until a later message of its pid says
 * they may not be its own. */
struct tk_cn_exec {
	uint32_t pid;                /* 0: a free slot */
	uint32_t gen;                /* the read it belongs to; others' are free */
	struct tk_cn_read exec, fork;
};

struct tk_ev_cn {
	struct tk_cn_seq *seq;       /* one per possible CPU, sized at open */
	size_t ncpu;
	int listening;
	uint32_t *pid;               /* exec streams: pid -> ppid from forks seen, */
	uint32_t *ppid;              /* seeded from /proc at open (open addressing) */
	size_t pcap, plen;
	int64_t mono_offset_ns;      /* our time namespace's CLOCK_MONOTONIC offset */
	int proc_fd;                 /* fork and exec streams: /proc, for their reads */
	int loginuid;                /* the kernel keeps login uids: read them */
	struct tk_cn_exec *execs;    /* fork and exec streams: by pid (open addressing) */
	size_t ecap, elen;           /* elen: slots of generation gen */
	uint32_t gen;
	int blind;                   /* an overrun's messages are not all drained yet */
	int drained;                 /* the last fill read the socket empty */
};

struct tk_ev_poll {
	struct tk_proc_scanner scanner;
	int scanner_open;
	struct tk_recbuf prev, next;
};

struct tk_events {
	const struct tk_ev_ops *ops; /* kept once closed: the stream's backend */
	uint32_t mask;               /* TK_EV_BIT of the wanted types */
	int fd;                      /* pollable: ring epoll fd, netlink socket or timerfd */
	int closed;
	struct tk_event *queue;      /* decoded, not yet read */
	size_t qhead, qlen, qcap;
	uint64_t qbase;              /* events moved off the queue's front: an event's
	                              * position qbase + index holds while it is queued */
	size_t qmax;                 /* a fill stops reading the kernel here */
	uint64_t qdropped;           /* poll: events past qmax, reported lost */
	uint64_t received;           /* events queued, lost markers excluded */
	uint64_t lost;               /* since the last tk_events_take_lost */
	uint64_t lost_total;
	uint64_t lost_by_type[TK_EV_TYPES];  /* bpf only: the program knows the type */
	uint64_t overruns;           /* connector: ENOBUFS seen */
	uint64_t malformed;          /* messages that did not parse */
	uint64_t spoofed;            /* connector: messages not sent by the kernel */
	uint64_t duplicates;         /* bpf: second exits of one process, dropped */
	uint64_t who_lost;           /* connector: fork and exec events whose ids could
	                              * not be read as their process's (TK_EVF_WHO_LOST) */
	int64_t realtime_offset_ns;  /* CLOCK_REALTIME - CLOCK_BOOTTIME at the last fill */
	/* Why a field this backend fills cannot be filled on this kernel
	 * (loginuid without CONFIG_AUDIT); "" when it can. */
	char loginuid_why[96];
	uint64_t overrun_credit;     /* connector: overruns reported lost as 1 each,
	                              * not yet matched by a sequence gap */
	size_t ring_bytes;           /* bpf: its ring's size; 0 for the others */
	/* What the stream holds outside the heap, for the binding to tell
	 * the collector: kernel buffer bytes (as charged) and descriptors. */
	size_t held_bytes;
	unsigned held_fds;
	union {                      /* the part of ops's backend */
		struct tk_ev_bpf bpf;
		struct tk_ev_cn cn;
		struct tk_ev_poll poll;
	};
};

/* The bytes of e that mean anything, its argv only as far as argv_len:
 * what a copy of it needs (most events carry no argv, 512 of their bytes). */
static inline size_t tk_event_bytes(const struct tk_event *e)
{
	return TK_EV_BASE_SIZE + (e->argv_len < TK_EV_ARGV_LEN ? e->argv_len : TK_EV_ARGV_LEN);
}

/* Parses one netlink datagram of the proc connector. Returns 1 with *out
 * filled, 0 for a message that is not a proc event, -EBADMSG for a
 * malformed one. Pure: reads only buf[0..len). */
int tk_cn_parse(const void *buf, size_t len, struct tk_cn_message *out);

/* Opens a stream; on failure returns -errno with a reason in why. buffer:
 * ring bytes (bpf) or socket receive buffer (connector), 0 for default.
 * queue: events held in user space at most, 0 for TK_EVENTS_QUEUE. */
#define TK_EVENTS_QUEUE 16384
int tk_events_open(struct tk_events *ev, const struct tk_ev_ops *ops, uint32_t mask,
                   double interval, size_t buffer, size_t queue, char *why, size_t why_len);
/* Moves up to max ready events into the queue, without blocking; never past
 * the queue's bound: what does not fit stays in the kernel's buffer, where
 * its loss is counted (poll, which has no such buffer, reports it lost). */
int tk_events_fill(struct tk_events *ev, size_t max);
/* The next queued event, or NULL. Valid until the next fill. */
const struct tk_event *tk_events_next(struct tk_events *ev);
/* Events (lost markers included) queued and not yet read. */
size_t tk_events_queued(const struct tk_events *ev);
/* Returns and resets the count of events known lost. */
uint64_t tk_events_take_lost(struct tk_events *ev);
void tk_events_close(struct tk_events *ev);

#endif
