/*
 * config.c — the node's settings: defaults, the config file, the environment
 * and flags, all checked by one table (keys[]) so that a value means the
 * same whichever way it came.  docs/settings.md documents the same table;
 * tests/unit/test_config.c checks the two agree.
 *
 * String fields start pointing at their key's default (a literal in keys[])
 * and point at the config's own copy once set: a setter frees the old value
 * unless it is that literal, so that init cannot fail.
 */
#include <ctype.h>
#include <limits.h>
#include <stddef.h>

#include "lib/lib.h"
#include "cache/cache.h"
#include "store/store.h"
#include "lib/json.h"
#include "node/config.h"
#include "node/node.h"
#include "sandbox/sandbox.h"

#define CONFIG_FILE_MAX (1u << 20)   /* a config file is a few KiB; refuse junk */
#define SOCKET_PATH_MAX 107          /* sun_path holds 108 bytes with the NUL */
#define DECODERS_MAX 4               /* the cache starts at most 4 decoder threads */
#define DAY_MS (86400ULL * 1000)

enum key_type {
	T_STR,       /* non-empty string */
	T_ABSPATH,   /* absolute path */
	T_SOCKET,    /* absolute path that fits sun_path */
	T_OPTSTR,    /* string; empty: unset (NULL) */
	T_ENDPOINT,  /* http[s]://HOST[:PORT]; empty: unset */
	T_REGION,    /* [A-Za-z0-9_-]{1,64} */
	T_SIZE,      /* parse_size(), at least min */
	T_UINT,      /* min..max; an unsigned field */
	T_MS,        /* parse_duration() in unit, min..max ms; a uint64_t field */
	T_MS32,      /* the same into an unsigned field */
	T_BOOL,
	T_ADDR,      /* HOST:PORT or off (NULL) */
	T_NEAR,      /* a duration in ms or off; a uint32_t field in µs */
	T_DECODERS,  /* auto or 0..DECODERS_MAX; an int field */
	T_SECRET,    /* environment only, never printed */
	T_KEYS,      /* trusted keys: [STORE=]/FILE.pub, separated by blanks; empty: none */
	T_IDS,       /* START:COUNT of host ids, or auto; a struct node_ids_range field */
};

struct key {
	struct node_config_key pub;
	enum key_type type;
	size_t off;
	uint64_t min, max;   /* T_SIZE, T_UINT, T_MS* */
	uint64_t unit_ms;    /* T_MS*, T_NEAR: the unit of a bare number */
	const char *dflt;    /* string types: the default (NULL: unset) */
};

#define F(field) offsetof(struct node_config, field)
#define K(k, e, e2, fl, t, field, mn, mx, unit, h) \
	{ { k, e, e2, fl, h, t == T_SECRET }, t, F(field), mn, mx, unit, NULL }
#define S(k, e, e2, fl, t, field, dflt, h) \
	{ { k, e, e2, fl, h, t == T_SECRET }, t, F(field), 0, 0, 0, dflt }

