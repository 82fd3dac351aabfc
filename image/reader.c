/*
 * reader.c — answer questions from a serialised index in place.
 *
 * Opening checks only the header and the section table (O(1)); there is no
 * parse pass, so a 1,000,000-entry index opens in microseconds.  Instead every
 * accessor checks what it touches before it touches it: inode numbers against
 * the inode count, record ranges against their tables, string references
 * against the string table, names for '/', NUL, "." and "..".  A corrupt index
 * therefore costs an -EBADMSG on the request that meets the corruption, never
 * a read outside the buffer.  Invariants that would need a pass over a whole
 * table (sortedness of a directory, uniqueness of names) are not checked: a
 * hostile index can make a lookup miss, but not crash or loop.
 *
 * A mapped index file must not be truncated while it is open (SIGBUS): the
 * index is content-addressed and written once, so nobody should.
 */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "image/image-internal.h"

struct image {
	const uint8_t *base;
	size_t len;
	void *map;              /* image_open_file's mapping, else NULL */
	size_t map_len;
	const uint8_t *sec[IDX_S_COUNT];
	uint64_t sec_len[IDX_S_COUNT];
	uint64_t sec_count[IDX_S_COUNT];
	uint64_t file_bytes, data_bytes, stored_bytes;
};

static const uint64_t record_size[IDX_S_COUNT] = {
	[IDX_S_INODES] = IDX_INODE_SIZE,
	[IDX_S_DIRENTS] = IDX_DIRENT_SIZE,
	[IDX_S_EXTENTS] = IDX_EXTENT_SIZE,
	[IDX_S_XATTRS] = IDX_XATTR_SIZE,
	[IDX_S_CHUNKS] = IDX_CHUNK_SIZE,
};

int image_open_mem(const void *data, size_t len, struct image **ret)
{
	const uint8_t *h = data, *p;
	uint64_t prev_end = IDX_HEADER_SIZE, off, slen, count, rs;
	struct image *img;
	int s;

	if (!data || !ret)
		return -EINVAL;
	if (len < IDX_HEADER_SIZE || memcmp(h + IDX_H_MAGIC, IDX_MAGIC, IDX_MAGIC_LEN) != 0)
		return -EBADMSG;
	if (le32(h + IDX_H_VERSION) != IDX_VERSION || le32(h + IDX_H_FLAGS) != 0)
		return -EPROTONOSUPPORT;
	if (le32(h + IDX_H_HEADER_SIZE) != IDX_HEADER_SIZE ||
	    le32(h + IDX_H_SECTION_COUNT) != IDX_S_COUNT || le64(h + IDX_H_TOTAL_SIZE) != len)
		return -EBADMSG;

	img = calloc(1, sizeof(*img));
	if (!img)
		return -ENOMEM;
	img->base = h;
	img->len = len;
	for (s = 0; s < IDX_S_COUNT; s++) {
		p = h + IDX_H_SECTIONS + (size_t)s * IDX_SECTION_SIZE;
		off = le64(p);
		slen = le64(p + 8);
		count = le64(p + 16);
		rs = record_size[s];
		/* In order, aligned, inside the buffer, and exactly count records. */
		if (off % 8 || off < prev_end || off > len || slen > len - off ||
		    (rs ? count > slen / rs || count * rs != slen : count != slen))
			goto bad;
		img->sec[s] = h + off;
		img->sec_len[s] = slen;
		img->sec_count[s] = count;
		prev_end = off + slen;
	}
	/* Inode numbers are u32 in dirents; the root must be a directory. */
	if (img->sec_count[IDX_S_INODES] == 0 || img->sec_count[IDX_S_INODES] > UINT32_MAX ||
	    !S_ISDIR(le32(img->sec[IDX_S_INODES] + IDX_I_MODE)))
		goto bad;
	img->file_bytes = le64(h + IDX_H_FILE_BYTES);
	img->data_bytes = le64(h + IDX_H_DATA_BYTES);
	img->stored_bytes = le64(h + IDX_H_STORED_BYTES);
	*ret = img;
	return 0;
bad:
	free(img);
	return -EBADMSG;
}

