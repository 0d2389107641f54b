/* Process events from three backends behind one pollable stream:
 *
 * bpf:       BTF tracepoints into a ring buffer (bpf/takana_events.bpf.c);
 *            failed reservations are counted per type by the program.
 * connector: the proc connector (NETLINK_CONNECTOR, CN_IDX_PROC). Every
 *            event type is subscribed and filtered here, because the
 *            kernel's per-CPU sequence numbers then have no gaps but
 *            losses, which makes the loss count exact.
 * poll:      snapshots of /proc diffed on a timerfd; sees only what lives
 *            across a tick, and says so with TK_EVF_OBSERVED.
 *
 * Events are decoded into a queue that the binding drains. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/netlink.h>

#include "clock.h"
#include "events.h"
#include "fork.h"
#include "util.h"

/* ---- the queue ---------------------------------------------------------- */

static struct tk_event *queue_push(struct tk_events *ev)
{
	if (ev->qhead > 0 && ev->qhead == ev->qlen) {
		ev->qbase += ev->qlen;
		ev->qhead = ev->qlen = 0;
	}
	if (ev->qlen == ev->qcap) {
		struct tk_event *q;

		if (ev->qhead > 0) {
			/* Reuse the drained front before growing. */
			memmove(ev->queue, ev->queue + ev->qhead, (ev->qlen - ev->qhead) * sizeof *q);
			ev->qbase += ev->qhead;
			ev->qlen -= ev->qhead;
			ev->qhead = 0;
			return &ev->queue[ev->qlen++];
		}
		q = tk_grow(ev->queue, &ev->qcap, ev->qlen + 1, sizeof *q, 256);
		if (q == NULL)
			return NULL;
		ev->queue = q;
	}
	return &ev->queue[ev->qlen++];
}

size_t tk_events_queued(const struct tk_events *ev)
{
	return ev->qlen - ev->qhead;
}

/* Whether a fill may take one more message from the kernel. */
static int queue_has_room(const struct tk_events *ev)
{
	return tk_events_queued(ev) < ev->qmax;
}

static int queue_event(struct tk_events *ev, const struct tk_event *e)
{
	struct tk_event *slot;

	if (e->type != TK_EV_LOST && !(ev->mask & TK_EV_BIT(e->type)))
		return 0;
	if (e->type != TK_EV_LOST && !queue_has_room(ev)) {
		/* poll's diff, or what the connector read while subscribing:
		 * no kernel buffer to stay in; the next fill reports it. */
		ev->qdropped++;
		return 0;
	}
	slot = queue_push(ev);
	if (slot == NULL)
		return -ENOMEM;
	memcpy(slot, e, tk_event_bytes(e));
	if (e->type != TK_EV_LOST)   /* a lost marker is not an event */
		ev->received++;
	return 0;
}

/* A lost marker: count events, or with overrun set an unknown number, which
 * counts as one (at least one was lost) until a sequence gap says how many.
 * Either way lost() grows by what the reader is told. Consecutive unread
 * markers of one kind are merged, so a reader that never catches up does
 * not grow the queue with them. */
static int queue_lost_marker(struct tk_events *ev, uint64_t count, int overrun, uint64_t time_ns)
{
	struct tk_event e;

	if (tk_events_queued(ev) > 0) {
		struct tk_event *tail = &ev->queue[ev->qlen - 1];

		if (tail->type == TK_EV_LOST && !!(tail->flags & TK_EVF_OVERRUN) == !!overrun) {
			/* An overrun merged into one not yet read is the same
			 * "some": the reader is told of it once, counted once. */
			tail->lost += overrun ? 0 : count;
			tail->time_ns = time_ns;
			ev->lost += overrun ? 0 : count;
			ev->lost_total += overrun ? 0 : count;
			return 0;
		}
	}
	if (overrun) {
		count = 1;
		ev->overrun_credit++;   /* to be taken off the sequence gap that sizes it */
	}
	ev->lost += count;
	ev->lost_total += count;
	memset(&e, 0, sizeof e);
	e.type = TK_EV_LOST;
	e.lost = overrun ? 0 : count;
	e.flags = overrun ? TK_EVF_OVERRUN : 0;
	e.time_ns = time_ns;
	return queue_event(ev, &e);
}

static int queue_lost(struct tk_events *ev, uint64_t count, uint64_t time_ns)
{
	return queue_lost_marker(ev, count, 0, time_ns);
}

const struct tk_event *tk_events_next(struct tk_events *ev)
{
	if (ev->qhead < ev->qlen)
		return &ev->queue[ev->qhead++];
	return NULL;
}

uint64_t tk_events_take_lost(struct tk_events *ev)
{
	uint64_t n = ev->lost;

	ev->lost = 0;
	return n;
}

/* ---- proc connector ---------------------------------------------------- */

int tk_cn_parse(const void *buf, size_t len, struct tk_cn_message *out)
{
	const unsigned char *bytes = buf;
	struct nlmsghdr nh;
	struct cn_msg cn;
	struct proc_event event;
	const struct proc_event *pe = &event;
	struct tk_event *e = &out->event;
	size_t hdr = NLMSG_LENGTH(sizeof cn);

	/* Copied out, never cast in place: a datagram gives no alignment
	 * guarantee for the 8-byte fields of proc_event. */
	memset(out, 0, sizeof *out);
	if (len < hdr)
		return -EBADMSG;
	memcpy(&nh, bytes, sizeof nh);
	if (nh.nlmsg_len < hdr || nh.nlmsg_len > len)
		return -EBADMSG;
	if (nh.nlmsg_type == NLMSG_NOOP || nh.nlmsg_type == NLMSG_ERROR)
		return 0;
	memcpy(&cn, bytes + NLMSG_HDRLEN, sizeof cn);
	if (cn.id.idx != CN_IDX_PROC || cn.id.val != CN_VAL_PROC)
		return 0;
	/* proc_event has grown over the years; a shorter one from an older
	 * kernel is zero-filled, as long as the fixed part is there. */
	if (cn.len > nh.nlmsg_len - hdr || cn.len < offsetof(struct proc_event, event_data))
		return -EBADMSG;
	memset(&event, 0, sizeof event);
	memcpy(&event, bytes + hdr, cn.len < sizeof event ? cn.len : sizeof event);
	out->what = pe->what;
	out->cpu = pe->cpu;
	out->seq = cn.seq;
	out->ack = cn.ack;
	e->time_ns = pe->timestamp_ns;     /* CLOCK_MONOTONIC; the caller converts */
	switch (pe->what) {
	case PROC_EVENT_NONE:
		out->ack_err = pe->event_data.ack.err;
		return 1;
	case PROC_EVENT_FORK:
		e->type = TK_EV_FORK;
		e->pid = (uint32_t)pe->event_data.fork.child_tgid;
		e->tid = (uint32_t)pe->event_data.fork.child_pid;
		e->ppid = (uint32_t)pe->event_data.fork.parent_tgid;
		out->thread = pe->event_data.fork.child_pid != pe->event_data.fork.child_tgid;
		return 1;
	case PROC_EVENT_EXEC:
		e->type = TK_EV_EXEC;
		e->pid = (uint32_t)pe->event_data.exec.process_tgid;
		e->tid = (uint32_t)pe->event_data.exec.process_pid;
		return 1;
	case PROC_EVENT_COMM:
		e->type = TK_EV_COMM;
		e->pid = (uint32_t)pe->event_data.comm.process_tgid;
		e->tid = (uint32_t)pe->event_data.comm.process_pid;
		memcpy(e->comm, pe->event_data.comm.comm, sizeof e->comm);
		e->comm[sizeof e->comm - 1] = '\0';
		e->flags |= TK_EVF_COMM;
		return 1;
	case PROC_EVENT_EXIT:
		e->type = TK_EV_EXIT;
		e->pid = (uint32_t)pe->event_data.exit.process_tgid;
		e->tid = (uint32_t)pe->event_data.exit.process_pid;
		e->ppid = (uint32_t)pe->event_data.exit.parent_tgid;
		tk_event_exit_status(e, pe->event_data.exit.exit_code);
		/* A thread's exit is not the process's. */
		out->thread = pe->event_data.exit.process_pid != pe->event_data.exit.process_tgid;
		return 1;
	case PROC_EVENT_UID:
	case PROC_EVENT_GID:
		/* Not an event of its own, but it tells a stream that ids read
		 * from /proc after it may not be those of an earlier event. */
		e->pid = (uint32_t)pe->event_data.id.process_tgid;
		e->tid = (uint32_t)pe->event_data.id.process_pid;
		out->ids = 1;
		return 1;
	default:
		/* sid, ptrace, coredump: not takana events, but they still
		 * count in the sequence. */
		e->type = 0;
		return 1;
	}
}

static int cn_send_op(int fd, enum proc_cn_mcast_op op, uint32_t ack)
{
	char buf[NLMSG_SPACE(sizeof(struct cn_msg) + sizeof(uint32_t))] __attribute__((aligned(8)));
	struct nlmsghdr *nh = (struct nlmsghdr *)(void *)buf;
	struct cn_msg *cn;
	uint32_t value = op;

	memset(buf, 0, sizeof buf);
	nh->nlmsg_len = NLMSG_LENGTH(sizeof *cn + sizeof value);
	nh->nlmsg_type = NLMSG_DONE;
	nh->nlmsg_pid = 0;
	cn = NLMSG_DATA(nh);
	cn->id.idx = CN_IDX_PROC;
	cn->id.val = CN_VAL_PROC;
	cn->seq = 0;
	cn->ack = ack;
	cn->len = sizeof value;
	memcpy(cn->data, &value, sizeof value);
	if (send(fd, buf, nh->nlmsg_len, 0) < 0)
		return -errno;
	return 0;
}

