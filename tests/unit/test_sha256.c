/*
 * test_sha256.c — SHA-256 against the FIPS 180-2 / NIST vectors, and
 * piecewise updates (every split point of a multi-block message) equal to
 * the one-shot digest.
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
	struct sha256 s;
	uint8_t d[SHA256_SIZE];
	char hex[SHA256_HEX_SIZE];
	int i;

	memset(block, 'a', sizeof(block));
	sha256_init(&s);
	for (i = 0; i < 1000; i++)
		sha256_update(&s, block, sizeof(block));
	sha256_final(&s, d);
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
		struct sha256 s;

		sha256(msg, j, one);
		for (i = 0; i <= j; i++) {
			sha256_init(&s);
			sha256_update(&s, msg, i);
			sha256_update(&s, msg + i, 0);
			sha256_update(&s, msg + i, j - i);
			sha256_final(&s, two);
			assert_memory_equal(one, two, SHA256_SIZE);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sha256__vectors),
		cmocka_unit_test(test_sha256__million_a),
		cmocka_unit_test(test_sha256__split_updates),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
