/*
 * requests.c — the control socket's requests (mount, umount, status, stats,
 * stop, upgrade; prefetch is jobs.c's), each answered with one JSON line.
 * What the node logs while it handles a request goes to the client too (the
 * "log" member).
 */
#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "cache/cache.h"
#include "image/image.h"
#include "lib/json.h"
#include "lib/lib.h"
#include "node/node-internal.h"
#include "node/stats.h"
#include "node/takeover.h"
#include "sandbox/service.h"
#include "store/store.h"

#define WORKER_LOG_MAX (64u << 10)  /* bytes of a request's log lines sent back */

/* c (initialised here): the node's settings, then the request's (its
 * settings, then the shorthands store, cache, s3_endpoint). */
int node_request_config(struct worker *w, const json_t *req, struct node_config *c)
{
	static const char *const shorthands[] = { "store", "cache", "s3_endpoint" };
	int r = node_config_copy(w->cfg, c);

	if (r < 0)
		return log_errno(r, "request: settings");
	if (json_object_get(req, "settings"))
		r = node_config_apply_json(c, json_object_get(req, "settings"));
	if (r == 0 && json_object_get(req, "secrets"))
		r = node_config_apply_secrets(c, json_object_get(req, "secrets"));
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(shorthands); i++) {
		const char *v = json_get_cstr(req, shorthands[i]);

		if (json_object_get(req, shorthands[i]) && (!v || !*v))
			r = log_error(-EINVAL, "request: %s: want a non-empty string", shorthands[i]);
		else if (v)
			r = node_config_set(c, shorthands[i], v, shorthands[i]);
	}
	if (r == 0 && (c->cache_dir[0] != '/' ||
	               (!strncmp(c->store_url, "dir:", 4) && c->store_url[4] != '/')))
		r = log_error(-EINVAL, "request: the store and cache paths must be absolute");
	if (r < 0)
		node_config_destroy(c);
	return r;
}

/* ---- requests --------------------------------------------------------------- */

const char *node_req_str(const json_t *req, const char *key, int *r)
{
	const json_t *v = json_object_get(req, key);
	const char *s = json_cstr(v);

	if (v && (!s || !*s)) {
		*r = log_error(-EINVAL, "request: %s: want a non-empty string", key);
		return NULL;
	}
	return s;
}

/* Members that a verb adds to its reply (a failure is the reply's: -ENOMEM,
 * or -EINVAL for a path that is not UTF-8, logged). */
static int reply_add(json_t *out, json_t *members)
{
	return json_object_update_new(out, members) < 0 ? -EINVAL : 0;
}

static int reply_mount(const struct mount *m, json_t *out)
{
	const char *cfg;
	size_t len;

	image_config(m->im.img, &cfg, &len);
	return reply_add(out, json_pack("{s:s, s:s, s:o}", "mountpoint", m->mountpoint, "index",
	                                m->hex, "config", json_str(cfg ? cfg : "", cfg ? len : 0)));
}

