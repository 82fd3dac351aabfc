/*
 * tar.c — a streaming tar reader: decompression (plain, gzip, zstd), header
 * parsing (v7, ustar, GNU, POSIX pax) and member contents as data pieces and
 * holes.  The input is hostile: every numeric field is range-checked, every
 * extended header is bounded (TAR_EXT_MAX), sparse maps must be sorted,
 * disjoint and add up to the stored data, and every header's checksum must
 * match.  One pass, no seeking except to skip data of an uncompressed
 * regular file.
 *
 * End of input: the archive ends at two zero blocks.  Input that stops at a
 * member boundary without them is accepted with a warning, as GNU tar does;
 * input that stops inside a header or a member's data is "truncated".
 */
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <zlib.h>
#include <zstd.h>

#include "chunker/chunker-internal.h"
#include "lib/lib.h"
#include "lib/sha256.h"

#define TAR_BLOCK 512
#define TAR_IN_SIZE (128 * 1024)
#define TAR_OUT_SIZE (256 * 1024)
#define TAR_EXT_MAX (16u << 20)     /* largest pax header we accept */
#define TAR_NAME_MAX (64u << 10)    /* largest GNU long name / link name */
#define TAR_SPARSE_MAX (1u << 20)   /* most sparse map entries */

enum codec { CODEC_NONE, CODEC_GZIP, CODEC_ZSTD };

/* Extended-header values: local ('x', 'L', 'K') for the next member, or
 * global ('g'; only uid, gid, mtime and xattrs are honoured there). */
struct ext {
	char *path, *linkpath;
	bool has_size, has_uid, has_gid, has_mtime, has_major, has_minor;
	uint64_t size;
	uint32_t uid, gid;
	int64_t mtime;
	uint32_t mtime_nsec;
	uint32_t major, minor;
	struct tar_xattr *xattrs;
	size_t n_xattrs;
	/* GNU sparse in pax form */
	long sparse_major, sparse_minor;   /* -1: not given */
	char *sparse_name;
	bool has_realsize, sparse_map_given;
	uint64_t realsize;
	struct tar_sparse *map;
	size_t n_map;
	bool pending_offset;               /* 0.0: an offset waiting for its numbytes */
};

struct tar_reader {
	int fd;
	tar_read_fn read_fn;               /* instead of fd when set */
	void *read_ctx;
	const char *name;
	enum codec codec;
	bool seekable;                     /* plain regular file, not hashed */
	uint64_t file_size;                /* when seekable */

	/* raw input */
	uint8_t *in;
	size_t in_pos, in_len;
	bool in_eof;
	uint64_t raw_bytes;
	struct sha256 *hash;

	/* decompressed output (CODEC_NONE reads straight from in) */
	uint8_t *out;
	size_t out_pos, out_len;
	bool out_eof;
	z_stream z;
	bool z_init, z_member_done;
	ZSTD_DStream *zs;
	size_t zs_last;                    /* last ZSTD_decompressStream() hint */

	uint64_t offset;                   /* position in the uncompressed stream */
	bool detected;
	bool ended;                        /* end of archive seen */

	struct ext global, local;
	char *gnu_longname, *gnu_longlink;

	/* the current member */
	struct tar_entry e;
	char *path, *linkpath;
	struct tar_xattr *xattrs;
	size_t n_xattrs;
	struct tar_sparse *map;
	size_t n_map, map_i;
	uint64_t seg_done, pos;
	uint64_t data_left;                /* stored bytes of the member not yet consumed */
	uint64_t pad;                      /* padding after them */
};

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
static ssize_t stream_read(struct tar_reader *r, void *buf, size_t n)
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
static int stream_skip(struct tar_reader *r, uint64_t n)
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

static void ext_clear(struct ext *x)
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

static void entry_clear(struct tar_reader *r)
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
	entry_clear(r);
	ext_clear(&r->global);
	ext_clear(&r->local);
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
static int detect(struct tar_reader *r)
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

/* ---- header fields ---------------------------------------------------------- */

/* A numeric header field: octal (leading spaces, ending at NUL or space),
 * empty meaning 0, or GNU/star base-256 (high bit of the first byte set;
 * the next bit is the sign). */
