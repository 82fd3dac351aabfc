/* test_node.c — the node's worker without FUSE or root: control requests
 * answered by node_handle() (parse errors, verbs, the mount request's checks),
 * the settings a request carries, the mounts' table, the mount options, an
 * index kept in the cache, a pack's offsets and a profile read from a real
 * `dir:` store, and a prefetch job run on the worker's loop into a real cache.
 * Linked against liblazyroot.a alone, as every unit test is: the node links
 * from the library. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "cache/cache.h"
#include "chunker/chunker.h"
#include "image/image.h"
#include "lib/json.h"
#include "lib/lib.h"
#include "lib/loop.h"
#include "node/node-internal.h"
#include "node/prefetch.h"
#include "store/store.h"

static char root[64];
static char surl[128], cache_dir[96], store_dir[96];
static char hex[HASH_HEX_SIZE];         /* the index of the image "img:1" */
static uint64_t image_chunks;
static struct node_config cfg;
static struct worker w;

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		p[i] = (uint8_t)(seed >> 56);
	}
}

/* A real image in a real store: two files, one large enough for several
 * chunks, built and tagged img:1 as `lazyroot build` does. */
static void build_image(void)
{
	struct image_attr a = { .mode = S_IFREG | 0644, .mtime_sec = 1700000000 };
	struct build_params p;
	struct build_summary sum;
	struct image_inode *ino;
	struct build *b;
	struct store *s;
	size_t len = 3u << 20;
	uint8_t *data = malloc(len);

	assert_non_null(data);
	fill(data, len, 7);
	assert_int_equal(store_open(surl, &s), 0);
	build_params_default(&p);
	p.threads = 1;
	p.min_size = 64 << 10;
	p.avg_size = 256 << 10;
	p.max_size = 1 << 20;
	assert_int_equal(build_new(&p, s, &b), 0);
	assert_int_equal(image_tree_add(build_tree(b), "big", &a, &ino), 0);
	assert_int_equal(build_file_begin(b, ino, len), 0);
	assert_int_equal(build_file_data(b, data, len), 0);
	assert_int_equal(build_file_end(b), 0);
	build_count_entry(b);
	assert_int_equal(image_tree_add(build_tree(b), "small", &a, &ino), 0);
	assert_int_equal(build_file_begin(b, ino, 5), 0);
	assert_int_equal(build_file_data(b, "hello", 5), 0);
	assert_int_equal(build_file_end(b), 0);
	build_count_entry(b);
	assert_int_equal(build_finish(b, "img:1", &sum), 0);
	memcpy(hex, sum.index, sizeof(hex));
	image_chunks = sum.chunks;
	assert_true(image_chunks >= 3);
	build_free(b);
	store_free(s);
	free(data);
}

static int setup(void **state)
{
	strcpy(root, "/tmp/lazyroot-test-node.XXXXXX");
	if (!mkdtemp(root))
		return -1;
	snprintf(store_dir, sizeof(store_dir), "%s/store", root);
	snprintf(surl, sizeof(surl), "dir:%s", store_dir);
	snprintf(cache_dir, sizeof(cache_dir), "%s/cache", root);
	if (mkdir(store_dir, 0755) < 0)
		return -1;
	build_image();
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : -1;
}

/* A worker as node_worker_main() makes it, without a holder (chan -1), a
 * control socket or FUSE: the node's settings name the test's store and a
 * fresh cache. */
