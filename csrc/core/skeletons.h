/* The skeletons bpftool generates (in .output/), libbpf's and the light
 * ones (loader program, no libbpf at run time), included in one place:
 * generated code, so its casts and its long strings are not held to our
 * warning list. */
#ifndef TAKANA_SKELETONS_H
#define TAKANA_SKELETONS_H

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wcast-qual"
#pragma GCC diagnostic ignored "-Wcast-align"
#pragma GCC diagnostic ignored "-Woverlength-strings"
#pragma GCC diagnostic ignored "-Wpointer-arith"
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <errno.h>          /* skel_internal.h uses errno without it */
#include "takana_kfunc.skel.h"
#include "takana_iter.skel.h"
#include "takana_events.skel.h"
#include "takana_argv.skel.h"
#include "takana_kfunc.lskel.h"
#include "takana_iter.lskel.h"
#include "takana_events.lskel.h"
#pragma GCC diagnostic pop

#endif
