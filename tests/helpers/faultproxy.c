/*
 * faultproxy — an HTTP/1.1 proxy for tests that breaks requests on purpose.
 *
 *   faultproxy --upstream PORT --control FILE [--port PORT]
 *
 * Listens on 127.0.0.1 (PORT, or a free one), prints the port it listens on
 * as one line on stdout once it accepts connections, and forwards each
 * request to 127.0.0.1:UPSTREAM.  Only loopback is ever used.
 *
 * FILE says what to break; it is read again for every request and every
 * 20 ms while idle, so a test changes the fault by rewriting it (write a new
 * file and rename it over FILE).  Words, all optional:
 *   down          refuse connections: close the listening socket and every
 *                 client connection; rewriting the file brings it back
 *   reset N       close the connection with a reset instead of answering
 *   500 N, 503 N  answer with that status and no body
 *   429 N         answer 429 Too Many Requests, no body, with the header
 *                 Retry-After: S when the word retry-after S is given
 *   truncate N    send the headers and half of the body, then close
 *   stall N       answer nothing until the client gives up
 *   flip N        flip one bit in the middle of the body
 *   match STR     break only requests whose path contains STR
 *   delay MS      add MS of round-trip latency: every answer (to any request,
 *                 matching or not) is held MS milliseconds after its head
 *                 arrives from upstream, and the first answer on a client
 *                 connection 2×MS (the TCP handshake's round trip, which the
 *                 kernel completed at once on loopback).  Each connection
 *                 waits on its own: N concurrent requests all take MS, not
 *                 N×MS.  Bandwidth is not limited.
 * N: break every Nth matching request (1: all of them).  An empty or missing
 * file breaks nothing.  Faults are counted on stderr at exit (SIGTERM).
 *
 * Each client connection has a thread; each request goes upstream over a
 * fresh connection as HTTP/1.0, so that the answer ends at end of file (no
 * chunked encoding to parse), and comes back with its length restated.  An
 * answer with a Content-Length that no fault rewrites is streamed through
 * as it arrives (so a large download is not held in memory first); the rest
 * are read whole, then sent.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum fault { F_NONE, F_RESET, F_429, F_500, F_503, F_TRUNCATE, F_STALL, F_FLIP };

struct mode {
	bool down;
	enum fault fault;
	unsigned every;
	unsigned delay_ms;
	int retry_after;        /* seconds, or -1: no Retry-After */
	char match[256];
};

#define MAX_CLIENTS 1024
#define MAX_HEAD (64 << 10)

static const char *control;
static int upstream_port;
static atomic_ulong matched_requests, faults;
static pthread_mutex_t clients_lock = PTHREAD_MUTEX_INITIALIZER;
static int clients[MAX_CLIENTS];

static void read_mode(struct mode *m)
{
	char buf[1024], word[64];
	FILE *f = fopen(control, "re");
	size_t n = 0;
	const char *p;
	int used;

	memset(m, 0, sizeof(*m));
	m->every = 1;
	m->retry_after = -1;
	if (!f)
		return;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	for (p = buf; sscanf(p, "%63s%n", word, &used) == 1; p += used) {
		unsigned v;
		int k = 0;
		static const struct {
			const char *w;
			enum fault f;
		} names[] = { { "reset", F_RESET }, { "429", F_429 }, { "500", F_500 }, { "503", F_503 },
		              { "truncate", F_TRUNCATE }, { "stall", F_STALL }, { "flip", F_FLIP } };

		if (!strcmp(word, "down")) {
			m->down = true;
			continue;
		}
		if (!strcmp(word, "delay")) {
			if (sscanf(p + used, "%u%n", &v, &k) == 1) {
				m->delay_ms = v;
				used += k;
			}
			continue;
		}
		if (!strcmp(word, "retry-after")) {
			if (sscanf(p + used, "%u%n", &v, &k) == 1) {
				m->retry_after = (int)v;
				used += k;
			}
			continue;
		}
		if (!strcmp(word, "match")) {
			if (sscanf(p + used, "%255s%n", m->match, &k) == 1)
				used += k;
			continue;
		}
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			if (strcmp(word, names[i].w))
				continue;
			m->fault = names[i].f;
			if (sscanf(p + used, "%u%n", &v, &k) == 1 && v > 0) {
				m->every = v;
				used += k;
			}
		}
	}
}

