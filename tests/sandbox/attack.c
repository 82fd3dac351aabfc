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
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>   /* before the linux headers, which then skip their copies */
#include <linux/io_uring.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/route.h>
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
#include <sys/mman.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIN(a, b) ((a) < (b) ? (a) : (b))

#include "attack.h"

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

/* Change the network namespace itself: a pooled one outlives the sandbox,
 * so nothing of it may be changed from inside (its owner is a user namespace
 * of the pool's, in which the sandbox has no capability, and the sandbox's
 * capabilities are dropped besides). */
static void attack_netns(void)
{
	int s = socket(AF_INET, SOCK_DGRAM, 0), nl;
	struct ifreq ifr = { 0 };
	struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
	struct rtentry rt = { 0 };
	struct {
		struct nlmsghdr h;
		struct ifinfomsg i;
		char attrs[64];
	} req = { 0 };
	struct rtattr *a, *info, *kind;
	char reply[512];
	ssize_t n;

	strcpy(ifr.ifr_name, "lo");
	ioctl(s, SIOCGIFFLAGS, &ifr);
	ifr.ifr_flags &= ~IFF_UP;
	expect_errno(ioctl(s, SIOCSIFFLAGS, &ifr), EPERM, "bring the loopback down");
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo:9");
	sin->sin_family = AF_INET;
	inet_pton(AF_INET, "10.9.9.9", &sin->sin_addr);
	expect_errno(ioctl(s, SIOCSIFADDR, &ifr), EPERM, "add an address to the loopback");
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo");
	ifr.ifr_mtu = 1280;
	expect_errno(ioctl(s, SIOCSIFMTU, &ifr), EPERM, "change the loopback's mtu");
	sin = (struct sockaddr_in *)&rt.rt_dst;
	sin->sin_family = AF_INET;
	inet_pton(AF_INET, "10.8.0.0", &sin->sin_addr);
	sin = (struct sockaddr_in *)&rt.rt_genmask;
	sin->sin_family = AF_INET;
	inet_pton(AF_INET, "255.255.0.0", &sin->sin_addr);
	rt.rt_dev = (char *)"lo";
	rt.rt_flags = RTF_UP;
	expect_errno(ioctl(s, SIOCADDRT, &rt), EPERM, "add a route");
	close(s);

	/* ip link add lrattack type dummy */
	req.h.nlmsg_type = RTM_NEWLINK;
	req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
	req.h.nlmsg_seq = 1;
	a = (struct rtattr *)req.attrs;
	a->rta_type = IFLA_IFNAME;
	a->rta_len = RTA_LENGTH(sizeof("lrattack"));
	memcpy(RTA_DATA(a), "lrattack", sizeof("lrattack"));
	info = (struct rtattr *)((char *)a + RTA_ALIGN(a->rta_len));
	info->rta_type = IFLA_LINKINFO;
	kind = RTA_DATA(info);
	kind->rta_type = IFLA_INFO_KIND;
	kind->rta_len = RTA_LENGTH(sizeof("dummy"));
	memcpy(RTA_DATA(kind), "dummy", sizeof("dummy"));
	info->rta_len = RTA_LENGTH(RTA_ALIGN(kind->rta_len));
	req.h.nlmsg_len = NLMSG_LENGTH(sizeof(req.i)) + RTA_ALIGN(a->rta_len) +
	                  RTA_ALIGN(info->rta_len);
	nl = socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE);
	n = nl >= 0 && send(nl, &req, req.h.nlmsg_len, 0) >= 0 ? recv(nl, reply, sizeof(reply), 0) : -1;
	if (n >= (ssize_t)NLMSG_LENGTH(sizeof(struct nlmsgerr)) &&
	    ((struct nlmsghdr *)reply)->nlmsg_type == NLMSG_ERROR) {
		int e = -((struct nlmsgerr *)NLMSG_DATA(reply))->error;

		result(e == EPERM, "ip link add lrattack type dummy", e);
	} else {
		result(false, "ip link add lrattack type dummy: no netlink answer", errno);
	}
	if (nl >= 0)
		close(nl);
	expect_fail(open("/proc/sys/net/ipv4/ip_unprivileged_port_start", O_WRONLY),
	            "write the namespace's sysctl ip_unprivileged_port_start");
	expect_fail(open("/proc/sys/net/ipv4/ping_group_range", O_WRONLY),
	            "write the namespace's sysctl ping_group_range");
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

/* ---- shared budgets: per-user kernel limits ------------------------------ */

/* Take one of KIND; 0 or -errno.  *fds gets the descriptors that hold it. */
static int budget_take(const char *kind, int fds[2])
{
	fds[0] = fds[1] = -1;
	if (!strcmp(kind, "inotify")) {
		fds[0] = (int)syscall(SYS_inotify_init1, O_CLOEXEC);
		return fds[0] < 0 ? -errno : 0;
	}
	/* System V IPC objects of the sandbox's ipc namespace: they outlive
	 * every process (until the namespace ends), so nothing holds them */
	if (!strcmp(kind, "msgqueues"))
		return msgget(IPC_PRIVATE, IPC_CREAT | 0600) < 0 ? -errno : 0;
	if (!strcmp(kind, "shm"))
		return shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600) < 0 ? -errno : 0;
	if (!strcmp(kind, "semsets"))
		return semget(IPC_PRIVATE, 1, IPC_CREAT | 0600) < 0 ? -errno : 0;
	if (!strcmp(kind, "ptys")) {
		fds[0] = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
		return fds[0] < 0 ? -errno : 0;
	}
	if (!strcmp(kind, "pipes")) {
		/* A pipe of 1 MiB: refused (EPERM) once the user's pipe pages are
		 * past fs.pipe-user-pages-soft, when new pipes also shrink. */
		if (pipe2(fds, O_CLOEXEC) < 0)
			return -errno;
		if (fcntl(fds[0], F_GETPIPE_SZ) < 65536)
			return -ENOBUFS;
		return fcntl(fds[0], F_SETPIPE_SZ, 1 << 20) < 0 ? -errno : 0;
	}
	if (!strcmp(kind, "inflight")) {
		/* A socket pair with 253 descriptors in flight, never received:
		 * the kernel counts them against the sending user until
		 * RLIMIT_NOFILE, then refuses with ETOOMANYREFS. */
		char byte = 'x', ctl[CMSG_SPACE(253 * sizeof(int))];
		struct iovec iov = { &byte, 1 };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
		                     .msg_controllen = sizeof(ctl) };
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		int *p = (int *)CMSG_DATA(c);

		if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, fds) < 0)
			return -errno;
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(253 * sizeof(int));
		for (int i = 0; i < 253; i++)
			p[i] = fds[0];
		return sendmsg(fds[1], &mh, 0) < 0 ? -errno : 0;
	}
	return -EINVAL;
}

