/*
 * build.c — the build pipeline.
 *
 * One thread (the caller's) walks the source and cuts: each regular file's
 * bytes go either into the pack stream, where every small file is appended in
 * build order and the whole stream is cut by FastCDC (so a directory of tiny
 * files is a few chunks, and inserting one file changes only the chunks
 * around it), or, for files of at least min_size bytes, into a stream of their
 * own that is cut alone (so an identical large file dedupes across images).
 * A file's data in a stream is recorded as pieces; when a chunk is cut, the
 * pieces it covers become extents of their inodes.
 *
 * Worker threads hash, compress and store the chunks.  Each worker has its own
 * store handle (handles are single-threaded).  A chunk already stored by this
 * build, or already in the store (HEAD), is neither compressed nor written
 * again.  The queue between cutter and workers is bounded, so
 * memory stays at a few chunks per worker.
 *
 * build_finish() publishes in order: every chunk stored, then a store flush
 * (the durability barrier), then the index, then the tag.  Any failure before
 * the tag leaves the tag untouched.
 */
#include <pthread.h>
#include <sys/stat.h>
#include <zstd.h>

#include "chunker/chunker.h"
#include "image/image.h"
#include "lib/lib.h"
#include "store/store.h"

struct job {
	struct job *next;
	uint32_t slot;
	uint32_t len;
	uint8_t *data;
};

struct slot_result {
	uint8_t name[HASH_SIZE];
	uint32_t size, stored_size, flags;
	uint32_t canonical;      /* slot that stored these bytes (itself if it did) */
	bool done;
};

struct piece {
	struct image_inode *ino;
	uint64_t file_off, pos, len;
};

struct stream {
	uint8_t *buf;
	size_t head, len, cap;   /* unconsumed bytes are buf[head, head+len) */
	uint64_t base;           /* stream position of buf[head] */
	struct piece *pieces;
	size_t phead, pn, pcap;  /* pending pieces are pieces[phead, pn) */
};

/* name → canonical slot, open addressing; protected by build.lock */
struct name_set {
	struct name_entry { uint8_t name[HASH_SIZE]; uint32_t slot; bool used; } *v;
	size_t cap, n;
};

struct build {
	struct build_params p;
	struct fastcdc cdc;
	struct store *store;
	struct store_lease *lease;       /* held from before the first dedup check (store/GC.md) */
	struct image_tree *tree;

	struct stream pack, own;
	struct stream *cur;
	struct image_inode *cur_ino;
	uint64_t cur_off, cur_size;
	bool in_file;

	pthread_t *threads;
	unsigned nthreads, started;
	pthread_mutex_t lock;
	pthread_cond_t can_pop, can_push;
	struct job *q_head, *q_tail;     /* protected by lock */
	unsigned q_len, q_max;           /* protected by lock */
	bool closing;                    /* protected by lock */
	int error;                       /* first failure; protected by lock */
	struct slot_result *results;     /* protected by lock */
	size_t nresults, results_cap;    /* protected by lock */
	struct name_set names;           /* protected by lock */
	uint64_t chunks_new, bytes_stored; /* protected by lock */

	uint64_t entries, bytes_in, total_bytes, chunks_cut;
	uint64_t start_ns, last_draw_ns;
	bool drew;
};

void build_params_default(struct build_params *p)
{
	memset(p, 0, sizeof(*p));
	p->min_size = BUILD_DEFAULT_MIN;
	p->avg_size = BUILD_DEFAULT_AVG;
	p->max_size = BUILD_DEFAULT_MAX;
	p->level = BUILD_DEFAULT_LEVEL;
}

const struct build_params *build_get_params(const struct build *b)
{
	return &b->p;
}

struct image_tree *build_tree(struct build *b)
{
	return b->tree;
}

void build_count_entry(struct build *b)
{
	b->entries++;
}

void build_set_total(struct build *b, uint64_t bytes)
{
	b->total_bytes = bytes;
}

/* -ECANCELED once a worker failed (it logged why), else 0. */
static int build_failed(struct build *b)
{
	int e;

	pthread_mutex_lock(&b->lock);
	e = b->error;
	pthread_mutex_unlock(&b->lock);
	return e ? -ECANCELED : 0;
}

