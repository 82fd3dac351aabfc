/* test_store.c — the dir: store: objects, atomic puts, listing, tags, keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <time.h>

#include "lib/lib.h"
#include "lib/loop.h"
#include "store/store-internal.h"

static char root[64];

static int setup(void **state)
{
	strcpy(root, "/tmp/lazyroot-test-store.XXXXXX");
	return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : -1;
}

static struct store *open_store(void)
{
	struct store *s = NULL;
	char url[96];

	snprintf(url, sizeof(url), "dir:%s", root);
	assert_int_equal(store_open(url, &s), 0);
	return s;
}

static void test_store__put_get_head_round_trip(void **state)
{
	struct store *s = open_store();
	struct buf b = BUF_INIT;
	const char *key = "chunks/0123456789abcdef0123456789abcdef";
	struct stat st;
	char path[256];

	assert_int_equal(store_head_sync(s, key), -ENOENT);
	assert_int_equal(store_get_sync(s, key, &b), -ENOENT);
	assert_int_equal(store_put_sync(s, key, "hello world", 11), 0);
	assert_int_equal(store_head_sync(s, key), 11);
	assert_int_equal(store_get_sync(s, key, &b), 0);
	assert_int_equal(b.len, 11);
	assert_memory_equal(b.data, "hello world", 11);
	/* fanned out by the first two hex digits */
	snprintf(path, sizeof(path), "%s/chunks/01/0123456789abcdef0123456789abcdef", root);
	assert_int_equal(stat(path, &st), 0);
	/* a second put of the same object is fine */
	assert_int_equal(store_put_sync(s, key, "hello world", 11), 0);
	buf_free(&b);
	store_free(s);
}

static void test_store__put_leaves_no_temporary_files(void **state)
{
	struct store *s = open_store();
	char cmd[256];

	for (int i = 0; i < 20; i++) {
		char key[64];

		snprintf(key, sizeof(key), "indexes/%032x", i);
		assert_int_equal(store_put_sync(s, key, key, strlen(key)), 0);
		snprintf(key, sizeof(key), "chunks/%032x", i);
		assert_int_equal(store_put_sync(s, key, key, strlen(key)), 0);
		assert_int_equal(store_put_sync(s, key, key, strlen(key)), 0);  /* replaces */
		assert_int_equal(store_put_sync(s, "tags/t:1", key, strlen(key)), 0);
	}
	/* only the objects themselves: no temporary file anywhere */
	snprintf(cmd, sizeof(cmd), "test $(find '%s' -type f | wc -l) = 41", root);
	assert_int_equal(system(cmd), 0);
	snprintf(cmd, sizeof(cmd), "test -z \"$(find '%s' -name '.*' -type f)\"", root);
	assert_int_equal(system(cmd), 0);
	store_free(s);
}

static void test_store__list_is_sorted_and_filtered(void **state)
{
	struct store *s = open_store();
	char **names = NULL;
	size_t n;

	assert_int_equal(store_put_sync(s, "tags/b:1", "x", 1), 0);
	assert_int_equal(store_put_sync(s, "tags/a/nested:2", "x", 1), 0);
	assert_int_equal(store_put_sync(s, "tags/a:latest", "x", 1), 0);
	assert_int_equal(store_list_sync(s, "tags/", &names, &n), 0);
	assert_int_equal(n, 3);
	assert_string_equal(names[0], "tags/a/nested:2");
	assert_string_equal(names[1], "tags/a:latest");
	assert_string_equal(names[2], "tags/b:1");
	assert_null(names[3]);
	store_names_free(names);
	assert_int_equal(store_put_sync(s, "chunks/0123456789abcdef0123456789abcdef", "x", 1), 0);
	assert_int_equal(store_put_sync(s, "chunks/ff23456789abcdef0123456789abcdef", "x", 1), 0);
	assert_int_equal(store_list_sync(s, "chunks/01", &names, &n), 0);
	assert_int_equal(n, 1);
	store_names_free(names);
	store_free(s);
}

static void record_cb(void *ud, int64_t r)
{
	*(int64_t *)ud = r;
}

static void test_store__async_callbacks_run_from_run(void **state)
{
	struct store *s = open_store();
	int64_t res = 12345;

	assert_int_equal(store_head(s, "chunks/ffffffffffffffffffffffffffffffff", record_cb, &res), 0);
	assert_int_equal(res, 12345);  /* not from inside the call */
	assert_int_equal(store_run(s), 0);
	assert_int_equal(res, -ENOENT);
	store_free(s);
}

static void test_store__bad_keys_refused(void **state)
{
	struct store *s = open_store();
	static const char *bad[] = { "", "/abs", "a/../b", "..", "a//b", "a/", "./a", "a/\n" };

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		assert_int_equal(store_put_sync(s, bad[i], "x", 1), -EINVAL);
	store_free(s);
}

