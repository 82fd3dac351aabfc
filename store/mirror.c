/*
 * mirror.c — a list of stores read in order ("URL,URL,…").
 *
 * get and list go to the first store; when it fails, or a get's bytes fail
 * the caller's check (store_get_checked), the next store is asked, and so on;
 * the caller sees the first success, or the last store's error.  head, put
 * and flush go to the first store only: it is the one builds push to.
 *
 * A mirror that fails (anything but "no such object", which a lagging mirror
 * says, or bytes the caller refused, which say nothing about the next
 * object) is down: new objects pass it over for a back-off of 1 s, doubled
 * after each failed try up to 60 s, each shortened by up to a quarter at
 * random so that nodes that lost a mirror together do not all come back to
 * it at one moment.  The first object after the back-off
 * tries it again, and a success ends the back-off.  Without it a dead first
 * mirror cost every object its whole mirror fetch timeout (2 s,
 * MIRROR_FETCH_TIMEOUT_MS in store.c); now it costs one object per back-off.
 * An object asks the mirrors that are up first, in order, then those that
 * are down, in order, so that nothing fails only because a mirror was passed
 * over (a lagging mirror's "no such object" while the first is down).
 *
 * The children do the work (and their own retries); this layer only chains
 * their callbacks, so it runs wherever they complete: from the loop when one
 * is set (store_set_loop reaches the children), else from store_run_once.
 */
#include "store/store-internal.h"

enum mop_kind { MOP_GET, MOP_LIST };

/* One get or list making its way down the list. */
struct mop {
	struct store *s;
	enum mop_kind kind;
	size_t idx;                 /* the child asked now */
	bool *asked;                /* per child: asked already (in this allocation) */
	int64_t err;                /* the error of the last child in list order that failed */
	size_t err_idx;
	uint64_t off, len;
	store_check_fn check;
	store_get_cb get_cb;
	store_list_cb list_cb;
	void *ud;
	char key[];
};

struct mop_child {
	uint64_t down_until;        /* now_ns() before which new objects pass it over */
	uint64_t backoff;           /* the next failure's back-off; 0 while up */
};

struct mirror {
	unsigned inflight;          /* mops not yet completed */
	uint64_t backoff_min, backoff_max;   /* ns */
	struct mop_child *c;        /* one per child */
};

#define MIRROR_BACKOFF_MIN_MS 1000
#define MIRROR_BACKOFF_MAX_MS 60000

static struct mirror *M(struct store *s)
{
	return s->backend;
}

static int mop_start(struct mop *m);

static bool child_down(struct store *s, size_t i, uint64_t now)
{
	return now < M(s)->c[i].down_until;
}

/* The next child m asks: the first not asked yet that is up, else the first
 * not asked yet; false when every child was asked. */
static bool child_next(struct mop *m)
{
	struct store *s = m->s;
	uint64_t now = now_ns();

	for (int pass = 0; pass < 2; pass++)
		for (size_t j = 0; j < s->nchildren; j++)
			if (!m->asked[j] && (pass || !child_down(s, j, now))) {
				m->asked[j] = true;
				m->idx = j;
				return true;
			}
	return false;
}

static void child_failed(struct store *s, size_t i, int64_t res)
{
	struct mirror *mi = M(s);
	struct mop_child *c = &mi->c[i];
	uint64_t now = now_ns(), pass;

	/* objects asked before it went down fail too: one back-off for all */
	if (res == -ENOENT || res == -EBADMSG || s->nchildren < 2 || child_down(s, i, now))
		return;
	if (!c->backoff)
		c->backoff = mi->backoff_min;
	pass = c->backoff - c->backoff / 4 * (random_u32() % 1001) / 1000;
	c->down_until = now + pass;
	log_msg(LOG_WARN, "store '%s': %s; passed over for %.1f s", store_url(s->children[i]),
	        store_strerror((int)res), (double)pass / 1e9);
	c->backoff = MIN(c->backoff * 2, mi->backoff_max);
}

