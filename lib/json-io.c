/*
 * json-io.c — lazyroot's use of jansson (lib/json.h): strict parsing with a
 * depth and size limit, typed reads, and the tree's one way of writing JSON.
 *
 * The depth limit is checked by a scan of the input before jansson parses
 * it: jansson's own limit (2048 levels, fixed when it is built) bounds its
 * recursion but is far above what any document we read needs, and a scan
 * refuses a deep document in one pass without building any of it.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "lib/json.h"
#include "lib/lib.h"

/* jansson's parse flags for outside input: a duplicate key is an error, any
 * value may be the top one, and the end-of-input check stays on. */
#define JSON_PARSE_FLAGS (JSON_REJECT_DUPLICATES | JSON_DECODE_ANY)
/* Compact output, a scalar allowed at the top, and reals with 15 significant
 * digits: every double a writer rounds to its unit (3 decimals for seconds)
 * prints as written, not as 0.12300000000000001. */
#define JSON_DUMP_FLAGS (JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15))

/* The offset of the first bracket that opens level JSON_MAX_DEPTH + 1, or
 * -1.  Brackets inside strings do not count; for an input that is not JSON
 * the answer may be wrong, and jansson refuses that input anyway. */
static ssize_t too_deep_at(const unsigned char *p, size_t len)
{
	unsigned depth = 0;
	bool in_string = false;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = p[i];

		if (in_string) {
			if (c == '\\')
				i++;
			else if (c == '"')
				in_string = false;
		} else if (c == '"') {
			in_string = true;
		} else if (c == '[' || c == '{') {
			if (++depth > JSON_MAX_DEPTH)
				return (ssize_t)i;
		} else if ((c == ']' || c == '}') && depth) {
			depth--;
		}
	}
	return -1;
}

int json_parse(const void *data, size_t len, json_t **ret, struct json_error *err)
{
	struct json_error ignored;
	json_error_t je;
	ssize_t deep;

	*ret = NULL;
	if (!err)
		err = &ignored;
	if (len > JSON_MAX_SIZE) {
		err->offset = 0;
		snprintf(err->msg, sizeof(err->msg), "larger than %u MiB", JSON_MAX_SIZE >> 20);
		return -EBADMSG;
	}
	deep = too_deep_at(data, len);
	if (deep >= 0) {
		err->offset = (size_t)deep;
		snprintf(err->msg, sizeof(err->msg), "nesting deeper than %d", JSON_MAX_DEPTH);
		return -EBADMSG;
	}
	*ret = json_loadb(data, len, JSON_PARSE_FLAGS, &je);
	if (*ret)
		return 0;
	if (json_error_code(&je) == json_error_out_of_memory)
		return -ENOMEM;
	err->offset = (size_t)je.position;
	snprintf(err->msg, sizeof(err->msg), "%s", je.text);
	return -EBADMSG;
}

int json_parse_logged(const void *data, size_t len, const char *what, json_t **ret)
{
	struct json_error err;
	int r = json_parse(data, len, ret, &err);

	if (r == -EBADMSG)
		return log_error(r, "%s: invalid JSON at offset %zu: %s", what, err.offset, err.msg);
	if (r < 0)
		return log_errno(r, "%s", what);
	return 0;
}

const char *json_cstr(const json_t *v)
{
	return json_string_value(v);
}

const char *json_get_cstr(const json_t *v, const char *key)
{
	return json_string_value(json_object_get(v, key));
}

int json_bool(const json_t *v, bool *ret)
{
	if (!json_is_boolean(v))
		return -EINVAL;
	*ret = json_is_true(v);
	return 0;
}

int json_int(const json_t *v, int64_t *ret)
{
	if (!json_is_integer(v))
		return -EINVAL;
	*ret = json_integer_value(v);
	return 0;
}

int json_double(const json_t *v, double *ret)
{
	if (!json_is_number(v))
		return -EINVAL;
	*ret = json_number_value(v);
	return 0;
}

/* ---- writing ------------------------------------------------------------- */

json_t *json_str(const char *s, size_t len)
{
	json_t *v = json_stringn(s, len);

	/* (out of memory is the other way to fail, and it is not worth a
	 * second attempt to tell the two apart) */
	if (!v)
		log_error(-EINVAL, "cannot write JSON: string `%.*s` is not valid UTF-8",
		          (int)(len > 200 ? 200 : len), s);
	return v;
}

/* The length of the UTF-8 sequence at p (at most n bytes), or 0 when the
 * bytes there are not one (overlong, surrogate, above U+10FFFF, cut short). */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
	size_t len = p[0] < 0x80 ? 1 : p[0] >= 0xc2 && p[0] <= 0xdf ? 2 :
	             p[0] >= 0xe0 && p[0] <= 0xef ? 3 : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : 0;

	if (!len || len > n)
		return 0;
	for (size_t i = 1; i < len; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0) ||
	    (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))
		return 0;
	return len;
}

json_t *json_text(const char *s, size_t len)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, k;

	while (i < len) {
		if (p[i] && (k = utf8_seq(p + i, len - i))) {
			if (buf_append(&b, p + i, k) < 0)
				return NULL;
			i += k;
		} else {
			if (buf_append(&b, "\xef\xbf\xbd", 3) < 0)
				return NULL;
			i++;
		}
	}
	return json_stringn((char *)b.data ? (char *)b.data : "", b.len);
}

json_t *json_u64(uint64_t v)
{
	return json_integer(v > INT64_MAX ? INT64_MAX : (json_int_t)v);
}

json_t *json_fixed(double v, unsigned decimals)
{
	double scale = pow(10, decimals);

	return json_real(isfinite(v) ? round(v * scale) / scale : 0);
}

static int dump_to_buf(const char *p, size_t n, void *data)
{
	return buf_append(data, p, n) < 0 ? -1 : 0;
}

int json_buf_add(struct buf *b, json_t *v)
{
	size_t len = b->len;
	int r = 0;

	if (!v)
		return -EINVAL;
	if (json_dump_callback(v, dump_to_buf, b, JSON_DUMP_FLAGS) < 0) {
		b->len = len;
		r = -ENOMEM;
	}
	json_decref(v);
	return r;
}

int json_file_add(FILE *f, json_t *v)
{
	int r = 0;

	if (!v)
		return -EINVAL;
	if (json_dumpf(v, f, JSON_DUMP_FLAGS) < 0 || fputc('\n', f) == EOF)
		r = -EIO;
	json_decref(v);
	return r;
}

/* json_vpack_ex() with the failure logged: its text names what was wrong
 * ("Invalid UTF-8 string", "NULL string"), so the caller's message need not. */
static json_t *vpack(const char *fmt, va_list ap)
{
	json_error_t je;
	json_t *v = json_vpack_ex(&je, 0, fmt, ap);

	if (!v && json_error_code(&je) != json_error_out_of_memory)
		log_error(-EINVAL, "cannot write JSON: %c%s", tolower((unsigned char)je.text[0]),
		          je.text[0] ? je.text + 1 : "");
	return v;
}

int json_pack_buf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	json_t *v;

	va_start(ap, fmt);
	v = vpack(fmt, ap);
	va_end(ap);
	return json_buf_add(b, v);
}

int json_pack_file(FILE *f, const char *fmt, ...)
{
	va_list ap;
	json_t *v;

	va_start(ap, fmt);
	v = vpack(fmt, ap);
	va_end(ap);
	return json_file_add(f, v);
}
