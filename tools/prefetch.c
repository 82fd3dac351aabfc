/*
 * prefetch.c — `lazyroot cache prefetch REF [PATH…]`: warm a node's cache
 * before sandboxes arrive.  Fetches every chunk of the image, or of the files
 * under the given paths, through the same cache the daemons use (safe while
 * they run), with a bounded number of chunks in flight.  By default the
 * chunks are staged (kept compressed, decoded at first use: cache_stage);
 * --decode decodes, verifies and writes every chunk now.  When the store
 * holds an access profile of the image, its chunks come first, in the
 * order its traces read them (their first positions, then their second…),
 * so that a node warmed while sandboxes already start has their chunks
 * soonest; --profiled fetches those alone.
 */
#include <getopt.h>
#include <sys/stat.h>

#include "cache/cache.h"
#include "image/image.h"
#include "lib/lib.h"
#include "lib/loop.h"
#include "store/store.h"
#include "tools/tools.h"

#define PREFETCH_WINDOW 256

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot cache prefetch REF [PATH…] [OPTIONS]\n"
	        "\n"
	        "Fetch the chunks of image REF into the node cache: all of them, or those of\n"
	        "the files under each PATH (a path inside the image).  Chunks are staged:\n"
	        "kept as the store holds them (compressed), then decoded, verified and\n"
	        "written out by the daemon the first time a reader needs each one, so that\n"
	        "warming a whole image costs no decoding and less disk.\n"
	        "\n"
	        "  --profiled         only the chunks the image's access profile names (see\n"
	        "                     `lazyroot profile`); without it they come first anyway\n"
	        "  --no-profile       ignore the access profile: chunks in the image's order\n"
	        "  --decode           decode, verify and write every chunk now instead (a\n"
	        "                     first read then costs no decoding; more CPU and disk)\n"
	        "  --store URL        chunk store (default: $LAZYROOT_STORE, else %s)\n"
        "  --s3-endpoint URL  endpoint of s3:// stores (default: $AWS_ENDPOINT_URL_S3,\n"
        "                     else $AWS_ENDPOINT_URL, else AWS)\n"
	        "  --cache DIR        cache directory (default: $LAZYROOT_CACHE, else %s)\n"
	        "  --cache-size SIZE  bytes of chunks the cache keeps at most (default 10G)\n"
	        "  --fetch-timeout S  seconds a chunk is retried on a failing remote store\n"
	        "                     before it counts as failed (default %d)\n"
	        "  --config FILE      the node's settings (default: $LAZYROOT_CONFIG, else\n"
	        "                     %s; docs/settings.md)\n"
	        "  --json             print a summary as JSON\n"
	        "  --no-progress      no progress bar even on a terminal\n"
	        "  -h, --help         this text\n",
	        STORE_DEFAULT_URL, CACHE_DEFAULT_DIR, STORE_DEFAULT_FETCH_TIMEOUT_MS / 1000,
	        NODE_CONFIG_DEFAULT_PATH);
}

struct prefetch {
	const struct image *img;
	struct cache *cache;
	struct store *store;
	uint8_t *want;              /* per chunk: 1 when it is to be fetched */
	uint8_t pack[HASH_SIZE];    /* the index's name: its pack's */
	uint64_t *pack_offsets;     /* tools_pack_offsets(), or NULL: no pack */
	uint32_t *order;            /* chunk indices in the order to fetch them */
	uint32_t nchunks, norder, next;  /* next: the next position in order */
	uint64_t total, started, done, failed, bytes, total_bytes;
	uint64_t start_ns, last_draw;
	bool progress, decode;
	int first_error;
};

