/*
 * launch.c — sandbox_run: the launcher's own steps, the one loop that runs
 * them with one undo stack, and the plan's listing (launch-internal.h).
 *
 * Processes:
 *   launcher (host, root)  takes a host id range of the sandbox's own
 *       (pool.c), makes the cgroups and output pipes, clones the init into
 *       new user (owned by the range's base uid), mount, pid, net, ipc and
 *       uts namespaces, writes its id maps (inside 0..65535 = host
 *       uid_base..), moves it into the cgroups, makes idmapped read-only
 *       mount trees of the rootfs (a directory or the node's shared mount of
 *       an image) and the read-only binds, plain ones of the writable binds,
 *       and hands them over a socket; then copies output (up to the cap,
 *       never waiting on its own stdout or stderr) and enforces the wall
 *       clock, until the init is gone (watch.c); then cleans up, gives
 *       writable binds back (their setuid and setgid bits cleared, binds.c),
 *       and writes out the rest of the output.
 *   init (pid 1 inside) and command (pid 2): init.c.
 *
 * Each of the launcher's steps below has an undo that is safe on whatever
 * the step left when it failed, and on a step that did nothing: the loop
 * pushes a step's undo before it runs it, stops at the first failure, and
 * then (or once the last step, the watch, is over) unwinds the stack in
 * reverse.  The order is the cleanup's order too: the writable binds are
 * given back and the id range released only once the init is reaped and
 * its cgroups are gone, and the launcher waits for its own output's reader
 * only after everything else (the output step comes before them all, and
 * the signals it may give up on before it).
 *
 * The init dies with the launcher (PR_SET_PDEATHSIG), and with it the whole
 * sandbox; killing the init is how the launcher ends a sandbox early.
 * Every mount lives in the sandbox's mount namespace, so teardown is the
 * init's death plus rmdir of the cgroups (or their return to the pool, with
 * the network namespace's: pool.c).
 */
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "lib/lib.h"
#include "sandbox/launch-internal.h"

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

/* A detached copy of path's mount tree (dfd's when path is ""), nosuid and
 * nodev.  Read-only ones are shifted by the sandbox's user namespace
 * (userns), so that the image's owners hold inside.  A writable one (rw)
 * is not shifted: what the sandbox creates in it is owned on the host by
 * the sandbox's own host ids (uid_base + its id inside), never by host root
 * or a host user, since a process of the sandbox can only chown to ids its
 * user namespace maps, and those are its range alone. */
