/*
 * cache.c — the node-local chunk cache on an io_uring loop.
 *
 * State (all owned by the loop's thread; no locks):
 *  - the entry table: every chunk file and staged object this daemon knows of
 *    (found by the scan at open, or written or seen since), keyed by name, on
 *    a disk LRU list (head = most recently used); plus chunks held in memory
 *    because the cache disk was full, on a memory LRU bounded by memory_limit;
 *  - the flight table: chunks being loaded (a file being verified, a fetch from
 *    the store, a cache file being written), each with the readers waiting for
 *    it, so that one load serves them all;
 *  - a queue of fetches beyond max_fetches.
 *
 * Invariants:
 *  - bytes reach a reader only from a file this daemon wrote or hashed
 *    (entry->verified), or from a buffer that chunk_decode() verified (a
 *    staged object's bytes are only ever decoded into such a buffer);
 *  - an entry is on the disk LRU while it has a chunk file or a staged
 *    object (entry_held); a staged object is dropped once its chunk file is
 *    being written, so that one name has one file (a crash in between leaves
 *    neither, or both: the scan at open then drops the staged one);
 *  - a name is in the flight table at most once; while it is, readers join it;
 *  - an entry's fd is closed only when no read on it is in flight (readers);
 *    an entry evicted meanwhile becomes a zombie, out of every table, freed
 *    when its last read completes;
 *  - the shared `used` gauge moves only by what this process's own link or
 *    unlink changed (EEXIST on link / ENOENT on unlink: another daemon did it);
 *  - every callback runs from the loop, never from inside cache_read().
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <zstd.h>

#include "cache/cache-internal.h"
#include "lib/loop.h"
#include "store/store.h"

#define CACHE_MAX_FDS 256           /* open chunk-file descriptors kept */
#define CACHE_BUMP_NS (60ULL * 1000000000ULL)  /* mtime refresh, per chunk */
#define CACHE_DEFAULT_FETCHES 64    /* above the store's transfers: decoding holds no slot */
#define CACHE_FLIGHT_BUCKETS 1024
#define CACHE_PACK_LOGGED 8         /* pack failures logged per cache, at most */

struct centry {
	uint8_t name[HASH_SIZE];
	uint32_t size;
	bool on_disk;                    /* a file chunks/ab/<hex> (as far as we know) */
	bool staged;                     /* a staged object chunks/ab/<hex>.z */
	uint32_t zsize;                  /* its bytes (size is 0 until known) */
	bool verified;                   /* written or hashed by this daemon */
	bool zombie;                     /* evicted; freed when readers drops to 0 */
	int fd;                          /* -1, or open for hit reads (fd LRU) */
	unsigned readers;                /* hit reads in flight on fd */
	uint64_t last_bump;              /* now_ns() of the last mtime refresh */
	uint8_t *mem;                    /* held in memory (disk full), or NULL */
	struct centry *hnext;
	struct centry *lprev, *lnext;    /* disk LRU */
	struct centry *mprev, *mnext;    /* memory LRU */
	struct centry *fprev, *fnext;    /* fd LRU */
};

struct list {
	struct centry *head, *tail;
};

struct waiter {
	struct waiter *next;
	void *dst;                       /* NULL: a prefetch */
	uint32_t off, len;
	int image;
	cache_cb cb;
	void *ud;
};

enum flight_kind { FLIGHT_VERIFY, FLIGHT_FETCH, FLIGHT_STAGED };
/* Where start_load() finds the chunk. */
enum load_from { LOAD_STORE, LOAD_FILE, LOAD_STAGED, LOAD_STAGE };

struct flight {
	struct cache *c;
	struct flight *hnext, *qnext;
	enum flight_kind kind;
	struct cache_chunk ch;
	struct store *store;             /* borrowed from the first reader */
	struct waiter *w_head, *w_tail;
	uint8_t *data;                   /* ch.size bytes; verified once `ready` */
	bool ready;                      /* joiners are served from data at once */
	bool fetched;                    /* the bytes came from the store: readers missed */
	bool alone;                      /* fetched with no other fetch in flight */
	bool stage;                      /* cache_stage(): keep the fetched bytes as
	                                    they are unless a reader waits */
	bool keep_raw;                   /* the check kept them: raw is written staged */
	const uint8_t *wbuf;             /* what the write path writes: data or raw */
	size_t wlen;
	size_t zlen;                     /* the staged object's size, being read */
	int fd;
	size_t done;                     /* bytes read or written so far */
	int fail;                        /* flight_fail_later(): the error */
	uint64_t t0;
	struct decode_job job;           /* decoding on a worker: f->raw into f->data */
	struct buf raw;                  /* the bytes the store returned, while decoded */
	struct store_check *later;       /* the store's check, waiting for the verdict */
	char hex[HASH_HEX_SIZE];
	char rel[CACHE_REL_LEN];
	char zrel[CACHE_REL_LEN];        /* the staged object's */
	char proc[64];                   /* /proc/PID/fd/N of the unnamed file */
};

/* Per-image distinct-chunk set: open addressing on the name's first 8 bytes. */
struct image_seen {
	uint8_t (*names)[HASH_SIZE];
	size_t n, cap;
};

