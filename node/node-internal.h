/* node-internal.h — what the holder and the worker say to each other, and
 * the worker's state shared by its files. */
#ifndef LAZYROOT_NODE_INTERNAL_H
#define LAZYROOT_NODE_INTERNAL_H

#include <stdint.h>

#include "node/node.h"

struct buf;

/*
 * The channel: a SOCK_SEQPACKET socketpair, one message per record, so that
 * a message and the descriptors it carries (SCM_RIGHTS) arrive together or
 * not at all.  A message is a 4-byte type and a JSON object.
 *
 * holder -> worker, at the worker's start: HELLO (fds: the /metrics
 * listening socket, when the holder has one), then RECORD per mount it
 * holds (fds: the /dev/fuse descriptor and the state file), LISTEN
 * ({"api_unix": B, "api_tcp": B}, fds: the API's listening sockets it
 * keeps, in that order, those that are true), then END; later
 * LEAVE (upgrade: hand every mount back and exit).
 * worker -> holder: READY (serving), ADD (a new mount: its record, fds as
 * above; sent before the client hears of the mount), DEL (a mount ended:
 * {"mountpoint":M}, M the record's key), DETACH (a mount is being unmounted:
 * {"mountpoint":M,"key":K}: its record is kept under K, marked
 * "detached":K, until a DEL of K, so that a mount still in use survives
 * the worker and a new mount may take M), UPGRADE ({"binary":PATH}), STOP
 * (the node is ending).
 */
enum node_msg_type {
	NODE_MSG_HELLO = 1,
	NODE_MSG_RECORD,
	NODE_MSG_END,
	NODE_MSG_LEAVE,
	NODE_MSG_READY,
	NODE_MSG_ADD,
	NODE_MSG_DEL,
	NODE_MSG_UPGRADE,
	NODE_MSG_STOP,
	NODE_MSG_DETACH,
	NODE_MSG_LISTEN,
};

#define NODE_MSG_MAX (64u << 10)   /* a record is a few hundred bytes */
#define NODE_MSG_FDS 2

/* Send type + json (len bytes) with nfds descriptors.  Returns 0 or -errno. */
int node_msg_send(int fd, uint32_t type, const char *json, size_t len, const int *fds,
                  int nfds);
/* Receive one message: *ret_type, its JSON into b (NUL-terminated), up to
 * NODE_MSG_FDS descriptors into fds (-1 where absent; close-on-exec).
 * 0 on EOF (the peer is gone), 1 for a message, -errno. */
int node_msg_recv(int fd, uint32_t *ret_type, struct buf *b, int fds[NODE_MSG_FDS]);

/* ---- the worker's state, shared by worker.c (the loop, the socket, the
 * holder's channel), requests.c (the control requests), mounts.c (mounts and
 * their takeover), stores.c (stores and caches), jobs.c (prefetch jobs) and
 * index.c (indexes, packs, profiles).
 * Everything here runs on the worker's one loop thread. */

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>

#include "lib/lib.h"
#include "node/config.h"
#include "store/store.h"

struct cache;
struct fs;
struct image_profile;
struct json_t;
struct loop;
struct node_metrics;
struct node_prefetch;

/* index.c: a mapped index file and the reader over it. */
struct image;
struct node_index {
	void *data;
	size_t len;
	struct image *img;
	int keep_fd;          /* > 0: fetched bytes in an unnamed file, not yet kept */
	int src_fd;           /* > 0: the store's own file, mapped, not yet copied */
	char *keep_path;      /* where node_index_keep() links them */
};

/* The index named hex: from CACHE_DIR/indexes when an earlier mount kept it;
 * else the `dir:` store's own file, mapped in place once it hashed to its
 * name; else fetched from the store (checked against its name) and mapped
 * from an unnamed file in CACHE_DIR/indexes.  The last two are kept there by
 * node_index_keep().
 * Logs its errors.  m must be zeroed.  With s NULL, only a kept copy is
 * mapped: -ENOENT (or why the copy is unusable), not logged, otherwise. */
int node_index_load(struct store *s, const char *cache_dir, const char *hex,
                    struct node_index *m);
