/*
 * fetch.c — flights: loading one chunk once for every reader that wants it.
 * A flight gets the chunk's bytes by hashing the chunk file found on disk,
 * by decoding the staged object, or by fetching it from the store (at most
 * max_fetches at a time, the rest queued), then serves its waiters and hands
 * fetched bytes to write.c.
 *
 * Bytes reach a waiter only once verified: hashed here (a chunk file is
 * read whole and hashed every time it is read from the disk; its bytes then
 * stay on the hot LRU a while, evict.c), or decoded by chunk_decode() (on a
 * decoder thread when there are some, decode.c).  A
 * flight's callbacks never run from inside the cache_read() that started it:
 * early failures are deferred to the loop's next turn.
 */
#include <fcntl.h>
#include <sys/stat.h>
#include <zstd.h>

#include "cache/cache-internal.h"
#include "lib/loop.h"
#include "store/store.h"

#define CACHE_PACK_LOGGED 8         /* pack failures logged per cache, at most */

/* ---- completing readers ---------------------------------------------------- */

struct later {
	cache_cb cb;
	void *ud;
	int res;
};

static void later_run(void *ud)
{
	struct later *l = ud;

	l->cb(l->ud, l->res);
	free(l);
}

/* Run cb(ud, res) at the loop's next turn.  Fails only without memory. */
int cache_complete_later(struct cache *c, cache_cb cb, void *ud, int res)
{
	struct later *l = malloc(sizeof(*l));
	int r;

	if (!l)
		return -ENOMEM;
	*l = (struct later){ cb, ud, res };
	r = loop_defer(c->loop, later_run, l);
	if (r < 0)
		free(l);
	return r;
}

/* Serve w from verified bytes (data = the whole chunk) and run its callback. */
static void waiter_serve(struct cache *c, struct waiter *w, const struct cache_chunk *ch,
                         const uint8_t *data, bool hit)
{
	if (!w->dst) {
		w->cb(w->ud, 0);
		return;
	}
	memcpy(w->dst, data + w->off, w->len);
	cache_count_served(c, ch, w->len, w->image, hit);
	w->cb(w->ud, (int)w->len);
}

void cache_waiter_fail(struct cache *c, struct waiter *w, int res)
{
	stat_add(&c->st->errors, 1);
	w->cb(w->ud, res);
}

/* ---- flights --------------------------------------------------------------- */

struct flight **cache_flight_slot(struct cache *c, const uint8_t name[HASH_SIZE])
{
	struct flight **pp = &c->flights[name_key(name) % CACHE_FLIGHT_BUCKETS];

	while (*pp && memcmp((*pp)->ch.name, name, HASH_SIZE))
		pp = &(*pp)->hnext;
	return pp;
}

void cache_flight_free(struct flight *f)
{
	struct cache *c = f->c;
	struct flight **pp = cache_flight_slot(c, f->ch.name);

	if (*pp == f)
		*pp = f->hnext;
	if (f->fd >= 0)
		close(f->fd);
	buf_free(&f->raw);
	cache_buf_put(c, f->data);
	free(f);
	c->flights_live--;
}

/* Fail every waiter with res and end the flight. */
static void flight_fail(struct flight *f, int res)
{
	struct waiter *w = f->w_head;

	f->w_head = f->w_tail = NULL;
	while (w) {
		struct waiter *next = w->next;

		cache_waiter_fail(f->c, w, res);
		free(w);
		w = next;
	}
	cache_flight_free(f);
}

/* The bytes are verified: serve every waiter; later joiners are served at
 * once from data until the flight ends. */
static void flight_serve(struct flight *f)
{
	struct waiter *w = f->w_head;

	f->ready = true;
	f->w_head = f->w_tail = NULL;
	while (w) {
		struct waiter *next = w->next;

		waiter_serve(f->c, w, &f->ch, f->data, !f->fetched);
		free(w);
		w = next;
	}
}

