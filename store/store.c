/*
 * store.c — backend selection by URL, the deferred-completion queue that
 * synchronous backends use, the _sync wrappers, and tags.
 *
 * In loop mode the deferred queue is run by a loop_defer() callback, which is
 * scheduled when the queue goes from idle to non-empty (one per turn, not one
 * per operation).  The scheduled callback holds a small kick object rather
 * than the store, so that a store freed before the loop turns is not touched.
 */
#include <limits.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "lib/loop.h"
#include "store/store-internal.h"

enum deferred_kind { DEF_PLAIN, DEF_GET, DEF_LIST, DEF_SCAN };

struct deferred {
	struct deferred *next;
	enum deferred_kind kind;
	void (*cb)(void);
	void *ud;
	int64_t res;
	struct buf data;
	char **names;
	struct store_entry *entries;
	size_t n;
};

struct store *store_alloc(const struct store_ops *ops, void *backend)
{
	struct store *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->ops = ops;
	s->backend = backend;
	s->fetch_timeout_ms = STORE_DEFAULT_FETCH_TIMEOUT_MS;
	s->counters = &s->own;
	return s;
}

/* Record the URL a store was opened with and hand the store out; frees it
 * on failure. */
static int set_url(struct store *s, const char *url, struct store **ret)
{
	s->url = strdup(url);
	if (!s->url) {
		store_free(s);
		return -ENOMEM;
	}
	*ret = s;
	return 0;
}

/* Whether url starts with a URL scheme (RFC 3986: a letter, then letters,
 * digits, '+', '-' or '.', then ':'), so that "dri:/x" is a scheme we do not
 * know rather than a relative directory of that name. */
static bool has_scheme(const char *url)
{
	if (!isalpha((unsigned char)*url))
		return false;
	for (url++; *url && *url != ':'; url++)
		if (!isalnum((unsigned char)*url) && !strchr("+-.", *url))
			return false;
	return *url == ':';
}

/* One store, not a list of mirrors.  A directory store is named by an
 * absolute path only: a relative one would mean another directory to the node
 * service than to the command that named it. */
static int open_one(const char *url, const struct store_options *o, bool create,
                    struct store **ret)
{
	static const struct store_options defaults;
	const char *path = NULL;
	struct store *s = NULL;
	int r;

	if (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8)) {
		r = store_http_open(url, o ? o : &defaults, &s);
	} else if (!strncmp(url, "s3://", 5) || !strncmp(url, "s3+http", 7)) {
		r = store_s3_open(url, o ? o : &defaults, &s);
	} else {
		if (!strncmp(url, "dir:", 4))
			path = url + 4;
		else if (has_scheme(url))
			return log_error(-EPROTONOSUPPORT, "store '%s': unsupported URL scheme "
			                 "(dir:, http://, https://, s3://)", url);
		else
			path = url;
		if (path[0] != '/')
			return log_error(-EINVAL, "store '%s': not an absolute path", url);
		r = store_dir_open(path, create, &s);
		if (!create && r == -ENOENT)
			return log_error(r, "store '%s': no such store", url);
		if (!create && r == -ENOTDIR)
			return log_error(r, "store '%s': not a directory", url);
	}
	if (r < 0)
		return r;
	s->opts = o;
	return set_url(s, url, ret);
}

const char *store_strerror(int err)
{
	return err == STORE_ERR_RESOLVE ? "cannot resolve host name" : strerror(-err);
}

int store_open(const char *url, struct store **ret)
{
	return store_open_with(url, NULL, ret);
}

int store_reopen(const struct store *s, struct store **ret)
{
	return store_open_with(s->url, s->opts, ret);
}

/* A list of mirrors: create applies to the first, the one builds push to. */
static int open_url(const char *url, const struct store_options *o, bool create,
                    struct store **ret)
{
	_cleanup_free_ char *copy = NULL;
	struct store **v = NULL, *s = NULL;
	size_t n = 0;
	char *save = NULL;
	int r = 0;

