/*
 * mhd-dl.c — libmicrohttpd, loaded on first use instead of at program start.
 *
 * libmicrohttpd links GnuTLS and its eight libraries (p11-kit, nettle, gmp,
 * idn2, ...): linked shared, they made every exec of the full program cost
 * about 1.8 ms more CPU, nearly four times a `lazyroot --help` (docs/perf-log.md,
 * "libmicrohttpd, loaded on first use"); its static archive pulls the same
 * GnuTLS in.  Only the node's worker serves HTTP, so the program does not
 * link it: this file defines the entry points node/httpd.c calls, each one
 * forwarding to the real function, resolved with dlopen("libmicrohttpd.so.12")
 * the first time any of them is called.  The ABI is the library's stable one
 * (soname 12), the same the build compiled against.
 *
 * MHD_start_daemon() reports a missing or incomplete library (logged once,
 * with dlerror's text) by returning NULL, as it reports any failure to
 * start; node/httpd.c calls it first, so no other entry point runs unloaded
 * in practice, and if one did it fails the way libmicrohttpd's own functions
 * fail (NULL, MHD_NO).  The variadic MHD_start_daemon() passes its options on
 * through MHD_start_daemon_va(); MHD_get_daemon_info() and
 * MHD_get_connection_info() forward the queries that take no argument (the
 * only kind node/httpd.c makes).
 *
 * A libmicrohttpd function not listed here fails at link time: add it to
 * MHD_FUNCS (plain signature) or write its forwarder like the variadic ones.
 * Thread-safe: loading runs once (pthread_once).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <microhttpd.h>

#include "lib/lib.h"

#define MHD_SONAME "libmicrohttpd.so.12"

/* X(return type, name, (parameters), (arguments), value when not loaded) */
#define MHD_FUNCS(X)                                                                               \
	X(void, MHD_stop_daemon, (struct MHD_Daemon *d), (d), )                                    \
	X(MHD_socket, MHD_quiesce_daemon, (struct MHD_Daemon *d), (d), MHD_INVALID_SOCKET)         \
	X(enum MHD_Result, MHD_run, (struct MHD_Daemon *d), (d), MHD_NO)                           \
	X(enum MHD_Result, MHD_get_timeout, (struct MHD_Daemon *d, MHD_UNSIGNED_LONG_LONG *t),    \
	  (d, t), MHD_NO)                                                                          \
	X(struct MHD_Response *, MHD_create_response_from_buffer,                                  \
	  (size_t size, void *buf, enum MHD_ResponseMemoryMode mode), (size, buf, mode), NULL)     \
	X(enum MHD_Result, MHD_add_response_header,                                                \
	  (struct MHD_Response *r, const char *h, const char *v), (r, h, v), MHD_NO)               \
	X(enum MHD_Result, MHD_queue_response,                                                     \
	  (struct MHD_Connection *c, unsigned int status, struct MHD_Response *r), (c, status, r), \
	  MHD_NO)                                                                                  \
	X(void, MHD_destroy_response, (struct MHD_Response *r), (r), )                             \
	X(struct MHD_Response *, MHD_create_response_from_callback,                                \
	  (uint64_t size, size_t block, MHD_ContentReaderCallback crc, void *cls,                  \
	   MHD_ContentReaderFreeCallback crfc), (size, block, crc, cls, crfc), NULL)               \
	X(int, MHD_get_connection_values,                                                          \
	  (struct MHD_Connection *c, enum MHD_ValueKind kind, MHD_KeyValueIterator it, void *cls), \
	  (c, kind, it, cls), -1)                                                                  \
	X(const char *, MHD_lookup_connection_value,                                               \
	  (struct MHD_Connection *c, enum MHD_ValueKind kind, const char *key), (c, kind, key),    \
	  NULL)

#define FIELD(ret, name, params, args, fail) ret(*name) params;
static struct {
	MHD_FUNCS(FIELD)
	struct MHD_Daemon *(*MHD_start_daemon_va)(unsigned int, uint16_t, MHD_AcceptPolicyCallback,
	                                          void *, MHD_AccessHandlerCallback, void *, va_list);
	const union MHD_DaemonInfo *(*MHD_get_daemon_info)(struct MHD_Daemon *,
	                                                   enum MHD_DaemonInfoType, ...);
	const union MHD_ConnectionInfo *(*MHD_get_connection_info)(struct MHD_Connection *,
	                                                           enum MHD_ConnectionInfoType, ...);
} api;
#undef FIELD

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static bool loaded;

static void load(void)
{
	void *lib = dl_open(MHD_SONAME);
	bool ok = lib != NULL;

	if (!lib)
		return;
#define LOAD(ret, name, params, args, fail) ok = ok && dl_sym(lib, MHD_SONAME, #name, &api.name);
	MHD_FUNCS(LOAD)
#undef LOAD
	ok = ok && dl_sym(lib, MHD_SONAME, "MHD_start_daemon_va", &api.MHD_start_daemon_va) &&
	     dl_sym(lib, MHD_SONAME, "MHD_get_daemon_info", &api.MHD_get_daemon_info) &&
	     dl_sym(lib, MHD_SONAME, "MHD_get_connection_info", &api.MHD_get_connection_info);
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
MHD_FUNCS(FORWARD)
#undef FORWARD

struct MHD_Daemon *MHD_start_daemon(unsigned int flags, uint16_t port, MHD_AcceptPolicyCallback apc,
                                    void *apc_cls, MHD_AccessHandlerCallback dh, void *dh_cls, ...)
{
	struct MHD_Daemon *d;
	va_list ap;

	if (!ready())
		return NULL;
	va_start(ap, dh_cls);
	d = api.MHD_start_daemon_va(flags, port, apc, apc_cls, dh, dh_cls, ap);
	va_end(ap);
	return d;
}

const union MHD_DaemonInfo *MHD_get_daemon_info(struct MHD_Daemon *d, enum MHD_DaemonInfoType what,
                                                ...)
{
	if (!ready())
		return NULL;
	return api.MHD_get_daemon_info(d, what);
}

const union MHD_ConnectionInfo *MHD_get_connection_info(struct MHD_Connection *c,
                                                        enum MHD_ConnectionInfoType what, ...)
{
	if (!ready())
		return NULL;
	return api.MHD_get_connection_info(c, what);
}