static int parse_num(const uint8_t *f, size_t len, bool allow_neg, int64_t *ret)
{
	size_t i = 0;

	if (f[0] & 0x80) {
		bool neg = f[0] & 0x40;
		uint64_t v = f[0] & 0x3f;

		if (neg)
			v = (~(uint64_t)f[0]) & 0x3f;
		for (i = 1; i < len; i++) {
			if (v >> 55)
				return -ERANGE;
			v = (v << 8) | (uint8_t)(neg ? ~f[i] : f[i]);
		}
		if (v > (uint64_t)INT64_MAX)
			return -ERANGE;
		if (neg) {
			if (!allow_neg)
				return -ERANGE;
			*ret = -(int64_t)v - 1;
		} else {
			*ret = (int64_t)v;
		}
		return 0;
	}

	uint64_t v = 0;

	while (i < len && f[i] == ' ')
		i++;
	for (; i < len && f[i] >= '0' && f[i] <= '7'; i++) {
		if (v >> 60)
			return -ERANGE;
		v = v * 8 + (uint64_t)(f[i] - '0');
	}
	/* The digits end at a NUL, a space or the end of the field; what
	 * follows a terminator is not looked at (as GNU tar). */
	if (i < len && f[i] != ' ' && f[i] != 0)
		return -EINVAL;
	*ret = (int64_t)v;
	return 0;
}

static int parse_unum(const uint8_t *f, size_t len, uint64_t max, uint64_t *ret)
{
	int64_t v;
	int k = parse_num(f, len, false, &v);

	if (k < 0)
		return k;
	if ((uint64_t)v > max)
		return -ERANGE;
	*ret = (uint64_t)v;
	return 0;
}

static bool block_is_zero(const uint8_t *b)
{
	size_t i;

	for (i = 0; i < TAR_BLOCK; i++)
		if (b[i])
			return false;
	return true;
}

static bool checksum_ok(const uint8_t *b)
{
	uint64_t stored;
	unsigned long usum = 0;
	long ssum = 0;
	size_t i;

	if (parse_unum(b + 148, 8, UINT32_MAX, &stored) < 0)
		return false;
	for (i = 0; i < TAR_BLOCK; i++) {
		uint8_t c = i >= 148 && i < 156 ? ' ' : b[i];

		usum += c;
		ssum += (signed char)c;
	}
	return stored == usum || (long)stored == ssum;
}

static char *strndup_field(const uint8_t *f, size_t len)
{
	return strndup((const char *)f, len);
}

/* ---- pax extended headers --------------------------------------------------- */

static int parse_dec(const char *s, size_t len, uint64_t max, uint64_t *ret)
{
	uint64_t v = 0;
	size_t i;

	if (len == 0 || len > 20)
		return -EINVAL;
	for (i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		if (v > (UINT64_MAX - 9) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v > max)
		return -ERANGE;
	*ret = v;
	return 0;
}

/* "[-]SECONDS[.FRACTION]" → seconds and nanoseconds (floor semantics for
 * negative times: -1.5 is -2 s + 500000000 ns). */
static int parse_pax_time(const char *s, size_t len, int64_t *ret_sec, uint32_t *ret_nsec)
{
	bool neg = len > 0 && s[0] == '-';
	const char *dot;
	uint64_t sec, nsec = 0;
	size_t ilen, i;
	int k;

	s += neg;
	len -= neg;
	dot = memchr(s, '.', len);
	ilen = dot ? (size_t)(dot - s) : len;
	k = parse_dec(s, ilen, (uint64_t)INT64_MAX - 1, &sec);
	if (k < 0)
		return k;
	if (dot) {
		size_t flen = len - ilen - 1;

		if (flen == 0)
			return -EINVAL;
		for (i = 0; i < flen; i++) {
			char c = dot[1 + i];

			if (c < '0' || c > '9')
				return -EINVAL;
			if (i < 9)
				nsec = nsec * 10 + (uint64_t)(c - '0');
		}
		for (; i < 9; i++)
			nsec *= 10;
	}
	if (neg && nsec) {
		*ret_sec = -(int64_t)sec - 1;
		*ret_nsec = (uint32_t)(1000000000 - nsec);
	} else {
		*ret_sec = neg ? -(int64_t)sec : (int64_t)sec;
		*ret_nsec = (uint32_t)nsec;
	}
	return 0;
}

static const int8_t b64_val[256] = {
	['A'] = 1, ['B'] = 2, ['C'] = 3, ['D'] = 4, ['E'] = 5, ['F'] = 6, ['G'] = 7, ['H'] = 8,
	['I'] = 9, ['J'] = 10, ['K'] = 11, ['L'] = 12, ['M'] = 13, ['N'] = 14, ['O'] = 15,
	['P'] = 16, ['Q'] = 17, ['R'] = 18, ['S'] = 19, ['T'] = 20, ['U'] = 21, ['V'] = 22,
	['W'] = 23, ['X'] = 24, ['Y'] = 25, ['Z'] = 26, ['a'] = 27, ['b'] = 28, ['c'] = 29,
	['d'] = 30, ['e'] = 31, ['f'] = 32, ['g'] = 33, ['h'] = 34, ['i'] = 35, ['j'] = 36,
	['k'] = 37, ['l'] = 38, ['m'] = 39, ['n'] = 40, ['o'] = 41, ['p'] = 42, ['q'] = 43,
	['r'] = 44, ['s'] = 45, ['t'] = 46, ['u'] = 47, ['v'] = 48, ['w'] = 49, ['x'] = 50,
	['y'] = 51, ['z'] = 52, ['0'] = 53, ['1'] = 54, ['2'] = 55, ['3'] = 56, ['4'] = 57,
	['5'] = 58, ['6'] = 59, ['7'] = 60, ['8'] = 61, ['9'] = 62, ['+'] = 63, ['/'] = 64,
};

/* Base64 (padding optional, as libarchive writes it without) into out,
 * which holds at least len bytes.  Returns the decoded length or -EINVAL. */
static ssize_t b64_decode(const char *s, size_t len, uint8_t *out)
{
	uint32_t acc = 0;
	size_t n = 0, bits = 0, i;

	while (len > 0 && s[len - 1] == '=')
		len--;
	for (i = 0; i < len; i++) {
		int v = b64_val[(uint8_t)s[i]];

		if (!v)
			return -EINVAL;
		acc = (acc << 6) | (uint32_t)(v - 1);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[n++] = (uint8_t)(acc >> bits);
		}
	}
	return (ssize_t)n;
}

