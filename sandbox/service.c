/*
 * service.c — the sandbox service's calls (service.h): the caller's side.
 *
 * Each call reads the state tree or talks to one keeper over its socket:
 * one request message, one answer (SOCK_SEQPACKET), a descriptor with it
 * for an exec's stdin.  No state is kept between calls, so that any thread,
 * and any process after a crash of the last one, finds every sandbox again.
 * A keeper that is gone (keeper.lock can be taken) left either ended.json
 * (it ended the sandbox) or nothing (it was killed): then its sandbox died
 * with it (the init's parent-death signal), and destroy or sandbox_gc
 * removes what is left.
 */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
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

__attribute__((format(printf, 3, 4)))
static int fail(struct sandbox_service_err *err, int r, const char *fmt, ...)
{
	va_list ap;

	if (err) {
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		va_end(ap);
	}
	return r;
}

static const char *root_of(const struct sandbox_node *n)
{
	return n && n->service_dir ? n->service_dir : SERVICE_DIR_DEFAULT;
}

static bool id_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n < 1 || n > SANDBOX_SERVICE_ID_MAX || s[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", s[i]))
			return false;
	return true;
}

static int dir_of(const struct sandbox_node *n, const char *id, char *out, size_t len)
{
	if (!id_ok(id))
		return -EINVAL;
	if ((size_t)snprintf(out, len, "%s/%s", root_of(n), id) >= len)
		return -ENAMETOOLONG;
	return 0;
}

static int read_json(const char *dir, const char *file, json_t **ret)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	char path[PATH_MAX];
	int r;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	r = read_file(path, 1 << 20, &b);
	if (r < 0)
		return r;
	return json_parse(b.data, b.len, ret, NULL);
}

/* Is the keeper of dir alive (its lock held)?  -ENOENT: no such sandbox. */
static int keeper_alive(const char *dir)
{
	_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int fd;

	if (dfd < 0)
		return -errno;
	fd = lock_file_at(dfd, "keeper.lock", false);
	if (fd == -EBUSY)
		return 1;
	if (fd >= 0)
		close(fd);
	return 0;
}

/* One request to the keeper, one answer; *ret_fd (may be NULL) a descriptor
 * that came with it, else -1.  -ESRCH when no keeper answers. */
static int talk(const char *dir, json_t *req, json_t **ret, int *ret_fd,
                struct sandbox_service_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	_cleanup_close_ int fd = -1;
	char data[65536], ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { data, sizeof(data) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
	                     .msg_controllen = sizeof(ctl) };
	json_t *ans = NULL;
	int64_t e = EIO;
	bool ok = false;
	ssize_t n;
	int r;

	if (ret_fd)
		*ret_fd = -1;
	r = json_buf_add(&b, req);
	if (r < 0)
		return fail(err, r, "cannot write the request");
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/keeper.sock", dir);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return fail(err, -errno, "socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return fail(err, -ESRCH, "sandbox has ended");
	if (send(fd, b.data, b.len, MSG_NOSIGNAL) < 0)
		return fail(err, -ESRCH, "sandbox has ended");
	do
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	for (struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_type == SCM_RIGHTS) {
			int got;

			memcpy(&got, CMSG_DATA(c), sizeof(got));
			if (ret_fd)
				*ret_fd = got;
			else
				close(got);
		}
	if (n <= 0)
		return fail(err, -ESRCH, "sandbox ended before it answered");
	if (json_parse(data, (size_t)n, &ans, NULL) < 0)
		return fail(err, -EBADMSG, "bad answer from the keeper");
	json_bool(json_object_get(ans, "ok"), &ok);
	if (!ok) {
		json_int(json_object_get(ans, "errno"), &e);
		fail(err, -(int)(e > 0 ? e : EIO), "%s", json_get_cstr(ans, "error") ?
		     json_get_cstr(ans, "error") : "failed");
		if (ret_fd && *ret_fd >= 0)
			close_fd(ret_fd);
		json_decref(ans);
		return -(int)(e > 0 ? e : EIO);
	}
	*ret = ans;
	return 0;
}

