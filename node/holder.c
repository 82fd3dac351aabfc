/*
 * holder.c — the process `lazyroot node` starts: it holds what must outlive
 * a worker and starts workers.
 *
 * It owns the control socket's listening descriptor (clients that connect
 * while no worker runs wait in its backlog), the /metrics listening socket
 * (given to each worker with HELLO, so that no worker binds the port again),
 * an flock beside the socket (one node per socket), and per mount a record (JSON, from the worker) with the
 * mount's /dev/fuse descriptor and state file.  While it holds a connection's
 * descriptor the kernel keeps the mount alive; requests wait in the kernel for
 * the next worker, which adopts the connection.
 *
 * It does nothing else, so that it almost never fails: no cache, no store, no
 * FUSE request ever reaches it; its loop is poll(2) on the worker's channel
 * and a signalfd.  A worker that dies is started again at once; one that dies
 * within NODE_FAST_EXIT_MS of its start counts as a crash in a row, and from
 * the NODE_FREE_RESTARTS-th such crash on the restarts wait, doubling from
 * NODE_BACKOFF_MIN_MS to NODE_BACKOFF_MAX_MS, so that a crash loop does not
 * spin.  The first worker failing before it serves ends the node: that is a
 * start-up error (a bad cache directory), and the client that started the
 * node has seen why.
 *
 * Signals: SIGTERM and SIGINT stop the node (the worker unmounts everything);
 * SIGHUP starts a new worker of the same binary (a reload).
 */
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "lib/json.h"
#include "lib/lib.h"
#include "node/api.h"
#include "node/metrics.h"
#include "node/node-internal.h"
#include "node/takeover.h"

#define NODE_FAST_EXIT_MS 1000
#define NODE_FREE_RESTARTS 3
#define NODE_BACKOFF_MIN_MS 50
#define NODE_BACKOFF_MAX_MS 5000
/* A worker told to leave (upgrade) that has not exited by then is killed:
 * the next one takes its mounts over all the same. */
#define NODE_LEAVE_TIMEOUT_MS 30000

struct record {
	char *mountpoint;
	char *json;
	int fds[NODE_MSG_FDS];    /* the /dev/fuse descriptor, the state file */
};

struct holder {
	const struct node_config *cfg;
	char **args;
	int nargs;
	const char *log_path;
	int listen_fd, sfd, chan;
	int metrics_fd;           /* the /metrics socket, or -1 (off, or its port taken) */
	int api_unix_fd, api_tcp_fd;   /* the API's sockets, or -1 */
	char api_path[108];       /* the API's unix socket */
	pid_t worker;
	char self[PATH_MAX];
	char *next_binary;        /* the binary of the next worker (upgrade), or NULL */
	struct record *recs;
	size_t nrecs;
	unsigned takeovers, fast_exits;
	uint64_t started_ns, worker_started_ns, restart_at_ns, leave_deadline_ns;
	bool ever_ready, stopping, upgrading, restart_pending;
};

static void record_free(struct record *rec)
{
	for (int i = 0; i < NODE_MSG_FDS; i++)
		if (rec->fds[i] >= 0)
			close(rec->fds[i]);
	free(rec->mountpoint);
	free(rec->json);
}

static struct record *record_find(struct holder *h, const char *mountpoint)
{
	for (size_t i = 0; i < h->nrecs; i++)
		if (!strcmp(h->recs[i].mountpoint, mountpoint))
			return &h->recs[i];
	return NULL;
}

static void record_del(struct holder *h, const char *mountpoint)
{
	struct record *rec = record_find(h, mountpoint);

	if (!rec)
		return;
	record_free(rec);
	*rec = h->recs[--h->nrecs];
}

/* A mount being unmounted: its record goes on under key, marked detached
 * for the next worker (node-internal.h, DETACH). */
