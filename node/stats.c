/*
 * stats.c — the node's counters: the cache's shared counters (cache/cache.h,
 * struct cache_stats) and the per-image ones, as JSON for the `stats`
 * request and `lazyroot cache stats --json`, parsed back by the client, and
 * as Prometheus text for /metrics and `cache stats --prometheus`.
 *
 * One table (scalars[]) names every scalar counter once: its JSON key, its
 * Prometheus name, type and help, and where it lives in struct cache_stats.
 */
#include <signal.h>

#include "cache/cache.h"
#include "lib/json.h"
#include "lib/lib.h"
#include "node/node.h"
#include "node/stats.h"

static const struct {
	const char *key;             /* JSON */
	const char *name, *type, *help;   /* Prometheus; name NULL: not a series of its own */
	size_t off;
} scalars[] = {
#define F(k, n, t, h, f) { k, n, t, h, offsetof(struct cache_stats, f) }
	F("used", "used_bytes", "gauge", "Bytes of chunk files and staged chunks held.", used),
	F("limit", "limit_bytes", "gauge", "Cache size limit in bytes.", limit),
	F("inflight", "inflight_fetches", "gauge", "Store fetches in flight.", inflight),
	F("hits", "hits_total", "counter", "Reads served from the cache without a fetch.", hits),
	F("misses", "misses_total", "counter", "Reads that waited for a store fetch.", misses),
	F("fetched_bytes", "fetched_bytes_total", "counter", "Bytes fetched from stores, as stored.",
	  fetched_bytes),
	F("fetched_raw_bytes", "fetched_raw_bytes_total", "counter",
	  "Bytes fetched from stores, uncompressed.", fetched_raw_bytes),
	F("served_bytes", "served_bytes_total", "counter", "Bytes handed to readers.", served_bytes),
	F("verify_failures", "verify_failures_total", "counter",
	  "Chunks whose bytes did not match their name.", verify_failures),
	F("errors", "errors_total", "counter", "Reads that failed.", errors),
	F("evictions", "evictions_total", "counter", "Chunk files evicted.", evictions),
	F("evicted_bytes", "evicted_bytes_total", "counter", "Bytes of chunk files evicted.",
	  evicted_bytes),
	F("memory_served", "memory_served_total", "counter",
	  "Reads served from memory: cache disk full.", memory_served),
	F("fetch_latency_sum_us", NULL, NULL, NULL, fetch_latency_sum_us),
	F("store_requests", "store_requests_total", "counter", "Requests made to remote stores.",
	  store.requests),
	F("store_retries", "store_retries_total", "counter",
	  "Requests repeated after a transient failure.", store.retries),
	F("store_failovers", "store_failovers_total", "counter", "Objects a later mirror served.",
	  store.failovers),
	F("store_failures", "store_failures_total", "counter",
	  "Store operations that failed for good.", store.failures),
	F("near_fetches", "near_fetches_total", "counter",
	  "Fetches of a miss's neighbours, the store being slow.", near_fetches),
	F("passthrough_opens", "passthrough_opens_total", "counter",
	  "Opens the kernel serves from a whole-file object (FUSE passthrough).", passthrough_opens),
	F("files_made", "files_made_total", "counter", "Whole-file objects made from chunks.",
	  files_made),
	F("file_failures", "file_failures_total", "counter",
	  "Whole-file objects that failed their check and were dropped.", file_failures),
	F("staged", "staged_chunks", "gauge", "Staged chunks held (compressed, decoded at first read).",
	  staged),
	F("staged_bytes", "staged_bytes", "gauge", "Bytes of staged chunks held.", staged_bytes),
	F("staged_used", "staged_used_total", "counter", "Staged chunks decoded for a reader.",
	  staged_used),
	F("profile_fetches", "profile_fetches_total", "counter",
	  "Fetches started by following a profile.", profile_fetches),
	F("profile_hits", "profile_hits_total", "counter", "Reads that found a chunk a profile fetched.",
	  profile_hits),
	F("profile_late", "profile_late_total", "counter",
	  "Reads that found a chunk a profile fetched still in flight.", profile_late),
	F("corrupt", "corrupt_total", "counter",
	  "Objects of the cache found corrupt (disk rot) and dropped.", corrupt),
#undef F
};

