/*
 * store.h — chunk stores: one small asynchronous interface (get, head, put,
 * list) and its backends, picked by URL:
 *
 *   dir:/path or /path     files under a fan-out directory tree
 *   http://… or https://…  an HTTP server that stores PUT bodies (nginx
 *                          WebDAV); see "HTTP" below
 *   s3://BUCKET[/PREFIX]   an S3-compatible object store; see "S3" below
 *   URL,URL,…              mirrors: see "Mirrors" below
 *
 * Keys are '/'-separated names: "chunks/<32 hex>", "indexes/<32 hex>",
 * "tags/<name>:<tag>", "profiles/<32 hex>" (the access profile of that index,
 * image/FORMAT.md; replaced when pushed again), "packs/<32 hex>" (that
 * index's chunks in one object, image/FORMAT.md "Packs": `dir:` stores only,
 * see "Packs" below).  A backend maps them to its own layout (the dir
 * backend fans chunks out as chunks/ab/<hex>).  Writes are atomic and
 * idempotent: a reader sees a whole object or none.
 *
 * HTTP: the layout under the base URL is the dir backend's, so a dir store
 * served by any web server is a valid read-only HTTP store, and nginx WebDAV
 * (dav_methods PUT; create_full_put_path on) over a directory makes one that
 * a build can push to:
 *   BASE/chunks/ab/<hex>  BASE/indexes/<hex>  BASE/tags/<name>:<tag>
 *   BASE/profiles/<hex>
 * get is a GET (with Range when a part is asked for), head a HEAD (size from
 * Content-Length), put a PUT; list reads directory listings in nginx's
 * `autoindex on; autoindex_format json;` form (only tags are ever listed).
 * 404 and 410 are -ENOENT; other 4xx fail at once (401/403 -EACCES, the rest
 * -EPROTO); connection failures, resets, timeouts, short bodies, 408, 429 and
 * 5xx are retried with exponential backoff and jitter (50 ms doubling up to
 * 2 s) until the operation's fetch timeout (store_set_fetch_timeout) ends,
 * then fail with the last error.  Proxies: libcurl's usual variables
 * (http_proxy, https_proxy, no_proxy), which libcurl reads itself.  TLS: the
 * system's CA store, or the store options' CA file and directory.  Tuning:
 * the store options' transfers in flight per store handle (default 32:
 * measured against nginx on loopback, see bench/RESULTS.md), connect timeout
 * (default 5 s) and low-speed time (a transfer moving under 1 KiB/s this long
 * is dropped and retried; default 10 s).  docs/settings.md names the
 * settings and variables that fill the options.
 *
 * S3: the HTTP store's machinery (transfers, retries, timeouts, tuning, TLS
 * and proxy variables are the same) with path-style URLs
 * ENDPOINT/BUCKET/PREFIX/<the dir layout>, every request signed with SigV4
 * by libcurl.  From the store options: ENDPOINT the URL's own
 * (s3+http[s]://), else the options' endpoint, else
 * https://s3.REGION.amazonaws.com; REGION (default us-east-1); keys (and a
 * session token, sent as x-amz-security-token), else the profile (else
 * "default") of the shared credentials file (else HOME/.aws/credentials);
 * with no keys anywhere requests go unsigned (public buckets).  A PUT carries
 * the sha256 of its body, which the server checks.  list is ListObjectsV2
 * (pages of the options' s3_list_max_keys keys, default the server's 1000),
 * any prefix.  Status mapping as for HTTP, except that
 * 404 NoSuchBucket is -ENXIO, not a missing object; failures name the URL
 * and the server's error Code (log_detail), e.g. SignatureDoesNotMatch.
 * Ceph RGW: run beast with tcp_nodelay=1 (rgw frontends = beast … tcp_nodelay=1):
 * without it each answer on a kept-alive connection waits ~40 ms for the
 * client's delayed ACK, which made sequential reads 6-8x slower here.
 *
 * Mirrors: several store URLs joined by ',' (a URL that holds a ',' must
 * spell it %2C), read in order.  A get goes to the first mirror; when it
 * fails (after that mirror's own retries: 2 s at most for every mirror but the
 * last, which keeps the whole fetch timeout) or its bytes fail the caller's
 * check (store_get_checked), the next mirror serves it.  list fails over the
 * same way.  head and put go to the first mirror only: it is the one builds
 * push to, the others are read replicas.
 *
 * Asynchrony: an operation starts at once and its callback runs later from
 * store_run() (or store_run_once()) on the thread that drives the store; a
 * store handle is used by one thread at a time.  Callbacks may start new
 * operations.  The _sync wrappers start one operation and drive the store
 * until it completes.
 *
 * Loop mode (store_set_loop): callbacks run from the loop (loop_run_once on
 * the loop's thread) instead, so one io_uring loop drives the cache and the
 * stores; the dir backend then reads objects through the ring.  store_run()
 * and the _sync wrappers still work: they drive the loop (never call them
 * from inside a loop callback).
 */