/* Make a fetched index durable and give it its name in the cache, so that the
 * next mount maps it without a fetch or a hash; a store's file is copied
 * first (hashed again as it is written).  Blocks for the copy and an fsync of
 * the whole index (~100 MB for a million files): a daemon calls it off its
 * loop thread once it serves.  Nothing to do (0) when the index came from
 * the cache.  Logs its errors. */
int node_index_keep(struct node_index *m);
/* Whether node_index_keep() has anything to do. */
bool node_index_unkept(const struct node_index *m);
/* Unmap and free; m may be zeroed. */
void node_index_free(struct node_index *m);
/* The offsets of the chunks of image img (index hex) in its pack
 * (image_pack_offsets(), to free()) when store s holds a pack of it of the
 * right size; else *ret NULL: no pack, a store that reads no packs, or a pack
 * of the wrong size (one warning line).  Fails only for -ENOMEM. */
int node_pack_offsets(struct store *s, const struct image *img, const char *hex,
                      uint64_t **ret);

/* Tags of a remote store remembered per store (node_store_resolve). */
#define NODE_TAGS_MAX 64

struct nstore {
	char *key;                /* the URL and every store setting, as text */
	struct node_config cfg;   /* the settings it was opened with */
	struct store_options so;  /* borrowed by the store */
	struct store *s;
	struct {
		char *ref;        /* NAME:TAG as asked, or NULL: a free slot */
		char hex[33];     /* the index it named */
		uint64_t at_ns;   /* when it was read */
		/* its signature, read with it when a trust policy asked for it
		 * (node_store_tag_sig): sig_r 0 (sig), -ENOENT (unsigned) */
		bool has_sig;
		int sig_r;
		struct store_tag_sig sig;
	} tags[NODE_TAGS_MAX];
};

struct ncache {
	char *dir;                /* "" once another directory took its path */
	struct cache *c;
	dev_t dev;                /* the directory opened, to tell it from one made anew */
	ino_t ino;
};

/* What a mount was asked for: the node's settings, then the request's. */
struct mopts {
	unsigned readahead;
	uint64_t fetch_timeout_ms;
	unsigned cpu_hold_ms, profile_window, profile_inflight;
	bool suid, dev, allow_other, passthrough, cpu_latency, profile;
	char *record;             /* --record-profile FILE, or NULL */
};

/* trust.c: why a mount of a tag was refused (node status and /metrics
 * count each; node_trust_reasons names them). */
enum node_trust_reason {
	NODE_TRUST_UNSIGNED,        /* no signature, and one is required */
	NODE_TRUST_UNREADABLE,      /* a signature object that does not parse */
	NODE_TRUST_WRONG_TAG,       /* a signature for another tag */
	NODE_TRUST_UNKNOWN_KEY,     /* signed by a key not trusted for the store */
	NODE_TRUST_BAD_SIGNATURE,   /* does not verify */
	NODE_TRUST_EXPIRED,
	NODE_TRUST_ROLLBACK,        /* older than the newest version this node mounted */
	NODE_TRUST_WRONG_INDEX,     /* the index is not the one signed */
	NODE_TRUST_KEY_FILE,        /* a trusted key file that cannot be read */
	NODE_TRUST_NREASONS
};
extern const char *const node_trust_reasons[NODE_TRUST_NREASONS];

/* A mount's tag as its signature vouched for it. */
struct node_trust {
	bool checked;                 /* verified: the index must hash to sig.digest */
	uint64_t seen;                /* the newest version mounted before (0: none) */
	struct store_tag_sig sig;
};

