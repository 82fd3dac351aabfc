/*
 * test_json.c — our use of jansson (lib/json.h): documents and their values,
 * escapes and surrogate pairs, exact 64-bit integers, the depth and size
 * limits, a catalogue of inputs that must be refused (with no leak or
 * crash), and the text the writers produce.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "lib/json.h"
#include "lib/lib.h"

static json_t *parse_ok(const char *s)
{
	struct json_error err = { 0 };
	json_t *v = NULL;
	int r = json_parse(s, strlen(s), &v, &err);

	if (r < 0)
		fail_msg("parse of '%s' failed at %zu: %s", s, err.offset, err.msg);
	return v;
}

static void test_json__object_lookup(void **state)
{
	json_t *v = parse_ok(" {\"schemaVersion\": 2, \"manifests\": [{\"digest\": \"sha256:ab\","
	                     " \"size\": 527}], \"b\": true, \"n\": null, \"z\": false} ");
	const json_t *m;
	const char *key;
	json_t *val;
	int64_t i;
	size_t n = 0;
	bool b;

	assert_true(json_is_object(v));
	assert_int_equal(json_object_size(v), 5);
	assert_int_equal(json_int(json_object_get(v, "schemaVersion"), &i), 0);
	assert_int_equal(i, 2);
	m = json_object_get(v, "manifests");
	assert_true(json_is_array(m));
	assert_int_equal(json_array_size(m), 1);
	assert_string_equal(json_get_cstr(json_array_get(m, 0), "digest"), "sha256:ab");
	assert_null(json_array_get(m, 1));
	assert_int_equal(json_bool(json_object_get(v, "b"), &b), 0);
	assert_true(b);
	assert_int_equal(json_bool(json_object_get(v, "z"), &b), 0);
	assert_false(b);
	assert_true(json_is_null(json_object_get(v, "n")));
	assert_null(json_object_get(v, "missing"));
	assert_null(json_object_get(m, "digest"));
	assert_int_equal(json_bool(json_object_get(v, "n"), &b), -EINVAL);
	assert_int_equal(json_int(json_object_get(v, "b"), &i), -EINVAL);
	assert_null(json_get_cstr(v, "schemaVersion"));
	/* members come back in document order */
	json_object_foreach (v, key, val) {
		static const char *order[] = { "schemaVersion", "manifests", "b", "n", "z" };

		assert_string_equal(key, order[n++]);
	}
	/* Accessors take NULL. */
	assert_null(json_get_cstr(json_object_get(json_object_get(v, "x"), "y"), "z"));
	assert_int_equal(json_int(NULL, &i), -EINVAL);
	assert_int_equal(json_double(NULL, NULL), -EINVAL);
	json_decref(v);
}

static void test_json__string_escapes(void **state)
{
	json_t *v = parse_ok("[\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\", \"\\u00e9\\u20AC\", "
	                     "\"\\ud83d\\ude00\", \"caf\xc3\xa9\"]");

	assert_string_equal(json_cstr(json_array_get(v, 0)), "a\"\\/\b\f\n\r\t");
	assert_string_equal(json_cstr(json_array_get(v, 1)), "\xc3\xa9\xe2\x82\xac");
	assert_string_equal(json_cstr(json_array_get(v, 2)), "\xf0\x9f\x98\x80");
	assert_string_equal(json_cstr(json_array_get(v, 3)), "caf\xc3\xa9");
	assert_null(json_cstr(v));
	json_decref(v);
}

static void test_json__numbers(void **state)
{
	json_t *v = parse_ok("[0, -0, 9223372036854775807, -9223372036854775808, "
	                     "1.5, -2e3, 1E+2, 0.25e-1, 18446744073709551]");
	int64_t i;
	double d;

	assert_int_equal(json_int(json_array_get(v, 0), &i), 0);
	assert_int_equal(i, 0);
	assert_int_equal(json_int(json_array_get(v, 1), &i), 0);
	assert_int_equal(i, 0);
	assert_int_equal(json_int(json_array_get(v, 2), &i), 0);
	assert_true(i == INT64_MAX);
	assert_int_equal(json_int(json_array_get(v, 3), &i), 0);
	assert_true(i == INT64_MIN);
	assert_int_equal(json_int(json_array_get(v, 4), &i), -EINVAL);
	assert_int_equal(json_double(json_array_get(v, 4), &d), 0);
	assert_true(d == 1.5);
	assert_int_equal(json_double(json_array_get(v, 5), &d), 0);
	assert_true(d == -2000.0);
	assert_int_equal(json_int(json_array_get(v, 5), &i), -EINVAL);
	assert_int_equal(json_double(json_array_get(v, 6), &d), 0);
	assert_true(d == 100.0);
	assert_int_equal(json_double(json_array_get(v, 7), &d), 0);
	assert_true(d == 0.025);
	/* an integer above 2^53 stays exact (a double would round it) */
	assert_int_equal(json_int(json_array_get(v, 8), &i), 0);
	assert_true(i == 18446744073709551);
	assert_int_equal(json_double(json_array_get(v, 2), &d), 0);
	json_decref(v);
}

