/*
 * cache_evict.c — the cache's entry table and what leaves it: the table of chunk
 * files and staged objects this daemon knows, their disk LRU, eviction when
 * the shared `used` gauge is over the limit, and the memory LRU that holds
 * chunks the cache disk had no room for.
 *
 * Every unlink here moves the shared gauges only by what this process's own
 * unlink removed (ENOENT: another daemon or `cache trim` did it and counted
 * it).
 *
 * The hot LRU holds chunk files' bytes that were read whole and verified, so
 * that the reads of one chunk that follow each other (a file's READs, the
 * small files packed into one chunk, a read-ahead's chunks) pay one read of
 * the file and one hash, not one each; it is bounded by hot_limit.
 */
#include "cache/cache-internal.h"

struct centry *cache_entry_find(struct cache *c, const uint8_t name[HASH_SIZE])
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

struct centry *cache_entry_add(struct cache *c, const uint8_t name[HASH_SIZE], uint32_t size)
{
	struct centry *e = calloc(1, sizeof(*e));
	size_t h;

	if (!e)
		return NULL;
	memcpy(e->name, name, HASH_SIZE);
	e->size = size;
	if (c->nentries >= c->nbuckets)
		table_grow(c);
	h = name_key(name) & (c->nbuckets - 1);
	e->hnext = c->buckets[h];
	c->buckets[h] = e;
	c->nentries++;
	return e;
}

void cache_entry_drop_hot(struct cache *c, struct centry *e)
{
	if (!e->hot)
		return;
	LIST_UNLINK(&c->hlru, e, tprev, tnext);
	c->hot_used -= cache_buf_cap(e->hot);
	cache_buf_put(c, e->hot);
	e->hot = NULL;
}

#define HOT_TAKE_SCAN 16    /* hot entries looked at for a buffer to take */

uint8_t *cache_hot_take(struct cache *c, uint64_t min_cap, uint64_t max_cap)
{
	struct centry *e = c->hlru.tail;

	for (unsigned i = 0; e && i < HOT_TAKE_SCAN; i++, e = e->tprev) {
		uint64_t cap = cache_buf_cap(e->hot);
		uint8_t *data;

		if (cap < min_cap || cap > max_cap)
			continue;
		data = e->hot;
		LIST_UNLINK(&c->hlru, e, tprev, tnext);
		c->hot_used -= cap;
		e->hot = NULL;
		return data;
	}
	return NULL;
}

void cache_hot_insert(struct cache *c, struct centry *e, uint8_t **data)
{
	uint64_t cap = cache_buf_cap(*data);

	if (e->hot || cap > c->hot_limit)
		return;
	while (c->hot_used + cap > c->hot_limit && c->hlru.tail)
		cache_entry_drop_hot(c, c->hlru.tail);
	e->hot = TAKE_PTR(*data);
	c->hot_used += cap;
	LIST_PUSH_HEAD(&c->hlru, e, tprev, tnext);
}

void cache_entry_drop_mem(struct cache *c, struct centry *e)
{
	if (!e->mem)
		return;
	LIST_UNLINK(&c->mlru, e, mprev, mnext);
	cache_buf_put(c, e->mem);
	e->mem = NULL;
	c->mem_used -= e->size;
}

/* Take e out of the table and lists and free it. */
void cache_entry_remove(struct cache *c, struct centry *e)
{
	struct centry **pp = &c->buckets[name_key(e->name) & (c->nbuckets - 1)];

	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	c->nentries--;
	if (entry_held(e))
		LIST_UNLINK(&c->lru, e, lprev, lnext);
	cache_entry_drop_mem(c, e);
	cache_entry_drop_hot(c, e);
	free(e);
}

void cache_chunk_rel(const uint8_t name[HASH_SIZE], char rel[CACHE_REL_LEN])
{
	char hex[HASH_HEX_SIZE];

	hex_encode(name, HASH_SIZE, hex);
	snprintf(rel, CACHE_REL_LEN, "%.2s/%s", hex, hex);
}

void cache_staged_rel(const uint8_t name[HASH_SIZE], char rel[CACHE_REL_LEN])
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
	cache_staged_rel(e->name, rel);
	if (unlinkat(c->chunks_fd, rel, 0) < 0)
		return 0;
	stat_sub(&c->st->used, e->zsize);
	stat_sub(&c->st->staged, 1);
	stat_sub(&c->st->staged_bytes, e->zsize);
	return e->zsize;
}

/* Unlink e's files and forget it.  ENOENT: another daemon (or `cache trim`)
 * already removed them and counted them. */
void cache_entry_unlink(struct cache *c, struct centry *e, bool eviction)
{
	char rel[CACHE_REL_LEN];
	uint64_t freed = 0;

	cache_chunk_rel(e->name, rel);
	if (e->on_disk && unlinkat(c->chunks_fd, rel, 0) == 0) {
		stat_sub(&c->st->used, e->size);
		freed += e->size;
	}
	freed += staged_unlink(c, e);
	/* the bytes of a file that is gone are read no more (a corrupt one's
	 * were dropped before they were kept; an evicted one's go with it) */
	cache_entry_drop_hot(c, e);
	if (eviction && freed) {
		stat_add(&c->st->evictions, 1);
		stat_add(&c->st->evicted_bytes, freed);
	}
	if (e->mem) {
		/* the bytes stay useful from memory */
		if (e->on_disk)
			LIST_UNLINK(&c->lru, e, lprev, lnext);
		e->on_disk = false;
		return;
	}
	cache_entry_remove(c, e);
}

/* Evict least recently used chunk files while the shared gauge is over the
 * limit, and at least `need` bytes (room for a write that hit ENOSPC).  Only
 * files this daemon knows can be evicted; other daemons cache_evict theirs. */
void cache_evict(struct cache *c, uint64_t need)
{
	uint64_t freed = 0;

	/* whole-file objects first: they only copy chunks that stay */
	if (c->wf)
		freed = wfiles_evict(c->wf, c->limit, need);

	while (c->lru.tail &&
	       (__atomic_load_n(&c->st->used, __ATOMIC_RELAXED) > c->limit || freed < need)) {
		struct centry *e = c->lru.tail;

		freed += (e->on_disk ? e->size : 0) + (e->staged ? e->zsize : 0);
		cache_entry_unlink(c, e, true);
	}
}

void cache_mem_insert(struct cache *c, const uint8_t name[HASH_SIZE], uint32_t size,
                       uint8_t **data)
{
	struct centry *e;

	if (size > c->memory_limit)
		return;
	while (c->mem_used + size > c->memory_limit && c->mlru.tail) {
		struct centry *old = c->mlru.tail;

		cache_entry_drop_mem(c, old);
		if (!entry_held(old))
			cache_entry_remove(c, old);
	}
	e = cache_entry_find(c, name);
	if (!e)
		e = cache_entry_add(c, name, size);
	if (!e || e->mem)
		return;
	e->mem = TAKE_PTR(*data);
	c->mem_used += size;
	LIST_PUSH_HEAD(&c->mlru, e, mprev, mnext);
}

/* Unlink e's staged object (e may be NULL), and forget e unless someone holds
 * it or its bytes are in memory. */
void cache_staged_drop(struct cache *c, struct centry *e)
{
	if (!e)
		return;
	staged_unlink(c, e);
	if (!entry_held(e) && !e->mem)
		cache_entry_remove(c, e);
}

void cache_evict_over(struct cache *c)
{
	cache_evict(c, 0);
}
