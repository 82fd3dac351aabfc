/*
 * httpd.h — the node's HTTP server: libmicrohttpd, driven from a loop or
 * from threads of its own.
 *
 * One server per listening socket (TCP or unix), which the caller hands in:
 * a holder that keeps the socket can give it to the next process, so a new
 * worker serves on the same port without binding it again.  Requests are
 * read, bounded and routed here.
 *
 * Two ways to run, chosen by node_httpd_new()'s loop argument:
 * - on a loop (l != NULL): a route's handler runs on the loop's thread (from
 *   loop_run_once(), inside libmicrohttpd's MHD_run), so it may read the
 *   loop's state without locks; it must answer at once (/metrics);
 * - threaded (l == NULL): every connection has a thread of its own
 *   (libmicrohttpd's thread-per-connection mode), so a handler may wait
 *   (on a file, a socket, a child) without holding up any other client or
 *   any loop, and may answer with a stream (rep->stream) produced as the
 *   client reads it.  Handlers must not touch a loop's state: the API
 *   server is stateless and reads the host's state tree.
 *
 * Bounds: a request's head (request line and headers) within max_head bytes
 * (longer: the connection is closed with 431) and, threaded, within
 * head_timeout_s seconds of the connection's start (a client that trickles
 * its head is cut off); its body within max_body (longer: 413, read no
 * further); a connection idle for timeout_s seconds is closed; at most
 * max_conns connections at once (more are refused at once).  Unknown paths
 * get 404, a known path with another method 405 (with Allow), a query
 * parameter the route does not name 400.  With json_errors these answers
 * are {"error": "..."} in application/json, as the handlers' own errors
 * (node_http_error) are.
 */
#ifndef LAZYROOT_NODE_HTTPD_H
#define LAZYROOT_NODE_HTTPD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

struct loop;
struct node_httpd;
struct node_http_reply;

#define NODE_HTTP_PARAMS 4

struct node_http_request {
	const char *method;       /* "GET", "POST" … */
	const char *path;         /* the path of the URL, without its query */
	const uint8_t *body;      /* body_len bytes, NUL-terminated; "" when none */
	size_t body_len;
	void *conn;               /* for node_http_header(), node_http_arg() */
	/* the segments that matched the route's "{}" (NUL-terminated copies,
	 * valid during the handler), in order */
	const char *param[NODE_HTTP_PARAMS];
	const void *peer;         /* threaded: the caller's node_http_peer_fn's answer */
	const volatile bool *stopping;   /* threaded: the server is stopping */
};

/* A streamed answer (threaded servers only): read() fills up to max bytes
 * of buf and returns how many (> 0), 0 at the end, or -errno to cut the
 * answer off (the client sees a truncated chunked body).  It runs on the
 * connection's thread and may wait, briefly: while it waits the server
 * cannot stop, so it checks req->stopping at least every 250 ms and then
 * ends.  free() runs once, whatever happened, with the connection gone. */
struct node_http_stream {
	ssize_t (*read)(void *sud, char *buf, size_t max);
	void (*free)(void *sud);
	void *sud;
};

/* A request body streamed to a descriptor (threaded servers, routes with
 * NODE_HTTP_SINK): the handler, called when the head has arrived, either
 * answers at once (an error: fd left -1) or sets fd, whose bytes the server
 * writes as they arrive, never holding more than a chunk (a reader that
 * does not keep up slows the client down).  When the body has ended, fd is
 * closed and done() answers (rep as for a handler; err 0, or -EFBIG past
 * max_sink_body, -EPIPE when fd's reader went away).  free() runs once,
 * last, complete false when the client left before the body ended (fd then
 * closed without done(): the reader sees an end it must not take for the
 * body's). */
struct node_http_sink {
	int fd;
	int (*done)(void *sud, int err, struct node_http_reply *rep);
	void (*free)(void *sud, bool complete);
	void *sud;
};

