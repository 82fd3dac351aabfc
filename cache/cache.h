/*
 * cache.h — the node-local chunk cache: content-addressed by chunk name,
 * shared by every image and every daemon on the node, holding chunks
 * decompressed so that a hit is a plain read (a prefetch's chunks stay
 * compressed, staged, until their first read).
 *
 * Layout of a cache directory DIR:
 *   DIR/chunks/ab/<32 hex>   one file per chunk, exactly its bytes
 *   DIR/chunks/ab/<32 hex>.z a staged chunk: its zstd frame as the store holds
 *                            it (cache_stage), decoded, verified and written
 *                            as the chunk file at first use
 *   DIR/indexes/<32 hex>     image indexes, kept so that a remount needs no fetch
 *   DIR/files/<32 hex>       whole-file objects: one file's bytes, for FUSE
 *                            passthrough (cache_file_open); derived from chunks
 *   DIR/stats                shared counters (see struct cache_stats), mapped by
 *                            every daemon and by `lazyroot cache stats`
 *   DIR/lock                 daemons hold a shared flock on it while running
 *
 * Guarantees:
 *  - a chunk file becomes visible (linked into chunks/) only once it is whole
 *    and verified; a chunk's bytes are verified against its name before they
 *    are served, whether they came from the store or from disk, every time
 *    the file is read from the disk (a file this daemon wrote or checked may
 *    rot since); a mismatch is never served: the file is dropped, counted
 *    (verify_failures, corrupt), logged, and the chunk is fetched again;
 *  - a whole-file object is hashed against its recorded digest before it is
 *    handed out for a new passthrough registration, unless its pages stayed
 *    in memory since its last check (see cache_file_open);
 *  - a staged chunk is never served as it is: its bytes are decoded and
 *    verified like a fetched chunk's first; a staged object that fails is
 *    dropped, counted, and the chunk fetched from the store;
 *  - single flight: many readers of a missing chunk cause one fetch;
 *  - bounded: when the bytes held exceed the limit, the least recently used
 *    chunks are deleted; a reader never sees ENOSPC: when the cache disk is
 *    full, the chunk is served from memory and counted;
 *  - asynchronous: disk reads and writes go through the loop (io_uring); a
 *    read waiting for a fetch holds no thread.
 *
 * Thread-safety: a cache is used from its loop's thread only.
 */
#ifndef LAZYROOT_CACHE_H
#define LAZYROOT_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "store/store.h"

struct loop;
struct store;
struct cache;

#define CACHE_DEFAULT_DIR "/var/lib/lazyroot/cache"
#define CACHE_DEFAULT_LIMIT (10ULL << 30)
/* Chunks kept in memory while the cache disk is full, so that a node whose
 * disk filled up does not fetch the same hot chunks again on every read. */
#define CACHE_DEFAULT_MEMORY (256ULL << 20)

/* What the cache needs to know of a chunk (as the index records it). */
struct cache_chunk {
	uint8_t name[16];        /* XXH3-128 of the uncompressed bytes */
	uint32_t size;           /* uncompressed bytes */
	uint32_t stored_size;    /* bytes in the store */
	uint32_t flags;          /* CHUNK_ZSTD or 0 (lib.h) */
	/* in_pack: the store also holds the chunk at pack_off of the pack
	 * "packs/<pack in hex>" (store.h), which a fetch reads instead of the
	 * chunk object, falling back to that object when the pack's bytes fail */
	bool in_pack;
	uint8_t pack[16];
	uint64_t pack_off;
};

struct cache_params {
	const char *dir;
	uint64_t limit;          /* bytes of chunk files to keep at most */
	uint64_t memory_limit;   /* bytes of chunks held in memory when the disk is full */
	unsigned max_fetches;    /* store fetches in flight at once (0: a default) */
	/* cache_read_near(): a miss also fetches its neighbours when the fastest
	 * of the last CACHE_NEAR_WINDOW lone fetches took at least this long, in
	 * µs.  0: CACHE_DEFAULT_NEAR_US; UINT32_MAX: never. */
	uint32_t near_latency_us;
	/* Decoder threads: 0 one per CPU (at most 4); CACHE_NO_DECODERS: none,
	 * chunks are decoded on the loop's thread. */
	unsigned decoders;
	/* Bytes of chunk files kept in memory once read whole and verified, so
	 * that the reads of one chunk that follow each other pay one read and
	 * one hash, counted by their buffers' size classes (0: CACHE_DEFAULT_HOT);
	 * a burst of misses takes the least recently used of these buffers
	 * before it maps new ones. */
	uint64_t hot_limit;
};
#define CACHE_DEFAULT_HOT (4ULL << 20)
#define CACHE_NO_DECODERS UINT32_MAX