static int record_detach(struct holder *h, const char *mountpoint, const char *key)
{
	struct record *rec = record_find(h, mountpoint);
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	json_t *old = NULL, *doc;
	char *k;
	int r;

	if (!rec)
		return 0;
	r = json_parse(rec->json, strlen(rec->json), &old, NULL);
	if (r < 0 || !json_is_object(old)) {
		json_decref(old);
		return r < 0 ? r : -EBADMSG;
	}
	/* "detached" first, then the record's own members */
	doc = json_pack("{s:s}", "detached", key);
	r = doc && json_object_update(doc, old) == 0 ? 0 : -ENOMEM;
	json_decref(old);
	r = r ?: json_buf_add(&b, json_incref(doc));
	json_decref(doc);
	k = r == 0 ? strdup(key) : NULL;
	if (!k || buf_append_zero(&b, 1) < 0) {
		free(k);
		return r ?: -ENOMEM;
	}
	record_del(h, key);
	rec = record_find(h, mountpoint);
	free(rec->mountpoint);
	rec->mountpoint = k;
	free(rec->json);
	rec->json = (char *)b.data;
	b = (struct buf)BUF_INIT;
	return 0;
}

/* Take the worker's record of a new mount (and its descriptors: fds). */
static int record_add(struct holder *h, const struct buf *b, int fds[NODE_MSG_FDS])
{
	json_t *j = NULL;
	const char *mnt;
	struct record *v;
	int r = json_parse(b->data, b->len, &j, NULL);

	mnt = r == 0 ? json_get_cstr(j, "mountpoint") : NULL;
	if (!mnt) {
		json_decref(j);
		return log_error(-EBADMSG, "node: a mount record without a mountpoint");
	}
	record_del(h, mnt);   /* a mountpoint is one mount */
	v = realloc(h->recs, (h->nrecs + 1) * sizeof(*v));
	if (!v) {
		json_decref(j);
		return -ENOMEM;
	}
	h->recs = v;
	v = &h->recs[h->nrecs];
	v->mountpoint = strdup(mnt);
	v->json = strdup((const char *)b->data);
	json_decref(j);
	if (!v->mountpoint || !v->json) {
		free(v->mountpoint);
		free(v->json);
		return -ENOMEM;
	}
	for (int i = 0; i < NODE_MSG_FDS; i++) {
		v->fds[i] = fds[i];
		fds[i] = -1;
	}
	h->nrecs++;
	return 0;
}

/* ---- the worker ------------------------------------------------------------ */

static void worker_exec(struct holder *h, const char *binary, int chan)
{
	char *argv[256] = { (char *)binary, "node", "--worker" };
	int k = 3, c, l;
	sigset_t all;

	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	for (int i = 0; i < h->nargs && k < 254; i++)
		argv[k++] = h->args[i];
	argv[k] = NULL;
	/* Move both out of the way first: either may sit on 3 or 4. */
	c = fcntl(chan, F_DUPFD_CLOEXEC, 10);
	l = fcntl(h->listen_fd, F_DUPFD_CLOEXEC, 10);
	if (c < 0 || l < 0 || dup2(c, NODE_WORKER_CHAN_FD) < 0 ||
	    dup2(l, NODE_WORKER_LISTEN_FD) < 0)
		_exit(127);
	syscall(SYS_close_range, NODE_WORKER_LISTEN_FD + 1, ~0u, 0);
	execv(binary, argv);
	log_errno(-errno, "node: exec '%s'", binary);
	_exit(127);
}

static int worker_start(struct holder *h)
{
	const char *binary = h->next_binary ? h->next_binary : h->self;
	_cleanup_(buf_freep) struct buf hello = BUF_INIT;
	int sv[2], r;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return log_errno(-errno, "node: socketpair");
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		close(sv[0]);
		close(sv[1]);
		return log_errno(-errno, "node: fork");
	}
	if (pid == 0)
		worker_exec(h, binary, sv[1]);
	close(sv[1]);
	h->chan = sv[0];
	h->worker = pid;
	h->worker_started_ns = now_ns();
	if (h->ever_ready)
		h->takeovers++;
	/* "metrics_fd": whether this holder keeps the /metrics socket (and
	 * sends it here when it has one), so a worker binds the port itself
	 * only under a holder that predates this */
	r = json_pack_buf(&hello, "{s:i, s:I, s:o, s:b, s:b}", "holder_pid", (int)getpid(),
	                  "takeovers", (json_int_t)h->takeovers,
	                  "uptime_ms", json_u64((now_ns() - h->started_ns) / 1000000),
	                  "metrics_fd", 1, "api_fds", 1);
	r = r ?: node_msg_send(h->chan, NODE_MSG_HELLO, (char *)hello.data, hello.len,
	                       &h->metrics_fd, h->metrics_fd >= 0 ? 1 : 0);
	if (r == 0) {
		int fds[2], n = 0;
		char msg[64];

		if (h->api_unix_fd >= 0)
			fds[n++] = h->api_unix_fd;
		if (h->api_tcp_fd >= 0)
			fds[n++] = h->api_tcp_fd;
		snprintf(msg, sizeof(msg), "{\"api_unix\":%s,\"api_tcp\":%s}",
		         h->api_unix_fd >= 0 ? "true" : "false", h->api_tcp_fd >= 0 ? "true" : "false");
		r = node_msg_send(h->chan, NODE_MSG_LISTEN, msg, strlen(msg), fds, n);
	}
	for (size_t i = 0; r == 0 && i < h->nrecs; i++)
		r = node_msg_send(h->chan, NODE_MSG_RECORD, h->recs[i].json,
		                  strlen(h->recs[i].json), h->recs[i].fds, NODE_MSG_FDS);
	if (r == 0)
		r = node_msg_send(h->chan, NODE_MSG_END, "{}", 2, NULL, 0);
	if (r < 0)
		log_errno(r, "node: handing the mounts to worker %d", (int)pid);
	/* A worker that never read them dies; its exit restarts the next. */
	return 0;
}