static int do_mount(struct worker *w, const json_t *req, json_t *out)
{
	struct mount *m = calloc(1, sizeof(*m));
	const char *ref, *mnt, *images;
	int r = m ? 0 : -ENOMEM;

	if (!m)
		return r;
	m->state_fd = -1;

	ref = node_req_str(req, "ref", &r);
	mnt = node_req_str(req, "mountpoint", &r);
	images = node_req_str(req, "images", &r);
	if (r == 0 && !ref)
		r = log_error(-EINVAL, "request: mount: no ref");
	if (r == 0 && ((mnt && mnt[0] != '/') || (images && images[0] != '/')))
		r = log_error(-EINVAL, "request: mount: paths must be absolute");
	if (r == 0)
		r = node_mount_config(w, m, req);
	if (r == 0) {
		m->ref = strdup(ref);
		if (!m->ref)
			r = -ENOMEM;
	}
	if (r == 0)
		r = node_mopts_parse(&m->cfg, json_object_get(req, "options"), &m->o);
	if (r < 0)
		goto out;
	if (!images && json_object_get(req, "settings"))
		images = m->cfg.images_dir;
	/* Resolving a path inside a mount this worker serves would wait for
	 * this worker: refused before any path is looked at. */
	for (size_t i = 0; i < w->nmounts; i++) {
		const char *p = mnt ? mnt : images ? images : w->cfg->images_dir;
		size_t n = strlen(w->mounts[i]->mountpoint);

		if (!strncmp(p, w->mounts[i]->mountpoint, n) && p[n] == '/') {
			r = log_error(-EINVAL, "mount '%s': inside '%s', a mount of this node", p,
			              w->mounts[i]->mountpoint);
			goto out;
		}
	}
	/* An index name this node keeps needs no store to resolve; a tag asks
	 * the store, as tags move (a remote store's at most once per tag_ttl:
	 * node_store_resolve). */
	if (!mnt && store_is_index_name(ref)) {
		/* the common case of a run by index name: its mount is there */
		struct mount *o = node_shared_mount(w, ref, &m->cfg);

		if (o) {
			r = reply_mount(o, out);
			goto out;
		}
	}
	{
		struct node_index probe = { 0 };

		if (store_is_index_name(ref) && node_index_load(NULL, m->cache_dir, ref, &probe) == 0) {
			memcpy(m->hex, ref, sizeof(m->hex));
		} else {
			m->st = node_store_get(w, &m->cfg);
			r = m->st ? node_store_resolve(m->st, ref, m->cfg.tag_ttl_ms, m->hex) : -EIO;
			if (r == 0)
				r = node_trust_tag(w, m);
		}
		node_index_free(&probe);
		if (r < 0)
			goto out;
	}
	if (!mnt) {
		const char *dir = images ? images : w->cfg->images_dir;
		char path[PATH_MAX];

		struct mount *o = node_shared_mount(w, m->hex, &m->cfg);

		m->shared = true;
		if (o) {
			r = node_trust_index(w, m, o) ?: reply_mount(o, out);
			goto out;
		}
		snprintf(path, sizeof(path), "%s/%s", dir, m->hex);
		if (node_mount_alive(w, node_mount_at(w, path))) {
			/* that index from another store: a mount of its own */
			uint64_t h = hash64(m->store_url, strlen(m->store_url)) ^
			             (m->cfg.s3_endpoint ? hash64(m->cfg.s3_endpoint,
			                                          strlen(m->cfg.s3_endpoint)) : 0);

			snprintf(path, sizeof(path), "%s/%s-%08x", dir, m->hex, (unsigned)(h >> 32));
			if (node_mount_at(w, path)) {
				r = log_error(-EEXIST, "image %s: '%s' is another store's mount", m->hex,
				              path);
				goto out;
			}
		}
		r = mkdir_p(dir, 0755);
		if (r < 0) {
			log_errno(r, "image %s: creating '%s'", m->hex, dir);
			goto out;
		}
		if (node_lazyroot_mounted(path) == -ENOTCONN)
			(void)node_abort_mount(path);
		if (mkdir(path, 0755) < 0 && errno != EEXIST) {
			r = log_errno(-errno, "image %s: mkdir '%s'", m->hex, path);
			goto out;
		}
		m->mountpoint = strdup(path);
	} else {
		m->mountpoint = realpath(mnt, NULL);
		if (!m->mountpoint) {
			r = log_errno(-errno, "mount '%s'", mnt);
			goto out;
		}
	}
	if (!m->shared) {
		struct mount *o = node_mount_alive(w, node_mount_at(w, m->mountpoint));

		/* the same image from the same store there already: done (a client
		 * asking again after its worker died mid-request finds it) */
		if (o && !strcmp(o->hex, m->hex) && !strcmp(o->store_url, m->store_url)) {
			r = node_trust_index(w, m, o) ?: reply_mount(o, out);
			goto out;
		}
		if (o) {
			r = log_error(-EBUSY, "mount '%s': already mounted by this node", mnt);
			goto out;
		}
	}
	if (!m->mountpoint) {
		r = -ENOMEM;
		goto out;
	}
	r = node_mount_new(w, m);
	if (r == 0) {
		r = reply_mount(m, out);
		m = NULL;   /* the node's now */
	} else if (m->shared) {
		(void)rmdir(m->mountpoint);
	}
out:
	node_mount_free(m);
	return r;
}