static const struct key keys[] = {
	/* stores */
	S("store", "LAZYROOT_STORE", NULL, "--store", T_STR, store_url, STORE_DEFAULT_URL,
	  "chunk store URL: dir:/path, http[s]://…, s3://BUCKET[/PREFIX]; URL,URL,… are mirrors"),
	K("fetch_timeout", NULL, NULL, "--fetch-timeout", T_MS, fetch_timeout_ms, 0, DAY_MS, 1000,
	  "how long a read retries an unreachable or failing remote store before EIO (bare number: s)"),
	K("http_transfers", "LAZYROOT_HTTP_TRANSFERS", NULL, NULL, T_UINT, http_transfers, 1, 1024, 0,
	  "HTTP/S3 transfers in flight per store handle"),
	K("http_connect_timeout", "LAZYROOT_HTTP_CONNECT_TIMEOUT", NULL, NULL, T_MS,
	  http_connect_timeout_ms, 1, 3600 * 1000, 1000, "HTTP/S3 connection timeout (bare number: s)"),
	K("http_low_speed_time", "LAZYROOT_HTTP_LOW_SPEED_TIME", NULL, NULL, T_MS,
	  http_low_speed_time_ms, 1000, 3600 * 1000, 1000,
	  "an HTTP/S3 transfer under 1 KiB/s this long is dropped and retried (bare number: s)"),
	S("tls_ca_file", "CURL_CA_BUNDLE", "SSL_CERT_FILE", NULL, T_OPTSTR, tls_ca_file, NULL,
	  "CA certificates (a PEM file) for https stores; empty: the system's"),
	S("tls_ca_dir", "SSL_CERT_DIR", NULL, NULL, T_OPTSTR, tls_ca_dir, NULL,
	  "CA certificates (a hashed directory) for https stores; empty: the system's"),
	S("s3_endpoint", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "--s3-endpoint", T_ENDPOINT,
	  s3_endpoint, NULL,
	  "endpoint of s3:// stores, http[s]://HOST[:PORT]; empty: AWS's for the region"),
	S("s3_region", "AWS_REGION", "AWS_DEFAULT_REGION", NULL, T_REGION, s3_region,
	  NODE_DEFAULT_S3_REGION, "region S3 requests are signed for"),
	S("s3_profile", "AWS_PROFILE", NULL, NULL, T_OPTSTR, s3_profile, NULL,
	  "profile of the S3 credentials file; empty: default"),
	S("s3_credentials_file", "AWS_SHARED_CREDENTIALS_FILE", NULL, NULL, T_OPTSTR,
	  s3_credentials_file, NULL,
	  "S3 credentials file (INI); empty: ~/.aws/credentials when it exists"),
	K("s3_list_max_keys", "LAZYROOT_S3_LIST_MAX_KEYS", NULL, NULL, T_UINT, s3_list_max_keys,
	  0, 1000, 0, "keys per S3 ListObjectsV2 page; 0: the server's default (1000)"),
	K("tag_ttl", "LAZYROOT_TAG_TTL", NULL, NULL, T_MS, tag_ttl_ms, 0, DAY_MS, 1000,
	  "how long a tag read from a remote store answers for it before it is read again "
	  "(bare number: s); 0: every time"),
	K("lease_ttl", "LAZYROOT_LEASE_TTL", NULL, NULL, T_UINT, lease_ttl, 0, 7 * 86400, 0,
	  "seconds a mount's reader lease in the store outlives the node's last renewal "
	  "(renewed every quarter of it); while it lives, store gc keeps the image; 0: no lease"),
	S("AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY_ID", NULL, NULL, T_SECRET, aws_access_key_id, NULL,
	  "S3 access key (with AWS_SECRET_ACCESS_KEY; else the credentials file)"),
	S("AWS_SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY", NULL, NULL, T_SECRET,
	  aws_secret_access_key, NULL, "S3 secret key"),
	S("AWS_SESSION_TOKEN", "AWS_SESSION_TOKEN", NULL, NULL, T_SECRET, aws_session_token, NULL,
	  "S3 session token (sent as x-amz-security-token)"),
	S("HOME", "HOME", NULL, NULL, T_SECRET, home, NULL,
	  "where the default S3 credentials file is (~/.aws/credentials)"),

	/* trust (node/trust.c, image/FORMAT.md "Signed tags") */
	S("trust_keys", "LAZYROOT_TRUST_KEYS", NULL, "--trust-key", T_KEYS, trust_keys, NULL,
	  "public keys whose signed tags a mount accepts: FILE.pub (every store) or "
	  "STORE=FILE.pub, absolute paths separated by blanks; each --trust-key adds one"),
	K("require_signed", "LAZYROOT_REQUIRE_SIGNED", NULL, "--require-signed", T_BOOL,
	  require_signed, 0, 0, 0, "refuse to mount a tag that is not signed by a trusted key"),
	S("trust_state", "LAZYROOT_TRUST_STATE", NULL, NULL, T_ABSPATH, trust_state,
	  NODE_DEFAULT_TRUST_STATE, "where the node remembers the newest signed version of each "
	  "tag it mounted, to refuse older ones"),

	/* the node cache */
	S("cache", "LAZYROOT_CACHE", NULL, "--cache", T_STR, cache_dir, CACHE_DEFAULT_DIR,
	  "node-local chunk cache directory"),
	K("cache_size", NULL, NULL, "--cache-size", T_SIZE, cache_size, 1, 0, 0,
	  "bytes of chunks the cache keeps on disk at most (cold ones are evicted)"),
	K("cache_memory", NULL, NULL, "--cache-memory", T_SIZE, cache_memory, 0, 0, 0,
	  "bytes of chunks kept in memory while the cache disk is full; 0: none"),
	K("cache_near", "LAZYROOT_CACHE_NEAR_MS", NULL, NULL, T_NEAR, cache_near_us, 0,
	  UINT32_MAX / 1000 - 1, 1, "a store this slow (fastest of the last 8 lone fetches) makes a "
	  "miss fetch the rest of its file and its neighbours (bare number: ms); off: never"),
	K("cache_decoders", "LAZYROOT_CACHE_DECODERS", NULL, NULL, T_DECODERS, cache_decoders, 0,
	  0, 0, "decoder threads: auto (one per CPU, at most 4), or 0 (decode on the loop's "
	  "thread) to 4"),

	/* mounts */
	S("images", "LAZYROOT_IMAGES", NULL, "--images", T_STR, images_dir, NODE_DEFAULT_IMAGES_DIR,
	  "where the node mounts images (DIR/<index name>)"),
	K("readahead", NULL, NULL, "--readahead", T_UINT, readahead, 0, 1024, 0,
	  "chunks fetched ahead of a sequential reader"),
	K("passthrough", "LAZYROOT_PASSTHROUGH", NULL, "--no-passthrough", T_BOOL, passthrough,
	  0, 0, 0, "serve wholly cached large files by FUSE passthrough (root, kernel 6.9+)"),
	K("cpu_latency", "LAZYROOT_CPU_LATENCY", NULL, "--no-cpu-latency", T_BOOL, cpu_latency,
	  0, 0, 0, "while serving, ask for a CPU wake-up latency of 0 so idle CPUs poll (root)"),
	K("cpu_latency_hold", NULL, NULL, NULL, T_MS32, cpu_latency_hold_ms, 1, 60 * 1000, 1,
	  "how long after the last request the CPU wake-up latency is held (bare number: ms)"),
	K("profile", NULL, NULL, "--no-profile", T_BOOL, profile, 0, 0, 0,
	  "follow the image's access profile from the store, fetching ahead of readers"),
	K("profile_window", "LAZYROOT_PROFILE_WINDOW", NULL, NULL, T_UINT, profile_window, 1, 4096,
	  0, "profile positions fetched ahead of the position a read touched"),
	K("profile_inflight", "LAZYROOT_PROFILE_INFLIGHT", NULL, NULL, T_UINT, profile_inflight, 1,
	  256, 0, "profile fetches in flight at once"),

	/* the node service */
	S("socket", "LAZYROOT_SOCKET", NULL, "--socket", T_SOCKET, socket_path, NODE_DEFAULT_SOCKET,
	  "the node service's control socket"),
	S("metrics", "LAZYROOT_METRICS", NULL, "--metrics", T_ADDR, metrics_addr,
	  NODE_DEFAULT_METRICS, "HOST:PORT serving Prometheus text at /metrics; off: none"),
	S("api_listen", "LAZYROOT_API_LISTEN", NULL, NULL, T_ADDR, api_listen, NULL,
	  "HOST:PORT serving the sandbox API over TCP (needs api_token_file); off: none"),
	S("api_token_file", "LAZYROOT_API_TOKEN_FILE", NULL, NULL, T_OPTSTR, api_token_file, NULL,
	  "file holding the bearer token the API's TCP clients must send"),
	K("node_start", "LAZYROOT_NODE_START", NULL, NULL, T_BOOL, node_start, 0, 0, 0,
	  "clients start a node in the background when none answers; off: they fail instead"),

	/* sandboxes */
	K("pool", "LAZYROOT_POOL", NULL, NULL, T_BOOL, pool, 0, 0, 0,
	  "keep sandboxes' network namespaces and cgroups for the next sandbox"),
	S("pool_dir", "LAZYROOT_POOL_DIR", NULL, NULL, T_ABSPATH, pool_dir, NODE_DEFAULT_POOL_DIR,
	  "where pooled namespaces and cgroup slots are recorded"),
	S("record_dir", "LAZYROOT_RECORD_DIR", NULL, NULL, T_ABSPATH, record_dir,
	  NODE_DEFAULT_RECORD_DIR, "where launchers record their sandboxes for `lazyroot gc`"),
	S("service_dir", "LAZYROOT_SERVICE_DIR", NULL, NULL, T_ABSPATH, service_dir,
	  NODE_DEFAULT_SERVICE_DIR, "where the sandbox service keeps each sandbox's state "
	  "(DIR/<id>)"),
	S("sandbox_state_dir", "LAZYROOT_SANDBOX_STATE_DIR", NULL, NULL, T_ABSPATH,
	  sandbox_state_dir, NODE_DEFAULT_SANDBOX_STATE_DIR, "where each running sandbox keeps "
	  "its network allowlist and stage state (DIR/<name>)"),
	S("ids_dir", "LAZYROOT_IDS_DIR", NULL, NULL, T_ABSPATH, ids_dir, NODE_DEFAULT_IDS_DIR,
	  "where the host id allocator locks the id blocks of running sandboxes"),
	K("ids_range", "LAZYROOT_IDS_RANGE", NULL, NULL, T_IDS, ids_range, 0, 0, 0,
	  "host ids the sandboxes of uid_base = auto take blocks of: START:COUNT, or auto "
	  "(user lazyroot's entries of /etc/subuid and /etc/subgid)"),

	/* builds */
	S("tmp_dir", "TMPDIR", NULL, NULL, T_ABSPATH, tmp_dir, NODE_DEFAULT_TMP_DIR,
	  "scratch space for builds (a docker archive is unpacked there)"),
	S("docker_config", "DOCKER_CONFIG", NULL, NULL, T_OPTSTR, docker_config, NULL,
	  "directory of the config.json whose auths `build docker://…` uses; empty: ~/.docker"),
};

