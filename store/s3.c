/*
 * s3.c — what the s3:// store adds to the HTTP machinery in http.c: its URL,
 * endpoint, region and credentials (from the store options, which the node's
 * settings fill from the AWS variables as the AWS tools read them, and the
 * shared credentials file), S3's strict URI encoding,
 * and the two XML documents it reads (ListObjectsV2 results and error
 * bodies).  Everything here is pure: no request is made.
 *
 * The XML reader is deliberately small: S3 answers are flat, so a leaf
 * element is found by its start tag and ended by the next '<' (text may not
 * hold a raw '<'), and its text is unescaped (the five named entities and
 * numeric references; a NUL or an unknown entity refuses the document).
 * It never reads past the length given and needs no NUL terminator.
 */
#include <ctype.h>

#include "store/store-internal.h"

#define S3_DEFAULT_REGION "us-east-1"
#define S3_CREDENTIALS_MAX (1U << 20)

/* ---- URLs ---------------------------------------------------------------- */

static bool bucket_char(char c)
{
	return isalnum((unsigned char)c) || c == '-' || c == '.' || c == '_';
}

int s3_parse_url(const char *url, char **ret_endpoint, char **ret_bucket, char **ret_prefix)
{
	const char *b, *slash, *p;
	size_t bl, pl, el = 0;

	*ret_endpoint = NULL;
	if (!strncmp(url, "s3+http://", 10) || !strncmp(url, "s3+https://", 11)) {
		/* s3+http[s]://HOST[:PORT]/BUCKET[/PREFIX]: the endpoint in the URL */
		const char *host = url + (url[7] == 's' ? 11 : 10);
		const char *e = strchrnul(host, '/');

		if (e == host || !*e)
			return -EINVAL;
		for (const char *c = host; c < e; c++)
			if (!isalnum((unsigned char)*c) && !strchr("-.:[]_", *c))
				return -EINVAL;
		el = (size_t)(e - url) - 3;   /* without "s3+" */
		b = e + 1;
	} else if (!strncmp(url, "s3://", 5)) {
		b = url + 5;
	} else {
		return -EINVAL;
	}
	slash = strchrnul(b, '/');
	bl = (size_t)(slash - b);
	if (bl < 3 || bl > 63)
		return -EINVAL;
	for (const char *c = b; c < slash; c++)
		if (!bucket_char(*c))
			return -EINVAL;
	p = *slash ? slash + 1 : slash;
	pl = strlen(p);
	while (pl && p[pl - 1] == '/')
		pl--;
	if (strchr(url, '?') || strchr(url, '#'))
		return -EINVAL;
	*ret_bucket = strndup(b, bl);
	*ret_prefix = strndup(p, pl);
	if (el)
		*ret_endpoint = strndup(url + 3, el);
	if (!*ret_bucket || !*ret_prefix || (el && !*ret_endpoint)) {
		free(*ret_bucket);
		free(*ret_prefix);
		free(*ret_endpoint);
		return -ENOMEM;
	}
	if (pl && !store_key_valid(*ret_prefix)) {
		free(*ret_bucket);
		free(*ret_prefix);
		free(*ret_endpoint);
		return -EINVAL;
	}
	return 0;
}

int s3_uri_encode(const char *in, bool keep_slash, char *out, size_t outlen)
{
	return url_encode(in, keep_slash ? "-._~/" : "-._~", out, outlen);
}

/* ---- credentials ---------------------------------------------------------- */

static char *trim(char *s, char *end)
{
	while (s < end && isspace((unsigned char)*s))
		s++;
	while (end > s && isspace((unsigned char)end[-1]))
		end--;
	*end = 0;
	return s;
}

int s3_parse_credentials(const char *text, size_t len, const char *profile, char **ret_key,
                         char **ret_secret, char **ret_token)
{
	_cleanup_free_ char *copy = strndup(text, len);
	char *key = NULL, *secret = NULL, *token = NULL, *line, *next;
	bool in = false, found = false;

	if (!copy)
		return -ENOMEM;
	for (line = copy; line; line = next) {
		char *nl = strchr(line, '\n'), *eq, *k, *v;

		next = nl ? nl + 1 : NULL;
		line = trim(line, nl ? nl : line + strlen(line));
		if (!*line || *line == '#' || *line == ';')
			continue;
		if (*line == '[') {
			char *close = strchr(line, ']');

			if (!close)
				goto bad;
			*close = 0;
			line = trim(line + 1, close);
			/* the config file's "[profile NAME]" form, accepted here too */
			if (!strncmp(line, "profile ", 8))
				line = trim(line + 8, line + strlen(line));
			in = !strcmp(line, profile);
			found |= in;
			continue;
		}
		if (!in)
			continue;
		eq = strchr(line, '=');
		if (!eq)
			goto bad;
		k = trim(line, eq);
		v = trim(eq + 1, eq + 1 + strlen(eq + 1));
		{
			char **slot = !strcmp(k, "aws_access_key_id") ? &key :
			              !strcmp(k, "aws_secret_access_key") ? &secret :
			              !strcmp(k, "aws_session_token") ? &token : NULL;

			if (!slot)
				continue;
			free(*slot);
			*slot = strdup(v);
			if (!*slot)
				goto nomem;
		}
	}
	if (!found || !key || !secret || !*key) {
		free(key);
		free(secret);
		free(token);
		return found ? -EINVAL : -ENOENT;
	}
	*ret_key = key;
	*ret_secret = secret;
	*ret_token = token;
	return 0;
nomem:
	free(key);
	free(secret);
	free(token);
	return -ENOMEM;
bad:
	free(key);
	free(secret);
	free(token);
	return -EBADMSG;
}