static void test_json__scalars_at_top_level(void **state)
{
	json_t *v = parse_ok("\"x\"");

	assert_string_equal(json_cstr(v), "x");
	json_decref(v);
	v = parse_ok("\t42\r\n");
	assert_true(json_is_integer(v));
	json_decref(v);
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
		/* a NUL in a string would cut it short for every C reader */
		"\"x\\u0000y\"", "{\"a\\u0000b\":1}",
		/* integers that int64 cannot hold are refused, not rounded */
		"9223372036854775808", "-9223372036854775809", "[18446744073709551616]",
	};
	size_t i;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		struct json_error err = { 0 };
		json_t *v = NULL;
		int r = json_parse(bad[i], strlen(bad[i]), &v, &err);

		if (r != -EBADMSG)
			fail_msg("input %zu '%s' gave %d, expected -EBADMSG", i, bad[i], r);
		assert_null(v);
		assert_true(err.msg[0] != 0);
		assert_true(err.offset <= strlen(bad[i]));
	}
}

static void test_json__error_offset(void **state)
{
	struct json_error err;
	json_t *v = NULL;
	const char *s = "{\"a\": [1, 2,, 3]}";

	assert_int_equal(json_parse(s, strlen(s), &v, &err), -EBADMSG);
	/* jansson's position is just past the token it refused (the second ',') */
	assert_int_equal(err.offset, 13);
}

