/* test_fastcdc.c — FastCDC cut points: bounds, the rolling hash, golden names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "chunker/chunker.h"
#include "lib/lib.h"

#define CORPUS_SIZE (24u << 20)

static uint8_t *corpus;

/* A fixed pseudo-random corpus (splitmix64), with repeated runs so that some
 * content recurs at shifted offsets. */
static int setup(void **state)
{
	uint64_t x = 42;

	corpus = malloc(CORPUS_SIZE);
	if (!corpus)
		return -1;
	for (size_t i = 0; i < CORPUS_SIZE; i += 8) {
		uint64_t z = (x += 0x9E3779B97F4A7C15ULL);

		z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
		z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
		z ^= z >> 31;
		memcpy(corpus + i, &z, 8);
	}
	/* a 3 MiB run copied 1001 bytes further on */
	memcpy(corpus + (12u << 20) + 1001, corpus + (4u << 20), 3u << 20);
	return 0;
}

static int teardown(void **state)
{
	free(corpus);
	return 0;
}

static void test_fastcdc__init_rejects_bad_bounds(void **state)
{
	struct fastcdc c;

	assert_int_equal(fastcdc_init(&c, 16, 64, 256), -EINVAL);         /* min < 64 */
	assert_int_equal(fastcdc_init(&c, 4096, 3000, 8192), -EINVAL);    /* avg < min */
	assert_int_equal(fastcdc_init(&c, 4096, 12288, 65536), -EINVAL);  /* not a power of 2 */
	assert_int_equal(fastcdc_init(&c, 4096, 16384, 8192), -EINVAL);  /* max < avg */
	assert_int_equal(fastcdc_init(&c, 1 << 20, 1 << 22, 1 << 27), -EINVAL);
	assert_int_equal(fastcdc_init(&c, 65536, 262144, 1048576), 0);
}

static void check_bounds(uint32_t min, uint32_t avg, uint32_t max)
{
	struct fastcdc c;
	size_t off = 0, n = 0;
	double total = 0;

	assert_int_equal(fastcdc_init(&c, min, avg, max), 0);
	while (off < CORPUS_SIZE) {
		size_t left = CORPUS_SIZE - off, cut = fastcdc_cut(&c, corpus + off, left);

		if (cut != left) {
			assert_true(cut >= min);
			assert_true(cut <= max);
		} else {
			assert_true(cut <= max);
		}
		off += cut;
		total += (double)cut;
		n++;
	}
	assert_int_equal(off, CORPUS_SIZE);
	/* normalized chunking keeps the mean near avg (between min+avg/2 and 2 avg) */
	assert_true(total / (double)n > (double)min + avg / 4.0);
	assert_true(total / (double)n < 2.0 * avg);
}

static void test_fastcdc__every_cut_within_min_max(void **state)
{
	check_bounds(16 << 10, 64 << 10, 256 << 10);
	check_bounds(64 << 10, 256 << 10, 1 << 20);
	check_bounds(128 << 10, 512 << 10, 2 << 20);
	check_bounds(64, 256, 1024);
}

/* At every cut the rolling hash, recomputed from scratch over the bytes
 * since min, has the mask's bits clear; at no earlier byte did it. */
static void test_fastcdc__rolling_hash_equals_recomputed(void **state)
{
	struct fastcdc c;
	size_t off = 0;
	unsigned checked = 0;

	assert_int_equal(fastcdc_init(&c, 4096, 16384, 65536), 0);
	while (off < (2u << 20)) {
		size_t cut = fastcdc_cut(&c, corpus + off, CORPUS_SIZE - off);

		if (cut < c.max) {
			uint64_t h = fastcdc_hash(corpus + off + c.min, cut - c.min);
			uint64_t mask = cut <= c.avg ? c.mask_s : c.mask_l;

			assert_int_equal(h & mask, 0);
			for (size_t i = c.min + 1; i < cut; i += 97) {
				uint64_t e = fastcdc_hash(corpus + off + c.min, i - c.min);

				assert_true(e & (i <= c.avg ? c.mask_s : c.mask_l));
			}
			checked++;
		}
		off += cut;
	}
	assert_true(checked > 50);
	/* the gear hash forgets bytes older than 64: the window property */
	for (size_t n = 64; n < 4096; n += 61)
		assert_true(fastcdc_hash(corpus, n) == fastcdc_hash(corpus + n - 64, 64));
}

