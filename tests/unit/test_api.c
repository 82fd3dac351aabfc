/* test_api.c — the sandbox API's route table (node/api.c) against its page,
 * docs/api.md, both ways: every route served has a section ("### METHOD
 * /path", "{name}" for a "{}" segment) with an example request, and every
 * section is a route served; and the request bodies' parsers (node/api-req.c):
 * good requests read whole, every kind of bad one refused with its line; and
 * an exec's output as frames (node/api-stream.c) from a real directory laid
 * out as the keeper writes it: from offsets, without and with follow while
 * a writer thread appends and then renames result.json in. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>

#include "lib/lib.h"
#include "node/api-internal.h"
#include "node/api.h"
#include "node/httpd.h"

/* "/v1/sandboxes/{id}/execs" -> "/v1/sandboxes/{}/execs" */
static void normalise(const char *in, size_t n, char *out, size_t len)
{
	size_t o = 0;

	for (size_t i = 0; i < n && o + 3 < len; i++) {
		if (in[i] == '{') {
			while (i < n && in[i] != '}')
				i++;
			out[o++] = '{';
			out[o++] = '}';
			continue;
		}
		out[o++] = in[i];
	}
	out[o] = 0;
}

static void test_api__page_and_routes_agree(void **state)
{
	_cleanup_(buf_freep) struct buf doc = BUF_INIT;
	size_t n, documented = 0;
	const struct node_http_route *rt = node_api_routes(&n);
	const char *p;

	assert_int_equal(read_file("docs/api.md", 1 << 20, &doc), 0);
	assert_int_equal(buf_append(&doc, "", 1), 0);
	/* every section a route */
	for (p = (const char *)doc.data; (p = strstr(p, "\n### ")); p++) {
		const char *m = p + 5, *sp = strchr(m, ' '), *eol = strchr(m, '\n');
		char method[16], path[256];
		bool found = false;

		assert_non_null(sp);
		assert_non_null(eol);
		assert_true(sp < eol && (size_t)(sp - m) < sizeof(method));
		memcpy(method, m, (size_t)(sp - m));
		method[sp - m] = 0;
		normalise(sp + 1, (size_t)(eol - sp - 1), path, sizeof(path));
		for (size_t i = 0; i < n; i++)
			found = found || (!strcmp(rt[i].method, method) && !strcmp(rt[i].path, path));
		if (!found)
			fail_msg("docs/api.md documents %s %s, which the server does not serve",
			         method, path);
		documented++;
	}
	/* every route a section, with an example request in it */
	for (size_t i = 0; i < n; i++) {
		bool found = false;

		for (p = (const char *)doc.data; !found && (p = strstr(p, "\n### ")); p++) {
			const char *m = p + 5, *sp = strchr(m, ' '), *eol = strchr(m, '\n');
			char path[256];

			normalise(sp + 1, (size_t)(eol - sp - 1), path, sizeof(path));
			if ((size_t)(sp - m) == strlen(rt[i].method) &&
			    !strncmp(m, rt[i].method, (size_t)(sp - m)) && !strcmp(path, rt[i].path)) {
				const char *next = strstr(eol, "\n### ");
				const char *ex = strstr(eol, "curl ");

				found = true;
				if (!ex || (next && ex > next))
					fail_msg("docs/api.md: %s %s has no example request (curl ...)",
					         rt[i].method, rt[i].path);
			}
		}
		if (!found)
			fail_msg("%s %s is served but docs/api.md has no section for it",
			         rt[i].method, rt[i].path);
	}
	assert_int_equal(documented, n);
}