#define NKEYS ARRAY_SIZE(keys)

/* The settings a file or a flag may set: environment-only ones are not. */
static const struct key *find(const char *name)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (!keys[i].pub.env_only && !strcmp(keys[i].pub.key, name))
			return &keys[i];
	return NULL;
}

const struct node_config_key *node_config_key_at(size_t i)
{
	return i < NKEYS ? &keys[i].pub : NULL;
}

static void *field(struct node_config *c, const struct key *k)
{
	return (char *)c + k->off;
}

static const void *cfield(const struct node_config *c, const struct key *k)
{
	return (const char *)c + k->off;
}

static bool str_type(enum key_type t)
{
	return t == T_STR || t == T_ABSPATH || t == T_SOCKET || t == T_OPTSTR || t == T_ENDPOINT ||
	       t == T_REGION || t == T_ADDR || t == T_SECRET || t == T_KEYS;
}

/* Set the string of key k to v (copied; NULL: unset). */
static int set_str(struct node_config *c, const struct key *k, const char *v)
{
	char **p = field(c, k), *n = NULL;

	if (v && !(n = strdup(v)))
		return -ENOMEM;
	if (*p && *p != k->dflt) {
		if (k->type == T_SECRET)
			explicit_bzero(*p, strlen(*p));
		free(*p);
	}
	*p = n;
	return 0;
}

