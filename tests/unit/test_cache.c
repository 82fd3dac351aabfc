/* test_cache.c — the chunk cache against real files, a real dir: store and a
 * real loop: hits and misses, single flight, eviction, corruption on disk and
 * in the store, a full cache disk, two daemons on one directory, counters,
 * verify and trim, neighbours fetched on a slow store only, whole-file
 * objects, and chunk files and objects that rot under a running cache. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "cache/cache-internal.h"
#include "lib/lib.h"
#include "lib/loop.h"
#include "store/store.h"

static char root[64], cdir[128];
static struct loop *loop;
static struct store *store;

static int setup(void **state)
{
	char url[128];

	strcpy(root, "/tmp/lazyroot-test-cache.XXXXXX");
	if (!mkdtemp(root))
		return -1;
	snprintf(cdir, sizeof(cdir), "%s/cache", root);
	snprintf(url, sizeof(url), "dir:%s/store", root);
	if (loop_new(64, &loop) < 0 || store_create(url, NULL, &store) < 0)
		return -1;
	return store_set_loop(store, loop);
}

static int teardown(void **state)
{
	char cmd[128];

	store_free(store);
	loop_free(loop);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : -1;
}

/* Deterministic bytes for chunk number i. */
static void fill(uint8_t *p, size_t n, unsigned i)
{
	uint64_t x = 0x9e3779b97f4a7c15ULL * (i + 1);

	for (size_t k = 0; k < n; k++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		/* compressible but not trivially */
		p[k] = (uint8_t)((k % 7 == 0) ? x : (k / 64 + i));
	}
}

/* Put chunk i of size n in the store; ret gets its description. */
static void put_chunk(unsigned i, size_t n, struct cache_chunk *ret)
{
	uint8_t *data = malloc(n);
	struct buf enc = BUF_INIT;
	char hex[HASH_HEX_SIZE], key[64];

	fill(data, n, i);
	memset(ret, 0, sizeof(*ret));
	hash128(data, n, ret->name);
	assert_int_equal(chunk_encode(NULL, 1, data, n, &enc, &ret->flags), 0);
	ret->size = (uint32_t)n;
	ret->stored_size = (uint32_t)enc.len;
	hex_encode(ret->name, HASH_SIZE, hex);
	snprintf(key, sizeof(key), "chunks/%s", hex);
	assert_int_equal(store_put_sync(store, key, enc.data, enc.len), 0);
	buf_free(&enc);
	free(data);
}

static void chunk_path(const struct cache_chunk *ch, char *out, size_t outlen)
{
	char hex[HASH_HEX_SIZE];

	hex_encode(ch->name, HASH_SIZE, hex);
	snprintf(out, outlen, "%s/chunks/%.2s/%s", cdir, hex, hex);
}

static struct cache *open_cache(uint64_t limit, uint64_t memory_limit)
{
	struct cache_params p = { .dir = cdir, .limit = limit, .memory_limit = memory_limit };
	struct cache *c = NULL;

	assert_int_equal(cache_open(&p, loop, &c), 0);
	return c;
}

struct res {
	int calls;
	int res;
};

static void res_cb(void *ud, int res)
{
	struct res *r = ud;

	r->calls++;
	r->res = res;
}

static void drain(void)
{
	while (loop_pending(loop))
		assert_true(loop_run_once(loop, true) >= 0);
}

/* Read [off, off+len) of chunk i through the cache and check the bytes. */
static int read_check(struct cache *c, unsigned i, const struct cache_chunk *ch, uint32_t off,
                      uint32_t len)
{
	uint8_t *want = malloc(ch->size), *got = malloc(len ? len : 1);
	struct res r = { 0 };

	fill(want, ch->size, i);
	assert_int_equal(cache_read(c, store, ch, off, len, got, -1, res_cb, &r), 0);
	assert_int_equal(r.calls, 0);  /* never from inside the call */
	drain();
	assert_int_equal(r.calls, 1);
	if (r.res >= 0) {
		assert_int_equal(r.res, len);
		assert_memory_equal(got, want + off, len);
	}
	free(want);
	free(got);
	return r.res;
}

static const struct cache_stats *stats(void)
{
	const struct cache_stats *st = NULL;

	assert_int_equal(cache_stats_map(cdir, &st), 0);
	return st;
}

static uint64_t fetches(const struct cache_stats *st)
{
	uint64_t n = 0;

	for (int i = 0; i < CACHE_LATENCY_BUCKETS; i++)
		n += st->fetch_latency[i];
	return n;
}

static void test_cache__miss_then_hit_at_offsets(void **state)
{
	struct cache_chunk ch[4];
	struct cache *c;
	const struct cache_stats *st;
	struct stat sb;
	char path[256];

	for (unsigned i = 0; i < 4; i++)
		put_chunk(i, 10000 + i * 7777, &ch[i]);
	c = open_cache(0, 1 << 20);
	st = stats();
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(read_check(c, i, &ch[i], 100, 5000), 5000);
	assert_int_equal(st->misses, 4);
	assert_int_equal(st->hits, 0);
	assert_int_equal(fetches(st), 4);
	/* the file holds exactly the decompressed bytes */
	chunk_path(&ch[2], path, sizeof(path));
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_size, ch[2].size);
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(read_check(c, i, &ch[i], 0, ch[i].size), (int)ch[i].size);
		assert_int_equal(read_check(c, i, &ch[i], ch[i].size - 1, 1), 1);
		assert_int_equal(read_check(c, i, &ch[i], 7, 0), 0);
	}
	assert_int_equal(st->hits, 12);
	assert_int_equal(fetches(st), 4);
	assert_int_equal(st->used, ch[0].size + ch[1].size + ch[2].size + ch[3].size);
	assert_int_equal(st->served_bytes,
	                 4 * 5000 + ch[0].size + ch[1].size + ch[2].size + ch[3].size + 4);
	assert_true(st->fetched_bytes < st->fetched_raw_bytes);
	assert_int_equal(st->inflight, 0);
	/* out of range: refused at once */
	assert_int_equal(cache_read(c, store, &ch[0], ch[0].size, 1, path, -1, res_cb, NULL),
	                 -EINVAL);
	cache_stats_unmap(st);
	cache_free(c);
}

/* Chunks read from a pack: the pack's bytes are used when good (the chunk
 * objects gone), and a chunk whose pack bytes fail, or a pack that is gone,
 * is fetched from its chunk object, counted as a verification failure. */