struct mount {
	char *mountpoint, *ref, *store_url, *cache_dir;
	char hex[HASH_HEX_SIZE];
	bool shared;              /* made for `run`: IMAGES/…, found by (store, index) */
	struct node_config cfg;   /* its settings: the node's, then the request's */
	bool have_cfg;
	struct mopts o;
	struct nstore *st;
	struct ncache *nc;
	struct node_index im;
	struct image_profile *prof;
	uint64_t *pack_offsets;
	struct fs *fs;
	int state_fd;             /* the connection's state file (-1: none) */
	dev_t dev;
	/* Unmounted while in use: the holder keeps its record under this key
	 * (not the mountpoint, which a new mount may take), NULL before. */
	char *holder_key;
	struct store_lease *lease;  /* the reader lease holding hex in the store, or NULL */
	pthread_t keeper;         /* keeping the index in the cache (keep_index) */
	bool keeping;
	struct node_trust trust;  /* what the tag's signature vouched for */
	uint8_t index_sha256[32]; /* of im's bytes, once index_sha256_known */
	bool index_sha256_known;
};

struct worker;

/* A prefetch a client waits for: answered once it has finished. */
struct pjob {
	struct node_prefetch *pf;
	struct ncache *nc;        /* the cache it fills */
	struct nstore *st;        /* the store it reads */
	struct node_index im;
	uint64_t *pack_offsets;
	char hex[HASH_HEX_SIZE];
	char *ref, *cache_dir;
	struct node_config cfg;
	bool have_cfg, decode;
	bool progress;            /* the client wants progress lines meanwhile */
	uint64_t progress_ns;     /* now_ns() of the last one */
	struct buf log;           /* what was logged while it started */
};

struct client {
	struct client *next;
	struct worker *w;
	struct pjob *job;         /* a prefetch under way, answered when it ends */
	int fd;
	struct buf in;
	int64_t poll_id;
	bool polling;
	bool done;                /* a whole request (or EOF) read: answer it */
};

struct worker {
	const struct node_config *cfg;
	struct loop *l;
	int chan, listen_fd;
	struct nstore **stores;
	size_t nstores;
	struct ncache **caches;
	size_t ncaches;
	struct mount **mounts;
	size_t nmounts;
	/* writes and renews every mount's reader lease (one thread for all);
	 * NULL when it could not start: mounts then hold none */
	struct store_renewer *renewer;
	/* Unmounted, but still in use: served until their last user lets go
	 * (node_mount_end, or taken over: node_mount_adopt), then freed
	 * (node_mounts_reap_gone). */
	struct mount **gone;
	size_t ngone;
	struct client *clients;   /* reading a request */
	unsigned nclients;
	pid_t holder_pid;
	unsigned takeovers;
	uint64_t holder_uptime_ms, hello_ns;
	int64_t chan_poll, listen_poll;
	bool chan_polling, listen_polling;
	bool stop, leave, holder_gone;
	/* Draining before exit: a poll that fired as it was cancelled is not
	 * acted on nor armed again, or the drain would never end (and a client
	 * of the next worker would be accepted by this one). */
	bool ending;
	int log_saved, log_fd;    /* capturing a request's log lines */
	struct node_metrics *metrics;
	int metrics_fd;           /* the holder's /metrics socket until it serves, or -1 */
	bool metrics_bind;        /* no socket from the holder: bind cfg->metrics_addr */
	/* trust.c: mounts of signed tags accepted, refused by reason, and the
	 * time their checks took (this worker's: a takeover starts at 0) */
	uint64_t trust_verified, trust_refused[NODE_TRUST_NREASONS], trust_check_ns;
	struct node_api *api;
	int api_unix_fd, api_tcp_fd;   /* the holder's API sockets until served, or -1 */
	bool api_bind;            /* a holder that keeps none: bind them here */
};

/* trust.c: check m's tag (m->ref, resolved in m->st) against the trust
 * policy of m's settings: 0 when it may be mounted, m->trust filled;
 * -EACCES (logged: the image, the store, why; counted) when refused; other
 * errors logged.  A run by index name, or settings with no trusted key and
 * no require_signed, pass unchecked. */
int node_trust_tag(struct worker *w, struct mount *m);
/* After node_trust_tag: the index served (served->im: m's own, or that of
 * the mount m shares) must hash to the digest signed; then the version is
 * remembered.  0, or -EACCES (logged, counted). */
int node_trust_index(struct worker *w, struct mount *m, struct mount *served);

/* stores.c: the store opened with rc's store settings (opened on first use),
 * the cache of rc's directory (likewise); NULL, logged, when it cannot be. */
