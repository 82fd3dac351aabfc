/*
 * test_sha256.c — SHA-256 against the FIPS 180-2 / NIST vectors and
 * chunk-sized buffers, piecewise updates (every split point of a multi-block
 * message) equal to the one-shot digest, and a context's misuse refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "lib/lib.h"
#include "lib/sha256.h"

static void check(const void *data, size_t len, const char *hex)
{
	uint8_t d[SHA256_SIZE];
	char out[SHA256_HEX_SIZE];

	sha256(data, len, d);
	hex_encode(d, sizeof(d), out);
	assert_string_equal(out, hex);
}

static void test_sha256__vectors(void **state)
{
	check("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	check("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	check("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
	      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	check("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
	      "klmnopqrlmnopqrsmnopqrstnopqrstu", 112,
	      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

static void test_sha256__million_a(void **state)
{
	char block[1000];
	_cleanup_sha256_ struct sha256 s = SHA256_INIT;
	uint8_t d[SHA256_SIZE];
	char hex[SHA256_HEX_SIZE];
	int i;

	memset(block, 'a', sizeof(block));
	assert_int_equal(sha256_init(&s), 0);
	for (i = 0; i < 1000; i++)
		sha256_update(&s, block, sizeof(block));
	assert_int_equal(sha256_final(&s, d), 0);
	hex_encode(d, sizeof(d), hex);
	assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static void test_sha256__split_updates(void **state)
{
	uint8_t msg[300], one[SHA256_SIZE], two[SHA256_SIZE];
	size_t i, j;

	for (i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)(i * 31 + 7);
	for (j = 0; j <= sizeof(msg); j += 7) {
		_cleanup_sha256_ struct sha256 s = SHA256_INIT;

		assert_int_equal(sha256(msg, j, one), 0);
		for (i = 0; i <= j; i++) {
			/* one context, initialised again for each digest */
			assert_int_equal(sha256_init(&s), 0);
			sha256_update(&s, msg, i);
			sha256_update(&s, msg + i, 0);
			sha256_update(&s, msg + i, j - i);
			assert_int_equal(sha256_final(&s, two), 0);
			assert_memory_equal(one, two, SHA256_SIZE);
		}
	}
}

/* A context is used only between sha256_init and sha256_final: a final
 * without an init, or a second final, fails and gives no digest (a caller
 * cannot mistake a stale or empty state for a digest), and a context
 * abandoned half-way is freed by sha256_destroy, twice harmlessly. */
static void test_sha256__misuse_fails(void **state)
{
	_cleanup_sha256_ struct sha256 s = SHA256_INIT, t = SHA256_INIT;
	uint8_t d[SHA256_SIZE], zero[SHA256_SIZE] = { 0 };

	memset(d, 0xaa, sizeof(d));
	assert_int_equal(sha256_final(&s, d), -EIO);
	assert_memory_equal(d, zero, SHA256_SIZE);
	assert_int_equal(sha256_init(&s), 0);
	sha256_update(&s, "abc", 3);
	assert_int_equal(sha256_final(&s, d), 0);
	assert_int_equal(sha256_final(&s, d), -EIO);
	assert_int_equal(sha256_init(&t), 0);
	sha256_update(&t, "abc", 3);
	sha256_destroy(&t);
	sha256_destroy(&t);
}

/* Buffers of the sizes chunks have (64 KiB to 1 MiB, and one not a multiple
 * of the block), one-shot and streamed in odd pieces, against digests
 * computed by another implementation (Python's hashlib) of the same bytes:
 * the known-answer vectors above are all short. */
static void test_sha256__chunk_sized_buffers(void **state)
{
	static const struct {
		size_t len;
		const char *hex;
	} want[] = {
		{ 65536, "ef4636928161808e87035fa51983821677527ccd9661991c5d0126a778b2268a" },
		{ 1048576, "06b7bbfb7824aa03382051691630eb26de85102d1b08a81e907ec0744cd8a286" },
		{ 1048589, "78943c02dd1b4ee1e6790aafaf42fef70eee83b7c94db610b92dd1249a1aa40f" },
	};
	_cleanup_sha256_ struct sha256 s = SHA256_INIT;
	_cleanup_free_ uint8_t *buf = malloc(1048589);
	uint8_t d[SHA256_SIZE];
	char hex[SHA256_HEX_SIZE];

	assert_non_null(buf);
	for (size_t i = 0; i < 1048589; i++)
		buf[i] = (uint8_t)(i * 31 + 7);
	for (size_t k = 0; k < ARRAY_SIZE(want); k++) {
		assert_int_equal(sha256(buf, want[k].len, d), 0);
		hex_encode(d, sizeof(d), hex);
		assert_string_equal(hex, want[k].hex);
		assert_int_equal(sha256_init(&s), 0);
		for (size_t off = 0; off < want[k].len; off += 4097)
			sha256_update(&s, buf + off, MIN((size_t)4097, want[k].len - off));
		assert_int_equal(sha256_final(&s, d), 0);
		hex_encode(d, sizeof(d), hex);
		assert_string_equal(hex, want[k].hex);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sha256__vectors),
		cmocka_unit_test(test_sha256__million_a),
		cmocka_unit_test(test_sha256__split_updates),
		cmocka_unit_test(test_sha256__misuse_fails),
		cmocka_unit_test(test_sha256__chunk_sized_buffers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