static void test_cache__pack_read_and_fallback(void **state)
{
	static const char pack_hex[] = "00112233445566778899aabbccddeeff";
	struct cache_chunk ch[3];
	struct buf pack = BUF_INIT, obj = BUF_INIT;
	struct cache *c;
	const struct cache_stats *st;
	char key[64], hex[HASH_HEX_SIZE], path[256], away[256];
	uint8_t pname[HASH_SIZE];

	assert_int_equal(hex_decode(pack_hex, pname, HASH_SIZE), 0);
	for (unsigned i = 0; i < 3; i++) {
		put_chunk(i, 20000 + i * 999, &ch[i]);
		hex_encode(ch[i].name, HASH_SIZE, hex);
		snprintf(key, sizeof(key), "chunks/%s", hex);
		assert_int_equal(store_get_sync(store, key, &obj), 0);
		ch[i].in_pack = true;
		memcpy(ch[i].pack, pname, HASH_SIZE);
		ch[i].pack_off = pack.len;
		assert_int_equal(buf_append(&pack, obj.data, obj.len), 0);
	}
	/* chunk 1's bytes in the pack are wrong */
	pack.data[ch[1].pack_off + ch[1].stored_size / 2] ^= 0x10;
	snprintf(key, sizeof(key), "packs/%s", pack_hex);
	assert_int_equal(store_put_sync(store, key, pack.data, pack.len), 0);
	/* the chunk objects gone: chunk 0 reads from the pack, chunk 1 fails */
	snprintf(path, sizeof(path), "%s/store/chunks", root);
	snprintf(away, sizeof(away), "%s/store/chunks.away", root);
	assert_int_equal(rename(path, away), 0);
	c = open_cache(0, 1 << 20);
	st = stats();
	assert_int_equal(read_check(c, 0, &ch[0], 10, 1000), 1000);
	assert_int_equal(st->verify_failures, 0);
	assert_int_equal(read_check(c, 1, &ch[1], 10, 1000), -EIO);
	assert_int_equal(st->verify_failures, 1);
	/* the chunk objects back: chunk 1 falls back to its object */
	assert_int_equal(rename(away, path), 0);
	assert_int_equal(read_check(c, 1, &ch[1], 10, 1000), 1000);
	assert_int_equal(st->verify_failures, 2);
	/* the pack gone: chunk 2 is fetched from its object */
	snprintf(path, sizeof(path), "%s/store/packs/%s", root, pack_hex);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(read_check(c, 2, &ch[2], 0, ch[2].size), (int)ch[2].size);
	assert_int_equal(st->verify_failures, 2);
	assert_int_equal(st->errors, 1);
	cache_stats_unmap(st);
	cache_free(c);
	buf_free(&pack);
	buf_free(&obj);
}

static void test_cache__single_flight(void **state)
{
	struct cache_chunk ch;
	struct cache *c;
	const struct cache_stats *st;
	static uint8_t bufs[100][4096];
	struct res r[100] = { { 0 } };
	uint8_t want[200000];

	put_chunk(7, sizeof(want), &ch);
	fill(want, sizeof(want), 7);
	c = open_cache(0, 1 << 20);
	st = stats();
	for (int i = 0; i < 100; i++)
		assert_int_equal(cache_read(c, store, &ch, (uint32_t)i * 1000, 4096, bufs[i], -1,
		                            res_cb, &r[i]), 0);
	drain();
	for (int i = 0; i < 100; i++) {
		assert_int_equal(r[i].res, 4096);
		assert_memory_equal(bufs[i], want + i * 1000, 4096);
	}
	assert_int_equal(fetches(st), 1);
	assert_int_equal(st->fetched_bytes, ch.stored_size);
	assert_int_equal(st->misses, 100);
	cache_stats_unmap(st);
	cache_free(c);
}

static void test_cache__eviction_keeps_limit_and_drops_lru(void **state)
{
	struct cache_chunk ch[8];
	struct cache *c;
	const struct cache_stats *st;
	char path[256];

	for (unsigned i = 0; i < 8; i++)
		put_chunk(i, 65536, &ch[i]);
	c = open_cache(4 * 65536, 1 << 20);
	st = stats();
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(read_check(c, i, &ch[i], 0, 10), 10);
	/* chunk 0 is used again: chunk 1 is now the coldest */
	assert_int_equal(read_check(c, 0, &ch[0], 0, 10), 10);
	assert_int_equal(read_check(c, 4, &ch[4], 0, 10), 10);
	assert_true(st->used <= 4 * 65536);
	chunk_path(&ch[1], path, sizeof(path));
	assert_int_equal(access(path, F_OK), -1);
	chunk_path(&ch[0], path, sizeof(path));
	assert_int_equal(access(path, F_OK), 0);
	for (unsigned i = 5; i < 8; i++)
		assert_int_equal(read_check(c, i, &ch[i], 100, 1000), 1000);
	assert_true(st->used <= 4 * 65536);
	assert_int_equal(st->evictions, 4);
	assert_int_equal(st->evicted_bytes, 4 * 65536);
	/* an evicted chunk reads back correctly (fetched again) */
	assert_int_equal(read_check(c, 1, &ch[1], 0, 65536), 65536);
	cache_stats_unmap(st);
	cache_free(c);
}

static void test_cache__corrupt_files_detected_on_reload(void **state)
{
	struct cache_chunk ch[3];
	struct cache *c;
	const struct cache_stats *st;
	char path[256];
	int fd;

	for (unsigned i = 0; i < 3; i++)
		put_chunk(i, 30000, &ch[i]);
	c = open_cache(0, 1 << 20);
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(read_check(c, i, &ch[i], 0, 100), 100);
	cache_free(c);
	/* one file flipped, one truncated, one left alone */
	chunk_path(&ch[0], path, sizeof(path));
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "\xff", 1, 12345), 1);
	close(fd);
	chunk_path(&ch[1], path, sizeof(path));
	assert_int_equal(truncate(path, 20000), 0);

	c = open_cache(0, 1 << 20);
	st = stats();
	assert_int_equal(st->used, 3 * 30000 - 10000);  /* recomputed by the scan */
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(read_check(c, i, &ch[i], 12000, 1000), 1000);
	assert_int_equal(st->verify_failures, 2);
	assert_int_equal(fetches(st), 3 + 2);
	assert_int_equal(st->used, 3 * 30000);
	/* fetched again: whole on disk */
	chunk_path(&ch[1], path, sizeof(path));
	{
		struct stat sb;

		assert_int_equal(stat(path, &sb), 0);
		assert_int_equal(sb.st_size, 30000);
	}
	cache_stats_unmap(st);
	cache_free(c);
}

/* Chunk buffers are reused: one given back is the one the next chunk of its
 * size class (or of one or two classes below) gets, its pages still there;
 * a buffer above the pool's largest class is not kept, nor are idle ones
 * past the pool's bound. */
static void test_cache__chunk_buffers_reused(void **state)
{
	struct cache_params p = { .dir = cdir };
	struct cache *c = NULL;
	uint8_t *a, *b, *big, *v[80];

	assert_int_equal(cache_open(&p, loop, &c), 0);
	a = cache_buf_get(c, 200000);
	assert_non_null(a);
	assert_int_equal(cache_buf_cap(a), 256 << 10);
	memset(a, 0x5a, 200000);
	cache_buf_put(c, a);
	assert_int_equal(c->pool_idle, 256 << 10);
	/* the same class, then two classes below: the same buffer */
	b = cache_buf_get(c, 170000);
	assert_ptr_equal(b, a);
	assert_int_equal(c->pool_idle, 0);
	cache_buf_put(c, b);
	b = cache_buf_get(c, 120000);
	assert_ptr_equal(b, a);
	cache_buf_put(c, b);
	/* three classes below: a buffer of its own */
	b = cache_buf_get(c, 90000);
	assert_ptr_not_equal(b, a);
	assert_int_equal(cache_buf_cap(b), 96 << 10);
	cache_buf_put(c, b);
	/* past the largest class: mapped for the call, never idle */
	big = cache_buf_get(c, CACHE_POOL_MAX + 1);
	assert_non_null(big);
	memset(big, 1, CACHE_POOL_MAX + 1);
	cache_buf_put(c, big);
	assert_int_equal(c->pool_idle, (256 << 10) + (96 << 10));
	/* idle buffers past the bound are unmapped */
	for (unsigned i = 0; i < 80; i++)
		assert_non_null(v[i] = cache_buf_get(c, 1 << 20));
	for (unsigned i = 0; i < 80; i++)
		cache_buf_put(c, v[i]);
	assert_true(c->pool_idle <= CACHE_POOL_IDLE);
	assert_true(c->pool_idle > CACHE_POOL_IDLE - (1 << 20));
	cache_free(c);
}

