/*
 * init.c — the sandbox's init (pid 1 inside) and its command (pid 2) up to
 * the command's exec, each as an ordered list of named steps.
 *
 *   init    takes root inside, unshares the cgroup namespace (once it sits
 *           in its cgroups), builds the root (setup.c, one step each), sets
 *           rlimits, no_new_privs, Landlock, an empty bounding set and the
 *           seccomp filter, then the per-namespace limits; forks the command,
 *           gives up its own capabilities and reaps until the command ends;
 *           then it sends the command's wait status and exits, and the
 *           kernel kills whatever else is left in the pid namespace.
 *   command takes the policy's uid/gid, drops every capability, and execs
 *           with the policy's environment and working directory.
 *
 * A step that fails has logged why (on the launcher's stderr: the init holds
 * it until the command starts); the init then exits SETUP_FAILED and takes
 * everything it made with it, so no step has an undo.  Each row says what
 * an exec into the running sandbox does about it (launch-internal.h).
 */
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <grp.h>

#include "lib/lib.h"
#include "sandbox/launch-internal.h"

int send_fds(int sock, const int *fds, size_t n)
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

/* The state the init's and the command's steps share.  The command runs in
 * the init's memory until its exec (CLONE_VM), so it is one struct. */
struct init {
	struct child_ctx *c;
	const struct sandbox *sb;
	int *fds;               /* the mount trees: [0] the rootfs, [1 + i] bind i */
	struct ns_limits limits;
	char **env;             /* the command's environment (borrows sb's strings) */
};

/* ---- the init's steps ------------------------------------------------------ */

/* Die with the launcher; if it already died, receiving the mounts fails. */
static int step_parent_death(struct init *in)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	return 0;
}

/* Into the v1 cgroups before anything else: what the init allocates from
 * here on is charged to the sandbox. */
static int step_cgroups(struct init *in)
{
	return cgroups_self_move(in->c->cg_tasks);
}

static int step_signals(struct init *in)
{
	sigset_t none;

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	return 0;
}

static int step_mount_trees(struct init *in)
{
	in->fds = calloc(1 + in->sb->n_binds, sizeof(int));
	if (!in->fds)
		return -ENOMEM;
	return recv_fds(in->c->sock, in->fds, 1 + in->sb->n_binds);
}

int init_root_ids(void)
{
	if (setgroups(0, NULL) < 0 || setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
		return log_errno(-errno, "become root in the user namespace");
	return 0;
}

static int step_root_ids(struct init *in)
{
	return init_root_ids();
}

/* Changing ids clears the parent-death signal: set it again, then make sure
 * the launcher did not die in between (its end of the socket closes with
 * it). */
static int step_launcher_alive(struct init *in)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (poll(&(struct pollfd){ in->c->sock, POLLRDHUP, 0 }, 1, 0) != 0)
		return -EPIPE;
	return 0;
}

static int step_cgroup_ns(struct init *in)
{
	if (unshare(CLONE_NEWCGROUP) < 0)
		return log_errno(-errno, "cgroup namespace");
	return 0;
}

/* Opened through the host's /proc while it is there (the sandbox's own has
 * /proc/sys read-only), written once setup is done (step_ns_limits). */
static int step_ns_limits_open(struct init *in)
{
	return ns_limits_open(in->sb, &in->limits);
}

static int step_tmpfs(struct init *in)
{
	return setup_tmpfs(in->sb, in->c->name);
}

static int step_overlay(struct init *in)
{
	return setup_overlay(in->sb, &in->fds[0]);
}

static int step_proc(struct init *in)
{
	return setup_proc(in->sb);
}

static int step_sys(struct init *in)
{
	return setup_sys(in->sb);
}

static int step_masks(struct init *in)
{
	return setup_masks(in->sb);
}

static int step_dev(struct init *in)
{
	return setup_dev(in->sb);
}

static int step_binds(struct init *in)
{
	return setup_binds(in->sb, in->fds + 1);
}

