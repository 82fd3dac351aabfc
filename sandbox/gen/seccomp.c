/*
 * gen/seccomp.c — the syscall filter every sandbox process runs under,
 * compiled when lazyroot is built: this program writes it as classic BPF into
 * a C header (build/sandbox/seccomp-bpf.h) that sandbox/seccomp.c loads.  It
 * writes the BPF itself, from the table below: libseccomp 2.5.4 knows neither
 * the newest syscalls nor how to mix an unconditional rule with argument
 * checks of another action on one syscall (it drops the checks).
 * Compiling a filter at every launch cost about 0.3 ms of CPU and 40 page
 * faults in the sandbox's init.
 *
 * An allowlist.  The table below names every x86_64 syscall a sandbox may
 * make; a syscall it does not name fails with ENOSYS, so that one added by a
 * later kernel is refused until someone allows it here, and a program that
 * probes for it falls back as it would on an older kernel (what container
 * runtimes return for the same reason).  The syscalls a sandbox must never
 * use, and that exist, fail with EPERM instead: a program sees a clear
 * "Operation not permitted" rather than "not implemented":
 *   - kernel-wide state: module loading, kexec, bpf, perf_event_open,
 *     userfaultfd, the keyrings, swap, reboot, acct, quotas, syslog, the
 *     clocks, iopl/ioperm, modify_ldt (the LDT code is a history of kernel
 *     bugs; 64-bit programs need none);
 *   - mounts and namespaces (the setup is done when the filter loads):
 *     mount, umount2, pivot_root, chroot, unshare, setns, the new mount API
 *     (open_tree, open_tree_attr, move_mount, fs*, mount_setattr), statmount
 *     and listmount, and clone with any CLONE_NEW* flag; clone3, whose flags
 *     sit in memory that seccomp cannot read, fails with ENOSYS so that libc
 *     falls back to clone, which the filter can check;
 *   - other processes' memory and files: ptrace, process_vm_readv/writev,
 *     process_madvise, process_mrelease, pidfd_getfd, kcmp;
 *   - io_uring: operations submitted through a ring bypass seccomp (a policy
 *     may allow it: Landlock and the cgroup BPF programs still apply to what
 *     a ring does);
 *   - handles that skip path checks: open_by_handle_at, name_to_handle_at;
 *     fanotify (unprivileged since 5.13);
 *   - which pages of a file are in the page cache: mincore and cachestat
 *     (EPERM), and preadv2 with RWF_NOWAIT (EOPNOTSUPP, as from a file that
 *     cannot do it, so that programs read the ordinary way).  The image's
 *     page cache is shared by every sandbox of a node: these would tell one
 *     sandbox which pages the others read;
 *   - personality() except the values Docker's profile also allows (PER_LINUX,
 *     PER_LINUX32, UNAME26, both, and the 0xffffffff query): no
 *     ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC or MMAP_PAGE_ZERO;
 *   - ioctls that swap, clone or dedupe file contents (FICLONE, FICLONERANGE,
 *     FIDEDUPERANGE, XFS_IOC_SWAPEXT, XFS exchange-range and commit-range),
 *     TIOCSTI and TIOCLINUX.  The kernel truncates an ioctl request to 32
 *     bits, so a rule on the full 64-bit argument is bypassed by setting high
 *     bits: the rules compare the low 32 bits only, and for the file-swapping
 *     ones only the type and number (the low 16 bits), so that no size or
 *     direction variant slips through.
 * Two kinds of node-wide state that no namespace divides:
 *   - legacy AIO (io_setup, io_submit, io_getevents, io_pgetevents,
 *     io_cancel, io_destroy) is not in the table, so it fails with ENOSYS:
 *     every context takes events from one node-wide budget
 *     (fs.aio-max-nr), which one sandbox could hold alone, so that io_setup
 *     failed for every process on the node.  glibc's POSIX AIO uses threads,
 *     and libaio users (databases, fio) fall back to their synchronous path
 *     on ENOSYS, as on a kernel built without AIO;
 *   - sync() and syncfs() return 0 without doing anything: either would
 *     write back dirty pages of the host's filesystems (a writable bind's,
 *     or every one for sync), a cost the whole node pays.  fsync,
 *     fdatasync and sync_file_range of the sandbox's own files still work.
 * Sockets: socket() only for AF_UNIX, AF_INET and AF_INET6 (stream or
 * datagram, protocol 0, TCP or UDP: no SCTP, UDP-Lite, MPTCP, raw or packet
 * sockets) and AF_NETLINK with NETLINK_ROUTE; socketpair() only for AF_UNIX.
 * Another family fails with EAFNOSUPPORT (as if the kernel lacked it), another
 * type or protocol of an allowed family with EPROTONOSUPPORT.  Kernel uevents
 * (NETLINK_KOBJECT_UEVENT), AF_VSOCK, AF_PACKET, AF_ALG and the rest never get
 * a socket.  The policy's socket_families can narrow the four families
 * further: sandbox/seccomp.c turns the instructions that let a family through
 * (listed in the header) into no-ops.
 *
 * Syscalls of another ABI (i386 through int 0x80, x32 through the x32 bit in
 * the number) kill the process: no program of the sandbox has a use for them,
 * and each is a second, less used syscall table into the kernel.
 *
 * Layout: check the architecture, refuse x32 numbers, then a binary search
 * over runs of numbers that share one action, with the argument checks of
 * ioctl, clone, socket, socketpair, personality and preadv2 at their leaves.
 * Loading a filter runs it once per syscall number to fill the kernel's cache
 * of always-allowed syscalls; only the syscalls whose answer depends on their
 * arguments (and the refused ones) run it again.
 *
 * Two filters: the default, and one that lets the io_uring syscalls through
 * (the policy's io_uring field).  Usage: seccomp-gen > HEADER
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Newer than Debian 12's headers: x86_64 numbers. */
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
#ifndef __NR_fchmodat2
#define __NR_fchmodat2 452
#endif
#ifndef __NR_map_shadow_stack
#define __NR_map_shadow_stack 453
#endif
#ifndef __NR_futex_wake
#define __NR_futex_wake 454
#endif
#ifndef __NR_futex_wait
#define __NR_futex_wait 455
#endif
#ifndef __NR_futex_requeue
#define __NR_futex_requeue 456
#endif
#ifndef __NR_statmount
#define __NR_statmount 457
#endif
#ifndef __NR_listmount
#define __NR_listmount 458
#endif
#ifndef __NR_mseal
#define __NR_mseal 462
#endif
#ifndef __NR_setxattrat
#define __NR_setxattrat 463
#endif
#ifndef __NR_getxattrat
#define __NR_getxattrat 464
#endif
#ifndef __NR_listxattrat
#define __NR_listxattrat 465
#endif
#ifndef __NR_removexattrat
#define __NR_removexattrat 466
#endif
#ifndef __NR_open_tree_attr
#define __NR_open_tree_attr 467
#endif
#ifndef __NR_file_getattr
#define __NR_file_getattr 468
#endif
#ifndef __NR_file_setattr
#define __NR_file_setattr 469
#endif

