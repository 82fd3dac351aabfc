/*
 * http-list.c — listing an http:// or s3:// store: store_list and
 * store_scan.  An http store is nginx with autoindex_format json: a listing
 * reads one directory per transfer, walking subdirectories depth first, and
 * takes the fan-out back out of chunk names (store_layout_key).  An s3 store
 * reads ListObjectsV2 pages (parsed in s3.c) until the last one.
 *
 * A directory that is missing, or gone since its parent was read, lists as
 * empty (http.c's xfer_done).  A scan collects "key\tsize\tmtime" lines while
 * pages arrive and turns them into entries only at the end.
 */
#include "lib/json.h"
#include "store/http-internal.h"

static int names_add(char ***v, size_t *n, size_t *cap, const char *a, const char *b)
{
	char *s;

	if (*n + 1 >= *cap) {
		size_t nc = *cap ? *cap * 2 : 16;
		char **nv = realloc(*v, nc * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		*v = nv;
		*cap = nc;
	}
	if (asprintf(&s, "%s%s", a, b) < 0)
		return -ENOMEM;
	(*v)[(*n)++] = s;
	(*v)[*n] = NULL;
	return 0;
}

/* A scan's names ("key\tsize\tmtime") as entries, handed to its callback. */
void http_scan_complete(struct xfer *x, int64_t res)
{
	struct store_entry *e = NULL;
	size_t n = 0;

	if (res >= 0 && x->nnames && !(e = calloc(x->nnames, sizeof(*e))))
		res = -ENOMEM;
	for (size_t i = 0; res >= 0 && i < x->nnames; i++) {
		char *t1 = strchr(x->names[i], '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;

		if (!t2)
			continue;
		*t1 = 0;
		e[n].size = strtoll(t1 + 1, NULL, 10);
		e[n].mtime = strtoll(t2 + 1, NULL, 10);
		e[n].key = x->names[i];
		x->names[i] = NULL;
		n++;
	}
	if (res < 0) {
		store_entries_free(e, n);
		e = NULL;
		n = 0;
	}
	/* names not taken (none in practice) go now: http_xfer_free stops at a NULL */
	for (size_t i = 0; i < x->nnames; i++) {
		free(x->names[i]);
		x->names[i] = NULL;
	}
	x->scan_cb(x->ud, res, e, n);
}

/* A listing arrived for x->prefix: collect files, queue subdirectories.
 * Returns 0 or -errno. */
int http_list_step(struct xfer *x)
{
	json_t *doc = NULL;
	size_t dcap = x->ndirs;
	int r;

	r = json_parse(x->body.data, x->body.len, &doc, NULL);
	if (r < 0 || !json_is_array(doc)) {
		json_decref(doc);
		return log_error(-EBADMSG, "store '%s': %s is not an autoindex_format json listing",
		                 x->h->s->url, x->url);
	}
	for (size_t i = 0; i < json_array_size(doc) && r >= 0; i++) {
		const json_t *e = json_array_get(doc, i);
		const char *name = json_get_cstr(e, "name"), *type = json_get_cstr(e, "type");

		if (!name || !type || !*name || name[0] == '.' || strchr(name, '/'))
			continue;
		if (!strcmp(type, "file") && x->scan_cb) {
			char path[2200], key[2200], line[2300];
			int64_t size = 0, mtime = 0;
			const char *mt = json_get_cstr(e, "mtime");

			(void)json_int(json_object_get(e, "size"), &size);
			if (!mt || store_parse_time(mt, strlen(mt), &mtime) < 0)
				mtime = 0;
			snprintf(path, sizeof(path), "%s%s", x->prefix, name);
			if (!store_layout_key(path, key, sizeof(key)))
				continue;
			snprintf(line, sizeof(line), "%s\t%lld\t%lld", key, (long long)size,
			         (long long)mtime);
			r = names_add(&x->names, &x->nnames, &x->cap, line, "");
			continue;
		}
		if (!strcmp(type, "directory")) {
			char *d;

			if (asprintf(&d, "%s%s/", x->prefix, name) < 0 ||
			    names_add(&x->dirs, &x->ndirs, &dcap, d, "") < 0)
				r = -ENOMEM;
			free(d);
		} else if (!strcmp(type, "file")) {
			char path[2200], key[2200];

			snprintf(path, sizeof(path), "%s%s", x->prefix, name);
			if (store_layout_key(path, key, sizeof(key)))
				r = names_add(&x->names, &x->nnames, &x->cap, key, "");
		}
	}
	json_decref(doc);
	return r;
}

static int list_url(struct xfer *x)
{
	char url[4096];
	size_t n;
	int r;

	/* the directory's path as it is (a fan-out directory "chunks/ab/" is not a
	 * key, and must not be laid out as one) */
	n = strlen(x->prefix);
	if (n == 0 || n >= sizeof(url))
		return -EINVAL;
	r = snprintf(url, sizeof(url), "%s/", x->h->base);
	if (r < 0 || (size_t)r >= sizeof(url))
		return -ENAMETOOLONG;
	r = url_encode(x->prefix, "-._~/:@", url + r, sizeof(url) - (size_t)r);
	if (r < 0)
		return r;
	free(x->url);
	x->url = strdup(url);
	return x->url ? 0 : -ENOMEM;
}

/* After a directory of x was read (r: http_list_step's result): read the next one,
 * or complete x. */
void http_list_advance(struct xfer *x, int r)
{
	if (r == 0 && x->ndirs) {
		free(x->prefix);
		x->prefix = x->dirs[--x->ndirs];
		x->dirs[x->ndirs] = NULL;
		r = 1;
	}
	if (r == 0) {
		if (!x->names && !(x->names = calloc(1, sizeof(*x->names))))
			r = -ENOMEM;
		http_xfer_complete(x, r);
		return;
	}
	if (r > 0)
		r = list_url(x);
	if (r < 0) {
		http_xfer_complete(x, r);
		return;
	}
	x->attempt = 0;
	http_enqueue(x->h, x);
}

/* s3: point x at the listing page after token (NULL: the first page). */
static int s3_list_url(struct xfer *x, const char *token)
{
	struct http_store *h = x->h;
	char pfx[4096], tok[4096], maxk[32] = "";
	char *url;
	int r;

	r = s3_uri_encode(x->prefix, false, pfx, sizeof(pfx));
	if (r == 0 && token)
		r = s3_uri_encode(token, false, tok, sizeof(tok));
	if (r < 0)
		return r;
	if (h->s3_max_keys)
		snprintf(maxk, sizeof(maxk), "&max-keys=%u", h->s3_max_keys);
	/* parameters in sorted order: the signature covers the query as sent */
	if (asprintf(&url, "%s/%s?%s%s%slist-type=2%s&prefix=%s", h->s3->endpoint, h->s3->bucket,
	             token ? "continuation-token=" : "", token ? tok : "", token ? "&" : "", maxk,
	             pfx) < 0)
		return -ENOMEM;
	free(x->url);
	x->url = url;
	return 0;
}

/* s3: a listing page arrived: collect its keys as store keys.  Returns 1
 * when another page follows (x->url points at it), 0 at the end, -errno. */
int http_s3_list_step(struct xfer *x)
{
	struct http_store *h = x->h;
	struct s3_listing l;
	size_t skip = *h->s3->prefix ? strlen(h->s3->prefix) + 1 : 0;
	int r = s3_parse_listing((const char *)x->body.data, x->body.len, &l);

	if (r == -EBADMSG)
		return log_error(r, "store '%s': %s is not a ListObjectsV2 answer", h->s->url, x->url);
	if (r < 0)
		return r;
	for (size_t i = 0; i < l.n && r >= 0; i++) {
		const char *k = l.keys[i];
		size_t kl = strlen(k);

		if (kl <= skip || strncmp(k, x->prefix, strlen(x->prefix)))
			continue;
		char key[2200], line[2300];

		k += skip;
		kl -= skip;
		/* the fan-out back out: chunks/ab/abcd… is chunks/abcd… */
		if (!store_layout_key(k, key, sizeof(key)))
			continue;
		if (x->scan_cb) {
			snprintf(line, sizeof(line), "%s\t%lld\t%lld", key, (long long)l.sizes[i],
			         (long long)l.mtimes[i]);
			r = names_add(&x->names, &x->nnames, &x->cap, line, "");
		} else {
			r = names_add(&x->names, &x->nnames, &x->cap, key, "");
		}
	}
	if (r >= 0 && l.truncated) {
		r = s3_list_url(x, l.next_token);
		if (r == 0)
			r = 1;
	}
	s3_listing_destroy(&l);
	return r;
}

void http_s3_list_advance(struct xfer *x, int r)
{
	if (r > 0) {
		x->attempt = 0;
		http_enqueue(x->h, x);
		return;
	}
	if (r == 0 && !x->names && !(x->names = calloc(1, sizeof(*x->names))))
		r = -ENOMEM;
	http_xfer_complete(x, r);
}

/* Only whole directories can be listed: prefix "tags/" or "tags/lib/". */
static int list_start(struct store *s, const char *prefix, store_list_cb cb, store_scan_cb scb,
                      void *ud)
{
	struct xfer *x;
	size_t n = strlen(prefix);
	int r;

	if (!H(s)->s3 && (n < 2 || prefix[n - 1] != '/'))
		return -EINVAL;
	r = http_xfer_new(s, X_LIST, NULL, &x);
	if (r < 0)
		return r;
	if (H(s)->s3) {
		const char *sp = H(s)->s3->prefix;

		if (asprintf(&x->prefix, "%s%s%s", sp, *sp ? "/" : "", prefix) < 0)
			x->prefix = NULL;
		r = x->prefix ? s3_list_url(x, NULL) : -ENOMEM;
	} else {
		x->prefix = strdup(prefix);
		r = x->prefix ? list_url(x) : -ENOMEM;
	}
	if (r < 0) {
		http_xfer_free(x);
		return r;
	}
	x->list_cb = cb;
	x->scan_cb = scb;
	x->ud = ud;
	http_xfer_submit(H(s), x);
	return 0;
}

int http_list(struct store *s, const char *prefix, store_list_cb cb, void *ud)
{
	return list_start(s, prefix, cb, NULL, ud);
}

int http_scan(struct store *s, const char *prefix, store_scan_cb cb, void *ud)
{
	return list_start(s, prefix, NULL, cb, ud);
}
