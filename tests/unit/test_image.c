/*
 * test_image.c — the image module: tree building, path normalisation, layers
 * and whiteouts, the writer, the reader, and the reader's stance towards
 * hostile input (truncation, corrupted header fields, random byte flips).
 *
 * Every hostile case copies the index into a buffer of exactly its length, so
 * that under ASan (make asan) a read one byte past the end is caught.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <cmocka.h>

#include "image/image.h"
#include "lib/lib.h"

/* Header offsets from FORMAT.md, spelled out here on purpose: a test that
 * shared the implementation's constants could not notice them drifting. */
#define H_VERSION 8
#define H_FLAGS 12
#define H_CHECKSUM 16
#define H_HEADER_SIZE 24
#define H_SECTION_COUNT 28
#define H_TOTAL_SIZE 32
#define H_SECTIONS 64
#define N_SECTIONS 7
#define HEADER_SIZE (H_SECTIONS + N_SECTIONS * 24)

static const uint8_t cap_value[20] = {  /* VFS_CAP_REVISION_2, cap_net_bind_service */
	0x01, 0x00, 0x00, 0x02, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};
static const uint8_t acl_value[28] = {  /* user::rw- user:1000:r-- group::r-- other::--- */
	0x02, 0x00, 0x00, 0x00, 0x01, 0x00, 0x06, 0x00, 0xff, 0xff, 0xff, 0xff,
	0x02, 0x00, 0x04, 0x00, 0xe8, 0x03, 0x00, 0x00, 0x04, 0x00, 0x04, 0x00,
	0xff, 0xff, 0xff, 0xff,
};
/* xxh128 of the sample tree's index: changes only with the format or the writer's
 * layout choices, and then on purpose. */
#define GOLDEN_SAMPLE_HASH "0afce5d69e1218d480e6dc2de459463c"

static const char config_json[] = "{\"architecture\":\"amd64\",\"os\":\"linux\"}";

static struct image_attr mkattr(uint32_t mode, uint32_t uid, uint32_t gid)
{
	return (struct image_attr){ .mode = mode, .uid = uid, .gid = gid,
	                            .mtime_sec = 1700000000, .mtime_nsec = 123456789 };
}

static void set_chunk(struct image_tree *t, uint32_t idx, uint8_t tag, uint32_t size)
{
	struct image_chunk c = { .size = size, .stored_size = size / 2, .flags = IMAGE_CHUNK_ZSTD };

	memset(c.name, tag, sizeof(c.name));
	assert_int_equal(image_tree_set_chunk(t, idx, &c), 0);
}

/*
 * A tree with every entry type:
 *   etc/passwd          reg 0644, one extent
 *   usr/bin/ping        reg 04755, security.capability, extents with holes
 *   usr/bin/ping-link   hard link to ping
 *   usr/share/doc/a     reg, hard link from "b" in another directory
 *   b                   hard link to usr/share/doc/a
 *   tmp                 dir 01777
 *   srv                 dir 02775 uid 1000, system.posix_acl_access, user.empty ""
 *   lib -> usr/lib      symlink
 *   dev/null, dev/sda   chr 1:3, blk 8:0
 *   run/fifo, run/sock  fifo, socket
 *   empty               reg, size 0, no extents
 */
static struct image_tree *sample_tree(void)
{
	struct image_tree *t;
	struct image_inode *ino;
	struct image_attr a;
	int64_t c0, c1, c2, unused;

	assert_int_equal(image_tree_new(&t), 0);
	c0 = image_tree_new_chunk(t);
	unused = image_tree_new_chunk(t);
	c1 = image_tree_new_chunk(t);
	c2 = image_tree_new_chunk(t);
	assert_true(c0 >= 0 && unused >= 0 && c1 >= 0 && c2 >= 0);
	set_chunk(t, (uint32_t)c0, 0xa0, 65536);
	set_chunk(t, (uint32_t)unused, 0xee, 100);
	set_chunk(t, (uint32_t)c1, 0xa1, 4096);
	set_chunk(t, (uint32_t)c2, 0xa0, 65536);     /* same name as c0: merged */

	a = mkattr(S_IFDIR | 0755, 0, 0);
	assert_int_equal(image_tree_add(t, "", &a, NULL), 0);

	a = mkattr(S_IFREG | 0644, 0, 0);
	assert_int_equal(image_tree_add(t, "etc/passwd", &a, &ino), 0);
	image_inode_set_size(ino, 1000);
	assert_int_equal(image_inode_add_extent(ino, 0, (uint32_t)c1, 96, 1000), 0);

	a = mkattr(S_IFREG | S_ISUID | 0755, 0, 0);
	assert_int_equal(image_tree_add(t, "usr/bin/ping", &a, &ino), 0);
	image_inode_set_size(ino, 1 << 20);
	assert_int_equal(image_inode_add_extent(ino, 4096, (uint32_t)c0, 0, 65536), 0);
	assert_int_equal(image_inode_add_extent(ino, 200000, (uint32_t)c2, 100, 1000), 0);
	assert_int_equal(image_inode_add_extent(ino, 201000, (uint32_t)c1, 0, 4096), 0);
	assert_int_equal(image_inode_set_xattr(ino, "security.capability", cap_value,
	                                       sizeof(cap_value)), 0);
	assert_int_equal(image_tree_link(t, "usr/bin/ping-link", "usr/bin/ping"), 0);

	a = mkattr(S_IFREG | 0600, 7, 8);
	assert_int_equal(image_tree_add(t, "usr/share/doc/a", &a, &ino), 0);
	assert_int_equal(image_tree_link(t, "b", "usr/share/doc/a"), 0);

	a = mkattr(S_IFDIR | S_ISVTX | 0777, 0, 0);
	assert_int_equal(image_tree_add(t, "tmp", &a, NULL), 0);
	a = mkattr(S_IFDIR | S_ISGID | 0775, 1000, 1000);
	assert_int_equal(image_tree_add(t, "srv", &a, &ino), 0);
	assert_int_equal(image_inode_set_xattr(ino, "system.posix_acl_access", acl_value,
	                                       sizeof(acl_value)), 0);
	assert_int_equal(image_inode_set_xattr(ino, "user.empty", "", 0), 0);

	a = mkattr(S_IFLNK | 0777, 0, 0);
	assert_int_equal(image_tree_add(t, "lib", &a, &ino), 0);
	assert_int_equal(image_inode_set_symlink(ino, "usr/lib"), 0);

	a = mkattr(S_IFCHR | 0666, 0, 0);
	a.rdev = makedev(1, 3);
	assert_int_equal(image_tree_add(t, "dev/null", &a, NULL), 0);
	a = mkattr(S_IFBLK | 0660, 0, 6);
	a.rdev = makedev(8, 0);
	assert_int_equal(image_tree_add(t, "dev/sda", &a, NULL), 0);
	a = mkattr(S_IFIFO | 0600, 0, 0);
	assert_int_equal(image_tree_add(t, "run/fifo", &a, NULL), 0);
	a = mkattr(S_IFSOCK | 0755, 0, 0);
	assert_int_equal(image_tree_add(t, "run/sock", &a, NULL), 0);
	a = mkattr(S_IFREG | 0644, 0, 0);
	assert_int_equal(image_tree_add(t, "empty", &a, NULL), 0);

