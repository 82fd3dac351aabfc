/*
 * worker.c — the process that serves every image mount of the node from one
 * loop: one cache per cache directory (normally the node's one), each store
 * opened once per URL, one FUSE connection per mount, and the control socket.
 *
 * Start: the holder's HELLO, then a RECORD per mount it holds (with the
 * mount's /dev/fuse descriptor and state file); each is adopted, or ended
 * when it cannot be (then the holder drops it).  READY goes to the holder
 * once the worker serves.
 *
 * Requests: a client's line is read on the loop; the request is handled
 * from the top of the main loop, never from inside a callback, because
 * handling one runs the loop itself (a store fetch, an unmount waiting for
 * its reads) and must not start a second one meanwhile.  What the node logs
 * while it handles a request goes to the client too (the "log" member).
 *
 * A mount is identified by (store, index): a run naming another store than
 * a mount of the same index gets its own mount, IMAGES/<index>-<store hash>.
 *
 * Ends: `stop` unmounts every mount, tells the holder and exits; LEAVE from
 * the holder (upgrade) stops serving every mount without unmounting it and
 * exits; EOF from the holder (the holder died: nobody would keep the mounts
 * for a next worker) unmounts and aborts every mount, so readers get an
 * error instead of waiting, and exits.
 */
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/un.h>

#include "cache/cache.h"
#include "fs/fs.h"
#include "image/image.h"
#include "lib/json.h"
#include "lib/lib.h"
#include "lib/loop.h"
#include "node/api.h"
#include "node/metrics.h"
#include "node/node-internal.h"
#include "node/prefetch.h"
#include "node/stats.h"
#include "node/takeover.h"
#include "store/store.h"

#define WORKER_LOOP_ENTRIES 256
#define WORKER_CLIENTS_MAX 1024     /* connections open at once; more are refused */

/* ---- the socket ---------------------------------------------------------------- */

static void client_free(struct worker *w, struct client *c)
{
	for (struct client **p = &w->clients; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	w->nclients--;
	close(c->fd);
	buf_free(&c->in);
	node_job_free(c->job);
	free(c);
}

static void on_client(void *ud, int res)
{
	struct client *c = ud;

	c->polling = false;
	if (res < 0 || c->w->ending) {
		c->done = true;
		return;
	}
	for (;;) {
		ssize_t n;

		if (buf_reserve(&c->in, 4096) < 0) {
			c->done = true;
			return;
		}
		n = read(c->fd, c->in.data + c->in.len, 4096);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0) {
			c->done = true;   /* EOF: what came is the request (maybe none) */
			return;
		}
		c->in.len += (size_t)n;
		if (memchr(c->in.data + c->in.len - n, '\n', (size_t)n) ||
		    c->in.len > NODE_REQUEST_MAX) {
			c->done = true;
			return;
		}
	}
	c->poll_id = loop_poll_id(c->w->l, c->fd, POLLIN, on_client, c);
	if (c->poll_id >= 0)
		c->polling = true;
	else
		c->done = true;
}

static void arm_listen(struct worker *w);

