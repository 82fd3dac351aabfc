/*
 * cache.c — the node-local chunk cache's public face (cache/cache.h): the
 * read path that serves hits from memory or from chunk files and hands
 * misses to flights, the per-image counters, and opening a cache directory.
 *
 * The state, its invariants and the files of the cache are described in
 * cache-internal.h.  A hit is served from memory when the chunk's verified
 * bytes are there (the hot LRU, or the memory LRU of a full disk); otherwise
 * its chunk file is read whole and hashed by a flight first (fetch.c), every
 * time it is read from the disk, since disks rot under files this daemon
 * wrote or checked itself.
 *
 * Why a hash of ours and not fs-verity: fs-verity (the kernel checking every
 * page read from disk against a Merkle tree, FUSE passthrough included) needs
 * CONFIG_FS_VERITY, which the kernel this project is measured on lacks, and a
 * filesystem with the verity feature (no tmpfs, no ext4 made without it);
 * the check must hold on every cache disk, so it is ours.  What it costs is
 * in docs/perf-log.md, "A corrupted node cache is never served".
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <zstd.h>

#include "cache/cache-internal.h"
#include "lib/loop.h"
#include "store/store.h"

#define CACHE_BUMP_NS (60ULL * 1000000000ULL)  /* mtime refresh, per chunk */
#define CACHE_DEFAULT_FETCHES 64    /* above the store's transfers: decoding holds no slot */

/* ---- counters ------------------------------------------------------------- */

static bool seen_add(struct image_seen *s, const uint8_t name[HASH_SIZE])
{
	size_t i;

	if (s->n * 2 >= s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 1024;
		uint8_t(*v)[HASH_SIZE] = calloc(cap, HASH_SIZE);
		static const uint8_t zero[HASH_SIZE];

		if (!v)
			return false;
		for (size_t j = 0; j < s->cap; j++) {
			if (!memcmp(s->names[j], zero, HASH_SIZE))
				continue;
			for (i = name_key(s->names[j]) & (cap - 1); memcmp(v[i], zero, HASH_SIZE);
			     i = (i + 1) & (cap - 1))
				;
			memcpy(v[i], s->names[j], HASH_SIZE);
		}
		free(s->names);
		s->names = v;
		s->cap = cap;
	}
	/* an all-zero name stands for an empty slot: such a chunk is counted once
	 * per lookup, which no real XXH3-128 name will ever cost */
	for (i = name_key(name) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
		static const uint8_t zero[HASH_SIZE];

		if (!memcmp(s->names[i], name, HASH_SIZE))
			return false;
		if (!memcmp(s->names[i], zero, HASH_SIZE))
			break;
	}
	memcpy(s->names[i], name, HASH_SIZE);
	s->n++;
	return true;
}

/* A read of len bytes of ch was served to a reader of image slot `image`. */
void cache_count_served(struct cache *c, const struct cache_chunk *ch, uint32_t len, int image,
                         bool hit)
{
	stat_add(hit ? &c->st->hits : &c->st->misses, 1);
	stat_add(&c->st->served_bytes, len);
	if (image < 0 || image >= CACHE_STATS_IMAGES || !c->images[image])
		return;
	stat_add(&c->st->images[image].bytes_served, len);
	if (seen_add(c->images[image], ch->name)) {
		stat_add(&c->st->images[image].chunks_read, 1);
		stat_add(&c->st->images[image].bytes_read, ch->size);
	}
}

/* alone: no other fetch was in flight when it started, so that its latency
 * is the store's own and not time spent queued behind our other fetches. */
void cache_count_latency(struct cache *c, uint64_t ns, bool alone)
{
	uint64_t us = ns / 1000;
	unsigned i = 0;

	while (i < CACHE_LATENCY_BUCKETS - 1 && us >= (16ULL << i))
		i++;
	stat_add(&c->st->fetch_latency[i], 1);
	stat_add(&c->st->fetch_latency_sum_us, us);
	if (!alone)
		return;
	c->lat_us[c->lat_next] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
	c->lat_next = (c->lat_next + 1) % CACHE_NEAR_WINDOW;
	if (c->nlat < CACHE_NEAR_WINDOW)
		c->nlat++;
}