/* Exhaust KIND, report how many it took and why it stopped, say "held",
 * and hold everything until stdin ends. */
static void attack_hog(const char *kind)
{
	char line[64];
	int fds[2], n = 0, r;

	while ((r = budget_take(kind, fds)) == 0 && n < 100000)
		n++;
	printf("took %d %s (%s)\n", n, kind, r ? strerror(-r) : "stopped");
	printf("held\n");
	result(n > 0 && r < 0, "exhausted the budget", -r);
	while (fgets(line, sizeof(line), stdin))
		;
}

/* KIND must still be there for this sandbox. */
static void attack_budget(const char *kind)
{
	int fds[2], r = budget_take(kind, fds);
	char what[64];

	snprintf(what, sizeof(what), "one more %s", kind);
	result(r == 0, what, -r);
}

/* The per-namespace limits the launcher set cannot be raised from inside:
 * each /proc/sys file reads as the policy says (argv: FILE=VALUE...), and a
 * write to it fails. */
static void attack_nslimits(int argc, char **argv)
{
	for (int i = 0; i < argc; i++) {
		char path[256], got[128] = "", what[320];
		const char *eq = strchr(argv[i], '=');
		ssize_t n;
		int fd;

		if (!eq)
			continue;
		snprintf(path, sizeof(path), "/proc/sys/%.*s", (int)(eq - argv[i]), argv[i]);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		n = fd < 0 ? -1 : read(fd, got, sizeof(got) - 1);
		if (fd >= 0)
			close(fd);
		if (n > 0 && got[n - 1] == '\n')
			got[n - 1] = '\0';
		for (char *t = got; *t; t++)
			if (*t == '\t')
				*t = ' ';
		snprintf(what, sizeof(what), "%s reads '%s'", path, eq + 1);
		result(n > 0 && !strcmp(got, eq + 1), what, n < 0 ? errno : 0);
		snprintf(what, sizeof(what), "raising %s", path);
		fd = open(path, O_WRONLY | O_CLOEXEC);
		n = fd < 0 ? -1 : write(fd, "1000", 4);
		expect_fail(n, what);
		if (fd >= 0)
			close(fd);
	}
}

/* ---- the launcher's terminal -------------------------------------------- */

/* No descriptor of the sandbox is a terminal of the host, and /dev/tty
 * (the controlling terminal) cannot be opened: nothing can be written to
 * the operator's screen past the output pipes, nor its settings or window
 * size changed. */
static void attack_tty(void)
{
	struct winsize ws = { .ws_row = 3, .ws_col = 7 };
	char what[64];

	for (int fd = 0; fd < 3; fd++) {
		snprintf(what, sizeof(what), "fd %d is no terminal (TIOCGWINSZ)", fd);
		expect_errno(ioctl(fd, TIOCGWINSZ, &ws), ENOTTY, what);
		snprintf(what, sizeof(what), "fd %d takes no window size (TIOCSWINSZ)", fd);
		expect_fail(ioctl(fd, TIOCSWINSZ, &ws), what);
	}
	expect_fail(open("/dev/tty", O_RDWR | O_NOCTTY), "open /dev/tty");
	result(write(0, "x", 1) < 0, "write to stdin", errno);
}

/* ---- what a writable bind keeps ------------------------------------------ */

/* In DIR (a writable bind), leave what could hurt whoever uses it next: a
 * setuid and a setgid executable, a setgid directory, files handed to host
 * root and to ids the sandbox does not have, a FIFO and a symlink to
 * /etc/shadow named like a result, a device node.  Each attempt prints what
 * it did; the test checks the host's side afterwards. */
static void attack_bind_leave(const char *dir)
{
	char p[512];
	int fd;

	snprintf(p, sizeof(p), "%s/suid", dir);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 04755);
	if (fd >= 0) {
		(void)!write(fd, "#!/bin/sh\nid\n", 14);
		fchmod(fd, 06755);
		close(fd);
	}
	printf("suid: %s\n", fd >= 0 ? "made" : strerror(errno));
	result(chown(p, 0, 0) == 0, "chown to root inside (own range)", errno);
	chmod(p, 06755);
	snprintf(p, sizeof(p), "%s/sgid-dir", dir);
	mkdir(p, 02777);
	chmod(p, 02777);
	snprintf(p, sizeof(p), "%s/sgid-dir/inner", dir);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 02755);
	if (fd >= 0)
		close(fd);
	snprintf(p, sizeof(p), "%s/nobody", dir);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0)
		close(fd);
	/* 65534 inside is still the sandbox's range on the host. */
	expect_fail(chown(p, 70000, 70000), "chown to an id not mapped inside");
	snprintf(p, sizeof(p), "%s/result.fifo", dir);
	printf("fifo: %s\n", mkfifo(p, 0666) == 0 ? "made" : strerror(errno));
	snprintf(p, sizeof(p), "%s/result.json", dir);
	printf("symlink: %s\n", symlink("/etc/shadow", p) == 0 ? "made" : strerror(errno));
	snprintf(p, sizeof(p), "%s/null", dir);
	expect_fail(mknod(p, S_IFCHR | 0666, makedev(1, 3)), "mknod a device");
	/* Deeper than the launcher walks: it must close the way down instead. */
	snprintf(p, sizeof(p), "%s/deep", dir);
	if (mkdir(p, 0755) == 0 && chdir(p) == 0) {
		for (int i = 0; i < 200; i++)
			if (mkdir("d", 0755) < 0 || chdir("d") < 0)
				break;
		fd = open("suid", O_WRONLY | O_CREAT | O_TRUNC, 04755);
		if (fd >= 0) {
			fchmod(fd, 04755);
			close(fd);
		}
		printf("deep suid: %s\n", fd >= 0 ? "made" : strerror(errno));
	}
}

/* ---- Landlock: writes outside the writable paths, hidden paths ------------ */

/* Each PATH must refuse every kind of write with EACCES (Landlock) or EROFS
 * (the read-only mount that also keeps its metadata): create, truncate,
 * write, mkdir, unlink, rename, symlink; and a path under a hidden directory
 * or a hidden file must refuse reads too when prefixed with "hidden:". */
