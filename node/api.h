/*
 * api.h — the sandbox service's HTTP API (docs/api.md), served by the node
 * worker on threads of its own (node/httpd.c, threaded), so that no request
 * of it ever waits on, or holds up, the worker's FUSE loop.
 *
 * Two listeners, both made by the holder and kept by it across workers (as
 * the control and /metrics sockets are), so that a new worker serves them
 * without binding again and a client that connects between two workers
 * waits in the backlog:
 * - a unix socket beside the control socket (node_api_socket_path), 0600,
 *   and every connection's SO_PEERCRED checked: root only;
 * - with api_listen, a TCP address, whose requests must carry the bearer
 *   token of api_token_file (compared in constant time); the node does not
 *   start with api_listen and no readable token file.
 *
 * The server is stateless: what it answers it reads from the host's state
 * tree, or asks the sandboxes' keepers (sandbox/service.h).
 */
#ifndef LAZYROOT_NODE_API_H
#define LAZYROOT_NODE_API_H

#include <stddef.h>

struct node_config;
struct node_api;
struct node_http_route;

/* The API's unix socket for control socket path: "DIR/X.sock" gives
 * "DIR/X-api.sock", any other "P" gives "P-api".  -ENAMETOOLONG (logged)
 * when it does not fit a socket address. */
int node_api_socket_path(const char *control, char *out, size_t len);

/* The holder's side: the unix socket bound at path (an old one removed:
 * the caller holds the node's lock), or the TCP socket at cfg->api_listen
 * (-1 and 0 when it is off).  Each returns the listening descriptor or
 * -errno (logged).  node_api_check() refuses (logged, -EINVAL) a config
 * with api_listen and no token file, or a token file that cannot be read,
 * is empty, or is readable by group or others. */
int node_api_listen_unix(const char *path);
int node_api_listen_tcp(const struct node_config *cfg);
int node_api_check(const struct node_config *cfg);

/* Serve on the listening sockets *unix_fd and *tcp_fd (each -1: none;
 * taken: set to -1).  The TCP one is served only when the token file can be
 * read (else it is closed, logged).  Returns 0, or -errno (logged) when
 * libmicrohttpd cannot start. */
int node_api_open(const struct node_config *cfg, int *unix_fd, int *tcp_fd,
                  struct node_api **ret);
/* Stops both servers; every connection's thread has ended when it
 * returns.  NULL is ignored. */
void node_api_close(struct node_api *a);

/* The route table, as data: docs/api.md is checked against it. */
const struct node_http_route *node_api_routes(size_t *ret_n);

#endif
