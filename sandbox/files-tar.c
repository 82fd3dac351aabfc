/*
 * files-tar.c — the tar stream of the sandbox's file transfers: a reader and
 * a writer of POSIX ustar with pax extended headers, GNU long names on read
 * (files-internal.h says what each takes and refuses).
 *
 * Our own code rather than libarchive, for three reasons.  The transfers run
 * in a process already confined inside the sandbox, so a library loaded on
 * first use (as libcurl and libcrypto are) would be loaded from the
 * sandbox's own tree, which its processes write: it has to be linked in, and
 * libarchive's static archive brings a dozen compression, crypto, ACL and XML
 * libraries into every lazyroot binary.  It reads some thirty formats and
 * filters where this needs one, each one more parser of hostile input in a
 * process that holds the sandbox's descriptors.  And its extraction is path
 * based (its SECURE_* flags are off by default and check names, not
 * descriptors), so the extractor would be ours anyway; what is left to take
 * from it is a header parser of a few hundred lines.  Owners, groups, user
 * and group names, xattrs and ACLs are neither written nor read: the files a
 * transfer makes belong to the sandbox user who runs it.
 *
 * The reader reads through one buffer, never seeks, and bounds every meta
 * header before reading it (FILES_TAR_PAX_MAX, FILES_TAR_NAME_MAX,
 * FILES_TAR_META_MAX), so that its memory is fixed whatever the stream.
 * Sizes are bounded by the caller, who sees each member's size before any of
 * its data is read.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/lib.h"
#include "sandbox/files-internal.h"

/* ustar header fields: offsets and lengths */
#define H_NAME     0, 100
#define H_MODE     100, 8
#define H_UID      108, 8
#define H_GID      116, 8
#define H_SIZE     124, 12
#define H_MTIME    136, 12
#define H_CHKSUM   148, 8
#define H_TYPE     156
#define H_LINK     157, 100
#define H_MAGIC    257
#define H_PREFIX   345, 155

#define RD_BUF (64 * 1024)

struct files_tar_reader {
	int fd;
	uint64_t off;           /* bytes consumed from the stream */
	uint64_t left;          /* data bytes of the current member not yet read */
	uint64_t pad;           /* padding after them */
	bool ended;
	size_t bpos, blen;
	/* the current member's strings */
	char path[FILES_TAR_NAME_MAX + 1];
	char link[FILES_TAR_NAME_MAX + 1];
	uint8_t buf[RD_BUF];
};

int files_tar_reader_new(int fd, struct files_tar_reader **ret)
{
	struct files_tar_reader *rd = calloc(1, sizeof(*rd));

	if (!rd)
		return -ENOMEM;
	rd->fd = fd;
	*ret = rd;
	return 0;
}

void files_tar_reader_free(struct files_tar_reader *rd)
{
	free(rd);
}

uint64_t files_tar_offset(const struct files_tar_reader *rd)
{
	return rd->off;
}

/* Copy up to n bytes of the stream into p (NULL: drop them): the count, short
 * only at the end of the stream, or -errno. */
static ssize_t rd_take(struct files_tar_reader *rd, void *p, size_t n)
{
	size_t got = 0;

	while (got < n) {
		size_t k;

		if (rd->bpos == rd->blen) {
			ssize_t r;

			/* a large read goes straight to the caller's buffer */
			if (p && n - got >= sizeof(rd->buf)) {
				r = read(rd->fd, (uint8_t *)p + got, n - got);
				if (r < 0 && errno == EINTR)
					continue;
				if (r < 0)
					return -errno;
				if (r == 0)
					break;
				got += (size_t)r;
				rd->off += (uint64_t)r;
				continue;
			}
			r = read(rd->fd, rd->buf, sizeof(rd->buf));
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0)
				return -errno;
			if (r == 0)
				break;
			rd->bpos = 0;
			rd->blen = (size_t)r;
		}
		k = MIN(n - got, rd->blen - rd->bpos);
		if (p)
			memcpy((uint8_t *)p + got, rd->buf + rd->bpos, k);
		rd->bpos += k;
		got += k;
		rd->off += k;
	}
	return (ssize_t)got;
}

