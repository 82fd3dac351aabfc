/*
 * fs.c — the FUSE low-level filesystem over one mapped image.
 *
 * Metadata operations answer straight from the index (binary searches over
 * the mapped records, no allocation per entry) and reply before they return.
 * A read maps its byte range through the file's extents into one reply
 * buffer: holes are zero-filled at once, every extent piece becomes one
 * cache_read() into its place in the buffer, and the reply goes out from the
 * loop when the last piece completes.
 *
 * Invariants:
 *  - every request is answered exactly once, from one reply site per op;
 *  - no request's failure ends the daemon: errors keep their meaning (ENOENT,
 *    ENOTDIR, ENODATA, ERANGE…); EIO means a chunk could not be fetched or
 *    verified;
 *  - the image is immutable, so the kernel may keep entries, attributes,
 *    directory listings and pages for as long as it likes (timeouts of
 *    FS_TIMEOUT, keep_cache, cache_readdir — the kernel's defaults for files
 *    and directories once open and opendir have answered ENOSYS);
 *  - with FUSE passthrough (root, kernel 6.9+), a large file whose bytes the
 *    cache holds as one whole-file object is opened with FOPEN_PASSTHROUGH:
 *    the kernel then reads and maps that file itself, and no READ reaches
 *    us; an inode is served one way at a time (struct fs_open_state);
 *  - image inode numbers are FUSE node ids (the root is 1 in both), so lookup
 *    counts need no bookkeeping and forget frees nothing;
 *  - a struct fs is not freed while a read of it is in flight or its session
 *    fd is polled: fs_free() runs the loop until both have drained.
 */
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
#include "fs/fs.h"
#include "image/image.h"
#include "lib/lib.h"
#include "lib/loop.h"

/* Entry and attribute timeouts in seconds: nothing in an image ever changes. */
#define FS_TIMEOUT 1e9
/* The largest read the kernel sends us.  libfuse derives max_pages from
 * max_write; 1008 KiB rather than the kernel's 1 MiB limit because a reply
 * spliced from a file needs a pipe of request + 3 pages, and 1 MiB + 3 pages
 * exceeds pipe-max-size (FACTS.md): larger requests would be copied. */
#define FS_MAX_REQUEST (1008 * 1024)
/* Background requests (readahead, async reads) the kernel keeps in flight. */
#define FS_MAX_BACKGROUND 64
/* The mount's readahead window, set through its bdi once mounted.  A page
 * fault in a mapped file (a program's text) reads a whole window around the
 * page, and the faulting reader waits for the window's middle: a wide window
 * fetches and decodes chunks that a program start never touches.  Sequential
 * read() of chunks in the node cache took as long at 256 KiB as at 4 MiB
 * (bench/RESULTS.md, session 8). */
#define FS_READ_AHEAD_KB 512
/* A read continues a sequential run when it starts at most this far past
 * where the last one ended: the kernel's async readahead may overtake. */
#define FS_SEQ_SLACK (2 * FS_MAX_REQUEST)
/* Read streams tracked at once (files read concurrently), direct-mapped by
 * inode: a collision only costs the loser its read-ahead. */
#define FS_STREAMS 64
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
 * the host to run it again (FACTS.md: 30-60 µs a hop), and a warm program
 * start sends an OPEN and a RELEASE for every file it opens: here an open
 * and close of a file through an overlay took 100-120 µs with the reader
 * pausing between files, 24-29 µs with the request held.  The request is let
 * go once no request has come for cpu_hold_ms, so an idle node halts its
 * CPUs as before.  Root only (the device is 0600); off with no_cpu_latency. */
#define FS_CPU_HOLD_NS(f) ((uint64_t)(f)->p.cpu_hold_ms * 1000000)
#define FS_CPU_LATENCY_ANY 2000000000   /* the kernel's default: no constraint */
#define FS_OPEN_BUCKETS 256
/* fi->fh of an open: whether the daemon counts it, and how it is served. */
#define FS_FH_UNTRACKED 0
#define FS_FH_CACHED 1
#define FS_FH_PASSTHROUGH 2
/* Reply buffers of FS_MAX_REQUEST bytes kept for reuse.  malloc hands out
 * buffers this large as fresh mappings: each 1 MiB read then faulted in and
 * zeroed 256 pages, and a cold sequential read of cc1 spent a third of the
 * daemon's time doing so.  Sixteen cover the readahead window in flight. */
#define FS_SPARE_BUFS 16
/* On a slow store (cache_store_slow: each fetch a round trip), a miss also
 * fetches, in parallel and queued behind it, what the reader will likely ask
 * for next, each of which would otherwise be one more round trip in turn:
 *  - the file's other chunks, when the file is at most FS_WHOLE_MAX bytes: a
 *    program reads a library or an executable it maps whole, but in two to
 *    four rounds (the ELF header, then faults over its segments);
 *  - for a small file (at most FS_NEAR_FILE_MAX), the FS_NEAR_CHUNKS chunks
 *    after its last in build order: the builder packs small files in walk
 *    order, so they hold the files beside it in its directory.
 * On a fast store none: a local disk gains nothing from guesses, and its
 * reader would queue behind them. */
#define FS_WHOLE_MAX (8 << 20)
#define FS_NEAR_FILE_MAX (256 * 1024)
#define FS_NEAR_CHUNKS 4
#define FS_NEAR_MAX 64                  /* chunks fetched with one miss at most */

/* What an access profile's prefetch of a chunk has come to (fs->pstate). */
enum {
	PF_NONE,        /* not asked for */
	PF_QUEUED,      /* in fs->pq, not started */
	PF_FLIGHT,      /* fetching for the profile */
	PF_FETCHED,     /* fetched for the profile, not read yet */
	PF_LATE,        /* a reader came while it was fetching (counted) */
	PF_DONE,        /* nothing more to count */
};

/* One trace of the profile being followed. */
struct fs_ptrace {
	const uint32_t *v;              /* chunk indices, borrowed from the profile */
	size_t n;
	size_t queued_to;               /* positions below it were queued or skipped */
	int64_t at;                     /* the furthest position a reader touched; -1 */
	uint32_t score;                 /* distinct chunks of it read so far */
};

/* Per file being read: where the last read ended, to tell sequential from
 * random.  Kept per inode, not per open file: there is no OPEN (fs_open). */
struct fs_stream {
	uint64_t ino;                   /* 0: unused */
	uint64_t last_end;
	uint64_t prefetched_to;         /* file offset up to which read-ahead was issued */
};

/*
 * The opens of one passthrough candidate (a file of FS_PT_MIN bytes or more)
 * that the kernel may still hold.  The kernel refuses (EIO to the opener) a
 * passthrough open while the inode has page-cache opens, and a page-cache
 * open while it has passthrough ones, and all passthrough opens of an inode
 * must share one backing file: so an inode is served one way at a time.
 * The counts never fall below the kernel's: an open is counted when
 * answered, and the kernel has dropped it before it sends its RELEASE.
 */
struct fs_open_state {
	struct fs_open_state *next;
	uint64_t ino;
	uint32_t cached, passthrough;
	int32_t backing_id;             /* while passthrough > 0 */
};

