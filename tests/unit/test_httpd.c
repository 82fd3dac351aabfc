/* test_httpd.c — the node's HTTP server (node/httpd.c): real libmicrohttpd on a
 * real loop, over a unix socket and over TCP on 127.0.0.1, with a client
 * thread speaking raw HTTP/1.1.  Routes (exact and prefix), 404, 405 with
 * Allow, a body delivered whole, a body over the bound refused with 413
 * (declared or not), a head over the bound refused, a handler's failure as
 * 500, and a server freed while a client stays connected.  Threaded: "{}"
 * segments, unknown query parameters refused, JSON errors, a streamed
 * answer, a handler that waits while another client is served, a head
 * trickled in cut off by the watchdog, and a peer refused; a body streamed
 * to a descriptor (8 MiB through a pipe, never held whole), one over its
 * bound refused, and one cut off by its client reported incomplete. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>

#include "lib/lib.h"
#include "lib/loop.h"
#include "node/httpd.h"

static char dir[] = "/tmp/lazyroot-test-httpd-XXXXXX";

static int hello(void *ud, const struct node_http_request *req, struct node_http_reply *rep)
{
	fprintf(rep->body, "hello %s\n", req->path);
	return 0;
}

static int echo(void *ud, const struct node_http_request *req, struct node_http_reply *rep)
{
	const char *h = node_http_header(req, "X-Tag");

	rep->status = 201;
	rep->content_type = "application/octet-stream";
	fprintf(rep->body, "%s:%zu:", h ? h : "-", req->body_len);
	fwrite(req->body, 1, req->body_len, rep->body);
	return 0;
}

static int broken(void *ud, const struct node_http_request *req, struct node_http_reply *rep)
{
	fputs("half an answer", rep->body);
	return -EPERM;
}

static const struct node_http_route routes[] = {
	{ "GET", "/hello", hello, NULL, 0 },
	{ "GET", "/files/", hello, NULL, 0 },
	{ "POST", "/echo", echo, NULL, 0 },
	{ "PUT", "/echo", echo, NULL, 0 },
	{ "GET", "/broken", broken, NULL, 0 },
};

struct client {
	struct loop *l;
	struct sockaddr_storage addr;
	socklen_t addrlen;
	const char *request;
	size_t request_len;
	char reply[65536];
	size_t reply_len;
	atomic_bool done;
};

static void wake(void *ud)
{
}

static void *client_main(void *arg)
{
	struct client *c = arg;
	int fd = socket(c->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ssize_t n;

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&c->addr, c->addrlen), 0);
	/* a server may answer (413, 431) before taking the whole request */
	(void)write_full(fd, c->request, c->request_len);
	while (c->reply_len < sizeof(c->reply) - 1 &&
	       (n = read(fd, c->reply + c->reply_len, sizeof(c->reply) - 1 - c->reply_len)) > 0)
		c->reply_len += (size_t)n;
	c->reply[c->reply_len] = 0;
	close(fd);
	atomic_store(&c->done, true);
	(void)loop_post(c->l, wake, NULL);
	return NULL;
}

/* Send request over addr while the loop serves; returns the raw reply. */
static const char *exchange(struct loop *l, struct client *c, const char *request, size_t len)
{
	pthread_t t;

	c->l = l;
	c->request = request;
	c->request_len = len ? len : strlen(request);
	c->reply_len = 0;
	atomic_store(&c->done, false);
	assert_int_equal(pthread_create(&t, NULL, client_main, c), 0);
	while (!atomic_load(&c->done))
		assert_true(loop_run_once(l, true) >= 0);
	pthread_join(t, NULL);
	return c->reply;
}

static int listen_unix(struct client *c)
{
	struct sockaddr_un *a = (struct sockaddr_un *)&c->addr;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	memset(&c->addr, 0, sizeof(c->addr));
	a->sun_family = AF_UNIX;
	snprintf(a->sun_path, sizeof(a->sun_path), "%s/api.sock", dir);
	unlink(a->sun_path);
	c->addrlen = sizeof(*a);
	assert_int_equal(bind(fd, (struct sockaddr *)a, c->addrlen), 0);
	assert_int_equal(listen(fd, 16), 0);
	return fd;
}

static int listen_tcp(struct client *c)
{
	struct sockaddr_in *a = (struct sockaddr_in *)&c->addr;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	memset(&c->addr, 0, sizeof(c->addr));
	a->sin_family = AF_INET;
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	c->addrlen = sizeof(*a);
	assert_int_equal(bind(fd, (struct sockaddr *)a, c->addrlen), 0);
	assert_int_equal(listen(fd, 16), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)a, &c->addrlen), 0);
	return fd;
}

