/*
 * store.h — chunk stores: one small asynchronous interface (get, head, put,
 * list) and its backends, picked by URL:
 *
 *   dir:/path or /path     files under a fan-out directory tree (an absolute
 *                          path; only store_create makes a missing one)
 *   http://… or https://…  an HTTP server that stores PUT bodies (nginx
 *                          WebDAV); see "HTTP" below
 *   s3://BUCKET[/PREFIX]   an S3-compatible object store; see "S3" below
 *   URL,URL,…              mirrors: see "Mirrors" below
 *
 * Keys are '/'-separated names: "chunks/<32 hex>", "indexes/<32 hex>",
 * "tags/<name>:<tag>", "signatures/<name>:<tag>" (the tag's signature: "Signed
 * tags" below), "profiles/<32 hex>" (the access profile of that index,
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
 * `autoindex on; autoindex_format json;` form (image ls lists tags/; store gc
 * and verify list every area, and gc also needs `dav_methods PUT DELETE MOVE`).
 * 404 and 410 are -ENOENT; other 4xx fail at once (401/403 -EACCES, the rest
 * -EPROTO); resets, timeouts, short bodies, 408, 429 and 5xx are retried
 * with exponential backoff and jitter (50 ms doubling up to 2 s) until the
 * operation's fetch timeout (store_set_fetch_timeout) ends, then fail with
 * the last error.  A refused connection (-ECONNREFUSED) and a host name that
 * does not resolve (STORE_ERR_RESOLVE, said "cannot resolve host name") are
 * retried for 2 s only: a retry seldom mends them, and a store that is not
 * there must fail in seconds, not at the fetch timeout.  Proxies: libcurl's usual variables
 * (http_proxy, https_proxy, no_proxy), which libcurl reads itself.  TLS: the
 * system's CA store, or the store options' CA file and directory.  Tuning:
 * the store options' transfers in flight per store handle (default 32:
 * measured against nginx on loopback, see docs/perf-log.md, "Remote store: HTTP"), connect timeout
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
 * with no keys anywhere requests go unsigned (public buckets), said once per
 * process on stderr.  A PUT carries
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
 * same way.  A mirror that failed is passed over by new objects for a
 * back-off (1 s, doubling to 60 s while its tries fail; store/mirror.c).
 * head and put go to the first mirror only: it is the one builds push to,
 * the others are read replicas.
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

#include <ctype.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

/* Whether r can be an S3 region name (letters, digits, '-', '_'; at most 64):
 * it is signed into every request, so anything else is refused up front.
 * Inline: the settings check it, and `run`'s static front links no store. */
static inline bool store_s3_region_valid(const char *r)
{
	if (!*r || strlen(r) > 64)
		return false;
	for (; *r; r++)
		if (!isalnum((unsigned char)*r) && *r != '-' && *r != '_')
			return false;
	return true;
}

/* The errno of a store host name that does not resolve: no errno means that,
 * so one that no store operation otherwise returns stands for it, and
 * store_strerror says it in words. */
#define STORE_ERR_RESOLVE (-EADDRNOTAVAIL)
/* strerror(-err), except for STORE_ERR_RESOLVE: "cannot resolve host name". */
const char *store_strerror(int err);

/* Open the store at url with o (NULL: defaults).  Logs its errors, one line
 * naming url.  A `dir:` store is an absolute path that exists (-ENOENT
 * otherwise); a URL scheme not listed above is -EPROTONOSUPPORT. */
int store_open_with(const char *url, const struct store_options *o, struct store **ret);
/* store_open_with, except that a `dir:` store that does not exist is made
 * (the first of a list of mirrors only): for the commands that publish into a
 * store (build, image copy's target), never for those that read one. */
int store_create(const char *url, const struct store_options *o, struct store **ret);
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

/* Whether ref, "name[:tag]", follows the OCI reference grammar (store/ref.c):
 * NULL if it does, else why not, a static sentence fragment for a message
 * such as "--tag 'X:1': not a valid reference: %s". */