struct nstore *node_store_get(struct worker *w, const struct node_config *rc);
/* ref (NAME[:TAG] or an index name) resolved in st.  A tag of a remote store
 * read less than ttl_ms ago is answered from memory; a dir: store's is read
 * every time.  0 or -errno (logged). */
int node_store_resolve(struct nstore *st, const char *ref, uint64_t ttl_ms, char hex[33]);
/* The signature of tag ref in st (store_tag_sig_get's results), answered from
 * memory as node_store_resolve answers the tag: read with the tag, so that
 * the two agree for as long as the tag is answered from memory. */
int node_store_tag_sig(struct nstore *st, const char *ref, uint64_t ttl_ms,
                       struct store_tag_sig *ret);
void node_store_free(struct nstore *st);
struct ncache *node_cache_get(struct worker *w, const struct node_config *rc);
/* Free the caches whose directory another took the path of, once nothing uses them. */
void node_caches_prune(struct worker *w);
/* Close each local store (no "://" in its URL) that no mount, ended mount or
 * prefetch uses, once every cache is idle (a flight in a cache reads from its
 * store): the worker then holds nothing open on the store's filesystem, which
 * can be unmounted while the node runs.  A remote store stays open, for its
 * connections and the tags it remembers. */
void node_stores_prune(struct worker *w);

/* mounts.c */
void node_mount_pid_file(const struct mount *m, char *out, size_t outlen);
void node_mount_free(struct mount *m);
int node_mount_config(struct worker *w, struct mount *m, const struct json_t *req);
int node_mopts_parse(const struct node_config *c, const struct json_t *j, struct mopts *o);
int node_mount_new(struct worker *w, struct mount *m);
void node_mount_adopt(struct worker *w, const struct buf *b, int fds[NODE_MSG_FDS]);
/* End mount i: false when it is still in use and ends later, on its own. */
bool node_mount_end(struct worker *w, size_t i);
/* 1 when another mount is over m at its mountpoint (what: its type and
 * source), else 0 or -errno (fs_covered). */
int node_mount_covered(const struct mount *m, char *what, size_t n);
/* Free the mounts node_mount_end left in use once their last user let go. */
void node_mounts_reap_gone(struct worker *w);
/* Upgrade: leave the mounts still in use to the next worker, which takes
 * them over from the holder's records (kept under their detached keys). */
void node_mounts_drop_gone(struct worker *w);
/* Stop: end every mount and wait for those still in use. */
void node_mounts_end_all(struct worker *w);
struct mount *node_mount_at(struct worker *w, const char *mountpoint);
struct mount *node_mount_alive(struct worker *w, struct mount *m);
struct mount *node_shared_mount(struct worker *w, const char *hex, const struct node_config *c);
int node_lazyroot_mounted(const char *dir);
struct node_stats_image;
/* The counters of the mounts on cache_dir (NULL: every mount), kept per mount
 * by its fs (a few counters and a bit per chunk of the image): *ret, freed
 * with node_stats_images_free.  0 or -ENOMEM. */
int node_mounts_stats(struct worker *w, const char *cache_dir, struct node_stats_image **ret,
                      size_t *ret_n);

/* requests.c */
int node_request_config(struct worker *w, const struct json_t *req, struct node_config *c);
const char *node_req_str(const struct json_t *req, const char *key, int *r);
void node_handle(struct worker *w, struct client *c);
void node_send_reply(struct client *c, const struct buf *reply);

/* jobs.c: 1 when the job started (c->job; answered when it ends), or -errno. */
int node_job_start(struct worker *w, const struct json_t *req, struct pjob **ret);
int node_job_reply(struct pjob *j, struct buf *reply);
/* A progress line for a client that asked for them ({"progress":{…}}), at
 * most every NODE_JOB_PROGRESS_NS: 1 when one was written into line, 0 when
 * none is due. */
#define NODE_JOB_PROGRESS_NS 200000000ULL
int node_job_progress(struct pjob *j, struct buf *line);
void node_job_free(struct pjob *j);

#endif