static void flight_fail_later_run(void *ud)
{
	struct flight *f = ud;

	flight_fail(f, f->fail);
}

/* Fail the flight at the loop's next turn: the failure may be found inside
 * cache_read(), whose callbacks must not run from inside it.  Without memory
 * even for that, fail now. */
static void flight_fail_later(struct flight *f, int res)
{
	f->fail = res;
	if (loop_defer(f->c->loop, flight_fail_later_run, f) < 0)
		flight_fail(f, res);
}

static void fetch_start(struct flight *f);
static void fetch_next(struct cache *c);

static void flight_to_fetch(struct flight *f)
{
	struct cache *c = f->c;

	f->kind = FLIGHT_FETCH;
	f->done = 0;
	if (c->fetching < c->max_fetches) {
		fetch_start(f);
		return;
	}
	f->qnext = NULL;
	if (c->fq_tail)
		c->fq_tail->qnext = f;
	else
		c->fq_head = f;
	c->fq_tail = f;
}

/* -- verifying a file found on disk -- */

static void verify_failed(struct flight *f)
{
	struct cache *c = f->c;
	struct centry *e = cache_entry_find(c, f->ch.name);

	stat_add(&c->st->verify_failures, 1);
	stat_add(&c->st->corrupt, 1);
	/* once per file: it is unlinked here, and a fetch writes a new one */
	log_msg(LOG_WARN, "cache: chunk file %s is corrupt; dropped, fetching it again", f->rel);
	if (f->fd >= 0) {
		close(f->fd);
		f->fd = -1;
	}
	if (e)
		cache_entry_unlink(c, e, false);
	flight_to_fetch(f);
}

static void verify_read_cb(void *ud, int res)
{
	struct flight *f = ud;
	struct cache *c = f->c;
	uint8_t got[HASH_SIZE];
	struct centry *e;
	int r;

	if (res < 0) {
		verify_failed(f);
		return;
	}
	f->done += (size_t)res;
	if (res > 0 && f->done < f->ch.size) {
		r = loop_read(c->loop, f->fd, f->data + f->done, f->ch.size - f->done, f->done,
		              verify_read_cb, f);
		if (r < 0)
			flight_fail(f, r);
		return;
	}
	hash128(f->data, f->done, got);
	if (f->done != f->ch.size || memcmp(got, f->ch.name, HASH_SIZE)) {
		verify_failed(f);
		return;
	}
	flight_serve(f);
	e = cache_entry_find(c, f->ch.name);
	if (e && e->on_disk && e->size == f->ch.size)
		cache_hot_insert(c, e, &f->data);
	cache_flight_free(f);
}

static void verify_open_cb(void *ud, int res)
{
	struct flight *f = ud;
	struct cache *c = f->c;
	struct stat st;
	int r;

	if (res < 0) {
		/* evicted by another daemon since the scan: fetch it */
		struct centry *e = cache_entry_find(c, f->ch.name);

		if (e)
			cache_entry_remove(c, e);
		flight_to_fetch(f);
		return;
	}
	f->fd = res;
	if (fstat(f->fd, &st) < 0 || (uint64_t)st.st_size != f->ch.size) {
		verify_failed(f);
		return;
	}
	r = loop_read(c->loop, f->fd, f->data, f->ch.size, 0, verify_read_cb, f);
	if (r < 0)
		flight_fail(f, r);
}

/* Open f's chunk file or staged object (rel, under chunks/) through the ring,
 * then cb: with cold directory and inode caches (a new daemon after a reboot
 * or a dropped cache) an open waits for the disk, and the opens of a
 * sequential reader's chunks then overlap instead of stalling the loop one
 * after the other. */
static void open_start(struct flight *f, const char *rel, loop_cb cb)
{
	int r;

	r = loop_openat(f->c->loop, f->c->chunks_fd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0, cb,
	                f);
	if (r < 0)
		flight_fail_later(f, r);
}

/* -- fetching from the store -- */

