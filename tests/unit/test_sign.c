/*
 * test_sign.c — Ed25519 against RFC 8032's test vectors, key files that
 * openssl reads, base64 with one encoding per value, and signed tags: the
 * payload's bytes (golden: a drift changes what every signature means), an
 * object that parses back to what was encoded, and a signature that fails
 * once any signed field changes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/lib.h"
#include "lib/sha256.h"
#include "lib/sign.h"
#include "store/store.h"

/* RFC 8032, 7.1, TEST 1 and TEST 2 */
static const char *const seeds[] = {
	"9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
	"4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
};
static const char *const pubs[] = {
	"d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
	"3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
};
static const char *const sigs[] = {
	"e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e"
	"39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
	"92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f"
	"3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
};
static const uint8_t msg2[] = { 0x72 };

static void rfc_key(int i, struct sign_key *k)
{
	memset(k, 0, sizeof(*k));
	assert_int_equal(hex_decode(seeds[i], k->seed, 32), 0);
	assert_int_equal(hex_decode(pubs[i], k->pub, 32), 0);
	k->has_private = true;
}

static void test_sign__rfc8032_vectors(void **state)
{
	for (int i = 0; i < 2; i++) {
		struct sign_key k;
		uint8_t sig[SIGN_SIG_SIZE];
		char hex[2 * SIGN_SIG_SIZE + 1];
		const void *m = i ? msg2 : (const void *)"";
		size_t len = i ? sizeof(msg2) : 0;

		rfc_key(i, &k);
		assert_int_equal(sign_data(&k, m, len, sig), 0);
		hex_encode(sig, sizeof(sig), hex);
		assert_string_equal(hex, sigs[i]);
		assert_int_equal(sign_verify(k.pub, m, len, sig), 0);
		sig[5] ^= 1;
		assert_int_equal(sign_verify(k.pub, m, len, sig), -EBADMSG);
		sig[5] ^= 1;
		/* another key's signature, another message */
		assert_int_equal(sign_verify(k.pub, "x", 1, sig), -EBADMSG);
	}
}

static void test_sign__base64(void **state)
{
	uint8_t in[5] = { 0xfb, 0xff, 0x00, 0x10, 0x80 }, out[5];
	char text[16];

	sign_base64_encode(in, 5, text);
	assert_string_equal(text, "+/8AEIA=");
	assert_int_equal(sign_base64_decode(text, out, 5), 0);
	assert_memory_equal(in, out, 5);
	sign_base64_encode(in, 1, text);
	assert_string_equal(text, "+w==");
	assert_int_equal(sign_base64_decode("+w==", out, 1), 0);
	/* non-zero padding bits, a wrong length, a stray character: refused */
	assert_int_equal(sign_base64_decode("+x==", out, 1), -EINVAL);
	assert_int_equal(sign_base64_decode("+w=", out, 1), -EINVAL);
	assert_int_equal(sign_base64_decode("+/8AEI*=", out, 5), -EINVAL);
	assert_int_equal(sign_base64_decode("+/8AEIA=", out, 4), -EINVAL);
}

