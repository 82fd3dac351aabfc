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
 * Threaded (no loop), libmicrohttpd runs a thread per connection, and a
 * listening thread of its own: a handler or a stream that waits holds up
 * only its own client.  A thread costs its stack (HTTPD_STACK, mostly never
 * touched) and the connection's memory pool (max_head); the connection
 * limit bounds both.  One more thread, the watchdog, cuts off (shutdown(2)
 * of its socket, which libmicrohttpd sees as the client leaving) a
 * connection whose head has not arrived within head_timeout_s, or whose
 * body arrives slower than min_body_rate: libmicrohttpd's own timeout only
 * closes connections that send nothing at all, so a client sending a byte
 * a second would otherwise hold its thread for hours.  The connection's
 * record is taken off the watchdog's list (under its lock) before
 * libmicrohttpd closes the socket, so the watchdog never shuts a
 * descriptor number down after it was reused.
 *
 * A request's state (its body so far) lives in the connection's slot
 * (con_cls) from the head's arrival to the completion callback.
 *
 * Teardown: node_httpd_free() stops the daemon at once (connections and the
 * socket closed, never shut down).  On a loop, the poll and the timer still
 * pending on the ring end with -ECANCELED, and the last of them frees the
 * struct; threaded, MHD_stop_daemon() joins every connection's thread
 * (streams see req->stopping and end) and the struct is freed at once.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netdb.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <microhttpd.h>

#include "lib/json.h"
#include "lib/lib.h"
#include "lib/loop.h"
#include "node/httpd.h"

#define HTTPD_HEAD_MAX 8192
#define HTTPD_TIMEOUT_S 10
#define HTTPD_CONNS 16
#define HTTPD_STACK (256u << 10)
#define HTTPD_STREAM_BLOCK (64u << 10)
#define HTTPD_WATCH_MS 250
/* A body gets this long before its rate counts (a client's first bytes
 * may wait on its own disk or pipe). */
#define HTTPD_BODY_GRACE_S 5

/* A connection, as the watchdog sees it (threaded servers). */
struct conn {
	struct conn *prev, *next;
	int fd;
	uint64_t started_ns;
	uint64_t head_ns;         /* when the head was whole; 0: not yet */
	uint64_t body_bytes;      /* of the current request */
	bool body_done, cut;
	void *peer;               /* params.peer's answer */
};

struct node_httpd {
	struct loop *l;
	struct MHD_Daemon *d;
	int epoll_fd;
	struct node_httpd_params p;
	int64_t poll, timer;
	uint64_t timer_at;        /* when the pending timer fires (ns, now_ns clock) */
	bool polling, timing, closing;
	/* threaded */
	pthread_mutex_t lock;     /* guards conns and watch_stop */
	pthread_cond_t wake;
	struct conn *conns;
	pthread_t watchdog;
	bool threaded, watching, watch_stop;
	volatile bool stopping;
};

struct req {
	struct buf body;
	bool too_large;
	struct conn *c;           /* threaded: the connection's record */
	struct node_http_sink sink;   /* sud set: a body streaming to sink.fd */
	uint64_t sink_bytes;
	int sink_err;
	bool sinking;
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

/* {"error": msg} and a newline, malloc'd; NULL when out of memory. */
static char *error_json(const char *msg, size_t *ret_len)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	char *s;

	if (json_buf_add(&b, json_pack("{s:o}", "error", json_text(msg, strlen(msg)))) < 0 ||
	    buf_append(&b, "\n", 1) < 0)
		return NULL;
	s = (char *)b.data;
	*ret_len = b.len;
	b = (struct buf)BUF_INIT;
	return s;
}

