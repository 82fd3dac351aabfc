/*
 * metrics.c — GET /metrics (Prometheus text) on the node's HTTP server
 * (node/httpd.c), and the listening socket it serves on.
 *
 * The holder makes the socket (node_metrics_listen) and keeps it for the
 * life of the node, as it keeps the control socket: each worker gets it at
 * its start and serves on it, so a worker that replaces another never binds
 * the port again (which failed with "Address already in use" while the dead
 * worker's socket was not yet released), and a scraper's connection made
 * between two workers waits in the backlog for the next one.
 *
 * Bounds (node/httpd.h): a request head of at most METRICS_HEAD_MAX bytes,
 * no body, at most METRICS_CONNS connections at once, METRICS_TIMEOUT_S
 * seconds idle; the body is a few hundred bytes per image.
 */
#include "lib/lib.h"
#include "node/httpd.h"
#include "node/metrics.h"

#define METRICS_HEAD_MAX 8192
#define METRICS_CONNS 16
#define METRICS_TIMEOUT_S 5

struct node_metrics {
	struct node_httpd *h;
	node_metrics_fn fn;
	void *ud;
};

int node_metrics_listen(const char *addr)
{
	return node_http_listen_tcp(addr, "metrics", "no /metrics", 64);
}

static int get_metrics(void *ud, const struct node_http_request *req, struct node_http_reply *rep)
{
	struct node_metrics *m = ud;

	rep->content_type = "text/plain; version=0.0.4";
	m->fn(m->ud, rep->body);
	return 0;
}

static const struct node_http_route metrics_routes[] = {
	{ "GET", "/metrics", get_metrics, NULL, 0 },
};

int node_metrics_open(struct loop *l, int *listen_fd, node_metrics_fn fn, void *ud,
                      struct node_metrics **ret)
{
	struct node_httpd_params p = {
		.routes = metrics_routes, .nroutes = ARRAY_SIZE(metrics_routes), .name = "metrics",
		.max_head = METRICS_HEAD_MAX, .timeout_s = METRICS_TIMEOUT_S,
		.max_conns = METRICS_CONNS,
	};
	struct node_metrics *m = calloc(1, sizeof(*m));
	int r;

	if (!m)
		return -ENOMEM;
	*m = (struct node_metrics){ .fn = fn, .ud = ud };
	p.ud = m;
	r = node_httpd_new(l, &p, listen_fd, &m->h);
	if (r < 0) {
		free(m);
		return r;
	}
	*ret = m;
	return 0;
}

void node_metrics_close(struct node_metrics *m)
{
	if (!m)
		return;
	node_httpd_free(m->h);
	free(m);
}
