/*
 * cache-internal.h — what the cache's files share: the stats file, the walk
 * over chunk files, the shared-counter arithmetic, and the state of the
 * cache itself (entries, flights) that its core files work on.
 *
 * Shared counters are plain uint64_t fields of a MAP_SHARED file; every
 * update is an atomic read-modify-write so that several daemons and the
 * maintenance commands can update one file without a lock.
 */
#ifndef LAZYROOT_CACHE_INTERNAL_H
#define LAZYROOT_CACHE_INTERNAL_H

#include <sys/stat.h>
#include <zstd.h>

#include "cache/cache.h"
#include "lib/lib.h"

#define CACHE_STATS_VERSION 1
#define CACHE_CHUNK_NAME_LEN 32        /* hex digits */
#define CACHE_REL_LEN 38               /* "ab/" + 32 hex + ".z" + NUL */
#define CACHE_STAGED_SUFFIX ".z"       /* a staged chunk's file: its zstd frame */
#define CACHE_POOL_MAX (4U << 20)      /* chunk buffers above this are not pooled */
#define CACHE_POOL_CLASSES 13          /* 64 KiB, 96 KiB, 128 KiB ... CACHE_POOL_MAX */
#define CACHE_POOL_IDLE (16ULL << 20) /* idle chunk buffers kept for reuse */

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
/* No object being made or checked, and no result waiting to be taken (w may be NULL). */
bool wfiles_idle(const struct wfiles *w);
/* cache_file_open(); have(ud, ch): chunk ch is on the cache disk (have NULL:
 * make no object, use or check one there is). */
int wfiles_get(struct wfiles *w, const struct cache_piece *pieces, unsigned npieces,
               bool (*have)(void *ud, const struct cache_chunk *ch), void *ud, cache_cb cb,
               void *cb_ud);
/* cache_file_held() */
int wfiles_held(struct wfiles *w, const struct cache_piece *pieces, unsigned npieces,
                cache_cb cb, void *cb_ud);
/* Unlink least recently used objects while `used` exceeds limit or fewer
 * than need bytes were freed; returns the bytes freed. */
uint64_t wfiles_evict(struct wfiles *w, uint64_t limit, uint64_t need);
/* Re-hash object hex (of size bytes) in files_fd against its xattr:
 * 0, -EBADMSG on a mismatch, or another -errno. */
int cache_file_check(int files_fd, const char *hex, uint64_t size);
/* evict.c: evict while over the limit (after an object was linked). */
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

/* ---- cache.c, evict.c, fetch.c, write.c: the cache's state -------------------
 *
 * State (all owned by the loop's thread; no locks):
 *  - the entry table: every chunk file and staged object this daemon knows of
 *    (found by the scan at open, or written or seen since), keyed by name, on
 *    a disk LRU list (head = most recently used); plus chunks held in memory
 *    because the cache disk was full, on a memory LRU bounded by memory_limit;
 *  - the flight table: chunks being loaded (a file being verified, a fetch from
 *    the store, a cache file being written), each with the readers waiting for
 *    it, so that one load serves them all;
 *  - a queue of fetches beyond max_fetches.
 *
 * Invariants:
 *  - bytes reach a reader only from a buffer that was verified against the
 *    chunk's name in memory: a chunk file read whole and hashed (every time
 *    it is read from the disk, whoever wrote it: disks rot under files this
 *    daemon wrote too), or bytes that chunk_decode() verified (a staged
 *    object's bytes are only ever decoded into such a buffer); verified
 *    buffers stay in memory on the hot LRU (bounded by hot_limit) so that
 *    the reads of one chunk that follow each other pay one read and hash;
 *  - an entry is on the disk LRU while it has a chunk file or a staged
 *    object (entry_held); a staged object is dropped once its chunk file is
 *    being written, so that one name has one file (a crash in between leaves
 *    neither, or both: the scan at open then drops the staged one);
 *  - a name is in the flight table at most once; while it is, readers join it;
 *  - the shared `used` gauge moves only by what this process's own link or
 *    unlink changed (EEXIST on link / ENOENT on unlink: another daemon did it);
 *  - every callback runs from the loop, never from inside cache_read().
 *
 * Who does what:
 *   cache.c   the public read path, counters, images, open and free
 *   evict.c   the entry table, the disk and memory LRUs, eviction
 *   fetch.c   flights: verifying a chunk file, decoding a staged object,
 *             fetching from the store, serving the waiters
 *   write.c   writing a fetched chunk's file or staged object
 */

