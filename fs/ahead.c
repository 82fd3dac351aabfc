/*
 * ahead.c — the fetches a mount starts before its readers ask (ahead.h):
 * following an access profile, reading ahead of a sequential reader, and
 * the chunks near a miss on a slow store.  No FUSE here: the filesystem
 * reports reads (ahead_touch, ahead_read) and asks what to fetch with a
 * miss (ahead_near).
 *
 * Invariants:
 *  - every prefetch is a hint: its failure is forgotten, and the reader that
 *    needs the chunk fetches it itself and sees the error then;
 *  - a profile's prefetches never hold more than profile_bytes queued or in
 *    flight, nor more than profile_inflight fetches at once, so that a
 *    reader's own misses find the store's transfers free;
 *  - struct ahead is not freed while a prefetch it started is due
 *    (ahead_busy).
 */
#include "cache/cache.h"
#include "fs/ahead.h"
#include "fs/fs.h"
#include "image/image.h"
#include "lib/lib.h"

/* Read streams tracked at once (files read concurrently), direct-mapped by
 * inode: a collision only costs the loser its read-ahead. */
#define AHEAD_STREAMS 64
/* On a slow store (cache_store_slow: each fetch a round trip), a miss also
 * fetches, in parallel and queued behind it, what the reader will likely ask
 * for next, each of which would otherwise be one more round trip in turn:
 *  - the file's other chunks, when the file is at most AHEAD_WHOLE_MAX bytes: a
 *    program reads a library or an executable it maps whole, but in two to
 *    four rounds (the ELF header, then faults over its segments);
 *  - for a small file (at most AHEAD_NEAR_FILE_MAX), the AHEAD_NEAR_CHUNKS chunks
 *    after its last in build order: the builder packs small files in walk
 *    order, so they hold the files beside it in its directory.
 * On a fast store none: a local disk gains nothing from guesses, and its
 * reader would queue behind them. */
#define AHEAD_WHOLE_MAX (8 << 20)
#define AHEAD_NEAR_FILE_MAX (256 * 1024)
#define AHEAD_NEAR_CHUNKS 4

/* What an access profile's prefetch of a chunk has come to (ahead.pstate). */
enum {
	PF_NONE,        /* not asked for */
	PF_QUEUED,      /* in ahead.pq, not started */
	PF_FLIGHT,      /* fetching for the profile */
	PF_FETCHED,     /* fetched for the profile, not read yet */
	PF_LATE,        /* a reader came while it was fetching (counted) */
	PF_DONE,        /* nothing more to count */
};

/* One trace of the profile being followed. */
struct ahead_trace_pos {
	const uint32_t *v;              /* chunk indices, borrowed from the profile */
	size_t n;
	size_t queued_to;               /* positions below it were queued or skipped */
	int64_t at;                     /* the furthest position a reader touched; -1 */
	uint32_t score;                 /* distinct chunks of it read so far */
};

/* Per file being read: where the last read ended, to tell sequential from
 * random.  Kept per inode, not per open file: there is no OPEN (fs/open.c). */
struct ahead_stream {
	uint64_t ino;                   /* 0: unused */
	uint64_t last_end;
	uint64_t prefetched_to;         /* file offset up to which read-ahead was issued */
};

struct ahead {
	struct ahead_params p;
	uint64_t chunks;                /* the image's chunk count */
	uint8_t pack_name[HASH_SIZE];   /* index_hex's bytes: the pack's name */
	bool closing;                   /* start no prefetch */
	struct ahead_stream streams[AHEAD_STREAMS];
	/* chunks read so far (a bit each), with p.record or a profile */
	uint8_t *seen;
	uint32_t *rec;                  /* with p.record: first reads in order */
	size_t nrec, rec_cap;
	/* following a profile (NULL ptr: none): where each chunk sits in the
	 * traces (ppos[ppos_off[k]..ppos_off[k+1]): trace, position pairs) */
	struct ahead_trace_pos *ptr;
	size_t nptr;
	uint32_t pbest, pnbest;         /* the best score, and how many traces have it */
	uint32_t *ppos_off;
	uint32_t (*ppos)[2];
	uint8_t *pstate;                /* PF_*, per chunk */
	uint32_t *pq;                   /* chunks to fetch, oldest first; each once */
	size_t pq_head, pq_tail;
	uint64_t pq_bytes;              /* bytes of chunks queued or in flight */
	unsigned pf_inflight;           /* profile prefetches whose callback is due */
};

