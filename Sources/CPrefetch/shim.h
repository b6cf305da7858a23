#ifndef SETTEE_CPREFETCH_SHIM_H
#define SETTEE_CPREFETCH_SHIM_H

// A cache prefetch hint (the compiler's builtin; Swift has none). A hint never faults: any address may be given,
// including one that is stale or unmapped, and the program's results do not depend on it (ADR 0114).
static inline void settee_prefetch(const void *address) { __builtin_prefetch(address, 0, 3); }

// The same for a line about to be written (a lock word): fetched for ownership, so the write that follows does not
// wait for the line again.
static inline void settee_prefetch_for_write(const void *address) { __builtin_prefetch(address, 1, 3); }

#endif