struct store;
struct store_check;

#define CACHE_FLIGHT_BUCKETS 1024

struct centry {
	uint8_t name[HASH_SIZE];
	uint32_t size;
	bool on_disk;                    /* a file chunks/ab/<hex> (as far as we know) */
	bool staged;                     /* a staged object chunks/ab/<hex>.z */
	uint32_t zsize;                  /* its bytes (size is 0 until known) */
	uint64_t last_bump;              /* now_ns() of the last mtime refresh */
	uint8_t *mem;                    /* held in memory (disk full), or NULL */
	uint8_t *hot;                    /* verified bytes of the chunk file, or NULL */
	struct centry *hnext;
	struct centry *lprev, *lnext;    /* disk LRU */
	struct centry *mprev, *mnext;    /* memory LRU */
	struct centry *tprev, *tnext;    /* hot LRU */
};

struct list {
	struct centry *head, *tail;
};

struct waiter {
	struct waiter *next;
	void *dst;                       /* NULL: a prefetch */
	uint32_t off, len;
	int image;
	cache_cb cb;
	void *ud;
};

enum flight_kind { FLIGHT_VERIFY, FLIGHT_FETCH, FLIGHT_STAGED };
/* Where cache_start_load() finds the chunk. */
enum load_from { LOAD_STORE, LOAD_FILE, LOAD_STAGED, LOAD_STAGE };

struct flight {
	struct cache *c;
	struct flight *hnext, *qnext;
	enum flight_kind kind;
	struct cache_chunk ch;
	struct store *store;             /* borrowed from the first reader */
	struct waiter *w_head, *w_tail;
	uint8_t *data;                   /* ch.size bytes; verified once `ready` */
	bool ready;                      /* joiners are served from data at once */
	bool fetched;                    /* the bytes came from the store: readers missed */
	bool alone;                      /* fetched with no other fetch in flight */
	bool stage;                      /* cache_stage(): keep the fetched bytes as
	                                    they are unless a reader waits */
	bool keep_raw;                   /* the check kept them: raw is written staged */
	const uint8_t *wbuf;             /* what the write path writes: data or raw */
	size_t wlen;
	size_t zlen;                     /* the staged object's size, being read */
	int fd;
	size_t done;                     /* bytes read or written so far */
	int fail;                        /* flight_fail_later(): the error */
	uint64_t t0;
	struct decode_job job;           /* decoding on a worker: f->raw into f->data */
	struct buf raw;                  /* the bytes the store returned, while decoded */
	struct store_check *later;       /* the store's check, waiting for the verdict */
	char hex[HASH_HEX_SIZE];
	char rel[CACHE_REL_LEN];
	char zrel[CACHE_REL_LEN];        /* the staged object's */
	char proc[64];                   /* /proc/PID/fd/N of the unnamed file */
};

/* Per-image distinct-chunk set: open addressing on the name's first 8 bytes. */
struct image_seen {
	uint8_t (*names)[HASH_SIZE];
	size_t n, cap;
};

struct cache {
	struct loop *loop;               /* borrowed */
	int dir_fd, chunks_fd, lock_fd;
	struct cache_stats *st;          /* DIR/stats, MAP_SHARED */
	uint64_t limit, memory_limit;
	unsigned max_fetches, fetching;
	uint64_t unkept;                 /* fetched chunks not written to disk */
	unsigned flights_live;           /* flights not yet freed (fetching or writing) */
	uint64_t pack_fallbacks;         /* chunks fetched from their object: the pack failed */
	uint32_t near_us;                /* cache_params.near_latency_us, resolved */
	uint32_t lat_us[CACHE_NEAR_WINDOW];  /* the last lone fetches' latencies, a ring */
	unsigned nlat;                   /* lone fetches recorded, up to the window */
	unsigned lat_next;
	pid_t pid;
	struct centry **buckets;
	size_t nbuckets, nentries;
	struct list lru, mlru, hlru;
	uint64_t mem_used;
	uint64_t hot_used, hot_limit;    /* bytes on the hot LRU, and its bound */
	struct cache_buf *pool_free[CACHE_POOL_CLASSES];  /* idle chunk buffers (pool.c) */
	uint64_t pool_idle, pool_idle_limit;
	struct flight *flights[CACHE_FLIGHT_BUCKETS];
	struct flight *fq_head, *fq_tail;  /* fetches waiting for a slot */
	ZSTD_DCtx *dctx;
	struct decoder *dec;             /* NULL: fetched chunks are decoded on the loop */
	struct image_seen *images[CACHE_STATS_IMAGES];  /* slots this daemon claimed */
	struct wfiles *wf;               /* whole-file objects (files.c) */
};