static int worker_setup(void **state)
{
	char path[128];

	snprintf(path, sizeof(path), "rm -rf '%s'", cache_dir);
	if (system(path) != 0)
		return -1;
	node_config_init(&cfg);
	snprintf(path, sizeof(path), "%s/sock", root);
	if (node_config_set(&cfg, "store", surl, "test") < 0 ||
	    node_config_set(&cfg, "cache", cache_dir, "test") < 0 ||
	    node_config_set(&cfg, "cache_size", "64M", "test") < 0 ||
	    node_config_set(&cfg, "socket", path, "test") < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/images", root);
	if (node_config_set(&cfg, "images", path, "test") < 0)
		return -1;
	w = (struct worker){ .cfg = &cfg, .chan = -1, .listen_fd = -1, .log_fd = -1,
	                     .log_saved = -1, .holder_pid = 1, .hello_ns = now_ns() };
	return loop_new(64, &w.l);
}

static int worker_teardown(void **state)
{
	while (w.nmounts)
		node_mount_free(w.mounts[--w.nmounts]);
	while (loop_pending(w.l) && loop_run_once(w.l, true) >= 0)
		;
	for (size_t i = 0; i < w.ncaches; i++) {
		cache_free(w.caches[i]->c);
		free(w.caches[i]->dir);
		free(w.caches[i]);
	}
	for (size_t i = 0; i < w.nstores; i++)
		node_store_free(w.stores[i]);
	free(w.caches);
	free(w.stores);
	free(w.mounts);
	loop_free(w.l);
	node_config_destroy(&cfg);
	return 0;
}

/* The reply node_handle() writes to a client that sent request (static buffer). */
static const char *call(const char *request, size_t len)
{
	static char reply[1 << 16];
	struct client c = { .w = &w, .in = BUF_INIT };
	int sv[2];
	ssize_t n, got = 0;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	c.fd = sv[0];
	assert_int_equal(buf_append(&c.in, request, len), 0);
	node_handle(&w, &c);
	close(sv[0]);
	while ((n = read(sv[1], reply + got, sizeof(reply) - 1 - (size_t)got)) > 0)
		got += n;
	close(sv[1]);
	buf_free(&c.in);
	reply[got] = 0;
	return reply;
}

static const char *req(const char *request)
{
	return call(request, strlen(request));
}

/* The reply's "ok" member (replies are one JSON object). */
static bool ok(const char *reply)
{
	json_t *j = NULL;
	bool v = false;

	assert_int_equal(json_parse(reply, strlen(reply), &j, NULL), 0);
	assert_int_equal(json_bool(json_object_get(j, "ok"), &v), 0);
	json_decref(j);
	return v;
}

/* Whether the reply's "error" contains text. */
static bool error_has(const char *reply, const char *text)
{
	json_t *j = NULL;
	const char *e;
	bool has;

	assert_int_equal(json_parse(reply, strlen(reply), &j, NULL), 0);
	e = json_get_cstr(j, "error");
	has = e && strstr(e, text);
	if (!has)
		print_message("reply: %s", reply);
	json_decref(j);
	return has;
}

/* ---- requests ---------------------------------------------------------------- */

static void test_node__request_errors(void **state)
{
	_cleanup_free_ char *big = malloc(NODE_REQUEST_MAX + 2);
	const char *r;

	assert_true(ok(req("{\"verb\":\"ping\"}")));
	r = req("{\"verb\":");
	assert_false(ok(r));
	assert_true(error_has(r, "request"));
	assert_true(error_has(req("[1,2]"), "request: not a JSON object"));
	assert_true(error_has(req("{\"ref\":\"x\"}"), "request: no verb"));
	assert_true(error_has(req("{\"verb\":\"nope\"}"), "request: unknown verb 'nope'"));
	assert_non_null(big);
	memset(big, ' ', NODE_REQUEST_MAX + 1);
	memcpy(big, "{\"verb\":\"ping\"}", 15);
	r = call(big, NODE_REQUEST_MAX + 1);
	assert_false(ok(r));
	assert_true(error_has(r, "larger than"));
	/* the same request a byte shorter is answered */
	assert_true(ok(call(big, NODE_REQUEST_MAX)));
}

static void test_node__request_mount_checks(void **state)
{
	assert_true(error_has(req("{\"verb\":\"mount\"}"), "request: mount: no ref"));
	assert_true(error_has(req("{\"verb\":\"mount\",\"ref\":\"\"}"),
	                      "request: ref: want a non-empty string"));
	assert_true(error_has(req("{\"verb\":\"mount\",\"ref\":\"img:1\",\"mountpoint\":\"rel\"}"),
	                      "paths must be absolute"));
	/* the request's settings apply over the node's, and are checked */
	assert_true(error_has(req("{\"verb\":\"mount\",\"ref\":\"img:1\",\"mountpoint\":\"/x\","
	                          "\"settings\":{\"cache\":\"relative\"}}"),
	                      "the store and cache paths must be absolute"));
	assert_true(error_has(req("{\"verb\":\"mount\",\"ref\":\"img:1\",\"mountpoint\":\"/x\","
	                          "\"settings\":{\"readahead\":\"lots\"}}"), "readahead"));
	assert_true(error_has(req("{\"verb\":\"mount\",\"ref\":\"img:1\",\"mountpoint\":\"/x\","
	                          "\"settings\":{\"no_such_setting\":\"1\"}}"),
	                      "no_such_setting"));
	assert_true(error_has(req("{\"verb\":\"mount\",\"ref\":\"img:1\",\"mountpoint\":\"/x\","
	                          "\"settings\":[]}"), "settings: not an object"));
	assert_true(error_has(req("{\"verb\":\"mount\",\"ref\":\"img:1\",\"mountpoint\":\"/x\","
	                          "\"options\":{\"bogus\":true}}"),
	                      "unknown option 'bogus'"));
	/* a tag the store does not have: named, and nothing mounted */
	assert_true(error_has(req("{\"verb\":\"mount\",\"ref\":\"nothere:1\","
	                          "\"mountpoint\":\"/x\"}"), "nothere"));
	assert_int_equal(w.nmounts, 0);
}

/* A mount entry in the table as node_mount_new() leaves it, but with no
 * FUSE connection (fs NULL: one that has ended). */
static struct mount *table_add(const char *mountpoint, const char *h, const char *url,
                               bool shared)
{
	struct mount *m = calloc(1, sizeof(*m));
	struct mount **v = realloc(w.mounts, (w.nmounts + 1) * sizeof(*v));

	assert_non_null(m);
	assert_non_null(v);
	w.mounts = v;
	m->state_fd = -1;
	m->mountpoint = strdup(mountpoint);
	m->ref = strdup("img:1");
	m->store_url = strdup(url);
	m->cache_dir = strdup(cache_dir);
	snprintf(m->hex, sizeof(m->hex), "%s", h);
	m->shared = shared;
	node_config_init(&m->cfg);
	m->have_cfg = true;
	assert_int_equal(node_config_set(&m->cfg, "store", url, "test"), 0);
	w.mounts[w.nmounts++] = m;
	return m;
}

static void test_node__request_inside_a_mount(void **state)
{
	const char *r;

	table_add("/srv/lr-test-mnt", hex, surl, false);
	/* resolving a path inside a mount this worker serves would wait for
	 * this worker: refused before any path is looked at */
	r = req("{\"verb\":\"mount\",\"ref\":\"img:1\",\"mountpoint\":\"/srv/lr-test-mnt/sub\"}");
	assert_true(error_has(r, "inside '/srv/lr-test-mnt', a mount of this node"));
	r = req("{\"verb\":\"mount\",\"ref\":\"img:1\",\"images\":\"/srv/lr-test-mnt/i\"}");
	assert_true(error_has(r, "a mount of this node"));
	/* a sibling whose name starts alike is not inside it */
	r = req("{\"verb\":\"mount\",\"ref\":\"nothere:1\","
	        "\"mountpoint\":\"/srv/lr-test-mnt2\"}");
	assert_true(error_has(r, "'nothere:1': no such tag"));
	assert_int_equal(w.nmounts, 1);
}

static void test_node__status_and_umount(void **state)
{
	json_t *j = NULL;
	const json_t *mounts;
	const char *r;
	int64_t pid;

	table_add("/srv/lr-a", hex, surl, false);
	table_add("/srv/lr-b", hex, surl, false);
	r = req("{\"verb\":\"status\"}");
	assert_true(ok(r));
	assert_int_equal(json_parse(r, strlen(r), &j, NULL), 0);
	assert_int_equal(json_int(json_object_get(j, "pid"), &pid), 0);
	assert_int_equal(pid, getpid());
	assert_string_equal(json_get_cstr(j, "cache"), cache_dir);
	mounts = json_object_get(j, "mounts");
	assert_int_equal(json_array_size(mounts), 2);
	assert_string_equal(json_get_cstr(json_array_get(mounts, 0), "mountpoint"), "/srv/lr-a");
	assert_string_equal(json_get_cstr(json_array_get(mounts, 1), "index"), hex);
	assert_string_equal(json_get_cstr(json_array_get(mounts, 1), "store"), surl);
	json_decref(j);

	r = req("{\"verb\":\"umount\",\"mountpoint\":\"/srv/lr-none\"}");
	assert_true(error_has(r, "umount '/srv/lr-none': not a mount of this node"));
	assert_non_null(strstr(r, "\"unknown\""));
	assert_true(error_has(req("{\"verb\":\"umount\"}"), "no mountpoint"));
	assert_int_equal(w.nmounts, 2);
	/* a mount whose connection has ended goes from the table */
	assert_true(ok(req("{\"verb\":\"umount\",\"mountpoint\":\"/srv/lr-a\"}")));
	assert_int_equal(w.nmounts, 1);
	assert_string_equal(w.mounts[0]->mountpoint, "/srv/lr-b");
	assert_true(error_has(req("{\"verb\":\"umount\",\"mountpoint\":\"/srv/lr-a\"}"),
	                      "not a mount of this node"));
}

static void test_node__stats_without_a_cache(void **state)
{
	const char *r = req("{\"verb\":\"stats\",\"cache\":\"/nonexistent-lr-cache\"}");

	assert_true(error_has(r, "cache '/nonexistent-lr-cache': no stats file"));
}

/* ---- the mounts' table --------------------------------------------------------- */

static void test_node__mount_table(void **state)
{
	struct node_config other;
	struct mount *a, *b;

	a = table_add("/srv/lr-m1", hex, surl, true);
	b = table_add("/srv/lr-m2", "00112233445566778899aabbccddeeff", surl, false);
	assert_ptr_equal(node_mount_at(&w, "/srv/lr-m1"), a);
	assert_ptr_equal(node_mount_at(&w, "/srv/lr-m2"), b);
	assert_null(node_mount_at(&w, "/srv/lr-m"));
	assert_null(node_mount_at(&w, "/srv/lr-m1/"));

	/* a shared mount is found by (index, store): another store's is not it */
	node_config_init(&other);
	assert_int_equal(node_config_set(&other, "store", "dir:/elsewhere", "test"), 0);
	assert_null(node_shared_mount(&w, hex, &other));
	assert_int_equal(w.nmounts, 2);
	/* a mount not shared (`mount DIR`) is never a run's */
	assert_null(node_shared_mount(&w, b->hex, &cfg));
	assert_int_equal(w.nmounts, 2);
	/* the right one, but its connection has ended: forgotten, not handed out */
	assert_null(node_shared_mount(&w, hex, &cfg));
	assert_int_equal(w.nmounts, 1);
	assert_ptr_equal(w.mounts[0], b);
	node_config_destroy(&other);
}

static void test_node__mount_options(void **state)
{
	json_t *j = NULL;
	struct mopts o;

	/* no options: the node's settings */
	assert_int_equal(node_config_set(&cfg, "readahead", "7", "test"), 0);
	assert_int_equal(node_config_set(&cfg, "passthrough", "off", "test"), 0);
	assert_int_equal(node_mopts_parse(&cfg, NULL, &o), 0);
	assert_int_equal(o.readahead, 7);
	assert_false(o.passthrough);
	assert_true(o.allow_other);
	assert_false(o.suid);
	assert_null(o.record);

	static const char opts[] = "{\"suid\":true,\"allow_other\":false,\"record\":\"/r/p\"}";

	assert_int_equal(json_parse(opts, strlen(opts), &j, NULL), 0);
	assert_int_equal(node_mopts_parse(&cfg, j, &o), 0);
	assert_true(o.suid);
	assert_false(o.dev);
	assert_false(o.allow_other);
	assert_string_equal(o.record, "/r/p");
	free(o.record);
	json_decref(j);

	static const char *const bad[] = {
		"{\"suid\":\"yes\"}", "{\"record\":\"rel\"}", "{\"record\":1}", "{\"x\":1}", "[]",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		assert_int_equal(json_parse(bad[i], strlen(bad[i]), &j, NULL), 0);
		assert_int_equal(node_mopts_parse(&cfg, j, &o), -EINVAL);
		json_decref(j);
	}
}

/* ---- the settings a request carries ---------------------------------------------- */

static void test_node__settings_travel(void **state)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	const struct node_config_key *k;
	struct node_config c, back;
	json_t *j = NULL;
	char v1[4096], v2[4096];
	static const char secrets[] = "{\"AWS_ACCESS_KEY_ID\":\"AK\"}";

	node_config_init(&c);
	assert_int_equal(node_config_set(&c, "cache_size", "3G", "test"), 0);
	assert_int_equal(node_config_set(&c, "fetch_timeout", "2500ms", "test"), 0);
	assert_int_equal(node_config_set(&c, "s3_endpoint", "http://127.0.0.1:9", "test"), 0);
	assert_int_equal(node_config_set(&c, "profile", "off", "test"), 0);
	assert_int_equal(json_parse(secrets, strlen(secrets), &j, NULL), 0);
	assert_int_equal(node_config_apply_secrets(&c, j), 0);
	json_decref(j);

	/* as JSON: every setting but the secrets, read back the same */
	assert_int_equal(json_buf_add(&b, node_config_json(&c)), 0);
	assert_null(memmem(b.data, b.len, "AK", 2));
	assert_int_equal(json_parse(b.data, b.len, &j, NULL), 0);
	node_config_init(&back);
	assert_int_equal(node_config_apply_json(&back, j), 0);
	json_decref(j);
	for (size_t i = 0; (k = node_config_key_at(i)); i++) {
		if (k->env_only)
			continue;
		assert_int_equal(node_config_get(&c, k->key, v1, sizeof(v1)), 0);
		assert_int_equal(node_config_get(&back, k->key, v2, sizeof(v2)), 0);
		assert_string_equal(v1, v2);
	}
	assert_int_equal(back.cache_size, 3ULL << 30);
	assert_int_equal(back.fetch_timeout_ms, 2500);
	assert_null(back.aws_access_key_id);
	node_config_destroy(&back);

	/* a copy: the settings and the secrets */
	assert_int_equal(node_config_copy(&c, &back), 0);
	assert_string_equal(back.s3_endpoint, "http://127.0.0.1:9");
	assert_false(back.profile);
	assert_string_equal(back.aws_access_key_id, "AK");
	node_config_destroy(&back);

	static const char *const bad[] = { "[]", "{\"cache_size\":3}", "{\"nope\":\"1\"}",
	                                   "{\"cache_size\":\"lots\"}" };
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		node_config_init(&back);
		assert_int_equal(json_parse(bad[i], strlen(bad[i]), &j, NULL), 0);
		assert_int_equal(node_config_apply_json(&back, j), -EINVAL);
		json_decref(j);
		node_config_destroy(&back);
	}
	node_config_destroy(&c);
}

