/*
 * store.h — chunk stores: one small asynchronous interface (get, head, put,
 * list) and its backends, picked by URL:
 *
 *   dir:/path or /path     files under a fan-out directory tree
 *
 * Keys are '/'-separated names: "chunks/<32 hex>", "indexes/<32 hex>",
 * "tags/<name>:<tag>".  A backend maps them to its own layout (the dir
 * backend fans chunks out as chunks/ab/<hex>).  Writes are atomic and
 * idempotent: a reader sees a whole object or none.
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

#include <stddef.h>
#include <stdint.h>

struct buf;
struct store;

/* Default embedded store when neither --store nor LAZYROOT_STORE is given. */
#define STORE_DEFAULT_URL "dir:/var/lib/lazyroot/store"

int store_open(const char *url, struct store **ret);
/* Free a store with no operation pending (drive it with store_run() first). */
void store_free(struct store *s);
/* Deliver completions from loop l (borrowed; it must outlive the store) from
 * now on.  Set it before starting operations; -EBUSY when some are pending. */
struct loop;
int store_set_loop(struct store *s, struct loop *l);
/* The URL as given (borrowed). */
const char *store_url(const struct store *s);

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

#endif