static void clients_set(int fd, bool add)
{
	pthread_mutex_lock(&clients_lock);
	for (int i = 0; i < MAX_CLIENTS; i++) {
		if (add ? clients[i] == 0 : clients[i] == fd + 1) {
			clients[i] = add ? fd + 1 : 0;
			break;
		}
	}
	pthread_mutex_unlock(&clients_lock);
}

static void clients_kill(void)
{
	pthread_mutex_lock(&clients_lock);
	for (int i = 0; i < MAX_CLIENTS; i++)
		if (clients[i])
			shutdown(clients[i] - 1, SHUT_RDWR);
	pthread_mutex_unlock(&clients_lock);
}

static int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n) {
		ssize_t k = send(fd, c, n, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		c += k;
		n -= (size_t)k;
	}
	return 0;
}

struct sbuf {
	char *p;
	size_t len, cap;
};

static int sbuf_add(struct sbuf *b, const void *p, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *q;

		while (cap < b->len + n + 1)
			cap *= 2;
		q = realloc(b->p, cap);
		if (!q)
			return -1;
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
	b->p[b->len] = 0;
	return 0;
}

/* Value of header name in the head [p, end), or NULL. */
static const char *header(const char *p, const char *name)
{
	size_t nl = strlen(name);

	for (p = strstr(p, "\r\n"); p && p[2] != '\r'; p = strstr(p + 2, "\r\n"))
		if (!strncasecmp(p + 2, name, nl) && p[2 + nl] == ':')
			return p + 3 + nl;
	return NULL;
}

static void reset_close(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

/* Send the request upstream as HTTP/1.0 over a new connection; read the
 * answer into resp up to the end of its head (ret_head: its length), or
 * whole when `whole`.  Returns the upstream socket, or -1. */
static int forward(const struct sbuf *req, size_t head_len, bool whole, struct sbuf *resp,
                   size_t *ret_head)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)upstream_port),
	                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sbuf out = { 0 };
	const char *line_end = strstr(req->p, "\r\n");
	const char *v = memmem(req->p, (size_t)(line_end - req->p), " HTTP/1.1", 9);
	char buf[65536];
	int fd;

	if (!v)
		return -1;
	/* request line as HTTP/1.0; drop Connection headers; keep the rest */
	sbuf_add(&out, req->p, (size_t)(v - req->p));
	sbuf_add(&out, " HTTP/1.0", 9);
	for (const char *p = line_end; p < req->p + head_len - 4;) {
		const char *e = strstr(p + 2, "\r\n");

		if (!e)
			break;
		if (strncasecmp(p + 2, "Connection:", 11))
			sbuf_add(&out, p, (size_t)(e - p));
		p = e;
	}
	sbuf_add(&out, "\r\nConnection: close\r\n\r\n", 23);
	sbuf_add(&out, req->p + head_len, req->len - head_len);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	                write_all(fd, out.p, out.len) < 0)) {
		close(fd);
		fd = -1;
	}
	free(out.p);
	while (fd >= 0) {
		const char *end = resp->p ? strstr(resp->p, "\r\n\r\n") : NULL;
		ssize_t k;

		if (end && !whole) {
			*ret_head = (size_t)(end + 4 - resp->p);
			return fd;
		}
		k = recv(fd, buf, sizeof(buf), 0);
		if (k == 0 && end) {
			*ret_head = (size_t)(end + 4 - resp->p);
			return fd;
		}
		if (k <= 0 || (!end && resp->len > MAX_HEAD) || sbuf_add(resp, buf, (size_t)k) < 0) {
			close(fd);
			fd = -1;
		}
	}
	return -1;
}

/* delay: hold an answer (twice on a new connection), each thread on its own */
static void hold(const struct mode *m, bool *first)
{
	struct timespec t;
	uint64_t ns = (uint64_t)m->delay_ms * (*first ? 2 : 1) * 1000000ULL;

	*first = false;
	if (!ns)
		return;
	clock_gettime(CLOCK_MONOTONIC, &t);
	ns += (uint64_t)t.tv_nsec;
	t.tv_sec += (time_t)(ns / 1000000000ULL);
	t.tv_nsec = (long)(ns % 1000000000ULL);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR)
		;
}

