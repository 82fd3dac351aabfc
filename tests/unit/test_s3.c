/* test_s3.c — the s3 store's pure parts: s3:// URLs, S3's URI encoding and key URLs,
 * the shared credentials file, where endpoint, region and keys come from, the
 * ListObjectsV2 and error documents (good and bad), and an s3 store against a port
 * nobody listens on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "lib/lib.h"
#include "node/config.h"
#include "store/store-internal.h"

static void test_s3__urls(void **state)
{
	char *ep = NULL, *b = NULL, *p = NULL;

	assert_int_equal(s3_parse_url("s3://bucket/some/prefix/", &ep, &b, &p), 0);
	assert_string_equal(b, "bucket");
	assert_string_equal(p, "some/prefix");
	assert_null(ep);
	free(b);
	free(p);
	assert_int_equal(s3_parse_url("s3+http://127.0.0.1:7480/bkt/a/b", &ep, &b, &p), 0);
	assert_string_equal(ep, "http://127.0.0.1:7480");
	assert_string_equal(b, "bkt");
	assert_string_equal(p, "a/b");
	free(ep);
	free(b);
	free(p);
	assert_int_equal(s3_parse_url("s3+https://s3.example.com/bkt", &ep, &b, &p), 0);
	assert_string_equal(ep, "https://s3.example.com");
	assert_string_equal(p, "");
	free(ep);
	free(b);
	free(p);
	assert_int_equal(s3_parse_url("s3+http://host", &ep, &b, &p), -EINVAL);
	assert_int_equal(s3_parse_url("s3+http:///bkt", &ep, &b, &p), -EINVAL);
	assert_int_equal(s3_parse_url("s3+http://h@st/bkt", &ep, &b, &p), -EINVAL);
	assert_int_equal(s3_parse_url("s3+ftp://host/bkt", &ep, &b, &p), -EINVAL);
	assert_int_equal(s3_parse_url("s3://my.bucket-1", &ep, &b, &p), 0);
	assert_string_equal(b, "my.bucket-1");
	assert_string_equal(p, "");
	free(b);
	free(p);
	assert_int_equal(s3_parse_url("s3://ab/x", &ep, &b, &p), -EINVAL);        /* too short */
	assert_int_equal(s3_parse_url("s3://bu:cket/x", &ep, &b, &p), -EINVAL);
	assert_int_equal(s3_parse_url("s3://bucket/../x", &ep, &b, &p), -EINVAL);
	assert_int_equal(s3_parse_url("s3://bucket/a//b", &ep, &b, &p), -EINVAL);
	assert_int_equal(s3_parse_url("s3://bucket/x?y", &ep, &b, &p), -EINVAL);
	assert_int_equal(s3_parse_url("http://bucket/x", &ep, &b, &p), -EINVAL);
	assert_int_equal(s3_parse_url("s3://", &ep, &b, &p), -EINVAL);
}

static void test_s3__strict_encoding(void **state)
{
	char out[128];

	assert_int_equal(s3_uri_encode("a/b:c@d e+f=~._-", true, out, sizeof(out)), 0);
	assert_string_equal(out, "a/b%3Ac%40d%20e%2Bf%3D~._-");
	assert_int_equal(s3_uri_encode("a/b", false, out, sizeof(out)), 0);
	assert_string_equal(out, "a%2Fb");
	assert_int_equal(s3_uri_encode("\xff", false, out, sizeof(out)), 0);
	assert_string_equal(out, "%FF");
	assert_int_equal(s3_uri_encode("abc:", false, out, 6), -ENAMETOOLONG);
	assert_int_equal(s3_key_url("http://h:1/b/p", "tags/py:3.12", out, sizeof(out)), 0);
	assert_string_equal(out, "http://h:1/b/p/tags/py%3A3.12");
	assert_int_equal(s3_key_url("http://h/b", "chunks/abcdef", out, sizeof(out)), 0);
	assert_string_equal(out, "http://h/b/chunks/ab/abcdef");
}

