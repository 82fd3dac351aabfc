/*
 * test_profile.c — access profiles (image/profile.c): round trips, merging,
 * the golden bytes of a small profile (so that a format drift cannot pass
 * unnoticed), and the parser against hostile input: every truncation, every
 * single byte flipped, counts that lie.  Each hostile buffer is exactly its
 * length, so that under ASan a read past the end is caught.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "image/image.h"
#include "lib/lib.h"

static const uint8_t idx_a[16] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };
static const uint8_t idx_b[16] = { 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1 };

static struct image_profile *sample(void)
{
	static const uint32_t t0[] = { 7, 3, 9, 0 }, t1[] = { 2 };
	struct image_profile *p = NULL;

	assert_int_equal(image_profile_new(idx_a, &p), 0);
	assert_int_equal(image_profile_add_trace(p, t0, 4), 0);
	assert_int_equal(image_profile_add_trace(p, t1, 1), 0);
	assert_int_equal(image_profile_add_trace(p, NULL, 0), 0);
	return p;
}

static void encode(const struct image_profile *p, struct buf *b)
{
	assert_int_equal(image_profile_encode(p, b), 0);
}

static void test_profile__round_trip(void **state)
{
	struct image_profile *p = sample(), *q = NULL;
	struct buf b = BUF_INIT, b2 = BUF_INIT;
	const uint32_t *v;
	size_t n;

	(void)state;
	encode(p, &b);
	assert_int_equal(b.len, 48 + 4 + 16 + 4 + 4 + 4);
	assert_int_equal(image_profile_parse(b.data, b.len, &q, NULL), 0);
	assert_memory_equal(image_profile_index(q), idx_a, 16);
	assert_int_equal(image_profile_traces(q), 3);
	v = image_profile_trace(q, 0, &n);
	assert_int_equal(n, 4);
	assert_int_equal(v[0], 7);
	assert_int_equal(v[3], 0);
	v = image_profile_trace(q, 1, &n);
	assert_int_equal(n, 1);
	assert_int_equal(v[0], 2);
	(void)image_profile_trace(q, 2, &n);
	assert_int_equal(n, 0);
	assert_null(image_profile_trace(q, 3, &n));
	encode(q, &b2);
	assert_int_equal(b.len, b2.len);
	assert_memory_equal(b.data, b2.data, b.len);
	assert_int_equal(image_profile_check(q, 10, NULL), 0);
	buf_free(&b);
	buf_free(&b2);
	image_profile_free(p);
	image_profile_free(q);
}

/* The bytes of sample(), pinned: magic, version, counts, index, then the
 * body's XXH3-128 and the traces. */
static void test_profile__golden_bytes(void **state)
{
	struct image_profile *p = sample();
	struct buf b = BUF_INIT;
	char hex[2 * 32 + 1];

	(void)state;
	encode(p, &b);
	assert_memory_equal(b.data, "LZRPROF\0\1\0\0\0\3\0\0\0", 16);
	assert_memory_equal(b.data + 16, idx_a, 16);
	assert_memory_equal(b.data + 48,
	                    "\4\0\0\0\7\0\0\0\3\0\0\0\11\0\0\0\0\0\0\0\1\0\0\0\2\0\0\0\0\0\0\0", 32);
	hex_encode(b.data + 32, 16, hex);
	assert_string_equal(hex, "308808eca516273f7a8e82ef4b00ceba");
	buf_free(&b);
	image_profile_free(p);
}

static void test_profile__merge_same_index_only(void **state)
{
	struct image_profile *a = sample(), *b = sample(), *c = NULL;

	(void)state;
	assert_int_equal(image_profile_merge(a, b), 0);
	assert_int_equal(image_profile_traces(a), 6);
	assert_int_equal(image_profile_new(idx_b, &c), 0);
	assert_int_equal(image_profile_merge(a, c), -EXDEV);
	assert_int_equal(image_profile_traces(a), 6);
	image_profile_free(a);
	image_profile_free(b);
	image_profile_free(c);
}

static void test_profile__check_bounds(void **state)
{
	struct image_profile *p = sample();
	const char *why = NULL;

	(void)state;
	assert_int_equal(image_profile_check(p, 10, NULL), 0);
	assert_int_equal(image_profile_check(p, 9, &why), -EBADMSG);
	assert_non_null(why);
	image_profile_free(p);
}

static int parse_copy(const uint8_t *d, size_t len, const char **why)
{
	uint8_t *copy = malloc(len ? len : 1);
	struct image_profile *p = NULL;
	int r;

	assert_non_null(copy);
	memcpy(copy, d, len);
	r = image_profile_parse(copy, len, &p, why);
	image_profile_free(p);
	free(copy);
	return r;
}

static void test_profile__truncated_at_every_length(void **state)
{
	struct image_profile *p = sample();
	struct buf b = BUF_INIT;

	(void)state;
	encode(p, &b);
	for (size_t len = 0; len < b.len; len++) {
		const char *why = NULL;

		assert_true(parse_copy(b.data, len, &why) < 0);
		assert_non_null(why);
		/* one short line: no newline, lowercase start */
		assert_null(strchr(why, '\n'));
	}
	/* and one byte too many */
	assert_int_equal(buf_append(&b, "", 1), 0);
	assert_true(parse_copy(b.data, b.len, NULL) < 0);
	buf_free(&b);
	image_profile_free(p);
}

static void test_profile__every_byte_flipped(void **state)
{
	struct image_profile *p = sample();
	struct buf b = BUF_INIT;

	(void)state;
	encode(p, &b);
	for (size_t i = 0; i < b.len; i++) {
		b.data[i] ^= 0x40;
		/* the index name is not covered by the checksum: another index */
		if (i >= 16 && i < 32)
			assert_int_equal(parse_copy(b.data, b.len, NULL), 0);
		else
			assert_true(parse_copy(b.data, b.len, NULL) < 0);
		b.data[i] ^= 0x40;
	}
	buf_free(&b);
	image_profile_free(p);
}

/* Counts that claim more than the bytes hold, with a checksum that matches:
 * refused, never read past the end. */
static void test_profile__lying_counts(void **state)
{
	struct image_profile *p = sample();
	struct buf b = BUF_INIT;
	const char *why = NULL;
	uint32_t big = 0x7fffffff;

	(void)state;
	encode(p, &b);
	memcpy(b.data + 48, &big, 4);             /* first trace's count */
	hash128(b.data + 48, b.len - 48, b.data + 32);
	assert_int_equal(parse_copy(b.data, b.len, &why), -EBADMSG);
	assert_string_equal(why, "truncated trace");
	memcpy(b.data + 12, &big, 4);             /* number of traces */
	assert_int_equal(parse_copy(b.data, b.len, &why), -EBADMSG);
	assert_string_equal(why, "too many traces");
	buf_free(&b);
	image_profile_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_profile__round_trip),
		cmocka_unit_test(test_profile__golden_bytes),
		cmocka_unit_test(test_profile__merge_same_index_only),
		cmocka_unit_test(test_profile__check_bounds),
		cmocka_unit_test(test_profile__truncated_at_every_length),
		cmocka_unit_test(test_profile__every_byte_flipped),
		cmocka_unit_test(test_profile__lying_counts),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
