/*
 * sign.c — Ed25519 through libcrypto's EVP signatures (see sign.h).
 *
 * libcrypto is loaded on first use (lib/crypto-dl.c, the loader sha256.c
 * shares), so that the commands that never sign or verify pay nothing at
 * exec.  Ed25519 signs the message itself (no
 * digest is named: EVP_DigestSign with a NULL md, one shot).
 *
 * Key files are encoded here, not through libcrypto's PEM and BIO layer: an
 * Ed25519 key's DER is a fixed prefix and the 32 raw bytes (RFC 8410), so
 * the files are byte for byte what `openssl genpkey -algorithm ed25519` and
 * `openssl pkey -pubout` write, and one parser of outside input less is
 * loaded.
 */
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/random.h>
#include <unistd.h>

#include "lib/crypto-dl.h"
#include "lib/lib.h"
#include "lib/sha256.h"
#include "lib/sign.h"

#define KEY_FILE_MAX 4096


/* RFC 8410: the DER of an Ed25519 private key (PKCS#8 v1) and public key
 * (SubjectPublicKeyInfo), each a fixed prefix and the 32 raw bytes. */
static const uint8_t der_private[16] = { 0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06,
                                         0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20 };
static const uint8_t der_public[12] = { 0x30, 0x2a, 0x30, 0x05, 0x06, 0x03,
                                        0x2b, 0x65, 0x70, 0x03, 0x21, 0x00 };

/* ---- base64 ------------------------------------------------------------------ */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void sign_base64_encode(const uint8_t *in, size_t len, char *out)
{
	size_t i;

	for (i = 0; i + 2 < len; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];

		*out++ = b64[v >> 18];
		*out++ = b64[(v >> 12) & 63];
		*out++ = b64[(v >> 6) & 63];
		*out++ = b64[v & 63];
	}
	if (i < len) {
		uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < len ? (uint32_t)in[i + 1] << 8 : 0);

		*out++ = b64[v >> 18];
		*out++ = b64[(v >> 12) & 63];
		*out++ = i + 1 < len ? b64[(v >> 6) & 63] : '=';
		*out++ = '=';
	}
	*out = 0;
}

static int b64_value(char c)
{
	const char *p = c ? strchr(b64, c) : NULL;

	return p ? (int)(p - b64) : -1;
}

int sign_base64_decode(const char *in, uint8_t *out, size_t len)
{
	size_t want = (len + 2) / 3 * 4, pad = (3 - len % 3) % 3, o = 0;

	if (strlen(in) != want)
		return -EINVAL;
	for (size_t i = 0; i < want; i += 4) {
		uint32_t v = 0;

		for (size_t j = 0; j < 4; j++) {
			bool last = i + 4 == want;
			int d = b64_value(in[i + j]);

			if (last && j >= 4 - pad) {
				if (in[i + j] != '=')
					return -EINVAL;
				d = 0;
			} else if (d < 0) {
				return -EINVAL;
			}
			v = v << 6 | (uint32_t)d;
		}
		for (int s = 16; s >= 0 && o < len; s -= 8)
			out[o++] = (uint8_t)(v >> s);
		/* the bits padding leaves must be zero: one encoding per value */
		if (i + 4 == want && pad && (v & ((1u << (8 * pad)) - 1)))
			return -EINVAL;
	}
	return 0;
}

/* ---- keys -------------------------------------------------------------------- */

static void *pkey_private(const struct crypto_api *api, const uint8_t seed[SIGN_KEY_SIZE])
{
	return api->EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, SIGN_KEY_SIZE);
}

/* The public key of seed into pub. */
static int derive_public(const uint8_t seed[SIGN_KEY_SIZE], uint8_t pub[SIGN_KEY_SIZE])
{
	const struct crypto_api *api;
	EVP_PKEY *p;
	size_t n = SIGN_KEY_SIZE;
	int r = 0;

	if (!(api = crypto_api()))
		return -EIO;
	p = pkey_private(api, seed);
	if (!p || !api->EVP_PKEY_get_raw_public_key(p, pub, &n) || n != SIGN_KEY_SIZE)
		r = log_error(-EIO, "%s: cannot make an Ed25519 key", CRYPTO_SONAME);
	api->EVP_PKEY_free(p);
	return r;
}