#define RWF_NOWAIT_FLAG 0x8u   /* RWF_NOWAIT, <linux/fs.h> */
#define TIOCLINUX_REQ 0x541cu

/* What a syscall gets. */
enum action {
	A_ENOSYS = 0,           /* not in the table: the default */
	A_ALLOW,
	A_EPERM,
	A_IO_URING,             /* EPERM, or allowed by the io_uring filter */
	A_CLONE3,               /* ENOSYS on purpose: libc falls back to clone */
	A_SUCCEED,              /* returns 0 without doing anything */
	/* argument checks */
	A_IOCTL, A_CLONE, A_SOCKET, A_SOCKETPAIR, A_PERSONALITY, A_PREADV2,
};

struct sys {
	int nr;
	enum action action;
};

#define S(name, action) { __NR_##name, action }

static const struct sys table[] = {
	/* files and descriptors */
	S(read, A_ALLOW), S(write, A_ALLOW), S(open, A_ALLOW), S(close, A_ALLOW),
	S(stat, A_ALLOW), S(fstat, A_ALLOW), S(lstat, A_ALLOW), S(newfstatat, A_ALLOW),
	S(statx, A_ALLOW), S(poll, A_ALLOW), S(ppoll, A_ALLOW), S(select, A_ALLOW),
	S(pselect6, A_ALLOW), S(lseek, A_ALLOW), S(pread64, A_ALLOW), S(pwrite64, A_ALLOW),
	S(readv, A_ALLOW), S(writev, A_ALLOW), S(preadv, A_ALLOW), S(pwritev, A_ALLOW),
	S(preadv2, A_PREADV2), S(pwritev2, A_ALLOW), S(access, A_ALLOW), S(faccessat, A_ALLOW),
	S(faccessat2, A_ALLOW), S(pipe, A_ALLOW), S(pipe2, A_ALLOW), S(dup, A_ALLOW),
	S(dup2, A_ALLOW), S(dup3, A_ALLOW), S(sendfile, A_ALLOW), S(fcntl, A_ALLOW),
	S(flock, A_ALLOW), S(fsync, A_ALLOW), S(fdatasync, A_ALLOW), S(syncfs, A_SUCCEED),
	S(sync, A_SUCCEED), S(sync_file_range, A_ALLOW), S(truncate, A_ALLOW),
	S(ftruncate, A_ALLOW), S(fallocate, A_ALLOW), S(getdents, A_ALLOW),
	S(getdents64, A_ALLOW), S(getcwd, A_ALLOW), S(chdir, A_ALLOW), S(fchdir, A_ALLOW),
	S(rename, A_ALLOW), S(renameat, A_ALLOW), S(renameat2, A_ALLOW), S(mkdir, A_ALLOW),
	S(mkdirat, A_ALLOW), S(rmdir, A_ALLOW), S(creat, A_ALLOW), S(link, A_ALLOW),
	S(linkat, A_ALLOW), S(unlink, A_ALLOW), S(unlinkat, A_ALLOW), S(symlink, A_ALLOW),
	S(symlinkat, A_ALLOW), S(readlink, A_ALLOW), S(readlinkat, A_ALLOW),
	S(chmod, A_ALLOW), S(fchmod, A_ALLOW), S(fchmodat, A_ALLOW), S(fchmodat2, A_ALLOW),
	S(chown, A_ALLOW), S(fchown, A_ALLOW), S(lchown, A_ALLOW), S(fchownat, A_ALLOW),
	S(umask, A_ALLOW), S(utime, A_ALLOW), S(utimes, A_ALLOW), S(futimesat, A_ALLOW),
	S(utimensat, A_ALLOW), S(mknod, A_ALLOW), S(mknodat, A_ALLOW), S(statfs, A_ALLOW),
	S(fstatfs, A_ALLOW), S(readahead, A_ALLOW), S(fadvise64, A_ALLOW),
	S(setxattr, A_ALLOW), S(lsetxattr, A_ALLOW), S(fsetxattr, A_ALLOW),
	S(getxattr, A_ALLOW), S(lgetxattr, A_ALLOW), S(fgetxattr, A_ALLOW),
	S(listxattr, A_ALLOW), S(llistxattr, A_ALLOW), S(flistxattr, A_ALLOW),
	S(removexattr, A_ALLOW), S(lremovexattr, A_ALLOW), S(fremovexattr, A_ALLOW),
	S(setxattrat, A_ALLOW), S(getxattrat, A_ALLOW), S(listxattrat, A_ALLOW),
	S(removexattrat, A_ALLOW), S(file_getattr, A_ALLOW), S(file_setattr, A_ALLOW),
	S(openat, A_ALLOW), S(openat2, A_ALLOW), S(close_range, A_ALLOW),
	S(splice, A_ALLOW), S(tee, A_ALLOW), S(vmsplice, A_ALLOW),
	S(copy_file_range, A_ALLOW), S(ioctl, A_IOCTL), S(memfd_create, A_ALLOW),
	S(inotify_init, A_ALLOW), S(inotify_init1, A_ALLOW), S(inotify_add_watch, A_ALLOW),
	S(inotify_rm_watch, A_ALLOW), S(epoll_create, A_ALLOW), S(epoll_create1, A_ALLOW),
	S(epoll_ctl, A_ALLOW), S(epoll_wait, A_ALLOW), S(epoll_pwait, A_ALLOW),
	S(epoll_pwait2, A_ALLOW), S(eventfd, A_ALLOW), S(eventfd2, A_ALLOW),
	S(signalfd, A_ALLOW), S(signalfd4, A_ALLOW), S(timerfd_create, A_ALLOW),
	S(timerfd_settime, A_ALLOW), S(timerfd_gettime, A_ALLOW),
	/* memory */
	S(mmap, A_ALLOW), S(mprotect, A_ALLOW), S(munmap, A_ALLOW), S(brk, A_ALLOW),
	S(mremap, A_ALLOW), S(msync, A_ALLOW), S(madvise, A_ALLOW), S(mlock, A_ALLOW),
	S(mlock2, A_ALLOW), S(munlock, A_ALLOW), S(mlockall, A_ALLOW), S(munlockall, A_ALLOW),
	S(remap_file_pages, A_ALLOW), S(mbind, A_ALLOW), S(set_mempolicy, A_ALLOW),
	S(get_mempolicy, A_ALLOW), S(set_mempolicy_home_node, A_ALLOW),
	S(pkey_mprotect, A_ALLOW), S(pkey_alloc, A_ALLOW), S(pkey_free, A_ALLOW),
	S(membarrier, A_ALLOW), S(mseal, A_ALLOW), S(map_shadow_stack, A_ALLOW),
	S(mincore, A_EPERM), S(cachestat, A_EPERM),
	/* processes, threads, signals, time */
	S(clone, A_CLONE), S(clone3, A_CLONE3), S(fork, A_ALLOW), S(vfork, A_ALLOW),
	S(execve, A_ALLOW), S(execveat, A_ALLOW), S(exit, A_ALLOW), S(exit_group, A_ALLOW),
	S(wait4, A_ALLOW), S(waitid, A_ALLOW), S(kill, A_ALLOW), S(tkill, A_ALLOW),
	S(tgkill, A_ALLOW), S(pidfd_open, A_ALLOW), S(pidfd_send_signal, A_ALLOW),
	S(rt_sigaction, A_ALLOW), S(rt_sigprocmask, A_ALLOW), S(rt_sigreturn, A_ALLOW),
	S(rt_sigpending, A_ALLOW), S(rt_sigtimedwait, A_ALLOW), S(rt_sigqueueinfo, A_ALLOW),
	S(rt_tgsigqueueinfo, A_ALLOW), S(rt_sigsuspend, A_ALLOW), S(sigaltstack, A_ALLOW),
	S(restart_syscall, A_ALLOW), S(pause, A_ALLOW), S(nanosleep, A_ALLOW),
	S(clock_nanosleep, A_ALLOW), S(getitimer, A_ALLOW), S(setitimer, A_ALLOW),
	S(alarm, A_ALLOW), S(timer_create, A_ALLOW), S(timer_settime, A_ALLOW),
	S(timer_gettime, A_ALLOW), S(timer_getoverrun, A_ALLOW), S(timer_delete, A_ALLOW),
	S(gettimeofday, A_ALLOW), S(time, A_ALLOW), S(clock_gettime, A_ALLOW),
	S(clock_getres, A_ALLOW), S(times, A_ALLOW), S(getpid, A_ALLOW), S(getppid, A_ALLOW),
	S(gettid, A_ALLOW), S(getuid, A_ALLOW), S(geteuid, A_ALLOW), S(getgid, A_ALLOW),
	S(getegid, A_ALLOW), S(getresuid, A_ALLOW), S(getresgid, A_ALLOW),
	S(getgroups, A_ALLOW), S(setuid, A_ALLOW), S(setgid, A_ALLOW), S(setreuid, A_ALLOW),
	S(setregid, A_ALLOW), S(setresuid, A_ALLOW), S(setresgid, A_ALLOW),
	S(setfsuid, A_ALLOW), S(setfsgid, A_ALLOW), S(setgroups, A_ALLOW),
	S(capget, A_ALLOW), S(capset, A_ALLOW), S(setpgid, A_ALLOW), S(getpgid, A_ALLOW),
	S(getpgrp, A_ALLOW), S(setsid, A_ALLOW), S(getsid, A_ALLOW), S(uname, A_ALLOW),
	S(sethostname, A_ALLOW), S(setdomainname, A_ALLOW), S(sysinfo, A_ALLOW),
	S(getrlimit, A_ALLOW), S(setrlimit, A_ALLOW), S(prlimit64, A_ALLOW),
	S(getrusage, A_ALLOW), S(getpriority, A_ALLOW), S(setpriority, A_ALLOW),
	S(sched_yield, A_ALLOW), S(sched_setparam, A_ALLOW), S(sched_getparam, A_ALLOW),
	S(sched_setscheduler, A_ALLOW), S(sched_getscheduler, A_ALLOW),
	S(sched_get_priority_max, A_ALLOW), S(sched_get_priority_min, A_ALLOW),
	S(sched_rr_get_interval, A_ALLOW), S(sched_setaffinity, A_ALLOW),
	S(sched_getaffinity, A_ALLOW), S(sched_setattr, A_ALLOW), S(sched_getattr, A_ALLOW),
	S(ioprio_set, A_ALLOW), S(ioprio_get, A_ALLOW), S(getcpu, A_ALLOW),
	S(prctl, A_ALLOW), S(arch_prctl, A_ALLOW), S(personality, A_PERSONALITY),
	S(set_tid_address, A_ALLOW), S(set_robust_list, A_ALLOW),
	S(get_robust_list, A_ALLOW), S(rseq, A_ALLOW), S(futex, A_ALLOW),
	S(futex_waitv, A_ALLOW), S(futex_wake, A_ALLOW), S(futex_wait, A_ALLOW),
	S(futex_requeue, A_ALLOW), S(getrandom, A_ALLOW), S(seccomp, A_ALLOW),
	S(landlock_create_ruleset, A_ALLOW), S(landlock_add_rule, A_ALLOW),
	S(landlock_restrict_self, A_ALLOW),
	/* System V and POSIX IPC, of the sandbox's own ipc namespace */
	S(shmget, A_ALLOW), S(shmat, A_ALLOW), S(shmctl, A_ALLOW), S(shmdt, A_ALLOW),
	S(semget, A_ALLOW), S(semop, A_ALLOW), S(semtimedop, A_ALLOW), S(semctl, A_ALLOW),
	S(msgget, A_ALLOW), S(msgsnd, A_ALLOW), S(msgrcv, A_ALLOW), S(msgctl, A_ALLOW),
	S(mq_open, A_ALLOW), S(mq_unlink, A_ALLOW), S(mq_timedsend, A_ALLOW),
	S(mq_timedreceive, A_ALLOW), S(mq_notify, A_ALLOW), S(mq_getsetattr, A_ALLOW),
	/* sockets */
	S(socket, A_SOCKET), S(socketpair, A_SOCKETPAIR), S(connect, A_ALLOW),
	S(accept, A_ALLOW), S(accept4, A_ALLOW), S(sendto, A_ALLOW), S(recvfrom, A_ALLOW),
	S(sendmsg, A_ALLOW), S(recvmsg, A_ALLOW), S(sendmmsg, A_ALLOW),
	S(recvmmsg, A_ALLOW), S(shutdown, A_ALLOW), S(bind, A_ALLOW), S(listen, A_ALLOW),
	S(getsockname, A_ALLOW), S(getpeername, A_ALLOW), S(setsockopt, A_ALLOW),
	S(getsockopt, A_ALLOW),

	/* refused with EPERM: kernel-wide state */
	S(init_module, A_EPERM), S(finit_module, A_EPERM), S(delete_module, A_EPERM),
	S(kexec_load, A_EPERM), S(kexec_file_load, A_EPERM), S(bpf, A_EPERM),
	S(perf_event_open, A_EPERM), S(userfaultfd, A_EPERM), S(keyctl, A_EPERM),
	S(add_key, A_EPERM), S(request_key, A_EPERM), S(swapon, A_EPERM),
	S(swapoff, A_EPERM), S(reboot, A_EPERM), S(acct, A_EPERM), S(quotactl, A_EPERM),
	S(quotactl_fd, A_EPERM), S(syslog, A_EPERM), S(lookup_dcookie, A_EPERM),
	S(iopl, A_EPERM), S(ioperm, A_EPERM), S(modify_ldt, A_EPERM), S(vhangup, A_EPERM),
	S(uselib, A_EPERM), S(settimeofday, A_EPERM), S(clock_settime, A_EPERM),
	S(clock_adjtime, A_EPERM), S(adjtimex, A_EPERM),
	/* mounts and namespaces */
	S(mount, A_EPERM), S(umount2, A_EPERM), S(pivot_root, A_EPERM), S(chroot, A_EPERM),
	S(unshare, A_EPERM), S(setns, A_EPERM), S(open_tree, A_EPERM),
	S(open_tree_attr, A_EPERM), S(move_mount, A_EPERM), S(fsopen, A_EPERM),
	S(fsconfig, A_EPERM), S(fsmount, A_EPERM), S(fspick, A_EPERM),
	S(mount_setattr, A_EPERM), S(statmount, A_EPERM), S(listmount, A_EPERM),
	/* other processes */
	S(ptrace, A_EPERM), S(process_vm_readv, A_EPERM), S(process_vm_writev, A_EPERM),
	S(process_madvise, A_EPERM), S(process_mrelease, A_EPERM), S(pidfd_getfd, A_EPERM),
	S(kcmp, A_EPERM),
	/* paths unchecked, the whole node's file events */
	S(open_by_handle_at, A_EPERM), S(name_to_handle_at, A_EPERM),
	S(fanotify_init, A_EPERM), S(fanotify_mark, A_EPERM),
	S(io_uring_setup, A_IO_URING), S(io_uring_enter, A_IO_URING),
	S(io_uring_register, A_IO_URING),
};