static int idmapped_tree(int dfd, const char *path, int userns, bool rw)
{
	struct mount_attr attr = {
		.attr_set = (rw ? 0 : MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY) | MOUNT_ATTR_NOSUID |
		            MOUNT_ATTR_NODEV,
		.userns_fd = rw ? 0 : (uint64_t)userns,
	};
	_cleanup_close_ int fd = open_tree(dfd, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC |
	                                   AT_RECURSIVE | (path[0] ? 0 : AT_EMPTY_PATH));

	if (fd < 0)
		return log_errno(-errno, "'%s'", path);
	if (mount_setattr(fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) < 0)
		return log_errno(-errno, "'%s': idmapped mount", path);
	return TAKE_FD(fd);
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

static int become_owner(const struct id_slot *ids)
{
	if (syscall(SYS_setresgid, -1, ids->gid_base, -1) < 0)
		return log_errno(-errno, "run: effective gid %u", (unsigned)ids->gid_base);
	if (syscall(SYS_setresuid, -1, ids->uid_base, -1) < 0) {
		int r = -errno;

		syscall(SYS_setresgid, -1, 0, -1);
		return log_errno(r, "run: effective uid %u", (unsigned)ids->uid_base);
	}
	if (caps_raise_effective() < 0) {
		int r = -errno;

		syscall(SYS_setresuid, -1, 0, -1);
		syscall(SYS_setresgid, -1, 0, -1);
		return log_errno(r, "run: raise the capabilities");
	}
	return 0;
}

/* Back to effective root (which gives the capabilities back to the
 * effective set) and dumpable, as a change of effective ids made the
 * launcher not dumpable. */
static void back_to_root(void)
{
	syscall(SYS_setresuid, -1, 0, -1);
	syscall(SYS_setresgid, -1, 0, -1);
	prctl(PR_SET_DUMPABLE, 1);
}

/* What the command reads as stdin: the launcher's own when it is a regular
 * file or a pipe, opened anew read-only (so that a descriptor the caller
 * opened for writing too, `<>file`, stays the caller's, and the caller's
 * offset does not move); /dev/null for anything else.  A terminal above all
 * never reaches a sandbox: through it a sandbox could write to the
 * operator's screen past the output pipes and cap, and change the
 * terminal's settings and window size for good.  Sockets and devices get
 * /dev/null as well (a socket's peer would be reachable by writes).
 * *ret_named: the descriptor has a path (a file, a named FIFO), which the
 * sandbox could read back from /proc/self/fd: the caller hands the sandbox
 * a pipe instead.  The descriptor is the launcher's; -errno. */
static int sandbox_stdin(bool *ret_named)
{
	struct stat st;
	char path[32], link[8];
	int fd = -1;

	*ret_named = false;
	if (fstat(STDIN_FILENO, &st) == 0 && (S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode))) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", STDIN_FILENO);
		/* O_NONBLOCK: opening a FIFO that has no writer must not wait. */
		fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
		if (fd >= 0 && S_ISREG(st.st_mode)) {
			off_t at = lseek(STDIN_FILENO, 0, SEEK_CUR);

			if (at > 0 && lseek(fd, at, SEEK_SET) < 0) {
				close(fd);
				fd = -1;
			}
		}
		if (fd >= 0 && fcntl(fd, F_SETFL, 0) < 0) {
			close(fd);
			fd = -1;
		}
		*ret_named = fd >= 0 && (S_ISREG(st.st_mode) ||
		             readlink(path, link, sizeof(link)) != 6 || memcmp(link, "pipe:[", 6));
	}
	if (fd < 0)
		fd = open("/dev/null", O_RDONLY | O_NOCTTY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* ---- the host's steps ------------------------------------------------------ */

static int step_check(struct launch *l)
{
	struct sandbox *sb = l->sb;

	if (l->argv && !l->argv[0])
		return log_error(-EINVAL, "run: no command");
	if (!sb->rootfs)
		return log_error(-EINVAL, "run: no rootfs");
	if (geteuid() != 0)
		return log_error(-EPERM, "run: the launcher needs root (idmapped mounts, cgroups)");
	if (access(sb->rootfs, X_OK) < 0)
		return log_errno(-errno, "rootfs '%s'", sb->rootfs);
	make_name(sb, l->name, sizeof(l->name));
	snprintf(l->ret->name, sizeof(l->ret->name), "%s", l->name);
	return netpolicy_check(sb);
}

/* SIGINT, SIGTERM and SIGHUP end the sandbox (the watch reads them from a
 * signalfd), and give up on a reader of the output that does not read once
 * the sandbox is gone. */
static int step_signals(struct launch *l)
{
	sigset_t mask;

	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, &l->old_mask);
	l->masked = true;
	l->sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

static void undo_signals(struct launch *l)
{
	close_fd(&l->sigfd);
	if (l->masked)
		sigprocmask(SIG_SETMASK, &l->old_mask, NULL);
	l->masked = false;
}

static int step_pipes(struct launch *l)
{
	if (pipe2(l->out, O_CLOEXEC) < 0 || pipe2(l->err, O_CLOEXEC) < 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, l->sp) < 0)
		return log_errno(-errno, "run: pipes");
	return 0;
}

static void undo_pipes(struct launch *l)
{
	for (int i = 0; i < 2; i++) {
		close_fd(&l->out[i]);
		close_fd(&l->err[i]);
		close_fd(&l->sp[i]);
	}
}

static int step_stdin(struct launch *l)
{
	_cleanup_close_ int src = -1;
	int p[2];
	bool named;

	src = sandbox_stdin(&named);
	if (src < 0)
		return log_errno(src, "run: stdin");
	if (!named) {
		l->in = TAKE_FD(src);
		return 0;
	}
	/* Through a pipe the watch loop fills (watch.c, stdin_pump); neither
	 * end waits, and the source is this launcher's own open, so that
	 * O_NONBLOCK on it is not the caller's. */
	if (pipe2(p, O_CLOEXEC) < 0 || fcntl(p[1], F_SETFL, O_NONBLOCK) < 0 ||
	    fcntl(src, F_SETFL, O_NONBLOCK) < 0)
		return log_errno(-errno, "run: stdin: a pipe for it");
	l->in = p[0];
	l->w.in_pipe = p[1];
	l->w.in_src = TAKE_FD(src);
	return 0;
}

