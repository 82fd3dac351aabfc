/*
 * fs.h — the FUSE filesystem that shows one image read-only at a mountpoint
 * (FUSE low-level API), serving metadata from the mapped index and file
 * bytes through the cache.  It knows nothing of how chunks are stored.
 *
 * One struct fs per mount; all of them run on one loop (io_uring): the FUSE
 * device is polled through the ring and requests are handled on the loop's
 * thread; a read whose chunks must be fetched returns at once and is answered
 * from the loop when they arrive, so a waiting read holds no thread.
 *
 * A mount outlives the process serving it when another holds its /dev/fuse
 * descriptor and state file (the node's holder): fs_adopt() in a new process
 * takes the connection over, and fs_leave() hands it on.
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
	 * CPU latency request of fs/session.c, "holding the CPUs awake"). */
	bool no_cpu_latency;
	/* ... held until this long after the last request (0: FS_CPU_HOLD_MS) */
	unsigned cpu_hold_ms;
	bool debug;                  /* FUSE debug output on stderr */
	/* Note the image's chunks in the order they are first read through this
	 * mount (fs_trace), hits and misses alike.  Implies no_passthrough: a
	 * file the kernel reads itself would go unseen. */
	bool record;
	/* fs_adopt only: the connection's mount was detached by an earlier
	 * worker (unmounted while in use): nothing is mounted at mountpoint for
	 * it (another mount may be), so it is never looked up, unmounted or
	 * aborted by path; it is served as closing until its last user lets
	 * go (fs_unmount_done). */
	bool detached;
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
	/* The connection's state file (fs_state_new()), or 0 or -1 for none
	 * (a mount nobody takes over; 0 so that a zeroed fs_params means none,
	 * a state file is never standard input): what a later
	 * worker needs to take the connection over (the kernel's INIT request
	 * as it came, directory parents, the opens the kernel holds with their
	 * passthrough backing ids), written as the fs serves.  Borrowed: the
	 * caller (the node's holder) keeps it open. */
	int state_fd;
};

/* What fs_get_status() reports of one mount. */
struct fs_status {
	uint64_t requests;           /* requests read by this fs */
	uint64_t resends;            /* FUSE_NOTIFY_RESEND sent (one per takeover) */
	uint32_t open_files;         /* opens the kernel holds that the fs counts
	                              * (those of passthrough candidates, when
	                              * passthrough is on; 0 otherwise) */
	bool adopted;                /* taken over from an earlier worker */
	/* what the mount's readers read, counted by this fs since it started
	 * serving (a worker taking the mount over starts again from 0) */
	uint64_t image_bytes;        /* sum of the image's chunk sizes */
	uint64_t bytes_served;       /* bytes answered to READs */
	uint64_t chunks_read;        /* distinct chunks READs touched */
	uint64_t bytes_read;         /* their sizes summed */
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
/* fs_find_mount(), and -EBUSY (*ret_dev set) when another mount, of any
 * type, has been made over that lazyroot mount. */
int fs_find_mount_on_top(const char *mountpoint, dev_t *ret_dev);
/* Whether the mount of device dev is the one on top at mountpoint, from one
 * statx that takes the root's attributes as cached (AT_STATX_DONT_SYNC): no
 * request to the filesystem, so its own loop may ask.  false says nothing
 * more (gone, covered, or the path unreachable): ask fs_find_mount(). */
bool fs_on_top(const char *mountpoint, dev_t dev);
/* 1 when another mount has been made over f's at its mountpoint (what, n
 * bytes, gets that one's type and source), 0 when f's is on top or no longer
 * mounted, or -errno.  Unmounting goes by path, so a covered mount cannot be
 * unmounted without taking the other with it: fs_unmount() leaves both, and
 * the caller ends the connection instead (fs_leave(), every descriptor of it
 * closed: the mount stays below the other, its readers get ENOTCONN). */
int fs_covered(const struct fs *f, char *what, size_t n);
/* With p->record: the chunk indices first read so far, in order (borrowed:
 * valid until the next request is served or the fs is freed). */
const uint32_t *fs_trace(const struct fs *f, size_t *ret_n);
/* A new, empty state file (a memfd) for fs_params.state_fd.  Returns an fd
 * (O_CLOEXEC) or -errno. */
int fs_state_new(void);
/* The /dev/fuse descriptor of f's connection (borrowed: valid until fs_free
 * or fs_leave).  While any process holds a copy of it the mount stays alive,
 * and requests wait in the kernel for the next worker. */
int fs_fuse_fd(const struct fs *f);
/* Serve an existing connection: *fuse_fd is a /dev/fuse descriptor of a
 * mount made by fs_mount() (in this process or a dead one) at p->mountpoint,
 * p->state_fd its state file.  Restores the negotiated INIT and the open
 * state, then has the kernel resend every request the previous worker read
 * but did not answer (FUSE_NOTIFY_RESEND).  Takes *fuse_fd, on failure too
 * (sets it to -1).  Errors: -ENOTCONN, the state file holds no INIT (the
 * connection never had one answered); -EOPNOTSUPP, the kernel cannot resend
 * (before Linux 6.9: a request the dead worker read would never be
 * answered); -ESTALE, the state file is another image's.  On any error end
 * the connection with fs_abort_mount() (its readers get ENOTCONN, none
 * waits forever) and mount again. */
int fs_adopt(const struct fs_params *p, int *fuse_fd, struct fs **ret);
/* Stop serving f without unmounting: read no more requests, run the loop
 * until replies under way have gone out, free f.  The mount and connection
 * stay for the next worker, to which the kernel resends what is unanswered. */
void fs_leave(struct fs *f);
/* End a connection that nobody will serve: detach the lazyroot mount at
 * mountpoint and abort its connection (readers get ENOTCONN, nothing
 * hangs).  -ENOENT when no lazyroot mount is there; -EBUSY, touching
 * nothing, when another mount is over it (it may be alive: the path shows
 * the other mount). */
int fs_abort_mount(const char *mountpoint);
void fs_get_status(const struct fs *f, struct fs_status *ret);
/* Unmount if still mounted and free.  Runs the loop until the fs's reads in
 * flight are answered and its session has ended. */
void fs_free(struct fs *f);
/* fs_free() in two halves, for a caller that must not wait for a mount still
 * in use: fs_unmount() detaches the mount and aborts its connection where
 * fusectl is mounted, and returns; requests are served meanwhile.  Once
 * fs_unmount_done(), fs_free() returns at once.  Without fusectl a detached
 * mount in use stays alive until its last user lets go. */
void fs_unmount(struct fs *f);
bool fs_unmount_done(const struct fs *f);
/* Whether the kernel still sends f requests (its connection has not ended). */
bool fs_connected(const struct fs *f);

#endif
