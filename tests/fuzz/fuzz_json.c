/*
 * fuzz_json.c — libFuzzer target for our use of jansson (lib/json.h): any
 * input must parse or be refused with -EBADMSG; a parsed document is read
 * the way the OCI reader and the node read theirs (typed reads of members
 * that may have any type); and it is written again, where the text must
 * parse and write back to the same text.
 */
#include <stdlib.h>

#include "lib/json.h"
#include "lib/lib.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk(const json_t *v, unsigned depth)
{
	const char *key;
	json_t *m;
	int64_t n;
	double d;
	bool b;

	if (depth > JSON_MAX_DEPTH)
		abort();
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		json_object_foreach ((json_t *)v, key, m) {
			if (json_object_get(v, key) != m)
				abort();
			walk(m, depth + 1);
		}
		break;
	case JSON_ARRAY:
		for (size_t i = 0; i < json_array_size(v); i++)
			walk(json_array_get(v, i), depth + 1);
		break;
	case JSON_STRING:
		if (strlen(json_cstr(v)) != json_string_length(v))
			abort();
		break;
	case JSON_INTEGER:
		if (json_int(v, &n) < 0 || json_double(v, &d) < 0)
			abort();
		break;
	case JSON_REAL:
		if (json_int(v, &n) == 0 || json_double(v, &d) < 0)
			abort();
		break;
	case JSON_TRUE:
	case JSON_FALSE:
		if (json_bool(v, &b) < 0 || b != json_is_true(v))
			abort();
		break;
	default:
		break;
	}
}

/* What the OCI reader and the node take of a document, on whatever came. */
static void read_as_consumers(const json_t *v)
{
	const json_t *list = json_object_get(v, "manifests");
	int64_t n;
	bool b;

	(void)json_int(json_object_get(v, "schemaVersion"), &n);
	(void)json_get_cstr(v, "mediaType");
	for (size_t i = 0; i < json_array_size(list); i++) {
		const json_t *d = json_array_get(list, i);

		(void)json_get_cstr(d, "digest");
		(void)json_int(json_object_get(d, "size"), &n);
		(void)json_get_cstr(json_object_get(d, "platform"), "architecture");
	}
	(void)json_get_cstr(json_object_get(v, "config"), "digest");
	(void)json_get_cstr(v, "op");
	(void)json_bool(json_object_get(v, "ok"), &b);
	(void)json_get_cstr(json_object_get(v, "settings"), "store");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	_cleanup_(buf_freep) struct buf a = BUF_INIT, b = BUF_INIT;
	struct json_error err;
	json_t *v = NULL, *w = NULL;
	int r = json_parse(data, size, &v, &err);

	if (r < 0) {
		if ((r != -EBADMSG && r != -ENOMEM) || v)
			abort();
		return 0;
	}
	walk(v, 0);
	read_as_consumers(v);
	/* written text parses, and writes back the same */
	if (json_buf_add(&a, json_incref(v)) < 0)
		abort();
	if (json_parse(a.data, a.len, &w, &err) < 0)
		abort();
	if (json_buf_add(&b, w) < 0 || a.len != b.len || memcmp(a.data, b.data, a.len))
		abort();
	json_decref(v);
	return 0;
}