static void undo_stdin(struct launch *l)
{
	close_fd(&l->in);
	close_fd(&l->w.in_src);
	close_fd(&l->w.in_pipe);
}

static int step_output(struct launch *l)
{
	out_open(&l->w.o[0], STDOUT_FILENO);
	out_open(&l->w.o[1], STDERR_FILENO);
	return 0;
}

/* The sandbox is gone and cleaned up: only now may the launcher wait for
 * its reader to take the rest of the output. */
static void undo_output(struct launch *l)
{
	for (int i = 0; i < 2; i++) {
		close_fd(&l->w.o[i].in);
		out_finish(&l->w.o[i], l->sigfd);
	}
	l->ret->stderr_open_line = l->w.o[1].any && l->w.o[1].last != '\n';
}

static int step_gc(struct launch *l)
{
	sandbox_gc_maybe(&l->sb->node);
	return 0;
}

static int step_ids(struct launch *l)
{
	int r = id_slot_take(l->sb, &l->ids);

	if (r < 0)
		return r;
	l->ret->uid_base = l->ids.uid_base;
	l->ret->gid_base = l->ids.gid_base;
	return 0;
}

static void undo_ids(struct launch *l)
{
	id_slot_release(&l->ids);
}

static int step_lend_binds(struct launch *l)
{
	const struct sandbox *sb = l->sb;
	int r;

	l->lent = calloc(sb->n_binds + 1, sizeof(*l->lent));
	if (!l->lent)
		return -ENOMEM;
	for (size_t i = 0; i < sb->n_binds; i++)
		l->lent[i].fd = -1;
	for (size_t i = 0; i < sb->n_binds; i++) {
		if (!sb->binds[i].rw)
			continue;
		r = bind_lend(&sb->node, &sb->binds[i], &l->ids, &l->lent[i], &l->rec);
		if (r < 0)
			return r;
	}
	return 0;
}

static void undo_lend_binds(struct launch *l)
{
	for (size_t i = 0; l->lent && i < l->sb->n_binds; i++)
		bind_return(&l->sb->binds[i], &l->lent[i]);
	free(l->lent);
	l->lent = NULL;
}

/* A record only where a dead launcher would leave something for gc
 * (cgroups of the sandbox's own, a stage state directory, writable binds
 * lent: the record lists them before they are lent) or a name is to
 * be claimed; a name asked for is claimed first.  The default name holds
 * the launcher's pid, and a pooled sandbox leaves nothing: the next taker
 * of a dead launcher's slot starts it over (pool.c).  Where /run is ext4,
 * the record's create and unlink cost about 3% of the launch rate
 * (docs/perf-log.md, "Fewer files per launch").  Pooled cgroups are never
 * listed in a record: they outlive the sandbox, and a collector of the
 * record must not touch them.  The cgroups step opens the record for
 * cgroups of the sandbox's own; this undo closes it either way. */
static int step_record(struct launch *l)
{
	bool rw = false;

	for (size_t i = 0; i < l->sb->n_binds; i++)
		rw = rw || l->sb->binds[i].rw;
	if (l->sb->name || l->sb->n_stages || rw)
		return launch_record_open(&l->sb->node, l->name, &l->rec);
	return 0;
}

static void undo_record(struct launch *l)
{
	launch_record_close(&l->rec, !l->cg_left);
}

static int step_cgroups(struct launch *l)
{
	int r = cgroup_slot_take(l->sb, &l->cslot, &l->cg);

	if (r < 0)
		return r;
	if (l->cslot.lock_fd >= 0) {
		l->cg_held = true;
		return 0;
	}
	if (l->rec.fd < 0) {
		r = launch_record_open(&l->sb->node, l->name, &l->rec);
		if (r < 0)
			return r;
	}
	r = cgroups_resolve(l->sb, l->name, &l->cg);
	if (r < 0)
		return r;
	r = launch_record_add(&l->rec, &l->cg);
	if (r < 0) {
		cgroups_forget(&l->cg);
		return r;
	}
	r = cgroups_make(l->sb, &l->cg);
	if (r < 0)
		return r;
	l->cg_held = true;
	return 0;
}