void node_config_init(struct node_config *c)
{
	*c = (struct node_config){
		.fetch_timeout_ms = STORE_DEFAULT_FETCH_TIMEOUT_MS,
		.tag_ttl_ms = NODE_DEFAULT_TAG_TTL_MS,
		.lease_ttl = STORE_LEASE_TTL_DEFAULT,
		.http_transfers = NODE_DEFAULT_HTTP_TRANSFERS,
		.http_connect_timeout_ms = NODE_DEFAULT_HTTP_CONNECT_TIMEOUT_MS,
		.http_low_speed_time_ms = NODE_DEFAULT_HTTP_LOW_SPEED_TIME_MS,
		.cache_size = CACHE_DEFAULT_LIMIT,
		.cache_memory = CACHE_DEFAULT_MEMORY,
		.cache_near_us = CACHE_DEFAULT_NEAR_US,
		.cache_decoders = NODE_DECODERS_AUTO,
		.readahead = NODE_DEFAULT_READAHEAD,
		.passthrough = true,
		.cpu_latency = false,   /* no gain on a loaded node: docs/settings.md */
		.cpu_latency_hold_ms = NODE_DEFAULT_CPU_LATENCY_HOLD_MS,
		.profile = true,
		.profile_window = NODE_DEFAULT_PROFILE_WINDOW,
		.profile_inflight = NODE_DEFAULT_PROFILE_INFLIGHT,
		.pool = true,
		.require_signed = false,
		.node_start = true,
	};
	for (size_t i = 0; i < NKEYS; i++)
		if (keys[i].dflt)
			*(char **)field(c, &keys[i]) = (char *)keys[i].dflt;
}

void node_config_sandbox_node(const struct node_config *c, struct sandbox_node *n)
{
	*n = (struct sandbox_node){
		.pool_dir = c->pool_dir,
		.record_dir = c->record_dir,
		.service_dir = c->service_dir,
		.ids_dir = c->ids_dir,
		.state_dir = c->sandbox_state_dir,
		.ids_start = c->ids_range.start,
		.ids_count = c->ids_range.count,
		.no_pool = !c->pool,
	};
}

void node_config_destroy(struct node_config *c)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (str_type(keys[i].type))
			(void)set_str(c, &keys[i], NULL);
	free(c->config_path);
	c->config_path = NULL;
}

/* ---- values --------------------------------------------------------------- */

static bool parse_bool(const char *v, bool *ret)
{
	static const char *const on[] = { "on", "true", "yes", "1" };
	static const char *const off[] = { "off", "false", "no", "0" };

	for (size_t i = 0; i < ARRAY_SIZE(on); i++) {
		if (!strcmp(v, on[i])) {
			*ret = true;
			return true;
		}
		if (!strcmp(v, off[i])) {
			*ret = false;
			return true;
		}
	}
	return false;
}

/* HOST:PORT, HOST a name or an IPv4 address or [IPv6], PORT 1..65535. */
static bool addr_valid(const char *v)
{
	const char *colon = strrchr(v, ':');
	uint64_t port;

	if (!colon || colon == v || parse_uint(colon + 1, 65535, &port) < 0 || port == 0)
		return false;
	if (v[0] == '[')
		return colon[-1] == ']' && colon - v > 2;
	for (const char *p = v; p < colon; p++)
		if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-')
			return false;
	return true;
}

/* auto, or START:COUNT: ids START..START+COUNT-1, host root's never, at
 * least one block of a sandbox's ids and nothing past the last id. */
static int ids_apply(struct node_ids_range *ids, const char *v, char *msg, size_t msglen)
{
	const char *colon = strchr(v, ':');
	_cleanup_free_ char *start = colon ? strndup(v, (size_t)(colon - v)) : NULL;
	uint64_t s, n;

	if (!strcmp(v, "auto")) {
		*ids = (struct node_ids_range){ 0, 0 };
		return 0;
	}
	if (colon && !start)
		return -ENOMEM;
	if (!start || parse_uint(start, UINT32_MAX, &s) < 0 || parse_uint(colon + 1, UINT32_MAX,
	                                                              &n) < 0)
		return snprintf(msg, msglen, "'%s': want START:COUNT or auto", v), -EINVAL;
	if (s == 0 || n < 65536 || s + n - 1 > UINT32_MAX - 1)
		return snprintf(msg, msglen, "'%s': want START from 1 and COUNT of 65536 or more, "
		                "ending below %u", v, UINT32_MAX), -EINVAL;
	*ids = (struct node_ids_range){ (uint32_t)s, (uint32_t)n };
	return 0;
}