/* Chunk idx of the image (ic) as the cache wants it: with where the image's
 * pack holds it, when the store has one (fs_params.pack_offsets). */
void ahead_chunk(const struct ahead *a, uint32_t idx, const struct image_chunk *ic,
                           struct cache_chunk *cc)
{
	memcpy(cc->name, ic->name, sizeof(cc->name));
	cc->size = ic->size;
	cc->stored_size = ic->stored_size;
	cc->flags = ic->flags;
	cc->in_pack = a->p.pack_offsets != NULL;
	if (cc->in_pack) {
		memcpy(cc->pack, a->pack_name, sizeof(cc->pack));
		cc->pack_off = a->p.pack_offsets[idx];
	} else {
		memset(cc->pack, 0, sizeof(cc->pack));
		cc->pack_off = 0;
	}
}

/* ---- access profiles: recording and following ------------------------------ */

struct ahead_pf {
	struct ahead *a;
	uint32_t chunk;
	uint32_t size;
};

static uint32_t chunk_size(struct ahead *a, uint32_t idx)
{
	struct image_chunk ic;

	return image_chunk(a->p.image, idx, &ic) == 0 ? ic.size : 0;
}

/* True when chunk c is in every leading trace (those at the best score). */
static bool in_all_leaders(const struct ahead *a, uint32_t c)
{
	uint32_t n = 0, last = UINT32_MAX;

	/* positions are grouped by trace, in trace order (profile_setup) */
	for (uint32_t i = a->ppos_off[c]; i < a->ppos_off[c + 1]; i++) {
		uint32_t t = a->ppos[i][0];

		if (t != last && a->ptr[t].score == a->pbest)
			n++;
		last = t;
	}
	return n >= a->pnbest;
}

/*
 * Queue the chunks of leading trace tr up to profile_window positions past
 * the furthest one read, within the byte budget.  While several traces lead
 * (the reads so far fit each as well: /bin/sh and libc open every workload),
 * only the chunks that all of them read are queued, and the trace's mark
 * stays put so that the rest is queued once one trace leads alone.
 * Cost: O(window), times the chunk's traces while several lead.
 */
static void profile_advance(struct ahead *a, struct ahead_trace_pos *tr)
{
	bool shared = a->pnbest > 1;
	size_t lim, q;

	if (tr->at < 0 || tr->score != a->pbest)
		return;
	lim = MIN(tr->n, (size_t)tr->at + 1 + a->p.profile_window);
	q = MAX(tr->queued_to, (size_t)tr->at + 1);
	for (; q < lim; q++) {
		uint32_t c = tr->v[q];

		if (a->pstate[c] == PF_NONE && !(a->seen[c / 8] & (1u << (c % 8))) &&
		    (!shared || in_all_leaders(a, c))) {
			uint32_t size = chunk_size(a, c);

			if (a->pq_bytes && a->pq_bytes + size > a->p.profile_bytes)
				break;
			a->pstate[c] = PF_QUEUED;
			a->pq[a->pq_tail++] = c;
			a->pq_bytes += size;
		}
		if (!shared)
			tr->queued_to = q + 1;
	}
}

static void profile_pump(struct ahead *a);

static void profile_done(void *ud, int res)
{
	struct ahead_pf *pf = ud;
	struct ahead *a = pf->a;

	a->pf_inflight--;
	a->pq_bytes -= MIN(a->pq_bytes, pf->size);
	if (a->pstate[pf->chunk] == PF_FLIGHT)
		a->pstate[pf->chunk] = res == 0 ? PF_FETCHED : PF_DONE;
	else if (a->pstate[pf->chunk] == PF_LATE)
		a->pstate[pf->chunk] = PF_DONE;
	free(pf);
	/* room in the budget again: the windows may reach further */
	for (size_t t = 0; t < a->nptr; t++)
		profile_advance(a, &a->ptr[t]);
	profile_pump(a);
}

