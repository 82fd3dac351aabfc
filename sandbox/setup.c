/*
 * setup.c — the filesystem a sandbox sees, built inside its namespaces by the
 * sandbox's init before anything of the command runs.  Each setup_* function
 * is one of the init's steps (init.c runs them in the order below); each
 * fails fast and names what it was doing; nothing here outlives the mount
 * namespace.
 *
 *   /tmp (of the old root, private to this mount namespace)
 *     tmpfs named after the sandbox, size-limited: lower/ (the root filesystem, an idmapped
 *     read-only mount made by the launcher of a directory or of the node's
 *     shared FUSE mount of an image: sandbox.h says why idmapped),
 *     upper/, work/, root/ (the overlay that becomes /; overlay over a FUSE
 *     lower layer works here because the mount has allow_other), dev/, shm/
 *     and sys/ (below).  Everything the sandbox writes, /dev/shm included,
 *     shares this one tmpfs and its size limit.
 *   root/proc        a fresh proc of the sandbox's pid namespace, mounted
 *                    while the host's is still visible (the kernel requires
 *                    a fully visible proc to mount one in a user namespace);
 *                    sys, irq and bus made read-only, what shows the host
 *                    (cmdline, config.gz, fs/, kallsyms, interrupts, …)
 *                    masked with the tmpfs's empty mask/dir or mask/file
 *   root/sys         sysfs, read-only, when the policy asks for it; else the
 *                    tmpfs's empty sys/, bound read-only
 *   root/dev         the tmpfs's dev/, bound, read-only once filled: null,
 *                    zero, full, random, urandom and tty bound from the host
 *                    (mknod is not allowed in a user namespace), a new devpts
 *                    instance of at most `ptys` ptys, shm (the tmpfs's shm/, bound, writable), and
 *                    the fd, stdin, stdout, stderr and ptmx links
 *   binds            the launcher's idmapped mount trees, moved onto
 *                    targets resolved inside the new root (a symlink in the
 *                    image cannot send a bind elsewhere)
 * then pivot_root into root/ and detach the old root, which takes the host's
 * mounts and the tmpfs's own path out of reach.
 *
 * Superblocks are counted: every one registers a shrinker, and the kernel
 * gives every memory cgroup on the node a map sized by the highest shrinker
 * id ever allocated (docs/perf-log.md, "bench/launch/density").  A sandbox makes four here
 * (the tmpfs, the overlay, proc, devpts; sysfs a fifth when asked for) plus
 * the mqueue of its ipc namespace; /dev, /dev/shm and the empty /sys are
 * bind mounts of the one tmpfs, which make none.
 */
#include <fcntl.h>
#include <linux/openat2.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>

#include "lib/lib.h"
#include "sandbox/sandbox-internal.h"

#define BASE "/tmp"
#define ROOT BASE "/root"

static int do_mount(const char *src, const char *dst, const char *type, unsigned long flags,
                    const char *data)
{
	if (mount(src, dst, type, flags, data) < 0)
		return log_errno(-errno, "mount %s on '%s'", type ? type : src ? src : "(remount)",
		                 dst);
	return 0;
}

static int make_dir(const char *path, mode_t mode)
{
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return log_errno(-errno, "mkdir '%s'", path);
	return 0;
}

/* A directory of the overlay itself to mount on: mount(2) follows symlinks,
 * so whatever the image has there that is not a directory (a symlink above
 * all, to anywhere) is replaced by an empty directory in the overlay's upper
 * layer.  The image keeps it; the sandbox sees the mount. */
static int own_dir(const char *path, mode_t mode)
{
	struct stat st;

	/* A directory there already needs no mkdir: mkdir of an existing name
	 * makes the overlay revalidate it in its lower layer for exclusive
	 * creation, which a FUSE image answers with a LOOKUP request each time
	 * (docs/perf-log.md, "IMAGE mode"). */
	if (lstat(path, &st) == 0) {
		if (S_ISDIR(st.st_mode))
			return 0;
		if (unlink(path) < 0)
			return log_errno(-errno, "replace '%s' (not a directory in the image)",
			                 path);
	}
	return make_dir(path, mode);
}