struct fs {
	struct fs_params p;
	char *mountpoint;               /* canonical, owned */
	char *index_hex;                /* owned */
	uint8_t pack_name[HASH_SIZE];   /* index_hex's bytes: the pack's name */
	struct fuse_session *se;
	struct fuse_buf rbuf;           /* one request at a time: the loop is single-threaded */
	struct image_info info;
	uint32_t *parent;               /* directory -> its parent, learnt from lookups; 0: unknown */
	dev_t dev;                      /* the mount's anonymous device; 0 until known */
	int slot;                       /* cache counter slot, or -1 */
	unsigned reads_inflight;        /* struct fs_read not yet answered */
	struct fs_stream streams[FS_STREAMS];
	char *spare[FS_SPARE_BUFS];     /* free reply buffers of FS_MAX_REQUEST bytes */
	unsigned nspare;
	bool polling;                   /* a loop_poll on the session fd is pending */
	bool mounted, finished;
	bool fd_closed;                 /* libfuse closed the session fd while unmounting */
	bool init_done;                 /* INIT answered: the readahead window may be set */
	bool init_seen;                 /* the first request (INIT) has been looked at */
	bool idmap_offered;             /* the kernel's INIT offered FUSE_ALLOW_IDMAP */
	uint64_t init_unique;           /* the INIT request's id, 0 once answered */
	bool pt_offered;                /* the kernel's INIT offered FUSE_PASSTHROUGH */
	bool pt_on;                     /* passthrough negotiated: OPEN is answered */
	int32_t reply_backing_id;       /* > 0: the OPEN reply being sent passes through */
	unsigned timers;                /* timers pending (they hold f) */
	uint64_t last_read_ns;          /* now_ns() of the latest READ */
	uint64_t last_req_ns;           /* now_ns() of the latest batch of requests */
	int hold_fd;                    /* /dev/cpu_dma_latency, or -1 */
	bool held;                      /* the latency request is 0 µs now */
	int64_t hold_timer;             /* while held: the timer that lets go */
	unsigned opens_waiting;         /* OPENs waiting for an object's check */
	struct fs_open_state *opens[FS_OPEN_BUCKETS];
	bool closing;                   /* fs_free() has begun: start no prefetch */
	/* chunks read so far (a bit each), with p.record or a profile */
	uint8_t *seen;
	uint32_t *rec;                  /* with p.record: first reads in order */
	size_t nrec, rec_cap;
	/* following a profile (NULL ptr: none): where each chunk sits in the
	 * traces (ppos[ppos_off[k]..ppos_off[k+1]): trace, position pairs) */
	struct fs_ptrace *ptr;
	size_t nptr;
	uint32_t pbest, pnbest;         /* the best score, and how many traces have it */
	uint32_t *ppos_off;
	uint32_t (*ppos)[2];
	uint8_t *pstate;                /* PF_*, per chunk */
	uint32_t *pq;                   /* chunks to fetch, oldest first; each once */
	size_t pq_head, pq_tail;
	uint64_t pq_bytes;              /* bytes of chunks queued or in flight */
	unsigned pf_inflight;           /* profile prefetches whose callback is due */
};

/* One read in flight: the reply buffer and how many cache pieces are due. */
struct fs_read {
	struct fs *f;
	fuse_req_t req;
	char *buf;
	size_t len;
	unsigned pending;
	int err;
	uint64_t whole_ino;             /* a read to the end of this candidate, or 0 */
	uint64_t whole_size;            /* its size */
};

static void fs_arm(struct fs *f);
static void set_read_ahead(struct fs *f);

/* ---- attributes --------------------------------------------------------- */

static void stat_from_image(const struct image_stat *is, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = is->ino;
	st->st_mode = is->mode;
	st->st_nlink = is->nlink;
	st->st_uid = is->uid;
	st->st_gid = is->gid;
	st->st_size = (off_t)is->size;
	st->st_blocks = (blkcnt_t)is->blocks;
	st->st_blksize = 4096;
	st->st_rdev = (dev_t)is->rdev;
	st->st_mtim.tv_sec = st->st_atim.tv_sec = st->st_ctim.tv_sec = is->mtime_sec;
	st->st_mtim.tv_nsec = st->st_atim.tv_nsec = st->st_ctim.tv_nsec = is->mtime_nsec;
}

static int fill_entry(struct fs *f, uint64_t ino, struct fuse_entry_param *e)
{
	struct image_stat is;
	int r;

	r = image_getattr(f->p.image, ino, &is);
	if (r < 0)
		return r;
	memset(e, 0, sizeof(*e));
	e->ino = ino;
	e->generation = 1;
	e->attr_timeout = FS_TIMEOUT;
	e->entry_timeout = FS_TIMEOUT;
	stat_from_image(&is, &e->attr);
	return 0;
}

static void note_parent(struct fs *f, uint64_t parent, const struct fuse_entry_param *e)
{
	if (S_ISDIR(e->attr.st_mode) && e->ino <= f->info.inodes)
		f->parent[e->ino] = (uint32_t)parent;
}

/* ---- metadata operations ------------------------------------------------ */

static void fs_init(void *ud, struct fuse_conn_info *conn)
{
	struct fs *f = ud;
	unsigned want = FUSE_CAP_ASYNC_READ | FUSE_CAP_READDIRPLUS | FUSE_CAP_CACHE_SYMLINKS |
	                FUSE_CAP_PARALLEL_DIROPS | FUSE_CAP_POSIX_ACL;

	conn->want |= want & conn->capable;
	/* Always readdirplus: a walk then needs no lookup per entry. */
	conn->want &= ~(unsigned)(FUSE_CAP_READDIRPLUS_AUTO | FUSE_CAP_AUTO_INVAL_DATA |
	                          FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_SPLICE_READ);
	if (conn->max_write > FS_MAX_REQUEST)
		conn->max_write = FS_MAX_REQUEST;
	conn->max_background = FS_MAX_BACKGROUND;
	conn->congestion_threshold = FS_MAX_BACKGROUND * 3 / 4;
	conn->time_gran = 1;
	f->init_done = true;
}

static void fs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs *f = fuse_req_userdata(req);
	struct fuse_entry_param e;
	uint64_t ino;
	int r;

	r = image_lookup(f->p.image, parent, name, strlen(name), &ino);
	if (r == 0)
		r = fill_entry(f, ino, &e);
	if (r == -ENOENT) {
		/* A negative entry the kernel may keep: interpreters probe many
		 * paths that do not exist, again and again. */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = FS_TIMEOUT;
		r = 0;
	} else if (r == 0) {
		note_parent(f, parent, &e);
	}
	if (r < 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_entry(req, &e);
}

static void fs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	fuse_reply_none(req);
}

static void fs_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	fuse_reply_none(req);
}

static void fs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *f = fuse_req_userdata(req);
	struct image_stat is;
	struct stat st;
	int r;

	r = image_getattr(f->p.image, ino, &is);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	stat_from_image(&is, &st);
	fuse_reply_attr(req, &st, FS_TIMEOUT);
}

static void fs_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct fs *f = fuse_req_userdata(req);
	_cleanup_free_ char *s = NULL;
	const char *t;
	size_t len;
	int r;

	r = image_readlink(f->p.image, ino, &t, &len);
	if (r == 0) {
		/* The target in the index is not NUL-terminated. */
		s = strndup(t, len);
		if (!s)
			r = -ENOMEM;
	}
	if (r < 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_readlink(req, s);
}

/* No OPENDIR round trip: answering ENOSYS once makes the kernel open every
 * directory itself, with keep_cache and cache_readdir, and send no
 * RELEASEDIR either — two requests fewer per directory of a walk. */
static void fs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fuse_reply_err(req, ENOSYS);
}

/*
 * Directory offsets are entry positions: 0 is ".", 1 is "..", 2 + i the i-th
 * stored entry; the offset given with an entry is that of the next one.
 * Cost: O(1) per entry.
 */
static void fs_readdir_common(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus)
{
	struct fs *f = fuse_req_userdata(req);
	_cleanup_free_ char *buf = NULL;
	size_t used = 0;
	int64_t n;
	int r = 0;

	n = image_dir_size(f->p.image, ino);
	if (n < 0) {
		fuse_reply_err(req, (int)-n);
		return;
	}
	buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (uint64_t pos = (uint64_t)off; pos < (uint64_t)n + 2; pos++) {
		struct fuse_entry_param e;
		char name[IMAGE_NAME_MAX + 1];
		uint64_t child;
		size_t len, need;

		if (pos < 2) {
			/* "." and "..": the kernel takes no reference and wants
			 * no attributes for them (e.ino 0). */
			memset(&e, 0, sizeof(e));
			e.attr.st_mode = S_IFDIR;
			e.attr.st_ino = ino;
			if (pos == 1 && ino != FUSE_ROOT_ID && ino <= f->info.inodes &&
			    f->parent[ino])
				e.attr.st_ino = f->parent[ino];
			strcpy(name, pos ? ".." : ".");
		} else {
			const char *nm;

			r = image_readdir(f->p.image, ino, pos - 2, &nm, &len, &child);
			if (r <= 0)
				break;
			memcpy(name, nm, len);
			name[len] = 0;
			r = fill_entry(f, child, &e);
			if (r < 0)
				break;
		}
		if (plus)
			need = fuse_add_direntry_plus(req, buf + used, size - used, name, &e,
			                              (off_t)pos + 1);
		else
			need = fuse_add_direntry(req, buf + used, size - used, name, &e.attr,
			                         (off_t)pos + 1);
		if (need > size - used)
			break;
		if (plus && pos >= 2)
			note_parent(f, ino, &e);
		used += need;
	}
	/* An entry that failed to read after others fitted is reported on the
	 * next call, when it comes first. */
	if (r < 0 && used == 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_buf(req, buf, used);
}

static void fs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
	fs_readdir_common(req, ino, size, off, false);
}

static void fs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi)
{
	fs_readdir_common(req, ino, size, off, true);
}