/* ---- create ------------------------------------------------------------------ */

int sandbox_service_create(const struct sandbox_node *node,
                           const struct sandbox_service_request *req, char **ret_id,
                           struct sandbox_service_err *err)
{
	struct keeper_args a = { node, req, root_of(node), -1 };
	char msg[512], *sp;
	int p[2], st, e;
	ssize_t n;
	pid_t pid;

	*ret_id = NULL;
	if (!req->rootfs || !req->rootfs[0])
		return fail(err, -EINVAL, "create: no rootfs");
	if (req->name && !id_ok(req->name))
		return fail(err, -EINVAL, "create: bad name '%s' (want [A-Za-z0-9._-]{1,64}, not "
		            "starting with a dot)", req->name);
	if (req->ttl < 0 || req->idle_timeout < 0)
		return fail(err, -EINVAL, "create: negative ttl or idle_timeout");
	for (size_t i = 0; i < req->n_labels; i++)
		if (!req->labels[i].key || !req->labels[i].value || strchr(req->labels[i].key, '='))
			return fail(err, -EINVAL, "create: bad label");
	if (geteuid() != 0)
		return fail(err, -EPERM, "create: the sandbox service needs root");
	if (pipe2(p, O_CLOEXEC) < 0)
		return fail(err, -errno, "create: pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0) {
		e = errno;
		close(p[0]);
		close(p[1]);
		return fail(err, -e, "create: fork: %s", strerror(e));
	}
	if (pid == 0) {
		sigset_t none;

		/* the caller's dispositions and mask are not the keeper's */
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		for (int s = 1; s < NSIG; s++)
			if (s != SIGKILL && s != SIGSTOP)
				signal(s, SIG_DFL);
		close(p[0]);
		setsid();
		if (fork() != 0)
			_exit(0);
		a.status_fd = p[1];
		keeper_main(&a);
	}
	close(p[1]);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	n = read_full(p[0], msg, sizeof(msg) - 1);
	close(p[0]);
	if (n <= 0)
		return fail(err, -EIO, "create: the keeper died before it was ready");
	msg[n] = '\0';
	sp = strchr(msg, '\n');
	if (sp)
		*sp = '\0';
	if (!strncmp(msg, "ok ", 3)) {
		*ret_id = strdup(msg + 3);
		return *ret_id ? 0 : -ENOMEM;
	}
	e = EIO;
	if (sscanf(msg, "err %d", &e) != 1 || e <= 0)
		e = EIO;
	sp = strchr(msg + 4, ' ');
	return fail(err, -e, "%s", sp ? sp + 1 : "create failed");
}

/* ---- get, list ----------------------------------------------------------------- */

static int get_dir(const char *dir, const char *id, json_t **ret, struct sandbox_service_err *err)
{
	json_t *info = NULL, *st = NULL, *ended = NULL;
	int alive = keeper_alive(dir), r;

	if (alive == -ENOENT)
		return fail(err, -ENOENT, "no sandbox '%s'", id);
	r = read_json(dir, "sandbox.json", &info);
	if (r < 0)
		return fail(err, r == -ENOENT ? -ENOENT : r, "no sandbox '%s'", id);
	if (alive > 0 && talk(dir, json_pack("{s:s}", "op", "get"), &st, NULL, NULL) == 0) {
		json_object_del(st, "ok");
		json_object_update(info, st);
		json_object_set_new(info, "ended", json_null());
		json_decref(st);
	} else {
		if (read_json(dir, "ended.json", &ended) < 0)
			ended = json_pack("{s:s, s:s}", "id", id, "reason", "keeper died");
		json_object_set_new(info, "state", json_string("ended"));
		json_object_set_new(info, "ended", ended);
	}
	*ret = info;
	return 0;
}

int sandbox_service_get(const struct sandbox_node *node, const char *id, json_t **ret,
                        struct sandbox_service_err *err)
{
	char dir[PATH_MAX];