	assert_int_equal(image_tree_set_config(t, config_json, strlen(config_json)), 0);
	return t;
}

static void write_tree(struct image_tree *t, struct buf *out)
{
	assert_int_equal(image_write(t, out), 0);
	assert_true(out->len % 8 == 0);
}

/* The sample tree's index in a heap buffer of exactly its size. */
static uint8_t *sample_index(size_t *ret_len)
{
	struct image_tree *t = sample_tree();
	struct buf b = BUF_INIT;
	uint8_t *p;

	write_tree(t, &b);
	image_tree_free(t);
	p = malloc(b.len);
	assert_non_null(p);
	memcpy(p, b.data, b.len);
	*ret_len = b.len;
	buf_free(&b);
	return p;
}

static uint64_t must_lookup(const struct image *img, const char *path)
{
	uint64_t ino = 0;

	assert_int_equal(image_lookup_path(img, path, &ino), 0);
	return ino;
}

static struct image_stat must_stat(const struct image *img, const char *path)
{
	struct image_stat st;

	assert_int_equal(image_getattr(img, must_lookup(img, path), &st), 0);
	return st;
}

/* ---- round trip --------------------------------------------------------- */

/* A pack's offsets are the running sum of stored sizes in table order, the
 * last one the header's stored_bytes. */
static void test_image__pack_offsets_are_stored_size_prefix_sums(void **state)
{
	struct image *img;
	struct image_info info;
	struct image_chunk c;
	uint64_t *v, sum = 0;
	size_t len;
	uint8_t *data = sample_index(&len);

	assert_int_equal(image_open_mem(data, len, &img), 0);
	image_get_info(img, &info);
	assert_true(info.chunks >= 2);
	assert_int_equal(image_pack_offsets(img, &v), 0);
	for (uint32_t i = 0; i < info.chunks; i++) {
		assert_int_equal(v[i], sum);
		assert_int_equal(image_chunk(img, i, &c), 0);
		sum += c.stored_size;
	}
	assert_int_equal(v[info.chunks], sum);
	assert_int_equal(v[info.chunks], info.stored_bytes);
	free(v);
	image_free(img);
	free(data);
}

static void test_image__round_trip_every_entry_type(void **state)
{
	struct image *img;
	struct image_stat st;
	const char *s;
	size_t len;
	uint8_t *data = sample_index(&len);

	assert_int_equal(image_open_mem(data, len, &img), 0);
	assert_int_equal(image_verify(img), 0);

	st = must_stat(img, "");
	assert_int_equal(st.ino, IMAGE_ROOT_INO);
	assert_int_equal(st.mode, S_IFDIR | 0755);
	assert_int_equal(st.mtime_sec, 1700000000);
	assert_int_equal(st.mtime_nsec, 123456789);

	st = must_stat(img, "etc/passwd");
	assert_int_equal(st.mode, S_IFREG | 0644);
	assert_int_equal(st.size, 1000);
	assert_int_equal(st.nlink, 1);
	assert_int_equal(st.blocks, 2);

	st = must_stat(img, "usr/bin/ping");
	assert_int_equal(st.mode, S_IFREG | S_ISUID | 0755);
	assert_int_equal(st.size, 1 << 20);
	assert_int_equal(st.blocks, (65536 + 1000 + 4096 + 511) / 512);

	st = must_stat(img, "usr/share/doc/a");
	assert_int_equal(st.uid, 7);
	assert_int_equal(st.gid, 8);
	assert_int_equal(st.mode, S_IFREG | 0600);

	st = must_stat(img, "tmp");
	assert_int_equal(st.mode, S_IFDIR | S_ISVTX | 0777);
	st = must_stat(img, "srv");
	assert_int_equal(st.mode, S_IFDIR | S_ISGID | 0775);
	assert_int_equal(st.uid, 1000);
	assert_int_equal(st.gid, 1000);

	st = must_stat(img, "lib");
	assert_int_equal(st.mode, S_IFLNK | 0777);
	assert_int_equal(st.size, 7);
	assert_int_equal(image_readlink(img, st.ino, &s, &len), 0);
	assert_int_equal(len, 7);
	assert_memory_equal(s, "usr/lib", 7);
	assert_int_equal(image_readlink(img, must_lookup(img, "etc"), &s, &len), -EINVAL);

	st = must_stat(img, "dev/null");
	assert_int_equal(st.mode, S_IFCHR | 0666);
	assert_int_equal(st.rdev, makedev(1, 3));
	st = must_stat(img, "dev/sda");
	assert_int_equal(st.mode, S_IFBLK | 0660);
	assert_int_equal(st.rdev, makedev(8, 0));
	assert_int_equal(st.gid, 6);
	st = must_stat(img, "run/fifo");
	assert_int_equal(st.mode, S_IFIFO | 0600);
	assert_int_equal(st.rdev, 0);
	st = must_stat(img, "run/sock");
	assert_int_equal(st.mode, S_IFSOCK | 0755);
	st = must_stat(img, "empty");
	assert_int_equal(st.size, 0);
	assert_int_equal(st.blocks, 0);
	assert_int_equal(image_extent_count(img, st.ino), 0);

	image_free(img);
	free(data);
}

static void test_image__hardlinks_share_inode_and_nlink(void **state)
{
	struct image *img;
	struct image_stat a, b;
	size_t len;
	uint8_t *data = sample_index(&len);

	assert_int_equal(image_open_mem(data, len, &img), 0);
	a = must_stat(img, "usr/bin/ping");
	b = must_stat(img, "usr/bin/ping-link");
	assert_int_equal(a.ino, b.ino);
	assert_int_equal(a.nlink, 2);
	assert_int_equal(b.nlink, 2);
	assert_int_equal(image_extent_count(img, b.ino), 3);

	a = must_stat(img, "usr/share/doc/a");
	b = must_stat(img, "b");
	assert_int_equal(a.ino, b.ino);
	assert_int_equal(a.nlink, 2);
	image_free(img);
	free(data);
}

