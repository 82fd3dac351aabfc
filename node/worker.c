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
#include <poll.h>
#include <signal.h>
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
#include "node/metrics.h"
#include "node/node-internal.h"
#include "node/prefetch.h"
#include "node/stats.h"
#include "node/takeover.h"
#include "store/store.h"
#include "tools/tools.h"

#define FUSE_SUPER_MAGIC 0x65735546
#define WORKER_LOOP_ENTRIES 256
#define WORKER_CLIENTS_MAX 1024     /* connections open at once; more are refused */
#define WORKER_LOG_MAX (64u << 10)  /* bytes of a request's log lines sent back */

struct nstore {
	char *key;                /* the URL and every store setting, as text */
	struct node_config cfg;   /* the settings it was opened with */
	struct store_options so;  /* borrowed by the store */
	struct store *s;
};

struct ncache {
	char *dir;                /* "" once another directory took its path */
	struct cache *c;
	dev_t dev;                /* the directory opened, to tell it from one made anew */
	ino_t ino;
};

/* What a mount was asked for: the node's settings, then the request's. */
struct mopts {
	unsigned readahead;
	uint64_t fetch_timeout_ms;
	unsigned cpu_hold_ms, profile_window, profile_inflight;
	bool suid, dev, allow_other, passthrough, cpu_latency, profile;
	char *record;             /* --record-profile FILE, or NULL */
};

struct mount {
	char *mountpoint, *ref, *store_url, *cache_dir;
	char hex[HASH_HEX_SIZE];
	bool shared;              /* made for `run`: IMAGES/…, found by (store, index) */
	struct node_config cfg;   /* its settings: the node's, then the request's */
	bool have_cfg;
	struct mopts o;
	struct nstore *st;
	struct ncache *nc;
	struct index_map im;
	struct image_profile *prof;
	uint64_t *pack_offsets;
	struct fs *fs;
	int state_fd;             /* the connection's state file (-1: none) */
	dev_t dev;
};

struct worker;

/* A prefetch a client waits for: answered once it has finished. */
struct pjob {
	struct node_prefetch *pf;
	struct index_map im;
	uint64_t *pack_offsets;
	char hex[HASH_HEX_SIZE];
	char *ref, *cache_dir;
	struct node_config cfg;
	bool have_cfg, decode;
	struct buf log;           /* what was logged while it started */
};

struct client {
	struct client *next;
	struct worker *w;
	struct pjob *job;         /* a prefetch under way, answered when it ends */
	int fd;
	struct buf in;
	int64_t poll_id;
	bool polling;
	bool done;                /* a whole request (or EOF) read: answer it */
};

struct worker {
	const struct node_config *cfg;
	struct loop *l;
	int chan, listen_fd;
	struct nstore **stores;
	size_t nstores;
	struct ncache **caches;
	size_t ncaches;
	struct mount **mounts;
	size_t nmounts;
	struct client *clients;   /* reading a request */
	unsigned nclients;
	pid_t holder_pid;
	unsigned takeovers;
	uint64_t holder_uptime_ms, hello_ns;
	int64_t chan_poll, listen_poll;
	bool chan_polling, listen_polling;
	bool stop, leave, holder_gone;
	int log_saved, log_fd;    /* capturing a request's log lines */
	struct node_metrics *metrics;
};

/* ---- stores, caches --------------------------------------------------------- */

/* The settings a store is opened with: one store per distinct set. */
static const char *const store_keys[] = {
	"store", "http_transfers", "http_connect_timeout", "http_low_speed_time", "tls_ca_file",
	"tls_ca_dir", "s3_endpoint", "s3_region", "s3_profile", "s3_credentials_file",
	"s3_list_max_keys",
};

static struct nstore *node_store_get(struct worker *w, const struct node_config *rc)
{
	_cleanup_(buf_freep) struct buf key = BUF_INIT;
	struct nstore *ns, **v;
	char val[4096];
	int r = 0;

	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(store_keys); i++)
		if (node_config_get(rc, store_keys[i], val, sizeof(val)) == 0)
			r = buf_printf(&key, "%s\n", val);
	/* other credentials, another handle (the key stays in memory) */
	r = r ?: node_config_secrets_json(&key, rc);
	if (r < 0 || buf_append_zero(&key, 1) < 0) {
		log_errno(-ENOMEM, "store '%s'", rc->store_url);
		return NULL;
	}
	for (size_t i = 0; i < w->nstores; i++)
		if (!strcmp(w->stores[i]->key, (char *)key.data)) {
			store_set_fetch_timeout(w->stores[i]->s, rc->fetch_timeout_ms);
			return w->stores[i];
		}
	ns = calloc(1, sizeof(*ns));
	v = realloc(w->stores, (w->nstores + 1) * sizeof(*v));
	if (v)
		w->stores = v;
	if (!ns || !v || node_config_copy(rc, &ns->cfg) < 0) {
		free(ns);
		log_errno(-ENOMEM, "store '%s'", rc->store_url);
		return NULL;
	}
	node_config_store_options(&ns->cfg, &ns->so);
	r = store_open_with(ns->cfg.store_url, &ns->so, &ns->s);
	if (r == 0) {
		r = store_set_loop(ns->s, w->l);
		if (r < 0)
			log_errno(r, "store '%s': attaching it to the loop", ns->cfg.store_url);
	}
	if (r < 0) {
		store_free(ns->s);
		node_config_destroy(&ns->cfg);
		free(ns);
		return NULL;
	}
	store_set_fetch_timeout(ns->s, rc->fetch_timeout_ms);
	ns->key = (char *)TAKE_PTR(key.data);
	w->stores[w->nstores++] = ns;
	return ns;
}