/* The server's own error answers: text (a line), or JSON (json_errors). */
static enum MHD_Result answer_text(struct node_httpd *h, struct MHD_Connection *conn,
                                   unsigned status, const char *allow, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static enum MHD_Result answer_text(struct node_httpd *h, struct MHD_Connection *conn,
                                   unsigned status, const char *allow, const char *fmt, ...)
{
	char *s = NULL, *js;
	size_t len;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		return MHD_NO;
	if (!h->p.json_errors)
		return answer(conn, status, "text/plain; charset=utf-8", s, (size_t)n, allow);
	while (n && s[n - 1] == '\n')
		s[--n] = 0;
	js = error_json(s, &len);
	free(s);
	if (!js)
		return MHD_NO;
	return answer(conn, status, "application/json", js, len, allow);
}

int node_http_error(struct node_http_reply *rep, unsigned status, const char *fmt, ...)
{
	_cleanup_free_ char *s = NULL;
	json_t *v;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -ENOMEM;
	rep->status = status;
	rep->content_type = "application/json";
	v = json_pack("{s:o}", "error", json_text(s, (size_t)n));
	return json_file_add(rep->body, v);
}

/* Whether path matches rt's, its "{}" segments copied into params (each
 * at most PATH_MAX bytes, in store), when store is given. */
static bool path_matches(const struct node_http_route *rt, const char *path, char *store,
                         size_t store_len, const char **params)
{
	const char *pat = rt->path, *p = path;
	size_t used = 0, np = 0;

	for (;;) {
		if (pat[0] == '{' && pat[1] == '}') {
			size_t n = strcspn(p, "/");

			if (!n || np == NODE_HTTP_PARAMS)
				return false;
			if (store) {
				if (used + n + 1 > store_len)
					return false;
				memcpy(store + used, p, n);
				store[used + n] = 0;
				params[np] = store + used;
				used += n + 1;
			}
			np++;
			p += n;
			pat += 2;
			continue;
		}
		if (!*pat)
			return !*p;
		if (*pat == '/' && !pat[1] && *p == '/')
			return true;   /* a prefix */
		if (*pat != *p)
			return false;
		pat++;
		p++;
	}
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

		if (!path_matches(rt, path, NULL, 0, NULL))
			continue;
		if (!strcmp(rt->method, method))
			return rt;
		if (used + strlen(rt->method) + 3 < len)
			used += (size_t)snprintf(allow + used, len - used, "%s%s", used ? ", " : "",
			                         rt->method);
	}
	return NULL;
}

struct args_check {
	const char *allowed;
	const char *unknown;      /* the first parameter not allowed */
};

static enum MHD_Result check_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
	struct args_check *a = cls;
	size_t n = strlen(key);

	for (const char *p = a->allowed; *p;) {
		size_t m = strcspn(p, ",");

		if (m == n && !strncmp(p, key, n))
			return MHD_YES;
		p += m + (p[m] == ',');
	}
	a->unknown = key;
	return MHD_NO;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct node_http_stream *st = cls;
	ssize_t n = st->read(st->sud, buf, max);

	if (n > 0)
		return n;
	return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void stream_free(void *cls)
{
	struct node_http_stream *st = cls;

	if (st->free)
		st->free(st->sud);
	free(st);
}

static enum MHD_Result answer_stream(struct MHD_Connection *conn, const struct node_http_reply *rep)
{
	struct node_http_stream *st = malloc(sizeof(*st));
	struct MHD_Response *rsp;
	enum MHD_Result r;

	if (!st) {
		if (rep->stream.free)
			rep->stream.free(rep->stream.sud);
		return MHD_NO;
	}
	*st = rep->stream;
	/* libmicrohttpd calls stream_free when it cannot make the response */
	rsp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, HTTPD_STREAM_BLOCK, stream_read,
	                                        st, stream_free);
	if (!rsp)
		return MHD_NO;
	(void)MHD_add_response_header(rsp, MHD_HTTP_HEADER_CONTENT_TYPE, rep->content_type);
	r = MHD_queue_response(conn, rep->status, rsp);
	MHD_destroy_response(rsp);
	return r;
}

/* Runs rt (or, authorizing, h's authorize with no route parameters): its
 * answer queued, or, authorizing, *ret_go set when it lets the request on
 * and nothing queued. */
static enum MHD_Result run_fn(struct node_httpd *h, struct MHD_Connection *conn,
                              const struct node_http_route *rt, const char *method,
                              const char *url, struct req *q, bool *ret_go);

static enum MHD_Result dispatch(struct node_httpd *h, struct MHD_Connection *conn,
                                const struct node_http_route *rt, const char *method,
                                const char *url, struct req *q)
{
	return run_fn(h, conn, rt, method, url, q, NULL);
}