	if (!strchr(url, ','))
		return open_one(url, o, create, ret);
	copy = strdup(url);
	v = calloc(strlen(url) / 2 + 2, sizeof(*v));
	if (!copy || !v) {
		free(v);
		return -ENOMEM;
	}
	for (char *u = strtok_r(copy, ",", &save); u && r == 0; u = strtok_r(NULL, ",", &save)) {
		r = open_one(u, o, create && n == 0, &v[n]);
		if (r == 0)
			n++;
	}
	if (r == 0 && n < 2)
		r = log_error(-EINVAL, "store '%s': a list of mirrors needs two stores or more", url);
	if (r < 0) {
		for (size_t i = 0; i < n; i++)
			store_free(v[i]);
		free(v);
		return r;
	}
	r = store_mirror_open(v, n, &s);
	if (r < 0)
		return r;
	s->opts = o;
	return set_url(s, url, ret);
}

int store_open_with(const char *url, const struct store_options *o, struct store **ret)
{
	return open_url(url, o, false, ret);
}

int store_create(const char *url, const struct store_options *o, struct store **ret)
{
	return open_url(url, o, true, ret);
}

static void deferred_free(struct deferred *d)
{
	buf_free(&d->data);
	store_names_free(d->names);
	store_entries_free(d->entries, d->n);
	free(d);
}

struct store_kick {
	struct store *s;   /* NULL once the store is freed */
};

static int run_deferred(struct store *s);

static void kick_run(void *ud)
{
	struct store_kick *k = ud;
	struct store *s = k->s;

	free(k);
	if (!s)
		return;
	s->kick = NULL;
	run_deferred(s);
}

/* Make sure the loop runs the deferred queue at its next turn. */
static int kick_schedule(struct store *s)
{
	struct store_kick *k;
	int r;

	if (!s->loop || s->kick)
		return 0;
	k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	k->s = s;
	r = loop_defer(s->loop, kick_run, k);
	if (r < 0) {
		free(k);
		return r;
	}
	s->kick = k;
	return 0;
}

static unsigned backend_pending(struct store *s);

int store_set_loop(struct store *s, struct loop *l)
{
	int r;

	if (s->def_head || backend_pending(s))
		return -EBUSY;
	for (size_t i = 0; i < s->nchildren; i++) {
		r = store_set_loop(s->children[i], l);
		if (r < 0)
			return r;
	}
	s->loop = l;
	return 0;
}

/* Every mirror but the last gives up after a short while, so that a dead
 * mirror delays a read by seconds, not by the whole timeout. */
#define MIRROR_FETCH_TIMEOUT_MS 2000

void store_set_fetch_timeout(struct store *s, uint64_t ms)
{
	s->fetch_timeout_ms = ms;
	for (size_t i = 0; i < s->nchildren; i++)
		store_set_fetch_timeout(s->children[i], i + 1 < s->nchildren ?
		                        MIN(ms, MIRROR_FETCH_TIMEOUT_MS) : ms);
}

void store_set_counters(struct store *s, struct store_counters *c)
{
	s->counters = c ? c : &s->own;
	for (size_t i = 0; i < s->nchildren; i++)
		store_set_counters(s->children[i], s->counters);
}

const struct store_counters *store_get_counters(const struct store *s)
{
	return s->counters;
}

void store_free(struct store *s)
{
	if (!s)
		return;
	if (s->kick)
		s->kick->s = NULL;
	while (s->def_head) {
		struct deferred *d = s->def_head;

		s->def_head = d->next;
		deferred_free(d);
	}
	free(s->url);
	s->ops->free(s);
}

const char *store_url(const struct store *s)
{
	return s->url;
}

