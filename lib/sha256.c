/*
 * sha256.c — SHA-256 through libcrypto's EVP interface (see sha256.h).
 *
 * libcrypto picks the CPU's SHA instructions (SHA-NI here: about 1.7 GB/s a
 * core, docs/perf-log.md "SHA-256 from libcrypto"), several times the
 * portable C it replaces.
 *
 * libcrypto is loaded on first use (dlopen of libcrypto.so.3, OpenSSL 3's
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
#include <dlfcn.h>
#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <string.h>

#include "lib/lib.h"
#include "lib/sha256.h"

#define CRYPTO_SONAME "libcrypto.so.3"

#define CRYPTO_FUNCS(X)                                                                            \
	X(EVP_MD_fetch) X(EVP_MD_CTX_new) X(EVP_MD_CTX_free) X(EVP_DigestInit_ex2)                 \
	X(EVP_DigestUpdate) X(EVP_DigestFinal_ex) X(EVP_Digest)

#define FIELD(name) __typeof__(name) *name;
static struct {
	CRYPTO_FUNCS(FIELD)
	EVP_MD *md;
} api;
#undef FIELD

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static bool loaded;

static void load(void)
{
	void *lib = dl_open(CRYPTO_SONAME);

	if (!lib)
		return;
#define LOAD(name)                                                                                 \
	if (!dl_sym(lib, CRYPTO_SONAME, #name, &api.name))                                         \
		return;
	CRYPTO_FUNCS(LOAD)
#undef LOAD
	api.md = api.EVP_MD_fetch(NULL, "SHA256", NULL);
	if (!api.md) {
		log_error(-EIO, "%s: no SHA256 digest in the default provider", CRYPTO_SONAME);
		return;
	}
	loaded = true;   /* the library stays loaded for the life of the process */
}

static bool ready(void)
{
	pthread_once(&load_once, load);
	return loaded;
}

int sha256_init(struct sha256 *s)
{
	s->failed = true;
	if (!ready())
		return -EIO;
	if (!s->ctx && !(s->ctx = api.EVP_MD_CTX_new()))
		return -ENOMEM;
	if (!api.EVP_DigestInit_ex2(s->ctx, api.md, NULL))
		return -EIO;
	s->failed = false;
	return 0;
}

void sha256_update(struct sha256 *s, const void *data, size_t len)
{
	if (s->failed || !len)
		return;
	if (!api.EVP_DigestUpdate(s->ctx, data, len))
		s->failed = true;
}

int sha256_final(struct sha256 *s, uint8_t out[SHA256_SIZE])
{
	unsigned n = 0;
	bool ok = !s->failed && api.EVP_DigestFinal_ex(s->ctx, out, &n) && n == SHA256_SIZE;

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
		api.EVP_MD_CTX_free(s->ctx);   /* a context exists only once loaded */
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
	if (!api.EVP_Digest(buf, len, out, &n, api.md, NULL) || n != SHA256_SIZE) {
		memset(out, 0, SHA256_SIZE);
		return -ENOMEM;
	}
	return 0;
}