/* The sandbox's processes are gone (the clone's undo reaped the init): its
 * cgroups go, or back to the pool. */
static void undo_cgroups(struct launch *l)
{
	if (l->cg_held)
		l->cg_left = cgroups_end(&l->cslot, &l->cg) < 0;
	l->cg_held = false;
}

static int step_netns(struct launch *l)
{
	return netns_slot_take(l->sb, &l->nslot);
}

/* Every process of the sandbox is gone by now (the init waited for them):
 * its namespace may go back to the pool. */
static void undo_netns(struct launch *l)
{
	netns_slot_release(&l->nslot);
}

/* Born in its cgroup2 directory: one cgroup.procs write fewer.  The v1
 * tasks files are opened here, as root, for the init to move itself. */
static int step_cgroup_fds(struct launch *l)
{
	if (l->cg.path[CG_UNIFIED]) {
		l->cgfd = open(l->cg.path[CG_UNIFIED], O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (l->cgfd < 0)
			return log_errno(-errno, "cgroup '%s'", l->cg.path[CG_UNIFIED]);
	}
	return cgroups_self_open(&l->cg, l->cg_tasks);
}

static void undo_cgroup_fds(struct launch *l)
{
	close_fd(&l->cgfd);
	cgroups_self_close(l->cg_tasks);
}

/* In the child of the clone: drop what must end with the launcher, not with
 * its init (the record's and the slots' locks), then become the init. */
static __attribute__((noreturn)) void become_init(struct launch *l)
{
	struct child_ctx c = { l->sb, l->name, l->argv, l->sp[1], l->in, l->out[1], l->err[1],
	                       l->nslot.lock_fd >= 0, l->cg_tasks };

	close(l->sp[0]);
	close(l->out[0]);
	close(l->err[0]);
	close_fd(&l->w.in_src);
	close_fd(&l->w.in_pipe);
	if (l->rec.fd >= 0)
		close(l->rec.fd);
	if (l->cslot.lock_fd >= 0)
		close(l->cslot.lock_fd);
	if (l->nslot.lock_fd >= 0) {
		close(l->nslot.lock_fd);
		close(l->nslot.ns_fd);
		close(l->nslot.host_fd);
		for (int i = 0; i < 3; i++)
			close(l->nslot.stat_fd[i]);
		for (int i = 0; i < 4; i++)
			close(l->nslot.count_fd[i]);
	}
	init_main(&c);
}

static void reap_init(struct launch *l, int *wst, struct rusage *ru)
{
	while (wait4(l->pid, wst, 0, ru) < 0 && errno == EINTR)
		;
	l->pid = 0;
}

/* The init, in new user, mount, pid, ipc and uts namespaces, and a network
 * namespace of its own or the pooled one (entered by the launcher for the
 * clone to inherit).  The clone makes the sandbox's user namespace, which is
 * owned by the effective uid that makes it, and the kernel charges the
 * namespace's per-user budgets (inotify instances and watches, message
 * queue bytes, pending signals, ...: its ucounts) to that owner in the
 * host's namespace.  Made by root, every sandbox shared root's budget with
 * the others and with root's own daemons; made with the effective ids set
 * to the sandbox's own base ids (real and saved ids stay root, the
 * capabilities raised again for the clone's cgroup), each has its own.  The
 * launcher is root again at once. */
static int step_clone(struct launch *l)
{
	struct clone_args ca = { 0 };
	bool pooled = l->nslot.lock_fd >= 0;
	int r = 0;
	pid_t pid;

	l->start = now_ns();
	ca.flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS |
	           CLONE_PIDFD;
	ca.pidfd = (uint64_t)(uintptr_t)&l->pidfd;
	ca.exit_signal = SIGCHLD;
	if (l->cgfd >= 0) {
		ca.flags |= CLONE_INTO_CGROUP;
		ca.cgroup = (uint64_t)l->cgfd;
	}
	if (pooled) {
		r = netns_slot_enter(&l->nslot);
		if (r < 0)
			return r;
	} else {
		ca.flags |= CLONE_NEWNET;
	}
	r = become_owner(&l->ids);
	if (r < 0) {
		if (pooled)
			netns_slot_leave(&l->nslot);
		return r;
	}
	pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
	if (pid != 0)
		back_to_root();
	if (pid == 0)
		become_init(l);
	cgroups_self_close(l->cg_tasks);
	if (pid < 0)
		r = log_errno(-errno, "run: clone the sandbox");
	else
		l->pid = pid;
	if (pooled) {
		int r2 = netns_slot_leave(&l->nslot);

		if (r2 < 0 && r == 0)
			r = r2;
	}
	if (r < 0)
		return r;
	close_fd(&l->sp[1]);
	close_fd(&l->out[1]);
	close_fd(&l->err[1]);
	close_fd(&l->in);
	l->w.pidfd = l->pidfd;
	return 0;
}

/* The init is killed if it still runs (a later step failed), and reaped. */
static void undo_clone(struct launch *l)
{
	if (l->pid > 0) {
		syscall(SYS_pidfd_send_signal, l->pidfd, SIGKILL, NULL, 0);
		reap_init(l, NULL, NULL);
	}
	l->w.pidfd = -1;
	close_fd(&l->pidfd);
}

static int step_record_init(struct launch *l)
{
	return launch_record_init(&l->rec, l->pid);
}

static int step_id_maps(struct launch *l)
{
	int r = write_map(l->pid, "uid_map", l->ids.uid_base);

	return r < 0 ? r : write_map(l->pid, "gid_map", l->ids.gid_base);
}

/* Write value into the sysctl at path; 0 or an errno. */
static int sysctl_write(const char *path, const char *value)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), e = 0;

	if (fd < 0)
		return errno;
	if (write(fd, value, strlen(value)) != (ssize_t)strlen(value))
		e = errno ? errno : EIO;
	close(fd);
	return e;
}

