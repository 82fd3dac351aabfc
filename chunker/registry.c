/*
 * registry.c — source_registry(): an image pulled straight from an OCI
 * registry (the distribution API) into the build, with no copy on disk.
 *
 * Order: GET /v2/ (answering an authentication challenge, if any), then the
 * manifest by tag or digest with an Accept list of the OCI and Docker schema 2
 * index and manifest types; an index is resolved by platform exactly as for an
 * image layout (oci.c does the choosing and the applying: this file is the
 * oci_source that fetches); then the config blob, then each layer blob in
 * order, streamed through the tar reader as it arrives.
 *
 * Trust: every document and blob is checked against its digest — a manifest
 * fetched by digest, every blob and nested manifest as it streams.  A layer's
 * last bytes reach the tar reader only once its size and sha256 are known to
 * match, so a truncated or altered blob fails the build with one message, and
 * since the tag is written last, nothing is published.
 *
 * Authentication: an Authorization header is only ever sent to the registry's
 * own origin (scheme, host and port).  Redirects are followed here, not by
 * libcurl, and a redirect elsewhere (a blob served by a CDN or an object store
 * on another host or port) goes without it.  Basic auth uses the credentials
 * given; Bearer auth fetches a token from the challenge's realm (with the
 * credentials, if any, as Basic auth: the realm is the registry's own choice,
 * as docker and skopeo also assume) for scope repository:NAME:pull, and fetches
 * again once when a later answer asks for another scope.
 *
 * Transfers run one at a time on a libcurl multi handle driven by poll(),
 * connections kept alive between requests.  Requests and answer heads are
 * handled on the calling thread; a layer's body is then driven by a download
 * thread that stays at most REG_STREAM_BUFFER bytes ahead of the tar reader,
 * so that neither the network nor the chunker waits for the other.
 */
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <strings.h>
#include <time.h>

#include "chunker/chunker-internal.h"
#include "chunker/chunker.h"
#include "lib/json.h"
#include "lib/lib.h"
#include "lib/sha256.h"

#define REG_JSON_MAX (8u << 20)      /* largest manifest or config (as for a layout) */
#define REG_ERROR_MAX 4096           /* error bodies kept for messages */
#define REG_TOKEN_MAX (1u << 20)     /* largest token answer */
#define REG_REDIRECTS 8
#define REG_TRIES 3                  /* for a transport failure, a 5xx or a 429 */
/* The longest Retry-After of a 429 waited for: a registry asking for more
 * (a pull quota spent for hours) fails the pull at once, saying so. */
#define REG_RETRY_AFTER_MAX 60
#define REG_SOCKETS 16
#define REG_CONNECT_TIMEOUT 10       /* s */
#define REG_LOW_SPEED_TIME 30        /* s under 1 KiB/s before a transfer fails */
#define REG_RECV_BUFFER (256 * 1024)
#define REG_STREAM_BUFFER (16u << 20) /* a layer's bytes downloaded ahead of its reader */

#define ACCEPT_MANIFESTS                                                                          \
	"Accept: application/vnd.oci.image.index.v1+json, "                                        \
	"application/vnd.oci.image.manifest.v1+json, "                                             \
	"application/vnd.docker.distribution.manifest.list.v2+json, "                              \
	"application/vnd.docker.distribution.manifest.v2+json"

/* The response in progress. */
struct xfer {
	bool started, done;
	CURLcode result;
	long status;
	bool head_done;                 /* the final answer's head is in */
	char ctype[128];
	char digest[80];                /* Docker-Content-Digest */
	char challenge[1024];           /* WWW-Authenticate */
	bool has_length;
	uint64_t length;                /* Content-Length */
	long retry_after;               /* Retry-After in seconds, or -1 */
	bool stream;                    /* a 2xx body goes to data for a reader */
	size_t max;                     /* largest body kept whole */
	bool too_large;
	struct buf data;                /* the body (whole, or what a reader has not taken) */
	size_t pos;                     /* stream: bytes of data already taken */
	/* a streamed body's download thread: data, pos, finished and failed are
	 * protected by reg.lock while it runs */
	bool threaded;
	pthread_t thread;
	atomic_bool abort;              /* the reader is gone: end the transfer */
	bool finished;                  /* the thread is done with the transfer */
	bool failed;                    /* … and logged why (poll failed) */
	struct curl_slist *headers;
	char error[CURL_ERROR_SIZE];
};

struct reg {
	const char *ref;                /* as given, for messages */
	const struct registry_params *p;
	char origin[320];               /* scheme://host[:port] */
	struct registry_ref r;
	char *user, *pass;              /* credentials, or NULL */
	char *authz;                    /* "Authorization: …" for the origin, or NULL */
	bool authz_basic;

	CURLM *multi;
	CURL *easy;
	pthread_mutex_t lock;
	pthread_cond_t cond;            /* data added or taken, transfer finished */
	struct pollfd socks[REG_SOCKETS];
	size_t n_socks;
	bool timer_set;
	uint64_t timer_due;             /* ms, CLOCK_MONOTONIC */
	struct xfer x;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init_once(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static uint64_t now_ms(void)
{
	return now_ns() / 1000000u;
}

/* ---- base64 ------------------------------------------------------------------- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *base64_encode(const char *in, size_t len)
{
	char *out = malloc((len + 2) / 3 * 4 + 1), *o = out;
	size_t i;

	if (!out)
		return NULL;
	for (i = 0; i + 2 < len; i += 3) {
		uint32_t v = (uint32_t)(uint8_t)in[i] << 16 | (uint32_t)(uint8_t)in[i + 1] << 8 |
		             (uint8_t)in[i + 2];

		*o++ = b64[v >> 18];
		*o++ = b64[(v >> 12) & 63];
		*o++ = b64[(v >> 6) & 63];
		*o++ = b64[v & 63];
	}
	if (i < len) {
		uint32_t v = (uint32_t)(uint8_t)in[i] << 16 |
		             (i + 1 < len ? (uint32_t)(uint8_t)in[i + 1] << 8 : 0);

		*o++ = b64[v >> 18];
		*o++ = b64[(v >> 12) & 63];
		*o++ = i + 1 < len ? b64[(v >> 6) & 63] : '=';
		*o++ = '=';
	}
	*o = 0;
	return out;
}

/* Decode standard base64 (padding optional); NULL when it is not base64. */
static char *base64_decode(const char *in, size_t *ret_len)
{
	size_t len = strlen(in), n = 0;
	char *out = malloc(len / 4 * 3 + 4);
	uint32_t v = 0;
	unsigned bits = 0;

	if (!out)
		return NULL;
	for (; *in && *in != '='; in++) {
		const char *c = strchr(b64, *in);

		if (!c) {
			free(out);
			return NULL;
		}
		v = v << 6 | (uint32_t)(c - b64);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[n++] = (char)(v >> bits);
		}
	}
	out[n] = 0;
	*ret_len = n;
	return out;
}

/* ---- the reference ---------------------------------------------------------------- */

bool source_is_registry(const char *source)
{
	return strncmp(source, "docker://", 9) == 0 || strncmp(source, "oci://", 6) == 0;
}

static bool name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
	       c == '-' || c == '/';
}

