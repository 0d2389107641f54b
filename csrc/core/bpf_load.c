/* Loading a BPF object the same way for every one of them (bpf_load.h):
 * the light skeleton, then libbpf's; libbpf's messages captured under one
 * lock; and, when the load failed, a reason a person can act on. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "bpf_load.h"
#include "fork.h"

/* Without BPF (make BPF=0) there is nothing to load: the file is empty. */
#ifndef TK_NO_BPF
#include <bpf/btf.h>
#include <bpf/libbpf.h>

/* TAKANA_BPF_LOADER=libbpf skips the light skeletons (to compare, or on a
 * kernel whose loader program misbehaves). */
int tk_bpf_light_wanted(void)
{
	const char *v = getenv("TAKANA_BPF_LOADER");

	return v == NULL || strcmp(v, "libbpf") != 0;
}

/* A light load that failed for a reason libbpf's load would meet too is
 * not tried again through libbpf. */
int tk_bpf_light_final(int err)
{
	return err == -EPERM || err == -EACCES || err == -EMFILE || err == -ENFILE;
}

/* libbpf's messages go to one buffer while a load runs (the load lock is
 * global because libbpf's print hook is). The last "libbpf:" line is kept
 * for the reason of a failed load. */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static char libbpf_last[200];

static int libbpf_capture(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char line[sizeof libbpf_last];
	size_t len;
	va_list copy;

	/* TAKANA_BPF_DEBUG=1 shows libbpf's whole output, verifier log included. */
	if (getenv("TAKANA_BPF_DEBUG") != NULL) {
		va_copy(copy, ap);
		vfprintf(stderr, fmt, copy);
		va_end(copy);
	}
	if (level == LIBBPF_DEBUG)
		return 0;
	vsnprintf(line, sizeof line, fmt, ap);
	len = strlen(line);
	while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == ' '))
		line[--len] = '\0';
	if (len > 0)
		memcpy(libbpf_last, line, len + 1);
	return 0;
}

/* Whether a kernel release ("6.8.0-45-generic") is older than "major.minor". */
static bool release_before(const char *release, const char *since)
{
	unsigned rmaj = 0, rmin = 0, smaj = 0, smin = 0;

	if (sscanf(release, "%u.%u", &rmaj, &rmin) != 2 || sscanf(since, "%u.%u", &smaj, &smin) != 2)
		return false;
	return rmaj < smaj || (rmaj == smaj && rmin < smin);
}

/* Turns a failed load into what a person can act on. Order matters: the
 * missing prerequisite is the reason, not the errno it happened to cause.
 * needs: a kernel BTF type the program cannot work without, and since. */
void tk_bpf_explain(const char *needs, int needs_kind, const char *since,
                    int err, char *why, size_t why_len)
{
	struct utsname uts;
	struct btf *btf;
	int has = -1;

	if (uname(&uts) != 0)
		strcpy(uts.release, "?");
	if (access("/sys/kernel/btf/vmlinux", R_OK) != 0) {
		snprintf(why, why_len, "no kernel BTF: /sys/kernel/btf/vmlinux is missing "
		         "(kernel %s built without CONFIG_DEBUG_INFO_BTF)", uts.release);
		return;
	}
	/* EACCES to root is the verifier's refusal, told below. */
	if (err == -EPERM || (err == -EACCES && geteuid() != 0)) {
		if (geteuid() == 0)
			snprintf(why, why_len, "EPERM: the kernel refused BPF even to root "
			         "(lockdown, seccomp or a user namespace?)");
		else
			snprintf(why, why_len, "EPERM: loading BPF needs CAP_BPF and CAP_PERFMON (or root)");
		return;
	}
	btf = btf__load_vmlinux_btf();
	if (btf != NULL) {
		has = btf__find_by_name_kind(btf, needs, needs_kind) > 0;
		btf__free(btf);
	}
	if (has == 0) {
		snprintf(why, why_len, "kernel %s too old: no %s (needs Linux >= %s)",
		         uts.release, needs, since);
		return;
	}
	/* The function is there, yet a refusal on a kernel older than since
	 * is the age still: program types gain kfuncs after the kfuncs
	 * themselves (a syscall program may call generic ones since 6.10). */
	if ((err == -EACCES || err == -EINVAL) && release_before(uts.release, since)) {
		snprintf(why, why_len, "kernel %s too old: needs Linux >= %s (the verifier refused "
		         "the program%s%s)", uts.release, since, libbpf_last[0] ? ": " : "", libbpf_last);
		return;
	}
	snprintf(why, why_len, "BPF load failed on kernel %s: %s%s%s", uts.release,
	         strerror(-err), libbpf_last[0] ? " -- " : "", libbpf_last);
}

void tk_bpf_load_begin(void)
{
	pthread_mutex_lock(&load_lock);
	libbpf_set_print(libbpf_capture);
	libbpf_last[0] = '\0';
}

void tk_bpf_load_end(void)
{
	pthread_mutex_unlock(&load_lock);
}

/* The load lock nests inside every module's own (fork.h). */
static void load_fork(enum tk_fork_phase phase)
{
	if (phase == TK_FORK_PREPARE)
		pthread_mutex_lock(&load_lock);
	else
		pthread_mutex_unlock(&load_lock);
}

__attribute__((constructor)) static void load_fork_register(void)
{
	tk_fork_register(TK_FORK_RANK_BPF_LOAD, load_fork);
}

bool tk_bpf_load_transient(int err)
{
	return err == -EMFILE || err == -ENFILE || err == -ENOMEM || err == -EAGAIN ||
	       err == -EINTR || err == -ENOBUFS;
}

void tk_bpf_load_note(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(libbpf_last, sizeof libbpf_last, fmt, ap);
	va_end(ap);
}

/* One skeleton, through every step; on failure nothing of it is left. */
static int load_skel(const struct tk_bpf_skel_ops *ops, void *ctx)
{
	void *skel;
	int err;

	errno = 0;
	skel = ops->open();
	if (skel == NULL)
		return errno > 0 ? -errno : -ENOMEM;
	err = ops->setup != NULL ? ops->setup(skel, ctx) : 0;
	if (err == 0)
		err = ops->load(skel);
	if (err == 0 && ops->attach != NULL)
		err = ops->attach(skel, ctx);
	if (err == 0) {
		err = ops->adopt(skel, ctx);
		if (err >= 0)
			return err;
	}
	ops->destroy(skel);
	return err < 0 ? err : -EINVAL;
}

int tk_bpf_load(const struct tk_bpf_loader *l, void *ctx)
{
	int err = -EINVAL;

	if (l->light.open != NULL && tk_bpf_light_wanted()) {
		err = load_skel(&l->light, ctx);
		if (err >= 0)
			return err;
		tk_bpf_load_note("light skeleton: %s", strerror(-err));
		if (getenv("TAKANA_BPF_DEBUG") != NULL)
			fprintf(stderr, "takana: %s: light skeleton: %s\n", l->name, strerror(-err));
		if (tk_bpf_light_final(err))
			return err;
	}
	return load_skel(&l->libbpf, ctx);
}

#endif