static void comm_from_proc(struct tk_event *e)
{
	char path[48];
	ssize_t n;
	int fd;

	snprintf(path, sizeof path, "/proc/%u/comm", e->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, e->comm, sizeof e->comm - 1);
	close(fd);
	if (n <= 0)
		return;
	if (e->comm[n - 1] == '\n')
		n--;
	e->comm[n] = '\0';
	e->flags |= TK_EVF_COMM;
}

/* The program an exec event names, read from /proc at receipt: the
 * connector says only which pid exec'd. A process gone by then reads as
 * nothing, and says so; one that exec'd again, or whose pid was reused,
 * reads as that later program, which /proc cannot tell apart: the stream
 * learns of it from a later message (the exec-read checks below). */
static void exec_from_proc(struct tk_event *e)
{
	char path[48];
	ssize_t n;
	int fd;

	snprintf(path, sizeof path, "/proc/%u/exe", e->pid);
	n = readlink(path, e->filename, sizeof e->filename - 1);
	e->filename[n > 0 ? n : 0] = '\0';
	snprintf(path, sizeof path, "/proc/%u/cmdline", e->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	n = fd < 0 ? -1 : read(fd, e->argv, sizeof e->argv);
	if (n == (ssize_t)sizeof e->argv) {
		char more;

		if (read(fd, &more, 1) == 1)
			e->flags |= TK_EVF_ARGV_TRUNC;
	}
	if (fd >= 0)
		close(fd);
	/* An exiting process (a zombie) reads as empty, and so does one
	 * amid another exec (its new image has no arguments yet) whose exe
	 * and comm already name the next program: nothing read is kept. */
	if (n <= 0) {
		e->flags &= ~TK_EVF_COMM;
		e->flags |= TK_EVF_ARGV_LOST;
		memset(e->comm, 0, sizeof e->comm);
		memset(e->filename, 0, sizeof e->filename);
		return;
	}
	e->argv_len = (uint32_t)n;
	e->flags |= TK_EVF_ARGV;
}

/* The ids of a fork's or exec's process, read from /proc at receipt (the
 * connector carries none): the effective uid and gid, as bpf takes them
 * from its credentials, and its login uid. The ids are the owner of its
 * /proc/<pid> directory: the kernel (task_dump_owner) makes that the euid
 * and egid even for a process that is not dumpable, whose other files
 * root owns; one fstatat instead of generating and parsing its status
 * (the second column of whose Uid and Gid lines says the same). A process
 * gone by then (reaped: a zombie still reads) leaves them unknown, and
 * says so. */
static void who_from_proc(struct tk_events *ev, struct tk_event *e)
{
	char path[40], buf[32];
	struct stat st;
	uint64_t v;
	ssize_t n;

	snprintf(path, sizeof path, "%u", e->pid);
	if (fstatat(ev->cn.proc_fd, path, &st, 0) < 0)
		goto lost;
	if (ev->cn.loginuid) {
		snprintf(path, sizeof path, "%u/loginuid", e->pid);
		n = tk_read_small(ev->cn.proc_fd, path, buf, sizeof buf);
		/* Gone between the two reads: all three or none. */
		if (n <= 0 || tk_parse_u64(buf, buf + n, UINT32_MAX, &v) == NULL)
			goto lost;
		e->loginuid = (uint32_t)v;
		e->flags |= TK_EVF_LOGINUID;
	}
	e->uid = (uint32_t)st.st_uid;
	e->gid = (uint32_t)st.st_gid;
	e->flags |= TK_EVF_WHO;
	return;
lost:
	e->flags |= TK_EVF_WHO_LOST;
	ev->who_lost++;
}

/* Ids that may be another process's or another moment's: none. */
static void who_void(struct tk_events *ev, struct tk_event *e)
{
	if (!(e->flags & TK_EVF_WHO_LOST))
		ev->who_lost++;
	e->flags &= ~(TK_EVF_WHO | TK_EVF_LOGINUID);
	e->flags |= TK_EVF_WHO_LOST;
	e->uid = e->gid = e->loginuid = 0;
}

/* Whether this kernel keeps audit login uids (CONFIG_AUDIT), which
 * /proc/<pid>/loginuid and task_struct::loginuid exist with: when it does
 * not, the stream says so instead of leaving loginuid absent unexplained. */
static int loginuid_check(struct tk_events *ev)
{
	if (access("/proc/self/loginuid", F_OK) == 0 || errno != ENOENT ||
	    access("/proc/self", F_OK) < 0)
		return 1;
	snprintf(ev->loginuid_why, sizeof ev->loginuid_why,
	         "this kernel keeps no login uids (built without CONFIG_AUDIT)");
	return 0;
}

/* ---- connector: who is whose parent ---------------------------------------- */

static size_t ppid_slot(const struct tk_events *ev, uint32_t pid)
{
	size_t i = (size_t)(uint32_t)(pid * 2654435761u) & (ev->cn.pcap - 1);

	while (ev->cn.pid[i] != 0 && ev->cn.pid[i] != pid)
		i = (i + 1) & (ev->cn.pcap - 1);
	return i;
}

static int ppid_put(struct tk_events *ev, uint32_t pid, uint32_t ppid)
{
	size_t i;

	if (pid == 0)
		return 0;
	if ((ev->cn.plen + 1) * 2 > ev->cn.pcap) {
		size_t cap = ev->cn.pcap ? ev->cn.pcap * 2 : 4096, old = ev->cn.pcap;
		uint32_t *pids = calloc(cap, sizeof *pids), *ppids = calloc(cap, sizeof *ppids);
		uint32_t *opid = ev->cn.pid, *oppid = ev->cn.ppid;

		if (pids == NULL || ppids == NULL) {
			free(pids);
			free(ppids);
			return -ENOMEM;
		}
		ev->cn.pid = pids;
		ev->cn.ppid = ppids;
		ev->cn.pcap = cap;
		for (size_t k = 0; k < old; k++) {
			if (opid[k]) {
				i = ppid_slot(ev, opid[k]);
				pids[i] = opid[k];
				ppids[i] = oppid[k];
			}
		}
		free(opid);
		free(oppid);
	}
	i = ppid_slot(ev, pid);
	if (ev->cn.pid[i] == 0)
		ev->cn.plen++;
	ev->cn.pid[i] = pid;
	ev->cn.ppid[i] = ppid;
	return 0;
}

static uint32_t ppid_get(const struct tk_events *ev, uint32_t pid)
{
	size_t i;

	if (ev->cn.pcap == 0)
		return 0;
	i = ppid_slot(ev, pid);
	return ev->cn.pid[i] == pid ? ev->cn.ppid[i] : 0;
}

/* Linear probing's deletion: later entries of the run move back. */
static void ppid_del(struct tk_events *ev, uint32_t pid)
{
	size_t mask = ev->cn.pcap - 1, i, j;

	if (ev->cn.pcap == 0)
		return;
	i = ppid_slot(ev, pid);
	if (ev->cn.pid[i] != pid)
		return;
	ev->cn.pid[i] = 0;
	ev->cn.plen--;
	for (j = (i + 1) & mask; ev->cn.pid[j] != 0; j = (j + 1) & mask) {
		size_t home = (size_t)(uint32_t)(ev->cn.pid[j] * 2654435761u) & mask;

		/* Moves back unless its home lies cyclically in (i, j]. */
		if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
			ev->cn.pid[i] = ev->cn.pid[j];
			ev->cn.ppid[i] = ev->cn.ppid[j];
			ev->cn.pid[j] = 0;
			i = j;
		}
	}
}

/* Every process's parent now, before the forks the stream will see. */
static int ppid_seed(struct tk_events *ev)
{
	struct tk_proc_scanner sc;
	struct tk_recbuf rb;
	int err;

	memset(&rb, 0, sizeof rb);
	err = tk_proc_scanner_init(&sc, "/proc");
	if (err < 0)
		return err;
	err = tk_proc_scan(&sc, &rb, 0);
	tk_proc_scanner_close(&sc);
	for (size_t i = 0; err == 0 && i < rb.len; i++)
		if (ppid_get(ev, rb.recs[i].pid) == 0)
			err = ppid_put(ev, rb.recs[i].pid, rb.recs[i].ppid);
	tk_recbuf_free(&rb);
	return err;
}

/* ---- connector: reads that may not be the event's own ---------------------- */

/* /proc is read at receipt, after the exec: by then the process may have
 * exec'd again (sh -c 'exec prog') or ended and its pid been reused, and
 * the read names that later program. /proc keeps no count of execs to
 * compare, but the stream hears what happened: a later exec, an exit, the
 * fork that reuses the pid all come after this exec's message. So each
 * read is kept by pid while its event is queued, and taken back (argv_lost)
 * when such a message says it may be another program's. A read is
 * confirmed once the socket was drained empty after it; what is left open
 * is an exec already under way at the read whose message came after that
 * drain, and the last reads of a drain stopped by the queue's bound.
 *
 * The ids of a fork or an exec (uid, gid, loginuid) are read the same way
 * and kept beside them: besides what takes an exec's read back, a change
 * of the process's ids before the read (the connector's uid and gid
 * messages, which commit_creds sends for setuid() and a setuid program's
 * exec alike) takes them back (who_lost). A login uid set before the read
 * (pam_loginuid, which no message announces) is not caught: it is read as
 * the new one. */

