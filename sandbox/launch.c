/*
 * launch.c — sandbox_run: the launcher's ordered steps and the loop that
 * watches a running sandbox.
 *
 * Processes:
 *   launcher (host, root)  makes the cgroups and output pipes, clones the
 *       init into new user, mount, pid, net, ipc and uts namespaces, writes
 *       its id maps (inside 0..65535 = host uid_base..), moves it into the
 *       cgroups, makes idmapped read-only mount trees of the rootfs (a
 *       directory or the node's shared mount of an image) and the
 *       binds, and hands them over a socket; then copies output (up to the
 *       cap) and enforces the wall clock, until the init is gone.
 *   init (pid 1 inside)  takes root inside, unshares the cgroup namespace
 *       (now that it sits in its cgroups), builds the root (setup.c), sets
 *       rlimits, no_new_privs, an empty bounding set and the seccomp filter,
 *       forks the command, gives up its own capabilities and reaps until the
 *       command ends; then it sends the command's wait status and exits,
 *       and the kernel kills whatever else is left in the pid namespace.
 *   command (pid 2)  takes the policy's uid/gid, drops every capability,
 *       and execs with the policy's environment and working directory.
 *
 * The init dies with the launcher (PR_SET_PDEATHSIG), and with it the whole
 * sandbox; killing the init is how the launcher ends a sandbox early.
 * Every mount lives in the sandbox's mount namespace, so teardown is the
 * init's death plus rmdir of the cgroups (or their return to the pool, with
 * the network namespace's: pool.c).
 */
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <grp.h>

#include "lib/lib.h"
#include "sandbox/sandbox-internal.h"

#define SETUP_FAILED 125   /* the init's exit code when it could not build the sandbox */

enum { MSG_READY = 'R', MSG_STATUS = 'S' };

struct msg {
	char type;
	int status;
};

struct child_ctx {
	const struct sandbox *sb;
	const char *name;
	char *const *argv;
	int sock, out_w, err_w;
	bool pooled_net;        /* in a pooled network namespace (pool.c) */
};

static int send_fds(int sock, const int *fds, size_t n)
{
	char byte = 'F';
	struct iovec iov = { &byte, 1 };
	size_t len = CMSG_SPACE(sizeof(int) * n);
	_cleanup_free_ char *ctl = calloc(1, len ? len : 1);
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (!ctl)
		return -ENOMEM;
	if (n) {
		struct cmsghdr *c;

		mh.msg_control = ctl;
		mh.msg_controllen = len;
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * n);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
	}
	if (sendmsg(sock, &mh, MSG_NOSIGNAL) < 0)
		return -errno;
	return 0;
}

/* Receive exactly n fds; 0 bytes (the launcher is gone) is -EPIPE. */
static int recv_fds(int sock, int *fds, size_t n)
{
	char byte;
	struct iovec iov = { &byte, 1 };
	size_t len = CMSG_SPACE(sizeof(int) * n);
	_cleanup_free_ char *ctl = calloc(1, len ? len : 1);
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
	                     .msg_controllen = n ? len : 0 };
	struct cmsghdr *c;
	ssize_t r;

	if (!ctl)
		return -ENOMEM;
	r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	if (r < 0)
		return -errno;
	if (r == 0)
		return -EPIPE;
	if (!n)
		return 0;
	c = CMSG_FIRSTHDR(&mh);
	if (!c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int) * n))
		return -EBADMSG;
	memcpy(fds, CMSG_DATA(c), sizeof(int) * n);
	return 0;
}

static void send_msg(int sock, char type, int status)
{
	struct msg m = { type, status };

	(void)!send(sock, &m, sizeof(m), MSG_NOSIGNAL);
}

static void set_rlimit(int res, uint64_t v, const char *what)
{
	struct rlimit rl = { v, v };

	if (setrlimit(res, &rl) < 0)
		log_errno(-errno, "rlimit %s", what);
}

