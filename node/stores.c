/*
 * stores.c — the worker's stores and caches: one store per distinct set of
 * store settings (URL, transfers, TLS, S3, credentials), one cache per cache
 * directory; each opened on first use.  A cache, and a local store, is
 * closed once nothing uses it; a remote store is kept until the worker ends.
 */
#include <sys/stat.h>

#include "cache/cache.h"
#include "lib/json.h"
#include "lib/lib.h"
#include "lib/loop.h"
#include "node/node-internal.h"
#include "store/store.h"

/* ---- stores, caches --------------------------------------------------------- */

/* The settings a store is opened with: one store per distinct set. */
static const char *const store_keys[] = {
	"store", "http_transfers", "http_connect_timeout", "http_low_speed_time", "tls_ca_file",
	"tls_ca_dir", "s3_endpoint", "s3_region", "s3_profile", "s3_credentials_file",
	"s3_list_max_keys",
};

struct nstore *node_store_get(struct worker *w, const struct node_config *rc)
{
	_cleanup_(buf_freep) struct buf key = BUF_INIT;
	struct nstore *ns, **v;
	char val[4096];
	int r = 0;

	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(store_keys); i++)
		if (node_config_get(rc, store_keys[i], val, sizeof(val)) == 0)
			r = buf_printf(&key, "%s\n", val);
	/* other credentials, another node_handle (the key stays in memory) */
	r = r ?: json_buf_add(&key, node_config_secrets_json(rc));
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

/*
 * A tag read from a remote store is a round trip on the node's request
 * path, and the node answers one request at a time: read for every `run
 * IMAGE`, it bounds the node's launch rate by the store's latency
 * (docs/perf-log.md, "Tags of a remote store").  So a remote store's tags
 * are kept for tag_ttl: a tag moved in the store is seen within that long,
 * as CernVM-FS's catalogs are within their TTL.  A dir: store (no "://" in
 * its URL) is a local file read: always read, so that a tag just built on
 * the node is what the next run gets.
 */
int node_store_resolve(struct nstore *st, const char *ref, uint64_t ttl_ms, char hex[33])
{
	size_t i, slot = NODE_TAGS_MAX;
	uint64_t now = now_ns();
	int r;

	if (store_is_index_name(ref) || !ttl_ms || !strstr(st->cfg.store_url, "://"))
		return store_resolve(st->s, ref, hex);
	for (i = 0; i < NODE_TAGS_MAX; i++)
		if (st->tags[i].ref && !strcmp(st->tags[i].ref, ref))
			break;
	if (i < NODE_TAGS_MAX && now - st->tags[i].at_ns < ttl_ms * 1000000ULL) {
		memcpy(hex, st->tags[i].hex, 33);
		return 0;
	}
	r = store_resolve(st->s, ref, hex);
	if (r < 0)
		return r;
	if (i == NODE_TAGS_MAX) {
		/* a free slot, else the one read longest ago */
		for (i = 0; i < NODE_TAGS_MAX; i++) {
			if (!st->tags[i].ref) {
				slot = i;
				break;
			}
			if (slot == NODE_TAGS_MAX || st->tags[i].at_ns < st->tags[slot].at_ns)
				slot = i;
		}
		free(st->tags[slot].ref);
		st->tags[slot].ref = strdup(ref);
		if (!st->tags[slot].ref)
			return 0;   /* not remembered: read again next time */
		i = slot;
	}
	memcpy(st->tags[i].hex, hex, 33);
	st->tags[i].at_ns = now_ns();
	st->tags[i].has_sig = false;
	return 0;
}

int node_store_tag_sig(struct nstore *st, const char *ref, uint64_t ttl_ms,
                       struct store_tag_sig *ret)
{
	size_t i = NODE_TAGS_MAX;
	int r;

	if (ttl_ms && strstr(st->cfg.store_url, "://"))
		for (i = 0; i < NODE_TAGS_MAX; i++)
			if (st->tags[i].ref && !strcmp(st->tags[i].ref, ref))
				break;
	/* the slot node_store_resolve filled or answered from just now */
	if (i < NODE_TAGS_MAX && st->tags[i].has_sig) {
		*ret = st->tags[i].sig;
		return st->tags[i].sig_r;
	}
	r = store_tag_sig_get(st->s, ref, ret);
	if (i < NODE_TAGS_MAX && (r == 0 || r == -ENOENT)) {
		st->tags[i].has_sig = true;
		st->tags[i].sig_r = r;
		st->tags[i].sig = *ret;
	}
	return r;
}

void node_store_free(struct nstore *st)
{
	store_free(st->s);
	node_config_destroy(&st->cfg);
	for (size_t i = 0; i < NODE_TAGS_MAX; i++)
		free(st->tags[i].ref);
	free(st->key);
	free(st);
}

static bool cache_used(const struct worker *w, const struct ncache *nc)
{
	for (size_t i = 0; i < w->nmounts; i++)
		if (w->mounts[i]->nc == nc)
			return true;
	for (size_t i = 0; i < w->ngone; i++)
		if (w->gone[i]->nc == nc)
			return true;
	for (const struct client *c = w->clients; c; c = c->next)
		if (c->job && c->job->nc == nc)
			return true;
	return false;
}

/* A cache whose directory was removed (and perhaps made again) stays open
 * for the mounts and prefetches that use it; once none does and nothing of
 * its own is in flight it is freed.  Without this a node whose cache
 * directory is removed between runs kept every earlier cache, with its
 * memory and its decoder threads, until it stopped. */
void node_caches_prune(struct worker *w)
{
	for (size_t i = 0; i < w->ncaches;) {
		struct ncache *nc = w->caches[i];

		if (nc->dir[0] || cache_used(w, nc) || !cache_idle(nc->c)) {
			i++;
			continue;
		}
		cache_free(nc->c);
		free(nc->dir);
		free(nc);
		w->caches[i] = w->caches[--w->ncaches];
	}
}

static bool store_used(const struct worker *w, const struct nstore *st)
{
	for (size_t i = 0; i < w->nmounts; i++)
		if (w->mounts[i]->st == st)
			return true;
	for (size_t i = 0; i < w->ngone; i++)
		if (w->gone[i]->st == st)
			return true;
	for (const struct client *c = w->clients; c; c = c->next)
		if (c->job && c->job->st == st)
			return true;
	return false;
}

void node_stores_prune(struct worker *w)
{
	for (size_t i = 0; i < w->ncaches; i++)
		if (!cache_idle(w->caches[i]->c))
			return;
	for (size_t i = 0; i < w->nstores;) {
		struct nstore *st = w->stores[i];

		if (strstr(st->cfg.store_url, "://") || store_used(w, st)) {
			i++;
			continue;
		}
		node_store_free(st);
		w->stores[i] = w->stores[--w->nstores];
	}
}

/* One cache per directory, opened with the settings of the first request
 * that names it (the node's own first of all). */
struct ncache *node_cache_get(struct worker *w, const struct node_config *rc)
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
