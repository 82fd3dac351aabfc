/*
 * fs.h — the FUSE filesystem that shows one image read-only at a mountpoint
 * (FUSE low-level API), serving metadata from the mapped index and file
 * bytes through the cache.  It knows nothing of how chunks are stored.
 *
 * One struct fs per mount; all of them run on one loop (io_uring): the FUSE
 * device is polled through the ring and requests are handled on the loop's
 * thread; a read whose chunks must be fetched returns at once and is answered
 * from the loop when they arrive, so a waiting read holds no thread.
 */
#ifndef LAZYROOT_FS_H
#define LAZYROOT_FS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct loop;
struct cache;
struct store;
struct image;
struct image_profile;
struct fs;

struct fs_params {
	const char *mountpoint;
	const struct image *image;   /* borrowed; must outlive the fs */
	const char *index_hex;       /* the image's index name, for counters and fsname */
	/* image_pack_offsets() of the image when the store holds its pack
	 * ("packs/<index_hex>", store.h; borrowed, must outlive the fs): misses
	 * are read from the pack; NULL: from the chunk objects */
	const uint64_t *pack_offsets;
	struct store *store;         /* where misses are fetched from (borrowed) */
	struct cache *cache;         /* borrowed */
	struct loop *loop;           /* borrowed */
	bool allow_other;            /* default on: overlay and sandboxes use the mount */
	bool suid, dev;              /* honour setuid bits / device nodes (default off) */
	unsigned readahead_chunks;   /* sequential read-ahead window in chunks (0: none) */
	/* Serve every read through the daemon: no FUSE passthrough of wholly
	 * cached large files.  Passthrough costs an OPEN and a RELEASE round
	 * trip for every open of every file (see fs_open in fs.c). */
	bool no_passthrough;
	/* Never ask idle CPUs to poll while requests are being served (the
	 * CPU latency request in fs.c, "holding the CPUs awake"). */
	bool no_cpu_latency;
	/* ... held until this long after the last request (0: FS_CPU_HOLD_MS) */
	unsigned cpu_hold_ms;
	bool debug;                  /* FUSE debug output on stderr */
	/* Note the image's chunks in the order they are first read through this
	 * mount (fs_trace), hits and misses alike.  Implies no_passthrough: a
	 * file the kernel reads itself would go unseen. */
	bool record;
	/* An access profile of this image (borrowed; must outlive the fs), or
	 * NULL.  When a read touches a chunk at position p of a trace that leads
	 * (matched the most reads so far), positions p+1..p+profile_window of that
	 * trace are fetched into the cache (while several traces lead, only the
	 * chunks every one of them reads), at most
	 * profile_bytes of them queued or in flight and profile_inflight fetches
	 * at once (0: defaults), so that a reader's own misses find the store's
	 * transfers free.  Nothing is fetched before the first read.  A profile
	 * of another index, or one naming chunks the image lacks, is ignored
	 * with one warning. */
	const struct image_profile *profile;
	unsigned profile_window;
	uint64_t profile_bytes;
	unsigned profile_inflight;
};

#define FS_PROFILE_WINDOW 64
#define FS_PROFILE_BYTES (16ULL << 20)
#define FS_PROFILE_INFLIGHT 8
/* How long after its last request the daemon keeps idle CPUs polling (fs.c,
 * "holding the CPUs awake while serving"). */
#define FS_CPU_HOLD_MS 50

/* Mount the image at p->mountpoint and start serving on p->loop.  Returns once
 * the kernel mount exists; requests are answered as the loop runs. */
int fs_mount(const struct fs_params *p, struct fs **ret);
/* True once the kernel has ended the session (umount, fusermount3 -u). */
bool fs_finished(const struct fs *f);
/* The device number of the lazyroot mount at mountpoint (an absolute,
 * canonical path), read from /proc/self/mountinfo so that the filesystem
 * itself is not asked: -ENOENT when no lazyroot mount is there. */
int fs_find_mount(const char *mountpoint, dev_t *ret_dev);
/* With p->record: the chunk indices first read so far, in order (borrowed:
 * valid until the next request is served or the fs is freed). */
const uint32_t *fs_trace(const struct fs *f, size_t *ret_n);
/* Unmount if still mounted and free.  Runs the loop until the fs's reads in
 * flight are answered and its session has ended. */
void fs_free(struct fs *f);

#endif