static void on_listen(void *ud, int res)
{
	struct worker *w = ud;

	w->listen_polling = false;
	if (res < 0 || w->ending)
		return;   /* cancelled: the worker is ending */
	for (;;) {
		struct ucred cred;
		socklen_t len = sizeof(cred);
		struct client *c;
		int fd = accept4(w->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

		if (fd < 0)
			break;
		if (w->nclients >= WORKER_CLIENTS_MAX ||
		    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
		    (cred.uid != 0 && cred.uid != geteuid())) {
			static const char no[] = "{\"ok\":false,\"error\":\"permission denied\"}\n";

			(void)!write(fd, no, sizeof(no) - 1);
			close(fd);
			continue;
		}
		c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->fd = fd;
		c->w = w;
		c->next = w->clients;
		w->clients = c;
		w->nclients++;
		c->poll_id = loop_poll_id(w->l, fd, POLLIN, on_client, c);
		if (c->poll_id >= 0)
			c->polling = true;
		else
			c->done = true;
	}
	arm_listen(w);
}

static void arm_listen(struct worker *w)
{
	if (w->listen_polling)
		return;
	w->listen_poll = loop_poll_id(w->l, w->listen_fd, POLLIN, on_listen, w);
	w->listen_polling = w->listen_poll >= 0;
}

/* ---- the holder's channel ------------------------------------------------------- */

static void arm_chan(struct worker *w);

static void on_chan(void *ud, int res)
{
	struct worker *w = ud;
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	int fds[NODE_MSG_FDS];
	uint32_t type;
	int r;

	w->chan_polling = false;
	if (res < 0 || w->ending)
		return;
	r = node_msg_recv(w->chan, &type, &b, fds);
	for (int i = 0; i < NODE_MSG_FDS; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	if (r <= 0) {
		w->holder_gone = true;
		return;
	}
	if (type == NODE_MSG_LEAVE)
		w->leave = true;
	else if (type == NODE_MSG_STOP)
		w->stop = true;
	arm_chan(w);
}

static void arm_chan(struct worker *w)
{
	if (w->chan_polling || w->holder_gone)
		return;
	w->chan_poll = loop_poll_id(w->l, w->chan, POLLIN, on_chan, w);
	w->chan_polling = w->chan_poll >= 0;
}

/* HELLO, the records (adopted as they come), END. */
static int take_over(struct worker *w)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	int fds[NODE_MSG_FDS];
	uint32_t type;

	for (;;) {
		json_t *j = NULL;
		int64_t v;
		int r = node_msg_recv(w->chan, &type, &b, fds);

		if (r <= 0)
			return log_errno(r ? r : -EPIPE, "node: reading the holder");
		switch (type) {
		case NODE_MSG_HELLO:
			/* a holder that keeps the /metrics socket says so; an
			 * older one leaves the worker to bind it */
			w->metrics_bind = true;
			if (fds[0] >= 0) {
				if (w->metrics_fd >= 0)
					close(w->metrics_fd);
				w->metrics_fd = TAKE_FD(fds[0]);
			}
			w->api_bind = true;
			if (json_parse(b.data, b.len, &j, NULL) == 0) {
				if (json_object_get(j, "metrics_fd"))
					w->metrics_bind = false;
				if (json_object_get(j, "api_fds"))
					w->api_bind = false;
				if (json_int(json_object_get(j, "holder_pid"), &v) == 0)
					w->holder_pid = (pid_t)v;
				if (json_int(json_object_get(j, "takeovers"), &v) == 0)
					w->takeovers = (unsigned)v;
				if (json_int(json_object_get(j, "uptime_ms"), &v) == 0)
					w->holder_uptime_ms = (uint64_t)v;
			}
			w->hello_ns = now_ns();
			json_decref(j);
			break;
		case NODE_MSG_RECORD:
			node_mount_adopt(w, &b, fds);
			break;
		case NODE_MSG_LISTEN: {
			json_t *jl = NULL;
			int k = 0;

			if (json_parse(b.data, b.len, &jl, NULL) == 0) {
				/* the fds come in this order, those that are true */
				if (json_is_true(json_object_get(jl, "api_unix"))) {
					w->api_unix_fd = TAKE_FD(fds[k]);
					k++;
				}
				if (json_is_true(json_object_get(jl, "api_tcp")) && k < NODE_MSG_FDS)
					w->api_tcp_fd = TAKE_FD(fds[k]);
			}
			json_decref(jl);
			break;
		}
		case NODE_MSG_END:
			return 0;
		default:
			break;
		}
		for (int i = 0; i < NODE_MSG_FDS; i++)
			if (fds[i] >= 0)
				close(fds[i]);
	}
}

/* ---- the main loop ------------------------------------------------------------ */

/* A progress line, unless the client has not read the ones before (more
 * than PROGRESS_QUEUED_MAX bytes queued): skipped then, the next one says
 * more.  A line is never cut: what a full socket leaves of it is written
 * as a reply is (with a send timeout). */
#define PROGRESS_QUEUED_MAX 4096
static void send_progress(struct client *c, struct buf *line)
{
	int queued = 0;
	ssize_t n;

	if (ioctl(c->fd, SIOCOUTQ, &queued) < 0 || queued > PROGRESS_QUEUED_MAX)
		return;
	n = send(c->fd, line->data, line->len, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n > 0 && (size_t)n < line->len) {
		memmove(line->data, line->data + n, line->len - (size_t)n);
		line->len -= (size_t)n;
		node_send_reply(c, line);
	}
}

/* Requests read whole, answered here (not from a callback: see the top). */
static void serve_clients(struct worker *w)
{
	for (bool again = true; again;) {
		again = false;
		for (struct client *c = w->clients; c; c = c->next) {
			if (c->job) {
				_cleanup_(buf_freep) struct buf reply = BUF_INIT;

				if (!node_prefetch_finished(c->job->pf)) {
					if (node_job_progress(c->job, &reply) == 1)
						send_progress(c, &reply);
					continue;
				}
				if (node_job_reply(c->job, &reply) == 0)
					node_send_reply(c, &reply);
				client_free(w, c);
				again = true;
				break;
			}
			if (!c->done || c->polling)
				continue;
			if (c->in.len)
				node_handle(w, c);
			if (c->job)
				continue;   /* a prefetch: answered when it ends */
			client_free(w, c);
			again = true;   /* handling ran the loop: the list may have changed */
			break;
		}
	}
}

static void reap_finished(struct worker *w)
{
	for (size_t i = 0; i < w->nmounts;)
		if (w->mounts[i]->fs && fs_finished(w->mounts[i]->fs))
			node_mount_end(w, i);
		else
			i++;
}

/* ---- metrics ---------------------------------------------------------------- */

static void prom_label(FILE *f, const char *s)
{
	for (; *s; s++)
		if (*s == '\\' || *s == '"')
			fprintf(f, "\\%c", *s);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
}

static void metrics_body(void *ud, FILE *f)
{
	static const struct {
		const char *name, *type, *help;
	} per_mount[] = {
		{ "requests_total", "counter", "FUSE requests this worker served for the mount." },
		{ "resends_total", "counter", "Requests the kernel resent to this worker (takeover)." },
		{ "open_files", "gauge", "Opens the kernel holds on the mount." },
	};
	struct worker *w = ud;
	const struct cache_stats *st;

	/* the worker's own: after an upgrade, the binary that serves */
	fprintf(f, "# HELP lazyroot_build_info The release and commit of the worker serving.\n"
	        "# TYPE lazyroot_build_info gauge\nlazyroot_build_info{version=\"");
	prom_label(f, lib_version());
	fputs("\",commit=\"", f);
	prom_label(f, lib_commit());
	fputs("\"} 1\n", f);
	fprintf(f, "# HELP lazyroot_node_takeovers_total Workers started to take the mounts over "
	        "(a crash, a kill, an upgrade).\n# TYPE lazyroot_node_takeovers_total counter\n"
	        "lazyroot_node_takeovers_total %u\n", w->takeovers);
	fprintf(f, "# HELP lazyroot_node_uptime_seconds Since the holder started.\n"
	        "# TYPE lazyroot_node_uptime_seconds gauge\nlazyroot_node_uptime_seconds %.3f\n",
	        (double)(w->holder_uptime_ms + (now_ns() - w->hello_ns) / 1000000) / 1e3);
	fprintf(f, "# HELP lazyroot_node_trust_verified_total Mounts of signed tags whose "
	        "signature and index the trust policy accepted.\n"
	        "# TYPE lazyroot_node_trust_verified_total counter\n"
	        "lazyroot_node_trust_verified_total %llu\n", (unsigned long long)w->trust_verified);
	fprintf(f, "# HELP lazyroot_node_trust_refusals_total Mounts of tags the trust policy "
	        "refused, by reason.\n# TYPE lazyroot_node_trust_refusals_total counter\n");
	for (size_t i = 0; i < NODE_TRUST_NREASONS; i++)
		fprintf(f, "lazyroot_node_trust_refusals_total{reason=\"%s\"} %llu\n",
		        node_trust_reasons[i], (unsigned long long)w->trust_refused[i]);
	fprintf(f, "# HELP lazyroot_node_mounts Image mounts the node serves.\n"
	        "# TYPE lazyroot_node_mounts gauge\nlazyroot_node_mounts %zu\n", w->nmounts);
	for (size_t k = 0; k < ARRAY_SIZE(per_mount); k++) {
		fprintf(f, "# HELP lazyroot_node_mount_%s %s\n# TYPE lazyroot_node_mount_%s %s\n",
		        per_mount[k].name, per_mount[k].help, per_mount[k].name, per_mount[k].type);
		for (size_t i = 0; i < w->nmounts; i++) {
			struct node_fs_status fst;
			uint64_t v;

			node_fs_status(w->mounts[i]->fs, &fst);
			v = k == 0 ? fst.requests : k == 1 ? fst.resends : fst.open_files;
			fprintf(f, "lazyroot_node_mount_%s{index=\"%s\",mountpoint=\"", per_mount[k].name,
			        w->mounts[i]->hex);
			prom_label(f, w->mounts[i]->mountpoint);
			fprintf(f, "\"} %llu\n", (unsigned long long)v);
		}
	}
	/* the node's own cache's counters; per image, every mount's own (its
	 * fs keeps them: the cache's slots are few) */
	if (cache_stats_map(w->cfg->cache_dir, &st) == 0) {
		struct node_stats_image *im = NULL;
		size_t n = 0;

		(void)node_mounts_stats(w, NULL, &im, &n);
		node_stats_prometheus(f, st, im, n);
		node_stats_images_free(im, n);
		cache_stats_unmap(st);
	}
}

/* Started by a client, our stderr was its pipe until the holder said we
 * serve: the log from now on. */
static void redirect_log(const char *path)
{
	int fd;

	if (!path)
		return;
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd >= 0) {
		dup2(fd, STDERR_FILENO);
		close(fd);
	}
}