/* libarchive percent-encodes xattr names in LIBARCHIVE.xattr.NAME. */
static char *url_decode(const char *s, size_t len)
{
	char *out = malloc(len + 1);
	size_t i, n = 0;

	if (!out)
		return NULL;
	for (i = 0; i < len; i++) {
		if (s[i] == '%' && i + 2 < len && hex_digit(s[i + 1]) >= 0 &&
		    hex_digit(s[i + 2]) >= 0) {
			out[n++] = (char)(hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2]));
			i += 2;
		} else {
			out[n++] = s[i];
		}
	}
	out[n] = 0;
	return out;
}

static int ext_set_xattr(struct ext *x, char *name, uint8_t *value, size_t len)
{
	struct tar_xattr *a;
	size_t i;

	if (!name[0]) {
		free(name);
		free(value);
		return -EINVAL;
	}
	for (i = 0; i < x->n_xattrs; i++)
		if (strcmp(x->xattrs[i].name, name) == 0) {
			free(x->xattrs[i].name);
			free(x->xattrs[i].value);
			x->xattrs[i] = (struct tar_xattr){ name, value, len };
			return 0;
		}
	a = reallocarray(x->xattrs, x->n_xattrs + 1, sizeof(*a));
	if (!a) {
		free(name);
		free(value);
		return -ENOMEM;
	}
	x->xattrs = a;
	x->xattrs[x->n_xattrs++] = (struct tar_xattr){ name, value, len };
	return 0;
}

static int map_push(struct tar_sparse **map, size_t *n, uint64_t off, uint64_t len)
{
	struct tar_sparse *m;

	if (*n >= TAR_SPARSE_MAX)
		return -E2BIG;
	if ((*n & (*n - 1)) == 0) {  /* grow at powers of two */
		m = reallocarray(*map, *n ? *n * 2 : 4, sizeof(**map));
		if (!m)
			return -ENOMEM;
		*map = m;
	}
	(*map)[(*n)++] = (struct tar_sparse){ off, len };
	return 0;
}

static bool key_is(const char *k, size_t klen, const char *lit)
{
	return klen == strlen(lit) && memcmp(k, lit, klen) == 0;
}

static bool key_has_prefix(const char *k, size_t klen, const char *lit)
{
	return klen > strlen(lit) && memcmp(k, lit, strlen(lit)) == 0;
}

static char *memdup_str(const char *s, size_t len)
{
	char *p = malloc(len + 1);

	if (p) {
		memcpy(p, s, len);
		p[len] = 0;
	}
	return p;
}

