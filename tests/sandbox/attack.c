/*
 * attack.c — what a cheating or escaping agent tries, run inside a sandbox by
 * tests/integration/sandbox_*.sh.  Usage:
 *
 *   attack HOST_PIDNS_INODE ATTACK [ARGS...]
 *
 * Before anything else it checks that it runs in a pid namespace other than
 * the host's (whose /proc/self/ns/pid inode the test passes in) and as a
 * small pid, and refuses to act otherwise: these attacks must never run on
 * the host.  Each attack prints one "ok - ..." or "FAIL - ..." line per
 * attempt and exits 0 only when every attempt was refused as expected.
 * Built static, so that it runs on any root filesystem.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <linux/sched.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static int failures;

static void result(bool ok, const char *what, int err)
{
	printf("%s - %s (%s)\n", ok ? "ok" : "FAIL", what, err ? strerror(err) : "succeeded");
	if (!ok)
		failures++;
}

/* r is a syscall's return; the attempt must fail with want. */
static void expect_errno(long r, int want, const char *what)
{
	int e = r < 0 ? errno : 0;

	result(r < 0 && e == want, what, e);
}

/* The attempt must fail, with any error. */
static void expect_fail(long r, const char *what)
{
	int e = r < 0 ? errno : 0;

	result(r < 0, what, e);
}

static void refuse_on_host(const char *host_inode)
{
	struct stat st;

	if (stat("/proc/self/ns/pid", &st) < 0 || strtoull(host_inode, NULL, 10) == 0 ||
	    (unsigned long long)st.st_ino == strtoull(host_inode, NULL, 10) || getpid() > 64) {
		fprintf(stderr, "attack: not inside a sandbox's pid namespace; refusing to act\n");
		exit(3);
	}
}

/* ---- the file-swapping, cloning and dedupe ioctls ---------------------- */

static void attack_ioctls(void)
{
	static const struct { const char *name; unsigned long req; } reqs[] = {
		{ "FICLONE", 0x40049409ul },
		{ "FICLONERANGE", 0x4020940dul },
		{ "FIDEDUPERANGE", 0xc0189436ul },
		{ "XFS_IOC_SWAPEXT", 0xc0c0586dul },
		{ "XFS_IOC_EXCHANGE_RANGE", 0x40285881ul },
		{ "XFS_IOC_START_COMMIT", 0x80585882ul },
		{ "XFS_IOC_COMMIT_RANGE", 0x40585883ul },
	};
	static const unsigned long high[] = { 0, 1ul << 32, 0xffffffff00000000ul };
	char buf[256], what[128];
	int a, b;
	long r;

	a = open("/tmp/attack-a", O_RDWR | O_CREAT | O_TRUNC, 0644);
	b = open("/tmp/attack-b", O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (a < 0 || b < 0) {
		result(false, "create /tmp/attack-a and -b", errno);
		return;
	}
	memset(buf, 0, sizeof(buf));
	for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++)
		for (size_t h = 0; h < sizeof(high) / sizeof(high[0]); h++) {
			snprintf(what, sizeof(what), "ioctl %s (%#lx) refused", reqs[i].name,
			         reqs[i].req | high[h]);
			/* FICLONE takes the source fd as its argument; the others a struct. */
			r = syscall(SYS_ioctl, a, reqs[i].req | high[h],
			            i == 0 ? (unsigned long)b : (unsigned long)buf);
			expect_errno(r, EPERM, what);
		}
	/* The filter is not a blanket ban on ioctl. */
	{
		int n = -1;

		r = ioctl(a, FIONREAD, &n);
		result(r == 0, "ioctl FIONREAD still works", r < 0 ? errno : 0);
	}
}

/* ---- syscalls the sandbox never needs ---------------------------------- */

