/*
 * sha256.c — SHA-256 through libcrypto's EVP interface (see sha256.h).
 *
 * libcrypto picks the CPU's SHA instructions (SHA-NI here: about 1.7 GB/s a
 * core, docs/perf-log.md "SHA-256 from libcrypto"), several times the
 * portable C it replaces.
 *
 * libcrypto is loaded on first use (lib/crypto-dl.c: libcrypto.so.3, OpenSSL 3's
 * stable ABI, the one the build compiled against), not linked: linked
 * statically it made every exec of the full program cost 0.28 ms more CPU
 * and the program 4.4 MB larger, linked shared 0.87 ms more (docs/perf-log.md
 * "SHA-256 from libcrypto"), while most commands never hash.  The stores'
 * libcurl, loaded the same way, links the same libcrypto.so.3, so a process
 * that uses both holds one copy.
 *
 * The EVP_MD is fetched from the default provider once and kept for the life
 * of the process: an implicit fetch (EVP_sha256()) looks the algorithm up
 * again at every init.  Loading and fetching run once (pthread_once); a
 * failure is logged once and every digest then fails with -EIO.
 */
#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <string.h>

#include "lib/crypto-dl.h"
#include "lib/lib.h"
#include "lib/sha256.h"

static const struct crypto_api *api;
static EVP_MD *md;
static pthread_once_t fetch_once = PTHREAD_ONCE_INIT;

static void fetch(void)
{
	const struct crypto_api *a = crypto_api();

	if (!a)
		return;
	md = a->EVP_MD_fetch(NULL, "SHA256", NULL);
	if (!md) {
		log_error(-EIO, "%s: no SHA256 digest in the default provider", CRYPTO_SONAME);
		return;
	}
	api = a;   /* set only once the digest is there: every use checks ready() */
}

static bool ready(void)
{
	pthread_once(&fetch_once, fetch);
	return api != NULL;
}

int sha256_init(struct sha256 *s)
{
	s->failed = true;
	if (!ready())
		return -EIO;
	if (!s->ctx && !(s->ctx = api->EVP_MD_CTX_new()))
		return -ENOMEM;
	if (!api->EVP_DigestInit_ex2(s->ctx, md, NULL))
		return -EIO;
	s->failed = false;
	return 0;
}

void sha256_update(struct sha256 *s, const void *data, size_t len)
{
	if (s->failed || !len)
		return;
	if (!api->EVP_DigestUpdate(s->ctx, data, len))
		s->failed = true;
}

int sha256_final(struct sha256 *s, uint8_t out[SHA256_SIZE])
{
	unsigned n = 0;
	bool ok = !s->failed && api->EVP_DigestFinal_ex(s->ctx, out, &n) && n == SHA256_SIZE;

	s->failed = true;   /* initialise again before reuse */
	if (!ok) {
		memset(out, 0, SHA256_SIZE);
		return -EIO;
	}
	return 0;
}

void sha256_destroy(struct sha256 *s)
{
	if (s->ctx)
		api->EVP_MD_CTX_free(s->ctx);   /* a context exists only once loaded */
	s->ctx = NULL;
	s->failed = true;
}

int sha256(const void *buf, size_t len, uint8_t out[SHA256_SIZE])
{
	unsigned n = 0;

	if (!ready()) {
		memset(out, 0, SHA256_SIZE);
		return -EIO;
	}
	if (!api->EVP_Digest(buf, len, out, &n, md, NULL) || n != SHA256_SIZE) {
		memset(out, 0, SHA256_SIZE);
		return -ENOMEM;
	}
	return 0;
}