static void test_json__depth_limit(void **state)
{
	char deep[2 * JSON_MAX_DEPTH + 3];
	struct json_error err;
	json_t *v = NULL;
	size_t i;

	for (i = 0; i < JSON_MAX_DEPTH; i++) {
		deep[i] = '[';
		deep[JSON_MAX_DEPTH + i] = ']';
	}
	assert_int_equal(json_parse(deep, 2 * JSON_MAX_DEPTH, &v, NULL), 0);
	json_decref(v);

	memmove(deep + 1, deep, 2 * JSON_MAX_DEPTH);
	deep[0] = '{';
	deep[2 * JSON_MAX_DEPTH + 1] = '}';
	assert_int_equal(json_parse(deep, 2 * JSON_MAX_DEPTH + 2, &v, &err), -EBADMSG);
	assert_int_equal(err.offset, JSON_MAX_DEPTH);
	assert_non_null(strstr(err.msg, "nesting"));
	assert_null(v);

	/* brackets inside strings are not nesting */
	v = parse_ok("[\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\\"[[[[\"]");
	assert_int_equal(json_array_size(v), 1);
	json_decref(v);
}

static void test_json__size_limit(void **state)
{
	size_t n = JSON_MAX_SIZE + 1;
	char *big = malloc(n);
	struct json_error err;
	json_t *v = NULL;

	assert_non_null(big);
	memset(big, ' ', n);
	big[0] = '0';
	assert_int_equal(json_parse(big, n, &v, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "larger"));
	assert_int_equal(json_parse(big, n - 1, &v, NULL), 0);
	json_decref(v);
	free(big);
}

static void test_json__not_nul_terminated(void **state)
{
	/* The parser must stop at len even when the bytes after it would
	 * continue the token. */
	const char s[] = "[12345]";
	json_t *v = NULL;
	int64_t i;

	assert_int_equal(json_parse(s, 3, &v, NULL), -EBADMSG);
	assert_int_equal(json_parse(s + 1, 3, &v, NULL), 0);
	assert_int_equal(json_int(v, &i), 0);
	assert_int_equal(i, 123);
	json_decref(v);
}

static void test_json__many_members(void **state)
{
	struct buf b = BUF_INIT;
	json_t *v = NULL;
	int64_t x;
	int i;

	assert_int_equal(buf_append(&b, "{", 1), 0);
	for (i = 0; i < 1000; i++)
		assert_int_equal(buf_printf(&b, "%s\"k%d\":%d", i ? "," : "", (i * 7919) % 1000,
		                            i), 0);
	assert_int_equal(buf_append(&b, "}", 1), 0);
	assert_int_equal(json_parse(b.data, b.len, &v, NULL), 0);
	assert_int_equal(json_object_size(v), 1000);
	assert_int_equal(json_int(json_object_get(v, "k7919"), &x), -EINVAL);
	assert_int_equal(json_int(json_object_get(v, "k919"), &x), 0);
	assert_int_equal(x, 1);
	json_decref(v);
	buf_free(&b);
}

/* The text every writer produces: compact, members in the order written. */
static void test_json__writes_compact_text(void **state)
{
	struct buf b = BUF_INIT;

	assert_int_equal(json_pack_buf(&b, "{s:b, s:I, s:s, s:s?, s:[i, i], s:o}", "ok", 1, "n",
	                               (json_int_t)-7, "s", "a\"b\\c\n\t\x01/\xc3\xa9", "none",
	                               NULL, "list", 1, 2, "t", json_fixed(0.1234567, 3)), 0);
	assert_int_equal(buf_append_zero(&b, 1), 0);
	assert_string_equal(b.data, "{\"ok\":true,\"n\":-7,\"s\":\"a\\\"b\\\\c\\n\\t\\u0001/\xc3\xa9\","
	                            "\"none\":null,\"list\":[1,2],\"t\":0.123}");
	buf_free(&b);
}

/* 64-bit sizes and offsets survive a write and a read exactly. */
static void test_json__integers_round_trip(void **state)
{
	static const int64_t values[] = { 0, 1, -1, (1ll << 53) + 1, INT64_MAX, INT64_MIN,
	                                  1099511627776ll * 1024 - 3 };
	struct buf b = BUF_INIT;
	json_t *v = NULL;
	int64_t x;

	for (size_t i = 0; i < ARRAY_SIZE(values); i++) {
		b.len = 0;
		assert_int_equal(json_pack_buf(&b, "{s:I}", "off", (json_int_t)values[i]), 0);
		assert_int_equal(json_parse(b.data, b.len, &v, NULL), 0);
		assert_int_equal(json_int(json_object_get(v, "off"), &x), 0);
		assert_true(x == values[i]);
		json_decref(v);
	}
	/* an unsigned count above INT64_MAX is held at INT64_MAX, not wrapped */
	b.len = 0;
	assert_int_equal(json_buf_add(&b, json_u64(UINT64_MAX)), 0);
	assert_int_equal(json_parse(b.data, b.len, &v, NULL), 0);
	assert_int_equal(json_int(v, &x), 0);
	assert_true(x == INT64_MAX);
	json_decref(v);
	buf_free(&b);
}

/* A string that is not UTF-8 fails the write and leaves the buffer as it was. */
static void test_json__refuses_bad_utf8_on_write(void **state)
{
	struct buf b = BUF_INIT;

	assert_int_equal(buf_append(&b, "x", 1), 0);
	assert_int_equal(json_pack_buf(&b, "{s:s}", "path", "/tmp/\xff"), -EINVAL);
	assert_int_equal(b.len, 1);
	assert_null(json_str("\xc3", 1));
	assert_int_equal(json_buf_add(&b, json_str("\xc3", 1)), -EINVAL);
	assert_int_equal(b.len, 1);
	assert_int_equal(json_buf_add(&b, json_str("ab\xc3\xa9", 2)), 0);
	assert_int_equal(b.len, 5);
	assert_memory_equal(b.data, "x\"ab\"", 5);
	buf_free(&b);
}

/* Text for people keeps valid UTF-8 and replaces the rest, NULs included. */
static void test_json__text_replaces_bad_bytes(void **state)
{
	static const struct { const char *in; size_t len; const char *out; } cases[] = {
		{ "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80" },
		{ "/tmp/\xff", 6, "/tmp/\xef\xbf\xbd" },
		{ "a\0b", 3, "a\xef\xbf\xbd" "b" },
		{ "\xc3", 1, "\xef\xbf\xbd" },                  /* cut short */
		{ "\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd" },    /* overlong */
		{ "\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" }, /* surrogate */
		{ "\xf4\x90\x80\x80", 4,
		  "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },         /* above U+10FFFF */
		{ "", 0, "" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		json_t *v = json_text(cases[i].in, cases[i].len);

		assert_non_null(v);
		assert_string_equal(json_string_value(v), cases[i].out);
		json_decref(v);
	}
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
		cmocka_unit_test(test_json__size_limit),
		cmocka_unit_test(test_json__writes_compact_text),
		cmocka_unit_test(test_json__integers_round_trip),
		cmocka_unit_test(test_json__refuses_bad_utf8_on_write),
		cmocka_unit_test(test_json__text_replaces_bad_bytes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
