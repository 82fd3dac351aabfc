/*
 * keeper.c — one sandbox's keeper: the process that launched it (the
 * plan's host steps, with an init that runs no command), stays its init's
 * parent, serves its socket, runs its execs and ends it (service.h says
 * what the state tree holds and who reads it).
 *
 * One thread, one poll loop over: the listening socket, connections with a
 * request not read yet or a reply deferred (an exec's wait), the init's
 * pidfd, the launcher's signalfd, and per running exec its leader's pidfd
 * and its two output pipes.  The loop wakes for the nearest deadline: an
 * exec's timeout, a wait's, the ttl, the idle timeout.  Nothing in it
 * blocks on a client: requests are single SOCK_SEQPACKET messages read only
 * once poll says they are there, replies are sent with MSG_DONTWAIT.
 *
 * An exec: its cgroup2 directory (exec-ID under the sandbox's), joined v1
 * cgroups, output pipes into the keeper, stdout and stderr files under
 * execs/ID, the helper from sandbox_enter (the new process is the keeper's
 * child: reaped with waitid on its pidfd, for its rusage).  The output
 * limit counts both streams; past it, or past the timeout, the exec's
 * cgroup is killed whole (cgroup.kill).  The exec ends once its leader is
 * reaped and both pipes are at end of file; what it left running keeps
 * running in the sandbox, its output no longer collected (its pipes' read
 * ends are closed, so a writer gets EPIPE).
 *
 * Ending: the init is killed (everything in its pid namespace with it),
 * then every exec's cgroup, and the plan's undo stack unwinds; ended.json
 * is written, or for a destroy the whole directory goes.  A keeper killed
 * with SIGKILL takes its init along (PR_SET_PDEATHSIG); what is left, its
 * cgroups and state, is sandbox_gc's (its launcher record lists the
 * cgroups; keeper.lock is free).
 */
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#include "lib/json.h"
#include "lib/lib.h"
#include "sandbox/keeper-internal.h"
#include "sandbox/launch-internal.h"

#define MAX_CONNS 64

enum exec_state { EXEC_RUNNING, EXEC_DONE };

/* How often a running exec's sandbox is checked for a fork its pids limit
 * refused (check_pids), for a v1 pids cgroup, which announces none. */
#define KEEPER_PIDS_PERIOD_MS 200

struct kexec {
	struct kexec *next;
	char id[SANDBOX_SERVICE_ID_MAX + 1];
	enum exec_state state;
	pid_t pid;
	int pidfd;
	int pipe_r[2];          /* stdout, stderr read ends; -1 at end of file */
	int file[2];            /* execs/ID/stdout, stderr */
	uint64_t bytes[2];
	uint64_t limit;         /* 0: none */
	bool truncated;
	const char *killed_by;  /* NULL, "time", "output", "memory", "pids", "sandbox" */
	uint64_t start, deadline;   /* ns; deadline 0: none */
	char cgpath[2048];
	bool reaped;
	siginfo_t si;
	struct rusage ru;
	uint64_t oom0;          /* the sandbox's OOM kills when the exec began */
};

struct kconn {
	int fd;
	bool waiting;           /* a deferred wait on exec */
	char exec_id[SANDBOX_SERVICE_ID_MAX + 1];
	uint64_t deadline;
};

struct keeper {
	struct sandbox *sb;
	struct launch l;
	struct sandbox_result res;
	char id[SANDBOX_SERVICE_ID_MAX + 1];
	char dir[1024];         /* the service dir is refused past 900 bytes */
	int lsock;
	int logfd;
	double ttl, idle;
	uint64_t created, idle_since;
	uint64_t default_limit;
	struct kexec *execs;    /* newest first */
	unsigned running, done;
	uint64_t done_bytes;
	uint64_t pids_seen;     /* forks the pids limit refused, those already answered */
	uint64_t pids_next;     /* ns: when check_pids reads the counter next */
	struct kconn conns[MAX_CONNS];
	unsigned n_conns;
	unsigned seq;
	const char *end_reason;
	bool destroy;
	int destroy_fd;         /* the connection to answer once destroyed */
};

/* ---- small helpers ---------------------------------------------------------- */

static double secs(uint64_t ns)
{
	return (double)ns / 1e9;
}

static int write_json_at(const struct keeper *k, const char *rel, json_t *v)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	char path[PATH_MAX];
	int r = json_buf_add(&b, v);

	if (r < 0)
		return r;
	snprintf(path, sizeof(path), "%s/%s", k->dir, rel);
	r = write_file_atomic(path, b.data, b.len, 0600);
	return r < 0 ? log_errno(r, "write '%s'", path) : 0;
}

/* The first line the keeper logged since offset from (its log is its
 * stderr), without the "lazyroot: " prefix: the one-line error a request
 * gets back. */
void keeper_log_line(int logfd, off_t from, char *out, size_t len)
{
	char buf[512];
	ssize_t n = logfd >= 0 ? pread(logfd, buf, sizeof(buf) - 1, from) : -1;
	char *s = buf, *nl;

	out[0] = '\0';
	if (n <= 0)
		return;
	buf[n] = '\0';
	if (!strncmp(s, "lazyroot: ", 10))
		s += 10;
	nl = strchr(s, '\n');
	if (nl)
		*nl = '\0';
	snprintf(out, len, "%s", s);
}