/*
 * How slow the store is: the least latency of the last CACHE_NEAR_WINDOW
 * fetches that started with no other fetch in flight.  Lone fetches, so that
 * time queued behind our own fetches does not count; the least, so that a
 * busy local disk (whose lone fetches took 0.2–24 ms, most under 2 ms, on
 * the shared test machine) is not taken for a store that makes every fetch
 * wait a round trip (10 ms through the benchmark's delaying proxy: never
 * under 10 ms).  Fetching guesses from such a disk only queues its reader
 * behind them.
 */
#define CACHE_NEAR_WINDOW 8
#define CACHE_DEFAULT_NEAR_US 5000

/* Fails with one logged line naming the directory and what went wrong. */
int cache_open(const struct cache_params *p, struct loop *loop, struct cache **ret);
/* Free a cache with no read in flight (drive the loop until they end). */
void cache_free(struct cache *c);
/* Whether nothing of c's own is in flight (a fetch, a chunk file being
 * written, a whole-file object being made): with no reader left either,
 * cache_free() then has nothing to wait for. */
bool cache_idle(const struct cache *c);

/* res: bytes copied (== len), or -EIO when the chunk cannot be fetched or
 * fails verification, or another -errno.  cache_read/cache_prefetch return
 * -EINVAL (and never call cb) for a range outside the chunk, -ENOMEM when the
 * request cannot even be queued. */
typedef void (*cache_cb)(void *ud, int res);

/*
 * Copy bytes [off, off+len) of chunk ch into dst, fetching the chunk from
 * store s on a miss.  dst must stay valid until cb runs; cb runs exactly once,
 * from the loop, never from inside this call.  image is the per-image counter
 * slot (cache_image_register) to charge the read to, or -1.
 */
int cache_read(struct cache *c, struct store *s, const struct cache_chunk *ch, uint32_t off,
               uint32_t len, void *dst, int image, cache_cb cb, void *ud);

/*
 * cache_read() for a reader that will likely want near[0..nnear) next (the
 * rest of its file; the chunks after a small file's in build order, which
 * hold the files beside it).  When ch is missing and the store is slow
 * (near_latency_us), the near chunks neither cached nor in flight are fetched
 * too, in parallel with ch and queued behind it, so that the reader finds
 * them cached instead of paying a round trip for each in turn; they count as
 * near_fetches.  On a fast store, or when ch is cached or in flight, this is
 * cache_read().  near is read during the call only.  Cost: at most nnear
 * extra fetches per miss.
 */
int cache_read_near(struct cache *c, struct store *s, const struct cache_chunk *ch, uint32_t off,
                    uint32_t len, void *dst, int image, const struct cache_chunk *near,
                    unsigned nnear, cache_cb cb, void *ud);
/* True when cache_read_near() would fetch neighbours now. */
bool cache_store_slow(const struct cache *c);
/* Chunks this cache fetched but could not write to its disk (full, failing):
 * served from memory, gone when the process ends. */
uint64_t cache_unkept(const struct cache *c);
/* Fetches of c not yet ended: a chunk's callback may come before its write
 * to disk ends (or fails, counting in cache_unkept()), so a count of what
 * was kept is final only once this is 0. */
unsigned cache_flights(const struct cache *c);

/* Make sure ch is in the cache (a fetch when missing; no copy).  Used for
 * read-ahead and `lazyroot cache prefetch`; cb gets 0 or -errno. */
int cache_prefetch(struct cache *c, struct store *s, const struct cache_chunk *ch, int image,
                   cache_cb cb, void *ud);
/* cache_prefetch() that keeps the chunk as the store holds it (compressed):
 * a staged chunk, decoded and verified only when a reader first needs it, so
 * that warming a whole image costs no decoding (a sandbox reads a few % of
 * it).  A chunk stored raw, or one a reader waits for meanwhile, is fetched
 * and written as by cache_prefetch().  cb gets 0 once the object is on disk
 * (or was already cached), or -errno; an object the disk had no room for
 * counts in cache_unkept(). */
