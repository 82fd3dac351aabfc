/*
 * copy.c — objects from one store to another (`lazyroot image copy`): for
 * each key a fresh HEAD of the target (never a remembered answer: a
 * collection may have moved it aside since), and for those it lacks a GET
 * from the source, the caller's check, and a PUT to the target.  A window of
 * objects is in flight at once; both stores run on one io_uring loop (the
 * caller's), so a slow source and a slow target overlap.
 */
#include "lib/loop.h"
#include "store/store-internal.h"

#define COPY_WINDOW 64

struct copy {
	struct store *src, *dst;
	char *const *keys;
	size_t n, next;
	unsigned inflight, window;
	const struct store_copy_params *p;
	struct store_copy_report *rep;
	int err;
	uint64_t last_progress;
};

struct copy_item {
	struct copy *c;
	size_t i;
	struct buf data;
};

static void copy_fill(struct copy *c);

static void item_end(struct copy_item *it, int r)
{
	struct copy *c = it->c;

	if (r < 0 && !c->err)
		c->err = r;
	buf_free(&it->data);
	free(it);
	c->inflight--;
	c->rep->done++;
	if (c->p->progress && now_ns() - c->last_progress > 200000000ULL) {
		c->last_progress = now_ns();
		c->p->progress(c->p->ud, c->rep);
	}
	copy_fill(c);
}

static void put_cb(void *ud, int64_t res)
{
	struct copy_item *it = ud;
	struct copy *c = it->c;

	if (res < 0) {
		item_end(it, log_errno((int)res, "store '%s': writing %s", store_url(c->dst),
		                       c->keys[it->i]));
		return;
	}
	c->rep->copied++;
	c->rep->bytes += it->data.len;
	item_end(it, 0);
}

static void get_cb(void *ud, int64_t res, struct buf *data)
{
	struct copy_item *it = ud;
	struct copy *c = it->c;
	int r;

	if (res < 0) {
		item_end(it, log_errno((int)res, "store '%s': reading %s", store_url(c->src),
		                       c->keys[it->i]));
		return;
	}
	it->data = *data;
	*data = (struct buf)BUF_INIT;
	r = c->p->check ? c->p->check(c->p->ud, it->i, &it->data) : 0;
	if (r == 0)
		r = store_put(c->dst, c->keys[it->i], it->data.data, it->data.len, put_cb, it);
	if (r < 0)
		item_end(it, r);
}

static void head_cb(void *ud, int64_t res)
{
	struct copy_item *it = ud;
	struct copy *c = it->c;
	int r;

	/* an empty object is a torn write: send it again */
	if (res > 0) {
		c->rep->present++;
		item_end(it, 0);
		return;
	}
	if (res < 0 && res != -ENOENT) {
		item_end(it, log_errno((int)res, "store '%s': checking %s", store_url(c->dst),
		                       c->keys[it->i]));
		return;
	}
	r = store_get(c->src, c->keys[it->i], 0, 0, get_cb, it);
	if (r < 0)
		item_end(it, r);
}

static void copy_fill(struct copy *c)
{
	while (!c->err && c->next < c->n && c->inflight < c->window) {
		struct copy_item *it = calloc(1, sizeof(*it));
		int r;

		if (!it) {
			c->err = -ENOMEM;
			return;
		}
		it->c = c;
		it->i = c->next++;
		c->inflight++;
		if (c->p->skip_head)
			r = store_get(c->src, c->keys[it->i], 0, 0, get_cb, it);
		else
			r = store_head(c->dst, c->keys[it->i], head_cb, it);
		if (r < 0) {
			c->inflight--;
			free(it);
			c->err = r;
			return;
		}
	}
}

int store_copy_objects(struct store *src, struct store *dst, char *const *keys, size_t n,
                       const struct store_copy_params *p, struct store_copy_report *ret)
{
	struct copy c = { .src = src, .dst = dst, .keys = keys, .n = n, .p = p, .rep = ret,
	                  .window = p->window ? p->window : COPY_WINDOW };
	struct loop *l = src->loop;
	int r;

	*ret = (struct store_copy_report){ .objects = n };
	if (!l || dst->loop != l)
		return log_error(-EINVAL, "copying objects: both stores must run on one loop");
	copy_fill(&c);
	while (c.inflight) {
		r = loop_run_once(l, true);
		if (r < 0) {
			c.err = c.err ? c.err : r;
			break;
		}
	}
	if (p->progress)
		p->progress(p->ud, ret);
	return c.err;
}
