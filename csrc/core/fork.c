/* fork() safety: handlers registered once per process (at module load)
 * take every lock a snapshot, a BPF load or an event stream may hold before
 * fork() and release them after it in both processes, so a child never
 * finds one held by a thread it does not have; the child then drops the
 * BPF objects it would share with its parent (each concern's tk_*_fork). */
#include <pthread.h>
#include <stdatomic.h>

#include "core.h"
#include "util.h"

static atomic_uint fork_generation;

static void fork_prepare(void)
{
	tk_bpf_fork(TK_FORK_PREPARE);
	tk_cgroup_mount_fork(TK_FORK_PREPARE);
}

static void fork_parent(void)
{
	tk_cgroup_mount_fork(TK_FORK_PARENT);
	tk_bpf_fork(TK_FORK_PARENT);
}

static void fork_child(void)
{
	atomic_fetch_add(&fork_generation, 1);
	tk_cgroup_mount_fork(TK_FORK_CHILD);
	tk_bpf_fork(TK_FORK_CHILD);
}

static void fork_register(void)
{
	struct tk_timens offsets;

	pthread_atfork(fork_prepare, fork_parent, fork_child);
	/* Learnt now, our time namespace's offsets stay known after an
	 * unshare(CLONE_NEWTIME), which hides them until the next exec. A
	 * failure is reported by the first use that needs them. */
	(void)tk_timens_offsets(&offsets, NULL, 0);
}

void tk_fork_watch(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, fork_register);
}

unsigned tk_fork_generation(void)
{
	return atomic_load(&fork_generation);
}