/* One "key=value" record; v is not NUL-terminated. */
static int pax_record(struct ext *x, bool global, const char *k, size_t klen, const char *v,
                      size_t vlen)
{
	uint64_t n = 0;
	int k2;

	if (key_is(k, klen, "path") || key_is(k, klen, "linkpath")) {
		char **dst = k[0] == 'p' ? &x->path : &x->linkpath;

		if (global)
			return 0;
		if (memchr(v, 0, vlen))
			return -EINVAL;
		free(*dst);
		*dst = vlen ? memdup_str(v, vlen) : NULL;
		return vlen && !*dst ? -ENOMEM : 0;
	}
	if (key_is(k, klen, "size")) {
		if (global)
			return 0;
		x->has_size = vlen > 0;
		return vlen ? parse_dec(v, vlen, (uint64_t)INT64_MAX, &x->size) : 0;
	}
	if (key_is(k, klen, "uid") || key_is(k, klen, "gid")) {
		bool *has = k[0] == 'u' ? &x->has_uid : &x->has_gid;
		uint32_t *dst = k[0] == 'u' ? &x->uid : &x->gid;

		*has = vlen > 0;
		if (!vlen)
			return 0;
		k2 = parse_dec(v, vlen, UINT32_MAX, &n);
		*dst = (uint32_t)n;
		return k2;
	}
	if (key_is(k, klen, "mtime")) {
		x->has_mtime = vlen > 0;
		return vlen ? parse_pax_time(v, vlen, &x->mtime, &x->mtime_nsec) : 0;
	}
	if (key_is(k, klen, "SCHILY.devmajor") || key_is(k, klen, "SCHILY.devminor")) {
		bool major = k[11] == 'a';

		if (global)
			return 0;
		k2 = parse_dec(v, vlen, UINT32_MAX, &n);
		if (major) {
			x->has_major = true;
			x->major = (uint32_t)n;
		} else {
			x->has_minor = true;
			x->minor = (uint32_t)n;
		}
		return k2;
	}
	if (key_has_prefix(k, klen, "SCHILY.xattr.")) {
		char *name = memdup_str(k + 13, klen - 13);
		uint8_t *val = malloc(vlen + 1);

		if (!name || !val) {
			free(name);
			free(val);
			return -ENOMEM;
		}
		memcpy(val, v, vlen);
		return ext_set_xattr(x, name, val, vlen);
	}
	if (key_has_prefix(k, klen, "LIBARCHIVE.xattr.")) {
		char *name = url_decode(k + 17, klen - 17);
		uint8_t *val = malloc(vlen + 1);
		ssize_t len;

		if (!name || !val) {
			free(name);
			free(val);
			return -ENOMEM;
		}
		len = b64_decode(v, vlen, val);
		if (len < 0) {
			free(name);
			free(val);
			return -EINVAL;
		}
		return ext_set_xattr(x, name, val, (size_t)len);
	}
	if (global || !key_has_prefix(k, klen, "GNU.sparse."))
		return 0;  /* atime, ctime, uname, gname, comment, charset, ... */

	k += 11;
	klen -= 11;
	if (key_is(k, klen, "major") || key_is(k, klen, "minor")) {
		k2 = parse_dec(v, vlen, 1000, &n);
		if (k[1] == 'a')
			x->sparse_major = (long)n;
		else
			x->sparse_minor = (long)n;
		return k2;
	}
	if (key_is(k, klen, "name")) {
		if (memchr(v, 0, vlen) || !vlen)
			return -EINVAL;
		free(x->sparse_name);
		x->sparse_name = memdup_str(v, vlen);
		return x->sparse_name ? 0 : -ENOMEM;
	}
	if (key_is(k, klen, "realsize") || key_is(k, klen, "size")) {
		x->has_realsize = true;
		return parse_dec(v, vlen, (uint64_t)INT64_MAX, &x->realsize);
	}
	if (key_is(k, klen, "numblocks")) {
		x->sparse_map_given = true;
		return parse_dec(v, vlen, TAR_SPARSE_MAX, &n);
	}
	if (key_is(k, klen, "offset")) {
		/* 0.0: offset/numbytes pairs repeat within one header. */
		if (x->pending_offset)
			return -EINVAL;
		k2 = parse_dec(v, vlen, (uint64_t)INT64_MAX, &n);
		if (k2 < 0)
			return k2;
		x->sparse_map_given = true;
		x->pending_offset = true;
		return map_push(&x->map, &x->n_map, n, 0);
	}
	if (key_is(k, klen, "numbytes")) {
		if (!x->pending_offset)
			return -EINVAL;
		x->pending_offset = false;
		return parse_dec(v, vlen, (uint64_t)INT64_MAX, &x->map[x->n_map - 1].len);
	}
	if (key_is(k, klen, "map")) {
		/* 0.1: "offset,size,offset,size,..." */
		size_t i = 0;

		x->sparse_map_given = true;
		x->n_map = 0;
		while (i < vlen) {
			uint64_t off, len;
			size_t j;

			for (j = i; j < vlen && v[j] != ','; j++)
				;
			k2 = parse_dec(v + i, j - i, (uint64_t)INT64_MAX, &off);
			if (k2 < 0 || j >= vlen)
				return -EINVAL;
			i = j + 1;
			for (j = i; j < vlen && v[j] != ','; j++)
				;
			k2 = parse_dec(v + i, j - i, (uint64_t)INT64_MAX, &len);
			if (k2 < 0)
				return k2;
			k2 = map_push(&x->map, &x->n_map, off, len);
			if (k2 < 0)
				return k2;
			i = j + 1;
			if (j < vlen && i == vlen)
				return -EINVAL;  /* trailing comma */
		}
		return 0;
	}
	return 0;
}

