/* test_loop.c — the io_uring loop: file operations, polls, timers, cancel,
 * posts from other threads, and more operations in flight than the ring has
 * entries. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/stat.h>

#include "lib/lib.h"
#include "lib/loop.h"

static char root[64];
static int root_fd = -1;

static int setup(void **state)
{
	strcpy(root, "/tmp/lazyroot-test-loop.XXXXXX");
	if (!mkdtemp(root))
		return -1;
	root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return root_fd < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	char cmd[128];

	close(root_fd);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : -1;
}

struct result {
	int res;
	int calls;
};

static void record(void *ud, int res)
{
	struct result *r = ud;

	r->res = res;
	r->calls++;
}

/* Drive the loop until the result arrives. */
static void wait_for(struct loop *l, struct result *r)
{
	while (!r->calls)
		assert_true(loop_run_once(l, true) >= 0);
}

static void test_loop__open_write_read_link_unlink(void **state)
{
	struct loop *l;
	struct result r = { 0 };
	char buf[16] = { 0 }, proc[64];
	struct stat st;
	int fd;

	assert_int_equal(loop_new(8, &l), 0);
	assert_int_equal(loop_openat(l, root_fd, ".", O_RDWR | O_TMPFILE | O_CLOEXEC, 0644, record,
	                             &r), 0);
	assert_int_equal(r.calls, 0);  /* never from inside the call */
	wait_for(l, &r);
	assert_true(r.res >= 0);
	fd = r.res;

	r = (struct result){ 0 };
	assert_int_equal(loop_write(l, fd, "hello, ring", 11, 0, record, &r), 0);
	wait_for(l, &r);
	assert_int_equal(r.res, 11);

	r = (struct result){ 0 };
	assert_int_equal(loop_read(l, fd, buf, 5, 7, record, &r), 0);
	wait_for(l, &r);
	assert_int_equal(r.res, 4);
	assert_memory_equal(buf, "ring", 4);

	/* an unnamed file appears under a name only whole */
	snprintf(proc, sizeof(proc), "/proc/%d/fd/%d", (int)getpid(), fd);
	r = (struct result){ 0 };
	assert_int_equal(loop_linkat(l, AT_FDCWD, proc, root_fd, "named", AT_SYMLINK_FOLLOW, record,
	                             &r), 0);
	wait_for(l, &r);
	assert_int_equal(r.res, 0);
	assert_int_equal(fstatat(root_fd, "named", &st, 0), 0);
	assert_int_equal(st.st_size, 11);

	r = (struct result){ 0 };
	assert_int_equal(loop_linkat(l, AT_FDCWD, proc, root_fd, "named", AT_SYMLINK_FOLLOW, record,
	                             &r), 0);
	wait_for(l, &r);
	assert_int_equal(r.res, -EEXIST);

	r = (struct result){ 0 };
	assert_int_equal(loop_close(l, fd, record, &r), 0);
	wait_for(l, &r);
	assert_int_equal(r.res, 0);

	r = (struct result){ 0 };
	assert_int_equal(loop_unlinkat(l, root_fd, "named", 0, record, &r), 0);
	wait_for(l, &r);
	assert_int_equal(r.res, 0);
	r = (struct result){ 0 };
	assert_int_equal(loop_openat(l, root_fd, "named", O_RDONLY, 0, record, &r), 0);
	wait_for(l, &r);
	assert_int_equal(r.res, -ENOENT);
	assert_int_equal(loop_pending(l), 0);
	loop_free(l);
}

static void test_loop__poll_pipe(void **state)
{
	struct loop *l;
	struct result r = { 0 };
	int p[2];

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_int_equal(loop_new(8, &l), 0);
	assert_int_equal(loop_poll(l, p[0], POLLIN, record, &r), 0);
	assert_int_equal(loop_run_once(l, false), 0);
	assert_int_equal(r.calls, 0);
	assert_int_equal(loop_pending(l), 1);
	assert_int_equal(write(p[1], "x", 1), 1);
	wait_for(l, &r);
	assert_true(r.res & POLLIN);
	loop_free(l);
	close(p[0]);
	close(p[1]);
}

static void test_loop__timers_fire_in_order_and_cancel(void **state)
{
	struct loop *l;
	struct result a = { 0 }, b = { 0 }, c = { 0 };
	uint64_t t0 = now_ns();
	int64_t ia, ib, ic;

	assert_int_equal(loop_new(8, &l), 0);
	ia = loop_timer(l, 20 * 1000000ULL, record, &a);
	ib = loop_timer(l, 5 * 1000000ULL, record, &b);
	assert_true(ia > 0 && ib > 0 && ia != ib);
	ic = loop_timer(l, 10ULL * 1000000000ULL, record, &c);
	assert_true(ic > 0);
	assert_int_equal(loop_run_once(l, false), 0);  /* all three now in the kernel */
	assert_int_equal(loop_cancel_timer(l, ic), 0);
	wait_for(l, &c);
	assert_int_equal(c.res, -ECANCELED);
	wait_for(l, &b);
	assert_int_equal(b.res, 0);
	assert_int_equal(a.calls, 0);
	wait_for(l, &a);
	assert_int_equal(a.res, 0);
	assert_true(now_ns() - t0 >= 20 * 1000000ULL);
	assert_true(now_ns() - t0 < 5ULL * 1000000000ULL);
	assert_int_equal(loop_cancel_timer(l, ia), -ENOENT);
	assert_int_equal(loop_pending(l), 0);
	loop_free(l);
}

