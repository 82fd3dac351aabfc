/*
 * fuzz_tagsig.c — libFuzzer target for the signed tag parser (store/tagsig.c), which reads an
 * object any store may write: any input must parse or be refused with a reason, and a parsed
 * object must encode to one that parses back to the same fields, whose payload is the same
 * bytes.
 */
#include <stdlib.h>

#include "lib/lib.h"
#include "store/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct store_tag_sig t, u;
	struct buf b = BUF_INIT, p = BUF_INIT, q = BUF_INIT;
	const char *why = NULL;

	if (store_tag_sig_parse(data, size, &t, &why) < 0) {
		if (!why)
			abort();
		return 0;
	}
	if (store_tag_sig_encode(&t, &b) < 0 || store_tag_sig_parse(b.data, b.len, &u, &why) < 0 ||
	    memcmp(&t, &u, sizeof(t)))
		abort();
	if (store_tag_sig_payload(&t, &p) < 0 || store_tag_sig_payload(&u, &q) < 0 ||
	    p.len != q.len || memcmp(p.data, q.data, p.len))
		abort();
	buf_free(&b);
	buf_free(&p);
	buf_free(&q);
	return 0;
}