static int defer_push(struct store *s, enum deferred_kind kind, void (*cb)(void), void *ud,
                      int64_t res, struct deferred **ret)
{
	struct deferred *d = calloc(1, sizeof(*d));

	if (!d)
		return -ENOMEM;
	d->kind = kind;
	d->cb = cb;
	d->ud = ud;
	d->res = res;
	if (kick_schedule(s) < 0) {
		free(d);
		return -ENOMEM;
	}
	if (s->def_tail)
		s->def_tail->next = d;
	else
		s->def_head = d;
	s->def_tail = d;
	*ret = d;
	return 0;
}

int store_defer(struct store *s, store_cb cb, void *ud, int64_t res)
{
	struct deferred *d;

	return defer_push(s, DEF_PLAIN, (void (*)(void))cb, ud, res, &d);
}

int store_defer_get(struct store *s, store_get_cb cb, void *ud, int64_t res, struct buf *data)
{
	struct deferred *d;
	int r = defer_push(s, DEF_GET, (void (*)(void))cb, ud, res, &d);

	if (r < 0)
		return r;
	if (data) {
		d->data = *data;
		*data = (struct buf)BUF_INIT;
	}
	return 0;
}

int store_defer_list(struct store *s, store_list_cb cb, void *ud, int64_t res, char **names,
                     size_t n)
{
	struct deferred *d;
	int r = defer_push(s, DEF_LIST, (void (*)(void))cb, ud, res, &d);

	if (r < 0)
		return r;
	d->names = names;
	d->n = n;
	return 0;
}

int store_defer_scan(struct store *s, store_scan_cb cb, void *ud, int64_t res,
                     struct store_entry *e, size_t n)
{
	struct deferred *d;
	int r = defer_push(s, DEF_SCAN, (void (*)(void))cb, ud, res, &d);

	if (r < 0) {
		store_entries_free(e, n);
		return r;
	}
	d->entries = e;
	d->n = n;
	return 0;
}