/* Personality values Docker's default profile allows too. */
static const uint32_t personalities[] = { 0x0, 0x8, 0x20000, 0x20008, 0xffffffffu };

/* (type, number) of the ioctls that swap, clone or dedupe file contents. */
static const uint32_t file_ioctls[] = {
	0x9409,   /* FICLONE (also BTRFS_IOC_CLONE) */
	0x940d,   /* FICLONERANGE */
	0x9436,   /* FIDEDUPERANGE */
	0x586d,   /* XFS_IOC_SWAPEXT ('X', 109) */
	0x5881,   /* XFS_IOC_EXCHANGE_RANGE ('X', 129) */
	0x5882,   /* XFS_IOC_START_COMMIT ('X', 130) */
	0x5883,   /* XFS_IOC_COMMIT_RANGE ('X', 131) */
};

#define CLONE_NS_FLAGS (CLONE_NEWNS | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | \
                        CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP | CLONE_NEWTIME)

/* The socket families a policy can name (socket_families), in the order of
 * the sandbox's SANDBOX_FAMILY_* bits. */
enum { FAM_UNIX, FAM_INET, FAM_INET6, FAM_NETLINK };

/* Offsets into struct seccomp_data; an argument's low 32 bits (little endian). */
#define OFF_NR   offsetof(struct seccomp_data, nr)
#define OFF_ARCH offsetof(struct seccomp_data, arch)
#define OFF_ARG(i) (offsetof(struct seccomp_data, args) + 8 * (i))

