/*
 * cache-internal.h — what the cache's files share: the stats file, the walk
 * over chunk files, and the shared-counter arithmetic.
 *
 * Shared counters are plain uint64_t fields of a MAP_SHARED file; every
 * update is an atomic read-modify-write so that several daemons and the
 * maintenance commands can update one file without a lock.
 */
#ifndef LAZYROOT_CACHE_INTERNAL_H
#define LAZYROOT_CACHE_INTERNAL_H

#include <sys/stat.h>

#include "cache/cache.h"
#include "lib/lib.h"

#define CACHE_STATS_VERSION 1
#define CACHE_CHUNK_NAME_LEN 32        /* hex digits */
#define CACHE_REL_LEN 38               /* "ab/" + 32 hex + ".z" + NUL */
#define CACHE_STAGED_SUFFIX ".z"       /* a staged chunk's file: its zstd frame */

static inline void stat_add(uint64_t *field, uint64_t v)
{
	__atomic_add_fetch(field, v, __ATOMIC_RELAXED);
}

/* Subtract, stopping at zero: gauges are recomputed now and then, and a
 * subtraction racing a recomputation must not wrap around. */
static inline void stat_sub(uint64_t *field, uint64_t v)
{
	uint64_t old = __atomic_load_n(field, __ATOMIC_RELAXED), new;

	do
		new = old > v ? old - v : 0;
	while (!__atomic_compare_exchange_n(field, &old, new, false, __ATOMIC_RELAXED,
	                                    __ATOMIC_RELAXED));
}

/* Open (creating when missing) DIR/stats for writing and map it shared.
 * reset: this process is alone on DIR (it holds the exclusive lock), so it
 * may reinitialise a file of another version and clear the gauges. */
int cache_stats_open_rw(int dir_fd, bool reset, struct cache_stats **ret);
void cache_stats_unmap_rw(struct cache_stats *st);

/* One chunk file found by cache_scan: rel is "ab/<hex>" (or "ab/<hex>.z",
 * staged) relative to chunks/. */
struct cache_file {
	uint8_t name[HASH_SIZE];
	char rel[CACHE_REL_LEN];
	uint64_t size;
	int64_t mtime;
	bool staged;
};

/* Call fn for every chunk file and staged object under chunks_fd (names that
 * are not 32 lowercase hex digits, with ".z" for a staged one, in the right
 * fan-out directory are skipped).  Stops at the first
 * negative return of fn and returns it. */
int cache_scan(int chunks_fd, int (*fn)(void *ud, const struct cache_file *f), void *ud);

/* Call fn for every whole-file object under files_fd (rel: its hex name). */
int cache_scan_files(int files_fd, int (*fn)(void *ud, const struct cache_file *f), void *ud);

/* What a scan found, in a growable array: cache_files_add() is a callback for
 * cache_scan() and cache_scan_files(); free v when done. */
struct cache_files {
	struct cache_file *v;
	size_t n, cap;
	uint64_t total;                 /* bytes */
};
int cache_files_add(void *ud, const struct cache_file *f);
/* Oldest first (by mtime).  Cost: O(n log n). */
void cache_files_sort(struct cache_files *l);

/* ---- files.c: whole-file objects ----------------------------------------- */

/* The xattr holding the XXH3-128 of a whole-file object's bytes. */
#define CACHE_FILE_XATTR "user.lazyroot.xxh128"

struct wfiles;
/* Open DIR/files (creating it) and learn the objects there; alone: this
 * process holds DIR's exclusive lock and has just recounted `used`.  No
 * object larger than limit / 8 is made. */
int wfiles_new(struct cache *c, struct loop *loop, int dir_fd, int chunks_fd, uint64_t limit,
               struct cache_stats *st, bool alone, struct wfiles **ret);
/* Stop the worker, taking the results it posted (runs the loop). */
void wfiles_free(struct wfiles *w);
/* cache_file_open(); have(ud, ch): chunk ch is on the cache disk (have NULL:
 * make no object, use or check one there is). */
int wfiles_get(struct wfiles *w, const struct cache_piece *pieces, unsigned npieces,
               bool (*have)(void *ud, const struct cache_chunk *ch), void *ud, cache_cb cb,
               void *cb_ud);
/* Unlink least recently used objects while `used` exceeds limit or fewer
 * than need bytes were freed; returns the bytes freed. */
uint64_t wfiles_evict(struct wfiles *w, uint64_t limit, uint64_t need);
/* Re-hash object hex (of size bytes) in files_fd against its xattr:
 * 0, -EBADMSG on a mismatch, or another -errno. */
int cache_file_check(int files_fd, const char *hex, uint64_t size);
/* cache.c: evict while over the limit (after an object was linked). */
void cache_evict_over(struct cache *c);

/* ---- decode.c: decoding and verifying fetched chunks on worker threads ---- */

struct loop;
struct decoder;
struct decode_job {
	struct decode_job *next;
	/* chunk_decode()'s arguments; in and out stay valid until done() */
	const uint8_t *name;
	uint32_t flags, size;
	const void *in;
	size_t inlen;
	void *out;
	bool urgent;                            /* a reader waits: ahead of the others */
	int res;                                /* chunk_decode()'s result */
	void (*done)(struct decode_job *j);     /* runs on the loop's thread */
};

/* Jobs run in submission order, except that urgent ones go ahead of those
 * that are not (a reader waiting before prefetches).
 * Start threads workers (0: one per CPU, at most 4: a reader waiting for a
 * window of readahead leaves its CPU to them) whose results come back
 * through loop.  Loop thread only, like submit. */
int decoder_new(struct loop *loop, unsigned threads, struct decoder **ret);
void decoder_submit(struct decoder *d, struct decode_job *j);
/* Stop and join the workers.  Jobs still out never see done(): free the
 * decoder only when none is (drive the loop until loop_pending() is 0). */
void decoder_free(struct decoder *d);

#endif