static const char *unit_name(uint64_t unit_ms)
{
	return unit_ms == 1 ? "ms" : unit_ms == 1000 ? "s" : "?";
}

/* Check value for key k and store it in c: 0, or -EINVAL with why in msg. */
static int apply(struct node_config *c, const struct key *k, const char *v, char *msg,
                 size_t msglen)
{
	uint64_t n;
	bool b;

	switch (k->type) {
	case T_STR:
		if (!*v)
			return snprintf(msg, msglen, "empty"), -EINVAL;
		return set_str(c, k, v);
	case T_ABSPATH:
		if (v[0] != '/')
			return snprintf(msg, msglen, "'%s' is not an absolute path", v), -EINVAL;
		return set_str(c, k, v);
	case T_SOCKET:
		if (v[0] != '/')
			return snprintf(msg, msglen, "'%s' is not an absolute path", v), -EINVAL;
		if (strlen(v) > SOCKET_PATH_MAX)
			return snprintf(msg, msglen, "'%s' is longer than a socket path may be "
			                "(%d bytes)", v, SOCKET_PATH_MAX), -EINVAL;
		return set_str(c, k, v);
	case T_OPTSTR:
	case T_SECRET:
		return set_str(c, k, *v ? v : NULL);
	case T_ENDPOINT:
		if (*v && strncmp(v, "http://", 7) && strncmp(v, "https://", 8))
			return snprintf(msg, msglen, "'%s': want http[s]://HOST[:PORT]", v), -EINVAL;
		return set_str(c, k, *v ? v : NULL);
	case T_REGION:
		if (!store_s3_region_valid(v))
			return snprintf(msg, msglen, "'%s' is not a region name", v), -EINVAL;
		return set_str(c, k, v);
	case T_KEYS:
		if (!node_trust_keys_valid(v, msg, msglen))
			return -EINVAL;
		return set_str(c, k, *v ? v : NULL);
	case T_ADDR:
		if (!strcmp(v, "off"))
			return set_str(c, k, NULL);
		if (!addr_valid(v))
			return snprintf(msg, msglen, "'%s': want HOST:PORT or off", v), -EINVAL;
		return set_str(c, k, v);
	case T_SIZE:
		if (parse_size(v, &n) < 0)
			return snprintf(msg, msglen, "'%s' is not a size (e.g. 512M, 10G)", v), -EINVAL;
		if (n < k->min)
			return snprintf(msg, msglen, "'%s': must not be 0", v), -EINVAL;
		*(uint64_t *)field(c, k) = n;
		return 0;
	case T_UINT:
		if (parse_uint(v, k->max, &n) < 0 || n < k->min)
			return snprintf(msg, msglen, "'%s': want a number from %llu to %llu", v,
			                (unsigned long long)k->min, (unsigned long long)k->max), -EINVAL;
		*(unsigned *)field(c, k) = (unsigned)n;
		return 0;
	case T_MS:
	case T_MS32:
		if (parse_duration(v, k->unit_ms, k->max, &n) < 0 || n < k->min)
			return snprintf(msg, msglen, "'%s': want a duration from %llums to %llums "
			                "(a bare number is in %s)", v, (unsigned long long)k->min,
			                (unsigned long long)k->max, unit_name(k->unit_ms)), -EINVAL;
		if (k->type == T_MS)
			*(uint64_t *)field(c, k) = n;
		else
			*(unsigned *)field(c, k) = (unsigned)n;
		return 0;
	case T_BOOL:
		if (!parse_bool(v, &b))
			return snprintf(msg, msglen, "'%s': want on or off", v), -EINVAL;
		*(bool *)field(c, k) = b;
		return 0;
	case T_NEAR:
		if (!strcmp(v, "off")) {
			*(uint32_t *)field(c, k) = NODE_NEAR_OFF;
			return 0;
		}
		if (parse_duration(v, k->unit_ms, k->max, &n) < 0)
			return snprintf(msg, msglen, "'%s': want a duration (e.g. 5ms) or off", v),
			       -EINVAL;
		*(uint32_t *)field(c, k) = (uint32_t)(n * 1000);
		return 0;
	case T_IDS:
		return ids_apply(field(c, k), v, msg, msglen);
	case T_DECODERS:
		if (!strcmp(v, "auto")) {
			*(int *)field(c, k) = NODE_DECODERS_AUTO;
			return 0;
		}
		if (parse_uint(v, DECODERS_MAX, &n) < 0)
			return snprintf(msg, msglen, "'%s': want auto or 0 to %d", v, DECODERS_MAX),
			       -EINVAL;
		*(int *)field(c, k) = (int)n;
		return 0;
	}
	return -EINVAL;
}

