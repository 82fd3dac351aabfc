/*
 * gc.c — the two-phase collection of store/GC.md, on any backend, without a
 * lock: what it keeps is what the caller's mark says a tag reaches; what it
 * takes away goes aside first ("aside/<key>", where readers look on a miss)
 * and is deleted only once every lease that could have counted on it ended.
 *
 * The collection's state is one object, "gc/collection" (JSON):
 *   {"phase":"moving","started":T}                       phase one under way
 *   {"phase":"waiting","started":T,"moved_at":TL,"grace":G,
 *    "leases":["leases/…",…],"moved":N,"moved_bytes":B}   phase one done
 * created only when absent (store_put_new_sync: If-None-Match: * on S3), and
 * deleted at the end of phase two.  Collectors hold "gc" leases: one that
 * finds another live gc lease leaves (-EBUSY), so at most one works at a time
 * (two that start together may both leave; neither goes on unseen).
 */
#include <time.h>

#include "lib/json.h"
#include "store/store-internal.h"

#define GC_RECORD "gc/collection"
#define GC_WINDOW 32
/* Objects a collection may collect: every content-addressed area. */
static const char *const gc_areas[] = { "chunks/", "indexes/", "profiles/", "packs/" };

/* ---- key sets ---------------------------------------------------------------- */

