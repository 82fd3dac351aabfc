/*
 * json.c — a strict recursive-descent JSON parser (RFC 8259) building a
 * read-only DOM.  See json.h for what "strict" means here.
 *
 * Invariants: the parser never reads past end; recursion depth is bounded by
 * JSON_MAX_DEPTH; every allocation is owned by the tree being built, so an
 * error anywhere frees everything with one json_free() of the partial value.
 * Strings are unescaped into buffers sized by their escaped length, which is
 * never shorter than the result.
 */
#include <math.h>

#include "lib/json.h"
#include "lib/lib.h"

struct json_member {
	char *key;
	size_t key_len;
	struct json *value;
};

struct json {
	enum json_type type;
	union {
		bool b;
		struct {
			double d;
			int64_t i;
			int int_err;    /* 0: i is exact; -EINVAL: not an integer; -ERANGE */
		} num;
		struct {
			char *s;
			size_t len;
		} str;
		struct {
			struct json **items;
			size_t n;
		} arr;
		struct {
			struct json_member *m;
			size_t n;
			size_t *sorted;  /* member indexes in key order */
		} obj;
	};
};

struct parser {
	const uint8_t *start, *p, *end;
	unsigned depth;
	const char *msg;
	size_t err_off;
};

static int fail(struct parser *ps, const uint8_t *at, const char *msg)
{
	if (!ps->msg) {
		ps->msg = msg;
		ps->err_off = (size_t)(at - ps->start);
	}
	return -EBADMSG;
}

void json_free(struct json *v)
{
	size_t i;

	if (!v)
		return;
	switch (v->type) {
	case JSON_STRING:
		free(v->str.s);
		break;
	case JSON_ARRAY:
		for (i = 0; i < v->arr.n; i++)
			json_free(v->arr.items[i]);
		free(v->arr.items);
		break;
	case JSON_OBJECT:
		for (i = 0; i < v->obj.n; i++) {
			free(v->obj.m[i].key);
			json_free(v->obj.m[i].value);
		}
		free(v->obj.m);
		free(v->obj.sorted);
		break;
	default:
		break;
	}
	free(v);
}