/* A chunk file that rots under the cache that wrote it: its next read from
 * the disk hashes it whole, so the reader gets the right bytes (fetched
 * again) and the file is dropped and counted; with the store unable to give
 * the chunk, the reader gets EIO, never the bad bytes.  Verified bytes kept
 * in memory (the hot LRU) are served without reading the file; once pushed
 * out of it by other reads, the file is read and checked again. */
static void test_cache__chunk_file_rotting_under_its_cache(void **state)
{
	struct cache_params p = { .dir = cdir, .memory_limit = 1 << 20, .hot_limit = 100000 };
	struct cache_chunk ch[3];
	struct cache *c = NULL;
	const struct cache_stats *st;
	char path[256], hex[HASH_HEX_SIZE], key[160];
	uint8_t buf[64];
	struct res r = { 0 };
	int fd;

	for (unsigned i = 0; i < 3; i++)
		put_chunk(i, 60000, &ch[i]);
	assert_int_equal(cache_open(&p, loop, &c), 0);
	st = stats();
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(read_check(c, i, &ch[i], 0, 100), 100);
	/* chunk 2's bytes are the ones in memory now (60000 of 100000) */
	for (unsigned i = 0; i < 3; i++) {
		chunk_path(&ch[i], path, sizeof(path));
		fd = open(path, O_RDWR);
		assert_true(fd >= 0);
		assert_int_equal(pwrite(fd, "\x5a", 1, 30000), 1);
		close(fd);
	}
	/* from memory: verified when fetched, the file is not read */
	assert_int_equal(read_check(c, 2, &ch[2], 29990, 20), 20);
	assert_int_equal(st->corrupt, 0);
	/* from the disk: each caught, dropped and fetched again */
	assert_int_equal(read_check(c, 0, &ch[0], 29990, 20), 20);
	assert_int_equal(st->corrupt, 1);
	assert_int_equal(st->verify_failures, 1);
	assert_int_equal(fetches(st), 3 + 1);
	/* chunk 0 refetched took the memory: chunk 2 now comes off the disk */
	assert_int_equal(read_check(c, 2, &ch[2], 0, 60000), 60000);
	assert_int_equal(st->corrupt, 2);
	assert_int_equal(fetches(st), 3 + 2);
	/* the store lost chunk 1 too: EIO, and the bad file is gone */
	hex_encode(ch[1].name, HASH_SIZE, hex);
	snprintf(key, sizeof(key), "%s/store/chunks/%.2s/%s", root, hex, hex);
	assert_int_equal(unlink(key), 0);
	assert_int_equal(cache_read(c, store, &ch[1], 29990, 20, buf, -1, res_cb, &r), 0);
	drain();
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.res, -EIO);
	assert_int_equal(st->corrupt, 3);
	chunk_path(&ch[1], path, sizeof(path));
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(st->used, 2 * 60000);
	cache_stats_unmap(st);
	cache_free(c);
}

static void test_cache__corrupt_store_chunk_fails_alone(void **state)
{
	struct cache_chunk good, bad;
	struct cache *c;
	const struct cache_stats *st;
	char hex[HASH_HEX_SIZE], key[64];
	struct buf b = BUF_INIT;

	put_chunk(1, 40000, &good);
	put_chunk(2, 40000, &bad);
	/* one byte flipped in the stored chunk */
	hex_encode(bad.name, HASH_SIZE, hex);
	snprintf(key, sizeof(key), "chunks/%s", hex);
	assert_int_equal(store_get_sync(store, key, &b), 0);
	b.data[b.len / 2] ^= 0x40;
	assert_int_equal(store_put_sync(store, key, b.data, b.len), 0);
	buf_free(&b);

	c = open_cache(0, 1 << 20);
	st = stats();
	log_verbosity = -1;
	assert_int_equal(read_check(c, 2, &bad, 0, 100), -EIO);
	assert_int_equal(read_check(c, 1, &good, 0, 100), 100);
	assert_int_equal(read_check(c, 2, &bad, 0, 100), -EIO);
	log_verbosity = LOG_WARN;
	assert_int_equal(st->verify_failures, 2);
	assert_int_equal(st->errors, 2);
	/* nothing of the bad chunk was kept */
	assert_int_equal(st->used, 40000);
	/* a chunk missing from the store fails the same way */
	bad.name[0] ^= 1;
	log_verbosity = -1;
	assert_int_equal(read_check(c, 2, &bad, 0, 100), -EIO);
	log_verbosity = LOG_WARN;
	assert_int_equal(st->errors, 3);
	cache_stats_unmap(st);
	cache_free(c);
}

static void test_cache__disk_full_serves_from_memory(void **state)
{
	struct cache_chunk ch[12];
	struct cache *c;
	const struct cache_stats *st;
	char opts[64];

	if (geteuid() != 0)
		skip();
	assert_int_equal(mkdir(cdir, 0755), 0);
	snprintf(opts, sizeof(opts), "size=256k");
	if (mount("tmpfs", cdir, "tmpfs", 0, opts) < 0)
		skip();
	for (unsigned i = 0; i < 12; i++)
		put_chunk(i, 65536, &ch[i]);
	/* the limit alone would keep everything: the disk runs out first */
	c = open_cache(1ULL << 30, 4 << 20);
	st = stats();
	for (int pass = 0; pass < 2; pass++)
		for (unsigned i = 0; i < 12; i++)
			assert_int_equal(read_check(c, i, &ch[i], 1000, 60000), 60000);
	assert_true(st->memory_served > 0);
	assert_int_equal(st->errors, 0);
	cache_stats_unmap(st);
	cache_free(c);
	assert_int_equal(umount(cdir), 0);
}

