/*
 * image-config.c — an image's config (OCI: config.Env, config.WorkingDir,
 * config.User) as the policy fields a sandbox of it starts with, for
 * `lazyroot run IMAGE` and the API's create from an image alike, so that
 * both start the same sandbox from one image.
 *
 * The user and group names are looked up in the image's own /etc/passwd and
 * /etc/group, opened inside the mount as the sandbox would resolve them.
 */
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <sys/syscall.h>

#include "lib/json.h"
#include "lib/lib.h"
#include "node/node.h"

#define IMAGE_PASSWD_MAX (4u << 20)  /* largest /etc/passwd or /etc/group read */

__attribute__((format(printf, 3, 4)))
static int fail(struct node_image_err *err, int r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return r;
}

/* Open path inside root, symlinks resolved as the sandbox would (an image's
 * /etc/passwd may be an absolute symlink: it must not reach the host's). */
static int read_in_root(const char *root, const char *path, struct buf *ret)
{
	struct open_how how = {
		.flags = O_RDONLY | O_CLOEXEC,
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};
	_cleanup_close_ int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC), fd = -1;
	char b[65536];
	ssize_t n;

	if (rfd < 0)
		return -errno;
	fd = (int)syscall(SYS_openat2, rfd, path, &how, sizeof(how));
	if (fd < 0)
		return -errno;
	while ((n = read(fd, b, sizeof(b))) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (ret->len + (size_t)n > IMAGE_PASSWD_MAX)
			return -EFBIG;
		if (buf_append(ret, b, (size_t)n) < 0)
			return -ENOMEM;
	}
	return buf_append_zero(ret, 1);
}

/* In /etc/passwd (ret_gid set) or /etc/group format: the line whose name
 * (field 1) is name, or, name NULL, whose id (field 3) is id; its id, and for
 * passwd its primary group (field 4).  Lines too long or malformed are
 * skipped. */
static int find_entry(const struct buf *file, const char *name, uint64_t id, uint64_t *ret_id,
                      uint64_t *ret_gid)
{
	const char *line = (const char *)file->data;

	while (line && *line) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		char copy[1024], *f[4] = { 0 }, *s = copy;
		uint64_t v, g = 0;

		if (len < sizeof(copy)) {
			memcpy(copy, line, len);
			copy[len] = '\0';
			for (int i = 0; i < 4 && s; i++)
				f[i] = strsep(&s, ":");
			if (f[2] && parse_uint(f[2], UINT32_MAX, &v) == 0 &&
			    (!ret_gid || (f[3] && parse_uint(f[3], UINT32_MAX, &g) == 0)) &&
			    (name ? !strcmp(f[0], name) : v == id)) {
				*ret_id = v;
				if (ret_gid)
					*ret_gid = g;
				return 0;
			}
		}
		line = end ? end + 1 : NULL;
	}
	return -ENOENT;
}

/* The OCI "User" field: uid, uid:gid, name, name:group, uid:group or
 * name:gid; names are looked up in the image's /etc/passwd and /etc/group.
 * A user without a group takes its passwd entry's primary group, or 0 when
 * the image has no entry for it (as docker does). */
static int resolve_user(const char *root, const char *ref, const char *user, char *out,
                        size_t outlen, struct node_image_err *err)
{
	_cleanup_(buf_freep) struct buf passwd = BUF_INIT, group = BUF_INIT;
	_cleanup_free_ char *u = strdup(user);
	char *g;
	uint64_t uid, gid = 0, pgid = 0;
	bool have_passwd;

	if (!u)
		return -ENOMEM;
	g = strchr(u, ':');
	if (g)
		*g++ = '\0';
	have_passwd = read_in_root(root, "/etc/passwd", &passwd) == 0;
	if (parse_uint(u, UINT32_MAX, &uid) == 0) {
		if (have_passwd && find_entry(&passwd, NULL, uid, &uid, &pgid) == 0)
			gid = pgid;
	} else if (!have_passwd || find_entry(&passwd, u, 0, &uid, &pgid) < 0) {
		return fail(err, -ENOENT, "image '%s': user '%s' is not in its /etc/passwd", ref, u);
	} else {
		gid = pgid;
	}
	if (g && parse_uint(g, UINT32_MAX, &gid) < 0 &&
	    (read_in_root(root, "/etc/group", &group) < 0 ||
	     find_entry(&group, g, 0, &gid, NULL) < 0))
		return fail(err, -ENOENT, "image '%s': group '%s' is not in its /etc/group", ref, g);
	snprintf(out, outlen, "%llu:%llu", (unsigned long long)uid, (unsigned long long)gid);
	return 0;
}

static int add(struct node_image_field **v, size_t *n, const char *key, const char *value)
{
	struct node_image_field *nv = realloc(*v, (*n + 1) * sizeof(**v));

	if (!nv)
		return -ENOMEM;
	*v = nv;
	nv[*n].key = key;
	nv[*n].value = strdup(value);
	if (!nv[*n].value)
		return -ENOMEM;
	(*n)++;
	return 0;
}

int node_image_config(const char *root, const char *ref, const void *json, size_t len,
                      struct node_image_field **ret, size_t *ret_n, struct node_image_err *err)
{
	struct node_image_field *v = NULL;
	struct json_error jerr = { 0 };
	const json_t *cfg, *env;
	const char *wd, *user;
	json_t *doc = NULL;
	size_t n = 0;
	int r = 0;

	*ret = NULL;
	*ret_n = 0;
	err->msg[0] = '\0';
	if (len == 0)
		return 0;  /* built from a directory or a tar: no config */
	r = json_parse(json, len, &doc, &jerr);
	if (r == -EBADMSG)
		return fail(err, r, "image '%s': config: invalid JSON at offset %zu: %s", ref,
		            jerr.offset, jerr.msg);
	if (r < 0)
		return fail(err, r, "image '%s': config: %s", ref, strerror(-r));
	cfg = json_object_get(doc, "config");
	env = json_object_get(cfg, "Env");
	for (size_t i = 0; r == 0 && i < json_array_size(env); i++) {
		const char *e = json_cstr(json_array_get(env, i));

		if (!e || !strchr(e, '=') || e[0] == '=')
			r = fail(err, -EINVAL, "image '%s': config: Env entry %zu is not NAME=VALUE",
			         ref, i);
		else
			r = add(&v, &n, "env", e);
	}
	wd = json_get_cstr(cfg, "WorkingDir");
	if (r == 0 && wd && *wd) {
		if (wd[0] != '/')
			r = fail(err, -EINVAL, "image '%s': config: WorkingDir '%s' is not absolute",
			         ref, wd);
		else
			r = add(&v, &n, "workdir", wd);
	}
	user = json_get_cstr(cfg, "User");
	if (r == 0 && user && *user) {
		char ids[64];

		r = resolve_user(root, ref, user, ids, sizeof(ids), err);
		if (r == 0)
			r = add(&v, &n, "user", ids);
	}
	json_decref(doc);
	if (r == -ENOMEM && !err->msg[0])
		fail(err, r, "image '%s': config: out of memory", ref);
	if (r < 0) {
		node_image_fields_free(v, n);
		return r;
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

void node_image_fields_free(struct node_image_field *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].value);
	free(v);
}