static off_t log_mark(const struct keeper *k)
{
	struct stat st;

	return k->logfd >= 0 && fstat(k->logfd, &st) == 0 ? st.st_size : 0;
}

int rm_tree_at(int dfd, const char *name)
{
	_cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct dirent *e;
	DIR *d;

	if (fd < 0)
		return errno == ENOENT ? 0 : (errno == ENOTDIR ? (unlinkat(dfd, name, 0) < 0 ? -errno : 0)
		                                                : -errno);
	d = fdopendir(fd);
	if (!d)
		return -errno;
	fd = -1;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (e->d_type == DT_DIR)
			rm_tree_at(dirfd(d), e->d_name);
		else
			unlinkat(dirfd(d), e->d_name, 0);
	}
	closedir(d);
	return unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT ? -errno : 0;
}

static void reply(int fd, json_t *v, const int *fds, size_t n_fds)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	struct iovec iov;
	char ctl[CMSG_SPACE(sizeof(int))] = { 0 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (json_buf_add(&b, v) < 0)
		return;
	iov = (struct iovec){ b.data, b.len };
	if (n_fds == 1) {
		struct cmsghdr *c;

		mh.msg_control = ctl;
		mh.msg_controllen = sizeof(ctl);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), fds, sizeof(int));
	}
	(void)!sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
}

static void reply_err(int fd, int err, const char *msg)
{
	reply(fd, json_pack("{s:b, s:i, s:s}", "ok", 0, "errno", -err, "error", msg), NULL, 0);
}

/* Reply with the first line logged since mark, or a fallback. */
static void reply_logged(struct keeper *k, int fd, int err, off_t mark, const char *fallback)
{
	char line[256];

	keeper_log_line(k->logfd, mark, line, sizeof(line));
	reply_err(fd, err, line[0] ? line : fallback);
}

/* ---- execs ------------------------------------------------------------------ */

static bool exec_id_ok(const char *s)
{
	size_t n = strlen(s);

	if (n < 1 || n > SANDBOX_SERVICE_ID_MAX || s[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i]))
			return false;
	return true;
}

static struct kexec *exec_find(struct keeper *k, const char *id)
{
	for (struct kexec *x = k->execs; x; x = x->next)
		if (!strcmp(x->id, id))
			return x;
	return NULL;
}

/* The oldest finished execs go once the kept ones pass a bound. */
static void execs_trim(struct keeper *k)
{
	while (k->done > SANDBOX_SERVICE_KEEP_EXECS || k->done_bytes > SANDBOX_SERVICE_KEEP_BYTES) {
		struct kexec **pp = &k->execs, **oldest = NULL;
		char rel[PATH_MAX];
		struct kexec *x;

		for (; *pp; pp = &(*pp)->next)
			if ((*pp)->state == EXEC_DONE)
				oldest = pp;
		if (!oldest)
			return;
		x = *oldest;
		*oldest = x->next;
		snprintf(rel, sizeof(rel), "%s/execs", k->dir);
		{
			_cleanup_close_ int dfd = open(rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

			if (dfd >= 0)
				rm_tree_at(dfd, x->id);
		}
		k->done--;
		k->done_bytes -= x->bytes[0] + x->bytes[1];
		free(x);
	}
}

static void exec_kill(struct kexec *x, const char *why)
{
	char path[PATH_MAX];
	int fd;

	if (!x->killed_by)
		x->killed_by = why;
	snprintf(path, sizeof(path), "%s/cgroup.kill", x->cgpath);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		(void)!write(fd, "1", 1);
		close(fd);
	}
	if (x->pidfd >= 0)
		syscall(SYS_pidfd_send_signal, x->pidfd, SIGKILL, NULL, 0);
}

/* Copy what a pipe has into its file, within the limit. */
static void exec_pump(struct kexec *x, int i)
{
	char buf[65536];
	ssize_t n = read(x->pipe_r[i], buf, sizeof(buf));

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		close_fd(&x->pipe_r[i]);
		return;
	}
	if (x->limit && x->bytes[0] + x->bytes[1] + (uint64_t)n > x->limit) {
		n = (ssize_t)(x->limit - x->bytes[0] - x->bytes[1]);
		x->truncated = true;
		exec_kill(x, "output");
	}
	if (n > 0 && write_full(x->file[i], buf, (size_t)n) == 0)
		x->bytes[i] += (uint64_t)n;
}

