/*
 * mounts.c — the worker's image mounts: made anew (mount_new: the FUSE
 * connection handed to the holder before any client hears of it), taken over
 * from a record the holder kept (mount_adopt), ended (unmounted, forgotten
 * here and in the holder).  A mount is identified by (store, index).
 */
#include <fcntl.h>
#include <pthread.h>
#include <limits.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>

#include "fs/fs.h"
#include "image/image.h"
#include "lib/json.h"
#include "lib/loop.h"
#include "lib/lib.h"
#include "node/node-internal.h"
#include "node/stats.h"
#include "node/takeover.h"
#include "store/store.h"

#define FUSE_SUPER_MAGIC 0x65735546

/* ---- mounts ------------------------------------------------------------------ */

void node_mount_pid_file(const struct mount *m, char *out, size_t outlen)
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
	node_mount_pid_file(m, path, sizeof(path));
	snprintf(line, sizeof(line), "%d\n", (int)getpid());
	if (mkdir_p(dir, 0755) == 0)
		(void)write_file_atomic(path, line, strlen(line), 0644);
}

/* Keeping a fetched index, or a `dir:` store's file, in the cache copies and
 * fsyncs the whole of it: about 0.3 s for the ~100 MB index of a million
 * files (docs/perf-log.md, "bench/read on a slower VM").  On the loop it
 * would hold back this mount's reply and every other mount's requests, so a
 * thread of the mount's own does it once the mount serves.  Until it is done
 * a worker that adopts the mount loads the index from the store again.
 * node_index_keep() swaps the mapping for the kept copy in place (MAP_FIXED,
 * the same bytes), under readers on the loop. */
static void *keeper_main(void *arg)
{
	struct mount *m = arg;

	(void)node_index_keep(&m->im);     /* logs its errors; the mount serves on */
	return NULL;
}

static void keep_index(struct mount *m)
{
	if (!node_index_unkept(&m->im))
		return;
	if (pthread_create(&m->keeper, NULL, keeper_main, m) == 0)
		m->keeping = true;
	else
		(void)node_index_keep(&m->im);
}

void node_mount_free(struct mount *m)
{
	if (!m)
		return;
	if (m->keeping)
		pthread_join(m->keeper, NULL);
	/* the mount is gone: so is its claim on the image (store/GC.md) */
	store_lease_release(m->lease);
	if (m->state_fd >= 0)
		close(m->state_fd);
	node_index_free(&m->im);
	image_profile_free(m->prof);
	free(m->pack_offsets);
	free(m->o.record);
	free(m->mountpoint);
	free(m->ref);
	free(m->store_url);
	free(m->cache_dir);
	free(m->holder_key);
	if (m->have_cfg)
		node_config_destroy(&m->cfg);
	free(m);
}

static int mount_record(const struct mount *m, struct buf *b)
{
	json_t *opts = json_pack("{s:b, s:b, s:b}", "suid", m->o.suid, "dev", m->o.dev,
	                         "allow_other", m->o.allow_other);

	if (opts && m->o.record &&
	    json_object_set_new(opts, "record", json_str(m->o.record, strlen(m->o.record))) < 0) {
		json_decref(opts);
		opts = NULL;
	}
	return json_pack_buf(b, "{s:s, s:s, s:s, s:b, s:o, s:o, s:o}", "mountpoint", m->mountpoint,
	                     "ref", m->ref, "index", m->hex, "shared", m->shared,
	                     "settings", node_config_json(&m->cfg),
	                     "secrets", node_config_secrets_json(&m->cfg), "options", opts) ?:
	       buf_append_zero(b, 1);
}

/* m->cfg from the request (or record); m's store URL and cache from it. */
int node_mount_config(struct worker *w, struct mount *m, const json_t *req)
{
	int r = node_request_config(w, req, &m->cfg);

	if (r < 0)
		return r;
	m->have_cfg = true;
	m->store_url = strdup(m->cfg.store_url);
	m->cache_dir = strdup(m->cfg.cache_dir);
	return m->store_url && m->cache_dir ? 0 : -ENOMEM;
}

