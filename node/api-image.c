/*
 * api-image.c — the API's create from an image: the image mounted as
 * `lazyroot run IMAGE` mounts it, then a sandbox of the sandbox service on
 * that mount.
 *
 * The API's threads do not touch the worker's mounts, which belong to its
 * loop thread: the mount is asked of the worker's own control socket, so
 * that it goes through the one mount path every `lazyroot mount` and `run
 * IMAGE` reaches (node/requests.c, node/mounts.c): one mount per (store,
 * index) under the images dir, the trust policy of node/trust.c, the
 * holder's record, and the node's settings with the request's store over
 * them.  The mount is the node's, not the sandbox's: it stays when the
 * sandbox ends, for the next sandbox of the image, until `lazyroot umount`,
 * which the node refuses while a running sandbox of the service has its
 * root there (node/requests.c).  A crash or upgrade of the worker keeps
 * both: the holder keeps the mount, the keeper the sandbox.
 *
 * The image's config (env, working directory, user) comes first among the
 * sandbox's policy fields, and the request's override it, as for `run
 * IMAGE`.  sandbox.json records the image as asked and its index, beside
 * the rootfs (the mount).
 */
#include "lib/json.h"
#include "lib/lib.h"
#include "node/api-internal.h"
#include "node/httpd.h"
#include "node/node.h"
#include "sandbox/service.h"

/* The status for a mount that failed with r: the image or its tag is not in
 * the store (404), its signature refused by the trust policy (403), the
 * request wrong (400), the store unreachable or failing (502). */
static unsigned mount_status(int r)
{
	switch (r) {
	case -ENOENT: return 404;
	case -EACCES:
	case -EPERM: return 403;
	case -EINVAL: return 400;
	case -EIO:
	case -ECONNREFUSED:
	case -ECONNRESET:
	case -ETIMEDOUT:
	case -EHOSTUNREACH:
	case -ENETUNREACH:
	case -EPROTO:
	case -EBADMSG: return 502;
	default: return 500;
	}
}

/* The node's mount of image (from store, NULL: the node's): 0 and *ret the
 * control socket's reply ({"mountpoint", "index", "config"}); 1 when an
 * error was answered in rep; -ENOMEM. */
static int mount_image(const struct node_config *cfg, const char *image, const char *store,
                       json_t **ret, struct node_http_reply *rep)
{
	_cleanup_(buf_freep) struct buf q = BUF_INIT;
	json_t *reply = NULL;
	const char *why;
	bool ok = false;
	int64_t e = 0;
	int r;

	r = json_pack_buf(&q, "{s:s, s:s, s:s*}", "verb", "mount", "ref", image, "store", store);
	if (r < 0)
		return r;
	r = node_call(cfg->socket_path, (const char *)q.data, &reply);
	if (r < 0)
		return node_http_error(rep, 503, "create: image '%.200s': the node's control socket "
		                       "did not answer: %s", image, strerror(-r)), 1;
	(void)json_bool(json_object_get(reply, "ok"), &ok);
	if (!ok || !json_get_cstr(reply, "mountpoint") || !json_get_cstr(reply, "index")) {
		why = json_get_cstr(reply, "error");
		if (json_int(json_object_get(reply, "errno"), &e) < 0 || e <= 0 || e > 4095)
			e = EIO;
		(void)node_http_error(rep, ok ? 500 : mount_status(-(int)e), "create: %s",
		                      why ? why : "the node's answer has no mountpoint");
		json_decref(reply);
		return 1;
	}
	*ret = reply;
	return 0;
}

/* Create a sandbox on the node's mount of c->image: 0 and *ret_id (malloc'd)
 * its id, or 0 and *ret_id NULL with the error answered in rep; -ENOMEM. */
int api_create_image(const struct sandbox_node *node, const struct node_config *cfg,
                     const struct api_create_req *c, char **ret_id, struct node_http_reply *rep)
{
	struct sandbox_service_err err = { "" };
	struct node_image_err ierr;
	struct node_image_field *f = NULL;
	struct sandbox_service_request sr;
	_cleanup_free_ struct sandbox_service_kv *set = NULL;
	const char *mnt, *icfg;
	json_t *m = NULL;
	size_t n = 0;
	int r = mount_image(cfg, c->image, c->store, &m, rep);

	*ret_id = NULL;
	if (r != 0)
		return r < 0 ? r : 0;
	mnt = json_get_cstr(m, "mountpoint");
	icfg = json_get_cstr(m, "config");
	r = node_image_config(mnt, c->image, icfg ? icfg : "", icfg ? strlen(icfg) : 0, &f, &n,
	                      &ierr);
	if (r < 0) {
		r = node_http_error(rep, r == -ENOMEM ? 500 : 400, "create: %s", ierr.msg);
		goto out;
	}
	/* the image's fields first: the request's override them */
	set = calloc(n + c->n_set + 1, sizeof(*set));
	if (!set) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		set[i] = (struct sandbox_service_kv){ f[i].key, f[i].value };
	for (size_t i = 0; i < c->n_set; i++)
		set[n + i] = (struct sandbox_service_kv){ c->set[i].key, c->set[i].value };
	sr = (struct sandbox_service_request){
		.rootfs = mnt, .image = c->image, .image_index = json_get_cstr(m, "index"),
		.name = c->name, .set = set, .n_set = n + c->n_set,
		.labels = (const struct sandbox_service_kv *)c->labels, .n_labels = c->n_labels,
		.ttl = c->ttl, .idle_timeout = c->idle_timeout,
	};
	r = sandbox_service_create(node, &sr, ret_id, &err);
	if (r < 0)
		r = api_service_error(rep, r, &err);
out:
	node_image_fields_free(f, n);
	json_decref(m);
	return r;
}