/* o's string, or NULL when unset or empty. */
static const char *opt(const char *v)
{
	return v && *v ? v : NULL;
}

/* Keys from the shared credentials file: o's, else HOME/.aws/credentials;
 * o's profile, else "default".  A default file that is missing means no keys
 * (0 with nothing set); a file or profile named explicitly must be there. */
static int load_file_credentials(const char *url, const struct store_options *o,
                                 struct s3_conf *c)
{
	const char *path = opt(o->s3_credentials_file), *home = opt(o->home);
	const char *profile = opt(o->s3_profile);
	_cleanup_free_ char *dflt = NULL;
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	bool explicit = path || profile;
	int r;

	if (!path) {
		if (!home)
			return 0;
		if (asprintf(&dflt, "%s/.aws/credentials", home) < 0)
			return -ENOMEM;
		path = dflt;
	}
	r = read_file(path, S3_CREDENTIALS_MAX, &b);
	if (r == -ENOENT && !explicit)
		return 0;
	if (r < 0)
		return log_errno(r, "store '%s': reading credentials file '%s'", url, path);
	r = s3_parse_credentials((const char *)b.data, b.len, profile ? profile : "default",
	                         &c->access_key, &c->secret_key, &c->token);
	if (r == -ENOENT && !profile)
		return 0;
	if (r == -ENOENT)
		return log_error(-ENOENT, "store '%s': no profile '%s' in credentials file '%s'", url,
		                 profile, path);
	if (r == -EINVAL)
		return log_error(-EINVAL, "store '%s': profile '%s' in '%s' lacks aws_access_key_id "
		                 "or aws_secret_access_key", url, profile ? profile : "default", path);
	if (r == -EBADMSG)
		return log_error(-EINVAL, "store '%s': credentials file '%s' is not an INI file",
		                 url, path);
	return r;
}

int s3_conf_load(const char *url, const struct store_options *o, struct s3_conf *c)
{
	const char *endpoint = opt(o->s3_endpoint), *region = opt(o->s3_region);
	const char *key = opt(o->s3_access_key), *secret = opt(o->s3_secret_key);
	const char *token = opt(o->s3_session_token);
	size_t n;
	int r;

	memset(c, 0, sizeof(*c));
	r = s3_parse_url(url, &c->endpoint, &c->bucket, &c->prefix);
	if (r == -EINVAL)
		return log_error(r, "store '%s': want s3://BUCKET[/PREFIX] or "
		                 "s3+http[s]://HOST[:PORT]/BUCKET[/PREFIX]", url);
	if (r < 0)
		return r;
	if (c->endpoint)
		endpoint = NULL;
	if (!region)
		region = S3_DEFAULT_REGION;
	if (!store_s3_region_valid(region)) {
		r = log_error(-EINVAL, "store '%s': region '%s' is not a region name", url, region);
		goto fail;
	}
	c->region = strdup(region);
	if (endpoint) {
		if (strncmp(endpoint, "http://", 7) && strncmp(endpoint, "https://", 8)) {
			r = log_error(-EINVAL, "store '%s': endpoint '%s': want http[s]://HOST[:PORT]",
			              url, endpoint);
			goto fail;
		}
		c->endpoint = strdup(endpoint);
	} else if (!c->endpoint &&
	           asprintf(&c->endpoint, "https://s3.%s.amazonaws.com", region) < 0) {
		c->endpoint = NULL;
	}
	if (!c->region || !c->endpoint) {
		r = -ENOMEM;
		goto fail;
	}
	n = strlen(c->endpoint);
	while (n && c->endpoint[n - 1] == '/')
		c->endpoint[--n] = 0;
	if (key && secret) {
		c->access_key = strdup(key);
		c->secret_key = strdup(secret);
		if (token)
			c->token = strdup(token);
		if (!c->access_key || !c->secret_key || (token && !c->token)) {
			r = -ENOMEM;
			goto fail;
		}
	} else {
		r = load_file_credentials(url, o, c);
		if (r < 0)
			goto fail;
	}
	if (c->token && strpbrk(c->token, "\r\n")) {
		r = log_error(-EINVAL, "store '%s': the session token holds a line break", url);
		goto fail;
	}
	return 0;
fail:
	s3_conf_destroy(c);
	return r;
}

