/* fork() safety (fork.c): each module that holds a lock or a BPF object
 * across calls registers a hook, which fork.c's handlers call around every
 * fork(): PREPARE takes the module's locks, PARENT and CHILD release them,
 * CHILD also drops what the child would share with its parent. */
#ifndef TAKANA_FORK_H
#define TAKANA_FORK_H

enum tk_fork_phase { TK_FORK_PREPARE, TK_FORK_PARENT, TK_FORK_CHILD };

/* The order the modules' locks nest in, outermost first: PREPARE runs the
 * hooks in this order, PARENT and CHILD in the reverse. A tier's lock (or
 * the argv program's, or the streams') is taken before the load lock. */
enum tk_fork_rank {
	TK_FORK_RANK_TIERS,          /* bpf_snapshot.c */
	TK_FORK_RANK_ARGV,           /* cmdline.c */
	TK_FORK_RANK_EVENTS,         /* events.c */
	TK_FORK_RANK_BPF_LOAD,       /* bpf_load.c */
	TK_FORK_RANK_CGROUP_MOUNT,   /* cgroup_id.c */
	TK_FORK_RANKS
};

typedef void (*tk_fork_hook)(enum tk_fork_phase phase);

/* Called once per rank, from the module's constructor (before any thread
 * or fork of ours). */
void tk_fork_register(enum tk_fork_rank rank, tk_fork_hook hook);
/* Installs the handlers, once per process; tk_fork_generation() moves on
 * in every child. */
void tk_fork_watch(void);
unsigned tk_fork_generation(void);

#endif