static int step_hostname(struct init *in)
{
	return setup_hostname(in->sb);
}

/* A pooled namespace's loopback is up already, and the sandbox has no right
 * to it. */
static int step_loopback(struct init *in)
{
	int r;

	if (in->c->pooled_net)
		return 0;
	r = loopback_up();
	if (r < 0)
		return log_errno(r, "bring the loopback up");
	return 0;
}

static int step_pivot_root(struct init *in)
{
	return setup_pivot();
}

static void set_rlimit(int res, uint64_t v, const char *what)
{
	struct rlimit rl = { v, v };

	if (setrlimit(res, &rl) < 0)
		log_errno(-errno, "rlimit %s", what);
}

void init_rlimits(const struct sandbox *sb)
{
	set_rlimit(RLIMIT_NOFILE, sb->nofile, "nofile");
	set_rlimit(RLIMIT_CORE, 0, "core");
}

static int step_rlimits(struct init *in)
{
	init_rlimits(in->sb);
	return 0;
}

static int step_no_new_privs(struct init *in)
{
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return log_errno(-errno, "no_new_privs");
	return 0;
}

static int step_landlock(struct init *in)
{
	return landlock_apply(in->sb);
}

static int step_bounding_set(struct init *in)
{
	return caps_drop_bounding();
}

static int step_seccomp(struct init *in)
{
	return seccomp_install(in->sb);
}

/* Last: the init's setup has made its namespaces and detached mount trees;
 * from here on neither it nor the command makes any. */
static int step_ns_limits(struct init *in)
{
	return ns_limits_apply(&in->limits);
}

static int step_ready(struct init *in)
{
	send_msg(in->c->sock, MSG_READY, 0);
	return 0;
}

/* /proc/1 is closed to the command (not dumpable) from before it exists;
 * its exec makes the command's own memory dumpable again. */
static int step_not_dumpable(struct init *in)
{
	prctl(PR_SET_DUMPABLE, 0);
	return 0;
}

/* ---- the command's steps --------------------------------------------------- */

static int step_session(struct init *in)
{
	setsid();
	return 0;
}

static int step_stdio(struct init *in)
{
	if (dup2(in->c->in, STDIN_FILENO) < 0 || dup2(in->c->out_w, STDOUT_FILENO) < 0 ||
	    dup2(in->c->err_w, STDERR_FILENO) < 0)
		return -errno;
	return 0;
}

static int step_user(struct init *in)
{
	const struct sandbox *sb = in->sb;

	if (setgroups(0, NULL) < 0 || setresgid(sb->gid, sb->gid, sb->gid) < 0 ||
	    setresuid(sb->uid, sb->uid, sb->uid) < 0)
		return log_errno(-errno, "user %u:%u", (unsigned)sb->uid, (unsigned)sb->gid);
	return 0;
}

/* Root inside keeps what changing ids and owners needs (CAPS_ROOT_KEPT);
 * another user has nothing to keep (its setresuid cleared them all). */
static int step_capabilities(struct init *in)
{
	return caps_limit(in->sb->uid == 0 ? CAPS_ROOT_KEPT : 0);
}

static int step_workdir(struct init *in)
{
	if (chdir(in->sb->workdir) < 0)
		return log_errno(-errno, "workdir '%s'", in->sb->workdir);
	return 0;
}

static int step_environment(struct init *in)
{
	return policy_env(in->sb, &in->env);
}

static int step_descriptors(struct init *in)
{
	syscall(SYS_close_range, 3, ~0u, 0);
	return 0;
}

/* Does not return: the command, or its exit code when it cannot start.
 * argv[0] is searched in the command's PATH: execvpe reads the caller's
 * environ, which is the launcher's until set here. */
static int step_exec(struct init *in)
{
	char *const *argv = in->c->argv;
	int e;

	environ = in->env;
	execvpe(argv[0], argv, in->env);
	e = errno;
	log_errno(-e, "run '%s'", argv[0]);
	_exit(e == ENOENT ? 127 : 126);
}

