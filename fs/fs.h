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
struct fs;

struct fs_params {
	const char *mountpoint;
	const struct image *image;   /* borrowed; must outlive the fs */
	const char *index_hex;       /* the image's index name, for counters and fsname */
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
	bool debug;                  /* FUSE debug output on stderr */
};

/* Mount the image at p->mountpoint and start serving on p->loop.  Returns once
 * the kernel mount exists; requests are answered as the loop runs. */
int fs_mount(const struct fs_params *p, struct fs **ret);
/* True once the kernel has ended the session (umount, fusermount3 -u). */
bool fs_finished(const struct fs *f);
/* The device number of the lazyroot mount at mountpoint (an absolute,
 * canonical path), read from /proc/self/mountinfo so that the filesystem
 * itself is not asked: -ENOENT when no lazyroot mount is there. */
int fs_find_mount(const char *mountpoint, dev_t *ret_dev);
/* Unmount if still mounted and free.  Runs the loop until the fs's reads in
 * flight are answered and its session has ended. */
void fs_free(struct fs *f);

#endif