static void test_cache__two_instances_share_one_dir(void **state)
{
	struct cache_chunk ch[4];
	struct cache *a, *b;
	const struct cache_stats *st;
	uint64_t freed = 0;

	for (unsigned i = 0; i < 4; i++)
		put_chunk(i, 50000, &ch[i]);
	a = open_cache(0, 1 << 20);
	b = open_cache(0, 1 << 20);
	st = stats();
	assert_int_equal(read_check(a, 0, &ch[0], 0, 10), 10);
	assert_int_equal(read_check(b, 1, &ch[1], 0, 10), 10);
	/* b does not know a's file: its fetch finds it linked already */
	assert_int_equal(read_check(b, 0, &ch[0], 0, 10), 10);
	assert_int_equal(read_check(a, 1, &ch[1], 0, 10), 10);
	assert_int_equal(st->used, 2 * 50000);
	assert_int_equal(read_check(a, 2, &ch[2], 0, 10), 10);
	/* trim removes files under both daemons; they fetch again */
	assert_int_equal(cache_trim(cdir, 0, &freed), 0);
	assert_int_equal(freed, 3 * 50000);
	assert_int_equal(st->used, 0);
	assert_int_equal(read_check(b, 2, &ch[2], 0, 10), 10);
	assert_int_equal(read_check(a, 2, &ch[2], 5, 10), 10);
	assert_int_equal(read_check(a, 3, &ch[3], 5, 10), 10);
	assert_int_equal(st->used, 2 * 50000);
	cache_free(a);
	/* alone now: a new instance recomputes the gauge from the files */
	cache_free(b);
	a = open_cache(0, 1 << 20);
	assert_int_equal(st->used, 2 * 50000);
	cache_stats_unmap(st);
	cache_free(a);
}

static void test_cache__verify_and_trim_commands(void **state)
{
	struct cache_chunk ch[5];
	struct cache *c;
	const struct cache_stats *st;
	uint64_t checked = 0, dropped = 0, freed = 0;
	char path[256];
	int fd;

	for (unsigned i = 0; i < 5; i++)
		put_chunk(i, 20000, &ch[i]);
	c = open_cache(0, 1 << 20);
	for (unsigned i = 0; i < 5; i++)
		assert_int_equal(read_check(c, i, &ch[i], 0, 10), 10);
	st = stats();
	chunk_path(&ch[3], path, sizeof(path));
	fd = open(path, O_RDWR);
	assert_int_equal(pwrite(fd, "x", 1, 0), 1);
	close(fd);
	assert_int_equal(cache_verify(cdir, &checked, &dropped), 0);
	assert_int_equal(checked, 5);
	assert_int_equal(dropped, 1);
	assert_int_equal(st->used, 4 * 20000);
	/* oldest first: give the files distinct ages */
	for (unsigned i = 0; i < 5; i++) {
		struct timespec ts[2] = { { 1000 + i, 0 }, { 1000 + i, 0 } };

		chunk_path(&ch[i], path, sizeof(path));
		utimensat(AT_FDCWD, path, ts, 0);
	}
	assert_int_equal(cache_trim(cdir, 2 * 20000, &freed), 0);
	assert_int_equal(freed, 2 * 20000);
	assert_int_equal(st->used, 2 * 20000);
	chunk_path(&ch[0], path, sizeof(path));
	assert_int_equal(access(path, F_OK), -1);
	chunk_path(&ch[4], path, sizeof(path));
	assert_int_equal(access(path, F_OK), 0);
	/* the running cache copes: every chunk still reads back */
	for (unsigned i = 0; i < 5; i++)
		assert_int_equal(read_check(c, i, &ch[i], 19990, 10), 10);
	cache_stats_unmap(st);
	cache_free(c);
}

static void test_cache__prefetch_then_hit(void **state)
{
	struct cache_chunk ch;
	struct cache *c;
	const struct cache_stats *st;
	struct res r = { 0 };

	put_chunk(9, 70000, &ch);
	c = open_cache(0, 1 << 20);
	st = stats();
	assert_int_equal(cache_prefetch(c, store, &ch, -1, res_cb, &r), 0);
	drain();
	assert_int_equal(r.res, 0);
	assert_int_equal(st->misses, 0);
	assert_int_equal(read_check(c, 9, &ch, 0, 70000), 70000);
	assert_int_equal(st->hits, 1);
	assert_int_equal(fetches(st), 1);
	cache_stats_unmap(st);
	cache_free(c);
}

static void staged_path(const struct cache_chunk *ch, char *out, size_t outlen)
{
	char hex[HASH_HEX_SIZE];

	hex_encode(ch->name, HASH_SIZE, hex);
	snprintf(out, outlen, "%s/chunks/%.2s/%s.z", cdir, hex, hex);
}

static int stage(struct cache *c, const struct cache_chunk *ch)
{
	struct res r = { 0 };

	assert_int_equal(cache_stage(c, store, ch, res_cb, &r), 0);
	assert_int_equal(r.calls, 0);
	drain();
	assert_int_equal(r.calls, 1);
	return r.res;
}

/* Read through cache c with store s (an empty one: nothing can be fetched). */
static int read_from(struct cache *c, struct store *s, unsigned i, const struct cache_chunk *ch)
{
	struct store *keep = store;
	int r;

	store = s;
	r = read_check(c, i, ch, 0, ch->size);
	store = keep;
	return r;
}

static struct store *empty_store(void)
{
	struct store *s = NULL;
	char url[128];

	snprintf(url, sizeof(url), "dir:%s/empty", root);
	assert_int_equal(store_create(url, NULL, &s), 0);
	assert_int_equal(store_set_loop(s, loop), 0);
	return s;
}

/* Staging keeps the stored bytes as they are; the first read decodes and
 * verifies them, serves, and turns the staged object into the chunk file,
 * with no fetch; the gauges follow, also across a reopen. */
static void test_cache__staged_chunk_served_verified_and_converted(void **state)
{
	struct cache_chunk ch[3];
	struct store *empty = empty_store();
	struct cache *c;
	const struct cache_stats *st;
	uint64_t zbytes = 0;
	struct stat sb;
	char path[256];

	for (unsigned i = 0; i < 3; i++) {
		put_chunk(i, 50000 + i * 1000, &ch[i]);
		assert_true(ch[i].flags & CHUNK_ZSTD);
		zbytes += ch[i].stored_size;
	}
	c = open_cache(0, 1 << 20);
	st = stats();
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(stage(c, &ch[i]), 0);
	/* staged again: already there, no fetch */
	assert_int_equal(stage(c, &ch[0]), 0);
	assert_int_equal(fetches(st), 3);
	assert_int_equal(st->staged, 3);
	assert_int_equal(st->staged_bytes, zbytes);
	assert_int_equal(st->used, zbytes);
	staged_path(&ch[1], path, sizeof(path));
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_size, ch[1].stored_size);
	chunk_path(&ch[1], path, sizeof(path));
	assert_int_equal(access(path, F_OK), -1);

	/* the store is gone: served from the staged object */
	assert_int_equal(read_from(c, empty, 1, &ch[1]), (int)ch[1].size);
	assert_int_equal(fetches(st), 3);
	assert_int_equal(st->hits, 1);
	assert_int_equal(st->staged_used, 1);
	assert_int_equal(st->staged, 2);
	assert_int_equal(st->staged_bytes, zbytes - ch[1].stored_size);
	assert_int_equal(st->used, zbytes - ch[1].stored_size + ch[1].size);
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_size, ch[1].size);
	staged_path(&ch[1], path, sizeof(path));
	assert_int_equal(access(path, F_OK), -1);
	/* then a plain hit */
	assert_int_equal(read_from(c, empty, 1, &ch[1]), (int)ch[1].size);
	assert_int_equal(st->staged_used, 1);
	cache_free(c);

	/* a new daemon finds both kinds and recounts the same gauges */
	c = open_cache(0, 1 << 20);
	assert_int_equal(st->staged, 2);
	assert_int_equal(st->used, zbytes - ch[1].stored_size + ch[1].size);
	assert_int_equal(read_from(c, empty, 2, &ch[2]), (int)ch[2].size);
	assert_int_equal(read_from(c, empty, 1, &ch[1]), (int)ch[1].size);
	assert_int_equal(st->staged, 1);
	assert_int_equal(st->staged_used, 2);
	assert_int_equal(fetches(st), 3);
	cache_stats_unmap(st);
	cache_free(c);
	store_free(empty);
}