static void test_image__hardlink_survives_replace_and_remove(void **state)
{
	struct image_tree *t;
	struct image_inode *ino, *other;
	struct image_attr a = mkattr(S_IFREG | 0644, 0, 0);
	struct buf out = BUF_INIT;
	struct image *img;
	struct image_stat st;

	assert_int_equal(image_tree_new(&t), 0);
	assert_int_equal(image_tree_add(t, "x/one", &a, &ino), 0);
	image_inode_set_size(ino, 42);
	assert_int_equal(image_tree_link(t, "x/two", "x/one"), 0);
	assert_int_equal(image_tree_link(t, "y/three", "x/one"), 0);
	assert_ptr_equal(image_tree_find(t, "y/three"), ino);
	/* relinking the same inode is a no-op */
	assert_int_equal(image_tree_link(t, "x/two", "x/one"), 0);
	/* replace one link by a new file; remove another */
	assert_int_equal(image_tree_add(t, "x/one", &a, &other), 0);
	assert_ptr_not_equal(other, ino);
	assert_int_equal(image_tree_remove(t, "x/two"), 0);
	assert_ptr_equal(image_tree_find(t, "y/three"), ino);
	assert_int_equal(image_inode_attr(ino)->mode, S_IFREG | 0644);

	/* a link placed over its target's own directory keeps the inode */
	assert_int_equal(image_tree_link(t, "y", "y/three"), 0);
	assert_ptr_equal(image_tree_find(t, "y"), ino);

	assert_int_equal(image_tree_link(t, "z", "missing"), -ENOENT);
	assert_int_equal(image_tree_link(t, "z", "x"), -EPERM);

	write_tree(t, &out);
	assert_int_equal(image_open_mem(out.data, out.len, &img), 0);
	st = must_stat(img, "y");
	assert_int_equal(st.nlink, 1);
	assert_int_equal(st.size, 42);
	st = must_stat(img, "x/one");
	assert_int_equal(st.nlink, 1);
	assert_int_equal(st.size, 0);
	assert_int_equal(image_lookup_path(img, "x/two", &st.ino), -ENOENT);
	image_free(img);
	buf_free(&out);
	image_tree_free(t);
}

static void test_image__dir_nlink_counts_subdirs(void **state)
{
	struct image *img;
	size_t len;
	uint8_t *data = sample_index(&len);

	assert_int_equal(image_open_mem(data, len, &img), 0);
	/* root: etc usr tmp srv dev run */
	assert_int_equal(must_stat(img, "").nlink, 2 + 6);
	assert_int_equal(must_stat(img, "usr").nlink, 2 + 2);
	assert_int_equal(must_stat(img, "usr/bin").nlink, 2);
	assert_int_equal(must_stat(img, "tmp").nlink, 2);
	assert_int_equal(image_dir_size(img, IMAGE_ROOT_INO), 9);
	image_free(img);
	free(data);
}

static void test_image__extents_and_holes(void **state)
{
	struct image *img;
	struct image_extent e;
	struct image_chunk c;
	uint64_t ino;
	size_t len;
	uint8_t *data = sample_index(&len);

	assert_int_equal(image_open_mem(data, len, &img), 0);
	ino = must_lookup(img, "usr/bin/ping");
	assert_int_equal(image_extent_count(img, ino), 3);
	assert_int_equal(image_extent(img, ino, 0, &e), 0);
	assert_int_equal(e.file_off, 4096);
	assert_int_equal(e.len, 65536);
	assert_int_equal(e.chunk_off, 0);
	assert_int_equal(image_chunk(img, e.chunk, &c), 0);
	assert_int_equal(c.name[0], 0xa0);
	assert_int_equal(c.size, 65536);
	assert_int_equal(c.flags, IMAGE_CHUNK_ZSTD);
	assert_int_equal(image_extent(img, ino, 1, &e), 0);
	assert_int_equal(e.file_off, 200000);
	assert_int_equal(e.chunk_off, 100);
	/* c2 had c0's name: one chunk-table entry */
	assert_int_equal(image_chunk(img, e.chunk, &c), 0);
	assert_int_equal(c.name[0], 0xa0);
	assert_int_equal(image_extent(img, ino, 2, &e), 0);
	assert_int_equal(e.file_off, 201000);
	assert_int_equal(image_extent(img, ino, 3, &e), -ERANGE);

	/* hole before the first extent, inside, between, after */
	assert_int_equal(image_extent_find(img, ino, 0), 0);
	assert_int_equal(image_extent_find(img, ino, 4096), 0);
	assert_int_equal(image_extent_find(img, ino, 4096 + 65535), 0);
	assert_int_equal(image_extent_find(img, ino, 4096 + 65536), 1);
	assert_int_equal(image_extent_find(img, ino, 199999), 1);
	assert_int_equal(image_extent_find(img, ino, 200999), 1);
	assert_int_equal(image_extent_find(img, ino, 201000), 2);
	assert_int_equal(image_extent_find(img, ino, 205096), 3);
	assert_int_equal(image_extent_find(img, ino, UINT64_MAX), 3);

	assert_int_equal(image_extent_count(img, must_lookup(img, "etc")), -EINVAL);
	assert_int_equal(image_extent_find(img, must_lookup(img, "lib"), 0), -EINVAL);
	image_free(img);
	free(data);
}

static void test_image__xattrs_binary_values(void **state)
{
	struct image *img;
	const void *v;
	const char *n;
	size_t len, nl, vl;
	uint64_t srv;
	uint8_t *data = sample_index(&len);

	assert_int_equal(image_open_mem(data, len, &img), 0);
	assert_int_equal(image_getxattr(img, must_lookup(img, "usr/bin/ping"),
	                                "security.capability", &v, &vl), 0);
	assert_int_equal(vl, sizeof(cap_value));
	assert_memory_equal(v, cap_value, sizeof(cap_value));
	assert_int_equal(image_getxattr(img, must_lookup(img, "usr/bin/ping-link"),
	                                "security.capability", &v, &vl), 0);

	srv = must_lookup(img, "srv");
	assert_int_equal(image_getxattr(img, srv, "system.posix_acl_access", &v, &vl), 0);
	assert_int_equal(vl, sizeof(acl_value));
	assert_memory_equal(v, acl_value, sizeof(acl_value));
	assert_int_equal(image_getxattr(img, srv, "user.empty", &v, &vl), 0);
	assert_int_equal(vl, 0);
	assert_int_equal(image_getxattr(img, srv, "user.missing", &v, &vl), -ENODATA);
	assert_int_equal(image_getxattr(img, must_lookup(img, "etc"), "user.x", &v, &vl),
	                 -ENODATA);

	/* listed in name order */
	assert_int_equal(image_xattr(img, srv, 0, &n, &nl, &v, &vl), 1);
	assert_int_equal(nl, strlen("system.posix_acl_access"));
	assert_memory_equal(n, "system.posix_acl_access", nl);
	assert_int_equal(image_xattr(img, srv, 1, &n, &nl, &v, &vl), 1);
	assert_memory_equal(n, "user.empty", nl);
	assert_int_equal(image_xattr(img, srv, 2, &n, &nl, &v, &vl), 0);
	image_free(img);
	free(data);
}

static void test_image__config_and_info(void **state)
{
	struct image *img;
	struct image_info info;
	const char *cfg;
	size_t len, cl;
	uint8_t *data = sample_index(&len);

	assert_int_equal(image_open_mem(data, len, &img), 0);
	image_config(img, &cfg, &cl);
	assert_int_equal(cl, strlen(config_json));
	assert_memory_equal(cfg, config_json, cl);

	image_get_info(img, &info);
	assert_int_equal(info.version, 1);
	/* root etc passwd usr bin ping share doc a tmp srv lib dev null sda run
	 * fifo sock empty: 19 inodes, 21 entries with the two extra links */
	assert_int_equal(info.inodes, 19);
	assert_int_equal(info.entries, 20);
	assert_int_equal(info.chunks, 2);        /* unused dropped, twin merged */
	assert_int_equal(info.extents, 4);
	assert_int_equal(info.xattrs, 3);
	assert_int_equal(info.file_bytes, 1000 + (1 << 20));
	assert_int_equal(info.data_bytes, 65536 + 4096);
	assert_int_equal(info.stored_bytes, (65536 + 4096) / 2);
	image_free(img);
	free(data);
}

