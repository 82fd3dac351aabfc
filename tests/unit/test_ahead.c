/* test_ahead.c — the prefetch engine below FUSE (fs/ahead.h) against a real
 * image, a real dir: store, a real cache and a real loop: which chunks a
 * followed profile, a sequential reader and a miss on a slow store make the
 * cache fetch, and which they must not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sys/stat.h>

#include "cache/cache.h"
#include "fs/ahead.h"
#include "image/image.h"
#include "lib/lib.h"
#include "lib/loop.h"
#include "store/store.h"

#define NCHUNKS 40
#define CHUNK 4096
#define BIG_CHUNKS 20   /* "big" is chunks 0..19; "f20".."f39" one chunk each */

static char root[64], cdir[128];
static struct loop *loop;
static struct store *store;
static struct cache *cache;
static struct image *img;
static struct buf index_buf;
static char index_hex[HASH_HEX_SIZE];
static uint8_t index_name[HASH_SIZE];
static struct image_chunk chunks[NCHUNKS];
static uint64_t big_ino, small_ino[NCHUNKS];

static void fill(uint8_t *p, size_t n, unsigned i)
{
	for (size_t k = 0; k < n; k++)
		p[k] = (uint8_t)(k * 31 + i * 7 + (k >> 5));
}

/* Chunk i into the store, described in chunks[i]. */
static void put_chunk(unsigned i)
{
	uint8_t data[CHUNK];
	struct buf enc = BUF_INIT;
	char hex[HASH_HEX_SIZE], key[64];
	struct image_chunk *c = &chunks[i];

	fill(data, sizeof(data), i);
	memset(c, 0, sizeof(*c));
	hash128(data, sizeof(data), c->name);
	assert_int_equal(chunk_encode(NULL, 1, data, sizeof(data), &enc, &c->flags), 0);
	c->size = CHUNK;
	c->stored_size = (uint32_t)enc.len;
	hex_encode(c->name, HASH_SIZE, hex);
	snprintf(key, sizeof(key), "chunks/%s", hex);
	assert_int_equal(store_put_sync(store, key, enc.data, enc.len), 0);
	buf_free(&enc);
}