int store_keys_add(struct store_keys *k, const char *key)
{
	if (k->n == k->cap) {
		size_t cap = k->cap ? k->cap * 2 : 1024;
		char **v = realloc(k->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		k->v = v;
		k->cap = cap;
	}
	k->v[k->n] = strdup(key);
	if (!k->v[k->n])
		return -ENOMEM;
	k->n++;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

void store_keys_sort(struct store_keys *k)
{
	size_t keep = 0;

	if (!k->n)
		return;
	qsort(k->v, k->n, sizeof(*k->v), cmp_str);
	for (size_t i = 0; i < k->n; i++) {
		if (keep && !strcmp(k->v[keep - 1], k->v[i]))
			free(k->v[i]);
		else
			k->v[keep++] = k->v[i];
	}
	k->n = keep;
}

bool store_keys_has(const struct store_keys *k, const char *key)
{
	return k->n && bsearch(&key, k->v, k->n, sizeof(*k->v), cmp_str) != NULL;
}

void store_keys_destroy(struct store_keys *k)
{
	for (size_t i = 0; i < k->n; i++)
		free(k->v[i]);
	free(k->v);
	*k = (struct store_keys){ 0 };
}

/* ---- the collector ------------------------------------------------------------- */

struct gc {
	struct store *s;
	const struct store_gc_params *p;
	struct store_gc_report *rep;
	struct store_lease *lease;
	/* a batch: the keys it works on */
	struct store_entry *items;
	size_t nitems;
	int64_t *res;
};

static void step(struct gc *g, const char *what)
{
	if (g->p->step)
		g->p->step(g->p->mark_ud, what);
}

/* The collector's lease must be live before anything is moved or deleted:
 * one that may have lapsed could be working beside a newer collector. */
static int fenced(struct gc *g)
{
	if (g->lease && !store_lease_live(g->lease))
		return store_lease_check(g->lease);
	return 0;
}

/* What a tag reaches, into live; what only reader leases reach (a node's
 * mounts of images no tag names any more), into held.  Both sorted. */
static int mark(struct gc *g, struct store_keys *live, struct store_keys *held)
{
	struct store_keys idx = { 0 };
	size_t readers = 0;
	int r;

	*live = (struct store_keys){ 0 };
	*held = (struct store_keys){ 0 };
	r = g->p->mark(g->s, g->p->mark_ud, live);
	if (r == 0) {
		store_keys_sort(live);
		/* listed after the tags: a mount's lease is written before it reads
		 * its index, so one whose tag went before that listing is seen here */
		r = store_leases_held(g->s, &idx, &readers);
		g->rep->operations += 2;
	}
	if (r == 0 && idx.n && !g->p->mark_index)
		r = log_error(-EOPNOTSUPP, "store '%s': %zu reader lease(s), and no way to follow "
		              "an index", store_url(g->s), readers);
	for (size_t i = 0; r == 0 && i < idx.n; i++) {
		char key[64];

		snprintf(key, sizeof(key), "indexes/%s", idx.v[i]);
		if (store_keys_has(live, key))
			continue;      /* a tag reaches it too */
		r = g->p->mark_index(g->s, g->p->mark_ud, idx.v[i], held);
		if (r == -ENOENT) {
			/* gone before this lease was seen: nothing of it to keep */
			log_msg(LOG_INFO, "store '%s': index %s of a reader lease is gone",
			        store_url(g->s), idx.v[i]);
			r = 0;
		}
	}
	if (r == 0) {
		g->rep->readers = readers;
		g->rep->held_indexes = 0;
		for (size_t i = 0; i < idx.n; i++) {
			char key[64];

			snprintf(key, sizeof(key), "indexes/%s", idx.v[i]);
			g->rep->held_indexes += !store_keys_has(live, key);
		}
	}
	store_keys_destroy(&idx);
	if (r < 0) {
		store_keys_destroy(live);
		store_keys_destroy(held);
		return r;
	}
	store_keys_sort(held);
	g->rep->operations++;
	return 0;
}

static int scan(struct gc *g, const char *prefix, struct store_entry **e, size_t *n)
{
	int r = store_scan_sync(g->s, prefix, e, n);

	g->rep->operations++;
	if (r < 0)
		return log_errno(r, "store '%s': listing %s", store_url(g->s), prefix);
	return 0;
}

static int now(struct gc *g, int64_t *t)
{
	int r = store_now_sync(g->s, t);

	g->rep->operations++;
	if (r < 0)
		return log_errno(r, "store '%s': reading the store's clock", store_url(g->s));
	return 0;
}

/* batch ops over g->items */
static int op_aside(struct store *s, size_t i, store_cb cb, void *cb_ud, void *ud)
{
	struct gc *g = ud;
	char ak[1200];
	int r = store_aside_key(g->items[i].key, ak, sizeof(ak));

	return r < 0 ? r : store_move(s, g->items[i].key, ak, true, cb, cb_ud);
}

static int op_restore(struct store *s, size_t i, store_cb cb, void *cb_ud, void *ud)
{
	struct gc *g = ud;

	return store_move(s, g->items[i].key, g->items[i].key + 6, false, cb, cb_ud);
}

static int op_delete(struct store *s, size_t i, store_cb cb, void *cb_ud, void *ud)
{
	struct gc *g = ud;

	return store_delete(s, g->items[i].key, cb, cb_ud);
}

/* Run op over items in slices, checking the collector's lease between them. */
static int run_batch(struct gc *g, struct store_entry *items, size_t n, store_batch_op op,
                     int64_t *res, const char *what)
{
	const size_t slice = 512;
	int r = 0;

	g->items = items;
	g->nitems = n;
	for (size_t at = 0; at < n && r == 0; at += slice) {
		size_t k = MIN(slice, n - at);

		r = fenced(g);
		if (r < 0)
			break;
		g->items = items + at;
		r = store_batch(g->s, k, g->p->window ? g->p->window : GC_WINDOW, op, g,
		                res + at);
		g->rep->operations += k;
		step(g, what);
	}
	if (r < 0)
		return log_errno(r, "store '%s': %s", store_url(g->s), what);
	return 0;
}

/* ---- the record ------------------------------------------------------------------ */

struct record {
	bool present;
	char phase[16];
	int64_t started, moved_at, grace;
	struct store_keys leases;
	uint64_t moved, moved_bytes;
};

static int record_read(struct gc *g, struct record *rec)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	json_t *doc = NULL;
	const json_t *v;
	const char *ph;
	int64_t n;
	int r;

	*rec = (struct record){ 0 };
	r = store_get_sync(g->s, GC_RECORD, &b);
	g->rep->operations++;
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return log_errno(r, "store '%s': reading %s", store_url(g->s), GC_RECORD);
	r = json_parse(b.data, b.len, &doc, NULL);
	ph = r == 0 ? json_get_cstr(doc, "phase") : NULL;
	if (!ph || (strcmp(ph, "moving") && strcmp(ph, "waiting"))) {
		json_decref(doc);
		return log_error(-EBADMSG, "store '%s': %s is corrupt: delete it, and run "
		                 "`lazyroot store gc` again", store_url(g->s), GC_RECORD);
	}
	rec->present = true;
	snprintf(rec->phase, sizeof(rec->phase), "%s", ph);
	if (json_int(json_object_get(doc, "started"), &n) == 0)
		rec->started = n;
	if (json_int(json_object_get(doc, "moved_at"), &n) == 0)
		rec->moved_at = n;
	if (json_int(json_object_get(doc, "grace"), &n) == 0)
		rec->grace = n;
	if (json_int(json_object_get(doc, "moved"), &n) == 0)
		rec->moved = (uint64_t)n;
	if (json_int(json_object_get(doc, "moved_bytes"), &n) == 0)
		rec->moved_bytes = (uint64_t)n;
	v = json_object_get(doc, "leases");
	for (size_t i = 0; r == 0 && i < json_array_size(v); i++) {
		const char *k = json_cstr(json_array_get(v, i));

		if (k)
			r = store_keys_add(&rec->leases, k);
	}
	json_decref(doc);
	store_keys_sort(&rec->leases);
	return r;
}

/* The record as stored: its phase and start, and in phase "waiting" what was
 * moved when and which leases it waits for.  NULL when memory runs out. */
static json_t *record_json(const struct record *rec)
{
	json_t *doc = json_pack("{s:s, s:I}", "phase", rec->phase, "started",
	                        (json_int_t)rec->started);
	json_t *leases;

	if (!doc || strcmp(rec->phase, "waiting"))
		return doc;
	leases = json_array();
	for (size_t i = 0; leases && i < rec->leases.n; i++)
		if (json_array_append_new(leases, json_string(rec->leases.v[i])) < 0) {
			json_decref(leases);
			leases = NULL;
		}
	if (json_object_update_new(doc, json_pack("{s:I, s:I, s:o, s:o, s:o}",
	                                          "moved_at", (json_int_t)rec->moved_at,
	                                          "grace", (json_int_t)rec->grace,
	                                          "moved", json_u64(rec->moved),
	                                          "moved_bytes", json_u64(rec->moved_bytes),
	                                          "leases", leases)) < 0) {
		json_decref(doc);
		return NULL;
	}
	return doc;
}

static int record_write(struct gc *g, const struct record *rec, bool create)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	int r = json_buf_add(&b, record_json(rec));

	r = r ?: buf_append(&b, "\n", 1);
	if (r < 0)
		return r;
	r = create ? store_put_new_sync(g->s, GC_RECORD, b.data, b.len) :
	             store_put_sync(g->s, GC_RECORD, b.data, b.len);
	g->rep->operations++;
	if (r == -EEXIST)
		return log_error(-EBUSY, "store '%s': another collection began at the same time",
		                 store_url(g->s));
	if (r < 0)
		return log_errno(r, "store '%s': writing %s", store_url(g->s), GC_RECORD);
	return 0;
}

