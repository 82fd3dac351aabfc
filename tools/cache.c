/*
 * cache.c — `lazyroot cache stats|verify|trim`: watching and managing a
 * node-local cache directory, with or without daemons running on it.
 *
 * The counters are read from the shared stats file without any lock: each is
 * a single aligned 64-bit word, so a reader sees every one whole, though not
 * all from the same instant.  Subcommands live in one table; adding one
 * (prefetch) is a function and a row.
 */
#include <getopt.h>
#include <signal.h>

#include "cache/cache.h"
#include "lib/json.h"
#include "lib/lib.h"
#include "node/node.h"
#include "node/stats.h"
#include "tools/tools.h"

static int map_stats(const char *dir, const struct cache_stats **st)
{
	int r = cache_stats_map(dir, st);

	if (r == -ENOENT)
		return log_error(r, "cache '%s': no stats file (no daemon has used it)", dir);
	if (r == -EPROTO || r == -EBADMSG)
		return log_error(r, "cache '%s': stats file of an unknown version", dir);
	if (r < 0)
		return log_errno(r, "cache '%s': reading stats", dir);
	return 0;
}

/* ---- stats ------------------------------------------------------------- */

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

static uint64_t latency_count(const struct cache_stats *st)
{
	uint64_t n = 0;

	for (int i = 0; i < CACHE_LATENCY_BUCKETS; i++)
		n += st->fetch_latency[i];
	return n;
}

/* The bucket bound under which a fraction q of fetches fall, in µs. */
static uint64_t latency_quantile(const struct cache_stats *st, double q)
{
	uint64_t total = latency_count(st), seen = 0;

	for (int i = 0; i < CACHE_LATENCY_BUCKETS; i++) {
		seen += st->fetch_latency[i];
		if (total && (double)seen >= q * (double)total)
			return 16ULL << i;
	}
	return 16ULL << (CACHE_LATENCY_BUCKETS - 1);
}

static void print_table(const char *dir, const struct cache_stats *st,
                        const struct node_stats_image *im, size_t nim)
{
	char a[32], b[32];
	uint64_t reads = st->hits + st->misses, n = latency_count(st);

	printf("cache %s\n", dir);
	printf("  %-18s %s of %s (%.1f%%)\n", "used", format_size(st->used, a, sizeof(a)),
	       format_size(st->limit, b, sizeof(b)), pct(st->used, st->limit));
	printf("  %-18s %llu (%s, kept compressed until first read); %llu decoded for a reader\n",
	       "staged chunks", (unsigned long long)st->staged,
	       format_size(st->staged_bytes, a, sizeof(a)), (unsigned long long)st->staged_used);
	printf("  %-18s %llu (%.1f%% of reads)\n", "hits", (unsigned long long)st->hits,
	       pct(st->hits, reads));
	printf("  %-18s %llu\n", "misses", (unsigned long long)st->misses);
	printf("  %-18s %s stored, %s raw\n", "fetched",
	       format_size(st->fetched_bytes, a, sizeof(a)),
	       format_size(st->fetched_raw_bytes, b, sizeof(b)));
	printf("  %-18s %s\n", "served", format_size(st->served_bytes, a, sizeof(a)));
	printf("  %-18s %llu\n", "fetches in flight", (unsigned long long)st->inflight);
	printf("  %-18s %llu fetches, mean %llu us, p50 < %llu us, p99 < %llu us\n",
	       "fetch latency", (unsigned long long)n,
	       (unsigned long long)(n ? st->fetch_latency_sum_us / n : 0),
	       (unsigned long long)latency_quantile(st, 0.5),
	       (unsigned long long)latency_quantile(st, 0.99));
	printf("  %-18s %llu\n", "verify failures", (unsigned long long)st->verify_failures);
	printf("  %-18s %llu (chunk files, staged chunks, whole files dropped: disk rot)\n",
	       "corrupt", (unsigned long long)st->corrupt);
	printf("  %-18s %llu\n", "errors", (unsigned long long)st->errors);
	printf("  %-18s %llu (%s)\n", "evictions", (unsigned long long)st->evictions,
	       format_size(st->evicted_bytes, a, sizeof(a)));
	printf("  %-18s %llu\n", "memory served", (unsigned long long)st->memory_served);
	printf("  %-18s %llu (with a miss, the store being slow)\n", "fetched ahead",
	       (unsigned long long)st->near_fetches);
	printf("  %-18s %llu fetched following a profile; %llu reads found them, %llu in flight\n",
	       "profile", (unsigned long long)st->profile_fetches,
	       (unsigned long long)st->profile_hits, (unsigned long long)st->profile_late);
	printf("  %-18s %llu opens served by passthrough; %llu objects made, %llu dropped\n",
	       "whole files", (unsigned long long)st->passthrough_opens,
	       (unsigned long long)st->files_made, (unsigned long long)st->file_failures);
	printf("  %-18s %llu requests, %llu retries, %llu failovers, %llu failures\n", "store",
	       (unsigned long long)st->store.requests, (unsigned long long)st->store.retries,
	       (unsigned long long)st->store.failovers, (unsigned long long)st->store.failures);
	printf("\n%-32s  %-24s %10s %10s %7s %8s\n", "image", "mountpoint", "read", "size",
	       "% read", "chunks");
	for (size_t i = 0; i < nim; i++)
		printf("%-32.32s  %-24s %10s %10s %6.1f%% %8llu\n", im[i].index, im[i].mountpoint,
		       format_size(im[i].bytes_read, a, sizeof(a)),
		       format_size(im[i].image_bytes, b, sizeof(b)),
		       pct(im[i].bytes_read, im[i].image_bytes), (unsigned long long)im[i].chunks_read);
}

