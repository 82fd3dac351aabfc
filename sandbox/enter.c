/*
 * enter.c — sandbox_enter: a process started from the host inside a running
 * sandbox, confined as the sandbox's own processes are.
 *
 * The steps are the launch plan's (launch-internal.h): sandbox_enter walks
 * plan_exec_steps and runs each row's replay, here, where the row's side
 * says.  Host rows run in the caller; the clone row forks the helper, which
 * enters the init's namespaces and clones the new process; the init's and
 * the command's rows then run in that process up to its exec; the host rows
 * after the clone run in the caller again.  So a step added to the launch
 * and marked for an exec is run by every exec from then on, and one marked
 * without a replay fails every exec at once (and test_plan).
 *
 * Processes:
 *   caller (root, host)  opens what only the host can reach (the v1 tasks
 *       files, the init's root and cgroup namespace for the checks, the
 *       stage state), then clones the helper into the exec's cgroup2
 *       directory, and reads the report pipe until the new process has
 *       exec'd (its end of the pipe closes on exec) or said why it could
 *       not.
 *   helper  not dumpable before anything else (a process of the sandbox
 *       could otherwise ptrace it once it is in the sandbox's namespaces, or
 *       read its memory through /proc), keeps only the descriptors the entry
 *       needs, enters all seven namespaces of the init through its pidfd,
 *       clones the new process with CLONE_PARENT (so that it is the caller's
 *       child, and the caller reaps it with its status and rusage), reports
 *       its pid and exits.  It must fork: entering a pid namespace only
 *       places the caller's children in it.
 *   new process  in the sandbox's pid namespace from birth and not dumpable
 *       (inherited) until its exec; runs the replays and execs, or runs the
 *       request's fn and exits with its value.
 *
 * Each exec gets a Landlock domain of its own (a domain can be inherited,
 * never joined), with the rules of the stage in force: Landlock's scoping
 * then refuses signals and abstract unix sockets between processes of two
 * different execs, and between an exec and the init's processes, as it
 * refuses them between the sandbox and the host.
 */
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdio_ext.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <grp.h>
#include <linux/magic.h>

#include "lib/lib.h"
#include "sandbox/launch-internal.h"

#define MAX_V1 8

/* One message on the report pipe. */
struct report {
	int kind;               /* REPORT_PID from the helper, REPORT_ERR from either */
	int err;                /* -errno */
	pid_t pid;              /* REPORT_PID: the new process, on the host */
	char step[40];          /* REPORT_ERR: the step that failed */
};
enum { REPORT_PID = 1, REPORT_ERR = 2 };

struct enter {
	const struct sandbox_enter_req *r;
	const struct sandbox *sb;
	const char *name;
	const char *step;       /* the row running */
	bool inside;            /* in the new process */
	uid_t uid;
	gid_t gid;
	pid_t init_pid;
	char *init_v2;          /* the init's cgroup2 path, from the cgroup2 root; NULL: none */
	int report[2];
	int tasks[MAX_V1];
	size_t n_tasks;
	int init_root;          /* O_PATH: the init's root, for the pivot_root check */
	int init_cgns;          /* the init's cgroup namespace, for its check */
	char *stage;            /* the stage in force; NULL: the sandbox declares none */
	struct strv hidden;     /* what it hides (with stage) */
	pid_t helper;
	pid_t pid;              /* the new process; 0 before the clone */
	int pidfd;
	struct report failed;   /* the new process's own report of a failure */
	char **env;
};

static void send_report(struct enter *e, int kind, int err, pid_t pid)
{
	struct report m = { .kind = kind, .err = err, .pid = pid };

	snprintf(m.step, sizeof(m.step), "%s", e->step ? e->step : "?");
	(void)!write(e->report[1], &m, sizeof(m));
}

