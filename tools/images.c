/*
 * images.c — the node's shared image mounts, for `lazyroot run IMAGE`, and the
 * image config (env, working directory, user) that a sandbox starts with.
 *
 * One mount per (store, image) per node, IMAGES/<index name> (IMAGES is
 * /run/lazyroot/images unless --images or $LAZYROOT_IMAGES says otherwise),
 * made by the node service on the first run that needs it and left for every
 * later run; the same index from another store gets IMAGES/<index
 * name>-<store hash>.  `lazyroot umount IMAGES/<index name>` ends it
 * (sandboxes still running keep it served until they end, unless fusectl is
 * mounted: then their reads fail, lazyroot-umount(1)).  Naming the mount
 * by the index, not the tag, means a tag moved to a new image gets a new
 * mount while sandboxes of the old one go on.  The node serialises runs that
 * race for one image: it answers one request at a time.
 *
 * The mount shows owners exactly as built; each sandbox sees it through its
 * own idmapped mount (sandbox/launch.c; fs/session.c says how FUSE allows that).
 */
#include <fcntl.h>
#include <linux/openat2.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "image/image.h"
#include "lib/json.h"
#include "lib/lib.h"
#include "node/node.h"
#include "sandbox/sandbox.h"
#include "store/store.h"
#include "tools/tools.h"

#define IMAGES_PASSWD_MAX (4u << 20)  /* largest /etc/passwd or /etc/group read */

int images_mount(const struct node_config *cfg, const char *ref, char **ret_dir,
                 char **ret_config)
{
	_cleanup_(buf_freep) struct buf req = BUF_INIT;
	json_t *reply = NULL;
	const char *dir, *config;
	int r;

	json_t *q = json_pack("{s:s, s:s}", "verb", "mount", "ref", ref);

	r = q ? tools_node_settings(q, cfg) : -EINVAL;
	r = r ?: tools_node_request_text(json_incref(q), &req);
	json_decref(q);
	if (r < 0)
		return log_errno(r, "image '%s'", ref);
	r = tools_node_request(cfg, (char *)req.data, &reply);
	if (r < 0)
		return r;
	dir = json_get_cstr(reply, "mountpoint");
	config = json_get_cstr(reply, "config");
	if (!dir || !config) {
		json_decref(reply);
		return log_error(-EBADMSG, "image '%s': the node's answer has no mountpoint", ref);
	}
	*ret_dir = strdup(dir);
	*ret_config = strdup(config);
	json_decref(reply);
	if (!*ret_dir || !*ret_config) {
		free(*ret_dir);
		free(*ret_config);
		return -ENOMEM;
	}
	return 0;
}

/* ---- the image config ------------------------------------------------------ */

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
		if (ret->len + (size_t)n > IMAGES_PASSWD_MAX)
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
                        size_t outlen)
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
		return log_error(-ENOENT, "image '%s': user '%s' is not in its /etc/passwd", ref, u);
	} else {
		gid = pgid;
	}
	if (g && parse_uint(g, UINT32_MAX, &gid) < 0 &&
	    (read_in_root(root, "/etc/group", &group) < 0 ||
	     find_entry(&group, g, 0, &gid, NULL) < 0))
		return log_error(-ENOENT, "image '%s': group '%s' is not in its /etc/group", ref, g);
	snprintf(out, outlen, "%llu:%llu", (unsigned long long)uid, (unsigned long long)gid);
	return 0;
}

int images_apply_config(struct sandbox *sb, const char *root, const char *ref, const void *json,
                        size_t len)
{
	_cleanup_free_ char *what = NULL;
	json_t *doc = NULL;
	const json_t *cfg, *env;
	const char *wd, *user;
	int r = 0;

	if (len == 0)
		return 0;  /* built from a directory or a tar: no config */
	if (asprintf(&what, "image '%s': config", ref) < 0) {
		what = NULL;
		return -ENOMEM;
	}
	r = json_parse_logged(json, len, what, &doc);
	if (r < 0)
		return r;
	cfg = json_object_get(doc, "config");
	env = json_object_get(cfg, "Env");
	for (size_t i = 0; r == 0 && i < json_array_size(env); i++) {
		const char *e = json_cstr(json_array_get(env, i));

		if (!e || !strchr(e, '=') || e[0] == '=')
			r = log_error(-EINVAL, "%s: Env entry %zu is not NAME=VALUE", what, i);
		else
			r = sandbox_set(sb, "env", e);
	}
	wd = json_get_cstr(cfg, "WorkingDir");
	if (r == 0 && wd && *wd) {
		if (wd[0] != '/')
			r = log_error(-EINVAL, "%s: WorkingDir '%s' is not absolute", what, wd);
		else
			r = sandbox_set(sb, "workdir", wd);
	}
	user = json_get_cstr(cfg, "User");
	if (r == 0 && user && *user) {
		char ids[64];

		r = resolve_user(root, ref, user, ids, sizeof(ids));
		if (r == 0)
			r = sandbox_set(sb, "user", ids);
	}
	json_decref(doc);
	return r;
}