static void test_sign__key_files(void **state)
{
	char dir[] = "/tmp/test_sign.XXXXXX", path[64], pub[64], cmd[256];
	struct sign_key k, priv, pk;
	struct stat st;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/k", dir);
	snprintf(pub, sizeof(pub), "%s/k.pub", dir);
	assert_int_equal(sign_key_generate(&k), 0);
	assert_int_equal(sign_key_write(&k, path), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	/* never replaced */
	assert_int_equal(sign_key_write(&k, path), -EEXIST);
	assert_int_equal(sign_key_load_private(path, &priv), 0);
	assert_memory_equal(priv.seed, k.seed, 32);
	assert_memory_equal(priv.pub, k.pub, 32);
	assert_int_equal(sign_key_load_public(pub, &pk), 0);
	assert_memory_equal(pk.pub, k.pub, 32);
	assert_false(pk.has_private);
	/* a public key is not a private one, nor the other way round */
	assert_int_equal(sign_key_load_private(pub, &pk), -EINVAL);
	assert_int_equal(sign_key_load_public(path, &pk), -EINVAL);
	/* openssl derives the same public key file from ours */
	snprintf(cmd, sizeof(cmd), "command -v openssl >/dev/null || exit 0; "
	         "openssl pkey -in %s -pubout | cmp -s - %s", path, pub);
	assert_int_equal(system(cmd), 0);
	unlink(path);
	unlink(pub);
	rmdir(dir);
}

static struct store_tag_sig sample(void)
{
	struct store_tag_sig t = { .tag = "lib/app:1.2", .version = 7, .signed_at = 1796600000,
	                           .expires_at = 1804376000 };

	memset(t.digest, 0xab, sizeof(t.digest));
	memset(t.key_id, 0x01, sizeof(t.key_id));
	return t;
}

static void test_sign__tag_payload_golden(void **state)
{
	struct store_tag_sig t = sample();
	struct buf b = BUF_INIT;

	assert_int_equal(store_tag_sig_payload(&t, &b), 0);
	assert_int_equal(buf_append_zero(&b, 1), 0);
	assert_string_equal((char *)b.data,
	                    "lazyroot signed tag 1\n"
	                    "tag lib/app:1.2\n"
	                    "digest sha256:abababababababababababababababababababababababababababababababab\n"
	                    "version 7\n"
	                    "signed-at 1796600000\n"
	                    "expires-at 1804376000\n"
	                    "key sha256:0101010101010101010101010101010101010101010101010101010101010101\n");
	buf_free(&b);
}

static void test_sign__tag_object(void **state)
{
	struct store_tag_sig t = sample(), u;
	struct sign_key k;
	struct buf p = BUF_INIT, o = BUF_INIT;
	const char *why;

	rfc_key(0, &k);
	assert_int_equal(store_tag_sig_payload(&t, &p), 0);
	assert_int_equal(sign_data(&k, p.data, p.len, t.sig), 0);
	assert_int_equal(store_tag_sig_encode(&t, &o), 0);
	assert_int_equal(store_tag_sig_parse(o.data, o.len, &u, &why), 0);
	assert_memory_equal(&t, &u, sizeof(t));
	assert_int_equal(store_tag_sig_verify(&u, k.pub), 0);
	/* every field is signed */
	u.version++;
	assert_int_equal(store_tag_sig_verify(&u, k.pub), -EBADMSG);
	u = t, strcpy(u.tag, "lib/app:1.3");
	assert_int_equal(store_tag_sig_verify(&u, k.pub), -EBADMSG);
	u = t, u.digest[31] ^= 1;
	assert_int_equal(store_tag_sig_verify(&u, k.pub), -EBADMSG);
	u = t, u.expires_at++;
	assert_int_equal(store_tag_sig_verify(&u, k.pub), -EBADMSG);
	u = t, u.signed_at--;
	assert_int_equal(store_tag_sig_verify(&u, k.pub), -EBADMSG);
	u = t, u.key_id[0] ^= 1;
	assert_int_equal(store_tag_sig_verify(&u, k.pub), -EBADMSG);
	/* objects refused when parsed */
	{
		static const char *const bad[] = {
			"[]",
			"{\"tag\":\"a:1\"}",
			"{\"tag\":\"a:1\",\"digest\":\"sha256:ab\",\"version\":1,\"signed_at\":1,"
			"\"expires_at\":2,\"key\":\"sha256:ab\",\"signature\":\"\"}",
		};

		for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
			assert_int_equal(store_tag_sig_parse(bad[i], strlen(bad[i]), &u, &why),
			                 -EBADMSG);
	}
	/* a field this reader does not know, and version 0 */
	{
		struct buf x = BUF_INIT;

		assert_int_equal(buf_append(&x, o.data, o.len - 2), 0);   /* without "}\n" */
		assert_int_equal(buf_printf(&x, ",\"scope\":\"any\"}"), 0);
		assert_int_equal(store_tag_sig_parse(x.data, x.len, &u, &why), -EBADMSG);
		assert_string_equal(why, "a field this version does not know");
		buf_free(&x);
		t.version = 0;
		assert_int_equal(store_tag_sig_encode(&t, &x), 0);
		assert_int_equal(store_tag_sig_parse(x.data, x.len, &u, &why), -EBADMSG);
		buf_free(&x);
	}
	buf_free(&p);
	buf_free(&o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sign__rfc8032_vectors),
		cmocka_unit_test(test_sign__base64),
		cmocka_unit_test(test_sign__key_files),
		cmocka_unit_test(test_sign__tag_payload_golden),
		cmocka_unit_test(test_sign__tag_object),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
