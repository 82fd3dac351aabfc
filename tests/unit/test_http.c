/* test_http.c — the http store's pure parts (key URLs, status verdicts, backoff), its
 * retries against a port nobody listens on (sync and loop mode), and mirrors over two
 * dir: stores (failover on a missing object and on bytes the caller's check refuses). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "lib/lib.h"
#include "lib/loop.h"
#include "store/store-internal.h"

static void test_http__key_urls_follow_the_dir_layout(void **state)
{
	char out[256];

	assert_int_equal(http_key_url("http://h:1/s", "chunks/abcdef", out, sizeof(out)), 0);
	assert_string_equal(out, "http://h:1/s/chunks/ab/abcdef");
	assert_int_equal(http_key_url("http://h", "indexes/0011", out, sizeof(out)), 0);
	assert_string_equal(out, "http://h/indexes/0011");
	assert_int_equal(http_key_url("http://h", "tags/lib/py:3.12", out, sizeof(out)), 0);
	assert_string_equal(out, "http://h/tags/lib/py:3.12");
	assert_int_equal(http_key_url("http://h", "tags/a b%?#", out, sizeof(out)), 0);
	assert_string_equal(out, "http://h/tags/a%20b%25%3F%23");
	assert_int_equal(http_key_url("http://h", "tags/x", out, 12), -ENAMETOOLONG);
}

static void test_http__verdicts(void **state)
{
	int err;

	assert_int_equal(http_classify(CURLE_OK, 200, &err), HTTP_DONE);
	assert_int_equal(http_classify(CURLE_OK, 206, &err), HTTP_DONE);
	assert_int_equal(http_classify(CURLE_OK, 404, &err), HTTP_FAIL);
	assert_int_equal(err, -ENOENT);
	assert_int_equal(http_classify(CURLE_OK, 403, &err), HTTP_FAIL);
	assert_int_equal(err, -EACCES);
	assert_int_equal(http_classify(CURLE_OK, 400, &err), HTTP_FAIL);
	assert_int_equal(err, -EPROTO);
	assert_int_equal(http_classify(CURLE_OK, 500, &err), HTTP_RETRY);
	assert_int_equal(http_classify(CURLE_OK, 503, &err), HTTP_RETRY);
	assert_int_equal(http_classify(CURLE_OK, 429, &err), HTTP_RETRY);
	assert_int_equal(http_classify(CURLE_COULDNT_CONNECT, 0, &err), HTTP_RETRY_BRIEF);
	assert_int_equal(err, -ECONNREFUSED);
	assert_int_equal(http_classify(CURLE_COULDNT_RESOLVE_HOST, 0, &err), HTTP_RETRY_BRIEF);
	assert_int_equal(err, STORE_ERR_RESOLVE);
	assert_string_equal(store_strerror(err), "cannot resolve host name");
	assert_int_equal(http_classify(CURLE_PARTIAL_FILE, 200, &err), HTTP_RETRY);
	assert_int_equal(http_classify(CURLE_RECV_ERROR, 0, &err), HTTP_RETRY);
	assert_int_equal(http_classify(CURLE_OPERATION_TIMEDOUT, 0, &err), HTTP_RETRY);
	assert_int_equal(err, -ETIMEDOUT);
	assert_int_equal(http_classify(CURLE_PEER_FAILED_VERIFICATION, 0, &err), HTTP_FAIL);
}

static void test_http__backoff_doubles_with_jitter_and_caps(void **state)
{
	const uint64_t base = 50, cap = 2000;

	for (unsigned a = 1; a < 40; a++) {
		uint64_t step = MIN(base << MIN(a - 1, 20u), cap);
		uint64_t lo = http_backoff_ns(a, base, cap, 0);
		uint64_t hi = http_backoff_ns(a, base, cap, UINT32_MAX);

		assert_int_equal(lo, step / 2);
		assert_true(hi <= step && hi >= step - 1);
		assert_true(http_backoff_ns(a, base, cap, 12345) >= lo);
	}
	assert_int_equal(http_backoff_ns(1, base, cap, 0), 25);
	assert_int_equal(http_backoff_ns(2, base, cap, 0), 50);
	assert_int_equal(http_backoff_ns(30, base, cap, 0), 1000);
}

static void test_http__bad_urls_refused(void **state)
{
	struct store *s = NULL;

	assert_int_equal(store_open("http://", &s), -EINVAL);
	assert_int_equal(store_open("http://h/x?y=1", &s), -EINVAL);
	assert_int_equal(store_open("http://h/only,", &s), -EINVAL);
	assert_int_equal(store_open("https://h/base/", &s), 0);
	assert_string_equal(store_url(s), "https://h/base/");
	store_free(s);
}

/* A loopback port that refuses connections: bound, then closed. */
static int dead_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

static void got(void *ud, int64_t res, struct buf *data)
{
	*(int64_t *)ud = res;
}