static size_t exec_slot(const struct tk_ev_cn *cn, uint32_t pid)
{
	size_t mask = cn->ecap - 1, i = (size_t)(uint32_t)(pid * 2654435761u) & mask;

	/* A slot of another generation is free: forgetting is one increment. */
	while (cn->execs[i].gen == cn->gen && cn->execs[i].pid != pid)
		i = (i + 1) & mask;
	return i;
}

static struct tk_cn_exec *exec_find(struct tk_ev_cn *cn, uint32_t pid)
{
	size_t i;

	if (cn->ecap == 0)
		return NULL;
	i = exec_slot(cn, pid);
	return cn->execs[i].gen == cn->gen ? &cn->execs[i] : NULL;
}

static void exec_forget(struct tk_ev_cn *cn)
{
	if (++cn->gen == 0) {
		/* Wrapped: slots from 2^32 generations ago would look current. */
		if (cn->execs != NULL)
			memset(cn->execs, 0, cn->ecap * sizeof *cn->execs);
		cn->gen = 1;
	}
	cn->elen = 0;
}

/* Keeps the read of pid's exec (fork 0) or fork (fork 1) event, queued at pos. */
static int exec_keep(struct tk_ev_cn *cn, uint32_t pid, int fork, uint64_t pos, uint64_t read_ns)
{
	struct tk_cn_exec *x;
	size_t i;

	if ((cn->elen + 1) * 2 > cn->ecap) {
		size_t cap = cn->ecap ? cn->ecap * 2 : 1024, old = cn->ecap;
		struct tk_cn_exec *o = cn->execs, *n = calloc(cap, sizeof *n);

		if (n == NULL)
			return -ENOMEM;
		cn->execs = n;
		cn->ecap = cap;
		for (size_t k = 0; k < old; k++) {
			if (o[k].gen == cn->gen) {
				i = exec_slot(cn, o[k].pid);
				n[i] = o[k];
			}
		}
		free(o);
	}
	i = exec_slot(cn, pid);
	x = &cn->execs[i];
	if (x->gen != cn->gen) {
		cn->elen++;
		x->exec.pos = x->fork.pos = UINT64_MAX;
	}
	x->pid = pid;
	x->gen = cn->gen;
	*(fork ? &x->fork : &x->exec) = (struct tk_cn_read){ pos, read_ns };
	return 0;
}

static struct tk_event *queued_at(struct tk_events *ev, uint64_t pos)
{
	if (pos < ev->qbase + ev->qhead || pos >= ev->qbase + ev->qlen)
		return NULL;    /* read already: too late to take anything back */
	return &ev->queue[pos - ev->qbase];
}

/* Nothing rather than another program's name and ids. */
static void exec_void(struct tk_events *ev, struct tk_event *e)
{
	e->flags &= ~(TK_EVF_ARGV | TK_EVF_ARGV_TRUNC | TK_EVF_COMM);
	e->flags |= TK_EVF_ARGV_LOST;
	e->argv_len = 0;
	memset(e->comm, 0, sizeof e->comm);
	memset(e->filename, 0, sizeof e->filename);
	who_void(ev, e);
}

/* The event a kept read belongs to, or NULL once it is settled or read. */
static struct tk_event *kept_event(struct tk_events *ev, struct tk_cn_read *r)
{
	struct tk_event *e;

	if (r->pos == UINT64_MAX)
		return NULL;
	e = queued_at(ev, r->pos);
	if (e == NULL)
		r->pos = UINT64_MAX;
	return e;
}

/* Message m (of process key, or a fork whose new tid is key and may reuse
 * it; ids: a uid or gid change) came after the reads kept for key. */
static void exec_check(struct tk_events *ev, const struct tk_event *m, int ids, uint32_t key)
{
	struct tk_cn_exec *x = exec_find(&ev->cn, key);
	struct tk_event *e, *f;

	if (x == NULL)
		return;
	e = kept_event(ev, &x->exec);
	f = kept_event(ev, &x->fork);
	if (ids) {
		/* Ids changed before a read: it shows the new ones. */
		if (e != NULL && m->time_ns <= x->exec.read_ns)
			who_void(ev, e);
		if (f != NULL && m->time_ns <= x->fork.read_ns) {
			who_void(ev, f);
			x->fork.pos = UINT64_MAX;
		}
		return;
	}
	if (m->type == TK_EV_COMM) {
		/* A rename before the read: the comm read is the new name. */
		if (e != NULL && m->time_ns <= x->exec.read_ns) {
			e->flags &= ~TK_EVF_COMM;
			memset(e->comm, 0, sizeof e->comm);
		}
		return;
	}
	/* An exit after the read leaves it be: the read saw the process. One
	 * before it, or a fork reusing the pid: the read may have found
	 * another process. A later exec: another program (a fork's ids stay:
	 * an exec that changes them sends its uid or gid message first). */
	if (f != NULL && m->type != TK_EV_EXEC) {
		x->fork.pos = UINT64_MAX;
		if (!(m->type == TK_EV_EXIT && m->time_ns > x->fork.read_ns))
			who_void(ev, f);
	}
	if (e != NULL) {
		x->exec.pos = UINT64_MAX;
		if (!(m->type == TK_EV_EXIT && m->time_ns > x->exec.read_ns))
			exec_void(ev, e);
	}
}

/* An overrun: a later exec of any process read so far, or a change of its
 * ids, may be among the messages dropped, so none of those reads is
 * vouched for, nor any made before the messages older than the drop are
 * drained (ev->cn.blind). */
static void exec_void_kept(struct tk_events *ev)
{
	for (size_t i = 0; i < ev->cn.ecap; i++) {
		struct tk_cn_exec *x = &ev->cn.execs[i];
		struct tk_event *e;

		if (x->gen != ev->cn.gen)
			continue;
		if ((e = kept_event(ev, &x->exec)) != NULL)
			exec_void(ev, e);
		if ((e = kept_event(ev, &x->fork)) != NULL)
			who_void(ev, e);
	}
	exec_forget(&ev->cn);
	ev->cn.blind = 1;
}

/* A fork or exec event, with what /proc tells of it, queued and its reads
 * kept. */
static int cn_read_proc(struct tk_events *ev, struct tk_event *e)
{
	uint64_t received = ev->received, read_ns;
	int fork = e->type == TK_EV_FORK, err;

	if (!fork) {
		e->ppid = ppid_get(ev, e->pid);
		e->flags |= TK_EVF_FROM_PROC;
	}
	if (ev->cn.blind) {
		e->flags |= fork ? 0 : TK_EVF_ARGV_LOST;
		who_void(ev, e);
		return queue_event(ev, e);
	}
	read_ns = tk_boottime_ns();
	if (!fork) {
		comm_from_proc(e);
		exec_from_proc(e);
	}
	/* After the exec's reads: a process found gone there is not read again. */
	if (fork || !(e->flags & TK_EVF_ARGV_LOST))
		who_from_proc(ev, e);
	else
		who_void(ev, e);
	err = queue_event(ev, e);
	if (err < 0 || ev->received == received)
		return err;
	return exec_keep(&ev->cn, e->pid, fork, ev->qbase + ev->qlen - 1, read_ns);
}

/* Counts sequence gaps on the message's CPU as lost events. Returns 1 to
 * keep the message, 0 to drop it. The CPU indexes a table sized at open by
 * the possible CPUs: the kernel never sends a larger one, and a message
 * that does is not the kernel's, however it got here. */
static int cn_track_seq(struct tk_events *ev, const struct tk_cn_message *m, uint64_t now)
{
	uint32_t cpu = m->cpu;
	struct tk_cn_seq *s;

	if (cpu >= ev->cn.ncpu) {
		ev->malformed++;
		return 0;
	}
	s = &ev->cn.seq[cpu];
	if (s->seen && m->seq != s->next) {
		uint32_t gap = m->seq - s->next;
		/* A sequence that went back is a counter reset, not a loss. */
		if (gap < 0x80000000u) {
			/* Overruns already reported one each of what this gap
			 * now numbers exactly: report the rest. */
			uint64_t credit = ev->overrun_credit < gap ? ev->overrun_credit : gap;
			int err = 0;

			ev->overrun_credit -= credit;
			if (gap > credit)
				err = queue_lost(ev, gap - credit, now);
			if (err < 0)
				return err;
		}
	}
	s->seen = 1;
	s->next = m->seq + 1;
	return 1;
}

/* What turns the connector's stamps, the kernel's own CLOCK_MONOTONIC, into
 * our CLOCK_BOOTTIME: both of our clocks carry our time namespace's
 * offsets, so the monotonic one is added back. */
static uint64_t cn_mono_to_boot(const struct tk_events *ev)
{
	return tk_clock_ns(CLOCK_BOOTTIME) - tk_clock_ns(CLOCK_MONOTONIC) +
	       (uint64_t)ev->cn.mono_offset_ns;
}

static int cn_handle(struct tk_events *ev, const void *buf, size_t len, uint64_t mono_to_boot)
{
	struct tk_cn_message m;
	int r = tk_cn_parse(buf, len, &m);

	if (r < 0) {
		ev->malformed++;
		return 0;
	}
	if (r == 0)
		return 0;
	/* Acks (PROC_EVENT_NONE) take sequence numbers too. */
	r = cn_track_seq(ev, &m, m.event.time_ns + mono_to_boot);
	if (r <= 0)
		return r;
	if (m.event.type == 0 && !m.ids)
		return 0;
	m.event.time_ns += mono_to_boot;
	if (ev->mask & TK_EV_WHO_TYPES) {
		/* A new thread's tid may reuse a pid too; a thread's exit,
		 * rename or ids change nothing /proc/<pid> shows. */
		if (m.event.type == TK_EV_FORK)
			exec_check(ev, &m.event, 0, m.event.tid);
		else if (!m.thread && m.event.tid == m.event.pid)
			exec_check(ev, &m.event, m.ids, m.event.pid);
	}
	if (m.thread || m.ids)
		return 0;
	if (ev->mask & TK_EV_BIT(TK_EV_EXEC)) {
		/* Parents, for exec events, which the connector gives none. */
		if (m.event.type == TK_EV_FORK && ppid_put(ev, m.event.pid, m.event.ppid) < 0)
			return -ENOMEM;
		if (m.event.type == TK_EV_EXIT)
			ppid_del(ev, m.event.pid);
	}
	if ((m.event.type == TK_EV_FORK || m.event.type == TK_EV_EXEC) &&
	    (ev->mask & TK_EV_BIT(m.event.type)))
		return cn_read_proc(ev, &m.event);
	return queue_event(ev, &m.event);
}