int image_open_file(const char *path, struct image **ret)
{
	_cleanup_close_ int fd = -1;
	struct stat st;
	void *map;
	int r;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if (st.st_size < IDX_HEADER_SIZE)
		return -EBADMSG;
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED)
		return -errno;
	r = image_open_mem(map, (size_t)st.st_size, ret);
	if (r < 0) {
		munmap(map, (size_t)st.st_size);
		return r;
	}
	(*ret)->map = map;
	(*ret)->map_len = (size_t)st.st_size;
	return 0;
}

int image_verify(const struct image *img)
{
	uint64_t want = le64(img->base + IDX_H_CHECKSUM);

	if (hash64(img->base + IDX_CHECKSUM_START, img->len - IDX_CHECKSUM_START) != want)
		return -EBADMSG;
	return 0;
}

void image_free(struct image *img)
{
	if (!img)
		return;
	if (img->map)
		munmap(img->map, img->map_len);
	free(img);
}

void image_get_info(const struct image *img, struct image_info *ret)
{
	*ret = (struct image_info){
		.version = le32(img->base + IDX_H_VERSION),
		.inodes = img->sec_count[IDX_S_INODES],
		.entries = img->sec_count[IDX_S_DIRENTS],
		.chunks = img->sec_count[IDX_S_CHUNKS],
		.extents = img->sec_count[IDX_S_EXTENTS],
		.xattrs = img->sec_count[IDX_S_XATTRS],
		.file_bytes = img->file_bytes,
		.data_bytes = img->data_bytes,
		.stored_bytes = img->stored_bytes,
	};
}

/* ---- checked access to records ------------------------------------------- */

static int inode_rec(const struct image *img, uint64_t ino, const uint8_t **ret)
{
	if (ino == 0 || ino > img->sec_count[IDX_S_INODES])
		return -ENOENT;
	*ret = img->sec[IDX_S_INODES] + (ino - 1) * IDX_INODE_SIZE;
	return 0;
}

static int str_ref(const struct image *img, uint64_t off, uint64_t len, const char **ret)
{
	uint64_t n = img->sec_len[IDX_S_STRINGS];

	if (off > n || len > n - off)
		return -EBADMSG;
	*ret = (const char *)img->sec[IDX_S_STRINGS] + off;
	return 0;
}

/* A first/count pair inside a table of n records. */
static bool range_ok(uint64_t first, uint64_t count, uint64_t n)
{
	return first <= n && count <= n - first;
}

static int dir_range(const struct image *img, uint64_t dir, uint64_t *ret_first,
                     uint64_t *ret_count)
{
	const uint8_t *p;
	int r;

	r = inode_rec(img, dir, &p);
	if (r < 0)
		return r;
	if (!S_ISDIR(le32(p + IDX_I_MODE)))
		return -ENOTDIR;
	*ret_first = le64(p + IDX_I_DATA_FIRST);
	*ret_count = le32(p + IDX_I_DATA_COUNT);
	if (!range_ok(*ret_first, *ret_count, img->sec_count[IDX_S_DIRENTS]))
		return -EBADMSG;
	return 0;
}

static int dirent_name(const struct image *img, uint64_t idx, const char **ret_name,
                       size_t *ret_len)
{
	const uint8_t *p = img->sec[IDX_S_DIRENTS] + idx * IDX_DIRENT_SIZE;
	uint32_t len = le16(p + IDX_D_NAME_LEN);
	int r;

	if (len == 0 || len > IMAGE_NAME_MAX)
		return -EBADMSG;
	r = str_ref(img, le32(p + IDX_D_NAME_OFF), len, ret_name);
	if (r < 0)
		return r;
	*ret_len = len;
	return 0;
}

