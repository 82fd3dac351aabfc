/*
 * images.c — the node's shared image mounts, for `lazyroot run IMAGE`, and the
 * image config (env, working directory, user) that a sandbox starts with.
 *
 * One mount per (store, image) per node, IMAGES/<index name> (IMAGES is
 * /run/lazyroot/images unless --images or $LAZYROOT_IMAGES says otherwise),
 * made by the node service on the first run that needs it and left for every
 * later run; the same index from another store gets IMAGES/<index
 * name>-<store hash>.  `lazyroot umount IMAGES/<index name>` ends it
 * (sandboxes still running keep it served until they end, unless fusectl is
 * mounted: then their reads fail, lazyroot-umount(1)).  Naming the mount
 * by the index, not the tag, means a tag moved to a new image gets a new
 * mount while sandboxes of the old one go on.  The node serialises runs that
 * race for one image: it answers one request at a time.
 *
 * The mount shows owners exactly as built; each sandbox sees it through its
 * own idmapped mount (sandbox/launch.c; fs/session.c says how FUSE allows that).
 */
#include <limits.h>

#include "image/image.h"
#include "lib/json.h"
#include "lib/lib.h"
#include "node/node.h"
#include "sandbox/sandbox.h"
#include "store/store.h"
#include "tools/tools.h"

int images_mount(const struct node_config *cfg, const char *ref, char **ret_dir,
                 char **ret_config)
{
	_cleanup_(buf_freep) struct buf req = BUF_INIT;
	json_t *reply = NULL;
	const char *dir, *config;
	int r;

	json_t *q = json_pack("{s:s, s:s}", "verb", "mount", "ref", ref);

	r = q ? tools_node_settings(q, cfg) : -EINVAL;
	r = r ?: tools_node_request_text(json_incref(q), &req);
	json_decref(q);
	if (r < 0)
		return log_errno(r, "image '%s'", ref);
	r = tools_node_request(cfg, (char *)req.data, &reply);
	if (r < 0)
		return r;
	dir = json_get_cstr(reply, "mountpoint");
	config = json_get_cstr(reply, "config");
	if (!dir || !config) {
		json_decref(reply);
		return log_error(-EBADMSG, "image '%s': the node's answer has no mountpoint", ref);
	}
	*ret_dir = strdup(dir);
	*ret_config = strdup(config);
	json_decref(reply);
	if (!*ret_dir || !*ret_config) {
		free(*ret_dir);
		free(*ret_config);
		return -ENOMEM;
	}
	return 0;
}

/* ---- the image config (node/image-config.c) -------------------------------- */

int images_apply_config(struct sandbox *sb, const char *root, const char *ref, const void *json,
                        size_t len)
{
	struct node_image_err err;
	struct node_image_field *f = NULL;
	size_t n = 0;
	int r = node_image_config(root, ref, json, len, &f, &n, &err);

	if (r < 0)
		return log_error(r, "%s", err.msg);
	for (size_t i = 0; r == 0 && i < n; i++)
		r = sandbox_set(sb, f[i].key, f[i].value);
	node_image_fields_free(f, n);
	return r;
}