#define RET_ERRNO(e) (SECCOMP_RET_ERRNO | ((e) & SECCOMP_RET_DATA))

/* ---- a small assembler: forward jumps to labels, resolved at the end ---- */

#define MAX_INSNS 1024
#define MAX_LABELS 64

struct prog {
	struct sock_filter v[MAX_INSNS];
	size_t n;
	int label_at[MAX_LABELS];
	struct { size_t at; int label; int which; } fix[MAX_INSNS];   /* which: 0 jt, 1 jf */
	size_t n_fix;
	int n_labels;
	/* instructions that let a family through, for seccomp.c to undo */
	struct { size_t insn; int family; } fam[8];
	size_t n_fam;
};

static void die(const char *what)
{
	fprintf(stderr, "seccomp-gen: %s\n", what);
	exit(1);
}

static size_t emit(struct prog *p, uint16_t code, uint32_t k, uint8_t jt, uint8_t jf)
{
	if (p->n >= MAX_INSNS)
		die("filter too long");
	p->v[p->n] = (struct sock_filter){ code, jt, jf, k };
	return p->n++;
}

static int label(struct prog *p)
{
	if (p->n_labels >= MAX_LABELS)
		die("too many labels");
	p->label_at[p->n_labels] = -1;
	return p->n_labels++;
}

