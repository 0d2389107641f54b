/* Pressure stall information (PSI): the host's /proc/pressure/<resource>
 * and a cgroup's <resource>.pressure, read and parsed, and the kernel's
 * triggers on them (pressure.c). */
#ifndef TAKANA_PRESSURE_H
#define TAKANA_PRESSURE_H

#include <stddef.h>
#include <stdint.h>

#include "cgroup_parse.h"

enum tk_pressure_resource { TK_PRESSURE_CPU, TK_PRESSURE_MEMORY, TK_PRESSURE_IO, TK_PRESSURE_COUNT };

/* "cpu", "memory", "io"; NULL out of range. */
const char *tk_pressure_name(int resource);

struct tk_pressure {
	int have_some, have_full; /* cpu before 5.13 has no "full" line */
	struct tk_psi_line some, full;
};

/* A whole pressure file's text, each line through tk_psi_parse_line:
 * -EBADMSG on a bad line or without a "some" line (pure). */
int tk_pressure_parse(const char *buf, size_t len, struct tk_pressure *out);

/* Reads the host's (dirfd < 0) or the cgroup's beneath dirfd (no symlink
 * followed) pressure of resource: 0, or -ENOENT where the file is absent
 * (no PSI, or a cgroup with cgroup.pressure 0 or removed), -EOPNOTSUPP
 * where PSI is off (psi=0), -EBADMSG, or another -errno. */
int tk_pressure_read(int dirfd, int resource, struct tk_pressure *out);

/* PSI windows the kernel takes: 500 ms to 10 s; without CAP_SYS_RESOURCE
 * in the opener, only multiples of 2 s. */
#define TK_PSI_WINDOW_MIN_US 500000u
#define TK_PSI_WINDOW_MAX_US 10000000u
#define TK_PSI_UNPRIV_WINDOW_US 2000000u

/* Opens the pressure file as for tk_pressure_read, read-write and
 * non-blocking, and writes the trigger "some|full <stall_us> <window_us>"
 * (with its NUL): the descriptor, pollable for POLLPRI, or -errno (the
 * kernel's -EINVAL for a window it refuses). */
int tk_pressure_trigger_open(int dirfd, int resource, int full, uint64_t stall_us,
                             uint64_t window_us);
/* Waits for the trigger on fd until deadline_ms (tk_deadline_ms; -1: none;
 * one already past polls once): 1 when it fired (the kernel hands each firing out once, to
 * whichever poll sees it first), 0 when not, or -errno when it is broken
 * (POLLERR: its cgroup was removed; the errno a read then gives). */
int tk_pressure_trigger_wait(int fd, int64_t deadline_ms);

#endif
