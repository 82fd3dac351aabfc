/*
 * json.h — lazyroot's use of jansson: parsing with the limits our inputs
 * need, typed reads of single values, and writing.  Documents are jansson's
 * json_t, read with jansson's own accessors (json_object_get,
 * json_array_get, json_string_value ...), which accept NULL and answer as for
 * a missing value, so lookups chain without checks in between:
 * json_get_cstr(json_object_get(doc, "config"), "digest").
 *
 * Parsing (json_parse) is strict, for documents that come from outside: OCI
 * layouts and registries, docker archives, the node's control protocol.
 * The input must be UTF-8 without a byte-order mark, with no trailing data,
 * no comments, no trailing commas, no NUL in strings and no duplicate keys
 * within one object (accepting them would let two readers of one document
 * disagree on its meaning).  Nesting deeper than JSON_MAX_DEPTH and inputs
 * larger than JSON_MAX_SIZE are refused before jansson sees them, so its
 * recursion and memory stay bounded whatever the input.  Integers are kept
 * exactly as int64 (a size or offset round-trips unchanged); an integer
 * that does not fit is refused rather than rounded.
 *
 * Writing: one way in the tree, jansson's packing and compact dump
 * ({"a":1,"b":[2]}, members in insertion order, strings escaped by jansson).
 * A string that is not valid UTF-8 cannot be written: the write fails with
 * -EINVAL and says so, rather than sending text the reader would refuse.
 *
 * Thread-safety: a parsed document that no thread changes may be read from
 * any number of threads at once (jansson's reference counts are atomic).
 */
#ifndef LAZYROOT_JSON_H
#define LAZYROOT_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 64
#define JSON_MAX_SIZE (64u << 20)

struct buf;

/* Where and why a parse failed: offset is in bytes from the start of the
 * input; msg says why ("'[' or '{' expected near 'x'", "duplicate object
 * key near '\"a\"'", "nesting deeper than 64"). */
struct json_error {
	size_t offset;
	char msg[JSON_ERROR_TEXT_LENGTH];
};

/*
 * Parse len bytes of data (need not be NUL-terminated) into *ret, which the
 * caller releases with json_decref().  Any value may be the top one.
 * Returns 0, -EBADMSG for input that is not valid JSON or exceeds the limits
 * (err, optional, says where and why), or -ENOMEM.
 */
int json_parse(const void *data, size_t len, json_t **ret, struct json_error *err);
/* json_parse() that logs a failure as "WHAT: invalid JSON at offset N: why"
 * (or "WHAT: <errno>"), WHAT being the document's name in messages. */
int json_parse_logged(const void *data, size_t len, const char *what, json_t **ret);

/* Strings for use as C strings: the value, valid as long as v is, or NULL
 * when v is not a string. */
const char *json_cstr(const json_t *v);
/* Shorthand for json_cstr(json_object_get(v, key)). */
const char *json_get_cstr(const json_t *v, const char *key);
/* Booleans: *ret and 0, or -EINVAL when v is not a boolean (or NULL). */
int json_bool(const json_t *v, bool *ret);
/* Integers (written without fraction or exponent): *ret and 0, or -EINVAL
 * when v is not one. */
int json_int(const json_t *v, int64_t *ret);
/* Any number as a double: *ret and 0, or -EINVAL when not a number. */
int json_double(const json_t *v, double *ret);

/*
 * Writing.  json_pack_buf() and json_pack_file() take a jansson pack format
 * ("{s:s, s:I, s:b, s:o}": strings, json_int_t integers, int booleans,
 * values whose reference the call takes, "s?" writes null for a NULL
 * string) and append the compact text to b, or write it and a newline to f.
 * json_buf_add() and json_file_add() do the same for a value built by hand,
 * and take the reference to v in all cases (NULL v: a failed build).
 * All return 0, or -EINVAL (logged: a string not valid UTF-8, a bad format)
 * or -ENOMEM; on failure nothing is appended to b.
 */
int json_pack_buf(struct buf *b, const char *fmt, ...);
int json_pack_file(FILE *f, const char *fmt, ...);
int json_buf_add(struct buf *b, json_t *v);
int json_file_add(FILE *f, json_t *v);

/* A string value of len bytes (need not be NUL-terminated), or NULL when it
 * is not valid UTF-8 (logged) or memory runs out. */
json_t *json_str(const char *s, size_t len);
/* Text for people (an error message, a log): like json_str, but each byte
 * that is not part of valid UTF-8, and each NUL, becomes U+FFFD, so that a
 * message quoting an odd file name is still sent.  NULL: out of memory. */
json_t *json_text(const char *s, size_t len);
/* An integer value of an unsigned count or size.  JSON has no unsigned
 * type; the counters written never come near 2^63, and a larger value is
 * written as INT64_MAX rather than wrapping negative. */
json_t *json_u64(uint64_t v);
/* A real rounded to decimals places (3: milliseconds of a time in seconds);
 * not finite (JSON has no NaN) is written as 0. */
json_t *json_fixed(double v, unsigned decimals);

/* A local that holds a reference: jansson's json_auto_t, which releases it
 * at scope exit (json_decrefp). */

#endif
