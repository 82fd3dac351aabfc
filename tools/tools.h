/* tools.h — the `lazyroot` subcommands and the option helpers they share. */
#ifndef LAZYROOT_TOOLS_H
#define LAZYROOT_TOOLS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

int cmd_build(int argc, char **argv);
int cmd_image(int argc, char **argv);
int cmd_mount(int argc, char **argv);
int cmd_umount(int argc, char **argv);
int cmd_cache(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_policy(int argc, char **argv);
int cmd_gc(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_store(int argc, char **argv);
int cmd_node(int argc, char **argv);

/* A git-style command table and its dispatch. */
struct tools_command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
};
/* Run the entry of cmds (n of them) named by argv[1], with argc - 1, argv + 1.
 * No argv[1]: the usage on stderr, 2; --help, -h or help: the usage on stdout,
 * 0; an unknown name: one line naming it, 2.  prog is what the usage calls the
 * program ("lazyroot", "lazyroot cache"), what the word for an entry
 * ("command"); names are listed in a column width wide. */
int tools_dispatch(const char *prog, const char *what, const struct tools_command *cmds,
                   size_t n, int width, int argc, char **argv);

/* The store URL: the --store value if given, else $LAZYROOT_STORE, else the
 * embedded default. */
const char *tools_store_url(const char *opt);

/* The cache directory: the --cache value if given, else $LAZYROOT_CACHE, else
 * the default. */
const char *tools_cache_dir(const char *opt);

int cmd_cache_prefetch(int argc, char **argv);

/* --s3-endpoint URL: the endpoint every s3:// store opened from now on uses
 * (it sets AWS_ENDPOINT_URL_S3, which s3 stores read first, so that build
 * workers and the mount daemon see it too).  Logs and returns -EINVAL for a
 * URL that is not http[s]://. */
int tools_s3_endpoint(const char *url);

/* `lazyroot CMD VERB [OPTION…] ARG…` for commands of verbs on a store (image,
 * profile): --store, --s3-endpoint, --json and --help after VERB.  Returns
 * -1 to go on, with o filled, else the exit status (usage printed: 0 for
 * --help, 2 for no verb or a bad option). */
struct tools_verb {
	const char *verb, *store;
	bool json;
	char **args;                    /* the arguments after the options */
	int nargs;
};
int tools_verb_parse(int argc, char **argv, void (*usage)(FILE *f), struct tools_verb *o);

/* ---- access profiles (profile.c) ------------------------------------------ */

struct image_profile;
struct store;
/* The store key of the profile of the index named hex: "profiles/<hex>". */
void tools_profile_key(const char *hex, char out[64]);
/* The profile of index hex from store s: 0 with *ret set, or 0 with *ret
 * NULL when the store has none (silently) or it is unusable (one warning
 * line: corrupt, for another index, unreadable). */
int tools_profile_fetch(struct store *s, const char *hex, struct image_profile **ret);
/* Write a profile of one trace (chunks[0..n)) of index hex to path,
 * atomically.  Logs its errors. */
int tools_profile_write_trace(const char *path, const char *hex, const uint32_t *chunks,
                              size_t n);

/* A mapped index file and the reader over it. */
struct image;
struct store;
struct index_map {
	void *data;
	size_t len;
	struct image *img;
	int keep_fd;          /* > 0: fetched bytes in an unnamed file, not yet kept */
	int src_fd;           /* > 0: the store's own file, mapped, not yet copied */
	char *keep_path;      /* where index_map_keep() links them */
};

/* The index named hex: from CACHE_DIR/indexes when an earlier mount kept it;
 * else the `dir:` store's own file, mapped in place once it hashed to its
 * name; else fetched from the store (checked against its name) and mapped
 * from an unnamed file in CACHE_DIR/indexes.  The last two are kept there by
 * index_map_keep().
 * Logs its errors.  m must be zeroed.  With s NULL, only a kept copy is
 * mapped: -ENOENT (or why the copy is unusable), not logged, otherwise. */
int load_index(struct store *s, const char *cache_dir, const char *hex, struct index_map *m);
/* Make a fetched index durable and give it its name in the cache, so that the
 * next mount maps it without a fetch or a hash; a store's file is copied
 * first (hashed again as it is written).  Blocks for the copy and an fsync of
 * the whole index (~100 MB for a million files): a daemon calls it off its
 * loop thread once it serves.  Nothing to do (0) when the index came from
 * the cache.  Logs its errors. */
int index_map_keep(struct index_map *m);
/* Whether index_map_keep() has anything to do. */
bool index_map_unkept(const struct index_map *m);
void index_map_free(struct index_map *m);

/* ---- the node's shared image mounts (images.c) ---------------------------- */

#define IMAGES_DEFAULT_DIR "/run/lazyroot/images"

/* Where the node's image mounts live: the --images value if given, else
 * $LAZYROOT_IMAGES, else IMAGES_DEFAULT_DIR. */
const char *tools_images_dir(const char *opt);

struct images_params {
	const char *images_dir;   /* absolute */
	const char *socket;       /* the node's; NULL: the default */
	/* absolute; NULL: the node's own (a node started now gets these) */
	const char *store_url;
	const char *cache_dir;
};

/* Ask the node for the mount of image ref (a tag or an index name) from p's
 * store: the directory where it is mounted (IMAGES/<hex>, or
 * IMAGES/<hex>-<store hash> for the same index from another store), mounted
 * unless already there, once however many callers race, and the image
 * config JSON ("" when none).  Both are the caller's to free.  Logs its
 * errors. */
int images_mount(const struct images_params *p, const char *ref, char **ret_dir,
                 char **ret_config);

/* Apply the image config JSON (OCI: config.Env, config.WorkingDir,
 * config.User) to sb, as policy settings that later ones override.  root is
 * where the image is mounted, for user and group names; ref names the image
 * in errors.  An empty config sets nothing. */
struct sandbox;
int images_apply_config(struct sandbox *sb, const char *root, const char *ref, const void *json,
                        size_t len);

/* The offsets of the chunks of image img (index hex) in its pack
 * (image_pack_offsets(), to free()) when store s holds a pack of it of the
 * right size; else *ret NULL: no pack, a store that reads no packs, or a pack
 * of the wrong size (one warning line).  Fails only for -ENOMEM. */
int tools_pack_offsets(struct store *s, const struct image *img, const char *hex,
                       uint64_t **ret);

/* ---- speaking to the node service (node.c) --------------------------------- */

/* What a client knows of the node it speaks to: its socket (NULL: the
 * default), and the settings a node it starts gets (NULL: the node's own). */
struct tools_node {
	const char *socket;
	const char *store_url, *cache_dir, *images_dir;   /* absolute */
};
struct json;
/* node_request() (node/node.h) through n's socket, starting a node with n's
 * settings when none answers.  Logs its errors. */
int tools_node_request(const struct tools_node *n, const char *request, struct json **ret);
/* path made absolute against the current directory (lexically); NULL: ENOMEM. */
char *tools_absolute(const char *path);
/* The store URL with every local member made absolute; NULL: ENOMEM. */
char *tools_absolute_store_url(const char *url);

/* Print s (len bytes) as a JSON string literal. */
void tools_json_string(FILE *f, const char *s, size_t len);

#endif
