/*
 * write.c — keeping what a flight fetched: the chunk written to an unnamed
 * file and linked under its name (or, for cache_stage() with nobody
 * waiting, the stored bytes linked as a staged object), and the fallback to
 * memory when the disk is full.
 *
 * A file gets its name only once it is whole (O_TMPFILE, then a link through
 * /proc/PID/fd/N), so that no reader or other daemon ever sees a partial
 * chunk file.  The flight stays in the table until the link completes:
 * readers who come meanwhile are served from its bytes (fetch.c).
 */
#include <fcntl.h>

#include "cache/cache-internal.h"
#include "lib/loop.h"

static void write_end(struct flight *f)
{
	struct cache *c = f->c;

	cache_flight_free(f);
	cache_evict(c, 0);
}

static void stage_end(struct flight *f);

/* The disk is full (or failing): keep the chunk in memory instead. */
static void write_failed(struct flight *f, int err)
{
	struct cache *c = f->c;

	c->unkept++;
	if (f->keep_raw) {
		/* nothing was served: the stored bytes just are not kept */
		if (err != -ENOSPC && err != -EDQUOT)
			log_errno(err, "cache: writing staged chunk %s", f->zrel);
		if (f->fd >= 0) {
			close(f->fd);
			f->fd = -1;
		}
		cache_evict(c, f->wlen);
		stage_end(f);
		return;
	}
	if (err != -ENOSPC && err != -EDQUOT)
		log_errno(err, "cache: writing chunk file %s", f->rel);
	else
		stat_add(&c->st->memory_served, 1);  /* its readers were served from memory */
	if (f->fd >= 0) {
		close(f->fd);
		f->fd = -1;
	}
	cache_mem_insert(c, f->ch.name, f->ch.size, &f->data);
	/* make room so that the next write has a chance */
	cache_evict(c, f->ch.size);
	write_end(f);
}

/* A staged object was linked (res 0) or found there (EEXIST). */
static void stage_linked(struct flight *f, int res)
{
	struct cache *c = f->c;
	struct centry *e = cache_entry_find(c, f->ch.name);

	if (res == 0) {
		stat_add(&c->st->used, f->wlen);
		stat_add(&c->st->staged, 1);
		stat_add(&c->st->staged_bytes, f->wlen);
	}
	if (!e)
		e = cache_entry_add(c, f->ch.name, f->ch.size);
	if (e && e->on_disk && res == 0 && unlinkat(c->chunks_fd, f->zrel, 0) == 0) {
		/* the chunk file appeared meanwhile: one file per name */
		stat_sub(&c->st->used, f->wlen);
		stat_sub(&c->st->staged, 1);
		stat_sub(&c->st->staged_bytes, f->wlen);
	} else if (e && !entry_held(e)) {
		e->staged = true;
		e->zsize = (uint32_t)f->wlen;
		e->last_bump = now_ns();
		LIST_PUSH_HEAD(&c->lru, e, lprev, lnext);
	}
	stage_end(f);
}

static void link_cb(void *ud, int res)
{
	struct flight *f = ud;
	struct cache *c = f->c;
	struct centry *e;

	if (res < 0 && res != -EEXIST) {
		write_failed(f, res);
		return;
	}
	if (f->keep_raw) {
		stage_linked(f, res);
		return;
	}
	e = cache_entry_find(c, f->ch.name);
	if (e && e->on_disk) {
		/* known already (another daemon's file, seen meanwhile) */
	} else {
		if (!e)
			e = cache_entry_add(c, f->ch.name, f->ch.size);
		if (e) {
			if (e->staged)
				LIST_UNLINK(&c->lru, e, lprev, lnext);
			e->on_disk = true;
			e->size = f->ch.size;
			e->last_bump = now_ns();
			LIST_PUSH_HEAD(&c->lru, e, lprev, lnext);
			cache_entry_drop_mem(c, e);
		}
	}
	/* the bytes just served are verified: the reads that follow take them
	 * from memory rather than reading the file back */
	if (e && e->on_disk && e->size == f->ch.size)
		cache_hot_insert(c, e, &f->data);
	if (res == 0)
		stat_add(&c->st->used, f->ch.size);
	write_end(f);
}

static void write_cb(void *ud, int res);

/* Write what is left, then link the whole file under its name. */
static void write_more(struct flight *f)
{
	struct cache *c = f->c;
	int r;

	if (f->done < f->wlen) {
		r = loop_write(c->loop, f->fd, f->wbuf + f->done, f->wlen - f->done, f->done,
		               write_cb, f);
		if (r < 0)
			write_failed(f, r);
		return;
	}
	/* whole: give it its name (the fd stays open until then: linking an
	 * unnamed file goes through its /proc link) */
	snprintf(f->proc, sizeof(f->proc), "/proc/%d/fd/%d", (int)c->pid, f->fd);
	r = loop_linkat(c->loop, AT_FDCWD, f->proc, c->chunks_fd, f->keep_raw ? f->zrel : f->rel,
	                AT_SYMLINK_FOLLOW, link_cb, f);
	if (r < 0)
		write_failed(f, r);
}

static void write_cb(void *ud, int res)
{
	struct flight *f = ud;

	if (res <= 0) {
		write_failed(f, res < 0 ? res : -EIO);
		return;
	}
	f->done += (size_t)res;
	write_more(f);
}

static void tmpfile_cb(void *ud, int res)
{
	struct flight *f = ud;

	if (res < 0) {
		write_failed(f, res);
		return;
	}
	f->fd = res;
	f->done = 0;
	write_more(f);
}

/* Write f->data (the chunk) as its chunk file, or, keep_raw, f->raw (the
 * stored bytes) as its staged object. */
void cache_write_start(struct flight *f)
{
	char dir[3];
	int r;

	f->wbuf = f->keep_raw ? f->raw.data : f->data;
	f->wlen = f->keep_raw ? f->raw.len : f->ch.size;
	memcpy(dir, f->rel, 2);
	dir[2] = 0;
	memcpy(f->proc, dir, 3);  /* the openat path must outlive the call */
	r = loop_openat(f->c->loop, f->c->chunks_fd, f->proc, O_WRONLY | O_TMPFILE | O_CLOEXEC,
	                0644, tmpfile_cb, f);
	if (r < 0)
		write_failed(f, r);
}

/* A staging flight ends (its object written or not): its prefetchers are
 * answered; readers that joined after the check (the bytes were not decoded
 * for them) load the chunk anew, from the staged object when it is there. */
static void stage_end(struct flight *f)
{
	struct cache *c = f->c;
	struct waiter *w = f->w_head;
	struct cache_chunk ch = f->ch;
	struct store *s = f->store;

	f->w_head = f->w_tail = NULL;
	cache_flight_free(f);
	while (w) {
		struct waiter *next = w->next;
		struct centry *e = cache_entry_find(c, ch.name);
		int r = 0;

		if (!w->dst) {
			w->cb(w->ud, 0);
			free(w);
		} else if ((r = cache_start_load(c, s, &ch, w,
		                           e && e->staged ? LOAD_STAGED : LOAD_STORE)) < 0) {
			cache_waiter_fail(c, w, r);
			free(w);
		}
		w = next;
	}
	cache_evict(c, 0);
}