static void fs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct fs *f = fuse_req_userdata(req);
	struct statvfs sv = {
		.f_bsize = 4096,
		.f_frsize = 4096,
		.f_blocks = (f->info.file_bytes + 4095) / 4096,
		.f_files = f->info.inodes,
		.f_namemax = IMAGE_NAME_MAX,
		.f_flag = ST_RDONLY,
	};

	fuse_reply_statfs(req, &sv);
}

/* size 0 asks for the value's length; a value longer than size is ERANGE.
 * An image without a single xattr answers ENOSYS, once: the kernel then
 * fails every getxattr itself with EOPNOTSUPP (what a filesystem without
 * xattrs says) instead of asking.  The kernel caches no xattrs, and overlayfs
 * asks its lower layer for trusted.overlay.* on every lookup of a new overlay
 * mount: 122 GETXATTR round trips in a warm python3 start in a chroot. */
static void fs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct fs *f = fuse_req_userdata(req);
	const void *v;
	size_t len;
	int r;

	if (f->info.xattrs == 0) {
		fuse_reply_err(req, ENOSYS);
		return;
	}
	r = image_getxattr(f->p.image, ino, name, &v, &len);
	if (r == 0 && size && len > size)
		r = -ERANGE;
	if (r < 0)
		fuse_reply_err(req, -r);
	else if (size == 0)
		fuse_reply_xattr(req, len);
	else
		fuse_reply_buf(req, v, len);
}

static void fs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct fs *f = fuse_req_userdata(req);
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	struct image_stat is;
	int r;

	r = image_getattr(f->p.image, ino, &is);
	for (uint32_t i = 0; r >= 0; i++) {
		const char *name;
		const void *v;
		size_t nlen, vlen;

		r = image_xattr(f->p.image, ino, i, &name, &nlen, &v, &vlen);
		if (r <= 0)
			break;
		r = buf_append(&b, name, nlen);
		if (r == 0)
			r = buf_append(&b, "", 1);
	}
	if (r == 0 && size && b.len > size)
		r = -ERANGE;
	if (r < 0)
		fuse_reply_err(req, -r);
	else if (size == 0)
		fuse_reply_xattr(req, b.len);
	else
		fuse_reply_buf(req, (const char *)b.data, b.len);
}

/* ---- files -------------------------------------------------------------- */

static int file_pieces(struct fs *f, uint64_t ino, uint64_t size, struct cache_piece **ret,
                       unsigned *ret_n);
static int whole_file(struct fs *f, uint64_t ino, uint64_t size, bool make, cache_cb cb,
                      void *ud);

static struct fs_open_state **open_slot(struct fs *f, uint64_t ino)
{
	struct fs_open_state **pp = &f->opens[ino % FS_OPEN_BUCKETS];

	while (*pp && (*pp)->ino != ino)
		pp = &(*pp)->next;
	return pp;
}

/* Register the whole-file object of ino (size bytes) with the kernel: its
 * backing id, or -errno (-EAGAIN: not ready yet; -EINPROGRESS: being
 * checked, cb(ud, …) runs when done). */
static int backing_open(struct fs *f, uint64_t ino, uint64_t size, cache_cb cb, void *ud)
{
	struct fs_backing_map map = { 0 };
	int r = whole_file(f, ino, size, false, cb, ud);

	if (r < 0)
		return r;
	map.fd = r;
	r = ioctl(fuse_session_fd(f->se), FS_DEV_IOC_BACKING_OPEN, &map);
	if (r < 0) {
		r = -errno;
		/* not allowed (no CAP_SYS_ADMIN in the initial user namespace),
		 * or the cache disk is itself stacked (an overlay: ELOOP), which
		 * every object shares: never again on this mount; the next OPEN
		 * answers ENOSYS and the kernel opens files itself from then on */
		if (r == -EPERM || r == -EOPNOTSUPP || r == -EINVAL || r == -ELOOP) {
			log_errno(r, "mount '%s': FUSE passthrough refused; serving through the daemon",
			          f->mountpoint);
			f->pt_on = false;
		}
		return r;
	}
	return r > 0 ? r : -EIO;
}

static void backing_close(struct fs *f, int32_t id)
{
	uint32_t u = (uint32_t)id;

	if (ioctl(fuse_session_fd(f->se), FS_DEV_IOC_BACKING_CLOSE, &u) < 0)
		log_errno(-errno, "mount '%s': dropping passthrough backing file %d", f->mountpoint,
		          (int)id);
}

/* An OPEN waiting for its file's whole-file object to be checked. */
struct fs_open_wait {
	struct fs *f;
	fuse_req_t req;
	fuse_ino_t ino;
	struct fuse_file_info fi;
};

static void open_answer(struct fs *f, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi,
                        bool may_wait);

static void open_resume(void *ud, int res)
{
	struct fs_open_wait *w = ud;

	w->f->opens_waiting--;
	open_answer(w->f, w->req, w->ino, &w->fi, false);
	free(w);
}

/*
 * Answer an OPEN (passthrough negotiated).  A candidate with no open in the
 * kernel gets FOPEN_PASSTHROUGH when its object is ready; an object left by
 * an earlier daemon is checked first, and the OPEN waits for that (may_wait;
 * the hash of a 33 MB file takes ~10 ms warm), since the first open of a
 * file is usually the one that reads it.  An OPEN never starts making an
 * object (whole_file_soon does, once reads pause): the file is served from
 * the chunks meanwhile.
 */
static void open_answer(struct fs *f, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi,
                        bool may_wait)
{
	struct fs_open_state *os = NULL, **pp;
	struct image_stat is;
	int32_t id = 0;
	int r;

	if (!f->pt_on) {
		fuse_reply_err(req, ENOSYS);
		return;
	}
	fi->keep_cache = 1;
	fi->noflush = 1;
	fi->fh = FS_FH_UNTRACKED;
	r = image_getattr(f->p.image, ino, &is);
	if (r == 0 && S_ISREG(is.mode) && is.size >= FS_PT_MIN) {
		pp = open_slot(f, ino);
		os = *pp;
		if (os && os->passthrough) {
			id = os->backing_id;
		} else if (!os || !os->cached) {
			struct fs_open_wait *w = may_wait ? malloc(sizeof(*w)) : NULL;

			r = backing_open(f, ino, is.size, w ? open_resume : NULL, w);
			if (r == -EINPROGRESS) {
				*w = (struct fs_open_wait){ f, req, ino, *fi };
				f->opens_waiting++;
				return;
			}
			free(w);
			if (r > 0)
				id = r;
		}
		if (!os) {
			os = calloc(1, sizeof(*os));
			if (!os) {
				if (id)
					backing_close(f, id);
				fuse_reply_err(req, ENOMEM);
				return;
			}
			os->ino = ino;
			os->next = *pp;
			*pp = os;
		}
		if (id && !os->passthrough)
			os->backing_id = id;
		if (id) {
			os->passthrough++;
			fi->fh = FS_FH_PASSTHROUGH;
			fi->keep_cache = 0;
		} else {
			os->cached++;
			fi->fh = FS_FH_CACHED;
		}
	}
	f->reply_backing_id = id;
	r = fuse_reply_open(req, fi);
	f->reply_backing_id = 0;
	if (r < 0 && os) {
		/* the opener is gone (interrupted): the kernel holds no open */
		if (id)
			os->passthrough--;
		else
			os->cached--;
	} else if (id) {
		cache_note_passthrough(f->p.cache);
	}
	if (os && !os->passthrough && !os->cached) {
		if (id)
			backing_close(f, id);
		*open_slot(f, ino) = os->next;
		free(os);
	}
}

/*
 * Without passthrough, no OPEN round trip: answering ENOSYS once makes the
 * kernel open every file itself, with keep_cache, and send no RELEASE
 * (FUSE's no_open).  A warm python3 start in a chroot over an overlay sent
 * 84 OPEN and 84 RELEASE, each a hop between CPUs.  The mount is read-only,
 * so the kernel refuses writable opens itself; reads find their stream by
 * inode.
 *
 * With passthrough negotiated every open is answered (ENOSYS would be for
 * the whole connection): with keep_cache as the kernel's own opens have,
 * or, for a candidate whose whole-file object is ready, FOPEN_PASSTHROUGH
 * and its backing id (patched into the reply by fs_io_writev: libfuse 3.14
 * does not know them).  Cost on the loop: a table lookup; for a candidate
 * not yet served that way, its extents walked and an ioctl.
 */
static void fs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	open_answer(fuse_req_userdata(req), req, ino, fi, true);
}