static int dirent_ino(const struct image *img, uint64_t idx, uint64_t *ret)
{
	uint32_t ino = le32(img->sec[IDX_S_DIRENTS] + idx * IDX_DIRENT_SIZE + IDX_D_INO);

	/* An entry naming the root would make a directory its own ancestor. */
	if (ino <= IMAGE_ROOT_INO || ino > img->sec_count[IDX_S_INODES])
		return -EBADMSG;
	*ret = ino;
	return 0;
}

/* ---- attributes ------------------------------------------------------------ */

int image_getattr(const struct image *img, uint64_t ino, struct image_stat *ret)
{
	const uint8_t *p;
	uint32_t mode, nsec;
	int r;

	r = inode_rec(img, ino, &p);
	if (r < 0)
		return r;
	mode = le32(p + IDX_I_MODE);
	nsec = le32(p + IDX_I_MTIME_NSEC);
	if (!image_mode_valid(mode) || nsec >= 1000000000u)
		return -EBADMSG;
	*ret = (struct image_stat){
		.ino = ino,
		.mode = mode,
		.uid = le32(p + IDX_I_UID),
		.gid = le32(p + IDX_I_GID),
		.nlink = le32(p + IDX_I_NLINK),
		.size = le64(p + IDX_I_SIZE),
		.rdev = le64(p + IDX_I_RDEV),
		.mtime_sec = (int64_t)le64(p + IDX_I_MTIME_SEC),
		.mtime_nsec = nsec,
		.blocks = le64(p + IDX_I_BLOCKS),
	};
	return 0;
}

/* ---- directories ----------------------------------------------------------- */

int image_lookup(const struct image *img, uint64_t dir, const char *name, size_t len,
                 uint64_t *ret_ino)
{
	uint64_t first, count, lo, hi, mid;
	const char *n;
	size_t nlen;
	int r, c;

	r = dir_range(img, dir, &first, &count);
	if (r < 0)
		return r;
	if (len > IMAGE_NAME_MAX)
		return -ENAMETOOLONG;
	if (len == 0)
		return -ENOENT;
	lo = first;
	hi = first + count;
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		r = dirent_name(img, mid, &n, &nlen);
		if (r < 0)
			return r;
		c = image_name_cmp(name, len, n, nlen);
		if (c == 0)
			return dirent_ino(img, mid, ret_ino);
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return -ENOENT;
}

int image_lookup_path(const struct image *img, const char *path, uint64_t *ret_ino)
{
	uint64_t ino = IMAGE_ROOT_INO;
	const char *p, *e;
	size_t n;
	int r;

	if (!path)
		return -EINVAL;
	for (p = path; *p; p = *e ? e + 1 : e) {
		e = strchrnul(p, '/');
		n = (size_t)(e - p);
		if (n == 0 || (n == 1 && p[0] == '.'))
			continue;
		/* No parent pointers are stored, and the caller asked for a
		 * path without symlinks: ".." has no single right meaning. */
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return -EINVAL;
		r = image_lookup(img, ino, p, n, &ino);
		if (r < 0)
			return r;
	}
	*ret_ino = ino;
	return 0;
}

int image_readdir(const struct image *img, uint64_t dir, uint64_t pos, const char **ret_name,
                  size_t *ret_len, uint64_t *ret_ino)
{
	uint64_t first, count, ino;
	const char *n;
	size_t len;
	int r;

	r = dir_range(img, dir, &first, &count);
	if (r < 0)
		return r;
	if (pos >= count)
		return 0;
	r = dirent_name(img, first + pos, &n, &len);
	if (r < 0)
		return r;
	/* Names reach the kernel and the caller's path joins as they are. */
	if (memchr(n, '/', len) || memchr(n, 0, len) ||
	    (n[0] == '.' && (len == 1 || (len == 2 && n[1] == '.'))))
		return -EBADMSG;
	r = dirent_ino(img, first + pos, &ino);
	if (r < 0)
		return r;
	*ret_name = n;
	*ret_len = len;
	*ret_ino = ino;
	return 1;
}