void sign_key_wipe(struct sign_key *k)
{
	explicit_bzero(k->seed, sizeof(k->seed));
	k->has_private = false;
}

int sign_key_generate(struct sign_key *k)
{
	ssize_t n;

	memset(k, 0, sizeof(*k));
	do
		n = getrandom(k->seed, sizeof(k->seed), 0);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(k->seed))
		return log_errno(n < 0 ? -errno : -EIO, "reading random numbers for a key");
	k->has_private = true;
	if (derive_public(k->seed, k->pub) < 0) {
		sign_key_wipe(k);
		return -EIO;
	}
	return 0;
}

int sign_key_id(const uint8_t pub[SIGN_KEY_SIZE], char out[SIGN_KEY_ID_SIZE])
{
	uint8_t d[SHA256_SIZE];
	int r = sha256(pub, SIGN_KEY_SIZE, d);

	memcpy(out, "sha256:", 7);
	hex_encode(d, sizeof(d), out + 7);
	return r;
}

/* PEM of label around the DER prefix and the 32 key bytes, into out. */
static int pem_encode(const char *label, const uint8_t *prefix, size_t plen,
                      const uint8_t key[SIGN_KEY_SIZE], struct buf *out)
{
	uint8_t der[64];
	char text[128];

	memcpy(der, prefix, plen);
	memcpy(der + plen, key, SIGN_KEY_SIZE);
	sign_base64_encode(der, plen + SIGN_KEY_SIZE, text);
	explicit_bzero(der, sizeof(der));
	/* both keys' base64 fits one line of 64 (PEM's width) */
	return buf_printf(out, "-----BEGIN %s-----\n%s\n-----END %s-----\n", label, text, label);
}

/* The key bytes of a PEM file's text (NUL-terminated) of label with prefix. */
static int pem_decode(const char *text, const char *label, const uint8_t *prefix, size_t plen,
                      uint8_t key[SIGN_KEY_SIZE])
{
	char begin[64], end[64], b[128];
	const char *p, *q;
	uint8_t der[64];
	size_t n = 0;
	int r;

	snprintf(begin, sizeof(begin), "-----BEGIN %s-----", label);
	snprintf(end, sizeof(end), "-----END %s-----", label);
	p = strstr(text, begin);
	if (!p)
		return -EINVAL;
	p += strlen(begin);
	q = strstr(p, end);
	if (!q)
		return -EINVAL;
	for (; p < q; p++) {
		if (*p == '\n' || *p == '\r' || *p == ' ' || *p == '\t')
			continue;
		if (n + 1 >= sizeof(b))
			return -EINVAL;
		b[n++] = *p;
	}
	b[n] = 0;
	r = sign_base64_decode(b, der, plen + SIGN_KEY_SIZE);
	if (r == 0 && memcmp(der, prefix, plen))
		r = -EINVAL;
	if (r == 0)
		memcpy(key, der + plen, SIGN_KEY_SIZE);
	explicit_bzero(der, sizeof(der));
	explicit_bzero(b, sizeof(b));
	return r;
}

static int key_read(const char *path, struct buf *b)
{
	int r = read_file(path, KEY_FILE_MAX, b);

	if (r == -EFBIG)
		return log_error(-EINVAL, "%s: larger than %d bytes: not a key file", path,
		                 KEY_FILE_MAX);
	if (r < 0)
		return log_errno(r, "key file '%s'", path);
	return 0;
}

int sign_key_load_private(const char *path, struct sign_key *k)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	int r = key_read(path, &b);

	memset(k, 0, sizeof(*k));
	if (r == 0 && pem_decode((char *)b.data, "PRIVATE KEY", der_private, sizeof(der_private),
	                         k->seed) < 0)
		r = log_error(-EINVAL, "%s: not an Ed25519 private key (PEM, PKCS#8)", path);
	if (b.data)
		explicit_bzero(b.data, b.len);
	if (r < 0)
		return r;
	k->has_private = true;
	r = derive_public(k->seed, k->pub);
	if (r < 0)
		sign_key_wipe(k);
	return r;
}