static void attack_landlock(int argc, char **argv)
{
	char what[512], tmp[256];

	for (int i = 0; i < argc; i++) {
		bool hidden = !strncmp(argv[i], "hidden:", 7);
		const char *p = hidden ? argv[i] + 7 : argv[i];

		if (hidden) {
			snprintf(what, sizeof(what), "read hidden %s", p);
			expect_fail(open(p, O_RDONLY), what);
			snprintf(what, sizeof(what), "execute hidden %s", p);
			expect_fail(execl(p, p, (char *)NULL), what);
			continue;
		}
		snprintf(what, sizeof(what), "write to %s", p);
		expect_write_refused(open(p, O_WRONLY), what);
		snprintf(what, sizeof(what), "truncate %s", p);
		expect_write_refused(truncate(p, 0), what);
		snprintf(what, sizeof(what), "unlink %s", p);
		expect_write_refused(unlink(p), what);
		snprintf(tmp, sizeof(tmp), "%s.new", p);
		snprintf(what, sizeof(what), "create %s", tmp);
		expect_write_refused(open(tmp, O_WRONLY | O_CREAT, 0644), what);
		snprintf(what, sizeof(what), "mkdir %s", tmp);
		expect_write_refused(mkdir(tmp, 0755), what);
		snprintf(what, sizeof(what), "symlink %s", tmp);
		expect_write_refused(symlink("/tmp", tmp), what);
		snprintf(what, sizeof(what), "rename %s away", p);
		expect_write_refused(rename(p, tmp), what);
	}
}

/* The minimum of io_uring: submit one operation (sqe), wait for it, return
 * its result; an fd it returns is closed. */
static long uring_submit(const struct io_uring_sqe *op)
{
	struct io_uring_params p = { 0 };
	struct io_uring_sqe *sqes;
	struct io_uring_cqe *cqe;
	unsigned *sq_tail, *sq_array, *cq_head;
	void *sq, *cq;
	long r;
	int fd = (int)syscall(SYS_io_uring_setup, 4, &p);

	if (fd < 0)
		return -errno;
	sq = mmap(NULL, p.sq_off.array + p.sq_entries * sizeof(unsigned), PROT_READ | PROT_WRITE,
	          MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQ_RING);
	cq = mmap(NULL, p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe),
	          PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_CQ_RING);
	sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
	            MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQES);
	if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED) {
		close(fd);
		return -ENOMEM;
	}
	sq_tail = (unsigned *)((char *)sq + p.sq_off.tail);
	sq_array = (unsigned *)((char *)sq + p.sq_off.array);
	cq_head = (unsigned *)((char *)cq + p.cq_off.head);
	sqes[0] = *op;
	sq_array[*sq_tail & (p.sq_entries - 1)] = 0;
	__atomic_store_n(sq_tail, *sq_tail + 1, __ATOMIC_RELEASE);
	r = syscall(SYS_io_uring_enter, fd, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0);
	if (r < 0) {
		r = -errno;
	} else {
		cqe = (struct io_uring_cqe *)((char *)cq + p.cq_off.cqes) +
		      (*cq_head & (p.cq_entries - 1));
		r = cqe->res;
		if (r >= 0 && op->opcode == IORING_OP_OPENAT)
			close((int)r);
	}
	close(fd);
	return r;
}

static long uring_openat(const char *path, int flags)
{
	struct io_uring_sqe op = { .opcode = IORING_OP_OPENAT, .fd = AT_FDCWD,
	                           .addr = (unsigned long)path, .open_flags = (unsigned)flags,
	                           .len = 0644 };

	return uring_submit(&op);
}

/* io_uring OPENAT (unseen by seccomp): OK:PATH must open, any other PATH
 * must be refused with EACCES (by Landlock; EROFS for writing where a
 * read-only mount refuses first). "w:" prefixes open for writing. */
static void attack_uring(int argc, char **argv)
{
	char what[512];

	for (int i = 0; i < argc; i++) {
		const char *p = argv[i];
		bool ok = !strncmp(p, "OK:", 3);
		int flags = O_RDONLY;
		long r;

		if (ok)
			p += 3;
		if (!strncmp(p, "w:", 2)) {
			p += 2;
			flags = O_WRONLY | O_CREAT;
		}
		r = uring_openat(p, flags);
		snprintf(what, sizeof(what), "io_uring OPENAT %s %s%s", p,
		         flags == O_RDONLY ? "for reading" : "for writing",
		         ok ? " works" : " refused");
		if (ok)
			result(r >= 0, what, r < 0 ? (int)-r : 0);
		else
			result(r == -EACCES || (flags != O_RDONLY && r == -EROFS), what,
			       r < 0 ? (int)-r : 0);
	}
}

/* ---- the network allowlist ---------------------------------------------- */

/* The default gateway (the host side of the sandbox's veth), or 0. */
static in_addr_t gateway(void)
{
	char line[256], iface[32];
	unsigned dst, gw;
	FILE *f = fopen("/proc/net/route", "r");
	in_addr_t r = 0;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "%31s %x %x", iface, &dst, &gw) == 3 && dst == 0 && gw)
			r = gw;
	if (f)
		fclose(f);
	return r;
}

/* "gw" or a dotted address. */
static bool parse_target(char *spec, struct sockaddr_in *sa)
{
	char *colon = strrchr(spec, ':');

	if (!colon)
		return false;
	*colon = '\0';
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)atoi(colon + 1));
	if (!strcmp(spec, "gw"))   /* no gateway: an address of the veth range, unroutable */
		sa->sin_addr.s_addr = gateway() ? gateway() : htonl(0x64400001);
	else if (inet_pton(AF_INET, spec, &sa->sin_addr) != 1)
		return false;
	*colon = ':';
	return sa->sin_addr.s_addr != 0;
}

static int tcp_connect(const struct sockaddr_in *sa)
{
	int s = socket(AF_INET, SOCK_STREAM, 0), r;
	struct timeval tv = { 3, 0 };

	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	r = connect(s, (const struct sockaddr *)sa, sizeof(*sa));
	if (r < 0)
		r = -errno;
	close(s);
	return r;
}

