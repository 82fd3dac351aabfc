/*
 * read.c — READ and LSEEK.  A read maps its byte range through the file's
 * extents into one reply buffer: holes are zero-filled at once, every extent
 * piece becomes one cache_read() into its place in the buffer, and the reply
 * goes out from the loop when the last piece completes, so a waiting read
 * holds no thread.  EIO means a chunk could not be fetched or verified.
 */
#include "fs/fs-internal.h"

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
	if (rd->err == 0)
		f->bytes_served += rd->len;
	if (rd->err == 0 && rd->whole_ino)
		fs_whole_file_soon(f, rd->whole_ino, rd->whole_size);
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

/* Start one cache_read per extent piece of [off, off+len) of ino (a file of
 * size bytes) and zero the holes.  Pieces that start count toward
 * rd->pending. */
static int read_start(struct fs *f, fuse_ino_t ino, struct fs_read *rd, uint64_t off,
                      uint64_t size)
{
	const struct image *img = f->p.image;
	uint64_t end = off + rd->len, pos = off;
	struct cache_chunk near[AHEAD_NEAR_MAX];
	unsigned nnear = 0;
	int64_t n, i;

	if (cache_store_slow(f->p.cache))
		nnear = ahead_near(f->ahead, ino, size, near);

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
		if (ahead_touch(f->ahead, ex.chunk)) {
			f->chunks_read++;
			f->bytes_read += ic.size;
		}
		ahead_chunk(f->ahead, ex.chunk, &ic, &cc);
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

void fs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
	struct fs *f = fuse_req_userdata(req);
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

	ahead_read(f->ahead, ino, uoff, size, r == 0);
	ahead_pump(f->ahead);
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

void fs_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
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


void fs_read_bufs_free(struct fs *f)
{
	while (f->nspare)
		free(f->spare[--f->nspare]);
}