const char *store_ref_invalid(const char *ref);
/* "name[:tag]" → key "tags/name:tag" (tag defaults to "latest").  -EINVAL
 * for a ref that store_ref_invalid refuses; -ENAMETOOLONG when out is short. */
int store_tag_key(const char *ref, char *out, size_t outlen);
/* Resolve REF — a tag "name[:tag]" or an index name (32 hex digits) — to the
 * index's name in hex (33 bytes with NUL). */
int store_resolve(struct store *s, const char *ref, char ret_hex[33]);
/* Whether ref is an index name (32 lower-case hex digits), which names an
 * image without a tag to read. */
bool store_is_index_name(const char *ref);
/* Fetch and open-check the index named hex (its bytes must hash to hex). */
int store_get_index(struct store *s, const char *hex, struct buf *out);
/* The index named hex, checked against its name like store_get_index, as a
 * read-only descriptor of the store's own file, to be mapped in place rather
 * than copied: a `dir:` store only.  -EOPNOTSUPP (not logged) from a store
 * that does not keep its objects as local files; other errors are logged. */
int store_open_index(struct store *s, const char *hex);

/* ---- signed tags (store/tagsig.c; image/FORMAT.md, "Signed tags") ----------- */

/*
 * A signed tag is the tag's own object and, beside it, "signatures/<name>:<tag>":
 * the tag's name, the SHA-256 of the index's bytes, a version that only grows,
 * when it was signed and when it expires, the signing key's id, and an
 * Ed25519 signature over all of them.  It is written after the tag's own
 * object, so a signature never names an index that is not in the store; a
 * reader that sees the tag moved and the signature not yet (or an old one)
 * finds the digest does not match and refuses the tag until it is.
 */
#define STORE_SIG_DEFAULT_EXPIRES_S (90 * 86400)  /* build --sign, image sign */
#define STORE_TAG_NAME_MAX 400    /* "name:tag" with its NUL: 255 + 1 + 128 + 1, rounded */
struct sign_key;
struct store_tag_sig {
	char tag[STORE_TAG_NAME_MAX];   /* "name:tag", the tag spelled out (":latest" too) */
	uint8_t digest[32];             /* SHA-256 of the index's bytes */
	uint64_t version;               /* at least 1 */
	int64_t signed_at, expires_at;  /* seconds since the epoch */
	uint8_t key_id[32];             /* SHA-256 of the signing key's public bytes */
	uint8_t sig[64];                /* Ed25519 over store_tag_sig_payload() */
};
/* "name[:tag]" → "signatures/name:tag"; errors as store_tag_key. */
int store_sig_key(const char *ref, char *out, size_t outlen);
/* "name[:tag]" → "name:tag" (":latest" when no tag is given); -EINVAL. */
int store_tag_name(const char *ref, char out[STORE_TAG_NAME_MAX]);
/* The bytes a signature covers (appended to out). */
int store_tag_sig_payload(const struct store_tag_sig *t, struct buf *out);
/* The signature object (JSON and a newline, appended to out). */
int store_tag_sig_encode(const struct store_tag_sig *t, struct buf *out);
/* Parse a signature object: 0, or -EBADMSG with *why a static phrase. */
int store_tag_sig_parse(const void *data, size_t len, struct store_tag_sig *t, const char **why);
/* Read ref's signature from s: 0; -ENOENT (not logged): the tag is
 * unsigned; other errors logged, naming the image and the store. */
int store_tag_sig_get(struct store *s, const char *ref, struct store_tag_sig *t);
/* 0 when t's signature is pub's over t's payload; -EBADMSG when not. */
int store_tag_sig_verify(const struct store_tag_sig *t, const uint8_t pub[32]);
/* Sign tag ref of s with k (a private key): the index it names now, the
 * version after the one the store's signature has (1 for none), expiring
 * expires_in seconds from now; written beside the tag.  ret (may be NULL)
 * gets what was signed.  Logs its errors, naming the image. */
int store_tag_sign(struct store *s, const char *ref, const struct sign_key *k,
                   int64_t expires_in, struct store_tag_sig *ret);

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

/* ---- the store's life: delete, move, scan, clock (store/GC.md) ------------ */