struct cache {
	struct loop *loop;               /* borrowed */
	int dir_fd, chunks_fd, lock_fd;
	struct cache_stats *st;          /* DIR/stats, MAP_SHARED */
	uint64_t limit, memory_limit;
	unsigned max_fetches, fetching;
	uint64_t unkept;                 /* fetched chunks not written to disk */
	unsigned flights_live;           /* flights not yet freed (fetching or writing) */
	uint64_t pack_fallbacks;         /* chunks fetched from their object: the pack failed */
	uint32_t near_us;                /* cache_params.near_latency_us, resolved */
	uint32_t lat_us[CACHE_NEAR_WINDOW];  /* the last lone fetches' latencies, a ring */
	unsigned nlat;                   /* lone fetches recorded, up to the window */
	unsigned lat_next;
	pid_t pid;
	struct centry **buckets;
	size_t nbuckets, nentries;
	struct list lru, mlru, flru;
	uint64_t mem_used;
	unsigned fds_open;
	struct flight *flights[CACHE_FLIGHT_BUCKETS];
	struct flight *fq_head, *fq_tail;  /* fetches waiting for a slot */
	ZSTD_DCtx *dctx;
	struct decoder *dec;             /* NULL: fetched chunks are decoded on the loop */
	struct image_seen *images[CACHE_STATS_IMAGES];  /* slots this daemon claimed */
	struct wfiles *wf;               /* whole-file objects (files.c) */
};

/* ---- lists and tables ---------------------------------------------------- */

#define LIST_UNLINK(l, e, prev, next) do {                                    \
	if ((e)->prev) (e)->prev->next = (e)->next; else (l)->head = (e)->next; \
	if ((e)->next) (e)->next->prev = (e)->prev; else (l)->tail = (e)->prev; \
	(e)->prev = (e)->next = NULL;                                          \
} while (0)
#define LIST_PUSH_HEAD(l, e, prev, next) do {                                 \
	(e)->prev = NULL; (e)->next = (l)->head;                               \
	if ((l)->head) (l)->head->prev = (e); else (l)->tail = (e);            \
	(l)->head = (e);                                                       \
} while (0)
#define LIST_PUSH_TAIL(l, e, prev, next) do {                                 \
	(e)->next = NULL; (e)->prev = (l)->tail;                               \
	if ((l)->tail) (l)->tail->next = (e); else (l)->head = (e);            \
	(l)->tail = (e);                                                       \
} while (0)

static uint64_t name_key(const uint8_t name[HASH_SIZE])
{
	uint64_t k;

	memcpy(&k, name, sizeof(k));
	return k;
}

static struct centry *entry_find(struct cache *c, const uint8_t name[HASH_SIZE])
{
	struct centry *e = c->buckets[name_key(name) & (c->nbuckets - 1)];

	while (e && memcmp(e->name, name, HASH_SIZE))
		e = e->hnext;
	return e;
}

/* Double the bucket array when entries outnumber buckets.  A failed grow
 * only lengthens chains. */
static void table_grow(struct cache *c)
{
	size_t n = c->nbuckets * 2;
	struct centry **b = calloc(n, sizeof(*b));

	if (!b)
		return;
	for (size_t i = 0; i < c->nbuckets; i++) {
		struct centry *e = c->buckets[i];

		while (e) {
			struct centry *next = e->hnext;
			size_t h = name_key(e->name) & (n - 1);

			e->hnext = b[h];
			b[h] = e;
			e = next;
		}
	}
	free(c->buckets);
	c->buckets = b;
	c->nbuckets = n;
}

static struct centry *entry_add(struct cache *c, const uint8_t name[HASH_SIZE], uint32_t size)
{
	struct centry *e = calloc(1, sizeof(*e));
	size_t h;

	if (!e)
		return NULL;
	memcpy(e->name, name, HASH_SIZE);
	e->size = size;
	e->fd = -1;
	if (c->nentries >= c->nbuckets)
		table_grow(c);
	h = name_key(name) & (c->nbuckets - 1);
	e->hnext = c->buckets[h];
	c->buckets[h] = e;
	c->nentries++;
	return e;
}

static bool entry_held(const struct centry *e)
{
	return e->on_disk || e->staged;
}

static void entry_close_fd(struct cache *c, struct centry *e)
{
	if (e->fd < 0)
		return;
	LIST_UNLINK(&c->flru, e, fprev, fnext);
	close(e->fd);
	e->fd = -1;
	c->fds_open--;
}

static void entry_drop_mem(struct cache *c, struct centry *e)
{
	if (!e->mem)
		return;
	LIST_UNLINK(&c->mlru, e, mprev, mnext);
	free(e->mem);
	e->mem = NULL;
	c->mem_used -= e->size;
}

/* Take e out of the table and lists; free it now unless reads are in flight
 * on its fd (then the last of them frees it). */
static void entry_remove(struct cache *c, struct centry *e)
{
	struct centry **pp = &c->buckets[name_key(e->name) & (c->nbuckets - 1)];

	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	c->nentries--;
	if (entry_held(e))
		LIST_UNLINK(&c->lru, e, lprev, lnext);
	entry_drop_mem(c, e);
	if (e->readers) {
		e->zombie = true;
		return;
	}
	entry_close_fd(c, e);
	free(e);
}

static void chunk_rel(const uint8_t name[HASH_SIZE], char rel[CACHE_REL_LEN])
{
	char hex[HASH_HEX_SIZE];

	hex_encode(name, HASH_SIZE, hex);
	snprintf(rel, CACHE_REL_LEN, "%.2s/%s", hex, hex);
}

static void staged_rel(const uint8_t name[HASH_SIZE], char rel[CACHE_REL_LEN])
{
	char hex[HASH_HEX_SIZE];

	hex_encode(name, HASH_SIZE, hex);
	snprintf(rel, CACHE_REL_LEN, "%.2s/%s" CACHE_STAGED_SUFFIX, hex, hex);
}

/* Unlink e's staged object (the gauges move only when this unlink removed
 * it); returns its bytes when it did, else 0.  e stays in the table. */
static uint64_t staged_unlink(struct cache *c, struct centry *e)
{
	char rel[CACHE_REL_LEN];

	if (!e->staged)
		return 0;
	e->staged = false;
	if (!e->on_disk)
		LIST_UNLINK(&c->lru, e, lprev, lnext);
	staged_rel(e->name, rel);
	if (unlinkat(c->chunks_fd, rel, 0) < 0)
		return 0;
	stat_sub(&c->st->used, e->zsize);
	stat_sub(&c->st->staged, 1);
	stat_sub(&c->st->staged_bytes, e->zsize);
	return e->zsize;
}

