/*
 * client.c — speaking to the node: the holder–worker channel's messages, a
 * request over the control socket, and starting a node when none answers.
 *
 * Starting one: clients that find no node serialise on an flock of
 * SOCKET.start (so that two of them never start two nodes), look again under
 * the lock, and start `lazyroot node` in its own session with its stderr on a
 * pipe.  The node writes its start-up errors there, and one NUL byte once its
 * first worker serves, then moves its stderr to its log; the client relays
 * what it read.  EOF without the NUL: the node failed, and the client has
 * shown why.  The wait is bounded (NODE_START_TIMEOUT_MS).
 */
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "lib/json.h"
#include "lib/lib.h"
#include "node/node-internal.h"

#define NODE_START_TIMEOUT_MS 60000
#define NODE_RETRIES 5
/* A reply may wait for a mount, which may wait for an index from a slow
 * store (retried for the fetch timeout): long, but not forever. */
#define NODE_REPLY_TIMEOUT_S 3600

/* ---- the channel ---------------------------------------------------------- */

int node_msg_send(int fd, uint32_t type, const char *json, size_t len, const int *fds,
                  int nfds)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * NODE_MSG_FDS)];
		struct cmsghdr align;
	} u;
	struct iovec iov[2] = { { &type, sizeof(type) }, { (void *)json, len } };
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = 2 };
	int n = 0;

	for (int i = 0; i < nfds; i++)
		if (fds[i] >= 0)
			n++;
	if (n) {
		struct cmsghdr *c;
		int *p;

		memset(&u, 0, sizeof(u));
		m.msg_control = u.buf;
		m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n);
		c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
		p = (int *)CMSG_DATA(c);
		for (int i = 0; i < nfds; i++)
			if (fds[i] >= 0)
				*p++ = fds[i];
	}
	while (sendmsg(fd, &m, MSG_NOSIGNAL) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

int node_msg_recv(int fd, uint32_t *ret_type, struct buf *b, int fds[NODE_MSG_FDS])
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * NODE_MSG_FDS)];
		struct cmsghdr align;
	} u;
	struct iovec iov;
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
	                    .msg_controllen = sizeof(u.buf) };
	ssize_t n;
	int k = 0;

	for (int i = 0; i < NODE_MSG_FDS; i++)
		fds[i] = -1;
	b->len = 0;
	if (buf_reserve(b, NODE_MSG_MAX + 1) < 0)
		return -ENOMEM;
	iov = (struct iovec){ b->data, NODE_MSG_MAX };
	while ((n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC)) < 0)
		if (errno != EINTR)
			return -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int f = ((int *)CMSG_DATA(c))[i];

			if (k < NODE_MSG_FDS)
				fds[k++] = f;
			else
				close(f);
		}
	}
	if (n == 0)
		return 0;
	if ((size_t)n < sizeof(uint32_t) || (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		for (int i = 0; i < k; i++)
			close(fds[i]), fds[i] = -1;
		return -EBADMSG;
	}
	memcpy(ret_type, b->data, sizeof(*ret_type));
	memmove(b->data, b->data + sizeof(uint32_t), (size_t)n - sizeof(uint32_t));
	b->len = (size_t)n - sizeof(uint32_t);
	b->data[b->len] = 0;
	return 1;
}

/* ---- requests ------------------------------------------------------------- */

