/*
 * api.c — see api.h: the listeners, who may call, and the route table.
 *
 * Bounds (node/httpd.h): a head of at most API_HEAD_MAX bytes, whole within
 * API_HEAD_TIMEOUT_S of the connection's start; a JSON body of at most
 * API_BODY_MAX bytes arriving at API_BODY_RATE bytes a second or more;
 * API_TIMEOUT_S seconds idle; at most API_CONNS connections at once.  A
 * connection is a thread (of HTTPD_STACK bytes of stack, mostly never
 * touched), so the connection bound is also the thread bound; 1,000 idle
 * clients fit under it with room for the rest.
 *
 * Tokens are compared as their SHA-256 digests, byte by byte without an
 * early exit: the time taken says nothing of how much of a guess was right,
 * nor (the digests being of one size) of the token's length.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "lib/json.h"
#include "lib/lib.h"
#include "lib/sha256.h"
#include "node/api-internal.h"
#include "node/api.h"
#include "node/config.h"
#include "node/httpd.h"
#include "sandbox/sandbox.h"

#define API_HEAD_MAX 8192
#define API_HEAD_TIMEOUT_S 10
#define API_BODY_MAX (1u << 20)
#define API_BODY_RATE (16u << 10)
#define API_TIMEOUT_S 30
#define API_CONNS 4096
#define API_TOKEN_MAX 4096

/* Who is calling, as the handlers see it (req->peer). */
struct api_peer {
	bool tcp;
};

struct api_server {
	struct node_httpd *h;
	const struct sandbox_node *node;   /* the node's sandbox directories */
	const struct node_config *cfg;     /* the worker's settings, for its lifetime */
	uint8_t token[SHA256_SIZE];   /* TCP: the token's digest */
	bool tcp;
};

struct node_api {
	struct api_server unix_s, tcp_s;
	struct sandbox_node node;
};

int node_api_socket_path(const char *control, char *out, size_t len)
{
	size_t n = strlen(control);
	int w;

	if (n > 5 && !strcmp(control + n - 5, ".sock"))
		w = snprintf(out, len, "%.*s-api.sock", (int)(n - 5), control);
	else
		w = snprintf(out, len, "%s-api", control);
	if (w < 0 || (size_t)w >= len || (size_t)w >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return log_error(-ENAMETOOLONG, "the API socket beside '%s': too long for a socket "
		                 "path", control);
	return 0;
}

int node_api_listen_unix(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	_cleanup_close_ int fd = -1;

	if (strlen(path) >= sizeof(a.sun_path))
		return log_error(-ENAMETOOLONG, "API socket '%s': too long", path);
	strcpy(a.sun_path, path);
	(void)unlink(path);   /* a dead node's: the caller holds the node's lock */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return log_errno(-errno, "API socket '%s'", path);
	/* 0600: root only; every connection's SO_PEERCRED is checked again */
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || chmod(path, 0600) < 0 ||
	    listen(fd, 1024) < 0)
		return log_errno(-errno, "API socket '%s'", path);
	return TAKE_FD(fd);
}

int node_api_listen_tcp(const struct node_config *cfg)
{
	if (!cfg->api_listen)
		return -1;
	return node_http_listen_tcp(cfg->api_listen, "api_listen", "no API over TCP", 1024);
}

/* The token's digest, from the file's first line. */
static int read_token(const char *path, uint8_t out[SHA256_SIZE])
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	size_t n;
	int r;

	if (fd < 0)
		return log_errno(-errno, "api_token_file '%s'", path);
	if (fstat(fd, &st) < 0)
		return log_errno(-errno, "api_token_file '%s'", path);
	if (!S_ISREG(st.st_mode))
		return log_error(-EINVAL, "api_token_file '%s': not a regular file", path);
	if (st.st_mode & 077)
		return log_error(-EINVAL, "api_token_file '%s': readable by others than its owner "
		                 "(chmod 600)", path);
	r = buf_reserve(&b, API_TOKEN_MAX + 1);
	if (r < 0)
		return r;
	{
		ssize_t got = read_full(fd, b.data, API_TOKEN_MAX + 1);

		if (got < 0)
			return log_errno((int)got, "api_token_file '%s'", path);
		if (got > API_TOKEN_MAX)
			return log_error(-EINVAL, "api_token_file '%s': longer than %u bytes", path,
			                 API_TOKEN_MAX);
		b.len = (size_t)got;
	}
	n = 0;
	while (n < b.len && b.data[n] != '\n' && b.data[n] != '\r')
		n++;
	if (!n)
		return log_error(-EINVAL, "api_token_file '%s': empty", path);
	r = sha256(b.data, n, out);
	explicit_bzero(b.data, b.len);
	return r;
}

int node_api_check(const struct node_config *cfg)
{
	uint8_t d[SHA256_SIZE];

	if (!cfg->api_listen)
		return 0;
	if (!cfg->api_token_file)
		return log_error(-EINVAL, "api_listen '%s': needs api_token_file (the API is not "
		                 "served over TCP without a token)", cfg->api_listen);
	return read_token(cfg->api_token_file, d) < 0 ? -EINVAL : 0;
}

static bool same_digest(const uint8_t a[SHA256_SIZE], const uint8_t b[SHA256_SIZE])
{
	volatile uint8_t diff = 0;

	for (size_t i = 0; i < SHA256_SIZE; i++)
		diff |= a[i] ^ b[i];
	return diff == 0;
}

/* ---- who may call ---- */

