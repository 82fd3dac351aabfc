/*
 * sha256.h — SHA-256 (FIPS 180-4), for verifying OCI blob digests while the
 * blobs stream through the build.  Chunk names use XXH3 (lib.h); this is only
 * for content addressed by others.
 *
 * A context is plain data: embed it, sha256_init() it, feed it any number of
 * pieces, sha256_final() it.  Not thread-safe per context; no allocation.
 */
#ifndef LAZYROOT_SHA256_H
#define LAZYROOT_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_SIZE 32
#define SHA256_HEX_SIZE 65   /* 64 hex digits and a NUL */

struct sha256 {
	uint32_t h[8];
	uint64_t bytes;         /* total fed so far */
	uint8_t block[64];
	size_t fill;            /* bytes pending in block */
};

void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t len);
/* Writes the digest; the context must be initialised again before reuse. */
void sha256_final(struct sha256 *s, uint8_t out[SHA256_SIZE]);
/* One-shot digest of buf. */
void sha256(const void *buf, size_t len, uint8_t out[SHA256_SIZE]);

#endif