/* The pid of the process pidfd refers to (its fdinfo). */
static int pidfd_pid(int pidfd, pid_t *ret)
{
	char path[64];
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	const char *p;
	int r;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
	r = read_file(path, 4096, &b);
	if (r < 0)
		return r;
	p = strstr((const char *)b.data, "\nPid:");
	if (!p)
		return -EBADF;
	*ret = (pid_t)strtol(p + 5, NULL, 10);
	return *ret > 0 ? 0 : -ESRCH;   /* -1: it has exited */
}

/* The cgroup2 path ("0::PATH") of pid, malloc'd; -ENOENT without cgroup2. */
static int v2_path(pid_t pid, char **ret)
{
	char path[64];
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	char *l, *end;
	int r;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	r = read_file(path, 65536, &b);
	if (r < 0)
		return r;
	for (l = (char *)b.data; l && *l; l = end ? end + 1 : NULL) {
		end = strchr(l, '\n');
		if (end)
			*end = '\0';
		if (!strncmp(l, "0::", 3)) {
			*ret = strdup(l + 3);
			return *ret ? 0 : -ENOMEM;
		}
	}
	return -ENOENT;
}

/* Is p at or beneath dir (both cgroup paths, "/" the root)? */
static bool path_within(const char *p, const char *dir)
{
	size_t n = strlen(dir);

	if (!strcmp(dir, "/"))
		return true;
	return !strncmp(p, dir, n) && (p[n] == '\0' || p[n] == '/');
}

/* ---- what the rows need, gathered on the host once ------------------------- */

static int prepare(struct enter *e, unsigned needs)
{
	const struct sandbox_enter_req *r = e->r;
	int rc;

	if (!e->sb)
		return log_error(-EINVAL, "exec: no policy");
	if (!e->name)
		return log_error(-EINVAL, "exec: the sandbox has no name");
	if (geteuid() != 0)
		return log_error(-EPERM, "exec into sandbox '%s': needs root", e->name);
	if (needs & PLAN_NEEDS_REQUEST) {
		if (!r->fn && (!r->argv || !r->argv[0]))
			return log_error(-EINVAL, "exec into sandbox '%s': no command", e->name);
		e->uid = e->sb->uid;
		e->gid = e->sb->gid;
		if (r->user && policy_parse_user(r->user, &e->uid, &e->gid) < 0)
			return log_error(-EINVAL, "exec into sandbox '%s': bad user '%s' (UID[:GID], "
			                 "below %u)", e->name, r->user, SANDBOX_ID_RANGE);
		if (r->cwd && r->cwd[0] != '/')
			return log_error(-EINVAL, "exec into sandbox '%s': cwd '%s' is not absolute",
			                 e->name, r->cwd);
		for (size_t i = 0; r->env && r->env[i]; i++)
			if (!strchr(r->env[i], '=') || r->env[i][0] == '=')
				return log_error(-EINVAL, "exec into sandbox '%s': bad env entry '%s' "
				                 "(NAME=VALUE)", e->name, r->env[i]);
	}
	if (needs & PLAN_NEEDS_PIDFD) {
		rc = pidfd_pid(r->init_pidfd, &e->init_pid);
		if (rc < 0)
			return log_errno(rc, "exec into sandbox '%s': its init", e->name);
	}
	if (needs & PLAN_NEEDS_CGROUP) {
		rc = v2_path(e->init_pid, &e->init_v2);
		if (rc < 0 && rc != -ENOENT)
			return log_errno(rc, "exec into sandbox '%s': the init's cgroups", e->name);
	}
	if ((needs & PLAN_NEEDS_STAGE) && e->sb->n_stages) {
		rc = netpolicy_stage_now(&e->sb->node, e->name, &e->stage, &e->hidden);
		if (rc == -ENOENT)
			return log_error(-ESRCH, "exec into sandbox '%s': no stage state (not running?)",
			                 e->name);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* ---- the host's rows, before the clone --------------------------------------- */

/* A stdio descriptor of the request: open, and not a directory (a host
 * directory's descriptor in the sandbox is a way out of its root, as
 * runc's CVE-2024-21626 showed). */
static int check_fd(struct enter *e, int i)
{
	int fd = e->r->stdio[i];
	struct stat st;

	if (fd < 0)
		return 0;
	if (fstat(fd, &st) < 0)
		return log_errno(-errno, "exec into sandbox '%s': stdio %d (fd %d)", e->name, i, fd);
	if (S_ISDIR(st.st_mode) || (fcntl(fd, F_GETFL) & O_PATH))
		return log_error(-EINVAL, "exec into sandbox '%s': stdio %d (fd %d) is not a file, "
		                 "pipe, socket or device", e->name, i, fd);
	return 0;
}

/* The output pipes are the caller's (the keeper's), from the request. */
int enter_output(struct enter *e)
{
	int r = check_fd(e, 1);

	return r < 0 ? r : check_fd(e, 2);
}

/* The report pipe; above the standard descriptors, which the stdio row
 * replaces. */
int enter_pipes(struct enter *e)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0)
		return log_errno(-errno, "exec: report pipe");
	for (int i = 0; i < 2; i++) {
		e->report[i] = p[i] > 2 ? p[i] : fcntl(p[i], F_DUPFD_CLOEXEC, 3);
		if (p[i] <= 2)
			close(p[i]);
		if (e->report[i] < 0)
			return log_errno(-errno, "exec: report pipe");
	}
	return 0;
}

