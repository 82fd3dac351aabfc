/* opts.c — the node settings this module reads (see opts.h). */
#include "cache/cache.h"
#include "lib/lib.h"
#include "node/opts.h"
#include "store/store.h"

static int set_str(char **dst, const char *v)
{
	char *s = strdup(v);

	if (!s)
		return -ENOMEM;
	free(*dst);
	*dst = s;
	return 0;
}

void node_config_init(struct node_config *c)
{
	*c = (struct node_config){
		.fetch_timeout_ms = STORE_DEFAULT_FETCH_TIMEOUT_MS,
		.cache_size = CACHE_DEFAULT_LIMIT,
		.cache_memory = CACHE_DEFAULT_MEMORY,
		.readahead = NODE_DEFAULT_READAHEAD,
		.passthrough = true,
		.cpu_latency = true,
	};
	(void)set_str(&c->store_url, STORE_DEFAULT_URL);
	(void)set_str(&c->cache_dir, CACHE_DEFAULT_DIR);
	(void)set_str(&c->images_dir, NODE_DEFAULT_IMAGES_DIR);
	(void)set_str(&c->socket_path, NODE_DEFAULT_SOCKET);
	(void)set_str(&c->metrics_addr, NODE_DEFAULT_METRICS);
}

void node_config_destroy(struct node_config *c)
{
	free(c->config_path);
	free(c->store_url);
	free(c->cache_dir);
	free(c->images_dir);
	free(c->socket_path);
	free(c->metrics_addr);
	*c = (struct node_config){ 0 };
}

static int bool_value(const char *v, bool *ret)
{
	if (!strcmp(v, "on") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "1"))
		*ret = true;
	else if (!strcmp(v, "off") || !strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "0"))
		*ret = false;
	else
		return -EINVAL;
	return 0;
}

int node_config_set(struct node_config *c, const char *key, const char *value,
                    const char *origin)
{
	uint64_t v;
	int r = 0;

	if (!origin)
		origin = key;
	if (!strcmp(key, "store_url"))
		r = set_str(&c->store_url, value);
	else if (!strcmp(key, "cache_dir"))
		r = set_str(&c->cache_dir, value);
	else if (!strcmp(key, "images_dir"))
		r = set_str(&c->images_dir, value);
	else if (!strcmp(key, "socket_path"))
		r = set_str(&c->socket_path, value);
	else if (!strcmp(key, "metrics_addr")) {
		if (!strcmp(value, "off")) {
			free(c->metrics_addr);
			c->metrics_addr = NULL;
		} else {
			r = set_str(&c->metrics_addr, value);
		}
	} else if (!strcmp(key, "cache_size")) {
		if (parse_size(value, &v) < 0 || v == 0)
			return log_error(-EINVAL, "%s '%s': not a size", origin, value);
		c->cache_size = v;
	} else if (!strcmp(key, "cache_memory")) {
		if (parse_size(value, &v) < 0)
			return log_error(-EINVAL, "%s '%s': not a size", origin, value);
		c->cache_memory = v;
	} else if (!strcmp(key, "readahead")) {
		if (parse_uint(value, 1024, &v) < 0)
			return log_error(-EINVAL, "%s '%s': want 0 to 1024 chunks", origin, value);
		c->readahead = (unsigned)v;
	} else if (!strcmp(key, "fetch_timeout")) {
		if (parse_uint(value, 86400, &v) < 0)
			return log_error(-EINVAL, "%s '%s': want 0 to 86400 seconds", origin, value);
		c->fetch_timeout_ms = v * 1000;
	} else if (!strcmp(key, "passthrough")) {
		if (bool_value(value, &c->passthrough) < 0)
			return log_error(-EINVAL, "%s '%s': want on or off", origin, value);
	} else if (!strcmp(key, "cpu_latency")) {
		if (bool_value(value, &c->cpu_latency) < 0)
			return log_error(-EINVAL, "%s '%s': want on or off", origin, value);
	} else {
		return log_error(-EINVAL, "%s: unknown setting", origin);
	}
	return r;
}

int node_config_setup(struct node_config *c, const char *config_flag)
{
	static const struct { const char *env, *key; } vars[] = {
		{ "LAZYROOT_STORE", "store_url" },
		{ "LAZYROOT_CACHE", "cache_dir" },
		{ "LAZYROOT_IMAGES", "images_dir" },
		{ "LAZYROOT_SOCKET", "socket_path" },
		{ "LAZYROOT_PASSTHROUGH", "passthrough" },
		{ "LAZYROOT_CPU_LATENCY", "cpu_latency" },
		{ "LAZYROOT_METRICS", "metrics_addr" },
	};
	int r;

	node_config_init(c);
	if (config_flag) {
		_cleanup_(buf_freep) struct buf b = BUF_INIT;
		char *save = NULL;
		unsigned n = 0;

		r = read_file(config_flag, 1 << 20, &b);
		if (r == 0)
			r = buf_append_zero(&b, 1);
		if (r < 0)
			return log_errno(r, "config '%s'", config_flag);
		for (char *line = strtok_r((char *)b.data, "\n", &save); line;
		     line = strtok_r(NULL, "\n", &save)) {
			char *eq, *k, *v, origin[512];

			n++;
			k = line + strspn(line, " \t");
			if (!*k || *k == '#')
				continue;
			eq = strchr(k, '=');
			if (!eq)
				return log_error(-EINVAL, "%s:%u: want key = value", config_flag, n);
			*eq = 0;
			v = eq + 1 + strspn(eq + 1, " \t");
			for (char *e = eq - 1; e >= k && (*e == ' ' || *e == '\t'); e--)
				*e = 0;
			for (char *e = v + strlen(v) - 1; e >= v && (*e == ' ' || *e == '\t'); e--)
				*e = 0;
			snprintf(origin, sizeof(origin), "%s:%u: %s", config_flag, n, k);
			r = node_config_set(c, k, v, origin);
			if (r < 0)
				return r;
		}
		r = set_str(&c->config_path, config_flag);
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < ARRAY_SIZE(vars); i++) {
		const char *v = getenv(vars[i].env);

		if (v && *v) {
			r = node_config_set(c, vars[i].key, v, vars[i].env);
			if (r < 0)
				return r;
		}
	}
	return 0;
}
