/*
 * fuzz_api.c — libFuzzer target for the sandbox API's request bodies
 * (node/api-req.c): any input, given to each of the three parsers, is
 * accepted or refused with -EINVAL and one line; an accepted request holds
 * only what its bounds allow (ids that are ids, argv non-empty and
 * NULL-terminated, env entries NAME=VALUE).
 */
#include <stdlib.h>

#include "lib/lib.h"
#include "node/api-internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_err(int r, const struct api_err *err)
{
	if (r != 0 && (r != -EINVAL || !err->msg[0] || strchr(err->msg, '\n')))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct api_create_req c;
	struct api_exec_req e;
	struct api_err err = { "" };
	const char *stage;
	json_t *doc = NULL;
	int r;

	r = api_parse_create(data, size, &c, &doc, &err);
	check_err(r, &err);
	if (r == 0) {
		if (!c.image == !c.rootfs || (c.name && !api_id_valid(c.name)) || c.ttl < 0)
			abort();
		api_create_req_free(&c);
		json_decref(doc);
	}
	err.msg[0] = 0;
	doc = NULL;
	r = api_parse_exec(data, size, &e, &doc, &err);
	check_err(r, &err);
	if (r == 0) {
		size_t n = 0;

		if (!e.argv || !e.argv[0] || !e.argv[0][0] || (e.exec_id && !api_id_valid(e.exec_id)))
			abort();
		while (e.argv[n])
			n++;
		if (n > API_LIST_MAX)
			abort();
		for (size_t i = 0; e.env && e.env[i]; i++)
			if (!strchr(e.env[i], '='))
				abort();
		api_exec_req_free(&e);
		json_decref(doc);
	}
	err.msg[0] = 0;
	doc = NULL;
	r = api_parse_stage(data, size, &stage, &doc, &err);
	check_err(r, &err);
	if (r == 0) {
		if (!stage || !*stage)
			abort();
		json_decref(doc);
	}
	return 0;
}