int cache_stage(struct cache *c, struct store *s, const struct cache_chunk *ch, cache_cb cb,
                void *ud);
/* cache_readahead() for a chunk an access profile says will be read soon:
 * the same path (single flight, verified, decoded into the cache; a staged
 * chunk is decoded and a chunk file not yet checked by this daemon hashed),
 * counted as profile_fetches when it starts a fetch.  Returns 1 when it started a
 * fetch from the store (cb runs when it ends), 0 when the chunk was cached
 * or already loading (cb runs soon), or -errno (cb never runs).  The caller
 * bounds how many it keeps in flight: these fetches queue like a reader's. */
int cache_profile_prefetch(struct cache *c, struct store *s, const struct cache_chunk *ch,
                           int image, cache_cb cb, void *ud);
/* Count a read that found a profiled chunk fetched (late: still in flight). */
void cache_note_profile_hit(struct cache *c, bool late);
/* cache_prefetch() for a sequential reader: a chunk on disk that this daemon
 * has not verified yet (found by the scan at open) is read and hashed now, so
 * that the reads that follow find it verified instead of each waiting for its
 * own verification in turn.  cb gets 0 or -errno. */
int cache_readahead(struct cache *c, struct store *s, const struct cache_chunk *ch, int image,
                    cache_cb cb, void *ud);

/* ---- whole-file objects --------------------------------------------------- */

/* One piece of a file: len bytes from offset off of chunk ch. */
struct cache_piece {
	struct cache_chunk ch;
	uint32_t off, len;
};

/*
 * A file whose bytes are pieces[0..npieces) in order (no holes), as one
 * plain file on the cache disk, for a new FUSE passthrough registration:
 * made by this daemon just now, or re-hashed against its recorded digest for
 * this call (the kernel reads the registered file's pages from the disk
 * without us, so each registration starts on bytes checked then), or one
 * whose pages stayed in memory since its last check, its file unwritten
 * (the most recently registered, 256 MiB of them, stay mapped after their
 * check, and /proc/self/pagemap shows that no page of them was reclaimed,
 * so none read from the disk again: still the checked bytes; nothing is
 * locked).
 * Returns a read-only descriptor, borrowed: valid until control returns to
 * the loop (register it with the kernel, or dup it, at once).  Otherwise:
 *  -EINPROGRESS  the object on disk is being checked (hashing it takes a
 *            few ms per 10 MB, more when it must come from the disk):
 *            cb(ud, 0 or -errno) runs from the loop when that ends, and a
 *            call then gets the answer; only when cb is not NULL
 *            (-EBADMSG: it was corrupt, dropped and counted);
 *  -EAGAIN   the object is being made (or checked, cb NULL) on a worker
 *            thread now; a later call may succeed;
 *  -ENOENT   it cannot be made now: a chunk of it is not on the cache disk
 *            or make is false (nothing was started), or making it failed
 *            for good;
 *  -EINVAL, -ENOMEM.
 * An object is made when every chunk is on disk (each re-hashed as it is
 * copied), and one found on disk is re-hashed before each registration
 * (but for those whose pages stayed); neither blocks the loop (nor waits
 * for the other: an object is made while its file is served from the
 * chunks).  Cost on the loop: O(npieces), and a read of 8 bytes a page of
 * /proc/self/pagemap for one whose pages stayed (about 0.5 ms for 33 MB).
 */
int cache_file_open(struct cache *c, const struct cache_piece *pieces, unsigned npieces,
                    bool make, cache_cb cb, void *ud);
/*
 * For a caller about to share a registration it made from cache_file_open()
 * for these pieces with one more open: 0 when it may (nothing known against
 * the object); -EBADMSG when the object was found corrupt since: the kernel
 * would serve the new open the same bad bytes (and allows no other kind of
 * open beside a passthrough one), so the caller must refuse it.  When the
 * object was unlinked under the registration by another process (`cache
 * verify`, `cache trim`), its bytes are re-hashed through the descriptor
 * first: -EINPROGRESS, and cb(ud, 0 or -errno) runs when done (-EAGAIN with
 * cb NULL).  Cost on the loop: O(npieces) and an fstat.
 */
int cache_file_held(struct cache *c, const struct cache_piece *pieces, unsigned npieces,
                    cache_cb cb, void *ud);
/* Count an open that the kernel serves from a whole-file object. */
void cache_note_passthrough(struct cache *c);