static void attack_syscalls(void)
{
	struct clone_args ca = { .flags = CLONE_NEWUSER, .exit_signal = SIGCHLD };
	struct io_uring_params p = { 0 };
	int fd;
	long r;

	expect_errno(mount("none", "/tmp", "tmpfs", 0, NULL), EPERM, "mount tmpfs");
	expect_errno(mount("/", "/mnt", NULL, MS_BIND, NULL), EPERM, "bind mount");
	expect_errno(umount2("/proc", MNT_DETACH), EPERM, "umount /proc");
	expect_errno(umount2("/", MNT_DETACH), EPERM, "umount /");
	expect_errno(syscall(SYS_pivot_root, "/tmp", "/tmp"), EPERM, "pivot_root");
	expect_errno(unshare(CLONE_NEWUSER), EPERM, "unshare user namespace");
	expect_errno(unshare(CLONE_NEWNS), EPERM, "unshare mount namespace");
	expect_errno(unshare(CLONE_NEWNET), EPERM, "unshare net namespace");
	fd = open("/proc/self/ns/net", O_RDONLY);
	expect_errno(setns(fd, 0), EPERM, "setns");
	expect_errno(syscall(SYS_open_tree, AT_FDCWD, "/", 1), EPERM, "open_tree");
	expect_errno(syscall(SYS_move_mount, -1, "", AT_FDCWD, "/tmp", 4), EPERM, "move_mount");
	expect_errno(syscall(SYS_fsopen, "tmpfs", 0), EPERM, "fsopen");
	expect_errno(syscall(SYS_fsmount, -1, 0, 0), EPERM, "fsmount");
	expect_errno(syscall(SYS_fsconfig, -1, 0, NULL, NULL, 0), EPERM, "fsconfig");
	expect_errno(syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0), EPERM,
	             "clone(CLONE_NEWUSER)");
	expect_errno(syscall(SYS_clone, CLONE_NEWNET | SIGCHLD, 0, 0, 0, 0), EPERM,
	             "clone(CLONE_NEWNET)");
	r = syscall(SYS_clone3, &ca, sizeof(ca));
	if (r == 0)
		_exit(0);
	expect_errno(r, ENOSYS, "clone3 (flags unseen by seccomp)");
	expect_errno(syscall(SYS_init_module, NULL, 0, ""), EPERM, "init_module");
	expect_errno(syscall(SYS_finit_module, 0, "", 0), EPERM, "finit_module");
	expect_errno(syscall(SYS_delete_module, "ext4", 0), EPERM, "delete_module");
	expect_errno(syscall(SYS_kexec_load, 0, 0, NULL, 0), EPERM, "kexec_load");
	expect_errno(syscall(SYS_kexec_file_load, -1, -1, 0, "", 0), EPERM, "kexec_file_load");
	expect_errno(syscall(SYS_bpf, 0, NULL, 0), EPERM, "bpf");
	expect_errno(syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0), EPERM, "perf_event_open");
	expect_errno(syscall(SYS_userfaultfd, 1 /* UFFD_USER_MODE_ONLY */), EPERM, "userfaultfd");
	expect_errno(syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -2, 0), EPERM, "keyctl");
	expect_errno(syscall(SYS_add_key, "user", "k", "v", 1, -2), EPERM, "add_key");
	expect_errno(syscall(SYS_request_key, "user", "k", NULL, 0), EPERM, "request_key");
	expect_errno(ptrace(PTRACE_ATTACH, 1, 0, 0), EPERM, "ptrace the init");
	expect_errno(ptrace(PTRACE_TRACEME, 0, 0, 0), EPERM, "ptrace traceme");
	expect_errno(syscall(SYS_io_uring_setup, 8, &p), EPERM, "io_uring_setup");
	expect_errno(syscall(SYS_io_uring_enter, 0, 0, 0, 0, NULL, 0), EPERM, "io_uring_enter");
	expect_errno(syscall(SYS_io_uring_register, 0, 0, NULL, 0), EPERM, "io_uring_register");
	expect_errno(syscall(SYS_open_by_handle_at, AT_FDCWD, NULL, 0), EPERM, "open_by_handle_at");
}