/* ---- an index, a pack and a profile from the store ---------------------------- */

static void test_node__index_kept(void **state)
{
	struct node_index m = { 0 }, again = { 0 };
	struct image_info info;
	struct store *s;
	char path[256];
	struct stat st;
	int fd;

	assert_int_equal(store_open(surl, &s), 0);
	/* nothing kept yet: without a store, -ENOENT */
	assert_int_equal(node_index_load(NULL, cache_dir, hex, &m), -ENOENT);
	node_index_free(&m);
	/* a dir: store's own file, mapped; not yet in the cache */
	assert_int_equal(node_index_load(s, cache_dir, hex, &m), 0);
	assert_true(node_index_unkept(&m));
	image_get_info(m.img, &info);
	assert_int_equal(info.chunks, image_chunks);
	snprintf(path, sizeof(path), "%s/indexes/%s", cache_dir, hex);
	assert_int_equal(stat(path, &st), -1);
	/* kept: named in the cache, and found there without a store */
	assert_int_equal(node_index_keep(&m), 0);
	assert_false(node_index_unkept(&m));
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal((size_t)st.st_size, m.len);
	assert_int_equal(node_index_keep(&m), 0);  /* nothing left to do */
	assert_int_equal(node_index_load(NULL, cache_dir, hex, &again), 0);
	assert_memory_equal(again.data, m.data, m.len);
	node_index_free(&again);
	node_index_free(&m);

	/* a kept copy damaged on disk is not used; with a store it is fetched again */
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "junk", 4), 4);
	close(fd);
	assert_true(node_index_load(NULL, cache_dir, hex, &m) < 0);
	node_index_free(&m);
	assert_int_equal(node_index_load(s, cache_dir, hex, &m), 0);
	image_get_info(m.img, &info);
	assert_int_equal(info.chunks, image_chunks);
	node_index_free(&m);

	/* an index the store does not have */
	assert_true(node_index_load(s, cache_dir, "00112233445566778899aabbccddeeff", &m) < 0);
	node_index_free(&m);
	store_free(s);
}