static int do_umount(struct worker *w, const json_t *req, json_t *out)
{
	int r = 0;
	const char *mnt = node_req_str(req, "mountpoint", &r);

	if (r < 0)
		return r;
	if (!mnt)
		return log_error(-EINVAL, "request: umount: no mountpoint");
	for (size_t i = 0; i < w->nmounts; i++)
		if (!strcmp(w->mounts[i]->mountpoint, mnt)) {
			char top[PATH_MAX], id[SANDBOX_SERVICE_ID_MAX + 1];
			struct sandbox_node sn;

			/* a sandbox of the service outlives any command: pulling its
			 * root away would fail its every later exec (or, with fusectl,
			 * abort its reads), so the mount stays until it is destroyed */
			node_config_sandbox_node(w->cfg, &sn);
			if (sandbox_service_using(&sn, mnt, id, sizeof(id)) == 1)
				return log_error(-EBUSY, "umount '%s': sandbox '%s' runs on it; destroy "
				                 "it first (DELETE /v1/sandboxes/%s)", mnt, id, id);

			/* unmounting by path would take the other mount instead */
			if (node_mount_covered(w->mounts[i], top, sizeof(top)) == 1)
				return log_error(-EBUSY, "umount '%s': another mount is over it (%s); "
				                 "unmount that first", mnt, top);
			if (!node_mount_end(w, i))
				(void)json_object_set_new(out, "in_use", json_true());
			return 0;
		}
	(void)json_object_set_new(out, "unknown", json_true());
	return log_error(-ENOENT, "umount '%s': not a mount of this node", mnt);
}

/* The trust policy's counters (node/trust.c): mounts of signed tags
 * accepted, refusals by reason, and the seconds the checks took. */
static json_t *trust_json(const struct worker *w)
{
	json_t *refused = json_object();

	for (size_t i = 0; refused && i < NODE_TRUST_NREASONS; i++)
		if (json_object_set_new(refused, node_trust_reasons[i],
		                        json_u64(w->trust_refused[i])) < 0) {
			json_decref(refused);
			refused = NULL;
		}
	return json_pack("{s:o, s:o, s:o}", "verified", json_u64(w->trust_verified), "refused",
	                 refused, "check_seconds", json_fixed((double)w->trust_check_ns / 1e9, 6));
}

static int do_status(struct worker *w, const json_t *req, json_t *out)
{
	uint64_t uptime_ms = w->holder_uptime_ms + (now_ns() - w->hello_ns) / 1000000;
	json_t *mounts = json_array();

	for (size_t i = 0; mounts && i < w->nmounts; i++) {
		struct mount *m = w->mounts[i];
		struct node_fs_status st;

		node_fs_status(m->fs, &st);
		if (json_array_append_new(mounts, json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:o, s:o, s:b}",
		                          "image", m->ref, "index", m->hex, "store", m->store_url,
		                          "mountpoint", m->mountpoint, "cache", m->cache_dir,
		                          "open_files", (json_int_t)st.open_files,
		                          "requests", json_u64(st.requests),
		                          "resends", json_u64(st.resends),
		                          "adopted", st.adopted)) < 0) {
			json_decref(mounts);
			mounts = NULL;
		}
	}
	return reply_add(out, json_pack("{s:s, s:s*, s:i, s:i, s:o, s:I, s:s, s:s, s:o, s:o}",
	                                "version", lib_version(),
	                                "commit", *lib_commit() ? lib_commit() : NULL,
	                                "pid", (int)getpid(), "holder_pid", (int)w->holder_pid,
	                                "uptime_s", json_fixed((double)uptime_ms / 1e3, 3),
	                                "takeovers", (json_int_t)w->takeovers,
	                                "socket", w->cfg->socket_path, "cache", w->cfg->cache_dir,
	                                "mounts", mounts, "trust", trust_json(w)));
}

