/*
 * fuzz_s3_xml.c — libFuzzer target for the s3 store's XML readers (a
 * ListObjectsV2 page and an error body): any input parses or is refused with
 * -EBADMSG, and what parses is whole: every key a NUL-terminated string, a
 * token when the page says more follow.
 */
#include <stdlib.h>

#include "lib/lib.h"
#include "store/store-internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct s3_listing l;
	char code[64];
	int r = s3_parse_listing((const char *)data, size, &l);

	if (r == 0) {
		for (size_t i = 0; i < l.n; i++)
			if (strlen(l.keys[i]) > size)
				abort();
		if (l.n && l.keys[l.n])
			abort();
		if (l.truncated && !l.next_token)
			abort();
		s3_listing_destroy(&l);
	} else if (r != -EBADMSG && r != -ENOMEM) {
		abort();
	}
	r = s3_error_code((const char *)data, size, code, sizeof(code));
	if (r == 0 && strlen(code) >= sizeof(code))
		abort();
	else if (r < 0 && r != -EBADMSG)
		abort();
	return 0;
}
