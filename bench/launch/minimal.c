/*
 * minimal.c — a yardstick for bench/launch: the least a launcher does, and
 * lazyroot's structural pieces added one at a time on top of it, to price
 * each against `lazyroot run` and against bubblewrap and crun.
 *
 *   minimal [--net=NSFILE] [--overlay] [--idmap] [--init] [--cgroup=DIR]...
 *           [--pipes] ROOT CMD [ARG...]
 *
 * Always: new user (0..65535 inside, host 2000000000.. outside), mount, pid,
 * ipc and uts namespaces; ROOT bound read-only, a fresh /proc, pivot_root;
 * the command is pid 1 and its exit status is minimal's.  The network
 * namespace is a new one, or NSFILE's (a bind-mounted namespace, such as
 * lazyroot's pool keeps).  Each option adds one piece:
 *   --overlay     ROOT becomes the lower layer of an overlay whose upper and
 *                 work directories are on a fresh tmpfs
 *   --idmap       the launcher clones ROOT's mount tree, idmaps it to the
 *                 sandbox's user namespace and sends it over a socket (with
 *                 --overlay, as the lower layer)
 *   --init        pid 1 forks the command and waits for it
 *   --cgroup=DIR  the sandbox goes into DIR: cloned into it when DIR is on
 *                 cgroup2, else moved by a cgroup.procs write (repeatable)
 *   --pipes       stdout and stderr go through a pipe the launcher copies
 * No seccomp, Landlock, dropped capabilities, limits or /dev: this measures,
 * it does not contain anything.  Errors: one line on stderr, exit 125.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/mount.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define FAIL 125
#define ID_BASE 2000000000u
#define MAX_CGROUPS 8

static __attribute__((noreturn, format(printf, 1, 2))) void die(const char *fmt, ...)
{
	va_list ap;
	int e = errno;

	fputs("minimal: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, ": %s\n", strerror(e));
	_exit(FAIL);
}

static void write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);

	if (fd < 0 || write(fd, s, strlen(s)) < 0)
		die("write '%s'", path);
	close(fd);
}

static void send_fd(int sock, int fd)
{
	char byte = 'F', ctl[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { &byte, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
	                     .msg_controllen = fd >= 0 ? sizeof(ctl) : 0 };

	if (fd >= 0) {
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	if (sendmsg(sock, &mh, MSG_NOSIGNAL) < 0)
		die("send to the sandbox");
}

/* The launcher's go-ahead, with the idmapped tree when there is one (-1). */
static int recv_fd(int sock)
{
	char byte, ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { &byte, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
	                     .msg_controllen = sizeof(ctl) };
	struct cmsghdr *c;
	int fd = -1;

	if (recvmsg(sock, &mh, MSG_CMSG_CLOEXEC) <= 0)
		_exit(FAIL);   /* the launcher is gone */
	c = CMSG_FIRSTHDR(&mh);
	if (c && c->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

static void mount_or_die(const char *src, const char *dst, const char *type, unsigned long flags,
                         const char *data)
{
	if (mount(src, dst, type, flags, data) < 0)
		die("mount %s on '%s'", type ? type : src ? src : "(remount)", dst);
}

struct opts {
	const char *net, *root;
	const char *cgroup[MAX_CGROUPS];
	bool cgroup2[MAX_CGROUPS];   /* cgroup[i] is on cgroup2: cloned into, not written */
	int n_cgroups;
	bool overlay, idmap, init, pipes;
	char **cmd;
};

/* pid 1 of the new namespaces. */
static __attribute__((noreturn)) void sandbox(const struct opts *o, int sock, int out)
{
	const char *root = o->root;
	int tree = recv_fd(sock), st;
	pid_t cmd;

	if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
		die("become root in the user namespace");
	mount_or_die(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
	if (o->overlay) {
		mount_or_die("minimal", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=256m");
		if (mkdir("/tmp/lower", 0755) < 0 || mkdir("/tmp/upper", 0755) < 0 ||
		    mkdir("/tmp/work", 0755) < 0 || mkdir("/tmp/root", 0755) < 0)
			die("directories on the tmpfs");
		if (tree >= 0) {
			if (move_mount(tree, "", AT_FDCWD, "/tmp/lower", MOVE_MOUNT_F_EMPTY_PATH) < 0)
				die("attach the idmapped tree");
		} else {
			mount_or_die(root, "/tmp/lower", NULL, MS_BIND | MS_REC, NULL);
		}
		mount_or_die("overlay", "/tmp/root", "overlay", MS_NOSUID | MS_NODEV,
		             "lowerdir=/tmp/lower,upperdir=/tmp/upper,workdir=/tmp/work,userxattr");
		root = "/tmp/root";
	} else if (tree >= 0) {
		if (move_mount(tree, "", AT_FDCWD, root, MOVE_MOUNT_F_EMPTY_PATH) < 0)
			die("attach the idmapped tree on '%s'", root);
	} else {
		mount_or_die(root, root, NULL, MS_BIND | MS_REC, NULL);
		mount_or_die(NULL, root, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL);
	}
	if (chdir(root) < 0)
		die("chdir '%s'", root);
	mount_or_die("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	if (syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
		die("pivot_root into '%s'", root);
	if (out >= 0 && (dup2(out, STDOUT_FILENO) < 0 || dup2(out, STDERR_FILENO) < 0))
		die("output pipe");
	if (!o->init) {
		execvp(o->cmd[0], o->cmd);
		die("run '%s'", o->cmd[0]);
	}
	cmd = fork();
	if (cmd < 0)
		die("fork the command");
	if (cmd == 0) {
		execvp(o->cmd[0], o->cmd);
		die("run '%s'", o->cmd[0]);
	}
	while (waitpid(-1, &st, 0) != cmd)
		if (errno == ECHILD)
			_exit(FAIL);
	_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

static bool on_cgroup2(const char *dir)
{
	struct statfs st;

	return statfs(dir, &st) == 0 && (long)st.f_type == CGROUP2_SUPER_MAGIC;
}

static void parse(int argc, char **argv, struct opts *o)
{
	int i = 1;

	for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
		if (!strncmp(argv[i], "--net=", 6))
			o->net = argv[i] + 6;
		else if (!strcmp(argv[i], "--overlay"))
			o->overlay = true;
		else if (!strcmp(argv[i], "--idmap"))
			o->idmap = true;
		else if (!strcmp(argv[i], "--init"))
			o->init = true;
		else if (!strcmp(argv[i], "--pipes"))
			o->pipes = true;
		else if (!strncmp(argv[i], "--cgroup=", 9) && o->n_cgroups < MAX_CGROUPS)
			o->cgroup[o->n_cgroups++] = argv[i] + 9;
		else
			break;
	}
	if (argc - i < 2 || !strncmp(argv[i], "--", 2)) {
		fprintf(stderr, "usage: minimal [--net=NSFILE] [--overlay] [--idmap] [--init] "
		        "[--cgroup=DIR]... [--pipes] ROOT CMD [ARG...]\n");
		exit(FAIL);
	}
	o->root = argv[i];
	o->cmd = argv + i + 1;
}

int main(int argc, char **argv)
{
	struct opts o = { 0 };
	struct clone_args ca = { .flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID |
	                                  CLONE_NEWIPC | CLONE_NEWUTS,
	                         .exit_signal = SIGCHLD };
	int sp[2], out[2] = { -1, -1 }, tree = -1, st;
	char path[64], map[64], pid_s[16];
	pid_t pid;

	parse(argc, argv, &o);
	if (o.net) {
		int fd = open(o.net, O_RDONLY | O_CLOEXEC);

		if (fd < 0 || setns(fd, CLONE_NEWNET) < 0)
			die("network namespace '%s'", o.net);
		close(fd);
	} else {
		ca.flags |= CLONE_NEWNET;
	}
	for (int i = 0; i < o.n_cgroups; i++) {
		o.cgroup2[i] = on_cgroup2(o.cgroup[i]);
		if (!o.cgroup2[i])
			continue;
		int fd = open(o.cgroup[i], O_PATH | O_DIRECTORY | O_CLOEXEC);

		if (fd < 0)
			die("cgroup '%s'", o.cgroup[i]);
		ca.flags |= CLONE_INTO_CGROUP;
		ca.cgroup = (uint64_t)fd;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0 ||
	    (o.pipes && pipe2(out, O_CLOEXEC) < 0))
		die("socket and pipes");
	pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
	if (pid < 0)
		die("clone the sandbox");
	if (pid == 0) {
		close(sp[0]);
		if (out[0] >= 0)
			close(out[0]);
		sandbox(&o, sp[1], out[1]);
	}
	close(sp[1]);
	if (out[1] >= 0)
		close(out[1]);

	snprintf(map, sizeof(map), "0 %u 65536\n", ID_BASE);
	snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
	write_file(path, map);
	snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
	write_file(path, map);
	snprintf(pid_s, sizeof(pid_s), "%d", (int)pid);
	for (int i = 0; i < o.n_cgroups; i++) {
		char procs[4096];

		if (o.cgroup2[i])
			continue;   /* cloned into it */
		snprintf(procs, sizeof(procs), "%s/cgroup.procs", o.cgroup[i]);
		write_file(procs, pid_s);
	}
	if (o.idmap) {
		struct mount_attr attr = {
			.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
			            MOUNT_ATTR_NODEV,
		};
		int userns;

		snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
		userns = open(path, O_RDONLY | O_CLOEXEC);
		tree = (int)syscall(SYS_open_tree, AT_FDCWD, o.root,
		                    OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
		attr.userns_fd = (uint64_t)userns;
		if (userns < 0 || tree < 0 ||
		    syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr,
		            sizeof(attr)) < 0)
			die("idmapped tree of '%s'", o.root);
		close(userns);
	}
	send_fd(sp[0], tree);
	if (out[0] >= 0) {
		char buf[65536];
		ssize_t n;

		while ((n = read(out[0], buf, sizeof(buf))) > 0)
			if (write(STDOUT_FILENO, buf, (size_t)n) < 0)
				break;
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			die("wait for the sandbox");
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