static bool is_loopback(const char *host)
{
	return strcmp(host, "localhost") == 0 || strncmp(host, "localhost:", 10) == 0 ||
	       strncmp(host, "127.", 4) == 0 || strncmp(host, "[::1]", 5) == 0;
}

int registry_parse_ref(const char *ref, struct registry_ref *g)
{
	const char *s, *slash, *at, *name, *colon;
	size_t hlen, nlen, i;
	bool hub;

	memset(g, 0, sizeof(*g));
	if (!source_is_registry(ref))
		return -EINVAL;
	s = ref + (strncmp(ref, "oci://", 6) == 0 ? 6 : 9);
	slash = strchr(s, '/');
	hub = !slash || (memchr(s, '.', (size_t)(slash - s)) == NULL &&
	                 memchr(s, ':', (size_t)(slash - s)) == NULL &&
	                 strncmp(s, "localhost/", 10) != 0);
	if (hub) {
		snprintf(g->host, sizeof(g->host), "registry-1.docker.io");
		name = s;
	} else {
		hlen = (size_t)(slash - s);
		if (hlen == 0 || hlen >= sizeof(g->host))
			goto bad;
		memcpy(g->host, s, hlen);
		g->host[hlen] = 0;
		for (i = 0; i < hlen; i++)
			if (!((g->host[i] >= 'a' && g->host[i] <= 'z') ||
			      (g->host[i] >= 'A' && g->host[i] <= 'Z') ||
			      (g->host[i] >= '0' && g->host[i] <= '9') || strchr(".-:[]", g->host[i])))
				goto bad;
		name = slash + 1;
	}
	at = strchr(name, '@');
	if (at) {
		nlen = (size_t)(at - name);
		if (strncmp(at + 1, "sha256:", 7) != 0 || strlen(at + 8) != 64)
			goto bad;
		for (i = 0; i < 64; i++)
			if (hex_digit(at[8 + i]) < 0 || (at[8 + i] >= 'A' && at[8 + i] <= 'F'))
				goto bad;
		snprintf(g->reference, sizeof(g->reference), "%s", at + 1);
		g->by_digest = true;
	} else {
		colon = strrchr(name, ':');
		if (colon && strchr(colon, '/'))
			colon = NULL;
		nlen = colon ? (size_t)(colon - name) : strlen(name);
		if (colon) {
			const char *t = colon + 1;

			if (!*t || strlen(t) > 128)
				goto bad;
			for (i = 0; t[i]; i++)
				if (!((t[i] >= 'a' && t[i] <= 'z') || (t[i] >= 'A' && t[i] <= 'Z') ||
				      (t[i] >= '0' && t[i] <= '9') || strchr("._-", t[i])))
					goto bad;
			snprintf(g->reference, sizeof(g->reference), "%s", t);
		} else {
			snprintf(g->reference, sizeof(g->reference), "latest");
		}
	}
	if (nlen == 0 || nlen + 8 >= sizeof(g->repo) || name[0] == '/' || name[nlen - 1] == '/')
		goto bad;
	for (i = 0; i < nlen; i++)
		if (!name_char(name[i]) || (name[i] == '/' && name[i + 1] == '/'))
			goto bad;
	snprintf(g->repo, sizeof(g->repo), "%s%.*s",
	         hub && !memchr(name, '/', nlen) ? "library/" : "", (int)nlen, name);
	return 0;
bad:
	return -EINVAL;
}

/* ---- credentials ------------------------------------------------------------------- */

static int set_creds(struct reg *g, const char *userpass, size_t len, const char *from)
{
	const char *colon = memchr(userpass, ':', len);

	if (!colon || colon == userpass)
		return log_error(-EINVAL, "%s: credentials are not USER:PASS", from);
	g->user = strndup(userpass, (size_t)(colon - userpass));
	g->pass = strndup(colon + 1, len - (size_t)(colon - userpass) - 1);
	if (!g->user || !g->pass)
		return log_errno(-ENOMEM, "%s", g->ref);
	return 0;
}

/* Whether a key of docker's "auths" names our host: "HOST", "https://HOST",
 * "http://HOST/v1/"...; Docker Hub's is "https://index.docker.io/v1/". */
static bool auths_key_matches(const struct reg *g, const char *key)
{
	size_t n;

	if (strncmp(key, "https://", 8) == 0)
		key += 8;
	else if (strncmp(key, "http://", 7) == 0)
		key += 7;
	n = strcspn(key, "/");
	if (strcmp(g->r.host, "registry-1.docker.io") == 0)
		return (n == 15 && strncmp(key, "index.docker.io", n) == 0) ||
		       (n == 9 && strncmp(key, "docker.io", n) == 0) ||
		       (n == 20 && strncmp(key, "registry-1.docker.io", n) == 0);
	return n == strlen(g->r.host) && strncmp(key, g->r.host, n) == 0;
}