int64_t image_dir_size(const struct image *img, uint64_t dir)
{
	uint64_t first, count;
	int r;

	r = dir_range(img, dir, &first, &count);
	if (r < 0)
		return r;
	return (int64_t)count;
}

int image_readlink(const struct image *img, uint64_t ino, const char **ret, size_t *ret_len)
{
	const uint8_t *p;
	uint32_t len;
	int r;

	r = inode_rec(img, ino, &p);
	if (r < 0)
		return r;
	if (!S_ISLNK(le32(p + IDX_I_MODE)))
		return -EINVAL;
	len = le32(p + IDX_I_DATA_COUNT);
	if (len == 0 || len > IDX_SYMLINK_MAX)
		return -EBADMSG;
	r = str_ref(img, le64(p + IDX_I_DATA_FIRST), len, ret);
	if (r < 0)
		return r;
	*ret_len = len;
	return 0;
}

/* ---- extended attributes --------------------------------------------------- */

int image_xattr(const struct image *img, uint64_t ino, uint32_t i, const char **ret_name,
                size_t *ret_name_len, const void **ret_value, size_t *ret_value_len)
{
	const uint8_t *p, *x;
	uint32_t first, count, nlen, vlen;
	const char *name, *value;
	int r;

	r = inode_rec(img, ino, &p);
	if (r < 0)
		return r;
	first = le32(p + IDX_I_XATTR_FIRST);
	count = le32(p + IDX_I_XATTR_COUNT);
	if (!range_ok(first, count, img->sec_count[IDX_S_XATTRS]))
		return -EBADMSG;
	if (i >= count)
		return 0;
	x = img->sec[IDX_S_XATTRS] + ((uint64_t)first + i) * IDX_XATTR_SIZE;
	nlen = le32(x + IDX_X_NAME_LEN);
	vlen = le32(x + IDX_X_VALUE_LEN);
	if (nlen == 0 || nlen > IDX_XATTR_NAME_MAX || vlen > IDX_XATTR_VALUE_MAX)
		return -EBADMSG;
	r = str_ref(img, le32(x + IDX_X_NAME_OFF), nlen, &name);
	if (r < 0)
		return r;
	/* listxattr joins names with NULs */
	if (memchr(name, 0, nlen))
		return -EBADMSG;
	r = str_ref(img, le32(x + IDX_X_VALUE_OFF), vlen, &value);
	if (r < 0)
		return r;
	*ret_name = name;
	*ret_name_len = nlen;
	*ret_value = value;
	*ret_value_len = vlen;
	return 1;
}

int image_getxattr(const struct image *img, uint64_t ino, const char *name,
                   const void **ret_value, size_t *ret_value_len)
{
	size_t len = strlen(name), nlen;
	const char *n;
	uint32_t i;
	int r;

	for (i = 0;; i++) {
		r = image_xattr(img, ino, i, &n, &nlen, ret_value, ret_value_len);
		if (r <= 0)
			return r < 0 ? r : -ENODATA;
		if (nlen == len && memcmp(n, name, len) == 0)
			return 0;
	}
}

/* ---- file data ------------------------------------------------------------- */

static int extent_range(const struct image *img, uint64_t ino, uint64_t *ret_first,
                        uint64_t *ret_count, uint64_t *ret_size)
{
	const uint8_t *p;
	int r;

	r = inode_rec(img, ino, &p);
	if (r < 0)
		return r;
	if (!S_ISREG(le32(p + IDX_I_MODE)))
		return -EINVAL;
	*ret_first = le64(p + IDX_I_DATA_FIRST);
	*ret_count = le32(p + IDX_I_DATA_COUNT);
	*ret_size = le64(p + IDX_I_SIZE);
	if (!range_ok(*ret_first, *ret_count, img->sec_count[IDX_S_EXTENTS]))
		return -EBADMSG;
	return 0;
}

static const uint8_t *extent_rec(const struct image *img, uint64_t idx)
{
	return img->sec[IDX_S_EXTENTS] + idx * IDX_EXTENT_SIZE;
}