#ifndef LAZYROOT_STORE_H
#define LAZYROOT_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct buf;
struct store;

/* Default embedded store when neither --store nor LAZYROOT_STORE is given. */
#define STORE_DEFAULT_URL "dir:/var/lib/lazyroot/store"

/* What remote stores need to know beyond their URL: the node's settings
 * (node/config.h) fill it; zeroed, every field is its default.  The store
 * reads it while it opens (strings are copied); store_reopen() needs it
 * again, so it must outlive the store. */
struct store_options {
	unsigned http_transfers;            /* in flight per handle; 0: 32 */
	uint64_t http_connect_timeout_ms;   /* 0: 5 s */
	uint64_t http_low_speed_time_ms;    /* 0: 10 s (whole seconds: libcurl's unit) */
	const char *tls_ca_file;            /* NULL: the system's CA store */
	const char *tls_ca_dir;
	const char *s3_endpoint;            /* http[s]://HOST[:PORT]; NULL: AWS's */
	const char *s3_region;              /* NULL: us-east-1 */
	const char *s3_access_key;          /* with s3_secret_key; NULL: from the file */
	const char *s3_secret_key;
	const char *s3_session_token;
	/* NULL: home/.aws/credentials, and no file there means no keys; named
	 * (or a profile named), the file and profile must exist */
	const char *s3_credentials_file;
	const char *s3_profile;             /* NULL: "default" */
	const char *home;                   /* NULL: no default credentials file */
	unsigned s3_list_max_keys;          /* keys per list page; 0: the server's */
};

/* Open the store at url with o (NULL: defaults).  Logs its errors. */
int store_open_with(const char *url, const struct store_options *o, struct store **ret);
/* store_open_with(url, NULL, ret). */
int store_open(const char *url, struct store **ret);
/* Another handle on the store s opened (same URL, same options), for another
 * thread. */
int store_reopen(const struct store *s, struct store **ret);
/* Free a store with no operation pending (drive it with store_run() first). */
void store_free(struct store *s);
/* Deliver completions from loop l (borrowed; it must outlive the store) from
 * now on.  Set it before starting operations; -EBUSY when some are pending. */
struct loop;
int store_set_loop(struct store *s, struct loop *l);
/* The URL as given (borrowed). */
const char *store_url(const struct store *s);

/* How long an operation of a remote store keeps retrying transient failures
 * before it fails (default STORE_DEFAULT_FETCH_TIMEOUT_MS); no-op for dir:. */
#define STORE_DEFAULT_FETCH_TIMEOUT_MS 30000
void store_set_fetch_timeout(struct store *s, uint64_t ms);

/* What a remote store did, counted with atomic adds (several daemons may
 * share one set: the cache keeps them in its stats file). */
struct store_counters {
	uint64_t requests;     /* HTTP requests made (retries included) */
	uint64_t retries;      /* requests repeated after a transient failure */
	uint64_t failovers;    /* objects a later mirror served after an earlier failed */
	uint64_t failures;     /* operations that failed for good (404 excluded) */
};
/* Count into c (borrowed; it must outlive the store) from now on; NULL: the
 * store's own counters again. */
void store_set_counters(struct store *s, struct store_counters *c);
const struct store_counters *store_get_counters(const struct store *s);

/* res: >= 0 on success (get: bytes; head: object size; put/list: 0), -errno:
 * -ENOENT when the object does not exist. */
typedef void (*store_cb)(void *ud, int64_t res);
/* data holds the object (or the range asked for); the callback may steal
 * data->data (set it to NULL) to keep it. */
typedef void (*store_get_cb)(void *ud, int64_t res, struct buf *data);
/* names: the keys found, each NUL-terminated; valid during the callback. */
typedef void (*store_list_cb)(void *ud, int64_t res, char **names, size_t n);

/* Read len bytes at off of key (len 0: to the end). */
int store_get(struct store *s, const char *key, uint64_t off, uint64_t len, store_get_cb cb,
              void *ud);