void s3_conf_destroy(struct s3_conf *c)
{
	free(c->endpoint);
	free(c->bucket);
	free(c->prefix);
	free(c->region);
	free(c->access_key);
	if (c->secret_key) {
		explicit_bzero(c->secret_key, strlen(c->secret_key));
		free(c->secret_key);
	}
	free(c->token);
	memset(c, 0, sizeof(*c));
}

/* ---- XML -------------------------------------------------------------------- */

/* The first <name>…</name> (exactly that start tag, no attributes) in
 * [p, end): its text in [*ret_b, *ret_e), and where the search goes on. */
static const char *xml_find(const char *p, const char *end, const char *name, const char **ret_b,
                            const char **ret_e)
{
	size_t nl = strlen(name);

	while (p < end) {
		const char *lt = memchr(p, '<', (size_t)(end - p));

		if (!lt)
			return NULL;
		if ((size_t)(end - lt) >= nl + 2 && !memcmp(lt + 1, name, nl) && lt[nl + 1] == '>') {
			const char *b = lt + nl + 2;
			const char *e = memchr(b, '<', (size_t)(end - b));

			if (!e || (size_t)(end - e) < nl + 3 || e[1] != '/' ||
			    memcmp(e + 2, name, nl) || e[nl + 2] != '>')
				return NULL;
			*ret_b = b;
			*ret_e = e;
			return e + nl + 3;
		}
		p = lt + 1;
	}
	return NULL;
}

/* One of XML's five named entities (name of n bytes): its character in *o. */
static bool ent_named(const char *name, size_t n, char *o)
{
	static const struct { const char *name; char c; } ents[] = {
		{ "amp", '&' }, { "lt", '<' }, { "gt", '>' }, { "quot", '"' }, { "apos", '\'' },
	};

	for (size_t i = 0; i < ARRAY_SIZE(ents); i++)
		if (strlen(ents[i].name) == n && !memcmp(name, ents[i].name, n)) {
			*o = ents[i].c;
			return true;
		}
	return false;
}

/* The first <name>…</name> that holds other elements: the text up to the
 * first "</name>" after the start tag (S3 does not nest an element in one
 * of its own name). */
static const char *xml_find_block(const char *p, const char *end, const char *name,
                                  const char **ret_b, const char **ret_e)
{
	char open[64], close[64];
	int ol = snprintf(open, sizeof(open), "<%s>", name);
	int cl = snprintf(close, sizeof(close), "</%s>", name);
	const char *b, *e;

	b = memmem(p, (size_t)(end - p), open, (size_t)ol);
	if (!b)
		return NULL;
	b += ol;
	e = memmem(b, (size_t)(end - b), close, (size_t)cl);
	if (!e)
		return NULL;
	*ret_b = b;
	*ret_e = e;
	return e + cl;
}

/* Text between b and e with entities replaced: a new string, or NULL (errno
 * EBADMSG for a bad entity or a NUL, ENOMEM). */
static char *xml_text(const char *b, const char *e)
{
	char *out = malloc((size_t)(e - b) + 1), *o = out;

	if (!out)
		return NULL;
	while (b < e) {
		const char *semi;
		unsigned long cp = 0;
		size_t n;

		if (*b != '&') {
			if (!*b)
				goto bad;
			*o++ = *b++;
			continue;
		}
		semi = memchr(b, ';', (size_t)(e - b));
		if (!semi || semi - b > 10)
			goto bad;
		n = (size_t)(semi - b - 1);
		if (ent_named(b + 1, n, o)) {
			o++;
		} else if (n >= 2 && b[1] == '#') {
			bool hex = b[2] == 'x';
			const char *d = b + (hex ? 3 : 2);

			if (d == semi)
				goto bad;
			for (; d < semi; d++) {
				int v = isdigit((unsigned char)*d) ? *d - '0' :
				        hex && isxdigit((unsigned char)*d) ? tolower(*d) - 'a' + 10 : -1;

				if (v < 0)
					goto bad;
				cp = cp * (hex ? 16 : 10) + (unsigned long)v;
				if (cp > 0x10FFFF)
					goto bad;
			}
			if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF))
				goto bad;
			/* UTF-8 */
			if (cp < 0x80) {
				*o++ = (char)cp;
			} else if (cp < 0x800) {
				*o++ = (char)(0xC0 | (cp >> 6));
				*o++ = (char)(0x80 | (cp & 0x3F));
			} else if (cp < 0x10000) {
				*o++ = (char)(0xE0 | (cp >> 12));
				*o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
				*o++ = (char)(0x80 | (cp & 0x3F));
			} else {
				*o++ = (char)(0xF0 | (cp >> 18));
				*o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
				*o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
				*o++ = (char)(0x80 | (cp & 0x3F));
			}
		} else {
			goto bad;
		}
		b = semi + 1;
	}
	*o = 0;
	return out;