/* A format drift must be deliberate: this hash changes with any byte. */
static void test_image__golden_index_hash(void **state)
{
	size_t len;
	uint8_t *data = sample_index(&len);
	char hex[HASH_HEX_SIZE];
	uint8_t h[HASH_SIZE];

	hash128(data, len, h);
	hex_encode(h, sizeof(h), hex);
	print_message("sample index: %zu bytes, xxh128 %s\n", len, hex);
	assert_string_equal(hex, GOLDEN_SAMPLE_HASH);
	free(data);
}

static void test_image__write_is_deterministic(void **state)
{
	struct image_attr a = mkattr(S_IFREG | 0644, 0, 0);
	struct image_tree *t1, *t2;
	struct buf b1 = BUF_INIT, b2 = BUF_INIT;
	char name[32];
	int i;

	assert_int_equal(image_tree_new(&t1), 0);
	assert_int_equal(image_tree_new(&t2), 0);
	for (i = 0; i < 300; i++) {
		snprintf(name, sizeof(name), "d%d/f%d", i % 7, i);
		assert_int_equal(image_tree_add(t1, name, &a, NULL), 0);
		snprintf(name, sizeof(name), "d%d/f%d", (299 - i) % 7, 299 - i);
		assert_int_equal(image_tree_add(t2, name, &a, NULL), 0);
	}
	write_tree(t1, &b1);
	write_tree(t2, &b2);
	assert_int_equal(b1.len, b2.len);
	assert_memory_equal(b1.data, b2.data, b1.len);
	/* and a second write of the same tree appends the same bytes */
	write_tree(t1, &b1);
	assert_int_equal(b1.len, 2 * b2.len);
	assert_memory_equal(b1.data + b2.len, b2.data, b2.len);
	buf_free(&b1);
	buf_free(&b2);
	image_tree_free(t1);
	image_tree_free(t2);
}

static void test_image__writer_refuses_bad_chunks(void **state)
{
	struct image_attr a = mkattr(S_IFREG | 0644, 0, 0);
	struct image_tree *t;
	struct image_inode *ino;
	struct buf out = BUF_INIT;
	int64_t c;

	assert_int_equal(image_tree_new(&t), 0);
	c = image_tree_new_chunk(t);
	assert_int_equal(c, 0);
	assert_int_equal(image_tree_add(t, "f", &a, &ino), 0);
	image_inode_set_size(ino, 100);
	assert_int_equal(image_inode_add_extent(ino, 0, 0, 0, 100), 0);
	/* slot never set */
	assert_int_equal(image_write(t, &out), -EINVAL);
	assert_int_equal(out.len, 0);
	/* extent longer than its chunk */
	set_chunk(t, 0, 1, 50);
	assert_int_equal(image_write(t, &out), -EINVAL);
	/* extent past the file's size */
	set_chunk(t, 0, 1, 4096);
	image_inode_set_size(ino, 99);
	assert_int_equal(image_write(t, &out), -EINVAL);
	image_inode_set_size(ino, 100);
	assert_int_equal(image_write(t, &out), 0);
	/* a slot that does not exist */
	image_inode_clear_extents(ino);
	assert_int_equal(image_inode_add_extent(ino, 0, 5, 0, 10), 0);
	assert_int_equal(image_write(t, &out), -EINVAL);
	assert_int_equal(image_tree_set_chunk(t, 5, &(struct image_chunk){ 0 }), -ERANGE);
	buf_free(&out);
	image_tree_free(t);
}

static void test_image__extent_rules(void **state)
{
	struct image_attr a = mkattr(S_IFREG | 0644, 0, 0);
	struct image_tree *t;
	struct image_inode *ino, *dir;

	assert_int_equal(image_tree_new(&t), 0);
	assert_int_equal(image_tree_add(t, "f", &a, &ino), 0);
	assert_int_equal(image_inode_add_extent(ino, 100, 0, 0, 10), 0);
	assert_int_equal(image_inode_add_extent(ino, 105, 0, 0, 10), -EINVAL);  /* overlap */
	assert_int_equal(image_inode_add_extent(ino, 50, 0, 0, 10), -EINVAL);   /* order */
	assert_int_equal(image_inode_add_extent(ino, 110, 0, 0, 0), -EINVAL);   /* empty */
	assert_int_equal(image_inode_add_extent(ino, UINT64_MAX - 5, 0, 0, 10), -EINVAL);
	assert_int_equal(image_inode_add_extent(ino, 110, 0, 0, 10), 0);        /* adjacent */
	dir = image_tree_find(t, "");
	assert_non_null(dir);
	assert_int_equal(image_inode_add_extent(dir, 0, 0, 0, 10), -EINVAL);
	assert_int_equal(image_inode_set_symlink(ino, "x"), -EINVAL);
	image_tree_free(t);
}

/* ---- paths ---------------------------------------------------------------- */

static void test_image__path_normalize_accepts_tar_names(void **state)
{
	static const char *const cases[][2] = {
		{ "./usr//bin/", "usr/bin" },
		{ "/etc/passwd", "etc/passwd" },
		{ "etc/passwd", "etc/passwd" },
		{ "///a///b///", "a/b" },
		{ "./", "" },
		{ ".", "" },
		{ "/", "" },
		{ "", "" },
		{ "a/./b/.", "a/b" },
		{ "a/b/../c", "a/c" },
		{ "a/..", "" },
		{ "a/b/../../c/..", "" },
		{ "./a/../b", "b" },
		{ "...", "..." },
		{ "..a/b..", "..a/b.." },
		{ ".wh..wh..opq", ".wh..wh..opq" },
	};
	char out[64];
	size_t i;

	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		int r = image_path_normalize(cases[i][0], out, sizeof(out));

		assert_int_equal(r, strlen(cases[i][1]));
		assert_string_equal(out, cases[i][1]);
	}
}

static void test_image__path_normalize_refuses_escapes(void **state)
{
	static const char *const cases[] = {
		"..", "../x", "/../x", "./../x", "a/../../x", "a/b/../../..", "a/./.././../x",
		"//..//", "a/../..",
	};
	char out[64];
	size_t i;

	for (i = 0; i < ARRAY_SIZE(cases); i++)
		assert_int_equal(image_path_normalize(cases[i], out, sizeof(out)), -EINVAL);
}