static void child_ok(struct store *s, size_t i)
{
	struct mop_child *c = &M(s)->c[i];

	if (c->backoff)
		log_msg(LOG_INFO, "store '%s': answers again", store_url(s->children[i]));
	c->backoff = 0;
	c->down_until = 0;
}

static void mop_end(struct mop *m)
{
	M(m->s)->inflight--;
	free(m);
}

/* After child m->idx failed with *res: try the next one, or set *res to what
 * the caller gets: the error of the last child in list order, as when the
 * mirrors are asked in list order (a lagging mirror's -ENOENT, say, not a
 * passed-over mirror's timeout). */
static bool mop_next(struct mop *m, int64_t *res)
{
	struct store *s = m->s;
	int r;

	for (;;) {
		size_t failed = m->idx;

		if (failed >= m->err_idx) {
			m->err = *res;
			m->err_idx = failed;
		}
		if (!child_next(m)) {
			child_failed(s, failed, *res);
			*res = m->err;
			return false;
		}
		/* a mirror that lags (no such object yet) is ordinary: say it quietly */
		log_msg(*res == -ENOENT ? LOG_INFO : LOG_WARN, "store '%s': %s: %s; trying the next mirror",
		        store_url(s->children[failed]), m->key, store_strerror((int)*res));
		child_failed(s, failed, *res);
		r = mop_start(m);
		if (r == 0)
			return true;
		*res = r;
	}
}

/* the caller's check, whose verdict (now or later) reaches mop_get_cb */
static int mop_check(void *ud, struct buf *data, struct store_check *later)
{
	struct mop *m = ud;

	return m->check(m->ud, data, later);
}

static void mop_get_cb(void *ud, int64_t res, struct buf *data)
{
	struct mop *m = ud;

	if (res < 0 && mop_next(m, &res))
		return;
	if (res >= 0) {
		child_ok(m->s, m->idx);
		/* served by a later mirror than the first, asked or passed over */
		if (m->idx > 0)
			STORE_COUNT(m->s, failovers, 1);
	}
	m->get_cb(m->ud, res, data);
	mop_end(m);
}

static void mop_list_cb(void *ud, int64_t res, char **names, size_t n)
{
	struct mop *m = ud;

	if (res < 0 && mop_next(m, &res))
		return;
	if (res >= 0)
		child_ok(m->s, m->idx);
	m->list_cb(m->ud, res, names, n);
	mop_end(m);
}

static int mop_start(struct mop *m)
{
	struct store *child = m->s->children[m->idx];

	if (m->kind == MOP_LIST)
		return store_list(child, m->key, mop_list_cb, m);
	if (m->check)
		return store_get_checked(child, m->key, m->off, m->len, mop_check, mop_get_cb, m);
	return store_get(child, m->key, m->off, m->len, mop_get_cb, m);
}

static int mop_new(struct store *s, enum mop_kind kind, const char *key, struct mop **ret)
{
	size_t kl = strlen(key);
	struct mop *m = calloc(1, sizeof(*m) + kl + 1 + s->nchildren);

	if (!m)
		return -ENOMEM;
	m->s = s;
	m->kind = kind;
	memcpy(m->key, key, kl + 1);
	m->asked = (bool *)(m->key + kl + 1);
	*ret = m;
	return 0;
}

/* Start m at the first child that is up (child_next); a child that refuses
 * at once is skipped. */
static int mop_launch(struct mop *m)
{
	int r;

	M(m->s)->inflight++;
	child_next(m);
	do {
		r = mop_start(m);
		if (r == 0)
			return 0;
	} while (child_next(m));
	M(m->s)->inflight--;
	free(m);
	return r;
}