/* Credentials for our host from docker's config.json, when it has them. */
static int docker_config_creds(struct reg *g, const char *path)
{
	_cleanup_(buf_freep) struct buf data = BUF_INIT;
	json_t *doc = NULL, *auths, *e;
	const char *key;
	int r;

	r = read_file(path, 4u << 20, &data);
	if (r == -ENOENT || r == -ENOTDIR)
		return 0;
	if (r < 0)
		return log_errno(r, "%s", path);
	r = json_parse_logged(data.data, data.len, path, &doc);
	if (r < 0)
		return r;
	auths = json_object_get(doc, "auths");
	json_object_foreach (auths, key, e) {
		const char *auth = json_get_cstr(e, "auth");
		const char *user = json_get_cstr(e, "username"), *pass = json_get_cstr(e, "password");

		if (!auths_key_matches(g, key))
			continue;
		if (auth && *auth) {
			_cleanup_free_ char *dec = NULL;
			size_t n;

			dec = base64_decode(auth, &n);
			if (!dec) {
				r = log_error(-EINVAL, "%s: auths.\"%s\".auth is not base64", path, key);
				break;
			}
			r = set_creds(g, dec, n, path);
			break;
		}
		if (user && pass) {
			g->user = strdup(user);
			g->pass = strdup(pass);
			if (!g->user || !g->pass)
				r = log_errno(-ENOMEM, "%s", path);
			break;
		}
	}
	json_decref(doc);
	return r;
}

/* ---- driving libcurl ------------------------------------------------------------------ */

static int sock_cb(CURL *e, curl_socket_t s, int what, void *userp, void *socketp)
{
	struct reg *g = userp;
	size_t i;

	(void)e;
	(void)socketp;
	for (i = 0; i < g->n_socks; i++)
		if (g->socks[i].fd == s)
			break;
	if (what == CURL_POLL_REMOVE) {
		if (i < g->n_socks)
			g->socks[i] = g->socks[--g->n_socks];
		return 0;
	}
	if (i == g->n_socks) {
		if (g->n_socks == REG_SOCKETS)
			return -1;
		g->n_socks++;
	}
	g->socks[i].fd = s;
	g->socks[i].events = (short)((what & CURL_POLL_IN ? POLLIN : 0) |
	                             (what & CURL_POLL_OUT ? POLLOUT : 0));
	return 0;
}

static int timer_cb(CURLM *m, long ms, void *userp)
{
	struct reg *g = userp;

	(void)m;
	g->timer_set = ms >= 0;
	g->timer_due = now_ms() + (uint64_t)(ms > 0 ? ms : 0);
	return 0;
}

/* One round: wait for a socket or the timer, let curl act, note completion. */
static int drive(struct reg *g)
{
	struct pollfd fds[REG_SOCKETS];
	size_t n = g->n_socks, i;
	int timeout = 1000, k, running;
	CURLMsg *msg;
	int left;

	if (g->timer_set) {
		uint64_t now = now_ms();

		timeout = g->timer_due > now ? (int)MIN(g->timer_due - now, 1000) : 0;
	}
	memcpy(fds, g->socks, n * sizeof(fds[0]));
	k = poll(fds, n, timeout);
	if (k < 0 && errno != EINTR)
		return log_errno(-errno, "%s: poll", g->ref);
	for (i = 0; k > 0 && i < n; i++) {
		int ev = 0;

		if (!fds[i].revents)
			continue;
		if (fds[i].revents & (POLLIN | POLLHUP))
			ev |= CURL_CSELECT_IN;
		if (fds[i].revents & POLLOUT)
			ev |= CURL_CSELECT_OUT;
		if (fds[i].revents & (POLLERR | POLLNVAL))
			ev |= CURL_CSELECT_ERR;
		curl_multi_socket_action(g->multi, fds[i].fd, ev, &running);
	}
	if (k == 0 || (g->timer_set && now_ms() >= g->timer_due)) {
		g->timer_set = false;
		curl_multi_socket_action(g->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	}
	while ((msg = curl_multi_info_read(g->multi, &left)))
		if (msg->msg == CURLMSG_DONE && msg->easy_handle == g->easy) {
			g->x.done = true;
			g->x.result = msg->data.result;
		}
	return 0;
}

static size_t header_cb(char *p, size_t size, size_t n, void *userp)
{
	struct reg *g = userp;
	struct xfer *x = &g->x;
	size_t len = size * n, k;
	const char *v;

	if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) {
		/* a new answer (after a 100 Continue, or the first) */
		const char *sp = memchr(p, ' ', len);

		x->status = sp ? strtol(sp + 1, NULL, 10) : 0;
		x->head_done = false;
		x->ctype[0] = x->digest[0] = x->challenge[0] = 0;
		x->has_length = false;
		x->retry_after = -1;
		return len;
	}
	if (len <= 2 && (p[0] == '\r' || p[0] == '\n')) {
		x->head_done = x->status >= 200;
		return len;
	}
	v = memchr(p, ':', len);
	if (!v)
		return len;
	k = (size_t)(v - p);
	v++;
	while (v < p + len && (*v == ' ' || *v == '\t'))
		v++;
	{
		size_t vlen = (size_t)(p + len - v);

		while (vlen && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n' || v[vlen - 1] == ' '))
			vlen--;
		if (k == 12 && strncasecmp(p, "Content-Type", k) == 0)
			snprintf(x->ctype, sizeof(x->ctype), "%.*s", (int)vlen, v);
		else if (k == 21 && strncasecmp(p, "Docker-Content-Digest", k) == 0)
			snprintf(x->digest, sizeof(x->digest), "%.*s", (int)vlen, v);
		else if (k == 16 && strncasecmp(p, "WWW-Authenticate", k) == 0 && !x->challenge[0])
			snprintf(x->challenge, sizeof(x->challenge), "%.*s", (int)vlen, v);
		else if (k == 14 && strncasecmp(p, "Content-Length", k) == 0) {
			char num[24];

			snprintf(num, sizeof(num), "%.*s", (int)MIN(vlen, 23), v);
			x->has_length = parse_uint(num, UINT64_MAX, &x->length) == 0;
		} else if (k == 11 && strncasecmp(p, "Retry-After", k) == 0) {
			char val[64];

			snprintf(val, sizeof(val), "%.*s", (int)MIN(vlen, 63), v);
			x->retry_after = registry_retry_after(val, time(NULL));
		}
	}
	return len;
}

static size_t write_cb(char *p, size_t size, size_t n, void *userp)
{
	struct reg *g = userp;
	struct xfer *x = &g->x;
	size_t len = size * n;
	bool ok = x->status >= 200 && x->status < 300;

	if (ok && x->stream && x->threaded) {
		int r;

		pthread_mutex_lock(&g->lock);
		while (!x->abort && x->data.len - x->pos >= REG_STREAM_BUFFER)
			pthread_cond_wait(&g->cond, &g->lock);
		if (x->abort) {
			pthread_mutex_unlock(&g->lock);
			return 0;
		}
		if (x->pos == x->data.len) {
			x->pos = x->data.len = 0;
		} else if (x->pos > x->data.len / 2) {
			memmove(x->data.data, x->data.data + x->pos, x->data.len - x->pos);
			x->data.len -= x->pos;
			x->pos = 0;
		}
		r = buf_append(&x->data, p, len);
		pthread_cond_signal(&g->cond);
		pthread_mutex_unlock(&g->lock);
		return r < 0 ? 0 : len;
	}
	if (ok && x->stream) {
		if (x->pos == x->data.len)
			x->pos = x->data.len = 0;
	} else {
		size_t max = ok ? x->max : REG_ERROR_MAX;

		if (x->data.len + len > max) {
			if (ok) {
				x->too_large = true;
				return 0;  /* ends the transfer */
			}
			len = max - x->data.len;
		}
	}
	if (len && buf_append(&g->x.data, p, len) < 0)
		return 0;
	return size * n;
}

static void xfer_end(struct reg *g)
{
	struct xfer *x = &g->x;

	if (x->threaded) {
		pthread_mutex_lock(&g->lock);
		x->abort = true;
		pthread_cond_broadcast(&g->cond);
		pthread_mutex_unlock(&g->lock);
		pthread_join(x->thread, NULL);
	}
	if (x->started)
		curl_multi_remove_handle(g->multi, g->easy);
	curl_slist_free_all(x->headers);
	buf_free(&x->data);
	memset(x, 0, sizeof(*x));
}

/* Start a GET of url; authz: an Authorization header line or NULL. */
static int xfer_start(struct reg *g, const char *url, const char *accept, const char *authz,
                      bool stream, size_t max)
{
	struct xfer *x = &g->x;
	const char *lines[] = { accept, authz };
	CURL *e = g->easy;

	xfer_end(g);
	x->stream = stream;
	x->max = max;
	for (size_t i = 0; i < ARRAY_SIZE(lines); i++) {
		struct curl_slist *l;

		if (!lines[i])
			continue;
		l = curl_slist_append(x->headers, lines[i]);
		if (!l)
			return log_errno(-ENOMEM, "%s", g->ref);
		x->headers = l;
	}
	curl_easy_reset(e);
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, g);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, g);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->error);
	curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, (long)REG_CONNECT_TIMEOUT);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1024L);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (long)REG_LOW_SPEED_TIME);
	curl_easy_setopt(e, CURLOPT_BUFFERSIZE, (long)REG_RECV_BUFFER);
	curl_easy_setopt(e, CURLOPT_USERAGENT, "lazyroot");
	if (g->p->ca_file)
		curl_easy_setopt(e, CURLOPT_CAINFO, g->p->ca_file);
	if (curl_multi_add_handle(g->multi, e) != CURLM_OK)
		return log_error(-EIO, "%s: libcurl refused a transfer", g->ref);
	x->started = true;
	return 0;
}

