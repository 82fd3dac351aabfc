/*
 * config.h — the node's settings: every knob an operator can turn, parsed
 * once, here, and handed to the modules in their own parameters (store
 * options, cache params, fs params, sandbox dirs).  No module below reads the
 * environment.
 *
 * Sources, each overriding the one before:
 *   1. the defaults (node_config_init);
 *   2. the config file (node_config_load): /etc/lazyroot/node.conf, or the
 *      file --config or $LAZYROOT_CONFIG names;
 *   3. the environment (node_config_env): the LAZYROOT_* variables, and the
 *      AWS_*, TMPDIR and TLS variables users already set for other tools;
 *   4. command-line flags (node_config_set with the flag as origin).
 * docs/settings.md is the reference: one row per setting, with its key, flag,
 * variable, default and meaning; a test checks it against the key table here
 * (node_config_key_at) both ways.
 *
 * The file: one `key = value` per line; blank lines and lines whose first
 * non-blank character is '#' are ignored; spaces around key and value are
 * dropped; a key may appear once.  Every error is one line naming where the
 * value came from and what is wrong with it, `FILE:LINE: KEY: …` for the
 * file, `FLAG: …` or `VARIABLE: …` otherwise, and -EINVAL.
 *
 * Values: sizes as parse_size() reads them (4096, 64K, 1.5G, 512MiB);
 * durations as parse_duration() reads them (250ms, 5s, 2m; a bare number is
 * in the setting's own unit, which docs/settings.md gives); switches on/off
 * (also true/false, yes/no, 1/0).
 *
 * Not thread-safe; a struct node_config belongs to one thread at a time.
 */
#ifndef LAZYROOT_NODE_CONFIG_H
#define LAZYROOT_NODE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define NODE_CONFIG_DEFAULT_PATH "/etc/lazyroot/node.conf"
#define NODE_DEFAULT_IMAGES_DIR "/run/lazyroot/images"
#define NODE_DEFAULT_SOCKET "/run/lazyroot/node.sock"
#define NODE_DEFAULT_METRICS "127.0.0.1:9477"
#define NODE_DEFAULT_READAHEAD 4        /* chunks fetched ahead of a sequential reader */
#define NODE_DEFAULT_CPU_LATENCY_HOLD_MS 50
#define NODE_DEFAULT_PROFILE_WINDOW 64
#define NODE_DEFAULT_PROFILE_INFLIGHT 8
/* How long a tag read from a remote store answers for it (docs/settings.md,
 * tag_ttl) */
#define NODE_DEFAULT_TAG_TTL_MS 5000
#define NODE_DEFAULT_TRUST_STATE "/var/lib/lazyroot/trust"
#define NODE_DEFAULT_POOL_DIR "/run/lazyroot/pool"
#define NODE_DEFAULT_RECORD_DIR "/run/lazyroot/launchers"
#define NODE_DEFAULT_SERVICE_DIR "/run/lazyroot/service"
#define NODE_DEFAULT_IDS_DIR "/run/lazyroot/ids"
#define NODE_DEFAULT_SANDBOX_STATE_DIR "/run/lazyroot/sandboxes"
#define NODE_DEFAULT_TMP_DIR "/tmp"
#define NODE_DEFAULT_S3_REGION "us-east-1"
#define NODE_DEFAULT_HTTP_TRANSFERS 32
#define NODE_DEFAULT_HTTP_CONNECT_TIMEOUT_MS 5000
#define NODE_DEFAULT_HTTP_LOW_SPEED_TIME_MS 10000
/* cache_near_us meaning "never fetch a miss's neighbours" */
#define NODE_NEAR_OFF UINT32_MAX
/* cache_decoders meaning "one decoder thread per CPU" */
#define NODE_DECODERS_AUTO (-1)

/* Every field is public and plain; strings are the config's own (malloc'd,
 * freed by node_config_destroy).  NULL strings are unset, as noted. */
struct node_config {
	char *config_path;             /* the file loaded, or NULL: none */

