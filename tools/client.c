/*
 * client.c — what the thin clients of the node (`run`, `mount`, `umount`,
 * `cache`) share: the command's settings made absolute for the node, and a
 * request to it (starting one when none answers).
 */
#include <limits.h>

#include "lib/json.h"
#include "lib/lib.h"
#include "node/node.h"
#include "store/store.h"
#include "tools/tools.h"

char *tools_absolute(const char *path)
{
	_cleanup_free_ char *cwd = NULL;
	char *out;

	if (path[0] == '/')
		return strdup(path);
	cwd = getcwd(NULL, 0);
	if (!cwd || asprintf(&out, "%s/%s", cwd, path) < 0)
		return NULL;
	return out;
}

char *tools_absolute_store_url(const char *url)
{
	_cleanup_free_ char *copy = strdup(url);
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	char *save = NULL;

	if (!copy)
		return NULL;
	for (char *u = strtok_r(copy, ",", &save); u; u = strtok_r(NULL, ",", &save)) {
		bool dir = !strncmp(u, "dir:", 4);
		const char *path = dir ? u + 4 : strstr(u, "://") ? NULL : u;
		_cleanup_free_ char *abs = path && path[0] && path[0] != '/' ? tools_absolute(path)
		                                                          : NULL;

		if (path && path[0] && path[0] != '/' && !abs)
			return NULL;
		if (buf_printf(&b, "%s%s%s", b.len ? "," : "", abs && dir ? "dir:" : "",
		               abs ? abs : u) < 0)
			return NULL;
	}
	if (buf_append_zero(&b, 1) < 0)
		return NULL;
	return (char *)TAKE_PTR(b.data);
}

int tools_node_settings(json_t *req, const struct node_config *cfg)
{
	_cleanup_(node_config_destroy) struct node_config abs = { 0 };
	_cleanup_free_ char *store = NULL, *cache = NULL, *images = NULL;
	int r;

	/* the node runs from "/": the command's relative paths made absolute */
	store = tools_absolute_store_url(cfg->store_url);
	cache = tools_absolute(cfg->cache_dir);
	images = tools_absolute(cfg->images_dir);
	if (!store || !cache || !images)
		return -ENOMEM;
	r = node_config_copy(cfg, &abs);
	if (r < 0)
		return r;
	r = node_config_set(&abs, "store", store, "--store");
	r = r ?: node_config_set(&abs, "cache", cache, "--cache");
	r = r ?: node_config_set(&abs, "images", images, "--images");
	if (r < 0)
		return r;
	return json_object_update_new(req, json_pack("{s:o, s:o}", "settings",
	                              node_config_json(&abs), "secrets",
	                              node_config_secrets_json(&abs))) < 0 ? -EINVAL : 0;
}

int tools_node_request_text(json_t *req, struct buf *ret)
{
	return json_buf_add(ret, req) ?: buf_append_zero(ret, 1);
}

int tools_node_request(const struct node_config *cfg, const char *request, json_t **ret)
{
	return tools_node_request_progress(cfg, request, NULL, NULL, ret);
}

int tools_node_request_progress(const struct node_config *cfg, const char *request,
                                void (*cb)(void *ud, const json_t *progress), void *ud,
                                json_t **ret)
{
	_cleanup_free_ char *log = NULL, *store = tools_absolute_store_url(cfg->store_url);
	_cleanup_free_ char *cache = tools_absolute(cfg->cache_dir);
	_cleanup_free_ char *images = tools_absolute(cfg->images_dir);
	_cleanup_free_ char *socket = tools_absolute(cfg->socket_path);
	_cleanup_free_ char *config = cfg->config_path ? tools_absolute(cfg->config_path) : NULL;
	char *args[20], size[64], memory[64];
	int k = 0;

	if (!store || !cache || !images || !socket || (cfg->config_path && !config))
		return log_errno(-ENOMEM, "node");
	/* the node's own cache is opened with these when it starts */
	if (node_config_get(cfg, "cache_size", size, sizeof(size)) == 0) {
		args[k++] = "--cache-size";
		args[k++] = size;
	}
	if (node_config_get(cfg, "cache_memory", memory, sizeof(memory)) == 0) {
		args[k++] = "--cache-memory";
		args[k++] = memory;
	}
	/* a node started here gets the command's node settings: its config
	 * file, store, cache (and its sizes) and images (the rest are in each
	 * request) */
	if (config) {
		args[k++] = "--config";
		args[k++] = config;
	}
	args[k++] = "--store";
	args[k++] = store;
	args[k++] = "--cache";
	args[k++] = cache;
	args[k++] = "--images";
	args[k++] = images;
	/* its log beside its cache, where the mount daemons wrote theirs (one
	 * access, not mkdir_p's mkdir per component: this runs at every launch) */
	if ((access(cache, F_OK) == 0 || mkdir_p(cache, 0755) == 0) &&
	    asprintf(&log, "%s/daemon.log", cache) >= 0) {
		args[k++] = "--log";
		args[k++] = log;
	} else {
		log = NULL;
	}
	args[k] = NULL;
	/* node_start off: a managed node (systemd's) is the only one, so that
	 * clients never start one its unit would then find in its place */
	return node_request_progress(socket, cfg->node_start ? args : NULL, request, cb, ud, ret);
}
