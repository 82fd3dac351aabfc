/*
 * metrics.h — Prometheus text over HTTP (GET /metrics), answered from the
 * worker's loop by a tiny HTTP/1.0 responder.
 */
#ifndef LAZYROOT_NODE_METRICS_H
#define LAZYROOT_NODE_METRICS_H

#include <stdio.h>

struct loop;
struct node_metrics;

/* Writes the body (Prometheus text) to f. */
typedef void (*node_metrics_fn)(void *ud, FILE *f);

/* Listen on addr (HOST:PORT, IPv4 or [IPv6]) and answer on loop l.  Logs and
 * returns -errno when it cannot listen. */
int node_metrics_open(struct loop *l, const char *addr, node_metrics_fn fn, void *ud,
                      struct node_metrics **ret);
/* Stop listening and drop open connections; their polls end (cancelled) as
 * the loop runs. */
void node_metrics_close(struct node_metrics *m);

#endif