unsigned cache_flights(const struct cache *c)
{
	return c->flights_live;
}

uint64_t cache_unkept(const struct cache *c)
{
	return c->unkept;
}

/* Two lone fetches at least, so that one slow first connection proves nothing. */
bool cache_store_slow(const struct cache *c)
{
	uint32_t least = UINT32_MAX;

	if (c->near_us == UINT32_MAX || c->nlat < 2)
		return false;
	for (unsigned i = 0; i < c->nlat; i++)
		least = MIN(least, c->lat_us[i]);
	return least >= c->near_us;
}

/* ---- the read path ------------------------------------------------------- */

/* Keep recency visible to other processes: refresh the file's mtime at most
 * once a minute per chunk (a metadata write; cheap, but not per read). */
static void entry_touch(struct cache *c, struct centry *e)
{
	uint64_t now = now_ns();

	LIST_UNLINK(&c->lru, e, lprev, lnext);
	LIST_PUSH_HEAD(&c->lru, e, lprev, lnext);
	if (now - e->last_bump >= CACHE_BUMP_NS) {
		char rel[CACHE_REL_LEN];

		if (e->on_disk)
			cache_chunk_rel(e->name, rel);
		else
			cache_staged_rel(e->name, rel);
		e->last_bump = now;
		utimensat(c->chunks_fd, rel, NULL, 0);
	}
}

static void near_done(void *ud, int res)
{
	/* a neighbour is a guess: a failure shows when it is really read */
}

/* Returns 1 when this started a fetch from the store, else 0 or -errno. */
static int cache_request(struct cache *c, struct store *s, const struct cache_chunk *ch,
                         uint32_t off, uint32_t len, void *dst, int image, bool warm,
                         const struct cache_chunk *near, unsigned nnear, cache_cb cb, void *ud)
{
	struct waiter tmp = { NULL, dst, off, len, image, cb, ud }, *w;
	struct centry *e;
	int r;

	if (!cb || (dst && ((uint64_t)off + len > ch->size)))
		return -EINVAL;
	e = cache_entry_find(c, ch->name);
	/* (a staged object's decoded size is known once it is decoded) */
	if (e && (e->on_disk || e->mem) && e->size != ch->size) {
		/* a file of the wrong size can hold no good bytes */
		stat_add(&c->st->verify_failures, 1);
		cache_entry_unlink(c, e, false);
		e = NULL;
	}
	if (e && e->mem) {
		if (dst) {
			memcpy(dst, e->mem + off, len);
			cache_count_served(c, ch, len, image, true);
			stat_add(&c->st->memory_served, 1);
		}
		LIST_UNLINK(&c->mlru, e, mprev, mnext);
		LIST_PUSH_HEAD(&c->mlru, e, mprev, mnext);
		return cache_complete_later(c, cb, ud, dst ? (int)len : 0);
	}
	/* a chunk file read and verified a moment ago: from its bytes in memory */
	if (e && e->hot) {
		if (dst) {
			memcpy(dst, e->hot + off, len);
			cache_count_served(c, ch, len, image, true);
		}
		LIST_UNLINK(&c->hlru, e, tprev, tnext);
		LIST_PUSH_HEAD(&c->hlru, e, tprev, tnext);
		entry_touch(c, e);
		return cache_complete_later(c, cb, ud, dst ? (int)len : 0);
	}
	/* a prefetch of a staged chunk: nothing to do (a read-ahead decodes it) */
	if (e && !e->on_disk && e->staged && !dst && !warm) {
		entry_touch(c, e);
		return cache_complete_later(c, cb, ud, 0);
	}
	/* a prefetch of a chunk on disk: nothing to do; a reader or a read-ahead
	 * has the file read whole and verified (below) */
	if (e && e->on_disk && !dst && !warm) {
		entry_touch(c, e);
		return cache_complete_later(c, cb, ud, 0);
	}
	w = malloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	*w = tmp;
	/* a hit, though its file must be read and hashed first */
	if (e && e->on_disk)
		entry_touch(c, e);
	r = cache_start_load(c, s, ch, w,
	               e && e->on_disk ? LOAD_FILE : e && e->staged ? LOAD_STAGED : LOAD_STORE);
	if (r < 0) {
		free(w);
		return r;
	}
	/* queued behind ch's own fetch, so that they never delay it; those in
	 * flight already (ch itself among them) need nothing more */
	if (r == 1 && nnear && cache_store_slow(c))
		for (unsigned i = 0; i < nnear; i++) {
			int rn;

			if (*cache_flight_slot(c, near[i].name))
				continue;
			rn = cache_request(c, s, &near[i], 0, 0, NULL, image, false, NULL, 0, near_done,
			                   NULL);
			if (rn < 0)
				break;
			if (rn == 1)
				stat_add(&c->st->near_fetches, 1);
		}
	return r;
}