int enter_stdin(struct enter *e)
{
	return check_fd(e, 0);
}

/* The exec's cgroup2 directory is the caller's to make (beneath the
 * sandbox's, where its BPF programs are); without it an exec would be out
 * of the allowlist's reach. */
int enter_cgroups(struct enter *e)
{
	if (e->init_v2 && e->r->cgroup_fd < 0)
		return log_error(-EINVAL, "exec into sandbox '%s': no cgroup2 directory for it",
		                 e->name);
	return 0;
}

/* The v1 tasks files, opened as root on the host (the kernel checks the
 * opener's credentials at the write); written by the new process itself. */
int enter_cgroup_fds(struct enter *e)
{
	const char *const *v = e->r->v1_cgroups;
	char path[PATH_MAX];

	for (size_t i = 0; v && v[i]; i++) {
		if (i >= MAX_V1)
			return log_error(-E2BIG, "exec: more than %d v1 cgroups", MAX_V1);
		snprintf(path, sizeof(path), "%s/tasks", v[i]);
		e->tasks[i] = open(path, O_WRONLY | O_CLOEXEC);
		if (e->tasks[i] < 0)
			return log_errno(-errno, "exec: cgroup '%s'", v[i]);
		e->n_tasks = i + 1;
	}
	return 0;
}

/* ---- the clone: helper, entry, new process -------------------------------- */

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

/* Close every descriptor above 2 but keep[0..n). */
static void close_except(int *keep, size_t n)
{
	unsigned from = 3;

	qsort(keep, n, sizeof(*keep), cmp_int);
	for (size_t i = 0; i < n; i++) {
		if (keep[i] < (int)from)
			continue;
		if ((unsigned)keep[i] > from)
			syscall(SYS_close_range, from, (unsigned)keep[i] - 1, 0);
		from = (unsigned)keep[i] + 1;
	}
	syscall(SYS_close_range, from, ~0u, 0);
}