/* systemd's Type=notify: READY=1 on $NOTIFY_SOCKET (a path, or '@' for an
 * abstract name). */
static void sd_ready(void)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	static const char msg[] = "READY=1";
	socklen_t len;
	int fd;

	if (!path || !*path || strlen(path) >= sizeof(a.sun_path))
		return;
	memcpy(a.sun_path, path, strlen(path));
	if (a.sun_path[0] == '@')
		a.sun_path[0] = 0;
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	(void)sendto(fd, msg, sizeof(msg) - 1, MSG_NOSIGNAL, (struct sockaddr *)&a, len);
	close(fd);
}

/* The first worker serves: tell systemd, or the client that started us, and
 * move our stderr (its pipe) to the log. */
static void signal_ready(struct holder *h)
{
	int fd;

	if (h->ever_ready)
		return;
	h->ever_ready = true;
	sd_ready();
	if (!h->log_path)
		return;
	(void)write_full(STDERR_FILENO, "", 1);
	fd = open(h->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		dup2(fd, STDERR_FILENO);
		close(fd);
	}
}

static void tell_leave(struct holder *h)
{
	h->upgrading = true;
	h->leave_deadline_ns = now_ns() + (uint64_t)NODE_LEAVE_TIMEOUT_MS * 1000000;
	(void)node_msg_send(h->chan, NODE_MSG_LEAVE, "{}", 2, NULL, 0);
}

