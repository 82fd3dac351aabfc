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
#include "lib/lib.h"
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

static bool image_live(const struct cache_image_stats *im)
{
	int32_t pid = __atomic_load_n(&im->pid, __ATOMIC_RELAXED);

	return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

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

static void print_table(const char *dir, const struct cache_stats *st)
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
	for (int i = 0; i < CACHE_STATS_IMAGES; i++) {
		const struct cache_image_stats *im = &st->images[i];

		if (!image_live(im))
			continue;
		printf("%-32.32s  %-24s %10s %10s %6.1f%% %8llu\n", im->index, im->mountpoint,
		       format_size(im->bytes_read, a, sizeof(a)),
		       format_size(im->image_bytes, b, sizeof(b)),
		       pct(im->bytes_read, im->image_bytes), (unsigned long long)im->chunks_read);
	}
}

static void print_json(const struct cache_stats *st)
{
	bool first = true;

	printf("{\"used\":%llu,\"limit\":%llu,\"inflight\":%llu,\"hits\":%llu,\"misses\":%llu,"
	       "\"fetched_bytes\":%llu,\"fetched_raw_bytes\":%llu,\"served_bytes\":%llu,"
	       "\"verify_failures\":%llu,\"errors\":%llu,\"evictions\":%llu,"
	       "\"evicted_bytes\":%llu,\"memory_served\":%llu,\"fetch_latency_sum_us\":%llu,"
	       "\"store_requests\":%llu,\"store_retries\":%llu,\"store_failovers\":%llu,"
	       "\"store_failures\":%llu,\"near_fetches\":%llu,\"passthrough_opens\":%llu,"
	       "\"files_made\":%llu,\"file_failures\":%llu,\"staged\":%llu,\"staged_bytes\":%llu,"
	       "\"staged_used\":%llu,\"profile_fetches\":%llu,\"profile_hits\":%llu,"
	       "\"profile_late\":%llu,\"fetch_latency_us\":[",
	       (unsigned long long)st->used, (unsigned long long)st->limit,
	       (unsigned long long)st->inflight, (unsigned long long)st->hits,
	       (unsigned long long)st->misses, (unsigned long long)st->fetched_bytes,
	       (unsigned long long)st->fetched_raw_bytes, (unsigned long long)st->served_bytes,
	       (unsigned long long)st->verify_failures, (unsigned long long)st->errors,
	       (unsigned long long)st->evictions, (unsigned long long)st->evicted_bytes,
	       (unsigned long long)st->memory_served,
	       (unsigned long long)st->fetch_latency_sum_us,
	       (unsigned long long)st->store.requests, (unsigned long long)st->store.retries,
	       (unsigned long long)st->store.failovers, (unsigned long long)st->store.failures,
	       (unsigned long long)st->near_fetches, (unsigned long long)st->passthrough_opens,
	       (unsigned long long)st->files_made, (unsigned long long)st->file_failures,
	       (unsigned long long)st->staged, (unsigned long long)st->staged_bytes,
	       (unsigned long long)st->staged_used, (unsigned long long)st->profile_fetches,
	       (unsigned long long)st->profile_hits, (unsigned long long)st->profile_late);
	/* the last bucket holds everything slower: no upper bound */
	for (int i = 0; i < CACHE_LATENCY_BUCKETS; i++) {
		if (i == CACHE_LATENCY_BUCKETS - 1)
			printf(",{\"lt_us\":null,");
		else
			printf("%s{\"lt_us\":%llu,", i ? "," : "", (unsigned long long)(16ULL << i));
		printf("\"count\":%llu}", (unsigned long long)st->fetch_latency[i]);
	}
	printf("],\"images\":[");
	for (int i = 0; i < CACHE_STATS_IMAGES; i++) {
		const struct cache_image_stats *im = &st->images[i];

		if (!image_live(im))
			continue;
		printf("%s{\"index\":", first ? "" : ",");
		tools_json_string(stdout, im->index, strnlen(im->index, sizeof(im->index)));
		printf(",\"mountpoint\":");
		tools_json_string(stdout, im->mountpoint,
		                  strnlen(im->mountpoint, sizeof(im->mountpoint)));
		printf(",\"pid\":%d,\"image_bytes\":%llu,\"bytes_read\":%llu,\"chunks_read\":%llu,"
		       "\"bytes_served\":%llu,\"percent_read\":%.2f}",
		       im->pid, (unsigned long long)im->image_bytes,
		       (unsigned long long)im->bytes_read, (unsigned long long)im->chunks_read,
		       (unsigned long long)im->bytes_served, pct(im->bytes_read, im->image_bytes));
		first = false;
	}
	printf("]}\n");
}

