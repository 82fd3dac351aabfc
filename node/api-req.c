/*
 * api-req.c — see api-internal.h: the API's request bodies, parsed strictly.
 *
 * The document is parsed by lib/json.c (strict: no duplicate keys, UTF-8,
 * bounded depth and size), then walked field by field against the route's
 * table of fields; each value is checked for its type and bound before it
 * is used.  Strings keep pointing into the document, so a request costs one
 * parse and a few arrays.
 */
#include <math.h>
#include <stdarg.h>

#include "lib/lib.h"
#include "node/api-internal.h"

static int bad(struct api_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(struct api_err *err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	/* one line whatever it quotes (a parse error quotes the input) */
	for (char *p = err->msg; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = ' ';
	return -EINVAL;
}

bool api_id_valid(const char *s)
{
	size_t n = strlen(s);

	if (!n || n > API_ID_MAX || s[0] == '.')
		return false;
	return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

/* The document, which must be one object of the names in fields ("a,b"). */
static int parse_object(const char *what, const void *body, size_t len, const char *fields,
                        json_t **ret, struct api_err *err)
{
	struct json_error je;
	const char *key;
	json_t *v, *doc = NULL;
	int r = json_parse(body, len, &doc, &je);

	if (r == -ENOMEM)
		return r;
	if (r < 0)
		return bad(err, "%s: the body is not JSON: %s at offset %zu", what, je.msg, je.offset);
	if (!json_is_object(doc)) {
		json_decref(doc);
		return bad(err, "%s: the body must be a JSON object", what);
	}
	json_object_foreach(doc, key, v) {
		size_t n = strlen(key);
		bool known = false;

		for (const char *p = fields; *p && !known;) {
			size_t m = strcspn(p, ",");

			known = m == n && !strncmp(p, key, n);
			p += m + (p[m] == ',');
		}
		if (!known) {
			/* the message first: key is the document's */
			r = bad(err, "%s: unknown field '%.64s' (fields: %s)", what, key, fields);
			json_decref(doc);
			return r;
		}
	}
	*ret = doc;
	return 0;
}

/* An optional string field: NULL when absent. */
static int get_str(const char *what, const json_t *doc, const char *key, size_t max,
                   const char **ret, struct api_err *err)
{
	const json_t *v = json_object_get(doc, key);

	*ret = NULL;
	if (!v)
		return 0;
	if (!json_is_string(v))
		return bad(err, "%s: '%s' must be a string", what, key);
	if (json_string_length(v) == 0 || json_string_length(v) > max ||
	    strlen(json_string_value(v)) != json_string_length(v))
		return bad(err, "%s: '%s' must be 1 to %zu bytes, without NUL", what, key, max);
	*ret = json_string_value(v);
	return 0;
}

static int get_seconds(const char *what, const json_t *doc, const char *key, double max,
                       double *ret, struct api_err *err)
{
	const json_t *v = json_object_get(doc, key);
	double d;

	*ret = 0;
	if (!v)
		return 0;
	if (json_double(v, &d) < 0 || !isfinite(d) || d < 0 || d > max)
		return bad(err, "%s: '%s' must be a number of seconds from 0 to %.0f", what, key, max);
	*ret = d;
	return 0;
}

/* A string usable as a policy or label value: bounded, no NUL, no newline
 * (the policy travels as "key = value" lines). */
static bool plain(const json_t *v, size_t max)
{
	const char *s = json_string_value(v);
	size_t n = json_string_length(v);

	return s && n <= max && strlen(s) == n && !strpbrk(s, "\n\r");
}

static int get_policy(const json_t *doc, struct api_create_req *r, struct api_err *err)
{
	const json_t *pol = json_object_get(doc, "policy"), *v;
	const char *key;
	size_t n = 0;

	if (!pol)
		return 0;
	if (!json_is_object(pol))
		return bad(err, "create: 'policy' must be an object of fields");
	json_object_foreach((json_t *)pol, key, v)
		n += json_is_array(v) ? json_array_size(v) : 1;
	if (n > API_LIST_MAX)
		return bad(err, "create: 'policy' has more than %d values", API_LIST_MAX);
	r->set = calloc(n ? n : 1, sizeof(*r->set));
	if (!r->set)
		return -ENOMEM;
	json_object_foreach((json_t *)pol, key, v) {
		size_t klen = strlen(key);

		/* the dots and dashes of stage.NAME.allow and stage.NAME.hide; the policy's
		 * parser decides which names are fields */
		if (!klen || klen > 64 ||
		    strspn(key, "abcdefghijklmnopqrstuvwxyz0123456789_.-") != klen)
			return bad(err, "create: policy field '%.64s' is not a field name", key);
		if (json_is_string(v)) {
			if (!plain(v, API_STR_MAX))
				return bad(err, "create: policy field '%s' must be at most %d bytes, one "
				           "line", key, API_STR_MAX);
			r->set[r->n_set++] = (struct api_kv){ key, json_string_value(v) };
			continue;
		}
		if (!json_is_array(v))
			return bad(err, "create: policy field '%s' must be a string or an array of "
			           "strings", key);
		for (size_t i = 0; i < json_array_size(v); i++) {
			const json_t *e = json_array_get(v, i);

			if (!plain(e, API_STR_MAX))
				return bad(err, "create: policy field '%s' item %zu must be a string of at "
				           "most %d bytes, one line", key, i, API_STR_MAX);
			r->set[r->n_set++] = (struct api_kv){ key, json_string_value(e) };
		}
	}
	return 0;
}

static int get_labels(const json_t *doc, struct api_create_req *r, struct api_err *err)
{
	const json_t *lab = json_object_get(doc, "labels"), *v;
	const char *key;

	if (!lab)
		return 0;
	if (!json_is_object(lab))
		return bad(err, "create: 'labels' must be an object of strings");
	if (json_object_size(lab) > API_LIST_MAX)
		return bad(err, "create: more than %d labels", API_LIST_MAX);
	r->labels = calloc(json_object_size(lab) + 1, sizeof(*r->labels));
	if (!r->labels)
		return -ENOMEM;
	json_object_foreach((json_t *)lab, key, v) {
		size_t klen = strlen(key);

		if (!klen || klen > API_LABEL_MAX || strchr(key, '=') || strpbrk(key, "\n\r"))
			return bad(err, "create: label '%.64s': a key is 1 to %d bytes, no '='", key,
			           API_LABEL_MAX);
		if (!plain(v, API_LABEL_MAX))
			return bad(err, "create: label '%.64s' must be a string of at most %d bytes, one "
			           "line", key, API_LABEL_MAX);
		r->labels[r->n_labels++] = (struct api_kv){ key, json_string_value(v) };
	}
	return 0;
}

int api_parse_create(const void *body, size_t len, struct api_create_req *ret, json_t **ret_doc,
                     struct api_err *err)
{
	struct api_create_req r = { 0 };
	json_t *doc = NULL;
	int e = parse_object("create", body, len, "image,store,rootfs,policy,labels,ttl,idle_timeout,name",
	                     &doc, err);

	if (e < 0)
		return e;
	e = get_str("create", doc, "image", API_STR_MAX, &r.image, err);
	e = e ?: get_str("create", doc, "store", API_STR_MAX, &r.store, err);
	e = e ?: get_str("create", doc, "rootfs", API_STR_MAX, &r.rootfs, err);
	e = e ?: get_str("create", doc, "name", API_ID_MAX, &r.name, err);
	if (!e && !r.image == !r.rootfs)
		e = bad(err, "create: give one of 'image' or 'rootfs'");
	if (!e && r.store && !r.image)
		e = bad(err, "create: 'store' goes with 'image' (a rootfs needs no store)");
	if (!e && r.rootfs && r.rootfs[0] != '/')
		e = bad(err, "create: 'rootfs' must be an absolute path");
	if (!e && r.name && !api_id_valid(r.name))
		e = bad(err, "create: 'name' '%s' is not an id ([A-Za-z0-9._-], 1 to %d, not '.' "
		        "first)", r.name, API_ID_MAX);
	e = e ?: get_seconds("create", doc, "ttl", API_SECONDS_MAX, &r.ttl, err);
	e = e ?: get_seconds("create", doc, "idle_timeout", API_SECONDS_MAX, &r.idle_timeout, err);
	e = e ?: get_policy(doc, &r, err);
	e = e ?: get_labels(doc, &r, err);
	if (e < 0) {
		api_create_req_free(&r);
		json_decref(doc);
		return e;
	}
	*ret = r;
	*ret_doc = doc;
	return 0;
}

static bool env_name(const char *s)
{
	size_t n = strlen(s);

	return n && n <= 256 && !(s[0] >= '0' && s[0] <= '9') &&
	       strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") == n;
}

static int get_argv(const json_t *doc, struct api_exec_req *r, struct api_err *err)
{
	const json_t *a = json_object_get(doc, "argv");
	size_t n = json_array_size(a);

	if (!json_is_array(a) || !n)
		return bad(err, "exec: 'argv' must be an array of one or more strings");
	if (n > API_LIST_MAX)
		return bad(err, "exec: 'argv' has more than %d items", API_LIST_MAX);
	r->argv = calloc(n + 1, sizeof(*r->argv));
	if (!r->argv)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const json_t *v = json_array_get(a, i);
		const char *s = json_string_value(v);

		if (!s || strlen(s) != json_string_length(v) || json_string_length(v) > API_STR_MAX)
			return bad(err, "exec: 'argv' item %zu must be a string of at most %d bytes, "
			           "without NUL", i, API_STR_MAX);
		if (i == 0 && !*s)
			return bad(err, "exec: 'argv' item 0 (the command) is empty");
		r->argv[i] = (char *)s;
	}
	return 0;
}

static int get_env(const json_t *doc, struct api_exec_req *r, struct api_err *err)
{
	const json_t *env = json_object_get(doc, "env"), *v;
	const char *key;
	size_t i = 0;

	if (!env)
		return 0;
	if (!json_is_object(env))
		return bad(err, "exec: 'env' must be an object of NAME: VALUE strings");
	if (json_object_size(env) > API_LIST_MAX)
		return bad(err, "exec: 'env' has more than %d variables", API_LIST_MAX);
	r->env = calloc(json_object_size(env) + 1, sizeof(*r->env));
	if (!r->env)
		return -ENOMEM;
	json_object_foreach((json_t *)env, key, v) {
		const char *s = json_string_value(v);

		if (!env_name(key))
			return bad(err, "exec: env '%.64s' is not a variable name", key);
		if (!s || strlen(s) != json_string_length(v) || json_string_length(v) > API_STR_MAX)
			return bad(err, "exec: env '%s' must be a string of at most %d bytes, without "
			           "NUL", key, API_STR_MAX);
		if (asprintf(&r->env[i], "%s=%s", key, s) < 0) {
			r->env[i] = NULL;
			return -ENOMEM;
		}
		i++;
	}
	return 0;
}

int api_parse_exec(const void *body, size_t len, struct api_exec_req *ret, json_t **ret_doc,
                   struct api_err *err)
{
	struct api_exec_req r = { 0 };
	const char *in = NULL;
	json_t *doc = NULL;
	const json_t *lim;
	int e = parse_object("exec", body, len,
	                     "exec_id,argv,env,cwd,user,timeout,output_limit,stdin", &doc, err);

	if (e < 0)
		return e;
	e = get_str("exec", doc, "exec_id", API_ID_MAX, &r.exec_id, err);
	if (!e && r.exec_id && !api_id_valid(r.exec_id))
		e = bad(err, "exec: 'exec_id' '%s' is not an id ([A-Za-z0-9._-], 1 to %d, not '.' "
		        "first)", r.exec_id, API_ID_MAX);
	e = e ?: get_str("exec", doc, "cwd", API_STR_MAX, &r.cwd, err);
	if (!e && r.cwd && r.cwd[0] != '/')
		e = bad(err, "exec: 'cwd' must be an absolute path (in the sandbox)");
	e = e ?: get_str("exec", doc, "user", 256, &r.user, err);
	e = e ?: get_seconds("exec", doc, "timeout", API_SECONDS_MAX, &r.timeout, err);
	e = e ?: get_str("exec", doc, "stdin", 16, &in, err);
	if (!e && in) {
		if (!strcmp(in, "pipe"))
			r.stdin_pipe = true;
		else if (strcmp(in, "none"))
			e = bad(err, "exec: 'stdin' must be \"none\" or \"pipe\"");
	}
	lim = json_object_get(doc, "output_limit");
	if (!e && lim) {
		int64_t v;

		if (json_int(lim, &v) < 0 || v < 0)
			e = bad(err, "exec: 'output_limit' must be a number of bytes (0: the policy's)");
		else
			r.output_limit = (uint64_t)v;
	}
	e = e ?: get_argv(doc, &r, err);
	e = e ?: get_env(doc, &r, err);
	if (e < 0) {
		api_exec_req_free(&r);
		json_decref(doc);
		return e;
	}
	*ret = r;
	*ret_doc = doc;
	return 0;
}

int api_parse_stage(const void *body, size_t len, const char **ret_stage, json_t **ret_doc,
                    struct api_err *err)
{
	json_t *doc = NULL;
	int e = parse_object("stage", body, len, "stage", &doc, err);

	if (e < 0)
		return e;
	e = get_str("stage", doc, "stage", 64, ret_stage, err);
	if (!e && !*ret_stage)
		e = bad(err, "stage: give 'stage', the stage to switch to");
	if (e < 0) {
		json_decref(doc);
		return e;
	}
	*ret_doc = doc;
	return 0;
}

void api_create_req_free(struct api_create_req *r)
{
	if (!r)
		return;
	free(r->set);
	free(r->labels);
	r->set = r->labels = NULL;
}

void api_exec_req_free(struct api_exec_req *r)
{
	if (!r)
		return;
	for (size_t i = 0; r->env && r->env[i]; i++)
		free(r->env[i]);
	free(r->env);
	free(r->argv);
	r->env = r->argv = NULL;
}
