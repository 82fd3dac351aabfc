/*
 * ref.c — image references (NAME[:TAG]) and the tag keys they name.
 *
 * A reference follows the OCI distribution grammar, so that a name built
 * here can be pushed to a registry and a name read from one is taken as is:
 *
 *   reference  := name [ ":" tag ]
 *   name       := [ domain "/" ] component ( "/" component )*     (<= 255 chars)
 *   domain     := host [ ":" port ]   host := label ( "." label )*
 *   label      := [A-Za-z0-9] | [A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9]
 *   component  := alnum ( separator alnum )*   alnum := [a-z0-9]+
 *   separator  := "." | "_" | "__" | "-"+
 *   tag        := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
 *
 * The first part of a name with more than one is a domain when it holds a
 * '.' or a ':' or is "localhost", as docker decides it.  Digest references
 * (NAME@sha256:…) are not tags; an index is named by its hex name instead.
 */
#include "store/store-internal.h"

#define REF_NAME_MAX 255
#define REF_TAG_MAX 128

static bool is_lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool is_alnum(char c)
{
	return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

/* component := alnum ( separator alnum )*, over s[0, len). */
static bool component_valid(const char *s, size_t len)
{
	size_t i = 0;

	for (;;) {
		size_t start = i, dashes = 0;

		while (i < len && is_lower_alnum(s[i]))
			i++;
		if (i == start)
			return false;  /* empty, or a separator first, last or doubled */
		if (i == len)
			return true;
		if (s[i] == '.') {
			i++;
		} else if (s[i] == '_') {
			i += i + 1 < len && s[i + 1] == '_' ? 2 : 1;
		} else {
			while (i < len && s[i] == '-')
				i++, dashes++;
			if (!dashes)
				return false;
		}
	}
}

/* domain := label ( "." label )* [ ":" port ], over s[0, len). */
static bool domain_valid(const char *s, size_t len)
{
	const char *colon = memchr(s, ':', len);
	size_t host = colon ? (size_t)(colon - s) : len;
	size_t i = 0;

	if (colon) {
		if (colon + 1 == s + len)
			return false;
		for (const char *p = colon + 1; p < s + len; p++)
			if (*p < '0' || *p > '9')
				return false;
	}
	while (i < host) {
		size_t start = i;

		while (i < host && (is_alnum(s[i]) || s[i] == '-'))
			i++;
		if (i == start || s[start] == '-' || s[i - 1] == '-')
			return false;
		if (i < host && s[i++] != '.')
			return false;
		if (i == host && s[i - 1] == '.')
			return false;
	}
	return host > 0;
}

static bool tag_valid(const char *t)
{
	size_t len = strlen(t);

	if (!len || len > REF_TAG_MAX || t[0] == '.' || t[0] == '-')
		return false;
	for (; *t; t++)
		if (!is_alnum(*t) && *t != '_' && *t != '.' && *t != '-')
			return false;
	return true;
}

const char *store_ref_invalid(const char *ref)
{
	const char *slash = strrchr(ref, '/');
	const char *colon = strrchr(ref, ':');
	size_t name_len;

	/* a colon before the last '/' is a registry's port, not a tag */
	if (colon && slash && colon < slash)
		colon = NULL;
	name_len = colon ? (size_t)(colon - ref) : strlen(ref);
	if (!name_len)
		return "the name is empty";
	if (name_len > REF_NAME_MAX)
		return "the name is longer than 255 characters";
	if (colon && !tag_valid(colon + 1))
		return "a tag is 1 to 128 letters, digits, '_', '.' and '-', not starting with '.' "
		       "or '-'";
	for (const char *p = ref, *end = ref + name_len; p < end;) {
		const char *q = memchr(p, '/', (size_t)(end - p));
		size_t len = q ? (size_t)(q - p) : (size_t)(end - p);

		if (p == ref && q && (memchr(p, '.', len) || memchr(p, ':', len) ||
		                      (len == 9 && !memcmp(p, "localhost", 9)))) {
			if (!domain_valid(p, len))
				return "the registry is not a host name with an optional :port";
		} else if (!component_valid(p, len)) {
			return "each part of a name is lowercase letters and digits, joined by '.', "
			       "'_', '__' or dashes";
		}
		if (!q)
			break;
		p = q + 1;
		if (p == end)
			return "each part of a name is lowercase letters and digits, joined by '.', "
			       "'_', '__' or dashes";
	}
	return NULL;
}

int store_tag_key(const char *ref, char *out, size_t outlen)
{
	const char *colon = strrchr(ref, ':');
	const char *slash = strrchr(ref, '/');
	int n;

	if (store_ref_invalid(ref))
		return -EINVAL;
	if (colon && slash && colon < slash)
		colon = NULL;
	if (colon)
		n = snprintf(out, outlen, "tags/%s", ref);
	else
		n = snprintf(out, outlen, "tags/%s:latest", ref);
	if (n < 0 || (size_t)n >= outlen)
		return -ENAMETOOLONG;
	return store_key_valid(out) ? 0 : -EINVAL;
}