static void set_error(struct build *b, int err)
{
	pthread_mutex_lock(&b->lock);
	if (!b->error)
		b->error = err;
	b->closing = true;
	pthread_cond_broadcast(&b->can_push);
	pthread_cond_broadcast(&b->can_pop);
	pthread_mutex_unlock(&b->lock);
}

/* ---- name set ----------------------------------------------------------- */

static uint64_t name_key(const uint8_t *name)
{
	uint64_t k;

	memcpy(&k, name, sizeof(k));
	return k;
}

/* Find name; when absent insert it with slot.  Returns the entry. */
static struct name_entry *names_find_or_add(struct name_set *s, const uint8_t *name,
                                            uint32_t slot, bool *ret_found)
{
	size_t i;

	if ((s->n + 1) * 2 > s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 4096;
		struct name_entry *v = calloc(cap, sizeof(*v));

		if (!v)
			return NULL;
		for (size_t j = 0; j < s->cap; j++) {
			if (!s->v[j].used)
				continue;
			for (i = name_key(s->v[j].name) & (cap - 1); v[i].used; i = (i + 1) & (cap - 1))
				;
			v[i] = s->v[j];
		}
		free(s->v);
		s->v = v;
		s->cap = cap;
	}
	for (i = name_key(name) & (s->cap - 1); s->v[i].used; i = (i + 1) & (s->cap - 1)) {
		if (!memcmp(s->v[i].name, name, HASH_SIZE)) {
			*ret_found = true;
			return &s->v[i];
		}
	}
	memcpy(s->v[i].name, name, HASH_SIZE);
	s->v[i].slot = slot;
	s->v[i].used = true;
	s->n++;
	*ret_found = false;
	return &s->v[i];
}

/* ---- workers ------------------------------------------------------------ */

struct worker {
	struct build *b;
	struct store *store;
	ZSTD_CCtx *cctx;
	struct buf enc;
};

/*
 * Store one chunk unless the store has it.  "Has it" is always this HEAD, made
 * now under the build's lease, never an answer remembered from another build:
 * a collection may have moved the chunk aside since (store/GC.md).  A stored
 * chunk is never empty and
 * is compressed only when that makes it smaller, so the size HEAD reports
 * tells how it is stored (equal to the chunk's size: raw; smaller: zstd) and
 * rules out the one torn state a crash can leave behind a rename, an empty
 * file: such a chunk is written again.  On failure, msg says what failed
 * (the worker logs only the build's first failure).
 */