/* Start queued prefetches, oldest first, while fewer than profile_inflight
 * are in flight: the rest of the store's transfers stay free for readers. */
static void profile_pump(struct ahead *a)
{
	while (!a->closing && a->pf_inflight < a->p.profile_inflight && a->pq_head < a->pq_tail) {
		uint32_t c = a->pq[a->pq_head++];
		struct image_chunk ic;
		struct cache_chunk cc;
		struct ahead_pf *pf;
		int r;

		if (a->pstate[c] != PF_QUEUED)
			continue;
		pf = malloc(sizeof(*pf));
		r = pf ? image_chunk(a->p.image, c, &ic) : -ENOMEM;
		if (r == 0) {
			*pf = (struct ahead_pf){ a, c, ic.size };
			ahead_chunk(a, c, &ic, &cc);
			r = cache_profile_prefetch(a->p.cache, a->p.store, &cc, a->p.slot, profile_done,
			                           pf);
		}
		if (r < 0) {
			free(pf);
			a->pstate[c] = PF_DONE;
			a->pq_bytes -= MIN(a->pq_bytes, chunk_size(a, c));
			continue;
		}
		a->pstate[c] = r == 1 ? PF_FLIGHT : PF_DONE;
		a->pf_inflight++;
	}
}

/* A read touches chunk c: record it, count a profile's prefetch that served
 * it, and on its first touch score the traces that hold it and move the
 * windows of those that lead (the traces that matched the most reads so far:
 * the workload being run, not others that share a library with it).
 * Prefetches start at the next profile_pump(), after the read's own fetches.
 * Cost: O(traces holding c × window). */
bool ahead_touch(struct ahead *a, uint32_t c)
{
	if (c >= a->chunks)
		return false;
	/* made here when neither a profile nor a recording made it at the
	 * start: the mount's count of distinct chunks read needs it too */
	if (!a->seen && !(a->seen = calloc(a->chunks / 8 + 1, 1)))
		return false;
	if (a->pstate) {
		switch (a->pstate[c]) {
		case PF_FETCHED:
			cache_note_profile_hit(a->p.cache, false);
			a->pstate[c] = PF_DONE;
			break;
		case PF_FLIGHT:
			cache_note_profile_hit(a->p.cache, true);
			a->pstate[c] = PF_LATE;
			break;
		case PF_QUEUED:
			/* the reader fetches it itself now */
			a->pstate[c] = PF_DONE;
			a->pq_bytes -= MIN(a->pq_bytes, chunk_size(a, c));
			break;
		}
	}
	if (a->seen[c / 8] & (1u << (c % 8)))
		return false;
	a->seen[c / 8] |= (uint8_t)(1u << (c % 8));
	if (a->p.record) {
		if (a->nrec == a->rec_cap) {
			size_t cap = a->rec_cap ? a->rec_cap * 2 : 256;
			uint32_t *v = realloc(a->rec, cap * sizeof(*v));

			if (v) {
				a->rec = v;
				a->rec_cap = cap;
			}
		}
		if (a->nrec < a->rec_cap)
			a->rec[a->nrec++] = c;
	}
	if (!a->ptr)
		return true;
	for (uint32_t i = a->ppos_off[c]; i < a->ppos_off[c + 1]; i++) {
		struct ahead_trace_pos *tr = &a->ptr[a->ppos[i][0]];

		if (i == a->ppos_off[c] || a->ppos[i][0] != a->ppos[i - 1][0]) {
			tr->score++;
			if (tr->score > a->pbest) {
				a->pbest = tr->score;
				a->pnbest = 1;
			} else if (tr->score == a->pbest) {
				a->pnbest++;
			}
		}
		tr->at = MAX(tr->at, (int64_t)a->ppos[i][1]);
	}
	for (uint32_t i = a->ppos_off[c]; i < a->ppos_off[c + 1]; i++)
		profile_advance(a, &a->ptr[a->ppos[i][0]]);
	return true;
}

const uint32_t *ahead_trace(const struct ahead *a, size_t *ret_n)
{
	*ret_n = a->nrec;
	return a->rec;
}