/* Mark the chunks of ino (and, for a directory, of everything under it). */
static int mark(struct prefetch *p, uint64_t ino, unsigned depth)
{
	struct image_stat st;
	int r;

	if (depth > 4096)
		return -ELOOP;
	r = image_getattr(p->img, ino, &st);
	if (r < 0)
		return r;
	if (S_ISREG(st.mode)) {
		int64_t n = image_extent_count(p->img, ino);

		for (int64_t i = 0; i < n; i++) {
			struct image_extent e;

			r = image_extent(p->img, ino, (uint64_t)i, &e);
			if (r < 0)
				return r;
			if (e.chunk < p->nchunks)
				p->want[e.chunk] = 1;
		}
		return n < 0 ? (int)n : 0;
	}
	if (!S_ISDIR(st.mode))
		return 0;
	for (uint64_t pos = 0;; pos++) {
		const char *name;
		size_t len;
		uint64_t child;

		r = image_readdir(p->img, ino, pos, &name, &len, &child);
		if (r <= 0)
			return r;
		r = mark(p, child, depth + 1);
		if (r < 0)
			return r;
	}
}

static void draw(struct prefetch *p, bool final)
{
	uint64_t now = now_ns();
	double secs = (double)(now - p->start_ns) / 1e9, rate;
	char a[32], b[32], eta[32] = "--";

	if (!p->progress || (!final && now - p->last_draw < 100000000ULL))
		return;
	p->last_draw = now;
	rate = secs > 0 ? (double)p->bytes / secs : 0;
	if (rate > 0 && secs >= 1)
		snprintf(eta, sizeof(eta), "%.0fs", (double)(p->total_bytes - p->bytes) / rate);
	fprintf(stderr, "\r\033[K%llu/%llu chunks  %s of %s  %.0f MB/s  ETA %s",
	        (unsigned long long)p->done, (unsigned long long)p->total,
	        format_size(p->bytes, a, sizeof(a)), format_size(p->total_bytes, b, sizeof(b)),
	        rate / 1e6, final ? "0s" : eta);
	if (final)
		fputc('\n', stderr);
}

static void start_more(struct prefetch *p);

struct one {
	struct prefetch *p;
	uint32_t size;
};

static void one_done(void *ud, int res)
{
	struct one *o = ud;
	struct prefetch *p = o->p;

	p->done++;
	if (res < 0) {
		p->failed++;
		if (!p->first_error)
			p->first_error = res;
	} else {
		p->bytes += o->size;
	}
	free(o);
	draw(p, false);
	start_more(p);
}

static void start_more(struct prefetch *p)
{
	while (p->started - p->done < PREFETCH_WINDOW && p->next < p->norder) {
		uint32_t i = p->order[p->next++];
		struct image_chunk ic;
		struct cache_chunk cc;
		struct one *o;
		int r;

		if (!p->want[i])
			continue;
		p->started++;
		o = malloc(sizeof(*o));
		r = o ? image_chunk(p->img, i, &ic) : -ENOMEM;
		if (r == 0) {
			memcpy(cc.name, ic.name, sizeof(cc.name));
			cc.size = ic.size;
			cc.stored_size = ic.stored_size;
			cc.flags = ic.flags;
			cc.in_pack = p->pack_offsets != NULL;
			memcpy(cc.pack, p->pack, sizeof(cc.pack));
			cc.pack_off = cc.in_pack ? p->pack_offsets[i] : 0;
			o->p = p;
			o->size = ic.size;
			r = p->decode ? cache_prefetch(p->cache, p->store, &cc, -1, one_done, o)
			             : cache_stage(p->cache, p->store, &cc, one_done, o);
		}
		if (r < 0) {
			free(o);
			p->done++;
			p->failed++;
			if (!p->first_error)
				p->first_error = r;
		}
	}
}

/* p->order: the profile's chunks first (round-robin over its traces, each
 * chunk once), then the rest in index order; only wanted chunks.  With
 * profiled, the profile's chunks alone (they become the only ones wanted).
 * Cost: O(chunks + profile positions). */
