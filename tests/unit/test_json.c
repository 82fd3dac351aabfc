/*
 * test_json.c — the strict JSON parser: valid documents and their DOM,
 * escapes and surrogate pairs, numbers, and a catalogue of inputs that must
 * be refused (with no leak or crash).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "lib/json.h"
#include "lib/lib.h"

static struct json *parse_ok(const char *s)
{
	struct json_error err = { 0, NULL };
	struct json *v = NULL;
	int r = json_parse(s, strlen(s), &v, &err);

	if (r < 0)
		fail_msg("parse of '%s' failed at %zu: %s", s, err.offset, err.msg);
	return v;
}

static void test_json__object_lookup(void **state)
{
	struct json *v = parse_ok(" {\"schemaVersion\": 2, \"manifests\": [{\"digest\": \"sha256:ab\","
	                          " \"size\": 527}], \"b\": true, \"n\": null, \"z\": false} ");
	const struct json *m;
	int64_t i;
	bool b;

	assert_int_equal(json_type(v), JSON_OBJECT);
	assert_int_equal(json_len(v), 5);
	assert_int_equal(json_int(json_get(v, "schemaVersion"), &i), 0);
	assert_int_equal(i, 2);
	m = json_get(v, "manifests");
	assert_true(json_is(m, JSON_ARRAY));
	assert_int_equal(json_len(m), 1);
	assert_string_equal(json_get_cstr(json_at(m, 0), "digest"), "sha256:ab");
	assert_null(json_at(m, 1));
	assert_int_equal(json_bool(json_get(v, "b"), &b), 0);
	assert_true(b);
	assert_int_equal(json_bool(json_get(v, "z"), &b), 0);
	assert_false(b);
	assert_int_equal(json_type(json_get(v, "n")), JSON_NULL);
	assert_non_null(json_get(v, "n"));
	assert_null(json_get(v, "missing"));
	assert_null(json_get(m, "digest"));
	assert_string_equal(json_key_at(v, 1, NULL), "manifests");
	assert_int_equal(json_bool(json_get(v, "n"), &b), -EINVAL);
	/* Accessors take NULL. */
	assert_null(json_get_cstr(json_get(json_get(v, "x"), "y"), "z"));
	assert_int_equal(json_int(NULL, &i), -EINVAL);
	json_free(v);
}

static void test_json__string_escapes(void **state)
{
	struct json *v = parse_ok("[\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\", \"\\u00e9\\u20AC\", "
	                          "\"\\ud83d\\ude00\", \"caf\xc3\xa9\", \"x\\u0000y\"]");
	const char *s;
	size_t len;

	assert_string_equal(json_cstr(json_at(v, 0)), "a\"\\/\b\f\n\r\t");
	assert_string_equal(json_cstr(json_at(v, 1)), "\xc3\xa9\xe2\x82\xac");
	assert_string_equal(json_cstr(json_at(v, 2)), "\xf0\x9f\x98\x80");
	assert_string_equal(json_cstr(json_at(v, 3)), "caf\xc3\xa9");
	s = json_string(json_at(v, 4), &len);
	assert_int_equal(len, 3);
	assert_memory_equal(s, "x\0y", 3);
	assert_null(json_cstr(json_at(v, 4)));
	json_free(v);
}

static void test_json__numbers(void **state)
{
	struct json *v = parse_ok("[0, -0, 9223372036854775807, -9223372036854775808, "
	                          "9223372036854775808, 1.5, -2e3, 1E+2, 0.25e-1]");
	int64_t i;
	double d;

	assert_int_equal(json_int(json_at(v, 0), &i), 0);
	assert_int_equal(i, 0);
	assert_int_equal(json_int(json_at(v, 1), &i), 0);
	assert_int_equal(i, 0);
	assert_int_equal(json_int(json_at(v, 2), &i), 0);
	assert_true(i == INT64_MAX);
	assert_int_equal(json_int(json_at(v, 3), &i), 0);
	assert_true(i == INT64_MIN);
	assert_int_equal(json_int(json_at(v, 4), &i), -ERANGE);
	assert_int_equal(json_int(json_at(v, 5), &i), -EINVAL);
	assert_int_equal(json_double(json_at(v, 5), &d), 0);
	assert_true(d == 1.5);
	assert_int_equal(json_double(json_at(v, 6), &d), 0);
	assert_true(d == -2000.0);
	assert_int_equal(json_double(json_at(v, 7), &d), 0);
	assert_true(d == 100.0);
	assert_int_equal(json_double(json_at(v, 8), &d), 0);
	assert_true(d == 0.025);
	json_free(v);
}

static void test_json__scalars_at_top_level(void **state)
{
	struct json *v = parse_ok("\"x\"");

	assert_string_equal(json_cstr(v), "x");
	json_free(v);
	v = parse_ok("\t42\r\n");
	assert_int_equal(json_type(v), JSON_NUMBER);
	json_free(v);
}