/*
 * What garbage collection needs of a store, on every backend:
 *
 *   delete   dir: unlink; http: DELETE (nginx: dav_methods … DELETE); s3: DELETE
 *   move     dir: rename (RENAME_NOREPLACE unless replacing); http: WebDAV MOVE with
 *            Overwrite: T or F (nginx: dav_methods … MOVE); s3: a server-side copy
 *            (x-amz-copy-source), then DELETE of the source: not atomic, see GC.md
 *   put_new  create only when absent (-EEXIST otherwise): dir: link of an unnamed
 *            file; s3: If-None-Match: * (Ceph RGW honours it); http: PUT under a
 *            temporary name, then MOVE with Overwrite: F (nginx ignores
 *            If-None-Match on PUT)
 *   scan     list with sizes and modification times by the store's clock: dir:
 *            stat; http: the mtime and size of nginx's JSON autoindex (whole
 *            seconds); s3: ListObjectsV2's Size and LastModified
 *   now      the store's clock, never the caller's: dir: the mtime of a file just
 *            written under the root; http and s3: the Date header of an answer
 *
 * Reads fall back to the aside area: a get (store_get, store_get_checked,
 * store_get_index, store_open_index) of "chunks/…", "indexes/…" or
 * "profiles/…" that finds nothing looks at "aside/<key>", where phase one of
 * a collection moves what it finds unreachable (store/GC.md).  head never
 * does: a builder's dedup check must see a chunk that was moved aside as
 * missing, and store it again.
 */

/* "aside/<key>": where a collection moves key; -ENAMETOOLONG. */
int store_aside_key(const char *key, char *out, size_t outlen);
/* Whether a read of key falls back to the aside area. */
bool store_key_has_aside(const char *key);

/* res: 0, -ENOENT when there was nothing to delete. */
int store_delete(struct store *s, const char *key, store_cb cb, void *ud);
int store_delete_sync(struct store *s, const char *key);
/* Move from to to: res 0, -ENOENT when from is missing, -EEXIST when to
 * exists and !replace (nothing moved). */
int store_move(struct store *s, const char *from, const char *to, bool replace, store_cb cb,
               void *ud);
int store_move_sync(struct store *s, const char *from, const char *to, bool replace);
/* Create key with data only when it does not exist: 0, or -EEXIST. */
int store_put_new_sync(struct store *s, const char *key, const void *data, size_t len);

struct store_entry {
	char *key;
	int64_t size;
	int64_t mtime;        /* seconds since the epoch by the store's clock */
};
/* Every key under prefix (a whole directory: "chunks/", "leases/"), sorted,
 * with its size and modification time.  Free with store_entries_free(). */
int store_scan_sync(struct store *s, const char *prefix, struct store_entry **ret, size_t *ret_n);
void store_entries_free(struct store_entry *e, size_t n);
/* The store's clock, in seconds since the epoch. */
int store_now_sync(struct store *s, int64_t *ret);

/* Run op for i in [0, n) with at most window operations in flight, driving s
 * (no loop set) until all completed; res[i] (may be NULL) gets each result.
 * op starts operation i on s with the callback and ud it is given, returning
 * -errno when it could not start.  Returns 0 or the first start failure. */
typedef int (*store_batch_op)(struct store *s, size_t i, store_cb cb, void *cb_ud, void *ud);
int store_batch(struct store *s, size_t n, unsigned window, store_batch_op op, void *ud,
                int64_t *res);

/* Parse an HTTP date ("Tue, 01 Dec 2026 17:21:29 GMT") or an ISO 8601 UTC time
 * ("2026-12-01T17:21:29.123Z"): seconds since the epoch, or -EINVAL. */
int store_parse_time(const char *s, size_t len, int64_t *ret);

/* ---- leases (store/lease.c, store/GC.md) ---------------------------------- */

