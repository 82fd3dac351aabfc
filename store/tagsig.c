/*
 * tagsig.c — signed tags: the signature object beside a tag
 * ("signatures/<name>:<tag>"), the bytes it signs, and signing a tag of a
 * store (store.h, "Signed tags"; image/FORMAT.md, "Signed tags", is the
 * format byte by byte).
 *
 * What is signed is the payload, a few lines of text built from the
 * object's fields, never the object's JSON: a reader rebuilds the payload
 * from the fields it parsed and verifies that, so that no two readings of
 * one object (whitespace, key order, duplicate keys) can mean different
 * things.  The payload names the index by the SHA-256 of its bytes, not by
 * the name the store files it under, so that the index's name may change
 * (format version 2 names it by that digest) without changing what a
 * signature means.
 */
#include <time.h>

#include "lib/json.h"
#include "lib/sha256.h"
#include "lib/sign.h"
#include "store/store-internal.h"

#define TAGSIG_MAX 4096             /* an object is ~400 bytes; refuse junk */
#define TAGSIG_MAGIC "lazyroot signed tag 1\n"

int store_sig_key(const char *ref, char *out, size_t outlen)
{
	char key[STORE_TAG_NAME_MAX + 8];
	int r = store_tag_key(ref, key, sizeof(key)), n;

	if (r < 0)
		return r;
	n = snprintf(out, outlen, "signatures/%s", key + 5);
	return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

int store_tag_name(const char *ref, char out[STORE_TAG_NAME_MAX])
{
	char key[STORE_TAG_NAME_MAX + 8];
	int r = store_tag_key(ref, key, sizeof(key));

	if (r < 0)
		return r;
	if (strlen(key + 5) >= STORE_TAG_NAME_MAX)
		return -ENAMETOOLONG;
	memcpy(out, key + 5, strlen(key + 5) + 1);
	return 0;
}

int store_tag_sig_payload(const struct store_tag_sig *t, struct buf *out)
{
	char digest[SHA256_HEX_SIZE], key[SIGN_KEY_ID_SIZE - 7];

	hex_encode(t->digest, sizeof(t->digest), digest);
	hex_encode(t->key_id, sizeof(t->key_id), key);
	return buf_printf(out, TAGSIG_MAGIC "tag %s\ndigest sha256:%s\nversion %llu\n"
	                  "signed-at %lld\nexpires-at %lld\nkey sha256:%s\n", t->tag, digest,
	                  (unsigned long long)t->version, (long long)t->signed_at,
	                  (long long)t->expires_at, key);
}

int store_tag_sig_encode(const struct store_tag_sig *t, struct buf *out)
{
	char digest[7 + SHA256_HEX_SIZE] = "sha256:", key[SIGN_KEY_ID_SIZE] = "sha256:";
	char sig[(SIGN_SIG_SIZE + 2) / 3 * 4 + 1];
	int r;

	hex_encode(t->digest, sizeof(t->digest), digest + 7);
	hex_encode(t->key_id, sizeof(t->key_id), key + 7);
	sign_base64_encode(t->sig, sizeof(t->sig), sig);
	r = json_pack_buf(out, "{s:s, s:s, s:o, s:I, s:I, s:s, s:s}", "tag", t->tag, "digest",
	                  digest, "version", json_u64(t->version), "signed_at",
	                  (json_int_t)t->signed_at, "expires_at", (json_int_t)t->expires_at, "key",
	                  key, "signature", sig);
	return r ?: buf_append(out, "\n", 1);
}

/* "sha256:<64 hex>" into out (32 bytes). */
static bool parse_digest(const char *s, uint8_t out[SHA256_SIZE])
{
	return s && !strncmp(s, "sha256:", 7) && strlen(s) == 7 + 2 * SHA256_SIZE &&
	       strspn(s + 7, "0123456789abcdef") == 2 * SHA256_SIZE &&
	       hex_decode(s + 7, out, SHA256_SIZE) == 0;
}

int store_tag_sig_parse(const void *data, size_t len, struct store_tag_sig *t, const char **why)
{
	static const char *const fields[] = { "tag", "digest", "version", "signed_at",
	                                      "expires_at", "key", "signature" };
	json_t *j = NULL;
	const char *k, *tag;
	const json_t *v;
	int64_t version = -1;
	int r = -EBADMSG;

	memset(t, 0, sizeof(*t));
	*why = "not a signature object (JSON)";
	if (len > TAGSIG_MAX || json_parse(data, len, &j, NULL) < 0 || !json_is_object(j))
		goto out;
	json_object_foreach (j, k, v) {
		bool known = false;

		(void)v;
		for (size_t i = 0; i < ARRAY_SIZE(fields); i++)
			known |= !strcmp(k, fields[i]);
		if (!known) {
			/* a field this reader does not know might restrict what the
			 * signature means: refused, not ignored */
			*why = "a field this version does not know";
			goto out;
		}
	}
	tag = json_get_cstr(j, "tag");
	*why = "tag: missing or not a valid reference";
	if (!tag || strlen(tag) >= sizeof(t->tag) || !strchr(tag, ':') || store_ref_invalid(tag))
		goto out;
	strcpy(t->tag, tag);
	*why = "digest: want sha256:<64 lower-case hex digits>";
	if (!parse_digest(json_get_cstr(j, "digest"), t->digest))
		goto out;
	*why = "version, signed_at, expires_at: want whole numbers, version at least 1";
	if (json_int(json_object_get(j, "version"), &version) < 0 || version < 1 ||
	    json_int(json_object_get(j, "signed_at"), &t->signed_at) < 0 ||
	    json_int(json_object_get(j, "expires_at"), &t->expires_at) < 0)
		goto out;
	t->version = (uint64_t)version;
	*why = "key: want sha256:<64 lower-case hex digits>";
	if (!parse_digest(json_get_cstr(j, "key"), t->key_id))
		goto out;
	*why = "signature: want 64 bytes in base64";
	if (!json_get_cstr(j, "signature") ||
	    sign_base64_decode(json_get_cstr(j, "signature"), t->sig, sizeof(t->sig)) < 0)
		goto out;
	*why = NULL;
	r = 0;
out:
	json_decref(j);
	return r;
}

int store_tag_sig_get(struct store *s, const char *ref, struct store_tag_sig *t)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	char key[STORE_TAG_NAME_MAX + 16];
	const char *why;
	int r = store_sig_key(ref, key, sizeof(key));

	if (r < 0)
		return log_error(r, "image '%s': not a valid reference", ref);
	r = store_get_sync(s, key, &b);
	if (r == -ENOENT)
		return r;
	if (r < 0)
		return log_errno(r, "image '%s': reading its signature from store '%s'", ref, s->url);
	r = store_tag_sig_parse(b.data, b.len, t, &why);
	if (r < 0)
		return log_error(r, "image '%s': the signature in store '%s' is unreadable: %s", ref,
		                 s->url, why);
	return 0;
}