static void *peer_unix(void *ud, int fd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	struct api_peer *p;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 || cr.uid != 0) {
		log_msg(LOG_INFO, "api: a connection refused: not root (uid %d)",
		        len == sizeof(cr) ? (int)cr.uid : -1);
		return NULL;
	}
	p = calloc(1, sizeof(*p));
	return p;
}

static void *peer_tcp(void *ud, int fd)
{
	struct api_peer *p = calloc(1, sizeof(*p));

	if (p)
		p->tcp = true;
	return p;
}

static int authorize(void *ud, const struct node_http_request *req, struct node_http_reply *rep)
{
	struct api_server *s = ud;
	const char *h;
	uint8_t d[SHA256_SIZE];

	if (!s->tcp)
		return 1;   /* the unix socket's peer was checked as it connected */
	h = node_http_header(req, "Authorization");
	if (!h || strncasecmp(h, "Bearer ", 7) || !h[7]) {
		(void)node_http_error(rep, 401, "%s %s: no bearer token (Authorization: Bearer "
		                      "TOKEN)", req->method, req->path);
		return 0;
	}
	if (sha256(h + 7, strlen(h + 7), d) < 0)
		return -EIO;
	if (!same_digest(d, s->token)) {
		(void)node_http_error(rep, 401, "%s %s: wrong bearer token", req->method, req->path);
		return 0;
	}
	return 1;
}

/* ---- routes ---- */

static int get_version(void *ud, const struct node_http_request *req, struct node_http_reply *rep)
{
	rep->content_type = "application/json";
	return json_pack_file(rep->body, "{s:s, s:s}", "api", "v1", "server", "lazyroot");
}

#define SANDBOX_ROUTE(fn)                                                                          \
	static int route_##fn(void *ud, const struct node_http_request *req,                       \
	                      struct node_http_reply *rep)                                         \
	{                                                                                          \
		return api_##fn(((struct api_server *)ud)->node, req, rep);                        \
	}
SANDBOX_ROUTE(list)
SANDBOX_ROUTE(get)
SANDBOX_ROUTE(destroy)
SANDBOX_ROUTE(exec)
SANDBOX_ROUTE(exec_get)
SANDBOX_ROUTE(output)
SANDBOX_ROUTE(stage)
#undef SANDBOX_ROUTE

static int route_create(void *ud, const struct node_http_request *req, struct node_http_reply *rep)
{
	const struct api_server *s = ud;

	return api_create(s->node, s->cfg, req, rep);
}

static const struct node_http_route api_routes[] = {
	{ "GET", "/v1", get_version, "", 0 },
	{ "POST", "/v1/sandboxes", route_create, "", 0 },
	{ "GET", "/v1/sandboxes", route_list, "label", 0 },
	{ "GET", "/v1/sandboxes/{}", route_get, "", 0 },
	{ "DELETE", "/v1/sandboxes/{}", route_destroy, "", 0 },
	{ "POST", "/v1/sandboxes/{}/execs", route_exec, "attach", 0 },
	{ "GET", "/v1/sandboxes/{}/execs/{}", route_exec_get, "wait", 0 },
	{ "GET", "/v1/sandboxes/{}/execs/{}/output", route_output, "stdout,stderr,follow", 0 },
	{ "POST", "/v1/sandboxes/{}/stage", route_stage, "", 0 },
};

const struct node_http_route *node_api_routes(size_t *ret_n)
{
	*ret_n = ARRAY_SIZE(api_routes);
	return api_routes;
}

static int serve(struct api_server *s, int *fd, const char *name)
{
	struct node_httpd_params p = {
		.routes = api_routes, .nroutes = ARRAY_SIZE(api_routes), .ud = s, .name = name,
		.max_head = API_HEAD_MAX, .max_body = API_BODY_MAX, .timeout_s = API_TIMEOUT_S,
		.head_timeout_s = API_HEAD_TIMEOUT_S, .min_body_rate = API_BODY_RATE,
		.max_conns = API_CONNS, .json_errors = true, .authorize = authorize,
		.peer = s->tcp ? peer_tcp : peer_unix,
	};

	return node_httpd_new(NULL, &p, fd, &s->h);
}

int node_api_open(const struct node_config *cfg, int *unix_fd, int *tcp_fd,
                  struct node_api **ret)
{
	struct node_api *a = calloc(1, sizeof(*a));
	int r = 0;

	if (!a)
		return -ENOMEM;
	a->tcp_s.tcp = true;
	node_config_sandbox_node(cfg, &a->node);
	a->unix_s.node = a->tcp_s.node = &a->node;
	a->unix_s.cfg = a->tcp_s.cfg = cfg;
	if (*unix_fd >= 0)
		r = serve(&a->unix_s, unix_fd, "api");
	if (r == 0 && *tcp_fd >= 0) {
		if (!cfg->api_token_file || read_token(cfg->api_token_file, a->tcp_s.token) < 0)
			log_msg(LOG_WARN, "api: not served over TCP: no token");
		else
			r = serve(&a->tcp_s, tcp_fd, "api-tcp");
	}
	if (*tcp_fd >= 0) {
		close(*tcp_fd);
		*tcp_fd = -1;
	}
	if (r < 0) {
		node_api_close(a);
		return r;
	}
	*ret = a;
	return 0;
}

void node_api_close(struct node_api *a)
{
	if (!a)
		return;
	node_httpd_free(a->unix_s.h);
	node_httpd_free(a->tcp_s.h);
	explicit_bzero(a->tcp_s.token, sizeof(a->tcp_s.token));
	free(a);
}