/*
 * A lease is an object "leases/<kind>-<ttl>-<random>" that a builder (or a
 * copy, or a collector) writes before its first dedup check and deletes once
 * its tag is written.  A thread renews it (writes it again) every ttl/4
 * seconds; a collector counts it as ended once it is gone or its mtime is ttl
 * seconds old by the store's clock.  The holder checks, before it publishes,
 * that no more than ttl/2 seconds passed since it sent its last successful
 * renewal (its own monotonic clock: only the rates of the two clocks must
 * agree, not their readings), so that what it publishes lands while a
 * collector still counts it as live.  ttl must therefore exceed twice the
 * time a publishing put can take (the store's fetch timeout).
 *
 * A reader lease ("read", "leases/read-<ttl>-<random>-<index>") is held by a
 * node for each index it has mounted, for as long as the mount lives: a
 * collection keeps everything a live reader lease's index reaches.
 */
#define STORE_LEASE_TTL_DEFAULT 300
struct store_lease;
/* Write a new lease of kind ("build", "copy", "gc") in store s (the first
 * mirror of a list) and start renewing it, through a handle of its own
 * (store_reopen: s may be used on meanwhile).  Logs its errors. */
int store_lease_take(const struct store *s, const char *kind, unsigned ttl,
                     struct store_lease **ret);
/* One thread that writes and renews many reader leases (a node's, one per
 * mount): store_renewer_free() stops it, deletes the leases released and not
 * yet deleted, and frees the rest (which lapse).  Free every lease's user
 * first. */
struct store_renewer;
int store_renewer_new(struct store_renewer **ret);
void store_renewer_free(struct store_renewer *rn);
/* A reader lease holding index (32 hex digits; -EINVAL else) in store s,
 * written and renewed by rn: written at once, but this returns without
 * waiting for the store; a store that cannot be written (read-only access)
 * is logged there once, and retried.  End it with store_lease_release() or
 * store_lease_abandon(). */
int store_lease_take_read(struct store_renewer *rn, const struct store *s, unsigned ttl,
                          const char *index, struct store_lease **ret);
/* Renew now and check the lease is live: 0, or -ETIMEDOUT (logged) when it may
 * have lapsed. */
int store_lease_check(struct store_lease *l);
/* Without a request: whether less than ttl/2 passed since the last renewal. */
bool store_lease_live(const struct store_lease *l);
const char *store_lease_key(const struct store_lease *l);
/* Stop renewing, delete the lease object, free.  NULL is fine. */
void store_lease_end(struct store_lease *l);
/* Stop renewing and free, leaving the object to lapse after ttl: for a holder
 * that hands what it holds to a successor, which takes a lease of its own
 * (the two overlap).  NULL is fine. */
void store_lease_abandon(struct store_lease *l);
/* Stop renewing and delete the object from the renewing thread (the lease's
 * own, or its renewer), which then frees the lease: returns at once, without
 * waiting for the store (a daemon's loop ends its mounts' leases this way).
 * NULL is fine. */
void store_lease_release(struct store_lease *l);
/* From a lease key: its kind (into kind, kindlen bytes) and ttl; -EINVAL for
 * a key that is not a lease's. */
int store_lease_parse(const char *key, char *kind, size_t kindlen, unsigned *ret_ttl);
/* The index a reader lease's key holds, into hex: 0, or -EINVAL for a key that
 * is not a reader lease's. */
int store_lease_held_index(const char *key, char hex[33]);
/* Whether e (a listed lease) is live at store time t: less than its ttl (+1 s
 * for whole-second clocks) old; its kind into kind (kindlen bytes). */
bool store_lease_entry_live(const struct store_entry *e, int64_t t, char *kind, size_t kindlen);
/* The indexes the live reader leases of s hold now (sorted, unique; hex
 * names), and how many such leases there are: one listing of leases/ and a
 * reading of the store's clock.  Logs its errors. */
struct store_keys;
int store_leases_held(struct store *s, struct store_keys *ret_indexes, size_t *ret_leases);

/* ---- garbage collection (store/gc.c; the protocol and why it is safe: store/GC.md) */

#define STORE_GC_GRACE_DEFAULT 3600
/* The keys a collection must keep: every index, chunk, profile and pack that
 * a tag reaches.  The collector knows no image format: the caller marks. */
