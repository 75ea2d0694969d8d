/*
 * Counters.  The scheduler keeps them per carrier (no shared cache line on
 * the spawn or switch path); this sums them.
 */
#include "../sched/sched.h"

#include <string.h>

void weft_stats_get(weft_stats *s) {
    memset(s, 0, sizeof *s);
    if (!weft__running()) return; /* reading counters never starts the runtime */
    weft__counters c;
    uint64_t peak, n;
    weft__counters_sum(&c, &peak, &n);
    s->started = c.started;
    s->live = c.started >= c.finished ? c.started - c.finished : 0;
    s->peak = peak > s->live ? peak : s->live;
    s->switches = c.switches;
    s->steals = c.steals;
    s->parks = c.parks;
    s->pinned = c.pinned;
    s->hogs = c.hogs;
    s->spares = c.spares;
    s->compensating = c.compensating;
    s->carriers = n;
    weft__stacks_counts(&s->stacks, &s->stack_bytes_reserved);
    s->tls_blocks = weft__tls_blocks();
    s->trapped = __atomic_load_n(&weft__sud_trapped, __ATOMIC_RELAXED);
    s->tls_block_bytes = weft__tls_block_bytes();
}