int sign_key_load_public(const char *path, struct sign_key *k)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	int r = key_read(path, &b);

	memset(k, 0, sizeof(*k));
	if (r == 0 && pem_decode((char *)b.data, "PUBLIC KEY", der_public, sizeof(der_public),
	                         k->pub) < 0)
		r = log_error(-EINVAL, "%s: not an Ed25519 public key (PEM)", path);
	return r;
}

/* Create path with data, mode; it must not exist. */
static int write_new(const char *path, const struct buf *data, mode_t mode)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	int r;

	if (fd < 0)
		return log_errno(-errno, "key file '%s'", path);
	r = write_full(fd, data->data, data->len);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (r < 0) {
		(void)unlink(path);
		return log_errno(r, "writing key file '%s'", path);
	}
	return 0;
}

int sign_key_write(const struct sign_key *k, const char *path)
{
	_cleanup_(buf_freep) struct buf priv = BUF_INIT, pub = BUF_INIT;
	_cleanup_free_ char *pubpath = NULL;
	int r;

	if (!k->has_private)
		return -EINVAL;
	if (asprintf(&pubpath, "%s.pub", path) < 0) {
		pubpath = NULL;
		return -ENOMEM;
	}
	r = pem_encode("PRIVATE KEY", der_private, sizeof(der_private), k->seed, &priv);
	r = r ?: pem_encode("PUBLIC KEY", der_public, sizeof(der_public), k->pub, &pub);
	if (r < 0)
		goto out;
	if (access(pubpath, F_OK) == 0) {
		r = log_error(-EEXIST, "key file '%s': exists; not replaced", pubpath);
		goto out;
	}
	r = write_new(path, &priv, 0600);
	if (r < 0)
		goto out;
	r = write_new(pubpath, &pub, 0644);
	if (r < 0)
		(void)unlink(path);
	else
		r = fsync_dir_of(path);
out:
	if (priv.data)
		explicit_bzero(priv.data, priv.len);
	return r;
}

/* ---- signing ----------------------------------------------------------------- */

int sign_data(const struct sign_key *k, const void *msg, size_t len, uint8_t sig[SIGN_SIG_SIZE])
{
	const struct crypto_api *api;
	EVP_PKEY *p = NULL;
	EVP_MD_CTX *ctx = NULL;
	size_t n = SIGN_SIG_SIZE;
	int r = 0;

	if (!k->has_private)
		return -EINVAL;
	if (!(api = crypto_api()))
		return -EIO;
	p = pkey_private(api, k->seed);
	ctx = api->EVP_MD_CTX_new();
	if (!p || !ctx || api->EVP_DigestSignInit(ctx, NULL, NULL, NULL, p) != 1 ||
	    api->EVP_DigestSign(ctx, sig, &n, msg, len) != 1 || n != SIGN_SIG_SIZE)
		r = log_error(-EIO, "%s: Ed25519 signing failed", CRYPTO_SONAME);
	api->EVP_MD_CTX_free(ctx);
	api->EVP_PKEY_free(p);
	return r;
}

int sign_verify(const uint8_t pub[SIGN_KEY_SIZE], const void *msg, size_t len,
                const uint8_t sig[SIGN_SIG_SIZE])
{
	const struct crypto_api *api;
	EVP_PKEY *p;
	EVP_MD_CTX *ctx;
	int r = -EIO, v;

	if (!(api = crypto_api()))
		return -EIO;
	p = api->EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, SIGN_KEY_SIZE);
	ctx = api->EVP_MD_CTX_new();
	if (p && ctx && api->EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, p) == 1) {
		v = api->EVP_DigestVerify(ctx, sig, SIGN_SIG_SIZE, msg, len);
		/* 0: a wrong signature; below 0: an error, or a malformed key */
		r = v == 1 ? 0 : v == 0 ? -EBADMSG : -EIO;
	}
	if (r == -EIO)
		log_error(r, "%s: Ed25519 verification failed to run", CRYPTO_SONAME);
	api->EVP_MD_CTX_free(ctx);
	api->EVP_PKEY_free(p);
	return r;
}
