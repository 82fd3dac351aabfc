/*
 * tar.c — a streaming tar reader: decompression (plain, gzip, zstd), header
 * parsing (v7, ustar, GNU, POSIX pax) and member contents as data pieces and
 * holes.  The input is hostile: every numeric field is range-checked, every
 * extended header is bounded (TAR_EXT_MAX), sparse maps must be sorted,
 * disjoint and add up to the stored data, and every header's checksum must
 * match.  One pass, no seeking except to skip data of an uncompressed
 * regular file.
 *
 * The reader is three files around one struct (tar-internal.h): this one is
 * the stream (raw input, decompression, skipping, a member's contents and
 * the end); tar-header.c parses headers (fields, checksums, pax and GNU
 * extended headers) and walks from one member's header to the next;
 * tar-entry.c applies what the headers said to the member's entry (name,
 * attributes, type, xattrs, sparse map) and checks it.
 *
 * End of input: the archive ends at two zero blocks.  Input that stops
 * without them, at a member boundary or inside a header or a member's data,
 * is "truncated"; an empty input, or one whose first block is no tar header,
 * is "not a tar archive".
 */
#include <fcntl.h>
#include <sys/stat.h>

#include "chunker/tar-internal.h"
#include "lib/sha256.h"

/* ---- raw input and decompression ------------------------------------------ */

/* Up to len raw bytes from the input: their count, 0 at its end, -errno
 * (logged: here for an fd, by the function for a read_fn). */
static ssize_t raw_read(struct tar_reader *r, void *buf, size_t len)
{
	ssize_t n;

	if (r->read_fn)
		return r->read_fn(r->read_ctx, buf, len);
	do
		n = read(r->fd, buf, len);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return log_errno(-errno, "%s: read", r->name);
	return n;
}

static int raw_fill(struct tar_reader *r)
{
	ssize_t n;

	if (r->in_pos < r->in_len || r->in_eof)
		return 0;
	n = raw_read(r, r->in, TAR_IN_SIZE);
	if (n < 0)
		return (int)n;
	r->in_pos = 0;
	r->in_len = (size_t)n;
	if (n == 0)
		r->in_eof = true;
	r->raw_bytes += (uint64_t)n;
	if (r->hash)
		sha256_update(r->hash, r->in, (size_t)n);
	return 0;
}

static int gzip_fill(struct tar_reader *r)
{
	int r2, zr;

	for (;;) {
		size_t produced;

		r2 = raw_fill(r);
		if (r2 < 0)
			return r2;
		if (r->z_member_done) {
			bool zeros = false;

			/* Between members: another member, trailing zero padding
			 * (tolerated, as gzip does) or the end. */
			while (r->in_pos < r->in_len || !r->in_eof) {
				r2 = raw_fill(r);
				if (r2 < 0)
					return r2;
				if (r->in_pos == r->in_len)
					break;
				if (r->in[r->in_pos] != 0)
					break;
				r->in_pos++;
				zeros = true;
			}
			if (r->in_pos == r->in_len && r->in_eof) {
				r->out_eof = true;
				return 0;
			}
			if (zeros)
				return log_error(-EBADMSG, "%s: trailing garbage after gzip stream",
				                 r->name);
			r->z_member_done = false;
		}
		r->z.next_in = r->in + r->in_pos;
		r->z.avail_in = (uInt)(r->in_len - r->in_pos);
		r->z.next_out = r->out;
		r->z.avail_out = TAR_OUT_SIZE;
		zr = inflate(&r->z, Z_NO_FLUSH);
		r->in_pos = r->in_len - r->z.avail_in;
		produced = TAR_OUT_SIZE - r->z.avail_out;
		if (zr == Z_STREAM_END) {
			r->z_member_done = true;
			if (inflateReset(&r->z) != Z_OK)
				return log_error(-EIO, "%s: gzip: cannot reset inflate", r->name);
		} else if (zr == Z_BUF_ERROR) {
			if (!produced && r->in_eof && r->in_pos == r->in_len)
				return log_error(-EBADMSG, "%s: truncated gzip stream", r->name);
		} else if (zr != Z_OK) {
			return log_error(zr == Z_MEM_ERROR ? -ENOMEM : -EBADMSG,
			                 "%s: corrupt gzip stream: %s", r->name,
			                 r->z.msg ? r->z.msg : "inflate failed");
		}
		if (produced) {
			r->out_pos = 0;
			r->out_len = produced;
			return 0;
		}
	}
}