static void skip_ws(struct parser *ps)
{
	while (ps->p < ps->end &&
	       (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
		ps->p++;
}

static struct json *new_value(enum json_type type)
{
	struct json *v = calloc(1, sizeof(*v));

	if (v)
		v->type = type;
	return v;
}

/* Length of the valid UTF-8 sequence at p (at most end - p bytes), or 0.
 * Refuses overlong forms, surrogates and code points past U+10FFFF. */
static size_t utf8_len(const uint8_t *p, const uint8_t *end)
{
	size_t avail = (size_t)(end - p);
	uint8_t c = p[0];

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		return avail >= 2 && (p[1] & 0xc0) == 0x80 ? 2 : 0;
	if (c >= 0xe0 && c <= 0xef) {
		uint8_t lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;

		if (avail < 3 || p[1] < lo || p[1] > hi || (p[2] & 0xc0) != 0x80)
			return 0;
		return 3;
	}
	if (c >= 0xf0 && c <= 0xf4) {
		uint8_t lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;

		if (avail < 4 || p[1] < lo || p[1] > hi || (p[2] & 0xc0) != 0x80 ||
		    (p[3] & 0xc0) != 0x80)
			return 0;
		return 4;
	}
	return 0;
}

static int hex4(const uint8_t *p, const uint8_t *end, uint32_t *ret)
{
	uint32_t v = 0;
	int i;

	if (end - p < 4)
		return -1;
	for (i = 0; i < 4; i++) {
		uint8_t c = p[i];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (uint32_t)(c - 'A' + 10);
		else
			return -1;
	}
	*ret = v;
	return 0;
}

static size_t put_utf8(char *out, uint32_t cp)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* A string starting at the opening quote; on success *ret is a malloc'd
 * NUL-terminated copy, unescaped, and *ret_len its length. */
static int parse_string(struct parser *ps, char **ret, size_t *ret_len)
{
	const uint8_t *q = ps->p + 1, *p;
	_cleanup_free_ char *out = NULL;
	size_t n = 0;

	/* Find the closing quote to size the buffer. */
	while (q < ps->end && *q != '"')
		q += *q == '\\' && q + 1 < ps->end ? 2 : 1;
	if (q >= ps->end)
		return fail(ps, ps->p, "unterminated string");
	out = malloc((size_t)(q - ps->p));
	if (!out)
		return -ENOMEM;

	for (p = ps->p + 1; p < q;) {
		uint8_t c = *p;

		if (c < 0x20)
			return fail(ps, p, "control character in string");
		if (c >= 0x80) {
			size_t k = utf8_len(p, q);

			if (!k)
				return fail(ps, p, "invalid UTF-8");
			memcpy(out + n, p, k);
			n += k;
			p += k;
			continue;
		}
		if (c != '\\') {
			out[n++] = (char)c;
			p++;
			continue;
		}
		c = p[1];  /* p + 1 < q: the scan above never ends on a backslash */
		p += 2;
		switch (c) {
		case '"': out[n++] = '"'; break;
		case '\\': out[n++] = '\\'; break;
		case '/': out[n++] = '/'; break;
		case 'b': out[n++] = '\b'; break;
		case 'f': out[n++] = '\f'; break;
		case 'n': out[n++] = '\n'; break;
		case 'r': out[n++] = '\r'; break;
		case 't': out[n++] = '\t'; break;
		case 'u': {
			uint32_t cp, lo;

			if (hex4(p, q, &cp) < 0)
				return fail(ps, p - 2, "invalid \\u escape");
			p += 4;
			if (cp >= 0xdc00 && cp <= 0xdfff)
				return fail(ps, p - 6, "lone low surrogate");
			if (cp >= 0xd800 && cp <= 0xdbff) {
				if (q - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, q, &lo) < 0 ||
				    lo < 0xdc00 || lo > 0xdfff)
					return fail(ps, p - 6, "lone high surrogate");
				p += 6;
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			}
			n += put_utf8(out + n, cp);
			break;
		}
		default:
			return fail(ps, p - 2, "invalid escape");
		}
	}
	out[n] = 0;
	ps->p = q + 1;
	*ret = TAKE_PTR(out);
	*ret_len = n;
	return 0;
}

static bool is_digit(uint8_t c)
{
	return c >= '0' && c <= '9';
}

static int parse_number(struct parser *ps, struct json *v)
{
	const uint8_t *s = ps->p, *p = s;
	char small[64];
	_cleanup_free_ char *big = NULL;
	char *copy, *endp;
	bool integer = true, neg = false;
	uint64_t mag = 0;
	size_t len;

	if (p < ps->end && *p == '-') {
		neg = true;
		p++;
	}
	if (p >= ps->end || !is_digit(*p))
		return fail(ps, p, "invalid number");
	if (*p == '0') {
		p++;
		if (p < ps->end && is_digit(*p))
			return fail(ps, p, "leading zero in number");
	} else {
		while (p < ps->end && is_digit(*p))
			p++;
	}
	if (p < ps->end && *p == '.') {
		integer = false;
		p++;
		if (p >= ps->end || !is_digit(*p))
			return fail(ps, p, "invalid number");
		while (p < ps->end && is_digit(*p))
			p++;
	}
	if (p < ps->end && (*p == 'e' || *p == 'E')) {
		integer = false;
		p++;
		if (p < ps->end && (*p == '+' || *p == '-'))
			p++;
		if (p >= ps->end || !is_digit(*p))
			return fail(ps, p, "invalid number");
		while (p < ps->end && is_digit(*p))
			p++;
	}
	len = (size_t)(p - s);

	v->num.int_err = integer ? 0 : -EINVAL;
	if (integer) {
		const uint8_t *d;

		for (d = s + neg; d < p; d++) {
			if (mag > (UINT64_MAX - 9) / 10) {
				v->num.int_err = -ERANGE;
				break;
			}
			mag = mag * 10 + (uint64_t)(*d - '0');
		}
		if (!v->num.int_err) {
			if (neg && mag <= (uint64_t)INT64_MAX + 1)
				v->num.i = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
			else if (!neg && mag <= (uint64_t)INT64_MAX)
				v->num.i = (int64_t)mag;
			else
				v->num.int_err = -ERANGE;
		}
	}

	/* strtod needs a NUL-terminated copy; the input need not have one. */
	if (len < sizeof(small)) {
		copy = small;
	} else {
		big = malloc(len + 1);
		if (!big)
			return -ENOMEM;
		copy = big;
	}
	memcpy(copy, s, len);
	copy[len] = 0;
	v->num.d = strtod(copy, &endp);
	if (endp != copy + len)
		return fail(ps, s, "invalid number");
	if (!isfinite(v->num.d))
		return fail(ps, s, "number out of range");
	ps->p = p;
	return 0;
}

static int parse_value(struct parser *ps, struct json **ret);

static int grow(void **arr, size_t *cap, size_t n, size_t size)
{
	void *p;
	size_t c;

	if (n < *cap)
		return 0;
	c = *cap ? *cap * 2 : 4;
	p = reallocarray(*arr, c, size);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = c;
	return 0;
}

static int parse_array(struct parser *ps, struct json *v)
{
	size_t cap = 0;
	int r;

	ps->p++;  /* '[' */
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == ']') {
		ps->p++;
		return 0;
	}
	for (;;) {
		struct json *item = NULL;

		r = grow((void **)&v->arr.items, &cap, v->arr.n, sizeof(*v->arr.items));
		if (r < 0)
			return r;
		r = parse_value(ps, &item);
		if (item)
			v->arr.items[v->arr.n++] = item;
		if (r < 0)
			return r;
		skip_ws(ps);
		if (ps->p >= ps->end)
			return fail(ps, ps->p, "unterminated array");
		if (*ps->p == ']') {
			ps->p++;
			return 0;
		}
		if (*ps->p != ',')
			return fail(ps, ps->p, "expected ',' or ']'");
		ps->p++;
	}
}