static void test_store__tag_keys(void **state)
{
	char key[256];

	assert_int_equal(store_tag_key("python:3.12", key, sizeof(key)), 0);
	assert_string_equal(key, "tags/python:3.12");
	assert_int_equal(store_tag_key("debian", key, sizeof(key)), 0);
	assert_string_equal(key, "tags/debian:latest");
	assert_int_equal(store_tag_key("library/debian:12", key, sizeof(key)), 0);
	assert_string_equal(key, "tags/library/debian:12");
	assert_int_equal(store_tag_key("reg:5000/debian", key, sizeof(key)), 0);
	assert_string_equal(key, "tags/reg:5000/debian:latest");
	assert_int_equal(store_tag_key("", key, sizeof(key)), -EINVAL);
	assert_int_equal(store_tag_key("/abs", key, sizeof(key)), -EINVAL);
	assert_int_equal(store_tag_key("a/../b", key, sizeof(key)), -EINVAL);
	assert_int_equal(store_tag_key("a b", key, sizeof(key)), -EINVAL);
	assert_int_equal(store_tag_key("name:", key, sizeof(key)), -EINVAL);
}

/* The OCI reference grammar: what a registry takes, and nothing else. */
static void test_store__reference_grammar(void **state)
{
	static const char *const good[] = {
		"x", "x:1", "a/b/c:v1.2-rc_3", "my-app", "my--app", "a_b", "a__b", "a.b",
		"0abc", "localhost/app", "localhost:5000/app:1", "reg.example.com/lib/app:TAG_1",
		"Reg-1.Example.com:443/app", "x:_tag", "x:A", "app:1.2.3",
	};
	static const char *const bad[] = {
		"-x:1", "X:1", "x:1:2", "x;rm:1", "x:", ":1", "x:-1", "x:.1", "a//b", "a/", "_a",
		"a_", "a.", "a___b", "a..b", "a._b", "App", "a b", "x:a b", "a@sha256:00",
		"-reg.com/a", "reg.com:/a", "reg.com:5x/a", "reg..com/a", "reg.com./a", "x/y:1/z",
	};
	char key[512], longname[300], longtag[200];

	for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++) {
		if (store_ref_invalid(good[i]))
			fail_msg("'%s' refused: %s", good[i], store_ref_invalid(good[i]));
		assert_int_equal(store_tag_key(good[i], key, sizeof(key)), 0);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		if (!store_ref_invalid(bad[i]))
			fail_msg("'%s' accepted", bad[i]);
		assert_int_equal(store_tag_key(bad[i], key, sizeof(key)), -EINVAL);
	}
	memset(longname, 'a', 255);
	longname[255] = 0;
	assert_null(store_ref_invalid(longname));
	strcpy(longname + 255, "a");
	assert_non_null(store_ref_invalid(longname));
	memcpy(longtag, "x:", 2);
	memset(longtag + 2, 't', 128);
	longtag[130] = 0;
	assert_null(store_ref_invalid(longtag));
	strcpy(longtag + 130, "t");
	assert_non_null(store_ref_invalid(longtag));
}

static void test_store__resolve_tag_and_index_name(void **state)
{
	struct store *s = open_store();
	char hex[33];
	const char *idx = "00112233445566778899aabbccddeeff";

	assert_int_equal(store_put_sync(s, "tags/img:v1", "00112233445566778899aabbccddeeff\n", 33), 0);
	assert_int_equal(store_resolve(s, "img:v1", hex), 0);
	assert_string_equal(hex, idx);
	assert_int_equal(store_resolve(s, idx, hex), 0);
	assert_int_equal(store_resolve(s, "img:v2", hex), -ENOENT);
	assert_int_equal(store_put_sync(s, "tags/bad:v1", "zz", 2), 0);
	assert_int_equal(store_resolve(s, "bad:v1", hex), -EBADMSG);
	store_free(s);
}

static void test_store__index_verified_against_name(void **state)
{
	struct store *s = open_store();
	struct buf b = BUF_INIT;
	uint8_t name[HASH_SIZE];
	char hex[33], key[64], got[16];
	int fd;

	hash128("index bytes", 11, name);
	hex_encode(name, HASH_SIZE, hex);
	snprintf(key, sizeof(key), "indexes/%s", hex);
	assert_int_equal(store_put_sync(s, key, "index bytes", 11), 0);
	assert_int_equal(store_get_index(s, hex, &b), 0);
	fd = store_open_index(s, hex);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, got, sizeof(got), 0), 11);
	assert_memory_equal(got, "index bytes", 11);
	close(fd);
	assert_int_equal(store_put_sync(s, key, "index bytez", 11), 0);
	assert_int_equal(store_get_index(s, hex, &b), -EBADMSG);
	assert_int_equal(store_open_index(s, hex), -EBADMSG);
	assert_int_equal(store_put_sync(s, key, "", 0), 0);
	assert_int_equal(store_open_index(s, hex), -EBADMSG);
	hex[0] = hex[0] == '0' ? '1' : '0';
	assert_int_equal(store_open_index(s, hex), -ENOENT);
	assert_int_equal(store_open_index(s, "not hex"), -EINVAL);
	buf_free(&b);
	store_free(s);
}

