/*
 * api-internal.h — the sandbox API's request bodies, validated (node/api-req.c).
 *
 * Each parser takes a body as it came (any bytes, at most the API's body
 * bound), refuses anything but one JSON object of the route's fields, each
 * of its type and within its bounds, and fills a struct whose strings
 * point into *ret_doc (the parsed document, released by the caller with
 * json_decref; NULL on failure).  Unknown fields are refused, not ignored:
 * a client's typo ("timout") would otherwise run a command with no timeout.
 * Errors: -EINVAL with one line in err (lowercase, no full stop, naming the
 * field), for a 400; -ENOMEM.
 */
#ifndef LAZYROOT_NODE_API_INTERNAL_H
#define LAZYROOT_NODE_API_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/json.h"

#define API_ID_MAX 64              /* sandbox and exec ids: [A-Za-z0-9._-], not '.' first */
#define API_STR_MAX 4096           /* a path, a policy value, an argument */
#define API_LIST_MAX 1024          /* argv, env, policy entries, labels */
#define API_LABEL_MAX 256          /* a label's key or value */
#define API_SECONDS_MAX (30.0 * 24 * 3600)

struct api_kv {
	const char *key, *value;
};

struct api_create_req {
	const char *image, *rootfs;    /* exactly one */
	const char *store;             /* with image: a store spec (--store); NULL: the node's */
	const char *name;              /* NULL: generated */
	struct api_kv *set;            /* the policy's fields, one entry per value, in order */
	size_t n_set;
	struct api_kv *labels;
	size_t n_labels;
	double ttl, idle_timeout;      /* seconds; 0: none */
};

struct api_exec_req {
	const char *exec_id;           /* NULL: generated */
	char **argv;                   /* NULL-terminated, at least one */
	char **env;                    /* "NAME=VALUE", NULL-terminated; NULL: none */
	const char *cwd, *user;        /* NULL: the policy's */
	double timeout;                /* seconds; 0: none */
	uint64_t output_limit;         /* bytes; 0: the policy's */
	bool stdin_pipe;
};

struct api_err {
	char msg[256];
};

/* Whether s is a sandbox or exec id. */
bool api_id_valid(const char *s);

int api_parse_create(const void *body, size_t len, struct api_create_req *ret, json_t **ret_doc,
                     struct api_err *err);
int api_parse_exec(const void *body, size_t len, struct api_exec_req *ret, json_t **ret_doc,
                   struct api_err *err);
/* {"stage": NAME} */
int api_parse_stage(const void *body, size_t len, const char **ret_stage, json_t **ret_doc,
                    struct api_err *err);
/* The arrays of a parsed request (the strings are the document's; env's are
 * made here).  NULL is ignored. */
void api_create_req_free(struct api_create_req *r);
void api_exec_req_free(struct api_exec_req *r);

/*
 * An exec's output as the API's stream (application/vnd.lazyroot.stream):
 * frames of 1 byte stream (1 stdout, 2 stderr, 3 result), 3 zero bytes, a
 * 4-byte big-endian length and that many bytes.  Read from the exec's
 * directory in the state tree (stdout, stderr, result.json; the keeper is
 * their only writer and renames result.json in once both are final), from
 * byte offsets out_off and err_off, so that a client that lost its
 * connection re-attaches where it was.  The result frame (result.json's
 * bytes) comes after every byte of output and ends the stream.
 *
 * Without follow, the stream ends at what is there now (with the result
 * frame only if the exec has ended).  With follow it waits (inotify on the
 * directory) for more until the result, max_s seconds, or *stopping; a
 * frame of stream 1 and length 0 is sent after API_STREAM_KEEPALIVE_S
 * seconds without output, so that a client and the server's idle timeout
 * both see the stream alive.  Waits are of at most 250 ms at a time.
 */
#define API_STREAM_FRAME 65536
#define API_STREAM_KEEPALIVE_S 5

struct api_output;

/* Opens the exec's stdout and stderr (both must exist): 0, or -errno. */
int api_output_open(const char *exec_dir, uint64_t out_off, uint64_t err_off, bool follow,
                    double max_s, const volatile bool *stopping, struct api_output **ret);
/* node_http_stream's read() and free() of it. */
ssize_t api_output_read(void *o, char *buf, size_t max);
void api_output_free(void *o);

/* The sandbox routes (api-sandbox.c), each answering for one route of
 * node/api.c's table. */
struct sandbox_node;
struct node_http_request;
struct node_http_reply;
#define API_ROUTE(name) int name(const struct sandbox_node *node, \
                                 const struct node_http_request *req, \
                                 struct node_http_reply *rep)
API_ROUTE(api_list);
API_ROUTE(api_get);
API_ROUTE(api_destroy);
API_ROUTE(api_exec);
API_ROUTE(api_exec_get);
API_ROUTE(api_output);
API_ROUTE(api_stage);
#undef API_ROUTE
/* Create: a rootfs (api-sandbox.c), or an image the node mounts first
 * (api-image.c, with the worker's settings cfg: its control socket, store
 * and images dir). */
struct node_config;
struct api_create_req;
struct sandbox_service_err;
int api_create(const struct sandbox_node *node, const struct node_config *cfg,
               const struct node_http_request *req, struct node_http_reply *rep);
int api_create_image(const struct sandbox_node *node, const struct node_config *cfg,
                     const struct api_create_req *c, char **ret_id, struct node_http_reply *rep);
/* The answer for the sandbox service's error r: its status and line. */
int api_service_error(struct node_http_reply *rep, int r, const struct sandbox_service_err *err);

#endif