/* The socket overflowed: the loss is reported now, its size once the
 * sequence gaps show it (on each CPU's next message). */
static int cn_overrun(struct tk_events *ev)
{
	ev->overruns++;
	if (ev->mask & TK_EV_WHO_TYPES)
		exec_void_kept(ev);
	return queue_lost_marker(ev, 0, 1, tk_boottime_ns());
}

/* One datagram: its length, 0 when there is none, or -errno; *heard is 0
 * for one that was dropped. Only the kernel (netlink port 0) is heard: any
 * process with CAP_NET_ADMIN in our network namespace can unicast to our
 * port, which /proc/net/netlink shows. */
static ssize_t cn_recv(struct tk_events *ev, void *buf, size_t len, int *heard)
{
	struct sockaddr_nl from;
	socklen_t fromlen = sizeof from;
	ssize_t n;

	memset(&from, 0, sizeof from);
	*heard = 0;
	n = recvfrom(ev->fd, buf, len, 0, (struct sockaddr *)&from, &fromlen);
	if (n < 0)
		return errno == EAGAIN ? 0 : -errno;
	if (fromlen < sizeof from || from.nl_family != AF_NETLINK || from.nl_pid != 0) {
		ev->spoofed++;
		return n;
	}
	*heard = 1;
	return n;
}

/* The number of possible CPUs (cpu_possible_mask's highest bit plus one):
 * the kernel numbers proc events by smp_processor_id(), always below it. */
static size_t possible_cpus(void)
{
	char text[256];
	size_t max = 0;
	ssize_t n;
	int fd = open("/sys/devices/system/cpu/possible", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		n = read(fd, text, sizeof text - 1);
		close(fd);
		if (n > 0) {
			/* "0-3,8-11": the last number is the highest. */
			text[n] = '\0';
			for (char *p = text; *p;) {
				if (*p >= '0' && *p <= '9') {
					unsigned long v = strtoul(p, &p, 10);
					if (v < 65536 && v + 1 > max)
						max = v + 1;
				} else {
					p++;
				}
			}
		}
	}
	if (max == 0) {
		long conf = sysconf(_SC_NPROCESSORS_CONF);
		max = conf > 0 && conf < 65536 ? (size_t)conf : 1;
	}
	return max;
}

/* The kernel ignores LISTEN from any other pid or user namespace than the
 * initial ones (cn_proc_mcast_ctl: events carry the initial namespaces'
 * ids), without an answer: say so at once instead of waiting for one.
 * The initial namespaces have fixed inode numbers (PROC_PID_INIT_INO,
 * PROC_USER_INIT_INO). */
static int cn_check_namespaces(char *why, size_t why_len)
{
	static const struct {
		const char *path, *name;
		ino_t init;
	} ns[] = {
		{ "/proc/self/ns/pid", "pid", 0xEFFFFFFCu },
		{ "/proc/self/ns/user", "user", 0xEFFFFFFDu },
	};

	for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
		struct stat st;

		if (stat(ns[i].path, &st) == 0 && st.st_ino != ns[i].init) {
			snprintf(why, why_len, "the proc connector answers only the initial pid and "
			         "user namespaces, and this process is in a child %s namespace: "
			         "use backend=\"bpf\" (root) or \"poll\"", ns[i].name);
			return -EXDEV;
		}
	}
	return 0;
}

/* The socket, bound to the proc connector's group, and the table of
 * per-CPU sequence numbers; sets ev->fd. */
static int cn_socket(struct tk_events *ev, size_t buffer, char *why, size_t why_len)
{
	struct sockaddr_nl addr = { .nl_family = AF_NETLINK, .nl_groups = CN_IDX_PROC };
	int size = (int)(buffer ? buffer : TK_EVENTS_CN_BUFFER_DEFAULT);
	int fd, err;

	ev->cn.ncpu = possible_cpus();
	ev->cn.seq = calloc(ev->cn.ncpu, sizeof *ev->cn.seq);
	if (ev->cn.seq == NULL) {
		snprintf(why, why_len, "out of memory");
		return -ENOMEM;
	}
	fd = socket(PF_NETLINK, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_CONNECTOR);
	if (fd < 0) {
		err = -errno;
		snprintf(why, why_len, "socket(NETLINK_CONNECTOR): %s", strerror(errno));
		return err;
	}
	/* Bursts arrive faster than a Lua loop drains them: a big buffer. The
	 * FORCE variant passes rmem_max when privileged. */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
	if (bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
		err = -errno;
		snprintf(why, why_len, "%s", errno == EPERM || errno == EACCES
		         ? "EPERM: the proc connector needs CAP_NET_ADMIN (root)"
		         : strerror(errno));
		close(fd);
		return err;
	}
	ev->fd = fd;
	return 0;
}

/* Subscribed, with the kernel's answer m: sequence numbers count from it,
 * and exec streams learn every running process's parent. */
static int cn_subscribed(struct tk_events *ev, const struct tk_cn_message *m, char *why,
                         size_t why_len)
{
	int err;

	ev->cn.listening = 1;
	err = cn_track_seq(ev, m, 0);
	/* Subscribed first: no fork falls between the two. */
	if (err >= 0 && (ev->mask & TK_EV_BIT(TK_EV_EXEC))) {
		err = ppid_seed(ev);
		if (err < 0)
			snprintf(why, why_len, "the parents of the processes running now, "
			         "for exec events' ppid (/proc): %s", strerror(-err));
		/* Execs that came before the answer were queued unseeded. */
		for (size_t i = ev->qhead; i < ev->qlen; i++)
			if (ev->queue[i].type == TK_EV_EXEC && ev->queue[i].ppid == 0)
				ev->queue[i].ppid = ppid_get(ev, ev->queue[i].pid);
	}
	return err < 0 ? err : 0;
}

/* One datagram while waiting for the answer to LISTEN: 1 with *m filled
 * when it is that answer (with no error), 0 for any other (an event is
 * queued), or -errno. */
static int cn_await_one(struct tk_events *ev, uint32_t ack, struct tk_cn_message *m, char *why,
                        size_t why_len)
{
	char buf[4096] __attribute__((aligned(8)));
	int heard, err;
	ssize_t n = cn_recv(ev, buf, sizeof buf, &heard);

	if (n == -ENOBUFS) {
		err = cn_overrun(ev);
		return err < 0 ? err : 0;
	}
	if (n == 0 || n == -EINTR || (n > 0 && !heard))
		return 0;
	if (n < 0) {
		snprintf(why, why_len, "proc connector: %s", strerror((int)-n));
		return (int)n;
	}
	if (tk_cn_parse(buf, (size_t)n, m) == 1 && m->what == PROC_EVENT_NONE && m->ack == ack + 1) {
		if (m->ack_err != 0) {
			snprintf(why, why_len, "%s", m->ack_err == EPERM
			         ? "EPERM: the proc connector needs CAP_NET_ADMIN (root)"
			         : strerror((int)m->ack_err));
			return -(int)m->ack_err;
		}
		return 1;
	}
	err = cn_handle(ev, buf, (size_t)n, cn_mono_to_boot(ev));
	return err < 0 ? err : 0;
}

/* The kernel answers LISTEN with an ack carrying an errno; events that
 * arrive meanwhile are kept. */
static int cn_await_ack(struct tk_events *ev, uint32_t ack, char *why, size_t why_len)
{
	uint64_t deadline = tk_clock_ns(CLOCK_MONOTONIC) + 1000000000ull;

	for (;;) {
		struct pollfd pfd = { .fd = ev->fd, .events = POLLIN };
		uint64_t now = tk_clock_ns(CLOCK_MONOTONIC);
		struct tk_cn_message m;
		int r;

		if (now >= deadline) {
			snprintf(why, why_len, "no answer from the proc connector in 1 s "
			         "(kernel without CONFIG_PROC_EVENTS?)");
			return -ETIMEDOUT;
		}
		if (poll(&pfd, 1, (int)((deadline - now) / 1000000) + 1) < 0 && errno != EINTR)
			return -errno;
		r = cn_await_one(ev, ack, &m, why, why_len);
		if (r < 0)
			return r;
		if (r == 1)
			return cn_subscribed(ev, &m, why, why_len);
	}
}

