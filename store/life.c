/*
 * life.c — what a store offers garbage collection and copying, over every
 * backend: the shared layout, delete, move, create-if-absent, scans with
 * sizes and times, the store's clock, and a windowed batch of operations.
 * The protocol that uses them is store/GC.md; the backends' ways are in
 * store.h.
 */
#include <ctype.h>
#include <time.h>

#include "store/store-internal.h"

/* ---- layout ---------------------------------------------------------------- */

/* The part of key after its "chunks/" when key names a chunk (here or aside). */
static const char *chunk_part(const char *key)
{
	if (!strncmp(key, "aside/", 6))
		key += 6;
	if (strncmp(key, "chunks/", 7) || strlen(key + 7) < 2 || strchr(key + 7, '/'))
		return NULL;
	return key + 7;
}

int store_layout_path(const char *key, char *out, size_t outlen)
{
	const char *c = chunk_part(key);
	int n;

	if (c)
		n = snprintf(out, outlen, "%.*s%.2s/%s", (int)(c - key), key, c, c);
	else
		n = snprintf(out, outlen, "%s", key);
	return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

bool store_layout_key(const char *path, char *out, size_t outlen)
{
	const char *p = path;
	size_t pre;
	int n;

	if (!strncmp(p, "aside/", 6))
		p += 6;
	if (strncmp(p, "chunks/", 7)) {
		n = snprintf(out, outlen, "%s", path);
		return n >= 0 && (size_t)n < outlen && store_key_valid(out);
	}
	/* chunks/ab/abcd…: the fan-out directory must be the name's first two digits */
	p += 7;
	if (strlen(p) < 5 || p[2] != '/' || strncmp(p, p + 3, 2) || strchr(p + 3, '/'))
		return false;
	pre = (size_t)(p - path);
	n = snprintf(out, outlen, "%.*s%s", (int)pre, path, p + 3);
	return n >= 0 && (size_t)n < outlen;
}

bool store_key_has_aside(const char *key)
{
	return !strncmp(key, "chunks/", 7) || !strncmp(key, "indexes/", 8) ||
	       !strncmp(key, "profiles/", 9);
}

int store_aside_key(const char *key, char *out, size_t outlen)
{
	int n = snprintf(out, outlen, "aside/%s", key);

	return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

/* ---- operations -------------------------------------------------------------- */

int store_delete(struct store *s, const char *key, store_cb cb, void *ud)
{
	if (!store_key_valid(key))
		return -EINVAL;
	if (s->nchildren)
		return store_delete(s->children[0], key, cb, ud);
	if (!s->ops->del)
		return -EOPNOTSUPP;
	return s->ops->del(s, key, cb, ud);
}

int store_move(struct store *s, const char *from, const char *to, bool replace, store_cb cb,
               void *ud)
{
	if (!store_key_valid(from) || !store_key_valid(to))
		return -EINVAL;
	if (s->nchildren)
		return store_move(s->children[0], from, to, replace, cb, ud);
	if (!s->ops->move)
		return -EOPNOTSUPP;
	return s->ops->move(s, from, to, replace, cb, ud);
}

struct sync_op {
	bool done;
	int64_t res;
	struct store_entry *e;
	size_t n;
};

static void sync_op_cb(void *ud, int64_t res)
{
	struct sync_op *o = ud;

	o->done = true;
	o->res = res;
}

static void sync_scan_cb(void *ud, int64_t res, struct store_entry *e, size_t n)
{
	struct sync_op *o = ud;

	o->done = true;
	o->res = res;
	o->e = e;
	o->n = n;
}

static int sync_drive(struct store *s, struct sync_op *o, int r)
{
	if (r < 0)
		return r;
	while (!o->done) {
		r = store_run_once(s);
		if (r < 0)
			return r;
	}
	return 0;
}

int store_delete_sync(struct store *s, const char *key)
{
	struct sync_op o = { 0 };
	int r = sync_drive(s, &o, store_delete(s, key, sync_op_cb, &o));

	return r < 0 ? r : (int)o.res;
}

int store_move_sync(struct store *s, const char *from, const char *to, bool replace)
{
	struct sync_op o = { 0 };
	int r = sync_drive(s, &o, store_move(s, from, to, replace, sync_op_cb, &o));

	return r < 0 ? r : (int)o.res;
}

int store_put_new_sync(struct store *s, const char *key, const void *data, size_t len)
{
	char tmp[1200];
	struct sync_op o = { 0 };
	int r;

	if (!store_key_valid(key))
		return -EINVAL;
	if (s->nchildren)
		return store_put_new_sync(s->children[0], key, data, len);
	if (s->ops->put_new) {
		r = sync_drive(s, &o, s->ops->put_new(s, key, data, len, sync_op_cb, &o));
		if (r != -EOPNOTSUPP)
			return r < 0 ? r : (int)o.res;
	}
	/* a whole object under a name of its own, then moved into place without
	 * replacing: the server's rename decides which of two writers wins */
	snprintf(tmp, sizeof(tmp), "%s.new-%llx-%d", key, (unsigned long long)now_ns(),
	         (int)getpid());
	r = store_put_sync(s, tmp, data, len);
	if (r < 0)
		return r;
	r = store_move_sync(s, tmp, key, false);
	if (r < 0)
		(void)store_delete_sync(s, tmp);
	return r;
}

void store_entries_free(struct store_entry *e, size_t n)
{
	if (!e)
		return;
	for (size_t i = 0; i < n; i++)
		free(e[i].key);
	free(e);
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct store_entry *)a)->key, ((const struct store_entry *)b)->key);
}