/* One item:
 *   ok:ADDR:PORT        a TCP connect must succeed
 *   ADDR:PORT           a TCP connect must fail with EPERM (the BPF allowlist)
 *   udp:ADDR:PORT       a UDP sendto must fail with EPERM
 *   uring:ADDR:PORT     a TCP connect through io_uring must fail with EPERM
 *   tfo:ADDR:PORT       a TCP fast open (sendto with MSG_FASTOPEN) must fail
 *                       with EPERM
 *   v6:ADDR:PORT        a TCP connect to ::ffff:ADDR from an IPv6 socket must
 *                       fail with EPERM
 *   fail:ADDR:PORT      a TCP connect must fail, with any error
 *   scan:ADDR:LO-HI:N   connecting to every port LO..HI finds exactly port N
 *                       open (0: none)
 *   kill:PID            SIGKILL to PID (a process the test put into this pid
 *                       namespace from outside the sandbox, as the sandbox's
 *                       own uid) must fail with EPERM and PID stay alive
 *   abstract:NAME       connecting to the abstract unix socket @NAME must fail
 *   read:PATH           PATH must open for reading
 *   noread:PATH         PATH must not open for reading
 * ADDR is dotted IPv4 or "gw" (the host side of the veth; without one, an
 * address in the veth range that no route leads to). */
static void reach_one(char *item)
{
	char what[256], copy[128];
	struct sockaddr_in sa;
	const char *kind = "tcp";
	char *spec = item;
	long r;

	snprintf(copy, sizeof(copy), "%s", item);
	if (!strncmp(item, "kill:", 5)) {
		pid_t pid = (pid_t)atoi(item + 5);

		snprintf(what, sizeof(what), "signal pid %d outside the sandbox's Landlock domain", (int)pid);
		expect_errno(pid > 1 ? kill(pid, SIGKILL) : 0, EPERM, what);
		result(kill(pid, 0) < 0 && errno == EPERM, "it is still there", 0);
		return;
	}
	if (!strncmp(item, "abstract:", 9)) {
		struct sockaddr_un un = { .sun_family = AF_UNIX };
		size_t n = strnlen(item + 9, sizeof(un.sun_path) - 1);
		int s = socket(AF_UNIX, SOCK_STREAM, 0);

		memcpy(un.sun_path + 1, item + 9, n);
		r = connect(s, (struct sockaddr *)&un,
		            (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n));
		snprintf(what, sizeof(what), "connect to abstract socket @%s", item + 9);
		expect_fail(r, what);
		close(s);
		return;
	}
	if (!strncmp(item, "read:", 5) || !strncmp(item, "noread:", 7)) {
		int fd = open(strchr(item, ':') + 1, O_RDONLY);

		snprintf(what, sizeof(what), "%s %s", item[0] == 'r' ? "read" : "cannot read",
		         strchr(item, ':') + 1);
		result(item[0] == 'r' ? fd >= 0 : fd < 0, what, fd < 0 ? errno : 0);
		if (fd >= 0)
			close(fd);
		return;
	}
	if (!strncmp(item, "ok:", 3) || !strncmp(item, "fail:", 5) || !strncmp(item, "tfo:", 4) ||
	    !strncmp(item, "v6:", 3) || !strncmp(item, "udp:", 4) || !strncmp(item, "uring:", 6) ||
	    !strncmp(item, "scan:", 5)) {
		kind = item;
		spec = strchr(item, ':') + 1;
		spec[-1] = '\0';
	}
	if (!strcmp(kind, "scan")) {
		char *range = strchr(spec, ':'), *want, *dash;
		int lo, hi, found = 0, open_port = 0, expect;

		if (!range || !(dash = strchr(range, '-')) || !(want = strchr(dash, ':'))) {
			result(false, copy, EINVAL);
			return;
		}
		*range = '\0';
		lo = atoi(range + 1);
		hi = atoi(dash + 1);
		expect = atoi(want + 1);
		snprintf(what, sizeof(what), "%s:1", spec);
		if (!parse_target(what, &sa)) {
			result(false, copy, EINVAL);
			return;
		}
		for (int port = lo; port <= hi; port++) {
			sa.sin_port = htons((uint16_t)port);
			if (tcp_connect(&sa) == 0) {
				found++;
				open_port = port;
			}
		}
		snprintf(what, sizeof(what), "scan %s ports %d-%d finds %s%s", spec, lo, hi,
		         expect ? "only port " : "nothing", expect ? want + 1 : "");
		result(expect ? found == 1 && open_port == expect : found == 0, what, 0);
		return;
	}
	if (!parse_target(spec, &sa)) {
		result(false, copy, EINVAL);
		return;
	}
	if (!strcmp(kind, "fail")) {
		r = tcp_connect(&sa);
		snprintf(what, sizeof(what), "connect to %s fails", spec);
		result(r < 0, what, r < 0 ? (int)-r : 0);
	} else if (!strcmp(kind, "ok")) {
		r = tcp_connect(&sa);
		snprintf(what, sizeof(what), "connect to allowed %s works", spec);
		result(r == 0, what, r < 0 ? (int)-r : 0);
	} else if (!strcmp(kind, "udp")) {
		int s = socket(AF_INET, SOCK_DGRAM, 0);

		r = sendto(s, "x", 1, 0, (struct sockaddr *)&sa, sizeof(sa));
		snprintf(what, sizeof(what), "udp sendto %s refused", spec);
		expect_errno(r, EPERM, what);
		close(s);
	} else if (!strcmp(kind, "tfo")) {
		int s = socket(AF_INET, SOCK_STREAM, 0);

		r = sendto(s, "GET", 3, MSG_FASTOPEN, (struct sockaddr *)&sa, sizeof(sa));
		snprintf(what, sizeof(what), "TCP fast open to %s refused", spec);
		expect_errno(r, EPERM, what);
		close(s);
	} else if (!strcmp(kind, "v6")) {
		struct sockaddr_in6 sa6 = { .sin6_family = AF_INET6, .sin6_port = sa.sin_port };
		int s = socket(AF_INET6, SOCK_STREAM, 0);

		sa6.sin6_addr.s6_addr[10] = sa6.sin6_addr.s6_addr[11] = 0xff;
		memcpy(&sa6.sin6_addr.s6_addr[12], &sa.sin_addr, 4);
		r = connect(s, (struct sockaddr *)&sa6, sizeof(sa6));
		snprintf(what, sizeof(what), "IPv6 connect to ::ffff:%s refused", spec);
		expect_errno(r, EPERM, what);
		close(s);
	} else if (!strcmp(kind, "uring")) {
		int s = socket(AF_INET, SOCK_STREAM, 0);
		struct io_uring_sqe op = { .opcode = IORING_OP_CONNECT, .fd = s,
		                           .addr = (unsigned long)&sa, .off = sizeof(sa) };

		r = uring_submit(&op);
		snprintf(what, sizeof(what), "io_uring connect to %s refused", spec);
		result(r == -EPERM, what, r < 0 ? (int)-r : 0);
		close(s);
	} else {
		r = tcp_connect(&sa);
		snprintf(what, sizeof(what), "connect to %s refused", spec);
		result(r == -EPERM, what, r < 0 ? (int)-r : 0);
	}
}