	if (dir_of(node, id, dir, sizeof(dir)) < 0)
		return fail(err, -ENOENT, "no sandbox '%s'", id ? id : "");
	return get_dir(dir, id, ret, err);
}

static bool has_label(const json_t *info, const char *label)
{
	const char *eq = strchr(label, '=');
	_cleanup_free_ char *key = NULL;
	const char *v;

	if (!eq)
		return json_object_get(json_object_get(info, "labels"), label) != NULL;
	key = strndup(label, (size_t)(eq - label));
	v = key ? json_get_cstr(json_object_get(info, "labels"), key) : NULL;
	return v && !strcmp(v, eq + 1);
}

int sandbox_service_list(const struct sandbox_node *node, const char *label, json_t **ret,
                         struct sandbox_service_err *err)
{
	json_t *all = json_array();
	DIR *d = opendir(root_of(node));
	struct dirent *e;

	if (!all) {
		if (d)
			closedir(d);
		return fail(err, -ENOMEM, "out of memory");
	}
	while (d && (e = readdir(d))) {
		char dir[PATH_MAX];
		json_t *info;

		if (!id_ok(e->d_name) || dir_of(node, e->d_name, dir, sizeof(dir)) < 0)
			continue;
		if (get_dir(dir, e->d_name, &info, NULL) < 0)
			continue;
		if (label && !has_label(info, label))
			json_decref(info);
		else
			json_array_append_new(all, info);
	}
	if (d)
		closedir(d);
	*ret = all;
	return 0;
}

int sandbox_service_using(const struct sandbox_node *node, const char *dir, char *ret_id,
                          size_t len)
{
	DIR *d = opendir(root_of(node));
	size_t n = strlen(dir);
	struct dirent *e;
	int found = 0;

	while (n > 1 && dir[n - 1] == '/')
		n--;
	while (d && !found && (e = readdir(d))) {
		char sdir[PATH_MAX];
		json_t *info = NULL;
		const char *root;

		if (!id_ok(e->d_name) || dir_of(node, e->d_name, sdir, sizeof(sdir)) < 0 ||
		    keeper_alive(sdir) <= 0 || read_json(sdir, "sandbox.json", &info) < 0)
			continue;
		root = json_get_cstr(info, "rootfs");
		if (root && !strncmp(root, dir, n) && (root[n] == '\0' || root[n] == '/')) {
			snprintf(ret_id, len, "%s", e->d_name);
			found = 1;
		}
		json_decref(info);
	}
	if (d)
		closedir(d);
	return found;
}

/* ---- destroy ---------------------------------------------------------------------- */

/* A dead keeper's leftovers: its cgroups through its launcher record (as
 * sandbox_gc does), then its directory. */
