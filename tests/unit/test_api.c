/* test_api.c — the sandbox API's route table (node/api.c) against its page,
 * docs/api.md, both ways: every route served has a section ("### METHOD
 * /path", "{name}" for a "{}" segment) with an example request, and every
 * section is a route served. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "lib/lib.h"
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_api__page_and_routes_agree),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