/* Drive until the answer's head is in (or the transfer ended without one). */
static int xfer_wait_head(struct reg *g)
{
	while (!g->x.head_done && !g->x.done) {
		int r = drive(g);

		if (r < 0)
			return r;
	}
	return 0;
}

static int xfer_wait_done(struct reg *g)
{
	while (!g->x.done) {
		int r = drive(g);

		if (r < 0)
			return r;
	}
	return 0;
}

/* ---- requests ------------------------------------------------------------------------- */

/* Whether url lies on the registry's origin (where credentials may go). */
static bool same_origin(const struct reg *g, const char *url)
{
	size_t n = strlen(g->origin);

	return strncmp(url, g->origin, n) == 0 && (url[n] == '/' || url[n] == 0);
}

/* The registry's error answer in words: "CODE: message" of its first error. */
static void error_text(struct reg *g, char *out, size_t len)
{
	json_t *doc = NULL;
	const json_t *e;

	out[0] = 0;
	if (!g->x.data.len || json_parse(g->x.data.data, g->x.data.len, &doc, NULL) < 0)
		return;
	e = json_array_get(json_object_get(doc, "errors"), 0);
	if (json_get_cstr(e, "code"))
		snprintf(out, len, " (%.60s: %.160s)", json_get_cstr(e, "code"),
		         json_get_cstr(e, "message") ? json_get_cstr(e, "message") : "");
	json_decref(doc);
}

static int fail_transport(struct reg *g, const char *what, const char *url)
{
	const char *why = g->x.error[0] ? g->x.error : curl_easy_strerror(g->x.result);

	/* a query string may be a signature (a presigned object store URL) */
	return log_error(g->x.result == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -EIO,
	                 "%s: %s: GET %.*s: %s%s", g->ref, what, (int)strcspn(url, "?"), url,
	                 g->x.result == CURLE_PARTIAL_FILE ? "truncated: " : "", why);
}

static int fail_status(struct reg *g, const char *what, const char *url)
{
	char detail[256];
	long st = g->x.status;
	int err = st == 401 || st == 403 ? -EACCES : st == 404 ? -ENOENT : -EIO;

	error_text(g, detail, sizeof(detail));
	if (st == 429 && g->x.retry_after > REG_RETRY_AFTER_MAX)
		return log_error(-EAGAIN, "%s: %s: the registry limits requests (429) and asks to "
		                 "wait %ld s%s; pull again later", g->ref, what, g->x.retry_after,
		                 detail);
	if (st == 429)
		return log_error(-EAGAIN, "%s: %s: the registry limits requests (429), %d tries%s",
		                 g->ref, what, REG_TRIES, detail);
	if (st == 401)
		return log_error(err, "%s: %s: registry refused access (401)%s%s", g->ref, what, detail,
		                 g->user ? "" : "; no credentials given (--creds or docker login)");
	return log_error(err, "%s: %s: GET %.*s answered %ld%s", g->ref, what,
	                 (int)strcspn(url, "?"), url, st, detail);
}

