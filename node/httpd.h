/*
 * httpd.h — the node's HTTP server: libmicrohttpd driven from a loop.
 *
 * One server per listening socket (TCP or unix), which the caller hands in:
 * a holder that keeps the socket can give it to the next process, so a new
 * worker serves on the same port without binding it again.  Requests are
 * read, bounded and routed here; a route's handler runs on the loop's thread
 * (from loop_run_once(), inside libmicrohttpd's MHD_run), sees the whole
 * request (its body read up to max_body) and writes its answer to a FILE.
 *
 * Bounds: a request's head (request line and headers) within max_head bytes
 * (longer: the connection is closed with 431), its body within max_body
 * (longer: 413, read no further); a connection idle for timeout_s seconds is
 * closed; at most max_conns connections at once (more are refused at once).
 * Unknown paths get 404, a known path with another method 405 (with Allow).
 */
#ifndef LAZYROOT_NODE_HTTPD_H
#define LAZYROOT_NODE_HTTPD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct loop;
struct node_httpd;

struct node_http_request {
	const char *method;       /* "GET", "POST" … */
	const char *path;         /* the path of the URL, without its query */
	const uint8_t *body;      /* body_len bytes, NUL-terminated; "" when none */
	size_t body_len;
	void *conn;               /* for node_http_header() */
};

struct node_http_reply {
	unsigned status;          /* 200 unless the handler sets another */
	const char *content_type; /* a static string; text/plain unless set */
	FILE *body;               /* where the handler writes the body */
};

/* Returns 0, or -errno: the client then gets 500 and what the handler wrote
 * is dropped.  Runs on the loop's thread; must not run the loop itself. */
typedef int (*node_http_fn)(void *ud, const struct node_http_request *req,
                            struct node_http_reply *rep);

struct node_http_route {
	const char *method;
	const char *path;         /* exact; ending in '/' matches that prefix */
	node_http_fn fn;
};

struct node_httpd_params {
	const struct node_http_route *routes;   /* borrowed: must outlive the server */
	size_t nroutes;
	void *ud;                 /* passed to every handler */
	const char *name;         /* for log lines: "metrics" */
	size_t max_head;          /* 0: 8 KiB */
	size_t max_body;          /* 0: no body accepted (413) */
	unsigned timeout_s;       /* 0: 10 s */
	unsigned max_conns;       /* 0: 16 */
};

/* Serve on *listen_fd (listening, TCP or unix; taken: set to -1, closed by
 * node_httpd_free) from loop l.  Returns 0, or -errno when libmicrohttpd
 * cannot be loaded or started (logged). */
int node_httpd_new(struct loop *l, const struct node_httpd_params *p, int *listen_fd,
                   struct node_httpd **ret);
/* Close every connection and the socket.  The server's pending polls end
 * (cancelled) as the loop runs; it is freed then.  NULL is ignored. */
void node_httpd_free(struct node_httpd *h);

/* The value of request header name, or NULL; valid during the handler. */
const char *node_http_header(const struct node_http_request *req, const char *name);

#endif