static int check_verdict(struct flight *f, int r)
{
	struct cache *c = f->c;

	if (r < 0) {
		stat_add(&c->st->verify_failures, 1);
		/* a pack's failure is logged where the chunk object is fetched instead */
		if (!f->ch.in_pack)
			log_msg(LOG_ERR, "cache: chunk %s from %s fails verification", f->hex,
			        store_url(f->store));
		return -EBADMSG;
	}
	return 0;
}

static void decode_done(struct decode_job *j)
{
	struct flight *f = (struct flight *)((char *)j - offsetof(struct flight, job));
	struct buf raw = f->raw;

	f->raw = (struct buf)BUF_INIT;
	/* may end the flight (fetch_cb), or ask the next mirror (fetch_check) */
	store_check_done(f->later, check_verdict(f, j->res), &raw);
	buf_free(&raw);
}

static bool flight_has_reader(const struct flight *f)
{
	for (const struct waiter *w = f->w_head; w; w = w->next)
		if (w->dst)
			return true;
	return false;
}

/* Decode and verify what the store returned, into f->data: bytes that fail
 * are refused here, so that a store with mirrors asks the next one.  With
 * decoder threads, the work goes to them and the verdict comes later. */

static int fetch_check(void *ud, struct buf *data, struct store_check *later)
{
	struct flight *f = ud;
	struct cache *c = f->c;

	/* staging, with nobody waiting for the bytes: kept as they are, checked
	 * only for the decoded size their frame records (a truncated or wrong
	 * object makes a mirror fall over now; the hash is checked at first use) */
	f->keep_raw = f->stage && !flight_has_reader(f);
	if (f->keep_raw)
		return check_verdict(f, ZSTD_getFrameContentSize(data->data, data->len) ==
		                                f->ch.size ? 0 : -EBADMSG);
	/* a failed verification leaves its buffer: same size, reuse it */
	if (!f->data)
		f->data = cache_buf_get(c, f->ch.size);
	if (!f->data)
		return -ENOMEM;
	if (c->dec) {
		f->raw = *data;
		*data = (struct buf)BUF_INIT;
		f->later = later;
		f->job = (struct decode_job){ .name = f->ch.name, .flags = f->ch.flags,
		                              .size = f->ch.size, .in = f->raw.data,
		                              .inlen = f->raw.len, .out = f->data,
		                              .urgent = flight_has_reader(f),
		                              .done = decode_done };
		decoder_submit(c->dec, &f->job);
		return STORE_CHECK_LATER;
	}
	return check_verdict(f, chunk_decode(c->dctx, f->ch.name, f->ch.flags, f->ch.size,
	                                     data->data, data->len, f->data));
}

static void fetch_cb(void *ud, int64_t res, struct buf *data)
{
	struct flight *f = ud;
	struct cache *c = f->c;

	c->fetching--;
	stat_sub(&c->st->inflight, 1);
	cache_count_latency(c, now_ns() - f->t0, f->alone);
	fetch_next(c);
	if (res < 0 && f->ch.in_pack) {
		/* the pack is a copy: the chunk object may still be good */
		char pack[HASH_HEX_SIZE];

		hex_encode(f->ch.pack, HASH_SIZE, pack);
		/* a bad pack fails for many chunks: the first few say so */
		if (c->pack_fallbacks++ < CACHE_PACK_LOGGED)
			log_msg(LOG_WARN, "cache: chunk %s from packs/%s in %s: %s; fetching "
			        "chunks/%s%s", f->hex, pack, store_url(f->store),
			        res == -EBADMSG ? "fails verification" : strerror((int)-res), f->hex,
			        c->pack_fallbacks == CACHE_PACK_LOGGED ? " (further ones not logged)" : "");
		f->ch.in_pack = false;
		flight_to_fetch(f);
		return;
	}
	if (res < 0) {
		if (res != -EBADMSG)
			log_errno((int)res, "cache: fetching chunk %s from %s", f->hex,
			          store_url(f->store));
		flight_fail(f, res == -ENOMEM ? -ENOMEM : -EIO);
		return;
	}
	stat_add(&c->st->fetched_bytes, data->len);
	stat_add(&c->st->fetched_raw_bytes, f->ch.size);
	f->fetched = true;
	if (f->keep_raw) {
		f->raw = *data;
		*data = (struct buf)BUF_INIT;
		cache_write_start(f);
		return;
	}
	flight_serve(f);
	cache_write_start(f);
}