static enum MHD_Result run_fn(struct node_httpd *h, struct MHD_Connection *conn,
                              const struct node_http_route *rt, const char *method,
                              const char *url, struct req *q, bool *ret_go)
{
	struct node_http_reply rep = { .status = MHD_HTTP_OK,
	                               .content_type = "text/plain; charset=utf-8",
	                               .sink = { .fd = -1 } };
	struct node_http_request rq = { .method = method, .path = url, .conn = conn,
	                                .stopping = &h->stopping };
	_cleanup_free_ char *store = NULL;
	size_t store_len = strlen(url) + NODE_HTTP_PARAMS;
	char *body = NULL;
	size_t len = 0;
	int r;

	if (rt->args && !ret_go) {
		struct args_check a = { .allowed = rt->args };

		(void)MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, check_arg, &a);
		if (a.unknown)
			return answer_text(h, conn, MHD_HTTP_BAD_REQUEST, NULL,
			                   "%s %s: unknown query parameter '%.64s'\n", method, url,
			                   a.unknown);
	}
	store = malloc(store_len);
	if (!store || (!ret_go && !path_matches(rt, url, store, store_len, rq.param)))
		return MHD_NO;
	if (buf_reserve(&q->body, 1) < 0)
		return MHD_NO;
	q->body.data[q->body.len] = 0;
	rq.body = q->body.data;
	rq.body_len = q->body.len;
	rq.peer = q->c ? q->c->peer : NULL;
	rep.body = open_memstream(&body, &len);
	if (!rep.body)
		return answer_text(h, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, "out of memory\n");
	r = rt->fn(h->p.ud, &rq, &rep);
	if (fclose(rep.body) != 0 && r >= 0)
		r = -ENOMEM;
	if (ret_go && r == 1) {
		free(body);
		*ret_go = true;
		return MHD_YES;
	}
	if (rep.stream.read && (r < 0 || !h->threaded)) {
		if (rep.stream.free)
			rep.stream.free(rep.stream.sud);
		rep.stream.read = NULL;
		r = r < 0 ? r : -EINVAL;
	}
	if (r < 0) {
		free(body);
		return answer_text(h, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, "%s %s: %s\n",
		                   method, url, strerror(-r));
	}
	if (rep.stream.read) {
		free(body);
		return answer_stream(conn, &rep);
	}
	if ((rt->flags & NODE_HTTP_SINK) && rep.sink.fd >= 0) {
		free(body);
		q->sink = rep.sink;
		return MHD_YES;   /* the body streams to it; sink_more answers */
	}
	return answer(conn, rep.status, rep.content_type, body, len, NULL);
}

/* ---- bodies streamed to a descriptor (NODE_HTTP_SINK) ---- */

/* At the head: authorized, the handler called for its sink (or answer). */
static enum MHD_Result sink_open(struct node_httpd *h, struct MHD_Connection *conn,
                                 const struct node_http_route *rt, const char *method,
                                 const char *url, struct req *q)
{
	struct node_http_route opener = *rt;
	const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	                                             MHD_HTTP_HEADER_CONTENT_LENGTH);
	enum MHD_Result r;
	uint64_t n;
	bool go = false;

	if (h->p.authorize) {
		struct node_http_route auth = { method, url, h->p.authorize, NULL, 0 };

		r = run_fn(h, conn, &auth, method, url, q, &go);
		if (!go)
			return r;
	}
	if (cl && h->p.max_sink_body && parse_uint(cl, UINT64_MAX, &n) == 0 &&
	    n > h->p.max_sink_body)
		return answer_text(h, conn, MHD_HTTP_CONTENT_TOO_LARGE, NULL,
		                   "%s %s: body larger than %" PRIu64 " bytes\n", method, url,
		                   h->p.max_sink_body);
	opener.flags = NODE_HTTP_SINK;
	r = run_fn(h, conn, &opener, method, url, q, NULL);
	if (q->sink.fd >= 0) {
		(void)fcntl(q->sink.fd, F_SETFL, fcntl(q->sink.fd, F_GETFL) | O_NONBLOCK);
		q->sinking = true;
	}
	return r;
}

/* Writes n bytes to the sink, waiting (250 ms at a time, so that a stop or
 * the watchdog's cut is seen) while its reader catches up. */