static inline uint64_t name_key(const uint8_t name[HASH_SIZE])
{
	uint64_t k;

	memcpy(&k, name, sizeof(k));
	return k;
}

static inline bool entry_held(const struct centry *e)
{
	return e->on_disk || e->staged;
}

/* pool.c: chunk buffers.  Every buffer that holds a chunk's bytes (a
 * flight's data, the hot and memory LRUs') comes from cache_buf_get() and
 * goes back through cache_buf_put(), never free(). */
/* NULL without memory; at least size bytes. */
uint8_t *cache_buf_get(struct cache *c, uint64_t size);
/* The bytes a buffer really holds (its class's), for the LRUs' bounds. */
uint64_t cache_buf_cap(uint8_t *data);
/* data may be NULL. */
void cache_buf_put(struct cache *c, uint8_t *data);
void cache_pool_destroy(struct cache *c);

/* evict.c */
struct centry *cache_entry_find(struct cache *c, const uint8_t name[HASH_SIZE]);
/* NULL without memory; the new entry is on no list. */
struct centry *cache_entry_add(struct cache *c, const uint8_t name[HASH_SIZE], uint32_t size);
void cache_entry_drop_mem(struct cache *c, struct centry *e);
/* Keep *data (e->size verified bytes of e's chunk file) on the hot LRU,
 * taking it, dropping the least recently used others to stay within
 * hot_limit; leaves *data alone when it does not fit at all. */
void cache_hot_insert(struct cache *c, struct centry *e, uint8_t **data);
void cache_entry_drop_hot(struct cache *c, struct centry *e);
/* Take the buffer (of min_cap to max_cap bytes) of one of the least
 * recently used hot entries, dropping it from the hot LRU; NULL when none
 * of the last few fits.  For cache_buf_get(). */
uint8_t *cache_hot_take(struct cache *c, uint64_t min_cap, uint64_t max_cap);
void cache_entry_remove(struct cache *c, struct centry *e);
void cache_chunk_rel(const uint8_t name[HASH_SIZE], char rel[CACHE_REL_LEN]);
void cache_staged_rel(const uint8_t name[HASH_SIZE], char rel[CACHE_REL_LEN]);
void cache_entry_unlink(struct cache *c, struct centry *e, bool eviction);
void cache_evict(struct cache *c, uint64_t need);
/* Keep *data (size bytes of chunk name) in memory, taking it; leaves *data
 * alone when it does not fit in memory_limit at all. */
void cache_mem_insert(struct cache *c, const uint8_t name[HASH_SIZE], uint32_t size,
                      uint8_t **data);
void cache_staged_drop(struct cache *c, struct centry *e);

/* fetch.c */
int cache_complete_later(struct cache *c, cache_cb cb, void *ud, int res);
void cache_waiter_fail(struct cache *c, struct waiter *w, int res);
struct flight **cache_flight_slot(struct cache *c, const uint8_t name[HASH_SIZE]);
void cache_flight_free(struct flight *f);
int cache_start_load(struct cache *c, struct store *s, const struct cache_chunk *ch,
                     struct waiter *w, enum load_from from);

/* write.c */
void cache_write_start(struct flight *f);

/* cache.c */
void cache_count_served(struct cache *c, const struct cache_chunk *ch, uint32_t len, int image,
                        bool hit);
void cache_count_latency(struct cache *c, uint64_t ns, bool alone);

#endif