static const char creds[] =
	"# comment\n"
	"[default]\n"
	"aws_access_key_id = AKDEFAULT\n"
	"aws_secret_access_key=secret/with+chars\n"
	"\n"
	"; another comment\n"
	"[ colon ]\n"
	"  aws_access_key_id =  AK:COLON  \n"
	"aws_secret_access_key = se:cr=et\n"
	"aws_session_token = tok\n"
	"region = ignored\n"
	"[profile cfgstyle]\n"
	"aws_access_key_id = A\n"
	"aws_secret_access_key = S\n"
	"[nosecret]\n"
	"aws_access_key_id = A\n";

static void test_s3__credentials_file(void **state)
{
	char *k = NULL, *s = NULL, *t = NULL;

	assert_int_equal(s3_parse_credentials(creds, strlen(creds), "default", &k, &s, &t), 0);
	assert_string_equal(k, "AKDEFAULT");
	assert_string_equal(s, "secret/with+chars");
	assert_null(t);
	free(k);
	free(s);
	assert_int_equal(s3_parse_credentials(creds, strlen(creds), "colon", &k, &s, &t), 0);
	assert_string_equal(k, "AK:COLON");
	assert_string_equal(s, "se:cr=et");
	assert_string_equal(t, "tok");
	free(k);
	free(s);
	free(t);
	assert_int_equal(s3_parse_credentials(creds, strlen(creds), "cfgstyle", &k, &s, &t), 0);
	assert_string_equal(k, "A");
	free(k);
	free(s);
	assert_int_equal(s3_parse_credentials(creds, strlen(creds), "nosecret", &k, &s, &t), -EINVAL);
	assert_int_equal(s3_parse_credentials(creds, strlen(creds), "missing", &k, &s, &t), -ENOENT);
	assert_int_equal(s3_parse_credentials("[x\na=b\n", 7, "x", &k, &s, &t), -EBADMSG);
	assert_int_equal(s3_parse_credentials("[x]\nnoequals\n", 13, "x", &k, &s, &t), -EBADMSG);
	/* only len bytes count */
	assert_int_equal(s3_parse_credentials(creds, 10, "default", &k, &s, &t), -ENOENT);
}

#define CREDFILE_TEMPLATE "/tmp/lazyroot-test-s3-XXXXXX"
static char credfile[] = CREDFILE_TEMPLATE;

static int env_setup(void **state)
{
	int fd;

	memcpy(credfile, CREDFILE_TEMPLATE, sizeof(credfile));
	fd = mkstemp(credfile);

	if (fd < 0 || write_full(fd, creds, strlen(creds)) < 0)
		return -1;
	close(fd);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	unsetenv("AWS_SESSION_TOKEN");
	unsetenv("AWS_PROFILE");
	unsetenv("AWS_REGION");
	unsetenv("AWS_DEFAULT_REGION");
	unsetenv("AWS_ENDPOINT_URL");
	unsetenv("AWS_ENDPOINT_URL_S3");
	setenv("AWS_SHARED_CREDENTIALS_FILE", credfile, 1);
	return 0;
}

static int env_teardown(void **state)
{
	unlink(credfile);
	return 0;
}

/* s3_conf_load with the store options the node's settings make of the
 * environment (node/config.c reads the AWS variables; the store reads none). */
static int conf_load(const char *url, struct s3_conf *c)
{
	struct node_config nc;
	struct store_options o;
	int r;

	node_config_init(&nc);
	r = node_config_env(&nc);
	if (r == 0) {
		node_config_store_options(&nc, &o);
		r = s3_conf_load(url, &o, c);
	}
	node_config_destroy(&nc);
	return r;
}