static struct node_httpd *serve(struct loop *l, int fd)
{
	struct node_httpd_params p = { .routes = routes, .nroutes = ARRAY_SIZE(routes),
	                               .name = "test", .max_body = 1000, .max_head = 4096 };
	struct node_httpd *h = NULL;

	assert_int_equal(node_httpd_new(l, &p, &fd, &h), 0);
	assert_int_equal(fd, -1);   /* taken */
	return h;
}

static void drain(struct loop *l)
{
	while (loop_pending(l))
		assert_true(loop_run_once(l, true) >= 0);
}

static void routes_on(bool unix_socket)
{
	struct loop *l = NULL;
	struct client *c = calloc(1, sizeof(*c));
	struct node_httpd *h;
	const char *r;

	assert_non_null(c);
	assert_int_equal(loop_new(64, &l), 0);
	h = serve(l, unix_socket ? listen_unix(c) : listen_tcp(c));

	r = exchange(l, c, "GET /hello?x=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 0);
	assert_non_null(strstr(r, "HTTP/1.1 200 OK\r\n"));
	assert_non_null(strstr(r, "\r\n\r\nhello /hello\n"));
	r = exchange(l, c, "GET /files/a/b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 0);
	assert_non_null(strstr(r, "hello /files/a/b\n"));
	r = exchange(l, c, "GET /hello/more HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 0);
	assert_non_null(strstr(r, "HTTP/1.1 404 "));
	r = exchange(l, c, "DELETE /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 0);
	assert_non_null(strstr(r, "HTTP/1.1 405 "));
	assert_non_null(strstr(r, "Allow: POST, PUT\r\n"));
	/* a body with a NUL in it, sent whole (strlen would stop at it) */
	r = exchange(l, c, "POST /echo HTTP/1.1\r\nHost: x\r\nX-Tag: t1\r\nContent-Length: 11\r\n"
	             "Connection: close\r\n\r\nhello\0world",
	             strlen("POST /echo HTTP/1.1\r\nHost: x\r\nX-Tag: t1\r\nContent-Length: 11\r\n"
	                    "Connection: close\r\n\r\n") + 11);
	assert_non_null(strstr(r, "HTTP/1.1 201 "));
	assert_non_null(strstr(r, "Content-Type: application/octet-stream\r\n"));
	assert_non_null(strstr(r, "\r\n\r\nt1:11:hello"));
	assert_memory_equal(c->reply + c->reply_len - 11, "hello\0world", 11);
	r = exchange(l, c, "GET /broken HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 0);
	assert_non_null(strstr(r, "HTTP/1.1 500 "));
	assert_null(strstr(r, "half an answer"));
	node_httpd_free(h);
	drain(l);
	loop_free(l);
	free(c);
}

static void test_httpd__routes_over_unix_socket(void **state)
{
	routes_on(true);
}

static void test_httpd__routes_over_tcp(void **state)
{
	routes_on(false);
}

static void test_httpd__bounds(void **state)
{
	struct loop *l = NULL;
	struct client *c = calloc(1, sizeof(*c));
	struct node_httpd *h;
	char *big = malloc(20000), *req = malloc(40000);
	const char *r;
	int n;

	assert_non_null(c);
	assert_non_null(big);
	assert_non_null(req);
	assert_int_equal(loop_new(64, &l), 0);
	h = serve(l, listen_tcp(c));
	memset(big, 'a', 19999);
	big[19999] = 0;

	/* a declared body over max_body (1000): 413 before it is read */
	n = snprintf(req, 40000, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n"
	             "Connection: close\r\n\r\n%.1001s", big);
	r = exchange(l, c, req, (size_t)n);
	assert_non_null(strstr(r, "HTTP/1.1 413 "));
	/* chunked, no length declared: counted as it comes */
	n = snprintf(req, 40000, "PUT /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
	             "Connection: close\r\n\r\n3e8\r\n%.1000s\r\n1\r\na\r\n0\r\n\r\n", big);
	r = exchange(l, c, req, (size_t)n);
	assert_non_null(strstr(r, "HTTP/1.1 413 "));
	/* exactly max_body is fine */
	n = snprintf(req, 40000, "PUT /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
	             "Connection: close\r\n\r\n%.1000s", big);
	r = exchange(l, c, req, (size_t)n);
	assert_non_null(strstr(r, "HTTP/1.1 201 "));
	assert_non_null(strstr(r, "-:1000:aaaa"));
	/* a head over max_head (4096): refused, never routed */
	n = snprintf(req, 40000, "GET /hello HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n"
	             "Connection: close\r\n\r\n", big);
	r = exchange(l, c, req, (size_t)n);
	assert_null(strstr(r, "HTTP/1.1 200 "));
	assert_null(strstr(r, "hello /hello"));
	/* and the server still serves */
	r = exchange(l, c, "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 0);
	assert_non_null(strstr(r, "HTTP/1.1 200 OK\r\n"));
	node_httpd_free(h);
	drain(l);
	loop_free(l);
	free(big);
	free(req);
	free(c);
}

/* Freed with a client connected and silent: the connection is closed (the
 * client reads EOF), the socket too, and the loop's polls end. */
static void test_httpd__free_with_a_client_connected(void **state)
{
	struct loop *l = NULL;
	struct client c = { 0 };
	struct node_httpd *h;
	char b;
	int fd;

	assert_int_equal(loop_new(64, &l), 0);
	h = serve(l, listen_tcp(&c));
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&c.addr, c.addrlen), 0);
	assert_int_equal(write_full(fd, "GET /hel", 8), 0);
	for (int i = 0; i < 20; i++)
		(void)loop_run_once(l, false);
	node_httpd_free(h);
	drain(l);
	assert_int_equal(read(fd, &b, 1), 0);
	close(fd);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&c.addr, c.addrlen), -1);
	assert_int_equal(errno, ECONNREFUSED);
	close(fd);
	loop_free(l);
}

/* ---- threaded ---- */

static int wait_pipe[2] = { -1, -1 };

static int params(void *ud, const struct node_http_request *req, struct node_http_reply *rep)
{
	const char *n = node_http_arg(req, "n");

	fprintf(rep->body, "%s %s %s\n", req->param[0], req->param[1], n ? n : "-");
	return 0;
}

static int waits(void *ud, const struct node_http_request *req, struct node_http_reply *rep)
{
	char b;

	assert_int_equal(read(wait_pipe[0], &b, 1), 1);
	fputs("waited\n", rep->body);
	return 0;
}

static int refused(void *ud, const struct node_http_request *req, struct node_http_reply *rep)
{
	return node_http_error(rep, 409, "sandbox '%s' is %s", req->param[0], "busy");
}

struct pieces {
	int left;
};

static ssize_t pieces_read(void *sud, char *buf, size_t max)
{
	struct pieces *p = sud;

	if (!p->left)
		return 0;
	p->left--;
	return snprintf(buf, max, "piece%d;", p->left);
}

static int streams(void *ud, const struct node_http_request *req, struct node_http_reply *rep)
{
	struct pieces *p = malloc(sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->left = 3;
	rep->content_type = "application/x-pieces";
	rep->stream = (struct node_http_stream){ pieces_read, free, p };
	return 0;
}

static const struct node_http_route threaded_routes[] = {
	{ "GET", "/items/{}/sub/{}", params, "n", 0 },
	{ "GET", "/wait", waits, "", 0 },
	{ "GET", "/stream", streams, "", 0 },
	{ "POST", "/items/{}", refused, "", 0 },
	{ "GET", "/hello", hello, "", 0 },
};

static void *refuse_odd(void *ud, int fd)
{
	static atomic_int n;

	if (atomic_fetch_add(&n, 1) == 2)
		return NULL;   /* the third connection */
	return strdup("peer");
}

/* One request on a fresh connection, blocking (a threaded server needs no
 * loop run); the raw reply. */
static char *ask(const struct client *c, const char *request)
{
	int fd = socket(c->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	size_t len = 0;
	char *reply = calloc(1, 65536);
	ssize_t n;

	assert_non_null(reply);
	assert_int_equal(connect(fd, (const struct sockaddr *)&c->addr, c->addrlen), 0);
	(void)write_full(fd, request, strlen(request));
	while (len < 65535 && (n = read(fd, reply + len, 65535 - len)) > 0)
		len += (size_t)n;
	close(fd);
	return reply;
}

struct asker {
	const struct client *c;
	const char *request;
	char *reply;
	atomic_bool done;
};

static void *asker_main(void *arg)
{
	struct asker *a = arg;

	a->reply = ask(a->c, a->request);
	atomic_store(&a->done, true);
	return NULL;
}

static void test_httpd__threaded(void **state)
{
	struct client c = { 0 };
	struct node_httpd_params p = { .routes = threaded_routes,
	                               .nroutes = ARRAY_SIZE(threaded_routes), .name = "test",
	                               .max_head = 4096, .timeout_s = 10, .head_timeout_s = 1,
	                               .json_errors = true, .max_conns = 64, .peer = refuse_odd };
	struct asker a = { .c = &c };
	struct node_httpd *h = NULL;
	pthread_t t;
	uint64_t t0;
	char *r, b;
	int fd = listen_unix(&c);

	assert_int_equal(pipe(wait_pipe), 0);
	assert_int_equal(node_httpd_new(NULL, &p, &fd, &h), 0);
	assert_int_equal(fd, -1);

	r = ask(&c, "GET /items/a1/sub/b2?n=7 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	assert_non_null(strstr(r, "HTTP/1.1 200 "));
	assert_non_null(strstr(r, "\r\n\r\na1 b2 7\n"));
	free(r);
	r = ask(&c, "GET /items/a1/sub/b2?x=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	assert_non_null(strstr(r, "HTTP/1.1 400 "));
	assert_non_null(strstr(r, "Content-Type: application/json\r\n"));
	assert_non_null(strstr(r, "unknown query parameter 'x'"));
	free(r);
	/* the third connection: refused by the peer function */
	r = ask(&c, "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	assert_null(strstr(r, "HTTP/1.1 200 "));
	free(r);
	r = ask(&c, "GET /items/a1/sub HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	assert_non_null(strstr(r, "HTTP/1.1 404 "));
	assert_non_null(strstr(r, "{\"error\":\"/items/a1/sub: not found\"}\n"));
	free(r);
	r = ask(&c, "POST /items/s7 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	assert_non_null(strstr(r, "HTTP/1.1 409 "));
	assert_non_null(strstr(r, "{\"error\":\"sandbox 's7' is busy\"}\n"));
	free(r);
	r = ask(&c, "GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	assert_non_null(strstr(r, "Transfer-Encoding: chunked\r\n"));
	assert_non_null(strstr(r, "piece2;"));
	assert_non_null(strstr(r, "piece0;"));
	assert_non_null(strstr(r, "\r\n0\r\n\r\n"));
	free(r);

	/* a handler that waits holds up only its own client */
	a.request = "GET /wait HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	assert_int_equal(pthread_create(&t, NULL, asker_main, &a), 0);
	r = ask(&c, "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	assert_non_null(strstr(r, "hello /hello\n"));
	free(r);
	assert_false(atomic_load(&a.done));
	assert_int_equal(write(wait_pipe[1], "x", 1), 1);
	pthread_join(t, NULL);
	assert_non_null(strstr(a.reply, "waited\n"));
	free(a.reply);

	/* a head trickled in: cut off after head_timeout_s (1 s), long before
	 * the idle timeout (10 s), though the client keeps sending */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&c.addr, c.addrlen), 0);
	t0 = now_ns();
	for (;;) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };

		if (send(fd, "X", 1, MSG_NOSIGNAL) != 1)
			break;
		if (poll(&pf, 1, 200) == 1) {
			assert_true(read(fd, &b, 1) <= 0);
			break;
		}
		assert_true(now_ns() - t0 < 5000000000ull);
	}
	assert_true(now_ns() - t0 >= 900000000ull);
	close(fd);
	r = ask(&c, "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	assert_non_null(strstr(r, "hello /hello\n"));
	free(r);
	node_httpd_free(h);
	close(wait_pipe[0]);
	close(wait_pipe[1]);
}

/* ---- bodies to a descriptor ---- */

static int freed_pipe[2] = { -1, -1 };

struct sink_state {
	int rfd;
	pthread_t reader;
	uint64_t bytes;
	uint8_t last;
	bool joined;
};

static void *sink_reader(void *arg)
{
	struct sink_state *st = arg;
	char b[65536];
	ssize_t n;

	while ((n = read(st->rfd, b, sizeof(b))) > 0) {
		st->bytes += (uint64_t)n;
		st->last = (uint8_t)b[n - 1];
	}
	close(st->rfd);
	return NULL;
}

static int sink_done(void *sud, int err, struct node_http_reply *rep)
{
	struct sink_state *st = sud;

	pthread_join(st->reader, NULL);
	st->joined = true;
	fprintf(rep->body, "got %llu bytes ending in %c, err %d\n", (unsigned long long)st->bytes,
	        st->last, err);
	return 0;
}

static void sink_free(void *sud, bool complete)
{
	struct sink_state *st = sud;

	if (!st->joined)
		pthread_join(st->reader, NULL);
	free(st);
	assert_int_equal(write(freed_pipe[1], complete ? "c" : "i", 1), 1);
}

static int sink_open_fn(void *ud, const struct node_http_request *req, struct node_http_reply *rep)
{
	struct sink_state *st = calloc(1, sizeof(*st));
	int p[2];

	assert_non_null(st);
	if (!strcmp(req->param[0], "refused")) {
		free(st);
		return node_http_error(rep, 404, "no such exec '%s'", req->param[0]);
	}
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	st->rfd = p[0];
	assert_int_equal(pthread_create(&st->reader, NULL, sink_reader, st), 0);
	rep->sink = (struct node_http_sink){ p[1], sink_done, sink_free, st };
	assert_int_equal(write(freed_pipe[1], "o", 1), 1);
	return 0;
}

static const struct node_http_route sink_routes[] = {
	{ "PUT", "/sink/{}", sink_open_fn, "", NODE_HTTP_SINK },
};

static char freed_at(int line)
{
	struct pollfd pf = { .fd = freed_pipe[0], .events = POLLIN };
	char b = 0;

	if (poll(&pf, 1, 10000) != 1)
		fail_msg("a sink was not freed (line %d)", line);
	assert_int_equal(read(freed_pipe[0], &b, 1), 1);
	return b;
}

static void test_httpd__body_to_descriptor(void **state)
{
	struct client c = { 0 };
	struct node_httpd_params p = { .routes = sink_routes, .nroutes = ARRAY_SIZE(sink_routes),
	                               .name = "test", .max_body = 1000, .json_errors = true,
	                               .max_sink_body = 16 << 20, .max_conns = 8 };
	struct node_httpd *h = NULL;
	size_t big = 8 << 20;
	char *req = malloc(big + 256), *r;
	int fd = listen_unix(&c), n;

	assert_non_null(req);
	assert_int_equal(pipe2(freed_pipe, O_CLOEXEC), 0);
	assert_int_equal(node_httpd_new(NULL, &p, &fd, &h), 0);
	n = snprintf(req, 256, "PUT /sink/e1 HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n"
	             "Connection: close\r\n\r\n", big);
	memset(req + n, 'z', big);
	req[n + big] = 0;
	r = ask(&c, req);
	assert_non_null(strstr(r, "HTTP/1.1 200 "));
	assert_non_null(strstr(r, "got 8388608 bytes ending in z, err 0\n"));
	free(r);
	assert_int_equal(freed_at(__LINE__), 'o');
	assert_int_equal(freed_at(__LINE__), 'c');
	/* the handler's own answer, before any body */
	r = ask(&c, "PUT /sink/refused HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
	        "Connection: close\r\n\r\nhello");
	assert_non_null(strstr(r, "HTTP/1.1 404 "));
	assert_non_null(strstr(r, "no such exec 'refused'"));
	free(r);
	/* over max_sink_body, declared: refused before it is sent */
	r = ask(&c, "PUT /sink/e2 HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n"
	        "Connection: close\r\n\r\n");
	assert_non_null(strstr(r, "HTTP/1.1 413 "));
	free(r);
	/* the client leaves half way: the sink is freed as incomplete */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&c.addr, c.addrlen), 0);
	n = snprintf(req, 256, "PUT /sink/e3 HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n"
	             "\r\n0123456789");
	assert_int_equal(write_full(fd, req, (size_t)n), 0);
	assert_int_equal(freed_at(__LINE__), 'o');   /* the sink is open */
	close(fd);
	assert_int_equal(freed_at(__LINE__), 'i');
	node_httpd_free(h);
	close(freed_pipe[0]);
	close(freed_pipe[1]);
	free(req);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_httpd__routes_over_unix_socket),
		cmocka_unit_test(test_httpd__routes_over_tcp),
		cmocka_unit_test(test_httpd__bounds),
		cmocka_unit_test(test_httpd__free_with_a_client_connected),
		cmocka_unit_test(test_httpd__threaded),
		cmocka_unit_test(test_httpd__body_to_descriptor),
	};
	char path[sizeof(dir) + 16];
	int r;

	/* a client writing to a connection the server refused gets EPIPE, as
	 * the node's worker does (it ignores SIGPIPE too) */
	signal(SIGPIPE, SIG_IGN);
	if (!mkdtemp(dir))
		return 1;
	r = cmocka_run_group_tests(tests, NULL, NULL);
	snprintf(path, sizeof(path), "%s/api.sock", dir);
	unlink(path);
	rmdir(dir);
	return r;
}