static void test_node__pack_offsets(void **state)
{
	struct node_index m = { 0 };
	struct image_info info;
	uint64_t *v = (uint64_t *)1, bytes = 0;
	struct store *s;
	char path[256];

	assert_int_equal(store_open(surl, &s), 0);
	assert_int_equal(node_index_load(s, cache_dir, hex, &m), 0);
	image_get_info(m.img, &info);
	/* no pack: no offsets */
	assert_int_equal(node_pack_offsets(s, m.img, hex, &v), 0);
	assert_null(v);
	/* a pack: each chunk's offset in it, and its end is the pack's size */
	assert_int_equal(build_pack(s, m.img, hex, &bytes), 0);
	assert_int_equal(node_pack_offsets(s, m.img, hex, &v), 0);
	assert_non_null(v);
	assert_int_equal(v[0], 0);
	for (uint64_t i = 0; i < info.chunks; i++)
		assert_true(v[i + 1] > v[i]);
	assert_int_equal(v[info.chunks], bytes);
	free(v);
	/* a pack of the wrong size is not read */
	snprintf(path, sizeof(path), "%s/packs/%s", store_dir, hex);
	assert_int_equal(truncate(path, (off_t)bytes - 1), 0);
	assert_int_equal(node_pack_offsets(s, m.img, hex, &v), 0);
	assert_null(v);
	assert_int_equal(unlink(path), 0);
	node_index_free(&m);
	store_free(s);
}

