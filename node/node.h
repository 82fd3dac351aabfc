/*
 * node.h — the node service: one `lazyroot node` per node serves every image
 * mount from one process, and its mounts outlive that process.
 *
 * Process shape.  The process started (by systemd, or by a client that found
 * no node) is the HOLDER: small, it owns the control socket's listening
 * descriptor, every mount's /dev/fuse descriptor and state file, and a short
 * record per mount; it starts the WORKER (this binary again, or a new one on
 * upgrade) and starts it again when it dies.  The worker serves every mount
 * from one loop with one cache, adopts the connections the holder hands it,
 * and answers the control socket.  A worker that finds the holder gone ends
 * every mount (readers get an error, never a hang) and exits.
 *
 * Control protocol (node/client.c, node/worker.c): a client connects to the
 * socket, writes one JSON object on one line (at most NODE_REQUEST_MAX
 * bytes), and reads one JSON object back until EOF:
 *   {"verb":"mount","ref":R,"store":URL,"cache":DIR,"mountpoint":DIR?,
 *    "images":DIR?,"s3_endpoint":URL?,"options":{…}}
 *       -> {"ok":true,"mountpoint":M,"index":HEX,"config":JSON-as-string}
 *   {"verb":"umount","mountpoint":M}            -> {"ok":true}
 *   {"verb":"status"}                           -> {"ok":true,"pid":…,…}
 *   {"verb":"stats","cache":DIR?,"format":"table|json|prometheus"}
 *   {"verb":"prefetch", …}                      (see tools/prefetch.c)
 *   {"verb":"stop"}, {"verb":"upgrade","binary":PATH}
 * Failure: {"ok":false,"error":"one line","errno":N} (N: the errno of the
 * failure, e.g. 2 for an image the store does not have, 13 for one the trust
 * policy refused).  Either may carry "log": the
 * lines the node logged while it handled the request, for the client to show.
 * Only root (or the node's own user) may speak to it: SO_PEERCRED, and the
 * socket is mode 0600.
 */
#ifndef LAZYROOT_NODE_H
#define LAZYROOT_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "node/config.h"

struct buf;
struct json_t;

#define NODE_REQUEST_MAX (64u << 10)    /* bytes of one request line */
#define NODE_REPLY_MAX (16u << 20)      /* bytes of one reply a client accepts */

/* `lazyroot node`: run the holder in the foreground until `node stop` (or
 * SIGTERM).  args/nargs: the command line after "node", handed to every
 * worker it starts (with --log FILE among them: our stderr is the pipe of
 * the client that started us, which gets one NUL byte once the first worker
 * serves; stderr then goes to FILE).  Returns the exit status. */
int node_holder_main(const struct node_config *cfg, char **args, int nargs);
/* The worker's entry (`lazyroot node --worker`): chan is its end of the
 * holder's socketpair, listen_fd the control socket, log_path where its
 * stderr goes once it serves (NULL: where it is).  Returns the exit status. */
int node_worker_main(const struct node_config *cfg, int chan, int listen_fd,
                     const char *log_path);

/* The descriptors the worker finds at exec (`lazyroot node --worker`): the
 * holder's channel and the control socket. */
#define NODE_WORKER_CHAN_FD 3
#define NODE_WORKER_LISTEN_FD 4

/* ---- an image's access profile in the store (index.c) ---- */

struct image_profile;
struct store;
/* The store key of the profile of the index named hex: "profiles/<hex>". */
void node_profile_key(const char *hex, char out[64]);
/* The profile of index hex from store s: 0 with *ret set, or 0 with *ret
 * NULL when the store has none (silently) or it is unusable (one warning
 * line: corrupt, for another index, unreadable). */
int node_profile_fetch(struct store *s, const char *hex, struct image_profile **ret);

/* ---- an image's config as policy fields (image-config.c) ---- */

/* One policy field ("env", "workdir" or "user") and its value (malloc'd). */
struct node_image_field {
	const char *key;
	char *value;
};
struct node_image_err {
	char msg[256];
};
/* The image config JSON of an image (len bytes; OCI: config.Env,
 * config.WorkingDir, config.User) as policy fields, in the order a sandbox
 * applies them before its own settings, which override them: *ret (free
 * with node_image_fields_free) and *ret_n.  root is the image's mount, for
 * user and group names (its /etc/passwd and /etc/group, resolved inside
 * it); ref names the image in errors.  An empty config gives none.
 * -EINVAL, -ENOENT (a user or group the image does not have), -EBADMSG,
 * -ENOMEM, with one line in err; nothing is logged. */
int node_image_config(const char *root, const char *ref, const void *json, size_t len,
                      struct node_image_field **ret, size_t *ret_n, struct node_image_err *err);
void node_image_fields_free(struct node_image_field *v, size_t n);

/* ---- clients ---- */

/* Send one request (a JSON object, no newline) to the node at socket and read
 * its reply into *ret (parsed).  -ECONNREFUSED / -ENOENT when no node
 * answers there; -EBADMSG for a reply that is not JSON.  Logs nothing. */
int node_call(const char *socket, const char *request, struct json_t **ret);
/* node_call() that returns the reply's text (appended to b), unparsed. */
int node_call_text(const char *socket, const char *request, struct buf *b);
/* node_call(), but when no node answers start one in the background with
 * start_args (a NULL-terminated list of `lazyroot node` options; the socket
 * is added; NULL: start none, and fail saying so) and try again: at most one node is started however many clients
 * race (a lock beside the socket), and the wait for it is bounded.  Logs its
 * errors.  A reply with "ok":false is logged (its "log" lines, then its
 * error) and returns -EIO; its "log" lines are shown in either case. */
int node_request(const char *socket, char *const *start_args, const char *request,
                 struct json_t **ret);

/* node_request() for a request the node answers with progress lines first
 * (prefetch with "progress":true): cb gets each line's "progress" object as
 * it comes (cb NULL: they are ignored). */
typedef void (*node_progress_fn)(void *ud, const struct json_t *progress);
int node_request_progress(const char *socket, char *const *start_args, const char *request,
                          node_progress_fn cb, void *ud, struct json_t **ret);

#endif