int store_tag_sig_verify(const struct store_tag_sig *t, const uint8_t pub[SIGN_KEY_SIZE])
{
	_cleanup_(buf_freep) struct buf p = BUF_INIT;
	int r = store_tag_sig_payload(t, &p);

	return r ?: sign_verify(pub, p.data, p.len, t->sig);
}

int store_tag_sign(struct store *s, const char *ref, const struct sign_key *k,
                   int64_t expires_in, struct store_tag_sig *ret)
{
	_cleanup_(buf_freep) struct buf idx = BUF_INIT, payload = BUF_INIT, obj = BUF_INIT;
	struct store_tag_sig t = { 0 }, old;
	char hex[HASH_HEX_SIZE], key[STORE_TAG_NAME_MAX + 16], id[SIGN_KEY_ID_SIZE];
	int r;

	if (store_is_index_name(ref))
		return log_error(-EINVAL, "image '%s': an index name, not a tag: only tags are "
		                 "signed", ref);
	r = store_tag_name(ref, t.tag);
	if (r < 0)
		return log_error(-EINVAL, "image '%s': not a valid reference: %s", ref,
		                 store_ref_invalid(ref) ?: "too long");
	r = store_resolve(s, ref, hex);
	r = r ?: store_get_index(s, hex, &idx);
	if (r < 0)
		return r;
	r = sha256(idx.data, idx.len, t.digest);
	if (r < 0)
		return log_errno(r, "image '%s': hashing its index", ref);
	/* the next version after the one the store holds, signed by any key:
	 * a node refuses a version older than one it saw */
	t.version = 1;
	r = store_tag_sig_get(s, ref, &old);
	if (r == 0)
		t.version = old.version + 1;
	else if (r != -ENOENT)
		return r;
	t.signed_at = (int64_t)time(NULL);
	t.expires_at = t.signed_at + expires_in;
	r = sign_key_id(k->pub, id);
	if (r < 0 || hex_decode(id + 7, t.key_id, sizeof(t.key_id)) < 0)
		return log_error(-EIO, "image '%s': the key's id", ref);
	r = store_tag_sig_payload(&t, &payload);
	r = r ?: sign_data(k, payload.data, payload.len, t.sig);
	r = r ?: store_tag_sig_encode(&t, &obj);
	r = r ?: store_sig_key(ref, key, sizeof(key));
	if (r < 0)
		return log_errno(r, "image '%s': signing", ref);
	/* the tag's own object was written first (and the index and chunks
	 * before it): a signature never names what is not there yet */
	r = store_put_sync(s, key, obj.data, obj.len);
	if (r < 0)
		return log_errno(r, "image '%s': writing its signature to store '%s'", ref, s->url);
	if (ret)
		*ret = t;
	return 0;
}