static void exec_finish(struct keeper *k, struct kexec *x)
{
	int status = 0, sig = 0;
	double cpu;
	char rel[PATH_MAX];

	for (int i = 0; i < 2; i++) {
		close_fd(&x->pipe_r[i]);
		close_fd(&x->file[i]);
	}
	close_fd(&x->pidfd);
	if (x->si.si_code == CLD_EXITED) {
		status = x->si.si_status;
	} else {
		sig = x->si.si_status;
		status = 128 + sig;
	}
	/* The OOM killer of the sandbox's memory cgroup took the leader while
	 * it lived.  (The cgroup is the sandbox's, not the exec's, on a hybrid
	 * host: one exec's allocation may get another one killed, and that one
	 * is reported.) */
	if (!x->killed_by && sig == SIGKILL && cgroups_oom_count(&k->l.cg) > x->oom0)
		x->killed_by = "memory";
	cpu = (double)(x->ru.ru_utime.tv_sec + x->ru.ru_stime.tv_sec) +
	      (double)(x->ru.ru_utime.tv_usec + x->ru.ru_stime.tv_usec) / 1e6;
	snprintf(rel, sizeof(rel), "execs/%s/result.json", x->id);
	write_json_at(k, rel, json_pack("{s:s, s:i, s:i, s:s?, s:o, s:o, s:o, s:o, s:b}",
	                                "exec_id", x->id, "status", status, "signal", sig,
	                                "killed_by", x->killed_by,
	                                "wall_seconds", json_fixed(secs(now_ns() - x->start), 6),
	                                "cpu_seconds", json_fixed(cpu, 6),
	                                "stdout_bytes", json_u64(x->bytes[0]),
	                                "stderr_bytes", json_u64(x->bytes[1]),
	                                "truncated", x->truncated));
	x->state = EXEC_DONE;
	k->running--;
	k->done++;
	k->done_bytes += x->bytes[0] + x->bytes[1];
	if (!k->running)
		k->idle_since = now_ns();
	/* the cgroup stays while what the exec left behind runs; an empty one goes */
	rmdir(x->cgpath);
	for (unsigned i = 0; i < k->n_conns; i++)
		if (k->conns[i].waiting && !strcmp(k->conns[i].exec_id, x->id)) {
			reply(k->conns[i].fd, json_pack("{s:b, s:b}", "ok", 1, "done", 1), NULL, 0);
			k->conns[i].waiting = false;
			close_fd(&k->conns[i].fd);
		}
	execs_trim(k);
}

/* How many processes an exec's cgroup holds (its cgroup.procs lines). */
static unsigned exec_procs(const struct kexec *x)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	char path[PATH_MAX];
	unsigned n = 0;

	snprintf(path, sizeof(path), "%s/cgroup.procs", x->cgpath);
	if (read_file(path, 1 << 20, &b) < 0)
		return 0;
	for (size_t i = 0; i < b.len; i++)
		n += b.data[i] == '\n';
	return n;
}

/*
 * A fork the sandbox's pids limit refused since the last look (its pids
 * cgroup's pids.events "max"; a v1 one announces nothing, so the loop reads
 * it every KEEPER_PIDS_PERIOD_MS while execs run, and at each exec's end)
 * ends, with kill_on_pids_limit, the exec that holds the most processes:
 * its whole cgroup, killed_by "pids".  The limit is the sandbox's, so the
 * exec that forked last is not known; the one with most processes is the
 * one filling it (a fork bomb), and the sandbox and its other execs go on,
 * where `run` would end the sandbox.  reaping: an exec whose leader just
 * ended, still a candidate (its leftovers are in its cgroup).
 */
static void check_pids(struct keeper *k, struct kexec *reaping)
{
	struct kexec *victim = NULL;
	unsigned most = 0;
	uint64_t c;

	if (!k->sb->kill_on_pids_limit || !k->l.cg.path[CG_PIDS])
		return;
	c = cgroups_pids_max_count(&k->l.cg);
	if (c <= k->pids_seen)
		return;
	k->pids_seen = c;
	for (struct kexec *x = k->execs; x; x = x->next) {
		unsigned n;

		if (x->state != EXEC_RUNNING && x != reaping)
			continue;
		n = exec_procs(x);
		if (n > most) {
			most = n;
			victim = x;
		}
	}
	if (victim)
		exec_kill(victim, "pids");
}

static void exec_reap(struct keeper *k, struct kexec *x)
{
	memset(&x->si, 0, sizeof(x->si));
	if (syscall(SYS_waitid, P_PIDFD, x->pidfd, &x->si, WEXITED | WNOHANG, &x->ru) < 0 ||
	    x->si.si_pid == 0)
		return;
	x->reaped = true;
	check_pids(k, x);
	/* the leader is gone: what the pipes hold is read, then they are closed
	 * (a process it left behind writes into EPIPE from then on) */
	for (int i = 0; i < 2; i++) {
		if (x->pipe_r[i] >= 0)
			fcntl(x->pipe_r[i], F_SETFL, O_NONBLOCK);
		while (x->pipe_r[i] >= 0) {
			uint64_t before = x->bytes[i];

			exec_pump(x, i);
			if (x->pipe_r[i] >= 0 && x->bytes[i] == before)
				close_fd(&x->pipe_r[i]);
		}
	}
	exec_finish(k, x);
}

/* The exec helper's function for an exec with "fn" (keeper-internal.h). */
struct fn_call {
	const struct keeper_fn *fn;
	json_t *args;
};

static int run_fn(void *ud)
{
	struct fn_call *c = ud;

	return c->fn->run(c->args);
}

static char **strv_from_json(const json_t *a, int *err)
{
	size_t n = json_array_size(a);
	char **v = calloc(n + 1, sizeof(*v));

	*err = 0;
	if (!v) {
		*err = -ENOMEM;
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		const char *s = json_cstr(json_array_get(a, i));

		if (!s) {
			free(v);
			*err = -EINVAL;
			return NULL;
		}
		v[i] = (char *)s;
	}
	return v;
}