static void on_message(struct holder *h)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	int fds[NODE_MSG_FDS];
	uint32_t type;
	json_t *j = NULL;
	int r = node_msg_recv(h->chan, &type, &b, fds);

	if (r <= 0) {
		/* EOF: the worker is exiting (its SIGCHLD follows) */
		if (r < 0)
			log_errno(r, "node: reading worker %d", (int)h->worker);
		close(h->chan);
		h->chan = -1;
		return;
	}
	switch (type) {
	case NODE_MSG_READY:
		h->fast_exits = 0;
		signal_ready(h);
		break;
	case NODE_MSG_ADD:
		r = record_add(h, &b, fds);
		if (r < 0)
			log_errno(r, "node: keeping a mount record");
		break;
	case NODE_MSG_DEL:
		if (json_parse(b.data, b.len, &j, NULL) == 0 && json_get_cstr(j, "mountpoint"))
			record_del(h, json_get_cstr(j, "mountpoint"));
		break;
	case NODE_MSG_DETACH:
		if (json_parse(b.data, b.len, &j, NULL) == 0 && json_get_cstr(j, "mountpoint") &&
		    json_get_cstr(j, "key") &&
		    (r = record_detach(h, json_get_cstr(j, "mountpoint"), json_get_cstr(j, "key"))) < 0)
			log_errno(r, "node: keeping the record of a detached mount");
		break;
	case NODE_MSG_UPGRADE:
		if (json_parse(b.data, b.len, &j, NULL) == 0 && json_get_cstr(j, "binary")) {
			free(h->next_binary);
			h->next_binary = strdup(json_get_cstr(j, "binary"));
			tell_leave(h);
		}
		break;
	case NODE_MSG_STOP:
		h->stopping = true;
		break;
	default:
		log_msg(LOG_WARN, "node: unknown message %u from the worker", type);
	}
	json_decref(j);
	for (int i = 0; i < NODE_MSG_FDS; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* Every message the channel holds, without waiting: the worker has exited,
 * though a child of its may still hold its end open. */
static void drain_messages(struct holder *h)
{
	while (h->chan >= 0) {
		struct pollfd p = { .fd = h->chan, .events = POLLIN };

		if (poll(&p, 1, 0) <= 0)
			break;
		on_message(h);
	}
}

/* Mounts nobody will serve again: end them so that readers get an error
 * instead of waiting. */
static void abort_all(struct holder *h)
{
	while (h->nrecs) {
		(void)node_abort_mount(h->recs[h->nrecs - 1].mountpoint);
		record_free(&h->recs[--h->nrecs]);
	}
}

/* The worker exited: start the next one (now, or after the backoff). */
static void on_worker_exit(struct holder *h, int status)
{
	uint64_t lived_ms = (now_ns() - h->worker_started_ns) / 1000000;

	h->worker = 0;
	if (h->chan >= 0) {
		close(h->chan);
		h->chan = -1;
	}
	if (h->stopping)
		return;
	if (h->upgrading) {
		h->upgrading = false;
	} else {
		if (WIFSIGNALED(status))
			log_msg(LOG_WARN, "node: worker killed by signal %d; starting another",
			        WTERMSIG(status));
		else
			log_msg(LOG_WARN, "node: worker exited with status %d; starting another",
			        WEXITSTATUS(status));
		if (h->next_binary && WIFEXITED(status) && WEXITSTATUS(status) == 127) {
			log_msg(LOG_WARN, "node: '%s' did not start; back to '%s'", h->next_binary,
			        h->self);
			free(h->next_binary);
			h->next_binary = NULL;
		}
		h->fast_exits = lived_ms < NODE_FAST_EXIT_MS ? h->fast_exits + 1 : 0;
	}
	h->restart_pending = true;
	h->restart_at_ns = now_ns();
	if (h->fast_exits >= NODE_FREE_RESTARTS) {
		unsigned shift = MIN(h->fast_exits - NODE_FREE_RESTARTS, 16u);
		uint64_t ms = MIN((uint64_t)NODE_BACKOFF_MIN_MS << shift, NODE_BACKOFF_MAX_MS);

		h->restart_at_ns += ms * 1000000;
	}
}

/* ---- the socket ------------------------------------------------------------ */

static int listen_on(const char *path, int *ret_lock)
{
	_cleanup_free_ char *dir = strdup(path), *lock = NULL;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	_cleanup_close_ int lfd = -1, fd = -1;
	int r;

	if (!dir || asprintf(&lock, "%s.lock", path) < 0)
		return -ENOMEM;
	if (strlen(path) >= sizeof(a.sun_path))
		return log_error(-ENAMETOOLONG, "--socket '%s': too long for a socket path", path);
	strcpy(a.sun_path, path);
	r = mkdir_p(dirname(dir), 0755);
	if (r < 0)
		return log_errno(r, "--socket '%s': creating its directory", path);
	lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lfd < 0)
		return log_errno(-errno, "--socket '%s': lock '%s'", path, lock);
	if (flock(lfd, LOCK_EX | LOCK_NB) < 0)
		return log_error(-EBUSY, "--socket '%s': another node serves it", path);
	/* Under the lock, a socket file left there is a dead node's. */
	(void)unlink(path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return log_errno(-errno, "--socket '%s'", path);
	/* 0600: only root (the node's user) may connect; SO_PEERCRED checks again */
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || chmod(path, 0600) < 0 ||
	    listen(fd, 512) < 0)
		return log_errno(-errno, "--socket '%s'", path);
	*ret_lock = TAKE_FD(lfd);
	return TAKE_FD(fd);
}

