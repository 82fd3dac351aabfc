/* stats.h — the node's counters as Prometheus text (node/stats.c). */
#ifndef LAZYROOT_NODE_STATS_H
#define LAZYROOT_NODE_STATS_H

#include <stdio.h>

struct cache_stats;

/* The cache's counters as Prometheus text (lazyroot_cache_*), per image for
 * the images whose server is alive. */
void node_stats_prometheus(FILE *f, const struct cache_stats *st);

#endif