static int op_exec(struct keeper *k, int fd, json_t *req)
{
	const char *id = json_get_cstr(req, "exec_id"), *fn_name = json_get_cstr(req, "fn");
	const char *v1[CG_COUNT + 1] = { 0 };
	_cleanup_free_ char **argv = NULL, **env = NULL;
	_cleanup_close_ int cgfd = -1, in_r = -1, in_w = -1;
	int out[2] = { -1, -1 }, errp[2] = { -1, -1 };
	struct sandbox_enter_req er = { 0 };
	struct fn_call call = { 0 };
	char gen[32], rel[PATH_MAX], path[PATH_MAX + 16];
	struct kexec *x;
	double timeout = 0;
	int64_t limit = 0;
	bool pipe_in = false;
	off_t mark = log_mark(k);
	size_t nv = 0;
	int r;

	if (!id) {
		snprintf(gen, sizeof(gen), "e%u-%08x", ++k->seq, random_u32());
		id = gen;
	}
	if (!exec_id_ok(id))
		return reply_err(fd, -EINVAL, "bad exec id (want [A-Za-z0-9._-]{1,64}, not starting "
		                 "with a dot)"), 0;
	x = exec_find(k, id);
	if (x)
		return reply(fd, json_pack("{s:b, s:s, s:b}", "ok", 1, "exec_id", id, "existed", 1),
		             NULL, 0), 0;
	if (k->running >= SANDBOX_SERVICE_MAX_RUNNING)
		return reply_err(fd, -EAGAIN, "too many execs running"), 0;
	if (fn_name) {
		call.fn = keeper_fn_find(fn_name);
		if (!call.fn)
			return reply_err(fd, -EINVAL, "unknown fn"), 0;
		call.args = json_object_get(req, "fn_args");
	} else {
		argv = strv_from_json(json_object_get(req, "argv"), &r);
		if (!argv || !argv[0])
			return reply_err(fd, -EINVAL, "exec: argv wanted (an array of strings)"), 0;
	}
	if (json_object_get(req, "env")) {
		env = strv_from_json(json_object_get(req, "env"), &r);
		if (!env)
			return reply_err(fd, -EINVAL, "exec: env is an array of NAME=VALUE"), 0;
	}
	json_double(json_object_get(req, "timeout"), &timeout);
	json_int(json_object_get(req, "output_limit"), &limit);
	json_bool(json_object_get(req, "stdin_pipe"), &pipe_in);
	if (timeout < 0 || limit < 0)
		return reply_err(fd, -EINVAL, "exec: negative timeout or output_limit"), 0;

	x = calloc(1, sizeof(*x));
	if (!x)
		return reply_err(fd, -ENOMEM, "out of memory"), 0;
	*x = (struct kexec){ .pidfd = -1, .pipe_r = { -1, -1 }, .file = { -1, -1 } };
	snprintf(x->id, sizeof(x->id), "%s", id);
	x->limit = limit ? (uint64_t)limit : k->default_limit;
	snprintf(rel, sizeof(rel), "%s/execs/%s", k->dir, id);
	r = mkdir(rel, 0700);
	if (r < 0) {
		r = log_errno(-errno, "exec '%s': mkdir", id);
		goto fail;
	}
	snprintf(path, sizeof(path), "execs/%s/request.json", id);
	json_object_del(req, "op");
	write_json_at(k, path, json_incref(req));
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s", rel, i ? "stderr" : "stdout");
		x->file[i] = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (x->file[i] < 0) {
			r = log_errno(-errno, "exec '%s': %s", id, path);
			goto fail;
		}
	}
	if (!k->l.cg.path[CG_UNIFIED] || strlen(k->l.cg.path[CG_UNIFIED]) > 1900) {
		r = log_error(-ENOTSUP, "exec '%s': the sandbox has no cgroup2 directory", id);
		goto fail;
	}
	snprintf(x->cgpath, sizeof(x->cgpath), "%s/exec-%s", k->l.cg.path[CG_UNIFIED], id);
	if (mkdir(x->cgpath, 0755) < 0 && errno != EEXIST) {
		r = log_errno(-errno, "exec '%s': cgroup '%s'", id, x->cgpath);
		goto fail;
	}
	cgfd = open(x->cgpath, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (cgfd < 0) {
		r = log_errno(-errno, "exec '%s': cgroup '%s'", id, x->cgpath);
		goto fail;
	}
	for (int i = 0; i < CG_UNIFIED; i++)
		if (k->l.cg.path[i] && !k->l.cg.v2[i])
			v1[nv++] = k->l.cg.path[i];
	if (pipe2(out, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0) {
		r = log_errno(-errno, "exec '%s': pipes", id);
		goto fail;
	}
	if (pipe_in) {
		int p[2];

		if (pipe2(p, O_CLOEXEC) < 0) {
			r = log_errno(-errno, "exec '%s': stdin pipe", id);
			goto fail;
		}
		in_r = p[0];
		in_w = p[1];
	}
	er = (struct sandbox_enter_req){
		.sb = k->sb, .name = k->id, .init_pidfd = k->l.pidfd, .cgroup_fd = cgfd,
		.v1_cgroups = v1, .argv = argv, .env = env,
		.cwd = json_get_cstr(req, "cwd"), .user = json_get_cstr(req, "user"),
		.stdio = { in_r, out[1], errp[1] },
		.fn = call.fn ? run_fn : NULL, .ud = &call,
	};
	x->start = now_ns();
	x->oom0 = cgroups_oom_count(&k->l.cg);
	r = sandbox_enter(&er, &x->pid, &x->pidfd);
	close_fd(&out[1]);
	close_fd(&errp[1]);
	if (r < 0)
		goto fail;
	x->pipe_r[0] = TAKE_FD(out[0]);
	x->pipe_r[1] = TAKE_FD(errp[0]);
	fcntl(x->pipe_r[0], F_SETFL, O_NONBLOCK);
	fcntl(x->pipe_r[1], F_SETFL, O_NONBLOCK);
	if (timeout > 0)
		x->deadline = x->start + (uint64_t)(timeout * 1e9);
	x->next = k->execs;
	k->execs = x;
	k->running++;
	reply(fd, json_pack("{s:b, s:s, s:b}", "ok", 1, "exec_id", x->id, "existed", 0),
	      pipe_in ? &in_w : NULL, pipe_in ? 1 : 0);
	return 0;

fail:
	for (int i = 0; i < 2; i++) {
		close_fd(&out[i]);
		close_fd(&errp[i]);
		close_fd(&x->file[i]);
	}
	if (x->cgpath[0])
		rmdir(x->cgpath);
	{
		_cleanup_close_ int dfd = -1;

		snprintf(path, sizeof(path), "%s/execs", k->dir);
		dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0)
			rm_tree_at(dfd, x->id);
	}
	free(x);
	reply_logged(k, fd, r, mark, "exec failed");
	return 0;
}

