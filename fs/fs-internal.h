/*
 * fs-internal.h — what the files of the filesystem share (fs.h is the
 * public face): the limits and protocol numbers, struct fs, and the
 * functions one file of fs/ calls in another.
 *
 *   ops.c      metadata requests (lookup, getattr, readdir, xattrs…) and the op table
 *   open.c     OPEN and RELEASE: the opens the kernel holds, FUSE passthrough
 *   read.c     READ and LSEEK: a read's pieces through the cache
 *   ahead.c    prefetching: profiles, sequential read-ahead, near chunks (no FUSE)
 *   session.c  the connection: its I/O hooks, the loop, INIT, takeover, resend
 *   state.c    the connection's state file, which outlives a worker
 *   mount.c    mounting, unmounting, the mount's kernel settings
 */
#ifndef LAZYROOT_FS_INTERNAL_H
#define LAZYROOT_FS_INTERNAL_H

#define FUSE_USE_VERSION 314

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <linux/fuse.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>

#include "cache/cache.h"
#include "fs/ahead.h"
#include "fs/fs.h"
#include "image/image.h"
#include "lib/lib.h"
#include "lib/loop.h"

/* Entry and attribute timeouts in seconds: nothing in an image ever changes. */
#define FS_TIMEOUT 1e9
/* The largest read the kernel sends us.  libfuse derives max_pages from
 * max_write; 1008 KiB rather than the kernel's 1 MiB limit because a reply
 * spliced from a file needs a pipe of request + 3 pages, and 1 MiB + 3 pages
 * exceeds the default pipe-max-size: larger requests would be copied. */
#define FS_MAX_REQUEST (1008 * 1024)
/* Background requests (readahead, async reads) the kernel keeps in flight. */
#define FS_MAX_BACKGROUND 64
/* The mount's readahead window, set through its bdi once mounted.  A page
 * fault in a mapped file (a program's text) reads a whole window around the
 * page, and the faulting reader waits for the window's middle: a wide window
 * fetches and decodes chunks that a program start never touches.  Sequential
 * read() of chunks in the node cache took as long at 256 KiB as at 4 MiB
 * (docs/perf-log.md, "Cold misses: exact pack reads, a decoder per CPU, a 512 KiB window"). */
#define FS_READ_AHEAD_KB 512
/* A read continues a sequential run when it starts at most this far past
 * where the last one ended: the kernel's async readahead may overtake. */
#define FS_SEQ_SLACK (2 * FS_MAX_REQUEST)
/* The INIT flag (protocol 7.40, kernel 6.12) by which a server lets the kernel
 * make idmapped mounts of its filesystem; bit 40, sent in flags2 beside
 * FUSE_INIT_EXT.  Debian 12's <linux/fuse.h> (7.38) and libfuse 3.14 lack it. */
#define FS_FUSE_ALLOW_IDMAP (1ull << 40)
/* FUSE passthrough (protocol 7.40, kernel 6.9; Debian 12's <linux/fuse.h> has
 * 7.38): the INIT flag (bit 37, in flags2), the open flag, and the device
 * ioctls that register a backing file and drop it.  fuse_open_out's padding
 * became backing_id and fuse_init_out's first unused word max_stack_depth;
 * both structs kept their sizes. */
#define FS_FUSE_PASSTHROUGH (1ull << 37)
#define FS_FOPEN_PASSTHROUGH (1u << 7)
struct fs_backing_map {
	int32_t fd;
	uint32_t flags;
	uint64_t padding;
};
#define FS_DEV_IOC_BACKING_OPEN _IOW(229, 1, struct fs_backing_map)
#define FS_DEV_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)
/* Files this large and up are served by passthrough once wholly cached;
 * smaller ones gain nothing worth an object on disk. */
#define FS_PT_MIN (1 << 20)
/* After a read reaches the end of a passthrough candidate, the object is
 * asked for once no READ has come for FS_PT_DELAY_NS (the chunks just
 * fetched are still being written when the read is answered, and making an
 * object copies and re-hashes the whole file: during a start that CPU is
 * taken from the workload on a 2-core node, and the first passthrough open
 * of each file drops its FUSE pages; a program started again at once reads
 * those pages: 100 ms against 1 s, 20 interleaved rounds of a cold gcc start
 * then a warm one, medians: cold 196.9 -> 184.5 ms, warm 51.5 -> 50.3 ms,
 * native 128.3 and 48.4), but
 * not later than FS_PT_LATEST_NS after the read, so that a mount that is
 * never idle still gets its objects. */
