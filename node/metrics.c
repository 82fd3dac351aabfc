/*
 * metrics.c — GET /metrics over HTTP/1.0 from the worker's loop.
 *
 * Bounds: a request head of at most METRICS_HEAD_MAX bytes; at most
 * METRICS_CONNS connections reading at once (one more drops the oldest), so
 * that clients that connect and send nothing cost a few descriptors, never
 * the loop.  The answer is written with a send timeout of one second: the
 * body (a few hundred bytes per image) fits the socket buffer, so a scraper
 * that does not read only loses its answer.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "lib/lib.h"
#include "lib/loop.h"
#include "node/metrics.h"

#define METRICS_HEAD_MAX 8192
#define METRICS_CONNS 16

struct conn {
	struct node_metrics *m;
	int fd;
	int64_t poll;
	bool polling;
	size_t len;
	char head[METRICS_HEAD_MAX + 1];
};

struct node_metrics {
	struct loop *l;
	int fd;
	int64_t poll;
	bool polling, closing;
	node_metrics_fn fn;
	void *ud;
	struct conn *conns[METRICS_CONNS];
};

static void conn_drop(struct conn *c)
{
	struct node_metrics *m = c->m;

	for (int i = 0; i < METRICS_CONNS; i++)
		if (m->conns[i] == c)
			m->conns[i] = NULL;
	if (c->polling) {
		/* its callback frees it */
		(void)loop_cancel_poll(m->l, c->poll);
		shutdown(c->fd, SHUT_RDWR);
		c->m = NULL;
		return;
	}
	close(c->fd);
	free(c);
}

static void answer(struct conn *c)
{
	char *body = NULL, head[256];
	size_t blen = 0;
	struct timeval tv = { .tv_sec = 1 };
	FILE *f;
	bool ok = !strncmp(c->head, "GET /metrics ", 13) || !strncmp(c->head, "GET /metrics?", 13);

	(void)fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) & ~O_NONBLOCK);
	(void)setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	f = open_memstream(&body, &blen);
	if (f) {
		if (ok)
			c->m->fn(c->m->ud, f);
		else
			fputs("not found: GET /metrics\n", f);
		fclose(f);
	}
	snprintf(head, sizeof(head),
	         "HTTP/1.0 %s\r\nContent-Type: text/plain; version=0.0.4\r\n"
	         "Content-Length: %zu\r\nConnection: close\r\n\r\n",
	         !f ? "500 Internal Server Error" : ok ? "200 OK" : "404 Not Found", blen);
	if (write_full(c->fd, head, strlen(head)) == 0 && body)
		(void)write_full(c->fd, body, blen);
	free(body);
}

static void arm_conn(struct conn *c);

static void on_conn(void *ud, int res)
{
	struct conn *c = ud;
	ssize_t n;

	c->polling = false;
	if (!c->m || res < 0) {   /* dropped or cancelled */
		if (c->m)
			conn_drop(c);
		else {
			close(c->fd);
			free(c);
		}
		return;
	}
	n = read(c->fd, c->head + c->len, METRICS_HEAD_MAX - c->len);
	if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
		arm_conn(c);
		return;
	}
	if (n <= 0) {
		conn_drop(c);
		return;
	}
	c->len += (size_t)n;
	c->head[c->len] = 0;
	if (strstr(c->head, "\r\n\r\n") || strstr(c->head, "\n\n") || c->len == METRICS_HEAD_MAX) {
		answer(c);
		conn_drop(c);
		return;
	}
	arm_conn(c);
}

static void arm_conn(struct conn *c)
{
	c->poll = loop_poll_id(c->m->l, c->fd, POLLIN, on_conn, c);
	c->polling = c->poll >= 0;
	if (!c->polling)
		conn_drop(c);
}

static void arm(struct node_metrics *m);

static void on_accept(void *ud, int res)
{
	struct node_metrics *m = ud;

	m->polling = false;
	if (m->closing || res < 0) {
		if (m->closing) {
			close(m->fd);
			free(m);
		}
		return;
	}
	for (;;) {
		int fd = accept4(m->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), slot = -1;
		struct conn *c;

		if (fd < 0)
			break;
		for (int i = 0; i < METRICS_CONNS && slot < 0; i++)
			if (!m->conns[i])
				slot = i;
		if (slot < 0) {
			slot = 0;
			conn_drop(m->conns[0]);   /* the oldest (roughly) makes room */
		}
		c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->m = m;
		c->fd = fd;
		m->conns[slot] = c;
		arm_conn(c);
	}
	arm(m);
}

static void arm(struct node_metrics *m)
{
	m->poll = loop_poll_id(m->l, m->fd, POLLIN, on_accept, m);
	m->polling = m->poll >= 0;
}

static int parse_addr(const char *addr, struct sockaddr_storage *ss, socklen_t *len)
{
	char host[128];
	const char *colon = strrchr(addr, ':');
	uint64_t port;

	if (!colon || (size_t)(colon - addr) >= sizeof(host) ||
	    parse_uint(colon + 1, 65535, &port) < 0)
		return -EINVAL;
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = 0;
	memset(ss, 0, sizeof(*ss));
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;

		host[strlen(host) - 1] = 0;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		*len = sizeof(*a);
		return inet_pton(AF_INET6, host + 1, &a->sin6_addr) == 1 ? 0 : -EINVAL;
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)ss;

		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		*len = sizeof(*a);
		return inet_pton(AF_INET, host, &a->sin_addr) == 1 ? 0 : -EINVAL;
	}
}

int node_metrics_open(struct loop *l, const char *addr, node_metrics_fn fn, void *ud,
                      struct node_metrics **ret)
{
	struct sockaddr_storage ss;
	socklen_t len;
	struct node_metrics *m;
	int one = 1, fd;

	if (parse_addr(addr, &ss, &len) < 0)
		return log_error(-EINVAL, "metrics '%s': want HOST:PORT or off", addr);
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return log_errno(-errno, "metrics '%s'", addr);
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 16) < 0) {
		int e = -errno;

		close(fd);
		return log_errno(e, "metrics '%s': no /metrics", addr);
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		close(fd);
		return -ENOMEM;
	}
	*m = (struct node_metrics){ .l = l, .fd = fd, .fn = fn, .ud = ud };
	arm(m);
	*ret = m;
	return 0;
}

void node_metrics_close(struct node_metrics *m)
{
	if (!m)
		return;
	for (int i = 0; i < METRICS_CONNS; i++)
		if (m->conns[i])
			conn_drop(m->conns[i]);
	m->closing = true;
	if (m->polling) {
		(void)loop_cancel_poll(m->l, m->poll);   /* on_accept frees m */
		return;
	}
	close(m->fd);
	free(m);
}