static void test_node__profile_fetch(void **state)
{
	static const uint32_t trace[] = { 2, 0, 1 };
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	struct image_profile *p = (struct image_profile *)1;
	uint8_t idx[HASH_SIZE], other[HASH_SIZE] = { 1 };
	char path[256], key[64];
	const uint32_t *t;
	struct store *s;
	size_t n;

	assert_int_equal(store_open(surl, &s), 0);
	node_profile_key(hex, key);
	assert_int_equal(strncmp(key, "profiles/", 9), 0);
	assert_string_equal(key + 9, hex);
	/* none in the store */
	assert_int_equal(node_profile_fetch(s, hex, &p), 0);
	assert_null(p);
	/* one written as a mount records it, then stored: read back */
	assert_int_equal(hex_decode(hex, idx, HASH_SIZE), 0);
	snprintf(path, sizeof(path), "%s/trace", root);
	assert_int_equal(image_profile_write_trace(path, idx, trace, ARRAY_SIZE(trace)), 0);
	assert_int_equal(read_file(path, 1 << 20, &b), 0);
	assert_int_equal(store_put_sync(s, key, b.data, b.len), 0);
	assert_int_equal(node_profile_fetch(s, hex, &p), 0);
	assert_non_null(p);
	assert_int_equal(image_profile_traces(p), 1);
	t = image_profile_trace(p, 0, &n);
	assert_int_equal(n, ARRAY_SIZE(trace));
	assert_memory_equal(t, trace, sizeof(trace));
	image_profile_free(p);
	/* a profile recorded for another index is not used */
	assert_int_equal(image_profile_write_trace(path, other, trace, ARRAY_SIZE(trace)), 0);
	b.len = 0;
	assert_int_equal(read_file(path, 1 << 20, &b), 0);
	assert_int_equal(store_put_sync(s, key, b.data, b.len), 0);
	assert_int_equal(node_profile_fetch(s, hex, &p), 0);
	assert_null(p);
	/* nor a corrupt one */
	assert_int_equal(store_put_sync(s, key, "LZRPROF", 7), 0);
	assert_int_equal(node_profile_fetch(s, hex, &p), 0);
	assert_null(p);
	/* a path that cannot be written */
	assert_true(image_profile_write_trace("/nonexistent-lr/dir/p", idx, trace, 1) < 0);
	assert_int_equal(store_delete_sync(s, key), 0);
	store_free(s);
}