static int authenticate(struct reg *g, const char *challenge, const char *what);

/* Whether to try a request again: a transport failure, a server error or a
 * 429 (too many requests), before any byte of the body went to a reader.
 * The pause is what a 429's Retry-After asks for (up to REG_RETRY_AFTER_MAX,
 * beyond which there is no retry; such a wait is said on stderr), else
 * 0.25 s, then 1 s, each stretched by up to a quarter at random, so that
 * nodes refused together do not come back together. */
static bool retry(struct reg *g, unsigned *tries, const char *what)
{
	long st = g->x.status;
	uint64_t ns;
	struct timespec t;

	if (g->x.head_done && st != 429 && st != 500 && st != 502 && st != 503 && st != 504 &&
	    !(st >= 200 && st < 300))
		return false;
	if (g->x.head_done && st == 429 && g->x.retry_after > REG_RETRY_AFTER_MAX)
		return false;
	if (++*tries >= REG_TRIES)
		return false;
	if (g->x.head_done && st == 429 && g->x.retry_after >= 0) {
		ns = (uint64_t)g->x.retry_after * 1000000000ULL;
		/* a wait of up to a minute is long enough to look like a hang */
		if (g->x.retry_after > 0)
			log_msg(LOG_WARN, "%s: %s: the registry limits requests (429); waiting "
			        "%ld s as it asks", g->ref, what, g->x.retry_after);
	} else {
		ns = *tries == 1 ? 250000000ULL : 1000000000ULL;
		ns += ns / 4 * (random_u32() % 1001) / 1000;
	}
	t.tv_sec = (time_t)(ns / 1000000000ULL);
	t.tv_nsec = (long)(ns % 1000000000ULL);
	while (nanosleep(&t, &t) < 0 && errno == EINTR)
		;
	return true;
}

/*
 * GET path on the registry, following redirects (without credentials to
 * another origin), answering one authentication challenge, and trying again
 * (from path, not from a redirect's target, which may have expired) after a
 * transport failure or a 5xx answer.  On success a 2xx answer's head is in:
 * its body is whole in g->x.data unless stream is set, in which case the
 * reader takes it from there.
 */
static int reg_get(struct reg *g, const char *path, const char *accept, const char *what,
                   bool stream, size_t max)
{
	_cleanup_free_ char *url = NULL;
	unsigned redirects = 0, auths = 0, tries = 0;
	int r;

	for (;;) {
		bool mine;
		long st;

		if (!url && asprintf(&url, "%s%s", g->origin, path) < 0) {
			url = NULL;
			return log_errno(-ENOMEM, "%s", g->ref);
		}
		mine = same_origin(g, url);

		r = xfer_start(g, url, accept, mine ? g->authz : NULL, stream, max);
		if (r < 0)
			return r;
		r = xfer_wait_head(g);
		if (r < 0)
			return r;
		if (!g->x.head_done) {
			if (retry(g, &tries, what)) {
				free(TAKE_PTR(url));
				continue;
			}
			return fail_transport(g, what, url);
		}
		st = g->x.status;
		if (st >= 200 && st < 300) {
			if (stream)
				return 0;
			r = xfer_wait_done(g);
			if (r < 0)
				return r;
			if (g->x.too_large)
				return log_error(-EFBIG, "%s: %s: larger than %zu bytes", g->ref, what,
				                 max);
			if (g->x.result != CURLE_OK) {
				if (retry(g, &tries, what)) {
					free(TAKE_PTR(url));
					continue;
				}
				return fail_transport(g, what, url);
			}
			return 0;
		}
		r = xfer_wait_done(g);  /* a small error or redirect body */
		if (r < 0)
			return r;
		if (st == 301 || st == 302 || st == 303 || st == 307 || st == 308) {
			char *loc = NULL;

			curl_easy_getinfo(g->easy, CURLINFO_REDIRECT_URL, &loc);
			if (!loc || !*loc)
				return log_error(-EBADMSG, "%s: %s: redirect (%ld) without a location",
				                 g->ref, what, st);
			if (++redirects > REG_REDIRECTS)
				return log_error(-ELOOP, "%s: %s: more than %d redirects", g->ref, what,
				                 REG_REDIRECTS);
			if (strncmp(loc, "http://", 7) != 0 && strncmp(loc, "https://", 8) != 0)
				return log_error(-EBADMSG, "%s: %s: redirect to '%.200s'", g->ref, what,
				                 loc);
			free(url);
			url = strdup(loc);
			if (!url)
				return log_errno(-ENOMEM, "%s", g->ref);
			continue;
		}
		if (st == 401 && mine && g->x.challenge[0] && auths++ == 0) {
			char challenge[sizeof(g->x.challenge)];

			memcpy(challenge, g->x.challenge, sizeof(challenge));
			r = authenticate(g, challenge, what);
			if (r < 0)
				return r;
			free(TAKE_PTR(url));
			continue;
		}
		if (retry(g, &tries, what)) {
			free(TAKE_PTR(url));
			continue;
		}
		return fail_status(g, what, url);
	}
}

long registry_retry_after(const char *value, time_t now)
{
	static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
	const char *comma = strchr(value, ',');
	char mon[4];
	struct tm tm = { 0 };
	uint64_t n;
	const char *m;
	time_t t;
	int used = 0;

	if (parse_uint(value, LONG_MAX, &n) == 0)
		return (long)n;
	/* an HTTP-date as servers send it (RFC 9110's IMF-fixdate):
	 * "Sun, 06 Nov 1994 08:49:37 GMT" */
	if (!comma || sscanf(comma + 1, " %2d %3s %4d %2d:%2d:%2d GMT%n", &tm.tm_mday, mon,
	                     &tm.tm_year, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &used) != 6 ||
	    comma[1 + used] || strlen(mon) != 3 || !(m = strstr(months, mon)) ||
	    (m - months) % 3)
		return -1;
	tm.tm_mon = (int)(m - months) / 3;
	tm.tm_year -= 1900;
	t = timegm(&tm);
	if (t == (time_t)-1)
		return -1;
	return t > now ? (long)(t - now) : 0;
}