/* Each argument is an item (reach_one); "-" then reads items from stdin, one
 * per line, answering each with "done" so that a test can act in between. */
static void attack_reach(int argc, char **argv)
{
	char line[256];

	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "-")) {
			reach_one(argv[i]);
			continue;
		}
		printf("ready\n");
		while (fgets(line, sizeof(line), stdin)) {
			line[strcspn(line, "\n")] = '\0';
			if (!line[0])
				break;
			reach_one(line);
			printf("done\n");
		}
	}
}

/* ---- the syscall allowlist ---------------------------------------------- */

/* The signal that ended a child running f, 0 when it exited, -1 when it
 * could not be run. */
static int child_signal(void (*f)(void))
{
	pid_t pid = fork();
	int st = 0;

	if (pid == 0) {
		f();
		_exit(0);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

/* Run f in a child; true when the child was killed by SIGSYS. */
static bool killed_by_sigsys(void (*f)(void))
{
	return child_signal(f) == SIGSYS;
}

static void x32_getpid(void)
{
	syscall(0x40000000 | SYS_getpid);
}

static void i386_getpid(void)
{
	long r = 20;   /* getpid on i386 */

	__asm__ volatile("int $0x80" : "+a"(r) : : "memory");
}

/* Refused are: what the allowlist does not name (ENOSYS, so that programs
 * fall back), what it names as dangerous (EPERM), other ABIs (killed), and
 * the page cache oracles.  Allowed newer syscalls still work. */
static void attack_allowlist(void)
{
	static const struct { long nr; const char *name; } eperm[] = {
		{ 467, "open_tree_attr" }, { 458, "listmount" }, { 457, "statmount" },
		{ SYS_modify_ldt, "modify_ldt" }, { SYS_kcmp, "kcmp" }, { 438, "pidfd_getfd" },
		{ 440, "process_madvise" }, { 448, "process_mrelease" },
		{ SYS_fanotify_init, "fanotify_init" }, { SYS_mount_setattr, "mount_setattr" },
		{ SYS_fspick, "fspick" }, { SYS_quotactl_fd, "quotactl_fd" }, { SYS_iopl, "iopl" },
		{ SYS_syslog, "syslog" }, { SYS_vhangup, "vhangup" }, { SYS_uselib, "uselib" },
		{ SYS_lookup_dcookie, "lookup_dcookie" }, { SYS_adjtimex, "adjtimex" },
	};
	/* Implemented by this kernel, not named by the allowlist. */
	static const struct { long nr; const char *name; } enosys[] = {
		{ 461, "lsm_list_modules" }, { 459, "lsm_get_self_attr" }, { 447, "memfd_secret" },
		{ SYS_set_thread_area, "set_thread_area" }, { SYS_get_thread_area, "get_thread_area" },
		{ SYS_migrate_pages, "migrate_pages" }, { SYS_move_pages, "move_pages" },
		{ SYS_sysfs, "sysfs" }, { SYS_ustat, "ustat" }, { 470, "470 (not in this kernel's table)" },
		{ 600, "600" }, { 0x3fffffff, "0x3fffffff" },
	};
	static const unsigned long bad_personas[] = {
		0x0040000 /* ADDR_NO_RANDOMIZE */, 0x0400000 /* READ_IMPLIES_EXEC */,
		0x0100000 /* MMAP_PAGE_ZERO */, 0x0000001 /* PER_SVR4 */,
		(1ul << 32) | 0x0040000,
	};
	char what[160], buf[16], vec[4];
	struct iovec iov = { buf, sizeof(buf) };
	void *m;
	int fd, sig;
	long r;

	for (size_t i = 0; i < sizeof(eperm) / sizeof(eperm[0]); i++) {
		snprintf(what, sizeof(what), "%s refused", eperm[i].name);
		expect_errno(syscall(eperm[i].nr, 0, 0, 0, 0, 0, 0), EPERM, what);
	}
	for (size_t i = 0; i < sizeof(enosys) / sizeof(enosys[0]); i++) {
		snprintf(what, sizeof(what), "%s unknown to the allowlist", enosys[i].name);
		expect_errno(syscall(enosys[i].nr, 0, 0, 0, 0, 0, 0), ENOSYS, what);
	}
	for (size_t i = 0; i < sizeof(bad_personas) / sizeof(bad_personas[0]); i++) {
		snprintf(what, sizeof(what), "personality(%#lx) refused", bad_personas[i]);
		expect_errno(syscall(SYS_personality, bad_personas[i]), EPERM, what);
	}
	r = syscall(SYS_personality, 0xffffffffUL);
	result(r >= 0 && (r & 0x0040000) == 0, "personality query works, no ADDR_NO_RANDOMIZE",
	       r < 0 ? errno : 0);
	r = syscall(SYS_personality, 0UL);
	result(r >= 0, "personality(PER_LINUX) works", r < 0 ? errno : 0);
	expect_errno(syscall(SYS_clone, CLONE_NEWNS | SIGCHLD | (1ul << 40), 0, 0, 0, 0), EPERM,
	             "clone(CLONE_NEWNS) with high bits set");
	result(killed_by_sigsys(x32_getpid), "an x32 syscall kills the process", 0);
	/* Some kernels (paravirtualized guests among them) have no int 0x80 gate
	 * for 64-bit processes: the instruction itself faults, outside any
	 * sandbox too, and no i386 syscall can be made to refuse. */
	sig = child_signal(i386_getpid);
	if (sig == SIGSEGV)
		result(true, "an i386 syscall (int 0x80) cannot be made here (SIGSEGV: no int 0x80 gate)", 0);
	else
		result(sig == SIGSYS, "an i386 syscall (int 0x80) kills the process", 0);

	/* The page cache: which pages of a file are cached is nobody's business. */
	fd = open("/bin/sh", O_RDONLY);
	m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
	expect_errno(m == MAP_FAILED ? 0 : mincore(m, 4096, (unsigned char *)vec), EPERM,
	             "mincore on a mapping of /bin/sh");
	expect_errno(syscall(451, fd, NULL, NULL, 0), EPERM, "cachestat");
	expect_errno(syscall(SYS_preadv2, fd, &iov, 1, 0, 0, 0x8 /* RWF_NOWAIT */), EOPNOTSUPP,
	             "preadv2 RWF_NOWAIT");
	expect_errno(syscall(SYS_preadv2, fd, &iov, 1, 0, 0, 0x8 | 0x1 | (1ul << 33)), EOPNOTSUPP,
	             "preadv2 RWF_NOWAIT|RWF_HIPRI with high bits");
	r = syscall(SYS_preadv2, fd, &iov, 1, 0, 0, 0);
	result(r > 0, "preadv2 without RWF_NOWAIT works", r < 0 ? errno : 0);

	/* Newer syscalls the allowlist names work. */
	r = syscall(462 /* mseal */, m, 4096, 0);
	result(r == 0, "mseal works", r < 0 ? errno : 0);
	close(open("/tmp/attack-chmod", O_WRONLY | O_CREAT, 0600));
	r = syscall(452 /* fchmodat2 */, AT_FDCWD, "/tmp/attack-chmod", 0644, 0);
	result(r == 0, "fchmodat2 works", r < 0 ? errno : 0);
	r = syscall(SYS_landlock_create_ruleset, NULL, 0, 1);
	result(r >= 6, "landlock ABI query works", r < 0 ? errno : 0);
	if (m != MAP_FAILED)
		munmap(m, 4096);
	close(fd);
}

/* ---- socket families ---------------------------------------------------- */

/* FAMILIES: which of unix, inet, inet6, netlink the policy allows (a
 * comma-separated list, or "all").  Each allowed one must work, each other
 * one, and every family, type and protocol outside them, must be refused. */
static void attack_sockets(const char *families)
{
	static const struct { int family, type, proto, err; const char *name; } refused[] = {
		{ 40, SOCK_STREAM, 0, EAFNOSUPPORT, "AF_VSOCK stream" },
		{ 40, SOCK_DGRAM, 0, EAFNOSUPPORT, "AF_VSOCK datagram" },
		{ AF_PACKET, SOCK_RAW, 0, EAFNOSUPPORT, "AF_PACKET" },
		{ 38, SOCK_SEQPACKET, 0, EAFNOSUPPORT, "AF_ALG" },
		{ 15, SOCK_RAW, 2, EAFNOSUPPORT, "AF_KEY" },
		{ 30, SOCK_RDM, 0, EAFNOSUPPORT, "AF_TIPC" },
		{ 21, SOCK_SEQPACKET, 0, EAFNOSUPPORT, "AF_RDS" },
		{ 29, SOCK_RAW, 1, EAFNOSUPPORT, "AF_CAN" },
		{ 44, SOCK_RAW, 0, EAFNOSUPPORT, "AF_XDP" },
		{ 31, SOCK_STREAM, 0, EAFNOSUPPORT, "AF_BLUETOOTH" },
		{ 3, SOCK_DGRAM, 0, EAFNOSUPPORT, "AF_AX25" },
		{ 0, SOCK_STREAM, 0, EAFNOSUPPORT, "AF_UNSPEC" },
		{ AF_INET, SOCK_DGRAM, 136, EPROTONOSUPPORT, "UDP-Lite (IPPROTO_UDPLITE)" },
		{ AF_INET6, SOCK_DGRAM, 136, EPROTONOSUPPORT, "UDP-Lite over IPv6" },
		{ AF_INET, SOCK_STREAM, 262, EPROTONOSUPPORT, "MPTCP (IPPROTO_MPTCP)" },
		{ AF_INET6, SOCK_STREAM, 262, EPROTONOSUPPORT, "MPTCP over IPv6" },
		{ AF_INET, SOCK_SEQPACKET, 132, EPROTONOSUPPORT, "SCTP" },
		{ AF_INET, SOCK_SEQPACKET, 0, EPROTONOSUPPORT, "AF_INET seqpacket" },
		{ AF_INET, SOCK_RAW, IPPROTO_ICMP, EPROTONOSUPPORT, "raw ICMP" },
		{ AF_INET, SOCK_DGRAM, IPPROTO_ICMP, EPROTONOSUPPORT, "ICMP datagram" },
		{ AF_INET, 10 /* SOCK_PACKET */, 0, EPROTONOSUPPORT, "SOCK_PACKET" },
		{ AF_INET, SOCK_STREAM, 33 /* DCCP */, EPROTONOSUPPORT, "DCCP" },
		{ AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT, EPROTONOSUPPORT, "netlink uevents" },
		{ AF_NETLINK, SOCK_DGRAM, NETLINK_KOBJECT_UEVENT, EPROTONOSUPPORT,
		  "netlink uevents (datagram)" },
		{ AF_NETLINK, SOCK_RAW, NETLINK_SOCK_DIAG, EPROTONOSUPPORT, "netlink sock_diag" },
		{ AF_NETLINK, SOCK_RAW, NETLINK_AUDIT, EPROTONOSUPPORT, "netlink audit" },
		{ AF_NETLINK, SOCK_RAW, NETLINK_GENERIC, EPROTONOSUPPORT, "netlink generic" },
		{ AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER, EPROTONOSUPPORT, "netlink netfilter" },
		{ AF_NETLINK, SOCK_RAW, NETLINK_XFRM, EPROTONOSUPPORT, "netlink xfrm" },
		{ AF_NETLINK, SOCK_RAW, NETLINK_CONNECTOR, EPROTONOSUPPORT, "netlink connector" },
	};
	static const struct { int family, type, proto; const char *name, *policy; } allowed[] = {
		{ AF_UNIX, SOCK_STREAM, 0, "unix stream", "unix" },
		{ AF_UNIX, SOCK_DGRAM, 0, "unix datagram", "unix" },
		{ AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, "unix seqpacket", "unix" },
		{ AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0, "inet stream", "inet" },
		{ AF_INET, SOCK_STREAM, IPPROTO_TCP, "inet TCP", "inet" },
		{ AF_INET, SOCK_DGRAM, IPPROTO_UDP, "inet UDP", "inet" },
		{ AF_INET6, SOCK_STREAM, 0, "inet6 stream", "inet6" },
		{ AF_INET6, SOCK_DGRAM, 0, "inet6 datagram", "inet6" },
		{ AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE, "netlink route", "netlink" },
		{ AF_NETLINK, SOCK_DGRAM, NETLINK_ROUTE, "netlink route (datagram)", "netlink" },
	};
	char what[160], list[64];
	int sv[2];
	long r;

	snprintf(list, sizeof(list), ",%s,", !strcmp(families, "all") ?
	         "unix,inet,inet6,netlink" : families);
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		int err = refused[i].err;
		char fam[16] = "";

		/* a refused protocol of a family the policy left out is refused
		 * for its family */
		if (refused[i].family == AF_INET) snprintf(fam, sizeof(fam), ",inet,");
		if (refused[i].family == AF_INET6) snprintf(fam, sizeof(fam), ",inet6,");
		if (refused[i].family == AF_NETLINK) snprintf(fam, sizeof(fam), ",netlink,");
		if (fam[0] && !strstr(list, fam))
			err = EAFNOSUPPORT;
		snprintf(what, sizeof(what), "socket %s refused", refused[i].name);
		expect_errno(socket(refused[i].family, refused[i].type, refused[i].proto), err, what);
	}
	/* The family is an int: high bits do not make AF_VSOCK pass. */
	expect_errno(syscall(SYS_socket, (1ul << 32) | 40, SOCK_STREAM, 0), EAFNOSUPPORT,
	             "socket AF_VSOCK with high bits refused");
	expect_errno(socketpair(40, SOCK_STREAM, 0, sv), EAFNOSUPPORT, "socketpair AF_VSOCK refused");
	expect_errno(socketpair(AF_INET, SOCK_STREAM, 0, sv), EAFNOSUPPORT,
	             "socketpair AF_INET refused");
	for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++) {
		char fam[16];
		bool want;

		snprintf(fam, sizeof(fam), ",%s,", allowed[i].policy);
		want = strstr(list, fam) != NULL;
		r = socket(allowed[i].family, allowed[i].type, allowed[i].proto);
		snprintf(what, sizeof(what), "socket %s %s", allowed[i].name,
		         want ? "works" : "refused (not in the policy)");
		if (want)
			result(r >= 0, what, r < 0 ? errno : 0);
		else
			expect_errno(r, EAFNOSUPPORT, what);
		if (r >= 0)
			close((int)r);
	}
	r = socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
	if (strstr(list, ",unix,")) {
		result(r == 0, "socketpair AF_UNIX works", r < 0 ? errno : 0);
	} else {
		expect_errno(r, EAFNOSUPPORT, "socketpair AF_UNIX refused (not in the policy)");
	}
	if (r == 0) {
		close(sv[0]);
		close(sv[1]);
	}
}