#define FS_PT_DELAY_NS (1000ULL * 1000000)
#define FS_PT_LATEST_NS (2000ULL * 1000000)
/* While it serves requests the daemon holds a CPU wake-up latency request of
 * 0 µs (PM QoS, /dev/cpu_dma_latency, as network drivers do while traffic
 * flows): idle CPUs then poll instead of halting.  On a VM that halts idle
 * vCPUs, every request and every reply that lands on a halted CPU waits for
 * the host to run it again (30-60 µs a hop, measured on the project's VMs), and a warm program
 * start sends an OPEN and a RELEASE for every file it opens: here an open
 * and close of a file through an overlay took 100-120 µs with the reader
 * pausing between files, 24-29 µs with the request held.  The request is let
 * go once no request has come for cpu_hold_ms, so an idle node halts its
 * CPUs as before.  Root only (the device is 0600); off with no_cpu_latency. */
#define FS_CPU_HOLD_NS(f) ((uint64_t)(f)->p.cpu_hold_ms * 1000000)
#define FS_CPU_LATENCY_ANY 2000000000   /* the kernel's default: no constraint */
/* fi->fh of an open: whether the daemon counts it, and how it is served. */
#define FS_FH_UNTRACKED 0
#define FS_FH_CACHED 1
#define FS_FH_PASSTHROUGH 2
/* Reply buffers of FS_MAX_REQUEST bytes kept for reuse.  malloc hands out
 * buffers this large as fresh mappings: each 1 MiB read then faulted in and
 * zeroed 256 pages, and a cold sequential read of cc1 spent a third of the
 * daemon's time doing so.  Sixteen cover the readahead window in flight. */
#define FS_SPARE_BUFS 16
/* FUSE_NOTIFY_RESEND (protocol 7.40, kernel 6.9): the kernel puts every
 * request that was read from the connection but not answered back in its
 * queue, to be read again (with bit 63 of its id set).  FUSE_HAS_RESEND
 * (bit 39, flags2 of the kernel's INIT) says the kernel knows it. */
#define FS_FUSE_NOTIFY_RESEND 7
#define FS_FUSE_HAS_RESEND (1ull << 39)

/*
 * The connection's state file: the facts a later worker needs to serve a
 * connection it did not open, written as they change, in memory the holder
 * keeps (a memfd) or, for a mount nobody will take over, anonymous memory.
 * Layout: this header in the first page; the parent map (a uint32 per
 * inode, FS_STATE_PARENT_OFF); the open table (FS_STATE_OPEN_SLOTS records
 * of struct fs_open_rec, after the parent map).  A worker killed between
 * two stores leaves each field either old or new: every field is written
 * with one aligned store, and init_len only after the bytes it covers.
 */
#define FS_STATE_MAGIC 0x3274617473726c7aULL   /* "lzrstat2" */
#define FS_STATE_INIT_MAX 512
#define FS_STATE_PARENT_OFF 4096
/* Opens of passthrough candidates held by the kernel at once, per mount.
 * Linear probing; a full table answers EMFILE to the next open of a
 * candidate not in it (65,536 files of 1 MiB or more open at once). */
#define FS_STATE_OPEN_SLOTS 65536
struct fs_state_hdr {
	uint64_t magic;
	uint64_t inodes;                /* the image's: sizes the parent map */
	uint32_t open_slots;
	uint32_t init_len;              /* bytes of init[] holding the INIT request; 0: none yet */
	/* the opens counted in the open table, for status (a worker killed
	 * between a record's update and this one's leaves it off by one) */
	uint64_t opens_held;
	uint8_t init[FS_STATE_INIT_MAX];
};

/*
 * The opens of one passthrough candidate (a file of FS_PT_MIN bytes or more)
 * that the kernel may still hold.  The kernel refuses (EIO to the opener) a
 * passthrough open while the inode has page-cache opens, and a page-cache
 * open while it has passthrough ones, and all passthrough opens of an inode
 * must share one backing file: so an inode is served one way at a time.
 * The counts never fall below the kernel's, even across a worker's death:
 * an open is counted before it is answered, a release only after (a worker
 * killed in between leaves a count one too high: that inode then keeps its
 * way of serving and its backing file until the mount ends).
 */
struct fs_open_rec {
	uint64_t ino;                   /* 0: free slot */
	uint32_t cached, passthrough;
	int32_t backing_id;             /* while passthrough > 0 */
	uint32_t unused;
};

struct fs_whole_later;