/* The child of step_memfd_noexec, in the sandbox's pid namespace: shares
 * the launcher's memory (vfork) and only opens, writes and exits.  It takes
 * pid 2 there, and hands it on: the namespace's next pid is 2 again
 * (ns_last_pid = 1) once it is reaped, so that the command is pid 2 as
 * ever. */
static int memfd_noexec_write(void)
{
	int e = sysctl_write("/proc/sys/vm/memfd_noexec", "2");

	if (e == ENOENT)
		e = 0;
	return e ? e : sysctl_write("/proc/sys/kernel/ns_last_pid", "1");
}

/* vm.memfd_noexec = 2 in the sandbox's pid namespace, where the value is its
 * own (a child namespace may raise it, never lower it): a memfd can no
 * longer be made executable (MFD_EXEC fails with EACCES and every other
 * memfd is sealed against exec), so a binary that exists only in memory
 * cannot be run, and "nothing runs but these trees" holds.  The kernel lets
 * only a process of that namespace write it, with CAP_SYS_ADMIN over the
 * namespace's owner and host root's uid (the file's owner): not the init,
 * whose uid is the sandbox's from the clone on, but a child of the
 * launcher's made there (setns of its pid namespace for children, then
 * back), reaped before the init has its mounts, so before the command
 * exists.  A kernel before 6.3 has no such sysctl: nothing to set. */
static int step_memfd_noexec(struct launch *l)
{
	_cleanup_close_ int own = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
	int status = 0, r = 0;
	pid_t pid;

	if (own < 0)
		return log_errno(-errno, "open /proc/self/ns/pid");
	if (setns(l->pidfd, CLONE_NEWPID) < 0)
		return log_errno(-errno, "enter the sandbox's pid namespace");
	pid = vfork();
	if (pid == 0)
		_exit(memfd_noexec_write());
	if (setns(own, CLONE_NEWPID) < 0)
		r = log_errno(-errno, "return to the launcher's pid namespace");
	if (pid < 0)
		return log_errno(-errno, "set vm.memfd_noexec: fork");
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (r == 0 && (!WIFEXITED(status) || WEXITSTATUS(status)))
		r = log_errno(WIFEXITED(status) ? -WEXITSTATUS(status) : -EIO,
		              "set vm.memfd_noexec in the sandbox's pid namespace");
	return r;
}

