/*
 * prefetch.c — warm the node's cache with an image, or with the files under
 * some of its paths, before sandboxes arrive: every chunk fetched through the
 * node's cache (single flight with the mounts' own reads), with a bounded
 * number in flight (PREFETCH_WINDOW).  By default the chunks are staged (kept
 * compressed, decoded at first use: cache_stage); decode decodes, verifies
 * and writes every chunk now.  When the store holds an access profile of the
 * image, its chunks come first, in the order its traces read them (their
 * first positions, then their second…), so that a node warmed while
 * sandboxes already start has their chunks soonest; profiled fetches those
 * alone.
 */
#include <sys/stat.h>

#include "cache/cache.h"
#include "image/image.h"
#include "lib/lib.h"
#include "node/prefetch.h"
#include "store/store.h"

#define PREFETCH_WINDOW 256

struct node_prefetch {
	const struct image *img;
	struct cache *cache;
	struct store *store;
	uint8_t *want;              /* per chunk: 1 when it is to be fetched */
	uint8_t pack[HASH_SIZE];    /* the index's name: its pack's */
	uint64_t *pack_offsets;     /* node_pack_offsets(), or NULL: no pack */
	uint32_t *order;            /* chunk indices in the order to fetch them */
	uint32_t nchunks, norder, next;  /* next: the next position in order */
	uint64_t total, started, done, failed, bytes, total_bytes;
	uint64_t start_ns, end_ns, unkept_before;
	bool decode;
	int first_error;
};

/* Mark the chunks of ino (and, for a directory, of everything under it). */
static int mark(struct node_prefetch *p, uint64_t ino, unsigned depth)
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

static void start_more(struct node_prefetch *p);

struct one {
	struct node_prefetch *p;
	uint32_t size;
};

static void one_done(void *ud, int res)
{
	struct one *o = ud;
	struct node_prefetch *p = o->p;

	p->done++;
	if (res < 0) {
		p->failed++;
		if (!p->first_error)
			p->first_error = res;
	} else {
		p->bytes += o->size;
	}
	free(o);
	start_more(p);
}

static void start_more(struct node_prefetch *p)
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
static int make_order(struct node_prefetch *p, const struct image_profile *prof, bool profiled)
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

int node_prefetch_start(const struct node_prefetch_params *pp, struct node_prefetch **ret)
{
	struct node_prefetch *p = calloc(1, sizeof(*p));
	struct image_info info;
	int r;

	if (!p)
		return -ENOMEM;
	p->img = pp->img;
	p->cache = pp->cache;
	p->store = pp->store;
	p->decode = pp->decode;
	p->pack_offsets = (uint64_t *)pp->pack_offsets;
	p->unkept_before = cache_unkept(pp->cache);
	r = hex_decode(pp->hex, p->pack, HASH_SIZE);
	if (r < 0)
		goto fail;
	image_get_info(pp->img, &info);
	p->nchunks = (uint32_t)info.chunks;
	p->want = calloc(p->nchunks ? p->nchunks : 1, 1);
	if (!p->want) {
		r = -ENOMEM;
		goto fail;
	}
	if (pp->npaths == 0)
		memset(p->want, 1, p->nchunks);
	for (size_t i = 0; i < pp->npaths; i++) {
		uint64_t ino;

		r = image_lookup_path(pp->img, pp->paths[i], &ino);
		if (r == 0)
			r = mark(p, ino, 0);
		if (r < 0) {
			log_errno(r, "prefetch '%s': path '%s'", pp->ref, pp->paths[i]);
			goto fail;
		}
	}
	r = make_order(p, pp->prof, pp->profiled);
	if (r < 0) {
		log_errno(r, "prefetch '%s'", pp->ref);
		goto fail;
	}
	for (uint32_t i = 0; i < p->nchunks; i++) {
		struct image_chunk ic;

		if (p->want[i] && image_chunk(pp->img, i, &ic) == 0) {
			p->total++;
			p->total_bytes += ic.size;
		}
	}
	p->start_ns = now_ns();
	start_more(p);
	*ret = p;
	return 0;
fail:
	node_prefetch_free(p);
	return r;
}

void node_prefetch_stop(struct node_prefetch *p)
{
	p->next = p->norder;
}

bool node_prefetch_finished(const struct node_prefetch *p)
{
	/* and its chunks' writes ended, so that what could not be kept on disk
	 * is counted (cache_flights) */
	return p->done >= p->total && cache_flights(p->cache) == 0;
}

void node_prefetch_result(const struct node_prefetch *p, struct node_prefetch_result *ret)
{
	*ret = (struct node_prefetch_result){
		.chunks = p->total,
		.bytes = p->bytes,
		.failed = p->failed,
		.done = p->done,
		.total_bytes = p->total_bytes,
		.first_error = p->first_error,
		.unkept = cache_unkept(p->cache) - p->unkept_before,
		.seconds = (double)(now_ns() - p->start_ns) / 1e9,
	};
}

void node_prefetch_free(struct node_prefetch *p)
{
	if (!p)
		return;
	free(p->want);
	free(p->order);
	free(p);
}