/* ---- kernel uevents ------------------------------------------------------ */

/* Make a NETLINK_KOBJECT_UEVENT socket the only way left, through io_uring
 * (the policy must let the ring through), subscribe to the kernel's uevents,
 * say "ready", and once the test has seen a uevent of its own on the host
 * (a line on stdin), check that none reached the sandbox. */
static void attack_uevent(void)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK, .nl_groups = 1 };
	struct io_uring_sqe op = { .opcode = 45 /* IORING_OP_SOCKET */, .fd = AF_NETLINK,
	                           .off = SOCK_DGRAM, .len = NETLINK_KOBJECT_UEVENT };
	char line[64], buf[4096];
	long s = uring_submit(&op), bound = -1;
	int bind_err = 0;
	ssize_t n;

	if (s >= 0) {
		bound = bind((int)s, (struct sockaddr *)&sa, sizeof(sa));
		bind_err = bound < 0 ? errno : 0;
	}
	printf("ready\n");
	if (!fgets(line, sizeof(line), stdin))
		return;
	expect_errno(socket(AF_NETLINK, SOCK_DGRAM, NETLINK_KOBJECT_UEVENT), EPROTONOSUPPORT,
	             "socket() for uevents refused");
	if (s < 0) {
		result(true, "io_uring cannot make a uevent socket either", (int)-s);
		return;
	}
	if (bound < 0) {
		result(true, "a uevent socket made through io_uring cannot subscribe", bind_err);
		return;
	}
	n = recv((int)s, buf, sizeof(buf) - 1, MSG_DONTWAIT);
	if (n > 0)
		buf[n] = '\0';
	result(n < 0 && errno == EAGAIN, n > 0 ? buf : "no host uevent reaches the sandbox",
	       n < 0 ? errno : 0);
}