static int step_cgroup_attach(struct launch *l)
{
	return cgroups_attach(&l->cg, l->pid, l->cg.path[CG_UNIFIED] != NULL);
}

static int step_network(struct launch *l)
{
	return netpolicy_setup(l->sb, l->name, l->pid, l->cg.path[CG_UNIFIED], &l->net);
}

static void undo_network(struct launch *l)
{
	netpolicy_teardown(&l->net);
}

/* The rootfs and the binds as detached mount trees, handed to the init. */
static int step_mounts(struct launch *l)
{
	const struct sandbox *sb = l->sb;
	char path[64];
	_cleanup_close_ int userns = -1;
	_cleanup_free_ int *fds = calloc(1 + sb->n_binds, sizeof(int));
	size_t n = 0;
	int r;

	if (!fds)
		return -ENOMEM;
	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)l->pid);
	userns = open(path, O_RDONLY | O_CLOEXEC);
	if (userns < 0)
		return log_errno(-errno, "open %s", path);
	r = idmapped_tree(AT_FDCWD, sb->rootfs, userns, false);
	if (r < 0)
		return log_error(r, "rootfs '%s' cannot be mounted", sb->rootfs);
	fds[n++] = r;
	for (size_t i = 0; i < sb->n_binds; i++) {
		r = sb->binds[i].rw ? idmapped_tree(l->lent[i].fd, "", -1, true) :
		                      idmapped_tree(AT_FDCWD, sb->binds[i].src, userns, false);
		if (r < 0)
			break;
		fds[n++] = r;
	}
	/* a tree that could not be made has said why; the init gone (EPIPE)
	 * has said why on its own */
	if (r >= 0) {
		r = send_fds(l->sp[0], fds, n);
		if (r < 0 && r != -EPIPE)
			log_errno(r, "hand the mounts to the sandbox");
	}
	for (size_t i = 0; i < n; i++)
		close(fds[i]);
	return r < 0 ? r : 0;
}

/* The sandbox runs: watch it until its init is gone, reap it, and fill the
 * report.  -EIO when the init ended before it was ready (it said why). */
