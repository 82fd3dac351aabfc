/* test_build.c — the build pipeline: packing, cutting, extents, dedup, publish order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sys/stat.h>

#include "chunker/chunker.h"
#include "image/image.h"
#include "lib/lib.h"
#include "store/store.h"

static char root[64];

static int setup_each(void **state)
{
	strcpy(root, "/tmp/lazyroot-test-build.XXXXXX");
	return mkdtemp(root) ? 0 : -1;
}

static int teardown_each(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : -1;
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed;

	for (size_t i = 0; i < n; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		p[i] = (uint8_t)(x >> 56);
	}
}

struct fixture {
	struct store *s;
	struct build *b;
	struct build_params p;
};

static void fixture_open(struct fixture *f, unsigned threads)
{
	char url[96];

	snprintf(url, sizeof(url), "dir:%s", root);
	assert_int_equal(store_open(url, &f->s), 0);
	build_params_default(&f->p);
	f->p.threads = threads;
	/* pinned, not the defaults: the golden index depends on them */
	f->p.min_size = 64 << 10;
	f->p.avg_size = 256 << 10;
	f->p.max_size = 1 << 20;
	f->p.level = 3;
	assert_int_equal(build_new(&f->p, f->s, &f->b), 0);
}

static void fixture_close(struct fixture *f)
{
	build_free(f->b);
	store_free(f->s);
}

static struct image_inode *add_file(struct build *b, const char *path, const uint8_t *data,
                                    size_t len, size_t piece)
{
	struct image_attr a = { .mode = S_IFREG | 0644, .mtime_sec = 1700000000 };
	struct image_inode *ino;

	assert_int_equal(image_tree_add(build_tree(b), path, &a, &ino), 0);
	assert_int_equal(build_file_begin(b, ino, len), 0);
	for (size_t off = 0; off < len; off += piece)
		assert_int_equal(build_file_data(b, data + off, MIN(piece, len - off)), 0);
	assert_int_equal(build_file_end(b), 0);
	build_count_entry(b);
	return ino;
}

/* Read back file ino of img through its extents and the stored chunks. */
static void read_back(struct store *s, const struct image *img, uint64_t ino, uint8_t *out,
                      size_t len)
{
	int64_t n = image_extent_count(img, ino);

	memset(out, 0, len);
	assert_true(n >= 0);
	for (int64_t i = 0; i < n; i++) {
		struct image_extent e;
		struct image_chunk c;
		struct buf raw = BUF_INIT;
		char key[64], hex[HASH_HEX_SIZE];
		uint8_t *data;

		assert_int_equal(image_extent(img, ino, (uint64_t)i, &e), 0);
		assert_int_equal(image_chunk(img, e.chunk, &c), 0);
		hex_encode(c.name, HASH_SIZE, hex);
		snprintf(key, sizeof(key), "chunks/%s", hex);
		assert_int_equal(store_get_sync(s, key, &raw), 0);
		assert_int_equal(raw.len, c.stored_size);
		data = malloc(c.size);
		assert_int_equal(chunk_decode(NULL, c.name, c.flags, c.size, raw.data, raw.len, data), 0);
		assert_true(e.file_off + e.len <= len);
		memcpy(out + e.file_off, data + e.chunk_off, e.len);
		free(data);
		buf_free(&raw);
	}
}

static void open_index(struct store *s, const char *hex, struct buf *data, struct image **img)
{
	assert_int_equal(store_get_index(s, hex, data), 0);
	assert_int_equal(image_open_mem(data->data, data->len, img), 0);
	assert_int_equal(image_verify(*img), 0);
}