/* Register a mounted image for per-image counters: its index name (hex), its
 * size in chunk bytes and the mountpoint.  Returns a slot, or -ENOSPC when all
 * slots are taken (the image is then not counted on its own). */
int cache_image_register(struct cache *c, const char *index_hex, uint64_t image_bytes,
                         const char *mountpoint);
void cache_image_unregister(struct cache *c, int slot);

/* ---- the shared counters ------------------------------------------------- */

#define CACHE_STATS_MAGIC 0x4c5a5253544154ULL  /* "LZRSTAT" */
#define CACHE_STATS_IMAGES 64
#define CACHE_LATENCY_BUCKETS 24               /* bucket i: fetches under 2^i * 16 µs */

struct cache_image_stats {
	int32_t pid;             /* the daemon serving it; 0: free slot */
	char index[33];
	char mountpoint[219];
	uint64_t image_bytes;    /* sum of the image's chunk sizes */
	uint64_t bytes_read;     /* distinct chunk bytes this mount has read */
	uint64_t chunks_read;    /* distinct chunks this mount has read */
	uint64_t bytes_served;   /* bytes handed to readers */
};

/* Counters only grow (except the gauges), updated with atomic adds so that
 * several daemons can share one file and readers need no lock. */
struct cache_stats {
	uint64_t magic;
	uint64_t version;
	uint64_t limit;                 /* gauge: the limit last set */
	uint64_t used;                  /* gauge: bytes of chunk files held
	                                   (staged objects included) */
	uint64_t inflight;              /* gauge: fetches in flight */
	uint64_t hits, misses;          /* reads served without / after a store fetch;
	                                   fetches = sum of fetch_latency */
	uint64_t fetched_bytes;         /* from stores, as stored (compressed) */
	uint64_t fetched_raw_bytes;     /* the same chunks, uncompressed */
	uint64_t served_bytes;
	uint64_t verify_failures;       /* chunks whose bytes did not match their name */
	uint64_t errors;                /* reads that failed (EIO and others) */
	uint64_t evictions, evicted_bytes;
	uint64_t memory_served;         /* chunks served from memory: cache disk full */
	uint64_t fetch_latency[CACHE_LATENCY_BUCKETS];
	uint64_t fetch_latency_sum_us;
	struct cache_image_stats images[CACHE_STATS_IMAGES];
	/* what the stores the daemons fetch from did: requests, retries of
	 * transient failures, mirror failovers, operations that failed for good */
	struct store_counters store;
	/* fetches cache_read_near() started for a miss's neighbours, not for a
	 * reader (appended: a file of an earlier daemon holds 0 here) */
	uint64_t near_fetches;
	/* whole-file objects (appended likewise): opens served by FUSE
	 * passthrough from one; objects made; objects that failed their check
	 * and were dropped */
	uint64_t passthrough_opens;
	uint64_t files_made;
	uint64_t file_failures;
	/* staged chunks (cache_stage; appended likewise): the gauges of staged
	 * objects on disk, and staged chunks decoded for a reader */
	uint64_t staged, staged_bytes;
	uint64_t staged_used;
	/* access profiles (appended likewise): fetches started by following a
	 * profile's trace; reads that found a chunk the profile had fetched
	 * (each chunk once per mount), or still in flight (the reader waited
	 * for less than a whole fetch) */
	uint64_t profile_fetches;
	uint64_t profile_hits;
	uint64_t profile_late;
	/* objects of the cache itself (chunk files, staged objects, whole-file
	 * objects) found corrupt, by a daemon reading them or by `cache
	 * verify`, and dropped (appended likewise): disk rot, which the store's
	 * failures in verify_failures are not */
	uint64_t corrupt;
};

/* Map DIR/stats read-only (for tools); -ENOENT when no daemon ever ran. */
int cache_stats_map(const char *dir, const struct cache_stats **ret);
void cache_stats_unmap(const struct cache_stats *st);

/* ---- maintenance (no daemon needed; safe while daemons run) --------------- */

/* Re-hash every chunk file and whole-file object, decode and hash every
 * staged object; delete those that fail.
 * ret_* may be NULL. */
int cache_verify(const char *dir, uint64_t *ret_checked, uint64_t *ret_dropped);
/* Delete whole-file objects, then least recently used chunk files and staged
 * objects, until at
 * most bytes remain. */
int cache_trim(const char *dir, uint64_t bytes, uint64_t *ret_freed);

#endif