/* Unlink e's files and forget it.  ENOENT: another daemon (or `cache trim`)
 * already removed them and counted them. */
static void entry_unlink(struct cache *c, struct centry *e, bool eviction)
{
	char rel[CACHE_REL_LEN];
	uint64_t freed = 0;

	chunk_rel(e->name, rel);
	if (e->on_disk && unlinkat(c->chunks_fd, rel, 0) == 0) {
		stat_sub(&c->st->used, e->size);
		freed += e->size;
	}
	freed += staged_unlink(c, e);
	if (eviction && freed) {
		stat_add(&c->st->evictions, 1);
		stat_add(&c->st->evicted_bytes, freed);
	}
	if (e->mem) {
		/* the bytes stay useful from memory */
		if (e->on_disk)
			LIST_UNLINK(&c->lru, e, lprev, lnext);
		e->on_disk = false;
		entry_close_fd(c, e);
		return;
	}
	entry_remove(c, e);
}

/* Evict least recently used chunk files while the shared gauge is over the
 * limit, and at least `need` bytes (room for a write that hit ENOSPC).  Only
 * files this daemon knows can be evicted; other daemons evict theirs. */
static void evict(struct cache *c, uint64_t need)
{
	uint64_t freed = 0;

	/* whole-file objects first: they only copy chunks that stay */
	if (c->wf)
		freed = wfiles_evict(c->wf, c->limit, need);

	while (c->lru.tail &&
	       (__atomic_load_n(&c->st->used, __ATOMIC_RELAXED) > c->limit || freed < need)) {
		struct centry *e = c->lru.tail;

		freed += (e->on_disk ? e->size : 0) + (e->staged ? e->zsize : 0);
		entry_unlink(c, e, true);
	}
}