/* Returns only in the new process. */
static void helper(struct enter *e)
{
	const struct sandbox_enter_req *r = e->r;
	int keep[8 + MAX_V1], n = 0;
	struct clone_args ca = { .flags = CLONE_PARENT };
	pid_t pid;

	prctl(PR_SET_DUMPABLE, 0);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* Only what the entry needs crosses into the sandbox's namespaces; the
	 * caller's other descriptors (a keeper's sockets, a node's files) could
	 * also outnumber the policy's nofile limit there. */
	keep[n++] = r->init_pidfd;
	keep[n++] = e->report[1];
	keep[n++] = e->init_root;
	keep[n++] = e->init_cgns;
	for (int i = 0; i < 3; i++)
		if (r->stdio[i] >= 0)
			keep[n++] = r->stdio[i];
	for (size_t i = 0; i < e->n_tasks; i++)
		keep[n++] = e->tasks[i];
	close_except(keep, (size_t)n);
	e->report[0] = -1;
	if (setns(r->init_pidfd, CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC |
	          CLONE_NEWUTS | CLONE_NEWNET | CLONE_NEWCGROUP) < 0) {
		send_report(e, REPORT_ERR, log_errno(-errno, "exec: enter the sandbox's namespaces"), 0);
		_exit(SETUP_FAILED);
	}
	/* CLONE_PARENT: its exit signal is the helper's own, SIGCHLD. */
	pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
	if (pid == 0)
		return;   /* the new process: on with the plan's rows */
	if (pid < 0)
		send_report(e, REPORT_ERR, log_errno(-errno, "exec: start the process"), 0);
	else
		send_report(e, REPORT_PID, 0, pid);
	_exit(pid < 0 ? SETUP_FAILED : 0);
}

/* Read one report; 0 at end of file, 1 with *m filled, -errno. */
static int read_report(struct enter *e, struct report *m)
{
	ssize_t n;

	do
		n = read(e->report[0], m, sizeof(*m));
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return 0;
	if (n != (ssize_t)sizeof(*m))
		return -EBADMSG;
	m->step[sizeof(m->step) - 1] = '\0';
	return 1;
}

/* Read reports until the helper's (its pid, or why it failed: the clone
 * row's); the new process's own failure may come first, and is kept for
 * the watch row. */
static int await_helper(struct enter *e)
{
	struct report m;
	int r;

	while ((r = read_report(e, &m)) > 0) {
		if (m.kind == REPORT_PID) {
			e->pid = m.pid;
			return 0;
		}
		if (!strcmp(m.step, "clone"))
			return m.err;
		e->failed = m;
	}
	return r < 0 ? r : -EPIPE;
}

/* The new process is born in the exec's cgroup2 directory (the helper is,
 * and it inherits), enters the init's namespaces through the helper, and is
 * the caller's child. */
int enter_clone(struct enter *e)
{
	const struct sandbox_enter_req *r = e->r;
	struct clone_args ca = { .exit_signal = SIGCHLD };
	char path[64];
	int st, rc = 0;
	pid_t h;

	snprintf(path, sizeof(path), "/proc/%d/root", (int)e->init_pid);
	e->init_root = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	snprintf(path, sizeof(path), "/proc/%d/ns/cgroup", (int)e->init_pid);
	e->init_cgns = open(path, O_RDONLY | O_CLOEXEC);
	if (e->init_root < 0 || e->init_cgns < 0)
		return log_errno(-errno, "exec into sandbox '%s': its init (pid %d)", e->name,
		                 (int)e->init_pid);
	/* Opened while the init was alive: they are its, not a reused pid's. */
	if (syscall(SYS_pidfd_send_signal, r->init_pidfd, 0, NULL, 0) < 0)
		return log_errno(-errno, "exec into sandbox '%s': its init", e->name);
	if (r->cgroup_fd >= 0) {
		ca.flags |= CLONE_INTO_CGROUP;
		ca.cgroup = (uint64_t)r->cgroup_fd;
	}
	h = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
	if (h < 0)
		return log_errno(-errno, "exec into sandbox '%s': start the helper", e->name);
	if (h == 0) {
		helper(e);
		e->inside = true;
		close_fd(&e->report[0]);
		return 0;
	}
	e->helper = h;
	close_fd(&e->report[1]);
	rc = await_helper(e);
	while (waitpid(h, &st, 0) < 0 && errno == EINTR)
		;
	e->helper = 0;
	if (rc < 0)
		return log_errno(rc, "exec into sandbox '%s': the helper", e->name);
	e->pidfd = (int)syscall(SYS_pidfd_open, e->pid, 0);
	if (e->pidfd < 0)
		return log_errno(-errno, "exec into sandbox '%s': pidfd of %d", e->name, (int)e->pid);
	return 0;
}

