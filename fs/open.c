/*
 * open.c — OPEN and RELEASE, and FUSE passthrough.
 *
 * With passthrough (root, kernel 6.9+), a large file whose bytes the cache
 * holds as one whole-file object is opened with FOPEN_PASSTHROUGH: the
 * kernel then reads and maps that file itself, and no READ reaches us.  The
 * opens of such candidates the kernel holds are counted in the connection's
 * state file (struct fs_open_rec), so that a worker taking the connection
 * over knows them and their backing ids.
 */
#include "fs/fs-internal.h"


static int file_pieces(struct fs *f, uint64_t ino, uint64_t size, struct cache_piece **ret,
                       unsigned *ret_n);
static int whole_file(struct fs *f, uint64_t ino, uint64_t size, bool make, cache_cb cb,
                      void *ud);
static int whole_file_held(struct fs *f, uint64_t ino, uint64_t size, cache_cb cb, void *ud);
static void whole_later_cb(void *ud, int res);

/* The record of ino in the open table, or NULL. */
static struct fs_open_rec *open_find(struct fs *f, uint64_t ino)
{
	for (uint32_t i = 0, h = (uint32_t)(ino % FS_STATE_OPEN_SLOTS); i < FS_STATE_OPEN_SLOTS;
	     i++, h = (h + 1) % FS_STATE_OPEN_SLOTS) {
		if (f->opens[h].ino == ino)
			return &f->opens[h];
		if (!f->opens[h].ino)
			return NULL;
	}
	return NULL;
}

/* A new, zeroed record for ino (not in the table), or NULL when full. */
static struct fs_open_rec *open_add(struct fs *f, uint64_t ino)
{
	for (uint32_t i = 0, h = (uint32_t)(ino % FS_STATE_OPEN_SLOTS); i < FS_STATE_OPEN_SLOTS;
	     i++, h = (h + 1) % FS_STATE_OPEN_SLOTS)
		if (!f->opens[h].ino) {
			f->opens[h] = (struct fs_open_rec){ .ino = 0 };
			f->opens[h].ino = ino;
			return &f->opens[h];
		}
	return NULL;
}

/* Drop a record whose counts are both 0.  Linear probing without
 * tombstones: later records of the same run move back into the gap, so that
 * open_find's scan still reaches them. */
static void open_drop(struct fs *f, struct fs_open_rec *os)
{
	uint32_t gap = (uint32_t)(os - f->opens);

	os->ino = 0;
	for (uint32_t j = (gap + 1) % FS_STATE_OPEN_SLOTS; f->opens[j].ino;
	     j = (j + 1) % FS_STATE_OPEN_SLOTS) {
		uint32_t home = (uint32_t)(f->opens[j].ino % FS_STATE_OPEN_SLOTS);

		/* j's record may fill the gap unless its home lies in (gap, j] */
		if ((j > gap && (home <= gap || home > j)) || (j < gap && home <= gap && home > j)) {
			/* copied before cleared: a worker killed between the
			 * two leaves a duplicate, whose counts are too high
			 * (safe), never a lost record */
			f->opens[gap] = f->opens[j];
			f->opens[j].ino = 0;
			gap = j;
		}
	}
}