/* The command, pid 2 inside.  Errors go to its stderr (the output pipe). */
static __attribute__((noreturn)) void command_main(struct child_ctx *c)
{
	const struct sandbox *sb = c->sb;
	char **env = NULL;
	int e;

	setsid();
	if (dup2(c->out_w, STDOUT_FILENO) < 0 || dup2(c->err_w, STDERR_FILENO) < 0)
		_exit(SETUP_FAILED);
	if (setgroups(0, NULL) < 0 || setresgid(sb->gid, sb->gid, sb->gid) < 0 ||
	    setresuid(sb->uid, sb->uid, sb->uid) < 0) {
		log_errno(-errno, "user %u:%u", (unsigned)sb->uid, (unsigned)sb->gid);
		_exit(SETUP_FAILED);
	}
	if (caps_drop_all() < 0)
		_exit(SETUP_FAILED);
	if (chdir(sb->workdir) < 0) {
		log_errno(-errno, "workdir '%s'", sb->workdir);
		_exit(SETUP_FAILED);
	}
	if (policy_env(sb, &env) < 0)
		_exit(SETUP_FAILED);
	syscall(SYS_close_range, 3, ~0u, 0);
	execvpe(c->argv[0], c->argv, env);
	e = errno;
	log_errno(-e, "run '%s'", c->argv[0]);
	_exit(e == ENOENT ? 127 : 126);
}

/* The command's stack while it shares the init's memory (until its exec). */
static char cmd_stack[128 * 1024] __attribute__((aligned(64)));

static int command_entry(void *arg)
{
	struct child_ctx *c = arg;

	close(c->sock);   /* the command's own descriptor table: the init keeps its copy */
	command_main(c);
}

/* The sandbox's init: never returns. */
static __attribute__((noreturn)) void init_main(struct child_ctx *c)
{
	const struct sandbox *sb = c->sb;
	size_t nfds = 1 + sb->n_binds;
	_cleanup_free_ int *fds = calloc(nfds, sizeof(int));
	sigset_t none;
	pid_t cmd, p;
	int st = 0, r;

	/* Die with the launcher; if it already died, the receive below fails. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	if (!fds)
		_exit(SETUP_FAILED);
	r = recv_fds(c->sock, fds, nfds);
	if (r < 0)
		_exit(SETUP_FAILED);
	if (setgroups(0, NULL) < 0 || setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0) {
		log_errno(-errno, "become root in the user namespace");
		_exit(SETUP_FAILED);
	}
	/* Changing ids clears the parent-death signal: set it again, then make
	 * sure the launcher did not die in between (its end of the socket
	 * closes with it). */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (poll(&(struct pollfd){ c->sock, POLLRDHUP, 0 }, 1, 0) != 0)
		_exit(SETUP_FAILED);
	if (unshare(CLONE_NEWCGROUP) < 0) {
		log_errno(-errno, "cgroup namespace");
		_exit(SETUP_FAILED);
	}
	if (setup_root(sb, c->name, &fds[0], fds + 1, c->pooled_net) < 0)
		_exit(SETUP_FAILED);
	set_rlimit(RLIMIT_NOFILE, sb->nofile, "nofile");
	set_rlimit(RLIMIT_CORE, 0, "core");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		log_errno(-errno, "no_new_privs");
		_exit(SETUP_FAILED);
	}
	if (landlock_apply(sb) < 0)
		_exit(SETUP_FAILED);
	if (caps_drop_bounding() < 0 || seccomp_install(sb) < 0)
		_exit(SETUP_FAILED);
	send_msg(c->sock, MSG_READY, 0);
	/* /proc/1 is closed to the command (not dumpable) from before it
	 * exists; its exec makes the command's own memory dumpable again. */
	prctl(PR_SET_DUMPABLE, 0);
	/* The command shares the init's memory until it execs (the init waits
	 * meanwhile, CLONE_VFORK): no page tables to copy, no copy-on-write
	 * faults, for a process that execs at once. */
	cmd = clone(command_entry, cmd_stack + sizeof(cmd_stack), CLONE_VM | CLONE_VFORK | SIGCHLD,
	            c);
	if (cmd < 0) {
		log_errno(-errno, "start the command");
		_exit(SETUP_FAILED);
	}
	/* From here on the init holds nothing the command could use: no
	 * capabilities, no output pipe, not even the launcher's stdio. */
	caps_drop_all();
	if (c->sock != 3) {
		dup2(c->sock, 3);
		c->sock = 3;
	}
	syscall(SYS_close_range, 0, 2, 0);
	syscall(SYS_close_range, 4, ~0u, 0);
	/* Setup's heap (the seccomp compiler's above all) is free now but
	 * private to the init: give its pages back for the sandbox's life. */
	malloc_trim(0);
	for (;;) {
		p = waitpid(-1, &st, __WALL);
		if (p == cmd)
			break;
		if (p < 0 && errno != EINTR)
			_exit(SETUP_FAILED);
	}
	send_msg(c->sock, MSG_STATUS, st);
	_exit(0);
}