static void test_image__path_normalize_limits(void **state)
{
	char name[300], out[600];

	memset(name, 'x', 256);
	name[256] = 0;
	assert_int_equal(image_path_normalize(name, out, sizeof(out)), -ENAMETOOLONG);
	name[255] = 0;
	assert_int_equal(image_path_normalize(name, out, sizeof(out)), 255);
	/* the output must fit its buffer */
	assert_int_equal(image_path_normalize("abcdef", out, 6), -ENAMETOOLONG);
	assert_int_equal(image_path_normalize("abcdef", out, 7), 6);
}

/* Every string over {a, ., /} up to 8 long: a result is always in normal form,
 * and a name is refused exactly when a reference depth count goes negative. */
static void test_image__path_normalize_exhaustive_small(void **state)
{
	static const char alpha[] = "a./";
	char in[16], out[16];
	unsigned long n, k, code, total = 1;
	int depth, escapes, r;
	size_t len, i;

	for (len = 0; len <= 8; len++, total *= 3) {
		for (code = 0; code < total; code++) {
			for (k = code, i = 0; i < len; i++, k /= 3)
				in[i] = alpha[k % 3];
			in[len] = 0;
			/* reference: walk components, count depth */
			depth = 0;
			escapes = 0;
			for (char *p = in, *e; *p; p = *e ? e + 1 : e) {
				e = strchrnul(p, '/');
				n = (unsigned long)(e - p);
				if (n == 0 || (n == 1 && *p == '.'))
					continue;
				if (n == 2 && p[0] == '.' && p[1] == '.') {
					if (--depth < 0)
						escapes = 1;
					if (escapes)
						break;
					continue;
				}
				depth++;
			}
			r = image_path_normalize(in, out, sizeof(out));
			if (escapes) {
				assert_int_equal(r, -EINVAL);
				continue;
			}
			assert_int_equal(r, strlen(out));
			assert_true(out[0] != '/' && (r == 0 || out[r - 1] != '/'));
			assert_null(strstr(out, "//"));
			for (char *p = out, *e; *p; p = *e ? e + 1 : e) {
				e = strchrnul(p, '/');
				n = (unsigned long)(e - p);
				assert_false(n == 1 && *p == '.');
				assert_false(n == 2 && p[0] == '.' && p[1] == '.');
			}
		}
	}
}

static void test_image__tree_refuses_unnormalised_paths(void **state)
{
	struct image_attr a = mkattr(S_IFREG | 0644, 0, 0);
	struct image_tree *t;
	char name[300];

	assert_int_equal(image_tree_new(&t), 0);
	assert_int_equal(image_tree_add(t, "/a", &a, NULL), -EINVAL);
	assert_int_equal(image_tree_add(t, "a/", &a, NULL), -EINVAL);
	assert_int_equal(image_tree_add(t, "a//b", &a, NULL), -EINVAL);
	assert_int_equal(image_tree_add(t, "a/./b", &a, NULL), -EINVAL);
	assert_int_equal(image_tree_add(t, "../b", &a, NULL), -EINVAL);
	assert_int_equal(image_tree_add(t, "", &a, NULL), -EINVAL);    /* root not a dir */
	memset(name, 'y', 256);
	name[256] = 0;
	assert_int_equal(image_tree_add(t, name, &a, NULL), -ENAMETOOLONG);
	a.mode = 0644;          /* no type */
	assert_int_equal(image_tree_add(t, "a", &a, NULL), -EINVAL);
	a = mkattr(S_IFREG | 0644, 0, 0);
	a.mtime_nsec = 1000000000;
	assert_int_equal(image_tree_add(t, "a", &a, NULL), -EINVAL);
	assert_null(image_tree_find(t, "a"));
	image_tree_free(t);
}

/* ---- tree edits, layers, whiteouts ---------------------------------------- */

static void test_image__tree_add_replaces_and_updates(void **state)
{
	struct image_attr f = mkattr(S_IFREG | 0644, 0, 0);
	struct image_attr d = mkattr(S_IFDIR | 0700, 5, 5);
	struct image_tree *t;
	struct image_inode *ino, *dir;

	assert_int_equal(image_tree_new(&t), 0);
	/* parents made implicitly, then given real attributes */
	assert_int_equal(image_tree_add(t, "a/b/c", &f, NULL), 0);
	dir = image_tree_find(t, "a/b");
	assert_non_null(dir);
	assert_int_equal(image_inode_attr(dir)->mode, S_IFDIR | 0755);
	assert_int_equal(image_tree_add(t, "a/b", &d, &ino), 0);
	assert_ptr_equal(ino, dir);
	assert_int_equal(image_inode_attr(dir)->uid, 5);
	assert_non_null(image_tree_find(t, "a/b/c"));
	/* a file under a file */
	assert_int_equal(image_tree_add(t, "a/b/c/d", &f, NULL), -ENOTDIR);
	/* a file replaces a directory and its subtree */
	assert_int_equal(image_tree_add(t, "a/b", &f, &ino), 0);
	assert_null(image_tree_find(t, "a/b/c"));
	assert_int_equal(image_inode_attr(image_tree_find(t, "a/b"))->mode, S_IFREG | 0644);
	/* and a directory replaces a file */
	assert_int_equal(image_tree_add(t, "a/b", &d, &ino), 0);
	assert_int_equal(image_inode_attr(image_tree_find(t, "a/b"))->mode, S_IFDIR | 0700);
	/* the root's attributes */
	d.uid = 9;
	assert_int_equal(image_tree_add(t, "", &d, &ino), 0);
	assert_ptr_equal(ino, image_tree_find(t, ""));
	assert_int_equal(image_inode_attr(ino)->uid, 9);
	assert_int_equal(image_tree_remove(t, ""), -EINVAL);
	image_tree_free(t);
}

static void test_image__whiteout_remove(void **state)
{
	struct image_attr f = mkattr(S_IFREG | 0644, 0, 0);
	struct image_tree *t;
	struct buf out = BUF_INIT;
	struct image *img;
	uint64_t ino;

	assert_int_equal(image_tree_new(&t), 0);
	assert_int_equal(image_tree_add(t, "etc/a", &f, NULL), 0);
	assert_int_equal(image_tree_add(t, "etc/sub/b", &f, NULL), 0);
	assert_int_equal(image_tree_add(t, "etc/sub/c/d", &f, NULL), 0);
	image_tree_set_layer(t, 1);
	assert_int_equal(image_tree_remove(t, "etc/sub"), 0);
	assert_int_equal(image_tree_remove(t, "etc/sub"), -ENOENT);
	assert_int_equal(image_tree_remove(t, "etc/nope"), -ENOENT);
	assert_int_equal(image_tree_remove(t, "nope/x"), -ENOENT);
	assert_null(image_tree_find(t, "etc/sub/c/d"));
	assert_non_null(image_tree_find(t, "etc/a"));
	write_tree(t, &out);
	assert_int_equal(image_open_mem(out.data, out.len, &img), 0);
	assert_int_equal(image_lookup_path(img, "etc/sub", &ino), -ENOENT);
	assert_int_equal(image_dir_size(img, must_lookup(img, "etc")), 1);
	assert_int_equal(must_stat(img, "etc").nlink, 2);
	image_free(img);
	buf_free(&out);
	image_tree_free(t);
}

