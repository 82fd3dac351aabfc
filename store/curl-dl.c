/*
 * curl-dl.c — libcurl, loaded on first use instead of at program start.
 *
 * libcurl pulls in some thirty shared libraries (TLS, Kerberos, LDAP, SSH,
 * IDN...) whose loading, relocation and constructors cost about 4.5 ms of CPU
 * at every exec of the full program (tools/main.c), also for commands that
 * never touch a remote store (`mount`, `umount`, `cache stats`, each one
 * exec of it; `run`'s static front has no libcurl at all).  So the program
 * does not link libcurl: this file defines the libcurl entry points the
 * stores call, and each one forwards to the real function, resolved with
 * dlopen("libcurl.so.4") the first time any of them is called.  The ABI is libcurl's stable one (soname 4), the same the build
 * compiled against.
 *
 * curl_global_init() reports a missing or incomplete library (logged once,
 * with dlerror's text) as CURLE_FAILED_INIT; the stores call it before
 * anything else, so no other entry point runs unloaded in practice, and if
 * one did it fails the way libcurl's own functions fail (NULL, an error code).
 *
 * The variadic setters pass their one argument on with the type libcurl reads
 * for that option: CURLOPTTYPE_* ranges (long, pointer, function pointer,
 * curl_off_t) for easy and multi options, a pointer for every CURLINFO.
 *
 * A libcurl function not listed here fails at link time: add it to
 * CURL_FUNCS (plain signature) or write its forwarder like the setters.
 * Thread-safe: loading runs once (pthread_once).
 */
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>

#include "lib/lib.h"

#define CURL_SONAME "libcurl.so.4"

/* X(return type, name, (parameters), (arguments), value when not loaded) */
#define CURL_FUNCS(X)                                                                              \
	X(CURLcode, curl_global_init, (long flags), (flags), CURLE_FAILED_INIT)                    \
	X(CURL *, curl_easy_init, (void), (), NULL)                                                 \
	X(void, curl_easy_cleanup, (CURL *e), (e), )                                                \
	X(void, curl_easy_reset, (CURL *e), (e), )                                                  \
	X(const char *, curl_easy_strerror, (CURLcode c), (c), "libcurl is not loaded")             \
	X(CURLM *, curl_multi_init, (void), (), NULL)                                               \
	X(CURLMcode, curl_multi_cleanup, (CURLM *m), (m), CURLM_INTERNAL_ERROR)                     \
	X(CURLMcode, curl_multi_add_handle, (CURLM *m, CURL *e), (m, e), CURLM_INTERNAL_ERROR)      \
	X(CURLMcode, curl_multi_remove_handle, (CURLM *m, CURL *e), (m, e), CURLM_INTERNAL_ERROR)   \
	X(CURLMsg *, curl_multi_info_read, (CURLM *m, int *left), (m, left), NULL)                  \
	X(CURLMcode, curl_multi_socket_action, (CURLM *m, curl_socket_t s, int ev, int *running),   \
	  (m, s, ev, running), CURLM_INTERNAL_ERROR)                                                \
	X(struct curl_slist *, curl_slist_append, (struct curl_slist *l, const char *s), (l, s),   \
	  NULL)                                                                                     \
	X(void, curl_slist_free_all, (struct curl_slist *l), (l), )

#define FIELD(ret, name, params, args, fail) ret(*name) params;
static struct {
	CURL_FUNCS(FIELD)
	CURLcode (*curl_easy_setopt)(CURL *, CURLoption, ...);
	CURLcode (*curl_easy_getinfo)(CURL *, CURLINFO, ...);
	CURLMcode (*curl_multi_setopt)(CURLM *, CURLMoption, ...);
} api;
#undef FIELD

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static bool loaded;

static void load(void)
{
	void *lib = dl_open(CURL_SONAME);
	bool ok = lib != NULL;

	if (!lib)
		return;
#define LOAD(ret, name, params, args, fail) ok = ok && dl_sym(lib, CURL_SONAME, #name, &api.name);
	CURL_FUNCS(LOAD)
#undef LOAD
	ok = ok && dl_sym(lib, CURL_SONAME, "curl_easy_setopt", &api.curl_easy_setopt) &&
	     dl_sym(lib, CURL_SONAME, "curl_easy_getinfo", &api.curl_easy_getinfo) &&
	     dl_sym(lib, CURL_SONAME, "curl_multi_setopt", &api.curl_multi_setopt);
	if (!ok) {
		dlclose(lib);
		return;
	}
	loaded = true;   /* the library stays loaded for the life of the process */
}

static bool ready(void)
{
	pthread_once(&load_once, load);
	return loaded;
}

#define FORWARD(ret, name, params, args, fail)                                                     \
	ret name params                                                                            \
	{                                                                                          \
		if (!ready())                                                                      \
			return fail;                                                               \
		return api.name args;                                                              \
	}
CURL_FUNCS(FORWARD)
#undef FORWARD

/* The one argument after an easy or multi option, passed on as the type the
 * option's CURLOPTTYPE range says libcurl reads. */
#define FORWARD_OPTION(fn, handle, opt, ap)                                                        \
	((opt) < CURLOPTTYPE_OBJECTPOINT ? fn(handle, opt, va_arg(ap, long)) :                     \
	 (opt) < CURLOPTTYPE_FUNCTIONPOINT ? fn(handle, opt, va_arg(ap, void *)) :                 \
	 (opt) < CURLOPTTYPE_OFF_T ? fn(handle, opt, va_arg(ap, void (*)(void))) :                 \
	 (opt) < CURLOPTTYPE_BLOB ? fn(handle, opt, va_arg(ap, curl_off_t)) :                      \
	                            fn(handle, opt, va_arg(ap, void *)))

CURLcode curl_easy_setopt(CURL *e, CURLoption opt, ...)
{
	va_list ap;
	CURLcode rc;

	if (!ready())
		return CURLE_FAILED_INIT;
	va_start(ap, opt);
	rc = FORWARD_OPTION(api.curl_easy_setopt, e, opt, ap);
	va_end(ap);
	return rc;
}

CURLMcode curl_multi_setopt(CURLM *m, CURLMoption opt, ...)
{
	va_list ap;
	CURLMcode rc;

	if (!ready())
		return CURLM_INTERNAL_ERROR;
	va_start(ap, opt);
	rc = FORWARD_OPTION(api.curl_multi_setopt, m, opt, ap);
	va_end(ap);
	return rc;
}

CURLcode curl_easy_getinfo(CURL *e, CURLINFO info, ...)
{
	va_list ap;
	CURLcode rc;

	if (!ready())
		return CURLE_FAILED_INIT;
	va_start(ap, info);
	rc = api.curl_easy_getinfo(e, info, va_arg(ap, void *));
	va_end(ap);
	return rc;
}