static int step_watch(struct launch *l)
{
	struct sandbox_result *ret = l->ret;
	bool ready = false, have_status = false;
	int status = 0, wst = 0;
	struct rusage ru;
	struct msg m;
	double cpu;

	l->w.o[0].in = TAKE_FD(l->out[0]);
	l->w.o[1].in = TAKE_FD(l->err[0]);
	watch_loop(&l->w, &l->cg, l->sigfd, l->start);
	reap_init(l, &wst, &ru);
	ret->wall_seconds = (double)(now_ns() - l->start) / 1e9;
	while (recv(l->sp[0], &m, sizeof(m), MSG_DONTWAIT) == (ssize_t)sizeof(m)) {
		if (m.type == MSG_READY) {
			ready = true;
		} else if (m.type == MSG_STATUS) {
			have_status = true;
			status = m.status;
		}
	}
	ret->output_bytes = l->w.output;
	cgroups_read_end(&l->cg);
	ret->memory_peak = cgroups_memory_peak(&l->cg);
	ret->pids_limit_hit = cgroups_pids_hit(&l->cg);
	cpu = cgroups_cpu_seconds(&l->cg);
	if (cpu < 0)
		cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
		      (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
	ret->cpu_seconds = cpu;
	if (!l->w.killed && cgroups_oom_killed(&l->cg))
		l->w.killed_by = SANDBOX_KILL_MEMORY;
	if (!ready && !l->w.killed) {
		/* The init printed why on stderr. */
		return log_error(-EIO, "run: sandbox setup failed (init exit %d)",
		                 WIFEXITED(wst) ? WEXITSTATUS(wst) : 128 + WTERMSIG(wst));
	}
	ret->killed_by = l->w.killed_by;
	if (have_status && WIFEXITED(status)) {
		ret->status = WEXITSTATUS(status);
	} else {
		ret->signal = have_status && WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
		ret->status = 128 + ret->signal;
	}
	return 0;
}

/* ---- the plan -------------------------------------------------------------- */

struct host_step {
	struct plan_step_info info;
	int (*run)(struct launch *l);
	void (*undo)(struct launch *l);   /* NULL: nothing to take back */
};

/* A row marked for an exec ends with its replay (enter.c). */
#define H(name_, scope_, exec_, needs_, run, undo, ...) \
	{ { .name = name_, .side = PLAN_HOST, .scope = scope_, .exec = exec_, .needs = needs_, \
	    __VA_ARGS__ }, run, undo }
#define LAUNCH PLAN_SCOPE_LAUNCH
#define SANDBOX PLAN_SCOPE_SANDBOX
#define PROCESS PLAN_SCOPE_PROCESS
#define NONE PLAN_EXEC_NONE
#define ENTER PLAN_EXEC_ENTER
#define REPLAY PLAN_EXEC_REPLAY

/* In order; the clone's row divides those before the init runs from those
 * it waits on (plan_step_at). */
static const struct host_step host_steps[] = {
	H("check", LAUNCH, NONE, 0, step_check, NULL),
	H("signals", LAUNCH, NONE, 0, step_signals, undo_signals),
	/* an exec has output pipes and stdin of its own, from its request */
	H("output", LAUNCH, REPLAY, PLAN_NEEDS_REQUEST, step_output, undo_output, enter_output),
	H("pipes", LAUNCH, REPLAY, PLAN_NEEDS_REQUEST, step_pipes, undo_pipes, enter_pipes),
	H("stdin", LAUNCH, REPLAY, PLAN_NEEDS_REQUEST, step_stdin, undo_stdin, enter_stdin),
	H("gc", LAUNCH, NONE, 0, step_gc, NULL),
	H("ids", SANDBOX, NONE, 0, step_ids, undo_ids),
	H("record", LAUNCH, NONE, 0, step_record, undo_record),
	H("lend binds", SANDBOX, NONE, 0, step_lend_binds, undo_lend_binds),
	/* an exec's processes live in a cgroup of their own under the sandbox's */
	H("cgroups", PROCESS, REPLAY, PLAN_NEEDS_CGROUP, step_cgroups, undo_cgroups, enter_cgroups),
	H("network namespace", SANDBOX, NONE, 0, step_netns, undo_netns),
	H("cgroup fds", PROCESS, REPLAY, PLAN_NEEDS_CGROUP, step_cgroup_fds, undo_cgroup_fds,
	  enter_cgroup_fds),
	/* an exec enters the init's namespaces through its pidfd (setns) and
	 * is cloned into its own cgroup */
	H("clone", PROCESS, ENTER, PLAN_NEEDS_PIDFD | PLAN_NEEDS_CGROUP, step_clone, undo_clone,
	  enter_clone),
	H("record init", LAUNCH, NONE, 0, step_record_init, NULL),
	H("id maps", SANDBOX, NONE, 0, step_id_maps, NULL),
	/* pid-namespace-wide: an exec joins the namespace, and the value with it */
	H("memfd noexec", SANDBOX, NONE, 0, step_memfd_noexec, NULL),
	H("cgroup attach", PROCESS, REPLAY, PLAN_NEEDS_CGROUP, step_cgroup_attach, NULL,
	  enter_cgroup_attach),
	H("network", SANDBOX, NONE, 0, step_network, undo_network),
	H("mounts", SANDBOX, NONE, 0, step_mounts, NULL),
	/* an exec is watched for its own timeout and output limit */
	H("watch", LAUNCH, REPLAY, PLAN_NEEDS_REQUEST, step_watch, NULL, enter_watch),
};

/* Run the steps of rows [from, to) in order, each undo pushed before its
 * step runs; unwind the whole stack on the first failure. */
static int plan_run(struct launch *l, size_t from, size_t to)
{
	int r = 0;

	for (size_t i = from; i < to && r == 0; i++) {
		if (host_steps[i].undo)
			l->undo[l->n_undo++] = i;
		r = host_steps[i].run(l);
	}
	if (r < 0)
		launch_close(l);
	return r;
}

void launch_init(struct launch *l, struct sandbox *sb, char *const *argv,
                 struct sandbox_result *ret)
{
	*l = (struct launch){
		.sb = sb, .argv = argv, .ret = ret, .sigfd = -1,
		.out = { -1, -1 }, .err = { -1, -1 }, .sp = { -1, -1 }, .in = -1,
		.w = { .sb = sb, .pidfd = -1, .in_src = -1, .in_pipe = -1,
		       .o = { { .in = -1, .out = -1 }, { .in = -1, .out = -1 } } },
		.ids = ID_SLOT_INIT, .rec = LAUNCH_RECORD_INIT, .cslot = CGROUP_SLOT_INIT,
		.nslot = NETNS_SLOT_INIT, .cgfd = -1, .cg_tasks = { -1, -1, -1, -1 },
		.pidfd = -1, .net = NET_STATE_INIT,
	};
	memset(ret, 0, sizeof(*ret));
	ret->time_limit = sb->timeout;
	ret->memory_limit = sb->memory;
	ret->output_limit = sb->output;
	ret->pids_limit = sb->pids;
}

/* The watch is the last row: the keeper's loop takes its place. */
int launch_open(struct launch *l)
{
	_Static_assert(ARRAY_SIZE(host_steps) <= LAUNCH_MAX_STEPS, "undo stack too small");
	return plan_run(l, 0, ARRAY_SIZE(host_steps) - 1);
}

int launch_wait_ready(struct launch *l)
{
	struct pollfd p[2] = { { l->sp[0], POLLIN, 0 }, { l->pidfd, POLLIN, 0 } };
	struct msg m;
	int wst = 0;

	for (;;) {
		if (recv(l->sp[0], &m, sizeof(m), MSG_DONTWAIT) == (ssize_t)sizeof(m) &&
		    m.type == MSG_READY)
			return 0;
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			return log_errno(-errno, "run: wait for the sandbox");
		if ((p[1].revents & POLLIN) && !(p[0].revents & POLLIN))
			break;
	}
	reap_init(l, &wst, NULL);
	return log_error(-EIO, "run: sandbox setup failed (init exit %d)",
	                 WIFEXITED(wst) ? WEXITSTATUS(wst) : 128 + WTERMSIG(wst));
}

void launch_close(struct launch *l)
{
	while (l->n_undo > 0)
		host_steps[l->undo[--l->n_undo]].undo(l);
}

int sandbox_run(struct sandbox *sb, char *const argv[], struct sandbox_result *ret)
{
	struct launch l;
	int r;

	launch_init(&l, sb, argv, ret);
	r = plan_run(&l, 0, ARRAY_SIZE(host_steps));
	if (r == 0)
		launch_close(&l);
	return r;
}

/* ---- the plan as data ------------------------------------------------------ */

static size_t clone_row(void)
{
	size_t i = 0;

	while (host_steps[i].run != step_clone)
		i++;
	return i;
}

const struct plan_step_info *plan_step_at(size_t i)
{
	size_t before = clone_row() + 1, n_init = 0, n_cmd = 0;

	while (init_step_at(n_init))
		n_init++;
	while (command_step_at(n_cmd))
		n_cmd++;
	if (i < before)
		return &host_steps[i].info;
	i -= before;
	if (i < n_init)
		return init_step_at(i);
	i -= n_init;
	if (i < n_cmd)
		return command_step_at(i);
	i -= n_cmd;
	return before + i < ARRAY_SIZE(host_steps) ? &host_steps[before + i].info : NULL;
}

int plan_exec_steps(const struct plan_step_info ***ret, size_t *ret_n)
{
	const struct plan_step_info *s, **v;
	size_t n = 0, total = 0;

	while (plan_step_at(total))
		total++;
	v = calloc(total + 1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; (s = plan_step_at(i)); i++)
		if (s->exec != PLAN_EXEC_NONE)
			v[n++] = s;
	*ret = v;
	*ret_n = n;
	return 0;
}

const char *plan_side_name(enum plan_side s)
{
	switch (s) {
	case PLAN_HOST: return "host";
	case PLAN_INIT: return "init";
	case PLAN_COMMAND: return "command";
	}
	return "?";
}

const char *plan_exec_name(enum plan_exec e)
{
	switch (e) {
	case PLAN_EXEC_NONE: return "none";
	case PLAN_EXEC_ENTER: return "enter";
	case PLAN_EXEC_REPLAY: return "replay";
	}
	return "?";
}