/* cache_request()'s result as the public functions give it: 0 or -errno. */
static int as_status(int r)
{
	return r < 0 ? r : 0;
}

int cache_read(struct cache *c, struct store *s, const struct cache_chunk *ch, uint32_t off,
               uint32_t len, void *dst, int image, cache_cb cb, void *ud)
{
	if (!dst)
		return -EINVAL;
	return as_status(cache_request(c, s, ch, off, len, dst, image, false, NULL, 0, cb, ud));
}

int cache_read_near(struct cache *c, struct store *s, const struct cache_chunk *ch, uint32_t off,
                    uint32_t len, void *dst, int image, const struct cache_chunk *near,
                    unsigned nnear, cache_cb cb, void *ud)
{
	if (!dst)
		return -EINVAL;
	return as_status(cache_request(c, s, ch, off, len, dst, image, false, near, nnear, cb, ud));
}

int cache_prefetch(struct cache *c, struct store *s, const struct cache_chunk *ch, int image,
                   cache_cb cb, void *ud)
{
	return as_status(cache_request(c, s, ch, 0, 0, NULL, image, false, NULL, 0, cb, ud));
}

int cache_profile_prefetch(struct cache *c, struct store *s, const struct cache_chunk *ch,
                           int image, cache_cb cb, void *ud)
{
	/* warm: a staged chunk is decoded and an unchecked chunk file hashed now,
	 * as for a sequential reader, so that the reader finds it ready */
	int r = cache_request(c, s, ch, 0, 0, NULL, image, true, NULL, 0, cb, ud);

	if (r == 1)
		stat_add(&c->st->profile_fetches, 1);
	return r;
}

void cache_note_profile_hit(struct cache *c, bool late)
{
	stat_add(late ? &c->st->profile_late : &c->st->profile_hits, 1);
}

int cache_stage(struct cache *c, struct store *s, const struct cache_chunk *ch, cache_cb cb,
                void *ud)
{
	struct centry *e;
	struct waiter *w;
	int r;

	if (!cb)
		return -EINVAL;
	if (!(ch->flags & CHUNK_ZSTD))
		return cache_prefetch(c, s, ch, -1, cb, ud);
	e = cache_entry_find(c, ch->name);
	if (e && entry_held(e)) {
		entry_touch(c, e);
		return cache_complete_later(c, cb, ud, 0);
	}
	w = malloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	*w = (struct waiter){ NULL, NULL, 0, 0, -1, cb, ud };
	r = cache_start_load(c, s, ch, w, LOAD_STAGE);
	if (r < 0)
		free(w);
	return as_status(r);
}