/* Options: the mount's settings, then the request's (or record's) own. */
int node_mopts_parse(const struct node_config *c, const json_t *j, struct mopts *o)
{
	static const struct { const char *key; size_t off; } flags[] = {
		{ "suid", offsetof(struct mopts, suid) },
		{ "dev", offsetof(struct mopts, dev) },
		{ "allow_other", offsetof(struct mopts, allow_other) },
	};
	const char *k;
	json_t *v;

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
	if (j && !json_is_object(j))
		return log_error(-EINVAL, "request: options: not an object");
	json_object_foreach ((json_t *)j, k, v) {
		(void)v;
		bool known = !strcmp(k, "record");

		for (size_t f = 0; f < ARRAY_SIZE(flags); f++)
			known |= !strcmp(k, flags[f].key);
		if (!known)
			return log_error(-EINVAL, "request: options: unknown option '%.64s'", k);
	}
	for (size_t i = 0; i < ARRAY_SIZE(flags); i++) {
		const json_t *f = json_object_get(j, flags[i].key);

		if (f && json_bool(f, (bool *)((char *)o + flags[i].off)) < 0)
			return log_error(-EINVAL, "request: options: %s: not a boolean", flags[i].key);
	}
	if (json_object_get(j, "record")) {
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
	/* before the index is read: a collection that lists the leases after
	 * this one is written keeps what the index reaches (store/GC.md) */
	if (m->cfg.lease_ttl && !m->lease &&
	    (!w->renewer ||
	     store_lease_take_read(w->renewer, m->st->s, m->cfg.lease_ttl, m->hex, &m->lease) < 0))
		log_msg(LOG_WARN, "mount '%s': no reader lease for image %s: a collection may "
		        "take it once no tag names it", m->mountpoint, m->hex);
	m->nc = node_cache_get(w, &m->cfg);
	if (!m->nc)
		return -EIO;
	r = node_index_load(m->st->s, m->cache_dir, m->hex, &m->im);
	if (r < 0)
		return r;
	/* before anything reads the index: it must be the one the tag signed */
	r = node_trust_index(w, m, m);
	if (r < 0)
		return r;
	if (m->o.profile && !m->o.record)
		(void)node_profile_fetch(m->st->s, m->hex, &m->prof);
	r = node_pack_offsets(m->st->s, m->im.img, m->hex, &m->pack_offsets);
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

/* Append m to the array *v of *n mounts. */
static int mount_push(struct mount ***v, size_t *n, struct mount *m)
{
	struct mount **nv = realloc(*v, (*n + 1) * sizeof(*nv));

	if (!nv)
		return -ENOMEM;
	*v = nv;
	nv[(*n)++] = m;
	return 0;
}

static int mounts_add(struct worker *w, struct mount *m)
{
	return mount_push(&w->mounts, &w->nmounts, m);
}

static void tell_holder_del(struct worker *w, const char *mountpoint)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;

	if (w->chan < 0 || w->holder_gone)
		return;
	if (json_pack_buf(&b, "{s:s}", "mountpoint", mountpoint) == 0)
		(void)node_msg_send(w->chan, NODE_MSG_DEL, (char *)b.data, b.len, NULL, 0);
}

/* m was just unmounted: have the holder keep its record under a key of its
 * own (m->holder_key), so that the connection outlives this worker while
 * the detached mount is in use and a new mount may take the mountpoint.
 * Without a key, the record stays under the mountpoint. */
static void tell_holder_detach(struct worker *w, struct mount *m)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	char key[PATH_MAX + 64];

	if (w->chan < 0 || w->holder_gone)
		return;
	snprintf(key, sizeof(key), "%s (detached %u:%u)", m->mountpoint, major(m->dev),
	         minor(m->dev));
	if (json_pack_buf(&b, "{s:s, s:s}", "mountpoint", m->mountpoint, "key", key) == 0 &&
	    node_msg_send(w->chan, NODE_MSG_DETACH, (char *)b.data, b.len, NULL, 0) == 0)
		m->holder_key = strdup(key);
}

/* How long ending a mount waits for its connection to end before it answers
 * and leaves a mount still in use to end on its own: one nobody uses ends in
 * a few turns of the loop.  Waiting longer would hold every other request of
 * the node (the loop runs nested here, serving the mounts, not the clients).
 * Work of a connection that has ended (reads, prefetches in flight) is always
 * waited for: umount returns once the mount's work is done. */