static void test_s3__conf_from_the_environment(void **state)
{
	struct s3_conf c;

	/* the file's default profile; AWS's endpoint for the default region */
	assert_int_equal(conf_load("s3://bkt/p", &c), 0);
	assert_string_equal(c.access_key, "AKDEFAULT");
	assert_string_equal(c.region, "us-east-1");
	assert_string_equal(c.endpoint, "https://s3.us-east-1.amazonaws.com");
	assert_string_equal(c.bucket, "bkt");
	assert_string_equal(c.prefix, "p");
	s3_conf_destroy(&c);

	/* a profile, a region, endpoints in order of precedence */
	setenv("AWS_PROFILE", "colon", 1);
	setenv("AWS_DEFAULT_REGION", "eu-west-1", 1);
	setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/", 1);
	assert_int_equal(conf_load("s3://bkt", &c), 0);
	assert_string_equal(c.access_key, "AK:COLON");
	assert_string_equal(c.secret_key, "se:cr=et");
	assert_string_equal(c.token, "tok");
	assert_string_equal(c.region, "eu-west-1");
	assert_string_equal(c.endpoint, "http://127.0.0.1:9000");
	s3_conf_destroy(&c);
	setenv("AWS_REGION", "r2", 1);
	setenv("AWS_ENDPOINT_URL_S3", "https://s3.example", 1);
	assert_int_equal(conf_load("s3://bkt", &c), 0);
	assert_string_equal(c.region, "r2");
	assert_string_equal(c.endpoint, "https://s3.example");
	s3_conf_destroy(&c);
	/* an endpoint in the URL wins over every variable */
	assert_int_equal(conf_load("s3+http://10.0.0.1:80/bkt", &c), 0);
	assert_string_equal(c.endpoint, "http://10.0.0.1:80");
	s3_conf_destroy(&c);

	/* keys in the environment win over the file */
	setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	assert_int_equal(conf_load("s3://bkt", &c), 0);
	assert_string_equal(c.access_key, "ENVKEY");
	assert_null(c.token);
	s3_conf_destroy(&c);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");

	/* named things that are not there, and bad values */
	setenv("AWS_PROFILE", "nosuch", 1);
	assert_int_equal(conf_load("s3://bkt", &c), -ENOENT);
	setenv("AWS_PROFILE", "nosecret", 1);
	assert_int_equal(conf_load("s3://bkt", &c), -EINVAL);
	unsetenv("AWS_PROFILE");
	setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
	assert_int_equal(conf_load("s3://bkt", &c), -ENOENT);
	setenv("AWS_SHARED_CREDENTIALS_FILE", credfile, 1);
	setenv("AWS_REGION", "bad region", 1);
	assert_int_equal(conf_load("s3://bkt", &c), -EINVAL);
	unsetenv("AWS_REGION");
	setenv("AWS_ENDPOINT_URL_S3", "ftp://x", 1);
	assert_int_equal(conf_load("s3://bkt", &c), -EINVAL);
	unsetenv("AWS_ENDPOINT_URL_S3");
	assert_int_equal(conf_load("s3://b", &c), -EINVAL);
	unsetenv("AWS_ENDPOINT_URL");
	unsetenv("AWS_DEFAULT_REGION");
}

#define XML_HEAD "<?xml version=\"1.0\" encoding=\"UTF-8\"?>" \
	"<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name>"

static int parse(const char *xml, struct s3_listing *l)
{
	return s3_parse_listing(xml, strlen(xml), l);
}

