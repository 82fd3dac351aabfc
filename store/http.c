/*
 * http.c — the http:// and https:// store: libcurl's multi interface, driven
 * either by the io_uring loop (store_set_loop) or, without one, by
 * store_run_once() itself.  The layout, status mapping, retries and tuning are
 * documented in store.h.
 *
 * Driving curl: CURLMOPT_SOCKETFUNCTION registers curl's sockets in an epoll
 * set of our own, and the loop polls that one descriptor (one cancellable
 * poll, armed while transfers run).  Polling each socket on the ring instead
 * would pin every socket curl closes until its poll fired (the ring holds the
 * file), and a stale completion could land on a reused descriptor number; the
 * epoll set forgets a socket when curl closes it.  Without a loop,
 * store_run_once() waits in epoll_wait() on the same set, so both modes share
 * every line that talks to curl.  One timer (a loop timer, or the epoll_wait
 * timeout) covers both curl's timeout and the earliest retry.
 *
 * Transfers: at most `max` are in curl at once; more wait in a FIFO queue.
 * Connections are reused by the multi handle (HTTP/1.1 keep-alive).  A
 * transfer that ends in a transient failure leaves curl, waits its backoff on
 * the retry list (sorted by due time), and goes back in; its callback runs
 * once, with the result of its last attempt.
 *
 * Callbacks that loop tokens carry (struct tick, struct watch) are separate
 * small objects: a cancelled or outdated one only frees itself, so the store
 * can be freed while its last poll or timer is still on the ring.
 *
 * This file is the transfer engine and the store's life (open, run, free);
 * http-verbs.c holds the operations (GET, HEAD, PUT, DELETE, WebDAV MOVE, the
 * S3 copy) and http-list.c the listings (nginx autoindex JSON, S3
 * ListObjectsV2); http-internal.h is what the three share.
 *
 * S3 (s3://BUCKET/PREFIX) is this store with a few differences, all keyed on
 * h->s3: path-style URLs ENDPOINT/BUCKET/PREFIX/<the dir layout> in S3's
 * strict encoding (the signature covers the path as sent, and RGW and AWS
 * canonicalise ':' as %3A), requests signed by libcurl (CURLOPT_AWS_SIGV4;
 * the keys go as separate username and password, since a key may hold ':'),
 * an explicit x-amz-content-sha256 header on every request (libcurl 7.88
 * would otherwise sign the empty body's hash for a PUT, which the server
 * checks against the body), lists through ListObjectsV2 pages, and the
 * server's error <Code> in failure messages (404 NoSuchBucket is an error,
 * not a missing object).  The parsing lives in s3.c.
 */
#include <stdatomic.h>
#include <curl/curl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>

#include "lib/loop.h"
#include "store/http-internal.h"

#define HTTP_DEFAULT_TRANSFERS 32    /* bench/remote: 4-32 alike on loopback; latency wants more */
#define HTTP_DEFAULT_CONNECT_TIMEOUT_MS 5000
#define HTTP_DEFAULT_LOW_SPEED_TIME 10   /* s */
#define HTTP_BACKOFF_BASE_NS (50ULL * 1000000)
#define HTTP_BACKOFF_CAP_NS (2000ULL * 1000000)
#define HTTP_MAX_OBJECT (1ULL << 30)   /* a whole-object get larger than this is refused */
#define HTTP_LIST_MAX (16U << 20)      /* bytes of one directory listing */

struct watch {
	struct http_store *h;         /* NULL once cancelled or the store is gone */
	int64_t id;
};