static void test_api__create_parsed(void **state)
{
	const char *body = "{\"image\":\"debian:12\",\"store\":\"http://127.0.0.1:8080/s\","
	                   "\"name\":\"ep-1\",\"ttl\":600,"
	                   "\"idle_timeout\":60.5,\"labels\":{\"run\":\"7\"},"
	                   "\"policy\":{\"memory\":\"512M\",\"bind\":[\"/a:/a\",\"/b:/b\"],"
	                   "\"stage.grade-1.allow\":\"\"}}";
	struct api_create_req r;
	struct api_err err = { "" };
	json_t *doc = NULL;

	assert_int_equal(api_parse_create(body, strlen(body), &r, &doc, &err), 0);
	assert_string_equal(r.image, "debian:12");
	assert_string_equal(r.store, "http://127.0.0.1:8080/s");
	assert_null(r.rootfs);
	assert_string_equal(r.name, "ep-1");
	assert_true(r.ttl == 600 && r.idle_timeout == 60.5);
	assert_int_equal(r.n_labels, 1);
	assert_string_equal(r.labels[0].key, "run");
	assert_int_equal(r.n_set, 4);
	assert_string_equal(r.set[0].key, "memory");
	assert_string_equal(r.set[2].key, "bind");
	assert_string_equal(r.set[2].value, "/b:/b");
	assert_string_equal(r.set[3].key, "stage.grade-1.allow");
	assert_string_equal(r.set[3].value, "");
	api_create_req_free(&r);
	json_decref(doc);
}

static void test_api__exec_parsed(void **state)
{
	const char *body = "{\"exec_id\":\"step-3\",\"argv\":[\"sh\",\"-c\",\"echo hi\"],"
	                   "\"env\":{\"A\":\"1\"},\"cwd\":\"/work\",\"user\":\"1000\","
	                   "\"timeout\":2.5,\"output_limit\":1048576,\"stdin\":\"pipe\"}";
	struct api_exec_req r;
	struct api_err err = { "" };
	const char *stage;
	json_t *doc = NULL;

	assert_int_equal(api_parse_exec(body, strlen(body), &r, &doc, &err), 0);
	assert_string_equal(r.exec_id, "step-3");
	assert_string_equal(r.argv[2], "echo hi");
	assert_null(r.argv[3]);
	assert_string_equal(r.env[0], "A=1");
	assert_null(r.env[1]);
	assert_string_equal(r.cwd, "/work");
	assert_true(r.timeout == 2.5 && r.output_limit == 1048576 && r.stdin_pipe);
	api_exec_req_free(&r);
	json_decref(doc);
	assert_int_equal(api_parse_stage("{\"stage\":\"grade\"}", 17, &stage, &doc, &err), 0);
	assert_string_equal(stage, "grade");
	json_decref(doc);
}