static int write_map(pid_t pid, const char *file, uint32_t base)
{
	char path[64], map[64];
	_cleanup_close_ int fd = -1;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	snprintf(map, sizeof(map), "0 %u %u\n", base, SANDBOX_ID_RANGE);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, map, strlen(map)) < 0)
		return log_errno(-errno, "write %s", path);
	return 0;
}

/* A detached copy of path's mount tree, shifted by the sandbox's user
 * namespace, read-only unless rw. */
static int idmapped_tree(const char *path, int userns, bool rw)
{
	struct mount_attr attr = {
		.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
		            (rw ? 0 : MOUNT_ATTR_RDONLY),
		.userns_fd = (uint64_t)userns,
	};
	_cleanup_close_ int fd = open_tree(AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC |
	                                   AT_RECURSIVE);

	if (fd < 0)
		return log_errno(-errno, "'%s'", path);
	if (mount_setattr(fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) < 0)
		return log_errno(-errno, "'%s': idmapped mount", path);
	return TAKE_FD(fd);
}

/* Everything the launcher does between the clone and the init's first step. */
static int prepare_child(const struct sandbox *sb, const char *name, pid_t pid,
                         const struct sandbox_cgroups *cg, struct net_state *net, int sock)
{
	char path[64];
	_cleanup_close_ int userns = -1;
	_cleanup_free_ int *fds = calloc(1 + sb->n_binds, sizeof(int));
	size_t n = 0;
	int r;

	if (!fds)
		return -ENOMEM;

	r = write_map(pid, "uid_map", sb->uid_base);
	if (r == 0)
		r = write_map(pid, "gid_map", sb->uid_base);
	if (r == 0)
		r = cgroups_attach(cg, pid, cg->path[CG_UNIFIED] != NULL);
	if (r == 0)
		r = netpolicy_setup(sb, name, pid, cg->path[CG_UNIFIED], net);
	if (r < 0)
		return r;
	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
	userns = open(path, O_RDONLY | O_CLOEXEC);
	if (userns < 0)
		return log_errno(-errno, "open %s", path);
	r = idmapped_tree(sb->rootfs, userns, false);
	if (r < 0)
		return log_error(r, "rootfs '%s' cannot be mounted", sb->rootfs);
	fds[n++] = r;
	for (size_t i = 0; i < sb->n_binds; i++) {
		r = idmapped_tree(sb->binds[i].src, userns, sb->binds[i].rw);
		if (r < 0)
			break;
		fds[n++] = r;
	}
	if (r >= 0)
		r = send_fds(sock, fds, n);
	if (r < 0 && r != -EPIPE)
		log_errno(r, "hand the mounts to the sandbox");
	for (size_t i = 0; i < n; i++)
		close(fds[i]);
	return r < 0 ? r : 0;
}

struct watch {
	const struct sandbox *sb;
	int pidfd;
	enum sandbox_kill killed_by;
	uint64_t output;
	bool killed;
};

static void kill_sandbox(struct watch *w, enum sandbox_kill why)
{
	if (w->killed)
		return;
	w->killed = true;
	w->killed_by = why;
	syscall(SYS_pidfd_send_signal, w->pidfd, SIGKILL, NULL, 0);
}