int node_config_set(struct node_config *c, const char *key, const char *value,
                    const char *origin)
{
	const struct key *k = find(key);
	char msg[1024];
	int r;

	if (!origin)
		origin = key;
	if (!k)
		return log_error(-EINVAL, "%s: unknown setting", origin);
	r = apply(c, k, value, msg, sizeof(msg));
	if (r == -EINVAL)
		return log_error(r, "%s: %s", origin, msg);
	if (r < 0)
		return log_errno(r, "%s", origin);
	return 0;
}

int node_config_env(struct node_config *c)
{
	char msg[1024];

	for (size_t i = 0; i < NKEYS; i++) {
		const struct key *k = &keys[i];
		const char *name = k->pub.env, *v = name ? getenv(name) : NULL;
		int r;

		if ((!v || !*v) && k->pub.env2) {
			name = k->pub.env2;
			v = getenv(name);
		}
		if (!v || !*v)
			continue;
		r = apply(c, k, v, msg, sizeof(msg));
		if (r == -EINVAL)
			return log_error(r, "%s: %s", name, msg);
		if (r < 0)
			return log_errno(r, "%s", name);
	}
	return 0;
}

/* Drop leading and trailing blanks of s in place. */
static char *strip(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = 0;
	return s;
}

int node_config_load(struct node_config *c, const char *path, bool must_exist)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	unsigned seen_line[NKEYS] = { 0 };
	char *p, *next, origin[1024];
	unsigned line = 0;
	int r;

	r = read_file(path, CONFIG_FILE_MAX, &b);
	if (r == -ENOENT && !must_exist)
		return 0;
	if (r == -EFBIG)
		return log_error(-EINVAL, "%s: larger than %u bytes: not a config file", path,
		                 CONFIG_FILE_MAX);
	if (r < 0)
		return log_errno(r, "config file '%s'", path);
	if (buf_append_zero(&b, 1) < 0)
		return log_errno(-ENOMEM, "config file '%s'", path);
	if (memchr(b.data, 0, b.len - 1))
		return log_error(-EINVAL, "%s: holds a NUL byte: not a config file", path);
	for (p = (char *)b.data; p; p = next) {
		char *eq, *key, *value;
		const struct key *k;

		line++;
		next = strchr(p, '\n');
		if (next)
			*next++ = 0;
		p = strip(p);
		if (!*p || *p == '#')
			continue;
		eq = strchr(p, '=');
		if (!eq) {
			/* name the first word as the key the line was meant for */
			p[strcspn(p, " \t")] = 0;
			return log_error(-EINVAL, "%s:%u: %s: want key = value", path, line, p);
		}
		*eq = 0;
		key = strip(p);
		value = strip(eq + 1);
		if (!*key)
			return log_error(-EINVAL, "%s:%u: no key before '='", path, line);
		k = find(key);
		if (!k)
			return log_error(-EINVAL, "%s:%u: %s: unknown setting (docs/settings.md lists "
			                 "them)", path, line, key);
		if (seen_line[k - keys])
			return log_error(-EINVAL, "%s:%u: %s: set again (first on line %u)", path,
			                 line, key, seen_line[k - keys]);
		seen_line[k - keys] = line;
		snprintf(origin, sizeof(origin), "%s:%u: %s", path, line, key);
		r = node_config_set(c, key, value, origin);
		if (r < 0)
			return r;
	}
	free(c->config_path);
	c->config_path = strdup(path);
	return 0;
}

int node_config_setup(struct node_config *c, const char *config_flag)
{
	const char *env = getenv("LAZYROOT_CONFIG");
	int r;

	node_config_init(c);
	if (config_flag)
		r = node_config_load(c, config_flag, true);
	else if (env && *env)
		r = node_config_load(c, env, true);
	else
		r = node_config_load(c, NODE_CONFIG_DEFAULT_PATH, false);
	if (r == 0)
		r = node_config_env(c);
	if (r < 0)
		node_config_destroy(c);
	return r;
}

bool node_trust_keys_valid(const char *v, char *msg, size_t msglen)
{
	while (*v) {
		size_t n = strcspn(v, " \t");
		const char *eq = memchr(v, '=', n), *path = v;

		if (!n) {
			v++;
			continue;
		}
		/* STORE=/FILE: the path is after the last "=/" (a store URL may hold '=') */
		for (const char *p = v; p + 1 < v + n; p++)
			if (p[0] == '=' && p[1] == '/')
				eq = p, path = p + 1;
		if (path[0] != '/' || (eq && eq == v)) {
			snprintf(msg, msglen, "'%.*s': want /FILE.pub or STORE=/FILE.pub, an absolute "
			         "path", (int)n, v);
			return false;
		}
		v += n;
	}
	return true;
}