static int zstd_fill(struct tar_reader *r)
{
	for (;;) {
		ZSTD_inBuffer in;
		ZSTD_outBuffer out = { r->out, TAR_OUT_SIZE, 0 };
		size_t zr;
		int r2;

		r2 = raw_fill(r);
		if (r2 < 0)
			return r2;
		in = (ZSTD_inBuffer){ r->in, r->in_len, r->in_pos };
		zr = ZSTD_decompressStream(r->zs, &out, &in);
		if (ZSTD_isError(zr))
			return log_error(-EBADMSG, "%s: corrupt zstd stream: %s", r->name,
			                 ZSTD_getErrorName(zr));
		/* A call that neither read nor wrote (at the end of the input,
		 * after a finished frame) says nothing about completeness. */
		if (in.pos != r->in_pos || out.pos)
			r->zs_last = zr;
		r->in_pos = in.pos;
		if (out.pos) {
			r->out_pos = 0;
			r->out_len = out.pos;
			return 0;
		}
		if (r->in_pos == r->in_len && r->in_eof) {
			if (r->zs_last != 0)
				return log_error(-EBADMSG, "%s: truncated zstd stream", r->name);
			r->out_eof = true;
			return 0;
		}
	}
}

/* Make uncompressed bytes available: the count (0 at the end of the stream)
 * and where they are. */
static ssize_t stream_peek(struct tar_reader *r, const uint8_t **ret)
{
	int k;

	if (r->codec == CODEC_NONE) {
		k = raw_fill(r);
		if (k < 0)
			return k;
		*ret = r->in + r->in_pos;
		return (ssize_t)(r->in_len - r->in_pos);
	}
	if (r->out_pos == r->out_len && !r->out_eof) {
		k = r->codec == CODEC_GZIP ? gzip_fill(r) : zstd_fill(r);
		if (k < 0)
			return k;
	}
	*ret = r->out + r->out_pos;
	return (ssize_t)(r->out_len - r->out_pos);
}

static void stream_consume(struct tar_reader *r, size_t n)
{
	if (r->codec == CODEC_NONE)
		r->in_pos += n;
	else
		r->out_pos += n;
	r->offset += n;
}

/* Read up to n bytes; fewer only at the end of the stream. */
ssize_t tar_stream_read(struct tar_reader *r, void *buf, size_t n)
{
	size_t done = 0;

	while (done < n) {
		const uint8_t *p;
		ssize_t k = stream_peek(r, &p);

		if (k < 0)
			return k;
		if (k == 0)
			break;
		k = MIN(k, (ssize_t)(n - done));
		memcpy((uint8_t *)buf + done, p, (size_t)k);
		stream_consume(r, (size_t)k);
		done += (size_t)k;
	}
	return (ssize_t)done;
}

/* Skip n bytes; a short stream is an error (the caller names the member). */
int tar_stream_skip(struct tar_reader *r, uint64_t n)
{
	while (n > 0) {
		const uint8_t *p;
		ssize_t k;

		if (r->seekable && r->in_pos == r->in_len) {
			off_t cur = lseek(r->fd, 0, SEEK_CUR);

			if (cur < 0)
				return log_errno(-errno, "%s: seek", r->name);
			if ((uint64_t)cur + n > r->file_size)
				return -EPIPE;
			if (lseek(r->fd, (off_t)n, SEEK_CUR) < 0)
				return log_errno(-errno, "%s: seek", r->name);
			r->raw_bytes += n;
			r->offset += n;
			return 0;
		}
		k = stream_peek(r, &p);
		if (k < 0)
			return (int)k;
		if (k == 0)
			return -EPIPE;
		k = (ssize_t)MIN((uint64_t)k, n);
		stream_consume(r, (size_t)k);
		n -= (uint64_t)k;
	}
	return 0;
}