static int mirror_get_checked(struct store *s, const char *key, uint64_t off, uint64_t len,
                              store_check_fn check, store_get_cb cb, void *ud)
{
	struct mop *m;
	int r = mop_new(s, MOP_GET, key, &m);

	if (r < 0)
		return r;
	m->off = off;
	m->len = len;
	m->check = check;
	m->get_cb = cb;
	m->ud = ud;
	return mop_launch(m);
}

static int mirror_get(struct store *s, const char *key, uint64_t off, uint64_t len,
                      store_get_cb cb, void *ud)
{
	return mirror_get_checked(s, key, off, len, NULL, cb, ud);
}

static int mirror_list(struct store *s, const char *prefix, store_list_cb cb, void *ud)
{
	struct mop *m;
	int r = mop_new(s, MOP_LIST, prefix, &m);

	if (r < 0)
		return r;
	m->list_cb = cb;
	m->ud = ud;
	return mop_launch(m);
}

static int mirror_head(struct store *s, const char *key, store_cb cb, void *ud)
{
	return store_head(s->children[0], key, cb, ud);
}

static int mirror_put(struct store *s, const char *key, const void *data, size_t len,
                      store_cb cb, void *ud)
{
	return store_put(s->children[0], key, data, len, cb, ud);
}

static int mirror_flush(struct store *s)
{
	return store_flush(s->children[0]);
}

static bool child_busy(struct store *c)
{
	return c->def_head || (c->ops->pending && c->ops->pending(c));
}

static unsigned mirror_pending(struct store *s)
{
	unsigned n = M(s)->inflight;

	for (size_t i = 0; i < s->nchildren; i++)
		n += child_busy(s->children[i]);
	return n;
}

/* Without a loop: drive every child that has work.  A child is waited on
 * only when nothing at all ran, so one slow mirror does not hold the others'
 * completions back longer than a turn. */
static int mirror_run_once(struct store *s, int wait)
{
	int ran = 0, r;

	for (size_t i = 0; i < s->nchildren; i++) {
		struct store *c = s->children[i];

		if (!c->def_head)
			continue;
		r = store_run_once(c);
		if (r < 0)
			return r;
		ran += r;
	}
	if (ran || !wait)
		return ran;
	for (size_t i = 0; i < s->nchildren; i++)
		if (child_busy(s->children[i]))
			return store_run_once(s->children[i]);
	return 0;
}

static void mirror_free(struct store *s)
{
	for (size_t i = 0; i < s->nchildren; i++)
		store_free(s->children[i]);
	free(s->children);
	free(M(s)->c);
	free(s->backend);
	free(s);
}

void store_mirror_set_backoff(struct store *s, uint64_t min_ms, uint64_t max_ms)
{
	M(s)->backoff_min = min_ms * 1000000;
	M(s)->backoff_max = MAX(min_ms, max_ms) * 1000000;
}

static const struct store_ops mirror_ops = {
	.get = mirror_get,
	.get_checked = mirror_get_checked,
	.head = mirror_head,
	.put = mirror_put,
	.list = mirror_list,
	.flush = mirror_flush,
	.run_once = mirror_run_once,
	.pending = mirror_pending,
	.free = mirror_free,
};

int store_mirror_open(struct store **children, size_t n, struct store **ret)
{
	struct mirror *m = calloc(1, sizeof(*m));
	struct mop_child *c = calloc(n, sizeof(*c));
	struct store *s = m && c ? store_alloc(&mirror_ops, m) : NULL;

	if (!s) {
		free(m);
		free(c);
		for (size_t i = 0; i < n; i++)
			store_free(children[i]);
		free(children);
		return -ENOMEM;
	}
	m->c = c;
	m->backoff_min = MIRROR_BACKOFF_MIN_MS * 1000000ULL;
	m->backoff_max = MIRROR_BACKOFF_MAX_MS * 1000000ULL;
	s->children = children;
	s->nchildren = n;
	store_set_fetch_timeout(s, s->fetch_timeout_ms);
	*ret = s;
	return 0;
}
