/*
 * crypto-dl.h — the libcrypto functions lib/ uses (digests in sha256.c,
 * Ed25519 in sign.c), loaded on first use from one table.
 *
 * libcrypto is dlopen'd (libcrypto.so.3, OpenSSL 3's stable ABI, the one the
 * build compiled against), not linked: most commands never hash or sign, and
 * linking it cost every exec (lib/sha256.c says how much).  One loader
 * serves both users, so a process that digests and verifies resolves the
 * library once.
 */
#ifndef LAZYROOT_LIB_CRYPTO_DL_H
#define LAZYROOT_LIB_CRYPTO_DL_H

#include <openssl/evp.h>

#define CRYPTO_SONAME "libcrypto.so.3"

#define CRYPTO_FUNCS(X)                                                                            \
	X(EVP_MD_fetch) X(EVP_MD_CTX_new) X(EVP_MD_CTX_free) X(EVP_DigestInit_ex2)                 \
	X(EVP_DigestUpdate) X(EVP_DigestFinal_ex) X(EVP_Digest)                                    \
	X(EVP_PKEY_new_raw_private_key) X(EVP_PKEY_new_raw_public_key)                             \
	X(EVP_PKEY_get_raw_public_key) X(EVP_PKEY_free)                                            \
	X(EVP_DigestSignInit) X(EVP_DigestSign) X(EVP_DigestVerifyInit) X(EVP_DigestVerify)

#define CRYPTO_FIELD(name) __typeof__(name) *name;
struct crypto_api {
	CRYPTO_FUNCS(CRYPTO_FIELD)
};
#undef CRYPTO_FIELD

/* The table, loaded once (thread-safe); NULL when libcrypto or one of its
 * functions cannot be loaded (logged once, by lib/dl.c).  The library stays
 * loaded for the life of the process. */
const struct crypto_api *crypto_api(void);

#endif