static const struct {
	const char *key, *name, *type, *help;
	size_t off;
} per_image[] = {
#define F(k, n, t, h, f) { k, n, t, h, offsetof(struct node_stats_image, f) }
	F("image_bytes", "image_size_bytes", "gauge", "Sum of the image's chunk sizes.", image_bytes),
	F("bytes_read", "image_read_bytes", "counter", "Distinct chunk bytes the mount has read.",
	  bytes_read),
	F("chunks_read", "image_read_chunks", "counter", "Distinct chunks the mount has read.",
	  chunks_read),
	F("bytes_served", "image_served_bytes_total", "counter", "Bytes handed to the mount's readers.",
	  bytes_served),
#undef F
};

#define U64(base, off) (*(uint64_t *)((char *)(base) + (off)))
#define CU64(base, off) (*(const uint64_t *)((const char *)(base) + (off)))

static double ratio(uint64_t part, uint64_t whole)
{
	return whole ? (double)part / (double)whole : 0.0;
}

/* ---- images ---------------------------------------------------------------- */

/* The slot's server is alive (a slot of a dead one is stale). */
static bool image_live(const struct cache_image_stats *im)
{
	int32_t pid = __atomic_load_n(&im->pid, __ATOMIC_RELAXED);

	return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

void node_stats_images_free(struct node_stats_image *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i].mountpoint);
	free(v);
}

