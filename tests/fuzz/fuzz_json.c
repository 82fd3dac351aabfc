/*
 * fuzz_json.c — libFuzzer target for the JSON parser: any input must parse
 * or be refused with -EBADMSG, and a parsed document must be walkable.
 */
#include <stdlib.h>

#include "lib/json.h"
#include "lib/lib.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk(const struct json *v)
{
	size_t i, len;
	int64_t n;
	double d;

	switch (json_type(v)) {
	case JSON_OBJECT:
		for (i = 0; i < json_len(v); i++) {
			const char *k = json_key_at(v, i, &len);

			if (!memchr(k, 0, len) && !json_get(v, k))
				abort();
			walk(json_at(v, i));
		}
		break;
	case JSON_ARRAY:
		for (i = 0; i < json_len(v); i++)
			walk(json_at(v, i));
		break;
	case JSON_STRING:
		if (json_string(v, &len)[len] != 0)
			abort();
		break;
	case JSON_NUMBER:
		(void)json_int(v, &n);
		if (json_double(v, &d) < 0)
			abort();
		break;
	default:
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct json_error err;
	struct json *v = NULL;
	int r = json_parse(data, size, &v, &err);

	if (r == 0)
		walk(v);
	else if (r != -EBADMSG && r != -ENOMEM)
		abort();
	json_free(v);
	return 0;
}
