/*
 * store-internal.h — what a backend implements.  Every operation is
 * asynchronous: a backend either completes it later from its run_once hook
 * (HTTP, S3) or from a loop operation's callback (when a loop is set), or
 * does the work at once and queues the callback with store_defer_*() so that
 * it still runs from store_run_once() (or from the loop, when one is set),
 * never from inside the call that started it.
 */
#ifndef LAZYROOT_STORE_INTERNAL_H
#define LAZYROOT_STORE_INTERNAL_H

#include "lib/lib.h"
#include "store/store.h"

typedef void (*store_scan_cb)(void *ud, int64_t res, struct store_entry *e, size_t n);

struct store_ops {
	int (*get)(struct store *s, const char *key, uint64_t off, uint64_t len, store_get_cb cb,
	           void *ud);
	int (*head)(struct store *s, const char *key, store_cb cb, void *ud);
	int (*put)(struct store *s, const char *key, const void *data, size_t len, store_cb cb,
	           void *ud);
	int (*list)(struct store *s, const char *prefix, store_list_cb cb, void *ud);
	/* Make every completed put durable (a barrier before publishing). */
	int (*flush)(struct store *s);
	/* Complete backend operations; wait for one when wait is set.  Returns
	 * the callbacks run.  NULL for backends that only defer. */
	int (*run_once)(struct store *s, int wait);
	/* Operations started and not yet completed by the backend itself. */
	unsigned (*pending)(struct store *s);
	/* store_get_checked, for backends that can fail over (mirrors); NULL:
	 * store.c checks the result of get. */
	int (*get_checked)(struct store *s, const char *key, uint64_t off, uint64_t len,
	                   store_check_fn check, store_get_cb cb, void *ud);
	/* A read-only descriptor of the object at key, for backends that keep
	 * objects as local files; NULL: store_open_file says -EOPNOTSUPP. */
	int (*open_file)(struct store *s, const char *key);
	/* store_put_begin/store_put_end (the end closes nothing: store.c does);
	 * NULL: -EOPNOTSUPP. */
	int (*put_begin)(struct store *s, const char *key);
	int (*put_end)(struct store *s, const char *key, int fd, bool commit);
	/* The store's life (store.h): NULL where a backend cannot; put_new NULL:
	 * store.c puts under a temporary name and moves without replacing. */
	int (*del)(struct store *s, const char *key, store_cb cb, void *ud);
	int (*move)(struct store *s, const char *from, const char *to, bool replace, store_cb cb,
	            void *ud);
	int (*put_new)(struct store *s, const char *key, const void *data, size_t len, store_cb cb,
	               void *ud);
	/* the callback owns the entries (store_entries_free) */
	int (*scan)(struct store *s, const char *prefix, store_scan_cb cb, void *ud);
	/* res: the store's clock in seconds since the epoch */
	int (*now)(struct store *s, store_cb cb, void *ud);
	void (*free)(struct store *s);
};

struct deferred;
struct loop;
struct store_kick;

struct store {
	const struct store_ops *ops;
	char *url;
	void *backend;
	struct deferred *def_head, *def_tail;  /* callbacks queued by store_defer_* */
	struct loop *loop;                     /* borrowed; NULL: synchronous mode */
	/* set while a loop_defer() that will run the deferred queue is pending;
	 * owned by that deferral, which frees it (the store may be gone) */
	struct store_kick *kick;
	uint64_t fetch_timeout_ms;
	struct store_counters own;
	struct store_counters *counters;       /* &own, or the caller's */
	struct store **children;               /* mirrors: the stores they read in order */
	size_t nchildren;
	const struct store_options *opts;      /* borrowed (store_open_with); NULL: defaults */
};

/* A new store with ops and backend, defaults set; -ENOMEM as NULL. */
struct store *store_alloc(const struct store_ops *ops, void *backend);

#define STORE_COUNT(s, field, n) __atomic_add_fetch(&(s)->counters->field, (n), __ATOMIC_RELAXED)

/* Queue a completion; takes data's contents (get) or names (list). */
int store_defer(struct store *s, store_cb cb, void *ud, int64_t res);
int store_defer_get(struct store *s, store_get_cb cb, void *ud, int64_t res, struct buf *data);
int store_defer_list(struct store *s, store_list_cb cb, void *ud, int64_t res, char **names,
                     size_t n);
/* Takes e (n entries). */
int store_defer_scan(struct store *s, store_scan_cb cb, void *ud, int64_t res,
                     struct store_entry *e, size_t n);

/* The layout every backend shares under its root: key → relative path, with
 * chunks fanned out by their first two hex digits ("chunks/ab/<hex>", and the
 * same under "aside/"); -ENAMETOOLONG. */
int store_layout_path(const char *key, char *out, size_t outlen);
/* The reverse: a relative path → its key (the fan-out taken out); false for a
 * path that no key maps to. */
bool store_layout_key(const char *path, char *out, size_t outlen);

/* Key checks shared by backends: '/'-separated, no empty, "." or ".."
 * components, no leading '/', printable. */
bool store_key_valid(const char *key);

