/*
 * pool.c — chunk buffers: the memory a chunk's bytes live in while a flight
 * reads its file whole or decodes it, and afterwards on the hot LRU or the
 * memory LRU.
 *
 * Every read of a chunk file and every decode takes a chunk-sized buffer.
 * Taken from malloc, with verified bytes kept alive on the hot LRU in
 * between, they made the worker take 8-20 page faults a miss where it took
 * 0.1-3 when a buffer lived only as long as its flight: the heap grew under
 * each burst of misses (docs/perf-log.md, "A corrupted node cache is never
 * served").  So chunk buffers are mappings of their own, out of malloc's
 * heap, populated when made (one call, not a fault a page), and go back to
 * a free list of their size class, up to CACHE_POOL_IDLE bytes of them: the
 * next flight takes one whose pages are there, or else the buffer of one of
 * the least recently used hot entries (evict.c), and maps a new one only
 * when neither has one of its size.  Beyond the bound idle ones are
 * unmapped: what a node keeps when idle is the hot LRU and that bound.
 *
 * Classes are 64 KiB << k and 96 KiB << k up to CACHE_POOL_MAX (a chunk's
 * size rounds up by at most half; a get takes the next two classes too when
 * its own is empty); larger buffers are mapped for the call and unmapped
 * when given back.  A buffer carries its class in a header in front of the
 * bytes handed out.  Loop thread only (decoder threads write into buffers,
 * never take or give them).
 */
#include <sys/mman.h>

#include "cache/cache-internal.h"

#define POOL_MIN_SHIFT 16               /* the smallest class: 64 KiB */
#define POOL_UNPOOLED UINT32_MAX

struct cache_buf {
	struct cache_buf *next;         /* on a free list */
	uint32_t cls;                   /* POOL_UNPOOLED: above CACHE_POOL_MAX */
	uint32_t cap;                   /* bytes after the header */
	uint8_t pad[48];                /* a cache line of header */
	uint8_t data[];
};

static uint64_t class_cap(uint32_t cls)
{
	uint64_t base = 1ULL << (POOL_MIN_SHIFT + cls / 2);

	return cls % 2 ? base + base / 2 : base;
}

/* The smallest class that holds size bytes, or POOL_UNPOOLED. */
static uint32_t class_of(uint64_t size)
{
	uint32_t cls = 0;

	if (size > CACHE_POOL_MAX)
		return POOL_UNPOOLED;
	while (class_cap(cls) < size)
		cls++;
	return cls;
}

/* A mapping of its own: see the file's comment. */
static struct cache_buf *buf_map(uint64_t cap)
{
	size_t len = (size_t)((sizeof(struct cache_buf) + cap + 4095) & ~4095ULL);
	struct cache_buf *b = mmap(NULL, len, PROT_READ | PROT_WRITE,
	                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

	return b == MAP_FAILED ? NULL : b;
}

static void buf_unmap(struct cache_buf *b)
{
	munmap(b, (size_t)((sizeof(*b) + b->cap + 4095) & ~4095ULL));
}

uint8_t *cache_buf_get(struct cache *c, uint64_t size)
{
	uint32_t cls = class_of(size ? size : 1);
	uint64_t cap = cls == POOL_UNPOOLED ? size : class_cap(cls);
	struct cache_buf *b;

	/* an idle buffer of its class, else of the next two (at most twice
	 * the size): mapping one costs a page fault a page */
	for (uint32_t k = cls; cls != POOL_UNPOOLED && k < CACHE_POOL_CLASSES && k <= cls + 2; k++) {
		b = c->pool_free[k];
		if (!b)
			continue;
		c->pool_free[k] = b->next;
		c->pool_idle -= b->cap;
		return b->data;
	}
	/* else one the hot LRU holds least recently: its bytes are a guess at
	 * a read to come, a fresh mapping a certain cost */
	if (cls != POOL_UNPOOLED) {
		uint8_t *data = cache_hot_take(c, cap, cls + 2 < CACHE_POOL_CLASSES ?
		                               class_cap(cls + 2) : class_cap(CACHE_POOL_CLASSES - 1));

		if (data)
			return data;
	}
	if (cap > UINT32_MAX)
		return NULL;
	b = buf_map(cap);
	if (!b)
		return NULL;
	b->cls = cls;
	b->cap = (uint32_t)cap;
	return b->data;
}

static struct cache_buf *buf_of(uint8_t *data)
{
	return (struct cache_buf *)(data - offsetof(struct cache_buf, data));
}

uint64_t cache_buf_cap(uint8_t *data)
{
	return buf_of(data)->cap;
}

void cache_buf_put(struct cache *c, uint8_t *data)
{
	struct cache_buf *b;

	if (!data)
		return;
	b = buf_of(data);
	if (b->cls == POOL_UNPOOLED || c->pool_idle + b->cap > c->pool_idle_limit) {
		buf_unmap(b);
		return;
	}
	b->next = c->pool_free[b->cls];
	c->pool_free[b->cls] = b;
	c->pool_idle += b->cap;
}

void cache_pool_destroy(struct cache *c)
{
	for (unsigned i = 0; i < CACHE_POOL_CLASSES; i++)
		while (c->pool_free[i]) {
			struct cache_buf *b = c->pool_free[i];

			c->pool_free[i] = b->next;
			buf_unmap(b);
		}
	c->pool_idle = 0;
}
