/*
 * dl.c — loading a shared library on first use, for the libraries the full program does not
 * link (libcurl, libcrypto, libmicrohttpd: linked, each would cost every exec of lazyroot its
 * relocation work, docs/perf-log.md).  A file of its own so that only the programs that load
 * a library pull dlopen in: the static front never does.
 */
#include <dlfcn.h>

#include "lib/lib.h"

void *dl_open(const char *soname)
{
	void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);

	if (!lib)
		log_error(-ENOENT, "cannot load %s: %s", soname, dlerror());
	return lib;
}

bool dl_sym(void *lib, const char *soname, const char *name, void *slot)
{
	void *p = dlsym(lib, name);

	if (!p) {
		log_error(-ENOENT, "%s: no symbol '%s'", soname, name);
		return false;
	}
	memcpy(slot, &p, sizeof(p));
	return true;
}