static int sink_write(struct node_httpd *h, struct req *q, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(q->sink.fd, p, n);

		if (w > 0) {
			p += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno != EAGAIN)
			return -errno;
		if (h->stopping || (q->c && q->c->cut))
			return -ECANCELED;
		{
			struct pollfd pf = { .fd = q->sink.fd, .events = POLLOUT };

			(void)poll(&pf, 1, HTTPD_WATCH_MS);
		}
	}
	return 0;
}

static enum MHD_Result sink_more(struct node_httpd *h, struct MHD_Connection *conn,
                                 const char *method, const char *url, struct req *q,
                                 const char *upload, size_t *upload_len)
{
	struct node_http_reply rep = { .status = MHD_HTTP_OK,
	                               .content_type = "text/plain; charset=utf-8" };
	char *body = NULL;
	size_t len = 0;
	int r;

	if (*upload_len) {
		size_t n = *upload_len;

		*upload_len = 0;
		if (q->c) {
			pthread_mutex_lock(&h->lock);
			q->c->body_bytes += n;
			pthread_mutex_unlock(&h->lock);
		}
		q->sink_bytes += n;
		if (!q->sink_err && h->p.max_sink_body && q->sink_bytes > h->p.max_sink_body)
			q->sink_err = -EFBIG;
		if (!q->sink_err)
			q->sink_err = sink_write(h, q, upload, n);
		if (q->sink_err == -ECANCELED)
			return MHD_NO;
		if (q->sink_err && q->sink.fd >= 0) {
			close(q->sink.fd);   /* the rest is read and dropped */
			q->sink.fd = -1;
		}
		return MHD_YES;
	}
	if (q->c) {
		pthread_mutex_lock(&h->lock);
		q->c->body_done = true;
		pthread_mutex_unlock(&h->lock);
	}
	if (q->sink.fd >= 0) {
		close(q->sink.fd);
		q->sink.fd = -1;
	}
	q->sinking = false;
	rep.body = open_memstream(&body, &len);
	if (!rep.body)
		return MHD_NO;   /* on_completed frees the sink */
	r = q->sink.done(q->sink.sud, q->sink_err, &rep);
	if (fclose(rep.body) != 0 && r >= 0)
		r = -ENOMEM;
	if (q->sink.free)
		q->sink.free(q->sink.sud, true);
	q->sink = (struct node_http_sink){ .fd = -1 };
	if (r < 0) {
		free(body);
		return answer_text(h, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, "%s %s: %s\n",
		                   method, url, strerror(-r));
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
		q->sink.fd = -1;
		*slot = q;
		if (cl && parse_uint(cl, UINT64_MAX, &n) == 0 && n > h->p.max_body)
			q->too_large = true;
		if (h->threaded) {
			char allow[128];
			const struct node_http_route *rt = route_find(h, method, url, allow,
			                                              sizeof(allow));

			if (rt && (rt->flags & NODE_HTTP_SINK))
				return sink_open(h, conn, rt, method, url, q);
		}
		if (q->too_large)
			/* answered before the body is sent, which is never read */
			return answer_text(h, conn, MHD_HTTP_CONTENT_TOO_LARGE, NULL,
			                   "%s %s: body larger than %zu bytes\n", method, url,
			                   h->p.max_body);
		if (h->threaded) {
			const union MHD_ConnectionInfo *ci =
				MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

			q->c = ci ? ci->socket_context : NULL;
			if (q->c) {
				pthread_mutex_lock(&h->lock);
				q->c->head_ns = now_ns();
				q->c->body_bytes = 0;
				q->c->body_done = false;
				pthread_mutex_unlock(&h->lock);
			}
		}
		return MHD_YES;
	}
	if (q->sinking)
		return sink_more(h, conn, method, url, q, upload, upload_len);
	if (*upload_len) {
		if (q->c) {
			pthread_mutex_lock(&h->lock);
			q->c->body_bytes += *upload_len;
			pthread_mutex_unlock(&h->lock);
		}
		if (!q->too_large && q->body.len + *upload_len > h->p.max_body)
			q->too_large = true;
		if (!q->too_large && buf_append(&q->body, upload, *upload_len) < 0)
			return MHD_NO;
		*upload_len = 0;
		return MHD_YES;
	}
	if (q->c) {
		pthread_mutex_lock(&h->lock);
		q->c->body_done = true;
		pthread_mutex_unlock(&h->lock);
	}
	if (q->too_large)
		return answer_text(h, conn, MHD_HTTP_CONTENT_TOO_LARGE, NULL,
		                   "%s %s: body larger than %zu bytes\n", method, url, h->p.max_body);
	if (h->p.authorize) {
		struct node_http_route auth = { method, url, h->p.authorize, NULL, 0 };
		bool go = false;
		enum MHD_Result r = run_fn(h, conn, &auth, method, url, q, &go);

		if (!go)
			return r;
	}
	{
		char allow[128];
		const struct node_http_route *rt = route_find(h, method, url, allow, sizeof(allow));

		if (rt)
			return dispatch(h, conn, rt, method, url, q);
		if (allow[0])
			return answer_text(h, conn, MHD_HTTP_METHOD_NOT_ALLOWED, allow,
			                   "%s %s: method not allowed (%s)\n", method, url, allow);
		return answer_text(h, conn, MHD_HTTP_NOT_FOUND, NULL, "%s: not found\n", url);
	}
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **slot,
                         enum MHD_RequestTerminationCode why)
{
	struct req *q = *slot;