static void test_http__refused_is_retried_until_the_timeout(void **state)
{
	char url[64];
	struct store *s;
	struct buf b = BUF_INIT;
	uint64_t t0 = now_ns(), ms;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/store", dead_port());
	assert_int_equal(store_open(url, &s), 0);
	store_set_fetch_timeout(s, 400);
	assert_int_equal(store_get_sync(s, "chunks/00112233", &b), -ECONNREFUSED);
	ms = (now_ns() - t0) / 1000000;
	assert_true(ms >= 350 && ms < 3000);
	assert_true(store_get_counters(s)->retries >= 2);
	assert_int_equal(store_get_counters(s)->failures, 1);
	store_free(s);
}

/* Refusal is retried for HTTP_BRIEF_RETRY_NS only, not for the whole fetch
 * timeout: a store that is not there fails in seconds. */
static void test_http__refused_fails_in_seconds(void **state)
{
	char url[64];
	struct store *s;
	struct buf b = BUF_INIT;
	uint64_t t0 = now_ns(), ms;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/store", dead_port());
	assert_int_equal(store_open(url, &s), 0);
	store_set_fetch_timeout(s, 30000);
	assert_int_equal(store_get_sync(s, "chunks/00112233", &b), -ECONNREFUSED);
	ms = (now_ns() - t0) / 1000000;
	assert_true(ms >= 1500 && ms < 4000);
	assert_true(store_get_counters(s)->retries >= 2);
	store_free(s);
}

static void test_http__loop_mode_goes_idle_after_failing(void **state)
{
	char url[64];
	struct store *s;
	struct loop *l;
	int64_t res = 1;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d", dead_port());
	assert_int_equal(loop_new(64, &l), 0);
	assert_int_equal(store_open(url, &s), 0);
	assert_int_equal(store_set_loop(s, l), 0);
	store_set_fetch_timeout(s, 200);
	assert_int_equal(store_get(s, "indexes/00", 0, 0, got, &res), 0);
	while (res == 1)
		assert_true(loop_run_once(l, true) >= 0);
	assert_int_equal(res, -ECONNREFUSED);
	/* no poll or timer of the store is left on the ring */
	while (loop_pending(l))
		assert_true(loop_run_once(l, true) >= 0);
	store_free(s);
	loop_free(l);
}

static char dirs[2][64];

static int two_dirs(void **state)
{
	for (int i = 0; i < 2; i++) {
		strcpy(dirs[i], "/tmp/lazyroot-test-http.XXXXXX");
		if (!mkdtemp(dirs[i]))
			return -1;
	}
	return 0;
}

static int rm_dirs(void **state)
{
	char cmd[200];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", dirs[0], dirs[1]);
	return system(cmd) == 0 ? 0 : -1;
}

static int refuse_bad(void *ud, struct buf *data, struct store_check *later)
{
	return data->len && data->data[0] == 'B' ? -EBADMSG : 0;
}

struct res {
	int64_t res;
	char first;
};

static void got_res(void *ud, int64_t res, struct buf *data)
{
	struct res *r = ud;

	r->res = res;
	r->first = res > 0 ? (char)data->data[0] : 0;
}

/* a check that answers later: it keeps the bytes and the handle */
struct later {
	struct res r;                  /* first: got_res() reads it */
	struct store_check *sc;
	struct buf data;
	unsigned checks;
};

static int check_later(void *ud, struct buf *data, struct store_check *sc)
{
	struct later *l = ud;

	l->sc = sc;
	l->data = *data;
	*data = (struct buf)BUF_INIT;
	l->checks++;
	return STORE_CHECK_LATER;
}

/* give the verdict on what check_later() kept: refuse "B…" */
static void judge_later(struct later *l)
{
	struct buf d = l->data;

	l->data = (struct buf)BUF_INIT;
	store_check_done(l->sc, d.len && d.data[0] == 'B' ? -EBADMSG : 0, &d);
	buf_free(&d);
}