/* ---- authentication -------------------------------------------------------------------- */

/* The value of parameter key in a challenge's list (key="value", …), into
 * out; false when absent. */
bool registry_challenge_param(const char *s, const char *key, char *out, size_t len)
{
	size_t klen = strlen(key);

	while (*s) {
		const char *start;
		size_t n = 0;

		while (*s == ' ' || *s == ',')
			s++;
		start = s;
		while (*s && *s != '=' && *s != ',')
			s++;
		if (*s != '=')
			continue;
		{
			bool match = (size_t)(s - start) == klen && strncasecmp(start, key, klen) == 0;

			s++;
			if (*s == '"') {
				s++;
				while (*s && *s != '"') {
					if (*s == '\\' && s[1])
						s++;
					if (match && n + 1 < len)
						out[n++] = *s;
					s++;
				}
				if (*s == '"')
					s++;
			} else {
				while (*s && *s != ',') {
					if (match && n + 1 < len)
						out[n++] = *s;
					s++;
				}
			}
			if (match) {
				out[n] = 0;
				return true;
			}
		}
	}
	return false;
}

static int set_authz(struct reg *g, const char *scheme, const char *value, bool basic)
{
	free(g->authz);
	g->authz = NULL;
	if (asprintf(&g->authz, "Authorization: %s %s", scheme, value) < 0) {
		g->authz = NULL;
		return log_errno(-ENOMEM, "%s", g->ref);
	}
	g->authz_basic = basic;
	return 0;
}

static char *basic_value(const struct reg *g)
{
	_cleanup_free_ char *up = NULL;

	if (asprintf(&up, "%s:%s", g->user, g->pass) < 0)
		return NULL;
	return base64_encode(up, strlen(up));
}

/* Fetch a Bearer token from the challenge's realm. */
static int bearer(struct reg *g, const char *challenge, const char *what)
{
	char realm[512], service[256] = "", scope[512], enc_service[768], enc_scope[1536];
	_cleanup_free_ char *url = NULL, *basic = NULL, *authz = NULL;
	json_t *doc = NULL;
	const char *tok;
	int r;

	if (!registry_challenge_param(challenge, "realm", realm, sizeof(realm)) || !realm[0])
		return log_error(-EBADMSG, "%s: %s: Bearer challenge without a realm", g->ref, what);
	if (strncmp(realm, "http://", 7) != 0 && strncmp(realm, "https://", 8) != 0)
		return log_error(-EBADMSG, "%s: %s: token realm '%.200s' is not an http(s) URL",
		                 g->ref, what, realm);
	registry_challenge_param(challenge, "service", service, sizeof(service));
	if (!registry_challenge_param(challenge, "scope", scope, sizeof(scope)))
		snprintf(scope, sizeof(scope), "repository:%s:pull", g->r.repo);
	if (url_encode(service, "-_.~", enc_service, sizeof(enc_service)) < 0 ||
	    url_encode(scope, "-_.~", enc_scope, sizeof(enc_scope)) < 0)
		return log_error(-ENAMETOOLONG, "%s: %s: challenge too long", g->ref, what);
	if (asprintf(&url, "%s%cservice=%s&scope=%s", realm, strchr(realm, '?') ? '&' : '?',
	             enc_service, enc_scope) < 0)
		return log_errno(-ENOMEM, "%s", g->ref);
	if (g->user) {
		basic = basic_value(g);
		if (!basic || asprintf(&authz, "Authorization: Basic %s", basic) < 0)
			return log_errno(-ENOMEM, "%s", g->ref);
	}
	r = xfer_start(g, url, "Accept: application/json", authz, false, REG_TOKEN_MAX);
	if (r >= 0)
		r = xfer_wait_done(g);
	if (r < 0)
		return r;
	if (g->x.too_large)
		return log_error(-EFBIG, "%s: token from %s: answer too large", g->ref, realm);
	if (!g->x.head_done || g->x.result != CURLE_OK)
		return fail_transport(g, "token", url);
	if (g->x.status == 401 || g->x.status == 403)
		return log_error(-EACCES, "%s: token server %s refused %s (%ld)", g->ref, realm,
		                 g->user ? "the credentials" : "anonymous access", g->x.status);
	if (g->x.status != 200)
		return log_error(-EIO, "%s: token server %s answered %ld", g->ref, realm,
		                 g->x.status);
	if (json_parse(g->x.data.data, g->x.data.len, &doc, NULL) < 0)
		return log_error(-EBADMSG, "%s: token server %s: answer is not JSON", g->ref, realm);
	tok = json_get_cstr(doc, "token");
	if (!tok || !*tok)
		tok = json_get_cstr(doc, "access_token");
	if (!tok || !*tok || strpbrk(tok, "\r\n"))
		r = log_error(-EBADMSG, "%s: token server %s: answer without a token", g->ref, realm);
	else
		r = set_authz(g, "Bearer", tok, false);
	json_decref(doc);
	return r;
}

static int authenticate(struct reg *g, const char *challenge, const char *what)
{
	if (strncasecmp(challenge, "Bearer ", 7) == 0)
		return bearer(g, challenge + 7, what);
	if (strncasecmp(challenge, "Basic", 5) == 0 && (!challenge[5] || challenge[5] == ' ')) {
		_cleanup_free_ char *v = NULL;

		if (!g->user)
			return log_error(-EACCES, "%s: %s: registry asks for credentials (401); "
			                 "give --creds USER:PASS or log in with docker", g->ref, what);
		if (g->authz && g->authz_basic)
			return log_error(-EACCES, "%s: %s: registry refused the credentials for '%s' (401)",
			                 g->ref, what, g->user);
		v = basic_value(g);
		if (!v)
			return log_errno(-ENOMEM, "%s", g->ref);
		return set_authz(g, "Basic", v, true);
	}
	return log_error(-EPROTONOSUPPORT, "%s: %s: unsupported authentication '%.60s'", g->ref,
	                 what, challenge);
}