/* Drop n bytes; -EBADMSG (logged) when the stream ends first. */
static int rd_skip(struct files_tar_reader *rd, uint64_t n, const char *what)
{
	while (n > 0) {
		size_t k = (size_t)MIN(n, (uint64_t)1 << 30);
		ssize_t r = rd_take(rd, NULL, k);

		if (r < 0)
			return log_errno((int)r, "tar stream: read at byte %llu",
			                 (unsigned long long)rd->off);
		if ((size_t)r < k)
			return log_error(-EBADMSG, "tar stream: `%s`: the stream ends inside it", what);
		n -= k;
	}
	return 0;
}

static uint64_t pad_of(uint64_t size)
{
	return (FILES_TAR_BLOCK - size % FILES_TAR_BLOCK) % FILES_TAR_BLOCK;
}

/* A numeric field: octal digits (leading spaces, ended by a space, a NUL or
 * the field's end; all NULs is 0) or GNU base-256 (a first byte of 0x80,
 * positive only).  -EBADMSG for anything else or past INT64_MAX. */
static int parse_num(const uint8_t *b, size_t off, size_t len, uint64_t *ret)
{
	const uint8_t *f = b + off;
	uint64_t v = 0;
	size_t i = 0;

	if (f[0] == 0x80) {
		for (i = 1; i < len; i++) {
			if (v >> 55)
				return -EBADMSG;
			v = v << 8 | f[i];
		}
		*ret = v;
		return 0;
	}
	while (i < len && f[i] == ' ')
		i++;
	for (; i < len && f[i] >= '0' && f[i] <= '7'; i++) {
		if (v >> 60)
			return -EBADMSG;
		v = v << 3 | (uint64_t)(f[i] - '0');
	}
	for (; i < len; i++)
		if (f[i] != ' ' && f[i] != 0)
			return -EBADMSG;
	if (v > INT64_MAX)
		return -EBADMSG;
	*ret = v;
	return 0;
}

/* A field's string, up to its first NUL, appended to out (which holds cap). */
static void field_str(const uint8_t *b, size_t off, size_t len, char *out, size_t cap)
{
	size_t o = strlen(out), n = strnlen((const char *)b + off, len);

	if (o + n < cap) {
		memcpy(out + o, b + off, n);
		out[o + n] = 0;
	}
}

static bool header_sum_ok(const uint8_t *b)
{
	uint64_t want;
	unsigned long us = 0;
	long ss = 0;

	if (parse_num(b, H_CHKSUM, &want) < 0)
		return false;
	for (size_t i = 0; i < FILES_TAR_BLOCK; i++) {
		uint8_t c = i >= 148 && i < 156 ? ' ' : b[i];

		us += c;
		ss += (signed char)c;
	}
	return want == us || (long)want == ss;
}

static bool all_zero(const uint8_t *b)
{
	for (size_t i = 0; i < FILES_TAR_BLOCK; i++)
		if (b[i])
			return false;
	return true;
}

/* What the pax and GNU headers before a member say about it. */
struct meta {
	bool has_path, has_link, has_size, has_mtime, sparse;
	char path[FILES_TAR_NAME_MAX + 1];
	char link[FILES_TAR_NAME_MAX + 1];
	uint64_t size;
	struct timespec mtime;
};

static int pax_mtime(const char *v, size_t n, struct timespec *ret)
{
	char s[64], *end;
	long long sec;
	long nsec = 0;
	const char *dot;

	if (n == 0 || n >= sizeof(s))
		return -EBADMSG;
	memcpy(s, v, n);
	s[n] = 0;
	errno = 0;
	sec = strtoll(s, &end, 10);
	if (errno || end == s || (*end && *end != '.'))
		return -EBADMSG;
	dot = end;
	if (*dot == '.') {
		long scale = 100000000;

		for (const char *c = dot + 1; *c; c++) {
			if (*c < '0' || *c > '9')
				return -EBADMSG;
			nsec += (*c - '0') * scale;
			scale /= 10;
		}
		if (s[0] == '-' && nsec) {  /* "-1.25" is 1.25 s before the epoch */
			sec -= 1;
			nsec = 1000000000 - nsec;
		}
	}
	ret->tv_sec = (time_t)sec;
	ret->tv_nsec = nsec;
	return 0;
}