static int pax_parse(struct tar_reader *r, struct ext *x, bool global, const char *d,
                     size_t len, uint64_t hdr_off)
{
	size_t pos = 0;

	while (pos < len) {
		uint64_t rlen = 0;
		size_t i = pos, klen;
		const char *rec, *eq, *end;
		int k;

		/* Trailing NUL padding ends the header (some writers leave it). */
		if (d[pos] == 0)
			break;
		while (i < len && d[i] >= '0' && d[i] <= '9' && i - pos < 19)
			rlen = rlen * 10 + (uint64_t)(d[i++] - '0');
		if (i == pos || i >= len || d[i] != ' ' || rlen > len - pos || rlen < (i - pos) + 4)
			goto bad;
		rec = d + i + 1;
		end = d + pos + rlen - 1;
		if (*end != '\n')
			goto bad;
		eq = memchr(rec, '=', (size_t)(end - rec));
		if (!eq || eq == rec)
			goto bad;
		klen = (size_t)(eq - rec);
		k = pax_record(x, global, rec, klen, eq + 1, (size_t)(end - eq - 1));
		if (k == -ENOMEM)
			return log_errno(k, "%s", r->name);
		if (k < 0)
			return log_error(-EBADMSG,
			                 "%s: bad value for pax keyword '%.*s' in header at offset %llu",
			                 r->name, (int)MIN(klen, 100), rec, (unsigned long long)hdr_off);
		pos += (size_t)rlen;
	}
	return 0;
bad:
	return log_error(-EBADMSG, "%s: malformed pax header at offset %llu", r->name,
	                 (unsigned long long)hdr_off);
}

/* Read an extended header's data (len bytes plus padding) into a new
 * NUL-terminated buffer. */
static int read_ext_data(struct tar_reader *r, uint64_t len, uint64_t max, uint64_t hdr_off,
                         char **ret)
{
	_cleanup_free_ char *d = NULL;
	ssize_t n;
	int k;

	if (len > max)
		return log_error(-EFBIG, "%s: extended header at offset %llu too large (%llu bytes)",
		                 r->name, (unsigned long long)hdr_off, (unsigned long long)len);
	d = malloc(len + 1);
	if (!d)
		return log_errno(-ENOMEM, "%s", r->name);
	n = stream_read(r, d, len);
	if (n < 0)
		return (int)n;
	if ((uint64_t)n < len)
		goto truncated;
	d[len] = 0;
	k = stream_skip(r, (TAR_BLOCK - len % TAR_BLOCK) % TAR_BLOCK);
	if (k == -EPIPE)
		goto truncated;
	if (k < 0)
		return k;
	*ret = TAKE_PTR(d);
	return 0;
truncated:
	return log_error(-EPIPE, "%s: truncated archive: extended header at offset %llu", r->name,
	                 (unsigned long long)hdr_off);
}

/* ---- members ---------------------------------------------------------------- */

static int member_error(struct tar_reader *r, int err, const char *what)
{
	return log_error(err, "%s: member '%s': %s", r->name, r->e.path ? r->e.path : "?", what);
}

/* Check a sparse map against the member's stored size and logical size. */
static int check_map(struct tar_reader *r, uint64_t stored)
{
	uint64_t end = 0, sum = 0;
	size_t i;

	for (i = 0; i < r->n_map; i++) {
		const struct tar_sparse *s = &r->map[i];

		if (s->off < end || s->len > UINT64_MAX - s->off || s->off + s->len > r->e.size)
			return member_error(r, -EBADMSG, "bad sparse map");
		end = s->off + s->len;
		sum += s->len;
	}
	if (sum != stored)
		return member_error(r, -EBADMSG, "sparse map does not match the stored data");
	return 0;
}

/* GNU sparse 1.0: the map is at the start of the data, as decimal numbers
 * each ending in a newline, padded to a block. */