static int store_chunk(struct worker *w, const uint8_t *name, const struct job *j,
                       uint32_t *ret_stored, uint32_t *ret_flags, bool *ret_new, char *msg,
                       size_t msglen)
{
	char key[64], hex[HASH_HEX_SIZE];
	int64_t have;
	int r;

	hex_encode(name, HASH_SIZE, hex);
	snprintf(key, sizeof(key), "chunks/%s", hex);
	have = store_head_sync(w->store, key);
	if (have > 0 && have <= (int64_t)j->len) {
		*ret_stored = (uint32_t)have;
		*ret_flags = have == (int64_t)j->len ? 0 : CHUNK_ZSTD;
		*ret_new = false;
		return 0;
	}
	if (have < 0 && have != -ENOENT) {
		snprintf(msg, msglen, "store '%s': checking chunk %s", store_url(w->store), hex);
		return (int)have;
	}
	r = chunk_encode(w->cctx, w->b->p.level, j->data, j->len, &w->enc, ret_flags);
	if (r < 0) {
		snprintf(msg, msglen, "compressing chunk %s", hex);
		return r;
	}
	*ret_stored = (uint32_t)w->enc.len;
	r = store_put_sync(w->store, key, w->enc.data, w->enc.len);
	if (r < 0) {
		snprintf(msg, msglen, "store '%s': writing chunk %s", store_url(w->store), hex);
		return r;
	}
	*ret_new = true;
	return 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct build *b = w->b;

	for (;;) {
		struct job *j;
		struct slot_result res = { 0 };
		struct name_entry *e;
		bool found = false, fresh = false;
		char msg[256] = "out of memory";
		int r = 0;

		pthread_mutex_lock(&b->lock);
		while (!b->q_head && !b->closing)
			pthread_cond_wait(&b->can_pop, &b->lock);
		j = b->q_head;
		if (!j || b->error) {
			pthread_mutex_unlock(&b->lock);
			break;
		}
		b->q_head = j->next;
		if (!b->q_head)
			b->q_tail = NULL;
		b->q_len--;
		pthread_cond_signal(&b->can_push);
		pthread_mutex_unlock(&b->lock);

		hash128(j->data, j->len, res.name);
		res.size = j->len;
		res.canonical = j->slot;
		pthread_mutex_lock(&b->lock);
		e = names_find_or_add(&b->names, res.name, j->slot, &found);
		if (!e)
			r = -ENOMEM;
		else if (found)
			res.canonical = e->slot;
		pthread_mutex_unlock(&b->lock);

		if (r == 0 && !found)
			r = store_chunk(w, res.name, j, &res.stored_size, &res.flags, &fresh, msg,
			                sizeof(msg));
		free(j->data);
		pthread_mutex_lock(&b->lock);
		if (r < 0) {
			if (!b->error) {
				b->error = r;
				log_errno(r, "%s", msg);
			}
			b->closing = true;
			pthread_cond_broadcast(&b->can_push);
			pthread_cond_broadcast(&b->can_pop);
		} else {
			res.done = true;
			b->results[j->slot] = res;
			if (fresh) {
				b->chunks_new++;
				b->bytes_stored += res.stored_size;
			}
		}
		pthread_mutex_unlock(&b->lock);
		free(j);
	}
	store_free(w->store);
	ZSTD_freeCCtx(w->cctx);
	buf_free(&w->enc);
	free(w);
	return NULL;
}