/* Bind src on dst (made if missing in the overlay), read-only if ro. */
static int bind_dir(const char *src, const char *dst, bool ro)
{
	int r = own_dir(dst, 0755);

	if (r == 0)
		r = do_mount(src, dst, NULL, MS_BIND, NULL);
	if (r == 0 && ro)
		r = do_mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID |
		             MS_NODEV | MS_NOEXEC, NULL);
	return r;
}

static int open_in_root(int rootfd, const char *path, uint64_t flags)
{
	struct open_how how = {
		.flags = flags | O_CLOEXEC,
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};

	return (int)syscall(SYS_openat2, rootfd, path, &how, sizeof(how));
}

/* Make every missing component of path (relative to rootfd, resolved inside
 * it), the last one a directory or an empty file; return an O_PATH fd. */
static int make_target(int rootfd, const char *path, bool dir)
{
	_cleanup_free_ char *p = strdup(path);
	size_t len;

	if (!p)
		return -ENOMEM;
	len = strlen(p);
	for (size_t i = 1; i <= len; i++) {
		bool last = i == len;
		int fd;

		if (!last && p[i] != '/')
			continue;
		p[i] = '\0';
		fd = open_in_root(rootfd, p, O_PATH);
		if (fd < 0 && errno == ENOENT) {
			_cleanup_close_ int parent = -1;
			char *slash = strrchr(p, '/');
			const char *base = slash + 1;

			*slash = '\0';
			parent = open_in_root(rootfd, slash == p ? "/" : p, O_PATH | O_DIRECTORY);
			*slash = '/';
			if (parent < 0)
				return log_errno(-errno, "bind target '%s'", path);
			if (last && !dir) {
				fd = openat(parent, base, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
				if (fd >= 0)
					close(fd);
			} else {
				fd = mkdirat(parent, base, 0755);
			}
			if (fd < 0)
				return log_errno(-errno, "make bind target '%s'", path);
			fd = open_in_root(rootfd, p, O_PATH);
		}
		if (fd < 0)
			return log_errno(-errno, "bind target '%s'", path);
		if (last)
			return fd;
		close(fd);
		p[i] = '/';
	}
	return -EINVAL;
}

/* ---- masks ------------------------------------------------------------------ */

/* The tmpfs's mask/ (an empty directory and an empty file, both mode 000),
 * a read-only mount of its own: every mask is a bind of one of the two, so
 * masking makes no superblock (each costs every memory cgroup on the node,
 * see the top of this file).  mask_fd, a detached clone of it made before
 * the pivot, serves the masks made after it (mask_path): the paths the
 * policy hides.  Made only for a policy that hides some: closing a detached
 * mount tree costs an expedited RCU grace period (IPIs to every CPU, and
 * the init waits), docs/perf-log.md, "Launch CPU, third pass". */
static int mask_fd = -1;

/* The host's memory in bytes, 0 when unknown: sysinfo, a fifth of the CPU
 * of reading /proc/meminfo (which sums every counter). */
static uint64_t host_mem_total(void)
{
	struct sysinfo si;

	return sysinfo(&si) == 0 ? (uint64_t)si.totalram * si.mem_unit : 0;
}

/* mask/meminfo, what the sandbox reads as /proc/meminfo: a fixed view in
 * which the whole of the sandbox's memory limit (the host's memory when it
 * has none, or less) is total, free and available, swap and every other
 * counter zero.  The host's own counters change with every sandbox's use,
 * which made them a channel between sandboxes; a view that never changes
 * carries nothing.  Programs that size themselves by MemAvailable see the
 * limit they live under.  sysinfo(2) still answers with the host's figures:
 * seccomp cannot rewrite a syscall's answer (docs/security.md). */
static int write_meminfo(const struct sandbox *sb)
{
	static const char *const zero[] = {
		"Buffers", "Cached", "SwapCached", "Active", "Inactive", "Active(anon)",
		"Inactive(anon)", "Active(file)", "Inactive(file)", "Unevictable", "Mlocked",
		"SwapTotal", "SwapFree", "Dirty", "Writeback", "AnonPages", "Mapped", "Shmem",
		"KReclaimable", "Slab", "SReclaimable", "SUnreclaim", "KernelStack", "PageTables",
		"CommitLimit", "Committed_AS", "HugePages_Total", "HugePages_Free",
	};
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	_cleanup_close_ int fd = -1;
	uint64_t host = host_mem_total(), kib;

	kib = (sb->memory && (!host || sb->memory < host) ? sb->memory : host) / 1024;
	if (buf_printf(&b, "MemTotal:       %8llu kB\nMemFree:        %8llu kB\n"
	               "MemAvailable:   %8llu kB\n", (unsigned long long)kib,
	               (unsigned long long)kib, (unsigned long long)kib) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < ARRAY_SIZE(zero); i++)
		if (buf_printf(&b, "%s:%*s%8u%s\n", zero[i], (int)(15 - strlen(zero[i])), "", 0u,
		               strncmp(zero[i], "HugePages", 9) ? " kB" : "") < 0)
			return -ENOMEM;
	fd = open(BASE "/mask/meminfo", O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0444);
	if (fd < 0 || write(fd, b.data, b.len) != (ssize_t)b.len || fchmod(fd, 0444) < 0)
		return log_errno(errno ? -errno : -EIO, "create '%s'", BASE "/mask/meminfo");
	return 0;
}

static int mask_init(const struct sandbox *sb, bool keep_fd)
{
	int fd, r = make_dir(BASE "/mask", 0755);

	if (r == 0)
		r = make_dir(BASE "/mask/dir", 0);
	if (r < 0)
		return r;
	fd = open(BASE "/mask/file", O_CREAT | O_WRONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return log_errno(-errno, "create '%s'", BASE "/mask/file");
	close(fd);
	/* mkdir and open apply the umask: make sure both are 000 */
	if (chmod(BASE "/mask/dir", 0) < 0 || chmod(BASE "/mask/file", 0) < 0)
		return log_errno(-errno, "chmod '%s'", BASE "/mask");
	r = write_meminfo(sb);
	if (r < 0)
		return r;
	/* A read-only mount of its own: every bind of it is read-only too. */
	r = do_mount(BASE "/mask", BASE "/mask", NULL, MS_BIND, NULL);
	if (r == 0)
		r = do_mount(NULL, BASE "/mask", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID |
		             MS_NODEV | MS_NOEXEC, NULL);
	if (r < 0 || !keep_fd)
		return r;
	fd = open_tree(AT_FDCWD, BASE "/mask", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (fd < 0)
		return log_errno(-errno, "clone '%s'", BASE "/mask");
	mask_fd = fd;
	return 0;
}

/* Before the pivot: bind the mask's directory or file on path, which is of
 * that kind or missing (then nothing is done).  One mount(2) each: a launch
 * makes a dozen. */
static int mask_before_pivot(const char *path, bool dir)
{
	if (mount(dir ? BASE "/mask/dir" : BASE "/mask/file", path, NULL, MS_BIND, NULL) < 0 &&
	    errno != ENOENT)
		return log_errno(-errno, "mask '%s'", path);
	return 0;
}

int mask_path(int dirfd, const char *path)
{
	_cleanup_close_ int target = openat(dirfd, path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	_cleanup_close_ int src = -1;
	struct stat st;

	if (target < 0 && errno == ENOENT)
		return 0;
	if (target < 0 || fstat(target, &st) < 0)
		return log_errno(-errno, "mask '%s'", path);
	if (mask_fd < 0)
		return log_error(-EINVAL, "mask '%s': no mask source", path);
	src = open_tree(mask_fd, S_ISDIR(st.st_mode) ? "dir" : "file",
	                OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (src < 0)
		return log_errno(-errno, "mask '%s'", path);
	if (move_mount(src, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
		return log_errno(-errno, "mask '%s'", path);
	return 0;
}

/* What of /proc shows the host rather than the sandbox, masked as container
 * runtimes mask it (runc's maskedPaths, and more): the kernel's command line,
 * build configuration, symbols, log, modules, keys, timers, interrupt counts
 * (a side channel on the host's activity, as is pressure/), the host
 * filesystems' internals (fs/: ext4 and jbd2 statistics of the host's disks),
 * its drivers and ACPI tables, and the node's memory counters (vmstat,
 * zoneinfo, buddyinfo, pagetypeinfo, slabinfo, swaps: they move with every
 * sandbox's use, a channel between sandboxes; meminfo gets a view of the
 * sandbox's own instead, write_meminfo).  What a kernel lacks is skipped. */
static const char *const proc_masked_files[] = {
	"cmdline", "config.gz", "bootconfig", "kallsyms", "kcore", "kmsg", "keys", "key-users",
	"modules", "interrupts", "softirqs", "timer_list", "timer_stats", "sched_debug",
	"latency_stats", "sysrq-trigger", "vmstat", "zoneinfo", "buddyinfo", "pagetypeinfo",
	"slabinfo", "swaps",
};
static const char *const proc_masked_dirs[] = {
	"acpi", "asound", "scsi", "fs", "driver", "pressure", "dynamic_debug",
};
/* Read-only, as runc's readonlyPaths: the sandbox reads them, changes nothing. */
static const char *const proc_ro[] = { "sys", "irq", "bus" };
/* With sysfs: firmware tables, and the energy counters of powercap (a side
 * channel: Platypus). */
static const char *const sys_masked[] = { ROOT "/sys/firmware", ROOT "/sys/devices/virtual/powercap" };

int setup_proc(const struct sandbox *sb)
{
	char path[64];
	int r;

	r = own_dir(ROOT "/proc", 0555);
	if (r == 0)
		r = do_mount("proc", ROOT "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(proc_ro); i++) {
		snprintf(path, sizeof(path), ROOT "/proc/%s", proc_ro[i]);
		if (access(path, F_OK) < 0)
			continue;
		r = do_mount(path, path, NULL, MS_BIND | MS_REC, NULL);
		if (r == 0)
			r = do_mount(NULL, path, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID |
			             MS_NODEV | MS_NOEXEC, NULL);
	}
	return r;
}

int setup_sys(const struct sandbox *sb)
{
	int r;

	if (!sb->sysfs)
		return bind_dir(BASE "/sys", ROOT "/sys", true);
	r = own_dir(ROOT "/sys", 0555);
	if (r == 0)
		r = do_mount("sysfs", ROOT "/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
		             NULL);
	return r;
}

int setup_masks(const struct sandbox *sb)
{
	char path[64];
	int r = mask_init(sb, policy_hides(sb));

	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(proc_masked_files); i++) {
		snprintf(path, sizeof(path), ROOT "/proc/%s", proc_masked_files[i]);
		r = mask_before_pivot(path, false);
	}
	if (r == 0 && mount(BASE "/mask/meminfo", ROOT "/proc/meminfo", NULL, MS_BIND, NULL) < 0)
		r = log_errno(-errno, "mask '%s'", ROOT "/proc/meminfo");
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(proc_masked_dirs); i++) {
		snprintf(path, sizeof(path), ROOT "/proc/%s", proc_masked_dirs[i]);
		r = mask_before_pivot(path, true);
	}
	for (size_t i = 0; r == 0 && sb->sysfs && i < ARRAY_SIZE(sys_masked); i++)
		r = mask_before_pivot(sys_masked[i], true);
	return r;
}

int setup_dev(const struct sandbox *sb)
{
	static const char *const nodes[] = { "null", "zero", "full", "random", "urandom", "tty" };
	static const char *const links[][2] = {
		{ "/proc/self/fd", "fd" }, { "/proc/self/fd/0", "stdin" },
		{ "/proc/self/fd/1", "stdout" }, { "/proc/self/fd/2", "stderr" },
		{ "pts/ptmx", "ptmx" },
	};
	char src[64], dst[128], opts[96];
	int r;

	r = bind_dir(BASE "/dev", ROOT "/dev", false);
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(nodes); i++) {
		int fd;

		snprintf(src, sizeof(src), "/dev/%s", nodes[i]);
		snprintf(dst, sizeof(dst), ROOT "/dev/%s", nodes[i]);
		fd = open(dst, O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
		if (fd < 0)
			return log_errno(-errno, "create '%s'", dst);
		close(fd);
		r = do_mount(src, dst, NULL, MS_BIND, NULL);
	}
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(links); i++) {
		snprintf(dst, sizeof(dst), ROOT "/dev/%s", links[i][1]);
		if (symlink(links[i][0], dst) < 0)
			r = log_errno(-errno, "symlink '%s'", dst);
	}
	if (r == 0)
		r = make_dir(ROOT "/dev/pts", 0755);
	/* The node's ptys are one pool (kernel.pty.max, less kernel.pty.reserve
	 * kept for the host's own devpts): max= keeps one sandbox from taking
	 * the others' share. */
	snprintf(opts, sizeof(opts), "newinstance,ptmxmode=0666,mode=0620,gid=5,max=%u",
	         (unsigned)sb->ptys);
	if (r == 0)
		r = do_mount("devpts", ROOT "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, opts);
	if (r == 0)
		r = bind_dir(BASE "/shm", ROOT "/dev/shm", false);
	if (r == 0)
		r = do_mount(NULL, ROOT "/dev", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID |
		             MS_NOEXEC | MS_NODEV, NULL);
	return r;
}

int setup_binds(const struct sandbox *sb, int *bind_fds)
{
	_cleanup_close_ int rootfd = open(ROOT, O_PATH | O_DIRECTORY | O_CLOEXEC);

	if (rootfd < 0)
		return log_errno(-errno, "open '%s'", ROOT);
	for (size_t i = 0; i < sb->n_binds; i++) {
		_cleanup_close_ int target = -1;
		struct stat st;

		if (fstat(bind_fds[i], &st) < 0)
			return log_errno(-errno, "bind '%s'", sb->binds[i].src);
		target = make_target(rootfd, sb->binds[i].dst, S_ISDIR(st.st_mode));
		if (target < 0)
			return target;
		if (move_mount(bind_fds[i], "", target, "",
		               MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
			return log_errno(-errno, "bind '%s' on '%s'", sb->binds[i].src, sb->binds[i].dst);
		close(bind_fds[i]);
		bind_fds[i] = -1;
	}
	return 0;
}

int loopback_up(void)
{
	_cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr = { 0 };

	if (s < 0)
		return -errno;
	strcpy(ifr.ifr_name, "lo");
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		return -errno;
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		return -errno;
	return 0;
}

/* Open /proc/sys/path for writing value later (ns_limits_apply).
 * /proc/sys/user/ and the ipc sysctls are the opener's own namespaces' (its
 * user and ipc namespaces), whatever /proc is mounted, and the open file
 * stays bound to them. */
static int limit_add(struct ns_limits *l, const char *path, const char *value)
{
	char file[128];
	struct ns_limit *e;

	if (l->n == sizeof(l->v) / sizeof(l->v[0]))
		return log_error(-E2BIG, "too many per-namespace limits");
	e = &l->v[l->n];
	snprintf(file, sizeof(file), "/proc/sys/%s", path);
	e->fd = open(file, O_WRONLY | O_CLOEXEC);
	if (e->fd < 0)
		return log_errno(-errno, "open '%s'", file);
	snprintf(e->path, sizeof(e->path), "%s", path);
	snprintf(e->value, sizeof(e->value), "%s", value);
	l->n++;
	return 0;
}

void ns_limits_close(struct ns_limits *l)
{
	for (size_t i = 0; i < l->n; i++)
		close(l->v[i].fd);
	l->n = 0;
}

int ns_limits_open(const struct sandbox *sb, struct ns_limits *l)
{
	static const char *const kinds[] = { "user", "mnt", "pid", "net", "ipc", "uts", "cgroup",
	                                     "time" };
	char v[32], path[64], sem[64];
	int r = 0;

	l->n = 0;
	/* Each counts what the sandbox's ids make inside its user namespace,
	 * per uid inside; the kernel charges the same objects to the
	 * namespace's owner (the sandbox's host uid) up to the host's limits
	 * too, so these only ever narrow. */
	snprintf(v, sizeof(v), "%u", sb->namespaces);
	for (size_t i = 0; r == 0 && i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		snprintf(path, sizeof(path), "user/max_%s_namespaces", kinds[i]);
		r = limit_add(l, path, v);
	}
	snprintf(v, sizeof(v), "%u", sb->inotify_instances);
	if (r == 0)
		r = limit_add(l, "user/max_inotify_instances", v);
	snprintf(v, sizeof(v), "%u", sb->inotify_watches);
	if (r == 0)
		r = limit_add(l, "user/max_inotify_watches", v);
	/* fanotify is refused by the syscall filter; the kernel bound is its
	 * second line */
	if (r == 0)
		r = limit_add(l, "user/max_fanotify_groups", "0");
	if (r == 0)
		r = limit_add(l, "user/max_fanotify_marks", "0");
	/* System V and POSIX IPC objects of the sandbox's ipc namespace: their
	 * memory is charged to its memory cgroup, their number is bounded here
	 * (a fresh namespace allows 32000 message queues and semaphore sets) */
	snprintf(v, sizeof(v), "%u", sb->ipc_objects);
	if (r == 0)
		r = limit_add(l, "kernel/msgmni", v);
	if (r == 0)
		r = limit_add(l, "kernel/shmmni", v);
	/* semmsl, semmns, semopm, semmni: only the number of sets changes */
	snprintf(sem, sizeof(sem), "32000 %llu 500 %u",
	         (unsigned long long)sb->ipc_objects * 32000u, sb->ipc_objects);
	if (r == 0)
		r = limit_add(l, "kernel/sem", sem);
	if (r == 0)
		r = limit_add(l, "fs/mqueue/queues_max", v);
	if (r < 0)
		ns_limits_close(l);
	return r;
}

int ns_limits_apply(struct ns_limits *l)
{
	int r = 0;

	for (size_t i = 0; r == 0 && i < l->n; i++) {
		size_t len = strlen(l->v[i].value);
		ssize_t n = write(l->v[i].fd, l->v[i].value, len);

		if (n != (ssize_t)len)
			r = log_errno(n < 0 ? -errno : -EIO, "limit '/proc/sys/%s' to %s",
			              l->v[i].path, l->v[i].value);
	}
	ns_limits_close(l);
	return r;
}

int setup_tmpfs(const struct sandbox *sb, const char *name)
{
	char opts[128];
	int r;

	r = do_mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
	snprintf(opts, sizeof(opts), "mode=0755,size=%llu", (unsigned long long)sb->tmpfs_size);
	if (r == 0)
		r = do_mount(name, BASE, "tmpfs", MS_NOSUID | MS_NODEV, opts);
	if (r == 0)
		r = make_dir(BASE "/lower", 0755);
	if (r == 0)
		r = make_dir(BASE "/upper", 0755);
	if (r == 0)
		r = make_dir(BASE "/work", 0755);
	if (r == 0)
		r = make_dir(ROOT, 0755);
	if (r == 0)
		r = make_dir(BASE "/dev", 0755);
	if (r == 0)
		r = make_dir(BASE "/sys", 0555);
	if (r == 0)
		r = make_dir(BASE "/shm", 01777);
	/* mkdir applies the umask; /dev/shm is for everyone, sticky */
	if (r == 0 && chmod(BASE "/shm", 01777) < 0)
		r = log_errno(-errno, "chmod '%s'", BASE "/shm");
	return r;
}

int setup_overlay(const struct sandbox *sb, int *lower_fd)
{
	if (move_mount(*lower_fd, "", AT_FDCWD, BASE "/lower", MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return log_errno(-errno, "attach rootfs '%s'", sb->rootfs);
	close(*lower_fd);
	*lower_fd = -1;
	return do_mount("overlay", ROOT, "overlay", MS_NOSUID | MS_NODEV,
	                "lowerdir=" BASE "/lower,upperdir=" BASE "/upper,workdir=" BASE "/work,"
	                "userxattr");
}

int setup_hostname(const struct sandbox *sb)
{
	if (sethostname(sb->hostname, strlen(sb->hostname)) < 0)
		return log_errno(-errno, "hostname '%s'", sb->hostname);
	return 0;
}

int setup_pivot(void)
{
	if (chdir(ROOT) < 0)
		return log_errno(-errno, "chdir '%s'", ROOT);
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		return log_errno(-errno, "pivot_root into '%s'", ROOT);
	if (umount2(".", MNT_DETACH) < 0)
		return log_errno(-errno, "detach the old root");
	if (chdir("/") < 0)
		return log_errno(-errno, "chdir /");
	return 0;
}