/* A staged object that fails verification is never served: dropped,
 * counted, and the chunk fetched; with no store to fetch from, only that
 * chunk's read fails.  A cut-short conversion (both files) keeps the chunk
 * file. */
static void test_cache__corrupt_staged_object_refetched(void **state)
{
	struct cache_chunk ch[3];
	struct store *empty = empty_store();
	struct cache *c;
	const struct cache_stats *st;
	char path[256];
	int fd;

	for (unsigned i = 0; i < 3; i++)
		put_chunk(i, 40000, &ch[i]);
	c = open_cache(0, 1 << 20);
	st = stats();
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(stage(c, &ch[i]), 0);
	for (unsigned i = 0; i < 2; i++) {
		staged_path(&ch[i], path, sizeof(path));
		fd = open(path, O_RDWR);
		assert_true(fd >= 0);
		assert_int_equal(pwrite(fd, "\x5a\xa5\x5a", 3, ch[i].stored_size / 2), 3);
		close(fd);
	}
	/* chunk 0: fetched again from the store */
	assert_int_equal(read_check(c, 0, &ch[0], 0, ch[0].size), (int)ch[0].size);
	assert_int_equal(st->verify_failures, 1);
	assert_int_equal(fetches(st), 4);
	assert_int_equal(st->misses, 1);
	staged_path(&ch[0], path, sizeof(path));
	assert_int_equal(access(path, F_OK), -1);
	/* chunk 1, no store: EIO, and the bad object is gone */
	assert_int_equal(read_from(c, empty, 1, &ch[1]), -EIO);
	assert_int_equal(st->verify_failures, 2);
	staged_path(&ch[1], path, sizeof(path));
	assert_int_equal(access(path, F_OK), -1);
	/* chunk 2 still served */
	assert_int_equal(read_from(c, empty, 2, &ch[2]), (int)ch[2].size);
	assert_int_equal(st->staged, 0);
	assert_int_equal(st->used, 2 * 40000);
	cache_free(c);

	/* a conversion cut short: the chunk file and a staged object */
	c = open_cache(0, 1 << 20);
	assert_int_equal(stage(c, &ch[1]), 0);
	cache_free(c);
	{
		char from[256], to[256];
		_cleanup_free_ char *cmd = NULL;

		staged_path(&ch[0], to, sizeof(to));
		staged_path(&ch[1], from, sizeof(from));
		/* chunk 0's chunk file is there; give it a (bad) staged twin */
		assert_true(asprintf(&cmd, "cp '%s' '%s'", from, to) > 0);
		assert_int_equal(system(cmd), 0);
	}
	c = open_cache(0, 1 << 20);
	staged_path(&ch[0], path, sizeof(path));
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(st->staged, 1);
	assert_int_equal(read_from(c, empty, 0, &ch[0]), (int)ch[0].size);
	assert_int_equal(read_from(c, empty, 1, &ch[1]), (int)ch[1].size);
	assert_int_equal(st->used, 3 * 40000);
	cache_stats_unmap(st);
	cache_free(c);
	store_free(empty);
}

/* Staged objects count against the limit and are evicted like chunks;
 * verify decodes and hashes them, trim removes them. */
static void test_cache__staged_objects_evicted_verified_trimmed(void **state)
{
	struct cache_chunk ch[6];
	struct cache *c;
	const struct cache_stats *st;
	uint64_t checked = 0, dropped = 0, freed = 0, limit, zbytes;
	unsigned present = 0;
	char path[256];
	int fd;

	for (unsigned i = 0; i < 6; i++)
		put_chunk(i, 65536, &ch[i]);
	limit = ch[0].stored_size * 3 + ch[0].stored_size / 2;
	c = open_cache(limit, 1 << 20);
	st = stats();
	for (unsigned i = 0; i < 6; i++)
		assert_int_equal(stage(c, &ch[i]), 0);
	assert_true(st->used <= limit);
	assert_true(st->evictions >= 2);
	for (unsigned i = 0; i < 6; i++) {
		staged_path(&ch[i], path, sizeof(path));
		present += access(path, F_OK) == 0;
	}
	assert_int_equal(present, st->staged);
	assert_true(present >= 2 && present <= 3);
	/* the oldest went first */
	staged_path(&ch[0], path, sizeof(path));
	assert_int_equal(access(path, F_OK), -1);
	staged_path(&ch[5], path, sizeof(path));
	assert_int_equal(access(path, F_OK), 0);
	cache_free(c);

	c = open_cache(0, 1 << 20);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "\x11\x22\x33", 3, ch[5].stored_size / 2), 3);
	close(fd);
	assert_int_equal(cache_verify(cdir, &checked, &dropped), 0);
	assert_int_equal(checked, present);
	assert_int_equal(dropped, 1);
	assert_int_equal(st->staged, present - 1);
	assert_int_equal(access(path, F_OK), -1);
	zbytes = st->staged_bytes;
	assert_true(zbytes > 0);
	assert_int_equal(cache_trim(cdir, 0, &freed), 0);
	assert_int_equal(freed, zbytes);
	assert_int_equal(st->staged, 0);
	assert_int_equal(st->staged_bytes, 0);
	assert_int_equal(st->used, 0);
	/* the running cache copes: fetched again */
	for (unsigned i = 0; i < 6; i++)
		assert_int_equal(read_check(c, i, &ch[i], 0, 100), 100);
	cache_stats_unmap(st);
	cache_free(c);
}

/* A read-ahead verifies chunk files an earlier daemon left (a plain prefetch
 * leaves them to the first read): a flipped file is found and fetched again
 * before any read of it, a good one is then read without a second check. */