/* ---- the page cache of a shared file ------------------------------------- */

/* Each way to tell which pages of FILE are in the page cache without reading
 * them (and so caching them) must be refused: mincore on a mapping of it,
 * cachestat, preadv2 with RWF_NOWAIT.  FILE is shared with other sandboxes
 * (the image, or a bind): its cached pages are the ones they read. */
static void attack_pagecache(const char *path)
{
	int fd = open(path, O_RDONLY);
	struct stat st;
	unsigned char vec[256];
	char buf[4096];
	struct iovec iov = { buf, sizeof(buf) };
	struct { uint64_t off, len; } range = { 0, 0 };
	uint64_t cs[8];
	int answered = 0;
	void *m;

	if (fd < 0 || fstat(fd, &st) < 0 || st.st_size < 4096) {
		result(false, "open the shared file", errno);
		return;
	}
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	expect_errno(m == MAP_FAILED ? 0 : mincore(m, MIN((size_t)st.st_size, sizeof(vec) * 4096),
	                                           vec), EPERM, "mincore on the shared file");
	expect_errno(syscall(451, fd, &range, cs, 0), EPERM, "cachestat on the shared file");
	for (off_t off = 0; off + 4096 <= st.st_size && off < 64 * 4096; off += 4096) {
		long r = syscall(SYS_preadv2, fd, &iov, 1, off, 0, 0x8 /* RWF_NOWAIT */);

		if (r >= 0 || errno != EOPNOTSUPP)
			answered++;
	}
	result(answered == 0, "preadv2 RWF_NOWAIT refused on every page of the shared file", 0);
	if (m != MAP_FAILED)
		munmap(m, (size_t)st.st_size);
	close(fd);
}

/* ---- metadata of read-only and hidden paths ---------------------------- */

/* ro:PATH   chmod, chown (to its own owner), utimes, truncate and xattr
 *           changes of PATH must fail with EROFS (Landlock has no right for
 *           them: the path must be on a read-only mount);
 * hidden:PATH:MTIME   stat of PATH must show nothing of the file: size 0,
 *           mode 000, not the mtime MTIME, no extended attribute. */