/* One pax string value into out, or unset by an empty value. */
static int pax_string(const char *v, size_t n, char *out, bool *has)
{
	if (n > FILES_TAR_NAME_MAX || memchr(v, 0, n))
		return -EBADMSG;
	memcpy(out, v, n);
	out[n] = 0;
	*has = n > 0;
	return 0;
}

/* Parse the records "LEN key=value\n" of a pax header's data. */
static int pax_parse(const char *d, size_t n, struct meta *m)
{
	while (n > 0) {
		size_t len = 0, i = 0, klen;
		const char *rec = d, *eq, *v;
		int r = 0;

		for (; i < n && d[i] >= '0' && d[i] <= '9'; i++) {
			len = len * 10 + (size_t)(d[i] - '0');
			if (len > n)
				return -EBADMSG;
		}
		if (i == 0 || i >= n || d[i] != ' ' || len <= i + 1 || len > n || rec[len - 1] != '\n')
			return -EBADMSG;
		eq = memchr(rec + i + 1, '=', len - i - 2);
		if (!eq)
			return -EBADMSG;
		klen = (size_t)(eq - (rec + i + 1));
		v = eq + 1;
		size_t vlen = (size_t)(rec + len - 1 - v);
#define KEY(k) (klen == sizeof(k) - 1 && !memcmp(rec + i + 1, k, klen))
		if (KEY("path")) {
			r = pax_string(v, vlen, m->path, &m->has_path);
		} else if (KEY("linkpath")) {
			r = pax_string(v, vlen, m->link, &m->has_link);
		} else if (KEY("size")) {
			uint64_t s = 0;

			if (vlen == 0 || vlen > 19)
				return -EBADMSG;
			for (size_t k = 0; k < vlen; k++) {
				if (v[k] < '0' || v[k] > '9')
					return -EBADMSG;
				s = s * 10 + (uint64_t)(v[k] - '0');
			}
			if (s > INT64_MAX)
				return -EBADMSG;
			m->size = s;
			m->has_size = true;
		} else if (KEY("mtime")) {
			r = pax_mtime(v, vlen, &m->mtime);
			m->has_mtime = r == 0;
		} else if (klen > 11 && !memcmp(rec + i + 1, "GNU.sparse.", 11)) {
			m->sparse = true;
		}
#undef KEY
		if (r < 0)
			return r;
		d += len;
		n -= len;
	}
	return 0;
}

/* A meta header's data (size bytes and padding) into a fresh buffer, NUL
 * terminated. */
static int read_meta(struct files_tar_reader *rd, uint64_t size, uint64_t max, char **ret)
{
	_cleanup_free_ char *d = NULL;
	ssize_t r;

	if (size > max)
		return log_error(-EBADMSG, "tar stream: a %llu-byte extended header at byte %llu "
		                 "(at most %llu)", (unsigned long long)size,
		                 (unsigned long long)rd->off, (unsigned long long)max);
	d = malloc(size + 1);
	if (!d)
		return -ENOMEM;
	r = rd_take(rd, d, size);
	if (r < 0)
		return log_errno((int)r, "tar stream: read at byte %llu", (unsigned long long)rd->off);
	if ((uint64_t)r < size)
		return log_error(-EBADMSG, "tar stream: ends inside an extended header");
	d[size] = 0;
	r = rd_skip(rd, pad_of(size), "extended header");
	if (r < 0)
		return (int)r;
	*ret = TAKE_PTR(d);
	return 0;
}