uint32_t fs_open_count(const struct fs *f)
{
	/* A running count: summing the table would fault in every page of it
	 * (shared memory allocates a page on a read of a hole). */
	return f->state ? (uint32_t)f->state->opens_held : 0;
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
 * kernel gets FOPEN_PASSTHROUGH when its object is ready: the object is
 * re-hashed for every new registration unless its pages stayed in memory
 * since its last check (cache_file_open), and the OPEN waits for that
 * (may_wait; the hash of a 33 MB file takes 5-10 ms warm), since the open
 * is usually the one that reads it; one found corrupt is dropped and the
 * file served from its chunks.  An OPEN never starts making an object
 * (whole_file_soon does, once reads pause): the file is served from the
 * chunks meanwhile.
 */
static void open_answer(struct fs *f, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi,
                        bool may_wait)
{
	struct fs_open_rec *os = NULL;
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
		os = open_find(f, ino);
		if (os && os->passthrough) {
			/* shared with the opens that hold it, unless its object
			 * was found bad since: the kernel allows this inode no
			 * other kind of open while they live, so the open fails
			 * rather than read what they read */
			struct fs_open_wait *w = may_wait ? malloc(sizeof(*w)) : NULL;

			r = whole_file_held(f, ino, is.size, w ? open_resume : NULL, w);
			if (r == -EINPROGRESS) {
				*w = (struct fs_open_wait){ f, req, ino, *fi };
				f->opens_waiting++;
				return;
			}
			free(w);
			if (r < 0) {
				fuse_reply_err(req, EIO);
				return;
			}
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
		if (!os && !(os = open_add(f, ino))) {
			if (id)
				backing_close(f, id);
			fuse_reply_err(req, EMFILE);
			return;
		}
		/* counted before the answer: see struct fs_open_rec */
		if (id && !os->passthrough)
			os->backing_id = id;
		if (id) {
			os->passthrough++;
			f->state->opens_held++;
			fi->fh = FS_FH_PASSTHROUGH;
			fi->keep_cache = 0;
		} else {
			os->cached++;
			f->state->opens_held++;
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
		f->state->opens_held--;
	} else if (id) {
		cache_note_passthrough(f->p.cache);
	}
	if (os && !os->passthrough && !os->cached) {
		if (id)
			backing_close(f, id);
		open_drop(f, os);
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
void fs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	open_answer(fuse_req_userdata(req), req, ino, fi, true);
}

void fs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *f = fuse_req_userdata(req);
	struct fs_open_rec *os;

	/* Answered before the count drops: see struct fs_open_rec. */
	fuse_reply_err(req, 0);
	os = open_find(f, ino);
	if (os && fi->fh == FS_FH_PASSTHROUGH && os->passthrough) {
		f->state->opens_held--;
		if (--os->passthrough == 0)
			backing_close(f, os->backing_id);
	} else if (os && fi->fh == FS_FH_CACHED && os->cached) {
		f->state->opens_held--;
		os->cached--;
	}
	if (os && !os->passthrough && !os->cached)
		open_drop(f, os);
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
		ahead_chunk(f->ahead, ex.chunk, &ic, &v[i].ch);
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

/* cache_file_held() for file ino of size bytes. */
static int whole_file_held(struct fs *f, uint64_t ino, uint64_t size, cache_cb cb, void *ud)
{
	_cleanup_free_ struct cache_piece *v = NULL;
	unsigned n = 0;
	int r = file_pieces(f, ino, size, &v, &n);

	if (r < 0)
		return r;
	return cache_file_held(f->p.cache, v, n, cb, ud);
}

struct fs_whole_later {
	struct fs *f;
	struct fs_whole_later *prev, *next;   /* f->whole_laters */
	int64_t timer;
	uint64_t ino, size;
	uint64_t latest_ns;             /* made by then, idle or not */
};

static bool whole_later_arm(struct fs_whole_later *w, uint64_t ns)
{
	struct fs *f = w->f;

	w->timer = loop_timer(f->p.loop, ns, whole_later_cb, w);
	if (w->timer < 0)
		return false;
	LIST_PUSH_HEAD(&f->whole_laters, w, prev, next);
	f->timers++;
	return true;
}

static void whole_later_cb(void *ud, int res)
{
	struct fs_whole_later *w = ud;
	struct fs *f = w->f;
	uint64_t now = now_ns(), idle_at = f->last_read_ns + FS_PT_DELAY_NS;

	f->timers--;
	LIST_UNLINK(&f->whole_laters, w, prev, next);
	/* a mount on its way out makes nothing more (fs_whole_laters_cancel) */
	if (res == -ECANCELED || f->closing || !f->pt_on || f->finished) {
		free(w);
		return;
	}
	/* reads are still arriving: wait for a quiet spell */
	if (now < idle_at && now < w->latest_ns &&
	    whole_later_arm(w, MIN(idle_at, w->latest_ns) - now))
		return;
	(void)whole_file(f, w->ino, w->size, true, NULL, NULL);
	free(w);
}

void fs_whole_file_soon(struct fs *f, uint64_t ino, uint64_t size)
{
	struct fs_whole_later *w = malloc(sizeof(*w));

	if (!w)
		return;
	*w = (struct fs_whole_later){ .f = f, .ino = ino, .size = size,
	                              .latest_ns = now_ns() + FS_PT_LATEST_NS };
	if (!whole_later_arm(w, FS_PT_DELAY_NS))
		free(w);
}

void fs_whole_laters_cancel(struct fs *f)
{
	for (struct fs_whole_later *w = f->whole_laters.head; w; w = w->next)
		(void)loop_cancel_timer(f->p.loop, w->timer);
}