	/* ---- stores ---- */
	char *store_url;               /* store URL, or URL,URL,… mirrors */
	uint64_t fetch_timeout_ms;     /* how long a read retries a failing remote store */
	unsigned http_transfers;       /* HTTP transfers in flight per store handle */
	uint64_t http_connect_timeout_ms;
	uint64_t http_low_speed_time_ms;  /* under 1 KiB/s this long: drop and retry */
	char *tls_ca_file, *tls_ca_dir;   /* NULL: the system's CA store */
	char *s3_endpoint;             /* NULL: the URL's own, else AWS's for the region */
	char *s3_region;
	char *s3_profile;              /* NULL: "default", from an optional file */
	char *s3_credentials_file;     /* NULL: $HOME/.aws/credentials, optional */
	unsigned s3_list_max_keys;     /* keys per ListObjectsV2 page; 0: the server's */
	uint64_t tag_ttl_ms;           /* a remote store's tag is read again after this */
	unsigned lease_ttl;            /* a mount's reader lease, seconds; 0: none */
	/* environment only (AWS_*): never in a file, never printed */
	char *aws_access_key_id, *aws_secret_access_key, *aws_session_token;
	char *home;                    /* $HOME: where the default credentials file is */

	/* ---- trust ---- */
	char *trust_keys;              /* "[STORE=]/FILE.pub …" (node_trust_keys_valid); NULL: none */
	bool require_signed;           /* refuse a tag without a trusted signature */
	char *trust_state;             /* the newest signed version seen of each tag */

	/* ---- the node cache ---- */
	char *cache_dir;
	uint64_t cache_size;           /* bytes of chunk files kept at most (> 0) */
	uint64_t cache_memory;         /* bytes of chunks held in memory when the disk is full */
	uint32_t cache_near_us;        /* store latency from which misses fetch neighbours */
	int cache_decoders;            /* decoder threads; 0: decode on the loop's thread */

	/* ---- mounts ---- */
	char *images_dir;              /* where the node's image mounts live */
	unsigned readahead;            /* chunks fetched ahead of a sequential reader */
	bool passthrough;              /* FUSE passthrough of wholly cached large files */
	bool cpu_latency;              /* hold idle CPUs awake while serving (root only; off) */
	unsigned cpu_latency_hold_ms;  /* ... until this long after the last request */
	bool profile;                  /* follow the image's access profile from the store */
	unsigned profile_window;       /* profile chunks fetched ahead of a reader */
	unsigned profile_inflight;     /* profile fetches in flight at once */

	/* ---- the node service ---- */
	char *socket_path;             /* the control socket */
	char *metrics_addr;            /* HOST:PORT of the Prometheus endpoint; NULL: off */
	char *api_listen;              /* HOST:PORT of the sandbox API over TCP; NULL: off */
	char *api_token_file;          /* its bearer token; NULL: none (TCP refused) */

	/* ---- sandboxes ---- */
	bool pool;                     /* keep network namespaces and cgroups for reuse */
	bool node_start;               /* clients start a node when none answers */
	char *pool_dir;                /* absolute */
	char *record_dir;              /* launcher records; absolute */
	char *service_dir;             /* the sandbox service's state tree; absolute */
	char *sandbox_state_dir;       /* running sandboxes' state (allowlist, stage); absolute */
	char *ids_dir;                 /* the host id allocator's locks; absolute */
	struct node_ids_range {        /* host ids of uid_base = auto; count 0: /etc/subuid's */
		uint32_t start, count;
	} ids_range;

	/* ---- builds ---- */
	char *tmp_dir;                 /* scratch space (docker archives are unpacked there) */
	char *docker_config;           /* registry credentials: DIR/config.json; NULL: ~/.docker */
};

/* The sandbox module's directories and switches (sandbox/sandbox.h) from c:
 * *n's strings are c's, valid while c is. */
struct sandbox_node;
void node_config_sandbox_node(const struct node_config *c, struct sandbox_node *n);

/* Every setting at its default.  Never fails: the defaults are static
 * strings until a setter replaces one (it is then the config's own). */
void node_config_init(struct node_config *c);
void node_config_destroy(struct node_config *c);

/* Apply the config file at path.  must_exist false: a missing file is no
 * error (0, nothing set).  Errors (unreadable file, bad syntax, unknown key,
 * a key twice, a bad value) are logged as one line naming the file, the line
 * and the key, and return -EINVAL (or the -errno of the read); settings from
 * lines before the bad one may have been applied. */
int node_config_load(struct node_config *c, const char *path, bool must_exist);