/* Every miss allocates the chunk as stored (up to 1 MiB) and frees it once
 * decoded (the decoded bytes go into the cache's own reused buffers,
 * cache/pool.c); making a whole-file object takes two 4 MiB buffers.
 * glibc's defaults give such blocks back: a freed
 * mapping raises the mmap threshold to its size, but the heap's top is
 * trimmed past twice that, so a burst of misses kept taking fresh pages.  A
 * cold gcc start cost the worker about 1,800 page faults, each 10 µs on a
 * paravirtualized VM, a quarter of its CPU (docs/perf-log.md, "Fresh pages
 * at every miss").  So blocks under WORKER_MMAP_MIN come from the heap, and
 * an arena trims its top only past WORKER_HEAP_TRIM free bytes, down to
 * WORKER_HEAP_KEPT (glibc's default keeps 128 KiB): a bound on what an idle
 * node holds beyond what it uses. */
#define WORKER_MMAP_MIN (8 << 20)
#define WORKER_HEAP_KEPT (16 << 20)
#define WORKER_HEAP_TRIM (32 << 20)

static void keep_chunk_buffers(void)
{
	(void)mallopt(M_MMAP_THRESHOLD, WORKER_MMAP_MIN);
	(void)mallopt(M_TOP_PAD, WORKER_HEAP_KEPT);
	(void)mallopt(M_TRIM_THRESHOLD, WORKER_HEAP_TRIM);
}