/* Take up p.profile: one warning and none when it is not this image's. */
static int profile_setup(struct ahead *a)
{
	const struct image_profile *prof = a->p.profile;
	uint8_t idx[HASH_SIZE];
	const char *why = NULL;
	uint64_t total = 0;
	size_t nt;

	if (!a->p.record && !prof)
		return 0;
	a->seen = calloc(a->chunks / 8 + 1, 1);
	if (!a->seen)
		return -ENOMEM;
	if (!prof)
		return 0;
	if (hex_decode(a->p.index_hex, idx, HASH_SIZE) < 0 ||
	    memcmp(idx, image_profile_index(prof), HASH_SIZE))
		why = "it belongs to another index";
	else
		(void)image_profile_check(prof, a->chunks, &why);
	nt = image_profile_traces(prof);
	for (size_t t = 0; !why && t < nt; t++) {
		size_t n;

		(void)image_profile_trace(prof, t, &n);
		total += n;
	}
	if (!why && total >= UINT32_MAX)
		why = "too large";
	if (why) {
		log_msg(LOG_WARN, "mount '%s': ignoring the access profile: %s", a->p.name, why);
		return 0;
	}
	if (!a->p.profile_window)
		a->p.profile_window = FS_PROFILE_WINDOW;
	if (!a->p.profile_bytes)
		a->p.profile_bytes = FS_PROFILE_BYTES;
	if (!a->p.profile_inflight)
		a->p.profile_inflight = FS_PROFILE_INFLIGHT;
	a->ptr = calloc(nt ? nt : 1, sizeof(*a->ptr));
	a->ppos_off = calloc(a->chunks + 1, sizeof(*a->ppos_off));
	a->ppos = malloc((total ? total : 1) * sizeof(*a->ppos));
	a->pstate = calloc(a->chunks ? a->chunks : 1, 1);
	a->pq = malloc((a->chunks ? a->chunks : 1) * sizeof(*a->pq));
	if (!a->ptr || !a->ppos_off || !a->ppos || !a->pstate || !a->pq)
		return -ENOMEM;
	a->nptr = nt;
	/* counting sort of the (trace, position) pairs by chunk */
	for (size_t t = 0; t < nt; t++) {
		size_t n;
		const uint32_t *v = image_profile_trace(prof, t, &n);

		a->ptr[t] = (struct ahead_trace_pos){ v, n, 0, -1, 0 };
		for (size_t i = 0; i < n; i++)
			a->ppos_off[v[i] + 1]++;
	}
	for (uint64_t k = 0; k < a->chunks; k++)
		a->ppos_off[k + 1] += a->ppos_off[k];
	{
		_cleanup_free_ uint32_t *fill = calloc(a->chunks ? a->chunks : 1,
		                                       sizeof(*fill));

		if (!fill)
			return -ENOMEM;
		for (size_t t = 0; t < nt; t++)
			for (size_t i = 0; i < a->ptr[t].n; i++) {
				uint32_t k = a->ptr[t].v[i];
				uint32_t at = a->ppos_off[k] + fill[k]++;

				a->ppos[at][0] = (uint32_t)t;
				a->ppos[at][1] = (uint32_t)i;
			}
	}
	return 0;
}

static void prefetch_done(void *ud, int res)
{
	/* Read-ahead is a hint: a failure shows when the data is really read. */
}

/*
 * Fetch ahead of a sequential reader: the chunks of the next
 * readahead_chunks extents past end that were not asked for yet.
 * Cost: O(readahead_chunks + log extents).
 */