static void test_http__mirrors_fail_over(void **state)
{
	struct store *a, *b, *m;
	char url[200];
	struct buf out = BUF_INIT;
	struct res r = { 1, 0 };

	snprintf(url, sizeof(url), "dir:%s", dirs[0]);
	assert_int_equal(store_open(url, &a), 0);
	snprintf(url, sizeof(url), "dir:%s", dirs[1]);
	assert_int_equal(store_open(url, &b), 0);
	assert_int_equal(store_put_sync(a, "indexes/bad", "BAD", 3), 0);
	assert_int_equal(store_put_sync(b, "indexes/bad", "GOOD", 4), 0);
	assert_int_equal(store_put_sync(b, "indexes/only2", "two", 3), 0);
	store_free(a);
	store_free(b);

	snprintf(url, sizeof(url), "dir:%s,dir:%s", dirs[0], dirs[1]);
	assert_int_equal(store_open(url, &m), 0);
	/* missing on the first: the second serves */
	assert_int_equal(store_get_sync(m, "indexes/only2", &out), 0);
	assert_memory_equal(out.data, "two", 3);
	/* unchecked: the first mirror's bytes; checked: refused, so the second's */
	assert_int_equal(store_get_sync(m, "indexes/bad", &out), 0);
	assert_memory_equal(out.data, "BAD", 3);
	assert_int_equal(store_get_checked(m, "indexes/bad", 0, 0, refuse_bad, got_res, &r), 0);
	assert_int_equal(store_run(m), 0);
	assert_int_equal(r.res, 4);
	assert_int_equal(r.first, 'G');
	assert_int_equal(store_get_counters(m)->failovers, 2);
	/* a verdict given later (a decoder thread's): refused, the next mirror is asked */
	{
		struct later l = { { 1, 0 }, NULL, BUF_INIT, 0 };

		/* store_run() would wait for the verdict too: turn until the check ran */
		assert_int_equal(store_get_checked(m, "indexes/bad", 0, 0, check_later, got_res, &l),
		                 0);
		for (int i = 0; i < 100 && l.checks < 1; i++)
			assert_true(store_run_once(m) >= 0);
		assert_int_equal(l.checks, 1);
		assert_int_equal(l.r.res, 1);   /* no answer before the verdict */
		judge_later(&l);
		for (int i = 0; i < 100 && l.checks < 2; i++)
			assert_true(store_run_once(m) >= 0);
		assert_int_equal(l.checks, 2);
		assert_int_equal(l.r.res, 1);
		judge_later(&l);
		assert_int_equal(l.r.res, 4);
		assert_int_equal(l.r.first, 'G');
		assert_int_equal(store_get_counters(m)->failovers, 3);
	}
	/* missing everywhere */
	assert_int_equal(store_get_sync(m, "indexes/none", &out), -ENOENT);
	/* puts go to the first only */
	assert_int_equal(store_put_sync(m, "indexes/new", "n", 1), 0);
	assert_int_equal(store_head_sync(m, "indexes/new"), 1);
	buf_free(&out);
	store_free(m);
}

/* A dead first mirror costs one object its timeout, then is passed over until
 * its back-off ends; a failed try doubles the back-off, a success ends it. */
static void test_http__dead_mirror_is_passed_over(void **state)
{
	struct store *b, *m;
	char url[200], key[32];
	struct buf out = BUF_INIT;
	uint64_t t0, ms;

	snprintf(url, sizeof(url), "dir:%s", dirs[1]);
	assert_int_equal(store_open(url, &b), 0);
	for (int i = 0; i < 6; i++) {
		snprintf(key, sizeof(key), "indexes/k%d", i);
		assert_int_equal(store_put_sync(b, key, "two", 3), 0);
	}
	store_free(b);

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/store,dir:%s", dead_port(), dirs[1]);
	assert_int_equal(store_open(url, &m), 0);
	store_set_fetch_timeout(m, 300);
	store_mirror_set_backoff(m, 600, 1200);
	/* the first object finds the first mirror dead: its timeout, then the second */
	t0 = now_ns();
	assert_int_equal(store_get_sync(m, "indexes/k0", &out), 0);
	ms = (now_ns() - t0) / 1000000;
	assert_true(ms >= 250);
	assert_int_equal(store_get_counters(m)->failovers, 1);
	/* the next ones do not ask it (each would take its 300 ms) */
	t0 = now_ns();
	assert_int_equal(store_get_sync(m, "indexes/k1", &out), 0);
	assert_int_equal(store_get_sync(m, "indexes/k2", &out), 0);
	ms = (now_ns() - t0) / 1000000;
	assert_true(ms < 250);
	assert_int_equal(store_get_counters(m)->failovers, 3);
	/* its back-off over, the next object tries it again: still dead */
	while ((now_ns() - t0) / 1000000 < 650)
		usleep(20000);
	t0 = now_ns();
	assert_int_equal(store_get_sync(m, "indexes/k3", &out), 0);
	assert_true((now_ns() - t0) / 1000000 >= 250);
	/* now passed over for twice as long: still at 650 ms from then */
	t0 = now_ns();
	while ((now_ns() - t0) / 1000000 < 650)
		usleep(20000);
	assert_int_equal(store_get_sync(m, "indexes/k4", &out), 0);
	assert_true((now_ns() - t0) / 1000000 < 650 + 250);
	/* every object the first did not serve is a failover, asked or passed over */
	assert_int_equal(store_get_counters(m)->failovers, 5);
	/* an object on no mirror at all still asks every mirror, and gets the
	 * last one's answer in list order */
	assert_int_equal(store_get_sync(m, "indexes/none", &out), -ENOENT);
	assert_int_equal(store_get_sync(m, "indexes/k5", &out), 0);
	buf_free(&out);
	store_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_http__key_urls_follow_the_dir_layout),
		cmocka_unit_test(test_http__verdicts),
		cmocka_unit_test(test_http__backoff_doubles_with_jitter_and_caps),
		cmocka_unit_test(test_http__bad_urls_refused),
		cmocka_unit_test(test_http__refused_is_retried_until_the_timeout),
		cmocka_unit_test(test_http__refused_fails_in_seconds),
		cmocka_unit_test(test_http__loop_mode_goes_idle_after_failing),
		cmocka_unit_test_setup_teardown(test_http__mirrors_fail_over, two_dirs, rm_dirs),
		cmocka_unit_test_setup_teardown(test_http__dead_mirror_is_passed_over, two_dirs, rm_dirs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