int files_tar_next(struct files_tar_reader *rd, struct files_tar_hdr *ret)
{
	struct meta m = { 0 };
	uint8_t b[FILES_TAR_BLOCK];
	int r;

	if (rd->ended)
		return 0;
	r = rd_skip(rd, rd->left + rd->pad, rd->path);
	if (r < 0)
		return r;
	rd->left = rd->pad = 0;
	for (unsigned metas = 0;; metas++) {
		uint64_t at = rd->off, size, mode, mtime;
		_cleanup_free_ char *d = NULL;
		ssize_t got;
		char type;

		got = rd_take(rd, b, sizeof(b));
		if (got < 0)
			return log_errno((int)got, "tar stream: read at byte %llu",
			                 (unsigned long long)at);
		if (got == 0)
			return log_error(-EBADMSG, "tar stream: ends at byte %llu without the "
			                 "end-of-archive blocks", (unsigned long long)at);
		if ((size_t)got < sizeof(b))
			return log_error(-EBADMSG, "tar stream: ends inside the header at byte %llu",
			                 (unsigned long long)at);
		if (all_zero(b)) {
			/* the end: two zero blocks, or one and the end of the
			 * stream, as GNU tar writes when its record is full */
			got = rd_take(rd, b, sizeof(b));
			if (got < 0)
				return log_errno((int)got, "tar stream: read at byte %llu",
				                 (unsigned long long)rd->off);
			if ((got != 0 && (size_t)got < sizeof(b)) || (got != 0 && !all_zero(b)))
				return log_error(-EBADMSG, "tar stream: a zero block at byte %llu "
				                 "inside the archive", (unsigned long long)at);
			if (metas)
				return log_error(-EBADMSG, "tar stream: an extended header at the end "
				                 "of the archive, with no member");
			rd->ended = true;
			return 0;
		}
		if (!header_sum_ok(b))
			return log_error(-EBADMSG, "tar stream: bad header checksum at byte %llu",
			                 (unsigned long long)at);
		if (memcmp(b + H_MAGIC, "ustar\0" "00", 8) && memcmp(b + H_MAGIC, "ustar  \0", 8))
			return log_error(-EBADMSG, "tar stream: the header at byte %llu is not ustar, "
			                 "pax or GNU", (unsigned long long)at);
		if (parse_num(b, H_SIZE, &size) < 0)
			return log_error(-EBADMSG, "tar stream: bad size field at byte %llu",
			                 (unsigned long long)at);
		type = (char)b[H_TYPE];
		if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
			if (metas + 1 >= FILES_TAR_META_MAX)
				return log_error(-EBADMSG, "tar stream: more than %d extended headers "
				                 "before a member at byte %llu", FILES_TAR_META_MAX,
				                 (unsigned long long)at);
			if (type == 'g') {
				if (size > FILES_TAR_PAX_MAX)
					return log_error(-EBADMSG, "tar stream: a %llu-byte global "
					                 "header at byte %llu", (unsigned long long)size,
					                 (unsigned long long)at);
				r = rd_skip(rd, size + pad_of(size), "global header");
				if (r < 0)
					return r;
				continue;
			}
			r = read_meta(rd, size, type == 'x' ? FILES_TAR_PAX_MAX : FILES_TAR_NAME_MAX + 1,
			              &d);
			if (r < 0)
				return r;
			if (type == 'x') {
				r = pax_parse(d, size, &m);
				if (r < 0)
					return log_error(r, "tar stream: malformed pax header at byte %llu",
					                 (unsigned long long)at);
			} else {
				/* GNU long names: NUL-terminated within the data */
				size_t n = strnlen(d, size);

				if (n == 0 || n > FILES_TAR_NAME_MAX)
					return log_error(-EBADMSG, "tar stream: bad GNU long name at "
					                 "byte %llu", (unsigned long long)at);
				memcpy(type == 'L' ? m.path : m.link, d, n + 1);
				*(type == 'L' ? &m.has_path : &m.has_link) = true;
			}
			continue;
		}
		/* a member */
		rd->path[0] = rd->link[0] = 0;
		if (m.has_path) {
			memcpy(rd->path, m.path, strlen(m.path) + 1);
		} else {
			if (!memcmp(b + H_MAGIC, "ustar\0", 6) && b[345]) {
				field_str(b, H_PREFIX, rd->path, sizeof(rd->path));
				field_str((const uint8_t *)"/", 0, 1, rd->path, sizeof(rd->path));
			}
			field_str(b, H_NAME, rd->path, sizeof(rd->path));
		}
		if (m.has_link)
			memcpy(rd->link, m.link, strlen(m.link) + 1);
		else
			field_str(b, H_LINK, rd->link, sizeof(rd->link));
		if (!rd->path[0])
			return log_error(-EBADMSG, "tar stream: a member with no name at byte %llu",
			                 (unsigned long long)at);
		if (m.sparse || type == 'S')
			return log_error(-EOPNOTSUPP, "tar stream: `%s`: sparse members are not "
			                 "supported", rd->path);
		if (type == 'M' || type == 'V')
			return log_error(-EOPNOTSUPP, "tar stream: `%s`: multi-volume members are "
			                 "not supported", rd->path);
		if (parse_num(b, H_MODE, &mode) < 0 || parse_num(b, H_MTIME, &mtime) < 0)
			return log_error(-EBADMSG, "tar stream: `%s`: bad mode or mtime field",
			                 rd->path);
		if (m.has_size)
			size = m.size;
		if (type == 0 || type == '7')
			type = FILES_TAR_FILE;
		/* only files carry data; the others' size field is ignored
		 * (POSIX says so of links, and no writer puts data after a
		 * directory, a device or a fifo) */
		if (type == FILES_TAR_HARDLINK || type == FILES_TAR_SYMLINK || type == FILES_TAR_DIR ||
		    type == FILES_TAR_CHAR || type == FILES_TAR_BLOCKDEV || type == FILES_TAR_FIFO)
			size = 0;
		*ret = (struct files_tar_hdr){
			.path = rd->path, .link = rd->link, .type = type,
			.mode = (mode_t)(mode & 07777), .size = size,
			.mtime = m.has_mtime ? m.mtime : (struct timespec){ (time_t)mtime, 0 },
		};
		rd->left = size;
		rd->pad = pad_of(size);
		return 1;
	}
}