/* ---- setup ------------------------------------------------------------------ */

int tar_reader_new(int fd, const char *name, struct tar_reader **ret)
{
	struct tar_reader *r;
	struct stat st;

	r = calloc(1, sizeof(*r));
	if (!r)
		return log_errno(-ENOMEM, "%s", name);
	r->fd = fd;
	r->name = name;
	r->global.sparse_major = r->global.sparse_minor = -1;
	r->local.sparse_major = r->local.sparse_minor = -1;
	r->in = malloc(TAR_IN_SIZE);
	if (!r->in) {
		tar_reader_free(r);
		return log_errno(-ENOMEM, "%s", name);
	}
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && lseek(fd, 0, SEEK_CUR) >= 0) {
		r->seekable = true;
		r->file_size = (uint64_t)st.st_size;
	}
	*ret = r;
	return 0;
}

int tar_reader_new_fn(tar_read_fn fn, void *ctx, const char *name, struct tar_reader **ret)
{
	int r = tar_reader_new(-1, name, ret);

	if (r < 0)
		return r;
	(*ret)->read_fn = fn;
	(*ret)->read_ctx = ctx;
	return 0;
}

void tar_reader_hash(struct tar_reader *r, struct sha256 *h)
{
	r->hash = h;
	r->seekable = false;  /* every byte must pass through the hash */
}

void tar_ext_clear(struct ext *x)
{
	size_t i;

	free(x->path);
	free(x->linkpath);
	free(x->sparse_name);
	for (i = 0; i < x->n_xattrs; i++) {
		free(x->xattrs[i].name);
		free(x->xattrs[i].value);
	}
	free(x->xattrs);
	free(x->map);
	memset(x, 0, sizeof(*x));
	x->sparse_major = x->sparse_minor = -1;
}

void tar_entry_clear(struct tar_reader *r)
{
	size_t i;

	free(r->path);
	free(r->linkpath);
	for (i = 0; i < r->n_xattrs; i++) {
		free(r->xattrs[i].name);
		free(r->xattrs[i].value);
	}
	free(r->xattrs);
	free(r->map);
	r->path = r->linkpath = NULL;
	r->xattrs = NULL;
	r->map = NULL;
	r->n_xattrs = r->n_map = r->map_i = 0;
	r->seg_done = r->pos = 0;
	memset(&r->e, 0, sizeof(r->e));
}

void tar_reader_free(struct tar_reader *r)
{
	if (!r)
		return;
	tar_entry_clear(r);
	tar_ext_clear(&r->global);
	tar_ext_clear(&r->local);
	free(r->gnu_longname);
	free(r->gnu_longlink);
	if (r->z_init)
		inflateEnd(&r->z);
	ZSTD_freeDStream(r->zs);
	free(r->in);
	free(r->out);
	free(r);
}