/* ---- the host's rows after the clone -------------------------------------- */

/* The process must sit at or beneath the init's cgroup2 directory, where
 * the sandbox's BPF programs hold: a caller's wrong directory would have
 * let it past the allowlist. */
int enter_cgroup_attach(struct enter *e)
{
	_cleanup_free_ char *mine = NULL;
	int r;

	if (!e->init_v2 || e->failed.kind)
		return 0;   /* no cgroup2; or it failed already, which the watch says */
	r = v2_path(e->pid, &mine);
	if (r < 0)
		return log_errno(r, "exec into sandbox '%s': its cgroup", e->name);
	if (!path_within(mine, e->init_v2))
		return log_error(-EPERM, "exec into sandbox '%s': cgroup '%s' is not beneath the "
		                 "sandbox's '%s'", e->name, mine, e->init_v2);
	return 0;
}

/* The exec's watch (time, output) is the caller's; here only until it has
 * exec'd (end of file: its end of the pipe closed on exec) or failed. */
int enter_watch(struct enter *e)
{
	struct report m;
	int r = 0;

	while (!e->failed.kind && (r = read_report(e, &m)) > 0)
		if (m.kind == REPORT_ERR)
			e->failed = m;
	if (e->failed.kind)
		return log_errno(e->failed.err, "exec into sandbox '%s': step '%s'", e->name,
		                 e->failed.step);
	return r < 0 ? log_errno(r, "exec into sandbox '%s': report", e->name) : 0;
}

/* ---- the init's rows, in the new process ----------------------------------- */

int enter_join_cgroups(struct enter *e)
{
	for (size_t i = 0; i < e->n_tasks; i++) {
		if (write(e->tasks[i], "0", 1) < 0)
			return log_errno(-errno, "exec: join cgroup %s", e->r->v1_cgroups[i]);
		close_fd(&e->tasks[i]);
	}
	return 0;
}

/* Nothing of the caller's signal state: the init's launcher ignored only
 * SIGPIPE, a keeper may ignore or catch more, and an exec keeps what is
 * ignored. */