static void attack_metadata(int argc, char **argv)
{
	char what[512], names[256];

	for (int i = 0; i < argc; i++) {
		struct stat st;

		if (!strncmp(argv[i], "ro:", 3)) {
			const char *p = argv[i] + 3;
			struct timespec ts[2] = { { 1, 0 }, { 1, 0 } };

			if (lstat(p, &st) < 0) {
				result(false, p, errno);
				continue;
			}
			snprintf(what, sizeof(what), "chmod %s", p);
			expect_errno(chmod(p, 04777), EROFS, what);
			snprintf(what, sizeof(what), "chown %s to its own owner", p);
			expect_errno(lchown(p, st.st_uid, st.st_gid), EROFS, what);
			snprintf(what, sizeof(what), "utimensat %s", p);
			expect_errno(utimensat(AT_FDCWD, p, ts, AT_SYMLINK_NOFOLLOW), EROFS, what);
			snprintf(what, sizeof(what), "set user.attack on %s", p);
			expect_errno(lsetxattr(p, "user.attack", "x", 1, 0), EROFS, what);
			snprintf(what, sizeof(what), "set trusted.overlay.opaque on %s", p);
			expect_fail(lsetxattr(p, "trusted.overlay.opaque", "y", 1, 0), what);
			snprintf(what, sizeof(what), "remove security.capability of %s", p);
			expect_fail(lremovexattr(p, "security.capability"), what);
			snprintf(what, sizeof(what), "write to %s", p);
			expect_fail(open(p, O_WRONLY), what);
			if (lstat(p, &st) == 0) {
				snprintf(what, sizeof(what), "%s unchanged: mode %o, mtime %lld", p,
				         st.st_mode & 07777, (long long)st.st_mtime);
				result(!(st.st_mode & 04000) && st.st_mtime != 1, what, 0);
			}
		} else if (!strncmp(argv[i], "hidden:", 7)) {
			char *p = argv[i] + 7, *colon = strrchr(p, ':');
			long long mtime = colon ? atoll(colon + 1) : -1;
			ssize_t n;

			if (colon)
				*colon = '\0';
			snprintf(what, sizeof(what), "stat hidden %s", p);
			if (lstat(p, &st) < 0) {
				result(true, what, errno);   /* not even that */
				continue;
			}
			snprintf(what, sizeof(what), "stat hidden %s shows size %lld, mode %o, mtime %lld", p,
			         (long long)st.st_size, st.st_mode & 07777, (long long)st.st_mtime);
			result((S_ISDIR(st.st_mode) || st.st_size == 0) && (st.st_mode & 07777) == 0 &&
			       st.st_mtime != mtime, what, 0);
			n = llistxattr(p, names, sizeof(names));
			snprintf(what, sizeof(what), "hidden %s has no extended attribute", p);
			result(n <= 0, what, n < 0 ? errno : 0);
			n = lgetxattr(p, "user.secret", names, sizeof(names));
			snprintf(what, sizeof(what), "hidden %s: user.secret unreadable", p);
			result(n < 0, what, n < 0 ? errno : 0);
		}
	}
}

/* ---- what of the host shows in /proc, /sys and the mount table ---------- */

/* Each PATH must read as empty (masked) or not exist; each "nomount:STR"
 * means no line of /proc/self/mountinfo contains STR. */
static void attack_masks(int argc, char **argv)
{
	char what[512], buf[65536];

	for (int i = 0; i < argc; i++) {
		if (!strncmp(argv[i], "nomount:", 8)) {
			int fd = open("/proc/self/mountinfo", O_RDONLY);
			ssize_t n, total = 0;

			while (fd >= 0 && total < (ssize_t)sizeof(buf) - 1 &&
			       (n = read(fd, buf + total, sizeof(buf) - 1 - (size_t)total)) > 0)
				total += n;
			buf[total] = '\0';
			if (fd >= 0)
				close(fd);
			snprintf(what, sizeof(what), "mountinfo does not show '%s'", argv[i] + 8);
			result(total > 0 && !strstr(buf, argv[i] + 8), what, 0);
		} else {
			struct stat st;
			int fd;
			ssize_t n = 0;

			if (lstat(argv[i], &st) < 0) {
				snprintf(what, sizeof(what), "%s does not exist", argv[i]);
				result(errno == ENOENT, what, errno);
				continue;
			}
			if (S_ISDIR(st.st_mode)) {
				int entries = 0;
				DIR *d = opendir(argv[i]);
				struct dirent *de;

				while (d && (de = readdir(d)))
					entries += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
				if (d)
					closedir(d);
				snprintf(what, sizeof(what), "%s lists nothing", argv[i]);
				result(entries == 0, what, 0);
				continue;
			}
			fd = open(argv[i], O_RDONLY);
			if (fd >= 0) {
				n = read(fd, buf, sizeof(buf));
				close(fd);
			}
			snprintf(what, sizeof(what), "%s reads nothing", argv[i]);
			result(fd < 0 || n <= 0, what, fd < 0 ? errno : 0);
			snprintf(what, sizeof(what), "%s cannot be written", argv[i]);
			expect_fail(open(argv[i], O_WRONLY), what);
		}
	}
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
	else if (!strcmp(argv[2], "netns"))
		attack_netns();
	else if (!strcmp(argv[2], "overwrite"))
		attack_overwrite(argc - 3, argv + 3);
	else if (!strcmp(argv[2], "landlock"))
		attack_landlock(argc - 3, argv + 3);
	else if (!strcmp(argv[2], "uring"))
		attack_uring(argc - 3, argv + 3);
	else if (!strcmp(argv[2], "reach"))
		attack_reach(argc - 3, argv + 3);
	else if (!strcmp(argv[2], "fill") && argc == 4)
		attack_fill(argv[3]);
	else if (!strcmp(argv[2], "hog") && argc == 4)
		attack_hog(argv[3]);
	else if (!strcmp(argv[2], "nslimits"))
		attack_nslimits(argc - 3, argv + 3);
	else if (!strcmp(argv[2], "budget") && argc == 4)
		attack_budget(argv[3]);
	else if (!strcmp(argv[2], "tty"))
		attack_tty();
	else if (!strcmp(argv[2], "bind-leave") && argc == 4)
		attack_bind_leave(argv[3]);
	else if (!strcmp(argv[2], "allowlist"))
		attack_allowlist();
	else if (!strcmp(argv[2], "sockets") && argc == 4)
		attack_sockets(argv[3]);
	else if (!strcmp(argv[2], "uevent"))
		attack_uevent();
	else if (!strcmp(argv[2], "pagecache") && argc == 4)
		attack_pagecache(argv[3]);
	else if (!strcmp(argv[2], "metadata"))
		attack_metadata(argc - 3, argv + 3);
	else if (!strcmp(argv[2], "masks"))
		attack_masks(argc - 3, argv + 3);
	else {
		fprintf(stderr, "attack: unknown attack '%s'\n", argv[2]);
		return 2;
	}
	return failures ? 1 : 0;
}