/* -- decoding a staged object -- */

static void staged_failed(struct flight *f, const char *why)
{
	struct cache *c = f->c;
	struct centry *e = cache_entry_find(c, f->ch.name);

	stat_add(&c->st->verify_failures, 1);
	stat_add(&c->st->corrupt, 1);
	log_msg(LOG_WARN, "cache: staged chunk %s %s; dropped, fetching it again", f->zrel, why);
	if (f->fd >= 0) {
		close(f->fd);
		f->fd = -1;
	}
	buf_free(&f->raw);
	cache_staged_drop(c, e);
	flight_to_fetch(f);
}

/* The staged object decoded to the chunk's bytes: serve, then turn it into
 * the chunk file (dropping the object first: one file per name). */
static void staged_good(struct flight *f)
{
	struct cache *c = f->c;
	struct centry *e = cache_entry_find(c, f->ch.name);

	buf_free(&f->raw);
	stat_add(&c->st->staged_used, 1);
	flight_serve(f);
	cache_staged_drop(c, e);
	cache_write_start(f);
}

static void staged_decode_done(struct decode_job *j)
{
	struct flight *f = (struct flight *)((char *)j - offsetof(struct flight, job));

	if (j->res < 0)
		staged_failed(f, "fails verification");
	else
		staged_good(f);
}

static void staged_read_cb(void *ud, int res)
{
	struct flight *f = ud;
	struct cache *c = f->c;
	int r;

	if (res < 0) {
		staged_failed(f, "cannot be read");
		return;
	}
	f->raw.len += (size_t)res;
	if (res > 0 && f->raw.len < f->zlen) {
		r = loop_read(c->loop, f->fd, f->raw.data + f->raw.len, f->zlen - f->raw.len,
		              f->raw.len, staged_read_cb, f);
		if (r < 0)
			flight_fail(f, r);
		return;
	}
	close(f->fd);
	f->fd = -1;
	f->job = (struct decode_job){ .name = f->ch.name, .flags = CHUNK_ZSTD, .size = f->ch.size,
	                              .in = f->raw.data, .inlen = f->raw.len, .out = f->data,
	                              .urgent = flight_has_reader(f),
	                              .done = staged_decode_done };
	if (c->dec) {
		decoder_submit(c->dec, &f->job);
		return;
	}
	f->job.res = chunk_decode(c->dctx, f->ch.name, CHUNK_ZSTD, f->ch.size, f->raw.data,
	                          f->raw.len, f->data);
	staged_decode_done(&f->job);
}

static void staged_open_cb(void *ud, int res)
{
	struct flight *f = ud;
	struct cache *c = f->c;
	struct stat st;
	int r;

	if (res < 0) {
		/* evicted or trimmed by another process since: fetch it */
		struct centry *e = cache_entry_find(c, f->ch.name);

		if (e && e->staged) {
			e->staged = false;
			if (!e->on_disk)
				LIST_UNLINK(&c->lru, e, lprev, lnext);
			if (!entry_held(e) && !e->mem)
				cache_entry_remove(c, e);
		}
		flight_to_fetch(f);
		return;
	}
	f->fd = res;
	/* a zstd frame is never larger than its bound: anything more is not one */
	if (fstat(f->fd, &st) < 0 || st.st_size == 0 ||
	    (uint64_t)st.st_size > ZSTD_compressBound(f->ch.size)) {
		staged_failed(f, "has a wrong size");
		return;
	}
	f->zlen = (size_t)st.st_size;
	r = buf_reserve(&f->raw, f->zlen);
	if (r < 0) {
		flight_fail(f, r);
		return;
	}
	r = loop_read(c->loop, f->fd, f->raw.data, f->zlen, 0, staged_read_cb, f);
	if (r < 0)
		flight_fail(f, r);
}