int64_t image_extent_count(const struct image *img, uint64_t ino)
{
	uint64_t first, count, size;
	int r;

	r = extent_range(img, ino, &first, &count, &size);
	if (r < 0)
		return r;
	return (int64_t)count;
}

/*
 * Beyond bounds, each extent handed out is checked against its predecessor:
 * by induction over the whole run, extents that pass are sorted and disjoint,
 * as the header promises callers.
 */
int image_extent(const struct image *img, uint64_t ino, uint64_t i, struct image_extent *ret)
{
	uint64_t first, count, size, poff, plen;
	const uint8_t *p;
	struct image_extent e;
	struct image_chunk c;
	int r;

	r = extent_range(img, ino, &first, &count, &size);
	if (r < 0)
		return r;
	if (i >= count)
		return -ERANGE;
	p = extent_rec(img, first + i);
	e = (struct image_extent){
		.file_off = le64(p + IDX_E_FILE_OFF),
		.chunk = le32(p + IDX_E_CHUNK),
		.chunk_off = le32(p + IDX_E_CHUNK_OFF),
		.len = le32(p + IDX_E_LEN),
	};
	if (e.len == 0 || e.file_off > size || e.len > size - e.file_off)
		return -EBADMSG;
	r = image_chunk(img, e.chunk, &c);
	if (r < 0)
		return -EBADMSG;
	if ((uint64_t)e.chunk_off + e.len > c.size)
		return -EBADMSG;
	if (i > 0) {
		p = extent_rec(img, first + i - 1);
		poff = le64(p + IDX_E_FILE_OFF);
		plen = le32(p + IDX_E_LEN);
		if (poff > e.file_off || plen > e.file_off - poff)
			return -EBADMSG;
	}
	*ret = e;
	return 0;
}

int64_t image_extent_find(const struct image *img, uint64_t ino, uint64_t off)
{
	uint64_t first, count, size, lo, hi, mid, eoff, elen;
	const uint8_t *p;
	int r;

	r = extent_range(img, ino, &first, &count, &size);
	if (r < 0)
		return r;
	lo = 0;
	hi = count;
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		p = extent_rec(img, first + mid);
		eoff = le64(p + IDX_E_FILE_OFF);
		elen = le32(p + IDX_E_LEN);
		/* end > off, without overflowing */
		if (eoff > off || elen > off - eoff)
			hi = mid;
		else
			lo = mid + 1;
	}
	return (int64_t)lo;
}

int image_chunk(const struct image *img, uint32_t idx, struct image_chunk *ret)
{
	const uint8_t *p;

	if (idx >= img->sec_count[IDX_S_CHUNKS])
		return -ERANGE;
	p = img->sec[IDX_S_CHUNKS] + (uint64_t)idx * IDX_CHUNK_SIZE;
	memcpy(ret->name, p + IDX_C_NAME, sizeof(ret->name));
	ret->size = le32(p + IDX_C_SIZE);
	ret->stored_size = le32(p + IDX_C_STORED_SIZE);
	ret->flags = le32(p + IDX_C_FLAGS);
	return 0;
}

int image_pack_offsets(const struct image *img, uint64_t **ret)
{
	uint64_t n = img->sec_count[IDX_S_CHUNKS], off = 0;
	uint64_t *v = malloc((n + 1) * sizeof(*v));
	const uint8_t *p = img->sec[IDX_S_CHUNKS];

	if (!v)
		return -ENOMEM;
	for (uint64_t i = 0; i < n; i++, p += IDX_CHUNK_SIZE) {
		v[i] = off;
		off += le32(p + IDX_C_STORED_SIZE);
	}
	v[n] = off;
	*ret = v;
	return 0;
}

void image_config(const struct image *img, const char **ret, size_t *ret_len)
{
	*ret = img->sec_len[IDX_S_CONFIG] ? (const char *)img->sec[IDX_S_CONFIG] : "";
	*ret_len = img->sec_len[IDX_S_CONFIG];
}
