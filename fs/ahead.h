/*
 * ahead.h — what a mount fetches before its readers ask: an access profile
 * followed, chunks read ahead of a sequential reader, and the chunks near a
 * miss on a slow store.  It knows the image and the cache, not FUSE: the
 * filesystem tells it what was read, and it starts cache fetches on the
 * same loop.  Single-threaded, like the loop it runs on.
 */
#ifndef LAZYROOT_FS_AHEAD_H
#define LAZYROOT_FS_AHEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cache;
struct cache_chunk;
struct image;
struct image_chunk;
struct image_profile;
struct store;
struct ahead;

/* The most chunks one miss fetches beside itself (ahead_near). */
#define AHEAD_NEAR_MAX 64

struct ahead_params {
	const struct image *image;      /* borrowed; must outlive the engine */
	const char *index_hex;          /* the image's index name (checked against a profile) */
	const char *name;               /* for messages (the mountpoint) */
	/* where the image's pack holds each chunk, or NULL (fs_params) */
	const uint64_t *pack_offsets;
	struct store *store;            /* borrowed */
	struct cache *cache;            /* borrowed */
	int slot;                       /* cache counter slot of the image, or -1 */
	bool record;                    /* note first reads in order (ahead_trace) */
	/* An access profile to follow, or NULL; window, bytes and inflight as
	 * in fs_params (0: the FS_PROFILE_* defaults). */
	const struct image_profile *profile;
	unsigned profile_window;
	uint64_t profile_bytes;
	unsigned profile_inflight;
	unsigned readahead_chunks;      /* sequential read-ahead window in chunks (0: none) */
	/* A read continues a sequential run when it starts at most this far
	 * from where the last one of its file ended (the kernel's async
	 * readahead may overtake). */
	uint64_t seq_slack;
};

/* A new engine.  A profile of another index, or one that names chunks the
 * image lacks, is ignored with one warning (not an error). */
int ahead_new(const struct ahead_params *p, struct ahead **ret);
/* Free; the caller has run the loop until ahead_busy() is false. */
void ahead_free(struct ahead *a);
/* Start no more prefetches (the mount is closing). */
void ahead_close(struct ahead *a);
/* True while prefetches it started have callbacks due (they hold a). */
bool ahead_busy(const struct ahead *a);
/* The counter slot, once the mount has one. */
void ahead_set_slot(struct ahead *a, int slot);

/* Chunk idx of the image (ic) as the cache wants it, with its place in the
 * image's pack when there is one. */
void ahead_chunk(const struct ahead *a, uint32_t idx, const struct image_chunk *ic,
                 struct cache_chunk *cc);
/* A read touches chunk idx: recorded, and the profile's windows move.
 * Prefetches start at the next ahead_pump(), after the read's own fetches.
 * True at idx's first touch (a bit per chunk; false too without memory for
 * it, or for an idx beyond the image).  Cost: O(traces holding idx × window). */
bool ahead_touch(struct ahead *a, uint32_t idx);
/* Start queued profile prefetches, oldest first, up to profile_inflight. */
void ahead_pump(struct ahead *a);
/* A read of [off, off+len) of file ino was started (ok: without error):
 * when it continues its file's sequential run, fetch the next
 * readahead_chunks chunks past it.  Cost: O(readahead_chunks + log extents). */
void ahead_read(struct ahead *a, uint64_t ino, uint64_t off, uint64_t len, bool ok);
/* For a miss on file ino of size bytes on a slow store: the chunks to fetch
 * beside it (the file's others when it is small enough to be read whole, and
 * for a small file the chunks built after it).  Returns how many were put in
 * near.  Cost: O(extents of the file). */
unsigned ahead_near(struct ahead *a, uint64_t ino, uint64_t size,
                    struct cache_chunk near[AHEAD_NEAR_MAX]);
/* With p.record: the chunk indices first read so far, in order (borrowed:
 * valid until the next ahead_touch or ahead_free). */
const uint32_t *ahead_trace(const struct ahead *a, size_t *ret_n);

#endif