struct node_http_reply {
	unsigned status;          /* 200 unless the handler sets another */
	const char *content_type; /* a static string; text/plain unless set */
	FILE *body;               /* where the handler writes the body */
	struct node_http_stream stream;   /* read set: answer with it, not body */
	struct node_http_sink sink;       /* NODE_HTTP_SINK routes: see above */
};

/* Returns 0, or -errno: the client then gets 500 and what the handler wrote
 * is dropped.  Runs on the loop's thread; must not run the loop itself. */
typedef int (*node_http_fn)(void *ud, const struct node_http_request *req,
                            struct node_http_reply *rep);

struct node_http_route {
	const char *method;
	/* exact; ending in '/' matches that prefix; a segment "{}" matches any
	 * one non-empty segment, given to the handler in req->param */
	const char *path;
	node_http_fn fn;
	/* the query parameters it takes, "a,b" (NULL: any: the loop's routes) */
	const char *args;
	unsigned flags;           /* NODE_HTTP_SINK */
};

#define NODE_HTTP_SINK 1u         /* the body streams to rep->sink.fd (threaded) */

/* Threaded servers: who is calling, asked once per connection on its
 * socket (fd) as it is accepted.  Returns what the handlers see as
 * req->peer (NULL refuses the connection: it is closed at once); the
 * answer is freed with free() when the connection closes. */
typedef void *(*node_http_peer_fn)(void *ud, int fd);

struct node_httpd_params {
	const struct node_http_route *routes;   /* borrowed: must outlive the server */
	size_t nroutes;
	void *ud;                 /* passed to every handler */
	const char *name;         /* for log lines: "metrics" */
	size_t max_head;          /* 0: 8 KiB */
	size_t max_body;          /* 0: no body accepted (413) */
	unsigned timeout_s;       /* 0: 10 s */
	unsigned max_conns;       /* 0: 16 */
	unsigned head_timeout_s;  /* threaded: 0: timeout_s */
	/* threaded: a body slower than this many bytes a second on average
	 * (after its first seconds) is cut off; 0: no bound */
	uint64_t min_body_rate;
	uint64_t max_sink_body;   /* NODE_HTTP_SINK routes' bodies; 0: no bound */
	bool json_errors;         /* the server's own errors as {"error": "..."} */
	node_http_peer_fn peer;   /* threaded, optional */
	/* optional, before any route (404s included): returns 1 to go on, 0
	 * having answered in rep (a 401), or -errno (500) */
	node_http_fn authorize;
};

/* A TCP socket listening at addr ("HOST:PORT", a name, an IPv4 address or
 * "[IPv6]"), non-blocking, SO_REUSEADDR; what names the setting in
 * messages, lost what a failed bind costs ("no /metrics").  Returns the
 * descriptor or -errno (logged). */
int node_http_listen_tcp(const char *addr, const char *what, const char *lost, int backlog);

/* Serve on *listen_fd (listening, TCP or unix; taken: set to -1, closed by
 * node_httpd_free) from loop l, or from threads of its own when l is NULL.
 * Returns 0, or -errno when libmicrohttpd cannot be loaded or started
 * (logged). */
int node_httpd_new(struct loop *l, const struct node_httpd_params *p, int *listen_fd,
                   struct node_httpd **ret);
/* Close every connection and the socket.  On a loop, the server's pending
 * polls end (cancelled) as the loop runs; it is freed then.  Threaded, it
 * returns when every connection's thread has ended.  NULL is ignored. */
void node_httpd_free(struct node_httpd *h);

/* The value of request header name, or NULL; valid during the handler. */
const char *node_http_header(const struct node_http_request *req, const char *name);
/* The value of query parameter name (decoded), "" for one without a value,
 * or NULL; valid during the handler. */
const char *node_http_arg(const struct node_http_request *req, const char *name);

/* An error answer: status and {"error": "..."} (the message, one line,
 * formatted).  Returns 0, for the handler to return. */
int node_http_error(struct node_http_reply *rep, unsigned status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