static void mem_insert(struct cache *c, const uint8_t name[HASH_SIZE], uint32_t size,
                       uint8_t **data)
{
	struct centry *e;

	if (size > c->memory_limit)
		return;
	while (c->mem_used + size > c->memory_limit && c->mlru.tail) {
		struct centry *old = c->mlru.tail;

		entry_drop_mem(c, old);
		if (!entry_held(old))
			entry_remove(c, old);
	}
	e = entry_find(c, name);
	if (!e)
		e = entry_add(c, name, size);
	if (!e || e->mem)
		return;
	e->mem = TAKE_PTR(*data);
	c->mem_used += size;
	LIST_PUSH_HEAD(&c->mlru, e, mprev, mnext);
}

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
static void count_served(struct cache *c, const struct cache_chunk *ch, uint32_t len, int image,
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
static void count_latency(struct cache *c, uint64_t ns, bool alone)
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

/* Two lone fetches at least, so that one slow first connection proves nothing. */
unsigned cache_flights(const struct cache *c)
{
	return c->flights_live;
}

uint64_t cache_unkept(const struct cache *c)
{
	return c->unkept;
}

bool cache_store_slow(const struct cache *c)
{
	uint32_t least = UINT32_MAX;

	if (c->near_us == UINT32_MAX || c->nlat < 2)
		return false;
	for (unsigned i = 0; i < c->nlat; i++)
		least = MIN(least, c->lat_us[i]);
	return least >= c->near_us;
}

/* ---- completing readers ---------------------------------------------------- */

struct later {
	cache_cb cb;
	void *ud;
	int res;
};

static void later_run(void *ud)
{
	struct later *l = ud;

	l->cb(l->ud, l->res);
	free(l);
}

/* Run cb(ud, res) at the loop's next turn.  Fails only without memory. */
static int complete_later(struct cache *c, cache_cb cb, void *ud, int res)
{
	struct later *l = malloc(sizeof(*l));
	int r;

	if (!l)
		return -ENOMEM;
	*l = (struct later){ cb, ud, res };
	r = loop_defer(c->loop, later_run, l);
	if (r < 0)
		free(l);
	return r;
}

/* Serve w from verified bytes (data = the whole chunk) and run its callback. */
static void waiter_serve(struct cache *c, struct waiter *w, const struct cache_chunk *ch,
                         const uint8_t *data, bool hit)
{
	if (!w->dst) {
		w->cb(w->ud, 0);
		return;
	}
	memcpy(w->dst, data + w->off, w->len);
	count_served(c, ch, w->len, w->image, hit);
	w->cb(w->ud, (int)w->len);
}

static void waiter_fail(struct cache *c, struct waiter *w, int res)
{
	stat_add(&c->st->errors, 1);
	w->cb(w->ud, res);
}

/* ---- flights --------------------------------------------------------------- */

static struct flight **flight_slot(struct cache *c, const uint8_t name[HASH_SIZE])
{
	struct flight **pp = &c->flights[name_key(name) % CACHE_FLIGHT_BUCKETS];

	while (*pp && memcmp((*pp)->ch.name, name, HASH_SIZE))
		pp = &(*pp)->hnext;
	return pp;
}

static void flight_free(struct flight *f)
{
	struct cache *c = f->c;
	struct flight **pp = flight_slot(c, f->ch.name);

	if (*pp == f)
		*pp = f->hnext;
	if (f->fd >= 0)
		close(f->fd);
	buf_free(&f->raw);
	free(f->data);
	free(f);
	c->flights_live--;
}

/* Fail every waiter with res and end the flight. */
static void flight_fail(struct flight *f, int res)
{
	struct waiter *w = f->w_head;

	f->w_head = f->w_tail = NULL;
	while (w) {
		struct waiter *next = w->next;

		waiter_fail(f->c, w, res);
		free(w);
		w = next;
	}
	flight_free(f);
}

/* The bytes are verified: serve every waiter; later joiners are served at
 * once from data until the flight ends. */
static void flight_serve(struct flight *f)
{
	struct waiter *w = f->w_head;

	f->ready = true;
	f->w_head = f->w_tail = NULL;
	while (w) {
		struct waiter *next = w->next;

		waiter_serve(f->c, w, &f->ch, f->data, !f->fetched);
		free(w);
		w = next;
	}
}

static void flight_fail_later_run(void *ud)
{
	struct flight *f = ud;

	flight_fail(f, f->fail);
}

/* Fail the flight at the loop's next turn: the failure may be found inside
 * cache_read(), whose callbacks must not run from inside it.  Without memory
 * even for that, fail now. */
static void flight_fail_later(struct flight *f, int res)
{
	f->fail = res;
	if (loop_defer(f->c->loop, flight_fail_later_run, f) < 0)
		flight_fail(f, res);
}

static void fetch_start(struct flight *f);
static void fetch_next(struct cache *c);
static void stage_end(struct flight *f);
static int start_load(struct cache *c, struct store *s, const struct cache_chunk *ch,
                      struct waiter *w, enum load_from from);

static void flight_to_fetch(struct flight *f)
{
	struct cache *c = f->c;

	f->kind = FLIGHT_FETCH;
	f->done = 0;
	if (c->fetching < c->max_fetches) {
		fetch_start(f);
		return;
	}
	f->qnext = NULL;
	if (c->fq_tail)
		c->fq_tail->qnext = f;
	else
		c->fq_head = f;
	c->fq_tail = f;
}

/* -- verifying a file found on disk -- */

static void verify_failed(struct flight *f)
{
	struct cache *c = f->c;
	struct centry *e = entry_find(c, f->ch.name);

	stat_add(&c->st->verify_failures, 1);
	log_msg(LOG_WARN, "cache: chunk file %s is corrupt; fetching it again", f->rel);
	if (f->fd >= 0) {
		close(f->fd);
		f->fd = -1;
	}
	if (e)
		entry_unlink(c, e, false);
	flight_to_fetch(f);
}

static void verify_read_cb(void *ud, int res)
{
	struct flight *f = ud;
	struct cache *c = f->c;
	uint8_t got[HASH_SIZE];
	struct centry *e;
	int r;

	if (res < 0) {
		verify_failed(f);
		return;
	}
	f->done += (size_t)res;
	if (res > 0 && f->done < f->ch.size) {
		r = loop_read(c->loop, f->fd, f->data + f->done, f->ch.size - f->done, f->done,
		              verify_read_cb, f);
		if (r < 0)
			flight_fail(f, r);
		return;
	}
	hash128(f->data, f->done, got);
	if (f->done != f->ch.size || memcmp(got, f->ch.name, HASH_SIZE)) {
		verify_failed(f);
		return;
	}
	e = entry_find(c, f->ch.name);
	if (e)
		e->verified = true;
	flight_serve(f);
	flight_free(f);
}

static void verify_open_cb(void *ud, int res)
{
	struct flight *f = ud;
	struct cache *c = f->c;
	struct stat st;
	int r;

	if (res < 0) {
		/* evicted by another daemon since the scan: fetch it */
		struct centry *e = entry_find(c, f->ch.name);

		if (e)
			entry_remove(c, e);
		flight_to_fetch(f);
		return;
	}
	f->fd = res;
	if (fstat(f->fd, &st) < 0 || (uint64_t)st.st_size != f->ch.size) {
		verify_failed(f);
		return;
	}
	r = loop_read(c->loop, f->fd, f->data, f->ch.size, 0, verify_read_cb, f);
	if (r < 0)
		flight_fail(f, r);
}

/* Open f's chunk file or staged object (rel, under chunks/) through the ring,
 * then cb: with cold directory and inode caches (a new daemon after a reboot
 * or a dropped cache) an open waits for the disk, and the opens of a
 * sequential reader's chunks then overlap instead of stalling the loop one
 * after the other. */
static void open_start(struct flight *f, const char *rel, loop_cb cb)
{
	int r;

	r = loop_openat(f->c->loop, f->c->chunks_fd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0, cb,
	                f);
	if (r < 0)
		flight_fail_later(f, r);
}

/* -- writing a fetched chunk to its file -- */

static void write_end(struct flight *f)
{
	struct cache *c = f->c;

	flight_free(f);
	evict(c, 0);
}

/* The disk is full (or failing): keep the chunk in memory instead. */
static void write_failed(struct flight *f, int err)
{
	struct cache *c = f->c;

	c->unkept++;
	if (f->keep_raw) {
		/* nothing was served: the stored bytes just are not kept */
		if (err != -ENOSPC && err != -EDQUOT)
			log_errno(err, "cache: writing staged chunk %s", f->zrel);
		if (f->fd >= 0) {
			close(f->fd);
			f->fd = -1;
		}
		evict(c, f->wlen);
		stage_end(f);
		return;
	}
	if (err != -ENOSPC && err != -EDQUOT)
		log_errno(err, "cache: writing chunk file %s", f->rel);
	else
		stat_add(&c->st->memory_served, 1);  /* its readers were served from memory */
	if (f->fd >= 0) {
		close(f->fd);
		f->fd = -1;
	}
	mem_insert(c, f->ch.name, f->ch.size, &f->data);
	/* make room so that the next write has a chance */
	evict(c, f->ch.size);
	write_end(f);
}

/* A staged object was linked (res 0) or found there (EEXIST). */
static void stage_linked(struct flight *f, int res)
{
	struct cache *c = f->c;
	struct centry *e = entry_find(c, f->ch.name);

	if (res == 0) {
		stat_add(&c->st->used, f->wlen);
		stat_add(&c->st->staged, 1);
		stat_add(&c->st->staged_bytes, f->wlen);
	}
	if (!e)
		e = entry_add(c, f->ch.name, f->ch.size);
	if (e && e->on_disk && res == 0 && unlinkat(c->chunks_fd, f->zrel, 0) == 0) {
		/* the chunk file appeared meanwhile: one file per name */
		stat_sub(&c->st->used, f->wlen);
		stat_sub(&c->st->staged, 1);
		stat_sub(&c->st->staged_bytes, f->wlen);
	} else if (e && !entry_held(e)) {
		e->staged = true;
		e->zsize = (uint32_t)f->wlen;
		e->last_bump = now_ns();
		LIST_PUSH_HEAD(&c->lru, e, lprev, lnext);
	}
	stage_end(f);
}

static void link_cb(void *ud, int res)
{
	struct flight *f = ud;
	struct cache *c = f->c;
	struct centry *e;

	if (res < 0 && res != -EEXIST) {
		write_failed(f, res);
		return;
	}
	if (f->keep_raw) {
		stage_linked(f, res);
		return;
	}
	e = entry_find(c, f->ch.name);
	if (e && e->on_disk) {
		/* known already (another daemon's file, seen meanwhile) */
	} else {
		if (!e)
			e = entry_add(c, f->ch.name, f->ch.size);
		if (e) {
			if (e->staged)
				LIST_UNLINK(&c->lru, e, lprev, lnext);
			e->on_disk = true;
			e->size = f->ch.size;
			/* another daemon's file (EEXIST) is hashed at first use */
			e->verified = res == 0;
			e->last_bump = now_ns();
			LIST_PUSH_HEAD(&c->lru, e, lprev, lnext);
			entry_drop_mem(c, e);
		}
	}
	if (res == 0)
		stat_add(&c->st->used, f->ch.size);
	write_end(f);
}

static void write_cb(void *ud, int res);

/* Write what is left, then link the whole file under its name. */
static void write_more(struct flight *f)
{
	struct cache *c = f->c;
	int r;

	if (f->done < f->wlen) {
		r = loop_write(c->loop, f->fd, f->wbuf + f->done, f->wlen - f->done, f->done,
		               write_cb, f);
		if (r < 0)
			write_failed(f, r);
		return;
	}
	/* whole: give it its name (the fd stays open until then: linking an
	 * unnamed file goes through its /proc link) */
	snprintf(f->proc, sizeof(f->proc), "/proc/%d/fd/%d", (int)c->pid, f->fd);
	r = loop_linkat(c->loop, AT_FDCWD, f->proc, c->chunks_fd, f->keep_raw ? f->zrel : f->rel,
	                AT_SYMLINK_FOLLOW, link_cb, f);
	if (r < 0)
		write_failed(f, r);
}

static void write_cb(void *ud, int res)
{
	struct flight *f = ud;

	if (res <= 0) {
		write_failed(f, res < 0 ? res : -EIO);
		return;
	}
	f->done += (size_t)res;
	write_more(f);
}

static void tmpfile_cb(void *ud, int res)
{
	struct flight *f = ud;

	if (res < 0) {
		write_failed(f, res);
		return;
	}
	f->fd = res;
	f->done = 0;
	write_more(f);
}

/* Write f->data (the chunk) as its chunk file, or, keep_raw, f->raw (the
 * stored bytes) as its staged object. */
static void write_start(struct flight *f)
{
	char dir[3];
	int r;

	f->wbuf = f->keep_raw ? f->raw.data : f->data;
	f->wlen = f->keep_raw ? f->raw.len : f->ch.size;
	memcpy(dir, f->rel, 2);
	dir[2] = 0;
	memcpy(f->proc, dir, 3);  /* the openat path must outlive the call */
	r = loop_openat(f->c->loop, f->c->chunks_fd, f->proc, O_WRONLY | O_TMPFILE | O_CLOEXEC,
	                0644, tmpfile_cb, f);
	if (r < 0)
		write_failed(f, r);
}

/* -- fetching from the store -- */

static int check_verdict(struct flight *f, int r)
{
	struct cache *c = f->c;

	if (r < 0) {
		stat_add(&c->st->verify_failures, 1);
		/* a pack's failure is logged where the chunk object is fetched instead */
		if (!f->ch.in_pack)
			log_msg(LOG_ERR, "cache: chunk %s from %s fails verification", f->hex,
			        store_url(f->store));
		return -EBADMSG;
	}
	return 0;
}

static void decode_done(struct decode_job *j)
{
	struct flight *f = (struct flight *)((char *)j - offsetof(struct flight, job));
	struct buf raw = f->raw;

	f->raw = (struct buf)BUF_INIT;
	/* may end the flight (fetch_cb), or ask the next mirror (fetch_check) */
	store_check_done(f->later, check_verdict(f, j->res), &raw);
	buf_free(&raw);
}

static bool flight_has_reader(const struct flight *f)
{
	for (const struct waiter *w = f->w_head; w; w = w->next)
		if (w->dst)
			return true;
	return false;
}

/* Decode and verify what the store returned, into f->data: bytes that fail
 * are refused here, so that a store with mirrors asks the next one.  With
 * decoder threads, the work goes to them and the verdict comes later. */

static int fetch_check(void *ud, struct buf *data, struct store_check *later)
{
	struct flight *f = ud;
	struct cache *c = f->c;

	/* staging, with nobody waiting for the bytes: kept as they are, checked
	 * only for the decoded size their frame records (a truncated or wrong
	 * object makes a mirror fall over now; the hash is checked at first use) */
	f->keep_raw = f->stage && !flight_has_reader(f);
	if (f->keep_raw)
		return check_verdict(f, ZSTD_getFrameContentSize(data->data, data->len) ==
		                                f->ch.size ? 0 : -EBADMSG);
	/* a failed verification leaves its buffer: same size, reuse it */
	if (!f->data)
		f->data = malloc(f->ch.size ? f->ch.size : 1);
	if (!f->data)
		return -ENOMEM;
	if (c->dec) {
		f->raw = *data;
		*data = (struct buf)BUF_INIT;
		f->later = later;
		f->job = (struct decode_job){ .name = f->ch.name, .flags = f->ch.flags,
		                              .size = f->ch.size, .in = f->raw.data,
		                              .inlen = f->raw.len, .out = f->data,
		                              .urgent = flight_has_reader(f),
		                              .done = decode_done };
		decoder_submit(c->dec, &f->job);
		return STORE_CHECK_LATER;
	}
	return check_verdict(f, chunk_decode(c->dctx, f->ch.name, f->ch.flags, f->ch.size,
	                                     data->data, data->len, f->data));
}

static void fetch_cb(void *ud, int64_t res, struct buf *data)
{
	struct flight *f = ud;
	struct cache *c = f->c;

	c->fetching--;
	stat_sub(&c->st->inflight, 1);
	count_latency(c, now_ns() - f->t0, f->alone);
	fetch_next(c);
	if (res < 0 && f->ch.in_pack) {
		/* the pack is a copy: the chunk object may still be good */
		char pack[HASH_HEX_SIZE];

		hex_encode(f->ch.pack, HASH_SIZE, pack);
		/* a bad pack fails for many chunks: the first few say so */
		if (c->pack_fallbacks++ < CACHE_PACK_LOGGED)
			log_msg(LOG_WARN, "cache: chunk %s from packs/%s in %s: %s; fetching "
			        "chunks/%s%s", f->hex, pack, store_url(f->store),
			        res == -EBADMSG ? "fails verification" : strerror((int)-res), f->hex,
			        c->pack_fallbacks == CACHE_PACK_LOGGED ? " (further ones not logged)" : "");
		f->ch.in_pack = false;
		flight_to_fetch(f);
		return;
	}
	if (res < 0) {
		if (res != -EBADMSG)
			log_errno((int)res, "cache: fetching chunk %s from %s", f->hex,
			          store_url(f->store));
		flight_fail(f, res == -ENOMEM ? -ENOMEM : -EIO);
		return;
	}
	stat_add(&c->st->fetched_bytes, data->len);
	stat_add(&c->st->fetched_raw_bytes, f->ch.size);
	f->fetched = true;
	if (f->keep_raw) {
		f->raw = *data;
		*data = (struct buf)BUF_INIT;
		write_start(f);
		return;
	}
	flight_serve(f);
	write_start(f);
}

/* A staging flight ends (its object written or not): its prefetchers are
 * answered; readers that joined after the check (the bytes were not decoded
 * for them) load the chunk anew, from the staged object when it is there. */
static void stage_end(struct flight *f)
{
	struct cache *c = f->c;
	struct waiter *w = f->w_head;
	struct cache_chunk ch = f->ch;
	struct store *s = f->store;

	f->w_head = f->w_tail = NULL;
	flight_free(f);
	while (w) {
		struct waiter *next = w->next;
		struct centry *e = entry_find(c, ch.name);
		int r = 0;

		if (!w->dst) {
			w->cb(w->ud, 0);
			free(w);
		} else if ((r = start_load(c, s, &ch, w,
		                           e && e->staged ? LOAD_STAGED : LOAD_STORE)) < 0) {
			waiter_fail(c, w, r);
			free(w);
		}
		w = next;
	}
	evict(c, 0);
}

/* -- decoding a staged object -- */

/* Unlink e's staged object (e may be NULL), and forget e unless someone holds
 * it or its bytes are in memory. */
static void staged_drop(struct cache *c, struct centry *e)
{
	if (!e)
		return;
	staged_unlink(c, e);
	if (!entry_held(e) && !e->mem)
		entry_remove(c, e);
}

static void staged_failed(struct flight *f, const char *why)
{
	struct cache *c = f->c;
	struct centry *e = entry_find(c, f->ch.name);

	stat_add(&c->st->verify_failures, 1);
	log_msg(LOG_WARN, "cache: staged chunk %s %s; fetching it again", f->zrel, why);
	if (f->fd >= 0) {
		close(f->fd);
		f->fd = -1;
	}
	buf_free(&f->raw);
	staged_drop(c, e);
	flight_to_fetch(f);
}

/* The staged object decoded to the chunk's bytes: serve, then turn it into
 * the chunk file (dropping the object first: one file per name). */
static void staged_good(struct flight *f)
{
	struct cache *c = f->c;
	struct centry *e = entry_find(c, f->ch.name);

	buf_free(&f->raw);
	stat_add(&c->st->staged_used, 1);
	flight_serve(f);
	staged_drop(c, e);
	write_start(f);
}

static void staged_decode_done(struct decode_job *j)
{
	struct flight *f = (struct flight *)((char *)j - offsetof(struct flight, job));

	if (j->res < 0)
		staged_failed(f, "fails verification");
	else
		staged_good(f);
}

static void staged_read_cb(void *ud, int res)
{
	struct flight *f = ud;
	struct cache *c = f->c;
	int r;

	if (res < 0) {
		staged_failed(f, "cannot be read");
		return;
	}
	f->raw.len += (size_t)res;
	if (res > 0 && f->raw.len < f->zlen) {
		r = loop_read(c->loop, f->fd, f->raw.data + f->raw.len, f->zlen - f->raw.len,
		              f->raw.len, staged_read_cb, f);
		if (r < 0)
			flight_fail(f, r);
		return;
	}
	close(f->fd);
	f->fd = -1;
	f->job = (struct decode_job){ .name = f->ch.name, .flags = CHUNK_ZSTD, .size = f->ch.size,
	                              .in = f->raw.data, .inlen = f->raw.len, .out = f->data,
	                              .urgent = flight_has_reader(f),
	                              .done = staged_decode_done };
	if (c->dec) {
		decoder_submit(c->dec, &f->job);
		return;
	}
	f->job.res = chunk_decode(c->dctx, f->ch.name, CHUNK_ZSTD, f->ch.size, f->raw.data,
	                          f->raw.len, f->data);
	staged_decode_done(&f->job);
}

static void staged_open_cb(void *ud, int res)
{
	struct flight *f = ud;
	struct cache *c = f->c;
	struct stat st;
	int r;

	if (res < 0) {
		/* evicted or trimmed by another process since: fetch it */
		struct centry *e = entry_find(c, f->ch.name);

		if (e && e->staged) {
			e->staged = false;
			if (!e->on_disk)
				LIST_UNLINK(&c->lru, e, lprev, lnext);
			if (!entry_held(e) && !e->mem)
				entry_remove(c, e);
		}
		flight_to_fetch(f);
		return;
	}
	f->fd = res;
	/* a zstd frame is never larger than its bound: anything more is not one */
	if (fstat(f->fd, &st) < 0 || st.st_size == 0 ||
	    (uint64_t)st.st_size > ZSTD_compressBound(f->ch.size)) {
		staged_failed(f, "has a wrong size");
		return;
	}
	f->zlen = (size_t)st.st_size;
	r = buf_reserve(&f->raw, f->zlen);
	if (r < 0) {
		flight_fail(f, r);
		return;
	}
	r = loop_read(c->loop, f->fd, f->raw.data, f->zlen, 0, staged_read_cb, f);
	if (r < 0)
		flight_fail(f, r);
}

static void fetch_start(struct flight *f)
{
	struct cache *c = f->c;
	char key[64];
	uint64_t off = 0, len = 0;
	int r;

	if (f->ch.in_pack) {
		char pack[HASH_HEX_SIZE];

		hex_encode(f->ch.pack, HASH_SIZE, pack);
		snprintf(key, sizeof(key), "packs/%s", pack);
		off = f->ch.pack_off;
		len = f->ch.stored_size;
	} else {
		snprintf(key, sizeof(key), "chunks/%s", f->hex);
	}
	f->alone = c->fetching == 0;
	c->fetching++;
	stat_add(&c->st->inflight, 1);
	f->t0 = now_ns();
	/* the store counts into the shared stats file (a pointer assignment) */
	store_set_counters(f->store, &c->st->store);
	r = store_get_checked(f->store, key, off, len, fetch_check, fetch_cb, f);
	if (r < 0) {
		c->fetching--;
		stat_sub(&c->st->inflight, 1);
		log_errno(r, "cache: starting fetch of chunk %s", f->hex);
		flight_fail_later(f, -EIO);
	}
}

static void fetch_next(struct cache *c)
{
	while (c->fq_head && c->fetching < c->max_fetches) {
		struct flight *f = c->fq_head;

		c->fq_head = f->qnext;
		if (!c->fq_head)
			c->fq_tail = NULL;
		fetch_start(f);
	}
}

/* ---- the read path ------------------------------------------------------- */

struct hit {
	struct cache *c;
	struct centry *e;
	struct store *s;
	struct cache_chunk ch;
	struct waiter w;
};

static void hit_read_cb(void *ud, int res)
{
	struct hit *h = ud;
	struct cache *c = h->c;
	struct centry *e = h->e;
	bool zombie;

	e->readers--;
	zombie = e->zombie;
	if (zombie && !e->readers) {
		entry_close_fd(c, e);
		free(e);
	}
	if (res == (int)h->w.len) {
		count_served(c, &h->ch, h->w.len, h->w.image, true);
		h->w.cb(h->w.ud, res);
		free(h);
		return;
	}
	/* the file changed under a verified entry (truncated, unreadable):
	 * drop it and load the chunk again */
	if (!zombie) {
		stat_add(&c->st->verify_failures, 1);
		entry_unlink(c, e, false);
	}
	{
		struct waiter *w = malloc(sizeof(*w));
		int r = w ? 0 : -ENOMEM;

		if (w) {
			*w = h->w;
			w->next = NULL;
			r = start_load(c, h->s, &h->ch, w, LOAD_STORE);
			if (r < 0)
				free(w);
		}
		if (r < 0)
			waiter_fail(c, &h->w, r);
	}
	free(h);
}

/* Open e's file for hit reads, keeping at most CACHE_MAX_FDS open. */
static int entry_open_fd(struct cache *c, struct centry *e)
{
	char rel[CACHE_REL_LEN];

	if (e->fd >= 0) {
		LIST_UNLINK(&c->flru, e, fprev, fnext);
		LIST_PUSH_HEAD(&c->flru, e, fprev, fnext);
		return 0;
	}
	chunk_rel(e->name, rel);
	e->fd = openat(c->chunks_fd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (e->fd < 0)
		return -errno;
	LIST_PUSH_HEAD(&c->flru, e, fprev, fnext);
	c->fds_open++;
	for (struct centry *old = c->flru.tail; old && c->fds_open > CACHE_MAX_FDS;) {
		struct centry *prev = old->fprev;

		if (!old->readers)
			entry_close_fd(c, old);
		old = prev;
	}
	return 0;
}

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
			chunk_rel(e->name, rel);
		else
			staged_rel(e->name, rel);
		e->last_bump = now;
		utimensat(c->chunks_fd, rel, NULL, 0);
	}
}

