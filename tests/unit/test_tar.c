/*
 * test_tar.c — the archive sources end to end: small archives written here
 * byte by byte (ustar, pax, GNU long names, sparse files in four encodings,
 * base-256 numbers, gzip, zstd), OCI layouts and docker archives, built into
 * a dir: store, and checked through the published index, file contents
 * included.  Every refused input is checked for its error and for the one
 * line that names it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <zlib.h>
#include <zstd.h>

#include "chunker/chunker.h"
#include "image/image.h"
#include "lib/lib.h"
#include "lib/sha256.h"
#include "store/store.h"

/* ---- a tiny tar writer --------------------------------------------------------- */

static void octal(uint8_t *f, size_t len, uint64_t v)
{
	snprintf((char *)f, len, "%0*llo", (int)len - 1, (unsigned long long)v);
}

/* GNU base-256: 0x80 then the value big-endian (negative: two's complement). */
static void base256(uint8_t *f, size_t len, int64_t v)
{
	size_t i;

	for (i = len; i-- > 0;) {
		f[i] = (uint8_t)v;
		v >>= 8;
	}
	f[0] = (f[0] & 0x7f) | 0x80;
	if (v < 0 || (int8_t)f[1] < 0)
		f[0] = 0xff;
}

static void h_init(uint8_t *h, const char *name, char type, unsigned mode, uint64_t size)
{
	memset(h, 0, 512);
	strncpy((char *)h, name, 100);
	octal(h + 100, 8, mode);
	octal(h + 108, 8, 1000);
	octal(h + 116, 8, 1000);
	octal(h + 124, 12, size);
	octal(h + 136, 12, 1700000000);
	h[156] = (uint8_t)type;
	memcpy(h + 257, "ustar\0" "00", 8);
}