static void fs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *f = fuse_req_userdata(req);
	struct fs_open_state **pp = open_slot(f, ino), *os = *pp;

	if (os && fi->fh == FS_FH_PASSTHROUGH && os->passthrough) {
		if (--os->passthrough == 0)
			backing_close(f, os->backing_id);
	} else if (os && fi->fh == FS_FH_CACHED && os->cached) {
		os->cached--;
	}
	if (os && !os->passthrough && !os->cached) {
		*pp = os->next;
		free(os);
	}
	fuse_reply_err(req, 0);
}

/* Chunk idx of the image (ic) as the cache wants it: with where the image's
 * pack holds it, when the store has one (fs_params.pack_offsets). */
static void to_cache_chunk(const struct fs *f, uint32_t idx, const struct image_chunk *ic,
                           struct cache_chunk *cc)
{
	memcpy(cc->name, ic->name, sizeof(cc->name));
	cc->size = ic->size;
	cc->stored_size = ic->stored_size;
	cc->flags = ic->flags;
	cc->in_pack = f->p.pack_offsets != NULL;
	if (cc->in_pack) {
		memcpy(cc->pack, f->pack_name, sizeof(cc->pack));
		cc->pack_off = f->p.pack_offsets[idx];
	} else {
		memset(cc->pack, 0, sizeof(cc->pack));
		cc->pack_off = 0;
	}
}

/* The pieces of file ino (size bytes) in order, for cache_file_open():
 * -ENOENT when the file has holes (its object would not be one copy of its
 * chunks' bytes).  Cost: O(extents). */