static void read_ahead(struct ahead *a, uint64_t ino, struct ahead_stream *st, uint64_t end)
{
	const struct image *img = a->p.image;
	uint32_t last_chunk = IMAGE_CHUNK_NONE;
	unsigned chunks = 0;
	int64_t n, i;

	n = image_extent_count(img, ino);
	i = image_extent_find(img, ino, end);
	for (; i >= 0 && i < n && chunks < a->p.readahead_chunks; i++) {
		struct image_extent ex;
		struct image_chunk ic;
		struct cache_chunk cc;

		if (image_extent(img, ino, (uint64_t)i, &ex) < 0)
			break;
		if (ex.chunk != last_chunk)
			chunks++;
		last_chunk = ex.chunk;
		if (ex.file_off + ex.len <= st->prefetched_to)
			continue;
		if (image_chunk(img, ex.chunk, &ic) < 0)
			break;
		ahead_chunk(a, ex.chunk, &ic, &cc);
		if (cache_readahead(a->p.cache, a->p.store, &cc, a->p.slot, prefetch_done, NULL) < 0)
			break;
		st->prefetched_to = ex.file_off + ex.len;
	}
}

static bool near_add(struct ahead *a, uint32_t idx, struct cache_chunk near[AHEAD_NEAR_MAX],
                     unsigned *n)
{
	struct image_chunk ic;

	if (*n >= AHEAD_NEAR_MAX || image_chunk(a->p.image, idx, &ic) < 0)
		return false;
	ahead_chunk(a, idx, &ic, &near[(*n)++]);
	return true;
}

/* What a slow store should fetch with a miss on file ino of size bytes (see
 * AHEAD_WHOLE_MAX), for cache_read_near().  Cost: O(extents of the file). */
unsigned ahead_near(struct ahead *a, uint64_t ino, uint64_t size,
                            struct cache_chunk near[AHEAD_NEAR_MAX])
{
	uint32_t last = IMAGE_CHUNK_NONE;
	unsigned n = 0;
	int64_t count = image_extent_count(a->p.image, ino);

	if (size > AHEAD_WHOLE_MAX)
		return 0;
	for (int64_t i = 0; i < count; i++) {
		struct image_extent ex;

		if (image_extent(a->p.image, ino, (uint64_t)i, &ex) < 0)
			return n;
		if (ex.chunk != last && !near_add(a, ex.chunk, near, &n))
			return n;
		last = ex.chunk;
	}
	if (size <= AHEAD_NEAR_FILE_MAX && last != IMAGE_CHUNK_NONE)
		for (uint64_t i = (uint64_t)last + 1;
		     i < a->chunks && i <= (uint64_t)last + AHEAD_NEAR_CHUNKS; i++)
			if (!near_add(a, (uint32_t)i, near, &n))
				break;
	return n;
}


void ahead_pump(struct ahead *a)
{
	if (a->pq)
		profile_pump(a);
}

void ahead_read(struct ahead *a, uint64_t ino, uint64_t off, uint64_t len, bool ok)
{
	struct ahead_stream *st = &a->streams[ino % AHEAD_STREAMS];

	/* A read that begins where the previous one ended (give or take the
	 * kernel's overlapping async readahead) continues a run. */
	if (st->ino != ino)
		*st = (struct ahead_stream){ .ino = ino };
	else if (off >= st->last_end - MIN(st->last_end, a->p.seq_slack) &&
	         off <= st->last_end + a->p.seq_slack && ok && a->p.readahead_chunks)
		read_ahead(a, ino, st, off + len);
	st->last_end = off + len;
}

int ahead_new(const struct ahead_params *p, struct ahead **ret)
{
	struct ahead *a = calloc(1, sizeof(*a));
	struct image_info info;
	int r;

	if (!a)
		return -ENOMEM;
	a->p = *p;
	image_get_info(p->image, &info);
	a->chunks = info.chunks;
	if (p->pack_offsets && hex_decode(p->index_hex, a->pack_name, HASH_SIZE) < 0)
		a->p.pack_offsets = NULL;
	r = profile_setup(a);
	if (r < 0) {
		ahead_free(a);
		return r;
	}
	*ret = a;
	return 0;
}

void ahead_close(struct ahead *a)
{
	a->closing = true;
}

bool ahead_busy(const struct ahead *a)
{
	return a->pf_inflight > 0;
}

void ahead_set_slot(struct ahead *a, int slot)
{
	a->p.slot = slot;
}

void ahead_free(struct ahead *a)
{
	if (!a)
		return;
	free(a->seen);
	free(a->rec);
	free(a->ptr);
	free(a->ppos_off);
	free(a->ppos);
	free(a->pstate);
	free(a->pq);
	free(a);
}
