/*
 * gen/seccomp.c — the syscall filter every sandbox process runs under,
 * compiled when lazyroot is built: this program writes it as BPF into a C
 * header (build/sandbox/seccomp-bpf.h) that sandbox/seccomp.c loads.
 * Compiling it with libseccomp at every launch cost about 0.3 ms of CPU and
 * 40 page faults in the sandbox's init; libseccomp is linked statically, so
 * its syscall table was fixed at build time anyway.
 *
 * Default allow; what a sandbox never needs fails with EPERM, so that a
 * program sees a clear "Operation not permitted" rather than dying:
 *   - kernel-wide state: module loading, kexec, bpf, perf_event_open,
 *     userfaultfd, the keyrings, swap, reboot, acct, quotas, syslog;
 *   - mounts and namespaces (the setup is done when the filter loads):
 *     mount, umount2, pivot_root, chroot, unshare, setns, the new mount API,
 *     and clone with any CLONE_NEW* flag; clone3, whose flags sit in memory
 *     that seccomp cannot read, fails with ENOSYS so that libc falls back to
 *     clone, which the filter can check;
 *   - other processes' memory: ptrace, process_vm_readv/writev;
 *   - io_uring: operations submitted through a ring bypass seccomp (a
 *     policy may allow it: Landlock and the cgroup BPF programs still apply
 *     to what a ring does);
 *   - handles that skip path checks: open_by_handle_at, name_to_handle_at;
 *   - ioctls that swap, clone or dedupe file contents (FICLONE,
 *     FICLONERANGE, FIDEDUPERANGE, XFS_IOC_SWAPEXT, XFS exchange-range and
 *     commit-range) and TIOCSTI.  The kernel truncates an ioctl request to
 *     32 bits, so a rule on the full 64-bit argument is bypassed by setting
 *     high bits: the rules compare the low 32 bits only, and for the
 *     file-swapping ones only the type and number (the low 16 bits), so that
 *     no size or direction variant slips through.
 * Syscalls of another ABI (i386, x32) kill the process (libseccomp's default
 * for a foreign architecture).
 *
 * Two filters: the default, and one that lets the io_uring syscalls
 * through (the policy's io_uring field).  Usage: seccomp-gen > HEADER
 */
#include <errno.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static const char *const refused[] = {
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
	"bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
	"mount", "umount", "umount2", "pivot_root", "chroot", "unshare", "setns",
	"open_tree", "move_mount", "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr",
	"ptrace", "process_vm_readv", "process_vm_writev",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"open_by_handle_at", "name_to_handle_at",
	"swapon", "swapoff", "reboot", "acct", "quotactl", "quotactl_fd", "syslog",
	"lookup_dcookie", "iopl", "ioperm", "vhangup", "nfsservctl", "uselib",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"fanotify_init",
};

/* (type, number) of the ioctls that swap, clone or dedupe file contents. */
static const unsigned file_ioctls[] = {
	0x9409,   /* FICLONE (also BTRFS_IOC_CLONE) */
	0x940d,   /* FICLONERANGE */
	0x9436,   /* FIDEDUPERANGE */
	0x586d,   /* XFS_IOC_SWAPEXT ('X', 109) */
	0x5881,   /* XFS_IOC_EXCHANGE_RANGE ('X', 129) */
	0x5882,   /* XFS_IOC_START_COMMIT ('X', 130) */
	0x5883,   /* XFS_IOC_COMMIT_RANGE ('X', 131) */
};

static const uint64_t clone_ns_flags[] = {
	CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWIPC, CLONE_NEWUTS,
	CLONE_NEWCGROUP, CLONE_NEWTIME,
};

static bool is_io_uring(const char *name)
{
	return !strncmp(name, "io_uring_", 9);
}

static int fail(int r, const char *what)
{
	fprintf(stderr, "seccomp-gen: %s: %s\n", what, strerror(-r));
	return r;
}

/* Build the filter into ctx. */
static int build(scmp_filter_ctx ctx, bool allow_io_uring)
{
	int r, nr;

	/* A binary tree of syscall numbers instead of a list: loading the
	 * filter runs it once per syscall number to fill the kernel's cache of
	 * always-allowed syscalls, and each sandboxed syscall the cache misses
	 * runs it again. */
	r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
	if (r < 0)
		return fail(r, "binary tree filter");
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++) {
		if (allow_io_uring && is_io_uring(refused[i]))
			continue;
		nr = seccomp_syscall_resolve_name(refused[i]);
		if (nr == __NR_SCMP_ERROR)
			continue;   /* not a syscall on this architecture */
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
		if (r < 0)
			return fail(r, refused[i]);
	}
	r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	if (r < 0)
		return fail(r, "clone3");
	for (size_t i = 0; i < ARRAY_SIZE(clone_ns_flags); i++) {
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
		                     SCMP_A0(SCMP_CMP_MASKED_EQ, clone_ns_flags[i], clone_ns_flags[i]));
		if (r < 0)
			return fail(r, "clone flags");
	}
	for (size_t i = 0; i < ARRAY_SIZE(file_ioctls); i++) {
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
		                     SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffu, file_ioctls[i]));
		if (r < 0)
			return fail(r, "file ioctls");
	}
	r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
	                     SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI));
	if (r < 0)
		return fail(r, "ioctl TIOCSTI");
	return 0;
}

/* Print ctx's BPF as a sock_filter array named name. */
static int emit(const char *name, bool allow_io_uring)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	int fd = memfd_create("seccomp-bpf", MFD_CLOEXEC), r;
	struct { uint16_t code; uint8_t jt, jf; uint32_t k; } ins;
	size_t n = 0;

	if (!ctx || fd < 0)
		r = fail(-ENOMEM, "cannot make a filter");
	else if ((r = build(ctx, allow_io_uring)) < 0)
		;
	else if ((r = seccomp_export_bpf(ctx, fd)) < 0)
		fail(r, "export the filter");
	else if (lseek(fd, 0, SEEK_SET) < 0)
		r = fail(-errno, "rewind the filter");
	if (ctx)
		seccomp_release(ctx);
	if (r == 0) {
		printf("static const struct sock_filter %s[] = {\n", name);
		while (read(fd, &ins, sizeof(ins)) == (ssize_t)sizeof(ins)) {
			printf("\t{ 0x%04x, %u, %u, 0x%08x },\n", ins.code, ins.jt, ins.jf, ins.k);
			n++;
		}
		printf("};\n\n");
		if (n == 0)
			r = fail(-EINVAL, "empty filter");
	}
	if (fd >= 0)
		close(fd);
	return r;
}

int main(void)
{
	printf("/* Generated by sandbox/gen/seccomp.c when lazyroot is built: do not edit. */\n\n");
	if (emit("seccomp_filter_default", false) < 0 || emit("seccomp_filter_io_uring", true) < 0)
		return 1;
	return fflush(stdout) == 0 ? 0 : 1;
}
