/* What the host says about itself in /proc and /sys: the load line, the
 * controllers /proc/cgroups lists, the kernel release, whether BTF, PSI and
 * /proc itself can be read. No Lua; negative errno. */
#ifndef TAKANA_HOST_H
#define TAKANA_HOST_H

#include <stddef.h>
#include <stdint.h>

/* /proc/loadavg: "0.52 0.58 0.59 2/1234 5678". Loads in hundredths (the
 * kernel prints two decimals); tasks counts threads. */
struct tk_loadavg {
	uint64_t load_centi[3];
	uint64_t running, tasks, last_pid;
};
int tk_loadavg_parse(const char *buf, size_t len, struct tk_loadavg *out);   /* 0 or -EBADMSG */
int tk_loadavg_read(struct tk_loadavg *out);

/* /proc/cgroups, one cb per controller line ("cpu 0 12 1": hierarchy 0 is
 * v2, enabled 0 or 1); the header and malformed lines are skipped. Returns
 * 0, or what cb stopped with (anything but 0). */
typedef int (*tk_ctrl_cb)(void *ctx, const char *name, size_t len, uint64_t hierarchy,
                          int enabled);
int tk_proc_cgroups_parse(const char *buf, size_t len, tk_ctrl_cb cb, void *ctx);
int tk_proc_cgroups_read(tk_ctrl_cb cb, void *ctx);

/* uname's release, as /proc/sys/kernel/osrelease shows it. */
int tk_kernel_release(char *out, size_t cap);

/* 0 when the file can be read, else -errno: the kernel's BTF
 * (/sys/kernel/btf/vmlinux, opened), pressure stall information
 * (/proc/pressure/cpu, read: psi=0 leaves it there but refuses reads) and
 * /proc (our own stat line, read). */
int tk_btf_readable(void);
int tk_psi_readable(void);
int tk_proc_readable(void);

#endif