/* --trust-key FILE: one more key (FILE made absolute, as the node runs from
 * "/"), after those the file or the environment named. */
static int add_key(struct node_config *c, const struct key *k, const char *value,
                   const char *flag)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	const char *old = *(char **)field(c, k);
	char cwd[PATH_MAX];
	int r = 0;

	if (!*value || strpbrk(value, " \t"))
		return log_error(-EINVAL, "%s '%s': want a file name without blanks", flag, value);
	if (old && *old)
		r = buf_printf(&b, "%s ", old);
	if (r == 0 && value[0] != '/' && !strchr(value, '=')) {
		if (!getcwd(cwd, sizeof(cwd)))
			return log_errno(-errno, "%s '%s'", flag, value);
		r = buf_printf(&b, "%s/", cwd);
	}
	r = r ?: buf_printf(&b, "%s", value);
	if (r < 0)
		return log_errno(r, "%s", flag);
	return node_config_set(c, k->pub.key, (char *)b.data, flag);
}

int node_config_set_flag(struct node_config *c, const char *flag, const char *value)
{
	for (size_t i = 0; i < NKEYS; i++) {
		const struct key *k = &keys[i];

		if (!k->pub.flag || strcmp(k->pub.flag, flag))
			continue;
		if (!value && k->type != T_BOOL)
			return log_error(-EINVAL, "%s: a value is needed", flag);
		if (k->type == T_KEYS)
			return add_key(c, k, value, flag);
		/* a switch's flag turns it off (--no-passthrough) or on (--require-signed) */
		if (!value)
			value = strncmp(flag, "--no-", 5) ? "on" : "off";
		return node_config_set(c, k->pub.key, value, flag);
	}
	return log_error(-EINVAL, "%s: no setting has this flag", flag);
}

void node_config_store_options(const struct node_config *c, struct store_options *o)
{
	*o = (struct store_options){
		.http_transfers = c->http_transfers,
		.http_connect_timeout_ms = c->http_connect_timeout_ms,
		.http_low_speed_time_ms = c->http_low_speed_time_ms,
		.tls_ca_file = c->tls_ca_file,
		.tls_ca_dir = c->tls_ca_dir,
		.s3_endpoint = c->s3_endpoint,
		.s3_region = c->s3_region,
		.s3_access_key = c->aws_access_key_id,
		.s3_secret_key = c->aws_secret_access_key,
		.s3_session_token = c->aws_session_token,
		.s3_credentials_file = c->s3_credentials_file,
		.s3_profile = c->s3_profile,
		.home = c->home,
		.s3_list_max_keys = c->s3_list_max_keys,
	};
}

void node_config_cache_params(const struct node_config *c, struct cache_params *p)
{
	*p = (struct cache_params){
		.dir = c->cache_dir,
		.limit = c->cache_size,
		.memory_limit = c->cache_memory,
		/* 0 is the cache's default: 0 ms (always) asks for 1 µs */
		.near_latency_us = c->cache_near_us ? c->cache_near_us : 1,
		.decoders = c->cache_decoders < 0 ? 0 :
		            c->cache_decoders == 0 ? CACHE_NO_DECODERS : (unsigned)c->cache_decoders,
	};
}

/* ---- printing ------------------------------------------------------------- */

static int format_size_exact(uint64_t n, char *out, size_t len)
{
	static const char units[] = "KMGT";
	int u = -1;

	while (n && n % 1024 == 0 && u + 1 < 4) {
		n /= 1024;
		u++;
	}
	if (u < 0)
		return snprintf(out, len, "%llu", (unsigned long long)n);
	return snprintf(out, len, "%llu%c", (unsigned long long)n, units[u]);
}

static int format_ms(uint64_t ms, char *out, size_t len)
{
	if (ms && ms % 1000 == 0)
		return snprintf(out, len, "%llus", (unsigned long long)(ms / 1000));
	return snprintf(out, len, "%llums", (unsigned long long)ms);
}

static int format(const struct node_config *c, const struct key *k, char *out, size_t len)
{
	const void *f = cfield(c, k);

	switch (k->type) {
	case T_STR: case T_ABSPATH: case T_SOCKET: case T_OPTSTR: case T_ENDPOINT:
	case T_REGION: case T_SECRET: case T_KEYS:
		return snprintf(out, len, "%s", *(char *const *)f ? *(char *const *)f : "");
	case T_ADDR:
		return snprintf(out, len, "%s", *(char *const *)f ? *(char *const *)f : "off");
	case T_SIZE:
		return format_size_exact(*(const uint64_t *)f, out, len);
	case T_UINT:
		return snprintf(out, len, "%u", *(const unsigned *)f);
	case T_MS:
		return format_ms(*(const uint64_t *)f, out, len);
	case T_MS32:
		return format_ms(*(const unsigned *)f, out, len);
	case T_BOOL:
		return snprintf(out, len, "%s", *(const bool *)f ? "on" : "off");
	case T_NEAR:
		if (*(const uint32_t *)f == NODE_NEAR_OFF)
			return snprintf(out, len, "off");
		return format_ms(*(const uint32_t *)f / 1000, out, len);
	case T_IDS: {
		const struct node_ids_range *ids = f;

		if (!ids->count)
			return snprintf(out, len, "auto");
		return snprintf(out, len, "%u:%u", (unsigned)ids->start, (unsigned)ids->count);
	}
	case T_DECODERS:
		if (*(const int *)f < 0)
			return snprintf(out, len, "auto");
		return snprintf(out, len, "%d", *(const int *)f);
	}
	return snprintf(out, len, "?");
}