int cache_readahead(struct cache *c, struct store *s, const struct cache_chunk *ch, int image,
                    cache_cb cb, void *ud)
{
	return as_status(cache_request(c, s, ch, 0, 0, NULL, image, true, NULL, 0, cb, ud));
}

/* ---- whole-file objects (files.c) ------------------------------------------ */

static bool chunk_on_disk(void *ud, const struct cache_chunk *ch)
{
	struct centry *e = cache_entry_find(ud, ch->name);

	return e && e->on_disk;
}

int cache_file_open(struct cache *c, const struct cache_piece *pieces, unsigned npieces,
                    bool make, cache_cb cb, void *ud)
{
	if (!c->wf)
		return -ENOENT;
	return wfiles_get(c->wf, pieces, npieces, make ? chunk_on_disk : NULL, c, cb, ud);
}

int cache_file_held(struct cache *c, const struct cache_piece *pieces, unsigned npieces,
                    cache_cb cb, void *ud)
{
	if (!c->wf || !npieces)
		return c->wf ? -EINVAL : 0;
	return wfiles_held(c->wf, pieces, npieces, cb, ud);
}

void cache_note_passthrough(struct cache *c)
{
	stat_add(&c->st->passthrough_opens, 1);
}

/* ---- images ---------------------------------------------------------------- */