static int connect_to(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = NODE_REPLY_TIMEOUT_S };
	int fd;

	if (strlen(path) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	strcpy(a.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	while (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int e = errno;

		if (e == EINTR)
			continue;
		close(fd);
		return -e;
	}
	return fd;
}

/* Hand the whole progress lines at the start of b to cb and drop them. */
static void take_progress(struct buf *b, node_progress_fn cb, void *ud)
{
	static const char tag[] = "{\"progress\":";
	char *nl;

	while (b->len > sizeof(tag) - 1 && !memcmp(b->data, tag, sizeof(tag) - 1) &&
	       (nl = memchr(b->data, '\n', b->len))) {
		size_t n = (size_t)(nl - (char *)b->data) + 1;
		json_t *j = NULL;

		if (json_parse(b->data, n - 1, &j, NULL) == 0)
			cb(ud, json_object_get(j, "progress"));
		json_decref(j);
		memmove(b->data, b->data + n, b->len - n);
		b->len -= n;
	}
}

/* A worker that ends (killed, or leaving for an upgrade) may close our
 * connection before it reads the request: EPIPE then, never SIGPIPE, which
 * would end the command instead of letting it ask the next worker. */
static int send_full(int fd, const char *p, size_t len)
{
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int call_once(const char *socket, const char *request, struct buf *b,
                     node_progress_fn cb, void *ud)
{
	_cleanup_close_ int fd = connect_to(socket);
	int r;

	if (fd < 0)
		return fd;
	r = send_full(fd, request, strlen(request));
	if (r == 0)
		r = send_full(fd, "\n", 1);
	if (r < 0)
		return r == -EPIPE ? -ECONNRESET : r;
	(void)shutdown(fd, SHUT_WR);
	for (;;) {
		ssize_t n;

		/* 16 KiB first: a reply is a few hundred bytes, and a 64 KiB
		 * step took an mmap and munmap of 128 KiB per request */
		if (buf_room(b, 16383) < 0)
			return -ENOMEM;
		n = read(fd, b->data + b->len, b->cap - b->len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		if (n == 0)
			break;
		b->len += (size_t)n;
		if (cb)
			take_progress(b, cb, ud);
		if (b->len > NODE_REPLY_MAX)
			return -EMSGSIZE;
	}
	if (b->len == 0)
		return -ECONNRESET;   /* the worker died before it answered */
	return 0;
}

static int call_text(const char *socket, const char *request, struct buf *b,
                     node_progress_fn cb, void *ud)
{
	int r = call_once(socket, request, b, cb, ud);

	/* The worker ended with our request unanswered (killed, or leaving
	 * for an upgrade): the next one answers.  Requests are idempotent. */
	for (int i = 0; r == -ECONNRESET && i < NODE_RETRIES; i++) {
		b->len = 0;
		r = call_once(socket, request, b, cb, ud);
	}
	return r;
}

int node_call_text(const char *socket, const char *request, struct buf *b)
{
	return call_text(socket, request, b, NULL, NULL);
}

static int call(const char *socket, const char *request, node_progress_fn cb, void *ud,
                json_t **ret)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	int r = call_text(socket, request, &b, cb, ud);

	return r < 0 ? r : json_parse(b.data, b.len, ret, NULL);
}

int node_call(const char *socket, const char *request, json_t **ret)
{
	return call(socket, request, NULL, NULL, ret);
}

static bool no_node(int r)
{
	return r == -ECONNREFUSED || r == -ENOENT;
}

/* Start `lazyroot node --socket SOCKET ARGS…` and wait for its NUL byte. */
static int start_node(const char *socket, char *const *args)
{
	_cleanup_(buf_freep) struct buf msg = BUF_INIT;
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	uint64_t deadline = now_ns() + (uint64_t)NODE_START_TIMEOUT_MS * 1000000;
	bool ready = false;
	int p[2], status;
	pid_t pid;

	if (n < 0)
		return log_errno(-errno, "node '%s': readlink /proc/self/exe", socket);
	self[n] = 0;
	if (pipe2(p, O_CLOEXEC) < 0)
		return log_errno(-errno, "node '%s': pipe", socket);
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return log_errno(-errno, "node '%s': fork", socket);
	if (pid == 0) {
		char *argv[64] = { "lazyroot", "node", "--socket", (char *)socket };
		int k = 4, devnull;

		for (size_t i = 0; args && args[i] && k < 62; i++)
			argv[k++] = args[i];
		argv[k] = NULL;
		/* The node outlives us, in its own session; the parent of its
		 * holder becomes init (a double fork would not change that). */
		if (fork() != 0)
			_exit(0);
		setsid();
		devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (devnull >= 0) {
			dup2(devnull, STDIN_FILENO);
			dup2(devnull, STDOUT_FILENO);
		}
		dup2(p[1], STDERR_FILENO);
		syscall(SYS_close_range, 3, ~0u, 0);
		if (chdir("/") < 0)
			_exit(1);
		execv(self, argv);
		_exit(127);
	}
	close(p[1]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	for (;;) {
		struct pollfd pfd = { .fd = p[0], .events = POLLIN };
		uint64_t now = now_ns();
		char b[512], *nul;
		int k;

		if (now >= deadline)
			break;
		k = poll(&pfd, 1, (int)((deadline - now) / 1000000) + 1);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		n = read(p[0], b, sizeof(b));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		nul = memchr(b, 0, (size_t)n);
		if (buf_append(&msg, b, nul ? (size_t)(nul - b) : (size_t)n) < 0)
			break;
		if (nul) {
			ready = true;
			break;
		}
	}
	close(p[0]);
	if (msg.len)
		fwrite(msg.data, 1, msg.len, stderr);
	if (!ready)
		return msg.len ? -EIO
		               : log_error(-EIO, "node '%s': the node service did not start", socket);
	return 0;
}

static int start_locked(const char *socket, char *const *args)
{
	_cleanup_free_ char *lock = NULL, *dir = strdup(socket);
	_cleanup_close_ int lfd = -1;
	json_t *probe = NULL;
	int r;

	if (!dir || asprintf(&lock, "%s.start", socket) < 0)
		return -ENOMEM;
	r = mkdir_p(dirname(dir), 0755);
	if (r < 0)
		return log_errno(r, "node '%s': creating its directory", socket);
	lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lfd < 0)
		return log_errno(-errno, "node '%s': lock '%s'", socket, lock);
	/* Bounded: the holder of this lock waits at most NODE_START_TIMEOUT_MS. */
	while (flock(lfd, LOCK_EX) < 0)
		if (errno != EINTR)
			return log_errno(-errno, "node '%s': lock '%s'", socket, lock);
	r = node_call(socket, "{\"verb\":\"ping\"}", &probe);
	json_decref(probe);
	if (r == 0 || !no_node(r))
		return 0;   /* another client started it meanwhile */
	return start_node(socket, args);
}

static void show_log(const json_t *reply)
{
	const char *log = json_get_cstr(reply, "log");

	if (log && *log)
		fputs(log, stderr);
}

int node_request(const char *socket, char *const *start_args, const char *request,
                 json_t **ret)
{
	return node_request_progress(socket, start_args, request, NULL, NULL, ret);
}

int node_request_progress(const char *socket, char *const *start_args, const char *request,
                          node_progress_fn cb, void *ud, json_t **ret)
{
	json_t *reply = NULL;
	bool ok = false;
	int r;

	r = call(socket, request, cb, ud, &reply);
	if (no_node(r) && !start_args)
		return log_error(r, "node '%s': no node service answers, and node_start is off: "
		                 "start the node service (systemctl start lazyroot-node)", socket);
	if (no_node(r)) {
		r = start_locked(socket, start_args);
		if (r < 0)
			return r;
		r = call(socket, request, cb, ud, &reply);
	}
	if (r < 0) {
		if (no_node(r))
			return log_error(r, "node '%s': no node service answers", socket);
		return log_errno(r, "node '%s': request failed", socket);
	}
	show_log(reply);
	if (json_bool(json_object_get(reply, "ok"), &ok) < 0 || !ok) {
		const char *err = json_get_cstr(reply, "error"), *log = json_get_cstr(reply, "log");

		/* The lines the node logged say why; the error is their summary. */
		if (log && *log)
			;
		else if (err && *err)
			log_error(-EIO, "%s", err);
		else
			log_error(-EIO, "node '%s': the request failed", socket);
		json_decref(reply);
		return -EIO;
	}
	*ret = reply;
	return 0;
}
