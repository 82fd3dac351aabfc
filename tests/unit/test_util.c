/*
 * test_util.c — read_file: files of every size around its buffer's steps,
 * pseudo-files that state no size, appending to a buffer in use, and the
 * refusals (too large, a directory, missing).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/lib.h"

static char dir[] = "/tmp/lazyroot-test-util-XXXXXX";

static int setup(void **state)
{
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char p[64];

	snprintf(p, sizeof(p), "%s/f", dir);
	unlink(p);
	return rmdir(dir);
}

/* A file of n bytes, byte i being (i * 7) & 0xff; its path in p. */
static void make_file(char *p, size_t psz, size_t n)
{
	uint8_t *b = malloc(n ? n : 1);
	int fd;

	assert_non_null(b);
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(i * 7);
	snprintf(p, psz, "%s/f", dir);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write_full(fd, b, n), 0);
	close(fd);
	free(b);
}

static void test_util__read_file_sizes(void **state)
{
	static const size_t sizes[] = { 0, 1, 62, 63, 64, 4095, 4096, 4097, 65535, 65536,
	                                131071, 131072, 131073, 1000003 };
	char p[64];

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		struct buf b = BUF_INIT;
		size_t n = sizes[s];

		make_file(p, sizeof(p), n);
		assert_int_equal(read_file(p, n, &b), 0);
		assert_int_equal(b.len, n);
		assert_true(b.cap > b.len);
		assert_int_equal(b.data[n], 0);
		for (size_t i = 0; i < n; i++)
			if (b.data[i] != (uint8_t)(i * 7))
				fail_msg("size %zu: byte %zu is %u", n, i, b.data[i]);
		/* sized to the file, not to a fixed step */
		if (n >= 4096)
			assert_true(b.cap <= 2 * (n + 2));
		buf_free(&b);
	}
}

/* procfs states size 0: read whole all the same, past the first 4 KiB. */
static void test_util__read_file_pseudo(void **state)
{
	struct buf b = BUF_INIT;
	struct stat st;

	assert_int_equal(stat("/proc/self/smaps", &st), 0);
	assert_int_equal(st.st_size, 0);
	assert_int_equal(read_file("/proc/self/smaps", 1 << 24, &b), 0);
	assert_true(b.len > 4096);
	assert_int_equal(strlen((char *)b.data), b.len);
	/* the last record's last line is complete */
	assert_int_equal(b.data[b.len - 1], '\n');
	assert_non_null(strstr((char *)b.data, "VmFlags:"));
	buf_free(&b);
}

static void test_util__read_file_appends(void **state)
{
	struct buf b = BUF_INIT;
	char p[64];

	assert_int_equal(buf_append(&b, "head:", 5), 0);
	make_file(p, sizeof(p), 5000);
	assert_int_equal(read_file(p, 1 << 20, &b), 0);
	assert_int_equal(b.len, 5005);
	assert_memory_equal(b.data, "head:", 5);
	assert_int_equal(b.data[5 + 4999], (uint8_t)(4999 * 7));
	assert_int_equal(b.data[5005], 0);
	buf_free(&b);
}

static void test_util__read_file_refuses(void **state)
{
	struct buf b = BUF_INIT;
	char p[64];

	make_file(p, sizeof(p), 100);
	assert_int_equal(read_file(p, 99, &b), -EFBIG);
	buf_free(&b);
	assert_int_equal(read_file(dir, 1 << 20, &b), -EISDIR);
	assert_int_equal(read_file("/nonexistent/lazyroot", 1 << 20, &b), -ENOENT);
	/* a pseudo-file longer than max is refused once it has read past it */
	assert_int_equal(read_file("/proc/self/smaps", 100, &b), -EFBIG);
	buf_free(&b);
}

/* A time limit takes what --memory's sizes do for bytes: units, or a bare
 * number of seconds with a fraction. */
static void test_util__parse_seconds(void **state)
{
	static const struct { const char *in; double want; } good[] = {
		{ "2", 2 }, { "0", 0 }, { "0.5", 0.5 }, { "2s", 2 }, { "500ms", 0.5 },
		{ "10m", 600 }, { "1h", 3600 }, { "10000000", 1e7 },
	};
	static const char *const bad[] = {
		"", "s", "-1", "2x", "1.5s", "2 s", " 2", "10000001", "2778h", "nan", "inf",
	};
	double d;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++) {
		assert_int_equal(parse_seconds(good[i].in, 1e7, &d), 0);
		assert_true(d == good[i].want);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		if (parse_seconds(bad[i], 1e7, &d) == 0)
			fail_msg("'%s' accepted", bad[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_util__read_file_sizes),
		cmocka_unit_test(test_util__read_file_pseudo),
		cmocka_unit_test(test_util__read_file_appends),
		cmocka_unit_test(test_util__read_file_refuses),
		cmocka_unit_test(test_util__parse_seconds),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
