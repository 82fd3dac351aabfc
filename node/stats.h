/*
 * stats.h — the node's counters (node/stats.c): the cache's shared counters
 * (cache/cache.h, struct cache_stats) with a list of per-image counters, as
 * JSON (the `stats` request's answer, `lazyroot cache stats --json`) and as
 * Prometheus text (/metrics, `cache stats --prometheus`).
 */
#ifndef LAZYROOT_NODE_STATS_H
#define LAZYROOT_NODE_STATS_H

#include <stdint.h>
#include <stdio.h>

struct buf;
struct cache_stats;
struct json_t;

/* One mounted image's counters. */
struct node_stats_image {
	char index[33];
	char *mountpoint;            /* owned by the list (node_stats_images_free) */
	int pid;                     /* the process serving it */
	uint64_t image_bytes;        /* sum of the image's chunk sizes */
	uint64_t bytes_read;         /* distinct chunk bytes its readers read */
	uint64_t chunks_read;        /* distinct chunks its readers read */
	uint64_t bytes_served;       /* bytes handed to its readers */
};

/* The images of the cache's counter slots whose server is alive (at most
 * CACHE_STATS_IMAGES: the file's slots).  *ret (n of them) is freed with
 * node_stats_images_free.  0 or -ENOMEM. */
int node_stats_images_from_slots(const struct cache_stats *st, struct node_stats_image **ret,
                                 size_t *ret_n);
void node_stats_images_free(struct node_stats_image *v, size_t n);

/* st and the images as one JSON object (a new reference), or NULL when
 * memory runs out or a mountpoint is not UTF-8 (logged). */
struct json_t *node_stats_json(const struct cache_stats *st, const struct node_stats_image *im,
                               size_t n);
/* The reverse: st (zeroed first) and the images (*ret, freed with
 * node_stats_images_free) from the object node_stats_json wrote.  -EBADMSG
 * when j is not such an object. */
int node_stats_parse(const struct json_t *j, struct cache_stats *st, struct node_stats_image **ret,
                     size_t *ret_n);

/* st as Prometheus text (lazyroot_cache_*), with a series per image. */
void node_stats_prometheus(FILE *f, const struct cache_stats *st,
                           const struct node_stats_image *im, size_t n);

#endif
