/*
 * http-internal.h — what the files of the http:// and s3:// store share: a
 * transfer (struct xfer), the store's state (struct http_store), and the
 * functions one file calls in another.
 *
 *   http.c        the transfer engine: curl's multi handle on the loop or on
 *                 store_run_once(), queueing, retries, completion; open, free
 *   http-verbs.c  the operations: get, head, put, delete, move, put_new, now
 *   http-list.c   listings: nginx autoindex JSON directories, S3 ListObjectsV2
 *
 * All of it runs on one thread (the loop's, or store_run_once()'s caller).
 */
#ifndef LAZYROOT_STORE_HTTP_INTERNAL_H
#define LAZYROOT_STORE_HTTP_INTERNAL_H

#include <curl/curl.h>

#include "store/store-internal.h"

/* sha256 of nothing: the payload hash of a request without a body */
#define S3_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

struct watch;
struct tick;

/* X_DELETE, X_MOVE (WebDAV), X_COPY (s3: a server-side copy, then a delete of
 * the source) and X_NOW (a HEAD for the Date header) serve the store's life:
 * store.h, "the store's life". */
enum xfer_kind { X_GET, X_HEAD, X_PUT, X_LIST, X_DELETE, X_MOVE, X_COPY, X_NOW };

struct http_store;

struct xfer {
	struct xfer *next;            /* wait queue or retry list */
	struct http_store *h;
	enum xfer_kind kind;
	CURL *easy;
	char *url;
	uint64_t off, len;            /* get: the range asked for (len 0: to the end) */
	const uint8_t *put_data;      /* put: borrowed until the callback */
	size_t put_len, put_pos;
	struct curl_slist *headers;   /* s3: this request's own headers */
	struct buf body;
	unsigned attempt;             /* retries made */
	uint64_t deadline_ns;         /* no retry starts after this */
	uint64_t brief_deadline_ns;   /* nor, after an HTTP_RETRY_BRIEF failure, after this */
	uint64_t due_ns;              /* retry list: when to go again */
	int last_err;
	/* list: the directories still to read and the names found */
	char *prefix;                 /* key prefix of the directory read now */
	char **dirs;
	size_t ndirs;
	char **names;
	size_t nnames, cap;
	store_cb cb;
	store_get_cb get_cb;
	store_list_cb list_cb;
	store_scan_cb scan_cb;        /* list: a scan (names are "key\tsize\tmtime") */
	void *ud;
	char *dest;                   /* move: the target's URL; copy: the source's URL */
	char *src_path;               /* copy: x-amz-copy-source, /BUCKET/KEY encoded */
	bool replace;                 /* move, copy: the target may be replaced */
	bool if_none_match;           /* put: create only (s3) */
	int64_t date;                 /* now: the Date of the answer; -1 until seen */
};

/* Easy handles kept for reuse: a handle made and destroyed per transfer (with
 * its buffers) cost 8% of a whole-image prefetch's fetching CPU. */
#define HTTP_IDLE_EASY 64

struct http_store {
	struct store *s;
	CURLM *multi;
	char *base;                   /* without a trailing '/' */
	int epfd;
	unsigned max, running;        /* transfers in curl */
	unsigned pending;             /* operations started, callback not yet run */
	struct xfer *q_head, *q_tail; /* waiting for a slot */
	struct xfer *retry;           /* waiting for their backoff, by due time */
	uint64_t curl_due_ns;         /* when curl wants a timeout call; 0: never */
	struct watch *watch;          /* loop mode: the poll on epfd */
	struct tick *tick;            /* loop mode: the timer */
	long connect_timeout_ms, low_speed_time;
	char *ca_file, *ca_path;
	struct curl_slist *headers;
	struct s3_conf *s3;           /* s3:// stores; NULL for http */
	char sigv4[96];               /* s3: "aws:amz:REGION:s3" */
	unsigned s3_max_keys;         /* s3: keys per list page (0: the server's default) */
	uint64_t rnd;                 /* xorshift state for jitter */
	int ran;                      /* callbacks run in this turn */
	CURL *idle[HTTP_IDLE_EASY];   /* handles of finished transfers, for the next */
	unsigned nidle;
};

static inline struct http_store *H(struct store *s)
{
	return s->backend;
}

/* http.c */
/* A transfer of kind on key (NULL for a listing, whose URL list_start
 * sets), not yet submitted; -errno. */
int http_xfer_new(struct store *s, enum xfer_kind kind, const char *key, struct xfer **ret);
/* Count x as pending, queue it and start what the slots allow. */
void http_xfer_submit(struct http_store *h, struct xfer *x);
/* Free a transfer that is in no curl handle, queue or list; no callback. */
void http_xfer_free(struct xfer *x);
void http_xfer_complete(struct xfer *x, int64_t res);
/* Queue x (again: a listing's next directory or page, a copy's delete). */
void http_enqueue(struct http_store *h, struct xfer *x);
unsigned http_pending(struct store *s);
int http_run_once(struct store *s, int wait);
void http_free(struct store *s);

/* http-verbs.c */
extern const struct store_ops http_ops;
int http_s3_headers(struct http_store *h, struct xfer *x, const char *payload_sha256);
void http_copy_delete_source(struct xfer *x);

/* http-list.c */
int http_list(struct store *s, const char *prefix, store_list_cb cb, void *ud);
int http_scan(struct store *s, const char *prefix, store_scan_cb cb, void *ud);
void http_scan_complete(struct xfer *x, int64_t res);
int http_list_step(struct xfer *x);
void http_list_advance(struct xfer *x, int r);
int http_s3_list_step(struct xfer *x);
void http_s3_list_advance(struct xfer *x, int r);

#endif