static int file_pieces(struct fs *f, uint64_t ino, uint64_t size, struct cache_piece **ret,
                       unsigned *ret_n)
{
	const struct image *img = f->p.image;
	int64_t n = image_extent_count(img, ino);
	struct cache_piece *v;
	uint64_t pos = 0;

	if (n <= 0)
		return n < 0 ? (int)n : -ENOENT;
	if ((uint64_t)n > UINT32_MAX / sizeof(*v))
		return -EFBIG;
	v = malloc((size_t)n * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (int64_t i = 0; i < n; i++) {
		struct image_extent ex;
		struct image_chunk ic;
		int r = image_extent(img, ino, (uint64_t)i, &ex);

		if (r == 0)
			r = image_chunk(img, ex.chunk, &ic);
		if (r == 0 && (ex.file_off != pos || (uint64_t)ex.chunk_off + ex.len > ic.size))
			r = -ENOENT;
		if (r < 0) {
			free(v);
			return r;
		}
		to_cache_chunk(f, ex.chunk, &ic, &v[i].ch);
		v[i].off = ex.chunk_off;
		v[i].len = (uint32_t)ex.len;
		pos += ex.len;
	}
	if (pos != size) {
		free(v);
		return -ENOENT;
	}
	*ret = v;
	*ret_n = (unsigned)n;
	return 0;
}

/* cache_file_open() for file ino of size bytes. */
static int whole_file(struct fs *f, uint64_t ino, uint64_t size, bool make, cache_cb cb,
                      void *ud)
{
	_cleanup_free_ struct cache_piece *v = NULL;
	unsigned n = 0;
	int r = file_pieces(f, ino, size, &v, &n);

	if (r < 0)
		return r;
	return cache_file_open(f->p.cache, v, n, make, cb, ud);
}

struct fs_whole_later {
	struct fs *f;
	uint64_t ino, size;
	uint64_t latest_ns;             /* made by then, idle or not */
};

static void whole_later_cb(void *ud, int res)
{
	struct fs_whole_later *w = ud;
	struct fs *f = w->f;
	uint64_t now = now_ns(), idle_at = f->last_read_ns + FS_PT_DELAY_NS;

	f->timers--;
	if (!f->pt_on || f->finished) {
		free(w);
		return;
	}
	/* reads are still arriving: wait for a quiet spell */
	if (now < idle_at && now < w->latest_ns &&
	    loop_timer(f->p.loop, MIN(idle_at, w->latest_ns) - now, whole_later_cb, w) >= 0) {
		f->timers++;
		return;
	}
	(void)whole_file(f, w->ino, w->size, true, NULL, NULL);
	free(w);
}

/* A reader reached the end of candidate ino: have its object made (or
 * checked) soon, so that its next open passes through. */
static void whole_file_soon(struct fs *f, uint64_t ino, uint64_t size)
{
	struct fs_whole_later *w = malloc(sizeof(*w));

	if (!w)
		return;
	*w = (struct fs_whole_later){ f, ino, size, now_ns() + FS_PT_LATEST_NS };
	if (loop_timer(f->p.loop, FS_PT_DELAY_NS, whole_later_cb, w) < 0) {
		free(w);
		return;
	}
	f->timers++;
}

/* A reply buffer for len bytes: a spare one when len is large. */
static char *read_buf_get(struct fs *f, size_t len)
{
	if (len <= FS_MAX_REQUEST / 4 || len > FS_MAX_REQUEST)
		return malloc(len);
	if (f->nspare)
		return f->spare[--f->nspare];
	return malloc(FS_MAX_REQUEST);
}

static void read_buf_put(struct fs *f, char *buf, size_t len)
{
	if (len > FS_MAX_REQUEST / 4 && len <= FS_MAX_REQUEST && f->nspare < FS_SPARE_BUFS)
		f->spare[f->nspare++] = buf;
	else
		free(buf);
}

static void read_finish(struct fs_read *rd)
{
	struct fs *f = rd->f;

	if (rd->err < 0)
		fuse_reply_err(rd->req, -rd->err);
	else
		fuse_reply_buf(rd->req, rd->buf, rd->len);
	if (rd->err == 0 && rd->whole_ino)
		whole_file_soon(f, rd->whole_ino, rd->whole_size);
	read_buf_put(f, rd->buf, rd->len);
	free(rd);
	f->reads_inflight--;
}

static void read_piece_done(void *ud, int res)
{
	struct fs_read *rd = ud;

	/* EIO (a chunk that cannot be had) wins over other errors: it is what
	 * the reader must be told. */
	if (res < 0 && (rd->err == 0 || res == -EIO))
		rd->err = res;
	if (--rd->pending == 0)
		read_finish(rd);
}

/* ---- access profiles: recording and following ------------------------------ */

struct fs_pf {
	struct fs *f;
	uint32_t chunk;
	uint32_t size;
};

static uint32_t chunk_size(struct fs *f, uint32_t idx)
{
	struct image_chunk ic;

	return image_chunk(f->p.image, idx, &ic) == 0 ? ic.size : 0;
}

/* True when chunk c is in every leading trace (those at the best score). */
static bool in_all_leaders(const struct fs *f, uint32_t c)
{
	uint32_t n = 0, last = UINT32_MAX;

	/* positions are grouped by trace, in trace order (profile_setup) */
	for (uint32_t i = f->ppos_off[c]; i < f->ppos_off[c + 1]; i++) {
		uint32_t t = f->ppos[i][0];

		if (t != last && f->ptr[t].score == f->pbest)
			n++;
		last = t;
	}
	return n >= f->pnbest;
}

/*
 * Queue the chunks of leading trace tr up to profile_window positions past
 * the furthest one read, within the byte budget.  While several traces lead
 * (the reads so far fit each as well: /bin/sh and libc open every workload),
 * only the chunks that all of them read are queued, and the trace's mark
 * stays put so that the rest is queued once one trace leads alone.
 * Cost: O(window), times the chunk's traces while several lead.
 */
static void profile_advance(struct fs *f, struct fs_ptrace *tr)
{
	bool shared = f->pnbest > 1;
	size_t lim, q;

	if (tr->at < 0 || tr->score != f->pbest)
		return;
	lim = MIN(tr->n, (size_t)tr->at + 1 + f->p.profile_window);
	q = MAX(tr->queued_to, (size_t)tr->at + 1);
	for (; q < lim; q++) {
		uint32_t c = tr->v[q];

		if (f->pstate[c] == PF_NONE && !(f->seen[c / 8] & (1u << (c % 8))) &&
		    (!shared || in_all_leaders(f, c))) {
			uint32_t size = chunk_size(f, c);

			if (f->pq_bytes && f->pq_bytes + size > f->p.profile_bytes)
				break;
			f->pstate[c] = PF_QUEUED;
			f->pq[f->pq_tail++] = c;
			f->pq_bytes += size;
		}
		if (!shared)
			tr->queued_to = q + 1;
	}
}

static void profile_pump(struct fs *f);

static void profile_done(void *ud, int res)
{
	struct fs_pf *pf = ud;
	struct fs *f = pf->f;

	f->pf_inflight--;
	f->pq_bytes -= MIN(f->pq_bytes, pf->size);
	if (f->pstate[pf->chunk] == PF_FLIGHT)
		f->pstate[pf->chunk] = res == 0 ? PF_FETCHED : PF_DONE;
	else if (f->pstate[pf->chunk] == PF_LATE)
		f->pstate[pf->chunk] = PF_DONE;
	free(pf);
	/* room in the budget again: the windows may reach further */
	for (size_t t = 0; t < f->nptr; t++)
		profile_advance(f, &f->ptr[t]);
	profile_pump(f);
}

/* Start queued prefetches, oldest first, while fewer than profile_inflight
 * are in flight: the rest of the store's transfers stay free for readers. */
static void profile_pump(struct fs *f)
{
	while (!f->closing && f->pf_inflight < f->p.profile_inflight && f->pq_head < f->pq_tail) {
		uint32_t c = f->pq[f->pq_head++];
		struct image_chunk ic;
		struct cache_chunk cc;
		struct fs_pf *pf;
		int r;

		if (f->pstate[c] != PF_QUEUED)
			continue;
		pf = malloc(sizeof(*pf));
		r = pf ? image_chunk(f->p.image, c, &ic) : -ENOMEM;
		if (r == 0) {
			*pf = (struct fs_pf){ f, c, ic.size };
			to_cache_chunk(f, c, &ic, &cc);
			r = cache_profile_prefetch(f->p.cache, f->p.store, &cc, f->slot, profile_done,
			                           pf);
		}
		if (r < 0) {
			free(pf);
			f->pstate[c] = PF_DONE;
			f->pq_bytes -= MIN(f->pq_bytes, chunk_size(f, c));
			continue;
		}
		f->pstate[c] = r == 1 ? PF_FLIGHT : PF_DONE;
		f->pf_inflight++;
	}
}

/* A read touches chunk c: record it, count a profile's prefetch that served
 * it, and on its first touch score the traces that hold it and move the
 * windows of those that lead (the traces that matched the most reads so far:
 * the workload being run, not others that share a library with it).
 * Prefetches start at the next profile_pump(), after the read's own fetches.
 * Cost: O(traces holding c × window). */
static void profile_touch(struct fs *f, uint32_t c)
{
	if (!f->seen || c >= f->info.chunks)
		return;
	if (f->pstate) {
		switch (f->pstate[c]) {
		case PF_FETCHED:
			cache_note_profile_hit(f->p.cache, false);
			f->pstate[c] = PF_DONE;
			break;
		case PF_FLIGHT:
			cache_note_profile_hit(f->p.cache, true);
			f->pstate[c] = PF_LATE;
			break;
		case PF_QUEUED:
			/* the reader fetches it itself now */
			f->pstate[c] = PF_DONE;
			f->pq_bytes -= MIN(f->pq_bytes, chunk_size(f, c));
			break;
		}
	}
	if (f->seen[c / 8] & (1u << (c % 8)))
		return;
	f->seen[c / 8] |= (uint8_t)(1u << (c % 8));
	if (f->p.record) {
		if (f->nrec == f->rec_cap) {
			size_t cap = f->rec_cap ? f->rec_cap * 2 : 256;
			uint32_t *v = realloc(f->rec, cap * sizeof(*v));

			if (v) {
				f->rec = v;
				f->rec_cap = cap;
			}
		}
		if (f->nrec < f->rec_cap)
			f->rec[f->nrec++] = c;
	}
	if (!f->ptr)
		return;
	for (uint32_t i = f->ppos_off[c]; i < f->ppos_off[c + 1]; i++) {
		struct fs_ptrace *tr = &f->ptr[f->ppos[i][0]];

		if (i == f->ppos_off[c] || f->ppos[i][0] != f->ppos[i - 1][0]) {
			tr->score++;
			if (tr->score > f->pbest) {
				f->pbest = tr->score;
				f->pnbest = 1;
			} else if (tr->score == f->pbest) {
				f->pnbest++;
			}
		}
		tr->at = MAX(tr->at, (int64_t)f->ppos[i][1]);
	}
	for (uint32_t i = f->ppos_off[c]; i < f->ppos_off[c + 1]; i++)
		profile_advance(f, &f->ptr[f->ppos[i][0]]);
}

const uint32_t *fs_trace(const struct fs *f, size_t *ret_n)
{
	*ret_n = f->nrec;
	return f->rec;
}

/* Take up p.profile: one warning and none when it is not this image's. */
static int profile_setup(struct fs *f)
{
	const struct image_profile *prof = f->p.profile;
	uint8_t idx[HASH_SIZE];
	const char *why = NULL;
	uint64_t total = 0;
	size_t nt;

	if (!f->p.record && !prof)
		return 0;
	f->seen = calloc(f->info.chunks / 8 + 1, 1);
	if (!f->seen)
		return -ENOMEM;
	if (!prof)
		return 0;
	if (hex_decode(f->index_hex, idx, HASH_SIZE) < 0 ||
	    memcmp(idx, image_profile_index(prof), HASH_SIZE))
		why = "it belongs to another index";
	else
		(void)image_profile_check(prof, f->info.chunks, &why);
	nt = image_profile_traces(prof);
	for (size_t t = 0; !why && t < nt; t++) {
		size_t n;

		(void)image_profile_trace(prof, t, &n);
		total += n;
	}
	if (!why && total >= UINT32_MAX)
		why = "too large";
	if (why) {
		log_msg(LOG_WARN, "mount '%s': ignoring the access profile: %s", f->mountpoint, why);
		return 0;
	}
	if (!f->p.profile_window)
		f->p.profile_window = FS_PROFILE_WINDOW;
	if (!f->p.profile_bytes)
		f->p.profile_bytes = FS_PROFILE_BYTES;
	if (!f->p.profile_inflight)
		f->p.profile_inflight = FS_PROFILE_INFLIGHT;
	f->ptr = calloc(nt ? nt : 1, sizeof(*f->ptr));
	f->ppos_off = calloc(f->info.chunks + 1, sizeof(*f->ppos_off));
	f->ppos = malloc((total ? total : 1) * sizeof(*f->ppos));
	f->pstate = calloc(f->info.chunks ? f->info.chunks : 1, 1);
	f->pq = malloc((f->info.chunks ? f->info.chunks : 1) * sizeof(*f->pq));
	if (!f->ptr || !f->ppos_off || !f->ppos || !f->pstate || !f->pq)
		return -ENOMEM;
	f->nptr = nt;
	/* counting sort of the (trace, position) pairs by chunk */
	for (size_t t = 0; t < nt; t++) {
		size_t n;
		const uint32_t *v = image_profile_trace(prof, t, &n);

		f->ptr[t] = (struct fs_ptrace){ v, n, 0, -1, 0 };
		for (size_t i = 0; i < n; i++)
			f->ppos_off[v[i] + 1]++;
	}
	for (uint64_t k = 0; k < f->info.chunks; k++)
		f->ppos_off[k + 1] += f->ppos_off[k];
	{
		_cleanup_free_ uint32_t *fill = calloc(f->info.chunks ? f->info.chunks : 1,
		                                       sizeof(*fill));

		if (!fill)
			return -ENOMEM;
		for (size_t t = 0; t < nt; t++)
			for (size_t i = 0; i < f->ptr[t].n; i++) {
				uint32_t k = f->ptr[t].v[i];
				uint32_t at = f->ppos_off[k] + fill[k]++;

				f->ppos[at][0] = (uint32_t)t;
				f->ppos[at][1] = (uint32_t)i;
			}
	}
	return 0;
}

static void prefetch_done(void *ud, int res)
{
	/* Read-ahead is a hint: a failure shows when the data is really read. */
}

/*
 * Fetch ahead of a sequential reader: the chunks of the next
 * readahead_chunks extents past end that were not asked for yet.
 * Cost: O(readahead_chunks + log extents).
 */
static void read_ahead(struct fs *f, fuse_ino_t ino, struct fs_stream *st, uint64_t end)
{
	const struct image *img = f->p.image;
	uint32_t last_chunk = IMAGE_CHUNK_NONE;
	unsigned chunks = 0;
	int64_t n, i;

	n = image_extent_count(img, ino);
	i = image_extent_find(img, ino, end);
	for (; i >= 0 && i < n && chunks < f->p.readahead_chunks; i++) {
		struct image_extent ex;
		struct image_chunk ic;
		struct cache_chunk cc;

		if (image_extent(img, ino, (uint64_t)i, &ex) < 0)
			break;
		if (ex.chunk != last_chunk)
			chunks++;
		last_chunk = ex.chunk;
		if (ex.file_off + ex.len <= st->prefetched_to)
			continue;
		if (image_chunk(img, ex.chunk, &ic) < 0)
			break;
		to_cache_chunk(f, ex.chunk, &ic, &cc);
		if (cache_readahead(f->p.cache, f->p.store, &cc, f->slot, prefetch_done, NULL) < 0)
			break;
		st->prefetched_to = ex.file_off + ex.len;
	}
}

static bool near_add(struct fs *f, uint32_t idx, struct cache_chunk near[FS_NEAR_MAX],
                     unsigned *n)
{
	struct image_chunk ic;

	if (*n >= FS_NEAR_MAX || image_chunk(f->p.image, idx, &ic) < 0)
		return false;
	to_cache_chunk(f, idx, &ic, &near[(*n)++]);
	return true;
}

/* What a slow store should fetch with a miss on file ino of size bytes (see
 * FS_WHOLE_MAX), for cache_read_near().  Cost: O(extents of the file). */
static unsigned near_chunks(struct fs *f, fuse_ino_t ino, uint64_t size,
                            struct cache_chunk near[FS_NEAR_MAX])
{
	uint32_t last = IMAGE_CHUNK_NONE;
	unsigned n = 0;
	int64_t count = image_extent_count(f->p.image, ino);

	if (size > FS_WHOLE_MAX)
		return 0;
	for (int64_t i = 0; i < count; i++) {
		struct image_extent ex;

		if (image_extent(f->p.image, ino, (uint64_t)i, &ex) < 0)
			return n;
		if (ex.chunk != last && !near_add(f, ex.chunk, near, &n))
			return n;
		last = ex.chunk;
	}
	if (size <= FS_NEAR_FILE_MAX && last != IMAGE_CHUNK_NONE)
		for (uint64_t i = (uint64_t)last + 1;
		     i < f->info.chunks && i <= (uint64_t)last + FS_NEAR_CHUNKS; i++)
			if (!near_add(f, (uint32_t)i, near, &n))
				break;
	return n;
}

/* Start one cache_read per extent piece of [off, off+len) of ino (a file of
 * size bytes) and zero the holes.  Pieces that start count toward
 * rd->pending. */
static int read_start(struct fs *f, fuse_ino_t ino, struct fs_read *rd, uint64_t off,
                      uint64_t size)
{
	const struct image *img = f->p.image;
	uint64_t end = off + rd->len, pos = off;
	struct cache_chunk near[FS_NEAR_MAX];
	unsigned nnear = 0;
	int64_t n, i;

	if (cache_store_slow(f->p.cache))
		nnear = near_chunks(f, ino, size, near);

	n = image_extent_count(img, ino);
	if (n < 0)
		return (int)n;
	i = image_extent_find(img, ino, off);
	for (; i >= 0 && i < n && pos < end; i++) {
		struct image_extent ex;
		struct image_chunk ic;
		struct cache_chunk cc;
		uint64_t s, e;
		int r;

		r = image_extent(img, ino, (uint64_t)i, &ex);
		if (r < 0)
			return r;
		if (ex.file_off >= end)
			break;
		s = MAX(ex.file_off, pos);
		e = MIN(ex.file_off + ex.len, end);
		if (s > pos)
			memset(rd->buf + (pos - off), 0, s - pos);
		r = image_chunk(img, ex.chunk, &ic);
		if (r < 0)
			return r;
		if ((uint64_t)ex.chunk_off + ex.len > ic.size)
			return -EBADMSG;
		profile_touch(f, ex.chunk);
		to_cache_chunk(f, ex.chunk, &ic, &cc);
		r = cache_read_near(f->p.cache, f->p.store, &cc,
		                    (uint32_t)(ex.chunk_off + (s - ex.file_off)), (uint32_t)(e - s),
		                    rd->buf + (s - off), f->slot, near, nnear, read_piece_done, rd);
		if (r < 0)
			return r;
		rd->pending++;
		pos = e;
	}
	if (pos < end)
		memset(rd->buf + (pos - off), 0, end - pos);
	return 0;
}

static void fs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
	struct fs *f = fuse_req_userdata(req);
	struct fs_stream *st = &f->streams[ino % FS_STREAMS];
	struct image_stat is;
	struct fs_read *rd;
	uint64_t uoff = (uint64_t)off;
	int r;

	r = image_getattr(f->p.image, ino, &is);
	if (r == 0 && !S_ISREG(is.mode))
		r = -EINVAL;
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	if (off < 0 || uoff >= is.size || size == 0) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	size = (size_t)MIN((uint64_t)size, is.size - uoff);

	rd = calloc(1, sizeof(*rd));
	if (rd)
		rd->buf = read_buf_get(f, size);
	if (!rd || !rd->buf) {
		if (rd)
			free(rd);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	f->last_read_ns = now_ns();
	rd->f = f;
	rd->req = req;
	rd->len = size;
	if (f->pt_on && is.size >= FS_PT_MIN && uoff + size == is.size) {
		rd->whole_ino = ino;
		rd->whole_size = is.size;
	}
	rd->pending = 1;  /* held until every piece has been started */
	f->reads_inflight++;
	r = read_start(f, ino, rd, uoff, is.size);
	if (r < 0 && rd->err == 0)
		rd->err = r;

	/* A read that begins where the previous one ended (give or take the
	 * kernel's overlapping async readahead) continues a run. */
	if (st->ino != ino)
		*st = (struct fs_stream){ .ino = ino };
	else if (uoff >= st->last_end - MIN(st->last_end, FS_SEQ_SLACK) &&
	         uoff <= st->last_end + FS_SEQ_SLACK && r == 0 && f->p.readahead_chunks)
		read_ahead(f, ino, st, uoff + size);
	st->last_end = uoff + size;
	if (f->pq)
		profile_pump(f);
	read_piece_done(rd, 0);
}

/* SEEK_DATA / SEEK_HOLE from the extents, so that holes show as holes. */
static int seek_data_hole(struct fs *f, fuse_ino_t ino, uint64_t off, int whence, uint64_t *ret)
{
	const struct image *img = f->p.image;
	struct image_stat is;
	struct image_extent ex;
	int64_t n, i;
	uint64_t pos;
	int r;

	r = image_getattr(f->p.image, ino, &is);
	if (r < 0)
		return r;
	if (!S_ISREG(is.mode))
		return -EINVAL;
	if (off >= is.size)
		return -ENXIO;
	n = image_extent_count(img, ino);
	if (n < 0)
		return (int)n;
	i = image_extent_find(img, ino, off);
	if (i < 0)
		return (int)i;
	if (whence == SEEK_DATA) {
		if (i >= n)
			return -ENXIO;
		r = image_extent(img, ino, (uint64_t)i, &ex);
		if (r < 0)
			return r;
		*ret = MAX(off, ex.file_off);
		return ex.file_off >= is.size ? -ENXIO : 0;
	}
	/* SEEK_HOLE: follow extents that touch until a gap or the end. */
	pos = off;
	for (; i < n; i++) {
		r = image_extent(img, ino, (uint64_t)i, &ex);
		if (r < 0)
			return r;
		if (ex.file_off > pos)
			break;
		pos = MAX(pos, ex.file_off + ex.len);
	}
	*ret = MIN(pos, is.size);
	return 0;
}

static void fs_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
                     struct fuse_file_info *fi)
{
	struct fs *f = fuse_req_userdata(req);
	uint64_t pos = 0;
	int r;

