/*
 * stores.c — for the commands that open a store themselves (build, image,
 * store, profile, mount's index, cache prefetch): the store the settings
 * name, and a `dir:` store's pack of an image.  Apart from common.c so that
 * `lazyroot run`'s static front (main.c) links no store.
 */
#include "lib/lib.h"
#include "image/image.h"
#include "node/config.h"
#include "store/store.h"
#include "tools/tools.h"

int tools_store_open(const struct node_config *c, struct store_options *o, struct store **ret)
{
	node_config_store_options(c, o);
	return store_open_with(c->store_url, o, ret);
}

int tools_pack_offsets(struct store *s, const struct image *img, const char *hex,
                       uint64_t **ret)
{
	char key[64];
	int64_t size;
	struct image_info info;
	uint64_t *v;
	int r;

	*ret = NULL;
	snprintf(key, sizeof(key), "packs/%s", hex);
	size = store_local_size(s, key);
	if (size == -EOPNOTSUPP || size == -ENOENT)
		return 0;
	if (size < 0) {
		log_errno((int)size, "store '%s': %s unusable, reading chunk objects", store_url(s),
		          key);
		return 0;
	}
	r = image_pack_offsets(img, &v);
	if (r < 0)
		return r;
	image_get_info(img, &info);
	if ((uint64_t)size != v[info.chunks]) {
		log_msg(LOG_WARN, "store '%s': %s is %lld bytes, not the %llu its index says; "
		        "reading chunk objects", store_url(s), key, (long long)size,
		        (unsigned long long)v[info.chunks]);
		free(v);
		return 0;
	}
	*ret = v;
	return 0;
}