static void test_loop__cancel_timer_still_queued(void **state)
{
	struct loop *l;
	struct result r[64] = { { 0 } };
	int64_t ids[64];

	/* 64 timers on a 4-entry ring: most wait in user space */
	assert_int_equal(loop_new(4, &l), 0);
	for (int i = 0; i < 64; i++)
		ids[i] = loop_timer(l, 60ULL * 1000000000ULL, record, &r[i]);
	for (int i = 63; i >= 0; i--)
		assert_int_equal(loop_cancel_timer(l, ids[i]), 0);
	assert_int_equal(loop_cancel_timer(l, ids[0]), -EALREADY);
	while (loop_pending(l))
		assert_true(loop_run_once(l, true) >= 0);
	for (int i = 0; i < 64; i++) {
		assert_int_equal(r[i].calls, 1);
		assert_int_equal(r[i].res, -ECANCELED);
	}
	loop_free(l);
}

struct poster {
	struct loop *l;
	int *counter;
	int n;
};

static void bump(void *ud)
{
	(*(int *)ud)++;
}

static void *post_thread(void *arg)
{
	struct poster *p = arg;

	for (int i = 0; i < p->n; i++)
		assert_int_equal(loop_post(p->l, bump, p->counter), 0);
	return NULL;
}

static void stop_loop(void *ud)
{
	loop_stop(ud);
}

static void test_loop__post_from_other_threads(void **state)
{
	struct loop *l;
	int counter = 0;
	pthread_t th[4];
	struct poster p;

	assert_int_equal(loop_new(8, &l), 0);
	p = (struct poster){ l, &counter, 5000 };
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&th[i], NULL, post_thread, &p), 0);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(loop_post(l, stop_loop, l), 0);
	assert_int_equal(loop_run(l), 0);
	/* posts run in order: the stop came after all the bumps */
	assert_int_equal(counter, 20000);
	assert_int_equal(loop_pending(l), 0);
	loop_free(l);
}

static void *stop_later(void *arg)
{
	usleep(20000);
	loop_stop(arg);
	return NULL;
}

static void test_loop__stop_from_other_thread_wakes_idle_loop(void **state)
{
	struct loop *l;
	pthread_t th;

	assert_int_equal(loop_new(8, &l), 0);
	assert_int_equal(pthread_create(&th, NULL, stop_later, l), 0);
	assert_int_equal(loop_run(l), 0);
	pthread_join(th, NULL);
	loop_free(l);
}

struct many {
	int done, bad;
	unsigned char *bufs;
};

static void many_cb(void *ud, int res)
{
	struct many *m = ud;

	m->done++;
	if (res != 512)
		m->bad++;
}

static void test_loop__more_in_flight_than_ring(void **state)
{
	enum { N = 5000 };
	struct loop *l;
	struct many m = { 0 };
	unsigned char data[4096];
	_cleanup_close_ int fd = openat(root_fd, "data", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	uint64_t t0;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)(i * 7);
	assert_int_equal(write_full(fd, data, sizeof(data)), 0);
	m.bufs = malloc((size_t)N * 512);
	assert_non_null(m.bufs);
	assert_int_equal(loop_new(8, &l), 0);
	t0 = now_ns();
	for (int i = 0; i < N; i++)
		assert_int_equal(loop_read(l, fd, m.bufs + (size_t)i * 512, 512,
		                           (uint64_t)(i % 8) * 512, many_cb, &m), 0);
	assert_int_equal(loop_pending(l), N);
	while (loop_pending(l))
		assert_true(loop_run_once(l, true) >= 0);
	print_message("      %d reads of 512 B through an 8-entry ring: %.0f ops/s\n", N,
	              N / ((now_ns() - t0) / 1e9));
	assert_int_equal(m.done, N);
	assert_int_equal(m.bad, 0);
	for (int i = 0; i < N; i++)
		assert_memory_equal(m.bufs + (size_t)i * 512, data + (i % 8) * 512, 512);
	free(m.bufs);
	loop_free(l);
}

static void defer_cb(void *ud)
{
	(*(int *)ud)++;
}

static void test_loop__defer_runs_on_next_turn(void **state)
{
	struct loop *l;
	int n = 0;

	assert_int_equal(loop_new(8, &l), 0);
	assert_int_equal(loop_defer(l, defer_cb, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(loop_pending(l), 1);
	assert_int_equal(loop_run_once(l, true), 1);
	assert_int_equal(n, 1);
	/* nothing pending: a waiting turn returns at once */
	assert_int_equal(loop_run_once(l, true), 0);
	loop_free(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_loop__open_write_read_link_unlink, setup, teardown),
		cmocka_unit_test(test_loop__poll_pipe),
		cmocka_unit_test(test_loop__timers_fire_in_order_and_cancel),
		cmocka_unit_test(test_loop__cancel_timer_still_queued),
		cmocka_unit_test(test_loop__post_from_other_threads),
		cmocka_unit_test(test_loop__stop_from_other_thread_wakes_idle_loop),
		cmocka_unit_test_setup_teardown(test_loop__more_in_flight_than_ring, setup, teardown),
		cmocka_unit_test(test_loop__defer_runs_on_next_turn),
	};

	return cmocka_run_group_tests_name("loop", tests, NULL, NULL);
}