#define MOUNT_END_WAIT_MS 250

struct end_wait {
	bool fired, abandoned;
};

static void end_wait_cb(void *ud, int res)
{
	struct end_wait *e = ud;

	if (e->abandoned)
		free(e);
	else
		e->fired = true;
}

/* Run the loop until f is done (fs_unmount_done), or until ms have passed
 * while its connection is still alive (a mount in use): whether it is done. */
static bool wait_unmounted(struct worker *w, struct fs *f, unsigned ms)
{
	struct end_wait *e = calloc(1, sizeof(*e));
	int64_t t = e ? loop_timer(w->l, (uint64_t)ms * 1000000, end_wait_cb, e) : -ENOMEM;
	bool done;

	if (t < 0) {
		free(e);
		return fs_unmount_done(f);
	}
	while (!fs_unmount_done(f) && !(e->fired && fs_connected(f)))
		if (loop_run_once(w->l, true) < 0)
			break;
	done = fs_unmount_done(f);
	if (e->fired) {
		free(e);
	} else {
		e->abandoned = true;   /* the callback frees it */
		(void)loop_cancel_timer(w->l, t);
	}
	return done;
}

/* End mount i: unmount (unless the kernel already ended it), write its
 * recorded profile, forget it here and in the holder.  A mount still in use
 * (detached, and no fusectl to abort it) is served until its last user lets
 * go, and then freed by node_mounts_reap_gone(): false then.  A mount with
 * another mount over it cannot be unmounted (fs_covered): its connection is
 * ended instead, the holder's descriptor and this worker's closed, and the
 * mount stays below the other, where a later mount request finds it dead. */
bool node_mount_end(struct worker *w, size_t i)
{
	struct mount *m = w->mounts[i];
	char path[PATH_MAX], top[PATH_MAX];

	if (m->o.record && m->fs) {
		size_t n;
		const uint32_t *v = fs_trace(m->fs, &n);

		uint8_t idx[HASH_SIZE];
		int r = hex_decode(m->hex, idx, HASH_SIZE) < 0 ? -EINVAL : 0;

		r = r ?: image_profile_write_trace(m->o.record, idx, v, n);
		if (r < 0)
			log_errno(r, "profile '%s'", m->o.record);
	}
	if (m->dev) {
		node_mount_pid_file(m, path, sizeof(path));
		(void)unlink(path);
	}
	if (node_mount_covered(m, top, sizeof(top)) == 1) {
		log_msg(LOG_WARN, "mount '%s': another mount is over it (%s): left there below "
		        "it, its connection ended (its users get ENOTCONN)", m->mountpoint, top);
		w->mounts[i] = w->mounts[--w->nmounts];
		tell_holder_del(w, m->holder_key ? m->holder_key : m->mountpoint);
		node_leave(m->fs);
		m->fs = NULL;
		node_mount_free(m);
		return true;
	}
	fs_unmount(m->fs);
	if (m->fs)
		tell_holder_detach(w, m);
	w->mounts[i] = w->mounts[--w->nmounts];
	if (m->fs && !wait_unmounted(w, m->fs, MOUNT_END_WAIT_MS) &&
	    mount_push(&w->gone, &w->ngone, m) == 0) {
		log_msg(LOG_INFO, "mount '%s': unmounted, still in use: served until its last "
		        "user lets go", m->mountpoint);
		return false;
	}
	tell_holder_del(w, m->holder_key ? m->holder_key : m->mountpoint);
	fs_free(m->fs);
	m->fs = NULL;
	node_mount_free(m);
	return true;
}

int node_mount_covered(const struct mount *m, char *what, size_t n)
{
	return m->fs ? fs_covered(m->fs, what, n) : 0;
}

void node_mounts_reap_gone(struct worker *w)
{
	for (size_t i = 0; i < w->ngone;) {
		struct mount *m = w->gone[i];

		if (!fs_unmount_done(m->fs)) {
			i++;
			continue;
		}
		/* never by mountpoint here: a new mount may have taken it */
		if (m->holder_key)
			tell_holder_del(w, m->holder_key);
		fs_free(m->fs);
		m->fs = NULL;
		node_mount_free(m);
		w->gone[i] = w->gone[--w->ngone];
	}
}

