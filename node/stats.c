/*
 * stats.c — the node's counters as Prometheus text: the cache's shared
 * counters (cache/cache.h, struct cache_stats) for `lazyroot cache stats
 * --prometheus` and the node's /metrics.
 */
#include <signal.h>

#include "cache/cache.h"
#include "lib/lib.h"
#include "node/stats.h"

/* The slot's server is alive (a slot of a dead one is stale). */
static bool image_live(const struct cache_image_stats *im)
{
	int32_t pid = __atomic_load_n(&im->pid, __ATOMIC_RELAXED);

	return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

/* A Prometheus label value: backslash, quote and newline escaped. */
static void prom_label(FILE *f, const char *s, size_t max)
{
	for (size_t i = 0; i < max && s[i]; i++) {
		if (s[i] == '\\' || s[i] == '"')
			fprintf(f, "\\%c", s[i]);
		else if (s[i] == '\n')
			fprintf(f, "\\n");
		else
			fputc(s[i], f);
	}
}

static void prom_head(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP lazyroot_cache_%s %s\n# TYPE lazyroot_cache_%s %s\n", name, help, name, type);
}

static void prom_one(FILE *f, const char *name, const char *type, const char *help, uint64_t v)
{
	prom_head(f, name, type, help);
	fprintf(f, "lazyroot_cache_%s %llu\n", name, (unsigned long long)v);
}

void node_stats_prometheus(FILE *f, const struct cache_stats *st)
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
		prom_one(f, scalars[i].name, scalars[i].type, scalars[i].help,
		         *(const uint64_t *)((const char *)st + scalars[i].off));
	prom_head(f, "fetch_latency_seconds", "histogram", "Store fetch latency.");
	for (int i = 0; i < CACHE_LATENCY_BUCKETS - 1; i++) {
		cum += st->fetch_latency[i];
		fprintf(f, "lazyroot_cache_fetch_latency_seconds_bucket{le=\"%g\"} %llu\n",
		       (double)(16ULL << i) / 1e6, (unsigned long long)cum);
	}
	cum += st->fetch_latency[CACHE_LATENCY_BUCKETS - 1];
	fprintf(f, "lazyroot_cache_fetch_latency_seconds_bucket{le=\"+Inf\"} %llu\n",
	       (unsigned long long)cum);
	fprintf(f, "lazyroot_cache_fetch_latency_seconds_sum %g\n",
	       (double)st->fetch_latency_sum_us / 1e6);
	fprintf(f, "lazyroot_cache_fetch_latency_seconds_count %llu\n", (unsigned long long)cum);

	for (size_t k = 0; k <= ARRAY_SIZE(per_image); k++) {
		if (k < ARRAY_SIZE(per_image))
			prom_head(f, per_image[k].name, per_image[k].type, per_image[k].help);
		else
			prom_head(f, "image_read_ratio", "gauge",
			          "Fraction of the image's bytes read (the % of the image read).");
		for (int i = 0; i < CACHE_STATS_IMAGES; i++) {
			const struct cache_image_stats *im = &st->images[i];

			if (!image_live(im))
				continue;
			fprintf(f, "lazyroot_cache_%s{index=\"",
			       k < ARRAY_SIZE(per_image) ? per_image[k].name : "image_read_ratio");
			prom_label(f, im->index, sizeof(im->index));
			fprintf(f, "\",mountpoint=\"");
			prom_label(f, im->mountpoint, sizeof(im->mountpoint));
			if (k < ARRAY_SIZE(per_image))
				fprintf(f, "\"} %llu\n",
				       (unsigned long long)*(const uint64_t *)((const char *)im +
				                                               per_image[k].off));
			else
				fprintf(f, "\"} %g\n", pct(im->bytes_read, im->image_bytes) / 100.0);
		}
	}
}

