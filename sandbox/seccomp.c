/*
 * seccomp.c — the syscall filter every sandbox process runs under.
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
 */
#include <linux/sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>

#include "lib/lib.h"
#include "sandbox/sandbox-internal.h"

static void ctx_releasep(scmp_filter_ctx *ctx)
{
	if (*ctx)
		seccomp_release(*ctx);
}

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

int seccomp_install(bool allow_io_uring)
{
	_cleanup_(ctx_releasep) scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	int r, nr;

	if (!ctx)
		return log_error(-ENOMEM, "seccomp: cannot make a filter");
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++) {
		if (allow_io_uring && is_io_uring(refused[i]))
			continue;
		nr = seccomp_syscall_resolve_name(refused[i]);
		if (nr == __NR_SCMP_ERROR)
			continue;   /* not a syscall on this architecture */
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
		if (r < 0)
			return log_errno(r, "seccomp: refuse %s", refused[i]);
	}
	r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	if (r < 0)
		return log_errno(r, "seccomp: clone3");
	for (size_t i = 0; i < ARRAY_SIZE(clone_ns_flags); i++) {
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
		                     SCMP_A0(SCMP_CMP_MASKED_EQ, clone_ns_flags[i], clone_ns_flags[i]));
		if (r < 0)
			return log_errno(r, "seccomp: clone flags");
	}
	for (size_t i = 0; i < ARRAY_SIZE(file_ioctls); i++) {
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
		                     SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffu, file_ioctls[i]));
		if (r < 0)
			return log_errno(r, "seccomp: ioctl %#x", file_ioctls[i]);
	}
	r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
	                     SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI));
	if (r < 0)
		return log_errno(r, "seccomp: ioctl TIOCSTI");
	r = seccomp_load(ctx);
	if (r < 0)
		return log_errno(r, "seccomp: load the filter");
	return 0;
}