/* Hand a chunk (copied) to the workers; blocks while the queue is full. */
static int emit_chunk(struct build *b, const uint8_t *data, size_t len, uint32_t *ret_slot)
{
	struct job *j;
	int64_t slot;

	slot = image_tree_new_chunk(b->tree);
	if (slot < 0)
		return (int)slot;
	j = malloc(sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->data = malloc(len ? len : 1);
	if (!j->data) {
		free(j);
		return -ENOMEM;
	}
	memcpy(j->data, data, len);
	j->len = (uint32_t)len;
	j->slot = (uint32_t)slot;
	j->next = NULL;

	pthread_mutex_lock(&b->lock);
	if ((size_t)slot >= b->results_cap) {
		size_t cap = b->results_cap ? b->results_cap * 2 : 1024;
		struct slot_result *v;

		while (cap <= (size_t)slot)
			cap *= 2;
		v = realloc(b->results, cap * sizeof(*v));
		if (!v) {
			pthread_mutex_unlock(&b->lock);
			free(j->data);
			free(j);
			return -ENOMEM;
		}
		memset(v + b->results_cap, 0, (cap - b->results_cap) * sizeof(*v));
		b->results = v;
		b->results_cap = cap;
	}
	b->nresults = (size_t)slot + 1;
	while (b->q_len >= b->q_max && !b->error)
		pthread_cond_wait(&b->can_push, &b->lock);
	if (b->error) {
		pthread_mutex_unlock(&b->lock);
		free(j->data);
		free(j);
		return -ECANCELED;
	}
	if (b->q_tail)
		b->q_tail->next = j;
	else
		b->q_head = j;
	b->q_tail = j;
	b->q_len++;
	pthread_cond_signal(&b->can_pop);
	pthread_mutex_unlock(&b->lock);
	b->chunks_cut++;
	*ret_slot = (uint32_t)slot;
	return 0;
}

/* ---- streams ------------------------------------------------------------ */

/* Cut one chunk of n bytes off the front of s and map the pieces it covers. */
static int stream_cut(struct build *b, struct stream *s, size_t n)
{
	uint64_t cs = s->base, ce = s->base + n;
	uint32_t slot = 0;
	int r;

	r = emit_chunk(b, s->buf + s->head, n, &slot);
	if (r < 0)
		return r;
	while (s->phead < s->pn) {
		struct piece *p = &s->pieces[s->phead];
		uint64_t start = MAX(cs, p->pos), end = MIN(ce, p->pos + p->len);

		if (p->pos >= ce)
			break;
		if (end > start) {
			r = image_inode_add_extent(p->ino, p->file_off + (start - p->pos), slot,
			                           (uint32_t)(start - cs), (uint32_t)(end - start));
			if (r < 0)
				return r;
		}
		if (p->pos + p->len > ce)
			break;
		s->phead++;
	}
	if (s->phead == s->pn)
		s->phead = s->pn = 0;
	s->head += n;
	s->len -= n;
	s->base += n;
	return 0;
}

/* Cut while at least max bytes are buffered (or everything, when final). */
static int stream_drain(struct build *b, struct stream *s, bool final)
{
	int r;

	while (s->len >= b->cdc.max || (final && s->len > 0)) {
		size_t n = fastcdc_cut(&b->cdc, s->buf + s->head, s->len);

		r = stream_cut(b, s, n);
		if (r < 0)
			return r;
	}
	if (s->len == 0)
		s->head = 0;
	return 0;
}

static int stream_append(struct build *b, struct stream *s, const uint8_t *data, size_t len)
{
	while (len > 0) {
		size_t room, n;
		int r;

		if (s->head + s->len == s->cap) {
			if (s->head > 0) {
				memmove(s->buf, s->buf + s->head, s->len);
				s->head = 0;
			} else {
				size_t cap = s->cap ? s->cap * 2 : (size_t)b->cdc.max * 4;
				uint8_t *p = realloc(s->buf, cap);

				if (!p)
					return -ENOMEM;
				s->buf = p;
				s->cap = cap;
			}
		}
		room = s->cap - s->head - s->len;
		n = MIN(room, len);
		memcpy(s->buf + s->head + s->len, data, n);
		s->len += n;
		data += n;
		len -= n;
		r = stream_drain(b, s, false);
		if (r < 0)
			return r;
	}
	return 0;
}

static int stream_add_piece(struct stream *s, struct image_inode *ino, uint64_t file_off,
                            uint64_t len)
{
	uint64_t pos = s->base + s->len;
	struct piece *last = s->pn > s->phead ? &s->pieces[s->pn - 1] : NULL;

	if (last && last->ino == ino && last->file_off + last->len == file_off &&
	    last->pos + last->len == pos) {
		last->len += len;
		return 0;
	}
	if (s->pn == s->pcap) {
		if (s->phead > 0) {
			memmove(s->pieces, s->pieces + s->phead, (s->pn - s->phead) * sizeof(*s->pieces));
			s->pn -= s->phead;
			s->phead = 0;
		}
		if (s->pn == s->pcap) {
			size_t cap = s->pcap ? s->pcap * 2 : 256;
			struct piece *v = realloc(s->pieces, cap * sizeof(*v));

			if (!v)
				return -ENOMEM;
			s->pieces = v;
			s->pcap = cap;
		}
	}
	s->pieces[s->pn++] = (struct piece){ ino, file_off, pos, len };
	return 0;
}

static void stream_free(struct stream *s)
{
	free(s->buf);
	free(s->pieces);
}

/* ---- files -------------------------------------------------------------- */

static void draw_progress(struct build *b, bool final);

int build_file_begin(struct build *b, struct image_inode *ino, uint64_t size)
{
	if (b->in_file)
		return -EBUSY;
	image_inode_clear_extents(ino);
	b->in_file = true;
	b->cur_ino = ino;
	b->cur_off = 0;
	b->cur_size = size;
	b->cur = size < b->cdc.min ? &b->pack : &b->own;
	return 0;
}

int build_file_data(struct build *b, const void *data, size_t len)
{
	int r;

	if (!b->in_file)
		return -EINVAL;
	if (len > b->cur_size - b->cur_off)
		return -EFBIG;
	r = build_failed(b);
	if (r < 0)
		return r;
	r = stream_add_piece(b->cur, b->cur_ino, b->cur_off, len);
	if (r < 0)
		return r;
	r = stream_append(b, b->cur, data, len);
	if (r < 0)
		return r;
	b->cur_off += len;
	b->bytes_in += len;
	draw_progress(b, false);
	return 0;
}

int build_file_hole(struct build *b, uint64_t len)
{
	if (!b->in_file)
		return -EINVAL;
	if (len > b->cur_size - b->cur_off)
		return -EFBIG;
	b->cur_off += len;
	return 0;
}

int build_file_end(struct build *b)
{
	int r = 0;

	if (!b->in_file)
		return -EINVAL;
	b->in_file = false;
	if (b->cur_off != b->cur_size)
		return -EIO;
	image_inode_set_size(b->cur_ino, b->cur_size);
	if (b->cur == &b->own)
		r = stream_drain(b, &b->own, true);
	return r;
}

/* ---- progress ----------------------------------------------------------- */

static void draw_progress(struct build *b, bool final)
{
	uint64_t now = now_ns();
	double secs, rate;
	char in[32], eta[32] = "--";

	if (!b->p.progress || (!final && now - b->last_draw_ns < 100000000ULL))
		return;
	b->last_draw_ns = now;
	secs = (double)(now - b->start_ns) / 1e9;
	rate = secs > 0 ? (double)b->bytes_in / secs / 1e6 : 0;
	if (b->total_bytes && secs >= 1 && rate > 0 && b->bytes_in <= b->total_bytes)
		snprintf(eta, sizeof(eta), "%.0fs",
		         (double)(b->total_bytes - b->bytes_in) / 1e6 / rate);
	fprintf(stderr, "\r\033[K%llu entries  %s  %llu chunks  %.0f MB/s  ETA %s",
	        (unsigned long long)b->entries, format_size(b->bytes_in, in, sizeof(in)),
	        (unsigned long long)b->chunks_cut, rate, final ? "0s" : eta);
	b->drew = true;
	if (final)
		fputc('\n', stderr);
}

/* ---- lifetime ----------------------------------------------------------- */

int build_new(const struct build_params *p, struct store *store, struct build **ret)
{
	struct build *b;
	int r;

	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->p = *p;
	b->store = store;
	b->start_ns = now_ns();
	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->can_pop, NULL);
	pthread_cond_init(&b->can_push, NULL);
	r = fastcdc_init(&b->cdc, p->min_size, p->avg_size, p->max_size);
	if (r < 0) {
		build_free(b);
		return log_error(r, "chunk sizes %u/%u/%u: need 64 <= min <= avg <= max <= 64 MiB, "
		                 "avg a power of two", p->min_size, p->avg_size, p->max_size);
	}
	r = image_tree_new(&b->tree);
	if (r < 0) {
		build_free(b);
		return r;
	}
	/* the lease comes before any dedup check: a collector that moves a chunk
	 * this build then finds present sees the lease, and waits for it */
	r = store_lease_take(store, "build", 0, &b->lease);
	if (r < 0) {
		build_free(b);
		return r;
	}
	b->nthreads = p->threads ? p->threads : (unsigned)MAX(1L, sysconf(_SC_NPROCESSORS_ONLN));
	b->q_max = 2 * b->nthreads + 2;
	b->threads = calloc(b->nthreads, sizeof(*b->threads));
	if (!b->threads) {
		build_free(b);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < b->nthreads; i++) {
		struct worker *w = calloc(1, sizeof(*w));

		if (w)
			w->b = b;
		if (!w || !(w->cctx = ZSTD_createCCtx()) ||
		    (r = store_reopen(store, &w->store)) < 0 ||
		    (r = pthread_create(&b->threads[i], NULL, worker_main, w)) != 0) {
			if (w) {
				store_free(w->store);
				ZSTD_freeCCtx(w->cctx);
				free(w);
			}
			build_free(b);
			return r > 0 ? -r : (r < 0 ? r : -ENOMEM);
		}
		b->started++;
	}
	*ret = b;
	return 0;
}