	if (whence != SEEK_DATA && whence != SEEK_HOLE)
		r = -EINVAL;
	else if (off < 0)
		r = -ENXIO;
	else
		r = seek_data_hole(f, ino, (uint64_t)off, whence, &pos);
	if (r < 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_lseek(req, (off_t)pos);
}

/* ---- everything that would write ---------------------------------------- */

/* The mount is read-only, so the kernel refuses most of these itself; these
 * answer what reaches us anyway (e.g. through another mount of the
 * connection) with what a read-only filesystem says. */
static void fs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

static void fs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	fuse_reply_err(req, EROFS);
}

static void fs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	fuse_reply_err(req, EROFS);
}

static void fs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, EROFS);
}

static void fs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, EROFS);
}

static void fs_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
	fuse_reply_err(req, EROFS);
}

static void fs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	fuse_reply_err(req, EROFS);
}

static void fs_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

static void fs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags)
{
	fuse_reply_err(req, EROFS);
}

static void fs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	fuse_reply_err(req, EROFS);
}

static void fs_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

static void fs_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                         struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

static const struct fuse_lowlevel_ops fs_ops = {
	.init = fs_init,
	.lookup = fs_lookup,
	.forget = fs_forget,
	.forget_multi = fs_forget_multi,
	.getattr = fs_getattr,
	.readlink = fs_readlink,
	.opendir = fs_opendir,
	.readdir = fs_readdir,
	.readdirplus = fs_readdirplus,
	.open = fs_open,
	.release = fs_release,
	.read = fs_read,
	.lseek = fs_lseek,
	.statfs = fs_statfs,
	.getxattr = fs_getxattr,
	.listxattr = fs_listxattr,
	.setattr = fs_setattr,
	.mknod = fs_mknod,
	.mkdir = fs_mkdir,
	.unlink = fs_unlink,
	.rmdir = fs_unlink,
	.symlink = fs_symlink,
	.rename = fs_rename,
	.link = fs_link,
	.write = fs_write,
	.setxattr = fs_setxattr,
	.removexattr = fs_removexattr,
	.create = fs_create,
	.fallocate = fs_fallocate,
};