static int read_sparse_1_0(struct tar_reader *r)
{
	uint8_t blk[TAR_BLOCK];
	uint64_t count = 0, vals[2], nums = 0, v = 0;
	size_t bpos = TAR_BLOCK, digits = 0;
	bool have_count = false;
	ssize_t n;

	for (;;) {
		uint8_t c;

		if (bpos == TAR_BLOCK) {
			if (r->data_left < TAR_BLOCK)
				return member_error(r, -EBADMSG, "bad sparse map");
			n = stream_read(r, blk, TAR_BLOCK);
			if (n < 0)
				return (int)n;
			if (n < TAR_BLOCK)
				return member_error(r, -EPIPE, "truncated archive");
			r->data_left -= TAR_BLOCK;
			bpos = 0;
		}
		c = blk[bpos++];
		if (c >= '0' && c <= '9') {
			if (++digits > 19)
				return member_error(r, -EBADMSG, "bad sparse map");
			v = v * 10 + (uint64_t)(c - '0');
			continue;
		}
		if (c != '\n' || digits == 0)
			return member_error(r, -EBADMSG, "bad sparse map");
		digits = 0;
		if (!have_count) {
			have_count = true;
			count = v;
			if (count > TAR_SPARSE_MAX)
				return member_error(r, -EBADMSG, "sparse map too large");
		} else {
			vals[nums++ % 2] = v;
			if (nums % 2 == 0 && map_push(&r->map, &r->n_map, vals[0], vals[1]) < 0)
				return member_error(r, -ENOMEM, "sparse map");
		}
		v = 0;
		if (have_count && nums == 2 * count)
			return 0;  /* the rest of this block is padding */
	}
}

/* Old GNU 'S': four entries in the header, then extension blocks of 21. */
static int read_sparse_old(struct tar_reader *r, const uint8_t *hdr)
{
	uint8_t blk[TAR_BLOCK];
	const uint8_t *ents = hdr + 386;
	size_t count = 4;
	bool more = hdr[482] != 0;
	ssize_t n;

	for (;;) {
		size_t i;

		for (i = 0; i < count; i++) {
			const uint8_t *f = ents + 24 * i;
			uint64_t off, len;

			if (f[12] == 0)
				break;
			if (parse_unum(f, 12, INT64_MAX, &off) < 0 ||
			    parse_unum(f + 12, 12, INT64_MAX, &len) < 0)
				return member_error(r, -EBADMSG, "bad sparse header");
			if (map_push(&r->map, &r->n_map, off, len) < 0)
				return member_error(r, -E2BIG, "sparse map too large");
		}
		if (!more)
			return 0;
		n = stream_read(r, blk, TAR_BLOCK);
		if (n < 0)
			return (int)n;
		if (n < TAR_BLOCK)
			return member_error(r, -EPIPE, "truncated archive");
		ents = blk;
		count = 21;
		more = blk[504] != 0;
	}
}

static int apply_ext(struct tar_reader *r, const struct ext *x)
{
	size_t i;

	if (x->has_uid)
		r->e.attr.uid = x->uid;
	if (x->has_gid)
		r->e.attr.gid = x->gid;
	if (x->has_mtime) {
		r->e.attr.mtime_sec = x->mtime;
		r->e.attr.mtime_nsec = x->mtime_nsec;
	}
	for (i = 0; i < x->n_xattrs; i++) {
		struct tar_xattr *a;
		char *name = strdup(x->xattrs[i].name);
		uint8_t *val = malloc(x->xattrs[i].len + 1);
		size_t j;

		if (!name || !val) {
			free(name);
			free(val);
			return log_errno(-ENOMEM, "%s", r->name);
		}
		memcpy(val, x->xattrs[i].value, x->xattrs[i].len);
		for (j = 0; j < r->n_xattrs; j++)
			if (strcmp(r->xattrs[j].name, name) == 0)
				break;
		if (j < r->n_xattrs) {
			free(r->xattrs[j].name);
			free(r->xattrs[j].value);
		} else {
			a = reallocarray(r->xattrs, r->n_xattrs + 1, sizeof(*a));
			if (!a) {
				free(name);
				free(val);
				return log_errno(-ENOMEM, "%s", r->name);
			}
			r->xattrs = a;
			j = r->n_xattrs++;
		}
		r->xattrs[j] = (struct tar_xattr){ name, val, x->xattrs[i].len };
	}
	return 0;
}