static void test_image__clear_lower_keeps_current_layer(void **state)
{
	struct image_attr f = mkattr(S_IFREG | 0644, 0, 0);
	struct image_attr d = mkattr(S_IFDIR | 0755, 0, 0);
	struct image_tree *t;

	assert_int_equal(image_tree_new(&t), 0);
	/* layer 0 */
	assert_int_equal(image_tree_add(t, "opt/old", &f, NULL), 0);
	assert_int_equal(image_tree_add(t, "opt/keep/old", &f, NULL), 0);
	assert_int_equal(image_tree_add(t, "opt/gone/x", &f, NULL), 0);
	assert_int_equal(image_tree_add(t, "other/y", &f, NULL), 0);
	/* layer 1: opt/ is opaque; its members arrive before and after the marker */
	image_tree_set_layer(t, 1);
	assert_int_equal(image_tree_add(t, "opt/new", &f, NULL), 0);
	assert_int_equal(image_tree_add(t, "opt/keep/new", &f, NULL), 0);
	assert_int_equal(image_tree_clear_lower(t, "opt"), 0);
	assert_int_equal(image_tree_add(t, "opt/later", &d, NULL), 0);

	assert_non_null(image_tree_find(t, "opt"));
	assert_non_null(image_tree_find(t, "opt/new"));
	assert_non_null(image_tree_find(t, "opt/keep/new"));
	assert_non_null(image_tree_find(t, "opt/later"));
	assert_null(image_tree_find(t, "opt/old"));
	assert_null(image_tree_find(t, "opt/keep/old"));
	assert_null(image_tree_find(t, "opt/gone"));
	assert_non_null(image_tree_find(t, "other/y"));

	/* layer 2 re-lists opt/keep/, then makes opt opaque again */
	image_tree_set_layer(t, 2);
	assert_int_equal(image_tree_add(t, "opt/keep", &d, NULL), 0);
	assert_int_equal(image_tree_clear_lower(t, "opt"), 0);
	assert_non_null(image_tree_find(t, "opt/keep"));
	assert_null(image_tree_find(t, "opt/keep/new"));
	assert_null(image_tree_find(t, "opt/new"));
	assert_null(image_tree_find(t, "opt/later"));

	assert_int_equal(image_tree_clear_lower(t, "nope"), -ENOENT);
	assert_int_equal(image_tree_clear_lower(t, "other/y"), -ENOTDIR);
	/* the root can be opaque too */
	assert_int_equal(image_tree_clear_lower(t, ""), 0);
	assert_null(image_tree_find(t, "other"));
	assert_non_null(image_tree_find(t, "opt/keep"));
	image_tree_free(t);
}

/* ---- lookups ---------------------------------------------------------------- */

static void test_image__lookup_finds_every_entry(void **state)
{
	struct image_attr f = mkattr(S_IFREG | 0644, 0, 0);
	struct image_tree *t;
	struct buf out = BUF_INIT;
	struct image *img;
	char path[64], prev[64] = "";
	const char *n;
	size_t nl, prevl = 0;
	uint64_t dir, ino, ino2, i;
	enum { N = 10000 };

	assert_int_equal(image_tree_new(&t), 0);
	/* names of many lengths, sharing prefixes, inserted out of order */
	for (i = 0; i < N; i++) {
		snprintf(path, sizeof(path), "big/%llu%s", (unsigned long long)((i * 7919) % N),
		         i % 3 ? "" : ".x");
		assert_int_equal(image_tree_add(t, path, &f, NULL), 0);
	}
	write_tree(t, &out);
	assert_int_equal(image_open_mem(out.data, out.len, &img), 0);
	dir = must_lookup(img, "big");
	assert_int_equal(image_dir_size(img, dir), N);
	for (i = 0; i < N; i++) {
		assert_int_equal(image_readdir(img, dir, i, &n, &nl, &ino), 1);
		/* strictly increasing in memcmp order, shorter first */
		if (i > 0) {
			int c = memcmp(prev, n, MIN(prevl, nl));

			assert_true(c < 0 || (c == 0 && prevl < nl));
		}
		memcpy(prev, n, nl);
		prevl = nl;
		assert_int_equal(image_lookup(img, dir, n, nl, &ino2), 0);
		assert_int_equal(ino2, ino);
	}
	assert_int_equal(image_readdir(img, dir, N, &n, &nl, &ino), 0);
	for (i = 0; i < N; i++) {
		snprintf(path, sizeof(path), "/big/%llu%s", (unsigned long long)((i * 7919) % N),
		         i % 3 ? "" : ".x");
		assert_int_equal(image_lookup_path(img, path, &ino), 0);
	}
	assert_int_equal(image_lookup(img, dir, "10000", 5, &ino), -ENOENT);
	assert_int_equal(image_lookup(img, dir, "", 0, &ino), -ENOENT);
	assert_int_equal(image_lookup(img, dir, "0.", 2, &ino), -ENOENT);
	image_free(img);
	buf_free(&out);
	image_tree_free(t);
}

static void test_image__lookup_path_errors(void **state)
{
	struct image *img;
	uint64_t ino;
	size_t len;
	char longname[300];
	uint8_t *data = sample_index(&len);

	assert_int_equal(image_open_mem(data, len, &img), 0);
	assert_int_equal(image_lookup_path(img, "usr/nope", &ino), -ENOENT);
	assert_int_equal(image_lookup_path(img, "etc/passwd/x", &ino), -ENOTDIR);
	/* symlinks are not followed */
	assert_int_equal(image_lookup_path(img, "lib/x", &ino), -ENOTDIR);
	assert_int_equal(image_lookup_path(img, "usr/../etc", &ino), -EINVAL);
	assert_int_equal(image_lookup_path(img, "/./usr//bin/./ping", &ino), 0);
	assert_int_equal(image_lookup_path(img, "/", &ino), 0);
	assert_int_equal(ino, IMAGE_ROOT_INO);
	memset(longname, 'z', 256);
	longname[256] = 0;
	assert_int_equal(image_lookup_path(img, longname, &ino), -ENAMETOOLONG);
	assert_int_equal(image_lookup(img, must_lookup(img, "etc/passwd"), "x", 1, &ino),
	                 -ENOTDIR);
	assert_int_equal(image_lookup(img, 0, "x", 1, &ino), -ENOENT);
	assert_int_equal(image_lookup(img, 1000, "x", 1, &ino), -ENOENT);
	assert_int_equal(image_getattr(img, 0, &(struct image_stat){ 0 }), -ENOENT);
	assert_int_equal(image_getattr(img, 20, &(struct image_stat){ 0 }), -ENOENT);
	assert_int_equal(image_chunk(img, 2, &(struct image_chunk){ 0 }), -ERANGE);
	image_free(img);
	free(data);
}