/* ---- the session's I/O: idmapped mounts and passthrough ----------------- */

/*
 * Sandboxes see an image through idmapped mounts of its one node-wide mount
 * (sandbox/launch.c): each maps the owners as built (0, 1000, ...) into that
 * sandbox's own host id range, while the daemon knows of no range and the
 * mount itself keeps the owners exactly as built.  The kernel (6.12 and
 * later) allows an idmapped mount of a FUSE filesystem only if the server
 * opted in at INIT with FUSE_ALLOW_IDMAP and the mount has
 * default_permissions (ours always has: the kernel then checks access
 * against the mapped owners, the image being read-only either way).
 * libfuse 3.14 keeps INIT flags in 32 bits, so the session's writes go
 * through these hooks, which add the flag to the INIT reply when the kernel
 * offered it; every other message passes through unchanged, and splicing
 * stays as libfuse would do it.  Older kernels never offer the flag, and
 * an idmapped mount then fails with EINVAL.
 */
static ssize_t fs_io_read(int fd, void *buf, size_t len, void *ud)
{
	(void)ud;
	return read(fd, buf, len);
}

static ssize_t fs_io_splice(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
                            unsigned int flags, void *ud)
{
	(void)ud;
	return splice(fdin, offin, fdout, offout, len, flags);
}

/* Patch an OPEN reply for passthrough: the flag and the backing id where
 * libfuse 3.14 writes padding. */
static ssize_t write_open_reply(struct fs *f, int fd, struct iovec *iov)
{
	struct fuse_open_out oo;
	struct iovec patched[2];

	memcpy(&oo, iov[1].iov_base, sizeof(oo));
	oo.open_flags |= FS_FOPEN_PASSTHROUGH;
	memcpy(&oo.padding, &f->reply_backing_id, sizeof(oo.padding));
	patched[0] = iov[0];
	patched[1] = (struct iovec){ &oo, sizeof(oo) };
	return writev(fd, patched, 2);
}

static ssize_t fs_io_writev(int fd, struct iovec *iov, int count, void *ud)
{
	struct fs *f = ud;
	const struct fuse_out_header *oh = iov[0].iov_base;
	const size_t need = offsetof(struct fuse_init_out, flags2) + 2 * sizeof(uint32_t);
	struct fuse_init_out io;
	struct iovec patched[2];
	uint32_t depth = 1;

	if (f->reply_backing_id > 0 && count == 2 && iov[0].iov_len == sizeof(*oh) &&
	    !oh->error && iov[1].iov_len == sizeof(struct fuse_open_out))
		return write_open_reply(f, fd, iov);
	if (!f->init_unique || count != 2 || iov[0].iov_len != sizeof(*oh) ||
	    oh->unique != f->init_unique)
		return writev(fd, iov, count);
	f->init_unique = 0;
	if (oh->error || (!f->idmap_offered && !f->pt_offered) || iov[1].iov_len < need ||
	    iov[1].iov_len > sizeof(io))
		return writev(fd, iov, count);
	memcpy(&io, iov[1].iov_base, iov[1].iov_len);
	io.flags |= FUSE_INIT_EXT;
	if (f->idmap_offered)
		io.flags2 |= (uint32_t)(FS_FUSE_ALLOW_IDMAP >> 32);
	if (f->pt_offered) {
		/* max_stack_depth 1: backing files on a plain filesystem;
		 * the mount itself then counts as one level of stacking
		 * (an overlay above it is the second, the most allowed) */
		io.flags2 |= (uint32_t)(FS_FUSE_PASSTHROUGH >> 32);
		memcpy((char *)&io + offsetof(struct fuse_init_out, flags2) + sizeof(uint32_t),
		       &depth, sizeof(depth));
		f->pt_on = true;
	}
	patched[0] = iov[0];
	patched[1] = (struct iovec){ &io, iov[1].iov_len };
	return writev(fd, patched, 2);
}

/* Before libfuse answers it: note the INIT request's id and whether the
 * kernel offers FUSE_ALLOW_IDMAP.  INIT is the session's first request. */
static void note_init(struct fs *f, size_t len)
{
	const struct fuse_in_header *ih = f->rbuf.mem;
	const struct fuse_init_in *in = (const void *)(ih + 1);

	f->init_seen = true;
	if ((f->rbuf.flags & FUSE_BUF_IS_FD) ||
	    len < sizeof(*ih) + offsetof(struct fuse_init_in, flags2) + sizeof(uint32_t) ||
	    ih->opcode != FUSE_INIT)
		return;
	f->init_unique = ih->unique;
	f->idmap_offered = in->major == 7 && in->minor >= 40 && (in->flags & FUSE_INIT_EXT) &&
	                   (in->flags2 & (uint32_t)(FS_FUSE_ALLOW_IDMAP >> 32));
	/* passthrough's ioctls need CAP_SYS_ADMIN */
	f->pt_offered = in->major == 7 && in->minor >= 40 && (in->flags & FUSE_INIT_EXT) &&
	                (in->flags2 & (uint32_t)(FS_FUSE_PASSTHROUGH >> 32)) && geteuid() == 0 &&
	                !f->p.no_passthrough;
}

/* ---- holding the CPUs awake while serving (FS_CPU_HOLD_NS) --------------- */

static void cpu_latency_set(struct fs *f, int32_t us)
{
	if (write(f->hold_fd, &us, sizeof(us)) != (ssize_t)sizeof(us)) {
		log_errno(-errno, "mount '%s': /dev/cpu_dma_latency; CPUs left to halt",
		          f->mountpoint);
		close(f->hold_fd);
		f->hold_fd = -1;
	}
}

static void cpu_hold_check(void *ud, int res)
{
	struct fs *f = ud;
	uint64_t now = now_ns(), until = f->last_req_ns + FS_CPU_HOLD_NS(f);

	f->timers--;
	if (res != -ECANCELED && !f->closing && !f->finished && now < until &&
	    (f->hold_timer = loop_timer(f->p.loop, until - now, cpu_hold_check, f)) >= 0) {
		f->timers++;
		return;
	}
	f->held = false;
	if (f->hold_fd >= 0)
		cpu_latency_set(f, FS_CPU_LATENCY_ANY);
}

/* A request came: hold the CPUs awake until cpu_hold_ms after the last. */
static void cpu_hold(struct fs *f)
{
	f->last_req_ns = now_ns();
	if (f->hold_fd < 0 || f->held || f->closing ||
	    (f->hold_timer = loop_timer(f->p.loop, FS_CPU_HOLD_NS(f), cpu_hold_check, f)) < 0)
		return;
	f->timers++;
	f->held = true;
	cpu_latency_set(f, 0);
}

/* ---- the session on the loop -------------------------------------------- */

/* The session fd is readable (or the connection is gone): take every queued
 * request, then poll again.  Requests are answered in place or, for reads
 * that wait on the cache, from later loop callbacks. */
static void fs_on_readable(void *ud, int res)
{
	struct fs *f = ud;

	f->polling = false;
	if (f->fd_closed) {
		f->finished = true;
		return;
	}
	for (;;) {
		int r = fuse_session_receive_buf(f->se, &f->rbuf);

		if (r == -EINTR)
			continue;
		if (r == -EAGAIN)
			break;
		if (r <= 0 || fuse_session_exited(f->se)) {
			/* 0: libfuse saw ENODEV (unmounted or aborted) */
			if (r < 0)
				log_errno(r, "mount '%s': reading the FUSE device", f->mountpoint);
			f->finished = true;
			return;
		}
		if (!f->init_seen)
			note_init(f, (size_t)r);
		cpu_hold(f);
		fuse_session_process_buf(f->se, &f->rbuf);
		if (f->init_done) {
			f->init_done = false;
			set_read_ahead(f);
		}
	}
	fs_arm(f);
}

static void fs_arm(struct fs *f)
{
	int r;

	if (f->finished || f->polling)
		return;
	r = loop_poll(f->p.loop, fuse_session_fd(f->se), POLLIN, fs_on_readable, f);
	if (r < 0) {
		log_errno(r, "mount '%s': polling the FUSE device", f->mountpoint);
		f->finished = true;
		return;
	}
	f->polling = true;
}

