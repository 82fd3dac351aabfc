/* test_config.c — the node's settings (node/config.c): defaults, the config
 * file, each error message (file, line, key), precedence of file, environment
 * and flags, sizes and durations, a dump read back, and docs/settings.md
 * agreeing with the key table both ways. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sys/mman.h>

#include "lib/lib.h"
#include "cache/cache.h"
#include "store/store.h"
#include "node/config.h"

static char dir[] = "/tmp/lazyroot-test-config-XXXXXX";

/* Every variable the config reads, so that the host's environment does not
 * leak into a test. */
static void clear_env(void)
{
	const struct node_config_key *k;

	for (size_t i = 0; (k = node_config_key_at(i)); i++) {
		if (k->env)
			unsetenv(k->env);
		if (k->env2)
			unsetenv(k->env2);
	}
	unsetenv("LAZYROOT_CONFIG");
}

static int setup(void **state)
{
	if (!mkdtemp(dir))
		return -1;
	clear_env();
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* Write text to DIR/name; the path in a static buffer. */
static const char *write_conf(const char *name, const char *text)
{
	static char path[256];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	assert_int_equal(write_file_atomic(path, text, strlen(text), 0644), 0);
	return path;
}

/* Capture what a call writes to stderr. */
static int saved_fd = -1, cap_fd = -1;

static void capture_begin(void)
{
	fflush(stderr);
	cap_fd = memfd_create("stderr", MFD_CLOEXEC);
	assert_true(cap_fd >= 0);
	saved_fd = dup(STDERR_FILENO);
	assert_true(saved_fd >= 0);
	assert_true(dup2(cap_fd, STDERR_FILENO) >= 0);
}

/* The captured text (static buffer). */
static const char *capture_end(void)
{
	static char out[4096];
	ssize_t n;

	fflush(stderr);
	dup2(saved_fd, STDERR_FILENO);
	close(saved_fd);
	n = pread(cap_fd, out, sizeof(out) - 1, 0);
	close(cap_fd);
	out[n > 0 ? n : 0] = 0;
	return out;
}

static void test_config__defaults(void **state)
{
	struct node_config c;

	node_config_init(&c);
	assert_string_equal(c.store_url, STORE_DEFAULT_URL);
	assert_string_equal(c.cache_dir, CACHE_DEFAULT_DIR);
	assert_int_equal(c.cache_size, CACHE_DEFAULT_LIMIT);
	assert_int_equal(c.cache_memory, CACHE_DEFAULT_MEMORY);
	assert_string_equal(c.images_dir, "/run/lazyroot/images");
	assert_string_equal(c.socket_path, "/run/lazyroot/node.sock");
	assert_string_equal(c.metrics_addr, "127.0.0.1:9477");
	assert_int_equal(c.fetch_timeout_ms, STORE_DEFAULT_FETCH_TIMEOUT_MS);
	assert_int_equal(c.readahead, 4);
	assert_true(c.passthrough);
	assert_false(c.cpu_latency);
	assert_int_equal(c.cpu_latency_hold_ms, 50);
	assert_true(c.profile);
	assert_int_equal(c.cache_near_us, CACHE_DEFAULT_NEAR_US);
	assert_int_equal(c.cache_decoders, NODE_DECODERS_AUTO);
	assert_int_equal(c.http_transfers, 32);
	assert_int_equal(c.http_connect_timeout_ms, 5000);
	assert_int_equal(c.http_low_speed_time_ms, 10000);
	assert_string_equal(c.s3_region, "us-east-1");
	assert_null(c.s3_endpoint);
	assert_null(c.s3_profile);
	assert_null(c.aws_access_key_id);
	assert_true(c.pool);
	assert_string_equal(c.pool_dir, "/run/lazyroot/pool");
	assert_string_equal(c.record_dir, "/run/lazyroot/launchers");
	assert_string_equal(c.tmp_dir, "/tmp");
	assert_null(c.config_path);
	node_config_destroy(&c);
	node_config_destroy(&c);   /* twice is harmless */
}

static void test_config__file(void **state)
{
	struct node_config c;
	const char *path = write_conf("good.conf",
		"# a comment\n"
		"\n"
		"   store   =   http://127.0.0.1:8080/store,dir:/srv/mirror  \n"
		"cache=/var/cache/lr\n"
		"\t# an indented comment\n"
		"cache_size = 2G\n"
		"cache_memory = 0\n"
		"images = /run/lr/images\n"
		"socket = /run/lr/node.sock\n"
		"metrics = off\n"
		"cpu_latency = on\n"
		"cpu_latency_hold = 2s\n"
		"passthrough = no\n"
		"readahead = 0\n"
		"fetch_timeout = 90\n"
		"cache_near = off\n"
		"cache_decoders = 0\n"
		"s3_endpoint = https://s3.example:9000\n"
		"s3_profile =\n"
		"pool = false\n"
		"http_low_speed_time = 2500ms");   /* no newline at the end */

	node_config_init(&c);
	assert_int_equal(node_config_load(&c, path, true), 0);
	assert_string_equal(c.config_path, path);
	assert_string_equal(c.store_url, "http://127.0.0.1:8080/store,dir:/srv/mirror");
	assert_string_equal(c.cache_dir, "/var/cache/lr");
	assert_int_equal(c.cache_size, 2ULL << 30);
	assert_int_equal(c.cache_memory, 0);
	assert_string_equal(c.images_dir, "/run/lr/images");
	assert_string_equal(c.socket_path, "/run/lr/node.sock");
	assert_null(c.metrics_addr);
	assert_true(c.cpu_latency);
	assert_int_equal(c.cpu_latency_hold_ms, 2000);
	assert_false(c.passthrough);
	assert_int_equal(c.readahead, 0);
	assert_int_equal(c.fetch_timeout_ms, 90000);
	assert_int_equal(c.cache_near_us, NODE_NEAR_OFF);
	assert_int_equal(c.cache_decoders, 0);
	assert_string_equal(c.s3_endpoint, "https://s3.example:9000");
	assert_null(c.s3_profile);
	assert_false(c.pool);
	assert_int_equal(c.http_low_speed_time_ms, 2500);
	node_config_destroy(&c);

	/* a missing file: an error only when it must exist */
	node_config_init(&c);
	assert_int_equal(node_config_load(&c, "/nonexistent/node.conf", false), 0);
	assert_null(c.config_path);
	capture_begin();
	assert_int_equal(node_config_load(&c, "/nonexistent/node.conf", true), -ENOENT);
	assert_string_equal(capture_end(), "lazyroot: config file '/nonexistent/node.conf': "
	                    "No such file or directory\n");
	node_config_destroy(&c);
}

/* Each bad line: its message names the file, the line and the key. */
static void test_config__errors(void **state)
{
	static const struct { const char *text, *msg; } cases[] = {
		{ "store = dir:/x\ncache_sise = 1G\n", "2: cache_sise: unknown setting "
		  "(docs/settings.md lists them)" },
		{ "cache_size = lots\n", "1: cache_size: 'lots' is not a size (e.g. 512M, 10G)" },
		{ "cache_size = 0\n", "1: cache_size: '0': must not be 0" },
		{ "# c\n\nreadahead\n", "3: readahead: want key = value" },
		{ "  = 5\n", "1: no key before '='" },
		{ "readahead = 4\nreadahead = 8\n", "2: readahead: set again (first on line 1)" },
		{ "readahead = 2000\n", "1: readahead: '2000': want a number from 0 to 1024" },
		{ "readahead = -1\n", "1: readahead: '-1': want a number from 0 to 1024" },
		{ "fetch_timeout = 5 s\n", "1: fetch_timeout: '5 s': want a duration from 0ms to "
		  "86400000ms (a bare number is in s)" },
		{ "cpu_latency_hold = 0\n", "1: cpu_latency_hold: '0': want a duration from 1ms to "
		  "60000ms (a bare number is in ms)" },
		{ "cpu_latency = maybe\n", "1: cpu_latency: 'maybe': want on or off" },
		{ "metrics = 9477\n", "1: metrics: '9477': want HOST:PORT or off" },
		{ "metrics = host:99999\n", "1: metrics: 'host:99999': want HOST:PORT or off" },
		{ "socket = run/node.sock\n", "1: socket: 'run/node.sock' is not an absolute path" },
		{ "pool_dir = pool\n", "1: pool_dir: 'pool' is not an absolute path" },
		{ "store =\n", "1: store: empty" },
		{ "s3_endpoint = ftp://x\n", "1: s3_endpoint: 'ftp://x': want http[s]://HOST[:PORT]" },
		{ "s3_region = eu west\n", "1: s3_region: 'eu west' is not a region name" },
		{ "cache_near = soon\n", "1: cache_near: 'soon': want a duration (e.g. 5ms) or off" },
		{ "cache_decoders = 9\n", "1: cache_decoders: '9': want auto or 0 to 4" },
		{ "ids_range = 5\n", "1: ids_range: '5': want START:COUNT or auto" },
		{ "ids_range = 0:65536\n", "1: ids_range: '0:65536': want START from 1 and COUNT of "
		  "65536 or more, ending below 4294967295" },
		{ "ids_range = 100:65535\n", "1: ids_range: '100:65535': want START from 1 and COUNT "
		  "of 65536 or more, ending below 4294967295" },
		{ "ids_range = 4294901760:65536\n", "1: ids_range: '4294901760:65536': want START "
		  "from 1 and COUNT of 65536 or more, ending below 4294967295" },
		{ "service_dir = service\n", "1: service_dir: 'service' is not an absolute path" },
		{ "AWS_SECRET_ACCESS_KEY = x\n", "1: AWS_SECRET_ACCESS_KEY: unknown setting "
		  "(docs/settings.md lists them)" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct node_config c;
		char want[1024];
		const char *path = write_conf("bad.conf", cases[i].text);

		node_config_init(&c);
		capture_begin();
		assert_int_equal(node_config_load(&c, path, true), -EINVAL);
		snprintf(want, sizeof(want), "lazyroot: %s:%s\n", path, cases[i].msg);
		assert_string_equal(capture_end(), want);
		node_config_destroy(&c);
	}
}

/* Flags and variables are checked as file lines are, and name themselves. */
static void test_config__set(void **state)
{
	struct node_config c;

	node_config_init(&c);
	capture_begin();
	assert_int_equal(node_config_set(&c, "cache_size", "ten", "--cache-size"), -EINVAL);
	assert_string_equal(capture_end(), "lazyroot: --cache-size: 'ten' is not a size "
	                    "(e.g. 512M, 10G)\n");
	assert_int_equal(c.cache_size, CACHE_DEFAULT_LIMIT);    /* unchanged */
	capture_begin();
	assert_int_equal(node_config_set(&c, "nosuch", "1", NULL), -EINVAL);
	assert_string_equal(capture_end(), "lazyroot: nosuch: unknown setting\n");
	assert_int_equal(node_config_set(&c, "store", "dir:/a", "--store"), 0);
	assert_int_equal(node_config_set(&c, "store", "dir:/b", "--store"), 0);
	assert_string_equal(c.store_url, "dir:/b");
	assert_int_equal(node_config_set(&c, "metrics", "[::1]:9100", NULL), 0);
	assert_string_equal(c.metrics_addr, "[::1]:9100");
	assert_int_equal(node_config_set(&c, "metrics", "off", NULL), 0);
	assert_null(c.metrics_addr);
	assert_int_equal(node_config_set(&c, "s3_endpoint", "http://127.0.0.1:7480", NULL), 0);
	assert_int_equal(node_config_set(&c, "s3_endpoint", "", NULL), 0);
	assert_null(c.s3_endpoint);
	node_config_destroy(&c);
}

/* trust_keys: absolute paths, optionally for one store; each --trust-key adds one (a relative
 * path taken from the current directory); --require-signed turns its switch on. */
static void test_config__trust_keys(void **state)
{
	struct node_config c;
	char cwd[PATH_MAX], want[PATH_MAX + 64];

	node_config_init(&c);
	assert_null(c.trust_keys);
	assert_false(c.require_signed);
	assert_int_equal(node_config_set(&c, "trust_keys", "/k/a.pub dir:/s=/k/b.pub", NULL), 0);
	assert_string_equal(c.trust_keys, "/k/a.pub dir:/s=/k/b.pub");
	/* a store URL may hold '=': the path is after the last "=/" */
	assert_int_equal(node_config_set(&c, "trust_keys", "http://h/s?a=b=/k/c.pub", NULL), 0);
	capture_begin();
	assert_int_equal(node_config_set(&c, "trust_keys", "/k/a.pub k.pub", "node.conf:2: "
	                                 "trust_keys"), -EINVAL);
	assert_string_equal(capture_end(), "lazyroot: node.conf:2: trust_keys: 'k.pub': want "
	                    "/FILE.pub or STORE=/FILE.pub, an absolute path\n");
	capture_begin();
	assert_int_equal(node_config_set(&c, "trust_keys", "=/k/a.pub", NULL), -EINVAL);
	(void)capture_end();
	assert_int_equal(node_config_set(&c, "trust_keys", "/k/a.pub", NULL), 0);
	assert_int_equal(node_config_set_flag(&c, "--trust-key", "rel.pub"), 0);
	assert_int_equal(node_config_set_flag(&c, "--trust-key", "dir:/s=/k/b.pub"), 0);
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	snprintf(want, sizeof(want), "/k/a.pub %s/rel.pub dir:/s=/k/b.pub", cwd);
	assert_string_equal(c.trust_keys, want);
	capture_begin();
	assert_int_equal(node_config_set_flag(&c, "--trust-key", "a b.pub"), -EINVAL);
	(void)capture_end();
	assert_int_equal(node_config_set_flag(&c, "--require-signed", NULL), 0);
	assert_true(c.require_signed);
	/* a --no-… switch still turns its setting off */
	assert_int_equal(node_config_set_flag(&c, "--no-profile", NULL), 0);
	assert_false(c.profile);
	node_config_destroy(&c);
}

static void test_config__env(void **state)
{
	struct node_config c;

	setenv("LAZYROOT_STORE", "dir:/from/env", 1);
	setenv("LAZYROOT_CACHE_NEAR_MS", "12", 1);
	setenv("LAZYROOT_PASSTHROUGH", "off", 1);
	setenv("LAZYROOT_POOL", "0", 1);
	setenv("LAZYROOT_CACHE_DECODERS", "2", 1);
	setenv("AWS_ENDPOINT_URL", "http://second:1", 1);
	setenv("AWS_DEFAULT_REGION", "eu-west-1", 1);
	setenv("SSL_CERT_FILE", "/etc/ca.pem", 1);
	setenv("AWS_ACCESS_KEY_ID", "KEY", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "secret", 1);
	setenv("LAZYROOT_IMAGES", "", 1);     /* empty: ignored */
	node_config_init(&c);
	assert_int_equal(node_config_env(&c), 0);
	assert_string_equal(c.store_url, "dir:/from/env");
	assert_int_equal(c.cache_near_us, 12000);
	assert_false(c.passthrough);
	assert_false(c.pool);
	assert_int_equal(c.cache_decoders, 2);
	assert_string_equal(c.s3_endpoint, "http://second:1");
	assert_string_equal(c.s3_region, "eu-west-1");
	assert_string_equal(c.tls_ca_file, "/etc/ca.pem");
	assert_string_equal(c.aws_access_key_id, "KEY");
	assert_string_equal(c.aws_secret_access_key, "secret");
	assert_string_equal(c.images_dir, "/run/lazyroot/images");
	node_config_destroy(&c);

	/* the first of two variables wins */
	setenv("AWS_ENDPOINT_URL_S3", "https://first", 1);
	setenv("AWS_REGION", "r2", 1);
	setenv("CURL_CA_BUNDLE", "/etc/bundle.pem", 1);
	node_config_init(&c);
	assert_int_equal(node_config_env(&c), 0);
	assert_string_equal(c.s3_endpoint, "https://first");
	assert_string_equal(c.s3_region, "r2");
	assert_string_equal(c.tls_ca_file, "/etc/bundle.pem");
	node_config_destroy(&c);

	/* a bad value names its variable */
	setenv("LAZYROOT_HTTP_TRANSFERS", "0", 1);
	node_config_init(&c);
	capture_begin();
	assert_int_equal(node_config_env(&c), -EINVAL);
	assert_string_equal(capture_end(), "lazyroot: LAZYROOT_HTTP_TRANSFERS: '0': want a number "
	                    "from 1 to 1024\n");
	node_config_destroy(&c);
	clear_env();
}

/* defaults < file < environment < flags */
static void test_config__precedence(void **state)
{
	struct node_config c;
	const char *path = write_conf("prec.conf", "store = dir:/file\ncache = /file/cache\n"
	                              "images = /file/images\ncache_size = 1G\n");
	char *p = strdup(path);

	setenv("LAZYROOT_CACHE", "/env/cache", 1);
	setenv("LAZYROOT_IMAGES", "/env/images", 1);
	assert_int_equal(node_config_setup(&c, p), 0);
	assert_int_equal(node_config_set(&c, "images", "/flag/images", "--images"), 0);
	assert_string_equal(c.store_url, "dir:/file");        /* file over default */
	assert_string_equal(c.cache_dir, "/env/cache");       /* env over file */
	assert_string_equal(c.images_dir, "/flag/images");    /* flag over env */
	assert_int_equal(c.cache_size, 1ULL << 30);
	assert_string_equal(c.socket_path, "/run/lazyroot/node.sock");  /* default */
	node_config_destroy(&c);

	/* $LAZYROOT_CONFIG when no flag names a file; it must exist */
	setenv("LAZYROOT_CONFIG", p, 1);
	assert_int_equal(node_config_setup(&c, NULL), 0);
	assert_string_equal(c.store_url, "dir:/file");
	node_config_destroy(&c);
	setenv("LAZYROOT_CONFIG", "/nonexistent/node.conf", 1);
	capture_begin();
	assert_int_equal(node_config_setup(&c, NULL), -ENOENT);
	(void)capture_end();
	node_config_destroy(&c);
	capture_begin();
	assert_int_equal(node_config_setup(&c, "/nonexistent/flag.conf"), -ENOENT);
	assert_string_equal(capture_end(), "lazyroot: config file '/nonexistent/flag.conf': "
	                    "No such file or directory\n");
	node_config_destroy(&c);
	free(p);
	clear_env();
}

static void test_config__sizes_and_durations(void **state)
{
	struct node_config c;
	uint64_t ms;
	char out[64];

	assert_int_equal(parse_duration("30", 1000, UINT64_MAX, &ms), 0);
	assert_int_equal(ms, 30000);
	assert_int_equal(parse_duration("30", 1, UINT64_MAX, &ms), 0);
	assert_int_equal(ms, 30);
	assert_int_equal(parse_duration("250ms", 1000, UINT64_MAX, &ms), 0);
	assert_int_equal(ms, 250);
	assert_int_equal(parse_duration("2m", 1, UINT64_MAX, &ms), 0);
	assert_int_equal(ms, 120000);
	assert_int_equal(parse_duration("1h", 1, UINT64_MAX, &ms), 0);
	assert_int_equal(ms, 3600000);
	assert_int_equal(parse_duration("0", 1000, 10, &ms), 0);
	assert_int_equal(ms, 0);
	assert_int_equal(parse_duration("11ms", 1, 10, &ms), -EINVAL);
	assert_int_equal(parse_duration("1s", 1, 999, &ms), -EINVAL);
	assert_int_equal(parse_duration("", 1, 10, &ms), -EINVAL);
	assert_int_equal(parse_duration("-1", 1, 10, &ms), -EINVAL);
	assert_int_equal(parse_duration("1.5s", 1, UINT64_MAX, &ms), -EINVAL);
	assert_int_equal(parse_duration("5 s", 1, UINT64_MAX, &ms), -EINVAL);
	assert_int_equal(parse_duration("5d", 1, UINT64_MAX, &ms), -EINVAL);
	assert_int_equal(parse_duration("99999999999999999999", 1, UINT64_MAX, &ms), -EINVAL);
	assert_int_equal(parse_duration("18446744073709551615h", 1, UINT64_MAX, &ms), -EINVAL);

	node_config_init(&c);
	assert_int_equal(node_config_set(&c, "cache_size", "1.5G", NULL), 0);
	assert_int_equal(c.cache_size, 3ULL << 29);
	assert_int_equal(node_config_get(&c, "cache_size", out, sizeof(out)), 0);
	assert_string_equal(out, "1536M");
	assert_int_equal(node_config_set(&c, "cache_memory", "512KiB", NULL), 0);
	assert_int_equal(c.cache_memory, 512 << 10);
	assert_int_equal(node_config_set(&c, "cache_memory", "4097", NULL), 0);
	assert_int_equal(node_config_get(&c, "cache_memory", out, sizeof(out)), 0);
	assert_string_equal(out, "4097");
	assert_int_equal(node_config_set(&c, "fetch_timeout", "1500ms", NULL), 0);
	assert_int_equal(node_config_get(&c, "fetch_timeout", out, sizeof(out)), 0);
	assert_string_equal(out, "1500ms");
	assert_int_equal(node_config_set(&c, "cache_near", "2s", NULL), 0);
	assert_int_equal(c.cache_near_us, 2000000);
	assert_int_equal(node_config_get(&c, "cache_near", out, sizeof(out)), 0);
	assert_string_equal(out, "2s");
	assert_int_equal(node_config_get(&c, "nosuch", out, sizeof(out)), -ENOENT);
	assert_int_equal(node_config_get(&c, "store", out, 4), -ENAMETOOLONG);
	node_config_destroy(&c);
}

/* A dump of a changed config, read back, is the same config; the commented
 * dump (the installed node.conf) changes nothing. */
static void test_config__dump_reads_back(void **state)
{
	struct node_config a, b;
	char path[256], va[4096], vb[4096];
	const struct node_config_key *k;
	FILE *f;

	node_config_init(&a);
	assert_int_equal(node_config_set(&a, "store", "s3://bucket/p", NULL), 0);
	assert_int_equal(node_config_set(&a, "cache_size", "3G", NULL), 0);
	assert_int_equal(node_config_set(&a, "metrics", "off", NULL), 0);
	assert_int_equal(node_config_set(&a, "cache_near", "off", NULL), 0);
	assert_int_equal(node_config_set(&a, "cpu_latency", "on", NULL), 0);
	assert_int_equal(node_config_set(&a, "cache_decoders", "1", NULL), 0);
	assert_int_equal(node_config_set(&a, "s3_profile", "ci", NULL), 0);
	assert_int_equal(node_config_set(&a, "ids_range", "2100000000:131072", NULL), 0);
	assert_int_equal(node_config_set(&a, "service_dir", "/srv/node-a/service", NULL), 0);
	for (int commented = 0; commented < 2; commented++) {
		snprintf(path, sizeof(path), "%s/dump%d.conf", dir, commented);
		f = fopen(path, "w");
		assert_non_null(f);
		node_config_dump(&a, f, commented);
		assert_int_equal(fclose(f), 0);
		node_config_init(&b);
		assert_int_equal(node_config_load(&b, path, true), 0);
		if (commented) {
			/* nothing set: b is the defaults */
			assert_string_equal(b.store_url, STORE_DEFAULT_URL);
			assert_false(b.cpu_latency);
			node_config_destroy(&b);
			continue;
		}
		for (size_t i = 0; (k = node_config_key_at(i)); i++) {
			if (k->env_only)
				continue;
			assert_int_equal(node_config_get(&a, k->key, va, sizeof(va)), 0);
			assert_int_equal(node_config_get(&b, k->key, vb, sizeof(vb)), 0);
			assert_string_equal(va, vb);
		}
		node_config_destroy(&b);
	}
	node_config_destroy(&a);
}

/* docs/settings.md's table and the key table agree, both ways: every key (and
 * every variable of an environment-only setting) has a row, every row names
 * a key the loader takes (or a variable it reads), with the same variables
 * and flag; a default the row spells as a value (`10G`, `off`) is the
 * default the code has. */
static void test_config__docs_agree(void **state)
{
	_cleanup_(buf_freep) struct buf doc = BUF_INIT;
	const struct node_config_key *k;
	struct node_config dflt;
	bool seen[128] = { false };
	unsigned rows = 0, defaults = 0;
	char *save = NULL;

	node_config_init(&dflt);
	assert_int_equal(read_file("docs/settings.md", 1 << 20, &doc), 0);
	assert_int_equal(buf_append_zero(&doc, 1), 0);
	for (char *line = strtok_r((char *)doc.data, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char key[128] = "", flag[128] = "", env[256] = "", def[256] = "", want[256];
		size_t i;

		/* | `key` | `--flag` or — | `VAR` [, `VAR2`] or — | default | meaning | */
		if (strncmp(line, "| `", 3))
			continue;
		if (sscanf(line, "| `%127[^`]` | %127[^|]| %255[^|]| %255[^|]|", key, flag, env,
		           def) != 4)
			fail_msg("docs/settings.md: a row that does not parse: %s", line);
		for (i = 0; (k = node_config_key_at(i)); i++)
			if (!strcmp(k->key, key))
				break;
		if (!k)
			fail_msg("docs/settings.md documents `%s`, which the config does not take", key);
		assert_true(i < ARRAY_SIZE(seen));
		if (seen[i])
			fail_msg("docs/settings.md documents `%s` twice", key);
		seen[i] = true;
		rows++;
		{
			char want_flag[128], want_env[256];

			snprintf(want_flag, sizeof(want_flag), k->flag ? "`%s` " : "— ",
			         k->flag ? k->flag : "");
			if (!k->env)
				snprintf(want_env, sizeof(want_env), "— ");
			else if (!k->env2)
				snprintf(want_env, sizeof(want_env), "`%s` ", k->env);
			else
				snprintf(want_env, sizeof(want_env), "`%s`, else `%s` ", k->env, k->env2);
			if (strcmp(flag, want_flag))
				fail_msg("docs/settings.md: `%s`: flag column '%s', want '%s'", key, flag,
				         want_flag);
			if (strcmp(env, want_env))
				fail_msg("docs/settings.md: `%s`: variable column '%s', want '%s'", key, env,
				         want_env);
		}
		/* `VALUE` first in the default column, and the code has a value */
		if (!k->env_only && def[0] == '`' &&
		    node_config_get(&dflt, key, want, sizeof(want)) == 0 && want[0]) {
			size_t n = strcspn(def + 1, "`");

			if (strlen(want) != n || strncmp(def + 1, want, n))
				fail_msg("docs/settings.md: `%s`: default %.*s, the code's is %s", key,
				         (int)n, def + 1, want);
			defaults++;
		}
	}
	for (size_t i = 0; (k = node_config_key_at(i)); i++)
		if (!seen[i])
			fail_msg("docs/settings.md lacks a row for `%s`", k->key);
	assert_true(rows > 30);
	assert_true(defaults > 20);
	node_config_destroy(&dflt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config__defaults),
		cmocka_unit_test(test_config__file),
		cmocka_unit_test(test_config__errors),
		cmocka_unit_test(test_config__set),
		cmocka_unit_test(test_config__trust_keys),
		cmocka_unit_test(test_config__env),
		cmocka_unit_test(test_config__precedence),
		cmocka_unit_test(test_config__sizes_and_durations),
		cmocka_unit_test(test_config__dump_reads_back),
		cmocka_unit_test(test_config__docs_agree),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