/* One cache per directory, opened with the settings of the first request
 * that names it (the node's own first of all). */
static struct ncache *node_cache_get(struct worker *w, const struct node_config *rc)
{
	struct ncache *nc, **v;
	struct cache_params cp;

	for (size_t i = 0; i < w->ncaches; i++) {
		struct stat st;

		nc = w->caches[i];
		if (strcmp(nc->dir, rc->cache_dir))
			continue;
		if (stat(nc->dir, &st) == 0 && st.st_dev == nc->dev && st.st_ino == nc->ino)
			return nc;
		/* removed (and perhaps made again) since it was opened: a new cache
		 * there; the old one stays for the mounts that use it */
		nc->dir[0] = 0;
	}
	node_config_cache_params(rc, &cp);
	cp.dir = rc->cache_dir;
	nc = calloc(1, sizeof(*nc));
	v = realloc(w->caches, (w->ncaches + 1) * sizeof(*v));
	if (v)
		w->caches = v;
	if (!nc || !v || !(nc->dir = strdup(rc->cache_dir))) {
		free(nc);
		log_errno(-ENOMEM, "cache '%s'", rc->cache_dir);
		return NULL;
	}
	if (cache_open(&cp, w->l, &nc->c) < 0) {   /* says why */
		free(nc->dir);
		free(nc);
		return NULL;
	}
	{
		struct stat st;

		if (stat(nc->dir, &st) == 0) {
			nc->dev = st.st_dev;
			nc->ino = st.st_ino;
		}
	}
	w->caches[w->ncaches++] = nc;
	return nc;
}

/* ---- mounts ------------------------------------------------------------------ */

static void pid_file(const struct mount *m, char *out, size_t outlen)
{
	snprintf(out, outlen, "%s/mounts/%u:%u", m->cache_dir, major(m->dev), minor(m->dev));
}

/* CACHE/mounts/<dev>: the pid serving the mount, for tools that look for it. */
static void pid_file_write(const struct mount *m)
{
	char dir[PATH_MAX], path[PATH_MAX], line[32];

	if (!m->dev)
		return;
	snprintf(dir, sizeof(dir), "%s/mounts", m->cache_dir);
	pid_file(m, path, sizeof(path));
	snprintf(line, sizeof(line), "%d\n", (int)getpid());
	if (mkdir_p(dir, 0755) == 0)
		(void)write_file_atomic(path, line, strlen(line), 0644);
}

static void mount_free(struct mount *m)
{
	if (!m)
		return;
	if (m->state_fd >= 0)
		close(m->state_fd);
	index_map_free(&m->im);
	image_profile_free(m->prof);
	free(m->pack_offsets);
	free(m->o.record);
	free(m->mountpoint);
	free(m->ref);
	free(m->store_url);
	free(m->cache_dir);
	if (m->have_cfg)
		node_config_destroy(&m->cfg);
	free(m);
}

static int mount_record(const struct mount *m, struct buf *b)
{
	int r = buf_printf(b, "{\"mountpoint\":");

	r = r ?: node_json_str(b, m->mountpoint);
	r = r ?: buf_printf(b, ",\"ref\":");
	r = r ?: node_json_str(b, m->ref);
	r = r ?: buf_printf(b, ",\"index\":\"%s\",\"shared\":%s,\"settings\":", m->hex,
	                    m->shared ? "true" : "false");
	r = r ?: node_config_json(b, &m->cfg);
	r = r ?: buf_printf(b, ",\"secrets\":");
	r = r ?: node_config_secrets_json(b, &m->cfg);
	r = r ?: buf_printf(b, ",\"options\":{\"suid\":%s,\"dev\":%s,\"allow_other\":%s",
	                    m->o.suid ? "true" : "false", m->o.dev ? "true" : "false",
	                    m->o.allow_other ? "true" : "false");
	if (m->o.record) {
		r = r ?: buf_printf(b, ",\"record\":");
		r = r ?: node_json_str(b, m->o.record);
	}
	r = r ?: buf_printf(b, "}}");
	return r ?: buf_append_zero(b, 1);
}

/* c (initialised here): the node's settings, then the request's (its
 * settings, then the shorthands store, cache, s3_endpoint). */