/* ---- prefetch jobs --------------------------------------------------------------- */

/* Start a prefetch job from request text: node_job_start()'s result. */
static int job_start(const char *text, struct pjob **ret)
{
	json_t *j = NULL;
	int r;

	assert_int_equal(json_parse(text, strlen(text), &j, NULL), 0);
	r = node_job_start(&w, j, ret);
	json_decref(j);
	return r;
}

static void test_node__prefetch_job(void **state)
{
	_cleanup_(buf_freep) struct buf reply = BUF_INIT, line = BUF_INIT;
	struct pjob *job = NULL;
	json_t *j = NULL;
	int64_t chunks, failed;
	char path[256];
	struct stat st;
	bool v = false;

	assert_int_equal(job_start("{\"verb\":\"prefetch\"}", &job), -EINVAL);
	assert_int_equal(job_start("{\"verb\":\"prefetch\",\"ref\":\"img:1\",\"paths\":\"big\"}",
	                           &job), -EINVAL);
	assert_int_equal(job_start("{\"verb\":\"prefetch\",\"ref\":\"img:1\",\"paths\":[1]}",
	                           &job), -EINVAL);
	assert_int_equal(job_start("{\"verb\":\"prefetch\",\"ref\":\"img:1\",\"decode\":\"y\"}",
	                           &job), -EINVAL);
	assert_true(job_start("{\"verb\":\"prefetch\",\"ref\":\"nothere:1\"}", &job) < 0);
	assert_true(job_start("{\"verb\":\"prefetch\",\"ref\":\"img:1\",\"paths\":[\"/none\"]}",
	                      &job) < 0);
	/* --profiled with no profile in the store */
	assert_int_equal(job_start("{\"verb\":\"prefetch\",\"ref\":\"img:1\",\"profiled\":true}",
	                           &job), -ENOENT);
	assert_null(job);

	/* the whole image, decoded into the cache, on the worker's loop */
	assert_int_equal(job_start("{\"verb\":\"prefetch\",\"ref\":\"img:1\",\"decode\":true,"
	                           "\"progress\":true}", &job), 1);
	assert_non_null(job);
	assert_string_equal(job->hex, hex);
	while (!node_prefetch_finished(job->pf))
		assert_true(loop_run_once(w.l, true) >= 0);
	/* a progress line is due at once (none has been sent) */
	assert_int_equal(node_job_progress(job, &line), 1);
	assert_non_null(memmem(line.data, line.len, "\"progress\"", 10));
	assert_int_equal(node_job_progress(job, &line), 0);  /* not again so soon */
	assert_int_equal(node_job_reply(job, &reply), 0);
	assert_int_equal(json_parse(reply.data, reply.len, &j, NULL), 0);
	assert_int_equal(json_bool(json_object_get(j, "ok"), &v), 0);
	assert_true(v);
	assert_string_equal(json_get_cstr(j, "index"), hex);
	assert_string_equal(json_get_cstr(j, "mode"), "decoded");
	assert_int_equal(json_int(json_object_get(j, "chunks"), &chunks), 0);
	assert_int_equal(json_int(json_object_get(j, "failed"), &failed), 0);
	assert_int_equal(chunks, (int64_t)image_chunks);
	assert_int_equal(failed, 0);
	json_decref(j);
	/* the job kept the index in the cache */
	snprintf(path, sizeof(path), "%s/indexes/%s", cache_dir, hex);
	assert_int_equal(stat(path, &st), 0);
	node_job_free(job);
	/* the node holds one store and one cache for both, however many requests */
	assert_int_equal(w.nstores, 1);
	assert_int_equal(w.ncaches, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_node__request_errors, worker_setup,
		                                worker_teardown),
		cmocka_unit_test_setup_teardown(test_node__request_mount_checks, worker_setup,
		                                worker_teardown),
		cmocka_unit_test_setup_teardown(test_node__request_inside_a_mount, worker_setup,
		                                worker_teardown),
		cmocka_unit_test_setup_teardown(test_node__status_and_umount, worker_setup,
		                                worker_teardown),
		cmocka_unit_test_setup_teardown(test_node__stats_without_a_cache, worker_setup,
		                                worker_teardown),
		cmocka_unit_test_setup_teardown(test_node__mount_table, worker_setup,
		                                worker_teardown),
		cmocka_unit_test_setup_teardown(test_node__mount_options, worker_setup,
		                                worker_teardown),
		cmocka_unit_test(test_node__settings_travel),
		cmocka_unit_test_setup_teardown(test_node__index_kept, worker_setup,
		                                worker_teardown),
		cmocka_unit_test_setup_teardown(test_node__pack_offsets, worker_setup,
		                                worker_teardown),
		cmocka_unit_test_setup_teardown(test_node__profile_fetch, worker_setup,
		                                worker_teardown),
		cmocka_unit_test_setup_teardown(test_node__prefetch_job, worker_setup,
		                                worker_teardown),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
