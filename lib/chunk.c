/* chunk.c — the stored form of a chunk: zstd frame or raw bytes, named by
 * the XXH3-128 of the uncompressed bytes. */
#include <zstd.h>

#include "lib/lib.h"

int chunk_encode(ZSTD_CCtx *cctx, int level, const void *in, size_t len, struct buf *out,
                 uint32_t *ret_flags)
{
	size_t bound = ZSTD_compressBound(len), n;
	int r;

	out->len = 0;
	r = buf_reserve(out, bound);
	if (r < 0)
		return r;
	if (cctx)
		n = ZSTD_compressCCtx(cctx, out->data, bound, in, len, level);
	else
		n = ZSTD_compress(out->data, bound, in, len, level);
	if (!ZSTD_isError(n) && n < len) {
		out->len = n;
		*ret_flags = CHUNK_ZSTD;
		return 0;
	}
	memcpy(out->data, in, len);
	out->len = len;
	*ret_flags = 0;
	return 0;
}

int chunk_decode(ZSTD_DCtx *dctx, const uint8_t name[HASH_SIZE], uint32_t flags, uint32_t size,
                 const void *in, size_t inlen, void *out)
{
	uint8_t got[HASH_SIZE];

	if (flags & CHUNK_ZSTD) {
		size_t n = dctx ? ZSTD_decompressDCtx(dctx, out, size, in, inlen)
		                : ZSTD_decompress(out, size, in, inlen);

		if (ZSTD_isError(n) || n != size)
			return -EBADMSG;
	} else {
		if (inlen != size)
			return -EBADMSG;
		memcpy(out, in, size);
	}
	hash128(out, size, got);
	return memcmp(got, name, HASH_SIZE) ? -EBADMSG : 0;
}