int enter_signals(struct enter *e)
{
	sigset_t none;

	for (int s = 1; s < NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP)
			signal(s, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	return 0;
}

int enter_root_ids(struct enter *e)
{
	return init_root_ids();
}

static int same_file(int fd, const char *path, const char *what)
{
	struct stat a, b;

	if (fstat(fd, &a) < 0 || stat(path, &b) < 0)
		return log_errno(-errno, "exec: %s", what);
	if (a.st_dev != b.st_dev || a.st_ino != b.st_ino)
		return log_error(-EXDEV, "exec: %s is not the init's", what);
	return 0;
}

/* Entered with the others at the clone; checked against the init's. */
int enter_cgroup_ns(struct enter *e)
{
	int r = same_file(e->init_cgns, "/proc/self/ns/cgroup", "the cgroup namespace");

	close_fd(&e->init_cgns);
	return r;
}

/* The mount namespace entered at the clone put the process at its root,
 * the init's pivoted one; checked. */
int enter_pivot_root(struct enter *e)
{
	int r = same_file(e->init_root, "/", "the root");

	close_fd(&e->init_root);
	if (r == 0 && chdir("/") < 0)
		r = log_errno(-errno, "exec: chdir /");
	return r;
}

int enter_rlimits(struct enter *e)
{
	init_rlimits(e->sb);
	return 0;
}

int enter_no_new_privs(struct enter *e)
{
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return log_errno(-errno, "no_new_privs");
	return 0;
}

/* The stage in force now: what it hides (every switch's, the policy's
 * included); without stages the policy's own. */
int enter_landlock(struct enter *e)
{
	_cleanup_free_ char **v = NULL;
	struct strv hidden;
	int r;

	if (e->stage)
		return landlock_restrict(e->sb, &e->hidden);
	r = policy_hidden(e->sb, &hidden);
	if (r < 0)
		return r;
	v = hidden.v;
	return landlock_restrict(e->sb, &hidden);
}

int enter_bounding_set(struct enter *e)
{
	return caps_drop_bounding();
}

int enter_seccomp(struct enter *e)
{
	return seccomp_install(e->sb);
}

/* Already so from the helper (inherited); kept so for the exec's own
 * credentials change. */
int enter_not_dumpable(struct enter *e)
{
	prctl(PR_SET_DUMPABLE, 0);
	return 0;
}

/* ---- the command's rows ------------------------------------------------------ */

int enter_session(struct enter *e)
{
	setsid();
	return 0;
}

/* The request's descriptors, moved above 2 first so that any order of them
 * (stdout given as 0, say) lands right; /dev/null of the sandbox for -1. */
int enter_stdio(struct enter *e)
{
	int fds[3];

	for (int i = 0; i < 3; i++) {
		int src = e->r->stdio[i];

		fds[i] = src >= 0 ? fcntl(src, F_DUPFD_CLOEXEC, 3) :
		                    open("/dev/null", (i ? O_WRONLY : O_RDONLY) | O_CLOEXEC | O_NOCTTY);
		if (fds[i] < 0)
			return log_errno(-errno, "exec: stdio %d", i);
	}
	for (int i = 0; i < 3; i++) {
		if (dup2(fds[i], i) < 0)
			return -errno;
		close(fds[i]);
	}
	/* What the caller had buffered but not written is the caller's: a fn's
	 * output flushed at its end must not carry it into the exec's. */
	__fpurge(stdin);
	__fpurge(stdout);
	__fpurge(stderr);
	return 0;
}

int enter_user(struct enter *e)
{
	if (setgroups(0, NULL) < 0 || setresgid(e->gid, e->gid, e->gid) < 0 ||
	    setresuid(e->uid, e->uid, e->uid) < 0)
		return log_errno(-errno, "user %u:%u", (unsigned)e->uid, (unsigned)e->gid);
	return 0;
}

/* As the command's step: root keeps what changing ids and owners needs. */
int enter_capabilities(struct enter *e)
{
	return caps_limit(e->uid == 0 ? CAPS_ROOT_KEPT : 0);
}

/* Resolved inside the sandbox's root: "..", absolute symlinks and
 * /proc/self/fd/N (a magic link, refused) cannot lead out of it, whatever
 * descriptor the process still holds (runc's CVE-2024-21626 was an exec's
 * cwd through a leaked host descriptor).  As the exec's user, as the
 * command's chdir is. */
int enter_workdir(struct enter *e)
{
	const char *cwd = e->r->cwd ? e->r->cwd : e->sb->workdir;
	struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
	                        .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
	_cleanup_close_ int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC), fd = -1;

	if (root < 0)
		return log_errno(-errno, "workdir: open /");
	fd = (int)syscall(SYS_openat2, root, cwd, &how, sizeof(how));
	if (fd < 0 || fchdir(fd) < 0)
		return log_errno(-errno, "workdir '%s'", cwd);
	return 0;
}

static bool env_named(char *const *env, const char *entry)
{
	size_t n = (size_t)(strchr(entry, '=') - entry) + 1;

	for (size_t i = 0; env && env[i]; i++)
		if (!strncmp(env[i], entry, n))
			return true;
	return false;
}

/* policy_env's, for the exec's user, with the request's entries added: a
 * NAME the request gives replaces the policy's. */