struct get_result {
	int calls;
	int64_t res;
	struct buf data;
};

static void get_record_cb(void *ud, int64_t res, struct buf *data)
{
	struct get_result *g = ud;

	g->calls++;
	g->res = res;
	if (res >= 0) {
		g->data = *data;
		*data = (struct buf)BUF_INIT;
	}
}

static void test_store__loop_mode_gets_through_ring(void **state)
{
	struct store *s = open_store();
	struct loop *l;
	struct get_result g[3] = { 0 };
	int64_t head = 0;
	const char *key = "chunks/0123456789abcdef0123456789abcdef";
	static char big[300000];

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)(i * 131 + (i >> 9));
	assert_int_equal(store_put_sync(s, key, big, sizeof(big)), 0);
	assert_int_equal(loop_new(8, &l), 0);
	assert_int_equal(store_set_loop(s, l), 0);
	assert_int_equal(store_get(s, key, 0, 0, get_record_cb, &g[0]), 0);
	assert_int_equal(store_get(s, key, 1000, 5000, get_record_cb, &g[1]), 0);
	assert_int_equal(store_get(s, "chunks/ffffffffffffffffffffffffffffffff", 0, 0,
	                           get_record_cb, &g[2]), 0);
	assert_int_equal(store_head(s, key, record_cb, &head), 0);
	assert_int_equal(g[0].calls + g[1].calls + g[2].calls, 0);
	/* the loop alone delivers everything: store_run_once is not needed */
	while (loop_pending(l))
		assert_true(loop_run_once(l, true) >= 0);
	assert_int_equal(g[0].calls, 1);
	assert_int_equal(g[0].res, sizeof(big));
	assert_memory_equal(g[0].data.data, big, sizeof(big));
	assert_int_equal(g[1].res, 5000);
	assert_memory_equal(g[1].data.data, big + 1000, 5000);
	assert_int_equal(g[2].res, -ENOENT);
	assert_int_equal(head, sizeof(big));
	/* the _sync wrappers still work: they drive the loop */
	assert_int_equal(store_get_sync(s, key, &g[2].data), 0);
	assert_int_equal(g[2].data.len, sizeof(big));
	assert_int_equal(store_put_sync(s, "tags/x:1", "abc", 3), 0);
	for (int i = 0; i < 3; i++)
		buf_free(&g[i].data);
	store_free(s);
	loop_free(l);
}

static void test_store__loop_mode_many_gets_and_free_before_turn(void **state)
{
	struct store *s = open_store();
	struct loop *l;
	static struct get_result g[200];
	int64_t head = 7;
	char key[64];

	for (int i = 0; i < 20; i++) {
		snprintf(key, sizeof(key), "chunks/%032x", i);
		assert_int_equal(store_put_sync(s, key, key, strlen(key)), 0);
	}
	assert_int_equal(loop_new(4, &l), 0);
	assert_int_equal(store_set_loop(s, l), 0);
	memset(g, 0, sizeof(g));
	for (int i = 0; i < 200; i++) {
		snprintf(key, sizeof(key), "chunks/%032x", i % 20);
		assert_int_equal(store_get(s, key, 0, 0, get_record_cb, &g[i]), 0);
	}
	assert_int_equal(store_run(s), 0);
	for (int i = 0; i < 200; i++) {
		snprintf(key, sizeof(key), "chunks/%032x", i % 20);
		assert_int_equal(g[i].calls, 1);
		assert_int_equal(g[i].res, 39);
		assert_memory_equal(g[i].data.data, key, 39);
		buf_free(&g[i].data);
	}
	/* a store freed with a completion queued: the loop's turn skips it */
	assert_int_equal(store_head(s, "chunks/00000000000000000000000000000000", record_cb, &head),
	                 0);
	store_free(s);
	while (loop_pending(l))
		assert_true(loop_run_once(l, true) >= 0);
	assert_int_equal(head, 7);
	loop_free(l);
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	assert_non_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static int count_tmp_files(void)
{
	char cmd[256];
	FILE *f;
	int n = -1;

	snprintf(cmd, sizeof(cmd), "find '%s' -name '.tmp*' | wc -l", root);
	f = popen(cmd, "r");
	assert_non_null(f);
	assert_int_equal(fscanf(f, "%d", &n), 1);
	pclose(f);
	return n;
}

/* A streamed put: invisible until committed, nothing left when aborted, and
 * it replaces the object there. */
static void test_store__streamed_put_commits_aborts_replaces(void **state)
{
	struct store *s = open_store(), *m = NULL;
	const char *key = "packs/0123456789abcdef0123456789abcdef";
	static char big[300000];
	struct buf b = BUF_INIT;
	char url[160];
	int fd;

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)(i * 7 + (i >> 11));
	fd = store_put_begin(s, key);
	assert_true(fd >= 0);
	assert_int_equal(write_full(fd, big, sizeof(big)), 0);
	assert_int_equal(store_head_sync(s, key), -ENOENT);
	assert_int_equal(store_put_end(s, key, &fd, true), 0);
	assert_int_equal(fd, -1);
	assert_int_equal(store_head_sync(s, key), sizeof(big));
	assert_int_equal(store_local_size(s, key), sizeof(big));
	assert_int_equal(store_get_sync(s, key, &b), 0);
	assert_int_equal(b.len, sizeof(big));
	assert_memory_equal(b.data, big, sizeof(big));
	/* aborted: the object as it was */
	fd = store_put_begin(s, key);
	assert_true(fd >= 0);
	assert_int_equal(write_full(fd, "short", 5), 0);
	assert_int_equal(store_put_end(s, key, &fd, false), 0);
	assert_int_equal(store_local_size(s, key), sizeof(big));
	/* committed again: replaced */
	fd = store_put_begin(s, key);
	assert_int_equal(write_full(fd, "short", 5), 0);
	assert_int_equal(store_put_end(s, key, &fd, true), 0);
	assert_int_equal(store_get_sync(s, key, &b), 0);
	assert_int_equal(b.len, 5);
	assert_memory_equal(b.data, "short", 5);
	assert_int_equal(count_tmp_files(), 0);
	assert_int_equal(store_local_size(s, "packs/ffffffffffffffffffffffffffffffff"), -ENOENT);
	assert_int_equal(store_put_begin(s, "packs/../x"), -EINVAL);
	/* stores that keep no local files hold no packs */
	snprintf(url, sizeof(url), "%s/b", root);
	assert_true(mkdir(url, 0755) == 0 || errno == EEXIST);
	snprintf(url, sizeof(url), "dir:%s/a,dir:%s/b", root, root);
	assert_int_equal(store_create(url, NULL, &m), 0);
	assert_true(store_holds_packs(s));
	assert_false(store_holds_packs(m));
	assert_int_equal(store_put_begin(m, key), -EOPNOTSUPP);
	assert_int_equal(store_local_size(m, key), -EOPNOTSUPP);
	store_free(m);
	buf_free(&b);
	store_free(s);
}