/* Look at the first bytes and set up decompression. */
int tar_detect(struct tar_reader *r)
{
	uint8_t m[6];
	size_t have;
	int k;

	/* Gather up to 6 bytes in the input buffer without consuming them. */
	k = raw_fill(r);
	if (k < 0)
		return k;
	while (r->in_len - r->in_pos < sizeof(m) && !r->in_eof) {
		ssize_t n = raw_read(r, r->in + r->in_len, TAR_IN_SIZE - r->in_len);

		if (n < 0)
			return (int)n;
		if (n == 0) {
			r->in_eof = r->in_len == r->in_pos;
			break;
		}
		if (r->hash)
			sha256_update(r->hash, r->in + r->in_len, (size_t)n);
		r->in_len += (size_t)n;
		r->raw_bytes += (uint64_t)n;
	}
	have = r->in_len - r->in_pos;
	memset(m, 0, sizeof(m));
	memcpy(m, r->in + r->in_pos, MIN(have, sizeof(m)));

	if (have >= 2 && m[0] == 0x1f && m[1] == 0x8b) {
		r->codec = CODEC_GZIP;
		if (inflateInit2(&r->z, 15 + 32) != Z_OK)
			return log_errno(-ENOMEM, "%s: gzip", r->name);
		r->z_init = true;
	} else if (have >= 4 && ((m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f && m[3] == 0xfd) ||
	                         ((m[0] & 0xf0) == 0x50 && m[1] == 0x2a && m[2] == 0x4d &&
	                          m[3] == 0x18))) {
		r->codec = CODEC_ZSTD;
		r->zs = ZSTD_createDStream();
		if (!r->zs)
			return log_errno(-ENOMEM, "%s: zstd", r->name);
		r->zs_last = 1;
	} else if (have >= 6 && memcmp(m, "\xfd" "7zXZ\0", 6) == 0) {
		return log_error(-EPROTONOSUPPORT, "%s: xz compression is not supported", r->name);
	} else if (have >= 3 && memcmp(m, "BZh", 3) == 0) {
		return log_error(-EPROTONOSUPPORT, "%s: bzip2 compression is not supported",
		                 r->name);
	} else {
		r->codec = CODEC_NONE;
		return 0;
	}
	r->seekable = false;
	r->out = malloc(TAR_OUT_SIZE);
	if (!r->out)
		return log_errno(-ENOMEM, "%s", r->name);
	return 0;
}

/* ---- member contents and the end ------------------------------------------- */

int tar_reader_read(struct tar_reader *r, const void **ret_data, size_t *ret_len,
                    uint64_t *ret_hole)
{
	const uint8_t *p;
	uint64_t want;
	ssize_t n;

	*ret_data = NULL;
	*ret_len = 0;
	*ret_hole = 0;
	if (r->e.type != '0')
		return 0;
	if (r->e.sparse) {
		for (;;) {
			const struct tar_sparse *s;

			if (r->map_i == r->n_map) {
				if (r->pos < r->e.size) {
					*ret_hole = r->e.size - r->pos;
					r->pos = r->e.size;
					return 1;
				}
				return 0;
			}
			s = &r->map[r->map_i];
			if (r->pos < s->off) {
				*ret_hole = s->off - r->pos;
				r->pos = s->off;
				return 1;
			}
			if (r->seg_done < s->len)
				break;
			r->map_i++;
			r->seg_done = 0;
		}
		want = r->map[r->map_i].len - r->seg_done;
	} else {
		want = r->data_left;
	}
	if (want == 0)
		return 0;
	n = stream_peek(r, &p);
	if (n < 0)
		return (int)n;
	if (n == 0)
		return tar_member_error(r, -EPIPE, "truncated archive");
	n = (ssize_t)MIN((uint64_t)n, want);
	stream_consume(r, (size_t)n);
	r->data_left -= (uint64_t)n;
	r->seg_done += (uint64_t)n;
	r->pos += (uint64_t)n;
	*ret_data = p;
	*ret_len = (size_t)n;
	return 1;
}

int tar_reader_finish(struct tar_reader *r, uint64_t *ret_raw)
{
	int k;

	if (r->codec != CODEC_NONE) {
		/* Decompress to the end: this checks the trailers' checksums. */
		while (!r->out_eof) {
			const uint8_t *p;
			ssize_t n = stream_peek(r, &p);

			if (n < 0)
				return (int)n;
			stream_consume(r, (size_t)n);
		}
	}
	if (r->hash || ret_raw) {
		for (;;) {
			r->in_pos = r->in_len;
			k = raw_fill(r);
			if (k < 0)
				return k;
			if (r->in_eof)
				break;
		}
	}
	if (ret_raw)
		*ret_raw = r->raw_bytes;
	return 0;
}
