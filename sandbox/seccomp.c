/*
 * seccomp.c — loads the syscall filter every sandbox process runs under.
 * What it refuses, and why, is in gen/seccomp.c, which compiles the filter
 * when lazyroot is built (libseccomp is not needed at run time).
 */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>

#include "lib/lib.h"
#include "sandbox/sandbox-internal.h"
#include "sandbox/seccomp-bpf.h"   /* generated in the build directory */

int seccomp_install(bool allow_io_uring)
{
	struct sock_fprog prog = {
		.len = allow_io_uring ? ARRAY_SIZE(seccomp_filter_io_uring) :
		                        ARRAY_SIZE(seccomp_filter_default),
		.filter = (struct sock_filter *)(allow_io_uring ? seccomp_filter_io_uring :
		                                                  seccomp_filter_default),
	};

	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
		return log_errno(-errno, "seccomp: load the filter");
	return 0;
}
