/*
 * httpd.c — see httpd.h: libmicrohttpd in external-poll mode on the loop.
 *
 * libmicrohttpd runs without a thread of its own (no
 * MHD_USE_INTERNAL_POLLING_THREAD): it keeps its sockets in one epoll set,
 * whose descriptor the loop polls; when it is readable, or when the timeout
 * libmicrohttpd asks for runs out, MHD_run() does what is ready without
 * blocking and calls the handlers.  So handlers run on the loop's thread and
 * read the worker's state without locks, as every other request does.
 *
 * A request's state (its body so far) lives in the connection's slot
 * (con_cls) from the head's arrival to the completion callback.
 *
 * Teardown: node_httpd_free() stops the daemon at once (connections and the
 * socket closed, never shut down); the poll and the timer still pending on the ring end with
 * -ECANCELED, and the last of them frees the struct.
 */
#include <poll.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <microhttpd.h>

#include "lib/lib.h"
#include "lib/loop.h"
#include "node/httpd.h"

#define HTTPD_HEAD_MAX 8192
#define HTTPD_TIMEOUT_S 10
#define HTTPD_CONNS 16

struct node_httpd {
	struct loop *l;
	struct MHD_Daemon *d;
	int epoll_fd;
	struct node_httpd_params p;
	int64_t poll, timer;
	uint64_t timer_at;        /* when the pending timer fires (ns, now_ns clock) */
	bool polling, timing, closing;
};

struct req {
	struct buf body;
	bool too_large;
};

static void httpd_maybe_free(struct node_httpd *h)
{
	if (h->closing && !h->polling && !h->timing)
		free(h);
}

static void rearm(struct node_httpd *h);

static void run(struct node_httpd *h)
{
	(void)MHD_run(h->d);
	rearm(h);
}

static void on_ready(void *ud, int res)
{
	struct node_httpd *h = ud;

	h->polling = false;
	if (h->closing) {
		httpd_maybe_free(h);
		return;
	}
	run(h);
}

static void on_timer(void *ud, int res)
{
	struct node_httpd *h = ud;

	h->timing = false;
	if (h->closing) {
		httpd_maybe_free(h);
		return;
	}
	if (res == -ECANCELED)
		rearm(h);   /* cancelled for an earlier deadline */
	else
		run(h);
}

/* The epoll set polled again, and a timer for the earliest moment
 * libmicrohttpd wants to run (a connection's idle timeout, or at once when
 * it has work buffered). */
static void rearm(struct node_httpd *h)
{
	MHD_UNSIGNED_LONG_LONG ms;

	if (!h->polling) {
		h->poll = loop_poll_id(h->l, h->epoll_fd, POLLIN, on_ready, h);
		h->polling = h->poll >= 0;
		if (!h->polling)
			log_msg(LOG_WARN, "%s: cannot poll its connections", h->p.name);
	}
	if (MHD_get_timeout(h->d, &ms) == MHD_YES) {
		uint64_t at = now_ns() + (uint64_t)ms * 1000000;

		if (h->timing && at + 1000000 < h->timer_at) {
			(void)loop_cancel_timer(h->l, h->timer);   /* on_timer re-arms */
			return;
		}
		if (!h->timing) {
			h->timer = loop_timer(h->l, (uint64_t)ms * 1000000, on_timer, h);
			h->timing = h->timer >= 0;
			h->timer_at = at;
		}
	}
}

/* The format comes from libmicrohttpd itself; the attribute lets the
 * compiler treat the forwarding as the printf-style call it is. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct node_httpd *h = cls;
	char line[512];
	size_t n;

	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n && line[n - 1] == '\n')
		line[--n] = 0;
	log_msg(LOG_INFO, "%s: %s", h->p.name, line);
}

static enum MHD_Result answer(struct MHD_Connection *conn, unsigned status, const char *ctype,
                              char *body, size_t len, const char *allow)
{
	struct MHD_Response *rsp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	enum MHD_Result r;

	if (!rsp) {
		free(body);
		return MHD_NO;   /* libmicrohttpd closes the connection */
	}
	(void)MHD_add_response_header(rsp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	if (allow)
		(void)MHD_add_response_header(rsp, MHD_HTTP_HEADER_ALLOW, allow);
	r = MHD_queue_response(conn, status, rsp);
	MHD_destroy_response(rsp);
	return r;
}