static void place(struct prog *p, int l)
{
	p->label_at[l] = (int)p->n;
}

static void fixup(struct prog *p, size_t at, int l, int which)
{
	p->fix[p->n_fix].at = at;
	p->fix[p->n_fix].label = l;
	p->fix[p->n_fix].which = which;
	p->n_fix++;
}

/* Resolve the labels of the block just emitted (every jump is forward);
 * labels are local to a block. */
static void resolve(struct prog *p)
{
	for (size_t i = 0; i < p->n_fix; i++) {
		int to = p->label_at[p->fix[i].label];
		long off = (long)to - (long)p->fix[i].at - 1;

		if (to < 0 || off < 0 || off > 255)
			die("jump out of range");
		if (p->fix[i].which == 0)
			p->v[p->fix[i].at].jt = (uint8_t)off;
		else
			p->v[p->fix[i].at].jf = (uint8_t)off;
	}
	p->n_fix = 0;
	p->n_labels = 0;
}

static void ret(struct prog *p, uint32_t action)
{
	emit(p, BPF_RET | BPF_K, action, 0, 0);
}

static void load(struct prog *p, uint32_t off)
{
	emit(p, BPF_LD | BPF_W | BPF_ABS, off, 0, 0);
}

/* if (A == k) goto l; */
static size_t jeq_to(struct prog *p, uint32_t k, int l)
{
	size_t at = emit(p, BPF_JMP | BPF_JEQ | BPF_K, k, 0, 0);

	fixup(p, at, l, 0);
	return at;
}