struct store_keys {
	char **v;              /* sorted, unique once store_keys_sort() ran */
	size_t n, cap;
};
int store_keys_add(struct store_keys *k, const char *key);
void store_keys_sort(struct store_keys *k);
bool store_keys_has(const struct store_keys *k, const char *key);
void store_keys_destroy(struct store_keys *k);

struct store_gc_params {
	int64_t grace;         /* seconds: only objects older move aside; phase two no sooner */
	bool dry_run;          /* count only: no lease, no record, nothing moved */
	bool wait;             /* wait for phase two instead of leaving it to a later run */
	unsigned lease_ttl;    /* the collector's own lease; 0: STORE_LEASE_TTL_DEFAULT */
	unsigned window;       /* operations in flight; 0: 32 */
	/* Fill keys (empty on entry) with what a tag reaches now.  Logs its errors;
	 * any failure stops the collection before it touches anything. */
	int (*mark)(struct store *s, void *ud, struct store_keys *keys);
	/* Add to keys what index hex reaches (itself and what it names): for the
	 * indexes reader leases hold.  -ENOENT: no such index (nothing to keep);
	 * other failures stop the collection.  NULL: a store with live reader
	 * leases is not collected (-EOPNOTSUPP). */
	int (*mark_index)(struct store *s, void *ud, const char *hex, struct store_keys *keys);
	void *mark_ud;
	/* Called between steps (may be NULL), e.g. for tests that kill the collector. */
	void (*step)(void *ud, const char *what);
};

struct store_gc_report {
	bool phase_one, phase_two;     /* which phases this run did */
	bool waiting;                  /* a collection waits for phase two */
	int64_t phase_two_at;          /* waiting: not before this (store clock) */
	uint64_t leases_waited;        /* waiting: leases seen in phase one still live */
	uint64_t live, live_bytes;     /* objects a tag reaches (phase one's or two's mark) */
	uint64_t held, held_bytes;     /* phase one: kept only because reader leases reach them */
	uint64_t readers;              /* live reader leases seen (the last mark) */
	uint64_t held_indexes;         /* indexes they hold that no tag reaches */
	uint64_t unreachable, unreachable_bytes;   /* found unreachable (any age) */
	uint64_t moved, moved_bytes;   /* phase one: moved aside (dry run: would be) */
	uint64_t restored;             /* phase two: brought back */
	uint64_t deleted, deleted_bytes; /* phase two: deleted (dry run: aside now) */
	uint64_t operations;           /* store operations made (scans count once) */
	double seconds;
};
/* Run what of a collection may run now (store/GC.md): finish the one in the
 * store when its phase two may run, else start one (phase one), and run its
 * phase two at once when nothing holds it back (no lease seen, grace 0) or
 * p->wait.  -EBUSY (logged) when another collector is at work. */
int store_gc(struct store *s, const struct store_gc_params *p, struct store_gc_report *ret);

/* ---- copying objects between stores (store/copy.c) --------------------------- */

struct store_copy_report {
	uint64_t objects;      /* asked for */
	uint64_t present;      /* the target had them (HEAD) */
	uint64_t copied, bytes;/* sent, and their bytes */
	uint64_t done;         /* finished so far (for progress) */
};
struct store_copy_params {
	unsigned window;       /* objects in flight; 0: 64 */
	bool skip_head;        /* the target is known to lack them all: no HEAD */
	/* Judge object i's bytes before they are sent: 0, or -errno (logged by it). */
	int (*check)(void *ud, size_t i, const struct buf *data);
	/* Called now and then, and once at the end (may be NULL). */
	void (*progress)(void *ud, const struct store_copy_report *r);
	void *ud;
};
/* Copy keys[0..n) from src to dst: each one the target lacks (a fresh HEAD of
 * the target), read from src, checked, written to dst, many at once.  Both
 * stores must be on one loop (store_set_loop), which this drives: free the
 * stores before the loop.  Stops at the first failure (logged, naming the
 * object). */
int store_copy_objects(struct store *src, struct store *dst, char *const *keys, size_t n,
                       const struct store_copy_params *p, struct store_copy_report *ret);

#endif