/* ---- documents and blobs ------------------------------------------------------------ */

static int check_sha256(struct reg *g, const char *what, const char *hex, struct sha256 *h)
{
	uint8_t d[SHA256_SIZE];
	char got[SHA256_HEX_SIZE];

	if (sha256_final(h, d) < 0)
		return log_error(-EIO, "%s: %s sha256:%s: libcrypto failed to hash it", g->ref, what,
		                 hex);
	hex_encode(d, sizeof(d), got);
	if (strcmp(got, hex) != 0)
		return log_error(-EBADMSG, "%s: %s sha256:%s: digest mismatch (content is sha256:%s)",
		                 g->ref, what, hex, got);
	return 0;
}

static int reg_read_doc(void *ctx, bool manifest, const char *hex, uint64_t size,
                        const char *what, struct buf *raw)
{
	struct reg *g = ctx;
	char path[600];
	_cleanup_sha256_ struct sha256 h = SHA256_INIT;
	int r;

	snprintf(path, sizeof(path), "/v2/%s/%s/sha256:%s", g->r.repo,
	         manifest ? "manifests" : "blobs", hex);
	r = reg_get(g, path, manifest ? ACCEPT_MANIFESTS : NULL, what, false, (size_t)size);
	if (r < 0)
		return r;
	if (g->x.data.len != size)
		return log_error(-EBADMSG, "%s: %s sha256:%s: %zu bytes, the descriptor says %llu",
		                 g->ref, what, hex, g->x.data.len, (unsigned long long)size);
	(void)sha256_init(&h);   /* a failure is check_sha256's */
	sha256_update(&h, g->x.data.data, g->x.data.len);
	r = check_sha256(g, what, hex, &h);
	if (r < 0)
		return r;
	buf_free(raw);
	*raw = g->x.data;
	g->x.data = (struct buf)BUF_INIT;
	r = buf_reserve(raw, 1);  /* parse_doc reads a NUL past the end */
	if (r < 0)
		return log_errno(r, "%s", g->ref);
	raw->data[raw->len] = 0;
	return 0;
}

/* A layer blob as the tar reader pulls it. */
struct blob_stream {
	struct reg *g;
	const char *hex, *what;
	uint64_t size, got;             /* bytes handed to the reader */
	struct sha256 h;
	bool verified;                  /* the whole blob is in and matches */
};

static void blob_stream_destroy(struct blob_stream *s)
{
	sha256_destroy(&s->h);
}

/*
 * tar_read_fn over the blob in flight, which the download thread fills.  The
 * bytes that complete the blob are handed out only once the transfer has
 * ended and the whole blob's size and digest match: the tar reader never sees
 * the end of a blob that is wrong, so a bad blob fails with this one message,
 * not with a tar error.
 */
static ssize_t blob_read(void *ctx, void *buf, size_t len)
{
	struct blob_stream *s = ctx;
	struct reg *g = s->g;
	struct xfer *x = &g->x;
	ssize_t ret;
	int r;

	pthread_mutex_lock(&g->lock);
	for (;;) {
		size_t avail = x->data.len - x->pos, n;

		if (s->got + avail > s->size) {
			ret = log_error(-EBADMSG, "%s: %s sha256:%s: more than the %llu bytes its "
			                "descriptor says", g->ref, s->what, s->hex,
			                (unsigned long long)s->size);
			break;
		}
		if (avail && (s->verified || s->got + avail < s->size)) {
			n = MIN(len, avail);
			memcpy(buf, x->data.data + x->pos, n);
			x->pos += n;
			pthread_cond_signal(&g->cond);
			pthread_mutex_unlock(&g->lock);
			if (!s->verified)
				sha256_update(&s->h, buf, n);
			s->got += n;
			return (ssize_t)n;
		}
		if (s->verified) {
			ret = 0;
			break;
		}
		if (!x->finished) {
			pthread_cond_wait(&g->cond, &g->lock);
			continue;
		}
		/* the thread is done: nothing changes the buffer any more */
		if (x->failed) {
			ret = -EIO;
			break;
		}
		if (x->result != CURLE_OK) {
			ret = log_error(-EIO, "%s: %s sha256:%s: truncated after %llu of %llu bytes: %s",
			                g->ref, s->what, s->hex, (unsigned long long)(s->got + avail),
			                (unsigned long long)s->size,
			                x->error[0] ? x->error : curl_easy_strerror(x->result));
			break;
		}
		if (s->got + avail != s->size) {
			ret = log_error(-EBADMSG, "%s: %s sha256:%s: truncated: %llu of %llu bytes",
			                g->ref, s->what, s->hex, (unsigned long long)(s->got + avail),
			                (unsigned long long)s->size);
			break;
		}
		sha256_update(&s->h, x->data.data + x->pos, avail);
		r = check_sha256(g, s->what, s->hex, &s->h);
		if (r < 0) {
			ret = r;
			break;
		}
		s->verified = true;
	}
	pthread_mutex_unlock(&g->lock);
	return ret;
}

/* The download thread: drives the transfer to its end, the reader's pace
 * set by write_cb waiting while REG_STREAM_BUFFER bytes are unread.  So the
 * network never waits on the chunker, nor the chunker on a producer that is
 * slow to be scheduled, up to that bound. */
static void *download_main(void *arg)
{
	struct reg *g = arg;
	int r = 0;

	while (!g->x.done && !g->x.abort && r >= 0)
		r = drive(g);
	pthread_mutex_lock(&g->lock);
	g->x.finished = true;
	g->x.failed = r < 0 || (!g->x.done && g->x.abort);
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
	return NULL;
}