/* ---- argument checks ----------------------------------------------------- */

static void block_ioctl(struct prog *p)
{
	int refuse = label(p);

	load(p, OFF_ARG(1));
	jeq_to(p, TIOCSTI, refuse);
	jeq_to(p, TIOCLINUX_REQ, refuse);
	emit(p, BPF_ALU | BPF_AND | BPF_K, 0xffff, 0, 0);
	for (size_t i = 0; i < ARRAY_SIZE(file_ioctls); i++)
		jeq_to(p, file_ioctls[i], refuse);
	ret(p, SECCOMP_RET_ALLOW);
	place(p, refuse);
	ret(p, RET_ERRNO(EPERM));
}

/* The kernel reads clone's flags as their low 32 bits. */
static void block_clone(struct prog *p)
{
	load(p, OFF_ARG(0));
	emit(p, BPF_ALU | BPF_AND | BPF_K, CLONE_NS_FLAGS, 0, 0);
	emit(p, BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1);
	ret(p, SECCOMP_RET_ALLOW);
	ret(p, RET_ERRNO(EPERM));
}

/* socket(family, type, protocol): each argument an int (low 32 bits). */
static void block_socket(struct prog *p)
{
	int allow = label(p), inet = label(p), netlink = label(p), noproto = label(p);
	static const uint32_t protos[] = { 0, IPPROTO_TCP, IPPROTO_UDP };
	size_t at;

	load(p, OFF_ARG(0));
	at = jeq_to(p, AF_UNIX, allow);
	p->fam[p->n_fam].insn = at, p->fam[p->n_fam++].family = FAM_UNIX;
	at = jeq_to(p, AF_INET, inet);
	p->fam[p->n_fam].insn = at, p->fam[p->n_fam++].family = FAM_INET;
	at = jeq_to(p, AF_INET6, inet);
	p->fam[p->n_fam].insn = at, p->fam[p->n_fam++].family = FAM_INET6;
	at = jeq_to(p, AF_NETLINK, netlink);
	p->fam[p->n_fam].insn = at, p->fam[p->n_fam++].family = FAM_NETLINK;
	ret(p, RET_ERRNO(EAFNOSUPPORT));
	place(p, inet);
	/* the type without SOCK_NONBLOCK and SOCK_CLOEXEC */
	load(p, OFF_ARG(1));
	emit(p, BPF_ALU | BPF_AND | BPF_K, 0xf, 0, 0);
	emit(p, BPF_JMP | BPF_JEQ | BPF_K, SOCK_STREAM, 1, 0);
	emit(p, BPF_JMP | BPF_JEQ | BPF_K, SOCK_DGRAM, 0, 0);
	fixup(p, p->n - 1, noproto, 1);
	load(p, OFF_ARG(2));
	for (size_t i = 0; i < ARRAY_SIZE(protos); i++)
		jeq_to(p, protos[i], allow);
	ret(p, RET_ERRNO(EPROTONOSUPPORT));
	place(p, netlink);
	load(p, OFF_ARG(2));
	jeq_to(p, NETLINK_ROUTE, allow);
	place(p, noproto);
	ret(p, RET_ERRNO(EPROTONOSUPPORT));
	place(p, allow);
	ret(p, SECCOMP_RET_ALLOW);
}