static void test_api__bad_requests_refused(void **state)
{
	static const struct {
		char kind;   /* c create, e exec, s stage */
		const char *body, *msg;
	} cases[] = {
		{ 'c', "", "create: the body is not JSON" },
		{ 'c', "{\"image\":\"x\"", "create: the body is not JSON" },
		{ 'c', "[1]", "create: the body must be a JSON object" },
		/* a parse error quotes the input: still one line */
		{ 'c', "\"\\\n\n\n", "create: the body is not JSON" },
		{ 'c', "{\"image\":\"x\",\"imgae\":1}", "create: unknown field 'imgae'" },
		{ 'c', "{\"image\":\"x\",\"image\":\"y\"}", "create: the body is not JSON" },
		{ 'c', "{}", "create: give one of 'image' or 'rootfs'" },
		{ 'c', "{\"image\":\"x\",\"rootfs\":\"/r\"}", "create: give one of 'image' or 'rootfs'" },
		{ 'c', "{\"rootfs\":\"r\"}", "create: 'rootfs' must be an absolute path" },
		{ 'c', "{\"image\":\"x\",\"name\":\"../x\"}", "create: 'name' '../x' is not an id" },
		{ 'c', "{\"image\":\"x\",\"ttl\":-1}", "create: 'ttl' must be a number of seconds" },
		{ 'c', "{\"image\":\"x\",\"ttl\":\"5\"}", "create: 'ttl' must be a number of seconds" },
		{ 'c', "{\"image\":7}", "create: 'image' must be a string" },
		{ 'c', "{\"image\":\"x\",\"store\":\"\"}", "create: 'store' must be 1 to" },
		{ 'c', "{\"rootfs\":\"/r\",\"store\":\"dir:/s\"}", "create: 'store' goes with 'image'" },
		{ 'c', "{\"image\":\"x\",\"policy\":{\"Memory\":\"1\"}}", "create: policy field 'Memory' is not a field name" },
		{ 'c', "{\"image\":\"x\",\"policy\":{\"env\":\"A=1\\nuid_base = 0\"}}", "create: policy field 'env' must be at most" },
		{ 'c', "{\"image\":\"x\",\"policy\":{\"bind\":[1]}}", "create: policy field 'bind' item 0" },
		{ 'c', "{\"image\":\"x\",\"labels\":{\"a=b\":\"c\"}}", "create: label 'a=b'" },
		{ 'c', "{\"image\":\"x\\u0000y\"}", "create: the body is not JSON" },
		{ 'e', "{}", "exec: 'argv' must be an array of one or more strings" },
		{ 'e', "{\"argv\":[]}", "exec: 'argv' must be an array of one or more strings" },
		{ 'e', "{\"argv\":[\"\"]}", "exec: 'argv' item 0 (the command) is empty" },
		{ 'e', "{\"argv\":[\"ls\", 3]}", "exec: 'argv' item 1 must be a string" },
		{ 'e', "{\"argv\":[\"ls\"],\"timout\":1}", "exec: unknown field 'timout'" },
		{ 'e', "{\"argv\":[\"ls\"],\"stdin\":\"body\"}", "exec: 'stdin' must be \"none\" or \"pipe\"" },
		{ 'e', "{\"argv\":[\"ls\"],\"cwd\":\"work\"}", "exec: 'cwd' must be an absolute path" },
		{ 'e', "{\"argv\":[\"ls\"],\"env\":{\"1A\":\"x\"}}", "exec: env '1A' is not a variable name" },
		{ 'e', "{\"argv\":[\"ls\"],\"env\":[\"A=1\"]}", "exec: 'env' must be an object" },
		{ 'e', "{\"argv\":[\"ls\"],\"output_limit\":1.5}", "exec: 'output_limit' must be a number of bytes" },
		{ 'e', "{\"argv\":[\"ls\"],\"exec_id\":\".hidden\"}", "exec: 'exec_id' '.hidden' is not an id" },
		{ 'e', "{\"argv\":[\"ls\"],\"timeout\":1e999}", "exec: the body is not JSON" },
		{ 's', "{}", "stage: give 'stage'" },
		{ 's', "{\"stage\":\"\"}", "stage: 'stage' must be 1 to 64 bytes" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct api_create_req c;
		struct api_exec_req e;
		struct api_err err = { "" };
		const char *stage;
		json_t *doc = NULL;
		size_t len = strlen(cases[i].body);
		int r = cases[i].kind == 'c' ? api_parse_create(cases[i].body, len, &c, &doc, &err) :
		        cases[i].kind == 'e' ? api_parse_exec(cases[i].body, len, &e, &doc, &err) :
		                               api_parse_stage(cases[i].body, len, &stage, &doc, &err);

		if (r != -EINVAL || strncmp(err.msg, cases[i].msg, strlen(cases[i].msg)))
			fail_msg("%s: got %d '%s', want '%s'", cases[i].body, r, err.msg, cases[i].msg);
		assert_null(doc);
		assert_null(strchr(err.msg, '\n'));
	}
}

static char exec_dir[] = "/tmp/lazyroot-test-api-XXXXXX";

static void put(const char *name, const char *text, bool append)
{
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", exec_dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0600);
	assert_true(fd >= 0);
	assert_int_equal(write_full(fd, text, strlen(text)), 0);
	close(fd);
}

/* The whole stream, read max bytes at a time, as "S:bytes|" per frame. */
static void read_stream(struct api_output *o, size_t max, struct buf *out)
{
	_cleanup_(buf_freep) struct buf raw = BUF_INIT;
	char chunk[64];
	ssize_t n;
	size_t i = 0;

	while ((n = api_output_read(o, chunk, max)) > 0)
		assert_int_equal(buf_append(&raw, chunk, (size_t)n), 0);
	assert_int_equal(n, 0);
	while (i < raw.len) {
		uint32_t len;

		assert_true(i + 8 <= raw.len);
		assert_true(raw.data[i + 1] == 0 && raw.data[i + 2] == 0 && raw.data[i + 3] == 0);
		len = (uint32_t)raw.data[i + 4] << 24 | (uint32_t)raw.data[i + 5] << 16 |
		      (uint32_t)raw.data[i + 6] << 8 | raw.data[i + 7];
		assert_true(i + 8 + len <= raw.len);
		assert_int_equal(buf_printf(out, "%d:%.*s|", raw.data[i], (int)len,
		                            (const char *)raw.data + i + 8), 0);
		i += 8 + len;
	}
}

static void *writer_main(void *arg)
{
	char tmp[256], path[256];

	(void)arg;
	put("stdout", " more", true);
	put("stderr", "!", true);
	put("result.json.tmp", "{\"exec_id\":\"e1\",\"status\":0}", false);
	snprintf(tmp, sizeof(tmp), "%s/result.json.tmp", exec_dir);
	snprintf(path, sizeof(path), "%s/result.json", exec_dir);
	assert_int_equal(rename(tmp, path), 0);
	return NULL;
}

static void test_api__output_frames(void **state)
{
	static const volatile bool no = false;
	struct api_output *o = NULL;
	pthread_t t;
	char path[256];

	assert_non_null(mkdtemp(exec_dir));
	put("stdout", "hello", false);
	put("stderr", "oops", false);
	/* what is there now, without the result (the exec runs) */
	{
		_cleanup_(buf_freep) struct buf b = BUF_INIT;

		assert_int_equal(api_output_open(exec_dir, 0, 0, false, 10, &no, &o), 0);
		read_stream(o, 3, &b);
		api_output_free(o);
		assert_int_equal(buf_append(&b, "", 1), 0);
		assert_string_equal((char *)b.data, "1:hello|2:oops|");
	}
	/* re-attached at offsets 2 and 4 */
	{
		_cleanup_(buf_freep) struct buf b = BUF_INIT;

		assert_int_equal(api_output_open(exec_dir, 2, 4, false, 10, &no, &o), 0);
		read_stream(o, 64, &b);
		api_output_free(o);
		assert_int_equal(buf_append(&b, "", 1), 0);
		assert_string_equal((char *)b.data, "1:llo|");
	}
	/* followed while the writer appends, then ends the exec */
	{
		_cleanup_(buf_freep) struct buf b = BUF_INIT;

		char first[12];

		assert_int_equal(api_output_open(exec_dir, 5, 0, true, 20, &no, &o), 0);
		/* what is there first (stdout is read whole at 5): stderr's frame */
		assert_int_equal(api_output_read(o, first, sizeof(first)), 12);
		assert_memory_equal(first, "\2\0\0\0\0\0\0\4oops", 12);
		/* then the writer, while the reader waits */
		assert_int_equal(pthread_create(&t, NULL, writer_main, NULL), 0);
		read_stream(o, 5, &b);
		pthread_join(t, NULL);
		api_output_free(o);
		assert_int_equal(buf_append(&b, "", 1), 0);
		assert_string_equal((char *)b.data, "1: more|2:!|3:{\"exec_id\":\"e1\","
		                    "\"status\":0}|");
	}
	assert_int_equal(api_output_open("/nonexistent-exec-dir", 0, 0, false, 1, &no, &o),
	                 -ENOENT);
	for (const char *const *n = (const char *const[]){ "stdout", "stderr", "result.json",
	                                                   NULL }; *n; n++) {
		snprintf(path, sizeof(path), "%s/%s", exec_dir, *n);
		unlink(path);
	}
	rmdir(exec_dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_api__page_and_routes_agree),
		cmocka_unit_test(test_api__create_parsed),
		cmocka_unit_test(test_api__exec_parsed),
		cmocka_unit_test(test_api__bad_requests_refused),
		cmocka_unit_test(test_api__output_frames),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
