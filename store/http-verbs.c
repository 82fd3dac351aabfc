/*
 * http-verbs.c — the operations of the http:// and s3:// store (store_ops):
 * each builds one transfer (URL, method, headers) and hands it to the
 * engine in http.c, which runs, retries and completes it.
 *
 * WebDAV and S3 differ here: a move is a WebDAV MOVE with Destination and
 * Overwrite on nginx, and a server-side copy then a delete of the source on
 * S3 (no rename there); a create-only put is S3's If-None-Match: *, which
 * nginx would ignore, so an http store says -EOPNOTSUPP and store.c puts
 * under a temporary name instead.  Every S3 request carries its payload's
 * sha256 (http_s3_headers), which the signature covers.
 */
#include "lib/sha256.h"
#include "store/http-internal.h"

/* ---- operations ---------------------------------------------------------- */

/* s3: x's own header list, with its payload hash (64 hex digits). */
int http_s3_headers(struct http_store *h, struct xfer *x, const char *payload_sha256)
{
	char line[96];

	/* no "Expect:" to turn 100-continue off as for http: libcurl 7.88 signs
	 * the empty header it does not send, and the signature fails (the wait
	 * for "100 Continue" is cut to nothing in xfer_setup instead) */
	curl_slist_free_all(x->headers);
	snprintf(line, sizeof(line), "x-amz-content-sha256: %s", payload_sha256);
	x->headers = curl_slist_append(NULL, line);
	if (x->headers && h->s3->token) {
		_cleanup_free_ char *t = NULL;

		if (asprintf(&t, "x-amz-security-token: %s", h->s3->token) < 0 ||
		    !curl_slist_append(x->headers, t))
			return -ENOMEM;
	}
	return x->headers ? 0 : -ENOMEM;
}

static int http_get(struct store *s, const char *key, uint64_t off, uint64_t len,
                    store_get_cb cb, void *ud)
{
	struct xfer *x;
	int r = http_xfer_new(s, X_GET, key, &x);

	if (r < 0)
		return r;
	x->off = off;
	x->len = len;
	x->get_cb = cb;
	x->ud = ud;
	http_xfer_submit(H(s), x);
	return 0;
}

/* Start a transfer of kind on key whose answer is only a status: cb(ud, res). */
static int xfer_status(struct store *s, enum xfer_kind kind, const char *key, store_cb cb, void *ud)
{
	struct xfer *x;
	int r = http_xfer_new(s, kind, key, &x);

	if (r < 0)
		return r;
	if (kind == X_NOW)
		x->date = -1;
	x->cb = cb;
	x->ud = ud;
	http_xfer_submit(H(s), x);
	return 0;
}

static int http_head(struct store *s, const char *key, store_cb cb, void *ud)
{
	return xfer_status(s, X_HEAD, key, cb, ud);
}

/* A PUT of data at key; on s3 signed, and with if_none_match refused by the
 * server when the key exists (412). */
static int put_start(struct store *s, const char *key, const void *data, size_t len,
                     bool if_none_match, store_cb cb, void *ud)
{
	struct xfer *x;
	int r = http_xfer_new(s, X_PUT, key, &x);

	if (r < 0)
		return r;
	x->put_data = data;
	x->put_len = len;
	x->if_none_match = if_none_match;
	if (H(s)->s3) {
		uint8_t d[SHA256_SIZE];
		char hex[SHA256_HEX_SIZE];

		r = sha256(data, len, d);
		hex_encode(d, sizeof(d), hex);
		if (r == 0)
			r = http_s3_headers(H(s), x, hex);
	}
	if (r == 0 && if_none_match && !curl_slist_append(x->headers, "If-None-Match: *"))
		r = -ENOMEM;
	if (r < 0) {
		http_xfer_free(x);
		return r;
	}
	x->cb = cb;
	x->ud = ud;
	http_xfer_submit(H(s), x);
	return 0;
}

