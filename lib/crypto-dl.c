/*
 * crypto-dl.c — libcrypto loaded on first use (see crypto-dl.h).
 */
#include <pthread.h>
#include <stdbool.h>

#include "lib/crypto-dl.h"
#include "lib/lib.h"

static struct crypto_api api;
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
	loaded = true;
}

const struct crypto_api *crypto_api(void)
{
	pthread_once(&load_once, load);
	return loaded ? &api : NULL;
}