static int hit_start(struct cache *c, struct store *s, const struct cache_chunk *ch,
                     struct centry *e, const struct waiter *w)
{
	struct hit *h;
	int r;

	r = entry_open_fd(c, e);
	if (r < 0)
		return r;
	h = malloc(sizeof(*h));
	if (!h)
		return -ENOMEM;
	*h = (struct hit){ c, e, s, *ch, *w };
	r = loop_read(c->loop, e->fd, w->dst, w->len, w->off, hit_read_cb, h);
	if (r < 0) {
		free(h);
		return r;
	}
	e->readers++;
	entry_touch(c, e);
	return 0;
}

/* Start loading ch for w (ownership of w passes on success): verify the
 * chunk file (LOAD_FILE), decode the staged object (LOAD_STAGED), fetch
 * (LOAD_STORE), or fetch to stage (LOAD_STAGE); join the flight when one
 * exists.  Returns 1 when this started a fetch from the store, else 0 or
 * -errno. */
static int start_load(struct cache *c, struct store *s, const struct cache_chunk *ch,
                      struct waiter *w, enum load_from from)
{
	struct flight **pp = flight_slot(c, ch->name), *f = *pp;

	if (f) {
		if (f->ready) {
			/* bytes in hand while the file is written: serve now,
			 * answer at the next turn */
			int r;

			if (w->dst) {
				memcpy(w->dst, f->data + w->off, w->len);
				count_served(c, ch, w->len, w->image, !f->fetched);
			}
			r = complete_later(c, w->cb, w->ud, w->dst ? (int)w->len : 0);
			if (r == 0)
				free(w);
			return r;
		}
		w->next = NULL;
		f->w_tail->next = w;
		f->w_tail = w;
		return 0;
	}
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	c->flights_live++;
	f->c = c;
	f->ch = *ch;
	f->store = s;
	f->fd = -1;
	f->w_head = f->w_tail = w;
	w->next = NULL;
	hex_encode(ch->name, HASH_SIZE, f->hex);
	chunk_rel(ch->name, f->rel);
	staged_rel(ch->name, f->zrel);
	*pp = f;
	if (from == LOAD_FILE || from == LOAD_STAGED) {
		f->kind = from == LOAD_FILE ? FLIGHT_VERIFY : FLIGHT_STAGED;
		f->data = malloc(ch->size ? ch->size : 1);
		if (!f->data) {
			*pp = NULL;
			free(f);
			c->flights_live--;
			return -ENOMEM;
		}
		if (from == LOAD_FILE)
			open_start(f, f->rel, verify_open_cb);
		else
			open_start(f, f->zrel, staged_open_cb);
		return 0;
	}
	f->stage = from == LOAD_STAGE;
	flight_to_fetch(f);
	return 1;
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
	e = entry_find(c, ch->name);
	/* (a staged object's decoded size is known once it is decoded) */
	if (e && (e->on_disk || e->mem) && e->size != ch->size) {
		/* a file of the wrong size can hold no good bytes */
		stat_add(&c->st->verify_failures, 1);
		entry_unlink(c, e, false);
		e = NULL;
	}
	if (e && e->mem) {
		if (dst) {
			memcpy(dst, e->mem + off, len);
			count_served(c, ch, len, image, true);
			stat_add(&c->st->memory_served, 1);
		}
		LIST_UNLINK(&c->mlru, e, mprev, mnext);
		LIST_PUSH_HEAD(&c->mlru, e, mprev, mnext);
		return complete_later(c, cb, ud, dst ? (int)len : 0);
	}
	/* a prefetch of a staged chunk: nothing to do (a read-ahead decodes it) */
	if (e && !e->on_disk && e->staged && !dst && !warm) {
		entry_touch(c, e);
		return complete_later(c, cb, ud, 0);
	}
	/* a read-ahead of an unverified chunk file verifies it (below) */
	if (e && e->on_disk && (e->verified || (!dst && !warm))) {
		if (!dst) {
			/* a prefetch of a chunk on disk: nothing to do */
			entry_touch(c, e);
			return complete_later(c, cb, ud, 0);
		}
		if (!*flight_slot(c, ch->name)) {
			r = hit_start(c, s, ch, e, &tmp);
			if (r == 0)
				return 0;
			/* gone (another daemon evicted it): load it again */
			entry_remove(c, e);
			e = NULL;
		}
	}
	w = malloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	*w = tmp;
	r = start_load(c, s, ch, w,
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

			if (*flight_slot(c, near[i].name))
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
	e = entry_find(c, ch->name);
	if (e && entry_held(e)) {
		entry_touch(c, e);
		return complete_later(c, cb, ud, 0);
	}
	w = malloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	*w = (struct waiter){ NULL, NULL, 0, 0, -1, cb, ud };
	r = start_load(c, s, ch, w, LOAD_STAGE);
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

void cache_evict_over(struct cache *c)
{
	evict(c, 0);
}

static bool chunk_on_disk(void *ud, const struct cache_chunk *ch)
{
	struct centry *e = entry_find(ud, ch->name);

	return e && e->on_disk;
}

int cache_file_open(struct cache *c, const struct cache_piece *pieces, unsigned npieces,
                    bool make, cache_cb cb, void *ud)
{
	if (!c->wf)
		return -ENOENT;
	return wfiles_get(c->wf, pieces, npieces, make ? chunk_on_disk : NULL, c, cb, ud);
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
		struct centry *e = entry_find(c, cf->name);

		if (e) {
			/* a chunk file and a staged object: a conversion cut short;
			 * keep the chunk file */
			const char *drop = cf->staged ? cf->rel : NULL;
			char zrel[CACHE_REL_LEN];

			if (!drop) {
				staged_rel(cf->name, zrel);
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
		e = entry_add(c, cf->name, cf->staged ? 0 : (uint32_t)cf->size);
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
	evict(c, 0);
	*ret = c;
	return 0;
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

				if (e->fd >= 0)
					close(e->fd);
				free(e->mem);
				free(e);
				e = next;
			}
		}
		free(c->buckets);
	}
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