/* Read one request (head and Content-Length body) into req. */
static int read_request(int fd, struct sbuf *req, size_t *ret_head)
{
	char buf[65536];
	char *end;
	size_t want;
	const char *cl;

	req->len = 0;
	if (req->p)
		req->p[0] = 0;
	while (!req->p || !(end = strstr(req->p, "\r\n\r\n"))) {
		ssize_t k = recv(fd, buf, sizeof(buf), 0);

		if (k <= 0 || req->len > MAX_HEAD || sbuf_add(req, buf, (size_t)k) < 0)
			return -1;
	}
	*ret_head = (size_t)(end + 4 - req->p);
	cl = header(req->p, "Content-Length");
	want = *ret_head + (cl ? strtoul(cl, NULL, 10) : 0);
	while (req->len < want) {
		ssize_t k = recv(fd, buf, want - req->len < sizeof(buf) ? want - req->len : sizeof(buf), 0);

		if (k <= 0 || sbuf_add(req, buf, (size_t)k) < 0)
			return -1;
	}
	return 0;
}

static void *client_main(void *arg)
{
	int fd = (int)(intptr_t)arg;
	struct sbuf req = { 0 }, resp = { 0 }, out = { 0 };
	size_t head_len;
	bool first = true;
	int one = 1;

	/* a head and its body go out as separate sends: without this, Nagle holds
	 * the body until the client's delayed ACK (~40 ms on loopback) */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	clients_set(fd, true);
	while (read_request(fd, &req, &head_len) == 0) {
		struct mode m;
		bool is_head = !strncmp(req.p, "HEAD ", 5), hit = false, whole;
		char *path_end = strchr(req.p, ' ') ? strchr(strchr(req.p, ' ') + 1, ' ') : NULL;
		char *body;
		const char *cl;
		size_t rhead, body_len, have;
		int up;

		read_mode(&m);
		if (m.down)
			break;
		if (m.fault != F_NONE && path_end) {
			*path_end = 0;
			if (!m.match[0] || strstr(req.p, m.match))
				hit = atomic_fetch_add(&matched_requests, 1) % m.every == m.every - 1;
			*path_end = ' ';
		}
		if (hit)
			atomic_fetch_add(&faults, 1);
		if (hit && m.fault == F_RESET) {
			clients_set(fd, false);
			reset_close(fd);
			fd = -1;
			break;
		}
		if (hit && (m.fault == F_429 || m.fault == F_500 || m.fault == F_503)) {
			char a[160], after[48] = "";

			if (m.fault == F_429 && m.retry_after >= 0)
				snprintf(after, sizeof(after), "Retry-After: %d\r\n", m.retry_after);
			snprintf(a, sizeof(a), "HTTP/1.1 %s\r\n%sContent-Length: 0\r\n\r\n",
			         m.fault == F_429 ? "429 Too Many Requests" :
			         m.fault == F_500 ? "500 Internal Server Error" : "503 Service Unavailable",
			         after);
			hold(&m, &first);
			if (write_all(fd, a, strlen(a)) < 0)
				break;
			continue;
		}
		if (hit && m.fault == F_STALL) {
			struct pollfd p = { .fd = fd, .events = POLLIN };
			char sink[4096];

			/* until the client hangs up (or a minute) */
			while (poll(&p, 1, 60000) > 0 && recv(fd, sink, sizeof(sink), 0) > 0)
				;
			break;
		}
		resp.len = 0;
		if (resp.p)
			resp.p[0] = 0;
		whole = hit && (m.fault == F_FLIP || m.fault == F_TRUNCATE);
		up = forward(&req, head_len, whole, &resp, &rhead);
		/* no length to pass on: read to the end and count it */
		cl = up >= 0 && !is_head ? header(resp.p, "Content-Length") : NULL;
		if (up >= 0 && !whole && !is_head && !cl) {
			char buf[65536];
			ssize_t k;

			while ((k = recv(up, buf, sizeof(buf), 0)) > 0 &&
			       sbuf_add(&resp, buf, (size_t)k) == 0)
				;
			whole = true;
			cl = NULL;
		}
		if (up < 0) {
			const char *a = "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n";

			hold(&m, &first);
			if (write_all(fd, a, strlen(a)) < 0)
				break;
			continue;
		}
		body = resp.p + rhead;
		have = resp.len - rhead;
		body_len = whole || !cl ? have : strtoull(cl, NULL, 10);
		/* restate the head: keep-alive towards the client, our own length */
		out.len = 0;
		{
			const char *line_end = strstr(resp.p, "\r\n");

			/* the status line as HTTP/1.1 whatever upstream spoke (an
			 * HTTP/1.0 answer would make the client fall back to 1.0) */
			if (!strncmp(resp.p, "HTTP/1.0 ", 9)) {
				sbuf_add(&out, "HTTP/1.1", 8);
				sbuf_add(&out, resp.p + 8, (size_t)(line_end - resp.p - 8));
			} else {
				sbuf_add(&out, resp.p, (size_t)(line_end - resp.p));
			}
			for (const char *p = line_end; p < resp.p + rhead - 4;) {
				const char *e = strstr(p + 2, "\r\n");

				if (strncasecmp(p + 2, "Connection:", 11) &&
				    strncasecmp(p + 2, "Keep-Alive:", 11) &&
				    (is_head || strncasecmp(p + 2, "Content-Length:", 15)))
					sbuf_add(&out, p, (size_t)(e - p));
				p = e;
			}
			if (!is_head) {
				char len[64];

				snprintf(len, sizeof(len), "\r\nContent-Length: %zu", body_len);
				sbuf_add(&out, len, strlen(len));
			}
			sbuf_add(&out, "\r\nConnection: keep-alive\r\n\r\n", 28);
		}
		hold(&m, &first);
		if (hit && m.fault == F_FLIP && body_len)
			body[body_len / 2] ^= 0x10;
		if (hit && m.fault == F_TRUNCATE && !is_head) {
			write_all(fd, out.p, out.len);
			write_all(fd, body, body_len / 2);
			close(up);
			break;
		}
		if (is_head)
			have = 0;
		if (have > body_len)
			have = body_len;
		if (write_all(fd, out.p, out.len) < 0 || write_all(fd, body, have) < 0) {
			close(up);
			break;
		}
		/* stream the rest; an upstream that ends early cuts the client off */
		while (!is_head && have < body_len) {
			char buf[65536];
			size_t want = body_len - have < sizeof(buf) ? body_len - have : sizeof(buf);
			ssize_t k = recv(up, buf, want, 0);

			if (k <= 0 || write_all(fd, buf, (size_t)k) < 0)
				break;
			have += (size_t)k;
		}
		close(up);
		if (have < body_len && !is_head)
			break;
	}
	if (fd >= 0) {
		clients_set(fd, false);
		close(fd);
	}
	free(req.p);
	free(resp.p);
	free(out.p);
	return NULL;
}

