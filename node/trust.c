/*
 * trust.c — the node's trust policy for tags (docs/security.md): which
 * signed tags a mount accepts, checked before the index is used.
 *
 * A mount's settings name the trusted public keys (trust_keys: for every
 * store, or for one store as its store setting spells it) and whether a
 * signature is required (require_signed).  With neither, tags are taken as
 * they are and signatures are not read.  Otherwise a tag's signature
 * (store.h, "Signed tags") must be for that tag, by a trusted key, verify,
 * not have expired, and not be older than the newest version of that tag
 * this node has mounted from that store; then the index's bytes must hash
 * to the digest it signed.  A tag with no signature is refused only when
 * one is required.  A run by index name needs no tag and is not checked.
 *
 * The newest version seen is kept on disk, one small file per (store, tag)
 * in the trust_state directory, written (atomically, durably) when a mount
 * accepts a newer one, so that a restart or a new worker does not forget
 * it.  Each refusal is one line naming the image, the store and the
 * reason, and is counted by reason (node status, /metrics).
 *
 * Cost per mount of a signed tag: reading the key files and the signature
 * object, one Ed25519 verification, and the SHA-256 of the index, computed
 * once per index and kept beside it in the cache (digest_read below);
 * docs/perf-log.md, "Signed tags".
 */
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <time.h>
#include <unistd.h>

#include "lib/json.h"
#include "lib/lib.h"
#include "lib/sha256.h"
#include "lib/sign.h"
#include "node/node-internal.h"
#include "store/store.h"

#define TRUST_KEYS_MAX 16        /* keys trusted for one mount */
#define TRUST_STATE_MAX 4096     /* a state file is ~200 bytes */

const char *const node_trust_reasons[NODE_TRUST_NREASONS] = {
	[NODE_TRUST_UNSIGNED] = "unsigned",
	[NODE_TRUST_UNREADABLE] = "unreadable",
	[NODE_TRUST_WRONG_TAG] = "wrong_tag",
	[NODE_TRUST_UNKNOWN_KEY] = "unknown_key",
	[NODE_TRUST_BAD_SIGNATURE] = "bad_signature",
	[NODE_TRUST_EXPIRED] = "expired",
	[NODE_TRUST_ROLLBACK] = "rollback",
	[NODE_TRUST_WRONG_INDEX] = "wrong_index",
	[NODE_TRUST_KEY_FILE] = "key_file",
};

static int refuse(struct worker *w, const struct mount *m, enum node_trust_reason why,
                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* One line naming the image, the store and why; counted. */
static int refuse(struct worker *w, const struct mount *m, enum node_trust_reason why,
                  const char *fmt, ...)
{
	char reason[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	w->trust_refused[why]++;
	return log_error(-EACCES, "image '%s' from store '%s': refused: %s", m->ref,
	                 m->cfg.store_url, reason);
}

/* The keys of m's settings that apply to its store, into keys (at most
 * TRUST_KEYS_MAX): their count, or -errno (a key file that cannot be read
 * is a refusal, said). */
static int trust_keys(struct worker *w, const struct mount *m, struct sign_key *keys)
{
	const char *v = m->cfg.trust_keys, *store = m->cfg.store_url;
	int n = 0;

	while (v && *v) {
		size_t len = strcspn(v, " \t"), slen = 0;
		const char *path = v;
		char file[PATH_MAX];

		if (!len) {
			v++;
			continue;
		}
		/* STORE=/FILE: the path after the last "=/" (node_trust_keys_valid) */
		for (const char *p = v; p + 1 < v + len; p++)
			if (p[0] == '=' && p[1] == '/')
				path = p + 1, slen = (size_t)(p - v);
		if (path == v || (strlen(store) == slen && !memcmp(store, v, slen))) {
			if (n == TRUST_KEYS_MAX)
				return refuse(w, m, NODE_TRUST_KEY_FILE, "more than %d trusted keys",
				              TRUST_KEYS_MAX);
			snprintf(file, sizeof(file), "%.*s", (int)(v + len - path), path);
			if (sign_key_load_public(file, &keys[n]) < 0)
				return refuse(w, m, NODE_TRUST_KEY_FILE, "trusted key '%s' is unusable",
				              file);
			n++;
		}
		v += len;
	}
	return n;
}

/* The state file of (m's store, tag): TRUST_STATE/<sha256 of "store\ntag">. */
static int state_path(const struct mount *m, const char *tag, char *out, size_t len)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	uint8_t d[SHA256_SIZE];
	char hex[SHA256_HEX_SIZE];
	int r = buf_printf(&b, "%s\n%s", m->cfg.store_url, tag);

	r = r ?: sha256(b.data, b.len, d);
	if (r < 0)
		return r;
	hex_encode(d, sizeof(d), hex);
	return snprintf(out, len, "%s/%s", m->cfg.trust_state, hex) >= (int)len ? -ENAMETOOLONG : 0;
}

/* The newest version of tag this node accepted from m's store (0: none),
 * and the digest it named. */
static int state_read(const struct mount *m, const char *tag, uint64_t *ret_version,
                      uint8_t ret_digest[SHA256_SIZE])
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	char path[PATH_MAX];
	const char *dg;
	json_t *j = NULL;
	int64_t v;
	int r = state_path(m, tag, path, sizeof(path));

	*ret_version = 0;
	if (r < 0)
		return log_errno(r, "trust state of '%s'", tag);
	r = read_file(path, TRUST_STATE_MAX, &b);
	if (r == -ENOENT)
		return 0;
	if (r == 0 && json_parse(b.data, b.len, &j, NULL) == 0 &&
	    json_int(json_object_get(j, "version"), &v) == 0 && v > 0 &&
	    (dg = json_get_cstr(j, "digest")) && strlen(dg) == 7 + 2 * SHA256_SIZE &&
	    hex_decode(dg + 7, ret_digest, SHA256_SIZE) == 0)
		*ret_version = (uint64_t)v;
	else if (r == 0)
		r = -EBADMSG;
	json_decref(j);
	/* a state that cannot be read must not let an older version in */
	if (r < 0)
		return log_errno(r, "trust state '%s' of '%s' is unreadable; refusing until it is "
		                 "removed", path, tag);
	return 0;
}