ssize_t files_tar_read(struct files_tar_reader *rd, void *buf, size_t n)
{
	ssize_t r;

	if (rd->left == 0)
		return 0;
	n = (size_t)MIN((uint64_t)n, rd->left);
	r = rd_take(rd, buf, n);
	if (r < 0)
		return log_errno((int)r, "tar stream: `%s`: read", rd->path);
	if (r == 0)
		return log_error(-EBADMSG, "tar stream: `%s`: the stream ends inside it", rd->path);
	rd->left -= (uint64_t)r;
	return r;
}

/* ---- the writer ---------------------------------------------------------- */

static void put_octal(uint8_t *b, size_t off, size_t len, uint64_t v)
{
	char s[24];

	snprintf(s, sizeof(s), "%0*llo", (int)len - 1, (unsigned long long)v);
	memcpy(b + off, s, len - 1);
	b[off + len - 1] = 0;
}

/* A size that octal cannot hold, in base-256, for readers without pax. */
static void put_base256(uint8_t *b, size_t off, size_t len, uint64_t v)
{
	for (size_t i = len; i-- > 1;) {
		b[off + i] = (uint8_t)v;
		v >>= 8;
	}
	b[off] = 0x80;
}

static void put_str(uint8_t *b, size_t off, size_t len, const char *s, size_t n)
{
	memcpy(b + off, s, MIN(n, len));
}

static void finish_header(uint8_t *b, char type)
{
	unsigned long sum = 0;
	char s[8];

	b[H_TYPE] = (uint8_t)type;
	memcpy(b + H_MAGIC, "ustar\0" "00", 8);
	memset(b + 148, ' ', 8);
	for (size_t i = 0; i < FILES_TAR_BLOCK; i++)
		sum += b[i];
	snprintf(s, sizeof(s), "%06lo", sum);
	memcpy(b + 148, s, 7);   /* six digits, a NUL, the space left */
}

/* Append the record "LEN key=value\n" to a pax header's data. */
static int pax_add(struct buf *p, const char *key, const char *val)
{
	size_t base = strlen(key) + strlen(val) + 3, len = base;

	/* LEN counts its own digits */
	for (int i = 0; i < 3; i++) {
		char d[24];

		len = base + (size_t)snprintf(d, sizeof(d), "%zu", len);
	}
	return buf_printf(p, "%zu %s=%s\n", len, key, val);
}