/* Ranged gets of packs on a loop keep at most DIR_KEPT_FDS (8) descriptors
 * open, read the right bytes from each of more packs than that (those not
 * kept are opened per get), and a kept pack deleted meanwhile still reads
 * from its descriptor. */
static void test_store__loop_mode_pack_reads_keep_few_fds(void **state)
{
	struct store *s = open_store();
	struct loop *l;
	static struct get_result g[12][20];
	static char data[12][4096];
	char key[64], path[160];
	int fds;

	for (int p = 0; p < 12; p++) {
		for (int i = 0; i < 4096; i++)
			data[p][i] = (char)(p * 31 + i * 13);
		snprintf(key, sizeof(key), "packs/%032x", p);
		assert_int_equal(store_put_sync(s, key, data[p], sizeof(data[p])), 0);
	}
	assert_int_equal(loop_new(16, &l), 0);
	assert_int_equal(store_set_loop(s, l), 0);
	fds = count_fds();
	memset(g, 0, sizeof(g));
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < 20; i++)
			for (int p = 0; p < 12; p++) {
				snprintf(key, sizeof(key), "packs/%032x", p);
				assert_int_equal(store_get(s, key, (uint64_t)i * 200, 200, get_record_cb,
				                           &g[p][i]), 0);
			}
		assert_int_equal(store_run(s), 0);
		for (int p = 0; p < 12; p++)
			for (int i = 0; i < 20; i++) {
				assert_int_equal(g[p][i].calls, 1);
				assert_int_equal(g[p][i].res, 200);
				assert_memory_equal(g[p][i].data.data, data[p] + i * 200, 200);
				buf_free(&g[p][i].data);
				g[p][i].calls = 0;
			}
		/* the closes of descriptors not kept are queued on the ring */
		while (loop_pending(l))
			assert_true(loop_run_once(l, true) >= 0);
		assert_true(count_fds() <= fds + 8);
		/* a pack deleted: the descriptor kept (the first packs read took the
		 * slots) still reads it */
		snprintf(path, sizeof(path), "%s/packs/%032x", root, 0);
		unlink(path);
	}
	/* past the end: nothing; a missing pack not kept: -ENOENT */
	assert_int_equal(store_get(s, "packs/00000000000000000000000000000001", 5000, 10,
	                           get_record_cb, &g[0][0]), 0);
	assert_int_equal(store_get(s, "packs/ffffffffffffffffffffffffffffffff", 0, 10,
	                           get_record_cb, &g[0][1]), 0);
	assert_int_equal(store_run(s), 0);
	while (loop_pending(l))
		assert_true(loop_run_once(l, true) >= 0);
	assert_int_equal(g[0][0].res, 0);
	assert_int_equal(g[0][1].res, -ENOENT);
	buf_free(&g[0][0].data);
	store_free(s);
	assert_int_equal(count_fds(), fds - 1);   /* the root's descriptor went too */
	loop_free(l);
}