static void test_build__small_files_are_packed(void **state)
{
	struct fixture f;
	struct build_summary sum;
	struct buf data = BUF_INIT;
	struct image *img;
	struct image_info info;
	uint8_t buf[3000], back[3000];

	fixture_open(&f, 2);
	for (int i = 0; i < 2000; i++) {
		char path[32];

		snprintf(path, sizeof(path), "many/f%04d", i);
		fill(buf, sizeof(buf), (uint64_t)i);
		add_file(f.b, path, buf, 1000 + (size_t)i % 2000, 333);
	}
	assert_int_equal(build_finish(f.b, "packed", &sum), 0);
	open_index(f.s, sum.index, &data, &img);
	image_get_info(img, &info);
	/* about 3 MB of small files: a dozen chunks, not 2000 */
	assert_true(info.chunks >= 3 && info.chunks <= 40);
	for (int i = 0; i < 2000; i += 37) {
		char path[32];
		uint64_t ino;
		size_t len = 1000 + (size_t)i % 2000;

		snprintf(path, sizeof(path), "many/f%04d", i);
		assert_int_equal(image_lookup_path(img, path, &ino), 0);
		fill(buf, sizeof(buf), (uint64_t)i);
		read_back(f.s, img, ino, back, len);
		assert_memory_equal(buf, back, len);
	}
	image_free(img);
	buf_free(&data);
	fixture_close(&f);
}

static void test_build__large_files_cut_alone_and_dedupe(void **state)
{
	struct fixture f;
	struct build_summary sum;
	struct buf data = BUF_INIT;
	struct image *img;
	struct image_info info;
	size_t len = 5u << 20;
	uint8_t *big = malloc(len), *back = malloc(len);
	uint64_t ino;

	fill(big, len, 7);
	fixture_open(&f, 2);
	add_file(f.b, "a/big", big, len, 65536 + 17);
	add_file(f.b, "b/small", big, 100, 100);     /* lands in the pack stream */
	add_file(f.b, "c/big-copy", big, len, 1 << 20);
	assert_int_equal(build_finish(f.b, "large", &sum), 0);
	open_index(f.s, sum.index, &data, &img);
	image_get_info(img, &info);
	/* the copy shares every chunk with the original; 5 MiB at 256 KiB average */
	assert_true(info.chunks >= 6 && info.chunks <= 40);
	assert_int_equal(sum.chunks_new, sum.chunks);
	assert_int_equal(image_lookup_path(img, "c/big-copy", &ino), 0);
	read_back(f.s, img, ino, back, len);
	assert_memory_equal(big, back, len);
	for (int64_t i = 0, n = image_extent_count(img, ino); i < n; i++) {
		struct image_extent e;
		struct image_chunk c;

		assert_int_equal(image_extent(img, ino, (uint64_t)i, &e), 0);
		assert_int_equal(image_chunk(img, e.chunk, &c), 0);
		assert_true(c.size <= f.p.max_size);
		assert_true(c.size >= f.p.min_size || i == n - 1);
	}
	image_free(img);
	buf_free(&data);
	fixture_close(&f);
	free(big);
	free(back);
}

static void test_build__holes_stay_holes(void **state)
{
	struct fixture f;
	struct build_summary sum;
	struct buf data = BUF_INIT;
	struct image *img;
	struct image_attr a = { .mode = S_IFREG | 0600 };
	struct image_inode *in;
	struct image_stat st;
	uint8_t part[70000], back[300000] = { 0 }, want[300000] = { 0 };
	uint64_t ino;

	fill(part, sizeof(part), 3);
	fixture_open(&f, 1);
	assert_int_equal(image_tree_add(build_tree(f.b), "sparse", &a, &in), 0);
	assert_int_equal(build_file_begin(f.b, in, sizeof(back)), 0);
	assert_int_equal(build_file_hole(f.b, 100000), 0);
	assert_int_equal(build_file_data(f.b, part, sizeof(part)), 0);
	assert_int_equal(build_file_hole(f.b, sizeof(back) - 100000 - sizeof(part)), 0);
	assert_int_equal(build_file_end(f.b), 0);
	assert_int_equal(build_finish(f.b, "sparse", &sum), 0);
	memcpy(want + 100000, part, sizeof(part));
	open_index(f.s, sum.index, &data, &img);
	assert_int_equal(image_lookup_path(img, "sparse", &ino), 0);
	assert_int_equal(image_getattr(img, ino, &st), 0);
	assert_int_equal(st.size, sizeof(back));
	assert_true(st.blocks * 512 < 100000);  /* only the data counts */
	read_back(f.s, img, ino, back, sizeof(back));
	assert_memory_equal(want, back, sizeof(back));
	image_free(img);
	buf_free(&data);
	fixture_close(&f);
}