static int key_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	int c = memcmp(a, b, MIN(alen, blen));

	if (c)
		return c;
	return alen < blen ? -1 : alen > blen;
}

static int member_cmp(const void *x, const void *y, void *ud)
{
	const struct json_member *m = ud;
	const struct json_member *a = &m[*(const size_t *)x], *b = &m[*(const size_t *)y];

	return key_cmp(a->key, a->key_len, b->key, b->key_len);
}

static int parse_object(struct parser *ps, struct json *v)
{
	const uint8_t *start = ps->p;
	size_t cap = 0, i;
	int r;

	ps->p++;  /* '{' */
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == '}') {
		ps->p++;
		return 0;
	}
	for (;;) {
		struct json_member *m;

		skip_ws(ps);
		if (ps->p >= ps->end || *ps->p != '"')
			return fail(ps, ps->p, "expected a string key");
		r = grow((void **)&v->obj.m, &cap, v->obj.n, sizeof(*v->obj.m));
		if (r < 0)
			return r;
		m = &v->obj.m[v->obj.n];
		m->value = NULL;
		r = parse_string(ps, &m->key, &m->key_len);
		if (r < 0)
			return r;
		v->obj.n++;
		skip_ws(ps);
		if (ps->p >= ps->end || *ps->p != ':')
			return fail(ps, ps->p, "expected ':'");
		ps->p++;
		r = parse_value(ps, &m->value);
		if (r < 0)
			return r;
		skip_ws(ps);
		if (ps->p >= ps->end)
			return fail(ps, ps->p, "unterminated object");
		if (*ps->p == '}') {
			ps->p++;
			break;
		}
		if (*ps->p != ',')
			return fail(ps, ps->p, "expected ',' or '}'");
		ps->p++;
	}

	v->obj.sorted = reallocarray(NULL, v->obj.n, sizeof(size_t));
	if (!v->obj.sorted)
		return -ENOMEM;
	for (i = 0; i < v->obj.n; i++)
		v->obj.sorted[i] = i;
	qsort_r(v->obj.sorted, v->obj.n, sizeof(size_t), member_cmp, v->obj.m);
	for (i = 1; i < v->obj.n; i++)
		if (member_cmp(&v->obj.sorted[i - 1], &v->obj.sorted[i], v->obj.m) == 0)
			return fail(ps, start, "duplicate key in object");
	return 0;
}

static int parse_literal(struct parser *ps, const char *word)
{
	size_t n = strlen(word);

	if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
		return fail(ps, ps->p, "unexpected character");
	ps->p += n;
	return 0;
}