/* ---- the sandbox's state ------------------------------------------------------ */

static json_t *state_json(struct keeper *k)
{
	uint64_t mem = 0, pids = 0;
	_cleanup_free_ char *stage = NULL;
	double cpu = cgroups_cpu_seconds(&k->l.cg);

	cgroups_usage(&k->l.cg, &mem, &pids);
	if (k->sb->n_stages)
		(void)sandbox_stage_switch(&k->sb->node, k->id, NULL, &stage);
	return json_pack("{s:s, s:s, s:s?, s:o, s:i, s:o, s:o, s:I, s:o}",
	                 "id", k->id, "state", "running", "stage", stage,
	                 "idle_seconds", json_fixed(k->running ? 0 : secs(now_ns() - k->idle_since), 3),
	                 "execs_running", (int)k->running,
	                 "memory_bytes", json_u64(mem),
	                 "memory_peak_bytes", json_u64(cgroups_memory_peak(&k->l.cg)),
	                 "pids", (json_int_t)pids,
	                 "cpu_seconds", json_fixed(cpu < 0 ? 0 : cpu, 6));
}

static int op_stage(struct keeper *k, int fd, json_t *req)
{
	const char *stage = json_get_cstr(req, "stage");
	_cleanup_free_ char *cur = NULL;
	off_t mark = log_mark(k);
	int r;

	if (!k->sb->n_stages)
		return reply_err(fd, -EINVAL, "the sandbox's policy declares no stages"), 0;
	r = sandbox_stage_switch(&k->sb->node, k->id, stage, stage ? NULL : &cur);
	if (r == 0 && stage)
		r = sandbox_stage_switch(&k->sb->node, k->id, NULL, &cur);
	if (r < 0)
		reply_logged(k, fd, r, mark, "stage switch failed");
	else
		reply(fd, json_pack("{s:b, s:s}", "ok", 1, "stage", cur), NULL, 0);
	return 0;
}

static void handle(struct keeper *k, struct kconn *c)
{
	char buf[65536];
	ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
	json_auto_t *req = NULL;
	const char *op;

	if (n < 0 && errno == EAGAIN)
		return;
	if (n <= 0 || json_parse(buf, (size_t)n, &req, NULL) < 0 || !json_is_object(req)) {
		if (n > 0)
			reply_err(c->fd, -EINVAL, "bad request (want one JSON object)");
		close_fd(&c->fd);
		return;
	}
	op = json_get_cstr(req, "op");
	if (!op) {
		reply_err(c->fd, -EINVAL, "bad request (no op)");
	} else if (!strcmp(op, "get")) {
		json_t *st = state_json(k);

		json_object_set_new(st, "ok", json_true());
		reply(c->fd, st, NULL, 0);
	} else if (!strcmp(op, "exec")) {
		op_exec(k, c->fd, req);
	} else if (!strcmp(op, "wait")) {
		const char *id = json_get_cstr(req, "exec_id");
		struct kexec *x = id ? exec_find(k, id) : NULL;
		double t = 0;

		json_double(json_object_get(req, "timeout"), &t);
		if (!x) {
			reply_err(c->fd, -ENOENT, "no such exec");
		} else if (x->state == EXEC_DONE || t <= 0) {
			reply(c->fd, json_pack("{s:b, s:b}", "ok", 1, "done", x->state == EXEC_DONE),
			      NULL, 0);
		} else {
			c->waiting = true;
			snprintf(c->exec_id, sizeof(c->exec_id), "%s", id);
			c->deadline = now_ns() + (uint64_t)(t * 1e9);
			return;   /* answered when it ends or the wait is over */
		}
	} else if (!strcmp(op, "stage")) {
		op_stage(k, c->fd, req);
	} else if (!strcmp(op, "destroy")) {
		k->destroy = true;
		k->end_reason = "destroyed";
		k->destroy_fd = TAKE_FD(c->fd);
		return;
	} else {
		reply_err(c->fd, -EINVAL, "bad request (unknown op)");
	}
	close_fd(&c->fd);
}