static int do_stats(struct worker *w, const json_t *req, json_t *out)
{
	int r = 0;
	const char *cache = node_req_str(req, "cache", &r);
	const struct cache_stats *st;
	struct node_stats_image *im = NULL;
	size_t n = 0;

	if (r < 0)
		return r;
	if (!cache)
		cache = w->cfg->cache_dir;
	r = cache_stats_map(cache, &st);
	if (r == -ENOENT)
		return log_error(r, "cache '%s': no stats file (no daemon has used it)", cache);
	if (r < 0)
		return log_errno(r, "cache '%s': reading stats", cache);
	r = node_mounts_stats(w, cache, &im, &n);
	r = r ?: reply_add(out, json_pack("{s:s, s:o}", "cache", cache, "stats",
	                                  node_stats_json(st, im, n)));
	node_stats_images_free(im, n);
	cache_stats_unmap(st);
	return r;
}

static int do_stop(struct worker *w, const json_t *req, json_t *out)
{
	node_mounts_end_all(w);
	if (w->chan >= 0)
		(void)node_msg_send(w->chan, NODE_MSG_STOP, "{}", 2, NULL, 0);
	w->stop = true;
	return reply_add(out, json_pack("{s:i}", "holder_pid", (int)w->holder_pid));
}

static int do_upgrade(struct worker *w, const json_t *req, json_t *out)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	_cleanup_free_ char *abs = NULL;
	char self[PATH_MAX];
	int r = 0;
	const char *bin = node_req_str(req, "binary", &r);

	if (r < 0)
		return r;
	if (!bin) {
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

		if (n < 0)
			return log_errno(-errno, "upgrade: readlink /proc/self/exe");
		self[n] = 0;
		bin = self;
	}
	abs = realpath(bin, NULL);
	if (!abs || access(abs, X_OK) < 0)
		return log_errno(-errno, "upgrade: binary '%s'", bin);
	r = json_pack_buf(&b, "{s:s}", "binary", abs);
	r = r ?: node_msg_send(w->chan, NODE_MSG_UPGRADE, (char *)b.data, b.len, NULL, 0);
	if (r < 0)
		return log_errno(r, "upgrade: telling the holder");
	return reply_add(out, json_pack("{s:i}", "pid", (int)getpid()));
}

static void capture_begin(struct worker *w)
{
	fflush(stderr);
	w->log_fd = memfd_create("lazyroot-request-log", MFD_CLOEXEC);
	w->log_saved = w->log_fd >= 0 ? fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3) : -1;
	if (w->log_saved >= 0)
		dup2(w->log_fd, STDERR_FILENO);
}

/* The lines logged since capture_begin(), also written to the node's log. */
static void capture_end(struct worker *w, struct buf *ret)
{
	off_t n;

	fflush(stderr);
	if (w->log_saved >= 0) {
		dup2(w->log_saved, STDERR_FILENO);
		close(w->log_saved);
	}
	if (w->log_fd >= 0) {
		n = lseek(w->log_fd, 0, SEEK_CUR);
		if (n > 0 && buf_reserve(ret, (size_t)MIN(n, (off_t)WORKER_LOG_MAX) + 1) == 0) {
			ssize_t k = pread(w->log_fd, ret->data, (size_t)MIN(n, (off_t)WORKER_LOG_MAX),
			                  0);

			if (k > 0) {
				ret->len = (size_t)k;
				(void)write_full(STDERR_FILENO, ret->data, ret->len);
			}
		}
		close(w->log_fd);
	}
	w->log_fd = w->log_saved = -1;
	(void)buf_append_zero(ret, 1);
}