struct tick {
	struct http_store *h;
	int64_t id;                   /* the loop's timer, or -1: a deferred call */
	uint64_t due_ns;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init_once(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- pure helpers (unit-tested) ----------------------------------------- */

/* The dir layout's path of key under base; keep: the bytes besides
 * [A-Za-z0-9] left unencoded. */
static int key_url(const char *base, const char *key, const char *keep, char *out, size_t outlen)
{
	char path[2200];
	size_t n;
	int k;

	k = store_layout_path(key, path, sizeof(path));
	if (k < 0)
		return k;
	n = strlen(base);
	if (n + 2 > outlen)
		return -ENAMETOOLONG;
	memcpy(out, base, n);
	out[n] = '/';
	return url_encode(path, keep, out + n + 1, outlen - n - 1);
}

int http_key_url(const char *base, const char *key, char *out, size_t outlen)
{
	return key_url(base, key, "-._~/:@", out, outlen);
}

int s3_key_url(const char *base, const char *key, char *out, size_t outlen)
{
	return key_url(base, key, "-._~/", out, outlen);
}

enum http_verdict http_classify(int cc, long status, int *ret_err)
{
	switch ((CURLcode)cc) {
	case CURLE_OK:
		break;
	case CURLE_COULDNT_CONNECT:
		*ret_err = -ECONNREFUSED;
		return HTTP_RETRY_BRIEF;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		*ret_err = STORE_ERR_RESOLVE;
		return HTTP_RETRY_BRIEF;
	case CURLE_OPERATION_TIMEDOUT:
		*ret_err = -ETIMEDOUT;
		return HTTP_RETRY;
	case CURLE_PARTIAL_FILE:
	case CURLE_GOT_NOTHING:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_WEIRD_SERVER_REPLY:
		*ret_err = -ECONNRESET;
		return HTTP_RETRY;
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CERTPROBLEM:
		*ret_err = -EACCES;
		return HTTP_FAIL;
	case CURLE_OUT_OF_MEMORY:
		*ret_err = -ENOMEM;
		return HTTP_FAIL;
	case CURLE_WRITE_ERROR:
		/* our write callback refused: the body is larger than asked for */
		*ret_err = -EFBIG;
		return HTTP_FAIL;
	default:
		*ret_err = -EIO;
		return HTTP_FAIL;
	}
	if (status >= 200 && status < 300) {
		*ret_err = 0;
		return HTTP_DONE;
	}
	if (status == 404 || status == 410) {
		*ret_err = -ENOENT;
		return HTTP_FAIL;
	}
	if (status == 408 || status == 429 || status >= 500) {
		*ret_err = -EIO;
		return HTTP_RETRY;
	}
	*ret_err = status == 401 || status == 403 ? -EACCES : -EPROTO;
	return HTTP_FAIL;
}

uint64_t http_backoff_ns(unsigned attempt, uint64_t base_ns, uint64_t cap_ns, uint32_t rnd)
{
	uint64_t step = base_ns;

	for (unsigned i = 1; i < attempt && step < cap_ns; i++)
		step *= 2;
	step = MIN(step, cap_ns);
	return step / 2 + (step / 2 + 1) * (uint64_t)rnd / ((uint64_t)UINT32_MAX + 1);
}

static uint32_t rnd_next(struct http_store *h)
{
	h->rnd ^= h->rnd << 13;
	h->rnd ^= h->rnd >> 7;
	h->rnd ^= h->rnd << 17;
	return (uint32_t)(h->rnd >> 32);
}

/* ---- the timer and the poll (loop mode) --------------------------------- */

static void drive(struct http_store *h, int fd, int events);
static void service_timers(struct http_store *h);
static void rearm(struct http_store *h);

static void tick_run(struct tick *t)
{
	struct http_store *h = t->h;

	free(t);
	if (!h)
		return;
	h->tick = NULL;
	service_timers(h);
	rearm(h);
}

static void tick_cb(void *ud, int res)
{
	(void)res;
	tick_run(ud);
}

static void tick_deferred(void *ud)
{
	tick_run(ud);
}

/* Forget the armed tick: a timer is cancelled; a deferred call cannot be,
 * and runs for nothing. */
static void tick_drop(struct http_store *h, struct loop *l)
{
	h->tick->h = NULL;
	if (h->tick->id >= 0 && l)
		(void)loop_cancel_timer(l, h->tick->id);
	h->tick = NULL;
}

/* Hand each of the n sockets epoll found ready to libcurl. */
static void drive_ready(struct http_store *h, const struct epoll_event *ev, int n)
{
	for (int i = 0; i < n; i++) {
		int e = 0;

		if (ev[i].events & EPOLLIN)
			e |= CURL_CSELECT_IN;
		if (ev[i].events & EPOLLOUT)
			e |= CURL_CSELECT_OUT;
		if (ev[i].events & (EPOLLERR | EPOLLHUP))
			e |= CURL_CSELECT_ERR;
		drive(h, ev[i].data.fd, e);
	}
}

static void watch_cb(void *ud, int res)
{
	struct watch *w = ud;
	struct http_store *h = w->h;
	struct epoll_event ev[64];
	int n;

	free(w);
	if (!h)
		return;
	h->watch = NULL;
	n = epoll_wait(h->epfd, ev, (int)ARRAY_SIZE(ev), 0);
	drive_ready(h, ev, n);
	rearm(h);
}

static uint64_t next_due(struct http_store *h)
{
	uint64_t due = h->curl_due_ns;

	if (h->retry && (!due || h->retry->due_ns < due))
		due = h->retry->due_ns;
	return due;
}

/* Loop mode: keep one poll on epfd while transfers run and one timer for the
 * next due time; drop both when idle so that the loop can go idle too. */
static void rearm(struct http_store *h)
{
	struct loop *l = h->s->loop;
	uint64_t due, now;

	if (!l)
		return;
	if (h->running && !h->watch) {
		struct watch *w = calloc(1, sizeof(*w));

		if (w) {
			w->h = h;
			w->id = loop_poll_id(l, h->epfd, POLLIN, watch_cb, w);
			if (w->id < 0)
				free(w);
			else
				h->watch = w;
		}
	} else if (!h->running && h->watch) {
		h->watch->h = NULL;
		(void)loop_cancel_poll(l, h->watch->id);
		h->watch = NULL;
	}
	due = h->running || h->retry ? next_due(h) : 0;
	/* A tick due no later than needed stays: when it comes early, it finds
	 * nothing due and arms the next.  curl moves its timeout at nearly every
	 * call (twice per transfer, once to 0 when one is added), and a timer
	 * cancelled and armed again each time cost a tenth of a whole-image
	 * prefetch's loop thread. */
	if (h->tick && due && h->tick->due_ns <= due)
		return;
	if (h->tick)
		tick_drop(h, l);
	if (!due)
		return;
	now = now_ns();
	{
		struct tick *t = calloc(1, sizeof(*t));

		if (!t)
			return;
		t->h = h;
		t->due_ns = due;
		if (due <= now) {
			/* due now (a transfer was added): on the loop's next turn,
			 * without a trip through the kernel */
			t->id = -1;
			if (loop_defer(l, tick_deferred, t) < 0) {
				free(t);
				return;
			}
		} else {
			t->id = loop_timer(l, due - now, tick_cb, t);
			if (t->id < 0) {
				free(t);
				return;
			}
		}
		h->tick = t;
	}
}

/* ---- curl callbacks ------------------------------------------------------ */

static int socket_cb(CURL *easy, curl_socket_t fd, int what, void *ud, void *sockp)
{
	struct http_store *h = ud;
	struct epoll_event ev = { .data.fd = fd };

	if (what == CURL_POLL_REMOVE) {
		(void)epoll_ctl(h->epfd, EPOLL_CTL_DEL, fd, NULL);
		return 0;
	}
	if (what & CURL_POLL_IN)
		ev.events |= EPOLLIN;
	if (what & CURL_POLL_OUT)
		ev.events |= EPOLLOUT;
	if (epoll_ctl(h->epfd, EPOLL_CTL_MOD, fd, &ev) < 0 && errno == ENOENT &&
	    epoll_ctl(h->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		return -1;
	return 0;
}

static int timer_cb(CURLM *multi, long timeout_ms, void *ud)
{
	struct http_store *h = ud;

	/* socket_action may not be called from here: note the time, the timer
	 * (or the next epoll_wait) calls it */
	h->curl_due_ns = timeout_ms < 0 ? 0 : now_ns() + (uint64_t)timeout_ms * 1000000ULL;
	if (!h->curl_due_ns && timeout_ms >= 0)
		h->curl_due_ns = 1;
	rearm(h);
	return 0;
}

static size_t write_cb(char *p, size_t size, size_t n, void *ud)
{
	struct xfer *x = ud;
	size_t bytes = size * n;
	uint64_t max = x->kind == X_LIST ? HTTP_LIST_MAX :
	               x->len ? x->off + x->len : HTTP_MAX_OBJECT;

	/* a 200 answer to a Range request carries the whole object: allow it */
	if (x->body.len + bytes > max && !(x->kind == X_GET && x->len &&
	                                   x->body.len + bytes <= HTTP_MAX_OBJECT))
		return 0;
	/* a get's first bytes: room for the whole body (and buf's NUL) at once,
	 * instead of a dozen reallocations and copies as it grows */
	if (x->kind == X_GET && !x->body.data) {
		curl_off_t cl = -1;

		if (curl_easy_getinfo(x->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) == CURLE_OK &&
		    cl > 0 && (uint64_t)cl <= HTTP_MAX_OBJECT) {
			x->body.data = malloc((size_t)cl + 1);
			if (!x->body.data)
				return 0;
			x->body.cap = (size_t)cl + 1;
		}
	}
	if (buf_append(&x->body, p, bytes) < 0)
		return 0;
	return bytes;
}

/* now: the Date header of the answer, the store's clock */
static size_t header_cb(char *p, size_t size, size_t n, void *ud)
{
	struct xfer *x = ud;
	size_t len = size * n;

	if (len > 5 && !strncasecmp(p, "date:", 5)) {
		const char *v = p + 5, *e = p + len;

		while (v < e && (*v == ' ' || *v == '\t'))
			v++;
		while (e > v && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' '))
			e--;
		if (store_parse_time(v, (size_t)(e - v), &x->date) < 0)
			x->date = -1;
	}
	return len;
}

static size_t read_cb(char *p, size_t size, size_t n, void *ud)
{
	struct xfer *x = ud;
	size_t k = MIN(size * n, x->put_len - x->put_pos);

	memcpy(p, x->put_data + x->put_pos, k);
	x->put_pos += k;
	return k;
}

static int seek_cb(void *ud, curl_off_t off, int origin)
{
	struct xfer *x = ud;

	if (origin != SEEK_SET || off < 0 || (uint64_t)off > x->put_len)
		return CURL_SEEKFUNC_FAIL;
	x->put_pos = (size_t)off;
	return CURL_SEEKFUNC_OK;
}

/* ---- transfers ----------------------------------------------------------- */

void http_xfer_free(struct xfer *x)
{
	struct http_store *h = x->h;

	/* every caller has taken it out of the multi handle (or never put it in) */
	if (x->easy && h && h->nidle < HTTP_IDLE_EASY)
		h->idle[h->nidle++] = x->easy;
	else if (x->easy)
		curl_easy_cleanup(x->easy);
	curl_slist_free_all(x->headers);
	free(x->url);
	free(x->dest);
	free(x->src_path);
	buf_free(&x->body);
	free(x->prefix);
	for (size_t i = 0; i < x->ndirs; i++)
		free(x->dirs[i]);
	free(x->dirs);
	if (x->names)
		store_names_free(x->names);
	free(x);
}

static int xfer_setup(struct xfer *x)
{
	struct http_store *h = x->h;
	CURL *e = x->easy;
	char range[64];

	curl_easy_reset(e);
	curl_easy_setopt(e, CURLOPT_URL, x->url);
	curl_easy_setopt(e, CURLOPT_PRIVATE, x);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, h->connect_timeout_ms);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1024L);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, h->low_speed_time);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers ? x->headers : h->headers);
	if (h->s3 && h->s3->access_key) {
		curl_easy_setopt(e, CURLOPT_AWS_SIGV4, h->sigv4);
		curl_easy_setopt(e, CURLOPT_USERNAME, h->s3->access_key);
		curl_easy_setopt(e, CURLOPT_PASSWORD, h->s3->secret_key);
	}
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
	curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
	if (h->ca_file)
		curl_easy_setopt(e, CURLOPT_CAINFO, h->ca_file);
	if (h->ca_path)
		curl_easy_setopt(e, CURLOPT_CAPATH, h->ca_path);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
	buf_free(&x->body);
	switch (x->kind) {
	case X_GET:
		if (x->off || x->len) {
			if (x->len)
				snprintf(range, sizeof(range), "%llu-%llu", (unsigned long long)x->off,
				         (unsigned long long)(x->off + x->len - 1));
			else
				snprintf(range, sizeof(range), "%llu-", (unsigned long long)x->off);
			curl_easy_setopt(e, CURLOPT_RANGE, range);
		}
		break;
	case X_HEAD:
		curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
		break;
	case X_PUT:
		x->put_pos = 0;
		curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(e, CURLOPT_READFUNCTION, read_cb);
		curl_easy_setopt(e, CURLOPT_READDATA, x);
		curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, seek_cb);
		curl_easy_setopt(e, CURLOPT_SEEKDATA, x);
		curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)x->put_len);
		/* s3 (see http_s3_headers): bodies over 1 MiB go with "Expect:
		 * 100-continue"; send them at once rather than wait a second for a
		 * 100 that a proxy may never pass on */
		curl_easy_setopt(e, CURLOPT_EXPECT_100_TIMEOUT_MS, 0L);
		break;
	case X_LIST:
		break;
	case X_DELETE:
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
		break;
	case X_MOVE:
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "MOVE");
		break;
	case X_COPY:
		/* an empty PUT whose x-amz-copy-source names the object to copy */
		x->put_pos = 0;
		curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(e, CURLOPT_READFUNCTION, read_cb);
		curl_easy_setopt(e, CURLOPT_READDATA, x);
		curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)0);
		break;
	case X_NOW:
		curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
		curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
		curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
		break;
	}
	return 0;
}