/* ---- the end -------------------------------------------------------------------- */

static void keeper_end(struct keeper *k)
{
	int wst;

	/* the init first: everything in its pid namespace dies with it */
	if (k->l.pid > 0) {
		syscall(SYS_pidfd_send_signal, k->l.pidfd, SIGKILL, NULL, 0);
		while (waitpid(k->l.pid, &wst, 0) < 0 && errno == EINTR)
			;
		k->l.pid = 0;
	}
	for (struct kexec *x = k->execs; x; x = x->next)
		if (x->state == EXEC_RUNNING) {
			exec_kill(x, "sandbox");
			while (x->pidfd >= 0 && !x->reaped) {
				poll(&(struct pollfd){ x->pidfd, POLLIN, 0 }, 1, 1000);
				exec_reap(k, x);
			}
		}
	for (struct kexec *x = k->execs; x; x = x->next)
		cgroup_remove(x->cgpath, true);
	for (unsigned i = 0; i < k->n_conns; i++) {
		if (k->conns[i].fd >= 0 && k->conns[i].waiting)
			reply(k->conns[i].fd, json_pack("{s:b, s:b}", "ok", 1, "done", 0), NULL, 0);
		close_fd(&k->conns[i].fd);
	}
	close_fd(&k->lsock);
	launch_close(&k->l);
	if (k->destroy) {
		char parent[PATH_MAX], *slash;
		_cleanup_close_ int dfd = -1;

		snprintf(parent, sizeof(parent), "%s", k->dir);
		slash = strrchr(parent, '/');
		*slash = '\0';
		dfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0)
			rm_tree_at(dfd, slash + 1);
		reply(k->destroy_fd, json_pack("{s:b}", "ok", 1), NULL, 0);
		close_fd(&k->destroy_fd);
	} else {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		write_json_at(k, "ended.json", json_pack("{s:s, s:s, s:I}", "id", k->id, "reason",
		                                        k->end_reason, "at", (json_int_t)ts.tv_sec));
		char sock[PATH_MAX];

		snprintf(sock, sizeof(sock), "%s/keeper.sock", k->dir);
		unlink(sock);
	}
}

/* ---- the loop ---------------------------------------------------------------------- */

