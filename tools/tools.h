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
};

/* The index named hex: from CACHE_DIR/indexes when an earlier mount kept it,
 * else fetched from the store (checked against its name) and kept there.
 * Logs its errors. */
int load_index(struct store *s, const char *cache_dir, const char *hex, struct index_map *m);
void index_map_free(struct index_map *m);

/* Print s (len bytes) as a JSON string literal. */
void tools_json_string(FILE *f, const char *s, size_t len);

#endif