static int cn_open(struct tk_events *ev, double interval, size_t buffer, char *why,
                   size_t why_len)
{
	/* The kernel's ack carries ours plus one: that is how it is told apart
	 * from acks to other listeners. */
	uint32_t ack = ((uint32_t)getpid() << 12) ^ (uint32_t)tk_clock_ns(CLOCK_MONOTONIC);
	struct tk_timens offsets = { 0, 0 };
	int err;

	(void)interval;
	ev->cn.proc_fd = -1;
	exec_forget(&ev->cn);
	err = cn_check_namespaces(why, why_len);
	if (err == 0)
		err = tk_timens_offsets(&offsets, why, why_len);
	if (err < 0)
		return err;
	err = cn_socket(ev, buffer, why, why_len);
	if (err < 0)
		return err;
	ev->cn.mono_offset_ns = offsets.monotonic_ns;
	/* Charged in part: the socket buffer is rarely full. */
	ev->held_bytes = (buffer ? buffer : TK_EVENTS_CN_BUFFER_DEFAULT) / 4;
	ev->held_fds = 1;
	if (ev->mask & TK_EV_WHO_TYPES) {
		/* Before listening: events queued while the answer is awaited
		 * are read too. */
		ev->cn.proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (ev->cn.proc_fd < 0) {
			err = -errno;
			snprintf(why, why_len, "open /proc, for the ids of fork and exec events: %s",
			         strerror(errno));
			return err;
		}
		ev->held_fds = 2;
		ev->cn.loginuid = loginuid_check(ev);
	}
	err = cn_send_op(ev->fd, PROC_CN_MCAST_LISTEN, ack);
	if (err < 0) {
		snprintf(why, why_len, "proc connector listen: %s", strerror(-err));
		return err;
	}
	return cn_await_ack(ev, ack, why, why_len);
}

static void cn_close(struct tk_events *ev)
{
	if (ev->fd >= 0) {
		/* The kernel counts listeners; tell it this one is gone. */
		if (ev->cn.listening)
			cn_send_op(ev->fd, PROC_CN_MCAST_IGNORE, 0);
		close(ev->fd);
	}
	ev->fd = -1;
	if (ev->cn.proc_fd >= 0)
		close(ev->cn.proc_fd);
	free(ev->cn.seq);
	free(ev->cn.pid);
	free(ev->cn.ppid);
	free(ev->cn.execs);
	memset(&ev->cn, 0, sizeof ev->cn);
	ev->cn.proc_fd = -1;
}

static int cn_fill(struct tk_events *ev, size_t max)
{
	uint64_t mono_to_boot = cn_mono_to_boot(ev);
	char buf[4096] __attribute__((aligned(8)));
	size_t got = 0;

	/* The exec reads kept so far were confirmed by the last drain's
	 * end, or their events are taken; a reader that leaves more queued
	 * than the queue's bound has taken some of them. */
	if (ev->cn.drained || tk_events_queued(ev) == 0 || ev->cn.elen > ev->qmax)
		exec_forget(&ev->cn);
	ev->cn.drained = 0;
	/* A message gives at most one event: read while there is room for
	 * it. What is left stays in the socket, whose overflow is counted. */
	while (got < max && queue_has_room(ev)) {
		int heard, err = 0;
		ssize_t n = cn_recv(ev, buf, sizeof buf, &heard);

		if (n == 0) {
			/* What was in the socket at an overrun is read. */
			ev->cn.blind = 0;
			ev->cn.drained = 1;
			return 0;
		}
		if (n == -EINTR)
			continue;
		if (n == -ENOBUFS) {
			err = cn_overrun(ev);
		} else if (n < 0) {
			return (int)n;
		} else {
			/* A flood of forged messages still ends the drain. */
			if (heard)
				err = cn_handle(ev, buf, (size_t)n, mono_to_boot);
			got++;
		}
		if (err < 0)
			return err;
	}
	return 0;
}

/* ---- poll: snapshots diffed on a timer ------------------------------------ */

static void observed(struct tk_event *e, uint32_t type, const struct tk_record *r, uint64_t time_ns)
{
	memset(e, 0, sizeof *e);
	e->type = type;
	e->flags = TK_EVF_OBSERVED | TK_EVF_COMM;
	e->pid = e->tid = r->pid;
	e->ppid = r->ppid;
	e->time_ns = time_ns;
	memcpy(e->comm, r->comm, r->comm_len < sizeof e->comm - 1 ? r->comm_len : sizeof e->comm - 1);
}

struct poll_diff_ctx {
	struct tk_events *ev;
	uint64_t now;
};

static int poll_diff_record(void *ctx, enum tk_join what, const struct tk_record *ra,
                            const struct tk_record *rb)
{
	struct poll_diff_ctx *d = ctx;
	struct tk_event e;

	if (what == TK_JOIN_GONE)
		observed(&e, TK_EV_EXIT, ra, d->now);
	else if (what == TK_JOIN_NEW)
		observed(&e, TK_EV_FORK, rb, rb->start_ns);  /* its birth is when it forked */
	else if (ra->comm_len != rb->comm_len || memcmp(ra->comm, rb->comm, ra->comm_len) != 0)
		observed(&e, TK_EV_COMM, rb, d->now);
	else
		return 0;
	return queue_event(d->ev, &e);
}

static int poll_diff(struct tk_events *ev, const struct tk_recbuf *a, const struct tk_recbuf *b,
                     uint64_t now)
{
	struct poll_diff_ctx d = { ev, now };

	return tk_recbuf_join(a, b, poll_diff_record, &d);
}

static int poll_snapshot(struct tk_events *ev, struct tk_recbuf *out)
{
	int err;

	out->len = out->vanished = out->denied = 0;
	err = tk_proc_scan(&ev->poll.scanner, out, 1);
	if (err == 0)
		tk_recbuf_sort(out);
	return err;
}

static int poll_open(struct tk_events *ev, double interval, size_t buffer, char *why,
                     size_t why_len)
{
	struct itimerspec its;
	int err;

	(void)buffer;
	tk_proc_scanner_unopened(&ev->poll.scanner);
	ev->held_fds = 2;
	if (ev->mask & TK_EV_BIT(TK_EV_EXEC)) {
		/* A diff of snapshots sees a process's name change, not the exec
		 * behind it: a stream that would never deliver one is refused. */
		snprintf(why, why_len, "it observes only fork, exit and comm (snapshots diffed on "
		         "a timer), not exec: ask for those types, or use backend \"bpf\" or "
		         "\"connector\" (root)");
		return -EOPNOTSUPP;
	}
	if (!(interval >= TK_EVENTS_INTERVAL_MIN && interval <= TK_EVENTS_INTERVAL_MAX)) {
		snprintf(why, why_len, "interval must be between %g and %g s",
		         TK_EVENTS_INTERVAL_MIN, TK_EVENTS_INTERVAL_MAX);
		return -EINVAL;
	}
	err = tk_proc_scanner_init(&ev->poll.scanner, "/proc");
	if (err < 0) {
		snprintf(why, why_len, "open /proc: %s", strerror(-err));
		return err;
	}
	ev->poll.scanner_open = 1;
	err = poll_snapshot(ev, &ev->poll.prev);
	if (err < 0) {
		snprintf(why, why_len, "snapshot of /proc: %s", strerror(-err));
		return err;
	}
	ev->fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (ev->fd < 0) {
		err = -errno;
		snprintf(why, why_len, "timerfd_create: %s", strerror(errno));
		return err;
	}
	its.it_interval.tv_sec = (time_t)interval;
	its.it_interval.tv_nsec = (long)((interval - (double)its.it_interval.tv_sec) * 1e9);
	its.it_value = its.it_interval;
	if (timerfd_settime(ev->fd, 0, &its, NULL) < 0) {
		err = -errno;
		snprintf(why, why_len, "timerfd_settime: %s", strerror(errno));
		return err;
	}
	return 0;
}

static int poll_fill(struct tk_events *ev, size_t max)
{
	uint64_t ticks;
	struct tk_recbuf tmp;
	int err;

	(void)max;  /* a tick's diff is queued whole, up to the queue's bound */
	if (read(ev->fd, &ticks, sizeof ticks) != (ssize_t)sizeof ticks)
		return errno == EAGAIN ? 0 : -errno;
	/* A full queue skips the tick: the next diff covers it. */
	if (!queue_has_room(ev))
		return 0;
	err = poll_snapshot(ev, &ev->poll.next);
	if (err < 0)
		return err;
	err = poll_diff(ev, &ev->poll.prev, &ev->poll.next, tk_boottime_ns());
	tmp = ev->poll.prev;
	ev->poll.prev = ev->poll.next;
	ev->poll.next = tmp;
	return err;
}

static void poll_close(struct tk_events *ev)
{
	if (ev->fd >= 0)
		close(ev->fd);
	ev->fd = -1;
	if (ev->poll.scanner_open)
		tk_proc_scanner_close(&ev->poll.scanner);
	tk_recbuf_free(&ev->poll.prev);
	tk_recbuf_free(&ev->poll.next);
	ev->poll.scanner_open = 0;
}

/* ---- bpf: the ring buffer ------------------------------------------------- */

#ifdef TK_NO_BPF

static int bpf_open(struct tk_events *ev, double interval, size_t buffer, char *why,
                    size_t why_len)
{
	(void)ev;
	(void)interval;
	(void)buffer;
	snprintf(why, why_len, "this takana was built without BPF (make BPF=0)");
	return -ENOTSUP;
}

static int bpf_fill(struct tk_events *ev, size_t max)
{
	(void)ev;
	(void)max;
	return -ENOTSUP;
}

static void bpf_close(struct tk_events *ev)
{
	(void)ev;
}

#else

#include <dirent.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include "bpf_load.h"
#include "skeletons.h"

/* The program claims each exit once, yet on Debian's 6.1 two threads of
 * one process sometimes both got through (both saw signal->live at zero
 * and the claim map took both inserts). The last exits seen, a slot per
 * hash of (pid, start), drop a second one for the same process. */
#define EXIT_SEEN_SLOTS 16384u

struct tk_exit_seen {
	uint64_t start_ns;
	uint32_t pid;
};