static void accept_conns(struct keeper *k)
{
	for (;;) {
		int fd = accept4(k->lsock, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

		if (fd < 0)
			return;
		if (k->n_conns >= MAX_CONNS) {
			reply_err(fd, -EAGAIN, "too many connections");
			close(fd);
			continue;
		}
		k->conns[k->n_conns++] = (struct kconn){ .fd = fd };
	}
}

static void keeper_loop(struct keeper *k)
{
	enum { P_LISTEN, P_SIG, P_INIT, P_FIXED };
	struct pollfd p[P_FIXED + MAX_CONNS + 3 * SANDBOX_SERVICE_MAX_RUNNING];
	struct kexec *px[3 * SANDBOX_SERVICE_MAX_RUNNING];
	int pi[3 * SANDBOX_SERVICE_MAX_RUNNING];

	while (!k->end_reason) {
		uint64_t now = now_ns(), next = UINT64_MAX;
		size_t n = P_FIXED, ne = 0, conn0;
		int timeout;

		p[P_LISTEN] = (struct pollfd){ k->lsock, POLLIN, 0 };
		p[P_SIG] = (struct pollfd){ k->l.sigfd, POLLIN, 0 };
		p[P_INIT] = (struct pollfd){ k->l.pidfd, POLLIN, 0 };
		conn0 = n;
		for (unsigned i = 0; i < k->n_conns; i++) {
			p[n++] = (struct pollfd){ k->conns[i].fd, k->conns[i].waiting ? 0 : POLLIN, 0 };
			if (k->conns[i].waiting)
				next = MIN(next, k->conns[i].deadline);
		}
		for (struct kexec *x = k->execs; x; x = x->next) {
			if (x->state != EXEC_RUNNING)
				continue;
			for (int i = 0; i < 2; i++)
				if (x->pipe_r[i] >= 0) {
					px[ne] = x;
					pi[ne++] = i;
					p[n++] = (struct pollfd){ x->pipe_r[i], POLLIN, 0 };
				}
			px[ne] = x;
			pi[ne++] = 2;
			p[n++] = (struct pollfd){ x->pidfd, POLLIN, 0 };
			if (x->deadline)
				next = MIN(next, x->deadline);
		}
		if (k->running && k->sb->kill_on_pids_limit && k->l.cg.path[CG_PIDS])
			next = MIN(next, k->pids_next);
		if (k->ttl > 0)
			next = MIN(next, k->created + (uint64_t)(k->ttl * 1e9));
		if (k->idle > 0 && !k->running)
			next = MIN(next, k->idle_since + (uint64_t)(k->idle * 1e9));
		timeout = next == UINT64_MAX ? -1 :
		          next <= now ? 0 : (int)MIN((next - now) / 1000000 + 1, 60000);
		if (poll(p, n, timeout) < 0 && errno != EINTR)
			continue;
		now = now_ns();
		if (p[P_INIT].revents & POLLIN) {
			k->end_reason = "init";
			break;
		}
		if (p[P_SIG].revents & POLLIN) {
			k->end_reason = "signal";
			break;
		}
		/* on a timer, not at every wakeup: an exec's output wakes the loop
		 * for every 64 KiB it writes */
		if (k->running && now >= k->pids_next) {
			check_pids(k, NULL);
			k->pids_next = now + KEEPER_PIDS_PERIOD_MS * 1000000ULL;
		}
		for (size_t i = 0; i < ne; i++) {
			struct pollfd *q = &p[P_FIXED + k->n_conns + i];

			if (px[i]->state != EXEC_RUNNING || !q->revents)
				continue;
			if (pi[i] < 2 && px[i]->pipe_r[pi[i]] == q->fd)
				exec_pump(px[i], pi[i]);
		}
		for (size_t i = 0; i < ne; i++) {
			struct pollfd *q = &p[P_FIXED + k->n_conns + i];

			if (pi[i] == 2 && (q->revents & POLLIN) && px[i]->state == EXEC_RUNNING)
				exec_reap(k, px[i]);
		}
		for (struct kexec *x = k->execs; x; x = x->next)
			if (x->state == EXEC_RUNNING && x->deadline && now >= x->deadline)
				exec_kill(x, "time");
		for (unsigned i = 0; i < k->n_conns; i++) {
			struct kconn *c = &k->conns[i];

			if (c->waiting && now >= c->deadline) {
				reply(c->fd, json_pack("{s:b, s:b}", "ok", 1, "done", 0), NULL, 0);
				c->waiting = false;
				close_fd(&c->fd);
			} else if (!c->waiting && (p[conn0 + i].revents & (POLLIN | POLLHUP | POLLERR))) {
				handle(k, c);
			}
		}
		for (unsigned i = 0; i < k->n_conns;)
			if (k->conns[i].fd < 0)
				k->conns[i] = k->conns[--k->n_conns];
			else
				i++;
		if (k->destroy)
			break;
		if (p[P_LISTEN].revents & POLLIN)
			accept_conns(k);
		if (k->ttl > 0 && now >= k->created + (uint64_t)(k->ttl * 1e9))
			k->end_reason = "ttl";
		else if (k->idle > 0 && !k->running && now >= k->idle_since + (uint64_t)(k->idle * 1e9))
			k->end_reason = "idle";
	}
	keeper_end(k);
}

/* ---- the start ----------------------------------------------------------------------- */

static int make_policy(struct keeper *k, const struct sandbox_node *node,
                       const struct keeper_args *a, struct buf *lines)
{
	_cleanup_free_ char *text = NULL;
	int r = sandbox_new(&k->sb);

	if (r < 0)
		return r;
	sandbox_set_node(k->sb, node);
	if (a->req->policy) {
		text = strdup(a->req->policy);
		if (!text || buf_printf(lines, "%s\n", a->req->policy) < 0)
			return -ENOMEM;
		r = sandbox_load_policy_text(k->sb, text, "policy");
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < a->req->n_set; i++) {
		const struct sandbox_service_kv *kv = &a->req->set[i];

		if (strchr(kv->key, '\n') || strchr(kv->value, '\n') || strchr(kv->key, '='))
			return log_error(-EINVAL, "policy field '%s': a key or value with a newline",
			                 kv->key);
		r = sandbox_set(k->sb, kv->key, kv->value);
		if (r < 0)
			return r;
		if (buf_printf(lines, "%s = %s\n", kv->key, kv->value) < 0)
			return -ENOMEM;
	}
	r = sandbox_set(k->sb, "rootfs", a->req->rootfs);
	if (r == 0)
		r = sandbox_set(k->sb, "name", k->id);
	if (r < 0)
		return r;
	if (buf_printf(lines, "rootfs = %s\nname = %s\n", a->req->rootfs, k->id) < 0)
		return -ENOMEM;
	k->ttl = a->req->ttl;
	k->idle = a->req->idle_timeout;
	k->default_limit = k->sb->output;
	/* a sandbox of the service lives for its ttl; the policy's wall clock is
	 * `run`'s (there is no watch here to enforce it) */
	k->sb->timeout = 0;
	return 0;
}

static int write_info(struct keeper *k, const struct keeper_args *a, const struct buf *lines)
{
	json_t *labels = json_object();
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	for (size_t i = 0; labels && i < a->req->n_labels; i++)
		json_object_set_new(labels, a->req->labels[i].key, json_string(a->req->labels[i].value));
	return write_json_at(k, "sandbox.json",
	                     json_pack("{s:s, s:s, s:o, s:s, s:s?, s:s?, s:s%, s:I, s:o, s:o, s:i, "
	                               "s:i}",
	                               "id", k->id, "name", k->id, "labels", labels,
	                               "rootfs", a->req->rootfs, "image", a->req->image,
	                               "image_index", a->req->image_index,
	                               "policy", lines->data, lines->len,
	                               "created", (json_int_t)ts.tv_sec,
	                               "ttl", json_fixed(k->ttl, 3),
	                               "idle_timeout", json_fixed(k->idle, 3),
	                               "keeper_pid", (int)getpid(), "init_pid", (int)k->l.pid));
}

static int listen_at(struct keeper *k)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/keeper.sock", k->dir) >=
	    (int)sizeof(sa.sun_path))
		return log_error(-ENAMETOOLONG, "service dir '%s' too long for a socket", k->dir);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 64) < 0) {
		int r = log_errno(-errno, "keeper socket '%s'", sa.sun_path);

		if (fd >= 0)
			close(fd);
		return r;
	}
	k->lsock = fd;
	return 0;
}