static void block_socketpair(struct prog *p)
{
	size_t at;

	load(p, OFF_ARG(0));
	at = emit(p, BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 1, 0);
	p->fam[p->n_fam].insn = at, p->fam[p->n_fam++].family = FAM_UNIX;
	ret(p, RET_ERRNO(EAFNOSUPPORT));
	ret(p, SECCOMP_RET_ALLOW);
}

/* personality(unsigned int): the low 32 bits. */
static void block_personality(struct prog *p)
{
	int allow = label(p);

	load(p, OFF_ARG(0));
	for (size_t i = 0; i < ARRAY_SIZE(personalities); i++)
		jeq_to(p, personalities[i], allow);
	ret(p, RET_ERRNO(EPERM));
	place(p, allow);
	ret(p, SECCOMP_RET_ALLOW);
}

/* preadv2(fd, iov, iovcnt, pos_l, pos_h, flags): RWF_NOWAIT would tell
 * whether the pages are cached. */
static void block_preadv2(struct prog *p)
{
	load(p, OFF_ARG(5));
	emit(p, BPF_JMP | BPF_JSET | BPF_K, RWF_NOWAIT_FLAG, 0, 1);
	ret(p, RET_ERRNO(EOPNOTSUPP));
	ret(p, SECCOMP_RET_ALLOW);
}

/* ---- the tree ------------------------------------------------------------- */

/* A run of syscall numbers [start, next run's start) with one action. */
struct run {
	uint32_t start;
	enum action action;
};

static void leaf(struct prog *p, enum action a, bool allow_io_uring)
{
	switch (a) {
	case A_ALLOW: ret(p, SECCOMP_RET_ALLOW); break;
	case A_EPERM: ret(p, RET_ERRNO(EPERM)); break;
	case A_SUCCEED: ret(p, RET_ERRNO(0)); break;
	case A_IO_URING: ret(p, allow_io_uring ? SECCOMP_RET_ALLOW : RET_ERRNO(EPERM)); break;
	case A_ENOSYS:
	case A_CLONE3: ret(p, RET_ERRNO(ENOSYS)); break;
	case A_IOCTL: block_ioctl(p); break;
	case A_CLONE: block_clone(p); break;
	case A_SOCKET: block_socket(p); break;
	case A_SOCKETPAIR: block_socketpair(p); break;
	case A_PERSONALITY: block_personality(p); break;
	case A_PREADV2: block_preadv2(p); break;
	}
	resolve(p);
}

/* How many instructions leaf() emits for a. */
static size_t leaf_size(enum action a, bool allow_io_uring)
{
	static struct prog scratch;

	memset(&scratch, 0, sizeof(scratch));
	leaf(&scratch, a, allow_io_uring);
	return scratch.n;
}

/* How many instructions tree() emits for runs [lo, hi). */
static size_t tree_size(const struct run *r, size_t lo, size_t hi, bool allow_io_uring)
{
	size_t mid, left;

	if (hi - lo == 1)
		return leaf_size(r[lo].action, allow_io_uring);
	mid = lo + (hi - lo) / 2;
	left = tree_size(r, lo, mid, allow_io_uring);
	return (left <= 255 ? 1 : 2) + left + tree_size(r, mid, hi, allow_io_uring);
}

