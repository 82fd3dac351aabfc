/*
 * tar-header.c — the tar reader's header parser: numeric fields (octal and
 * base-256), checksums, pax extended headers ('x' local, 'g' global) and GNU
 * long names ('L', 'K'), and tar_reader_next(), which reads headers until a
 * member's own and hands it to tar-entry.c.
 *
 * Every field comes from hostile input: numbers are range-checked against
 * their destination, pax records must be well-formed ("LEN key=value\n"
 * with LEN exact), and an extended header is at most TAR_EXT_MAX bytes
 * (TAR_NAME_MAX for a GNU long name) before any of it is read.
 */
#include <limits.h>

#include "chunker/tar-internal.h"

/* ---- header fields ---------------------------------------------------------- */

/* A numeric header field: octal (leading spaces, ending at NUL or space),
 * empty meaning 0, or GNU/star base-256 (high bit of the first byte set;
 * the next bit is the sign). */
int tar_parse_num(const uint8_t *f, size_t len, bool allow_neg, int64_t *ret)
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

int tar_parse_unum(const uint8_t *f, size_t len, uint64_t max, uint64_t *ret)
{
	int64_t v;
	int k = tar_parse_num(f, len, false, &v);

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

	if (tar_parse_unum(b + 148, 8, UINT32_MAX, &stored) < 0)
		return false;
	for (i = 0; i < TAR_BLOCK; i++) {
		uint8_t c = i >= 148 && i < 156 ? ' ' : b[i];

		usum += c;
		ssum += (signed char)c;
	}
	return stored == usum || (long)stored == ssum;
}

char *tar_strndup_field(const uint8_t *f, size_t len)
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

int tar_map_push(struct tar_sparse **map, size_t *n, uint64_t off, uint64_t len)
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
		return tar_map_push(&x->map, &x->n_map, n, 0);
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
			k2 = tar_map_push(&x->map, &x->n_map, off, len);
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
	n = tar_stream_read(r, d, len);
	if (n < 0)
		return (int)n;
	if ((uint64_t)n < len)
		goto truncated;
	d[len] = 0;
	k = tar_stream_skip(r, (TAR_BLOCK - len % TAR_BLOCK) % TAR_BLOCK);
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

/* ---- the header loop ---------------------------------------------------------- */

int tar_reader_next(struct tar_reader *r, const struct tar_entry **ret)
{
	uint8_t h[TAR_BLOCK];
	int k;

	if (r->ended)
		return 0;
	if (!r->detected) {
		k = tar_detect(r);
		if (k < 0)
			return k;
		r->detected = true;
	}

	/* Skip what is left of the previous member. */
	if (r->data_left || r->pad) {
		k = tar_stream_skip(r, r->data_left + r->pad);
		if (k == -EPIPE)
			return tar_member_error(r, -EPIPE, "truncated archive");
		if (k < 0)
			return k;
		r->data_left = r->pad = 0;
	}
	tar_entry_clear(r);

	for (;;) {
		uint64_t hdr_off = r->offset, len;
		bool pending = r->local.path || r->local.linkpath || r->gnu_longname ||
		               r->gnu_longlink;
		char *data = NULL;
		ssize_t n;
		char type;

		n = tar_stream_read(r, h, TAR_BLOCK);
		if (n < 0)
			return (int)n;
		/* Input that ends without the two zero blocks is refused, also at a
		 * member boundary: GNU tar accepts that with a warning, but a build
		 * would publish whatever part of a cut download arrived. */
		if (n == 0) {
			if (pending)
				return log_error(-EPIPE, "%s: truncated archive: extended header "
				                 "without its member", r->name);
			if (hdr_off == 0)
				return log_error(-EBADMSG, "%s: empty file, not a tar archive", r->name);
			return log_error(-EPIPE, "%s: truncated archive: ends at offset %llu without "
			                 "its end-of-archive marker", r->name,
			                 (unsigned long long)hdr_off);
		}
		if (n < TAR_BLOCK && hdr_off == 0)
			return log_error(-EBADMSG, "%s: not a tar archive (shorter than one header)",
			                 r->name);
		if (n < TAR_BLOCK)
			return log_error(-EPIPE, "%s: truncated archive: partial header at offset %llu",
			                 r->name, (unsigned long long)hdr_off);
		if (block_is_zero(h)) {
			n = tar_stream_read(r, h, TAR_BLOCK);
			if (n < 0)
				return (int)n;
			if (n != TAR_BLOCK || !block_is_zero(h))
				log_msg(LOG_WARN, "%s: lone zero block at offset %llu", r->name,
				        (unsigned long long)hdr_off);
			r->ended = true;
			return 0;
		}
		if (!checksum_ok(h) && hdr_off == 0)
			return log_error(-EBADMSG, "%s: not a tar archive (no valid header at its start)",
			                 r->name);
		if (!checksum_ok(h))
			return log_error(-EBADMSG, "%s: bad tar header checksum at offset %llu",
			                 r->name, (unsigned long long)hdr_off);

		type = (char)h[156];
		if (type != 'x' && type != 'g' && type != 'L' && type != 'K' && type != 'V') {
			k = tar_make_entry(r, h, hdr_off);
			tar_ext_clear(&r->local);
			free(r->gnu_longname);
			free(r->gnu_longlink);
			r->gnu_longname = r->gnu_longlink = NULL;
			if (k < 0)
				return k;
			*ret = &r->e;
			return 1;
		}

		if (tar_parse_unum(h + 124, 12, INT64_MAX, &len) < 0)
			return log_error(-EBADMSG, "%s: bad size field in header at offset %llu",
			                 r->name, (unsigned long long)hdr_off);
		if (type == 'V') {
			k = tar_stream_skip(r, len + (TAR_BLOCK - len % TAR_BLOCK) % TAR_BLOCK);
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