int node_config_get(const struct node_config *c, const char *key, char *out, size_t len)
{
	const struct key *k = find(key);
	int n;

	if (!k)
		return -ENOENT;
	n = format(c, k, out, len);
	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	return 0;
}

void node_config_dump(const struct node_config *c, FILE *f, bool commented)
{
	char v[4096];

	fprintf(f, "# lazyroot node settings: `key = value` lines; docs/settings.md describes\n"
	        "# each, with its flag, its environment variable and why its default.\n"
	        "# Precedence: defaults < this file < environment < command-line flags.\n");
	for (size_t i = 0; i < NKEYS; i++) {
		const struct key *k = &keys[i];

		if (k->pub.env_only)
			continue;
		if (format(c, k, v, sizeof(v)) >= (int)sizeof(v))
			v[0] = 0;
		fprintf(f, "\n# %s\n%s%s =%s%s\n", k->pub.help, commented ? "# " : "", k->pub.key,
		        *v ? " " : "", v);
	}
}

/* ---- the settings as JSON, between a command and the node ------------------ */

json_t *node_config_json(const struct node_config *c)
{
	const struct node_config_key *k;
	json_t *o = json_object();
	char v[4096];

	for (size_t i = 0; o && (k = node_config_key_at(i)); i++) {
		if (k->env_only || node_config_get(c, k->key, v, sizeof(v)) < 0)
			continue;
		if (json_object_set_new(o, k->key, json_str(v, strlen(v))) < 0) {
			json_decref(o);
			o = NULL;
		}
	}
	return o;
}

int node_config_apply_json(struct node_config *c, const json_t *settings)
{
	const char *key;
	json_t *jv;

	if (!json_is_object(settings))
		return log_error(-EINVAL, "request: settings: not an object");
	json_object_foreach ((json_t *)settings, key, jv) {
		const char *v = json_cstr(jv);
		char origin[128];
		int r;

		if (!v)
			return log_error(-EINVAL, "request: settings: %.64s: not a string", key);
		snprintf(origin, sizeof(origin), "request: settings: %.64s", key);
		/* an empty text unsets an optional setting (a CA file the
		 * command's environment does not name is not the node's) */
		r = node_config_set(c, key, v, origin);
		if (r < 0)
			return r;
	}
	return 0;
}

int node_config_copy(const struct node_config *src, struct node_config *dst)
{
	json_t *j = node_config_json(src);
	int r = j ? 0 : -ENOMEM;

	node_config_init(dst);
	r = r ?: node_config_apply_json(dst, j);
	r = r ?: node_config_copy_secrets(dst, src);
	json_decref(j);
	if (r < 0)
		node_config_destroy(dst);
	return r;
}

/* ---- the environment-only settings between a command and the node ------- */

json_t *node_config_secrets_json(const struct node_config *c)
{
	json_t *o = json_object();

	for (size_t i = 0; o && i < NKEYS; i++) {
		const char *v;

		if (!keys[i].pub.env_only || keys[i].type != T_SECRET)
			continue;
		v = *(char *const *)cfield(c, &keys[i]);
		if (v && json_object_set_new(o, keys[i].pub.key, json_str(v, strlen(v))) < 0) {
			json_decref(o);
			o = NULL;
		}
	}
	return o;
}

int node_config_apply_secrets(struct node_config *c, const json_t *j)
{
	if (!json_is_object(j))
		return log_error(-EINVAL, "request: secrets: not an object");
	const char *key;
	json_t *jv;

	json_object_foreach ((json_t *)j, key, jv) {
		const char *v = json_cstr(jv);
		size_t i;

		for (i = 0; i < NKEYS; i++)
			if (keys[i].pub.env_only && keys[i].type == T_SECRET &&
			    !strcmp(keys[i].pub.key, key))
				break;
		if (i == NKEYS || !v)
			return log_error(-EINVAL, "request: secrets: %.64s: not a credential", key);
		if (set_str(c, &keys[i], *v ? v : NULL) < 0)
			return -ENOMEM;
	}
	return 0;
}

int node_config_copy_secrets(struct node_config *dst, const struct node_config *src)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (keys[i].pub.env_only && keys[i].type == T_SECRET &&
		    set_str(dst, &keys[i], *(char *const *)cfield(src, &keys[i])) < 0)
			return -ENOMEM;
	return 0;
}
