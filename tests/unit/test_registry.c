/*
 * test_registry.c — the registry source's parsers of outside input: image
 * references as docker reads them (registry hosts, Docker Hub names, tags,
 * digests, what is refused) and WWW-Authenticate challenge parameters
 * (quoted, escaped, bare, missing, cut to fit).  The network side is tested
 * against a real registry by tests/integration/build_registry*.sh.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "chunker/chunker-internal.h"
#include "chunker/chunker.h"
#include "lib/lib.h"

#define DIGEST "sha256:43c0e6fe892eec5c5e2314b3f4745b54aacc3236cadce1062c9810b2bbd34012"

static void ref_ok(const char *ref, const char *host, const char *repo, const char *reference,
                   bool by_digest)
{
	struct registry_ref r;

	assert_int_equal(registry_parse_ref(ref, &r), 0);
	assert_string_equal(r.host, host);
	assert_string_equal(r.repo, repo);
	assert_string_equal(r.reference, reference);
	assert_int_equal(r.by_digest, by_digest);
}

static void test_registry__references(void **state)
{
	ref_ok("docker://127.0.0.1:5000/lazyroot/test:1", "127.0.0.1:5000", "lazyroot/test", "1",
	       false);
	ref_ok("oci://registry.example/a/b/c", "registry.example", "a/b/c", "latest", false);
	ref_ok("docker://localhost/x:v1.2_3-rc", "localhost", "x", "v1.2_3-rc", false);
	ref_ok("docker://[::1]:5000/x:t", "[::1]:5000", "x", "t", false);
	ref_ok("docker://registry.example:443/a@" DIGEST, "registry.example:443", "a", DIGEST, true);
	/* Docker Hub names, as docker reads them */
	ref_ok("docker://ubuntu", "registry-1.docker.io", "library/ubuntu", "latest", false);
	ref_ok("docker://debian:12", "registry-1.docker.io", "library/debian", "12", false);
	ref_ok("docker://someone/tool:2", "registry-1.docker.io", "someone/tool", "2", false);
}

static void test_registry__bad_references(void **state)
{
	static const char *const bad[] = {
		"", "docker:/", "docker://", "http://h/x", "docker://h.example/", "docker://h.example/X",
		"docker://h.example//x", "docker://h.example/x/", "docker://h.example/x:",
		"docker://h.example/x:t/y", "docker://h.example/x:bad!tag", "docker://h.example/x@sha256:abc",
		"docker://h.example/x@sha512:" "43c0e6fe892eec5c5e2314b3f4745b54aacc3236cadce1062c9810b2bbd34012",
		"docker://h.example/x@sha256:" "43C0E6FE892EEC5C5E2314B3F4745B54AACC3236CADCE1062C9810B2BBD34012",
		"docker://h_x.example/x", "docker://h.example/x y",
	};
	struct registry_ref r;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		if (registry_parse_ref(bad[i], &r) != -EINVAL)
			fail_msg("'%s' was accepted", bad[i]);
	}
}

static void test_registry__retry_after(void **state)
{
	/* 2015-10-21 07:28:00 UTC */
	const time_t date = 1445412480;

	(void)state;
	assert_int_equal(registry_retry_after("120", 0), 120);
	assert_int_equal(registry_retry_after("0", 0), 0);
	assert_int_equal(registry_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", date - 30), 30);
	/* a date already past: no wait */
	assert_int_equal(registry_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", date + 5), 0);
	assert_int_equal(registry_retry_after("Wed, 21 Oct 2015 07:28:00 GMT junk", 0), -1);
	assert_int_equal(registry_retry_after("Wed, 21 Foo 2015 07:28:00 GMT", 0), -1);
	assert_int_equal(registry_retry_after("soon", 0), -1);
	assert_int_equal(registry_retry_after("", 0), -1);
}

static void test_registry__challenge_params(void **state)
{
	const char *c = "realm=\"https://auth.example/token\",service=\"registry.example\","
	                "scope=\"repository:a/b:pull,push\"";
	char out[64], tiny[8];

	assert_true(registry_challenge_param(c, "realm", out, sizeof(out)));
	assert_string_equal(out, "https://auth.example/token");
	assert_true(registry_challenge_param(c, "Service", out, sizeof(out)));
	assert_string_equal(out, "registry.example");
	assert_true(registry_challenge_param(c, "scope", out, sizeof(out)));
	assert_string_equal(out, "repository:a/b:pull,push");
	assert_false(registry_challenge_param(c, "error", out, sizeof(out)));
	assert_false(registry_challenge_param(c, "rea", out, sizeof(out)));

	/* bare tokens, spaces after commas, escapes in quotes */
	assert_true(registry_challenge_param("realm=plain, x=\"a\\\"b\"", "x", out, sizeof(out)));
	assert_string_equal(out, "a\"b");
	assert_true(registry_challenge_param("realm=plain, x=y", "realm", out, sizeof(out)));
	assert_string_equal(out, "plain");
	/* cut to fit, always terminated */
	assert_true(registry_challenge_param(c, "realm", tiny, sizeof(tiny)));
	assert_string_equal(tiny, "https:/");
	/* junk never loops or overreads */
	assert_false(registry_challenge_param("=,=,\"", "realm", out, sizeof(out)));
	assert_false(registry_challenge_param("realm", "realm", out, sizeof(out)));
	assert_true(registry_challenge_param("realm=\"unterminated", "realm", out, sizeof(out)));
	assert_string_equal(out, "unterminated");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_registry__references),
		cmocka_unit_test(test_registry__bad_references),
		cmocka_unit_test(test_registry__challenge_params),
		cmocka_unit_test(test_registry__retry_after),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