static void test_image__open_file(void **state)
{
	char path[] = "/tmp/lazyroot-test-image-XXXXXX";
	struct image *img;
	size_t len;
	uint8_t *data = sample_index(&len);
	int fd;

	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write_full(fd, data, len), 0);
	close(fd);
	assert_int_equal(image_open_file(path, &img), 0);
	assert_int_equal(image_verify(img), 0);
	assert_int_equal(must_stat(img, "usr/bin/ping").nlink, 2);
	image_free(img);
	assert_int_equal(truncate(path, (off_t)len - 8), 0);
	assert_int_equal(image_open_file(path, &img), -EBADMSG);
	unlink(path);
	assert_int_equal(image_open_file(path, &img), -ENOENT);
	free(data);
}

/* ---- hostile input ------------------------------------------------------------ */

/*
 * Touch everything reachable, as the FUSE layer and the fuzzer would; every
 * call must return data or an error.  Returns how many calls failed, so that
 * tests can tell a clean index (0) from a corrupted one.
 */
static unsigned walk_all(const struct image *img)
{
	struct image_info info;
	struct image_stat st;
	struct image_extent e;
	struct image_chunk c;
	const char *s, *n;
	const void *v;
	size_t len, nl, vl;
	uint64_t ino, i, child, found;
	unsigned bad = 0;
	int64_t cnt;
	uint32_t x;
	int r;

	image_get_info(img, &info);
	image_config(img, &s, &len);
	if (len)
		bad += s[0] == 0 && s[len - 1] == 0;    /* read both ends */
	for (i = 0; i < info.chunks; i++)
		bad += image_chunk(img, (uint32_t)i, &c) < 0;
	for (ino = 0; ino <= info.inodes + 1; ino++) {
		if (image_getattr(img, ino, &st) < 0) {
			bad += ino >= 1 && ino <= info.inodes;
			continue;
		}
		if (S_ISLNK(st.mode))
			bad += image_readlink(img, ino, &s, &len) < 0;
		for (x = 0; (r = image_xattr(img, ino, x, &n, &nl, &v, &vl)) > 0; x++) {
			char name[256];

			memcpy(name, n, nl);
			name[nl] = 0;
			bad += image_getxattr(img, ino, name, &v, &vl) < 0;
		}
		bad += r < 0;
		if (S_ISREG(st.mode)) {
			cnt = image_extent_count(img, ino);
			bad += cnt < 0;
			for (i = 0; cnt > 0 && i < (uint64_t)cnt; i++)
				bad += image_extent(img, ino, i, &e) < 0;
			bad += image_extent_find(img, ino, st.size / 2) < 0;
		}
		if (S_ISDIR(st.mode)) {
			cnt = image_dir_size(img, ino);
			bad += cnt < 0;
			for (i = 0; (r = image_readdir(img, ino, i, &n, &nl, &child)) > 0; i++)
				bad += image_lookup(img, ino, n, nl, &found) < 0;
			bad += r < 0;
		}
	}
	bad += image_lookup_path(img, "usr/bin/ping", &ino) < 0;
	return bad;
}

static void test_image__walk_clean_index_has_no_errors(void **state)
{
	struct image *img;
	size_t len;
	uint8_t *data = sample_index(&len);

	assert_int_equal(image_open_mem(data, len, &img), 0);
	assert_int_equal(walk_all(img), 0);
	image_free(img);
	free(data);
}

static void test_image__truncated_at_every_length(void **state)
{
	struct image *img;
	size_t len, cut;
	uint8_t *data = sample_index(&len), *p;

	assert_int_equal(image_open_mem(data, 0, &img), -EBADMSG);
	for (cut = 1; cut < len; cut++) {
		p = malloc(cut);
		memcpy(p, data, cut);
		assert_true(image_open_mem(p, cut, &img) < 0);
		/* and with total_size rewritten to agree, so that the section
		 * bounds must catch it */
		if (cut >= HEADER_SIZE) {
			uint64_t t = htole64(cut);

			memcpy(p + H_TOTAL_SIZE, &t, 8);
			if (image_open_mem(p, cut, &img) == 0) {
				walk_all(img);
				image_free(img);
			}
		}
		free(p);
	}
	free(data);
}