static int remove_dead(const struct sandbox_node *node, const char *dir, const char *id)
{
	struct launch_record rec = LAUNCH_RECORD_INIT;
	_cleanup_close_ int root = open(root_of(node), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r = launch_record_open(node, id, &rec);

	(void)dir;
	if (r < 0)
		return r;
	launch_record_close(&rec, true);
	return root >= 0 ? rm_tree_at(root, id) : -errno;
}

int sandbox_service_destroy(const struct sandbox_node *node, const char *id,
                            struct sandbox_service_err *err)
{
	char dir[PATH_MAX];
	json_t *info = NULL, *ans = NULL;
	_cleanup_close_ int pidfd = -1;
	int64_t kpid = 0;
	int alive, r;

	if (dir_of(node, id, dir, sizeof(dir)) < 0)
		return 0;   /* never was */
	alive = keeper_alive(dir);
	if (alive == -ENOENT)
		return 0;
	if (alive > 0 && read_json(dir, "sandbox.json", &info) == 0) {
		json_int(json_object_get(info, "keeper_pid"), &kpid);
		json_decref(info);
		if (kpid > 0)
			pidfd = (int)syscall(SYS_pidfd_open, (pid_t)kpid, 0);
	}
	if (alive > 0) {
		r = talk(dir, json_pack("{s:s}", "op", "destroy"), &ans, NULL, err);
		json_decref(ans);
		if (r < 0 && r != -ESRCH)
			return r;
		/* gone once its keeper has exited: nothing of it is left then */
		if (pidfd >= 0)
			poll(&(struct pollfd){ pidfd, POLLIN, 0 }, 1, 10000);
	}
	if (access(dir, F_OK) == 0) {
		r = remove_dead(node, dir, id);
		if (r < 0)
			return fail(err, r, "destroy '%s': what its keeper left cannot be removed", id);
	}
	return 0;
}

/* ---- exec ---------------------------------------------------------------------------- */

static json_t *strv_json(char *const *v)
{
	json_t *a = json_array();

	for (size_t i = 0; a && v && v[i]; i++)
		json_array_append_new(a, json_string(v[i]));
	return a;
}

int sandbox_service_exec(const struct sandbox_node *node, const char *id,
                         const struct sandbox_exec_request *req, char **ret_exec_id,
                         bool *ret_existed, int *ret_stdin, struct sandbox_service_err *err)
{
	char dir[PATH_MAX];
	json_t *m, *ans = NULL;
	bool existed = false;
	int r, fd = -1;

	*ret_exec_id = NULL;
	if (ret_stdin)
		*ret_stdin = -1;
	if (dir_of(node, id, dir, sizeof(dir)) < 0 || access(dir, F_OK) < 0)
		return fail(err, -ENOENT, "no sandbox '%s'", id ? id : "");
	if (req->exec_id && !id_ok(req->exec_id))
		return fail(err, -EINVAL, "bad exec id '%s' (want [A-Za-z0-9._-]{1,64}, not starting "
		            "with a dot)", req->exec_id);
	if (!req->fn && (!req->argv || !req->argv[0]))
		return fail(err, -EINVAL, "exec: no command");
	m = json_pack("{s:s, s:o, s:b}", "op", "exec", "timeout", json_real(req->timeout),
	              "stdin_pipe", req->stdin_pipe && ret_stdin);
	if (!m)
		return fail(err, -ENOMEM, "out of memory");
	if (req->exec_id)
		json_object_set_new(m, "exec_id", json_string(req->exec_id));
	if (req->argv)
		json_object_set_new(m, "argv", strv_json(req->argv));
	if (req->env)
		json_object_set_new(m, "env", strv_json(req->env));
	if (req->cwd)
		json_object_set_new(m, "cwd", json_string(req->cwd));
	if (req->user)
		json_object_set_new(m, "user", json_string(req->user));
	if (req->output_limit)
		json_object_set_new(m, "output_limit", json_u64(req->output_limit));
	if (req->fn) {
		json_object_set_new(m, "fn", json_string(req->fn));
		if (req->fn_args)
			json_object_set(m, "fn_args", (json_t *)req->fn_args);
	}
	r = talk(dir, m, &ans, &fd, err);
	if (r < 0)
		return r;
	json_bool(json_object_get(ans, "existed"), &existed);
	*ret_exec_id = strdup(json_get_cstr(ans, "exec_id") ? json_get_cstr(ans, "exec_id") : "");
	json_decref(ans);
	if (ret_existed)
		*ret_existed = existed;
	if (ret_stdin)
		*ret_stdin = fd;
	else if (fd >= 0)
		close(fd);
	return *ret_exec_id ? 0 : -ENOMEM;
}

int sandbox_service_exec_dir(const struct sandbox_node *node, const char *id,
                             const char *exec_id, char *out, size_t len)
{
	if (!id_ok(id) || !id_ok(exec_id))
		return -EINVAL;
	if ((size_t)snprintf(out, len, "%s/%s/execs/%s", root_of(node), id, exec_id) >= len)
		return -ENAMETOOLONG;
	return 0;
}

int sandbox_service_exec_get(const struct sandbox_node *node, const char *id,
                             const char *exec_id, double wait, json_t **ret,
                             struct sandbox_service_err *err)
{
	char edir[PATH_MAX], sdir[PATH_MAX], path[PATH_MAX + 16];
	json_t *ans = NULL;
	struct stat so, se;

	if (sandbox_service_exec_dir(node, id, exec_id, edir, sizeof(edir)) < 0 ||
	    access(edir, F_OK) < 0)
		return fail(err, -ENOENT, "no exec '%s' in sandbox '%s'", exec_id ? exec_id : "",
		            id ? id : "");
	if (read_json(edir, "result.json", ret) == 0)
		return 0;
	if (wait > 0 && dir_of(node, id, sdir, sizeof(sdir)) == 0 &&
	    talk(sdir, json_pack("{s:s, s:s, s:f}", "op", "wait", "exec_id", exec_id, "timeout",
	                         wait), &ans, NULL, NULL) == 0)
		json_decref(ans);
	if (read_json(edir, "result.json", ret) == 0)
		return 0;
	snprintf(path, sizeof(path), "%s/stdout", edir);
	if (stat(path, &so) < 0)
		so.st_size = 0;
	snprintf(path, sizeof(path), "%s/stderr", edir);
	if (stat(path, &se) < 0)
		se.st_size = 0;
	*ret = json_pack("{s:s, s:s, s:I, s:I}", "exec_id", exec_id, "state", "running",
	                 "stdout_bytes", (json_int_t)so.st_size, "stderr_bytes",
	                 (json_int_t)se.st_size);
	return *ret ? 0 : fail(err, -ENOMEM, "out of memory");
}

int sandbox_service_stage(const struct sandbox_node *node, const char *id, const char *stage,
                          char **ret_current, struct sandbox_service_err *err)
{
	char dir[PATH_MAX];
	json_t *ans = NULL;
	int r;

	if (dir_of(node, id, dir, sizeof(dir)) < 0 || access(dir, F_OK) < 0)
		return fail(err, -ENOENT, "no sandbox '%s'", id ? id : "");
	r = talk(dir, stage ? json_pack("{s:s, s:s}", "op", "stage", "stage", stage) :
	                      json_pack("{s:s}", "op", "stage"), &ans, NULL, err);
	if (r < 0)
		return r;
	if (ret_current)
		*ret_current = strdup(json_get_cstr(ans, "stage") ? json_get_cstr(ans, "stage") : "");
	json_decref(ans);
	return ret_current && !*ret_current ? -ENOMEM : 0;
}

/* ---- collection ------------------------------------------------------------------------ */

void service_gc(const struct sandbox_node *n)
{
	_cleanup_close_ int root = open(root_of(n), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct timespec now;
	struct dirent *e;
	DIR *d;

	if (root < 0)
		return;
	d = fdopendir(root);
	if (!d)
		return;
	root = -1;
	clock_gettime(CLOCK_REALTIME, &now);
	while ((e = readdir(d))) {
		_cleanup_close_ int dfd = -1;
		struct stat st;
		int lock;

		if (!id_ok(e->d_name))
			continue;
		dfd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dfd < 0)
			continue;
		lock = lock_file_at(dfd, "keeper.lock", false);
		if (lock == -EBUSY)
			continue;   /* its keeper runs */
		if (lock < 0) {
			/* a keeper between mkdir and its lock, or a crash right there */
			if (fstat(dfd, &st) == 0 && now.tv_sec - st.st_mtim.tv_sec > 60)
				rm_tree_at(dirfd(d), e->d_name);
			continue;
		}
		/* an ended sandbox's results are kept a while; a killed keeper's
		 * sandbox died with it, and sandbox_gc took its cgroups already */
		if (fstatat(dfd, "ended.json", &st, 0) == 0 &&
		    now.tv_sec - st.st_mtim.tv_sec < SANDBOX_SERVICE_KEEP_ENDED) {
			close(lock);
			continue;
		}
		rm_tree_at(dirfd(d), e->d_name);
		close(lock);
	}
	closedir(d);
}
