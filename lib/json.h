/*
 * json.h — a small, strict JSON parser (RFC 8259) with a read-only DOM, for
 * the documents lazyroot reads from outside: OCI image layouts (oci-layout,
 * index.json, manifests, configs) and docker's manifest.json.
 *
 * Strictness: the input must be UTF-8 without a byte-order mark, with no
 * trailing data, no comments, no trailing commas, no control characters or
 * invalid escapes in strings, no lone surrogates, and no duplicate keys
 * within one object (accepting them would let two readers of one document
 * disagree on its meaning).  Nesting is limited to JSON_MAX_DEPTH, so the
 * parser's stack use is bounded whatever the input.
 *
 * Cost: parsing is O(n log n) in the input size (object keys are sorted once
 * for duplicate detection and binary-search lookup); memory is a small
 * constant per value plus the unescaped strings.
 *
 * Thread-safety: a parsed document is immutable and may be read from any
 * number of threads at once.  Accessors accept NULL and answer as for a
 * missing value, so lookups chain without checks in between:
 * json_string(json_get(json_get(doc, "config"), "digest")).
 */
#ifndef LAZYROOT_JSON_H
#define LAZYROOT_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JSON_MAX_DEPTH 64

enum json_type {
	JSON_NULL,
	JSON_BOOL,
	JSON_NUMBER,
	JSON_STRING,
	JSON_ARRAY,
	JSON_OBJECT,
};

struct json;

/* Where and why a parse failed: offset is in bytes from the start of the
 * input; msg is a static string ("expected ':'", "duplicate key", ...). */
struct json_error {
	size_t offset;
	const char *msg;
};

/*
 * Parse len bytes of data (need not be NUL-terminated) into *ret, which the
 * caller frees with json_free().  Returns 0, -EBADMSG for input that is not
 * valid JSON (err, optional, says where), or -ENOMEM.
 */
int json_parse(const void *data, size_t len, struct json **ret, struct json_error *err);
/* json_parse() that logs a failure as "WHAT: invalid JSON at offset N: why"
 * (or "WHAT: <errno>"), WHAT being the document's name in messages. */
int json_parse_logged(const void *data, size_t len, const char *what, struct json **ret);
void json_free(struct json *v);

enum json_type json_type(const struct json *v);  /* JSON_NULL for NULL */
bool json_is(const struct json *v, enum json_type type);

/* Objects: the member named key (NUL-terminated; a key with an embedded NUL
 * is never found this way), or NULL when v is not an object or lacks it.
 * O(log members). */
const struct json *json_get(const struct json *v, const char *key);
/* Number of elements of an array or members of an object, else 0. */
size_t json_len(const struct json *v);
/* The i-th element of an array or the i-th member's value of an object (in
 * document order), or NULL when out of range. */
const struct json *json_at(const struct json *v, size_t i);
/* The i-th member's key of an object (NUL-terminated; length in *ret_len
 * when not NULL), or NULL. */
const char *json_key_at(const struct json *v, size_t i, size_t *ret_len);

/* Strings: the unescaped UTF-8 value, NUL-terminated (it may also contain
 * NULs: the length is in *ret_len when not NULL), or NULL when v is not a
 * string.  Valid as long as the document is. */
const char *json_string(const struct json *v, size_t *ret_len);
/* Strings for use as C strings: NULL when v is not a string or when it
 * holds a NUL. */
const char *json_cstr(const struct json *v);
/* Shorthand for json_cstr(json_get(v, key)). */
const char *json_get_cstr(const struct json *v, const char *key);

/* Booleans: *ret and 0, or -EINVAL when v is not a boolean. */
int json_bool(const struct json *v, bool *ret);
/* Numbers written as integers (no fraction, no exponent) that fit in int64:
 * *ret and 0; -ERANGE when too large, -EINVAL when not such a number. */
int json_int(const struct json *v, int64_t *ret);
/* Any number as a double: *ret and 0, or -EINVAL when not a number. */
int json_double(const struct json *v, double *ret);

#endif