int store_scan_sync(struct store *s, const char *prefix, struct store_entry **ret, size_t *ret_n)
{
	struct sync_op o = { 0 };
	int r;

	if (s->nchildren)
		return store_scan_sync(s->children[0], prefix, ret, ret_n);
	if (!s->ops->scan)
		return -EOPNOTSUPP;
	r = sync_drive(s, &o, s->ops->scan(s, prefix, sync_scan_cb, &o));
	if (r < 0 || o.res < 0) {
		store_entries_free(o.e, o.n);
		return r < 0 ? r : (int)o.res;
	}
	if (o.n)
		qsort(o.e, o.n, sizeof(*o.e), cmp_entry);
	*ret = o.e;
	*ret_n = o.n;
	return 0;
}

int store_now_sync(struct store *s, int64_t *ret)
{
	struct sync_op o = { 0 };
	int r;

	if (s->nchildren)
		return store_now_sync(s->children[0], ret);
	if (!s->ops->now)
		return -EOPNOTSUPP;
	r = sync_drive(s, &o, s->ops->now(s, sync_op_cb, &o));
	if (r < 0 || o.res < 0)
		return r < 0 ? r : (int)o.res;
	*ret = o.res;
	return 0;
}

/* ---- batches ----------------------------------------------------------------- */

struct batch {
	struct store *s;
	size_t n, next, done;
	unsigned inflight, window;
	store_batch_op op;
	void *ud;
	int64_t *res;
	int err;
};

struct batch_item {
	struct batch *b;
	size_t i;
};

static void batch_fill(struct batch *b);

static void batch_cb(void *ud, int64_t res)
{
	struct batch_item *it = ud;
	struct batch *b = it->b;

	if (b->res)
		b->res[it->i] = res;
	free(it);
	b->inflight--;
	b->done++;
	batch_fill(b);
}

static void batch_fill(struct batch *b)
{
	while (!b->err && b->next < b->n && b->inflight < b->window) {
		struct batch_item *it = malloc(sizeof(*it));
		int r;

		if (!it) {
			b->err = -ENOMEM;
			return;
		}
		*it = (struct batch_item){ b, b->next };
		r = b->op(b->s, b->next, batch_cb, it, b->ud);
		if (r < 0) {
			free(it);
			b->err = r;
			return;
		}
		b->next++;
		b->inflight++;
	}
}

int store_batch(struct store *s, size_t n, unsigned window, store_batch_op op, void *ud,
                int64_t *res)
{
	struct batch b = { .s = s, .n = n, .window = window ? window : 1, .op = op, .ud = ud,
	                   .res = res };

	batch_fill(&b);
	while (b.inflight) {
		int r = store_run_once(s);

		if (r < 0)
			return r;
	}
	return b.err;
}

/* ---- times ------------------------------------------------------------------- */

int store_parse_time(const char *s, size_t len, int64_t *ret)
{
	static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
	char buf[64];
	struct tm tm = { 0 };
	char mon[4];
	int n = 0;
	time_t t;

	if (len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, len);
	buf[len] = 0;
	if (len >= 20 && isdigit((unsigned char)buf[0]) && buf[4] == '-' && buf[10] == 'T') {
		/* ISO 8601: 2026-12-01T17:21:29[.123]Z */
		if (sscanf(buf, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
		           &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6)
			return -EINVAL;
		if (buf[n] == '.')
			for (n++; isdigit((unsigned char)buf[n]); n++)
				;
		if (strcmp(buf + n, "Z") && strcmp(buf + n, "+00:00"))
			return -EINVAL;
		tm.tm_mon--;
	} else {
		/* HTTP date: Tue, 01 Dec 2026 17:21:29 GMT */
		const char *m;

		if (sscanf(buf, "%*3s, %2d %3s %4d %2d:%2d:%2d GMT%n", &tm.tm_mday, mon, &tm.tm_year,
		           &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6 || buf[n])
			return -EINVAL;
		m = strstr(months, mon);
		if (!m || strlen(mon) != 3 || (m - months) % 3)
			return -EINVAL;
		tm.tm_mon = (int)(m - months) / 3;
	}
	if (tm.tm_year < 1970 || tm.tm_mon < 0 || tm.tm_mon > 11 || tm.tm_mday < 1 ||
	    tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
		return -EINVAL;
	tm.tm_year -= 1900;
	t = timegm(&tm);
	if (t == (time_t)-1)
		return -EINVAL;
	*ret = (int64_t)t;
	return 0;
}