static void test_build__size_mismatch_refused(void **state)
{
	struct fixture f;
	struct image_attr a = { .mode = S_IFREG | 0600 };
	struct image_inode *in;

	fixture_open(&f, 1);
	assert_int_equal(image_tree_add(build_tree(f.b), "short", &a, &in), 0);
	assert_int_equal(build_file_begin(f.b, in, 10), 0);
	assert_int_equal(build_file_data(f.b, "abc", 3), 0);
	assert_int_equal(build_file_data(f.b, "0123456789", 10), -EFBIG);
	assert_int_equal(build_file_end(f.b), -EIO);
	fixture_close(&f);
}

/* Golden: a fixed generated tree builds to a fixed index name.  Any change of
 * cut points, packing, chunk naming or the index format breaks this on
 * purpose. */
/* PRINT_GOLDEN=1 build/tests/test_build prints it. */
#define GOLDEN_INDEX "7ac136116bd668d6d2021b1884d6b230"

static void test_build__golden_index_name(void **state)
{
	struct fixture f;
	struct build_summary sum;
	size_t len = 3u << 20;
	uint8_t *big = malloc(len);

	fill(big, len, 99);
	for (size_t i = len / 2; i < len; i++)  /* compressible second half */
		big[i] = (uint8_t)(i % 251 < 40 ? big[i] : 'a');
	fixture_open(&f, 2);
	for (int i = 0; i < 300; i++) {
		char path[32];

		snprintf(path, sizeof(path), "d%d/f%03d", i % 7, i);
		add_file(f.b, path, big + (size_t)i * 1000, 500 + (size_t)i * 37, 4096);
	}
	add_file(f.b, "big", big, len, 123457);
	assert_int_equal(build_finish(f.b, "golden", &sum), 0);
	if (getenv("PRINT_GOLDEN"))
		printf("golden index %s, %llu chunks\n", sum.index, (unsigned long long)sum.chunks);
	else
		assert_string_equal(sum.index, GOLDEN_INDEX);
	fixture_close(&f);
	free(big);
}

static void test_build__tag_written_last_and_only_on_success(void **state)
{
	struct fixture f;
	struct build_summary sum;
	char path[128];
	struct stat st;

	fixture_open(&f, 1);
	add_file(f.b, "x", (const uint8_t *)"hello", 5, 5);
	assert_int_equal(build_finish(f.b, "img:ok", &sum), 0);
	snprintf(path, sizeof(path), "%s/tags/img:ok", root);
	assert_int_equal(stat(path, &st), 0);
	fixture_close(&f);

	/* a build whose store refuses chunks publishes nothing */
	{
		char cmd[256];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s/chunks' && touch '%s/chunks'", root, root);
		assert_int_equal(system(cmd), 0);
	}
	fixture_open(&f, 1);
	add_file(f.b, "y", (const uint8_t *)"other", 5, 5);
	assert_true(build_finish(f.b, "img:bad", &sum) < 0);
	snprintf(path, sizeof(path), "%s/tags/img:bad", root);
	assert_int_equal(stat(path, &st), -1);
	fixture_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_build__small_files_are_packed, setup_each, teardown_each),
		cmocka_unit_test_setup_teardown(test_build__large_files_cut_alone_and_dedupe, setup_each, teardown_each),
		cmocka_unit_test_setup_teardown(test_build__holes_stay_holes, setup_each, teardown_each),
		cmocka_unit_test_setup_teardown(test_build__size_mismatch_refused, setup_each, teardown_each),
		cmocka_unit_test_setup_teardown(test_build__golden_index_name, setup_each, teardown_each),
		cmocka_unit_test_setup_teardown(test_build__tag_written_last_and_only_on_success, setup_each, teardown_each),
	};

	return cmocka_run_group_tests_name("build", tests, NULL, NULL);
}