static int exit_seen_before(struct tk_exit_seen *seen, const struct tk_event *e)
{
	struct tk_exit_seen *slot;

	if (e->start_ns == 0)
		return 0;
	slot = &seen[(e->pid * 2654435761u ^ (uint32_t)(e->start_ns >> 10)) % EXIT_SEEN_SLOTS];
	if (slot->pid == e->pid && slot->start_ns == e->start_ns)
		return 1;
	slot->pid = e->pid;
	slot->start_ns = e->start_ns;
	return 0;
}

/* The events object. The first stream of a ring size has one to itself
 * (solo): its pollable fd is the ring's own, so a wakeup goes straight from
 * the ring to the caller's epoll set, with no set of the stream's own in
 * between and no eventfd to read at each fill. A ring shared cannot work
 * that way: a stream whose fill drains it takes the others' events into
 * their inboxes and leaves the ring empty, so each sharing stream polls
 * an epoll set of the ring and an eventfd the filler writes. The later
 * streams of that ring size share a second object, loaded once: each costs
 * that set, the eventfd (2 descriptors), the links of the types no other
 * stream wanted yet, and per wakeup one nested epoll hop and one eventfd
 * read (a syscall) at each fill. Every program is loaded (verified) with
 * an object, so a later stream's types only need attaching; a type's link
 * is held while a stream wants it. One consumer drains a shared ring for
 * all: the stream whose fill runs takes its events into its own queue, the
 * others' go to their inboxes. */
struct tk_ev_shared {
	struct tk_ev_shared *next;
	unsigned refs;
	size_t ring_bytes;
	struct takana_events_light *light;
	struct takana_events *skel;
	int prog_fd[TK_EV_TYPES];
	int link_fd[TK_EV_TYPES];
	unsigned link_refs[TK_EV_TYPES];
	int ring_fd;
	volatile __u64 *lost;          /* the program's lost[], in its .bss */
	struct ring_buffer *ring;
	struct tk_exit_seen *exit_seen;
	struct tk_events **streams;
	size_t nstreams, streams_cap;
	struct tk_events *filling;     /* the stream whose fill consumes */
	int stopped;                   /* the callback stopped: no stream has room */
	int forked;                    /* inherited through fork(): the parent's ring */
	int solo;                      /* one stream's own: no other joins */
	/* added to the programs' boottime stamps: our time namespace's */
	int64_t boot_offset_ns;
};

/* Guards the list, every object, and the inboxes of their streams. */
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tk_ev_shared *shared_list;

static const char *const prog_names[TK_EV_TYPES] = {
	[TK_EV_FORK] = "on_fork", [TK_EV_EXEC] = "on_exec",
	[TK_EV_EXIT] = "on_exit", [TK_EV_COMM] = "on_rename",
};

static int inbox_push(struct tk_events *ev, const struct tk_event *e)
{
	if (ev->bpf.inlen >= ev->qmax) {
		ev->bpf.indropped++;
		return 0;
	}
	if (ev->bpf.inlen == ev->bpf.incap) {
		struct tk_event *in = tk_grow(ev->bpf.inbox, &ev->bpf.incap, ev->bpf.inlen + 1, sizeof *in, 256);

		if (in == NULL) {
			ev->bpf.indropped++;
			return 0;
		}
		ev->bpf.inbox = in;
	}
	ev->bpf.inbox[ev->bpf.inlen++] = *e;
	return 0;
}

static int stream_has_room(const struct tk_ev_shared *sh, const struct tk_events *ev)
{
	return ev == sh->filling ? queue_has_room(ev) : ev->bpf.inlen < ev->qmax;
}

static int ring_event(void *ctx, void *data, size_t size)
{
	struct tk_ev_shared *sh = ctx;
	struct tk_event e;
	int room = 0;

	/* Only exec events carry argv, the event's tail. Counted on the
	 * stream whose read found them: another stream's counters are its
	 * owner's (maybe another thread's) to touch. */
	if (size < TK_EV_BASE_SIZE) {
		sh->filling->malformed++;
		return 0;
	}
	memcpy(&e, data, size < sizeof e ? size : sizeof e);
	if (size < sizeof e || e.argv_len > sizeof e.argv) {
		e.argv_len = 0;
		e.flags &= ~TK_EVF_ARGV;
	}
	/* The programs read the kernel's clock; clock_gettime() and /proc add
	 * our time namespace's offset. start_ns 0 is "unknown". */
	e.time_ns += (uint64_t)sh->boot_offset_ns;
	if (e.start_ns != 0)
		e.start_ns += (uint64_t)sh->boot_offset_ns;
	if (e.type == TK_EV_EXIT && exit_seen_before(sh->exit_seen, &e)) {
		sh->filling->duplicates++;
		return 0;
	}
	if (e.flags & TK_EVF_ACCT) {
		/* Split the precise runtime as /proc would have. */
		uint64_t ut = e.utime_ns, st = e.stime_ns;

		tk_cputime_split(e.runtime_ns, 0, 0, &ut, &st);
		e.utime_ns = ut;
		e.stime_ns = st;
	}
	for (size_t i = 0; i < sh->nstreams; i++) {
		struct tk_events *ev = sh->streams[i];

		if (e.type < TK_EV_TYPES && (ev->mask & TK_EV_BIT(e.type))) {
			if (ev == sh->filling) {
				if (queue_event(ev, &e) < 0)
					return -ENOMEM;
			} else {
				inbox_push(ev, &e);
			}
		}
		room |= stream_has_room(sh, ev);
	}
	/* libbpf has consumed a sample by the time it calls back: stop after
	 * the one that leaves no stream room, and the rest stays in the ring
	 * (with one stream: its queue is full). */
	if (!room) {
		sh->stopped = 1;
		return -ECANCELED;
	}
	return 0;
}

static int bpf_lost_check(struct tk_events *ev)
{
	struct tk_ev_shared *sh = ev->bpf.shared;
	uint64_t total = 0;

	for (int t = 0; t < TK_EV_TYPES; t++) {
		uint64_t now;

		if (!(ev->mask & TK_EV_BIT(t)))
			continue;
		now = __atomic_load_n(&sh->lost[t], __ATOMIC_RELAXED);
		total += now - ev->bpf.lost_seen[t];
		ev->lost_by_type[t] += now - ev->bpf.lost_seen[t];
		ev->bpf.lost_seen[t] = now;
	}
	return total ? queue_lost(ev, total, tk_boottime_ns()) : 0;
}

/* Descriptors the first stream holds or needs while it loads: the maps
 * (ring, claims, .bss, .rodata), the BTF object, 4 programs and 4 links,
 * the epoll fds and the eventfd, and what libbpf opens for its feature
 * probes. Later streams need 2. */
#define BPF_STREAM_FDS 24

/* Descriptors this process may still open under RLIMIT_NOFILE, or -1 when
 * unknown. */
static long fd_headroom(long *limit)
{
	struct rlimit rl;
	struct dirent *d;
	long open_fds = 0;
	DIR *dir;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return -1;
	*limit = (long)rl.rlim_cur;
	dir = opendir("/proc/self/fd");
	if (dir == NULL)
		return errno == EMFILE || errno == ENFILE ? 0 : -1;
	while ((d = readdir(dir)) != NULL)
		if (d->d_name[0] != '.')
			open_fds++;
	closedir(dir);
	/* The directory's own descriptor was counted. */
	return *limit - (open_fds - 1);
}

/* After a failed load or setup: a load short of descriptors fails with
 * whatever errno the step that ran out reports (EINVAL from the verifier's
 * log setup, among others). If they ran short, say so, as EMFILE. */
static int explain_fds(int err, char *why, size_t why_len)
{
	long limit = 0, free_fds = fd_headroom(&limit);

	/* Short of descriptors, the kernel may say EINVAL; a refusal of
	 * privilege stays what it is, however few are free. */
	if (err == -EPERM || err == -EACCES)
		return err;
	if (err != -EMFILE && err != -ENFILE && (free_fds < 0 || free_fds >= BPF_STREAM_FDS))
		return err;
	if (err == -ENFILE) {
		snprintf(why, why_len, "the system is out of file descriptors (ENFILE): a bpf "
		         "stream needs about %d; close what is no longer used", BPF_STREAM_FDS);
		return err;
	}
	snprintf(why, why_len, "out of file descriptors (EMFILE): a bpf stream needs about %d "
	         "and %ld of RLIMIT_NOFILE %ld are free; close streams and files no longer "
	         "used, or raise the limit (ulimit -n)", BPF_STREAM_FDS,
	         free_fds < 0 ? 0 : free_fds, limit);
	return -EMFILE;
}

/* The inode number of the caller's pid namespace, 0 for the initial one
 * (PROC_PID_INIT_INO): the program reports pids as the caller numbers them. */
static int reader_pidns(uint32_t *inum, char *why, size_t why_len)
{
	struct stat st;

	if (stat("/proc/self/ns/pid", &st) < 0) {
		int err = -errno;
		snprintf(why, why_len, "cannot tell this process's pid namespace "
		         "(/proc/self/ns/pid: %s), so not which pids it sees: mount /proc",
		         strerror(errno));
		return err;
	}
	*inum = st.st_ino == 0xEFFFFFFCu ? 0 : (uint32_t)st.st_ino;
	return 0;
}

static void shared_destroy(struct tk_ev_shared *sh)
{
	for (int t = 0; t < TK_EV_TYPES; t++)
		if (sh->link_fd[t] >= 0)
			close(sh->link_fd[t]);
	ring_buffer__free(sh->ring);
	takana_events_light__destroy(sh->light);
	takana_events__destroy(sh->skel);
	free(sh->exit_seen);
	free(sh->streams);
	free(sh);
}