/* ---- host files, host processes, the init's descriptors ---------------- */

static void attack_host_files(int argc, char **argv)
{
	char path[4096];

	for (int i = 0; i < argc; i++) {
		snprintf(path, sizeof(path), "read host file %s", argv[i]);
		expect_fail(open(argv[i], O_RDONLY), path);
		snprintf(path, sizeof(path), "/proc/self/root%s", argv[i]);
		expect_fail(open(path, O_RDONLY), "read it through /proc/self/root");
		snprintf(path, sizeof(path), "/proc/1/root%s", argv[i]);
		expect_fail(open(path, O_RDONLY), "read it through /proc/1/root");
		snprintf(path, sizeof(path), "../../../../../../..%s", argv[i]);
		expect_fail(open(path, O_RDONLY), "read it through ../..");
	}
	/* The init holds the launcher's socket: it must be out of reach. */
	expect_fail(open("/proc/1/fd/3", O_RDWR), "open the init's socket /proc/1/fd/3");
	expect_fail(open("/proc/1/fd/0", O_RDONLY), "open /proc/1/fd/0");
	expect_fail(open("/proc/1/mem", O_RDONLY), "open /proc/1/mem");
	expect_fail(open("/dev/sda", O_RDONLY), "open a host disk /dev/sda");
	expect_fail(open("/dev/vda", O_RDONLY), "open a host disk /dev/vda");
	expect_fail(open("/dev/kmsg", O_RDONLY), "open /dev/kmsg");
	expect_fail(open("/proc/kcore", O_RDONLY), "open /proc/kcore");
}

static void attack_signal(const char *pid_s)
{
	pid_t pid = (pid_t)atoi(pid_s);

	expect_errno(kill(pid, SIGKILL), ESRCH, "kill the host process by its host pid");
	expect_errno(syscall(SYS_pidfd_open, pid, 0), ESRCH, "pidfd_open the host process");
	expect_errno(ptrace(PTRACE_ATTACH, pid, 0, 0), EPERM, "ptrace the host process");
	/* Were the init to die, so would this process, before the next line. */
	kill(1, SIGKILL);
	result(kill(1, 0) == 0, "SIGKILL to the init is ignored", 0);
	/* Every process we can see is ours: -1 reaches nothing outside. */
	result(kill(-1, 0) == 0 || errno == ESRCH, "kill(-1) stays inside", 0);
}

/* ---- /proc/sys, /sys ---------------------------------------------------- */

static void attack_write_proc_sys(void)
{
	static const char *const files[] = {
		"/proc/sys/kernel/hostname", "/proc/sys/kernel/panic", "/proc/sys/vm/drop_caches",
		"/proc/sys/kernel/sysrq", "/proc/sysrq-trigger", "/proc/sys/net/ipv4/ip_forward",
		"/sys/kernel/mm/transparent_hugepage/enabled", "/sys/power/state",
		"/sys/class/net/lo/mtu", "/sys/fs/cgroup/cgroup.procs",
	};
	char what[256];

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(what, sizeof(what), "open %s for writing", files[i]);
		expect_fail(open(files[i], O_WRONLY), what);
	}
	expect_fail(mkdir("/sys/attack", 0755), "mkdir in /sys");
	expect_fail(mkdir("/proc/sys/attack", 0755), "mkdir in /proc/sys");
	expect_fail(mknod("/tmp/sda", S_IFBLK | 0600, makedev(8, 0)), "mknod a block device");
}

/* ---- network ------------------------------------------------------------ */