static int state_write(const struct mount *m, const struct store_tag_sig *t)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	char path[PATH_MAX], digest[7 + SHA256_HEX_SIZE] = "sha256:";
	int r = state_path(m, t->tag, path, sizeof(path));

	hex_encode(t->digest, sizeof(t->digest), digest + 7);
	r = r ?: json_pack_buf(&b, "{s:s, s:s, s:o, s:s}", "store", m->cfg.store_url, "tag", t->tag,
	                       "version", json_u64(t->version), "digest", digest);
	r = r ?: mkdir_p(m->cfg.trust_state, 0700);
	r = r ?: write_file_atomic(path, b.data, b.len, 0600);
	if (r < 0)
		return log_errno(r, "trust state '%s': remembering version %llu of '%s'",
		                 m->cfg.trust_state, (unsigned long long)t->version, t->tag);
	return 0;
}

static void iso_time(int64_t t, char *out, size_t len)
{
	struct tm tm;
	time_t tt = (time_t)t;

	if (!gmtime_r(&tt, &tm) || !strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(out, len, "%lld", (long long)t);
}

int node_trust_tag(struct worker *w, struct mount *m)
{
	struct sign_key keys[TRUST_KEYS_MAX];
	struct store_tag_sig *t = &m->trust.sig;
	char tag[STORE_TAG_NAME_MAX], id[SIGN_KEY_ID_SIZE] = "sha256:", when[64];
	uint8_t seen_digest[SHA256_SIZE];
	uint64_t seen, t0 = now_ns();
	int nkeys, k, r;

	m->trust.checked = false;
	if (store_is_index_name(m->ref) || (!m->cfg.trust_keys && !m->cfg.require_signed))
		return 0;
	if (!m->st || store_tag_name(m->ref, tag) < 0)
		return -EINVAL;   /* resolved already: cannot happen */
	nkeys = trust_keys(w, m, keys);
	if (nkeys < 0)
		return nkeys;
	r = node_store_tag_sig(m->st, m->ref, m->cfg.tag_ttl_ms, t);
	if (r == -ENOENT) {
		if (m->cfg.require_signed)
			return refuse(w, m, NODE_TRUST_UNSIGNED, "the tag is not signed, and "
			              "require_signed is on");
		return 0;
	}
	if (r == -EBADMSG)
		return refuse(w, m, NODE_TRUST_UNREADABLE, "its signature is unreadable");
	if (r < 0)
		return r;   /* the store failed: said */
	hex_encode(t->key_id, sizeof(t->key_id), id + 7);
	/* the payload names the tag: a signature copied from another tag
	 * verifies, but for that tag */
	if (strcmp(t->tag, tag))
		return refuse(w, m, NODE_TRUST_WRONG_TAG, "the signature is for tag '%s'", t->tag);
	for (k = 0; k < nkeys; k++) {
		char kid[SIGN_KEY_ID_SIZE];

		if (sign_key_id(keys[k].pub, kid) == 0 && !strcmp(kid, id))
			break;
	}
	if (k == nkeys)
		return refuse(w, m, NODE_TRUST_UNKNOWN_KEY, "signed by key %s, which is not "
		              "trusted for this store", id);
	r = store_tag_sig_verify(t, keys[k].pub);
	if (r == -EBADMSG)
		return refuse(w, m, NODE_TRUST_BAD_SIGNATURE, "the signature by key %s does not "
		              "verify", id);
	if (r < 0)
		return log_errno(r, "image '%s': verifying its signature", m->ref);
	if ((int64_t)time(NULL) >= t->expires_at) {
		iso_time(t->expires_at, when, sizeof(when));
		return refuse(w, m, NODE_TRUST_EXPIRED, "the signature (version %llu) expired at %s",
		              (unsigned long long)t->version, when);
	}
	r = state_read(m, tag, &seen, seen_digest);
	if (r < 0)
		return refuse(w, m, NODE_TRUST_ROLLBACK, "the newest version seen is unknown");
	if (t->version < seen)
		return refuse(w, m, NODE_TRUST_ROLLBACK, "version %llu is older than version %llu, "
		              "which this node has mounted", (unsigned long long)t->version,
		              (unsigned long long)seen);
	if (t->version == seen && memcmp(seen_digest, t->digest, SHA256_SIZE))
		return refuse(w, m, NODE_TRUST_ROLLBACK, "version %llu named another index when "
		              "this node mounted it", (unsigned long long)t->version);
	m->trust.checked = true;
	m->trust.seen = seen;
	w->trust_check_ns += now_ns() - t0;
	return 0;
}

/*
 * The SHA-256 of a kept index, beside it in the cache: CACHE/indexes/<hex>.sha256, 64 hex
 * digits and a newline.  Hashing the index is most of a signed mount's check (1.4 ms of
 * 1.7 ms for the Debian image's 1.7 MB index, docs/perf-log.md "Signed tags"), and the kept
 * index is trusted as it is mapped, unhashed (node/index.c): what may write one may write the
 * other.  A hint only: missing or unreadable, the index is hashed again and it is rewritten.
 */
static void digest_path(const struct mount *served, char *out, size_t len)
{
	snprintf(out, len, "%s/indexes/%s.sha256", served->cache_dir, served->hex);
}

static bool digest_read(const struct mount *served, uint8_t out[SHA256_SIZE])
{
	char path[PATH_MAX], text[2 * SHA256_SIZE + 2];
	_cleanup_close_ int fd = -1;
	ssize_t n;

	digest_path(served, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read_full(fd, text, sizeof(text));
	if (n != 2 * SHA256_SIZE + 1 || text[2 * SHA256_SIZE] != '\n')
		return false;
	text[2 * SHA256_SIZE] = 0;
	return hex_decode(text, out, SHA256_SIZE) == 0;
}

static void digest_write(const struct mount *served, const uint8_t d[SHA256_SIZE])
{
	char path[PATH_MAX], tmp[PATH_MAX + 32], text[2 * SHA256_SIZE + 2];
	_cleanup_close_ int fd = -1;

	digest_path(served, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
	hex_encode(d, SHA256_SIZE, text);
	text[2 * SHA256_SIZE] = '\n';
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	/* not made durable: a hint lost in a crash is computed again */
	if (fd < 0 || write_full(fd, text, sizeof(text) - 1) < 0 || rename(tmp, path) < 0)
		(void)unlink(tmp);
}

int node_trust_index(struct worker *w, struct mount *m, struct mount *served)
{
	char want[SHA256_HEX_SIZE], got[SHA256_HEX_SIZE];
	uint64_t t0 = now_ns();
	int r;

	if (!m->trust.checked)
		return 0;
	if (!served->index_sha256_known && !node_index_unkept(&served->im) &&
	    digest_read(served, served->index_sha256))
		served->index_sha256_known = true;
	if (!served->index_sha256_known) {
		r = sha256(served->im.data, served->im.len, served->index_sha256);
		if (r < 0)
			return log_errno(r, "image '%s': hashing its index", m->ref);
		served->index_sha256_known = true;
		digest_write(served, served->index_sha256);
	}
	w->trust_check_ns += now_ns() - t0;
	if (memcmp(served->index_sha256, m->trust.sig.digest, SHA256_SIZE)) {
		hex_encode(m->trust.sig.digest, SHA256_SIZE, want);
		hex_encode(served->index_sha256, SHA256_SIZE, got);
		return refuse(w, m, NODE_TRUST_WRONG_INDEX, "index %s is not the one the signature "
		              "names (sha256:%s signed, sha256:%s found)", m->hex, want, got);
	}
	if (m->trust.sig.version > m->trust.seen) {
		r = state_write(m, &m->trust.sig);
		if (r < 0)
			return refuse(w, m, NODE_TRUST_ROLLBACK, "the version seen cannot be "
			              "remembered");
	}
	w->trust_verified++;
	return 0;
}
