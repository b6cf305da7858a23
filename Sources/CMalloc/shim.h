#ifndef SETTEE_CMALLOC_SHIM_H
#define SETTEE_CMALLOC_SHIM_H

// glibc's malloc tuning (mallopt, M_ARENA_MAX): <malloc.h> is not part of Swift's Glibc module.
#include <malloc.h>

#endif