void node_mounts_drop_gone(struct worker *w)
{
	while (w->ngone) {
		struct mount *m = w->gone[--w->ngone];

		node_leave(m->fs);
		m->fs = NULL;
		/* the next worker serves it on, under a lease of its own */
		store_lease_abandon(m->lease);
		m->lease = NULL;
		node_mount_free(m);
	}
}

struct mount *node_mount_at(struct worker *w, const char *mountpoint)
{
	for (size_t i = 0; i < w->nmounts; i++)
		if (!strcmp(w->mounts[i]->mountpoint, mountpoint))
			return w->mounts[i];
	return NULL;
}

/* 1: a lazyroot mount answers at dir; 0: none there, or one covered by
 * another mount (the path shows that one); -ENOTCONN: a dead one. */
int node_lazyroot_mounted(const char *dir)
{
	struct statfs sfs;
	struct stat st;
	dev_t dev;

	if (fs_find_mount_on_top(dir, &dev) < 0)
		return 0;
	if (stat(dir, &st) < 0 || statfs(dir, &sfs) < 0 || sfs.f_type != FUSE_SUPER_MAGIC ||
	    st.st_ino != IMAGE_ROOT_INO || st.st_dev != dev)
		return -ENOTCONN;
	return 1;
}

/* Mount m (prepared) anew and hand its connection to the holder. */
int node_mount_new(struct worker *w, struct mount *m)
{
	_cleanup_(buf_freep) struct buf rec = BUF_INIT;
	struct fs_params fp;
	int fds[NODE_MSG_FDS] = { -1, -1 };
	int r;

	r = node_lazyroot_mounted(m->mountpoint);
	if (r == -ENOTCONN) {
		log_msg(LOG_WARN, "mount '%s': its server is gone; mounting again", m->mountpoint);
		(void)node_abort_mount(m->mountpoint);
	} else if (r == 1) {
		/* not this node's (the callers looked): two nodes given one
		 * images directory would stack their mounts, each reading
		 * through whichever is on top */
		return log_error(-EBUSY, "mount '%s': a lazyroot mount of another node is there; "
		                 "unmount it, or give each node its own socket, images and cache",
		                 m->mountpoint);
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
	keep_index(m);
	return 0;
}

/* A record from the holder: take the connection over, or end it. */
void node_mount_adopt(struct worker *w, const struct buf *b, int fds[NODE_MSG_FDS])
{
	json_t *j = NULL;
	struct mount *m = calloc(1, sizeof(*m));
	const char *mnt = NULL;
	int r = m ? json_parse(b->data, b->len, &j, NULL) : -ENOMEM;

	if (m)
		m->state_fd = -1;

	if (r == 0) {
		const char *s;

		mnt = json_get_cstr(j, "mountpoint");
		m->mountpoint = mnt ? strdup(mnt) : NULL;
		/* unmounted by an earlier worker while in use (tell_holder_detach) */
		if ((s = json_get_cstr(j, "detached")) && !(m->holder_key = strdup(s)))
			r = -ENOMEM;
		m->ref = (s = json_get_cstr(j, "ref")) ? strdup(s) : NULL;
		s = json_get_cstr(j, "index");
		(void)json_bool(json_object_get(j, "shared"), &m->shared);
		if (r == 0 && (!m->mountpoint || !m->ref || !s || strlen(s) != 32))
			r = -EBADMSG;
		else
			memcpy(m->hex, s, sizeof(m->hex));
	}
	if (r == 0)
		r = node_mount_config(w, m, j);
	if (r == 0)
		r = node_mopts_parse(&m->cfg, json_object_get(j, "options"), &m->o);
	if (r == 0 && fds[0] < 0)
		r = -ENOTCONN;      /* nothing kept it: it ended with the last worker */
	if (r == 0)
		r = mount_prepare(w, m);
	if (r == 0) {
		struct fs_params fp;

		m->state_fd = TAKE_FD(fds[1]);
		mount_params(w, m, &fp);
		fp.detached = m->holder_key != NULL;
		r = node_adopt(&fp, &fds[0], &m->fs);
	}
	if (r == 0 && m->holder_key) {
		/* served until its last user lets go, then node_mounts_reap_gone */
		r = mount_push(&w->gone, &w->ngone, m);
		if (r == 0)
			m = NULL;
	} else if (r == 0 && (r = mounts_add(w, m)) == 0) {
		(void)fs_find_mount(m->mountpoint, &m->dev);
		pid_file_write(m);
		keep_index(m);
		m = NULL;
	}
	if (r < 0 && mnt) {
		if (r != -ENOTCONN)
			log_errno(r, "mount '%s': cannot take it over; ending it", mnt);
		if (m->holder_key) {
			/* its record is dropped below: that ends it; a detached
			 * mount has no path of its own to abort */
			node_leave(m->fs);
		} else {
			fs_free(m->fs);
			(void)node_abort_mount(mnt);
		}
		m->fs = NULL;
		tell_holder_del(w, m->holder_key ? m->holder_key : mnt);
	}
	for (int i = 0; i < NODE_MSG_FDS; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	json_decref(j);
	node_mount_free(m);
}
/* m, unless its mount is gone (unmounted behind the node's back: umount -l,
 * fusermount3 -u), in which case it is ended here and NULL returned.  Every
 * `run IMAGE` asks this of its mount; one on top at its mountpoint, the usual
 * case, is known by a statx, so that a node holding many mounts does not
 * read and parse all of mountinfo per launch. */
struct mount *node_mount_alive(struct worker *w, struct mount *m)
{
	dev_t dev;

	if (!m || (m->fs && !fs_finished(m->fs) &&
	           (fs_on_top(m->mountpoint, m->dev) ||
	            (fs_find_mount(m->mountpoint, &dev) == 0 && (!m->dev || dev == m->dev)))))
		return m;
	for (size_t i = 0; i < w->nmounts; i++)
		if (w->mounts[i] == m) {
			node_mount_end(w, i);
			break;
		}
	return NULL;
}

/* The mount `run` made of index hex from the store c names, or NULL. */
struct mount *node_shared_mount(struct worker *w, const char *hex, const struct node_config *c)
{
	for (size_t i = 0; i < w->nmounts; i++) {
		struct mount *o = w->mounts[i];

		if (o->shared && !strcmp(o->hex, hex) && !strcmp(o->store_url, c->store_url) &&
		    !strcmp(o->cfg.s3_endpoint ? o->cfg.s3_endpoint : "",
		            c->s3_endpoint ? c->s3_endpoint : ""))
			return node_mount_alive(w, o);
	}
	return NULL;
}

void node_mounts_end_all(struct worker *w)
{
	while (w->nmounts)
		(void)node_mount_end(w, w->nmounts - 1);
	/* stop waits for a mount still in use (documented: lazyroot-node(8)) */
	while (w->ngone) {
		node_mounts_reap_gone(w);
		if (w->ngone && loop_run_once(w->l, true) < 0)
			break;
	}
	free(w->gone);
	w->gone = NULL;
}

int node_mounts_stats(struct worker *w, const char *cache_dir, struct node_stats_image **ret,
                      size_t *ret_n)
{
	struct node_stats_image *v = calloc(w->nmounts + 1, sizeof(*v));
	size_t n = 0;

	*ret = NULL;
	*ret_n = 0;
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < w->nmounts; i++) {
		struct mount *m = w->mounts[i];
		struct node_fs_status st;

		if (cache_dir && strcmp(m->cache_dir, cache_dir))
			continue;
		node_fs_status(m->fs, &st);
		memcpy(v[n].index, m->hex, sizeof(v[n].index));
		v[n].mountpoint = strdup(m->mountpoint);
		if (!v[n].mountpoint) {
			node_stats_images_free(v, n);
			return -ENOMEM;
		}
		v[n].pid = (int)getpid();
		v[n].image_bytes = st.image_bytes;
		v[n].bytes_read = st.bytes_read;
		v[n].chunks_read = st.chunks_read;
		v[n].bytes_served = st.bytes_served;
		n++;
	}
	*ret = v;
	*ret_n = n;
	return 0;
}