static enum MHD_Result answer_text(struct MHD_Connection *conn, unsigned status, const char *allow,
                                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static enum MHD_Result answer_text(struct MHD_Connection *conn, unsigned status, const char *allow,
                                   const char *fmt, ...)
{
	char *s = NULL;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		return MHD_NO;
	return answer(conn, status, "text/plain; charset=utf-8", s, (size_t)n, allow);
}

static bool path_matches(const struct node_http_route *rt, const char *path)
{
	size_t n = strlen(rt->path);

	if (n && rt->path[n - 1] == '/')
		return !strncmp(path, rt->path, n);
	return !strcmp(path, rt->path);
}

/* The route for (method, path); NULL with *allow set to the methods the path
 * has (405) or to "" (404). */
static const struct node_http_route *route_find(struct node_httpd *h, const char *method,
                                                const char *path, char *allow, size_t len)
{
	size_t used = 0;

	allow[0] = 0;
	for (size_t i = 0; i < h->p.nroutes; i++) {
		const struct node_http_route *rt = &h->p.routes[i];

		if (!path_matches(rt, path))
			continue;
		if (!strcmp(rt->method, method))
			return rt;
		if (used + strlen(rt->method) + 3 < len)
			used += (size_t)snprintf(allow + used, len - used, "%s%s", used ? ", " : "",
			                         rt->method);
	}
	return NULL;
}

static enum MHD_Result dispatch(struct node_httpd *h, struct MHD_Connection *conn,
                                const struct node_http_route *rt, const char *method,
                                const char *url, struct req *q)
{
	struct node_http_reply rep = { .status = MHD_HTTP_OK,
	                               .content_type = "text/plain; charset=utf-8" };
	struct node_http_request rq = { .method = method, .path = url, .conn = conn };
	char *body = NULL;
	size_t len = 0;
	int r;

	if (buf_reserve(&q->body, 1) < 0)
		return MHD_NO;
	q->body.data[q->body.len] = 0;
	rq.body = q->body.data;
	rq.body_len = q->body.len;
	rep.body = open_memstream(&body, &len);
	if (!rep.body)
		return answer_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, "out of memory\n");
	r = rt->fn(h->p.ud, &rq, &rep);
	if (fclose(rep.body) != 0 && r >= 0)
		r = -ENOMEM;
	if (r < 0) {
		free(body);
		return answer_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, "%s %s: %s\n", method,
		                   url, strerror(-r));
	}
	return answer(conn, rep.status, rep.content_type, body, len, NULL);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_len, void **slot)
{
	struct node_httpd *h = cls;
	struct req *q = *slot;

	if (!q) {
		/* the head: refuse a declared body too large before it is sent */
		const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
		                                             MHD_HTTP_HEADER_CONTENT_LENGTH);
		uint64_t n;

		q = calloc(1, sizeof(*q));
		if (!q)
			return MHD_NO;
		*slot = q;
		if (cl && parse_uint(cl, UINT64_MAX, &n) == 0 && n > h->p.max_body)
			q->too_large = true;
		return MHD_YES;
	}
	if (*upload_len) {
		if (!q->too_large && q->body.len + *upload_len > h->p.max_body)
			q->too_large = true;
		if (!q->too_large && buf_append(&q->body, upload, *upload_len) < 0)
			return MHD_NO;
		*upload_len = 0;
		return MHD_YES;
	}
	if (q->too_large)
		return answer_text(conn, MHD_HTTP_CONTENT_TOO_LARGE, NULL,
		                   "%s %s: body larger than %zu bytes\n", method, url, h->p.max_body);
	{
		char allow[128];
		const struct node_http_route *rt = route_find(h, method, url, allow, sizeof(allow));

		if (rt)
			return dispatch(h, conn, rt, method, url, q);
		if (allow[0])
			return answer_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, allow,
			                   "%s %s: method not allowed (%s)\n", method, url, allow);
		return answer_text(conn, MHD_HTTP_NOT_FOUND, NULL, "%s: not found\n", url);
	}
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **slot,
                         enum MHD_RequestTerminationCode why)
{
	struct req *q = *slot;

	if (!q)
		return;
	buf_free(&q->body);
	free(q);
	*slot = NULL;
}

int node_httpd_new(struct loop *l, const struct node_httpd_params *p, int *listen_fd,
                   struct node_httpd **ret)
{
	struct node_httpd *h = calloc(1, sizeof(*h));
	const union MHD_DaemonInfo *info;

	if (!h)
		return -ENOMEM;
	h->l = l;
	h->p = *p;
	if (!h->p.name)
		h->p.name = "httpd";
	if (!h->p.max_head)
		h->p.max_head = HTTPD_HEAD_MAX;
	if (!h->p.timeout_s)
		h->p.timeout_s = HTTPD_TIMEOUT_S;
	if (!h->p.max_conns)
		h->p.max_conns = HTTPD_CONNS;
	/* No thread (the loop drives it), epoll (one descriptor for the loop
	 * to poll).  MHD_USE_ERROR_LOG:
	 * its complaints reach our log, at info level (a client's fault). */
	h->d = MHD_start_daemon(MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, NULL,
	                        NULL, on_request, h, MHD_OPTION_LISTEN_SOCKET, *listen_fd,
	                        MHD_OPTION_CONNECTION_MEMORY_LIMIT, h->p.max_head,
	                        MHD_OPTION_CONNECTION_TIMEOUT, h->p.timeout_s,
	                        MHD_OPTION_CONNECTION_LIMIT, h->p.max_conns,
	                        MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
	                        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h, MHD_OPTION_END);
	if (!h->d) {
		free(h);
		return log_error(-EIO, "%s: cannot start the HTTP server (libmicrohttpd)", p->name);
	}
	*listen_fd = -1;   /* the daemon's now: MHD_stop_daemon closes it */
	info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD);
	h->epoll_fd = info ? info->epoll_fd : -1;
	if (h->epoll_fd < 0) {
		MHD_stop_daemon(h->d);
		free(h);
		return log_error(-EIO, "%s: libmicrohttpd gave no epoll descriptor", p->name);
	}
	rearm(h);
	*ret = h;
	return 0;
}

void node_httpd_free(struct node_httpd *h)
{
	MHD_socket fd;

	if (!h)
		return;
	h->closing = true;
	/* Quiesced first, the daemon gives the socket back untouched: a stop
	 * may shut a listening socket down, which would end it for the holder
	 * and the next worker too, who share it. */
	fd = MHD_quiesce_daemon(h->d);
	MHD_stop_daemon(h->d);
	if (fd != MHD_INVALID_SOCKET)
		close(fd);
	h->d = NULL;
	if (h->polling)
		(void)loop_cancel_poll(h->l, h->poll);
	if (h->timing)
		(void)loop_cancel_timer(h->l, h->timer);
	httpd_maybe_free(h);
}

const char *node_http_header(const struct node_http_request *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}