static void test_cache__readahead_verifies_files_from_disk(void **state)
{
	struct cache_chunk ch[2];
	struct cache *c;
	const struct cache_stats *st;
	struct res r[2] = { { 0 } };
	char path[256];
	int fd;

	for (unsigned i = 0; i < 2; i++)
		put_chunk(i, 50000, &ch[i]);
	c = open_cache(0, 1 << 20);
	for (unsigned i = 0; i < 2; i++)
		assert_int_equal(read_check(c, i, &ch[i], 0, 100), 100);
	cache_free(c);
	chunk_path(&ch[0], path, sizeof(path));
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "\xff", 1, 40000), 1);
	close(fd);

	c = open_cache(0, 1 << 20);
	st = stats();
	assert_int_equal(cache_prefetch(c, store, &ch[0], -1, res_cb, &r[0]), 0);
	drain();
	assert_int_equal(r[0].calls, 1);
	assert_int_equal(st->verify_failures, 0);
	for (unsigned i = 0; i < 2; i++)
		assert_int_equal(cache_readahead(c, store, &ch[i], -1, res_cb, &r[i]), 0);
	assert_int_equal(r[1].calls, 0);  /* never from inside the call */
	drain();
	assert_int_equal(r[0].calls, 2);
	assert_int_equal(r[0].res, 0);
	assert_int_equal(r[1].calls, 1);
	assert_int_equal(r[1].res, 0);
	assert_int_equal(st->verify_failures, 1);
	assert_int_equal(fetches(st), 2 + 1);
	for (unsigned i = 0; i < 2; i++)
		assert_int_equal(read_check(c, i, &ch[i], 39990, 20), 20);
	assert_int_equal(st->verify_failures, 1);
	assert_int_equal(fetches(st), 2 + 1);
	assert_int_equal(st->hits, 2);
	cache_stats_unmap(st);
	cache_free(c);
}

static void test_cache__per_image_counters_and_slots(void **state)
{
	struct cache_chunk ch[3];
	struct cache *c;
	const struct cache_stats *st;
	uint8_t buf[100];
	struct res r = { 0 };
	int slot, slot2;
	pid_t child;

	for (unsigned i = 0; i < 3; i++)
		put_chunk(i, 10000, &ch[i]);
	c = open_cache(0, 1 << 20);
	st = stats();
	slot = cache_image_register(c, "00112233445566778899aabbccddeeff", 100000, "/mnt/x");
	assert_true(slot >= 0);
	assert_int_equal(st->images[slot].pid, getpid());
	assert_string_equal(st->images[slot].mountpoint, "/mnt/x");
	for (int k = 0; k < 3; k++)
		for (unsigned i = 0; i < 2; i++) {
			assert_int_equal(cache_read(c, store, &ch[i], 0, 100, buf, slot, res_cb, &r),
			                 0);
			drain();
		}
	assert_int_equal(st->images[slot].chunks_read, 2);
	assert_int_equal(st->images[slot].bytes_read, 20000);
	assert_int_equal(st->images[slot].bytes_served, 600);
	cache_image_unregister(c, slot);
	assert_int_equal(st->images[slot].pid, 0);

	/* a slot left by a dead daemon is taken over */
	child = fork();
	if (child == 0)
		_exit(0);
	waitpid(child, NULL, 0);
	cache_stats_unmap(st);
	{
		/* the test writes through its own writable mapping */
		int fd;
		char path[256];

		snprintf(path, sizeof(path), "%s/stats", cdir);
		fd = open(path, O_RDWR);
		assert_true(fd >= 0);
		for (int i = 0; i < CACHE_STATS_IMAGES; i++) {
			int32_t p = child;

			assert_int_equal(pwrite(fd, &p, sizeof(p),
			                        offsetof(struct cache_stats, images) +
			                                i * sizeof(struct cache_image_stats)),
			                 sizeof(p));
		}
		close(fd);
	}
	st = stats();
	slot2 = cache_image_register(c, "ff", 1, "/mnt/y");
	assert_true(slot2 >= 0);
	assert_int_equal(st->images[slot2].pid, getpid());
	assert_int_equal(st->images[slot2].chunks_read, 0);
	cache_stats_unmap(st);
	cache_free(c);
}

static struct cache *open_cache_near(uint32_t near_us)
{
	struct cache_params p = { .dir = cdir, .near_latency_us = near_us };
	struct cache *c = NULL;

	assert_int_equal(cache_open(&p, loop, &c), 0);
	return c;
}

static bool cached(const struct cache_chunk *ch)
{
	char path[256];

	chunk_path(ch, path, sizeof(path));
	return access(path, F_OK) == 0;
}

/* Read all of chunk i with neighbours near[0..nnear) and check the bytes. */
static void read_near_check(struct cache *c, unsigned i, const struct cache_chunk *ch,
                            const struct cache_chunk *near, unsigned nnear)
{
	uint8_t *want = malloc(ch->size), *got = malloc(ch->size);
	struct res r = { 0 };

	fill(want, ch->size, i);
	assert_int_equal(cache_read_near(c, store, ch, 0, ch->size, got, -1, near, nnear, res_cb,
	                                 &r), 0);
	assert_int_equal(r.calls, 0);
	drain();
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.res, (int)ch->size);
	assert_memory_equal(got, want, ch->size);
	free(want);
	free(got);
}

/* A store faster than the threshold (no fetch here takes 71 minutes): a miss
 * fetches only what is read, as cache_read() does. */
static void test_cache__near_not_fetched_from_a_fast_store(void **state)
{
	struct cache_chunk ch[6];
	const struct cache_stats *st;
	struct cache *c;

	for (unsigned i = 0; i < 6; i++)
		put_chunk(i, 20000 + i * 1000, &ch[i]);
	c = open_cache_near(UINT32_MAX - 1);
	st = stats();
	for (unsigned i = 0; i < 4; i++)
		read_near_check(c, i, &ch[i], &ch[i + 1], 2);
	assert_false(cache_store_slow(c));
	assert_int_equal(fetches(st), 4);
	assert_int_equal(st->misses, 4);
	assert_int_equal(st->near_fetches, 0);
	assert_false(cached(&ch[4]));
	assert_false(cached(&ch[5]));
	cache_stats_unmap(st);
	cache_free(c);
}

/* A store slower than the threshold (every fetch takes 1 µs or more): once
 * two lone fetches have shown it, a miss also fetches its neighbours, which
 * the next reads then hit; a hit fetches nothing more. */
static void test_cache__near_fetched_from_a_slow_store(void **state)
{
	struct cache_chunk ch[8];
	const struct cache_stats *st;
	struct cache *c;

	for (unsigned i = 0; i < 8; i++)
		put_chunk(i, 20000 + i * 1000, &ch[i]);
	c = open_cache_near(1);
	st = stats();
	/* not known slow before two lone fetches: of two started together,
	 * the second queued behind the first and does not count */
	assert_false(cache_store_slow(c));
	{
		uint8_t *a = malloc(ch[0].size), *b = malloc(ch[6].size);
		struct res ra = { 0 }, rb = { 0 };

		assert_int_equal(cache_read(c, store, &ch[0], 0, ch[0].size, a, -1, res_cb, &ra), 0);
		assert_int_equal(cache_read(c, store, &ch[6], 0, ch[6].size, b, -1, res_cb, &rb), 0);
		drain();
		assert_int_equal(ra.res, (int)ch[0].size);
		assert_int_equal(rb.res, (int)ch[6].size);
		free(a);
		free(b);
	}
	assert_int_equal(fetches(st), 2);
	assert_false(cache_store_slow(c));
	read_near_check(c, 7, &ch[7], &ch[1], 1);
	assert_false(cached(&ch[1]));
	assert_int_equal(fetches(st), 3);
	assert_true(cache_store_slow(c));
	/* a miss on 1 fetches 2, 3 and 4 too */
	read_near_check(c, 1, &ch[1], &ch[2], 3);
	assert_int_equal(fetches(st), 7);
	assert_int_equal(st->near_fetches, 3);
	assert_int_equal(st->misses, 4);
	for (unsigned i = 2; i <= 4; i++)
		assert_true(cached(&ch[i]));
	assert_false(cached(&ch[5]));
	/* the neighbours are hits; a hit asks for no neighbours */
	read_near_check(c, 2, &ch[2], &ch[5], 1);
	read_near_check(c, 3, &ch[3], &ch[5], 1);
	assert_int_equal(st->hits, 2);
	assert_int_equal(fetches(st), 7);
	assert_false(cached(&ch[5]));
	/* neighbours that are cached already are not fetched again */
	read_near_check(c, 5, &ch[5], &ch[2], 3);
	assert_int_equal(fetches(st), 8);
	assert_int_equal(st->near_fetches, 3);
	assert_int_equal(st->misses, 5);
	assert_int_equal(st->inflight, 0);
	cache_stats_unmap(st);
	cache_free(c);
}