	if (!q)
		return;
	if (q->sink.sud || q->sink.fd >= 0) {
		if (q->sink.fd >= 0)
			close(q->sink.fd);
		if (q->sink.free)
			q->sink.free(q->sink.sud, false);
	}
	buf_free(&q->body);
	free(q);
	*slot = NULL;
}

int node_http_listen_tcp(const char *addr, const char *what, const char *lost, int backlog)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
	                          .ai_flags = AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	const char *colon = strrchr(addr, ':');
	_cleanup_close_ int fd = -1;
	char host[256];
	uint64_t port;
	int one = 1, r;
	size_t n;

	if (!colon || (size_t)(colon - addr) >= sizeof(host) ||
	    parse_uint(colon + 1, 65535, &port) < 0)
		return log_error(-EINVAL, "%s '%s': want HOST:PORT or off", what, addr);
	n = (size_t)(colon - addr);
	memcpy(host, addr, n);
	host[n] = 0;
	if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
		memmove(host, host + 1, n - 2);
		host[n - 2] = 0;
	}
	r = getaddrinfo(host, colon + 1, &hints, &ai);
	if (r != 0)
		return log_error(-EINVAL, "%s '%s': %s", what, addr, gai_strerror(r));
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		freeaddrinfo(ai);
		return log_errno(-errno, "%s '%s'", what, addr);
	}
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	r = bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, backlog) < 0 ? -errno : 0;
	freeaddrinfo(ai);
	if (r < 0)
		return log_errno(r, "%s '%s': %s", what, addr, lost);
	return TAKE_FD(fd);
}

/* ---- threaded: connections and the watchdog ---- */

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
	struct node_httpd *h = cls;
	struct conn *c = *socket_context;

	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);

		c = calloc(1, sizeof(*c));
		if (!c)
			return;
		c->fd = ci ? ci->connect_fd : -1;
		c->started_ns = now_ns();
		if (h->p.peer && c->fd >= 0) {
			c->peer = h->p.peer(h->p.ud, c->fd);
			if (!c->peer) {
				/* refused: libmicrohttpd sees the client leave at once */
				(void)shutdown(c->fd, SHUT_RDWR);
				c->cut = true;
			}
		}
		pthread_mutex_lock(&h->lock);
		c->next = h->conns;
		if (h->conns)
			h->conns->prev = c;
		h->conns = c;
		pthread_mutex_unlock(&h->lock);
		*socket_context = c;
		return;
	}
	if (!c)
		return;
	/* off the list before libmicrohttpd closes the descriptor */
	pthread_mutex_lock(&h->lock);
	if (c->prev)
		c->prev->next = c->next;
	else
		h->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	pthread_mutex_unlock(&h->lock);
	free(c->peer);
	free(c);
	*socket_context = NULL;
}

/* Whether c is overdue: its head not whole in time, or its body too slow. */
static const char *overdue(const struct node_httpd *h, const struct conn *c, uint64_t now)
{
	uint64_t head_ns = (uint64_t)h->p.head_timeout_s * 1000000000;

	if (!c->head_ns)
		return now - c->started_ns > head_ns ? "its head took too long" : NULL;
	if (h->p.min_body_rate && !c->body_done &&
	    now - c->head_ns > (uint64_t)HTTPD_BODY_GRACE_S * 1000000000) {
		double s = (double)(now - c->head_ns) / 1e9;

		if ((double)c->body_bytes < (s - HTTPD_BODY_GRACE_S) * (double)h->p.min_body_rate)
			return "its body came too slowly";
	}
	return NULL;
}