static int http_put(struct store *s, const char *key, const void *data, size_t len,
                    store_cb cb, void *ud)
{
	return put_start(s, key, data, len, false, cb, ud);
}

static int http_delete(struct store *s, const char *key, store_cb cb, void *ud)
{
	return xfer_status(s, X_DELETE, key, cb, ud);
}

/* http: WebDAV MOVE (Destination, Overwrite).  s3: a server-side copy to the
 * target (with If-None-Match: * unless replacing), then a delete of the
 * source. */
static int http_move(struct store *s, const char *from, const char *to, bool replace,
                     store_cb cb, void *ud)
{
	struct http_store *h = H(s);
	struct xfer *x;
	char url[4096], line[4200];
	int r;

	r = h->s3 ? s3_key_url(h->base, to, url, sizeof(url)) :
	            http_key_url(h->base, to, url, sizeof(url));
	if (r < 0)
		return r;
	r = http_xfer_new(s, h->s3 ? X_COPY : X_MOVE, h->s3 ? to : from, &x);
	if (r < 0)
		return r;
	x->replace = replace;
	if (h->s3) {
		/* x->url is the target; the source's URL is kept for the delete */
		char src[4096];

		r = s3_key_url(h->base, from, src, sizeof(src));
		if (r == 0 && !(x->dest = strdup(src)))
			r = -ENOMEM;
		if (r == 0) {
			snprintf(line, sizeof(line), "x-amz-copy-source: %s",
			         src + strlen(h->s3->endpoint));
			if (!curl_slist_append(x->headers, line) ||
			    (!replace && !curl_slist_append(x->headers, "If-None-Match: *")))
				r = -ENOMEM;
		}
	} else {
		struct curl_slist *l = curl_slist_append(NULL, "Expect:");

		snprintf(line, sizeof(line), "Destination: %s", url);
		x->headers = l;
		if (!l || !curl_slist_append(l, line) ||
		    !curl_slist_append(l, replace ? "Overwrite: T" : "Overwrite: F"))
			r = -ENOMEM;
	}
	if (r < 0) {
		http_xfer_free(x);
		return r;
	}
	x->cb = cb;
	x->ud = ud;
	http_xfer_submit(h, x);
	return 0;
}

/* s3 only: PUT with If-None-Match: * (Ceph RGW and AWS refuse it with 412 when
 * the key exists).  nginx ignores the header: -EOPNOTSUPP, store.c then puts
 * under a temporary name and moves it without replacing. */
static int http_put_new(struct store *s, const char *key, const void *data, size_t len,
                        store_cb cb, void *ud)
{
	if (!H(s)->s3)
		return -EOPNOTSUPP;
	return put_start(s, key, data, len, true, cb, ud);
}

/* The store's clock: the Date of an answer (a HEAD of a key nobody writes). */
static int http_now(struct store *s, store_cb cb, void *ud)
{
	return xfer_status(s, X_NOW, "gc/clock", cb, ud);
}

/* s3: a copy is done; now delete its source (x->dest) with the same transfer. */
void http_copy_delete_source(struct xfer *x)
{
	free(x->url);
	x->url = x->dest;
	x->dest = NULL;
	x->kind = X_DELETE;
	x->attempt = 0;
	x->deadline_ns = now_ns() + x->h->s->fetch_timeout_ms * 1000000ULL;
	if (http_s3_headers(x->h, x, S3_EMPTY_SHA256) < 0) {
		http_xfer_complete(x, -ENOMEM);
		return;
	}
	http_enqueue(x->h, x);
}

const struct store_ops http_ops = {
	.get = http_get,
	.head = http_head,
	.put = http_put,
	.list = http_list,
	.del = http_delete,
	.move = http_move,
	.put_new = http_put_new,
	.scan = http_scan,
	.now = http_now,
	.run_once = http_run_once,
	.pending = http_pending,
	.free = http_free,
};