/* Judge the bytes a get returned before they are handed over: 0 to accept,
 * -errno to refuse them (-EBADMSG: wrong bytes).  It gets the get's ud, and
 * may keep what it derived from data (e.g. decoded bytes) in it.
 *
 * A check may also go on elsewhere (another thread): it takes data's bytes
 * (moves *data out, leaving it empty), returns STORE_CHECK_LATER, and gives
 * its verdict later, once, on the loop's thread, with
 * store_check_done(later, verdict, data), data being the bytes it took.
 * Meant for stores on a loop: without one, store_run() counts the get as
 * running until its verdict is in (drive it with store_run_once() then). */
struct store_check;
#define STORE_CHECK_LATER 1
typedef int (*store_check_fn)(void *ud, struct buf *data, struct store_check *later);
void store_check_done(struct store_check *later, int verdict, struct buf *data);
/* store_get, with the result checked by check: refused bytes make the next
 * mirror serve the object; when none is left (or there are no mirrors) cb
 * gets check's error. */
int store_get_checked(struct store *s, const char *key, uint64_t off, uint64_t len,
                      store_check_fn check, store_get_cb cb, void *ud);
int store_head(struct store *s, const char *key, store_cb cb, void *ud);
/* data is borrowed until the callback runs. */
int store_put(struct store *s, const char *key, const void *data, size_t len, store_cb cb,
              void *ud);
/* Keys under prefix (e.g. "tags/"), sorted. */
int store_list(struct store *s, const char *prefix, store_list_cb cb, void *ud);

/* Run callbacks of completed operations, waiting for at least one when any
 * is pending.  Returns the number run, or -errno. */
int store_run_once(struct store *s);
/* Drive until nothing is pending. */
int store_run(struct store *s);

int store_get_sync(struct store *s, const char *key, struct buf *out);
int64_t store_head_sync(struct store *s, const char *key);
int store_put_sync(struct store *s, const char *key, const void *data, size_t len);
/* Make every completed put durable: the barrier between a build's chunks and
 * the index that names them. */
int store_flush(struct store *s);
/* *ret_names: a NULL-terminated array, free with store_names_free(). */
int store_list_sync(struct store *s, const char *prefix, char ***ret_names, size_t *ret_n);
void store_names_free(char **names);

/* ---- images in a store ----------------------------------------------------- */

/* "name[:tag]" → key "tags/name:tag" (tag defaults to "latest").  Refuses
 * empty parts, "..", control characters and leading '/' (-EINVAL). */
int store_tag_key(const char *ref, char *out, size_t outlen);
/* Resolve REF — a tag "name[:tag]" or an index name (32 hex digits) — to the
 * index's name in hex (33 bytes with NUL). */
int store_resolve(struct store *s, const char *ref, char ret_hex[33]);
/* Fetch and open-check the index named hex (its bytes must hash to hex). */
int store_get_index(struct store *s, const char *hex, struct buf *out);
/* The index named hex, checked against its name like store_get_index, as a
 * read-only descriptor of the store's own file, to be mapped in place rather
 * than copied: a `dir:` store only.  -EOPNOTSUPP (not logged) from a store
 * that does not keep its objects as local files; other errors are logged. */
int store_open_index(struct store *s, const char *hex);

/* ---- packs ----------------------------------------------------------------- */

/*
 * A pack holds an image's chunks as the store holds them, back to back in the
 * order of the index's chunk table, so that a mount of a local store reads a
 * miss at an offset of one file it keeps open, instead of walking a path to a
 * file per chunk (image/FORMAT.md, "Packs").  It is an optional copy: every
 * chunk is still a chunks/ object, and a reader falls back to it when the pack
 * fails.  Only stores that keep objects as local files (`dir:`) write and
 * read packs: for a remote store a range of a pack costs the request a chunk
 * object costs.
 */

/* Whether s can write and read packs: a store that keeps objects as local
 * files (`dir:`). */
bool store_holds_packs(const struct store *s);
/* The size of the object at key in a store that keeps objects as local files:
 * -EOPNOTSUPP (not logged) from other stores, -ENOENT when missing. */
int64_t store_local_size(struct store *s, const char *key);
/* Write an object too large to hold in memory as a stream: a descriptor of a
 * new file (empty, read-write) that becomes key only at store_put_end() with
 * commit, made durable first and replacing any object there.  Without
 * commit, or when the end fails, nothing is left.  One streamed put of a key
 * per process at a time.  -EOPNOTSUPP (not logged) from stores other than
 * `dir:`. */
int store_put_begin(struct store *s, const char *key);
/* Closes *fd and sets it to -1, whatever the result. */
int store_put_end(struct store *s, const char *key, int *fd, bool commit);

#endif