/* ---- leases ----------------------------------------------------------------------- */

/* The live leases other than this collector's: gc leases into gcs (may be
 * NULL), builders' and copies' into others (may be NULL).  Reader leases are
 * neither: a collection follows what they hold (mark) instead of waiting for
 * them, which would wait for as long as a mount lives. */
static int live_leases(struct gc *g, int64_t t, struct store_keys *gcs, struct store_keys *others)
{
	struct store_entry *e = NULL;
	size_t n = 0;
	int r = scan(g, "leases/", &e, &n);

	for (size_t i = 0; r == 0 && i < n; i++) {
		char kind[32];

		if (g->lease && !strcmp(e[i].key, store_lease_key(g->lease)))
			continue;
		if (!store_lease_entry_live(&e[i], t, kind, sizeof(kind)) || !strcmp(kind, "read"))
			continue;
		if (!strcmp(kind, "gc"))
			r = gcs ? store_keys_add(gcs, e[i].key) : 0;
		else
			r = others ? store_keys_add(others, e[i].key) : 0;
	}
	store_entries_free(e, n);
	if (gcs)
		store_keys_sort(gcs);
	if (others)
		store_keys_sort(others);
	return r;
}

/* ---- phases ------------------------------------------------------------------------ */

static int phase_one(struct gc *g, struct record *rec)
{
	struct store_keys live, held;
	struct store_entry *cand = NULL;
	size_t ncand = 0, cap = 0;
	_cleanup_free_ int64_t *res = NULL;
	int64_t t;
	int r;

	r = mark(g, &live, &held);
	if (r < 0)
		return r;
	step(g, "marked");
	r = now(g, &t);
	for (size_t a = 0; r == 0 && a < ARRAY_SIZE(gc_areas); a++) {
		struct store_entry *e = NULL;
		size_t n = 0;

		r = scan(g, gc_areas[a], &e, &n);
		for (size_t i = 0; r == 0 && i < n; i++) {
			if (store_keys_has(&live, e[i].key)) {
				g->rep->live++;
				g->rep->live_bytes += (uint64_t)e[i].size;
				continue;
			}
			if (store_keys_has(&held, e[i].key)) {
				g->rep->held++;
				g->rep->held_bytes += (uint64_t)e[i].size;
				continue;
			}
			g->rep->unreachable++;
			g->rep->unreachable_bytes += (uint64_t)e[i].size;
			if (e[i].mtime > t - g->p->grace)
				continue;
			if (ncand == cap) {
				size_t nc = cap ? cap * 2 : 1024;
				struct store_entry *v = realloc(cand, nc * sizeof(*v));

				if (!v) {
					r = -ENOMEM;
					break;
				}
				cand = v;
				cap = nc;
			}
			cand[ncand++] = e[i];
			e[i].key = NULL;
		}
		store_entries_free(e, n);
	}
	store_keys_destroy(&live);
	store_keys_destroy(&held);
	if (r == 0 && g->p->dry_run) {
		for (size_t i = 0; i < ncand; i++) {
			g->rep->moved++;
			g->rep->moved_bytes += (uint64_t)cand[i].size;
		}
		store_entries_free(cand, ncand);
		return 0;
	}
	if (r == 0 && ncand && !(res = calloc(ncand, sizeof(*res))))
		r = -ENOMEM;
	if (r == 0)
		r = run_batch(g, cand, ncand, op_aside, res, "moving unreachable objects aside");
	for (size_t i = 0; r == 0 && i < ncand; i++) {
		if (res[i] == 0) {
			g->rep->moved++;
			g->rep->moved_bytes += (uint64_t)cand[i].size;
		} else if (res[i] != -ENOENT) {
			r = log_errno((int)res[i], "store '%s': moving %s aside", store_url(g->s),
			              cand[i].key);
		}
	}
	store_entries_free(cand, ncand);
	if (r < 0)
		return r;
	step(g, "moved");
	/* Every lease that exists now: whoever found a chunk present before it
	 * moved took its lease before that, so its lease is here, or it ended
	 * and its tag is there for phase two's mark. */
	r = now(g, &t);
	if (r == 0)
		r = live_leases(g, t, NULL, &rec->leases);
	if (r < 0)
		return r;
	snprintf(rec->phase, sizeof(rec->phase), "waiting");
	rec->moved_at = t;
	rec->grace = g->p->grace;
	rec->moved = g->rep->moved;
	rec->moved_bytes = g->rep->moved_bytes;
	r = fenced(g);
	if (r == 0)
		r = record_write(g, rec, false);
	if (r == 0)
		g->rep->phase_one = true;
	step(g, "recorded");
	return r;
}