static int make_order(struct prefetch *p, const struct image_profile *prof, bool profiled)
{
	_cleanup_free_ uint8_t *placed = calloc(p->nchunks ? p->nchunks : 1, 1);
	size_t nt = prof ? image_profile_traces(prof) : 0, pos;
	bool more = true;

	p->order = malloc((p->nchunks ? p->nchunks : 1) * sizeof(*p->order));
	if (!placed || !p->order)
		return -ENOMEM;
	for (pos = 0; more; pos++) {
		more = false;
		for (size_t t = 0; t < nt; t++) {
			size_t n;
			const uint32_t *v = image_profile_trace(prof, t, &n);

			if (pos >= n)
				continue;
			more = true;
			if (v[pos] < p->nchunks && p->want[v[pos]] && !placed[v[pos]]) {
				placed[v[pos]] = 1;
				p->order[p->norder++] = v[pos];
			}
		}
	}
	for (uint32_t i = 0; i < p->nchunks; i++) {
		if (profiled)
			p->want[i] = placed[i];
		else if (p->want[i] && !placed[i])
			p->order[p->norder++] = i;
	}
	return 0;
}

int cmd_cache_prefetch(int argc, char **argv)
{
	enum { O_STORE = 256, O_S3_ENDPOINT, O_CACHE, O_SIZE, O_JSON, O_NOPROG, O_FETCH_TIMEOUT,
	       O_DECODE, O_PROFILED, O_NOPROFILE, O_CONFIG };
	static const struct option opts[] = {
		{ "store", required_argument, NULL, O_STORE },
		{ "s3-endpoint", required_argument, NULL, O_S3_ENDPOINT },
		{ "fetch-timeout", required_argument, NULL, O_FETCH_TIMEOUT },
		{ "cache", required_argument, NULL, O_CACHE },
		{ "cache-size", required_argument, NULL, O_SIZE },
		{ "config", required_argument, NULL, O_CONFIG },
		{ "json", no_argument, NULL, O_JSON },
		{ "no-progress", no_argument, NULL, O_NOPROG },
		{ "decode", no_argument, NULL, O_DECODE },
		{ "profiled", no_argument, NULL, O_PROFILED },
		{ "no-profile", no_argument, NULL, O_NOPROFILE },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	const char *ref;
	struct tools_flags fl = { 0 };
	_cleanup_(node_config_destroy) struct node_config cfg = { 0 };
	struct store_options so;
	struct cache_params cp;
	struct prefetch p = { 0 };
	struct index_map im = { 0 };
	struct image_info info;
	struct store *s = NULL;
	struct loop *l = NULL;
	char hex[HASH_HEX_SIZE];
	struct image_profile *prof = NULL;
	bool json = false, noprog = false, profiled = false, noprofile = false;
	int c, r;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case O_STORE: tools_flag(&fl, "--store", optarg); break;
		case O_S3_ENDPOINT: tools_flag(&fl, "--s3-endpoint", optarg); break;
		case O_FETCH_TIMEOUT: tools_flag(&fl, "--fetch-timeout", optarg); break;
		case O_CACHE: tools_flag(&fl, "--cache", optarg); break;
		case O_SIZE: tools_flag(&fl, "--cache-size", optarg); break;
		case O_CONFIG: fl.config = optarg; break;
		case O_JSON: json = true; break;
		case O_NOPROG: noprog = true; break;
		case O_DECODE: p.decode = true; break;
		case O_PROFILED: profiled = true; break;
		case O_NOPROFILE: noprofile = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind >= argc || (profiled && noprofile)) {
		if (profiled && noprofile)
			log_error(-EINVAL, "prefetch: --profiled and --no-profile exclude each other");
		usage(stderr);
		return 2;
	}
	ref = argv[optind++];
	if (tools_settings(&fl, &cfg) < 0)
		return 2;
	node_config_cache_params(&cfg, &cp);
	cp.memory_limit = 0;   /* a chunk only held in memory warms nothing */

	r = tools_store_open(&cfg, &so, &s);
	if (r < 0)
		return 1;
	store_set_fetch_timeout(s, cfg.fetch_timeout_ms);
	r = store_resolve(s, ref, hex);
	if (r == 0)
		r = load_index(s, cp.dir, hex, &im);
	if (r == 0)
		r = index_map_keep(&im);
	if (r < 0)
		goto out;
	p.img = im.img;
	r = tools_pack_offsets(s, im.img, hex, &p.pack_offsets);
	if (r == 0)
		r = hex_decode(hex, p.pack, HASH_SIZE);
	if (r < 0)
		goto out;
	image_get_info(im.img, &info);
	p.nchunks = (uint32_t)info.chunks;
	p.want = calloc(p.nchunks ? p.nchunks : 1, 1);
	if (!p.want) {
		r = -ENOMEM;
		goto out;
	}
	if (optind == argc)
		memset(p.want, 1, p.nchunks);
	for (; optind < argc; optind++) {
		uint64_t ino;

		r = image_lookup_path(im.img, argv[optind], &ino);
		if (r == 0)
			r = mark(&p, ino, 0);
		if (r < 0) {
			log_errno(r, "prefetch '%s': path '%s'", ref, argv[optind]);
			goto out;
		}
	}
	if (!noprofile) {
		const char *why = NULL;

		r = tools_profile_fetch(s, hex, &prof);
		if (r == 0 && prof && image_profile_check(prof, info.chunks, &why) < 0) {
			log_msg(LOG_WARN, "profile of index %s: %s; not used", hex, why);
			image_profile_free(prof);
			prof = NULL;
		}
		if (profiled && !prof) {
			r = log_error(-ENOENT, "prefetch '%s': --profiled, but the store has no usable "
			              "profile of index %s", ref, hex);
			goto out;
		}
	}
	r = make_order(&p, prof, profiled);
	if (r < 0) {
		log_errno(r, "prefetch '%s'", ref);
		goto out;
	}
	for (uint32_t i = 0; i < p.nchunks; i++) {
		struct image_chunk ic;

		if (p.want[i] && image_chunk(im.img, i, &ic) == 0) {
			p.total++;
			p.total_bytes += ic.size;
		}
	}

	r = loop_new(256, &l);
	if (r == 0)
		r = store_set_loop(s, l);
	if (r < 0) {
		log_errno(r, "prefetch '%s': event loop", ref);
		goto out;
	}
	r = cache_open(&cp, l, &p.cache);   /* says why it failed */
	if (r < 0)
		goto out;
	p.store = s;
	p.progress = !noprog && !json && isatty(STDERR_FILENO);
	p.start_ns = now_ns();
	start_more(&p);
	while (p.done < p.total) {
		r = loop_run_once(l, true);
		if (r < 0) {
			log_errno(r, "prefetch '%s': event loop", ref);
			goto out;
		}
	}
	draw(&p, true);
	if (json)
		printf("{\"index\":\"%s\",\"mode\":\"%s\",\"chunks\":%llu,\"bytes\":%llu,"
		       "\"failed\":%llu,\"seconds\":%.3f}\n", hex, p.decode ? "decoded" : "staged",
		       (unsigned long long)p.total,
		       (unsigned long long)p.bytes, (unsigned long long)p.failed,
		       (double)(now_ns() - p.start_ns) / 1e9);
	r = 0;
	if (p.failed)
		r = log_errno(p.first_error, "prefetch '%s': %llu of %llu chunks could not be fetched",
		              ref, (unsigned long long)p.failed, (unsigned long long)p.total);
out:
	if (p.cache) {
		/* let writes of fetched chunks finish before the cache goes */
		while (l && loop_pending(l) > 0 && loop_run_once(l, true) >= 0)
			;
		/* a chunk that only made it into memory warmed nothing */
		if (r == 0 && cache_unkept(p.cache))
			r = log_error(-ENOSPC, "prefetch '%s': %llu of %llu chunks could not be written "
			              "into cache '%s' (disk full or failing)", ref,
			              (unsigned long long)cache_unkept(p.cache),
			              (unsigned long long)p.total, cp.dir);
		cache_free(p.cache);
	}
	store_free(s);
	loop_free(l);
	index_map_free(&im);
	image_profile_free(prof);
	free(p.want);
	free(p.order);
	free(p.pack_offsets);
	return r < 0 ? 1 : 0;
}