static void xfer_launch(struct xfer *x)
{
	struct http_store *h = x->h;
	CURLMcode mc;

	xfer_setup(x);
	STORE_COUNT(h->s, requests, 1);
	mc = curl_multi_add_handle(h->multi, x->easy);
	if (mc != CURLM_OK) {
		/* treated as a failed attempt: retried like a reset */
		x->last_err = -EIO;
		x->next = NULL;
		x->due_ns = now_ns() + http_backoff_ns(++x->attempt, HTTP_BACKOFF_BASE_NS,
		                                       HTTP_BACKOFF_CAP_NS, rnd_next(h));
		for (struct xfer **pp = &h->retry;; pp = &(*pp)->next) {
			if (!*pp || (*pp)->due_ns > x->due_ns) {
				x->next = *pp;
				*pp = x;
				break;
			}
		}
		return;
	}
	h->running++;
}

/* Start queued transfers while there are free slots. */
static void fill(struct http_store *h)
{
	while (h->q_head && h->running < h->max) {
		struct xfer *x = h->q_head;

		h->q_head = x->next;
		if (!h->q_head)
			h->q_tail = NULL;
		xfer_launch(x);
	}
}

void http_enqueue(struct http_store *h, struct xfer *x)
{
	x->next = NULL;
	if (h->q_tail)
		h->q_tail->next = x;
	else
		h->q_head = x;
	h->q_tail = x;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Run x's callback with res and free it. */
void http_xfer_complete(struct xfer *x, int64_t res)
{
	struct http_store *h = x->h;

	if (res < 0 && res != -ENOENT)
		STORE_COUNT(h->s, failures, 1);
	h->pending--;
	h->ran++;
	switch (x->kind) {
	case X_GET:
		if (res >= 0 && x->body.data)
			x->body.data[x->body.len] = 0;
		x->get_cb(x->ud, res, &x->body);
		break;
	case X_HEAD:
	case X_PUT:
	case X_DELETE:
	case X_MOVE:
	case X_COPY:
	case X_NOW:
		x->cb(x->ud, res);
		break;
	case X_LIST:
		if (x->scan_cb) {
			http_scan_complete(x, res);
			break;
		}
		if (res >= 0 && x->nnames)
			qsort(x->names, x->nnames, sizeof(*x->names), cmp_str);
		x->list_cb(x->ud, res, res >= 0 ? x->names : NULL, res >= 0 ? x->nnames : 0);
		break;
	}
	http_xfer_free(x);
}

static const char *method(const struct xfer *x)
{
	static const char *names[] = { [X_GET] = "GET", [X_HEAD] = "HEAD", [X_PUT] = "PUT",
	                               [X_LIST] = "GET", [X_DELETE] = "DELETE", [X_MOVE] = "MOVE",
	                               [X_COPY] = "PUT", [X_NOW] = "HEAD" };

	return names[x->kind];
}

/* The detail of a transfer that failed in transport, for the caller's
 * message; a name that did not resolve is said as such, not as the errno
 * that stands for it. */
static void curl_detail(struct xfer *x, CURLcode cc, int err)
{
	if (err == STORE_ERR_RESOLVE)
		log_detail_as(err, store_strerror(err), "%s %s: %s, %u retries", method(x), x->url,
		              curl_easy_strerror(cc), x->attempt);
	else
		log_detail(err, "%s %s: %s, %u retries", method(x), x->url, curl_easy_strerror(cc),
		           x->attempt);
}

/* A request failed for good with err: say what the server said, for the
 * caller's message (log_detail).  s3: the <Code> of its error body, and 404
 * NoSuchBucket becomes -ENXIO (a missing bucket is not a missing object). */
static int fail_detail(struct xfer *x, CURLcode cc, long status, int err)
{
	char code[64] = "";

	if (x->h->s3 && status >= 400 && x->body.len &&
	    s3_error_code((const char *)x->body.data, x->body.len, code, sizeof(code)) == 0 &&
	    status == 404 && !strcmp(code, "NoSuchBucket"))
		err = -ENXIO;
	if (err == -ENOENT)
		return err;
	if (cc != CURLE_OK)
		curl_detail(x, cc, err);
	else if (status == 403 && x->kind == X_HEAD && x->h->s3)
		log_detail(err, "%s %s: HTTP 403: wrong keys, or not allowed", method(x), x->url);
	else
		log_detail(err, "%s %s: HTTP %ld%s%s%s", method(x), x->url, status, *code ? " " : "",
		           code, x->attempt ? ", after retries" : "");
	return err;
}

/* A transfer left curl with code cc: finish, retry or fail it. */
static void xfer_done(struct xfer *x, CURLcode cc)
{
	struct http_store *h = x->h;
	long status = 0;
	int err = 0;
	char code_buf[64];
	enum http_verdict v;

	curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
	if (x->kind == X_NOW && cc == CURLE_OK && status > 0 && x->date >= 0) {
		/* any answer tells the time, a 404 too */
		http_xfer_complete(x, x->date);
		return;
	}
	if (cc == CURLE_OK && status == 412 &&
	    (x->kind == X_MOVE || x->kind == X_COPY || (x->kind == X_PUT && x->if_none_match))) {
		/* Overwrite: F or If-None-Match: * found the target there */
		http_xfer_complete(x, -EEXIST);
		return;
	}
	v = http_classify(cc, status, &err);
	if (x->kind == X_GET && status == 416 && cc == CURLE_OK) {
		/* the range starts at or past the end: nothing there, as for dir: */
		buf_free(&x->body);
		http_xfer_complete(x, 0);
		return;
	}
	if (v == HTTP_FAIL)
		err = fail_detail(x, cc, status, err);
	if (x->kind == X_LIST && v == HTTP_FAIL && err == -ENOENT) {
		/* no such directory (or gone since its parent was read): empty */
		if (h->s3)
			http_s3_list_advance(x, 0);
		else
			http_list_advance(x, 0);
		return;
	}
	if (v == HTTP_RETRY_BRIEF && !x->brief_deadline_ns)
		x->brief_deadline_ns = MIN(x->deadline_ns, now_ns() + HTTP_BRIEF_RETRY_NS);
	if (v == HTTP_RETRY || v == HTTP_RETRY_BRIEF) {
		uint64_t deadline = v == HTTP_RETRY ? x->deadline_ns : x->brief_deadline_ns;

		x->last_err = err;
		if (now_ns() < deadline) {
			x->attempt++;
			STORE_COUNT(h->s, retries, 1);
			log_msg(LOG_DEBUG, "store '%s': %s: %s (HTTP %ld); retry %u", h->s->url, x->url,
			        curl_easy_strerror(cc), status, x->attempt);
			x->due_ns = now_ns() + http_backoff_ns(x->attempt, HTTP_BACKOFF_BASE_NS,
			                                       HTTP_BACKOFF_CAP_NS, rnd_next(h));
			if (x->due_ns > deadline)
				x->due_ns = deadline;
			for (struct xfer **pp = &h->retry;; pp = &(*pp)->next) {
				if (!*pp || (*pp)->due_ns > x->due_ns) {
					x->next = *pp;
					*pp = x;
					break;
				}
			}
			return;
		}
		/* the caller logs the failure with its context; this is the detail */
		log_msg(LOG_INFO, "store '%s': %s: %s (HTTP %ld); giving up after %u retries",
		        h->s->url, x->url, curl_easy_strerror(cc), status, x->attempt);
		if (cc != CURLE_OK)
			curl_detail(x, cc, err);
		else
			log_detail(err, "%s %s: HTTP %ld, %u retries", method(x), x->url, status,
			           x->attempt);
		http_xfer_complete(x, err);
		return;
	}
	if (v == HTTP_FAIL) {
		if (err != -ENOENT)
			log_msg(LOG_INFO, "store '%s': %s: %s (HTTP %ld)", h->s->url, x->url,
			        curl_easy_strerror(cc), status);
		http_xfer_complete(x, err);
		return;
	}
	switch (x->kind) {
	case X_GET:
		if (status == 200 && (x->off || x->len)) {
			/* the server ignored the range: keep the part asked for */
			uint64_t from = MIN(x->off, (uint64_t)x->body.len);
			uint64_t n = x->body.len - from;

			if (x->len && x->len < n)
				n = x->len;
			memmove(x->body.data, x->body.data + from, n);
			x->body.len = n;
		}
		http_xfer_complete(x, (int64_t)x->body.len);
		break;
	case X_HEAD: {
		curl_off_t cl = -1;

		curl_easy_getinfo(x->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
		http_xfer_complete(x, cl >= 0 ? (int64_t)cl : 0);
		break;
	}
	case X_PUT:
	case X_DELETE:
	case X_MOVE:
		http_xfer_complete(x, 0);
		break;
	case X_NOW:
		/* an answer without a (readable) Date */
		http_xfer_complete(x, log_error(-EPROTO, "store '%s': %s: no Date header in the answer",
		                           h->s->url, x->url));
		break;
	case X_COPY:
		/* a copy can fail after its 200 has gone: the body then is an Error */
		if (x->body.len && s3_error_code((const char *)x->body.data, x->body.len, code_buf,
		                                 sizeof(code_buf)) == 0) {
			log_detail(-EIO, "PUT %s (copy): %s", x->url, code_buf);
			http_xfer_complete(x, -EIO);
			break;
		}
		http_copy_delete_source(x);
		break;
	case X_LIST:
		if (h->s3)
			http_s3_list_advance(x, http_s3_list_step(x));
		else
			http_list_advance(x, http_list_step(x));
		break;
	}
}

/* Collect transfers curl finished. */
static void reap(struct http_store *h)
{
	CURLMsg *m;
	int left;

	while ((m = curl_multi_info_read(h->multi, &left))) {
		struct xfer *x = NULL;
		CURLcode cc = m->data.result;

		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
		curl_multi_remove_handle(h->multi, m->easy_handle);
		h->running--;
		xfer_done(x, cc);
	}
	fill(h);
}

static void drive(struct http_store *h, int fd, int events)
{
	int still;

	curl_multi_socket_action(h->multi, fd, events, &still);
	reap(h);
}

/* Run what is due: curl's timeout and retries whose backoff ended. */
static void service_timers(struct http_store *h)
{
	uint64_t now = now_ns();

	if (h->curl_due_ns && h->curl_due_ns <= now) {
		h->curl_due_ns = 0;
		drive(h, CURL_SOCKET_TIMEOUT, 0);
	}
	while (h->retry && h->retry->due_ns <= now) {
		struct xfer *x = h->retry;

		h->retry = x->next;
		http_enqueue(h, x);
	}
	fill(h);
}

/* ---- the store: its transfers, its turn, its life ----------------------- */

int http_xfer_new(struct store *s, enum xfer_kind kind, const char *key, struct xfer **ret)
{
	struct http_store *h = H(s);
	struct xfer *x = calloc(1, sizeof(*x));
	char url[4096];
	int r;

	if (!x)
		return -ENOMEM;
	x->h = h;
	x->kind = kind;
	x->easy = h->nidle ? h->idle[--h->nidle] : curl_easy_init();
	r = x->easy ? 0 : -ENOMEM;
	if (r == 0 && kind != X_LIST)
		r = h->s3 ? s3_key_url(h->base, key, url, sizeof(url)) :
		            http_key_url(h->base, key, url, sizeof(url));
	if (r == 0 && kind != X_LIST && !(x->url = strdup(url)))
		r = -ENOMEM;
	if (r < 0) {
		http_xfer_free(x);
		return r;
	}
	if (r == 0 && h->s3 && kind != X_PUT)
		r = http_s3_headers(h, x, S3_EMPTY_SHA256);
	if (r < 0) {
		http_xfer_free(x);
		return r;
	}
	x->deadline_ns = now_ns() + s->fetch_timeout_ms * 1000000ULL;
	*ret = x;
	return 0;
}

void http_xfer_submit(struct http_store *h, struct xfer *x)
{
	h->pending++;
	http_enqueue(h, x);
	fill(h);
	rearm(h);
}

unsigned http_pending(struct store *s)
{
	return H(s)->pending;
}

/* Without a loop: wait for socket events or the next due time, then act. */
int http_run_once(struct store *s, int wait)
{
	struct http_store *h = H(s);
	struct epoll_event ev[64];
	int timeout = 0, n;

	h->ran = 0;
	service_timers(h);
	if (h->ran || !h->pending)
		return h->ran;
	if (wait) {
		uint64_t due = next_due(h), now = now_ns();

		timeout = !due ? 1000 : due <= now ? 0 : (int)MIN((due - now + 999999) / 1000000, 1000);
	}
	n = epoll_wait(h->epfd, ev, (int)ARRAY_SIZE(ev), timeout);
	if (n < 0 && errno != EINTR)
		return -errno;
	drive_ready(h, ev, n);
	service_timers(h);
	return h->ran;
}

void http_free(struct store *s)
{
	struct http_store *h = H(s);

	if (h) {
		struct xfer *lists[] = { h->q_head, h->retry };

		if (h->watch) {
			h->watch->h = NULL;
			if (s->loop)
				(void)loop_cancel_poll(s->loop, h->watch->id);
		}
		if (h->tick)
			tick_drop(h, s->loop);
		/* store_free() is called with nothing pending; anything left is
		 * dropped without its callback */
		for (size_t i = 0; i < ARRAY_SIZE(lists); i++)
			while (lists[i]) {
				struct xfer *x = lists[i];

				lists[i] = x->next;
				http_xfer_free(x);
			}
		while (h->nidle)
			curl_easy_cleanup(h->idle[--h->nidle]);
		if (h->multi)
			curl_multi_cleanup(h->multi);
		if (h->epfd >= 0)
			close(h->epfd);
		curl_slist_free_all(h->headers);
		if (h->s3) {
			s3_conf_destroy(h->s3);
			free(h->s3);
		}
		free(h->base);
		free(h->ca_file);
		free(h->ca_path);
		free(h);
	}
	free(s);
}

/* o's duration in whole seconds (libcurl's unit for these), rounded up;
 * def_s when unset. */
static long seconds(uint64_t ms, long def_s)
{
	return ms ? (long)MIN((ms + 999) / 1000, (uint64_t)LONG_MAX) : def_s;
}

static int dup_opt(const char *v, char **ret)
{
	*ret = NULL;
	if (!v || !*v)
		return 0;
	*ret = strdup(v);
	return *ret ? 0 : -ENOMEM;
}

/* A store whose keys live under base (n bytes of it); url names it in
 * messages. */
static int http_new(const char *url, const char *base, size_t n, const struct store_options *o,
                    struct http_store **ret)
{
	struct http_store *h;
	struct store *s;
	bool nomem;

	pthread_once(&curl_once, curl_init_once);
	if (curl_init_rc != CURLE_OK)
		return log_error(-EIO, "store '%s': libcurl does not initialise", url);
	h = calloc(1, sizeof(*h));
	s = h ? store_alloc(&http_ops, h) : NULL;
	if (!s) {
		free(h);
		return -ENOMEM;
	}
	h->s = s;
	h->epfd = epoll_create1(EPOLL_CLOEXEC);
	h->base = strndup(base, n);
	h->multi = curl_multi_init();
	h->headers = curl_slist_append(NULL, "Expect:");
	h->max = o->http_transfers ? o->http_transfers : HTTP_DEFAULT_TRANSFERS;
	h->connect_timeout_ms = o->http_connect_timeout_ms ? (long)MIN(o->http_connect_timeout_ms,
	                        (uint64_t)LONG_MAX) : HTTP_DEFAULT_CONNECT_TIMEOUT_MS;
	h->low_speed_time = seconds(o->http_low_speed_time_ms, HTTP_DEFAULT_LOW_SPEED_TIME);
	nomem = dup_opt(o->tls_ca_file, &h->ca_file) < 0 || dup_opt(o->tls_ca_dir, &h->ca_path) < 0;
	h->rnd = now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)h;
	if (!h->rnd)
		h->rnd = 1;
	if (h->epfd < 0 || !h->base || !h->multi || !h->headers || nomem) {
		int r = h->epfd < 0 ? -errno : -ENOMEM;

		http_free(s);
		return log_errno(r, "store '%s': setting up", url);
	}
	curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
	curl_multi_setopt(h->multi, CURLMOPT_SOCKETDATA, h);
	curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
	curl_multi_setopt(h->multi, CURLMOPT_TIMERDATA, h);
	curl_multi_setopt(h->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)h->max);
	curl_multi_setopt(h->multi, CURLMOPT_MAXCONNECTS, (long)h->max);
	*ret = h;
	return 0;
}