/* Copy what fd has to out, within the cap; -1 at end of file. */
static int pump(struct watch *w, int fd, int out)
{
	char buf[65536];
	ssize_t n = read(fd, buf, sizeof(buf));

	if (n < 0)
		return errno == EINTR || errno == EAGAIN ? 0 : -1;
	if (n == 0)
		return -1;
	if (w->sb->output && w->output + (uint64_t)n > w->sb->output) {
		n = (ssize_t)(w->sb->output - w->output);
		kill_sandbox(w, SANDBOX_KILL_OUTPUT);
	}
	if (n > 0)
		(void)write_full(out, buf, (size_t)n);
	w->output += (uint64_t)n;
	return 0;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* Watch the running sandbox until its init is gone: output, wall clock, the
 * launcher's own signals, and the cgroups' OOM and pids events (cgroup.c
 * says which are announced and which are read on a timer).  An idle
 * sandbox wakes its launcher only for what it watches on a timer. */
static void watch_loop(struct watch *w, const struct sandbox_cgroups *cg, int *fds, int sigfd,
                       uint64_t start)
{
	uint64_t deadline = w->sb->timeout > 0 ? start + (uint64_t)(w->sb->timeout * 1e9) : 0;
	struct cgroups_watch cw;
	uint64_t next_read = 0;
	int oom_pending = 0;
	bool read_now;

	cgroups_watch_open(cg, w->sb->kill_on_pids_limit, &cw);
	if (cw.period_ms >= 0)
		next_read = now_ns() + (uint64_t)cw.period_ms * 1000000;
	for (;;) {
		struct pollfd pfd[6] = {
			{ w->pidfd, POLLIN, 0 }, { fds[0], POLLIN, 0 }, { fds[1], POLLIN, 0 },
			{ sigfd, POLLIN, 0 }, { cw.fd[CGW_MEMORY], cw.events[CGW_MEMORY], 0 },
			{ cw.fd[CGW_PIDS], cw.events[CGW_PIDS], 0 },
		};
		int timeout = -1, n;
		uint64_t now = now_ns();

		if (next_read)
			timeout = now >= next_read ? 0 : (int)((next_read - now) / 1000000) + 1;
		/* A v1 OOM notification comes before the OOM killer has picked its
		 * victim: look again shortly, for up to a second. */
		if (oom_pending > 0)
			timeout = 10;
		if (deadline && !w->killed) {
			uint64_t left_ms;

			if (now >= deadline)
				kill_sandbox(w, SANDBOX_KILL_TIME);
			left_ms = now < deadline ? (deadline - now) / 1000000 + 1 : 0;
			if (!w->killed && (timeout < 0 || left_ms < (uint64_t)timeout))
				timeout = (int)(left_ms < INT_MAX ? left_ms : INT_MAX);
		}
		n = poll(pfd, 6, timeout);
		if (n < 0 && errno != EINTR)
			break;
		read_now = next_read && now_ns() >= next_read;
		if (read_now)
			next_read = now_ns() + (uint64_t)cw.period_ms * 1000000;
		for (int i = 0; i < 2; i++)
			if (fds[i] >= 0 && (pfd[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) &&
			    pump(w, fds[i], i ? STDERR_FILENO : STDOUT_FILENO) < 0)
				close_fd(&fds[i]);
		if (pfd[3].revents & POLLIN) {
			struct signalfd_siginfo si;

			(void)!read(sigfd, &si, sizeof(si));
			kill_sandbox(w, SANDBOX_KILL_SIGNAL);
		}
		if (pfd[4].revents) {
			cgroups_watch_ack(&cw, CGW_MEMORY);
			oom_pending = 100;
		}
		if (pfd[5].revents)
			cgroups_watch_ack(&cw, CGW_PIDS);
		if (!w->killed && (pfd[4].revents || oom_pending > 0 || read_now) &&
		    cgroups_oom_killed(cg))
			kill_sandbox(w, SANDBOX_KILL_MEMORY);
		if (oom_pending > 0)
			oom_pending--;
		if (!w->killed && w->sb->kill_on_pids_limit && (pfd[5].revents || read_now) &&
		    cgroups_pids_hit(cg))
			kill_sandbox(w, SANDBOX_KILL_PIDS);
		if (pfd[0].revents & POLLIN)
			break;
	}
	cgroups_watch_close(&cw);
	/* The init is gone and with it every process that held a pipe's write
	 * end: read what is left up to end of file. */
	for (int i = 0; i < 2; i++)
		while (fds[i] >= 0)
			if (pump(w, fds[i], i ? STDERR_FILENO : STDOUT_FILENO) < 0)
				close_fd(&fds[i]);
}

static int make_name(const struct sandbox *sb, char *out, size_t len)
{
	if (sb->name)
		snprintf(out, len, "%s", sb->name);
	else
		snprintf(out, len, "lazyroot-%d", (int)getpid());
	return 0;
}

/* The sandbox's processes are gone: its cgroups go, or back to the pool. */
static int cgroups_end(struct cgroup_slot *cslot, struct sandbox_cgroups *cg)
{
	return cslot->lock_fd >= 0 ? cgroup_slot_release(cslot, cg) : cgroups_destroy(cg);
}

int sandbox_run(struct sandbox *sb, char *const argv[], struct sandbox_result *ret)
{
	struct sandbox_cgroups cg;
	struct net_state net = NET_STATE_INIT;
	struct launch_record rec = LAUNCH_RECORD_INIT;
	struct netns_slot nslot = NETNS_SLOT_INIT;
	struct cgroup_slot cslot = CGROUP_SLOT_INIT;
	_cleanup_close_ int sigfd = -1, pidfd = -1, cgfd = -1;
	int out[2] = { -1, -1 }, err[2] = { -1, -1 }, sp[2] = { -1, -1 }, rd[2];
	struct clone_args ca = { 0 };
	struct watch w = { .sb = sb, .pidfd = -1 };
	struct msg m;
	bool ready = false, have_status = false, cg_left = false;
	int status = 0, wst = 0, r;
	struct rusage ru;
	sigset_t mask, old;
	char name[96];
	uint64_t start;
	double cpu;
	pid_t pid;

	memset(ret, 0, sizeof(*ret));
	if (!argv || !argv[0])
		return log_error(-EINVAL, "run: no command");
	if (!sb->rootfs)
		return log_error(-EINVAL, "run: no rootfs");
	if (geteuid() != 0)
		return log_error(-EPERM, "run: the launcher needs root (idmapped mounts, cgroups)");
	if (access(sb->rootfs, X_OK) < 0)
		return log_errno(-errno, "rootfs '%s'", sb->rootfs);
	make_name(sb, name, sizeof(name));
	snprintf(ret->name, sizeof(ret->name), "%s", name);
	r = netpolicy_check(sb);
	if (r < 0)
		return r;

	if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
		r = log_errno(-errno, "run: pipes");
		goto close_all;
	}
	sandbox_gc_maybe(&sb->node);
	/* A record only where a dead launcher would leave something for gc
	 * (cgroups of the sandbox's own, a stage state directory) or a name
	 * is to be claimed; a name asked for is claimed first.  The default
	 * name holds the launcher's pid, and a pooled sandbox leaves nothing:
	 * the next taker of a dead launcher's slot starts it over (pool.c).
	 * On ext4 (this VM's /run) the record's create and unlink cost about
	 * 3% of the launch rate (docs/perf-log.md, "Fewer files per launch").  Pooled
	 * cgroups are never listed in a record: they outlive the sandbox, and
	 * a collector of the record must not touch them. */
	if (sb->name || sb->n_stages) {
		r = launch_record_open(&sb->node, name, &rec);
		if (r < 0)
			goto close_all;
	}
	r = cgroup_slot_take(sb, &cslot, &cg);
	if (r < 0)
		goto close_all;
	if (cslot.lock_fd < 0 && rec.fd < 0) {
		r = launch_record_open(&sb->node, name, &rec);
		if (r < 0)
			goto close_all;
	}
	if (cslot.lock_fd < 0) {
		r = cgroups_resolve(sb, name, &cg);
		if (r == 0) {
			r = launch_record_add(&rec, &cg);
			if (r < 0)
				cgroups_forget(&cg);
		}
		if (r == 0)
			r = cgroups_make(sb, &cg);
	}
	if (r < 0)
		goto close_all;
	r = netns_slot_take(sb, &nslot);
	if (r < 0) {
		cg_left = cgroups_end(&cslot, &cg) < 0;
		goto close_all;
	}

	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, &old);
	sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	signal(SIGPIPE, SIG_IGN);

	start = now_ns();
	ca.flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS |
	           CLONE_PIDFD;
	ca.pidfd = (uint64_t)(uintptr_t)&pidfd;
	ca.exit_signal = SIGCHLD;
	/* Born in its cgroup2 directory: one cgroup.procs write fewer. */
	if (cg.path[CG_UNIFIED]) {
		cgfd = open(cg.path[CG_UNIFIED], O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (cgfd < 0) {
			r = log_errno(-errno, "cgroup '%s'", cg.path[CG_UNIFIED]);
			cg_left = cgroups_end(&cslot, &cg) < 0;
			goto restore;
		}
		ca.flags |= CLONE_INTO_CGROUP;
		ca.cgroup = (uint64_t)cgfd;
	}
	/* A pooled network namespace is entered by the launcher and inherited
	 * by the clone; otherwise the sandbox gets a new one of its own. */
	if (nslot.lock_fd >= 0) {
		r = netns_slot_enter(&nslot);
		if (r < 0) {
			cg_left = cgroups_end(&cslot, &cg) < 0;
			goto restore;
		}
	} else {
		ca.flags |= CLONE_NEWNET;
	}
	pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
	if (pid == 0) {
		struct child_ctx c = { sb, name, argv, sp[1], out[1], err[1], nslot.lock_fd >= 0 };

		close(sp[0]);
		close(out[0]);
		close(err[0]);
		/* The record's and the slot's locks must end with the launcher, not
		 * with its init. */
		if (rec.fd >= 0)
			close(rec.fd);
		if (cslot.lock_fd >= 0)
			close(cslot.lock_fd);
		if (nslot.lock_fd >= 0) {
			close(nslot.lock_fd);
			close(nslot.ns_fd);
			close(nslot.host_fd);
			for (int i = 0; i < 3; i++)
				close(nslot.stat_fd[i]);
		}
		init_main(&c);
	}
	if (pid < 0)
		r = log_errno(-errno, "run: clone the sandbox");
	if (nslot.lock_fd >= 0) {
		int r2 = netns_slot_leave(&nslot);

		if (r2 < 0 && pid > 0) {
			syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
			while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
				;
		}
		if (r2 < 0 && r == 0)
			r = r2;
	}
	if (r < 0) {
		cg_left = cgroups_end(&cslot, &cg) < 0;
		goto restore;
	}
	close_fd(&sp[1]);
	close_fd(&out[1]);
	close_fd(&err[1]);
	w.pidfd = pidfd;

	r = prepare_child(sb, name, pid, &cg, &net, sp[0]);
	if (r < 0)
		kill_sandbox(&w, SANDBOX_KILL_NONE);
	rd[0] = TAKE_FD(out[0]);
	rd[1] = TAKE_FD(err[0]);
	watch_loop(&w, &cg, rd, sigfd, start);
	while (wait4(pid, &wst, 0, &ru) < 0 && errno == EINTR)
		;
	ret->wall_seconds = (double)(now_ns() - start) / 1e9;
	while (recv(sp[0], &m, sizeof(m), MSG_DONTWAIT) == (ssize_t)sizeof(m)) {
		if (m.type == MSG_READY)
			ready = true;
		else if (m.type == MSG_STATUS) {
			have_status = true;
			status = m.status;
		}
	}

	ret->output_bytes = w.output;
	cgroups_read_end(&cg);
	ret->memory_peak = cgroups_memory_peak(&cg);
	ret->pids_limit_hit = cgroups_pids_hit(&cg);
	cpu = cgroups_cpu_seconds(&cg);
	if (cpu < 0)
		cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
		      (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
	ret->cpu_seconds = cpu;
	if (!w.killed && cgroups_oom_killed(&cg))
		w.killed_by = SANDBOX_KILL_MEMORY;
	netpolicy_teardown(&net);
	cg_left = cgroups_end(&cslot, &cg) < 0;

	if (r == 0 && !ready && !w.killed) {
		/* The init printed why on stderr. */
		r = log_error(-EIO, "run: sandbox setup failed (init exit %d)",
		              WIFEXITED(wst) ? WEXITSTATUS(wst) : 128 + WTERMSIG(wst));
	}
	if (r < 0)
		goto restore;
	ret->killed_by = w.killed_by;
	if (have_status && WIFEXITED(status)) {
		ret->status = WEXITSTATUS(status);
	} else {
		ret->signal = have_status && WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
		ret->status = 128 + ret->signal;
	}
	r = 0;
restore:
	sigprocmask(SIG_SETMASK, &old, NULL);
close_all:
	/* Every process of the sandbox is gone by now (the init waited for
	 * them): its namespace may go back to the pool. */
	netns_slot_release(&nslot);
	launch_record_close(&rec, !cg_left);
	for (int i = 0; i < 2; i++) {
		close_fd(&out[i]);
		close_fd(&err[i]);
		close_fd(&sp[i]);
	}
	return r;
}
