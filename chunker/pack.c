/*
 * pack.c — writing an image's pack (image/FORMAT.md, "Packs"): every chunk
 * of the index's table as the store holds it, back to back in table order,
 * as one object "packs/<index name>" beside the chunk objects.  The pack is
 * made from the chunk objects themselves, each checked first, so that it
 * never holds bytes a reader would refuse; it is streamed into the store
 * (store_put_begin) and replaces an earlier pack only once whole and durable.
 * Cost: one read, decode and hash of every chunk of the image.
 */
#include <zstd.h>

#include "chunker/chunker.h"
#include "image/image.h"
#include "lib/lib.h"
#include "store/store.h"

int build_pack(struct store *s, const struct image *img, const char *hex, uint64_t *ret_bytes)
{
	_cleanup_(buf_freep) struct buf in = BUF_INIT;
	struct image_info info;
	ZSTD_DCtx *dctx = ZSTD_createDCtx();
	uint8_t *out = NULL;
	uint32_t out_cap = 0;
	uint64_t bytes = 0;
	char key[64], ckey[64], chex[HASH_HEX_SIZE];
	int fd = -1, r = 0;

	snprintf(key, sizeof(key), "packs/%s", hex);
	if (!dctx)
		return log_errno(-ENOMEM, "pack %s", hex);
	fd = store_put_begin(s, key);
	if (fd < 0) {
		ZSTD_freeDCtx(dctx);
		if (fd == -EOPNOTSUPP)
			return log_error(fd, "store '%s': cannot hold packs (only dir: stores do)",
			                 store_url(s));
		return log_errno(fd, "store '%s': starting pack %s", store_url(s), hex);
	}
	image_get_info(img, &info);
	for (uint64_t i = 0; i < info.chunks && r == 0; i++) {
		struct image_chunk ic;

		r = image_chunk(img, (uint32_t)i, &ic);
		if (r < 0)
			break;
		hex_encode(ic.name, HASH_SIZE, chex);
		snprintf(ckey, sizeof(ckey), "chunks/%s", chex);
		in.len = 0;
		r = store_get_sync(s, ckey, &in);
		if (r < 0) {
			log_errno(r, "store '%s': reading chunk %s for pack %s", store_url(s), chex, hex);
			break;
		}
		if (ic.size > out_cap) {
			uint8_t *p = realloc(out, ic.size);

			if (!p) {
				r = log_errno(-ENOMEM, "pack %s", hex);
				break;
			}
			out = p;
			out_cap = ic.size;
		}
		if (in.len != ic.stored_size) {
			r = log_error(-EBADMSG, "store '%s': chunk %s is %zu bytes, not the %u index %s "
			              "says; no pack written", store_url(s), chex, in.len, ic.stored_size,
			              hex);
			break;
		}
		if (chunk_decode(dctx, ic.name, ic.flags, ic.size, in.data, in.len, out) < 0) {
			r = log_error(-EBADMSG, "store '%s': chunk %s fails verification; no pack "
			              "written for %s", store_url(s), chex, hex);
			break;
		}
		r = write_full(fd, in.data, in.len);
		if (r < 0)
			log_errno(r, "store '%s': writing pack %s", store_url(s), hex);
		bytes += in.len;
	}
	if (r == 0) {
		r = store_put_end(s, key, &fd, true);
		if (r < 0)
			log_errno(r, "store '%s': publishing pack %s", store_url(s), hex);
	} else {
		(void)store_put_end(s, key, &fd, false);
	}
	free(out);
	ZSTD_freeDCtx(dctx);
	if (r == 0 && ret_bytes)
		*ret_bytes = bytes;
	return r;
}
