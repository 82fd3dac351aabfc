/*
 * seccomp.c — loads the syscall filter every sandbox process runs under.
 * What it allows and refuses, and why, is in gen/seccomp.c, which compiles
 * the filter when lazyroot is built.  Here only the policy's choices are
 * applied: io_uring picks one of two filters, and a socket_families narrower
 * than the default turns the instructions that let the other families through
 * into no-ops (a copy of the filter, about 2 KiB, made only then).
 */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>

#include "lib/lib.h"
#include "sandbox/sandbox-internal.h"
#include "sandbox/seccomp-bpf.h"   /* generated in the build directory */

#define MAX_FILTER MAX(ARRAY_SIZE(seccomp_filter_default), ARRAY_SIZE(seccomp_filter_io_uring))

int seccomp_install(const struct sandbox *sb)
{
	static struct sock_filter copy[MAX_FILTER];
	const struct seccomp_family_insn *fam = sb->io_uring ? seccomp_filter_io_uring_families :
	                                                       seccomp_filter_default_families;
	size_t n_fam = sb->io_uring ? ARRAY_SIZE(seccomp_filter_io_uring_families) :
	                              ARRAY_SIZE(seccomp_filter_default_families);
	struct sock_fprog prog = {
		.len = sb->io_uring ? ARRAY_SIZE(seccomp_filter_io_uring) :
		                      ARRAY_SIZE(seccomp_filter_default),
		.filter = (struct sock_filter *)(sb->io_uring ? seccomp_filter_io_uring :
		                                                seccomp_filter_default),
	};

	if ((sb->socket_families & SANDBOX_FAMILY_ALL) != SANDBOX_FAMILY_ALL) {
		memcpy(copy, prog.filter, prog.len * sizeof(*copy));
		for (size_t i = 0; i < n_fam; i++)
			if (!(sb->socket_families & (1u << fam[i].family)))
				copy[fam[i].insn].jt = 0;   /* a jeq whose both ways go on */
		prog.filter = copy;
	}
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
		return log_errno(-errno, "seccomp: load the filter");
	return 0;
}