int store_http_open(const char *url, const struct store_options *o, struct store **ret)
{
	struct http_store *h;
	size_t n = strlen(url);
	int r;

	while (n && url[n - 1] == '/')
		n--;
	if (n <= strlen("https://") || strchr(url, '?') || strchr(url, '#'))
		return log_error(-EINVAL, "store '%s': want http[s]://host[:port][/path]", url);
	r = http_new(url, url, n, o, &h);
	if (r < 0)
		return r;
	*ret = h->s;
	return 0;
}

static atomic_bool s3_unsigned_said;

int store_s3_open(const char *url, const struct store_options *o, struct store **ret)
{
	struct s3_conf *c = calloc(1, sizeof(*c));
	struct http_store *h;
	char pfx[2048];
	_cleanup_free_ char *base = NULL;
	int r;

	if (!c)
		return -ENOMEM;
	r = s3_conf_load(url, o, c);
	if (r < 0) {
		free(c);
		return r;
	}
	r = s3_uri_encode(c->prefix, true, pfx, sizeof(pfx));
	if (r < 0 || asprintf(&base, "%s/%s%s%s", c->endpoint, c->bucket, *pfx ? "/" : "",
	                      pfx) < 0) {
		base = NULL;
		r = r < 0 ? log_error(r, "store '%s': prefix too long", url) : -ENOMEM;
	}
	if (r == 0)
		r = http_new(url, base, strlen(base), o, &h);
	if (r < 0) {
		s3_conf_destroy(c);
		free(c);
		return r;
	}
	h->s3 = c;
	snprintf(h->sigv4, sizeof(h->sigv4), "aws:amz:%s:s3", c->region);
	h->s3_max_keys = o->s3_list_max_keys;
	/* Said, once per process (every thread reopens the store): an unsigned
	 * request that a private bucket refuses would otherwise read as "access
	 * denied" with no hint that no keys were found at all. */
	if (!c->access_key && !atomic_exchange(&s3_unsigned_said, true))
		log_msg(LOG_WARN, "store '%s': no S3 keys in the settings, the environment or the "
		        "credentials file: sending unsigned requests (public buckets only)", url);
	*ret = h->s;
	return 0;
}
