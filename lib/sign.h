/*
 * sign.h — Ed25519 signatures (RFC 8032) from libcrypto, for signed tags
 * (store.h, "Signed tags").  The thin seam over OpenSSL's EVP signatures:
 * callers see raw 32-byte keys and 64-byte signatures, never libcrypto's
 * types.  libcrypto is loaded on first use, as lib/sha256.c loads it.
 *
 * Key files are what `openssl genpkey -algorithm ed25519` writes and reads:
 * the private key as PKCS#8 in PEM ("PRIVATE KEY", mode 0600), the public
 * key as SubjectPublicKeyInfo in PEM ("PUBLIC KEY").  A key's id is the
 * SHA-256 of its 32 raw public bytes, written "sha256:<64 hex>".
 *
 * Every function is safe from any thread.
 */
#ifndef LAZYROOT_SIGN_H
#define LAZYROOT_SIGN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIGN_KEY_SIZE 32      /* an Ed25519 public key, and a private key's seed */
#define SIGN_SIG_SIZE 64
#define SIGN_KEY_ID_SIZE 72   /* "sha256:", 64 hex digits and a NUL */

struct sign_key {
	uint8_t pub[SIGN_KEY_SIZE];
	uint8_t seed[SIGN_KEY_SIZE];   /* the private key; zero for a public key */
	bool has_private;
};

/* A new key pair from the kernel's random numbers.  0, or -EIO (logged)
 * when libcrypto is missing or fails. */
int sign_key_generate(struct sign_key *k);
/* Write k's private key to path (mode 0600) and its public key to
 * path.pub (0644), neither of which may exist (-EEXIST, logged naming it).
 * Both or neither: a failure removes what was written.  Logs its errors. */
int sign_key_write(const struct sign_key *k, const char *path);
/* Read a private key file (its public key is derived) or a public one
 * (has_private false).  -EINVAL (logged, naming path and what is wrong) for
 * a file that holds no Ed25519 key of that kind; -errno of the read. */
int sign_key_load_private(const char *path, struct sign_key *k);
int sign_key_load_public(const char *path, struct sign_key *k);
/* "sha256:<hex>" of the public key pub into out. */
int sign_key_id(const uint8_t pub[SIGN_KEY_SIZE], char out[SIGN_KEY_ID_SIZE]);
/* Wipe the private key. */
void sign_key_wipe(struct sign_key *k);

/* Sign len bytes of msg with k (which must hold a private key).  0, -EINVAL
 * for a public key, -EIO (logged) when libcrypto fails. */
int sign_data(const struct sign_key *k, const void *msg, size_t len, uint8_t sig[SIGN_SIG_SIZE]);
/* 0 when sig is pub's signature of msg; -EBADMSG (not logged) when it is
 * not; -EIO (logged) when libcrypto is missing or fails.  About 50 µs. */
int sign_verify(const uint8_t pub[SIGN_KEY_SIZE], const void *msg, size_t len,
                const uint8_t sig[SIGN_SIG_SIZE]);

/* Base64 (RFC 4648, padded) of len bytes into out, which holds
 * 4 * ceil(len / 3) + 1 bytes. */
void sign_base64_encode(const uint8_t *in, size_t len, char *out);
/* Decode padded base64 of exactly len bytes; -EINVAL for anything else. */
int sign_base64_decode(const char *in, uint8_t *out, size_t len);

#endif
