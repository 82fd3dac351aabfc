/*
 * profile.c — access profiles: which chunks of an image workloads read, in
 * the order they first read them (FORMAT.md, "Access profiles").
 *
 * A profile is a list of traces, each the chunk indices one recorded mount
 * read, first read first, for the one index whose name it carries.  Parsing
 * treats the bytes as hostile: every count is checked against what is left
 * before it is used, and a checksum covers the body.  Chunk indices are not
 * checked against an image here (a profile does not hold the index): the
 * reader that uses one checks them against the image it serves.
 */
#include "image/image-internal.h"

#define PROF_MAGIC "LZRPROF\0"
#define PROF_VERSION 1
#define PROF_HEADER 48            /* magic, version, ntraces, index, checksum */

struct image_trace {
	uint32_t *v;
	size_t n;
};

struct image_profile {
	uint8_t index[HASH_SIZE];
	struct image_trace *traces;
	size_t ntraces;
};

int image_profile_new(const uint8_t index[HASH_SIZE], struct image_profile **ret)
{
	struct image_profile *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	memcpy(p->index, index, HASH_SIZE);
	*ret = p;
	return 0;
}

void image_profile_free(struct image_profile *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->ntraces; i++)
		free(p->traces[i].v);
	free(p->traces);
	free(p);
}

int image_profile_add_trace(struct image_profile *p, const uint32_t *chunks, size_t n)
{
	struct image_trace *t;
	uint32_t *v;

	if (p->ntraces >= IMAGE_PROFILE_MAX_TRACES)
		return -E2BIG;
	if (n > IMAGE_PROFILE_MAX_CHUNKS)
		return -E2BIG;
	t = realloc(p->traces, (p->ntraces + 1) * sizeof(*t));
	if (!t)
		return -ENOMEM;
	p->traces = t;
	v = malloc(n ? n * sizeof(*v) : 1);
	if (!v)
		return -ENOMEM;
	if (n)
		memcpy(v, chunks, n * sizeof(*v));
	p->traces[p->ntraces++] = (struct image_trace){ v, n };
	return 0;
}

int image_profile_merge(struct image_profile *dst, const struct image_profile *src)
{
	if (memcmp(dst->index, src->index, HASH_SIZE))
		return -EXDEV;
	for (size_t i = 0; i < src->ntraces; i++) {
		int r = image_profile_add_trace(dst, src->traces[i].v, src->traces[i].n);

		if (r < 0)
			return r;
	}
	return 0;
}

const uint8_t *image_profile_index(const struct image_profile *p)
{
	return p->index;
}

size_t image_profile_traces(const struct image_profile *p)
{
	return p->ntraces;
}

const uint32_t *image_profile_trace(const struct image_profile *p, size_t i, size_t *ret_n)
{
	if (i >= p->ntraces) {
		*ret_n = 0;
		return NULL;
	}
	*ret_n = p->traces[i].n;
	return p->traces[i].v;
}

int image_profile_encode(const struct image_profile *p, struct buf *out)
{
	size_t start = out->len, body;
	uint8_t h[PROF_HEADER] = { 0 };
	int r;

	memcpy(h, PROF_MAGIC, 8);
	put_le32(h + 8, PROF_VERSION);
	put_le32(h + 12, (uint32_t)p->ntraces);
	memcpy(h + 16, p->index, HASH_SIZE);
	r = buf_append(out, h, sizeof(h));
	body = out->len;
	for (size_t i = 0; r == 0 && i < p->ntraces; i++) {
		const struct image_trace *t = &p->traces[i];
		uint8_t w[4];

		put_le32(w, (uint32_t)t->n);
		r = buf_append(out, w, 4);
		for (size_t j = 0; r == 0 && j < t->n; j++) {
			put_le32(w, t->v[j]);
			r = buf_append(out, w, 4);
		}
	}
	if (r < 0) {
		out->len = start;
		return r;
	}
	hash128(out->data + body, out->len - body, out->data + start + 32);
	return 0;
}

int image_profile_write_trace(const char *path, const uint8_t index[HASH_SIZE],
                              const uint32_t *chunks, size_t n)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	struct image_profile *p = NULL;
	int r = image_profile_new(index, &p);

	r = r ?: image_profile_add_trace(p, chunks, n);
	r = r ?: image_profile_encode(p, &b);
	r = r ?: write_file_atomic(path, b.data, b.len, 0644);
	image_profile_free(p);
	return r;
}

int image_profile_parse(const void *data, size_t len, struct image_profile **ret,
                        const char **ret_why)
{
	const uint8_t *d = data, *p, *end = d + len;
	struct image_profile *prof = NULL;
	uint8_t sum[HASH_SIZE];
	uint32_t ntraces;
	const char *why;
	int r = -EBADMSG;

	if (len < PROF_HEADER) {
		why = "too short for a profile";
		goto fail;
	}
	if (memcmp(d, PROF_MAGIC, 8)) {
		why = "not a lazyroot profile (bad magic)";
		goto fail;
	}
	if (le32(d + 8) != PROF_VERSION) {
		why = "unsupported profile version";
		r = -EPROTONOSUPPORT;
		goto fail;
	}
	ntraces = le32(d + 12);
	if (ntraces > IMAGE_PROFILE_MAX_TRACES) {
		why = "too many traces";
		goto fail;
	}
	hash128(d + PROF_HEADER, len - PROF_HEADER, sum);
	if (memcmp(sum, d + 32, HASH_SIZE)) {
		why = "checksum mismatch";
		goto fail;
	}
	r = image_profile_new(d + 16, &prof);
	if (r < 0) {
		why = "out of memory";
		goto fail;
	}
	p = d + PROF_HEADER;
	for (uint32_t i = 0; i < ntraces; i++) {
		uint32_t n;
		uint32_t *v;

		if ((size_t)(end - p) < 4) {
			why = "truncated trace";
			r = -EBADMSG;
			goto fail;
		}
		n = le32(p);
		p += 4;
		if (n > IMAGE_PROFILE_MAX_CHUNKS || (size_t)(end - p) / 4 < n) {
			why = "truncated trace";
			r = -EBADMSG;
			goto fail;
		}
		v = malloc(n ? (size_t)n * sizeof(*v) : 1);
		if (!v) {
			why = "out of memory";
			r = -ENOMEM;
			goto fail;
		}
		for (uint32_t j = 0; j < n; j++, p += 4)
			v[j] = le32(p);
		r = image_profile_add_trace(prof, v, n);
		free(v);
		if (r < 0) {
			why = "out of memory";
			goto fail;
		}
	}
	if (p != end) {
		why = "trailing bytes after the last trace";
		r = -EBADMSG;
		goto fail;
	}
	*ret = prof;
	return 0;
fail:
	image_profile_free(prof);
	if (ret_why)
		*ret_why = why;
	return r;
}

int image_profile_check(const struct image_profile *p, uint64_t nchunks, const char **ret_why)
{
	for (size_t i = 0; i < p->ntraces; i++)
		for (size_t j = 0; j < p->traces[i].n; j++)
			if (p->traces[i].v[j] >= nchunks) {
				if (ret_why)
					*ret_why = "a chunk index beyond the image's chunk table";
				return -EBADMSG;
			}
	return 0;
}