static void attack_net(int argc, char **argv)
{
	char line[512], what[128];
	FILE *f = fopen("/proc/net/dev", "r");
	int ifaces = 0, others = 0;

	while (f && fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':'), *name = line;

		if (!colon)
			continue;
		*colon = '\0';
		while (*name == ' ')
			name++;
		ifaces++;
		if (strcmp(name, "lo")) {
			others++;
			printf("  interface %s\n", name);
		}
	}
	if (f)
		fclose(f);
	result(ifaces == 1 && others == 0, "loopback is the only interface", 0);
	/* Each ADDR:PORT the test serves on the host must be unreachable. */
	for (int i = 0; i < argc; i++) {
		char *colon = strrchr(argv[i], ':');
		struct sockaddr_in sa = { .sin_family = AF_INET };
		int s = socket(AF_INET, SOCK_STREAM, 0);

		if (!colon)
			continue;
		*colon = '\0';
		sa.sin_port = htons((uint16_t)atoi(colon + 1));
		inet_pton(AF_INET, argv[i], &sa.sin_addr);
		snprintf(what, sizeof(what), "connect to the host's %s:%s", argv[i], colon + 1);
		expect_fail(connect(s, (struct sockaddr *)&sa, sizeof(sa)), what);
		close(s);
	}
	/* A scan of the low ports finds nothing. */
	{
		int open_ports = 0;

		for (int port = 1; port < 1024; port++) {
			struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
			                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
			int s = socket(AF_INET, SOCK_STREAM, 0);

			if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0)
				open_ports++;
			close(s);
		}
		result(open_ports == 0, "port scan 127.0.0.1:1-1023 finds nothing", 0);
	}
}

/* ---- overwrite system binaries ------------------------------------------ */

static void attack_overwrite(int argc, char **argv)
{
	static const char payload[] = "#!/bin/cat\nintercepted by the agent\n";
	char what[256], back[64];

	for (int i = 0; i < argc; i++) {
		int fd = open(argv[i], O_WRONLY | O_TRUNC);
		ssize_t n = -1;

		if (fd >= 0) {
			n = write(fd, payload, sizeof(payload) - 1);
			close(fd);
		}
		/* Inside, the overwrite is allowed: it lands on the sandbox's own copy. */
		snprintf(what, sizeof(what), "overwrite %s inside (own copy)", argv[i]);
		result(n == (ssize_t)sizeof(payload) - 1, what, n < 0 ? errno : 0);
		fd = open(argv[i], O_RDONLY);
		n = fd >= 0 ? read(fd, back, sizeof(back)) : -1;
		if (fd >= 0)
			close(fd);
		snprintf(what, sizeof(what), "%s reads back the payload inside", argv[i]);
		result(n == (ssize_t)sizeof(payload) - 1 && !memcmp(back, payload, (size_t)n), what, 0);
	}
}

/* ---- fill the disk -------------------------------------------------------- */

static void attack_fill(const char *path)
{
	static char buf[1 << 20];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	long long total = 0;
	ssize_t n;

	memset(buf, 'x', sizeof(buf));
	while (fd >= 0 && (n = write(fd, buf, sizeof(buf))) > 0)
		total += n;
	printf("  wrote %lld bytes\n", total);
	expect_errno(fd < 0 ? -1 : n, ENOSPC, "filling the disk ends in ENOSPC");
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: attack HOST_PIDNS_INODE ATTACK [ARGS...]\n");
		return 2;
	}
	refuse_on_host(argv[1]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(argv[2], "ioctls"))
		attack_ioctls();
	else if (!strcmp(argv[2], "syscalls"))
		attack_syscalls();
	else if (!strcmp(argv[2], "host-files"))
		attack_host_files(argc - 3, argv + 3);
	else if (!strcmp(argv[2], "signal") && argc == 4)
		attack_signal(argv[3]);
	else if (!strcmp(argv[2], "write-proc-sys"))
		attack_write_proc_sys();
	else if (!strcmp(argv[2], "net"))
		attack_net(argc - 3, argv + 3);
	else if (!strcmp(argv[2], "overwrite"))
		attack_overwrite(argc - 3, argv + 3);
	else if (!strcmp(argv[2], "fill") && argc == 4)
		attack_fill(argv[3]);
	else {
		fprintf(stderr, "attack: unknown attack '%s'\n", argv[2]);
		return 2;
	}
	return failures ? 1 : 0;
}