static void test_store__unsupported_scheme(void **state)
{
	struct store *s = NULL;

	assert_int_equal(store_open("gopher://x/y", &s), -EPROTONOSUPPORT);
	/* a typo of a scheme is not a relative directory of that name */
	assert_int_equal(store_create("dri:/x", NULL, &s), -EPROTONOSUPPORT);
	assert_null(s);
}

/* Only store_create makes a store, and only at an absolute path: a mistyped
 * or missing store is an error, never a new empty one that lists nothing. */
static void test_store__missing_or_relative_refused(void **state)
{
	struct store *s = NULL;
	char url[256], path[128];
	struct stat st;

	snprintf(path, sizeof(path), "%s/typo/store", root);
	snprintf(url, sizeof(url), "dir:%s", path);
	assert_int_equal(store_open(url, &s), -ENOENT);
	assert_int_equal(store_open(path, &s), -ENOENT);
	assert_int_equal(stat(path, &st), -1);
	assert_int_equal(store_open("dir:relative", &s), -EINVAL);
	assert_int_equal(store_create("dir:relative", NULL, &s), -EINVAL);
	assert_int_equal(store_create("relative/store", NULL, &s), -EINVAL);
	assert_int_equal(store_create("./store", NULL, &s), -EINVAL);
	assert_null(s);
	/* a file is not a store */
	snprintf(path, sizeof(path), "%s/afile", root);
	close(open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
	assert_int_equal(store_open(path, &s), -ENOTDIR);
	/* a list of mirrors: one missing member fails the list */
	snprintf(url, sizeof(url), "dir:%s,dir:%s/typo2", root, root);
	assert_int_equal(store_open(url, &s), -ENOENT);
	/* created, then opened */
	snprintf(url, sizeof(url), "dir:%s/new/store", root);
	assert_int_equal(store_create(url, NULL, &s), 0);
	store_free(s);
	s = NULL;
	assert_int_equal(store_open(url, &s), 0);
	store_free(s);
}

static void test_store__layout_fans_out_chunks_here_and_aside(void **state)
{
	char out[256];

	assert_int_equal(store_layout_path("chunks/abcdef", out, sizeof(out)), 0);
	assert_string_equal(out, "chunks/ab/abcdef");
	assert_int_equal(store_layout_path("aside/chunks/abcdef", out, sizeof(out)), 0);
	assert_string_equal(out, "aside/chunks/ab/abcdef");
	assert_int_equal(store_layout_path("aside/indexes/abcd", out, sizeof(out)), 0);
	assert_string_equal(out, "aside/indexes/abcd");
	assert_true(store_layout_key("chunks/ab/abcdef", out, sizeof(out)));
	assert_string_equal(out, "chunks/abcdef");
	assert_true(store_layout_key("aside/chunks/ab/abcdef", out, sizeof(out)));
	assert_string_equal(out, "aside/chunks/abcdef");
	assert_true(store_layout_key("tags/lib/x:1", out, sizeof(out)));
	assert_string_equal(out, "tags/lib/x:1");
	/* a fan-out directory that does not match its name's digits is no key */
	assert_false(store_layout_key("chunks/cd/abcdef", out, sizeof(out)));
	assert_false(store_layout_key("chunks/abcdef", out, sizeof(out)));
}

static void test_store__times_parse_http_and_iso(void **state)
{
	int64_t t;

	assert_int_equal(store_parse_time("Tue, 01 Dec 2026 17:21:29 GMT", 29, &t), 0);
	assert_int_equal(t, 1796145689);
	assert_int_equal(store_parse_time("2026-12-01T17:21:29.123Z", 24, &t), 0);
	assert_int_equal(t, 1796145689);
	assert_int_equal(store_parse_time("2026-12-01T17:21:29Z", 20, &t), 0);
	assert_int_equal(t, 1796145689);
	assert_int_equal(store_parse_time("Tue, 01 Dex 2026 17:21:29 GMT", 29, &t), -EINVAL);
	assert_int_equal(store_parse_time("2026-12-01T17:21:29+02:00", 25, &t), -EINVAL);
	assert_int_equal(store_parse_time("", 0, &t), -EINVAL);
}

static void test_store__lease_keys(void **state)
{
	char kind[16];
	unsigned ttl;

	assert_int_equal(store_lease_parse("leases/build-300-0123456789abcdef", kind, sizeof(kind),
	                                   &ttl), 0);
	assert_string_equal(kind, "build");
	assert_int_equal(ttl, 300);
	assert_int_equal(store_lease_parse("leases/gc-4-x", kind, sizeof(kind), &ttl), 0);
	assert_int_equal(store_lease_parse("leases/build-0-x", kind, sizeof(kind), &ttl), -EINVAL);
	assert_int_equal(store_lease_parse("leases/build300x", kind, sizeof(kind), &ttl), -EINVAL);
	assert_int_equal(store_lease_parse("tags/build-3-x", kind, sizeof(kind), &ttl), -EINVAL);
}

static void test_store__reader_lease_keys_name_their_index(void **state)
{
	char hex[HASH_HEX_SIZE], kind[16];
	unsigned ttl;

	assert_int_equal(store_lease_held_index("leases/read-300-0123456789abcdef-"
	                                        "00112233445566778899aabbccddeeff", hex), 0);
	assert_string_equal(hex, "00112233445566778899aabbccddeeff");
	assert_int_equal(store_lease_parse("leases/read-300-0123456789abcdef-"
	                                   "00112233445566778899aabbccddeeff", kind, sizeof(kind),
	                                   &ttl), 0);
	assert_string_equal(kind, "read");
	assert_int_equal(ttl, 300);
	/* not a reader's, or no index in it */
	assert_int_equal(store_lease_held_index("leases/build-300-0123456789abcdef-"
	                                        "00112233445566778899aabbccddeeff", hex), -EINVAL);
	assert_int_equal(store_lease_held_index("leases/read-300-0123456789abcdef", hex), -EINVAL);
	assert_int_equal(store_lease_held_index("leases/read-300-x-0011", hex), -EINVAL);
}

static void test_store__delete_move_put_new_scan_now(void **state)
{
	struct store *s = open_store();
	struct store_entry *e = NULL;
	struct buf b = BUF_INIT;
	size_t n = 0;
	int64_t t, before = (int64_t)time(NULL);

	assert_int_equal(store_put_new_sync(s, "gc/collection", "one", 3), 0);
	assert_int_equal(store_put_new_sync(s, "gc/collection", "two", 3), -EEXIST);
	assert_int_equal(store_get_sync(s, "gc/collection", &b), 0);
	assert_memory_equal(b.data, "one", 3);
	assert_int_equal(store_put_sync(s, "chunks/aa01", "x", 1), 0);
	assert_int_equal(store_put_sync(s, "chunks/bb02", "yy", 2), 0);
	assert_int_equal(store_move_sync(s, "chunks/aa01", "aside/chunks/aa01", true), 0);
	assert_int_equal(store_head_sync(s, "chunks/aa01"), -ENOENT);
	/* a get looks aside; a head does not */
	assert_int_equal(store_get_sync(s, "chunks/aa01", &b), 0);
	assert_memory_equal(b.data, "x", 1);
	assert_int_equal(store_put_sync(s, "chunks/aa01", "x", 1), 0);
	assert_int_equal(store_move_sync(s, "aside/chunks/aa01", "chunks/aa01", false), -EEXIST);
	assert_int_equal(store_move_sync(s, "chunks/nothere", "aside/chunks/nothere", true), -ENOENT);
	assert_int_equal(store_scan_sync(s, "aside/", &e, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(e[0].key, "aside/chunks/aa01");
	store_entries_free(e, n);
	assert_int_equal(store_scan_sync(s, "chunks/", &e, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(e[1].key, "chunks/bb02");
	assert_int_equal(e[1].size, 2);
	assert_true(e[1].mtime >= before - 2 && e[1].mtime <= before + 60);
	store_entries_free(e, n);
	assert_int_equal(store_delete_sync(s, "aside/chunks/aa01"), 0);
	assert_int_equal(store_delete_sync(s, "aside/chunks/aa01"), -ENOENT);
	assert_int_equal(store_get_sync(s, "chunks/nothere", &b), -ENOENT);
	assert_int_equal(store_now_sync(s, &t), 0);
	assert_true(t >= before - 2 && t <= before + 60);
	buf_free(&b);
	store_free(s);
}

/* The mark of the gc tests: the keys in marked[] (NULL-terminated). */
static const char *marked[8];

static int test_mark(struct store *s, void *ud, struct store_keys *keys)
{
	for (const char **k = marked; *k; k++)
		if (store_keys_add(keys, *k) < 0)
			return -ENOMEM;
	return 0;
}

static void test_store__gc_waits_for_leases_and_restores(void **state)
{
	struct store *s = open_store();
	struct store_gc_params p = { .grace = 0, .mark = test_mark };
	struct store_gc_report rep;
	struct buf b = BUF_INIT;

	assert_int_equal(store_put_sync(s, "chunks/aa01", "live", 4), 0);
	assert_int_equal(store_put_sync(s, "chunks/bb02", "dead", 4), 0);
	assert_int_equal(store_put_sync(s, "indexes/cc03", "old index", 9), 0);
	marked[0] = "chunks/aa01";
	marked[1] = NULL;
	/* a builder at work: it may have found bb02 present */
	assert_int_equal(store_put_sync(s, "leases/build-300-feed", "{}", 2), 0);
	assert_int_equal(store_gc(s, &p, &rep), 0);
	assert_true(rep.phase_one);
	assert_false(rep.phase_two);
	assert_true(rep.waiting);
	assert_int_equal(rep.moved, 2);
	assert_int_equal(rep.leases_waited, 1);
	assert_int_equal(store_head_sync(s, "chunks/bb02"), -ENOENT);
	assert_int_equal(store_get_sync(s, "chunks/bb02", &b), 0);   /* readers look aside */
	/* still waiting while the lease lives */
	assert_int_equal(store_gc(s, &p, &rep), 0);
	assert_true(rep.waiting);
	assert_false(rep.phase_two);
	/* the builder publishes a tag reaching bb02, then ends its lease */
	marked[1] = "chunks/bb02";
	marked[2] = NULL;
	assert_int_equal(store_delete_sync(s, "leases/build-300-feed"), 0);
	assert_int_equal(store_gc(s, &p, &rep), 0);
	assert_true(rep.phase_two);
	assert_int_equal(rep.restored, 1);
	assert_int_equal(rep.deleted, 1);                 /* the old index */
	assert_int_equal(store_head_sync(s, "chunks/bb02"), 4);
	assert_int_equal(store_get_sync(s, "indexes/cc03", &b), -ENOENT);
	assert_int_equal(store_get_sync(s, "gc/collection", &b), -ENOENT);
	/* nobody else writes: one run collects at once */
	marked[1] = NULL;
	assert_int_equal(store_gc(s, &p, &rep), 0);
	assert_true(rep.phase_one && rep.phase_two);
	assert_int_equal(rep.deleted, 1);
	assert_int_equal(store_get_sync(s, "chunks/bb02", &b), -ENOENT);
	assert_int_equal(store_head_sync(s, "chunks/aa01"), 4);
	/* a lapsed lease holds nothing back: written with an mtime long past */
	assert_int_equal(store_put_sync(s, "leases/build-2-dead", "{}", 2), 0);
	{
		char path[256];
		struct timespec ts[2] = { { 1000, 0 }, { 1000, 0 } };

		snprintf(path, sizeof(path), "%s/leases/build-2-dead", root);
		assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
	}
	assert_int_equal(store_put_sync(s, "chunks/dd04", "more", 4), 0);
	assert_int_equal(store_gc(s, &p, &rep), 0);
	assert_true(rep.phase_two);
	assert_int_equal(rep.deleted, 1);
	/* a grace period spares young objects */
	p.grace = 3600;
	assert_int_equal(store_put_sync(s, "chunks/ee05", "young", 5), 0);
	assert_int_equal(store_gc(s, &p, &rep), 0);
	assert_int_equal(rep.moved, 0);
	assert_int_equal(rep.unreachable, 1);
	assert_true(rep.waiting);
	/* another collector at work: this one leaves */
	p.grace = 0;
	assert_int_equal(store_put_sync(s, "leases/gc-300-other", "{}", 2), 0);
	assert_int_equal(store_gc(s, &p, &rep), -EBUSY);
	buf_free(&b);
	store_free(s);
}

/* What an index reaches, in the gc tests: "indexes/H" and "chunks/H-c". */
static int test_mark_index(struct store *s, void *ud, const char *hex, struct store_keys *keys)
{
	struct buf b = BUF_INIT;
	char key[64];
	int r;

	snprintf(key, sizeof(key), "indexes/%s", hex);
	r = store_get_sync(s, key, &b);     /* looks aside, as store_get_index does */
	buf_free(&b);
	if (r < 0)
		return r;
	r = store_keys_add(keys, key);
	snprintf(key, sizeof(key), "chunks/%.4s", hex);
	return r < 0 ? r : store_keys_add(keys, key);
}

#define HELD "00112233445566778899aabbccddeeff"

static void test_store__gc_keeps_what_reader_leases_hold(void **state)
{
	struct store *s = open_store();
	struct store_gc_params p = { .grace = 0, .mark = test_mark, .mark_index = test_mark_index };
	struct store_gc_report rep;
	struct store_lease *l = NULL, *l2 = NULL;
	struct store_renewer *rn = NULL;
	struct store_keys held;
	size_t readers = 0;
	char path[256];

	marked[0] = NULL;
	assert_int_equal(store_put_sync(s, "indexes/" HELD, "index", 5), 0);
	assert_int_equal(store_put_sync(s, "chunks/0011", "held", 4), 0);
	assert_int_equal(store_put_sync(s, "chunks/ff99", "dead", 4), 0);
	/* a mount's lease, written by the renewer: wait until it is there */
	assert_int_equal(store_renewer_new(&rn), 0);
	assert_int_equal(store_lease_take_read(rn, s, 300, HELD, &l), 0);
	for (int i = 0; i < 5000; i++) {
		assert_int_equal(store_leases_held(s, &held, &readers), 0);
		store_keys_destroy(&held);
		if (readers)
			break;
		usleep(1000);
	}
	assert_int_equal(readers, 1);
	assert_int_equal(store_leases_held(s, &held, &readers), 0);
	assert_int_equal(held.n, 1);
	assert_string_equal(held.v[0], HELD);
	store_keys_destroy(&held);
	/* no tag names the index: the lease keeps it and its chunk, and is not waited for */
	assert_int_equal(store_gc(s, &p, &rep), 0);
	assert_true(rep.phase_one && rep.phase_two);
	assert_int_equal(rep.readers, 1);
	assert_int_equal(rep.held_indexes, 1);
	assert_int_equal(rep.held, 2);
	assert_int_equal(rep.deleted, 1);
	assert_int_equal(store_head_sync(s, "chunks/0011"), 4);
	assert_int_equal(store_head_sync(s, "indexes/" HELD), 5);
	assert_int_equal(store_head_sync(s, "chunks/ff99"), -ENOENT);
	/* without a way to follow an index, a store with reader leases is not collected */
	p.mark_index = NULL;
	assert_int_equal(store_gc(s, &p, &rep), -EOPNOTSUPP);
	p.mark_index = test_mark_index;
	/* released: the object goes (from the lease's thread), then gc collects */
	store_lease_release(l);
	for (int i = 0; i < 5000; i++) {
		assert_int_equal(store_leases_held(s, &held, &readers), 0);
		store_keys_destroy(&held);
		if (!readers)
			break;
		usleep(1000);
	}
	assert_int_equal(readers, 0);
	assert_int_equal(store_gc(s, &p, &rep), 0);
	assert_int_equal(rep.deleted, 2);
	/* abandoned (handed to a successor) once written: it stays, to lapse,
	 * also when the renewer is freed */
	assert_int_equal(store_lease_take_read(rn, s, 300, HELD, &l2), 0);
	for (int i = 0; i < 5000; i++) {
		assert_int_equal(store_leases_held(s, &held, &readers), 0);
		store_keys_destroy(&held);
		if (readers)
			break;
		usleep(1000);
	}
	store_lease_abandon(l2);
	store_renewer_free(rn);
	assert_int_equal(store_leases_held(s, &held, &readers), 0);
	store_keys_destroy(&held);
	assert_int_equal(readers, 1);
	{
		struct store_entry *e = NULL;
		size_t n = 0;

		assert_int_equal(store_scan_sync(s, "leases/", &e, &n), 0);
		assert_int_equal(n, 1);
		assert_int_equal(store_delete_sync(s, e[0].key), 0);
		store_entries_free(e, n);
	}
	/* a lapsed reader lease (its holder died) holds nothing */
	assert_int_equal(store_put_sync(s, "indexes/" HELD, "index", 5), 0);
	assert_int_equal(store_put_sync(s, "leases/read-2-dead-" HELD, "{}", 2), 0);
	{
		struct timespec ts[2] = { { 1000, 0 }, { 1000, 0 } };

		snprintf(path, sizeof(path), "%s/leases/read-2-dead-" HELD, root);
		assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
	}
	assert_int_equal(store_gc(s, &p, &rep), 0);
	assert_int_equal(rep.readers, 0);
	assert_int_equal(rep.deleted, 1);
	/* a lease whose index is gone for good holds nothing, and stops nothing */
	assert_int_equal(store_put_sync(s, "leases/read-300-gone-" HELD, "{}", 2), 0);
	assert_int_equal(store_put_sync(s, "chunks/ee55", "dead", 4), 0);
	assert_int_equal(store_gc(s, &p, &rep), 0);
	assert_int_equal(rep.readers, 1);
	assert_int_equal(rep.held, 0);
	assert_int_equal(rep.deleted, 1);
	store_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_store__put_get_head_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store__reader_lease_keys_name_their_index, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_store__gc_keeps_what_reader_leases_hold, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_store__put_leaves_no_temporary_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store__list_is_sorted_and_filtered, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store__async_callbacks_run_from_run, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store__bad_keys_refused, setup, teardown),
		cmocka_unit_test(test_store__reference_grammar),
		cmocka_unit_test_setup_teardown(test_store__tag_keys, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store__resolve_tag_and_index_name, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store__index_verified_against_name, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store__loop_mode_gets_through_ring, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store__loop_mode_many_gets_and_free_before_turn,
		                                setup, teardown),
		cmocka_unit_test_setup_teardown(test_store__streamed_put_commits_aborts_replaces, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_store__loop_mode_pack_reads_keep_few_fds, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_store__unsupported_scheme, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store__missing_or_relative_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store__layout_fans_out_chunks_here_and_aside,
		                                setup, teardown),
		cmocka_unit_test_setup_teardown(test_store__times_parse_http_and_iso, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store__lease_keys, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store__delete_move_put_new_scan_now, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_store__gc_waits_for_leases_and_restores, setup,
		                                teardown),
	};

	return cmocka_run_group_tests_name("store", tests, NULL, NULL);
}