/* The counters, asked of the node at cfg's socket: its cache's counters and
 * every mount's own.  When no node answers there, read from the cache's
 * stats file instead (one line on stderr says so): the same cache counters,
 * but per image only the mounts that hold one of its CACHE_STATS_IMAGES
 * slots.  A node that answers with an error is not second-guessed. */
static int stats_get(const struct node_config *cfg, struct cache_stats *st,
                     struct node_stats_image **im, size_t *nim)
{
	_cleanup_(buf_freep) struct buf req = BUF_INIT;
	_cleanup_free_ char *dir = tools_absolute(cfg->cache_dir);
	const struct cache_stats *map;
	json_t *reply = NULL;
	int r = dir ? tools_node_request_text(json_pack("{s:s, s:s}", "verb", "stats", "cache", dir),
	                                      &req) : -ENOMEM;

	if (r < 0)
		return log_errno(r, "cache stats");
	r = node_call(cfg->socket_path, (char *)req.data, &reply);
	if (r == 0) {
		bool ok = false;
		const char *err = json_get_cstr(reply, "error");

		(void)json_bool(json_object_get(reply, "ok"), &ok);
		if (!ok)
			r = log_error(-EIO, "cache stats: the node at '%s': %s", cfg->socket_path,
			              err ? err : "failed");
		else if (node_stats_parse(json_object_get(reply, "stats"), st, im, nim) < 0)
			r = log_error(-EBADMSG, "cache stats: the node at '%s' answered no counters",
			              cfg->socket_path);
		json_decref(reply);
		return r;
	}
	if (r != -ECONNREFUSED && r != -ENOENT)
		return log_errno(r, "cache stats: asking the node at '%s'", cfg->socket_path);
	log_msg(LOG_WARN, "cache stats: no node answers at '%s'; reading the stats file of "
	        "'%s' (at most %d images counted on their own)", cfg->socket_path, cfg->cache_dir,
	        CACHE_STATS_IMAGES);
	r = map_stats(cfg->cache_dir, &map);
	if (r < 0)
		return r;
	*st = *map;
	r = node_stats_images_from_slots(map, im, nim);
	cache_stats_unmap(map);
	return r < 0 ? log_errno(r, "cache stats") : 0;
}