int node_worker_main(const struct node_config *cfg, int chan, int listen_fd, const char *log_path)
{
	struct worker w = { .cfg = cfg, .chan = chan, .listen_fd = listen_fd, .log_fd = -1,
	                    .log_saved = -1, .metrics_fd = -1, .api_unix_fd = -1,
	                    .api_tcp_fd = -1 };
	int status = 1, r;

	signal(SIGPIPE, SIG_IGN);
	keep_chunk_buffers();
	(void)fcntl(listen_fd, F_SETFL, fcntl(listen_fd, F_GETFL) | O_NONBLOCK);
	r = loop_new(WORKER_LOOP_ENTRIES, &w.l);
	if (r < 0) {
		log_errno(r, "node: creating the io_uring loop");
		return 1;
	}
	r = store_renewer_new(&w.renewer);
	if (r < 0)
		log_errno(r, "node: starting the lease renewer (mounts hold no reader lease)");
	/* The node's own cache first: a node that cannot open it does not start. */
	if (!node_cache_get(&w, cfg))
		goto out;
	if (take_over(&w) < 0)
		goto out;
	arm_chan(&w);
	arm_listen(&w);
	if (node_msg_send(chan, NODE_MSG_READY, "{}", 2, NULL, 0) < 0)
		goto out;
	redirect_log(log_path);
	/* a node without /metrics (its port taken) still serves: one warning */
	if (w.metrics_fd < 0 && w.metrics_bind && cfg->metrics_addr)
		w.metrics_fd = node_metrics_listen(cfg->metrics_addr);
	if (w.metrics_fd >= 0)
		(void)node_metrics_open(w.l, &w.metrics_fd, metrics_body, &w, &w.metrics);
	if (w.metrics_fd >= 0) {
		close(w.metrics_fd);
		w.metrics_fd = -1;
	}
	/* the API on threads of its own: none of its requests waits on this
	 * loop or holds it up */
	if (w.api_bind) {
		char path[108];

		if (node_api_socket_path(cfg->socket_path, path, sizeof(path)) == 0)
			w.api_unix_fd = node_api_listen_unix(path);
		w.api_tcp_fd = node_api_listen_tcp(cfg);
	}
	if (w.api_unix_fd >= 0 || w.api_tcp_fd >= 0)
		(void)node_api_open(cfg, &w.api_unix_fd, &w.api_tcp_fd, &w.api);
	if (w.api_unix_fd >= 0)
		close(w.api_unix_fd);
	if (w.api_tcp_fd >= 0)
		close(w.api_tcp_fd);
	w.api_unix_fd = w.api_tcp_fd = -1;
	status = 0;
	while (!w.stop && !w.leave && !w.holder_gone) {
		r = loop_run_once(w.l, true);
		if (r < 0 && r != -EINTR) {
			log_errno(r, "node: running the loop");
			status = 1;
			break;
		}
		reap_finished(&w);
		node_mounts_reap_gone(&w);
		node_caches_prune(&w);
		node_stores_prune(&w);
		serve_clients(&w);
	}
	if (w.leave) {
		/* upgrade: the next worker takes every mount over */
		node_mounts_drop_gone(&w);
		while (w.nmounts) {
			struct mount *m = w.mounts[--w.nmounts];

			node_leave(m->fs);
			m->fs = NULL;
			/* the next worker writes a lease of its own on taking the
			 * mount over: this one lapses, never leaving a gap */
			store_lease_abandon(m->lease);
			m->lease = NULL;
			node_mount_free(m);
		}
	} else if (w.holder_gone) {
		/* Nobody keeps the connections for a next worker: end them now.
		 * fs_free() would serve a detached mount until its last user lets
		 * go when fusectl cannot abort it; exiting closes the last
		 * descriptor of each connection, which the kernel aborts (readers
		 * get ENOTCONN, nothing waits). */
		log_msg(LOG_WARN, "node: the holder is gone; ending every mount");
		for (size_t i = 0; i < w.nmounts; i++) {
			char path[PATH_MAX];

			/* never by path when another mount is over it */
			if (node_mount_covered(w.mounts[i], NULL, 0) != 1)
				(void)umount2(w.mounts[i]->mountpoint, MNT_DETACH | UMOUNT_NOFOLLOW);
			if (w.mounts[i]->dev) {
				node_mount_pid_file(w.mounts[i], path, sizeof(path));
				(void)unlink(path);
			}
		}
		fflush(stderr);
		_exit(1);
	}
out:
	w.ending = true;
	node_mounts_end_all(&w);
	/* the mounts' leases: released ones deleted, handed-over ones left to
	 * lapse; before the stores, whose options their handles borrow */
	store_renewer_free(w.renewer);
	w.renewer = NULL;
	/* our polls end (cancelled), and reads, fetches and writes in flight,
	 * before the caches go */
	node_metrics_close(w.metrics);
	node_api_close(w.api);
	w.api = NULL;
	if (w.listen_polling)
		(void)loop_cancel_poll(w.l, w.listen_poll);
	if (w.chan_polling)
		(void)loop_cancel_poll(w.l, w.chan_poll);
	for (struct client *c = w.clients; c; c = c->next) {
		if (c->polling)
			(void)loop_cancel_poll(w.l, c->poll_id);
		if (c->job)
			node_prefetch_stop(c->job->pf);
	}
	while (loop_pending(w.l) && loop_run_once(w.l, true) >= 0)
		;
	while (w.clients)
		client_free(&w, w.clients);
	for (size_t i = 0; i < w.ncaches; i++) {
		cache_free(w.caches[i]->c);
		free(w.caches[i]->dir);
		free(w.caches[i]);
	}
	for (size_t i = 0; i < w.nstores; i++)
		node_store_free(w.stores[i]);
	if (w.metrics_fd >= 0)
		close(w.metrics_fd);
	if (w.api_unix_fd >= 0)
		close(w.api_unix_fd);
	if (w.api_tcp_fd >= 0)
		close(w.api_tcp_fd);
	free(w.caches);
	free(w.stores);
	free(w.mounts);
	loop_free(w.l);
	return status;
}