static int parse_value(struct parser *ps, struct json **ret)
{
	struct json *v;
	uint8_t c;
	int r;

	skip_ws(ps);
	if (ps->p >= ps->end)
		return fail(ps, ps->p, "unexpected end of input");
	c = *ps->p;
	switch (c) {
	case '{': v = new_value(JSON_OBJECT); break;
	case '[': v = new_value(JSON_ARRAY); break;
	case '"': v = new_value(JSON_STRING); break;
	case 't': case 'f': v = new_value(JSON_BOOL); break;
	case 'n': v = new_value(JSON_NULL); break;
	default:
		if (c != '-' && !is_digit(c))
			return fail(ps, ps->p, "unexpected character");
		v = new_value(JSON_NUMBER);
		break;
	}
	if (!v)
		return -ENOMEM;
	*ret = v;  /* owned by the caller from here on, even on failure */

	switch (v->type) {
	case JSON_OBJECT:
	case JSON_ARRAY:
		if (ps->depth >= JSON_MAX_DEPTH)
			return fail(ps, ps->p, "nesting too deep");
		ps->depth++;
		r = v->type == JSON_OBJECT ? parse_object(ps, v) : parse_array(ps, v);
		ps->depth--;
		return r;
	case JSON_STRING:
		return parse_string(ps, &v->str.s, &v->str.len);
	case JSON_BOOL:
		v->b = c == 't';
		return parse_literal(ps, v->b ? "true" : "false");
	case JSON_NULL:
		return parse_literal(ps, "null");
	default:
		return parse_number(ps, v);
	}
}

int json_parse(const void *data, size_t len, struct json **ret, struct json_error *err)
{
	struct parser ps = { .start = data, .p = data, .end = (const uint8_t *)data + len };
	struct json *v = NULL;
	int r;

	r = parse_value(&ps, &v);
	if (r >= 0) {
		skip_ws(&ps);
		if (ps.p != ps.end)
			r = fail(&ps, ps.p, "trailing data after the document");
	}
	if (r < 0) {
		json_free(v);
		if (err) {
			err->offset = ps.msg ? ps.err_off : 0;
			err->msg = ps.msg ? ps.msg : "out of memory";
		}
		return r;
	}
	*ret = v;
	return 0;
}

enum json_type json_type(const struct json *v)
{
	return v ? v->type : JSON_NULL;
}

bool json_is(const struct json *v, enum json_type type)
{
	return v && v->type == type;
}

const struct json *json_get(const struct json *v, const char *key)
{
	size_t lo = 0, hi, klen;

	if (!json_is(v, JSON_OBJECT) || !key)
		return NULL;
	klen = strlen(key);
	hi = v->obj.n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct json_member *m = &v->obj.m[v->obj.sorted[mid]];
		int c = key_cmp(key, klen, m->key, m->key_len);

		if (c == 0)
			return m->value;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

size_t json_len(const struct json *v)
{
	if (json_is(v, JSON_ARRAY))
		return v->arr.n;
	if (json_is(v, JSON_OBJECT))
		return v->obj.n;
	return 0;
}

const struct json *json_at(const struct json *v, size_t i)
{
	if (json_is(v, JSON_ARRAY))
		return i < v->arr.n ? v->arr.items[i] : NULL;
	if (json_is(v, JSON_OBJECT))
		return i < v->obj.n ? v->obj.m[i].value : NULL;
	return NULL;
}

const char *json_key_at(const struct json *v, size_t i, size_t *ret_len)
{
	if (!json_is(v, JSON_OBJECT) || i >= v->obj.n)
		return NULL;
	if (ret_len)
		*ret_len = v->obj.m[i].key_len;
	return v->obj.m[i].key;
}

const char *json_string(const struct json *v, size_t *ret_len)
{
	if (!json_is(v, JSON_STRING))
		return NULL;
	if (ret_len)
		*ret_len = v->str.len;
	return v->str.s;
}

const char *json_cstr(const struct json *v)
{
	if (!json_is(v, JSON_STRING) || memchr(v->str.s, 0, v->str.len))
		return NULL;
	return v->str.s;
}

const char *json_get_cstr(const struct json *v, const char *key)
{
	return json_cstr(json_get(v, key));
}

int json_bool(const struct json *v, bool *ret)
{
	if (!json_is(v, JSON_BOOL))
		return -EINVAL;
	*ret = v->b;
	return 0;
}

int json_int(const struct json *v, int64_t *ret)
{
	if (!json_is(v, JSON_NUMBER))
		return -EINVAL;
	if (v->num.int_err)
		return v->num.int_err;
	*ret = v->num.i;
	return 0;
}

int json_double(const struct json *v, double *ret)
{
	if (!json_is(v, JSON_NUMBER))
		return -EINVAL;
	*ret = v->num.d;
	return 0;
}

int json_parse_logged(const void *data, size_t len, const char *what, struct json **ret)
{
	struct json_error err;
	int r = json_parse(data, len, ret, &err);

	if (r == -EBADMSG)
		return log_error(r, "%s: invalid JSON at offset %zu: %s", what, err.offset, err.msg);
	if (r < 0)
		return log_errno(r, "%s", what);
	return 0;
}