/* Whether phase two of rec may run at store time t: 1 yes, 0 not yet (the
 * report says why), -errno. */
static int phase_two_ready(struct gc *g, const struct record *rec, int64_t t)
{
	struct store_keys still = { 0 };
	uint64_t waiting = 0;
	int r;

	r = live_leases(g, t, NULL, &still);
	for (size_t i = 0; r == 0 && i < rec->leases.n; i++)
		waiting += store_keys_has(&still, rec->leases.v[i]);
	store_keys_destroy(&still);
	if (r < 0)
		return r;
	/* the grace of the run that finishes: the leases carry safety, the grace
	 * only how long a mount of a replaced image still finds it (GC.md) */
	g->rep->leases_waited = waiting;
	g->rep->phase_two_at = rec->moved_at + MIN(rec->grace, g->p->grace);
	return waiting == 0 && t >= g->rep->phase_two_at;
}

static int phase_two(struct gc *g)
{
	struct store_keys live, held;
	struct store_entry *e = NULL, *back = NULL, *gone = NULL;
	size_t n = 0, nback = 0, ngone = 0;
	_cleanup_free_ int64_t *res = NULL;
	int r;

	r = mark(g, &live, &held);
	if (r < 0)
		return r;
	step(g, "marked again");
	r = scan(g, "aside/", &e, &n);
	if (r == 0 && n && (!(back = calloc(n, sizeof(*back))) || !(gone = calloc(n, sizeof(*gone))) ||
	                    !(res = calloc(n, sizeof(*res)))))
		r = -ENOMEM;
	for (size_t i = 0; r == 0 && i < n; i++) {
		if (store_keys_has(&live, e[i].key + 6) || store_keys_has(&held, e[i].key + 6))
			back[nback++] = e[i];
		else
			gone[ngone++] = e[i];
	}
	store_keys_destroy(&live);
	store_keys_destroy(&held);
	if (r == 0)
		r = run_batch(g, back, nback, op_restore, res, "bringing back what became reachable");
	for (size_t i = 0; r == 0 && i < nback; i++) {
		if (res[i] == 0)
			g->rep->restored++;
		else if (res[i] == -EEXIST)
			gone[ngone++] = back[i];   /* stored again since: the aside copy goes */
		else if (res[i] != -ENOENT)
			r = log_errno((int)res[i], "store '%s': bringing back %s", store_url(g->s),
			              back[i].key);
	}
	step(g, "restored");
	if (r == 0)
		r = run_batch(g, gone, ngone, op_delete, res, "deleting unreachable objects");
	for (size_t i = 0; r == 0 && i < ngone; i++) {
		if (res[i] == 0) {
			g->rep->deleted++;
			g->rep->deleted_bytes += (uint64_t)gone[i].size;
		} else if (res[i] != -ENOENT) {
			r = log_errno((int)res[i], "store '%s': deleting %s", store_url(g->s), gone[i].key);
		}
	}
	free(back);
	free(gone);
	store_entries_free(e, n);
	if (r < 0)
		return r;
	step(g, "deleted");
	r = fenced(g);
	if (r == 0) {
		r = store_delete_sync(g->s, GC_RECORD);
		g->rep->operations++;
		if (r == -ENOENT)
			r = 0;
		if (r < 0)
			log_errno(r, "store '%s': deleting %s", store_url(g->s), GC_RECORD);
	}
	if (r == 0)
		g->rep->phase_two = true;
	return r;
}