static void *watchdog_main(void *arg)
{
	struct node_httpd *h = arg;

	pthread_mutex_lock(&h->lock);
	while (!h->watch_stop) {
		struct timespec until;
		uint64_t now = now_ns();

		for (struct conn *c = h->conns; c; c = c->next) {
			const char *why = c->cut ? NULL : overdue(h, c, now);

			if (why && c->fd >= 0) {
				log_msg(LOG_INFO, "%s: a connection cut off: %s", h->p.name, why);
				(void)shutdown(c->fd, SHUT_RDWR);
				c->cut = true;
			}
		}
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_nsec += HTTPD_WATCH_MS * 1000000L;
		until.tv_sec += until.tv_nsec / 1000000000L;
		until.tv_nsec %= 1000000000L;
		(void)pthread_cond_timedwait(&h->wake, &h->lock, &until);
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

static int threaded_start(struct node_httpd *h, int listen_fd)
{
	pthread_condattr_t ca;

	pthread_mutex_init(&h->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&h->wake, &ca);
	pthread_condattr_destroy(&ca);
	/* A thread per connection, poll (not select: more than 1024
	 * descriptors), an inter-thread channel (for quiescing). */
	h->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD |
	                        MHD_USE_ITC | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, h,
	                        MHD_OPTION_LISTEN_SOCKET, listen_fd,
	                        MHD_OPTION_CONNECTION_MEMORY_LIMIT, h->p.max_head,
	                        MHD_OPTION_CONNECTION_TIMEOUT, h->p.timeout_s,
	                        MHD_OPTION_CONNECTION_LIMIT, h->p.max_conns,
	                        MHD_OPTION_THREAD_STACK_SIZE, (size_t)HTTPD_STACK,
	                        MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
	                        MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
	                        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h, MHD_OPTION_END);
	if (!h->d)
		return -EIO;
	if (pthread_create(&h->watchdog, NULL, watchdog_main, h) != 0) {
		MHD_socket fd = MHD_quiesce_daemon(h->d);

		MHD_stop_daemon(h->d);
		h->d = NULL;
		if (fd != MHD_INVALID_SOCKET)
			close(fd);
		return -EAGAIN;
	}
	h->watching = true;
	return 0;
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
	h->threaded = !l;
	if (!h->p.name)
		h->p.name = "httpd";
	if (!h->p.max_head)
		h->p.max_head = HTTPD_HEAD_MAX;
	if (!h->p.timeout_s)
		h->p.timeout_s = HTTPD_TIMEOUT_S;
	if (!h->p.max_conns)
		h->p.max_conns = HTTPD_CONNS;
	if (!h->p.head_timeout_s)
		h->p.head_timeout_s = h->p.timeout_s;
	if (h->threaded) {
		int r = threaded_start(h, *listen_fd);

		if (r < 0) {
			free(h);
			return log_error(r, "%s: cannot start the HTTP server (libmicrohttpd)",
			                 p->name);
		}
		*listen_fd = -1;
		*ret = h;
		return 0;
	}
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
	h->stopping = true;
	/* Quiesced first, the daemon gives the socket back untouched: a stop
	 * may shut a listening socket down, which would end it for the holder
	 * and the next worker too, who share it. */
	fd = MHD_quiesce_daemon(h->d);
	MHD_stop_daemon(h->d);
	if (fd != MHD_INVALID_SOCKET)
		close(fd);
	h->d = NULL;
	if (h->threaded) {
		if (h->watching) {
			pthread_mutex_lock(&h->lock);
			h->watch_stop = true;
			pthread_cond_signal(&h->wake);
			pthread_mutex_unlock(&h->lock);
			pthread_join(h->watchdog, NULL);
		}
		pthread_cond_destroy(&h->wake);
		pthread_mutex_destroy(&h->lock);
		free(h);
		return;
	}
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

const char *node_http_arg(const struct node_http_request *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}
