/*
 * prefetch.h — warming the node's cache with an image (node/prefetch.c), on
 * the worker's loop, for `lazyroot cache prefetch`.
 */
#ifndef LAZYROOT_NODE_PREFETCH_H
#define LAZYROOT_NODE_PREFETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cache;
struct image;
struct image_profile;
struct store;
struct node_prefetch;

struct node_prefetch_params {
	const struct image *img;          /* borrowed: must outlive the prefetch */
	const char *hex;                  /* its index name */
	const char *ref;                  /* how the client named it, for messages */
	struct cache *cache;
	struct store *store;
	const uint64_t *pack_offsets;     /* borrowed, or NULL: no pack */
	const struct image_profile *prof; /* read during the call only, or NULL */
	const char *const *paths;         /* paths inside the image; none: all of it */
	size_t npaths;
	bool decode;                      /* decode and write now instead of staging */
	bool profiled;                    /* the profile's chunks alone */
};

/* Start fetching; the fetches run as the loop runs.  Logs its errors (a path
 * not in the image). */
int node_prefetch_start(const struct node_prefetch_params *p, struct node_prefetch **ret);
/* Start no more fetches (the worker is ending): those in flight end as the
 * loop runs; the prefetch never finishes. */
void node_prefetch_stop(struct node_prefetch *p);
/* Every chunk fetched, or failed. */
bool node_prefetch_finished(const struct node_prefetch *p);

struct node_prefetch_result {
	uint64_t chunks, bytes, failed;
	uint64_t done;                    /* chunks fetched or failed so far (of chunks) */
	uint64_t total_bytes;             /* the bytes of all chunks (bytes: those fetched) */
	uint64_t unkept;                  /* chunks fetched that the disk had no room for */
	int first_error;
	double seconds;
};
/* How it went (so far, before it has finished). */
void node_prefetch_result(const struct node_prefetch *p, struct node_prefetch_result *ret);
/* Free a finished prefetch. */
void node_prefetch_free(struct node_prefetch *p);

#endif