/* Each CPU has its own LRU list of max_entries / ncpu claims: 4096 on each
 * (a claim is needed only until the group's last thread has passed the
 * tracepoint), at most 65,536 in all. */
static uint32_t exit_claims_entries(void)
{
	int ncpu = libbpf_num_possible_cpus();

	if (ncpu <= 0)
		return 0;
	return (uint32_t)(ncpu < 16 ? ncpu * 4096 : 65536);
}

/* What the events object's load is given (setup) and fills (adopt). */
struct shared_load_ctx {
	struct tk_ev_shared *sh;
	uint32_t pidns;
};

TK_BPF_SKEL_STEPS(takana_events_light)
TK_BPF_SKEL_STEPS(takana_events)

static int events_light_setup(void *skel, void *ctx)
{
	struct takana_events_light *s = skel;
	const struct shared_load_ctx *c = ctx;
	uint32_t claims = exit_claims_entries();

	s->rodata->page_size = (uint64_t)sysconf(_SC_PAGESIZE);
	s->rodata->reader_pidns = c->pidns;
	s->maps.events.max_entries = (uint32_t)c->sh->ring_bytes;
	if (claims)
		s->maps.exit_claims.max_entries = claims;
	return 0;
}

static int events_light_adopt(void *skel, void *ctx)
{
	struct takana_events_light *s = skel;
	struct tk_ev_shared *sh = ((struct shared_load_ctx *)ctx)->sh;

	sh->light = s;
	sh->prog_fd[TK_EV_FORK] = s->progs.on_fork.prog_fd;
	sh->prog_fd[TK_EV_EXEC] = s->progs.on_exec.prog_fd;
	sh->prog_fd[TK_EV_EXIT] = s->progs.on_exit.prog_fd;
	sh->prog_fd[TK_EV_COMM] = s->progs.on_rename.prog_fd;
	sh->ring_fd = s->maps.events.map_fd;
	sh->lost = s->bss->lost;
	return 0;
}

static int events_libbpf_setup(void *skel, void *ctx)
{
	struct takana_events *s = skel;
	const struct shared_load_ctx *c = ctx;
	uint32_t claims = exit_claims_entries();

	s->rodata->page_size = (uint64_t)sysconf(_SC_PAGESIZE);
	s->rodata->reader_pidns = c->pidns;
	bpf_map__set_max_entries(s->maps.events, (uint32_t)c->sh->ring_bytes);
	if (claims)
		bpf_map__set_max_entries(s->maps.exit_claims, claims);
	return 0;
}

static int events_libbpf_adopt(void *skel, void *ctx)
{
	struct takana_events *s = skel;
	struct tk_ev_shared *sh = ((struct shared_load_ctx *)ctx)->sh;

	sh->skel = s;
	for (int t = 0; t < TK_EV_TYPES; t++)
		if (prog_names[t] != NULL)
			sh->prog_fd[t] = bpf_program__fd(
				bpf_object__find_program_by_name(s->obj, prog_names[t]));
	sh->ring_fd = bpf_map__fd(s->maps.events);
	sh->lost = s->bss->lost;
	return 0;
}

/* The programs are attached per stream, by type (shared_attach). */
static const struct tk_bpf_loader events_loader = {
	.name = "events",
	.light = { takana_events_light_open_step, events_light_setup, takana_events_light_load_step,
	           NULL, events_light_adopt, takana_events_light_destroy_step },
	.libbpf = { takana_events_open_step, events_libbpf_setup, takana_events_load_step,
	            NULL, events_libbpf_adopt, takana_events_destroy_step },
};

/* Called with shared_lock held. */
static int shared_load(size_t ring, struct tk_ev_shared **out, char *why, size_t why_len)
{
	struct tk_ev_shared *sh;
	struct tk_timens offsets = { 0, 0 };
	uint32_t pidns = 0;
	int err;

	err = reader_pidns(&pidns, why, why_len);
	if (err == 0)
		err = tk_timens_offsets(&offsets, why, why_len);
	if (err < 0)
		return err;
	sh = calloc(1, sizeof *sh);
	if (sh == NULL)
		return -ENOMEM;
	sh->boot_offset_ns = offsets.boottime_ns;
	sh->ring_bytes = ring;
	sh->ring_fd = -1;
	for (int t = 0; t < TK_EV_TYPES; t++)
		sh->prog_fd[t] = sh->link_fd[t] = -1;
	sh->exit_seen = calloc(EXIT_SEEN_SLOTS, sizeof *sh->exit_seen);
	if (sh->exit_seen == NULL) {
		free(sh);
		snprintf(why, why_len, "the table of recent exits: %s", strerror(ENOMEM));
		return -ENOMEM;
	}
	tk_bpf_load_begin();
	err = tk_bpf_load(&events_loader, &(struct shared_load_ctx){ sh, pidns });
	if (err < 0) {
		tk_bpf_explain("bpf_ringbuf", BTF_KIND_STRUCT, "5.8", err, why, why_len);
		err = explain_fds(err, why, why_len);
		tk_bpf_load_end();
		shared_destroy(sh);
		return err;
	}
	tk_bpf_load_end();
	sh->ring = ring_buffer__new(sh->ring_fd, ring_event, sh, NULL);
	if (sh->ring == NULL) {
		err = -errno;
		snprintf(why, why_len, "ring_buffer__new: %s", strerror(errno));
		shared_destroy(sh);
		return explain_fds(err, why, why_len);
	}
	*out = sh;
	return 0;
}

static void shared_detach(struct tk_ev_shared *sh, uint32_t mask)
{
	for (int t = 0; t < TK_EV_TYPES; t++) {
		if (!(mask & TK_EV_BIT(t)) || sh->prog_fd[t] < 0 || sh->link_refs[t] == 0)
			continue;
		if (--sh->link_refs[t] == 0) {
			close(sh->link_fd[t]);
			sh->link_fd[t] = -1;
		}
	}
}

static int shared_attach(struct tk_ev_shared *sh, uint32_t mask, char *why, size_t why_len)
{
	for (int t = 0; t < TK_EV_TYPES; t++) {
		int fd;

		if (!(mask & TK_EV_BIT(t)) || prog_names[t] == NULL)
			continue;
		if (sh->prog_fd[t] < 0) {
			/* Never a stream that silently misses a type. */
			snprintf(why, why_len, "the loaded events object has no %s program", prog_names[t]);
			shared_detach(sh, mask & (TK_EV_BIT(t) - 1));
			return -ENOENT;
		}
		if (sh->link_refs[t] == 0) {
			fd = bpf_raw_tracepoint_open(NULL, sh->prog_fd[t]);
			if (fd < 0) {
				int err = -errno;

				snprintf(why, why_len, "attaching %s: %s", prog_names[t], strerror(errno));
				shared_detach(sh, mask & (TK_EV_BIT(t) - 1));
				return explain_fds(err, why, why_len);
			}
			sh->link_fd[t] = fd;
		}
		sh->link_refs[t]++;
	}
	return 0;
}

static void shared_unref(struct tk_ev_shared *sh)
{
	struct tk_ev_shared **p;

	if (--sh->refs > 0)
		return;
	for (p = &shared_list; *p != NULL; p = &(*p)->next) {
		if (*p == sh) {
			*p = sh->next;
			break;
		}
	}
	shared_destroy(sh);
}

/* The stream's own descriptors, first: once listed in the object, another
 * thread's read may wake it. An epoll set holding its eventfd; the ring's
 * joins it once the stream holds the object. */
static int bpf_stream_fds(struct tk_events *ev, char *why, size_t why_len)
{
	struct epoll_event pe;
	int err;

	ev->fd = epoll_create1(EPOLL_CLOEXEC);
	ev->bpf.wake_fd = ev->fd < 0 ? -1 : eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (ev->fd < 0 || ev->bpf.wake_fd < 0) {
		err = -errno;
		snprintf(why, why_len, "%s: %s", ev->fd < 0 ? "epoll_create1" : "eventfd", strerror(errno));
		return explain_fds(err, why, why_len);
	}
	memset(&pe, 0, sizeof pe);
	pe.events = EPOLLIN;
	if (epoll_ctl(ev->fd, EPOLL_CTL_ADD, ev->bpf.wake_fd, &pe) < 0) {
		err = -errno;
		snprintf(why, why_len, "epoll_ctl: %s", strerror(errno));
		return err;
	}
	return 0;
}

/* Called with shared_lock held, the stream holding a reference to sh
 * (bpf_close drops it on failure): lists the stream in the object,
 * attaches its types and puts the ring in its epoll set. */
static int bpf_join(struct tk_events *ev, struct tk_ev_shared *sh, char *why, size_t why_len)
{
	struct epoll_event pe;
	int err;

	if (sh->nstreams == sh->streams_cap) {
		struct tk_events **s = tk_grow(sh->streams, &sh->streams_cap, sh->nstreams + 1,
		                               sizeof(struct tk_events *), 4);

		if (s == NULL) {
			snprintf(why, why_len, "the list of streams: %s", strerror(ENOMEM));
			return -ENOMEM;
		}
		sh->streams = s;
	}
	err = shared_attach(sh, ev->mask, why, why_len);
	if (err < 0)
		return err;
	/* The ring's descriptor lives as long as the object, which this
	 * stream holds from here. */
	memset(&pe, 0, sizeof pe);
	pe.events = EPOLLIN;
	if (epoll_ctl(ev->fd, EPOLL_CTL_ADD, sh->ring_fd, &pe) < 0) {
		err = -errno;
		shared_detach(sh, ev->mask);
		snprintf(why, why_len, "epoll_ctl: %s", strerror(-err));
		return err;
	}
	sh->streams[sh->nstreams++] = ev;
	/* Losses count from now: the program's counters are the object's. */
	for (int t = 0; t < TK_EV_TYPES; t++)
		ev->bpf.lost_seen[t] = sh->lost[t];
	return 0;
}