static void stats_usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot cache stats [--cache DIR] [--json | --prometheus]\n"
	        "\n"
	        "Counters of the node cache, read without disturbing the daemons using it:\n"
	        "hits, misses, bytes fetched and served, fetch latency, evictions, errors, and\n"
	        "per mounted image the share of the image read.  Asked of the node service;\n"
	        "when none answers, read from the cache's stats file (saying so on stderr),\n"
	        "which counts at most %d images on their own.\n"
	        "\n"
	        "  --cache DIR     cache directory (default: $LAZYROOT_CACHE, else %s)\n"
	        "  --config FILE   the node's settings (docs/settings.md)\n"
	        "  --socket PATH   the node's control socket (default: $LAZYROOT_SOCKET,\n"
	        "                  else %s)\n"
	        "  --json          machine-readable output\n"
	        "  --prometheus    Prometheus text format (lazyroot_cache_* metrics)\n",
	        CACHE_STATS_IMAGES, CACHE_DEFAULT_DIR, NODE_DEFAULT_SOCKET);
}

static int cache_stats_cmd(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "cache", required_argument, NULL, 'c' },
		{ "config", required_argument, NULL, 'C' },
		{ "json", no_argument, NULL, 'j' },
		{ "prometheus", no_argument, NULL, 'p' },
		{ "socket", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *dir = NULL;
	struct cache_stats st;
	struct node_stats_image *im = NULL;
	size_t nim = 0;
	struct tools_flags fl = { 0 };
	_cleanup_(node_config_destroy) struct node_config cfg = { 0 };
	bool json = false, prom = false;
	int o, r;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'c': tools_flag(&fl, "--cache", optarg); break;
		case 'C': fl.config = optarg; break;
		case 'j': json = true; break;
		case 'p': prom = true; break;
		case 's': tools_flag(&fl, "--socket", optarg); break;
		case 'h': stats_usage(stdout); return 0;
		default: return tools_option_error("cache stats", argv, "h", opts);
		}
	}
	if (optind < argc) {
		return tools_usage_error("cache stats", "unexpected argument '%s'", argv[optind]);
	}
	if (json && prom) {
		return tools_usage_error("cache stats", "--json and --prometheus exclude each other");
	}
	if (tools_settings(&fl, &cfg) < 0)
		return 2;
	dir = cfg.cache_dir;
	r = stats_get(&cfg, &st, &im, &nim);
	if (r < 0)
		return 1;
	if (json) {
		r = json_file_add(stdout, node_stats_json(&st, im, nim));
	} else if (prom) {
		node_stats_prometheus(stdout, &st, im, nim);
	} else {
		print_table(dir, &st, im, nim);
	}
	node_stats_images_free(im, nim);
	if (r < 0) {
		log_errno(r, "cache stats");
		return 1;
	}
	return 0;
}

/* ---- verify ------------------------------------------------------------ */

static void verify_usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot cache verify [--cache DIR] [--json]\n"
	        "\n"
	        "Re-hash every chunk file and delete those that do not match their name (they\n"
	        "are fetched again when next read).  Safe while daemons run.\n"
	        "\n"
	        "  --cache DIR   cache directory (default: $LAZYROOT_CACHE, else %s)\n"
	        "  --config FILE the node's settings (docs/settings.md)\n"
	        "  --json        machine-readable output\n",
	        CACHE_DEFAULT_DIR);
}

