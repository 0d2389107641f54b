/* fork() safety: handlers registered once per process (at module load)
 * take every lock a snapshot, a BPF load or an event stream may hold before
 * fork() and release them after it in both processes, so a child never
 * finds one held by a thread it does not have; the child then drops the
 * BPF objects it would share with its parent. Each module registers its
 * own hook (tk_fork_register), so this file calls none of them by name. */
#include <pthread.h>
#include <stdatomic.h>

#include "fork.h"

static atomic_uint fork_generation;
static tk_fork_hook hooks[TK_FORK_RANKS];

void tk_fork_register(enum tk_fork_rank rank, tk_fork_hook hook)
{
	hooks[rank] = hook;
}

static void fork_prepare(void)
{
	for (int i = 0; i < TK_FORK_RANKS; i++)
		if (hooks[i] != NULL)
			hooks[i](TK_FORK_PREPARE);
}

static void fork_parent(void)
{
	for (int i = TK_FORK_RANKS - 1; i >= 0; i--)
		if (hooks[i] != NULL)
			hooks[i](TK_FORK_PARENT);
}

static void fork_child(void)
{
	atomic_fetch_add(&fork_generation, 1);
	for (int i = TK_FORK_RANKS - 1; i >= 0; i--)
		if (hooks[i] != NULL)
			hooks[i](TK_FORK_CHILD);
}

static void fork_register(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
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
