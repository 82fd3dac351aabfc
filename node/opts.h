/*
 * opts.h — the node settings this module reads, until node/config.h (one
 * config file + flags + environment, parsed once) replaces it: the same field
 * names, so the switch is an include.
 */
#ifndef LAZYROOT_NODE_OPTS_H
#define LAZYROOT_NODE_OPTS_H

#include <stdbool.h>
#include <stdint.h>

#define NODE_DEFAULT_IMAGES_DIR "/run/lazyroot/images"
#define NODE_DEFAULT_SOCKET "/run/lazyroot/node.sock"
#define NODE_DEFAULT_METRICS "127.0.0.1:9477"
#define NODE_DEFAULT_READAHEAD 4

struct node_config {
	char *config_path;
	char *store_url;
	uint64_t fetch_timeout_ms;
	char *cache_dir;
	uint64_t cache_size;
	uint64_t cache_memory;
	char *images_dir;
	unsigned readahead;
	bool passthrough;
	bool cpu_latency;
	char *socket_path;
	char *metrics_addr;            /* NULL: off */
};

void node_config_init(struct node_config *c);
void node_config_destroy(struct node_config *c);
/* key as in the file (store_url, cache_dir, …); origin names the source. */
int node_config_set(struct node_config *c, const char *key, const char *value,
                    const char *origin);
int node_config_setup(struct node_config *c, const char *config_flag);

#endif