/* Make DIR/<id>: the request's name, or lazyroot-<pid> as `run` names a
 * sandbox (with a suffix while an ended one of that name is kept). */
static int make_dir(struct keeper *k, const struct keeper_args *a)
{
	int r = strlen(a->root) > 900 ? -ENAMETOOLONG : mkdir_p(a->root, 0700);

	if (r < 0)
		return log_errno(r, "service dir '%s'", a->root);
	for (int i = 0; i < 100; i++) {
		if (a->req->name)
			snprintf(k->id, sizeof(k->id), "%s", a->req->name);
		else if (i == 0)
			snprintf(k->id, sizeof(k->id), "lazyroot-%d", (int)getpid());
		else
			snprintf(k->id, sizeof(k->id), "lazyroot-%d-%d", (int)getpid(), i);
		snprintf(k->dir, sizeof(k->dir), "%s/%s", a->root, k->id);
		if (mkdir(k->dir, 0700) == 0)
			return 0;
		if (errno != EEXIST)
			return log_errno(-errno, "sandbox dir '%s'", k->dir);
		if (a->req->name)
			return log_error(-EEXIST, "sandbox '%s' exists", k->id);
	}
	return log_error(-EEXIST, "sandbox '%s' exists", k->id);
}

void keeper_main(const struct keeper_args *a)
{
	struct keeper k = { .lsock = -1, .logfd = -1, .destroy_fd = -1 };
	_cleanup_(buf_freep) struct buf lines = BUF_INIT;
	char path[PATH_MAX], msg[300], line[256];
	int status = a->status_fd, r, lock = -1, devnull;

	/* only its own descriptors: the status pipe (3) and stdio on /dev/null */
	if (status != 3) {
		dup2(status, 3);
		status = 3;
	}
	devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	dup2(devnull, 0);
	dup2(devnull, 1);
	dup2(devnull, 2);
	syscall(SYS_close_range, 4, ~0u, 0);
	for (int i = 0; i < 3; i++)
		fcntl(i, F_SETFD, 0);
	fcntl(status, F_SETFD, FD_CLOEXEC);
	umask(077);
	r = make_dir(&k, a);
	if (r < 0) {
		snprintf(msg, sizeof(msg), "err %d %s\n", -r, r == -EEXIST ? "sandbox exists" :
		         "cannot make the sandbox's directory");
		if (r == -EEXIST)
			snprintf(msg, sizeof(msg), "err %d sandbox '%s' exists\n", -r, k.id);
		(void)!write(status, msg, strlen(msg));
		_exit(1);
	}
	snprintf(path, sizeof(path), "%s/keeper.log", k.dir);
	k.logfd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (k.logfd >= 0)
		dup2(k.logfd, 2);
	close_fd(&k.logfd);
	k.logfd = open(path, O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof(path), "%s/keeper.lock", k.dir);
	lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lock < 0 || flock(lock, LOCK_EX) < 0) {
		r = log_errno(-errno, "lock '%s'", path);
		goto fail;
	}
	r = make_policy(&k, a->node, a, &lines);
	if (r < 0)
		goto fail;
	launch_init(&k.l, k.sb, NULL, &k.res);
	r = launch_open(&k.l);
	if (r == 0) {
		r = launch_wait_ready(&k.l);
		if (r < 0)
			launch_close(&k.l);
	}
	if (r < 0)
		goto fail;
	snprintf(path, sizeof(path), "%s/execs", k.dir);
	if (mkdir(path, 0700) < 0 || listen_at(&k) < 0 || write_info(&k, a, &lines) < 0) {
		r = -EIO;
		launch_close(&k.l);
		goto fail;
	}
	k.created = k.idle_since = now_ns();
	k.pids_seen = cgroups_pids_max_count(&k.l.cg);
	snprintf(msg, sizeof(msg), "ok %s\n", k.id);
	(void)!write(status, msg, strlen(msg));
	close(status);
	keeper_loop(&k);
	sandbox_free(k.sb);
	_exit(0);

fail:
	keeper_log_line(k.logfd, 0, line, sizeof(line));
	snprintf(msg, sizeof(msg), "err %d %s\n", r < 0 ? -r : EIO, line[0] ? line : "sandbox setup failed");
	{
		char parent[PATH_MAX], *slash;
		_cleanup_close_ int dfd = -1;

		snprintf(parent, sizeof(parent), "%s", k.dir);
		slash = strrchr(parent, '/');
		*slash = '\0';
		dfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0)
			rm_tree_at(dfd, slash + 1);
	}
	(void)!write(status, msg, strlen(msg));
	_exit(1);
}