/* Build the entry from a member header and the pending extended headers. */
static int make_entry(struct tar_reader *r, const uint8_t *h, uint64_t hdr_off)
{
	bool ustar = memcmp(h + 257, "ustar\0", 6) == 0;
	bool gnu = memcmp(h + 257, "ustar  \0", 8) == 0;
	struct ext *x = &r->local;
	uint64_t v, size, stored;
	int64_t mtime;
	char type = (char)h[156];
	uint32_t ifmt;
	int k;

	entry_clear(r);
	r->e.offset = hdr_off;

	/* the name: pax path, GNU long name, ustar prefix + name, name */
	if (x->sparse_name)
		r->path = strdup(x->sparse_name);
	else if (x->path)
		r->path = strdup(x->path);
	else if (r->gnu_longname)
		r->path = strdup(r->gnu_longname);
	else if (ustar && h[345]) {
		size_t pl = strnlen((const char *)h + 345, 155), nl = strnlen((const char *)h, 100);

		r->path = malloc(pl + nl + 2);
		if (r->path) {
			memcpy(r->path, h + 345, pl);
			r->path[pl] = '/';
			memcpy(r->path + pl + 1, h, nl);
			r->path[pl + 1 + nl] = 0;
		}
	} else {
		r->path = strndup_field(h, 100);
	}
	if (x->linkpath)
		r->linkpath = strdup(x->linkpath);
	else if (r->gnu_longlink)
		r->linkpath = strdup(r->gnu_longlink);
	else
		r->linkpath = strndup_field(h + 157, 100);
	if (!r->path || !r->linkpath)
		return log_errno(-ENOMEM, "%s", r->name);
	r->e.path = r->path;
	r->e.linkpath = r->linkpath;

	if (!r->path[0])
		return log_error(-EBADMSG, "%s: member at offset %llu has an empty name", r->name,
		                 (unsigned long long)hdr_off);

	/* numeric fields */
	if (parse_unum(h + 100, 8, 07777777, &v) < 0)
		return member_error(r, -EBADMSG, "bad mode field");
	r->e.attr.mode = (uint32_t)v & 07777;
	if (parse_unum(h + 108, 8, UINT32_MAX, &v) < 0)
		return member_error(r, -EBADMSG, "bad uid field");
	r->e.attr.uid = (uint32_t)v;
	if (parse_unum(h + 116, 8, UINT32_MAX, &v) < 0)
		return member_error(r, -EBADMSG, "bad gid field");
	r->e.attr.gid = (uint32_t)v;
	if (parse_unum(h + 124, 12, INT64_MAX, &stored) < 0)
		return member_error(r, -EBADMSG, "bad size field");
	if (parse_num(h + 136, 12, true, &mtime) < 0)
		return member_error(r, -EBADMSG, "bad mtime field");
	r->e.attr.mtime_sec = mtime;
	if (ustar || gnu) {
		uint64_t major, minor;

		if (parse_unum(h + 329, 8, UINT32_MAX, &major) < 0 ||
		    parse_unum(h + 337, 8, UINT32_MAX, &minor) < 0)
			return member_error(r, -EBADMSG, "bad device number field");
		if (x->has_major)
			major = x->major;
		if (x->has_minor)
			minor = x->minor;
		r->e.attr.rdev = makedev((unsigned)major, (unsigned)minor);
	}
	if (x->has_size)
		stored = x->size;

	k = apply_ext(r, &r->global);
	if (k >= 0)
		k = apply_ext(r, x);
	if (k < 0)
		return k;
	r->e.xattrs = r->xattrs;
	r->e.n_xattrs = r->n_xattrs;

	/* the type */
	if (type == '\0' && r->path[strlen(r->path) - 1] == '/')
		type = '5';  /* v7: a directory is a regular entry ending in '/' */
	switch (type) {
	case '\0': case '0': case '7': case 'S':
		ifmt = S_IFREG; break;
	case '1': ifmt = S_IFREG; break;
	case '2': ifmt = S_IFLNK; break;
	case '3': ifmt = S_IFCHR; break;
	case '4': ifmt = S_IFBLK; break;
	case '5': case 'D': ifmt = S_IFDIR; break;
	case '6': ifmt = S_IFIFO; break;
	default: {
		char what[64];

		if (type >= 0x20 && type < 0x7f)
			snprintf(what, sizeof(what), "unknown member type '%c'", type);
		else
			snprintf(what, sizeof(what), "unknown member type 0x%02x", (uint8_t)type);
		return member_error(r, -EBADMSG, what);
	}
	}
	r->e.attr.mode |= ifmt;
	r->e.type = type == '\0' || type == '7' || type == 'S' ? '0' : type == 'D' ? '5' : type;
	if (ifmt != S_IFCHR && ifmt != S_IFBLK)
		r->e.attr.rdev = 0;
	if (type != '1' && type != '2')
		r->linkpath[0] = 0;

	/* the contents */
	r->data_left = stored;
	r->pad = (TAR_BLOCK - stored % TAR_BLOCK) % TAR_BLOCK;
	size = stored;
	if (type == 'S') {
		uint64_t realsize;

		if (parse_unum(h + 483, 12, INT64_MAX, &realsize) < 0)
			return member_error(r, -EBADMSG, "bad sparse header");
		r->e.sparse = true;
		k = read_sparse_old(r, h);
		if (k < 0)
			return k;
		size = realsize;
	} else if (r->e.type == '0' && (x->sparse_map_given || x->sparse_major >= 0)) {
		if (!x->has_realsize)
			return member_error(r, -EBADMSG, "sparse member without a real size");
		r->e.sparse = true;
		size = x->realsize;
		r->e.size = size;
		if (x->sparse_major == 1 && x->sparse_minor == 0) {
			k = read_sparse_1_0(r);
			if (k < 0)
				return k;
		} else if (x->sparse_major <= 0) {
			if (x->pending_offset)
				return member_error(r, -EBADMSG, "bad sparse map");
			r->map = TAKE_PTR(x->map);
			r->n_map = x->n_map;
			x->n_map = 0;
		} else {
			return member_error(r, -EPROTONOSUPPORT, "unsupported GNU sparse version");
		}
	}
	if (r->e.type == '0') {
		r->e.size = size;
		if (r->e.sparse) {
			k = check_map(r, r->data_left);
			if (k < 0)
				return k;
		}
	} else {
		r->e.sparse = false;
	}
	return 0;
}