/* Stop the workers (after they drained the queue, or at once on error) and
 * free their state. */
static void stop_workers(struct build *b)
{
	pthread_mutex_lock(&b->lock);
	b->closing = true;
	pthread_cond_broadcast(&b->can_pop);
	pthread_mutex_unlock(&b->lock);
	for (unsigned i = 0; i < b->started; i++) {
		void *unused;

		pthread_join(b->threads[i], &unused);
	}
	b->started = 0;
}

static void free_queue(struct build *b)
{
	while (b->q_head) {
		struct job *j = b->q_head;

		b->q_head = j->next;
		free(j->data);
		free(j);
	}
	b->q_tail = NULL;
	b->q_len = 0;
}

void build_free(struct build *b)
{
	if (!b)
		return;
	if (b->started)
		set_error(b, -ECANCELED);
	stop_workers(b);
	free_queue(b);
	stream_free(&b->pack);
	stream_free(&b->own);
	image_tree_free(b->tree);
	free(b->threads);
	free(b->results);
	free(b->names.v);
	store_lease_end(b->lease);
	pthread_mutex_destroy(&b->lock);
	pthread_cond_destroy(&b->can_pop);
	pthread_cond_destroy(&b->can_push);
	if (b->drew && b->p.progress)
		fputc('\n', stderr);
	free(b);
}

