/*
 * fuzz_profile.c — libFuzzer target for the access-profile parser: any input
 * must parse or be refused with a reason, and a parsed profile must encode
 * back to the very bytes it came from.
 */
#include <stdlib.h>

#include "image/image.h"
#include "lib/lib.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct image_profile *p = NULL;
	struct buf b = BUF_INIT;
	const char *why = NULL;

	if (image_profile_parse(data, size, &p, &why) < 0) {
		if (!why)
			abort();
		return 0;
	}
	if (image_profile_encode(p, &b) < 0 || b.len != size || memcmp(b.data, data, size))
		abort();
	for (size_t t = 0; t < image_profile_traces(p); t++) {
		size_t n;

		(void)image_profile_trace(p, t, &n);
	}
	buf_free(&b);
	image_profile_free(p);
	return 0;
}