static void test_json__refuses_bad_input(void **state)
{
	static const char *bad[] = {
		"", " ", "{", "}", "[", "[1,]", "[,1]", "{\"a\":1,}", "{\"a\" 1}", "{a:1}",
		"{'a':1}", "[1 2]", "01", "-", "1.", ".5", "1e", "+1", "0x10", "1e999",
		"-1e999", "NaN", "Infinity", "tru", "nul", "truex", "[true false]",
		"\"abc", "\"a\\\"", "\"\\x\"", "\"\\u12\"", "\"\\u12g4\"", "\"\\ud800\"",
		"\"\\ud800x\"", "\"\\ud800\\u0041\"", "\"\\udc00\"", "\"a\tb\"", "\"a\nb\"",
		"\"\x80\"", "\"\xc0\xaf\"", "\"\xe0\x80\xaf\"", "\"\xed\xa0\x80\"",
		"\"\xf4\x90\x80\x80\"", "\"\xf8\x88\x80\x80\x80\"", "\"\xc3\"",
		"\xef\xbb\xbf{}", "{} {}", "{}x", "[1]]", "/* c */ 1", "{\"a\":1,\"a\":2}",
		"{\"k\":{\"b\":1,\"c\":2,\"b\":3}}",
	};
	size_t i;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		struct json_error err = { 0, NULL };
		struct json *v = NULL;
		int r = json_parse(bad[i], strlen(bad[i]), &v, &err);

		if (r != -EBADMSG)
			fail_msg("input %zu '%s' gave %d, expected -EBADMSG", i, bad[i], r);
		assert_non_null(err.msg);
		assert_true(err.offset <= strlen(bad[i]));
	}
}

static void test_json__error_offset(void **state)
{
	struct json_error err;
	struct json *v = NULL;
	const char *s = "{\"a\": [1, 2,, 3]}";

	assert_int_equal(json_parse(s, strlen(s), &v, &err), -EBADMSG);
	assert_int_equal(err.offset, 12);
}

static void test_json__depth_limit(void **state)
{
	char deep[2 * JSON_MAX_DEPTH + 3];
	struct json *v = NULL;
	size_t i;

	for (i = 0; i < JSON_MAX_DEPTH; i++) {
		deep[i] = '[';
		deep[JSON_MAX_DEPTH + i] = ']';
	}
	assert_int_equal(json_parse(deep, 2 * JSON_MAX_DEPTH, &v, NULL), 0);
	json_free(v);

	memmove(deep + 1, deep, 2 * JSON_MAX_DEPTH);
	deep[0] = '[';
	deep[2 * JSON_MAX_DEPTH + 1] = ']';
	assert_int_equal(json_parse(deep, 2 * JSON_MAX_DEPTH + 2, &v, NULL), -EBADMSG);
}

static void test_json__not_nul_terminated(void **state)
{
	/* The parser must stop at len even when the bytes after it would
	 * continue the token. */
	const char s[] = "[12345]";
	struct json *v = NULL;
	int64_t i;

	assert_int_equal(json_parse(s, 3, &v, NULL), -EBADMSG);
	assert_int_equal(json_parse(s + 1, 3, &v, NULL), 0);
	assert_int_equal(json_int(v, &i), 0);
	assert_int_equal(i, 123);
	json_free(v);
}

static void test_json__many_members(void **state)
{
	struct buf b = BUF_INIT;
	struct json *v = NULL;
	int64_t x;
	int i;

	assert_int_equal(buf_append(&b, "{", 1), 0);
	for (i = 0; i < 1000; i++)
		assert_int_equal(buf_printf(&b, "%s\"k%d\":%d", i ? "," : "", (i * 7919) % 1000,
		                            i), 0);
	assert_int_equal(buf_append(&b, "}", 1), 0);
	assert_int_equal(json_parse(b.data, b.len, &v, NULL), 0);
	assert_int_equal(json_len(v), 1000);
	assert_int_equal(json_int(json_get(v, "k7919"), &x), -EINVAL);
	assert_int_equal(json_int(json_get(v, "k919"), &x), 0);
	assert_int_equal(x, 1);
	json_free(v);
	buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_json__object_lookup),
		cmocka_unit_test(test_json__string_escapes),
		cmocka_unit_test(test_json__numbers),
		cmocka_unit_test(test_json__scalars_at_top_level),
		cmocka_unit_test(test_json__refuses_bad_input),
		cmocka_unit_test(test_json__error_offset),
		cmocka_unit_test(test_json__depth_limit),
		cmocka_unit_test(test_json__not_nul_terminated),
		cmocka_unit_test(test_json__many_members),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