static int listen_on(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
	                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 512) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	stop = 1;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a;
	socklen_t alen = sizeof(a);
	int port = 0, lfd;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--upstream"))
			upstream_port = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--control"))
			control = argv[i + 1];
		else if (!strcmp(argv[i], "--port"))
			port = atoi(argv[i + 1]);
	}
	if (!upstream_port || !control) {
		fprintf(stderr, "usage: faultproxy --upstream PORT --control FILE [--port PORT]\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	lfd = listen_on(port);
	if (lfd < 0 || getsockname(lfd, (struct sockaddr *)&a, &alen) < 0) {
		perror("faultproxy: listen");
		return 1;
	}
	port = ntohs(a.sin_port);
	printf("%d\n", port);
	fflush(stdout);
	while (!stop) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		struct mode m;
		pthread_t t;
		int c;

		read_mode(&m);
		if (m.down && lfd >= 0) {
			close(lfd);
			lfd = -1;
			clients_kill();
		} else if (!m.down && lfd < 0) {
			lfd = listen_on(port);
		}
		if (poll(&p, lfd >= 0 ? 1 : 0, 20) <= 0 || lfd < 0)
			continue;
		c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		if (pthread_create(&t, NULL, client_main, (void *)(intptr_t)c) != 0) {
			close(c);
			continue;
		}
		pthread_detach(t);
	}
	fprintf(stderr, "faultproxy: %lu faults in %lu matching requests\n",
	        (unsigned long)faults, (unsigned long)matched_requests);
	return 0;
}