static int setup(void **state)
{
	struct image_attr a = { .mode = S_IFDIR | 0755 };
	struct image_tree *t;
	struct image_inode *ino;
	char url[128], name[16];

	strcpy(root, "/tmp/lazyroot-test-ahead.XXXXXX");
	if (!mkdtemp(root))
		return -1;
	snprintf(cdir, sizeof(cdir), "%s/cache", root);
	snprintf(url, sizeof(url), "dir:%s/store", root);
	if (loop_new(64, &loop) < 0 || store_create(url, NULL, &store) < 0 ||
	    store_set_loop(store, loop) < 0)
		return -1;
	if (image_tree_new(&t) < 0 || image_tree_add(t, "", &a, NULL) < 0)
		return -1;
	for (unsigned i = 0; i < NCHUNKS; i++) {
		put_chunk(i);
		if (image_tree_new_chunk(t) != (int64_t)i || image_tree_set_chunk(t, i, &chunks[i]) < 0)
			return -1;
	}
	a.mode = S_IFREG | 0644;
	if (image_tree_add(t, "big", &a, &ino) < 0)
		return -1;
	image_inode_set_size(ino, (uint64_t)BIG_CHUNKS * CHUNK);
	for (unsigned i = 0; i < BIG_CHUNKS; i++)
		if (image_inode_add_extent(ino, (uint64_t)i * CHUNK, i, 0, CHUNK) < 0)
			return -1;
	for (unsigned i = BIG_CHUNKS; i < NCHUNKS; i++) {
		snprintf(name, sizeof(name), "f%u", i);
		if (image_tree_add(t, name, &a, &ino) < 0)
			return -1;
		image_inode_set_size(ino, CHUNK);
		if (image_inode_add_extent(ino, 0, i, 0, CHUNK) < 0)
			return -1;
	}
	if (image_write(t, &index_buf) < 0)
		return -1;
	image_tree_free(t);
	hash128(index_buf.data, index_buf.len, index_name);
	hex_encode(index_name, HASH_SIZE, index_hex);
	if (image_open_mem(index_buf.data, index_buf.len, &img) < 0 ||
	    image_lookup(img, IMAGE_ROOT_INO, "big", 3, &big_ino) < 0)
		return -1;
	for (unsigned i = BIG_CHUNKS; i < NCHUNKS; i++) {
		snprintf(name, sizeof(name), "f%u", i);
		if (image_lookup(img, IMAGE_ROOT_INO, name, strlen(name), &small_ino[i]) < 0)
			return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	image_free(img);
	buf_free(&index_buf);
	store_free(store);
	loop_free(loop);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : -1;
}

/* Each test starts from an empty cache. */
static int cache_fresh(void **state)
{
	struct cache_params p = { .dir = cdir, .limit = 64 << 20, .memory_limit = 1 << 20 };
	char cmd[200];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", cdir);
	if (system(cmd) != 0)
		return -1;
	return cache_open(&p, loop, &cache);
}

static int cache_close(void **state)
{
	cache_free(cache);
	cache = NULL;
	return 0;
}

static void drain(void)
{
	while (loop_pending(loop))
		assert_true(loop_run_once(loop, true) >= 0);
}

/* Is chunk i in the cache's directory (fetched, decoded, written)? */
static bool cached(unsigned i)
{
	char hex[HASH_HEX_SIZE], path[256];
	struct stat st;

	hex_encode(chunks[i].name, HASH_SIZE, hex);
	snprintf(path, sizeof(path), "%s/chunks/%.2s/%s", cdir, hex, hex);
	return stat(path, &st) == 0;
}

static uint64_t profile_fetches(void)
{
	const struct cache_stats *st;
	uint64_t n;

	assert_int_equal(cache_stats_map(cdir, &st), 0);
	n = st->profile_fetches;
	cache_stats_unmap(st);
	return n;
}

static struct ahead *engine(const struct image_profile *prof, unsigned window, unsigned readahead,
                            bool record)
{
	struct ahead_params p = {
		.image = img,
		.index_hex = index_hex,
		.name = "test",
		.store = store,
		.cache = cache,
		.slot = -1,
		.record = record,
		.profile = prof,
		.profile_window = window,
		.profile_bytes = 1 << 20,
		.profile_inflight = 4,
		.readahead_chunks = readahead,
		.seq_slack = 2 * CHUNK,
	};
	struct ahead *a = NULL;

	assert_int_equal(ahead_new(&p, &a), 0);
	return a;
}

static void done(struct ahead *a)
{
	drain();
	assert_false(ahead_busy(a));
	ahead_free(a);
}

static struct image_profile *profile_of(const uint8_t *index, const uint32_t *const traces[],
                                        const size_t lens[], size_t n)
{
	struct image_profile *p = NULL;

	assert_int_equal(image_profile_new(index, &p), 0);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(image_profile_add_trace(p, traces[i], lens[i]), 0);
	return p;
}

/* One trace: a read of position p fetches positions p+1..p+window, and the
 * window moves with the reader; nothing before the first read. */
static void test_ahead__profile_window_follows_reader(void **state)
{
	uint32_t tr[NCHUNKS];
	const uint32_t *trs[] = { tr };
	size_t lens[] = { NCHUNKS };
	struct image_profile *prof;
	struct ahead *a;

	for (unsigned i = 0; i < NCHUNKS; i++)
		tr[i] = NCHUNKS - 1 - i;        /* the trace runs backwards */
	prof = profile_of(index_name, trs, lens, 1);
	a = engine(prof, 8, 0, false);
	ahead_pump(a);
	drain();
	assert_int_equal(profile_fetches(), 0);

	ahead_touch(a, 39);                     /* position 0 */
	ahead_pump(a);
	drain();
	assert_int_equal(profile_fetches(), 8);
	for (unsigned c = 31; c <= 38; c++)
		assert_true(cached(c));
	assert_false(cached(30));

	ahead_touch(a, 34);                     /* position 5: the window reaches 13 */
	ahead_pump(a);
	drain();
	assert_int_equal(profile_fetches(), 13);
	assert_true(cached(26));
	assert_false(cached(25));
	done(a);
	image_profile_free(prof);
}

/* While two traces match the reads equally, only the chunks both read are
 * fetched; once one leads, its own chunks come too. */
static void test_ahead__profile_tied_traces_share(void **state)
{
	static const uint32_t ta[] = { 0, 1, 2, 3, 10, 11 }, tb[] = { 0, 1, 2, 3, 20, 21 };
	const uint32_t *trs[] = { ta, tb };
	size_t lens[] = { 6, 6 };
	struct image_profile *prof = profile_of(index_name, trs, lens, 2);
	struct ahead *a = engine(prof, 8, 0, false);

	ahead_touch(a, 0);
	ahead_pump(a);
	drain();
	assert_true(cached(1) && cached(2) && cached(3));
	assert_false(cached(10) || cached(11) || cached(20) || cached(21));

	ahead_touch(a, 10);                     /* trace a leads alone */
	ahead_pump(a);
	drain();
	assert_true(cached(11));
	assert_false(cached(20) || cached(21));
	done(a);
	image_profile_free(prof);
}

/* A profile of another index is ignored: no fetch, no error. */
static void test_ahead__profile_of_other_index_ignored(void **state)
{
	static const uint32_t t0[] = { 0, 1, 2, 3 };
	const uint32_t *trs[] = { t0 };
	size_t lens[] = { 4 };
	uint8_t other[HASH_SIZE];
	struct image_profile *prof;
	struct ahead *a;

	memcpy(other, index_name, sizeof(other));
	other[0] ^= 1;
	prof = profile_of(other, trs, lens, 1);
	a = engine(prof, 8, 0, false);
	ahead_touch(a, 0);
	ahead_pump(a);
	drain();
	assert_int_equal(profile_fetches(), 0);
	assert_false(cached(1));
	done(a);
	image_profile_free(prof);
}

/* A read that continues its file's run fetches readahead_chunks chunks past
 * its end; a read elsewhere in the file fetches nothing. */
static void test_ahead__sequential_reader_reads_ahead(void **state)
{
	struct ahead *a = engine(NULL, 0, 3, false);

	ahead_read(a, big_ino, 0, CHUNK, true);         /* starts the stream */
	drain();
	assert_false(cached(1));
	ahead_read(a, big_ino, CHUNK, CHUNK, true);     /* continues it */
	drain();
	assert_true(cached(2) && cached(3) && cached(4));
	assert_false(cached(5));

	ahead_read(a, big_ino, 15 * CHUNK, CHUNK, true); /* a jump: a new position */
	drain();
	assert_false(cached(16));
	ahead_read(a, big_ino, 16 * CHUNK, CHUNK, false); /* the read failed */
	drain();
	assert_false(cached(17));
	done(a);
}

/* With a miss on a slow store: a file small enough to be read whole brings
 * its other chunks, a small file also the chunks built after it. */
static void test_ahead__near_chunks(void **state)
{
	struct cache_chunk near[AHEAD_NEAR_MAX];
	struct ahead *a = engine(NULL, 0, 0, false);
	unsigned n;

	/* big (80 KiB) is small too: its 20 chunks, then the 4 after them */
	n = ahead_near(a, big_ino, (uint64_t)BIG_CHUNKS * CHUNK, near);
	assert_int_equal(n, BIG_CHUNKS + 4);
	for (unsigned i = 0; i < n; i++)
		assert_memory_equal(near[i].name, chunks[i].name, HASH_SIZE);
	/* past 8 MiB a file is not read whole: nothing comes with a miss */
	assert_int_equal(ahead_near(a, big_ino, (9ull << 20), near), 0);

	n = ahead_near(a, small_ino[25], CHUNK, near);
	assert_int_equal(n, 5);                 /* its own and the 4 after it */
	for (unsigned i = 0; i < n; i++)
		assert_memory_equal(near[i].name, chunks[25 + i].name, HASH_SIZE);

	n = ahead_near(a, small_ino[38], CHUNK, near);
	assert_int_equal(n, 2);                 /* the image ends after 39 */
	done(a);
}

/* Recording notes each chunk once, in the order first read. */
static void test_ahead__record_first_reads(void **state)
{
	struct ahead *a = engine(NULL, 0, 0, true);
	const uint32_t *v;
	size_t n;

	assert_true(ahead_touch(a, 7));
	assert_true(ahead_touch(a, 3));
	assert_false(ahead_touch(a, 7));        /* a second touch is not a first */
	assert_true(ahead_touch(a, 12));
	assert_false(ahead_touch(a, NCHUNKS + 5));   /* not a chunk of the image */
	v = ahead_trace(a, &n);
	assert_int_equal(n, 3);
	assert_int_equal(v[0], 7);
	assert_int_equal(v[1], 3);
	assert_int_equal(v[2], 12);
	done(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_ahead__profile_window_follows_reader,
		                                cache_fresh, cache_close),
		cmocka_unit_test_setup_teardown(test_ahead__profile_tied_traces_share, cache_fresh,
		                                cache_close),
		cmocka_unit_test_setup_teardown(test_ahead__profile_of_other_index_ignored,
		                                cache_fresh, cache_close),
		cmocka_unit_test_setup_teardown(test_ahead__sequential_reader_reads_ahead,
		                                cache_fresh, cache_close),
		cmocka_unit_test_setup_teardown(test_ahead__near_chunks, cache_fresh, cache_close),
		cmocka_unit_test_setup_teardown(test_ahead__record_first_reads, cache_fresh,
		                                cache_close),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