int enter_environment(struct enter *e)
{
	char *const *req = e->r->env;
	size_t n_req = 0, n = 0;

	while (req && req[n_req])
		n_req++;
	e->env = calloc(e->sb->n_env + n_req + 3, sizeof(*e->env));
	if (!e->env)
		return -ENOMEM;
	if (!env_named(e->sb->env, "PATH=") && !env_named(req, "PATH="))
		e->env[n++] = (char *)"PATH=" SANDBOX_DEFAULT_PATH;
	if (!env_named(e->sb->env, "HOME=") && !env_named(req, "HOME="))
		e->env[n++] = (char *)(e->uid == 0 ? "HOME=/root" : "HOME=/");
	for (size_t i = 0; i < e->sb->n_env; i++)
		if (!env_named(req, e->sb->env[i]))
			e->env[n++] = e->sb->env[i];
	for (size_t i = 0; i < n_req; i++)
		e->env[n++] = req[i];
	e->env[n] = NULL;
	return 0;
}

/* All but stdio and the report pipe, which closes on exec. */
int enter_descriptors(struct enter *e)
{
	int keep = e->report[1];

	close_except(&keep, 1);
	return 0;
}

/* Does not return.  The PATH searched is the exec's own (execvpe reads the
 * caller's environ). */
int enter_exec(struct enter *e)
{
	char *const *argv = e->r->argv;
	int err;

	if (e->r->fn) {
		int rc;

		close_fd(&e->report[1]);
		rc = e->r->fn(e->r->ud);
		fflush(NULL);
		_exit(rc & 0xff);
	}
	environ = e->env;
	execvpe(argv[0], argv, e->env);
	err = errno;
	close_fd(&e->report[1]);
	log_errno(-err, "run '%s'", argv[0]);
	_exit(err == ENOENT ? 127 : 126);
}

/* ---- the walk -------------------------------------------------------------- */

static void enter_free(struct enter *e)
{
	close_fd(&e->report[0]);
	close_fd(&e->report[1]);
	for (size_t i = 0; i < e->n_tasks; i++)
		close_fd(&e->tasks[i]);
	close_fd(&e->init_root);
	close_fd(&e->init_cgns);
	free(e->init_v2);
	free(e->stage);
	strv_free(&e->hidden);
	free(e->env);
}

int sandbox_enter(const struct sandbox_enter_req *r, pid_t *ret_pid, int *ret_pidfd)
{
	struct enter e = {
		.r = r, .sb = r->sb, .report = { -1, -1 }, .init_root = -1, .init_cgns = -1,
		.pidfd = -1,
	};
	_cleanup_free_ const struct plan_step_info **v = NULL;
	unsigned needs = 0;
	size_t n = 0;
	int rc;

	for (size_t i = 0; i < MAX_V1; i++)
		e.tasks[i] = -1;
	e.name = r->name ? r->name : r->sb ? r->sb->name : NULL;
	rc = plan_exec_steps(&v, &n);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < n; i++)
		needs |= v[i]->needs;
	rc = prepare(&e, needs);
	for (size_t i = 0; i < n && rc == 0; i++) {
		const struct plan_step_info *s = v[i];

		if (e.inside != (s->side != PLAN_HOST))
			continue;   /* the other process's row */
		e.step = s->name;
		if (!s->replay)
			rc = log_error(-ENOSYS, "exec: step '%s' has no replay", s->name);
		else
			rc = s->replay(&e);
		if (rc < 0 && e.inside) {
			send_report(&e, REPORT_ERR, rc, 0);
			_exit(SETUP_FAILED);
		}
	}
	if (e.inside)
		_exit(SETUP_FAILED);   /* not reached: the exec row does not return */
	if (rc < 0 && e.pid > 0) {
		if (e.pidfd >= 0)
			syscall(SYS_pidfd_send_signal, e.pidfd, SIGKILL, NULL, 0);
		else
			kill(e.pid, SIGKILL);
		while (waitpid(e.pid, NULL, 0) < 0 && errno == EINTR)
			;
		close_fd(&e.pidfd);
	}
	if (rc == 0) {
		if (ret_pid)
			*ret_pid = e.pid;
		*ret_pidfd = TAKE_FD(e.pidfd);
	}
	enter_free(&e);
	return rc;
}
