/*
 * tar-entry.c — applying a member's header and the pending extended headers
 * to its entry (struct tar_entry): the name (pax path, GNU long name, ustar
 * prefix + name), attributes, xattrs, type, and for sparse members the map
 * of data segments (old GNU 'S', pax GNU.sparse 0.x and 1.0).
 *
 * A sparse map is accepted only sorted, disjoint, inside the logical size
 * and adding up to the stored data (check_map), so that tar_reader_read()
 * can trust it.  Errors name the member (tar_member_error).
 */
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "chunker/tar-internal.h"

int tar_member_error(struct tar_reader *r, int err, const char *what)
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
			return tar_member_error(r, -EBADMSG, "bad sparse map");
		end = s->off + s->len;
		sum += s->len;
	}
	if (sum != stored)
		return tar_member_error(r, -EBADMSG, "sparse map does not match the stored data");
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
				return tar_member_error(r, -EBADMSG, "bad sparse map");
			n = tar_stream_read(r, blk, TAR_BLOCK);
			if (n < 0)
				return (int)n;
			if (n < TAR_BLOCK)
				return tar_member_error(r, -EPIPE, "truncated archive");
			r->data_left -= TAR_BLOCK;
			bpos = 0;
		}
		c = blk[bpos++];
		if (c >= '0' && c <= '9') {
			if (++digits > 19)
				return tar_member_error(r, -EBADMSG, "bad sparse map");
			v = v * 10 + (uint64_t)(c - '0');
			continue;
		}
		if (c != '\n' || digits == 0)
			return tar_member_error(r, -EBADMSG, "bad sparse map");
		digits = 0;
		if (!have_count) {
			have_count = true;
			count = v;
			if (count > TAR_SPARSE_MAX)
				return tar_member_error(r, -EBADMSG, "sparse map too large");
		} else {
			vals[nums++ % 2] = v;
			if (nums % 2 == 0 && tar_map_push(&r->map, &r->n_map, vals[0], vals[1]) < 0)
				return tar_member_error(r, -ENOMEM, "sparse map");
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
			if (tar_parse_unum(f, 12, INT64_MAX, &off) < 0 ||
			    tar_parse_unum(f + 12, 12, INT64_MAX, &len) < 0)
				return tar_member_error(r, -EBADMSG, "bad sparse header");
			if (tar_map_push(&r->map, &r->n_map, off, len) < 0)
				return tar_member_error(r, -E2BIG, "sparse map too large");
		}
		if (!more)
			return 0;
		n = tar_stream_read(r, blk, TAR_BLOCK);
		if (n < 0)
			return (int)n;
		if (n < TAR_BLOCK)
			return tar_member_error(r, -EPIPE, "truncated archive");
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
int tar_make_entry(struct tar_reader *r, const uint8_t *h, uint64_t hdr_off)
{
	bool ustar = memcmp(h + 257, "ustar\0", 6) == 0;
	bool gnu = memcmp(h + 257, "ustar  \0", 8) == 0;
	struct ext *x = &r->local;
	uint64_t v, size, stored;
	int64_t mtime;
	char type = (char)h[156];
	uint32_t ifmt;
	int k;

	tar_entry_clear(r);
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
		r->path = tar_strndup_field(h, 100);
	}
	if (x->linkpath)
		r->linkpath = strdup(x->linkpath);
	else if (r->gnu_longlink)
		r->linkpath = strdup(r->gnu_longlink);
	else
		r->linkpath = tar_strndup_field(h + 157, 100);
	if (!r->path || !r->linkpath)
		return log_errno(-ENOMEM, "%s", r->name);
	r->e.path = r->path;
	r->e.linkpath = r->linkpath;

	if (!r->path[0])
		return log_error(-EBADMSG, "%s: member at offset %llu has an empty name", r->name,
		                 (unsigned long long)hdr_off);

	/* numeric fields */
	if (tar_parse_unum(h + 100, 8, 07777777, &v) < 0)
		return tar_member_error(r, -EBADMSG, "bad mode field");
	r->e.attr.mode = (uint32_t)v & 07777;
	if (tar_parse_unum(h + 108, 8, UINT32_MAX, &v) < 0)
		return tar_member_error(r, -EBADMSG, "bad uid field");
	r->e.attr.uid = (uint32_t)v;
	if (tar_parse_unum(h + 116, 8, UINT32_MAX, &v) < 0)
		return tar_member_error(r, -EBADMSG, "bad gid field");
	r->e.attr.gid = (uint32_t)v;
	if (tar_parse_unum(h + 124, 12, INT64_MAX, &stored) < 0)
		return tar_member_error(r, -EBADMSG, "bad size field");
	if (tar_parse_num(h + 136, 12, true, &mtime) < 0)
		return tar_member_error(r, -EBADMSG, "bad mtime field");
	r->e.attr.mtime_sec = mtime;
	if (ustar || gnu) {
		uint64_t major, minor;

		if (tar_parse_unum(h + 329, 8, UINT32_MAX, &major) < 0 ||
		    tar_parse_unum(h + 337, 8, UINT32_MAX, &minor) < 0)
			return tar_member_error(r, -EBADMSG, "bad device number field");
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
		return tar_member_error(r, -EBADMSG, what);
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

		if (tar_parse_unum(h + 483, 12, INT64_MAX, &realsize) < 0)
			return tar_member_error(r, -EBADMSG, "bad sparse header");
		r->e.sparse = true;
		k = read_sparse_old(r, h);
		if (k < 0)
			return k;
		size = realsize;
	} else if (r->e.type == '0' && (x->sparse_map_given || x->sparse_major >= 0)) {
		if (!x->has_realsize)
			return tar_member_error(r, -EBADMSG, "sparse member without a real size");
		r->e.sparse = true;
		size = x->realsize;
		r->e.size = size;
		if (x->sparse_major == 1 && x->sparse_minor == 0) {
			k = read_sparse_1_0(r);
			if (k < 0)
				return k;
		} else if (x->sparse_major <= 0) {
			if (x->pending_offset)
				return tar_member_error(r, -EBADMSG, "bad sparse map");
			r->map = TAKE_PTR(x->map);
			r->n_map = x->n_map;
			x->n_map = 0;
		} else {
			return tar_member_error(r, -EPROTONOSUPPORT, "unsupported GNU sparse version");
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
