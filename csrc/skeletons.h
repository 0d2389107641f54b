/* The libbpf skeletons bpftool generates (in .output/), included in one
 * place: generated code, so its casts and its long ELF string are not
 * held to our warning list. */
#ifndef TAKANA_SKELETONS_H
#define TAKANA_SKELETONS_H

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wcast-qual"
#pragma GCC diagnostic ignored "-Wcast-align"
#pragma GCC diagnostic ignored "-Woverlength-strings"
#include "takana_kfunc.skel.h"
#include "takana_iter.skel.h"
#include "takana_events.skel.h"
#pragma GCC diagnostic pop

#endif