static void test_s3__listing(void **state)
{
	struct s3_listing l;

	assert_int_equal(parse(XML_HEAD "<IsTruncated>false</IsTruncated>"
	                       "<Contents><Key>p/tags/a:b</Key><Size>3</Size></Contents>"
	                       "<Contents><ETag>&quot;x&quot;</ETag><Key>p/tags/x&amp;y&lt;&#x41;&#66;&#xe9;</Key></Contents>"
	                       "<KeyCount>2</KeyCount></ListBucketResult>", &l), 0);
	assert_int_equal(l.n, 2);
	assert_string_equal(l.keys[0], "p/tags/a:b");
	assert_string_equal(l.keys[1], "p/tags/x&y<AB\xc3\xa9");
	assert_null(l.keys[2]);
	assert_false(l.truncated);
	s3_listing_destroy(&l);

	assert_int_equal(parse(XML_HEAD "<IsTruncated>true</IsTruncated>"
	                       "<Contents><Key>k</Key></Contents>"
	                       "<NextContinuationToken>1/a+b=</NextContinuationToken>"
	                       "</ListBucketResult>", &l), 0);
	assert_true(l.truncated);
	assert_string_equal(l.next_token, "1/a+b=");
	s3_listing_destroy(&l);

	assert_int_equal(parse(XML_HEAD "<KeyCount>0</KeyCount></ListBucketResult>", &l), 0);
	assert_int_equal(l.n, 0);
	s3_listing_destroy(&l);

	/* bad inputs */
	assert_int_equal(parse("", &l), -EBADMSG);
	assert_int_equal(parse("<Error><Code>AccessDenied</Code></Error>", &l), -EBADMSG);
	assert_int_equal(parse(XML_HEAD "<IsTruncated>true</IsTruncated></ListBucketResult>", &l),
	                 -EBADMSG);
	assert_int_equal(parse(XML_HEAD "<Contents><Key>k</Contents>", &l), -EBADMSG);
	assert_int_equal(parse(XML_HEAD "<Contents><Size>1</Size></Contents>", &l), -EBADMSG);
	assert_int_equal(parse(XML_HEAD "<Contents><Key>a&bogus;</Key></Contents>", &l), -EBADMSG);
	assert_int_equal(parse(XML_HEAD "<Contents><Key>a&#0;</Key></Contents>", &l), -EBADMSG);
	assert_int_equal(parse(XML_HEAD "<Contents><Key>a&#xD800;</Key></Contents>", &l), -EBADMSG);
	assert_int_equal(parse(XML_HEAD "<Contents><Key>a&#x110000;</Key></Contents>", &l), -EBADMSG);
	assert_int_equal(parse(XML_HEAD "<Contents><Key>a&amp</Key></Contents>", &l), -EBADMSG);
	assert_int_equal(parse(XML_HEAD "<Contents><Key>a&#;</Key></Contents>", &l), -EBADMSG);
	/* an unterminated document: the parser stops at its length */
	assert_int_equal(s3_parse_listing(XML_HEAD "<Contents><Key>abc</Key></Contents>",
	                                  strlen(XML_HEAD) + 18, &l), 0);
	assert_int_equal(l.n, 0);
	s3_listing_destroy(&l);
}

static void test_s3__error_codes(void **state)
{
	const char *e = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SignatureDoesNotMatch"
	                "</Code><Message></Message></Error>";
	char code[32];

	assert_int_equal(s3_error_code(e, strlen(e), code, sizeof(code)), 0);
	assert_string_equal(code, "SignatureDoesNotMatch");
	assert_int_equal(s3_error_code(e, strlen(e), code, 8), -EBADMSG);
	assert_int_equal(s3_error_code("<Error><Code>a b</Code></Error>", 31, code, sizeof(code)),
	                 -EBADMSG);
	assert_int_equal(s3_error_code("<Error></Error>", 15, code, sizeof(code)), -EBADMSG);
	assert_int_equal(s3_error_code("<html>403</html>", 16, code, sizeof(code)), -EBADMSG);
	assert_int_equal(s3_error_code("", 0, code, sizeof(code)), -EBADMSG);
}

/* An s3 store whose endpoint refuses connections: retried until the fetch
 * timeout, then -ECONNREFUSED; listing too. */
static void test_s3__unreachable_endpoint_fails_after_retries(void **state)
{
	struct store_options o = {
		.s3_endpoint = "http://127.0.0.1:1",
		.s3_access_key = "K",
		.s3_secret_key = "S:S",
	};
	struct store *s;
	struct buf b = BUF_INIT;
	char **names;
	size_t n;

	assert_int_equal(store_open_with("s3://bucket/pre", &o, &s), 0);
	store_set_fetch_timeout(s, 200);
	assert_int_equal(store_get_sync(s, "tags/x:1", &b), -ECONNREFUSED);
	assert_true(store_get_counters(s)->retries > 0);
	assert_int_equal(store_put_sync(s, "chunks/00112233", "abc", 3), -ECONNREFUSED);
	assert_int_equal(store_list_sync(s, "tags/", &names, &n), -ECONNREFUSED);
	store_free(s);
	buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_s3__urls),
		cmocka_unit_test(test_s3__strict_encoding),
		cmocka_unit_test(test_s3__credentials_file),
		cmocka_unit_test_setup_teardown(test_s3__conf_from_the_environment, env_setup,
		                                env_teardown),
		cmocka_unit_test(test_s3__listing),
		cmocka_unit_test(test_s3__error_codes),
		cmocka_unit_test_setup_teardown(test_s3__unreachable_endpoint_fails_after_retries,
		                                env_setup, env_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