/* A binary search over runs [lo, hi), the syscall number in A.  Every path
 * from the root to a leaf passes only comparisons of the number, and every
 * leaf returns: a leaf may load arguments into A. */
static void tree(struct prog *p, const struct run *r, size_t lo, size_t hi, bool allow_io_uring)
{
	size_t mid, left;

	if (hi - lo == 1) {
		leaf(p, r[lo].action, allow_io_uring);
		return;
	}
	mid = lo + (hi - lo) / 2;
	left = tree_size(r, lo, mid, allow_io_uring);
	if (left <= 255) {
		emit(p, BPF_JMP | BPF_JGE | BPF_K, r[mid].start, (uint8_t)left, 0);
	} else {
		emit(p, BPF_JMP | BPF_JGE | BPF_K, r[mid].start, 0, 1);
		emit(p, BPF_JMP | BPF_JA, (uint32_t)left, 0, 0);
	}
	tree(p, r, lo, mid, allow_io_uring);
	tree(p, r, mid, hi, allow_io_uring);
}

/* The runs of equal action over numbers 0 .. the highest in the table, then
 * ENOSYS up to 2^32 - 1 (x32 numbers never get here).  Neighbouring numbers
 * share a run only when they share a plain action: each argument check has a
 * run of its own. */
static size_t make_runs(struct run *runs, size_t max, bool allow_io_uring)
{
	enum action by_nr[1024] = { 0 };
	int top = 0;
	size_t n = 0;

	for (size_t i = 0; i < ARRAY_SIZE(table); i++) {
		int nr = table[i].nr;

		if (nr < 0 || nr >= (int)ARRAY_SIZE(by_nr))
			die("syscall number out of range");
		if (by_nr[nr] != A_ENOSYS)
			die("syscall listed twice");
		by_nr[nr] = table[i].action;
		if (nr > top)
			top = nr;
	}
	for (int nr = 0; nr <= top + 1; nr++) {
		enum action a = nr <= top ? by_nr[nr] : A_ENOSYS;

		/* the same return, the same run */
		if (a == A_IO_URING)
			a = allow_io_uring ? A_ALLOW : A_EPERM;
		if (a == A_CLONE3)
			a = A_ENOSYS;
		if (n && runs[n - 1].action == a && a <= A_EPERM)
			continue;
		if (n >= max)
			die("too many runs");
		runs[n++] = (struct run){ (uint32_t)nr, a };
	}
	return n;
}

static void build(struct prog *p, bool allow_io_uring)
{
	struct run runs[512];
	size_t n = make_runs(runs, ARRAY_SIZE(runs), allow_io_uring);

	memset(p, 0, sizeof(*p));
	/* i386 (int 0x80) and x32 (the x32 bit in the number) are killed */
	load(p, OFF_ARCH);
	emit(p, BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
	ret(p, SECCOMP_RET_KILL_PROCESS);
	load(p, OFF_NR);
	emit(p, BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1);
	ret(p, SECCOMP_RET_KILL_PROCESS);
	tree(p, runs, 0, n, allow_io_uring);
	if (tree_size(runs, 0, n, allow_io_uring) + 6 != p->n)
		die("tree size miscounted");
}

static void print(const char *name, const struct prog *p)
{
	printf("static const struct sock_filter %s[] = {\n", name);
	for (size_t i = 0; i < p->n; i++)
		printf("\t{ 0x%04x, %u, %u, 0x%08x },\n", p->v[i].code, p->v[i].jt, p->v[i].jf,
		       p->v[i].k);
	printf("};\n\n");
	printf("static const struct seccomp_family_insn %s_families[] = {\n", name);
	for (size_t i = 0; i < p->n_fam; i++) {
		/* seccomp.c undoes one by clearing jt: it must then fall through */
		if (p->v[p->fam[i].insn].jf != 0 || p->v[p->fam[i].insn].jt == 0)
			die("family instruction cannot be undone");
		printf("\t{ %zu, %d },\n", p->fam[i].insn, p->fam[i].family);
	}
	printf("};\n\n");
}

int main(void)
{
	static struct prog p;

	printf("/* Generated by sandbox/gen/seccomp.c when lazyroot is built: do not edit. */\n\n");
	printf("/* An instruction that lets socket family `family` (0 unix, 1 inet,\n"
	       " * 2 inet6, 3 netlink) through; clearing its jt makes it a no-op. */\n");
	printf("struct seccomp_family_insn {\n\tunsigned short insn;\n\tunsigned char family;\n};\n\n");
	build(&p, false);
	print("seccomp_filter_default", &p);
	build(&p, true);
	print("seccomp_filter_io_uring", &p);
	return fflush(stdout) == 0 ? 0 : 1;
}