int cache_image_register(struct cache *c, const char *index_hex, uint64_t image_bytes,
                         const char *mountpoint)
{
	for (int i = 0; i < CACHE_STATS_IMAGES; i++) {
		struct cache_image_stats *im = &c->st->images[i];
		int32_t pid = __atomic_load_n(&im->pid, __ATOMIC_ACQUIRE);

		if (pid && (kill(pid, 0) == 0 || errno != ESRCH))
			continue;
		if (!__atomic_compare_exchange_n(&im->pid, &pid, (int32_t)c->pid, false,
		                                 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			continue;
		c->images[i] = calloc(1, sizeof(*c->images[i]));
		if (!c->images[i]) {
			__atomic_store_n(&im->pid, 0, __ATOMIC_RELEASE);
			return -ENOMEM;
		}
		snprintf(im->index, sizeof(im->index), "%s", index_hex ? index_hex : "");
		snprintf(im->mountpoint, sizeof(im->mountpoint), "%s", mountpoint ? mountpoint : "");
		__atomic_store_n(&im->image_bytes, image_bytes, __ATOMIC_RELAXED);
		__atomic_store_n(&im->bytes_read, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&im->chunks_read, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&im->bytes_served, 0, __ATOMIC_RELAXED);
		return i;
	}
	return -ENOSPC;
}

void cache_image_unregister(struct cache *c, int slot)
{
	if (slot < 0 || slot >= CACHE_STATS_IMAGES || !c->images[slot])
		return;
	free(c->images[slot]->names);
	free(c->images[slot]);
	c->images[slot] = NULL;
	__atomic_store_n(&c->st->images[slot].pid, 0, __ATOMIC_RELEASE);
}

/* ---- open and free ---------------------------------------------------------- */

/* A file too large to be a chunk is not one of ours: skipped. */
static int scan_collect(void *ud, const struct cache_file *f)
{
	return f->size > UINT32_MAX ? 0 : cache_files_add(ud, f);
}

/* Fill the entry table from the files on disk, oldest at the LRU tail.
 * Cost: a walk of DIR/chunks and a sort, once per daemon. */
static int cache_load(struct cache *c, bool alone)
{
	struct cache_files s = { 0 };
	int r = cache_scan(c->chunks_fd, scan_collect, &s);

	if (r < 0) {
		free(s.v);
		return r;
	}
	cache_files_sort(&s);
	for (size_t i = 0; i < s.n; i++) {
		const struct cache_file *cf = &s.v[i];
		struct centry *e = cache_entry_find(c, cf->name);

		if (e) {
			/* a chunk file and a staged object: a conversion cut short;
			 * keep the chunk file */
			const char *drop = cf->staged ? cf->rel : NULL;
			char zrel[CACHE_REL_LEN];

			if (!drop) {
				cache_staged_rel(cf->name, zrel);
				drop = zrel;
				LIST_UNLINK(&c->lru, e, lprev, lnext);
				e->staged = false;
				e->on_disk = true;
				e->size = (uint32_t)cf->size;
				LIST_PUSH_HEAD(&c->lru, e, lprev, lnext);
			}
			if (unlinkat(c->chunks_fd, drop, 0) == 0 && !alone) {
				uint64_t z = cf->staged ? cf->size : e->zsize;

				stat_sub(&c->st->used, z);
				stat_sub(&c->st->staged, 1);
				stat_sub(&c->st->staged_bytes, z);
			}
			continue;
		}
		e = cache_entry_add(c, cf->name, cf->staged ? 0 : (uint32_t)cf->size);
		if (!e) {
			free(s.v);
			return -ENOMEM;
		}
		e->on_disk = !cf->staged;
		e->staged = cf->staged;
		e->zsize = cf->staged ? (uint32_t)cf->size : 0;
		LIST_PUSH_HEAD(&c->lru, e, lprev, lnext);
	}
	free(s.v);
	/* alone on DIR: the gauges may have drifted (a daemon killed between
	 * link and add); the table is the truth */
	if (alone) {
		uint64_t used = 0, staged = 0, zbytes = 0;

		for (struct centry *e = c->lru.head; e; e = e->lnext) {
			used += e->on_disk ? e->size : e->zsize;
			staged += !e->on_disk;
			zbytes += e->on_disk ? 0 : e->zsize;
		}
		__atomic_store_n(&c->st->used, used, __ATOMIC_RELAXED);
		__atomic_store_n(&c->st->staged, staged, __ATOMIC_RELAXED);
		__atomic_store_n(&c->st->staged_bytes, zbytes, __ATOMIC_RELAXED);
	}
	return 0;
}

static int open_dirs(struct cache *c, const char *dir)
{
	int r = mkdir_p(dir, 0755);

	if (r < 0)
		return log_errno(r, "cache '%s': cannot create directory", dir);
	c->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (c->dir_fd < 0)
		return log_errno(-errno, "cache '%s': cannot open directory", dir);
	if ((mkdirat(c->dir_fd, "chunks", 0755) < 0 && errno != EEXIST) ||
	    (mkdirat(c->dir_fd, "indexes", 0755) < 0 && errno != EEXIST))
		return log_errno(-errno, "cache '%s': cannot create its directories", dir);
	c->chunks_fd = openat(c->dir_fd, "chunks", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (c->chunks_fd < 0)
		return log_errno(-errno, "cache '%s': cannot open chunks/", dir);
	for (unsigned i = 0; i < 256; i++) {
		char sub[3];

		snprintf(sub, sizeof(sub), "%02x", i);
		if (mkdirat(c->chunks_fd, sub, 0755) < 0 && errno != EEXIST)
			return log_errno(-errno, "cache '%s': cannot create chunks/%s", dir, sub);
	}
	return 0;
}

int cache_open(const struct cache_params *p, struct loop *loop, struct cache **ret)
{
	struct cache *c;
	bool alone;
	int r;

	if (!p || !p->dir || !*p->dir || !loop)
		return log_error(-EINVAL, "cache: no directory or no loop");
	c = calloc(1, sizeof(*c));
	if (!c)
		return log_errno(-ENOMEM, "cache '%s'", p->dir);
	c->dir_fd = c->chunks_fd = c->lock_fd = -1;
	c->loop = loop;
	c->limit = p->limit ? p->limit : CACHE_DEFAULT_LIMIT;
	c->memory_limit = p->memory_limit;
	c->hot_limit = p->hot_limit ? p->hot_limit : CACHE_DEFAULT_HOT;
	c->pool_idle_limit = CACHE_POOL_IDLE;
	c->max_fetches = p->max_fetches ? p->max_fetches : CACHE_DEFAULT_FETCHES;
	c->near_us = p->near_latency_us ? p->near_latency_us : CACHE_DEFAULT_NEAR_US;
	c->pid = getpid();
	c->nbuckets = 1024;
	c->buckets = calloc(c->nbuckets, sizeof(*c->buckets));
	c->dctx = ZSTD_createDCtx();
	if (!c->buckets || !c->dctx) {
		cache_free(c);
		return log_errno(-ENOMEM, "cache '%s'", p->dir);
	}
	if (p->decoders != CACHE_NO_DECODERS && (r = decoder_new(loop, p->decoders, &c->dec)) < 0)
		log_errno(r, "cache: no decoder threads; decoding on the loop's thread");
	r = open_dirs(c, p->dir);
	if (r < 0) {
		cache_free(c);
		return r;
	}
	/* An exclusive lock means no other daemon runs on DIR: then the gauges
	 * may be rebuilt.  Daemons keep a shared lock for their lifetime. */
	c->lock_fd = openat(c->dir_fd, "lock", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (c->lock_fd < 0) {
		r = log_errno(-errno, "cache '%s': cannot open its lock file", p->dir);
		cache_free(c);
		return r;
	}
	alone = flock(c->lock_fd, LOCK_EX | LOCK_NB) == 0;
	if (!alone && flock(c->lock_fd, LOCK_SH) < 0) {
		r = log_errno(-errno, "cache '%s': cannot lock", p->dir);
		cache_free(c);
		return r;
	}
	r = cache_stats_open_rw(c->dir_fd, alone, &c->st);
	if (r < 0) {
		log_errno(r, "cache '%s': cannot map its stats file", p->dir);
		cache_free(c);
		return r;
	}
	r = cache_load(c, alone);
	if (r < 0)
		log_errno(r, "cache '%s': cannot scan its chunks", p->dir);
	else if ((r = wfiles_new(c, loop, c->dir_fd, c->chunks_fd, c->limit, c->st, alone,
	                         &c->wf)) < 0)
		log_errno(r, "cache '%s': cannot scan its whole-file objects", p->dir);
	if (alone)
		flock(c->lock_fd, LOCK_SH);
	if (r < 0) {
		cache_free(c);
		return r;
	}
	__atomic_store_n(&c->st->limit, c->limit, __ATOMIC_RELAXED);
	cache_evict(c, 0);
	*ret = c;
	return 0;
}

bool cache_idle(const struct cache *c)
{
	return c->flights_live == 0 && c->fetching == 0 && !c->fq_head && wfiles_idle(c->wf);
}

/* Free a cache with no read in flight (drive the loop until they end). */
void cache_free(struct cache *c)
{
	if (!c)
		return;
	wfiles_free(c->wf);
	c->wf = NULL;
	for (int i = 0; i < CACHE_STATS_IMAGES; i++)
		if (c->st)
			cache_image_unregister(c, i);
	if (c->buckets) {
		for (size_t i = 0; i < c->nbuckets; i++) {
			struct centry *e = c->buckets[i];

			while (e) {
				struct centry *next = e->hnext;

				cache_buf_put(c, e->mem);
				cache_buf_put(c, e->hot);
				free(e);
				e = next;
			}
		}
		free(c->buckets);
	}
	cache_pool_destroy(c);
	decoder_free(c->dec);
	ZSTD_freeDCtx(c->dctx);
	cache_stats_unmap_rw(c->st);
	if (c->lock_fd >= 0)
		close(c->lock_fd);
	if (c->chunks_fd >= 0)
		close(c->chunks_fd);
	if (c->dir_fd >= 0)
		close(c->dir_fd);
	free(c);
}
