/*
 * images.c — the node's shared image mounts, for `lazyroot run IMAGE`, and the
 * image config (env, working directory, user) that a sandbox starts with.
 *
 * One mount per image per node: IMAGES/<index name> (IMAGES is
 * /run/lazyroot/images unless --images or $LAZYROOT_IMAGES says otherwise),
 * made by `lazyroot mount` (read-only, nosuid, nodev, allow_other) on the
 * first run of the image and left for every later run; `lazyroot umount
 * IMAGES/<index name>` ends it (sandboxes still running keep it served until
 * they end).  Naming the mount by the index, not the tag, means a tag moved
 * to a new image gets a new mount while sandboxes of the old one go on.
 *
 * Concurrency: the first runs of an image serialise on an exclusive flock of
 * IMAGES/<index name>.lock around "is it mounted? else mount it", so that
 * two of them mount it once; later runs take the lock only for a stat.  A
 * mount whose daemon died (ENOTCONN) is detached and made again.  The lock
 * file descriptor is close-on-exec and the daemon is a new process image, so
 * the daemon never holds the lock.
 *
 * The mount shows owners exactly as built; each sandbox sees it through its
 * own idmapped mount (sandbox/launch.c, fs/fs.c says how FUSE allows that).
 */
#include <fcntl.h>
#include <linux/openat2.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "fs/fs.h"
#include "image/image.h"
#include "lib/json.h"
#include "lib/lib.h"
#include "sandbox/sandbox.h"
#include "store/store.h"
#include "tools/tools.h"

#define FUSE_SUPER_MAGIC 0x65735546
#define IMAGES_PASSWD_MAX (4u << 20)  /* largest /etc/passwd or /etc/group read */

/* 1: a lazyroot mount answers at dir; 0: nothing is mounted there; -ENOTCONN:
 * a lazyroot mount whose daemon is gone. */
static int mounted(const char *dir)
{
	struct statfs sfs;
	struct stat st;
	dev_t dev;

	if (fs_find_mount(dir, &dev) < 0)
		return 0;
	if (stat(dir, &st) < 0 || statfs(dir, &sfs) < 0)
		return -ENOTCONN;
	if (sfs.f_type != FUSE_SUPER_MAGIC || st.st_ino != IMAGE_ROOT_INO || st.st_dev != dev)
		return -ENOTCONN;
	return 1;
}

/* `lazyroot mount HEX DIR --store URL --cache CACHE [--config FILE]
 * [--s3-endpoint URL]`, as a new process image of this binary (by its path,
 * not /proc/self/exe, so that the daemon's comm is "lazyroot": `lazyroot
 * umount` checks it before it waits on the pid); the daemon reads the same
 * config file and environment, so it gets the caller's settings.  Returns
 * once the mount answers or the mount failed (its messages are on our
 * stderr). */
static int spawn_mount(const struct images_params *p, const char *hex, const char *dir)
{
	char *argv[13] = { "lazyroot", "mount", (char *)hex, (char *)dir, "--store",
	                   (char *)p->store_url, "--cache", (char *)p->cache_dir };
	int argc = 8;
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	int status;
	pid_t pid;

	if (p->config_path) {
		argv[argc++] = "--config";
		argv[argc++] = (char *)p->config_path;
	}
	if (p->s3_endpoint) {
		argv[argc++] = "--s3-endpoint";
		argv[argc++] = (char *)p->s3_endpoint;
	}
	argv[argc] = NULL;
	if (n < 0)
		return log_errno(-errno, "image %s: readlink /proc/self/exe", hex);
	self[n] = '\0';
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return log_errno(-errno, "image %s: fork", hex);
	if (pid == 0) {
		execv(self, argv);
		log_errno(-errno, "image %s: exec '%s'", hex, self);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return log_errno(-errno, "image %s: waiting for the mount", hex);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return -EIO;  /* `lazyroot mount` said why */
	return 0;
}

int images_mount(const struct images_params *p, const char *hex, char **ret_dir)
{
	_cleanup_free_ char *dir = NULL, *lock = NULL;
	_cleanup_close_ int lfd = -1;
	int r;

	if (asprintf(&dir, "%s/%s", p->images_dir, hex) < 0 ||
	    asprintf(&lock, "%s/%s.lock", p->images_dir, hex) < 0) {
		dir = lock = NULL;
		return -ENOMEM;
	}
	if (dir[0] != '/')
		return log_error(-EINVAL, "--images '%s': want an absolute path", p->images_dir);
	r = mounted(dir);
	if (r == 1)
		goto done;
	r = mkdir_p(p->images_dir, 0755);
	if (r < 0)
		return log_errno(r, "image %s: creating '%s'", hex, p->images_dir);
	lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lfd < 0)
		return log_errno(-errno, "image %s: lock '%s'", hex, lock);
	while (flock(lfd, LOCK_EX) < 0)
		if (errno != EINTR)
			return log_errno(-errno, "image %s: lock '%s'", hex, lock);
	/* Under the lock: another run may have mounted it meanwhile. */
	r = mounted(dir);
	if (r == 1)
		goto done;
	if (r == -ENOTCONN) {
		log_msg(LOG_WARN, "image %s: the daemon of '%s' is gone; mounting again", hex, dir);
		if (umount2(dir, MNT_DETACH | UMOUNT_NOFOLLOW) < 0)
			return log_errno(-errno, "image %s: umount '%s'", hex, dir);
	}
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return log_errno(-errno, "image %s: mkdir '%s'", hex, dir);
	r = spawn_mount(p, hex, dir);
	if (r < 0) {
		(void)rmdir(dir);
		return r;
	}
done:
	*ret_dir = TAKE_PTR(dir);
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
	struct json *doc = NULL;
	const struct json *cfg, *env;
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
	cfg = json_get(doc, "config");
	env = json_get(cfg, "Env");
	for (size_t i = 0; r == 0 && i < json_len(env); i++) {
		const char *e = json_cstr(json_at(env, i));

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
	json_free(doc);
	return r;
}