static const struct {
	const char *verb;
	int (*fn)(struct worker *w, const json_t *req, json_t *out);
} verbs[] = {
	{ "mount", do_mount },
	{ "umount", do_umount },
	{ "status", do_status },
	{ "stats", do_stats },
	{ "stop", do_stop },
	{ "upgrade", do_upgrade },
};

void node_send_reply(struct client *c, const struct buf *reply)
{
	struct timeval tv = { .tv_sec = 2 };
	int fl = fcntl(c->fd, F_GETFL);

	(void)fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK);
	(void)setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	(void)write_full(c->fd, reply->data, reply->len);
}

/* Answer one request.  The reply is written with a send timeout: a client
 * that does not read gets cut off, the node goes on. */
void node_handle(struct worker *w, struct client *c)
{
	_cleanup_(buf_freep) struct buf log = BUF_INIT, reply = BUF_INIT;
	json_t *req = NULL, *out = json_object(), *head;
	const char *verb = NULL;
	int r;

	capture_begin(w);
	if (c->in.len > NODE_REQUEST_MAX) {
		r = log_error(-EMSGSIZE, "request: larger than %u bytes", NODE_REQUEST_MAX);
	} else {
		r = json_parse_logged(c->in.data, c->in.len, "request", &req);
		if (r == 0 && !json_is_object(req))
			r = log_error(-EINVAL, "request: not a JSON object");
		if (r == 0 && !(verb = json_get_cstr(req, "verb")))
			r = log_error(-EINVAL, "request: no verb");
	}
	if (r == 0 && strcmp(verb, "ping")) {
		size_t i;

		for (i = 0; i < ARRAY_SIZE(verbs); i++)
			if (!strcmp(verbs[i].verb, verb))
				break;
		if (!out)
			r = -ENOMEM;
		else if (i < ARRAY_SIZE(verbs))
			r = verbs[i].fn(w, req, out);
		else if (!strcmp(verb, "prefetch"))
			r = node_job_start(w, req, &c->job);
		else
			r = log_error(-EINVAL, "request: unknown verb '%.64s'", verb);
	}
	capture_end(w, &log);
	if (r == 1) {
		/* answered when the prefetch ends (serve_clients) */
		c->job->log = log;
		log = (struct buf)BUF_INIT;
		json_decref(req);
		json_decref(out);
		return;
	}
	if (r < 0) {
		/* the last line logged says why (without "lazyroot: " and its
		 * newline); else the errno */
		_cleanup_free_ char *copy = log.len > 1 ? strdup((char *)log.data) : NULL;
		char *end, *last = NULL;

		if (copy) {
			end = copy + strlen(copy);
			while (end > copy && end[-1] == '\n')
				*--end = 0;
			last = strrchr(copy, '\n');
			last = last ? last + 1 : copy;
			if (!strncmp(last, "lazyroot: ", 10))
				last += 10;
		}
		const char *why = copy ? last : strerror(-r);

		head = json_pack("{s:b, s:o, s:i}", "ok", false, "error", json_text(why, strlen(why)),
		                 "errno", -r);
	} else {
		head = json_pack("{s:b}", "ok", true);
	}
	/* ok and error first, then the verb's members, then the log */
	r = head && out && json_object_update(head, out) == 0 ? 0 : -ENOMEM;
	if (r == 0 && log.len > 1)
		r = json_object_set_new(head, "log", json_text((char *)log.data, log.len - 1));
	r = r ?: json_buf_add(&reply, json_incref(head));
	r = r ?: buf_append(&reply, "\n", 1);
	if (r < 0) {
		/* a constant, for when memory is too short to build one */
		reply.len = 0;
		(void)buf_printf(&reply, "{\"ok\":false,\"error\":\"cannot write the reply\"}\n");
	}
	node_send_reply(c, &reply);
	json_decref(head);
	json_decref(out);
	json_decref(req);
}