static void test_image__header_fields_corrupted(void **state)
{
	/* every 4-byte word of the header, set to each of these */
	static const uint32_t values[] = { 0, 1, 7, 8, 0x7fffffff, 0x80000000, 0xffffffff };
	struct image *img;
	size_t len, off, v;
	uint8_t *data = sample_index(&len), *p;
	unsigned opened = 0, refused = 0;
	int r;

	for (off = 0; off < HEADER_SIZE; off += 4) {
		for (v = 0; v < ARRAY_SIZE(values) + 1; v++) {
			uint32_t w;

			p = malloc(len);
			memcpy(p, data, len);
			memcpy(&w, p + off, 4);
			w = v < ARRAY_SIZE(values) ? htole32(values[v]) : w ^ htole32(0x100);
			memcpy(p + off, &w, 4);
			r = image_open_mem(p, len, &img);
			if (r == 0) {
				opened++;
				walk_all(img);
				/* anything but the checksum itself breaks it */
				if (memcmp(p + off, data + off, 4) != 0 &&
				    !(off >= H_CHECKSUM && off < H_CHECKSUM + 8))
					assert_int_equal(image_verify(img), -EBADMSG);
				image_free(img);
			} else {
				refused++;
				/* magic, version, flags, sizes, count: never accepted */
				if (off < H_SECTIONS && off != H_CHECKSUM && off != H_CHECKSUM + 4 &&
				    off < 40)
					assert_true(r == -EBADMSG || r == -EPROTONOSUPPORT);
			}
			free(p);
		}
	}
	/* fields the reader must refuse when wrong */
	p = malloc(len);
	for (off = 0; off < 40; off += 4) {
		if (off == H_CHECKSUM || off == H_CHECKSUM + 4)
			continue;
		memcpy(p, data, len);
		p[off] ^= 0x40;
		assert_true(image_open_mem(p, len, &img) < 0);
	}
	memcpy(p, data, len);
	p[H_VERSION] = 2;
	assert_int_equal(image_open_mem(p, len, &img), -EPROTONOSUPPORT);
	memcpy(p, data, len);
	p[H_FLAGS] = 1;
	assert_int_equal(image_open_mem(p, len, &img), -EPROTONOSUPPORT);
	free(p);
	print_message("header corruption: %u opened, %u refused\n", opened, refused);
	assert_true(refused > 0);
	free(data);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void test_image__random_byte_flips(void **state)
{
	struct image *img;
	size_t len, i, k, nflip;
	uint8_t *data = sample_index(&len), *p;
	unsigned opened = 0, dirty = 0;
	enum { ROUNDS = 20000 };

	for (i = 0; i < ROUNDS; i++) {
		p = malloc(len);
		memcpy(p, data, len);
		nflip = 1 + rng() % 8;
		for (k = 0; k < nflip; k++) {
			/* most flips land past the header, where open cannot look */
			size_t at = i % 4 ? HEADER_SIZE + rng() % (len - HEADER_SIZE) : rng() % len;

			p[at] = (uint8_t)rng();
		}
		if (image_open_mem(p, len, &img) == 0) {
			opened++;
			dirty += walk_all(img) > 0;
			if (memcmp(p + 24, data + 24, len - 24) != 0)
				assert_int_equal(image_verify(img), -EBADMSG);
			image_free(img);
		}
		free(p);
	}
	print_message("byte flips: %d rounds, %u opened, %u with errors on walk\n", ROUNDS,
	              opened, dirty);
	assert_true(opened > 0);
	free(data);
}

static void test_image__verify_detects_checksum_mismatch(void **state)
{
	struct image *img;
	size_t len, at;
	uint8_t *data = sample_index(&len);

	assert_int_equal(image_open_mem(data, len, &img), 0);
	assert_int_equal(image_verify(img), 0);
	image_free(img);
	for (at = 24; at < len; at += 37) {
		data[at] ^= 0x01;
		if (image_open_mem(data, len, &img) == 0) {
			assert_int_equal(image_verify(img), -EBADMSG);
			image_free(img);
		}
		data[at] ^= 0x01;
	}
	data[H_CHECKSUM] ^= 0x80;
	assert_int_equal(image_open_mem(data, len, &img), 0);
	assert_int_equal(image_verify(img), -EBADMSG);
	image_free(img);
	free(data);
}

/* ---- scale ----------------------------------------------------------------------- */

static void test_image__million_entries_open_and_lookup_fast(void **state)
{
	struct image_attr f = mkattr(S_IFREG | 0644, 1000, 1000);
	struct image_attr d = mkattr(S_IFDIR | 0755, 0, 0);
	struct image_tree *t;
	struct image_inode *ino;
	struct buf out = BUF_INIT;
	struct image *img;
	struct image_stat st;
	struct image_info info;
	char path[64], file[] = "/tmp/lazyroot-test-image-1m-XXXXXX";
	size_t idx_len;
	uint64_t t0, t_build, t_write, t_open, t_lookup, t_file, i, found;
	uint32_t chunk = 0;
	uint8_t *copy;
	int fd;
	enum { DIRS = 1000, FILES = 999 };     /* 1,000 + 999,000 entries */

	t0 = now_ns();
	assert_int_equal(image_tree_new(&t), 0);
	for (i = 0; i < (uint64_t)DIRS * FILES; i++) {
		if (i % 64 == 0) {
			int64_t c = image_tree_new_chunk(t);

			assert_true(c >= 0);
			chunk = (uint32_t)c;
			set_chunk(t, chunk, (uint8_t)i, 64 * 4096);
		}
		if (i % FILES == 0) {
			snprintf(path, sizeof(path), "usr/lib/pkg%05llu", (unsigned long long)(i / FILES));
			assert_int_equal(image_tree_add(t, path, &d, NULL), 0);
		}
		snprintf(path, sizeof(path), "usr/lib/pkg%05llu/file-%llu.py",
		         (unsigned long long)(i / FILES), (unsigned long long)i);
		assert_int_equal(image_tree_add(t, path, &f, &ino), 0);
		image_inode_set_size(ino, 4096);
		assert_int_equal(image_inode_add_extent(ino, 0, chunk, (uint32_t)(i % 64) * 4096,
		                                        4096), 0);
	}
	t_build = now_ns() - t0;
	t0 = now_ns();
	write_tree(t, &out);
	t_write = now_ns() - t0;
	image_tree_free(t);

	/* mapped from a file: the pages a lookup touches fault in on demand */
	fd = mkstemp(file);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(write_file_atomic(file, out.data, out.len, 0600), 0);
	t0 = now_ns();
	assert_int_equal(image_open_file(file, &img), 0);
	assert_int_equal(image_lookup_path(img, "usr/lib/pkg00999/file-998001.py", &found), 0);
	t_file = now_ns() - t0;
	image_free(img);
	unlink(file);

	/* and from memory */
	idx_len = out.len;
	copy = malloc(idx_len);
	assert_non_null(copy);
	memcpy(copy, out.data, idx_len);
	buf_free(&out);
	t0 = now_ns();
	assert_int_equal(image_open_mem(copy, idx_len, &img), 0);
	t_open = now_ns() - t0;
	t0 = now_ns();
	assert_int_equal(image_lookup_path(img, "usr/lib/pkg00567/file-566999.py", &found), 0);
	assert_int_equal(image_getattr(img, found, &st), 0);
	t_lookup = now_ns() - t0;
	assert_int_equal(st.size, 4096);
	assert_int_equal(st.uid, 1000);

	image_get_info(img, &info);
	print_message("1M entries: build %.0f ms, write %.0f ms, open %.1f us, lookup %.1f us, "
	              "open_file+lookup %.1f us, %llu bytes (%.1f per entry)\n",
	              t_build / 1e6, t_write / 1e6, t_open / 1e3, t_lookup / 1e3, t_file / 1e3,
	              (unsigned long long)idx_len, (double)idx_len / (double)info.entries);
	assert_int_equal(info.entries, DIRS * FILES + DIRS + 2);
	assert_true(t_open + t_lookup < 50 * 1000 * 1000ull);
	assert_true(t_file < 50 * 1000 * 1000ull);
	image_free(img);
	free(copy);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_image__round_trip_every_entry_type),
		cmocka_unit_test(test_image__pack_offsets_are_stored_size_prefix_sums),
		cmocka_unit_test(test_image__hardlinks_share_inode_and_nlink),
		cmocka_unit_test(test_image__hardlink_survives_replace_and_remove),
		cmocka_unit_test(test_image__dir_nlink_counts_subdirs),
		cmocka_unit_test(test_image__extents_and_holes),
		cmocka_unit_test(test_image__xattrs_binary_values),
		cmocka_unit_test(test_image__config_and_info),
		cmocka_unit_test(test_image__golden_index_hash),
		cmocka_unit_test(test_image__write_is_deterministic),
		cmocka_unit_test(test_image__writer_refuses_bad_chunks),
		cmocka_unit_test(test_image__extent_rules),
		cmocka_unit_test(test_image__path_normalize_accepts_tar_names),
		cmocka_unit_test(test_image__path_normalize_refuses_escapes),
		cmocka_unit_test(test_image__path_normalize_limits),
		cmocka_unit_test(test_image__path_normalize_exhaustive_small),
		cmocka_unit_test(test_image__tree_refuses_unnormalised_paths),
		cmocka_unit_test(test_image__tree_add_replaces_and_updates),
		cmocka_unit_test(test_image__whiteout_remove),
		cmocka_unit_test(test_image__clear_lower_keeps_current_layer),
		cmocka_unit_test(test_image__lookup_finds_every_entry),
		cmocka_unit_test(test_image__lookup_path_errors),
		cmocka_unit_test(test_image__open_file),
		cmocka_unit_test(test_image__walk_clean_index_has_no_errors),
		cmocka_unit_test(test_image__truncated_at_every_length),
		cmocka_unit_test(test_image__header_fields_corrupted),
		cmocka_unit_test(test_image__random_byte_flips),
		cmocka_unit_test(test_image__verify_detects_checksum_mismatch),
		cmocka_unit_test(test_image__million_entries_open_and_lookup_fast),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