/* cache_file_open() until it stops answering -EAGAIN (the worker making or
 * checking the object has not posted its result yet). */
static int file_open_wait(struct cache *c, const struct cache_piece *p, unsigned n)
{
	int r;

	for (int i = 0; i < 10000; i++) {
		r = cache_file_open(c, p, n, true, NULL, NULL);
		if (r != -EAGAIN)
			return r;
		if (loop_run_once(loop, true) == 0)
			usleep(1000);
	}
	return r;
}

static void fd_equal(int fd, const uint8_t *want, size_t len)
{
	uint8_t *got = malloc(len + 1);
	struct stat sb;

	assert_int_equal(fstat(fd, &sb), 0);
	assert_int_equal(sb.st_size, len);
	assert_int_equal(pread_full(fd, got, len + 1, 0), len);
	assert_memory_equal(got, want, len);
	assert_true((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY);
	free(got);
}

static void object_path(char *out, size_t outlen)
{
	char cmd[256];
	FILE *f;

	snprintf(cmd, sizeof(cmd), "ls -d %s/files/* 2>/dev/null", cdir);
	f = popen(cmd, "r");
	assert_non_null(f);
	out[0] = 0;
	if (!fgets(out, (int)outlen, f))
		out[0] = 0;
	out[strcspn(out, "\n")] = 0;
	pclose(f);
}

/* Whole-file objects: made only when every chunk is on disk, with the bytes
 * of the pieces, counted in `used`; checked once by a new cache (a waiter is
 * told when), a flipped one dropped and made again; evicted before chunks. */
static void test_cache__whole_file_objects(void **state)
{
	struct cache_piece p[3];
	struct cache_chunk extra[6];
	uint8_t *want, *chunk;
	size_t len = 0;
	struct cache *c;
	const struct cache_stats *st;
	struct res r = { 0 };
	char path[256];
	uint64_t chunks_bytes = 0;
	int fd;

	put_chunk(40, 256 << 10, &p[0].ch);
	put_chunk(41, 300 << 10, &p[1].ch);
	put_chunk(42, 200 << 10, &p[2].ch);
	p[0].off = 0, p[0].len = p[0].ch.size;
	p[1].off = 1000, p[1].len = 100000;        /* a piece of a shared chunk */
	p[2].off = 0, p[2].len = p[2].ch.size;
	want = malloc(1 << 20);
	chunk = malloc(1 << 20);
	for (unsigned i = 0; i < 3; i++) {
		fill(chunk, p[i].ch.size, 40 + i);
		memcpy(want + len, chunk + p[i].off, p[i].len);
		len += p[i].len;
		chunks_bytes += p[i].ch.size;
	}

	c = open_cache(64 << 20, 1 << 20);
	st = stats();
	/* nothing cached: nothing started */
	assert_int_equal(cache_file_open(c, p, 3, true, NULL, NULL), -ENOENT);
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(cache_prefetch(c, store, &p[i].ch, -1, res_cb, &r), 0);
	drain();
	/* asked only to use one: none is made */
	assert_int_equal(cache_file_open(c, p, 3, false, NULL, NULL), -ENOENT);
	assert_int_equal(st->files_made, 0);
	assert_int_equal(cache_file_open(c, p, 3, true, NULL, NULL), -EAGAIN);
	fd = file_open_wait(c, p, 3);
	assert_true(fd >= 0);
	fd_equal(fd, want, len);
	assert_int_equal(st->files_made, 1);
	assert_int_equal(st->used, chunks_bytes + len);
	cache_free(c);

	/* a new cache checks it before handing it out, and says when */
	c = open_cache(64 << 20, 1 << 20);
	memset(&r, 0, sizeof(r));
	assert_int_equal(cache_file_open(c, p, 3, true, res_cb, &r), -EINPROGRESS);
	assert_int_equal(r.calls, 0);
	while (!r.calls)
		assert_true(loop_run_once(loop, true) >= 0);
	assert_int_equal(r.res, 0);
	fd = cache_file_open(c, p, 3, true, NULL, NULL);
	assert_true(fd >= 0);
	fd_equal(fd, want, len);
	assert_int_equal(st->files_made, 1);
	assert_int_equal(st->used, chunks_bytes + len);
	cache_free(c);

	/* flipped on disk: dropped when checked, made again */
	object_path(path, sizeof(path));
	assert_true(path[0]);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "X", 1, 5000), 1);
	close(fd);
	c = open_cache(64 << 20, 1 << 20);
	memset(&r, 0, sizeof(r));
	assert_int_equal(cache_file_open(c, p, 3, true, res_cb, &r), -EINPROGRESS);
	while (!r.calls)
		assert_true(loop_run_once(loop, true) >= 0);
	assert_int_equal(r.res, -EBADMSG);
	assert_int_equal(st->file_failures, 1);
	assert_int_equal(st->used, chunks_bytes);
	fd = file_open_wait(c, p, 3);
	assert_true(fd >= 0);
	fd_equal(fd, want, len);
	assert_int_equal(st->files_made, 2);
	cache_free(c);

	/* over the limit: the object goes first, the newer chunks stay */
	c = open_cache(chunks_bytes + len + (1 << 20), 1 << 20);
	for (unsigned i = 0; i < 6; i++) {
		put_chunk(50 + i, 256 << 10, &extra[i]);
		assert_int_equal(cache_prefetch(c, store, &extra[i], -1, res_cb, &r), 0);
	}
	drain();
	object_path(path, sizeof(path));
	assert_false(path[0]);
	assert_true(st->evictions >= 1);
	assert_true(st->used <= chunks_bytes + len + (1 << 20));
	cache_free(c);
	cache_stats_unmap(st);
	free(want);
	free(chunk);
}

/* Wait for an -EINPROGRESS answer of cache_file_open or cache_file_held. */
static int file_wait(struct res *r)
{
	while (!r->calls)
		assert_true(loop_run_once(loop, true) >= 0);
	return r->res;
}

