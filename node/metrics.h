/*
 * metrics.h — Prometheus text over HTTP (GET /metrics), served from the
 * worker's loop by the node's HTTP server (node/httpd.h) on a socket the
 * holder keeps.
 */
#ifndef LAZYROOT_NODE_METRICS_H
#define LAZYROOT_NODE_METRICS_H

#include <stdio.h>

struct loop;
struct node_metrics;

/* Writes the body (Prometheus text) to f. */
typedef void (*node_metrics_fn)(void *ud, FILE *f);

/* A listening socket on addr (HOST:PORT, IPv4 or [IPv6]), non-blocking and
 * close-on-exec.  Returns it, or logs and returns -errno. */
int node_metrics_listen(const char *addr);
/* Answer GET /metrics on *listen_fd (taken: set to -1) from loop l.  Logs
 * and returns -errno when the server cannot start. */
int node_metrics_open(struct loop *l, int *listen_fd, node_metrics_fn fn, void *ud,
                      struct node_metrics **ret);
/* Close the socket and every connection; the server's polls end
 * (cancelled) as the loop runs. */
void node_metrics_close(struct node_metrics *m);

#endif