bad:
	free(out);
	errno = EBADMSG;
	return NULL;
}

static bool has_root(const char *xml, size_t len, const char *root)
{
	size_t rl = strlen(root);

	for (const char *p = xml, *end = xml + len; p < end;) {
		const char *lt = memchr(p, '<', (size_t)(end - p));

		if (!lt || (size_t)(end - lt) < rl + 2)
			return false;
		if (lt[1] != '?' && lt[1] != '!')
			return !memcmp(lt + 1, root, rl) && (lt[rl + 1] == '>' || lt[rl + 1] == ' ');
		p = lt + 1;
	}
	return false;
}

int s3_parse_listing(const char *xml, size_t len, struct s3_listing *out)
{
	const char *end = xml + len, *p = xml, *b, *e;
	size_t cap = 0;

	memset(out, 0, sizeof(*out));
	if (!has_root(xml, len, "ListBucketResult"))
		return -EBADMSG;
	while ((p = xml_find_block(p, end, "Contents", &b, &e))) {
		const char *kb, *ke;
		char *key;

		if (!xml_find(b, e, "Key", &kb, &ke))
			goto bad;
		key = xml_text(kb, ke);
		if (!key) {
			s3_listing_destroy(out);
			return -errno;
		}
		if (out->n + 1 >= cap) {
			size_t nc = cap ? cap * 2 : 16;
			char **nv = realloc(out->keys, nc * sizeof(*nv));
			int64_t *ns = nv ? realloc(out->sizes, nc * sizeof(*ns)) : NULL;
			int64_t *nm = ns ? realloc(out->mtimes, nc * sizeof(*nm)) : NULL;

			if (nv)
				out->keys = nv;
			if (ns)
				out->sizes = ns;
			if (!nm) {
				free(key);
				s3_listing_destroy(out);
				return -ENOMEM;
			}
			out->mtimes = nm;
			cap = nc;
		}
		out->sizes[out->n] = 0;
		out->mtimes[out->n] = 0;
		if (xml_find(b, e, "Size", &kb, &ke)) {
			char num[32];
			size_t nl = (size_t)(ke - kb);

			if (nl && nl < sizeof(num)) {
				memcpy(num, kb, nl);
				num[nl] = 0;
				out->sizes[out->n] = strtoll(num, NULL, 10);
			}
		}
		if (xml_find(b, e, "LastModified", &kb, &ke) &&
		    store_parse_time(kb, (size_t)(ke - kb), &out->mtimes[out->n]) < 0)
			out->mtimes[out->n] = 0;
		out->keys[out->n++] = key;
		out->keys[out->n] = NULL;
	}
	if (xml_find(xml, end, "IsTruncated", &b, &e))
		out->truncated = (size_t)(e - b) == 4 && !memcmp(b, "true", 4);
	if (out->truncated) {
		if (!xml_find(xml, end, "NextContinuationToken", &b, &e) || b == e)
			goto bad;
		out->next_token = xml_text(b, e);
		if (!out->next_token) {
			s3_listing_destroy(out);
			return -errno;
		}
	}
	return 0;
bad:
	s3_listing_destroy(out);
	return -EBADMSG;
}

void s3_listing_destroy(struct s3_listing *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->keys[i]);
	free(l->keys);
	free(l->sizes);
	free(l->mtimes);
	free(l->next_token);
	memset(l, 0, sizeof(*l));
}

int s3_error_code(const char *xml, size_t len, char *out, size_t outlen)
{
	const char *b, *e;

	if (!outlen || !has_root(xml, len, "Error") || !xml_find(xml, xml + len, "Code", &b, &e) ||
	    b == e || (size_t)(e - b) >= outlen)
		return -EBADMSG;
	for (const char *p = b; p < e; p++)
		if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-' && *p != '_')
			return -EBADMSG;
	memcpy(out, b, (size_t)(e - b));
	out[e - b] = 0;
	return 0;
}
