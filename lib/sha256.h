/*
 * sha256.h — SHA-256 (FIPS 180-4) from libcrypto, for verifying OCI blob
 * digests while the blobs stream through the build and for S3 payload hashes.
 * Chunk names use XXH3 (lib.h); this is for content addressed by others.
 *
 * The thin seam over OpenSSL's EVP digests: callers never see libcrypto's
 * types.  A streaming context is embedded by its owner: SHA256_INIT it,
 * sha256_init() it (which allocates the EVP context the first time and
 * reuses it after), feed it any number of pieces, sha256_final() it, and
 * sha256_destroy() it at the end (also on error paths; _cleanup_sha256_
 * does it).  One context is used by one thread at a time; different
 * contexts and sha256() are safe from any thread.
 */
#ifndef LAZYROOT_SHA256_H
#define LAZYROOT_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHA256_SIZE 32
#define SHA256_HEX_SIZE 65   /* 64 hex digits and a NUL */

struct sha256 {
	void *ctx;              /* EVP_MD_CTX, or NULL before the first sha256_init */
	bool failed;            /* an init or update failed: sha256_final says so */
};
#define SHA256_INIT { .ctx = NULL, .failed = true }

/* Start a digest.  Returns 0, or -ENOMEM / -EIO when libcrypto cannot make
 * or start a context (also remembered: sha256_final fails then). */
int sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t len);
/* Writes the digest.  Returns 0, or -EIO when any step since sha256_init
 * failed (out is then zeroed).  The context must be initialised again before
 * reuse; its EVP context is kept for that. */
int sha256_final(struct sha256 *s, uint8_t out[SHA256_SIZE]);
/* Frees the EVP context; s may be SHA256_INIT or destroyed already. */
void sha256_destroy(struct sha256 *s);
#define _cleanup_sha256_ __attribute__((cleanup(sha256_destroy)))

/* One-shot digest of buf: returns 0, or -ENOMEM / -EIO (out zeroed).  The
 * digest is fetched from libcrypto once per process, not per call; fit for
 * many calls on 64 KiB–1 MiB buffers. */
int sha256(const void *buf, size_t len, uint8_t out[SHA256_SIZE]);

#endif