static int cache_verify_cmd(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "cache", required_argument, NULL, 'c' },
		{ "config", required_argument, NULL, 'C' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *dir = NULL;
	uint64_t checked = 0, dropped = 0;
	struct tools_flags fl = { 0 };
	_cleanup_(node_config_destroy) struct node_config cfg = { 0 };
	bool json = false;
	int o, r;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'c': tools_flag(&fl, "--cache", optarg); break;
		case 'C': fl.config = optarg; break;
		case 'j': json = true; break;
		case 'h': verify_usage(stdout); return 0;
		default: return tools_option_error("cache verify", argv, "h", opts);
		}
	}
	if (optind < argc) {
		return tools_usage_error("cache verify", "unexpected argument '%s'", argv[optind]);
	}
	if (tools_settings(&fl, &cfg) < 0)
		return 2;
	dir = cfg.cache_dir;
	r = cache_verify(dir, &checked, &dropped);
	if (r < 0) {
		log_errno(r, "cache '%s': verify", dir);
		return 1;
	}
	if (json)
		return json_pack_file(stdout, "{s:o, s:o}", "checked", json_u64(checked), "dropped",
		                      json_u64(dropped)) < 0 ? 1 : 0;
	else
		printf("checked %llu chunk files, dropped %llu that failed\n",
		       (unsigned long long)checked, (unsigned long long)dropped);
	return 0;
}

/* ---- trim -------------------------------------------------------------- */

static void trim_usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot cache trim --to SIZE [--cache DIR] [--json]\n"
	        "\n"
	        "Delete least recently used chunk files until at most SIZE bytes remain\n"
	        "(e.g. 10G, 512M, 0).  Safe while daemons run.\n"
	        "\n"
	        "  --to SIZE     bytes to keep at most\n"
	        "  --cache DIR   cache directory (default: $LAZYROOT_CACHE, else %s)\n"
	        "  --config FILE the node's settings (docs/settings.md)\n"
	        "  --json        machine-readable output\n",
	        CACHE_DEFAULT_DIR);
}

static int cache_trim_cmd(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "to", required_argument, NULL, 't' },
		{ "cache", required_argument, NULL, 'c' },
		{ "config", required_argument, NULL, 'C' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *dir = NULL, *to = NULL;
	struct tools_flags fl = { 0 };
	_cleanup_(node_config_destroy) struct node_config cfg = { 0 };
	uint64_t bytes, freed = 0;
	bool json = false;
	char a[32];
	int o, r;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 't': to = optarg; break;
		case 'c': tools_flag(&fl, "--cache", optarg); break;
		case 'C': fl.config = optarg; break;
		case 'j': json = true; break;
		case 'h': trim_usage(stdout); return 0;
		default: return tools_option_error("cache trim", argv, "h", opts);
		}
	}
	if (optind < argc) {
		return tools_usage_error("cache trim", "unexpected argument '%s'", argv[optind]);
	}
	if (!to) {
		return tools_usage_error("cache trim", "--to SIZE is required");
	}
	if (parse_size(to, &bytes) < 0) {
		log_error(-EINVAL, "cache trim: invalid size '%s'", to);
		return 2;
	}
	if (tools_settings(&fl, &cfg) < 0)
		return 2;
	dir = cfg.cache_dir;
	r = cache_trim(dir, bytes, &freed);
	if (r < 0) {
		log_errno(r, "cache '%s': trim", dir);
		return 1;
	}
	if (json)
		return json_pack_file(stdout, "{s:o}", "freed_bytes", json_u64(freed)) < 0 ? 1 : 0;
	else
		printf("freed %s\n", format_size(freed, a, sizeof(a)));
	return 0;
}

/* ---- dispatch ---------------------------------------------------------- */

static const struct tools_command subcommands[] = {
	{ "stats", cache_stats_cmd, "counters as a table, JSON or Prometheus text" },
	{ "verify", cache_verify_cmd, "re-hash every chunk file, drop those that fail" },
	{ "trim", cache_trim_cmd, "delete least recently used chunks down to a size" },
	{ "prefetch", cmd_cache_prefetch, "fetch an image's chunks (or some paths') ahead of use" },
};

int cmd_cache(int argc, char **argv)
{
	return tools_dispatch("lazyroot cache", "subcommand", subcommands,
	                      ARRAY_SIZE(subcommands), 8, argc, argv);
}