struct recheck {
	char (*keys)[64];
};

static int recheck_op(struct store *s, size_t i, store_cb cb, void *cb_ud, void *ud)
{
	struct recheck *rc = ud;

	return store_head(s, rc->keys[i], cb, cb_ud);
}

/*
 * Before the tag: every object the tag will reach (each distinct chunk, the
 * index, the pack) is in the store, by a HEAD each, 64 in flight.  The lease
 * alone guarantees it only while the store's clock runs at the builder's
 * rate: a forward step of the store's clock larger than the lease's ttl
 * makes a live lease look lapsed to a collector, and one larger than the
 * grace makes what this build just stored look old, so phase two may delete
 * a chunk the build found present as well as one it stored itself
 * (store/GC.md, "Clock steps").  What a collection moved aside is brought
 * back (a move without replacing); what is gone for good fails the build,
 * and no tag names it.  Cost: one HEAD per chunk, a move per object aside
 * (docs/perf-log.md, "A build checks its chunks before its tag").
 */
static int recheck_objects(struct build *b, const char *index_hex)
{
	struct recheck rc = { 0 };
	_cleanup_free_ int64_t *res = NULL;
	size_t n = 0;
	int r = 0;

	rc.keys = calloc(b->nresults + 2, sizeof(*rc.keys));
	res = calloc(b->nresults + 2, sizeof(*res));
	if (!rc.keys || !res) {
		free(rc.keys);
		return -ENOMEM;
	}
	for (size_t i = 0; i < b->nresults; i++) {
		char hex[HASH_HEX_SIZE];

		if (b->results[i].canonical != i)
			continue;      /* the same bytes as an earlier chunk */
		hex_encode(b->results[i].name, HASH_SIZE, hex);
		snprintf(rc.keys[n++], sizeof(rc.keys[0]), "chunks/%s", hex);
	}
	snprintf(rc.keys[n++], sizeof(rc.keys[0]), "indexes/%s", index_hex);
	if (b->p.pack)
		snprintf(rc.keys[n++], sizeof(rc.keys[0]), "packs/%s", index_hex);
	r = store_batch(b->store, n, 64, recheck_op, &rc, res);
	if (r < 0)
		log_errno(r, "store '%s': checking what the tag will name", store_url(b->store));
	for (size_t i = 0; i < n && r == 0; i++) {
		char aside[96];

		if (res[i] >= 0)
			continue;
		if (res[i] != -ENOENT) {
			r = log_errno((int)res[i], "store '%s': checking %s", store_url(b->store),
			              rc.keys[i]);
			break;
		}
		/* moved aside by a phase one that counted on this build's lease:
		 * brought back here, as that collection's phase two would once the
		 * tag is written; then no phase two can delete it, which only
		 * deletes from aside */
		r = store_aside_key(rc.keys[i], aside, sizeof(aside));
		if (r == 0)
			r = store_move_sync(b->store, aside, rc.keys[i], false);
		if (r == -EEXIST)
			r = 0;   /* stored again meanwhile */
		if (r == -ENOENT)
			r = log_error(-ESTALE, "store '%s': %s, stored or found present by this build, "
			              "is gone (collected meanwhile: did the store's clock jump?); no "
			              "tag written: build again", store_url(b->store), rc.keys[i]);
		else if (r < 0)
			r = log_errno(r, "store '%s': bringing back %s", store_url(b->store),
			              rc.keys[i]);
	}
	free(rc.keys);
	return r;
}