static int request_config(struct worker *w, const struct json *req, struct node_config *c)
{
	static const char *const shorthands[] = { "store", "cache", "s3_endpoint" };
	int r = node_config_copy(w->cfg, c);

	if (r < 0)
		return log_errno(r, "request: settings");
	if (json_get(req, "settings"))
		r = node_config_apply_json(c, json_get(req, "settings"));
	if (r == 0 && json_get(req, "secrets"))
		r = node_config_apply_secrets(c, json_get(req, "secrets"));
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(shorthands); i++) {
		const char *v = json_get_cstr(req, shorthands[i]);

		if (json_get(req, shorthands[i]) && (!v || !*v))
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

/* m->cfg from the request (or record); m's store URL and cache from it. */
static int mount_config(struct worker *w, struct mount *m, const struct json *req)
{
	int r = request_config(w, req, &m->cfg);

	if (r < 0)
		return r;
	m->have_cfg = true;
	m->store_url = strdup(m->cfg.store_url);
	m->cache_dir = strdup(m->cfg.cache_dir);
	return m->store_url && m->cache_dir ? 0 : -ENOMEM;
}

/* Options: the mount's settings, then the request's (or record's) own. */
static int mopts_parse(const struct node_config *c, const struct json *j, struct mopts *o)
{
	static const struct { const char *key; size_t off; } flags[] = {
		{ "suid", offsetof(struct mopts, suid) },
		{ "dev", offsetof(struct mopts, dev) },
		{ "allow_other", offsetof(struct mopts, allow_other) },
	};

	*o = (struct mopts){
		.readahead = c->readahead,
		.fetch_timeout_ms = c->fetch_timeout_ms,
		.cpu_hold_ms = c->cpu_latency_hold_ms,
		.profile_window = c->profile_window,
		.profile_inflight = c->profile_inflight,
		.allow_other = true,
		.passthrough = c->passthrough,
		.cpu_latency = c->cpu_latency,
		.profile = c->profile,
	};
	if (j && !json_is(j, JSON_OBJECT))
		return log_error(-EINVAL, "request: options: not an object");
	for (size_t i = 0; i < json_len(j); i++) {
		const char *k = json_key_at(j, i, NULL);
		bool known = !strcmp(k, "record");

		for (size_t f = 0; f < ARRAY_SIZE(flags); f++)
			known |= !strcmp(k, flags[f].key);
		if (!known)
			return log_error(-EINVAL, "request: options: unknown option '%.64s'", k);
	}
	for (size_t i = 0; i < ARRAY_SIZE(flags); i++) {
		const struct json *f = json_get(j, flags[i].key);

		if (f && json_bool(f, (bool *)((char *)o + flags[i].off)) < 0)
			return log_error(-EINVAL, "request: options: %s: not a boolean", flags[i].key);
	}
	if (json_get(j, "record")) {
		const char *p = json_get_cstr(j, "record");

		if (!p || p[0] != '/')
			return log_error(-EINVAL, "request: options: record: want an absolute path");
		o->record = strdup(p);
		if (!o->record)
			return -ENOMEM;
	}
	return 0;
}

/* Everything but the FUSE connection: store, cache, index, profile, pack. */
static int mount_prepare(struct worker *w, struct mount *m)
{
	int r;

	m->st = node_store_get(w, &m->cfg);
	if (!m->st)
		return -EIO;
	m->nc = node_cache_get(w, &m->cfg);
	if (!m->nc)
		return -EIO;
	r = load_index(m->st->s, m->cache_dir, m->hex, &m->im);
	if (r < 0)
		return r;
	/* Kept now, so that a later worker adopting the mount maps it from
	 * the cache even when the store is gone. */
	r = index_map_keep(&m->im);
	if (r < 0)
		return r;
	if (m->o.profile && !m->o.record)
		(void)tools_profile_fetch(m->st->s, m->hex, &m->prof);
	r = tools_pack_offsets(m->st->s, m->im.img, m->hex, &m->pack_offsets);
	if (r < 0)
		return log_errno(r, "mount '%s': the pack of %s", m->mountpoint, m->hex);
	return 0;
}

static void mount_params(struct worker *w, struct mount *m, struct fs_params *fp)
{
	*fp = (struct fs_params){
		.mountpoint = m->mountpoint,
		.image = m->im.img,
		.index_hex = m->hex,
		.pack_offsets = m->pack_offsets,
		.store = m->st->s,
		.cache = m->nc->c,
		.loop = w->l,
		.allow_other = m->o.allow_other,
		.suid = m->o.suid,
		.dev = m->o.dev,
		.readahead_chunks = m->o.readahead,
		.no_passthrough = !m->o.passthrough,
		.no_cpu_latency = !m->o.cpu_latency,
		.cpu_hold_ms = m->o.cpu_hold_ms,
		.record = m->o.record != NULL,
		.profile = m->prof,
		.profile_window = m->o.profile_window,
		.profile_inflight = m->o.profile_inflight,
		.state_fd = m->state_fd,
	};
}

static int mounts_add(struct worker *w, struct mount *m)
{
	struct mount **v = realloc(w->mounts, (w->nmounts + 1) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	w->mounts = v;
	w->mounts[w->nmounts++] = m;
	return 0;
}

static void tell_holder_del(struct worker *w, const char *mountpoint)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;

	if (w->chan < 0 || w->holder_gone)
		return;
	if (buf_printf(&b, "{\"mountpoint\":") == 0 && node_json_str(&b, mountpoint) == 0 &&
	    buf_printf(&b, "}") == 0)
		(void)node_msg_send(w->chan, NODE_MSG_DEL, (char *)b.data, b.len, NULL, 0);
}

/* End mount i: unmount (unless the kernel already ended it), write its
 * recorded profile, forget it here and in the holder. */
static void mount_end(struct worker *w, size_t i)
{
	struct mount *m = w->mounts[i];
	char path[PATH_MAX];

	if (m->o.record && m->fs) {
		size_t n;
		const uint32_t *v = fs_trace(m->fs, &n);

		(void)tools_profile_write_trace(m->o.record, m->hex, v, n);
	}
	fs_free(m->fs);
	m->fs = NULL;
	if (m->dev) {
		pid_file(m, path, sizeof(path));
		(void)unlink(path);
	}
	tell_holder_del(w, m->mountpoint);
	w->mounts[i] = w->mounts[--w->nmounts];
	mount_free(m);
}

static struct mount *mount_at(struct worker *w, const char *mountpoint)
{
	for (size_t i = 0; i < w->nmounts; i++)
		if (!strcmp(w->mounts[i]->mountpoint, mountpoint))
			return w->mounts[i];
	return NULL;
}

/* 1: a lazyroot mount answers at dir; 0: none there; -ENOTCONN: a dead one. */
static int lazyroot_mounted(const char *dir)
{
	struct statfs sfs;
	struct stat st;
	dev_t dev;

	if (fs_find_mount(dir, &dev) < 0)
		return 0;
	if (stat(dir, &st) < 0 || statfs(dir, &sfs) < 0 || sfs.f_type != FUSE_SUPER_MAGIC ||
	    st.st_ino != IMAGE_ROOT_INO || st.st_dev != dev)
		return -ENOTCONN;
	return 1;
}

/* Mount m (prepared) anew and hand its connection to the holder. */
static int mount_new(struct worker *w, struct mount *m)
{
	_cleanup_(buf_freep) struct buf rec = BUF_INIT;
	struct fs_params fp;
	int fds[NODE_MSG_FDS] = { -1, -1 };
	int r;

	if (lazyroot_mounted(m->mountpoint) == -ENOTCONN) {
		log_msg(LOG_WARN, "mount '%s': its server is gone; mounting again", m->mountpoint);
		(void)node_abort_mount(m->mountpoint);
	}
	r = mount_prepare(w, m);
	if (r < 0)
		return r;
	m->state_fd = node_state_new();
	mount_params(w, m, &fp);
	r = fs_mount(&fp, &m->fs);
	if (r < 0)
		return r;
	(void)fs_find_mount(m->mountpoint, &m->dev);
	/* without a state file no worker could take the connection over: the
	 * holder keeps nothing, and the mount ends with this worker */
	fds[0] = m->state_fd >= 0 ? node_fuse_fd(m->fs) : -1;
	fds[1] = m->state_fd;
	r = mount_record(m, &rec);
	/* The holder has the connection before anyone hears of the mount. */
	if (r == 0)
		r = node_msg_send(w->chan, NODE_MSG_ADD, (char *)rec.data, rec.len - 1, fds,
		                  NODE_MSG_FDS);
	if (r == 0)
		r = mounts_add(w, m);
	if (r < 0) {
		fs_free(m->fs);
		m->fs = NULL;
		return log_errno(r, "mount '%s': handing it to the holder", m->mountpoint);
	}
	pid_file_write(m);
	return 0;
}

/* A record from the holder: take the connection over, or end it. */
static void mount_adopt(struct worker *w, const struct buf *b, int fds[NODE_MSG_FDS])
{
	struct json *j = NULL;
	struct mount *m = calloc(1, sizeof(*m));
	const char *mnt = NULL;
	int r = m ? json_parse(b->data, b->len, &j, NULL) : -ENOMEM;

	if (m)
		m->state_fd = -1;

	if (r == 0) {
		const char *s;

		mnt = json_get_cstr(j, "mountpoint");
		m->mountpoint = mnt ? strdup(mnt) : NULL;
		m->ref = (s = json_get_cstr(j, "ref")) ? strdup(s) : NULL;
		s = json_get_cstr(j, "index");
		(void)json_bool(json_get(j, "shared"), &m->shared);
		if (!m->mountpoint || !m->ref || !s || strlen(s) != 32)
			r = -EBADMSG;
		else
			memcpy(m->hex, s, sizeof(m->hex));
	}
	if (r == 0)
		r = mount_config(w, m, j);
	if (r == 0)
		r = mopts_parse(&m->cfg, json_get(j, "options"), &m->o);
	if (r == 0 && fds[0] < 0)
		r = -ENOTCONN;      /* nothing kept it: it ended with the last worker */
	if (r == 0)
		r = mount_prepare(w, m);
	if (r == 0) {
		struct fs_params fp;

		m->state_fd = TAKE_FD(fds[1]);
		mount_params(w, m, &fp);
		r = node_adopt(&fp, &fds[0], &m->fs);
	}
	if (r == 0)
		r = mounts_add(w, m);
	if (r == 0) {
		(void)fs_find_mount(m->mountpoint, &m->dev);
		pid_file_write(m);
		m = NULL;
	} else if (mnt) {
		if (r != -ENOTCONN)
			log_errno(r, "mount '%s': cannot take it over; ending it", mnt);
		fs_free(m->fs);
		(void)node_abort_mount(mnt);
		tell_holder_del(w, mnt);
	}
	for (int i = 0; i < NODE_MSG_FDS; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	json_free(j);
	mount_free(m);
}

/* ---- requests --------------------------------------------------------------- */

static const char *req_str(const struct json *req, const char *key, int *r)
{
	const struct json *v = json_get(req, key);
	const char *s = json_cstr(v);

	if (v && (!s || !*s)) {
		*r = log_error(-EINVAL, "request: %s: want a non-empty string", key);
		return NULL;
	}
	return s;
}

static int json_strn(struct buf *b, const char *s, size_t len)
{
	_cleanup_free_ char *c = strndup(s, len);

	return c ? node_json_str(b, c) : -ENOMEM;
}

static int reply_mount(const struct mount *m, struct buf *out)
{
	const char *cfg;
	size_t len;
	int r;

	image_config(m->im.img, &cfg, &len);
	r = buf_printf(out, ",\"mountpoint\":");
	r = r ?: node_json_str(out, m->mountpoint);
	r = r ?: buf_printf(out, ",\"index\":\"%s\",\"config\":", m->hex);
	r = r ?: json_strn(out, cfg ? cfg : "", cfg ? len : 0);
	return r;
}

static bool is_hex32(const char *s)
{
	return strlen(s) == 32 && strspn(s, "0123456789abcdef") == 32;
}

/* m, unless its mount is gone (unmounted behind the node's back: umount -l,
 * fusermount3 -u), in which case it is ended here and NULL returned. */
static struct mount *mount_alive(struct worker *w, struct mount *m)
{
	dev_t dev;

	if (!m || (m->fs && !fs_finished(m->fs) && fs_find_mount(m->mountpoint, &dev) == 0 &&
	           (!m->dev || dev == m->dev)))
		return m;
	for (size_t i = 0; i < w->nmounts; i++)
		if (w->mounts[i] == m) {
			mount_end(w, i);
			break;
		}
	return NULL;
}

/* The mount `run` made of index hex from the store c names, or NULL. */
static struct mount *shared_mount(struct worker *w, const char *hex, const struct node_config *c)
{
	for (size_t i = 0; i < w->nmounts; i++) {
		struct mount *o = w->mounts[i];

		if (o->shared && !strcmp(o->hex, hex) && !strcmp(o->store_url, c->store_url) &&
		    !strcmp(o->cfg.s3_endpoint ? o->cfg.s3_endpoint : "",
		            c->s3_endpoint ? c->s3_endpoint : ""))
			return mount_alive(w, o);
	}
	return NULL;
}

static int do_mount(struct worker *w, const struct json *req, struct buf *out)
{
	struct mount *m = calloc(1, sizeof(*m));
	const char *ref, *mnt, *images;
	int r = m ? 0 : -ENOMEM;

	if (!m)
		return r;
	m->state_fd = -1;

	ref = req_str(req, "ref", &r);
	mnt = req_str(req, "mountpoint", &r);
	images = req_str(req, "images", &r);
	if (r == 0 && !ref)
		r = log_error(-EINVAL, "request: mount: no ref");
	if (r == 0 && ((mnt && mnt[0] != '/') || (images && images[0] != '/')))
		r = log_error(-EINVAL, "request: mount: paths must be absolute");
	if (r == 0)
		r = mount_config(w, m, req);
	if (r == 0) {
		m->ref = strdup(ref);
		if (!m->ref)
			r = -ENOMEM;
	}
	if (r == 0)
		r = mopts_parse(&m->cfg, json_get(req, "options"), &m->o);
	if (r < 0)
		goto out;
	if (!images && json_get(req, "settings"))
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
	/* An index name this node keeps needs no store to resolve; a tag always
	 * asks the store, as tags move. */
	if (!mnt && is_hex32(ref)) {
		/* the common case of a run by index name: its mount is there */
		struct mount *o = shared_mount(w, ref, &m->cfg);

		if (o) {
			r = reply_mount(o, out);
			goto out;
		}
	}
	{
		struct index_map probe = { 0 };

		if (is_hex32(ref) && load_index(NULL, m->cache_dir, ref, &probe) == 0) {
			memcpy(m->hex, ref, sizeof(m->hex));
		} else {
			m->st = node_store_get(w, &m->cfg);
			r = m->st ? store_resolve(m->st->s, ref, m->hex) : -EIO;
		}
		index_map_free(&probe);
		if (r < 0)
			goto out;
	}
	if (!mnt) {
		const char *dir = images ? images : w->cfg->images_dir;
		char path[PATH_MAX];

		struct mount *o = shared_mount(w, m->hex, &m->cfg);

		m->shared = true;
		if (o) {
			r = reply_mount(o, out);
			goto out;
		}
		snprintf(path, sizeof(path), "%s/%s", dir, m->hex);
		if (mount_alive(w, mount_at(w, path))) {
			/* that index from another store: a mount of its own */
			uint64_t h = hash64(m->store_url, strlen(m->store_url)) ^
			             (m->cfg.s3_endpoint ? hash64(m->cfg.s3_endpoint,
			                                          strlen(m->cfg.s3_endpoint)) : 0);

			snprintf(path, sizeof(path), "%s/%s-%08x", dir, m->hex, (unsigned)(h >> 32));
			if (mount_at(w, path)) {
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
		if (lazyroot_mounted(path) == -ENOTCONN)
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
		struct mount *o = mount_alive(w, mount_at(w, m->mountpoint));

		/* the same image from the same store there already: done (a client
		 * asking again after its worker died mid-request finds it) */
		if (o && !strcmp(o->hex, m->hex) && !strcmp(o->store_url, m->store_url)) {
			r = reply_mount(o, out);
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
	r = mount_new(w, m);
	if (r == 0) {
		r = reply_mount(m, out);
		m = NULL;   /* the node's now */
	} else if (m->shared) {
		(void)rmdir(m->mountpoint);
	}
out:
	mount_free(m);
	return r;
}

static int do_umount(struct worker *w, const struct json *req, struct buf *out)
{
	int r = 0;
	const char *mnt = req_str(req, "mountpoint", &r);

	if (r < 0)
		return r;
	if (!mnt)
		return log_error(-EINVAL, "request: umount: no mountpoint");
	for (size_t i = 0; i < w->nmounts; i++)
		if (!strcmp(w->mounts[i]->mountpoint, mnt)) {
			mount_end(w, i);
			return 0;
		}
	(void)buf_printf(out, ",\"unknown\":true");
	return log_error(-ENOENT, "umount '%s': not a mount of this node", mnt);
}

static int do_status(struct worker *w, const struct json *req, struct buf *out)
{
	uint64_t uptime_ms = w->holder_uptime_ms + (now_ns() - w->hello_ns) / 1000000;
	int r;

	r = buf_printf(out, ",\"pid\":%d,\"holder_pid\":%d,\"uptime_s\":%.3f,\"takeovers\":%u,"
	               "\"socket\":", (int)getpid(), (int)w->holder_pid, (double)uptime_ms / 1e3,
	               w->takeovers);
	r = r ?: node_json_str(out, w->cfg->socket_path);
	r = r ?: buf_printf(out, ",\"cache\":");
	r = r ?: node_json_str(out, w->cfg->cache_dir);
	r = r ?: buf_printf(out, ",\"mounts\":[");
	for (size_t i = 0; r == 0 && i < w->nmounts; i++) {
		struct mount *m = w->mounts[i];
		struct node_fs_status st;

		node_fs_status(m->fs, &st);
		r = buf_printf(out, "%s{\"image\":", i ? "," : "");
		r = r ?: node_json_str(out, m->ref);
		r = r ?: buf_printf(out, ",\"index\":\"%s\",\"store\":", m->hex);
		r = r ?: node_json_str(out, m->store_url);
		r = r ?: buf_printf(out, ",\"mountpoint\":");
		r = r ?: node_json_str(out, m->mountpoint);
		r = r ?: buf_printf(out, ",\"cache\":");
		r = r ?: node_json_str(out, m->cache_dir);
		r = r ?: buf_printf(out, ",\"open_files\":%u,\"requests\":%llu,\"resends\":%llu,"
		                    "\"adopted\":%s}", st.open_files,
		                    (unsigned long long)st.requests, (unsigned long long)st.resends,
		                    st.adopted ? "true" : "false");
	}
	return r ?: buf_printf(out, "]");
}

static int do_stats(struct worker *w, const struct json *req, struct buf *out)
{
	int r = 0;
	const char *cache = req_str(req, "cache", &r);

	if (r < 0)
		return r;
	r = buf_printf(out, ",\"cache\":");
	return r ?: node_json_str(out, cache ? cache : w->cfg->cache_dir);
}

static void end_all(struct worker *w)
{
	while (w->nmounts)
		mount_end(w, w->nmounts - 1);
}

static int do_stop(struct worker *w, const struct json *req, struct buf *out)
{
	end_all(w);
	if (w->chan >= 0)
		(void)node_msg_send(w->chan, NODE_MSG_STOP, "{}", 2, NULL, 0);
	w->stop = true;
	return buf_printf(out, ",\"holder_pid\":%d", (int)w->holder_pid);
}

static int do_upgrade(struct worker *w, const struct json *req, struct buf *out)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	_cleanup_free_ char *abs = NULL;
	char self[PATH_MAX];
	int r = 0;
	const char *bin = req_str(req, "binary", &r);

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
	r = buf_printf(&b, "{\"binary\":");
	r = r ?: node_json_str(&b, abs);
	r = r ?: buf_printf(&b, "}");
	r = r ?: node_msg_send(w->chan, NODE_MSG_UPGRADE, (char *)b.data, b.len, NULL, 0);
	if (r < 0)
		return log_errno(r, "upgrade: telling the holder");
	return buf_printf(out, ",\"pid\":%d", (int)getpid());
}

static void pjob_free(struct pjob *j)
{
	if (!j)
		return;
	node_prefetch_free(j->pf);
	index_map_free(&j->im);
	free(j->pack_offsets);
	free(j->ref);
	free(j->cache_dir);
	if (j->have_cfg)
		node_config_destroy(&j->cfg);
	buf_free(&j->log);
	free(j);
}

/* Start a prefetch; the client gets its answer when it ends (1). */
static int do_prefetch(struct worker *w, const struct json *req, struct pjob **ret)
{
	struct pjob *j = calloc(1, sizeof(*j));
	const char *ref;
	const struct json *paths = json_get(req, "paths");
	_cleanup_free_ const char **pv = NULL;
	struct image_profile *prof = NULL;
	bool profiled = false, no_profile = false;
	struct nstore *st;
	struct ncache *nc;
	int64_t timeout = 0;
	int r = j ? 0 : -ENOMEM;

	if (!j)
		return r;
	ref = req_str(req, "ref", &r);
	if (r == 0 && !ref)
		r = log_error(-EINVAL, "request: prefetch: no ref");
	if (r == 0) {
		r = request_config(w, req, &j->cfg);
		j->have_cfg = r == 0;
		timeout = (int64_t)j->cfg.fetch_timeout_ms;
	}
	if (r == 0 && ((json_get(req, "decode") && json_bool(json_get(req, "decode"), &j->decode) < 0) ||
	               (json_get(req, "profiled") && json_bool(json_get(req, "profiled"), &profiled) < 0) ||
	               (json_get(req, "no_profile") && json_bool(json_get(req, "no_profile"), &no_profile) < 0) ||
	               (json_get(req, "fetch_timeout_ms") &&
	                (json_int(json_get(req, "fetch_timeout_ms"), &timeout) < 0 || timeout < 0))))
		r = log_error(-EINVAL, "request: prefetch: a bad option");
	if (r == 0 && paths && !json_is(paths, JSON_ARRAY))
		r = log_error(-EINVAL, "request: prefetch: paths: not an array");
	if (r == 0 && json_len(paths)) {
		pv = calloc(json_len(paths), sizeof(*pv));
		if (!pv)
			r = -ENOMEM;
		for (size_t i = 0; r == 0 && i < json_len(paths); i++)
			if (!(pv[i] = json_cstr(json_at(paths, i))))
				r = log_error(-EINVAL, "request: prefetch: paths: not strings");
	}
	if (r < 0)
		goto fail;
	j->ref = strdup(ref);
	j->cache_dir = strdup(j->cfg.cache_dir);
	j->cfg.fetch_timeout_ms = (uint64_t)timeout;
	st = node_store_get(w, &j->cfg);
	if (!j->ref || !j->cache_dir || !st) {
		r = -EIO;
		goto fail;
	}
	/* the index first: a cache disk without room for it says so */
	r = store_resolve(st->s, ref, j->hex);
	if (r == 0)
		r = load_index(st->s, j->cache_dir, j->hex, &j->im);
	if (r == 0)
		r = index_map_keep(&j->im);
	if (r < 0)
		goto fail;
	nc = node_cache_get(w, &j->cfg);
	if (!nc) {
		r = -EIO;
		goto fail;
	}
	r = tools_pack_offsets(st->s, j->im.img, j->hex, &j->pack_offsets);
	if (r < 0)
		goto fail;
	if (!no_profile && j->cfg.profile) {
		struct image_info info;
		const char *why = NULL;

		image_get_info(j->im.img, &info);
		(void)tools_profile_fetch(st->s, j->hex, &prof);
		if (prof && image_profile_check(prof, info.chunks, &why) < 0) {
			log_msg(LOG_WARN, "profile of index %s: %s; not used", j->hex, why);
			image_profile_free(prof);
			prof = NULL;
		}
		if (profiled && !prof) {
			r = log_error(-ENOENT, "prefetch '%s': --profiled, but the store has no usable "
			              "profile of index %s", ref, j->hex);
			goto fail;
		}
	}
	{
		struct node_prefetch_params pp = {
			.img = j->im.img,
			.hex = j->hex,
			.ref = ref,
			.cache = nc->c,
			.store = st->s,
			.pack_offsets = j->pack_offsets,
			.prof = prof,
			.paths = pv,
			.npaths = json_len(paths),
			.decode = j->decode,
			.profiled = profiled,
		};

		r = node_prefetch_start(&pp, &j->pf);
	}
	image_profile_free(prof);
	if (r < 0)
		goto fail;
	*ret = j;
	return 1;
fail:
	pjob_free(j);
	return r < 0 ? r : -EIO;
}

/* The answer to a finished prefetch. */
static int prefetch_reply(struct pjob *j, struct buf *reply)
{
	struct node_prefetch_result res;
	char err[512] = "";
	int r;

	node_prefetch_result(j->pf, &res);
	if (res.failed)
		snprintf(err, sizeof(err), "prefetch '%s': %llu of %llu chunks could not be fetched: %s",
		         j->ref, (unsigned long long)res.failed, (unsigned long long)res.chunks,
		         strerror(-(res.first_error ? res.first_error : -EIO)));
	else if (res.unkept)
		snprintf(err, sizeof(err), "prefetch '%s': %llu of %llu chunks could not be written "
		         "into cache '%s' (disk full or failing)", j->ref,
		         (unsigned long long)res.unkept, (unsigned long long)res.chunks, j->cache_dir);
	r = buf_printf(reply, "{\"ok\":%s,\"index\":\"%s\",\"mode\":\"%s\",\"chunks\":%llu,"
	               "\"bytes\":%llu,\"failed\":%llu,\"seconds\":%.3f", *err ? "false" : "true",
	               j->hex, j->decode ? "decoded" : "staged", (unsigned long long)res.chunks,
	               (unsigned long long)res.bytes, (unsigned long long)res.failed, res.seconds);
	if (*err) {
		r = r ?: buf_printf(reply, ",\"error\":");
		r = r ?: node_json_str(reply, err);
	}
	if (j->log.len > 1) {
		r = r ?: buf_printf(reply, ",\"log\":");
		r = r ?: node_json_str(reply, (char *)j->log.data);
	}
	return r ?: buf_printf(reply, "}\n");
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
	int (*fn)(struct worker *w, const struct json *req, struct buf *out);
} verbs[] = {
	{ "mount", do_mount },
	{ "umount", do_umount },
	{ "status", do_status },
	{ "stats", do_stats },
	{ "stop", do_stop },
	{ "upgrade", do_upgrade },
};

static void send_reply(struct client *c, const struct buf *reply)
{
	struct timeval tv = { .tv_sec = 2 };
	int fl = fcntl(c->fd, F_GETFL);

	(void)fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK);
	(void)setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	(void)write_full(c->fd, reply->data, reply->len);
}

/* Answer one request.  The reply is written with a send timeout: a client
 * that does not read gets cut off, the node goes on. */
static void handle(struct worker *w, struct client *c)
{
	_cleanup_(buf_freep) struct buf out = BUF_INIT, log = BUF_INIT, reply = BUF_INIT;
	struct json *req = NULL;
	const char *verb = NULL;
	int r;

	capture_begin(w);
	if (c->in.len > NODE_REQUEST_MAX) {
		r = log_error(-EMSGSIZE, "request: larger than %u bytes", NODE_REQUEST_MAX);
	} else {
		r = json_parse_logged(c->in.data, c->in.len, "request", &req);
		if (r == 0 && !json_is(req, JSON_OBJECT))
			r = log_error(-EINVAL, "request: not a JSON object");
		if (r == 0 && !(verb = json_get_cstr(req, "verb")))
			r = log_error(-EINVAL, "request: no verb");
	}
	if (r == 0 && strcmp(verb, "ping")) {
		size_t i;

		for (i = 0; i < ARRAY_SIZE(verbs); i++)
			if (!strcmp(verbs[i].verb, verb))
				break;
		if (i < ARRAY_SIZE(verbs))
			r = verbs[i].fn(w, req, &out);
		else if (!strcmp(verb, "prefetch"))
			r = do_prefetch(w, req, &c->job);
		else
			r = log_error(-EINVAL, "request: unknown verb '%.64s'", verb);
	}
	capture_end(w, &log);
	if (r == 1) {
		/* answered when the prefetch ends (serve_clients) */
		c->job->log = log;
		log = (struct buf)BUF_INIT;
		json_free(req);
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

		r = buf_printf(&reply, "{\"ok\":false,\"error\":");
		r = r ?: node_json_str(&reply, why);
	} else {
		r = buf_printf(&reply, "{\"ok\":true");
	}
	r = r ?: (out.len ? buf_append(&reply, out.data, out.len) : 0);
	if (log.len > 1) {
		r = r ?: buf_printf(&reply, ",\"log\":");
		r = r ?: node_json_str(&reply, (char *)log.data);
	}
	r = r ?: buf_printf(&reply, "}\n");
	if (r < 0) {
		reply.len = 0;
		(void)buf_printf(&reply, "{\"ok\":false,\"error\":\"out of memory\"}\n");
	}
	send_reply(c, &reply);
	json_free(req);
}

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
	pjob_free(c->job);
	free(c);
}

static void on_client(void *ud, int res)
{
	struct client *c = ud;

	c->polling = false;
	if (res < 0) {
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
	if (res < 0)
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
	if (res < 0)
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
		struct json *j = NULL;
		int64_t v;
		int r = node_msg_recv(w->chan, &type, &b, fds);

		if (r <= 0)
			return log_errno(r ? r : -EPIPE, "node: reading the holder");
		switch (type) {
		case NODE_MSG_HELLO:
			if (json_parse(b.data, b.len, &j, NULL) == 0) {
				if (json_int(json_get(j, "holder_pid"), &v) == 0)
					w->holder_pid = (pid_t)v;
				if (json_int(json_get(j, "takeovers"), &v) == 0)
					w->takeovers = (unsigned)v;
				if (json_int(json_get(j, "uptime_ms"), &v) == 0)
					w->holder_uptime_ms = (uint64_t)v;
			}
			w->hello_ns = now_ns();
			json_free(j);
			break;
		case NODE_MSG_RECORD:
			mount_adopt(w, &b, fds);
			break;
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

/* Requests read whole, answered here (not from a callback: see the top). */
static void serve_clients(struct worker *w)
{
	for (bool again = true; again;) {
		again = false;
		for (struct client *c = w->clients; c; c = c->next) {
			if (c->job) {
				_cleanup_(buf_freep) struct buf reply = BUF_INIT;

				if (!node_prefetch_finished(c->job->pf))
					continue;
				if (prefetch_reply(c->job, &reply) == 0)
					send_reply(c, &reply);
				client_free(w, c);
				again = true;
				break;
			}
			if (!c->done || c->polling)
				continue;
			if (c->in.len)
				handle(w, c);
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
			mount_end(w, i);
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

	fprintf(f, "# HELP lazyroot_node_takeovers_total Workers started to take the mounts over "
	        "(a crash, a kill, an upgrade).\n# TYPE lazyroot_node_takeovers_total counter\n"
	        "lazyroot_node_takeovers_total %u\n", w->takeovers);
	fprintf(f, "# HELP lazyroot_node_uptime_seconds Since the holder started.\n"
	        "# TYPE lazyroot_node_uptime_seconds gauge\nlazyroot_node_uptime_seconds %.3f\n",
	        (double)(w->holder_uptime_ms + (now_ns() - w->hello_ns) / 1000000) / 1e3);
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
	/* the node's own cache: per-image counters live in its slots */
	if (w->ncaches && cache_stats_map(w->caches[0]->dir, &st) == 0) {
		node_stats_prometheus(f, st);
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

int node_worker_main(const struct node_config *cfg, int chan, int listen_fd, const char *log_path)
{
	struct worker w = { .cfg = cfg, .chan = chan, .listen_fd = listen_fd, .log_fd = -1,
	                    .log_saved = -1 };
	int status = 1, r;

	signal(SIGPIPE, SIG_IGN);
	(void)fcntl(listen_fd, F_SETFL, fcntl(listen_fd, F_GETFL) | O_NONBLOCK);
	r = loop_new(WORKER_LOOP_ENTRIES, &w.l);
	if (r < 0) {
		log_errno(r, "node: creating the io_uring loop");
		return 1;
	}
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
	if (cfg->metrics_addr)
		(void)node_metrics_open(w.l, cfg->metrics_addr, metrics_body, &w, &w.metrics);
	status = 0;
	while (!w.stop && !w.leave && !w.holder_gone) {
		r = loop_run_once(w.l, true);
		if (r < 0 && r != -EINTR) {
			log_errno(r, "node: running the loop");
			status = 1;
			break;
		}
		reap_finished(&w);
		serve_clients(&w);
	}
	if (w.leave) {
		/* upgrade: the next worker takes every mount over */
		while (w.nmounts) {
			struct mount *m = w.mounts[--w.nmounts];

			node_leave(m->fs);
			m->fs = NULL;
			mount_free(m);
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

			(void)umount2(w.mounts[i]->mountpoint, MNT_DETACH | UMOUNT_NOFOLLOW);
			if (w.mounts[i]->dev) {
				pid_file(w.mounts[i], path, sizeof(path));
				(void)unlink(path);
			}
		}
		fflush(stderr);
		_exit(1);
	}
out:
	end_all(&w);
	/* our polls end (cancelled), and reads, fetches and writes in flight,
	 * before the caches go */
	node_metrics_close(w.metrics);
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
	for (size_t i = 0; i < w.nstores; i++) {
		store_free(w.stores[i]->s);
		node_config_destroy(&w.stores[i]->cfg);
		free(w.stores[i]->key);
		free(w.stores[i]);
	}
	free(w.caches);
	free(w.stores);
	free(w.mounts);
	loop_free(w.l);
	return status;
}