int node_holder_main(const struct node_config *cfg, char **args, int nargs)
{
	struct holder h = { .cfg = cfg, .args = args, .nargs = nargs, .listen_fd = -1,
	                    .metrics_fd = -1, .api_unix_fd = -1, .api_tcp_fd = -1, .sfd = -1,
	                    .chan = -1, .started_ns = now_ns() };
	_cleanup_close_ int lock_fd = -1;
	ssize_t n = readlink("/proc/self/exe", h.self, sizeof(h.self) - 1);
	sigset_t mask;
	int status = 1;

	if (n < 0)
		return log_errno(-errno, "node: readlink /proc/self/exe"), 1;
	h.self[n] = 0;
	for (int i = 0; i + 1 < nargs; i++)
		if (!strcmp(args[i], "--log"))
			h.log_path = args[i + 1];
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	h.sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (h.sfd < 0)
		return log_errno(-errno, "node: signalfd"), 1;
	/* the API over TCP without a token is no node's: refused before
	 * anything is bound */
	if (node_api_check(cfg) < 0 ||
	    node_api_socket_path(cfg->socket_path, h.api_path, sizeof(h.api_path)) < 0)
		goto out;
	h.listen_fd = listen_on(cfg->socket_path, &lock_fd);
	if (h.listen_fd < 0)
		goto out;
	/* under the node's lock; a node without its API still mounts: one
	 * warning each */
	h.api_unix_fd = node_api_listen_unix(h.api_path);
	h.api_tcp_fd = node_api_listen_tcp(cfg);
	/* a node without /metrics (its port taken) still serves: one warning */
	if (cfg->metrics_addr)
		h.metrics_fd = node_metrics_listen(cfg->metrics_addr);
	if (worker_start(&h) < 0)
		goto out;
	for (;;) {
		struct pollfd p[2] = { { .fd = h.sfd, .events = POLLIN },
		                       { .fd = h.chan, .events = POLLIN } };
		int timeout = -1, k;

		if (h.restart_pending) {
			uint64_t now = now_ns();

			if (now >= h.restart_at_ns) {
				h.restart_pending = false;
				(void)worker_start(&h);
				continue;
			}
			timeout = (int)((h.restart_at_ns - now) / 1000000) + 1;
		}
		if (h.upgrading && h.worker > 0) {
			uint64_t now = now_ns();

			if (now >= h.leave_deadline_ns) {
				log_msg(LOG_WARN, "node: worker %d did not leave; killing it", (int)h.worker);
				kill(h.worker, SIGKILL);
				h.leave_deadline_ns = UINT64_MAX;
			} else if (h.leave_deadline_ns != UINT64_MAX) {
				timeout = (int)((h.leave_deadline_ns - now) / 1000000) + 1;
			}
		}
		k = poll(p, h.chan >= 0 ? 2 : 1, timeout);
		if (k < 0 && errno != EINTR) {
			log_errno(-errno, "node: poll");
			break;
		}
		if (k > 0 && h.chan >= 0 && p[1].revents)
			on_message(&h);
		if (k > 0 && p[0].revents) {
			struct signalfd_siginfo si;

			while (read(h.sfd, &si, sizeof(si)) == sizeof(si)) {
				if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
					h.stopping = true;
					if (h.chan >= 0)
						(void)node_msg_send(h.chan, NODE_MSG_STOP, "{}", 2, NULL, 0);
				} else if (si.ssi_signo == SIGHUP && h.chan >= 0 && !h.upgrading) {
					tell_leave(&h);
				}
			}
			for (;;) {
				int st;
				pid_t pid = waitpid(-1, &st, WNOHANG);

				if (pid <= 0)
					break;
				if (pid != h.worker)
					continue;
				/* What it sent before it exited comes first: a stop
				 * after the DEL of each mount may still be queued
				 * behind them, and read after the exit it would be
				 * lost and the worker restarted. */
				drain_messages(&h);
				if (!h.ever_ready) {
					/* start-up failed: the worker said why on our stderr */
					status = 1;
					goto out;
				}
				on_worker_exit(&h, st);
			}
		}
		if (h.stopping && !h.worker) {
			status = 0;
			break;
		}
	}
out:
	abort_all(&h);
	if (h.worker > 0) {
		kill(h.worker, SIGKILL);
		while (waitpid(h.worker, NULL, 0) < 0 && errno == EINTR)
			;
	}
	if (h.listen_fd >= 0) {
		(void)unlink(cfg->socket_path);
		close(h.listen_fd);
	}
	if (h.metrics_fd >= 0)
		close(h.metrics_fd);
	if (h.api_unix_fd >= 0) {
		(void)unlink(h.api_path);
		close(h.api_unix_fd);
	}
	if (h.api_tcp_fd >= 0)
		close(h.api_tcp_fd);
	if (h.chan >= 0)
		close(h.chan);
	close(h.sfd);
	free(h.recs);
	free(h.next_binary);
	return status;
}