static int reg_apply_layer(void *ctx, struct build *b, const char *hex, uint64_t size,
                           const char *what)
{
	struct reg *g = ctx;
	_cleanup_(blob_stream_destroy) struct blob_stream s = { .g = g, .hex = hex, .what = what,
	                                                        .size = size, .h = SHA256_INIT };
	struct tar_reader *rd = NULL;
	char path[600], name[PATH_MAX];
	uint64_t raw = 0;
	int r;

	snprintf(path, sizeof(path), "/v2/%s/blobs/sha256:%s", g->r.repo, hex);
	snprintf(name, sizeof(name), "%s: %s sha256:%.12s", g->ref, what, hex);
	(void)sha256_init(&s.h);
	r = reg_get(g, path, NULL, what, true, 0);
	if (r < 0)
		return r;
	if (g->x.has_length && g->x.length != size)
		return log_error(-EBADMSG, "%s: %s sha256:%s: %s: the registry sends %llu bytes, "
		                 "the descriptor says %llu", g->ref, what, hex,
		                 g->x.length < size ? "truncated" : "too long",
		                 (unsigned long long)g->x.length, (unsigned long long)size);
	g->x.threaded = true;
	r = pthread_create(&g->x.thread, NULL, download_main, g);
	if (r != 0) {
		g->x.threaded = false;
		return log_errno(-r, "%s: %s: a download thread", g->ref, what);
	}
	r = tar_reader_new_fn(blob_read, &s, name, &rd);
	if (r < 0) {
		xfer_end(g);
		return r;
	}
	r = tar_apply(b, rd, name, true);
	if (r >= 0)
		r = tar_reader_finish(rd, &raw);  /* reads to the end: size and digest checked */
	tar_reader_free(rd);
	xfer_end(g);
	return r;
}

/* The manifest the reference names, checked against its digest when known. */
static int fetch_top(struct reg *g, struct buf *ret, char *mt, size_t mtlen)
{
	char path[600], *semi;
	const char *want = NULL;
	uint8_t d[SHA256_SIZE];
	char got[SHA256_HEX_SIZE];
	int r;

	snprintf(path, sizeof(path), "/v2/%s/manifests/%s", g->r.repo, g->r.reference);
	r = reg_get(g, path, ACCEPT_MANIFESTS, "manifest", false, REG_JSON_MAX);
	if (r < 0)
		return r;
	if (sha256(g->x.data.data, g->x.data.len, d) < 0)
		return log_error(-ENOMEM, "%s: manifest: libcrypto failed to hash it", g->ref);
	hex_encode(d, sizeof(d), got);
	if (g->r.by_digest)
		want = g->r.reference;
	else if (strncmp(g->x.digest, "sha256:", 7) == 0)
		want = g->x.digest;
	if (want && strcmp(want + 7, got) != 0)
		return log_error(-EBADMSG, "%s: manifest %s: digest mismatch (content is sha256:%s)",
		                 g->ref, want, got);
	snprintf(mt, mtlen, "%s", g->x.ctype);
	semi = strchr(mt, ';');
	if (semi)
		*semi = 0;
	while (*mt && mt[strlen(mt) - 1] == ' ')
		mt[strlen(mt) - 1] = 0;
	*ret = g->x.data;
	g->x.data = (struct buf)BUF_INIT;
	r = buf_reserve(ret, 1);
	if (r < 0)
		return log_errno(r, "%s", g->ref);
	ret->data[ret->len] = 0;
	return 0;
}

int source_registry(struct build *b, const char *ref, const struct registry_params *p)
{
	struct reg g = { .ref = ref, .p = p, .lock = PTHREAD_MUTEX_INITIALIZER,
	                 .cond = PTHREAD_COND_INITIALIZER };
	struct buf top = BUF_INIT;
	char mt[128];
	const struct oci_source src = {
		.name = ref,
		.read_doc = reg_read_doc,
		.apply_layer = reg_apply_layer,
		.ctx = &g,
	};
	int r;

	r = registry_parse_ref(ref, &g.r);
	if (r < 0)
		return log_error(r, "%s: not an image reference "
		                 "(docker://HOST[:PORT]/NAME[:TAG|@sha256:DIGEST])", ref);
	snprintf(g.origin, sizeof(g.origin), "%s://%s",
	         p->plain_http || is_loopback(g.r.host) ? "http" : "https", g.r.host);
	if (p->creds)
		r = set_creds(&g, p->creds, strlen(p->creds), "--creds");
	else if (p->docker_config)
		r = docker_config_creds(&g, p->docker_config);
	if (r < 0)
		goto out;
	pthread_once(&curl_once, curl_init_once);
	if (curl_init_rc != CURLE_OK) {
		r = log_error(-EIO, "%s: libcurl does not initialise", ref);
		goto out;
	}
	g.multi = curl_multi_init();
	g.easy = curl_easy_init();
	if (!g.multi || !g.easy) {
		r = log_errno(-ENOMEM, "%s", ref);
		goto out;
	}
	curl_multi_setopt(g.multi, CURLMOPT_SOCKETFUNCTION, sock_cb);
	curl_multi_setopt(g.multi, CURLMOPT_SOCKETDATA, &g);
	curl_multi_setopt(g.multi, CURLMOPT_TIMERFUNCTION, timer_cb);
	curl_multi_setopt(g.multi, CURLMOPT_TIMERDATA, &g);

	/* The API check; its challenge, if any, tells how to authenticate. */
	r = reg_get(&g, "/v2/", NULL, "/v2/", false, REG_ERROR_MAX);
	if (r < 0)
		goto out;
	r = fetch_top(&g, &top, mt, sizeof(mt));
	if (r < 0)
		goto out;
	/* A generic type says nothing: the document's own mediaType decides. */
	r = oci_apply_doc(b, &src, p->platform,
	                  !mt[0] || strcmp(mt, "application/json") == 0 ||
	                  strcmp(mt, "text/plain") == 0 ? NULL : mt, &top);
out:
	xfer_end(&g);
	if (g.easy)
		curl_easy_cleanup(g.easy);
	if (g.multi)
		curl_multi_cleanup(g.multi);
	buf_free(&top);
	free(g.user);
	if (g.pass)
		explicit_bzero(g.pass, strlen(g.pass));
	free(g.pass);
	free(g.authz);
	return r;
}