/* A Prometheus label value: backslash, quote and newline escaped. */
static void prom_label(const char *s, size_t max)
{
	for (size_t i = 0; i < max && s[i]; i++) {
		if (s[i] == '\\' || s[i] == '"')
			printf("\\%c", s[i]);
		else if (s[i] == '\n')
			printf("\\n");
		else
			putchar(s[i]);
	}
}

static void prom_head(const char *name, const char *type, const char *help)
{
	printf("# HELP lazyroot_cache_%s %s\n# TYPE lazyroot_cache_%s %s\n", name, help, name, type);
}

static void prom_one(const char *name, const char *type, const char *help, uint64_t v)
{
	prom_head(name, type, help);
	printf("lazyroot_cache_%s %llu\n", name, (unsigned long long)v);
}

static void print_prometheus(const struct cache_stats *st)
{
	static const struct {
		const char *name, *type, *help;
		size_t off;
	} scalars[] = {
#define F(n, t, h, f) { n, t, h, offsetof(struct cache_stats, f) }
		F("used_bytes", "gauge", "Bytes of chunk files and staged chunks held.", used),
		F("staged_chunks", "gauge", "Staged chunks held (compressed, decoded at first read).",
		  staged),
		F("staged_bytes", "gauge", "Bytes of staged chunks held.", staged_bytes),
		F("staged_used_total", "counter", "Staged chunks decoded for a reader.", staged_used),
		F("limit_bytes", "gauge", "Cache size limit in bytes.", limit),
		F("inflight_fetches", "gauge", "Store fetches in flight.", inflight),
		F("hits_total", "counter", "Reads served from the cache without a fetch.", hits),
		F("misses_total", "counter", "Reads that waited for a store fetch.", misses),
		F("fetched_bytes_total", "counter", "Bytes fetched from stores, as stored.",
		  fetched_bytes),
		F("fetched_raw_bytes_total", "counter", "Bytes fetched from stores, uncompressed.",
		  fetched_raw_bytes),
		F("served_bytes_total", "counter", "Bytes handed to readers.", served_bytes),
		F("verify_failures_total", "counter", "Chunks whose bytes did not match their name.",
		  verify_failures),
		F("errors_total", "counter", "Reads that failed.", errors),
		F("evictions_total", "counter", "Chunk files evicted.", evictions),
		F("evicted_bytes_total", "counter", "Bytes of chunk files evicted.", evicted_bytes),
		F("memory_served_total", "counter", "Reads served from memory: cache disk full.",
		  memory_served),
		F("store_requests_total", "counter", "Requests made to remote stores.",
		  store.requests),
		F("store_retries_total", "counter", "Requests repeated after a transient failure.",
		  store.retries),
		F("store_failovers_total", "counter", "Objects a later mirror served.",
		  store.failovers),
		F("store_failures_total", "counter", "Store operations that failed for good.",
		  store.failures),
		F("near_fetches_total", "counter",
		  "Fetches of a miss's neighbours, the store being slow.", near_fetches),
		F("passthrough_opens_total", "counter",
		  "Opens the kernel serves from a whole-file object (FUSE passthrough).",
		  passthrough_opens),
		F("profile_fetches_total", "counter", "Fetches started by following a profile.",
		  profile_fetches),
		F("profile_hits_total", "counter", "Reads that found a chunk a profile fetched.",
		  profile_hits),
		F("profile_late_total", "counter",
		  "Reads that found a chunk a profile fetched still in flight.", profile_late),
		F("files_made_total", "counter", "Whole-file objects made from chunks.", files_made),
		F("file_failures_total", "counter",
		  "Whole-file objects that failed their check and were dropped.", file_failures),
#undef F
	};
	static const struct {
		const char *name, *type, *help;
		size_t off;
	} per_image[] = {
#define F(n, t, h, f) { n, t, h, offsetof(struct cache_image_stats, f) }
		F("image_size_bytes", "gauge", "Sum of the image's chunk sizes.", image_bytes),
		F("image_read_bytes", "counter", "Distinct chunk bytes the mount has read.",
		  bytes_read),
		F("image_read_chunks", "counter", "Distinct chunks the mount has read.", chunks_read),
		F("image_served_bytes_total", "counter", "Bytes handed to the mount's readers.",
		  bytes_served),
#undef F
	};
	uint64_t cum = 0;

	for (size_t i = 0; i < ARRAY_SIZE(scalars); i++)
		prom_one(scalars[i].name, scalars[i].type, scalars[i].help,
		         *(const uint64_t *)((const char *)st + scalars[i].off));
	prom_head("fetch_latency_seconds", "histogram", "Store fetch latency.");
	for (int i = 0; i < CACHE_LATENCY_BUCKETS - 1; i++) {
		cum += st->fetch_latency[i];
		printf("lazyroot_cache_fetch_latency_seconds_bucket{le=\"%g\"} %llu\n",
		       (double)(16ULL << i) / 1e6, (unsigned long long)cum);
	}
	cum += st->fetch_latency[CACHE_LATENCY_BUCKETS - 1];
	printf("lazyroot_cache_fetch_latency_seconds_bucket{le=\"+Inf\"} %llu\n",
	       (unsigned long long)cum);
	printf("lazyroot_cache_fetch_latency_seconds_sum %g\n",
	       (double)st->fetch_latency_sum_us / 1e6);
	printf("lazyroot_cache_fetch_latency_seconds_count %llu\n", (unsigned long long)cum);

	for (size_t k = 0; k <= ARRAY_SIZE(per_image); k++) {
		if (k < ARRAY_SIZE(per_image))
			prom_head(per_image[k].name, per_image[k].type, per_image[k].help);
		else
			prom_head("image_read_ratio", "gauge",
			          "Fraction of the image's bytes read (the % of the image read).");
		for (int i = 0; i < CACHE_STATS_IMAGES; i++) {
			const struct cache_image_stats *im = &st->images[i];

			if (!image_live(im))
				continue;
			printf("lazyroot_cache_%s{index=\"",
			       k < ARRAY_SIZE(per_image) ? per_image[k].name : "image_read_ratio");
			prom_label(im->index, sizeof(im->index));
			printf("\",mountpoint=\"");
			prom_label(im->mountpoint, sizeof(im->mountpoint));
			if (k < ARRAY_SIZE(per_image))
				printf("\"} %llu\n",
				       (unsigned long long)*(const uint64_t *)((const char *)im +
				                                               per_image[k].off));
			else
				printf("\"} %g\n", pct(im->bytes_read, im->image_bytes) / 100.0);
		}
	}
}

