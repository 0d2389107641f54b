/* takana's C core: plain C, no Lua. Functions return 0 or a negative errno;
 * the binding files (lua_*.c) turn them into Lua values. Each core file
 * declares what it defines in its own header; this one includes them all,
 * for the bindings, the fuzzers and the benchmark. */
#ifndef TAKANA_CORE_H
#define TAKANA_CORE_H

#include "bpf_snapshot.h"
#include "cgroup_id.h"
#include "cmdline.h"
#include "events.h"
#include "fd_drop.h"
#include "fork.h"
#include "proc_scan.h"
#include "proc_stat.h"
#include "recbuf.h"
#include "snapshot.h"
#include "util.h"

#endif