int store_dir_open(const char *path, bool create, struct store **ret);
/* o: never NULL (store.c passes zeroed options for defaults). */
int store_http_open(const char *url, const struct store_options *o, struct store **ret);
/* s3://BUCKET[/PREFIX]: the HTTP store speaking S3 (see store.h). */
int store_s3_open(const char *url, const struct store_options *o, struct store **ret);
/* Takes the n stores (all of them, also on failure). */
int store_mirror_open(struct store **children, size_t n, struct store **ret);
/* The back-off a failed mirror is passed over for (mirror.c; tests). */
void store_mirror_set_backoff(struct store *s, uint64_t min_ms, uint64_t max_ms);

/* ---- HTTP helpers, exposed for unit tests ---------------------------------- */

/* The URL of key under base: the dir layout (chunks fanned out), every byte
 * outside [A-Za-z0-9-._~/:@] percent-encoded.  Returns 0 or -ENAMETOOLONG. */
int http_key_url(const char *base, const char *key, char *out, size_t outlen);
/* The same for an s3 store: S3's strict encoding (':' and '@' too). */
int s3_key_url(const char *base, const char *key, char *out, size_t outlen);
/* HTTP_RETRY_BRIEF: a failure that a retry seldom mends (connection refused,
 * a name that does not resolve), retried for HTTP_BRIEF_RETRY_NS only, so
 * that a store that is not there fails in seconds, not at the fetch timeout,
 * while one restarting still gets a moment. */
enum http_verdict { HTTP_DONE, HTTP_RETRY, HTTP_RETRY_BRIEF, HTTP_FAIL };
#define HTTP_BRIEF_RETRY_NS 2000000000ULL
/* How to go on after a transfer that ended with curl code cc (a CURLcode)
 * and HTTP status: done, retry, or fail; *ret_err gets the -errno to report
 * (for retry: the one to report when no retry is left).  A host name that
 * does not resolve is -EADDRNOTAVAIL (STORE_ERR_RESOLVE). */
enum http_verdict http_classify(int cc, long status, int *ret_err);
/* Delay before retry number attempt (1 = the first retry): base doubled per
 * attempt up to cap, the upper half of it drawn at random from rnd ("equal
 * jitter": never less than half the step, so retries stay spaced out). */
uint64_t http_backoff_ns(unsigned attempt, uint64_t base_ns, uint64_t cap_ns, uint32_t rnd);

/* ---- S3 helpers (s3.c), exposed for unit tests ----------------------------- */

struct s3_conf {
	char *endpoint;                /* http[s]://HOST[:PORT], no trailing '/' */
	char *bucket;
	char *prefix;                  /* "" or "a/b": no leading or trailing '/' */
	char *region;
	char *access_key, *secret_key; /* NULL: anonymous requests, unsigned */
	char *token;                   /* session token, or NULL */
};
/* s3://BUCKET[/PREFIX] → bucket and prefix (new strings), *ret_endpoint
 * NULL; s3+http[s]://HOST[:PORT]/BUCKET[/PREFIX] → the endpoint
 * http[s]://HOST[:PORT] too.  -EINVAL for anything else: a bucket of 3-63
 * [A-Za-z0-9._-], a prefix store_key_valid() accepts, no query or fragment. */
int s3_parse_url(const char *url, char **ret_endpoint, char **ret_bucket, char **ret_prefix);
/* Fill c from url and the store options o: endpoint the URL's own, else
 * o's, else AWS's own for the region; region o's, else us-east-1; keys o's,
 * else the shared credentials file (see struct store_options).  Logs its
 * errors. */
int s3_conf_load(const char *url, const struct store_options *o, struct s3_conf *c);
void s3_conf_destroy(struct s3_conf *c);
/* The keys of profile in an AWS shared credentials file's text.  -ENOENT: no
 * such profile; -EINVAL: it lacks the key id or the secret; -EBADMSG: not
 * INI.  Values are taken whole after '=' (trimmed): they may hold ':'. */
int s3_parse_credentials(const char *text, size_t len, const char *profile, char **ret_key,
                         char **ret_secret, char **ret_token);
/* S3's URI encoding: every byte but [A-Za-z0-9-._~] (and '/' if keep_slash)
 * as %XX, upper case.  0 or -ENAMETOOLONG. */
int s3_uri_encode(const char *in, bool keep_slash, char *out, size_t outlen);

/* One page of a ListObjectsV2 answer. */
struct s3_listing {
	char **keys;                   /* n keys, NULL-terminated when n > 0 */
	int64_t *sizes;                /* each key's Size (0 when absent) */
	int64_t *mtimes;               /* each key's LastModified, seconds (0 when absent) */
	size_t n;
	bool truncated;
	char *next_token;              /* set when truncated */
};
/* Parse xml (len bytes, no NUL needed): 0, or -EBADMSG for anything that is
 * not a well-formed ListBucketResult (a truncated one must carry its
 * NextContinuationToken), -ENOMEM. */
int s3_parse_listing(const char *xml, size_t len, struct s3_listing *out);
void s3_listing_destroy(struct s3_listing *l);
/* The <Code> of an S3 <Error> document, into out (outlen bytes); -EBADMSG when
 * there is none or it does not fit. */
int s3_error_code(const char *xml, size_t len, char *out, size_t outlen);

#endif