/* A child of fork() would share its parent's rings: each event is read by
 * whichever process drains first, so both would lose events. The child's
 * new streams load their own object; the streams it inherited refuse to
 * read (EXDEV): a stream belongs to the process that opened it. */
static void events_fork(enum tk_fork_phase phase)
{
	if (phase == TK_FORK_PREPARE) {
		pthread_mutex_lock(&shared_lock);
		return;
	}
	if (phase == TK_FORK_CHILD) {
		for (struct tk_ev_shared *sh = shared_list; sh != NULL; sh = sh->next)
			sh->forked = 1;
		shared_list = NULL;
	}
	pthread_mutex_unlock(&shared_lock);
}

__attribute__((constructor)) static void events_fork_register(void)
{
	tk_fork_register(TK_FORK_RANK_EVENTS, events_fork);
}

/* A solo stream's object: listed, attached, its ring the stream's fd. */
static int bpf_join_solo(struct tk_events *ev, struct tk_ev_shared *sh, char *why, size_t why_len)
{
	int err;

	sh->streams = calloc(1, sizeof(struct tk_events *));
	if (sh->streams == NULL) {
		snprintf(why, why_len, "the list of streams: %s", strerror(ENOMEM));
		return -ENOMEM;
	}
	sh->streams_cap = 1;
	err = shared_attach(sh, ev->mask, why, why_len);
	if (err < 0)
		return err;
	sh->streams[sh->nstreams++] = ev;
	ev->fd = sh->ring_fd;
	for (int t = 0; t < TK_EV_TYPES; t++)
		ev->bpf.lost_seen[t] = sh->lost[t];
	return 0;
}

static int bpf_open(struct tk_events *ev, double interval, size_t buffer, char *why,
                    size_t why_len)
{
	struct tk_ev_shared *sh, *any;
	size_t ring = TK_EV_RING_DEFAULT;
	int err, solo;

	(void)interval;
	ev->fd = ev->bpf.wake_fd = -1;
	/* The program reads loginuid where the kernel has it; where it has
	 * not, the stream says why. */
	if (ev->mask & TK_EV_WHO_TYPES)
		loginuid_check(ev);
	/* The ring holds a power-of-two number of pages. */
	if (buffer) {
		ring = 4096;
		while (ring < buffer && ring < TK_BYTES_MAX)
			ring <<= 1;
	}
	pthread_mutex_lock(&shared_lock);
	for (any = shared_list; any != NULL && any->ring_bytes != ring; any = any->next)
		;
	for (sh = shared_list; sh != NULL && (sh->ring_bytes != ring || sh->solo); sh = sh->next)
		;
	/* The first of a ring size is solo; the later ones share. */
	solo = sh == NULL && any == NULL;
	if (!solo) {
		err = bpf_stream_fds(ev, why, why_len);
		if (err < 0) {
			pthread_mutex_unlock(&shared_lock);
			return err;
		}
	}
	if (sh == NULL) {
		err = shared_load(ring, &sh, why, why_len);
		if (err < 0) {
			pthread_mutex_unlock(&shared_lock);
			return err;
		}
		sh->solo = solo;
		sh->next = shared_list;
		shared_list = sh;
	}
	sh->refs++;
	ev->bpf.shared = sh;
	ev->bpf.solo = solo;
	ev->ring_bytes = ring;
	ev->held_bytes = ring;
	ev->held_fds = BPF_STREAM_FDS;
	err = solo ? bpf_join_solo(ev, sh, why, why_len) : bpf_join(ev, sh, why, why_len);
	pthread_mutex_unlock(&shared_lock);
	return err;
}

/* Moves what other streams' fills left in the inbox (older than what is
 * in the ring) into the queue, as far as it has room. */
static int inbox_take(struct tk_events *ev)
{
	size_t i;

	for (i = 0; i < ev->bpf.inlen && queue_has_room(ev); i++)
		if (queue_event(ev, &ev->bpf.inbox[i]) < 0)
			return -ENOMEM;
	if (i > 0) {
		memmove(ev->bpf.inbox, ev->bpf.inbox + i, (ev->bpf.inlen - i) * sizeof *ev->bpf.inbox);
		ev->bpf.inlen -= i;
	}
	ev->qdropped += ev->bpf.indropped;
	ev->bpf.indropped = 0;
	return 0;
}

static int bpf_fill(struct tk_events *ev, size_t max)
{
	struct tk_ev_shared *sh = ev->bpf.shared;
	uint64_t count;
	size_t before[64];
	int n, err;

	(void)max;
	if (sh->forked)
		return -EXDEV;      /* the parent's ring: open a stream here */
	if (ev->bpf.wake_fd >= 0 && read(ev->bpf.wake_fd, &count, sizeof count) < 0 && errno != EAGAIN)
		return -errno;
	/* A solo object is this stream's alone, and a stream is read by one
	 * thread at a time: nothing to guard, and the lock's cold cache lines
	 * stay out of the path from a wakeup to the event. A fork() meanwhile
	 * leaves the child a ring it refuses to read (forked). */
	if (!ev->bpf.solo)
		pthread_mutex_lock(&shared_lock);
	err = inbox_take(ev);
	if (err == 0 && queue_has_room(ev)) {
		/* Which other streams got events: their eventfds are woken. */
		for (size_t i = 0; i < sh->nstreams && i < 64; i++)
			before[i] = sh->streams[i]->bpf.inlen + sh->streams[i]->bpf.indropped;
		sh->filling = ev;
		sh->stopped = 0;
		n = ring_buffer__consume(sh->ring);
		sh->filling = NULL;
		if (n < 0 && !(n == -ECANCELED && sh->stopped))
			err = n;
		for (size_t i = 0; i < sh->nstreams; i++) {
			struct tk_events *other = sh->streams[i];

			if (other != ev && (i >= 64 || other->bpf.inlen + other->bpf.indropped != before[i])) {
				count = 1;
				if (write(other->bpf.wake_fd, &count, sizeof count) < 0 && errno != EAGAIN)
					continue;   /* it still finds them at its next read */
			}
		}
	}
	if (err == 0)
		err = bpf_lost_check(ev);
	if (!ev->bpf.solo)
		pthread_mutex_unlock(&shared_lock);
	return err;
}

static void bpf_close(struct tk_events *ev)
{
	struct tk_ev_shared *sh = ev->bpf.shared;

	if (sh != NULL) {
		size_t i;

		pthread_mutex_lock(&shared_lock);
		for (i = 0; i < sh->nstreams && sh->streams[i] != ev; i++)
			;
		if (i < sh->nstreams) {
			sh->streams[i] = sh->streams[--sh->nstreams];
			shared_detach(sh, ev->mask);
		}
		shared_unref(sh);
		pthread_mutex_unlock(&shared_lock);
	}
	ev->bpf.shared = NULL;
	if (ev->bpf.wake_fd >= 0)
		close(ev->bpf.wake_fd);
	ev->bpf.wake_fd = -1;
	/* A solo stream's fd is its object's ring, closed with the object. */
	if (ev->fd >= 0 && !ev->bpf.solo)
		close(ev->fd);
	ev->fd = -1;
	free(ev->bpf.inbox);
	ev->bpf.inbox = NULL;
	ev->bpf.inlen = ev->bpf.incap = 0;
}

#endif

/* ---- the stream ----------------------------------------------------------- */

static const struct tk_ev_ops bpf_ops = { "bpf", bpf_open, bpf_fill, bpf_close };
static const struct tk_ev_ops cn_ops = { "connector", cn_open, cn_fill, cn_close };
static const struct tk_ev_ops poll_ops = { "poll", poll_open, poll_fill, poll_close };

const struct tk_ev_ops *const tk_ev_backends[] = { &bpf_ops, &cn_ops, &poll_ops, NULL };

int tk_events_open(struct tk_events *ev, const struct tk_ev_ops *ops, uint32_t mask,
                   double interval, size_t buffer, size_t queue, char *why, size_t why_len)
{
	int err;

	memset(ev, 0, sizeof *ev);
	ev->fd = -1;
	ev->ops = ops;
	ev->mask = mask;
	ev->qmax = queue ? queue : TK_EVENTS_QUEUE;
	ev->realtime_offset_ns = tk_realtime_offset_ns();
	err = ops->open(ev, interval, buffer, why, why_len);
	if (err < 0)
		tk_events_close(ev);
	return err;
}

int tk_events_fill(struct tk_events *ev, size_t max)
{
	int err;

	if (ev->closed)
		return -EBADF;
	/* Sampled when read: a wall-clock step since is then taken into
	 * account, a suspend need not be (both clocks count it). */
	ev->realtime_offset_ns = tk_realtime_offset_ns();
	err = ev->ops->fill(ev, max);
	/* Events with no room in the queue and no kernel buffer to stay in
	 * (poll's diff, what the connector read while subscribing): lost,
	 * and said so. */
	if (err == 0 && ev->qdropped > 0) {
		err = queue_lost(ev, ev->qdropped, tk_boottime_ns());
		ev->qdropped = 0;
	}
	return err;
}

void tk_events_close(struct tk_events *ev)
{
	if (ev->closed)
		return;
	ev->closed = 1;
	ev->ops->close(ev);
	free(ev->queue);
	ev->queue = NULL;
	ev->qlen = ev->qcap = ev->qhead = 0;
}
