/* version.c — the release and the commit this program was built from (Makefile: VERSION,
 * and $(BUILD)/version.h, written by make). */
#include "lib/lib.h"
#include "version.h"

const char *lib_version(void)
{
	return LAZYROOT_VERSION;
}

const char *lib_commit(void)
{
	return LAZYROOT_COMMIT;
}
