/* tools.h — the `lazyroot` subcommands and the option helpers they share. */
#ifndef LAZYROOT_TOOLS_H
#define LAZYROOT_TOOLS_H

#include <stddef.h>
#include <stdio.h>

int cmd_build(int argc, char **argv);
int cmd_image(int argc, char **argv);
int cmd_mount(int argc, char **argv);
int cmd_umount(int argc, char **argv);
int cmd_cache(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_policy(int argc, char **argv);

/* The store URL: the --store value if given, else $LAZYROOT_STORE, else the
 * embedded default. */
const char *tools_store_url(const char *opt);

/* The cache directory: the --cache value if given, else $LAZYROOT_CACHE, else
 * the default. */
const char *tools_cache_dir(const char *opt);

int cmd_cache_prefetch(int argc, char **argv);

/* A mapped index file and the reader over it. */
struct image;
struct store;
struct index_map {
	void *data;
	size_t len;
	struct image *img;
	int keep_fd;          /* > 0: fetched bytes in an unnamed file, not yet kept */
	char *keep_path;      /* where index_map_keep() links them */
};

/* The index named hex: from CACHE_DIR/indexes when an earlier mount kept it,
 * else fetched from the store (checked against its name), mapped from an
 * unnamed file in CACHE_DIR/indexes, and kept there by index_map_keep().
 * Logs its errors.  m must be zeroed. */
int load_index(struct store *s, const char *cache_dir, const char *hex, struct index_map *m);
/* Make a fetched index durable and give it its name in the cache, so that the
 * next mount maps it without a fetch or a hash.  Blocks for an fsync of the
 * whole index (~100 MB for a million files): a daemon calls it off its loop
 * thread once it serves.  Nothing to do (0) when the index came from the
 * cache.  Logs its errors. */
int index_map_keep(struct index_map *m);
void index_map_free(struct index_map *m);

/* Print s (len bytes) as a JSON string literal. */
void tools_json_string(FILE *f, const char *s, size_t len);

#endif
