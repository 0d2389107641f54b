/* The cmdline field (cmdline.c). */
#ifndef TAKANA_CMDLINE_H
#define TAKANA_CMDLINE_H

#include <stddef.h>

#include "proc_scan.h"
#include "recbuf.h"

/* After a BPF walk (whose pids are global: the tiers refuse a foreign pid
 * namespace), fills every record's cmdline_off/_len (TK_CMDLINE_NONE for a
 * process gone before its turn), the counts and out->cmdline_from: through
 * the argv BPF program where it loads, else, and for what it leaves, from
 * /proc through sc. 0, or -errno with why. The proc walk reads cmdline
 * itself (tk_proc_scanner.want_cmdline). */
int tk_cmdline_fill(struct tk_recbuf *out, struct tk_proc_scanner *sc, char *why, size_t why_len);
/* The argv program: 0 not tried, 1 loaded, -errno (and why) of its load;
 * loads: how many times it loaded in this process. */
int tk_cmdline_bpf_state(unsigned *loads, char *why, size_t why_len);
void tk_cmdline_release(void);

#endif