int files_tar_write_header(int fd, const struct files_tar_hdr *h)
{
	_cleanup_(buf_freep) struct buf pax = BUF_INIT;
	uint8_t b[FILES_TAR_BLOCK] = { 0 };
	size_t plen = strlen(h->path), llen = strlen(h->link), split = 0;
	bool long_name = plen > 100;
	const uint64_t octal_max = (uint64_t)1 << 33;   /* 11 octal digits */
	int r;

	if (plen > FILES_TAR_NAME_MAX || llen > FILES_TAR_NAME_MAX)
		return log_error(-ENAMETOOLONG, "`%s`: name too long for the archive", h->path);
	if (long_name) {
		/* ustar's prefix field: the name split at the first slash
		 * that leaves at most 100 bytes after it */
		for (size_t i = 1; i < plen - 1 && i <= 155; i++)
			if (h->path[i] == '/' && plen - i - 1 <= 100) {
				split = i;
				long_name = false;
				break;
			}
	}
	if (long_name)
		r = pax_add(&pax, "path", h->path);
	else
		r = 0;
	if (r >= 0 && llen > 100)
		r = pax_add(&pax, "linkpath", h->link);
	if (r >= 0 && h->size >= octal_max) {
		char s[24];

		snprintf(s, sizeof(s), "%llu", (unsigned long long)h->size);
		r = pax_add(&pax, "size", s);
	}
	if (r >= 0 && (h->mtime.tv_sec < 0 || (uint64_t)h->mtime.tv_sec >= octal_max)) {
		char s[48];
		long long sec = (long long)h->mtime.tv_sec;
		long nsec = h->mtime.tv_nsec;

		if (sec < 0 && nsec) {
			sec += 1;
			nsec = 1000000000 - nsec;
		}
		snprintf(s, sizeof(s), "%s%lld.%09ld", sec == 0 && h->mtime.tv_sec < 0 ? "-" : "",
		         sec, nsec);
		r = pax_add(&pax, "mtime", s);
	}
	if (r < 0)
		return r;
	if (pax.len) {
		uint8_t x[FILES_TAR_BLOCK] = { 0 };
		static const char pax_name[] = "././@PaxHeader";

		put_str(x, H_NAME, pax_name, sizeof(pax_name) - 1);
		put_octal(x, H_MODE, 0644);
		put_octal(x, H_UID, 0);
		put_octal(x, H_GID, 0);
		put_octal(x, H_SIZE, pax.len);
		put_octal(x, H_MTIME, 0);
		finish_header(x, 'x');
		r = write_full(fd, x, sizeof(x));
		if (r >= 0)
			r = write_full(fd, pax.data, pax.len);
		if (r >= 0)
			r = files_tar_write_pad(fd, pax.len);
		if (r < 0)
			return r;
	}
	if (long_name)
		put_str(b, H_NAME, h->path, 100);       /* the start, for readers without pax */
	else if (split) {
		put_str(b, H_PREFIX, h->path, split);
		put_str(b, H_NAME, h->path + split + 1, plen - split - 1);
	} else
		put_str(b, H_NAME, h->path, plen);
	put_str(b, H_LINK, h->link, llen);
	put_octal(b, H_MODE, h->mode & 07777);
	put_octal(b, H_UID, 0);
	put_octal(b, H_GID, 0);
	if (h->size >= octal_max)
		put_base256(b, H_SIZE, h->size);
	else
		put_octal(b, H_SIZE, h->size);
	put_octal(b, H_MTIME, h->mtime.tv_sec < 0 || (uint64_t)h->mtime.tv_sec >= octal_max
	                      ? 0 : (uint64_t)h->mtime.tv_sec);
	finish_header(b, h->type);
	return write_full(fd, b, sizeof(b));
}

int files_tar_write_pad(int fd, uint64_t size)
{
	static const uint8_t zero[FILES_TAR_BLOCK];
	uint64_t n = pad_of(size);

	return n ? write_full(fd, zero, (size_t)n) : 0;
}

int files_tar_write_end(int fd)
{
	static const uint8_t zero[2 * FILES_TAR_BLOCK];

	return write_full(fd, zero, sizeof(zero));
}