static void h_put(struct buf *o, uint8_t *h)
{
	unsigned sum = 0, i;

	memset(h + 148, ' ', 8);
	for (i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	assert_int_equal(buf_append(o, h, 512), 0);
}

static void put_data(struct buf *o, const void *d, size_t n)
{
	assert_int_equal(buf_append(o, d, n), 0);
	assert_int_equal(buf_append_zero(o, (512 - n % 512) % 512), 0);
}

static void put_entry(struct buf *o, const char *name, char type, unsigned mode,
                      const char *link)
{
	uint8_t h[512];

	h_init(h, name, type, mode, 0);
	if (link)
		strncpy((char *)h + 157, link, 100);
	h_put(o, h);
}

static void put_file(struct buf *o, const char *name, const void *data, size_t len)
{
	uint8_t h[512];

	h_init(h, name, '0', 0644, len);
	h_put(o, h);
	put_data(o, data, len);
}

static void pax_rec(struct buf *r, const char *key, const void *val, size_t vlen)
{
	size_t base = strlen(key) + vlen + 3, n = base + 1;
	char num[24];

	while ((size_t)snprintf(num, sizeof(num), "%zu", n) + base != n)
		n++;
	assert_int_equal(buf_printf(r, "%s %s=", num, key), 0);
	assert_int_equal(buf_append(r, val, vlen), 0);
	assert_int_equal(buf_append(r, "\n", 1), 0);
}

static void put_ext(struct buf *o, char type, const struct buf *recs)
{
	uint8_t h[512];

	h_init(h, "././@PaxHeader", type, 0644, recs->len);
	h_put(o, h);
	put_data(o, recs->data, recs->len);
}

static void put_end(struct buf *o)
{
	assert_int_equal(buf_append_zero(o, 1024), 0);
}

static void gzip_buf(const struct buf *in, struct buf *out)
{
	z_stream z;

	memset(&z, 0, sizeof(z));
	assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
	assert_int_equal(buf_reserve(out, deflateBound(&z, in->len)), 0);
	z.next_in = in->data;
	z.avail_in = (uInt)in->len;
	z.next_out = out->data + out->len;
	z.avail_out = (uInt)(out->cap - out->len - 1);
	assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
	out->len += z.total_out;
	deflateEnd(&z);
}

static void zstd_buf(const struct buf *in, struct buf *out)
{
	size_t n;

	assert_int_equal(buf_reserve(out, ZSTD_compressBound(in->len)), 0);
	n = ZSTD_compress(out->data + out->len, ZSTD_compressBound(in->len), in->data, in->len, 3);
	assert_false(ZSTD_isError(n));
	out->len += n;
}

/* ---- the build fixture -------------------------------------------------------- */

static char root[64];
static struct store *st;
static struct build *bld;
static struct buf idx;
static struct image *img;
static char errors[4096];

static int setup_each(void **state)
{
	struct build_params p;
	char url[96];

	strcpy(root, "/tmp/lazyroot-test-tar.XXXXXX");
	if (!mkdtemp(root))
		return -1;
	snprintf(url, sizeof(url), "dir:%s/store", root);
	if (store_create(url, NULL, &st) < 0)
		return -1;
	build_params_default(&p);
	p.threads = 1;
	memset(&idx, 0, sizeof(idx));
	img = NULL;
	errors[0] = 0;
	return build_new(&p, st, &bld);
}

static int teardown_each(void **state)
{
	char cmd[128];

	image_free(img);
	buf_free(&idx);
	build_free(bld);
	store_free(st);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : -1;
}

static int mem_fd(const void *data, size_t len)
{
	int fd = memfd_create("tar", MFD_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(write_full(fd, data, len), 0);
	assert_true(lseek(fd, 0, SEEK_SET) == 0);
	return fd;
}

/* Run f with stderr captured into errors[]. */
static int saved_err = -1, cap_fd = -1;

static void capture_begin(void)
{
	fflush(stderr);
	cap_fd = memfd_create("stderr", MFD_CLOEXEC);
	saved_err = dup(2);
	dup2(cap_fd, 2);
}

static void capture_end(void)
{
	ssize_t n;

	fflush(stderr);
	dup2(saved_err, 2);
	close(saved_err);
	n = pread(cap_fd, errors, sizeof(errors) - 1, 0);
	errors[n > 0 ? n : 0] = 0;
	close(cap_fd);
}

static int run_tar(const struct buf *tar, bool whiteouts)
{
	int fd = mem_fd(tar->data, tar->len), r;

	capture_begin();
	r = source_tar_fd(bld, fd, "test.tar", whiteouts);
	capture_end();
	if (getenv("TEST_VERBOSE"))
		fputs(errors, stdout);
	close(fd);
	return r;
}

static void finish(void)
{
	struct build_summary sum;

	int r = build_finish(bld, NULL, &sum);

	if (r < 0)
		fail_msg("build_finish: %s", strerror(-r));
	assert_int_equal(store_get_index(st, sum.index, &idx), 0);
	assert_int_equal(image_open_mem(idx.data, idx.len, &img), 0);
	assert_int_equal(image_verify(img), 0);
}

static uint64_t ino_of(const char *path)
{
	uint64_t ino = 0;

	return image_lookup_path(img, path, &ino) == 0 ? ino : 0;
}

static void stat_of(const char *path, struct image_stat *s)
{
	uint64_t ino = ino_of(path);

	if (!ino)
		fail_msg("'%s' missing from the image", path);
	assert_int_equal(image_getattr(img, ino, s), 0);
}

/* The file's bytes through its extents and the store. */
static void contents(const char *path, struct buf *out)
{
	struct image_stat s;
	int64_t n, i;

	stat_of(path, &s);
	out->len = 0;
	assert_int_equal(buf_append_zero(out, s.size), 0);
	n = image_extent_count(img, s.ino);
	assert_true(n >= 0);
	for (i = 0; i < n; i++) {
		struct image_extent e;
		struct image_chunk c;
		struct buf raw = BUF_INIT;
		char hex[33], key[48];
		uint8_t *plain;

		assert_int_equal(image_extent(img, s.ino, (uint64_t)i, &e), 0);
		assert_int_equal(image_chunk(img, e.chunk, &c), 0);
		hex_encode(c.name, 16, hex);
		snprintf(key, sizeof(key), "chunks/%s", hex);
		assert_int_equal(store_get_sync(st, key, &raw), 0);
		plain = malloc(c.size);
		if (c.flags & IMAGE_CHUNK_ZSTD)
			assert_int_equal(ZSTD_decompress(plain, c.size, raw.data, raw.len), c.size);
		else
			memcpy(plain, raw.data, c.size);
		assert_true(e.file_off + e.len <= s.size);
		memcpy(out->data + e.file_off, plain + e.chunk_off, e.len);
		free(plain);
		buf_free(&raw);
	}
}

static void assert_contents(const char *path, const void *want, size_t len)
{
	struct buf got = BUF_INIT;

	contents(path, &got);
	assert_int_equal(got.len, len);
	assert_memory_equal(got.data, want, len);
	buf_free(&got);
}

static void assert_error(const char *needle)
{
	if (!strstr(errors, needle))
		fail_msg("expected an error containing \"%s\", got \"%s\"", needle, errors);
	assert_non_null(strchr(errors, '\n'));
	assert_null(strchr(strchr(errors, '\n') + 1, '\n'));  /* one line */
}

/* ---- ustar, pax, GNU ---------------------------------------------------------- */

static void test_tar__ustar_members(void **state)
{
	struct buf t = BUF_INIT;
	struct image_stat s;
	uint8_t h[512];
	const char *target;
	size_t len;

	put_entry(&t, "./", '5', 0755, NULL);
	put_entry(&t, "./etc/", '5', 0750, NULL);
	put_file(&t, "./etc/hosts", "127.0.0.1 localhost\n", 20);
	put_entry(&t, "./etc/hosts.link", '1', 0, "./etc/hosts");
	put_entry(&t, "./etc/sym", '2', 0777, "hosts");
	put_entry(&t, "./fifo", '6', 0600, NULL);
	h_init(h, "./dev/null", '3', 0666, 0);
	octal(h + 329, 8, 1);
	octal(h + 337, 8, 3);
	h_put(&t, h);
	put_entry(&t, "./bin/", '5', 0755, NULL);
	h_init(h, "bin/abs", '7', 04755, 3);  /* contiguous file */
	h_put(&t, h);
	put_data(&t, "abc", 3);
	put_end(&t);

	assert_int_equal(run_tar(&t, false), 0);
	finish();
	stat_of("etc", &s);
	assert_int_equal(s.mode, S_IFDIR | 0750);
	assert_int_equal(s.uid, 1000);
	assert_int_equal(s.mtime_sec, 1700000000);
	stat_of("etc/hosts", &s);
	assert_int_equal(s.mode, S_IFREG | 0644);
	assert_int_equal(s.nlink, 2);
	assert_int_equal(ino_of("etc/hosts"), ino_of("etc/hosts.link"));
	assert_contents("etc/hosts", "127.0.0.1 localhost\n", 20);
	stat_of("etc/sym", &s);
	assert_int_equal(s.mode & S_IFMT, S_IFLNK);
	assert_int_equal(image_readlink(img, s.ino, &target, &len), 0);
	assert_int_equal(len, 5);
	assert_memory_equal(target, "hosts", 5);
	stat_of("fifo", &s);
	assert_int_equal(s.mode, S_IFIFO | 0600);
	stat_of("dev/null", &s);
	assert_int_equal(s.mode, S_IFCHR | 0666);
	assert_true(s.rdev == makedev(1, 3));
	stat_of("bin/abs", &s);
	assert_int_equal(s.mode, S_IFREG | 04755);
	assert_contents("bin/abs", "abc", 3);
	buf_free(&t);
}

static void test_tar__pax_headers(void **state)
{
	struct buf t = BUF_INIT, r = BUF_INIT, g = BUF_INIT;
	static const uint8_t cap[20] = { 0x01, 0x00, 0x00, 0x02, 0x00, 0x20, 0x00, 0x00 };
	char longname[300];
	const void *v;
	size_t vlen;
	struct image_stat s;
	const char *target;
	size_t len;

	pax_rec(&g, "uid", "4242", 4);
	put_ext(&t, 'g', &g);

	memset(longname, 0, sizeof(longname));
	memcpy(longname, "usr/", 4);
	memset(longname + 4, 'd', 200);
	memcpy(longname + 204, "/file", 5);
	pax_rec(&r, "path", longname, strlen(longname));
	pax_rec(&r, "mtime", "1700000000.123456789", 20);
	pax_rec(&r, "gid", "3000000000", 10);
	pax_rec(&r, "SCHILY.xattr.security.capability", cap, sizeof(cap));
	pax_rec(&r, "LIBARCHIVE.xattr.user.a%3Db", "aGVsbG8", 7);  /* "hello", unpadded */
	pax_rec(&r, "uname", "root", 4);
	pax_rec(&r, "atime", "1.5", 3);
	put_ext(&t, 'x', &r);
	put_file(&t, "short-name-ignored", "data", 4);

	r.len = 0;
	pax_rec(&r, "linkpath", longname, strlen(longname));
	pax_rec(&r, "mtime", "-1.25", 5);
	put_ext(&t, 'x', &r);
	put_entry(&t, "link", '2', 0777, "ignored");
	put_end(&t);

	assert_int_equal(run_tar(&t, false), 0);
	finish();
	stat_of(longname, &s);
	assert_int_equal(s.uid, 4242);
	assert_true(s.gid == 3000000000u);
	assert_int_equal(s.mtime_sec, 1700000000);
	assert_int_equal(s.mtime_nsec, 123456789);
	assert_contents(longname, "data", 4);
	assert_int_equal(image_getxattr(img, s.ino, "security.capability", &v, &vlen), 0);
	assert_int_equal(vlen, sizeof(cap));
	assert_memory_equal(v, cap, sizeof(cap));
	assert_int_equal(image_getxattr(img, s.ino, "user.a=b", &v, &vlen), 0);
	assert_int_equal(vlen, 5);
	assert_memory_equal(v, "hello", 5);
	stat_of("link", &s);
	assert_int_equal(s.mtime_sec, -2);
	assert_int_equal(s.mtime_nsec, 750000000);
	assert_int_equal(s.uid, 4242);  /* global header still applies */
	assert_int_equal(image_readlink(img, s.ino, &target, &len), 0);
	assert_int_equal(len, strlen(longname));
	buf_free(&t);
	buf_free(&r);
	buf_free(&g);
}

static void test_tar__gnu_long_names_and_base256(void **state)
{
	struct buf t = BUF_INIT;
	char longname[200], longlink[200];
	uint8_t h[512];
	struct image_stat s;
	const char *target;
	size_t len;

	memset(longname, 'n', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	memset(longlink, 'l', sizeof(longlink) - 1);
	longlink[sizeof(longlink) - 1] = 0;

	h_init(h, "././@LongLink", 'L', 0, sizeof(longname));
	memcpy(h + 257, "ustar  \0", 8);
	h_put(&t, h);
	put_data(&t, longname, sizeof(longname));
	h_init(h, "././@LongLink", 'K', 0, sizeof(longlink));
	memcpy(h + 257, "ustar  \0", 8);
	h_put(&t, h);
	put_data(&t, longlink, sizeof(longlink));
	h_init(h, "truncated", '2', 0777, 0);
	memcpy(h + 257, "ustar  \0", 8);
	h_put(&t, h);

	h_init(h, "big", '0', 0600, 0);
	memcpy(h + 257, "ustar  \0", 8);
	base256(h + 124, 12, 5);                   /* size */
	base256(h + 108, 8, 3000000000ll);         /* uid past octal's 8 digits */
	base256(h + 136, 12, -86400);              /* mtime before 1970 */
	h_put(&t, h);
	put_data(&t, "12345", 5);
	put_end(&t);

	assert_int_equal(run_tar(&t, false), 0);
	finish();
	stat_of(longname, &s);
	assert_int_equal(image_readlink(img, s.ino, &target, &len), 0);
	assert_int_equal(len, strlen(longlink));
	assert_memory_equal(target, longlink, len);
	stat_of("big", &s);
	assert_true(s.uid == 3000000000u);
	assert_int_equal(s.mtime_sec, -86400);
	assert_contents("big", "12345", 5);
	buf_free(&t);
}

/* ---- sparse files -------------------------------------------------------------- */

/* The logical file: 'A' x 1000 at 4096, 'B' x 10 at 1 MiB, size 1 MiB + 8192. */
#define SPARSE_SIZE (1048576 + 8192)

static void sparse_expect(struct buf *want, struct buf *stored)
{
	assert_int_equal(buf_append_zero(want, SPARSE_SIZE), 0);
	memset(want->data + 4096, 'A', 1000);
	memset(want->data + 1048576, 'B', 10);
	memset(stored->data = malloc(1010), 'A', 1000);
	memset(stored->data + 1000, 'B', 10);
	stored->len = 1010;
}

static void check_sparse(const char *path, const struct buf *want)
{
	struct image_stat s;

	stat_of(path, &s);
	assert_int_equal(s.size, SPARSE_SIZE);
	assert_true(s.blocks * 512 < 64 * 1024);  /* the holes stay holes */
	assert_contents(path, want->data, want->len);
}

static void test_tar__sparse_formats(void **state)
{
	struct buf t = BUF_INIT, r = BUF_INIT, want = BUF_INIT, data = BUF_INIT, map = BUF_INIT;
	uint8_t h[512];
	char size[32];

	sparse_expect(&want, &data);
	snprintf(size, sizeof(size), "%d", SPARSE_SIZE);

	/* pax 0.0: offset/numbytes pairs */
	pax_rec(&r, "GNU.sparse.size", size, strlen(size));
	pax_rec(&r, "GNU.sparse.numblocks", "2", 1);
	pax_rec(&r, "GNU.sparse.offset", "4096", 4);
	pax_rec(&r, "GNU.sparse.numbytes", "1000", 4);
	pax_rec(&r, "GNU.sparse.offset", "1048576", 7);
	pax_rec(&r, "GNU.sparse.numbytes", "10", 2);
	put_ext(&t, 'x', &r);
	put_file(&t, "s00", data.data, data.len);

	/* pax 0.1: one map */
	r.len = 0;
	pax_rec(&r, "GNU.sparse.size", size, strlen(size));
	pax_rec(&r, "GNU.sparse.numblocks", "2", 1);
	pax_rec(&r, "GNU.sparse.map", "4096,1000,1048576,10", 20);
	put_ext(&t, 'x', &r);
	put_file(&t, "s01", data.data, data.len);

	/* pax 1.0: the map at the start of the data */
	r.len = 0;
	pax_rec(&r, "GNU.sparse.major", "1", 1);
	pax_rec(&r, "GNU.sparse.minor", "0", 1);
	pax_rec(&r, "GNU.sparse.name", "s10", 3);
	pax_rec(&r, "GNU.sparse.realsize", size, strlen(size));
	put_ext(&t, 'x', &r);
	assert_int_equal(buf_printf(&map, "3\n4096\n1000\n1048576\n10\n%d\n0\n", SPARSE_SIZE), 0);
	assert_int_equal(buf_append_zero(&map, 512 - map.len), 0);
	assert_int_equal(buf_append(&map, data.data, data.len), 0);
	put_file(&t, "GNUSparseFile.0/s10", map.data, map.len);

	/* old GNU 'S': one entry in the header, one in an extension block */
	h_init(h, "sold", 'S', 0644, data.len);
	memcpy(h + 257, "ustar  \0", 8);
	octal(h + 386, 12, 4096);
	octal(h + 398, 12, 1000);
	h[482] = 1;
	octal(h + 483, 12, SPARSE_SIZE);
	h_put(&t, h);
	memset(h, 0, sizeof(h));
	octal(h, 12, 1048576);
	octal(h + 12, 12, 10);
	assert_int_equal(buf_append(&t, h, 512), 0);
	put_data(&t, data.data, data.len);
	put_end(&t);

	assert_int_equal(run_tar(&t, false), 0);
	finish();
	check_sparse("s00", &want);
	check_sparse("s01", &want);
	check_sparse("s10", &want);
	check_sparse("sold", &want);
	assert_int_equal(ino_of("GNUSparseFile.0/s10"), 0);
	buf_free(&t);
	buf_free(&r);
	buf_free(&want);
	buf_free(&data);
	buf_free(&map);
}

static void test_tar__sparse_map_must_match_data(void **state)
{
	struct buf t = BUF_INIT, r = BUF_INIT;

	pax_rec(&r, "GNU.sparse.size", "100", 3);
	pax_rec(&r, "GNU.sparse.map", "0,10,5,10", 9);  /* overlapping */
	put_ext(&t, 'x', &r);
	put_file(&t, "bad", "0123456789abcdefghij", 20);
	put_end(&t);
	assert_true(run_tar(&t, false) < 0);
	assert_error("test.tar: member 'bad': bad sparse map");
	buf_free(&t);
	buf_free(&r);
}

/* ---- compression --------------------------------------------------------------- */

static void make_small(struct buf *t, const char *dir)
{
	uint8_t big[300000];
	char name[64];
	size_t i;

	for (i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 7 + i / 1000);
	snprintf(name, sizeof(name), "%s/", dir);
	put_entry(t, name, '5', 0755, NULL);
	snprintf(name, sizeof(name), "%s/f", dir);
	put_file(t, name, "hello", 5);
	snprintf(name, sizeof(name), "%s/big", dir);
	put_file(t, name, big, sizeof(big));
	put_end(t);
}

static void test_tar__gzip_multi_member_and_zstd(void **state)
{
	struct buf a = BUF_INIT, b = BUF_INIT, gz = BUF_INIT, zs = BUF_INIT;
	size_t half;

	make_small(&a, "d");
	half = 1024;  /* split the tar across two gzip members */
	b.data = a.data;
	b.len = half;
	gzip_buf(&b, &gz);
	b.data = a.data + half;
	b.len = a.len - half;
	gzip_buf(&b, &gz);
	assert_int_equal(run_tar(&gz, false), 0);
	a.len = 0;
	make_small(&a, "z");
	zstd_buf(&a, &zs);
	assert_int_equal(run_tar(&zs, false), 0);
	finish();
	assert_contents("d/f", "hello", 5);
	assert_contents("z/f", "hello", 5);
	buf_free(&a);
	buf_free(&gz);
	buf_free(&zs);
}

static void test_tar__truncated_gzip(void **state)
{
	struct buf a = BUF_INIT, gz = BUF_INIT;

	make_small(&a, "d");
	gzip_buf(&a, &gz);
	gz.len -= 20;
	assert_true(run_tar(&gz, false) < 0);
	assert_error("test.tar: truncated gzip stream");
	buf_free(&a);
	buf_free(&gz);
}

static void test_tar__corrupt_gzip(void **state)
{
	struct buf a = BUF_INIT, gz = BUF_INIT;

	make_small(&a, "d");
	gzip_buf(&a, &gz);
	gz.data[gz.len - 6] ^= 0xff;  /* the CRC */
	assert_true(run_tar(&gz, false) < 0);
	assert_error("test.tar: corrupt gzip stream");
	buf_free(&a);
	buf_free(&gz);
}

static void test_tar__truncated_zstd(void **state)
{
	struct buf a = BUF_INIT, zs = BUF_INIT;

	make_small(&a, "d");
	zstd_buf(&a, &zs);
	zs.len -= 10;
	assert_true(run_tar(&zs, false) < 0);
	assert_error("test.tar: ");
	assert_non_null(strstr(errors, "zstd"));
	buf_free(&a);
	buf_free(&zs);
}

/* ---- refused archives ----------------------------------------------------------- */

static void refused(const char *name, char type, const char *link, const char *msg)
{
	struct buf t = BUF_INIT;

	put_file(&t, "ok", "x", 1);
	put_entry(&t, name, type, 0644, link);
	put_end(&t);
	assert_true(run_tar(&t, false) < 0);
	assert_error(msg);
	buf_free(&t);
}

static void test_tar__escaping_names(void **state)
{
	refused("../evil", '0', NULL, "test.tar: member '../evil': name '../evil' leaves the");
	errors[0] = 0;
	refused("a/../../evil", '5', NULL, "member 'a/../../evil'");
	errors[0] = 0;
	refused("/../evil", '0', NULL, "member '/../evil'");
	errors[0] = 0;
	refused("hl", '1', "../../etc/shadow", "member 'hl': name '../../etc/shadow' leaves");
	errors[0] = 0;
	refused("/etc/evil", '0', NULL, "test.tar: member '/etc/evil': absolute name '/etc/evil'");
	errors[0] = 0;
	refused("hl2", '1', "/etc/shadow", "member 'hl2': absolute name '/etc/shadow'");
}

static void test_tar__hard_link_to_missing(void **state)
{
	refused("link", '1', "nowhere", "test.tar: member 'link': hard link to missing 'nowhere'");
}

static void test_tar__unknown_type(void **state)
{
	refused("odd", 'X', NULL, "test.tar: member 'odd': unknown member type 'X'");
}

static void test_tar__bad_checksum(void **state)
{
	struct buf t = BUF_INIT;

	put_file(&t, "a", "x", 1);
	put_file(&t, "b", "y", 1);
	put_end(&t);
	t.data[1024 + 1] ^= 1;  /* the second header's name */
	assert_true(run_tar(&t, false) < 0);
	assert_error("test.tar: bad tar header checksum at offset 1024");
	buf_free(&t);
}

static void test_tar__truncated_member(void **state)
{
	struct buf t = BUF_INIT;
	uint8_t data[2000];

	memset(data, 'z', sizeof(data));
	put_file(&t, "a", data, sizeof(data));
	t.len = 512 + 1000;
	assert_true(run_tar(&t, false) < 0);
	assert_error("test.tar: member 'a': truncated archive");
	buf_free(&t);
}

static void test_tar__missing_end_marker(void **state)
{
	struct buf t = BUF_INIT;

	/* A stream cut at a member boundary is a cut download, not an image. */
	put_file(&t, "a", "x", 1);
	assert_true(run_tar(&t, false) < 0);
	assert_error("test.tar: truncated archive: ends at offset 1024 without its "
	             "end-of-archive marker");
	buf_free(&t);
}

static void test_tar__not_a_tar(void **state)
{
	struct buf t = BUF_INIT;

	assert_true(run_tar(&t, false) < 0);
	assert_error("test.tar: empty file, not a tar archive");
	errors[0] = 0;
	buf_append(&t, "hello world\n", 12);
	assert_true(run_tar(&t, false) < 0);
	assert_error("test.tar: not a tar archive (shorter than one header)");
	errors[0] = 0;
	for (int i = 0; i < 100; i++)
		buf_append(&t, "some text that is not a tar header ", 35);
	assert_true(run_tar(&t, false) < 0);
	assert_error("test.tar: not a tar archive (no valid header at its start)");
	buf_free(&t);
}

static void test_tar__empty_symlink_refused(void **state)
{
	refused("s", '2', "", "member 's': empty symlink target");
}

/* ---- whiteouts ------------------------------------------------------------------ */

static void layer0(struct buf *t)
{
	put_entry(t, "d/", '5', 0755, NULL);
	put_file(t, "d/a", "a", 1);
	put_file(t, "d/b", "b", 1);
	put_file(t, "x", "x", 1);
	put_file(t, "y", "y", 1);
	put_end(t);
}

static void layer1(struct buf *t)
{
	put_entry(t, "d/", '5', 0755, NULL);
	put_file(t, "d/.wh..wh..opq", "", 0);
	put_file(t, "d/c", "c", 1);
	put_file(t, ".wh.x", "", 0);
	put_file(t, ".wh.missing", "", 0);
	put_file(t, ".wh..wh.plnk", "", 0);
	put_end(t);
}

static void test_tar__whiteouts_across_layers(void **state)
{
	struct buf l0 = BUF_INIT, l1 = BUF_INIT;

	layer0(&l0);
	layer1(&l1);
	image_tree_set_layer(build_tree(bld), 0);
	assert_int_equal(run_tar(&l0, true), 0);
	image_tree_set_layer(build_tree(bld), 1);
	assert_int_equal(run_tar(&l1, true), 0);
	finish();
	assert_int_equal(ino_of("x"), 0);
	assert_true(ino_of("y") != 0);
	assert_int_equal(ino_of("d/a"), 0);
	assert_int_equal(ino_of("d/b"), 0);
	assert_contents("d/c", "c", 1);
	assert_int_equal(ino_of("d/.wh..wh..opq"), 0);
	assert_int_equal(image_dir_size(img, ino_of("d")), 1);
	buf_free(&l0);
	buf_free(&l1);
}

static void test_tar__whiteouts_off_are_files(void **state)
{
	struct buf l1 = BUF_INIT;

	layer1(&l1);
	assert_int_equal(run_tar(&l1, false), 0);
	finish();
	assert_true(ino_of(".wh.x") != 0);
	assert_true(ino_of("d/.wh..wh..opq") != 0);
	buf_free(&l1);
}

static void test_tar__whiteout_dotdot_refused(void **state)
{
	struct buf t = BUF_INIT;

	put_file(&t, "d/.wh...", "", 0);
	put_end(&t);
	assert_true(run_tar(&t, true) < 0);
	assert_error("member 'd/.wh...': invalid whiteout");
	buf_free(&t);
}

/* ---- OCI layouts ------------------------------------------------------------------ */

static void write_at(const char *rel, const void *data, size_t len)
{
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	assert_int_equal(mkdir_p(path, 0755) < 0 ? -1 : 0, 0);
	rmdir(path);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write_full(fd, data, len), 0);
	close(fd);
}

/* Store data as a blob under prefix (an OCI layout's directory); the
 * descriptor JSON goes to desc. */
static void put_blob(const char *prefix, const char *mt, const void *data, size_t len,
                     char *desc, size_t desclen)
{
	uint8_t d[32];
	char hex[65], rel[200];

	sha256(data, len, d);
	hex_encode(d, 32, hex);
	snprintf(rel, sizeof(rel), "%s/blobs/sha256/%s", prefix, hex);
	write_at(rel, data, len);
	snprintf(desc, desclen, "{\"mediaType\":\"%s\",\"digest\":\"sha256:%s\",\"size\":%zu}", mt,
	         hex, len);
}

#define MT_LAYER_GZ "application/vnd.oci.image.layer.v1.tar+gzip"
#define MT_LAYER "application/vnd.oci.image.layer.v1.tar"

/* An OCI layout at root/prefix with one image of two layers; returns the
 * manifest descriptor in mdesc. */
static void make_image(const char *prefix, const char *config, char *mdesc, size_t mlen)
{
	struct buf l0 = BUF_INIT, l1 = BUF_INIT, gz = BUF_INIT, m = BUF_INIT;
	char d0[256], d1[256], dc[256];

	layer0(&l0);
	layer1(&l1);
	gzip_buf(&l0, &gz);
	put_blob(prefix, MT_LAYER_GZ, gz.data, gz.len, d0, sizeof(d0));
	put_blob(prefix, MT_LAYER, l1.data, l1.len, d1, sizeof(d1));
	put_blob(prefix, "application/vnd.oci.image.config.v1+json", config, strlen(config), dc,
	         sizeof(dc));
	assert_int_equal(buf_printf(&m, "{\"schemaVersion\":2,\"mediaType\":"
	                            "\"application/vnd.oci.image.manifest.v1+json\",\"config\":%s,"
	                            "\"layers\":[%s,%s]}", dc, d0, d1), 0);
	put_blob(prefix, "application/vnd.oci.image.manifest.v1+json", m.data, m.len, mdesc, mlen);
	buf_free(&l0);
	buf_free(&l1);
	buf_free(&gz);
	buf_free(&m);
}

static void write_index(const char *prefix, const char *manifests)
{
	char rel[128], doc[2048];

	snprintf(rel, sizeof(rel), "%s/oci-layout", prefix);
	write_at(rel, "{\"imageLayoutVersion\":\"1.0.0\"}", 30);
	snprintf(rel, sizeof(rel), "%s/index.json", prefix);
	snprintf(doc, sizeof(doc), "{\"schemaVersion\":2,\"manifests\":[%s]}", manifests);
	write_at(rel, doc, strlen(doc));
}

static int run_oci(const char *prefix, const char *platform)
{
	char dir[128];
	int r;

	snprintf(dir, sizeof(dir), "%s/%s", root, prefix);
	capture_begin();
	r = source_add(bld, dir, platform);
	capture_end();
	return r;
}

static const char config[] = "{\"architecture\":\"amd64\",\"os\":\"linux\",\"rootfs\":{}}";

static void test_oci__layout_with_whiteouts(void **state)
{
	char md[300];
	const char *cfg;
	size_t len;

	make_image("oci", config, md, sizeof(md));
	write_index("oci", md);
	assert_int_equal(run_oci("oci", NULL), 0);
	finish();
	assert_int_equal(ino_of("x"), 0);
	assert_int_equal(image_dir_size(img, ino_of("d")), 1);
	assert_contents("d/c", "c", 1);
	image_config(img, &cfg, &len);
	assert_int_equal(len, strlen(config));
	assert_memory_equal(cfg, config, len);
}

static void test_oci__platform_from_index(void **state)
{
	char m1[300], m2[300], list[1024];

	make_image("oci", config, m1, sizeof(m1));
	make_image("oci", "{\"architecture\":\"arm64\",\"os\":\"linux\"}", m2, sizeof(m2));
	/* Insert the platform into each descriptor. */
	m1[strlen(m1) - 1] = 0;
	m2[strlen(m2) - 1] = 0;
	snprintf(list, sizeof(list),
	         "%s,\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}},"
	         "%s,\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\",\"variant\":\"v8\"}}",
	         m1, m2);
	write_index("oci", list);
	assert_int_equal(run_oci("oci", "linux/riscv64"), -ENOENT);
	assert_error("no image for platform linux/riscv64; available: linux/amd64, linux/arm64/v8");
	assert_int_equal(run_oci("oci", "linux/arm64"), 0);
	finish();
	assert_true(ino_of("d/c") != 0);
}

static void test_oci__missing_blob(void **state)
{
	char md[300], hex[65], path[256];
	uint8_t d[32];
	struct buf gz = BUF_INIT, l0 = BUF_INIT;

	make_image("oci", config, md, sizeof(md));
	write_index("oci", md);
	layer0(&l0);
	gzip_buf(&l0, &gz);
	sha256(gz.data, gz.len, d);
	hex_encode(d, 32, hex);
	snprintf(path, sizeof(path), "%s/oci/blobs/sha256/%s", root, hex);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(run_oci("oci", NULL), -ENOENT);
	snprintf(path, sizeof(path), "missing blob sha256:%s", hex);
	assert_error(path);
	buf_free(&gz);
	buf_free(&l0);
}

static void test_oci__digest_mismatch(void **state)
{
	char md[300], hex[65], path[256];
	uint8_t d[32];
	struct buf l1 = BUF_INIT;
	int fd;

	make_image("oci", config, md, sizeof(md));
	write_index("oci", md);
	layer1(&l1);
	sha256(l1.data, l1.len, d);
	hex_encode(d, 32, hex);
	snprintf(path, sizeof(path), "%s/oci/blobs/sha256/%s", root, hex);
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite_full(fd, "Z", 1, 1536), 0);  /* d/c's one byte of data */
	close(fd);
	assert_int_equal(run_oci("oci", NULL), -EBADMSG);
	snprintf(path, sizeof(path), "blob sha256:%s: digest mismatch", hex);
	assert_error(path);
	buf_free(&l1);
}

/* ---- docker archives and detection -------------------------------------------------- */

static void test_docker__legacy_archive(void **state)
{
	struct buf outer = BUF_INIT, l0 = BUF_INIT, l1 = BUF_INIT, m = BUF_INIT;
	char cfgname[80], path[128], hex[65];
	uint8_t d[32];
	int r;

	layer0(&l0);
	layer1(&l1);
	sha256(config, strlen(config), d);
	hex_encode(d, 32, hex);
	snprintf(cfgname, sizeof(cfgname), "%s.json", hex);
	assert_int_equal(buf_printf(&m, "[{\"Config\":\"%s\",\"RepoTags\":[\"x:1\"],\"Layers\":"
	                            "[\"%064d/layer.tar\",\"%064d/layer.tar\"]}]", cfgname, 1, 2),
	                 0);
	snprintf(path, sizeof(path), "%064d/", 1);
	put_entry(&outer, path, '5', 0755, NULL);
	snprintf(path, sizeof(path), "%064d/layer.tar", 1);
	put_file(&outer, path, l0.data, l0.len);
	snprintf(path, sizeof(path), "%064d/", 2);
	put_entry(&outer, path, '5', 0755, NULL);
	snprintf(path, sizeof(path), "%064d/layer.tar", 2);
	put_file(&outer, path, l1.data, l1.len);
	put_file(&outer, cfgname, config, strlen(config));
	put_file(&outer, "manifest.json", m.data, m.len);
	put_end(&outer);
	write_at("image.tar", outer.data, outer.len);

	snprintf(path, sizeof(path), "%s/image.tar", root);
	setenv("TMPDIR", root, 1);
	capture_begin();
	r = source_add(bld, path, NULL);
	capture_end();
	unsetenv("TMPDIR");
	assert_int_equal(r, 0);
	finish();
	assert_int_equal(ino_of("x"), 0);
	assert_contents("d/c", "c", 1);
	assert_int_equal(ino_of("manifest.json"), 0);
	/* The scratch directory is gone. */
	snprintf(path, sizeof(path), "ls '%s' | grep -q docker", root);
	assert_int_not_equal(system(path), 0);
	buf_free(&outer);
	buf_free(&l0);
	buf_free(&l1);
	buf_free(&m);
}

static void test_source__plain_tar_with_manifest_json(void **state)
{
	struct buf t = BUF_INIT, gz = BUF_INIT;
	char path[128];
	int r;

	put_entry(&t, "etc/", '5', 0755, NULL);
	put_file(&t, "manifest.json", "[]", 2);
	put_end(&t);
	gzip_buf(&t, &gz);
	write_at("rootfs.tar.gz", gz.data, gz.len);
	snprintf(path, sizeof(path), "%s/rootfs.tar.gz", root);
	capture_begin();
	r = source_add(bld, path, NULL);
	capture_end();
	assert_int_equal(r, 0);
	finish();
	assert_contents("manifest.json", "[]", 2);
	buf_free(&t);
	buf_free(&gz);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup_each, teardown_each)
		T(test_tar__ustar_members),
		T(test_tar__pax_headers),
		T(test_tar__gnu_long_names_and_base256),
		T(test_tar__sparse_formats),
		T(test_tar__sparse_map_must_match_data),
		T(test_tar__gzip_multi_member_and_zstd),
		T(test_tar__truncated_gzip),
		T(test_tar__corrupt_gzip),
		T(test_tar__truncated_zstd),
		T(test_tar__escaping_names),
		T(test_tar__hard_link_to_missing),
		T(test_tar__unknown_type),
		T(test_tar__bad_checksum),
		T(test_tar__truncated_member),
		T(test_tar__missing_end_marker),
		T(test_tar__not_a_tar),
		T(test_tar__empty_symlink_refused),
		T(test_tar__whiteouts_across_layers),
		T(test_tar__whiteouts_off_are_files),
		T(test_tar__whiteout_dotdot_refused),
		T(test_oci__layout_with_whiteouts),
		T(test_oci__platform_from_index),
		T(test_oci__missing_blob),
		T(test_oci__digest_mismatch),
		T(test_docker__legacy_archive),
		T(test_source__plain_tar_with_manifest_json),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