int build_finish(struct build *b, const char *tag, struct build_summary *ret)
{
	_cleanup_(buf_freep) struct buf idx = BUF_INIT;
	struct image *img = NULL;
	struct image_info info;
	uint8_t name[HASH_SIZE];
	char key[1200];
	int r;

	if (b->in_file)
		return log_error(-EINVAL, "build: a file was left unfinished");
	r = stream_drain(b, &b->pack, true);
	if (r < 0)
		set_error(b, r);
	stop_workers(b);
	r = b->error;
	if (r < 0)
		return r;

	for (size_t i = 0; i < b->nresults; i++) {
		struct slot_result *res = &b->results[i];
		const struct slot_result *canon;
		struct image_chunk c;

		if (!res->done)
			return log_error(-EIO, "build: chunk %zu was never stored", i);
		canon = &b->results[res->canonical];
		memcpy(c.name, res->name, HASH_SIZE);
		c.size = res->size;
		c.stored_size = canon->stored_size;
		c.flags = canon->flags;
		r = image_tree_set_chunk(b->tree, (uint32_t)i, &c);
		if (r < 0)
			return r;
	}
	r = store_flush(b->store);
	if (r < 0)
		return log_errno(r, "store '%s': flushing chunks", store_url(b->store));
	r = image_write(b->tree, &idx);
	if (r < 0)
		return log_errno(r, "build: writing the index");
	hash128(idx.data, idx.len, name);
	hex_encode(name, HASH_SIZE, ret->index);
	snprintf(key, sizeof(key), "indexes/%s", ret->index);
	r = store_put_sync(b->store, key, idx.data, idx.len);
	if (r < 0)
		return log_errno(r, "store '%s': writing index %s", store_url(b->store), ret->index);
	r = image_open_mem(idx.data, idx.len, &img);
	if (r < 0)
		return log_errno(r, "build: the index just written does not open");
	if (b->p.pack) {
		r = build_pack(b->store, img, ret->index, &ret->pack_bytes);
		if (r < 0) {
			image_free(img);
			return r;
		}
	}
	if (tag) {
		char content[40];

		r = store_tag_key(tag, key, sizeof(key));
		if (r < 0) {
			image_free(img);
			return log_error(r, "tag '%s': not a valid reference: %s", tag,
			                 store_ref_invalid(tag) ?: "too long");
		}
		snprintf(content, sizeof(content), "%s\n", ret->index);
		/* what the tag names is there, and the tag lands while a
		 * collector still counts the lease live */
		r = recheck_objects(b, ret->index);
		if (r < 0) {
			image_free(img);
			return r;
		}
		r = store_lease_check(b->lease);
		if (r == 0)
			r = store_put_sync(b->store, key, content, strlen(content));
		if (r < 0) {
			image_free(img);
			return log_errno(r, "store '%s': writing tag '%s'", store_url(b->store), tag);
		}
	}
	image_get_info(img, &info);
	image_free(img);
	draw_progress(b, true);
	b->drew = false;
	ret->entries = b->entries;
	ret->bytes_in = b->bytes_in;
	ret->chunks = info.chunks;
	ret->chunk_bytes = info.data_bytes;
	ret->chunks_new = b->chunks_new;
	ret->bytes_stored = b->bytes_stored;
	ret->seconds = (double)(now_ns() - b->start_ns) / 1e9;
	return 0;
}