static void stats_usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot cache stats [--cache DIR] [--json | --prometheus]\n"
	        "\n"
	        "Counters of the node cache, read without disturbing the daemons using it:\n"
	        "hits, misses, bytes fetched and served, fetch latency, evictions, errors, and\n"
	        "per mounted image the share of the image read.\n"
	        "\n"
	        "  --cache DIR     cache directory (default: $LAZYROOT_CACHE, else %s)\n"
	        "  --config FILE   the node's settings (docs/settings.md)\n"
	        "  --json          machine-readable output\n"
	        "  --prometheus    Prometheus text format (lazyroot_cache_* metrics)\n",
	        CACHE_DEFAULT_DIR);
}

static int cache_stats_cmd(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "cache", required_argument, NULL, 'c' },
		{ "config", required_argument, NULL, 'C' },
		{ "json", no_argument, NULL, 'j' },
		{ "prometheus", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *dir = NULL;
	const struct cache_stats *st;
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
		case 'h': stats_usage(stdout); return 0;
		default: stats_usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		log_error(-EINVAL, "cache stats: unexpected argument '%s'", argv[optind]);
		return 2;
	}
	if (json && prom) {
		log_error(-EINVAL, "cache stats: --json and --prometheus exclude each other");
		return 2;
	}
	if (tools_settings(&fl, &cfg) < 0)
		return 2;
	dir = cfg.cache_dir;
	r = map_stats(dir, &st);
	if (r < 0)
		return 1;
	if (json)
		print_json(st);
	else if (prom)
		print_prometheus(st);
	else
		print_table(dir, st);
	cache_stats_unmap(st);
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
		default: verify_usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		log_error(-EINVAL, "cache verify: unexpected argument '%s'", argv[optind]);
		return 2;
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
		printf("{\"checked\":%llu,\"dropped\":%llu}\n", (unsigned long long)checked,
		       (unsigned long long)dropped);
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
		default: trim_usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		log_error(-EINVAL, "cache trim: unexpected argument '%s'", argv[optind]);
		return 2;
	}
	if (!to) {
		log_error(-EINVAL, "cache trim: --to SIZE is required");
		return 2;
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
		printf("{\"freed_bytes\":%llu}\n", (unsigned long long)freed);
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