int node_stats_images_from_slots(const struct cache_stats *st, struct node_stats_image **ret,
                                 size_t *ret_n)
{
	struct node_stats_image *v = calloc(CACHE_STATS_IMAGES, sizeof(*v));
	size_t n = 0;

	*ret = NULL;
	*ret_n = 0;
	if (!v)
		return -ENOMEM;
	for (int i = 0; i < CACHE_STATS_IMAGES; i++) {
		const struct cache_image_stats *im = &st->images[i];
		struct node_stats_image *o = &v[n];

		if (!image_live(im))
			continue;
		snprintf(o->index, sizeof(o->index), "%.*s", (int)sizeof(im->index) - 1, im->index);
		o->mountpoint = strndup(im->mountpoint, sizeof(im->mountpoint));
		if (!o->mountpoint) {
			node_stats_images_free(v, n);
			return -ENOMEM;
		}
		o->pid = im->pid;
		o->image_bytes = im->image_bytes;
		o->bytes_read = im->bytes_read;
		o->chunks_read = im->chunks_read;
		o->bytes_served = im->bytes_served;
		n++;
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

/* ---- JSON ------------------------------------------------------------------ */

/* a with v appended (v's reference taken), or NULL once an append failed
 * (a released). */
static json_t *push(json_t *a, json_t *v)
{
	if (!a) {
		json_decref(v);
		return NULL;
	}
	if (json_array_append_new(a, v) < 0) {
		json_decref(a);
		return NULL;
	}
	return a;
}

json_t *node_stats_json(const struct cache_stats *st, const struct node_stats_image *im,
                        size_t n)
{
	json_t *o = json_object(), *lat = json_array(), *ims = json_array();
	bool ok = o && lat && ims;

	for (size_t i = 0; ok && i < ARRAY_SIZE(scalars); i++)
		ok = json_object_set_new(o, scalars[i].key, json_u64(CU64(st, scalars[i].off))) == 0;
	/* the last bucket holds everything slower: no upper bound */
	for (int i = 0; i < CACHE_LATENCY_BUCKETS; i++)
		lat = push(lat, json_pack("{s:o, s:o}", "lt_us", i == CACHE_LATENCY_BUCKETS - 1 ?
		                          json_null() : json_u64(16ULL << i),
		                          "count", json_u64(st->fetch_latency[i])));
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_pack("{s:s, s:s, s:i}", "index", im[i].index, "mountpoint",
		                      im[i].mountpoint, "pid", im[i].pid);

		for (size_t k = 0; e && k < ARRAY_SIZE(per_image); k++)
			if (json_object_set_new(e, per_image[k].key,
			                        json_u64(CU64(&im[i], per_image[k].off))) < 0) {
				json_decref(e);
				e = NULL;
			}
		if (e && json_object_set_new(e, "percent_read",
		                             json_fixed(100.0 * ratio(im[i].bytes_read,
		                                                      im[i].image_bytes), 2)) < 0) {
			json_decref(e);
			e = NULL;
		}
		ims = push(ims, e);
	}
	if (ok && lat && ims && json_object_set_new(o, "fetch_latency_us", json_incref(lat)) == 0 &&
	    json_object_set_new(o, "images", json_incref(ims)) == 0) {
		json_decref(lat);
		json_decref(ims);
		return o;
	}
	json_decref(o);
	json_decref(lat);
	json_decref(ims);
	return NULL;
}

static int get_u64(const json_t *j, const char *key, uint64_t *ret)
{
	int64_t v;

	if (json_int(json_object_get(j, key), &v) < 0 || v < 0)
		return -EBADMSG;
	*ret = (uint64_t)v;
	return 0;
}

int node_stats_parse(const json_t *j, struct cache_stats *st, struct node_stats_image **ret,
                     size_t *ret_n)
{
	const json_t *lat = json_object_get(j, "fetch_latency_us"), *ims = json_object_get(j, "images");
	struct node_stats_image *v = NULL;
	size_t n = 0;
	int r = 0;

	*ret = NULL;
	*ret_n = 0;
	memset(st, 0, sizeof(*st));
	if (!json_is_object(j) || !json_is_array(lat) ||
	    json_array_size(lat) != CACHE_LATENCY_BUCKETS || !json_is_array(ims))
		return -EBADMSG;
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(scalars); i++)
		r = get_u64(j, scalars[i].key, &U64(st, scalars[i].off));
	for (int i = 0; r == 0 && i < CACHE_LATENCY_BUCKETS; i++)
		r = get_u64(json_array_get(lat, (size_t)i), "count", &st->fetch_latency[i]);
	if (r == 0 && json_array_size(ims) && !(v = calloc(json_array_size(ims), sizeof(*v))))
		r = -ENOMEM;
	for (; r == 0 && n < json_array_size(ims); n++) {
		const json_t *o = json_array_get(ims, n);
		const char *idx = json_get_cstr(o, "index"), *mnt = json_get_cstr(o, "mountpoint");
		int64_t pid;

		if (!idx || !mnt || strlen(idx) >= sizeof(v[n].index) ||
		    json_int(json_object_get(o, "pid"), &pid) < 0) {
			r = -EBADMSG;
			break;
		}
		snprintf(v[n].index, sizeof(v[n].index), "%s", idx);
		v[n].pid = (int)pid;
		for (size_t k = 0; r == 0 && k < ARRAY_SIZE(per_image); k++)
			r = get_u64(o, per_image[k].key, &U64(&v[n], per_image[k].off));
		if (r == 0 && !(v[n].mountpoint = strdup(mnt)))
			r = -ENOMEM;
		if (r < 0)
			break;
	}
	if (r < 0) {
		node_stats_images_free(v, n);
		return r;
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

/* ---- Prometheus ------------------------------------------------------------ */

/* A Prometheus label value: backslash, quote and newline escaped. */
static void prom_label(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			fprintf(f, "\\%c", *s);
		else if (*s == '\n')
			fprintf(f, "\\n");
		else
			fputc(*s, f);
	}
}

static void prom_head(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP lazyroot_cache_%s %s\n# TYPE lazyroot_cache_%s %s\n", name, help, name, type);
}

void node_stats_prometheus(FILE *f, const struct cache_stats *st,
                           const struct node_stats_image *im, size_t n)
{
	uint64_t cum = 0;

	for (size_t i = 0; i < ARRAY_SIZE(scalars); i++) {
		if (!scalars[i].name)
			continue;
		prom_head(f, scalars[i].name, scalars[i].type, scalars[i].help);
		fprintf(f, "lazyroot_cache_%s %llu\n", scalars[i].name,
		        (unsigned long long)CU64(st, scalars[i].off));
	}
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
		bool last = k == ARRAY_SIZE(per_image);

		if (!last)
			prom_head(f, per_image[k].name, per_image[k].type, per_image[k].help);
		else
			prom_head(f, "image_read_ratio", "gauge",
			          "Fraction of the image's bytes read (the % of the image read).");
		for (size_t i = 0; i < n; i++) {
			fprintf(f, "lazyroot_cache_%s{index=\"", last ? "image_read_ratio" : per_image[k].name);
			prom_label(f, im[i].index);
			fprintf(f, "\",mountpoint=\"");
			prom_label(f, im[i].mountpoint);
			if (!last)
				fprintf(f, "\"} %llu\n", (unsigned long long)CU64(&im[i], per_image[k].off));
			else
				fprintf(f, "\"} %g\n", ratio(im[i].bytes_read, im[i].image_bytes));
		}
	}
}