/* ---- mount, unmount ----------------------------------------------------- */

/* mountinfo escapes ' ', '\t', '\n' and '\\' as \ooo. */
static void unescape_octal(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = 0;
}

int fs_find_mount(const char *mountpoint, dev_t *ret_dev)
{
	_cleanup_fclose_ FILE *mi = fopen("/proc/self/mountinfo", "re");
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	int r = -ENOENT;

	if (!mi)
		return -errno;
	/* The last matching line is the mount on top. */
	while (getline(&line, &cap, mi) > 0) {
		char mnt[PATH_MAX], type[256], *sep;
		unsigned maj, min;

		if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &maj, &min, mnt) != 3)
			continue;
		sep = strstr(line, " - ");
		if (!sep || sscanf(sep, " - %255s", type) != 1)
			continue;
		unescape_octal(mnt);
		if (strcmp(mnt, mountpoint) || strcmp(type, "fuse.lazyroot"))
			continue;
		*ret_dev = makedev(maj, min);
		r = 0;
	}
	return r;
}

/* Widen the kernel's readahead for this mount: buffered reads are never
 * larger than the window, whatever max_pages allows.  Only once INIT is
 * answered: the kernel then lowers the window to the max_readahead of the
 * reply, which libfuse copies from the request (the 128 KiB default); set
 * before, the window read back 128 KiB on a live mount. */
static void set_read_ahead(struct fs *f)
{
	char path[96], val[32];
	_cleanup_close_ int fd = -1;

	if (!f->dev)
		return;
	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", major(f->dev),
	         minor(f->dev));
	fd = open(path, O_WRONLY | O_CLOEXEC);
	snprintf(val, sizeof(val), "%u", FS_READ_AHEAD_KB);
	if (fd < 0 || write_full(fd, val, strlen(val)) < 0)
		log_msg(LOG_WARN, "mount '%s': cannot set %s: %s", f->mountpoint, path,
		        strerror(errno));
}

int fs_mount(const struct fs_params *p, struct fs **ret)
{
	_cleanup_free_ char *opts = NULL;
	struct fs *f;
	char hexpfx[13];
	int r;

	if (!p->mountpoint || !p->image || !p->index_hex || !p->cache || !p->loop)
		return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->p = *p;
	if (!f->p.cpu_hold_ms)
		f->p.cpu_hold_ms = FS_CPU_HOLD_MS;
	f->slot = -1;
	f->hold_fd = p->no_cpu_latency ? -1 : open("/dev/cpu_dma_latency", O_WRONLY | O_CLOEXEC);
	f->mountpoint = realpath(p->mountpoint, NULL);
	if (!f->mountpoint) {
		r = log_errno(-errno, "mount '%s'", p->mountpoint);
		goto fail;
	}
	f->index_hex = strdup(p->index_hex);
	image_get_info(p->image, &f->info);
	f->parent = calloc(f->info.inodes + 1, sizeof(*f->parent));
	if (!f->index_hex || !f->parent) {
		r = -ENOMEM;
		goto fail;
	}
	f->p.mountpoint = f->mountpoint;
	f->p.index_hex = f->index_hex;
	if (p->pack_offsets && hex_decode(p->index_hex, f->pack_name, HASH_SIZE) < 0)
		f->p.pack_offsets = NULL;
	if (p->record)
		f->p.no_passthrough = true;
	r = profile_setup(f);
	if (r < 0) {
		log_errno(r, "mount '%s': setting up the access profile", f->mountpoint);
		goto fail;
	}

	snprintf(hexpfx, sizeof(hexpfx), "%.12s", p->index_hex);
	if (asprintf(&opts, "ro,default_permissions,%s%s,%s,fsname=lazyroot:%s,subtype=lazyroot",
	             p->allow_other ? "allow_other," : "", p->suid ? "suid" : "nosuid",
	             p->dev ? "dev" : "nodev", hexpfx) < 0) {
		opts = NULL;
		r = -ENOMEM;
		goto fail;
	}
	{
		char *argv[] = { "lazyroot", "-o", opts, p->debug ? "-d" : NULL, NULL };
		struct fuse_args args = FUSE_ARGS_INIT(p->debug ? 4 : 3, argv);

		f->se = fuse_session_new(&args, &fs_ops, sizeof(fs_ops), f);
		fuse_opt_free_args(&args);
	}
	if (!f->se) {
		r = log_error(-EINVAL, "mount '%s': cannot set up the FUSE session", f->mountpoint);
		goto fail;
	}
	if (fuse_session_mount(f->se, f->mountpoint) != 0) {
		r = log_error(-EIO, "mount '%s': the FUSE mount failed", f->mountpoint);
		goto fail;
	}
	f->mounted = true;
	{
		static const struct fuse_custom_io io = {
			.writev = fs_io_writev,
			.read = fs_io_read,
			.splice_receive = fs_io_splice,
			.splice_send = fs_io_splice,
		};

		r = fuse_session_custom_io(f->se, &io, fuse_session_fd(f->se));
		if (r < 0) {
			log_errno(r, "mount '%s': hooking the FUSE session's I/O", f->mountpoint);
			goto fail;
		}
	}
	r = fcntl(fuse_session_fd(f->se), F_SETFL,
	          fcntl(fuse_session_fd(f->se), F_GETFL) | O_NONBLOCK);
	if (r < 0) {
		r = log_errno(-errno, "mount '%s': making the FUSE device non-blocking",
		              f->mountpoint);
		goto fail;
	}
	/* From mountinfo, not stat(): the mount answers only once the loop runs. */
	(void)fs_find_mount(f->mountpoint, &f->dev);
	f->slot = cache_image_register(p->cache, p->index_hex, f->info.data_bytes, f->mountpoint);
	if (f->slot < 0) {
		log_msg(LOG_WARN, "mount '%s': no counter slot left; the image is not counted alone",
		        f->mountpoint);
		f->slot = -1;
	}
	fs_arm(f);
	if (f->finished) {
		r = -EIO;
		goto fail;
	}
	*ret = f;
	return 0;
fail:
	fs_free(f);
	return r;
}

bool fs_finished(const struct fs *f)
{
	return f->finished;
}

/* Abort the connection through fusectl: a lazily detached mount that is
 * still in use would otherwise keep the session alive. */
static void abort_connection(struct fs *f)
{
	char path[96];
	_cleanup_close_ int fd = -1;

	if (!f->dev)
		return;
	snprintf(path, sizeof(path), "/sys/fs/fuse/connections/%u/abort", minor(f->dev));
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd >= 0)
		(void)write_full(fd, "1", 1);
}

void fs_free(struct fs *f)
{
	if (!f)
		return;
	f->closing = true;
	if (f->held)
		(void)loop_cancel_timer(f->p.loop, f->hold_timer);
	if (f->se && f->mounted && !f->finished) {
		/* Detach, keeping the session fd: a mount still in use goes on
		 * being served until its last user lets go.  libfuse's own
		 * unmount (for users who need fusermount3) closes the fd. */
		if (geteuid() != 0 || umount2(f->mountpoint, MNT_DETACH) < 0) {
			f->fd_closed = true;
			fuse_session_unmount(f->se);
		}
		abort_connection(f);
	}
	f->pt_on = false;
	/* Reads in flight write into their buffers and reply through the
	 * session; the pending poll holds f: both must complete first.  After
	 * the unmount the poll reports the connection's end — at once, or, when
	 * the detached mount is still in use and fusectl is not mounted, once
	 * its last user lets go (requests are served until then). */
	while (f->reads_inflight || f->polling || f->timers || f->opens_waiting || f->pf_inflight)
		if (loop_run_once(f->p.loop, true) < 0)
			break;
	if (f->slot >= 0)
		cache_image_unregister(f->p.cache, f->slot);
	if (f->se)
		fuse_session_destroy(f->se);
	while (f->nspare)
		free(f->spare[--f->nspare]);
	for (unsigned i = 0; i < FS_OPEN_BUCKETS; i++)
		while (f->opens[i]) {
			struct fs_open_state *os = f->opens[i];

			f->opens[i] = os->next;
			free(os);
		}
	if (f->hold_fd >= 0)
		close(f->hold_fd);              /* drops the latency request */
	free(f->rbuf.mem);
	free(f->seen);
	free(f->rec);
	free(f->ptr);
	free(f->ppos_off);
	free(f->ppos);
	free(f->pstate);
	free(f->pq);
	free(f->parent);
	free(f->index_hex);
	free(f->mountpoint);
	free(f);
}