/* Wait a little (the tool's poll for phase two; never in a test's path to
 * readiness: a test that waits passes --wait). */
static void pause_s(unsigned s)
{
	struct timespec ts = { (time_t)s, 0 };

	nanosleep(&ts, NULL);
}

static int dry_run(struct gc *g)
{
	struct record rec;
	struct store_entry *e = NULL;
	size_t n = 0;
	int r = phase_one(g, &rec);

	/* what is aside now: the next phase two deletes what stays unreachable */
	if (r == 0)
		r = scan(g, "aside/", &e, &n);
	for (size_t i = 0; r == 0 && i < n; i++) {
		g->rep->deleted++;
		g->rep->deleted_bytes += (uint64_t)e[i].size;
	}
	store_entries_free(e, n);
	return r;
}

int store_gc(struct store *s, const struct store_gc_params *p, struct store_gc_report *ret)
{
	struct gc g = { .s = s, .p = p, .rep = ret };
	struct store_keys others = { 0 };
	struct record rec = { 0 };
	uint64_t start = now_ns();
	int64_t t;
	int r;

	*ret = (struct store_gc_report){ 0 };
	if (p->dry_run) {
		r = dry_run(&g);
		ret->seconds = (double)(now_ns() - start) / 1e9;
		return r;
	}
	r = store_lease_take(s, "gc", p->lease_ttl, &g.lease);
	if (r < 0)
		return r;
	ret->operations++;
	r = now(&g, &t);
	if (r == 0)
		r = live_leases(&g, t, &others, NULL);
	if (r == 0 && others.n)
		r = log_error(-EBUSY, "store '%s': another collector is at work (lease %s)",
		              store_url(s), others.v[0]);
	store_keys_destroy(&others);
	if (r == 0)
		r = record_read(&g, &rec);
	if (r == 0 && !rec.present) {
		rec.present = true;
		snprintf(rec.phase, sizeof(rec.phase), "moving");
		rec.started = t;
		r = record_write(&g, &rec, true);
	}
	/* a collection whose collector died in phase one is done again from the start:
	 * moving aside is idempotent, and its leases are listed after the moves */
	if (r == 0 && !strcmp(rec.phase, "moving")) {
		step(&g, "phase one");
		r = phase_one(&g, &rec);
	}
	while (r == 0) {
		r = now(&g, &t);
		if (r == 0)
			r = phase_two_ready(&g, &rec, t);
		if (r < 0)
			break;
		if (r == 1) {
			ret->leases_waited = 0;
			step(&g, "phase two");
			r = phase_two(&g);
			break;
		}
		if (!p->wait) {
			ret->waiting = true;
			r = 0;
			break;
		}
		pause_s(MIN(5U, MAX(1U, (p->lease_ttl ? p->lease_ttl : STORE_LEASE_TTL_DEFAULT) / 8)));
		r = fenced(&g);
	}
	store_keys_destroy(&rec.leases);
	store_lease_end(g.lease);
	ret->operations++;
	ret->seconds = (double)(now_ns() - start) / 1e9;
	return r;
}
