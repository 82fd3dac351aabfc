/*
 * stores.c — for the commands that open a store themselves (build, image,
 * store, profile, mount's index, cache prefetch): the store the settings
 * name.  Apart from common.c so that `lazyroot run`'s static front
 * (main.c) links no store.
 */
#include "lib/lib.h"
#include "node/config.h"
#include "store/store.h"
#include "tools/tools.h"

int tools_store_open(const struct node_config *c, struct store_options *o, bool create,
                     struct store **ret)
{
	node_config_store_options(c, o);
	if (create)
		return store_create(c->store_url, o, ret);
	return store_open_with(c->store_url, o, ret);
}