static void fetch_start(struct flight *f)
{
	struct cache *c = f->c;
	char key[64];
	uint64_t off = 0, len = 0;
	int r;

	if (f->ch.in_pack) {
		char pack[HASH_HEX_SIZE];

		hex_encode(f->ch.pack, HASH_SIZE, pack);
		snprintf(key, sizeof(key), "packs/%s", pack);
		off = f->ch.pack_off;
		len = f->ch.stored_size;
	} else {
		snprintf(key, sizeof(key), "chunks/%s", f->hex);
	}
	f->alone = c->fetching == 0;
	c->fetching++;
	stat_add(&c->st->inflight, 1);
	f->t0 = now_ns();
	/* the store counts into the shared stats file (a pointer assignment) */
	store_set_counters(f->store, &c->st->store);
	r = store_get_checked(f->store, key, off, len, fetch_check, fetch_cb, f);
	if (r < 0) {
		c->fetching--;
		stat_sub(&c->st->inflight, 1);
		log_errno(r, "cache: starting fetch of chunk %s", f->hex);
		flight_fail_later(f, -EIO);
	}
}

static void fetch_next(struct cache *c)
{
	while (c->fq_head && c->fetching < c->max_fetches) {
		struct flight *f = c->fq_head;

		c->fq_head = f->qnext;
		if (!c->fq_head)
			c->fq_tail = NULL;
		fetch_start(f);
	}
}

/* Start loading ch for w (ownership of w passes on success): verify the
 * chunk file (LOAD_FILE), decode the staged object (LOAD_STAGED), fetch
 * (LOAD_STORE), or fetch to stage (LOAD_STAGE); join the flight when one
 * exists.  Returns 1 when this started a fetch from the store, else 0 or
 * -errno. */
int cache_start_load(struct cache *c, struct store *s, const struct cache_chunk *ch,
                      struct waiter *w, enum load_from from)
{
	struct flight **pp = cache_flight_slot(c, ch->name), *f = *pp;

	if (f) {
		if (f->ready) {
			/* bytes in hand while the file is written: serve now,
			 * answer at the next turn */
			int r;

			if (w->dst) {
				memcpy(w->dst, f->data + w->off, w->len);
				cache_count_served(c, ch, w->len, w->image, !f->fetched);
			}
			r = cache_complete_later(c, w->cb, w->ud, w->dst ? (int)w->len : 0);
			if (r == 0)
				free(w);
			return r;
		}
		w->next = NULL;
		f->w_tail->next = w;
		f->w_tail = w;
		return 0;
	}
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	c->flights_live++;
	f->c = c;
	f->ch = *ch;
	f->store = s;
	f->fd = -1;
	f->w_head = f->w_tail = w;
	w->next = NULL;
	hex_encode(ch->name, HASH_SIZE, f->hex);
	cache_chunk_rel(ch->name, f->rel);
	cache_staged_rel(ch->name, f->zrel);
	*pp = f;
	if (from == LOAD_FILE || from == LOAD_STAGED) {
		f->kind = from == LOAD_FILE ? FLIGHT_VERIFY : FLIGHT_STAGED;
		f->data = cache_buf_get(c, ch->size);
		if (!f->data) {
			*pp = NULL;
			free(f);
			c->flights_live--;
			return -ENOMEM;
		}
		if (from == LOAD_FILE)
			open_start(f, f->rel, verify_open_cb);
		else
			open_start(f, f->zrel, staged_open_cb);
		return 0;
	}
	f->stage = from == LOAD_STAGE;
	flight_to_fetch(f);
	return 1;
}