int tar_reader_next(struct tar_reader *r, const struct tar_entry **ret)
{
	uint8_t h[TAR_BLOCK];
	int k;

	if (r->ended)
		return 0;
	if (!r->detected) {
		k = detect(r);
		if (k < 0)
			return k;
		r->detected = true;
	}

	/* Skip what is left of the previous member. */
	if (r->data_left || r->pad) {
		k = stream_skip(r, r->data_left + r->pad);
		if (k == -EPIPE)
			return member_error(r, -EPIPE, "truncated archive");
		if (k < 0)
			return k;
		r->data_left = r->pad = 0;
	}
	entry_clear(r);

	for (;;) {
		uint64_t hdr_off = r->offset, len;
		bool pending = r->local.path || r->local.linkpath || r->gnu_longname ||
		               r->gnu_longlink;
		char *data = NULL;
		ssize_t n;
		char type;

		n = stream_read(r, h, TAR_BLOCK);
		if (n < 0)
			return (int)n;
		if (n == 0) {
			if (pending)
				return log_error(-EPIPE, "%s: truncated archive: extended header "
				                 "without its member", r->name);
			log_msg(LOG_WARN, "%s: missing end-of-archive marker", r->name);
			r->ended = true;
			return 0;
		}
		if (n < TAR_BLOCK)
			return log_error(-EPIPE, "%s: truncated archive: partial header at offset %llu",
			                 r->name, (unsigned long long)hdr_off);
		if (block_is_zero(h)) {
			n = stream_read(r, h, TAR_BLOCK);
			if (n < 0)
				return (int)n;
			if (n != TAR_BLOCK || !block_is_zero(h))
				log_msg(LOG_WARN, "%s: lone zero block at offset %llu", r->name,
				        (unsigned long long)hdr_off);
			r->ended = true;
			return 0;
		}
		if (!checksum_ok(h))
			return log_error(-EBADMSG, "%s: bad tar header checksum at offset %llu",
			                 r->name, (unsigned long long)hdr_off);

		type = (char)h[156];
		if (type != 'x' && type != 'g' && type != 'L' && type != 'K' && type != 'V') {
			k = make_entry(r, h, hdr_off);
			ext_clear(&r->local);
			free(r->gnu_longname);
			free(r->gnu_longlink);
			r->gnu_longname = r->gnu_longlink = NULL;
			if (k < 0)
				return k;
			*ret = &r->e;
			return 1;
		}

		if (parse_unum(h + 124, 12, INT64_MAX, &len) < 0)
			return log_error(-EBADMSG, "%s: bad size field in header at offset %llu",
			                 r->name, (unsigned long long)hdr_off);
		if (type == 'V') {
			k = stream_skip(r, len + (TAR_BLOCK - len % TAR_BLOCK) % TAR_BLOCK);
			if (k == -EPIPE)
				return log_error(k, "%s: truncated archive", r->name);
			if (k < 0)
				return k;
			continue;
		}
		k = read_ext_data(r, len, type == 'L' || type == 'K' ? TAR_NAME_MAX : TAR_EXT_MAX,
		                  hdr_off, &data);
		if (k < 0)
			return k;
		if (type == 'L' || type == 'K') {
			char **dst = type == 'L' ? &r->gnu_longname : &r->gnu_longlink;

			free(*dst);
			*dst = data;  /* NUL-terminated; trailing NULs end it */
		} else {
			k = pax_parse(r, type == 'g' ? &r->global : &r->local, type == 'g', data,
			              (size_t)len, hdr_off);
			free(data);
			if (k < 0)
				return k;
		}
	}
}

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
		return member_error(r, -EPIPE, "truncated archive");
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