bool store_key_valid(const char *key)
{
	const char *p = key;

	if (!*key || *key == '/' || strlen(key) > 1024)
		return false;
	while (*p) {
		const char *e = strchrnul(p, '/');
		size_t n = (size_t)(e - p);

		if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return false;
		for (const char *c = p; c < e; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				return false;
		p = *e ? e + 1 : e;
		if (*e && !*p)
			return false;  /* trailing '/' */
	}
	return true;
}

/* A get of a key with an aside area on one store (not a list of mirrors: each
 * of its stores looks aside itself): a miss asks "aside/<key>" once. */
struct aside_get {
	struct store *s;
	store_get_cb cb;
	void *ud;
	uint64_t off, len;
	bool aside;           /* the aside key is being asked now */
	char key[];
};

static void aside_get_cb(void *ud, int64_t res, struct buf *data)
{
	struct aside_get *a = ud;

	if (res == -ENOENT && !a->aside) {
		char ak[1100];
		int r = store_aside_key(a->key, ak, sizeof(ak));

		a->aside = true;
		if (r == 0)
			r = a->s->ops->get(a->s, ak, a->off, a->len, aside_get_cb, a);
		if (r == 0)
			return;
	}
	a->cb(a->ud, res, data);
	free(a);
}

/* Start a get of key on a backend, looking aside on a miss where key has an
 * aside area. */
static int get_with_aside(struct store *s, const char *key, uint64_t off, uint64_t len,
                          store_get_cb cb, void *ud)
{
	struct aside_get *a;
	size_t kl = strlen(key);
	int r;

	if (s->nchildren || !store_key_has_aside(key))
		return s->ops->get(s, key, off, len, cb, ud);
	a = calloc(1, sizeof(*a) + kl + 1);
	if (!a)
		return -ENOMEM;
	*a = (struct aside_get){ s, cb, ud, off, len, false };
	memcpy(a->key, key, kl + 1);
	r = s->ops->get(s, key, off, len, aside_get_cb, a);
	if (r < 0)
		free(a);
	return r;
}

int store_get(struct store *s, const char *key, uint64_t off, uint64_t len, store_get_cb cb,
              void *ud)
{
	if (!store_key_valid(key))
		return -EINVAL;
	return get_with_aside(s, key, off, len, cb, ud);
}

/* A checked get on a backend without mirrors: check, then hand over. */
struct store_check {
	void (*done)(struct store_check *sc, int verdict, struct buf *data);
};

struct checked_get {
	struct store_check sc;         /* first: the check's handle is the get */
	store_check_fn check;
	store_get_cb cb;
	void *ud;
	int64_t res;
};

static void checked_get_end(struct store_check *sc, int verdict, struct buf *data)
{
	struct checked_get *g = (struct checked_get *)sc;

	g->cb(g->ud, verdict < 0 ? verdict : g->res, data);
	free(g);
}

static void checked_get_cb(void *ud, int64_t res, struct buf *data)
{
	struct checked_get *g = ud;
	int r = 0;

	if (res >= 0) {
		g->res = res;
		r = g->check(g->ud, data, &g->sc);
		if (r == STORE_CHECK_LATER)
			return;
	}
	checked_get_end(&g->sc, res < 0 ? (int)res : r, data);
}

void store_check_done(struct store_check *later, int verdict, struct buf *data)
{
	later->done(later, verdict, data);
}

int store_get_checked(struct store *s, const char *key, uint64_t off, uint64_t len,
                      store_check_fn check, store_get_cb cb, void *ud)
{
	struct checked_get *g;
	int r;

	if (!store_key_valid(key))
		return -EINVAL;
	if (s->ops->get_checked)
		return s->ops->get_checked(s, key, off, len, check, cb, ud);
	g = malloc(sizeof(*g));
	if (!g)
		return -ENOMEM;
	*g = (struct checked_get){ { checked_get_end }, check, cb, ud, 0 };
	r = get_with_aside(s, key, off, len, checked_get_cb, g);
	if (r < 0)
		free(g);
	return r;
}

int store_head(struct store *s, const char *key, store_cb cb, void *ud)
{
	if (!store_key_valid(key))
		return -EINVAL;
	return s->ops->head(s, key, cb, ud);
}

int store_put(struct store *s, const char *key, const void *data, size_t len, store_cb cb,
              void *ud)
{
	if (!store_key_valid(key))
		return -EINVAL;
	return s->ops->put(s, key, data, len, cb, ud);
}

int store_list(struct store *s, const char *prefix, store_list_cb cb, void *ud)
{
	return s->ops->list(s, prefix, cb, ud);
}

static unsigned backend_pending(struct store *s)
{
	return s->ops->pending ? s->ops->pending(s) : 0;
}

/* Run the deferred queue as it is now: callbacks may queue more. */
static int run_deferred(struct store *s)
{
	int ran = 0;

	struct deferred *d = s->def_head, *stop = s->def_tail;

	s->def_head = s->def_tail = NULL;
	while (d) {
		struct deferred *next = d->next;
		bool last = d == stop;

		switch (d->kind) {
		case DEF_PLAIN:
			((store_cb)d->cb)(d->ud, d->res);
			break;
		case DEF_GET:
			((store_get_cb)d->cb)(d->ud, d->res, &d->data);
			break;
		case DEF_LIST:
			((store_list_cb)d->cb)(d->ud, d->res, d->names, d->n);
			break;
		case DEF_SCAN:
			/* the callback owns the entries */
			((store_scan_cb)d->cb)(d->ud, d->res, d->entries, d->n);
			d->entries = NULL;
			d->n = 0;
			break;
		}
		deferred_free(d);
		ran++;
		d = last ? NULL : next;
	}
	return ran;
}

int store_run_once(struct store *s)
{
	int ran;

	if (s->loop)
		return loop_run_once(s->loop, true);
	ran = run_deferred(s);
	if (s->ops->run_once && backend_pending(s)) {
		int r = s->ops->run_once(s, ran == 0);

		if (r < 0)
			return r;
		ran += r;
	}
	return ran;
}

int store_run(struct store *s)
{
	while (s->def_head || backend_pending(s)) {
		int r = store_run_once(s);

		if (r < 0)
			return r;
	}
	return 0;
}

struct sync_state {
	bool done;
	int64_t res;
	struct buf *out;
	char **names;
	size_t n;
};

static void sync_cb(void *ud, int64_t res)
{
	struct sync_state *st = ud;

	st->done = true;
	st->res = res;
}

static void sync_get_cb(void *ud, int64_t res, struct buf *data)
{
	struct sync_state *st = ud;

	st->done = true;
	st->res = res;
	if (res >= 0) {
		buf_free(st->out);
		*st->out = *data;
		*data = (struct buf)BUF_INIT;
	}
}

static void sync_list_cb(void *ud, int64_t res, char **names, size_t n)
{
	struct sync_state *st = ud;
	char **copy;

	st->done = true;
	st->res = res;
	if (res < 0)
		return;
	copy = calloc(n + 1, sizeof(*copy));
	if (!copy) {
		st->res = -ENOMEM;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		copy[i] = strdup(names[i]);
		if (!copy[i]) {
			store_names_free(copy);
			st->res = -ENOMEM;
			return;
		}
	}
	st->names = copy;
	st->n = n;
}

static int sync_wait(struct store *s, struct sync_state *st)
{
	while (!st->done) {
		int r = store_run_once(s);

		if (r < 0)
			return r;
	}
	return 0;
}

int store_get_sync(struct store *s, const char *key, struct buf *out)
{
	struct sync_state st = { .out = out };
	int r = store_get(s, key, 0, 0, sync_get_cb, &st);

	if (r < 0 || (r = sync_wait(s, &st)) < 0)
		return r;
	return st.res < 0 ? (int)st.res : 0;
}

int64_t store_head_sync(struct store *s, const char *key)
{
	struct sync_state st = { 0 };
	int r = store_head(s, key, sync_cb, &st);

	if (r < 0 || (r = sync_wait(s, &st)) < 0)
		return r;
	return st.res;
}

int store_put_sync(struct store *s, const char *key, const void *data, size_t len)
{
	struct sync_state st = { 0 };
	int r = store_put(s, key, data, len, sync_cb, &st);

	if (r < 0 || (r = sync_wait(s, &st)) < 0)
		return r;
	return (int)st.res;
}

int store_list_sync(struct store *s, const char *prefix, char ***ret_names, size_t *ret_n)
{
	struct sync_state st = { 0 };
	int r = store_list(s, prefix, sync_list_cb, &st);

	if (r < 0 || (r = sync_wait(s, &st)) < 0)
		return r;
	if (st.res < 0)
		return (int)st.res;
	*ret_names = st.names;
	*ret_n = st.n;
	return 0;
}

int store_flush(struct store *s)
{
	return s->ops->flush ? s->ops->flush(s) : 0;
}

void store_names_free(char **names)
{
	if (!names)
		return;
	for (char **p = names; *p; p++)
		free(*p);
	free(names);
}

bool store_is_index_name(const char *s)
{
	return strlen(s) == 32 && strspn(s, "0123456789abcdef") == 32;
}

int store_resolve(struct store *s, const char *ref, char ret_hex[33])
{
	char key[PATH_MAX];
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	int r;

	if (store_is_index_name(ref)) {
		memcpy(ret_hex, ref, 33);
		return 0;
	}
	r = store_tag_key(ref, key, sizeof(key));
	if (r < 0)
		return log_error(r, "image '%s': not a valid reference: %s", ref,
		                 store_ref_invalid(ref) ?: "too long");
	r = store_get_sync(s, key, &b);
	if (r == -ENOENT)
		return log_error(r, "image '%s': no such tag in store '%s'", ref, s->url);
	if (r < 0)
		return log_errno(r, "image '%s': reading tag from store '%s'", ref, s->url);
	while (b.len && (b.data[b.len - 1] == '\n' || b.data[b.len - 1] == ' '))
		b.data[--b.len] = 0;
	if (!store_is_index_name((char *)b.data))
		return log_error(-EBADMSG, "image '%s': tag object is corrupt", ref);
	memcpy(ret_hex, b.data, 33);
	return 0;
}

/* An index's key in the store ("indexes/<hex>") and the name it must hash to. */
static int index_key(const char *hex, char key[64], uint8_t want[HASH_SIZE])
{
	if (hex_decode(hex, want, HASH_SIZE) < 0)
		return -EINVAL;
	snprintf(key, 64, "indexes/%s", hex);
	return 0;
}

/* 0 when len bytes at p hash to want; else -EBADMSG, logged. */
static int index_check(const char *hex, const uint8_t want[HASH_SIZE], const void *p, size_t len)
{
	uint8_t got[HASH_SIZE];

	hash128(p, len, got);
	if (memcmp(want, got, HASH_SIZE))
		return log_error(-EBADMSG, "index %s: content does not match its name", hex);
	return 0;
}

int store_get_index(struct store *s, const char *hex, struct buf *out)
{
	char key[64];
	uint8_t want[HASH_SIZE];
	int r;

	if (index_key(hex, key, want) < 0)
		return -EINVAL;
	r = store_get_sync(s, key, out);
	if (r < 0)
		return log_errno(r, "index %s: reading from store '%s'", hex, s->url);
	return index_check(hex, want, out->data, out->len);
}

int store_open_index(struct store *s, const char *hex)
{
	char key[64];
	uint8_t want[HASH_SIZE];
	struct stat st;
	void *map;
	int fd, r = 0;

	if (index_key(hex, key, want) < 0)
		return -EINVAL;
	if (!s->ops->open_file)
		return -EOPNOTSUPP;
	fd = s->ops->open_file(s, key);
	if (fd == -ENOENT) {
		char ak[96];

		if (store_aside_key(key, ak, sizeof(ak)) == 0)
			fd = s->ops->open_file(s, ak);
		if (fd < 0)
			fd = -ENOENT;
	}
	if (fd < 0)
		return log_errno(fd, "index %s: reading from store '%s'", hex, s->url);
	if (fstat(fd, &st) < 0)
		r = -errno;
	else if (st.st_size == 0)
		r = -EBADMSG;
	if (r < 0)
		goto fail;
	/* Hashed through a mapping of its own, dropped at once: the caller maps
	 * the file again and only what it then touches becomes resident. */
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (map == MAP_FAILED) {
		r = -errno;
		goto fail;
	}
	r = index_check(hex, want, map, (size_t)st.st_size);
	munmap(map, (size_t)st.st_size);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
fail:
	close(fd);
	return log_errno(r, "index %s: reading from store '%s'", hex, s->url);
}

bool store_holds_packs(const struct store *s)
{
	return s->ops->open_file && s->ops->put_begin;
}

int64_t store_local_size(struct store *s, const char *key)
{
	struct stat st;
	int fd;
	int64_t r;

	if (!store_key_valid(key))
		return -EINVAL;
	if (!s->ops->open_file)
		return -EOPNOTSUPP;
	fd = s->ops->open_file(s, key);
	if (fd < 0)
		return fd;
	r = fstat(fd, &st) < 0 ? -errno : (int64_t)st.st_size;
	close(fd);
	return r;
}

int store_put_begin(struct store *s, const char *key)
{
	if (!store_key_valid(key))
		return -EINVAL;
	if (!s->ops->put_begin)
		return -EOPNOTSUPP;
	return s->ops->put_begin(s, key);
}

int store_put_end(struct store *s, const char *key, int *fd, bool commit)
{
	int r;

	if (*fd < 0)
		return -EBADF;
	r = store_key_valid(key) && s->ops->put_end ? s->ops->put_end(s, key, *fd, commit) : -EINVAL;
	close(*fd);
	*fd = -1;
	return r;
}