/* ---- the lists ------------------------------------------------------------- */

struct init_step {
	struct plan_step_info info;
	int (*run)(struct init *in);
};

/* A row marked for an exec ends with its replay (enter.c). */
#define I(name_, scope_, exec_, needs_, fn, ...) \
	{ { .name = name_, .side = PLAN_INIT, .scope = scope_, .exec = exec_, .needs = needs_, \
	    __VA_ARGS__ }, fn }
#define C(name_, scope_, exec_, needs_, fn, ...) \
	{ { .name = name_, .side = PLAN_COMMAND, .scope = scope_, .exec = exec_, .needs = needs_, \
	    __VA_ARGS__ }, fn }
#define LAUNCH PLAN_SCOPE_LAUNCH
#define SANDBOX PLAN_SCOPE_SANDBOX
#define PROCESS PLAN_SCOPE_PROCESS
#define NONE PLAN_EXEC_NONE
#define ENTER PLAN_EXEC_ENTER
#define REPLAY PLAN_EXEC_REPLAY

static const struct init_step init_steps[] = {
	I("parent death", LAUNCH, NONE, 0, step_parent_death),
	I("join cgroups", PROCESS, REPLAY, PLAN_NEEDS_CGROUP, step_cgroups, enter_join_cgroups),
	I("signals", PROCESS, REPLAY, 0, step_signals, enter_signals),
	I("mount trees", SANDBOX, NONE, 0, step_mount_trees),
	I("root ids", PROCESS, REPLAY, PLAN_NEEDS_PIDFD, step_root_ids, enter_root_ids),
	I("launcher alive", LAUNCH, NONE, 0, step_launcher_alive),
	I("cgroup namespace", SANDBOX, ENTER, PLAN_NEEDS_PIDFD, step_cgroup_ns, enter_cgroup_ns),
	I("namespace limits open", SANDBOX, NONE, 0, step_ns_limits_open),
	I("tmpfs", SANDBOX, NONE, 0, step_tmpfs),
	I("overlay", SANDBOX, NONE, 0, step_overlay),
	I("proc", SANDBOX, NONE, 0, step_proc),
	I("sys", SANDBOX, NONE, 0, step_sys),
	I("masks", SANDBOX, NONE, 0, step_masks),
	I("dev", SANDBOX, NONE, 0, step_dev),
	I("binds", SANDBOX, NONE, 0, step_binds),
	I("hostname", SANDBOX, NONE, 0, step_hostname),
	I("loopback", SANDBOX, NONE, 0, step_loopback),
	/* an exec takes the init's root: setns into its mount namespace */
	I("pivot_root", SANDBOX, ENTER, PLAN_NEEDS_PIDFD, step_pivot_root, enter_pivot_root),
	I("rlimits", PROCESS, REPLAY, PLAN_NEEDS_POLICY, step_rlimits, enter_rlimits),
	I("no_new_privs", PROCESS, REPLAY, 0, step_no_new_privs, enter_no_new_privs),
	/* an exec's rules are the current stage's; the hidden paths' covers
	 * are the sandbox's mounts, there already */
	I("landlock", PROCESS, REPLAY, PLAN_NEEDS_POLICY | PLAN_NEEDS_STAGE, step_landlock,
	  enter_landlock),
	I("bounding set", PROCESS, REPLAY, 0, step_bounding_set, enter_bounding_set),
	I("seccomp", PROCESS, REPLAY, PLAN_NEEDS_POLICY, step_seccomp, enter_seccomp),
	I("namespace limits", SANDBOX, NONE, 0, step_ns_limits),
	I("ready", LAUNCH, NONE, 0, step_ready),
	I("not dumpable", PROCESS, REPLAY, 0, step_not_dumpable, enter_not_dumpable),
};