/* Set one setting by its key (as in the file) from its text form.  origin
 * names the source in messages ("--cache-size", "LAZYROOT_CACHE_NEAR_MS",
 * "node.conf:3: cache_size"); NULL: the key itself.  -EINVAL (logged) for an
 * unknown key or a bad value, c unchanged; -ENOMEM. */
int node_config_set(struct node_config *c, const char *key, const char *value,
                    const char *origin);

/* Apply the environment: each variable of docs/settings.md that is set and
 * not empty, checked as node_config_set checks a value (errors name the
 * variable).  Where two variables feed one setting (AWS_ENDPOINT_URL_S3 and
 * AWS_ENDPOINT_URL, AWS_REGION and AWS_DEFAULT_REGION, CURL_CA_BUNDLE and
 * SSL_CERT_FILE), the first one set wins. */
int node_config_env(struct node_config *c);

/* The usual sequence for a command: init, then the file (config_flag if
 * given, which must exist; else $LAZYROOT_CONFIG, which must exist; else
 * NODE_CONFIG_DEFAULT_PATH if it exists), then the environment.  Flags come
 * after, through node_config_set.  On failure c is destroyed (and may be
 * destroyed again). */
int node_config_setup(struct node_config *c, const char *config_flag);

/* The key table, for docs checks and dumps: the i-th setting's key, the
 * variable(s) that feed it (NULL: none; env2 is read when env is unset), the
 * flag, and a one-line meaning.  env_only settings have no file key: key is
 * then the variable.  NULL past the end. */
struct node_config_key {
	const char *key;
	const char *env, *env2;
	const char *flag;
	const char *help;
	bool env_only;
};
const struct node_config_key *node_config_key_at(size_t i);

/* The value of key in c in its text form (the form node_config_set reads
 * back to the same value): 0, or -ENOENT for an unknown key, -ENAMETOOLONG
 * when out (len bytes) is too small.  Unset strings are "". */
int node_config_get(const struct node_config *c, const char *key, char *out, size_t len);

/* Write c as a config file: a comment with each setting's meaning, then its
 * line, commented out (`# key = value`) when commented is set: the installed
 * default node.conf.  Environment-only settings are left out. */
void node_config_dump(const struct node_config *c, FILE *f, bool commented);

/* Apply a command-line flag: the setting whose flag (docs/settings.md) is
 * flag gets value; a switch's --no-… flag takes value NULL (off).  Checked and
 * logged as node_config_set, with the flag as origin; -EINVAL also for a flag
 * no setting has. */
int node_config_set_flag(struct node_config *c, const char *flag, const char *value);

/* Whether v is a trust_keys value: blank-separated entries, each /FILE or
 * STORE=/FILE (an absolute path; STORE a store URL as the store setting
 * spells it).  false with why in msg. */
bool node_trust_keys_valid(const char *v, char *msg, size_t msglen);

/* Options for store_open_with() and params for cache_open() (dir, sizes,
 * near latency, decoders) from c.  Strings are borrowed: valid while c is,
 * and c must outlive the stores opened with o. */
struct store_options;
struct cache_params;
void node_config_store_options(const struct node_config *c, struct store_options *o);
void node_config_cache_params(const struct node_config *c, struct cache_params *p);

struct buf;
struct json_t;
/* c's settings as a JSON object {"key":"text",…} (a new reference, NULL when
 * memory runs out or a value is not UTF-8): every setting but the
 * environment-only ones (secrets), in the text form node_config_set() reads
 * back. */
struct json_t *node_config_json(const struct node_config *c);
/* A copy of src into dst (initialised here): its settings and its
 * environment-only ones (the credentials it carries). */
int node_config_copy(const struct node_config *src, struct node_config *dst);
/* Apply settings (a JSON object as node_config_json() writes it) to c.
 * Logs and returns -EINVAL for a bad one. */
int node_config_apply_json(struct node_config *c, const struct json_t *settings);

/* The environment-only settings (S3 credentials, HOME) travel from a command
 * to the node over its root-only socket, so that a node started by another
 * command reads a store with the credentials of the command that names it,
 * and to the holder's records, so that a later worker does too.  Never
 * printed.  As a JSON object (a new reference, NULL when memory runs out or
 * a value is not UTF-8); applied from one; copied. */
struct json_t *node_config_secrets_json(const struct node_config *c);
int node_config_apply_secrets(struct node_config *c, const struct json_t *j);
int node_config_copy_secrets(struct node_config *dst, const struct node_config *src);

#endif