struct fs {
	struct fs_params p;
	char *mountpoint;               /* canonical, owned */
	char *index_hex;                /* owned */
	struct fuse_session *se;
	struct fuse_buf rbuf;           /* one request at a time: the loop is single-threaded */
	struct image_info info;
	struct ahead *ahead;
	/* the state file, mapped (fs_state_map) */
	struct fs_state_hdr *state;
	size_t state_len;
	uint32_t *parent;               /* directory -> its parent, learnt from lookups; 0: unknown */
	struct fs_open_rec *opens;      /* FS_STATE_OPEN_SLOTS */
	dev_t dev;                      /* the mount's anonymous device; 0 until known */
	int slot;                       /* cache counter slot, or -1 */
	unsigned reads_inflight;        /* struct fs_read not yet answered */
	char *spare[FS_SPARE_BUFS];     /* free reply buffers of FS_MAX_REQUEST bytes */
	unsigned nspare;
	bool polling;                   /* a loop_poll on the session fd is pending */
	int64_t poll_id;                /* its id, for fs_leave */
	bool leaving;                   /* fs_leave(): read no more requests */
	bool mounted, finished;
	bool fd_closed;                 /* libfuse closed the session fd while unmounting */
	bool init_done;                 /* INIT answered: the readahead window may be set */
	bool init_seen;                 /* the first request (INIT) has been looked at */
	bool adopting;                  /* replaying the recorded INIT: its reply is not sent */
	bool adopted;                   /* taken over from an earlier worker */
	bool idmap_offered;             /* the kernel's INIT offered FUSE_ALLOW_IDMAP */
	bool resend_known;              /* the kernel's INIT offered FUSE_HAS_RESEND */
	uint64_t init_unique;           /* the INIT request's id, 0 once answered */
	int32_t init_error;             /* the error of libfuse's INIT answer (0: none) */
	bool pt_offered;                /* the kernel's INIT offered FUSE_PASSTHROUGH */
	bool pt_on;                     /* passthrough negotiated: OPEN is answered */
	int32_t reply_backing_id;       /* > 0: the OPEN reply being sent passes through */
	unsigned timers;                /* timers pending (they hold f) */
	struct {                        /* fs_whole_file_soon()'s, pending */
		struct fs_whole_later *head, *tail;
	} whole_laters;
	uint64_t last_read_ns;          /* now_ns() of the latest READ */
	uint64_t last_req_ns;           /* now_ns() of the latest batch of requests */
	uint64_t requests;              /* requests read */
	uint64_t resends;               /* FUSE_NOTIFY_RESEND sent */
	/* per-image counters kept here for every mount (the cache's slots are
	 * few): bytes answered to READs, distinct chunks read (the first
	 * touches ahead_touch() reports) and their bytes */
	uint64_t bytes_served, chunks_read, bytes_read;
	int hold_fd;                    /* /dev/cpu_dma_latency, or -1 */
	bool held;                      /* the latency request is 0 µs now */
	int64_t hold_timer;             /* while held: the timer that lets go */
	unsigned opens_waiting;         /* OPENs waiting for an object's check */
	bool closing;                   /* fs_unmount() or fs_leave() has begun: start no prefetch */
};

/* ops.c */
extern const struct fuse_lowlevel_ops fs_ops;

/* open.c */
void fs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
/* A reader reached the end of candidate ino: have its object made (or
 * checked) soon, so that its next open passes through. */
void fs_whole_file_soon(struct fs *f, uint64_t ino, uint64_t size);
/* A mount on its way out (fs_leave, fs_free): the objects fs_whole_file_soon()
 * would make are not made, and its timers end now, not up to
 * FS_PT_LATEST_NS later (the drain waits for every timer). */
void fs_whole_laters_cancel(struct fs *f);
/* Opens the kernel holds that f counts. */
uint32_t fs_open_count(const struct fs *f);

/* read.c */
void fs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void fs_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi);
void fs_read_bufs_free(struct fs *f);

/* state.c */
/* Map p.state_fd (or anonymous memory when -1) for an image of inodes
 * inodes: a fresh file is laid out, one written by an earlier worker is
 * checked (-ESTALE: another image's).  Sets f->state, parent, opens. */
int fs_state_map(struct fs *f);
void fs_state_unmap(struct fs *f);
/* Record the INIT request (len bytes at buf) before it is answered. */
void fs_state_note_init(struct fs *f, const void *buf, size_t len);

/* session.c */
/* Hook the session's I/O to fd (the connection) and make it non-blocking. */
int fs_session_attach(struct fs *f, int fd);
/* Poll the connection on the loop (again). */
void fs_arm(struct fs *f);
/* Replay the recorded INIT through libfuse without answering the kernel,
 * then have the kernel resend what an earlier worker left unanswered. */
int fs_session_adopt(struct fs *f);
/* Let go of the CPU latency request at once. */
void fs_cpu_release(struct fs *f);

/* mount.c */
void fs_set_read_ahead(struct fs *f);

#endif