static const struct init_step command_steps[] = {
	C("session", PROCESS, REPLAY, 0, step_session, enter_session),
	C("stdio", PROCESS, REPLAY, PLAN_NEEDS_REQUEST, step_stdio, enter_stdio),
	C("user", PROCESS, REPLAY, PLAN_NEEDS_POLICY | PLAN_NEEDS_REQUEST, step_user, enter_user),
	C("capabilities", PROCESS, REPLAY, 0, step_capabilities, enter_capabilities),
	/* an exec's cwd is resolved inside the sandbox's root */
	C("workdir", PROCESS, REPLAY, PLAN_NEEDS_POLICY | PLAN_NEEDS_REQUEST, step_workdir,
	  enter_workdir),
	C("environment", PROCESS, REPLAY, PLAN_NEEDS_POLICY | PLAN_NEEDS_REQUEST, step_environment,
	  enter_environment),
	C("descriptors", PROCESS, REPLAY, 0, step_descriptors, enter_descriptors),
	C("exec", PROCESS, REPLAY, PLAN_NEEDS_REQUEST, step_exec, enter_exec),
};

const struct plan_step_info *init_step_at(size_t i)
{
	return i < ARRAY_SIZE(init_steps) ? &init_steps[i].info : NULL;
}

const struct plan_step_info *command_step_at(size_t i)
{
	return i < ARRAY_SIZE(command_steps) ? &command_steps[i].info : NULL;
}

/* Run steps in order; the first that fails ends the process. */
static void run_steps(const struct init_step *steps, size_t n, struct init *in)
{
	for (size_t i = 0; i < n; i++)
		if (steps[i].run(in) < 0)
			_exit(SETUP_FAILED);
}

static void init_sigchld(int sig)
{
	(void)sig;
}

/* The command's stack while it shares the init's memory (until its exec). */
static char cmd_stack[128 * 1024] __attribute__((aligned(64)));

static int command_entry(void *arg)
{
	struct init *in = arg;

	close(in->c->sock);   /* the command's own descriptor table: the init keeps its copy */
	run_steps(command_steps, ARRAY_SIZE(command_steps), in);
	_exit(SETUP_FAILED);   /* not reached: step_exec does not return */
}

/* A keeper's init runs no command: it holds the sandbox's namespaces and,
 * as pid 1, reaps what execs leave behind, until the keeper kills it or
 * dies (its end of the socket closes).  SIGCHLD stays blocked except inside
 * ppoll, so that a child that ends between the reaping and the wait wakes
 * the wait instead of being missed. */
static __attribute__((noreturn)) void idle_init(struct child_ctx *c)
{
	sigset_t chld, none;

	caps_drop_all();
	if (c->sock != 3) {
		dup2(c->sock, 3);
		c->sock = 3;
	}
	syscall(SYS_close_range, 0, 2, 0);
	syscall(SYS_close_range, 4, ~0u, 0);
	malloc_trim(0);
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigemptyset(&none);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	/* a handler, so that SIGCHLD interrupts ppoll (ignored, it would not) */
	signal(SIGCHLD, init_sigchld);
	for (;;) {
		struct pollfd p = { c->sock, POLLRDHUP, 0 };

		while (waitpid(-1, NULL, __WALL | WNOHANG) > 0)
			;
		if (ppoll(&p, 1, NULL, &none) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
			_exit(0);
	}
}

void init_main(struct child_ctx *c)
{
	struct init in = { .c = c, .sb = c->sb };
	pid_t cmd, p;
	int st = 0;

	run_steps(init_steps, ARRAY_SIZE(init_steps), &in);
	if (!c->argv) {
		free(in.fds);
		idle_init(c);
	}
	/* The command shares the init's memory until it execs (the init waits
	 * meanwhile, CLONE_VFORK): no page tables to copy, no copy-on-write
	 * faults, for a process that execs at once. */
	cmd = clone(command_entry, cmd_stack + sizeof(cmd_stack), CLONE_VM | CLONE_VFORK | SIGCHLD,
	            &in);
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
	free(in.fds);
	free(in.env);
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