/* Have the kernel reclaim this process's mapping of the object (its pages
 * out of the page tables, as memory pressure would do); false when it has
 * no mapping of it.  Found by inode: a mapping of an object made through
 * O_TMPFILE carries the name it had then. */
static bool page_out_object(void)
{
	char path[256], line[512];
	bool found = false;
	struct stat sb;
	FILE *f;
	int fd;

	object_path(path, sizeof(path));
	assert_true(path[0]);
	/* written back first: a dirty page is not reclaimed at once */
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(fsync(fd), 0);
	assert_int_equal(fstat(fd, &sb), 0);
	close(fd);
	f = fopen("/proc/self/maps", "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long a, b, ino;

		if (sscanf(line, "%lx-%lx %*s %*s %*s %lu", &a, &b, &ino) != 3 || ino != sb.st_ino)
			continue;
		assert_int_equal(madvise((void *)a, b - a, MADV_PAGEOUT), 0);
		found = true;
	}
	fclose(f);
	return found;
}

/* Whole-file objects that rot under the cache that made them: a new
 * registration re-hashes the object unless its pages stayed in memory and the
 * file unwritten since its check (a flipped one is dropped, counted, and made
 * again from the chunks); one unlinked by another process under a live
 * registration (`cache verify`, `cache trim`) is re-hashed through its
 * descriptor before another open may share it: refused when bad, allowed
 * when good. */
static void test_cache__whole_file_objects_rotting(void **state)
{
	struct cache_piece p[2];
	uint8_t *want = malloc(600 << 10), *chunk = malloc(300 << 10);
	const struct cache_stats *st;
	struct cache *c;
	struct res r = { 0 };
	char path[256];
	size_t len = 0;
	uint64_t checked, dropped, freed;
	int fd;

	put_chunk(60, 256 << 10, &p[0].ch);
	put_chunk(61, 300 << 10, &p[1].ch);
	for (unsigned i = 0; i < 2; i++) {
		p[i].off = 0, p[i].len = p[i].ch.size;
		fill(chunk, p[i].ch.size, 60 + i);
		memcpy(want + len, chunk, p[i].len);
		len += p[i].len;
	}
	c = open_cache(64 << 20, 1 << 20);
	st = stats();
	for (unsigned i = 0; i < 2; i++)
		assert_int_equal(cache_prefetch(c, store, &p[i].ch, -1, res_cb, &r), 0);
	drain();
	fd = file_open_wait(c, p, 2);
	assert_true(fd >= 0);
	fd_equal(fd, want, len);
	/* a second registration: its pages in memory since checked and the
	 * file not written, no re-hash needed */
	fd = cache_file_open(c, p, 2, false, res_cb, &r);
	assert_true(fd >= 0);
	fd_equal(fd, want, len);
	assert_int_equal(cache_file_held(c, p, 2, NULL, NULL), 0);
	/* its pages reclaimed since (they could be read again from a disk
	 * that rotted): the next registration re-hashes it */
	assert_true(page_out_object());
	memset(&r, 0, sizeof(r));
	assert_int_equal(cache_file_open(c, p, 2, false, res_cb, &r), -EINPROGRESS);
	assert_int_equal(file_wait(&r), 0);
	fd = cache_file_open(c, p, 2, false, res_cb, &r);
	assert_true(fd >= 0);
	fd_equal(fd, want, len);
	/* and, its pages mapped again by that hash, the one after does not */
	fd = cache_file_open(c, p, 2, false, res_cb, &r);
	assert_true(fd >= 0);

	/* flipped: the next registration finds it and gets none */
	object_path(path, sizeof(path));
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "X", 1, 7000), 1);
	close(fd);
	memset(&r, 0, sizeof(r));
	assert_int_equal(cache_file_open(c, p, 2, false, res_cb, &r), -EINPROGRESS);
	assert_int_equal(file_wait(&r), -EBADMSG);
	assert_int_equal(st->corrupt, 1);
	assert_int_equal(st->file_failures, 1);
	object_path(path, sizeof(path));
	assert_false(path[0]);
	/* a registration made before it was found must not be shared */
	assert_int_equal(cache_file_held(c, p, 2, NULL, NULL), -EBADMSG);
	assert_int_equal(cache_file_open(c, p, 2, false, NULL, NULL), -ENOENT);
	/* made again from the chunks */
	fd = file_open_wait(c, p, 2);
	assert_true(fd >= 0);
	fd_equal(fd, want, len);
	assert_int_equal(st->files_made, 2);
	assert_int_equal(cache_file_held(c, p, 2, NULL, NULL), 0);

	/* flipped and dropped by `cache verify` under a live registration */
	object_path(path, sizeof(path));
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "Y", 1, 9000), 1);
	close(fd);
	assert_int_equal(cache_verify(cdir, &checked, &dropped), 0);
	assert_int_equal(dropped, 1);
	assert_int_equal(st->corrupt, 2);
	memset(&r, 0, sizeof(r));
	assert_int_equal(cache_file_held(c, p, 2, res_cb, &r), -EINPROGRESS);
	assert_int_equal(file_wait(&r), -EBADMSG);
	assert_int_equal(cache_file_held(c, p, 2, NULL, NULL), -EBADMSG);
	assert_int_equal(st->corrupt, 3);
	/* the next registration is made anew, from the chunks */
	assert_int_equal(cache_file_open(c, p, 2, false, NULL, NULL), -ENOENT);
	fd = file_open_wait(c, p, 2);
	assert_true(fd >= 0);
	fd_equal(fd, want, len);

	/* a good object trimmed under a live registration stays shareable */
	assert_int_equal(cache_trim(cdir, 0, &freed), 0);
	object_path(path, sizeof(path));
	assert_false(path[0]);
	memset(&r, 0, sizeof(r));
	assert_int_equal(cache_file_held(c, p, 2, res_cb, &r), -EINPROGRESS);
	assert_int_equal(file_wait(&r), 0);
	assert_int_equal(cache_file_held(c, p, 2, NULL, NULL), 0);
	assert_int_equal(st->corrupt, 3);
	cache_stats_unmap(st);
	cache_free(c);
	free(want);
	free(chunk);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_cache__miss_then_hit_at_offsets, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache__single_flight, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache__chunk_buffers_reused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache__pack_read_and_fallback, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache__eviction_keeps_limit_and_drops_lru, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_cache__corrupt_files_detected_on_reload, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_cache__corrupt_store_chunk_fails_alone, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_cache__disk_full_serves_from_memory, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_cache__two_instances_share_one_dir, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_cache__verify_and_trim_commands, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache__prefetch_then_hit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache__staged_chunk_served_verified_and_converted,
		                                setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache__corrupt_staged_object_refetched, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_cache__staged_objects_evicted_verified_trimmed,
		                                setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache__readahead_verifies_files_from_disk, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_cache__per_image_counters_and_slots, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_cache__near_not_fetched_from_a_fast_store, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_cache__near_fetched_from_a_slow_store, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_cache__whole_file_objects, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache__chunk_file_rotting_under_its_cache, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_cache__whole_file_objects_rotting, setup,
		                                teardown),
	};

	return cmocka_run_group_tests_name("cache", tests, NULL, NULL);
}