/* Content shifted by an insertion cuts the same way once it resyncs. */
static void test_fastcdc__cuts_resync_after_shift(void **state)
{
	struct fastcdc c;
	size_t a = 4u << 20, b = (12u << 20) + 1001, end_a = a + (3u << 20);
	size_t cuts_a[64], na = 0, same = 0;

	assert_int_equal(fastcdc_init(&c, 16384, 65536, 262144), 0);
	/* cuts relative to the run's start, for both copies, starting 256 KiB in */
	for (size_t off = a; off < end_a && na < 64;) {
		size_t cut = fastcdc_cut(&c, corpus + off, end_a - off);

		off += cut;
		if (off - a > (512u << 10))
			cuts_a[na++] = off - a;
	}
	for (size_t off = b, k = 0; off < b + (3u << 20) && k < 200; k++) {
		size_t cut = fastcdc_cut(&c, corpus + off, b + (3u << 20) - off);

		off += cut;
		for (size_t i = 0; i < na; i++)
			if (cuts_a[i] == off - b)
				same++;
	}
	assert_true(na > 10);
	assert_true(same >= na - 2);
}

/* Golden: the names of the first chunks and the chunk count of the corpus at
 * 64K/256K/1M.  A change of gear table, masks or cut rule breaks this
 * on purpose: it would change every chunk name in every store. */
/* PRINT_GOLDEN=1 build/tests/test_fastcdc prints these. */
#define GOLDEN_0 "505f0720cdf8f53fe668ab3f4455ab46"
#define GOLDEN_1 "77b8e533ab68410bea9b1e9ca401291f"
#define GOLDEN_2 "057a2db504ed66b656a17a98b238e474"
#define GOLDEN_COUNT 80
#define GOLDEN_ALL "3d7537ad9db68759904a5347d9622076"

static void test_fastcdc__golden_chunk_names(void **state)
{
	static const char *golden[] = {
		GOLDEN_0, GOLDEN_1, GOLDEN_2,
	};
	struct fastcdc c;
	size_t off = 0, n = 0;
	uint8_t all[HASH_SIZE];
	struct hash128_state *hs = hash128_new();
	char hex[HASH_HEX_SIZE];

	assert_non_null(hs);
	assert_int_equal(fastcdc_init(&c, 64 << 10, 256 << 10, 1 << 20), 0);
	while (off < CORPUS_SIZE) {
		size_t cut = fastcdc_cut(&c, corpus + off, CORPUS_SIZE - off);
		uint8_t name[HASH_SIZE];

		hash128(corpus + off, cut, name);
		hash128_update(hs, name, HASH_SIZE);
		hex_encode(name, HASH_SIZE, hex);
		if (n < ARRAY_SIZE(golden)) {
			if (getenv("PRINT_GOLDEN"))
				printf("chunk %zu: %s (%zu bytes)\n", n, hex, cut);
			else
				assert_string_equal(hex, golden[n]);
		}
		off += cut;
		n++;
	}
	hash128_final(hs, all);
	hash128_free(hs);
	hex_encode(all, HASH_SIZE, hex);
	if (getenv("PRINT_GOLDEN")) {
		printf("chunks %zu, names hash %s\n", n, hex);
		return;
	}
	assert_int_equal(n, GOLDEN_COUNT);
	assert_string_equal(hex, GOLDEN_ALL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fastcdc__init_rejects_bad_bounds),
		cmocka_unit_test(test_fastcdc__every_cut_within_min_max),
		cmocka_unit_test(test_fastcdc__rolling_hash_equals_recomputed),
		cmocka_unit_test(test_fastcdc__cuts_resync_after_shift),
		cmocka_unit_test(test_fastcdc__golden_chunk_names),
	};

	return cmocka_run_group_tests_name("fastcdc", tests, setup, teardown);
}
