/*
 * files.c — files in and out of a running sandbox: one file as raw bytes, a
 * directory as a tar stream (the format is files-tar.c's).
 *
 * These run in a process already confined inside the sandbox (the fn of
 * sandbox_enter): its root and cwd are the sandbox's, its uid the sandbox
 * user's, and Landlock and the hidden paths hold.  So the confinement, not
 * this code, is what keeps the host out of reach; what this code keeps is
 * the target.  The sandbox's own processes may change the tree while a
 * transfer runs, so nothing here trusts a path it checked a moment before:
 *
 * - the path a caller gives is resolved with openat2(RESOLVE_IN_ROOT |
 *   RESOLVE_NO_MAGICLINKS): the sandbox's symlinks are followed, but inside
 *   its root, and never through /proc/PID/root or /proc/self/fd/N;
 * - below that, every component (a parent made, a member's parents) is
 *   opened from its parent's descriptor with RESOLVE_BENEATH |
 *   RESOLVE_NO_SYMLINKS: a symlink there, swapped in or not, is an error;
 * - a file or symlink is made under a temporary name with O_EXCL (or
 *   symlinkat, which never follows) and renamed over the final name, which
 *   replaces whatever entry is there without following it; a failed transfer
 *   unlinks its temporary name;
 * - a get opens nothing but regular files and directories, each with
 *   O_NOFOLLOW | O_NONBLOCK and checked again with fstat, so that a fifo
 *   swapped in never blocks it and a symlink is read, never followed.
 *
 * What an archive may hold: regular files, directories, symlinks (made as
 * they are, never followed: their targets may point anywhere, as any
 * symlink the sandbox user makes can), and hard links to a member this same
 * archive extracted before.  Refused: absolute names, `..`, device nodes,
 * fifos, sparse and multi-volume members, a member's parent that is a
 * symlink, and anything past the byte or entry limit (checked on each
 * header, before its data is read).  Modes keep their permission bits only:
 * a transfer's files belong to the sandbox user who runs it, who could set
 * setuid or setgid on them anyway, so the bits would give nothing and are
 * dropped to keep an archive from the outside from planting them.  Sticky
 * is kept on directories (a /tmp of its own).  Directory modes and mtimes are
 * applied once the whole archive is in, so that a read-only directory can
 * still be filled.  Members extracted before an error stay, each whole.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lib/lib.h"
#include "sandbox/files-internal.h"
#include "sandbox/sandbox.h"

#define COPY_BUF (128 * 1024)
#define GET_DEPTH_MAX 256   /* directory levels a get descends (a descriptor each) */

static void limits_of(const struct sandbox_files_limits *lim, uint64_t *bytes, uint64_t *entries)
{
	*bytes = lim && lim->max_bytes ? lim->max_bytes : SANDBOX_FILES_MAX_BYTES;
	*entries = lim && lim->max_entries ? lim->max_entries : SANDBOX_FILES_MAX_ENTRIES;
}

static int openat2_fd(int dirfd, const char *path, uint64_t flags, uint64_t resolve)
{
	struct open_how how = { .flags = flags | O_CLOEXEC, .resolve = resolve };
	long fd;

	do
		fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	while (fd < 0 && errno == EAGAIN);   /* a rename elsewhere raced the lookup */
	return fd < 0 ? -errno : (int)fd;
}

/* A path the caller gave, inside the sandbox's root. */
static int open_in_root(const char *path, uint64_t flags)
{
	_cleanup_close_ int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);

	if (root < 0)
		return -errno;
	return openat2_fd(root, path, flags, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
}

/* One component below dirfd, never through a symlink (-ELOOP for one, even
 * with O_DIRECTORY, where O_NOFOLLOW would say -ENOTDIR). */
static int open_beneath(int dirfd, const char *name, uint64_t flags)
{
	return openat2_fd(dirfd, name, flags,
	                  RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
}

/* ELOOP from a resolution inside the root: what RESOLVE_NO_MAGICLINKS
 * refused, or a loop of symlinks */
#define MAGIC_WORDS "a magic link (/proc/PID/...) or a symlink loop is in the way"

static const char *errno_words(int err, const char *dflt)
{
	if (err == -ELOOP)
		return "a symlink is in the way";
	if (err == -ENOTDIR)
		return "not a directory";
	return dflt;
}

/* Open directory path (in the sandbox's root) as an O_RDONLY descriptor;
 * what names it in errors (the file a parent is opened for); with make, make
 * what is missing of it: the part that exists is resolved in
 * the root as the whole path would be, and each missing component is made
 * and opened beneath its parent, never through a symlink. */
static int open_dir(const char *path, const char *what, bool make, int *ret)
{
	_cleanup_free_ char *p = NULL, *pre = NULL;
	_cleanup_close_ int cur = -1;
	char *save = NULL, *c;
	bool making = false;
	int fd;

	fd = open_in_root(path, O_RDONLY | O_DIRECTORY);
	if (fd >= 0 || fd != -ENOENT || !make) {
		if (fd < 0)
			return log_error(fd, "`%s`: open the directory: %s", what,
			                 fd == -ELOOP ? MAGIC_WORDS : errno_words(fd, strerror(-fd)));
		*ret = fd;
		return 0;
	}
	p = strdup(path);
	pre = calloc(1, strlen(path) + 2);
	if (!p || !pre)
		return -ENOMEM;
	cur = open_in_root("/", O_RDONLY | O_DIRECTORY);
	if (cur < 0)
		return log_errno(cur, "open the sandbox's root");
	for (c = strtok_r(p, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		if (!strcmp(c, "..") || !strcmp(c, "."))
			return log_error(-EINVAL, "`%s`: `.` or `..` in a path to be made", what);
		strcat(strcat(pre, "/"), c);
		fd = making ? -ENOENT : open_in_root(pre, O_RDONLY | O_DIRECTORY);
		if (fd == -ENOENT) {
			making = true;
			if (mkdirat(cur, c, 0755) < 0 && errno != EEXIST)
				return log_errno(-errno, "`%s`: make `%s`", what, pre);
			fd = open_beneath(cur, c, O_RDONLY | O_DIRECTORY);
		}
		if (fd < 0)
			return log_error(fd, "`%s`: open `%s`: %s", what, pre,
			                 fd == -ELOOP && !making ? MAGIC_WORDS
			                                         : errno_words(fd, strerror(-fd)));
		closep(&cur);
		cur = fd;
	}
	*ret = TAKE_FD(cur);
	return 0;
}

/* ---- temporary names ----------------------------------------------------- */

/* A name made in dirfd under a temporary name; unlinked unless taken. */
struct tmpname {
	int dirfd;
	bool live;
	char name[48];
};

static void tmpname_drop(struct tmpname *t)
{
	if (t->live)
		(void)unlinkat(t->dirfd, t->name, 0);
	t->live = false;
}

static void tmpname_new(struct tmpname *t, int dirfd)
{
	uint64_t r = 0;

	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r))
		r = (uint64_t)random() << 32 ^ (uint64_t)random();
	t->dirfd = dirfd;
	t->live = false;
	snprintf(t->name, sizeof(t->name), ".lazyroot-put-%016llx", (unsigned long long)r);
}

/* Create a regular file under a fresh temporary name: its descriptor. */
static int tmpname_create(struct tmpname *t, int dirfd)
{
	for (int tries = 0; tries < 16; tries++) {
		int fd;

		tmpname_new(t, dirfd);
		fd = openat(dirfd, t->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0) {
			t->live = true;
			return fd;
		}
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

/* Rename the temporary name over name: any entry there is replaced, never
 * followed.  A directory there is refused (-EISDIR). */
static int tmpname_commit(struct tmpname *t, const char *name)
{
	struct stat st;

	if (fstatat(t->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
		return -EISDIR;
	if (renameat(t->dirfd, t->name, t->dirfd, name) < 0)
		return -errno;
	t->live = false;
	return 0;
}

/* Copy what fd reads to out, at most max bytes: -EFBIG when there is more. */
static int copy_fd(int in, int out, uint64_t max, uint64_t *ret_n)
{
	_cleanup_free_ uint8_t *b = malloc(COPY_BUF);
	uint64_t n = 0;

	if (!b)
		return -ENOMEM;
	for (;;) {
		ssize_t r = read(in, b, (size_t)MIN((uint64_t)COPY_BUF, max - n + 1));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		if (n + (uint64_t)r > max)
			return -EFBIG;
		int w = write_full(out, b, (size_t)r);
		if (w < 0)
			return w;
		n += (uint64_t)r;
	}
	if (ret_n)
		*ret_n = n;
	return 0;
}

/* Split path into its parent (a copy, "/" for none) and last component; the
 * last may not be `.` or `..`.  -EINVAL (logged) for an empty path. */
static int split_path(const char *path, char **ret_parent, const char **ret_name,
                      char **ret_buf)
{
	_cleanup_free_ char *p = strdup(path);
	char *slash;
	size_t n;

	if (!p)
		return -ENOMEM;
	n = strlen(p);
	while (n > 1 && p[n - 1] == '/')
		p[--n] = 0;
	slash = strrchr(p, '/');
	if (!p[0] || !strcmp(p, "/"))
		return log_error(-EINVAL, "`%s`: not a file's path", path);
	if (slash) {
		*slash = 0;
		*ret_name = slash + 1;
		*ret_parent = strdup(slash == p ? "/" : p);
	} else {
		*ret_name = p;
		*ret_parent = strdup("/");
	}
	if (!*ret_parent)
		return -ENOMEM;
	if (!strcmp(*ret_name, ".") || !strcmp(*ret_name, "..")) {
		free(*ret_parent);
		return log_error(-EINVAL, "`%s`: not a file's path", path);
	}
	*ret_buf = TAKE_PTR(p);
	return 0;
}

/* ---- one file ------------------------------------------------------------ */

int sandbox_file_put(int in_fd, const char *path, mode_t mode, bool parents,
                     const struct sandbox_files_limits *lim)
{
	_cleanup_free_ char *parent = NULL, *buf = NULL;
	_cleanup_close_ int dirfd = -1, fd = -1;
	_cleanup_(tmpname_drop) struct tmpname tmp = { .dirfd = -1 };
	uint64_t max_bytes, max_entries;
	const char *name = NULL;
	struct stat st;
	int r;

	limits_of(lim, &max_bytes, &max_entries);
	r = split_path(path, &parent, &name, &buf);
	if (r < 0)
		return r;
	/* input whose size is known is refused before a byte is written */
	if (fstat(in_fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size > max_bytes)
		return log_error(-EFBIG, "`%s`: %llu bytes, past the limit of %llu", path,
		                 (unsigned long long)st.st_size, (unsigned long long)max_bytes);
	r = open_dir(parent, path, parents, &dirfd);
	if (r < 0)
		return r;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISDIR(st.st_mode))
			return log_error(-EISDIR, "`%s`: is a directory", path);
		if (S_ISLNK(st.st_mode))
			return log_error(-ELOOP, "`%s`: is a symlink (not followed, not replaced)",
			                 path);
	}
	fd = tmpname_create(&tmp, dirfd);
	if (fd < 0)
		return log_errno(fd, "`%s`: create", path);
	r = copy_fd(in_fd, fd, max_bytes, NULL);
	if (r == -EFBIG)
		return log_error(r, "`%s`: more than the limit of %llu bytes", path,
		                 (unsigned long long)max_bytes);
	if (r < 0)
		return log_errno(r, "`%s`: write", path);
	if (fchmod(fd, mode & 0777) < 0)
		return log_errno(-errno, "`%s`: chmod", path);
	if (close(TAKE_FD(fd)) < 0)
		return log_errno(-errno, "`%s`: write", path);
	r = tmpname_commit(&tmp, name);
	if (r < 0)
		return log_errno(r, "`%s`: rename into place", path);
	return 0;
}

int sandbox_file_get(int out_fd, const char *path, const struct sandbox_files_limits *lim)
{
	_cleanup_close_ int fd = -1;
	uint64_t max_bytes, max_entries;
	struct stat st;
	int r;

	limits_of(lim, &max_bytes, &max_entries);
	/* O_NONBLOCK: a fifo opens at once, and fstat refuses it */
	fd = open_in_root(path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return log_error(fd, "`%s`: open: %s", path,
		                 fd == -ELOOP ? MAGIC_WORDS : strerror(-fd));
	if (fstat(fd, &st) < 0)
		return log_errno(-errno, "`%s`: stat", path);
	if (S_ISDIR(st.st_mode))
		return log_error(-EISDIR, "`%s`: is a directory", path);
	if (!S_ISREG(st.st_mode))
		return log_error(-EINVAL, "`%s`: not a regular file", path);
	if ((uint64_t)st.st_size > max_bytes)
		return log_error(-EFBIG, "`%s`: %llu bytes, past the limit of %llu", path,
		                 (unsigned long long)st.st_size, (unsigned long long)max_bytes);
	r = copy_fd(fd, out_fd, max_bytes, NULL);
	if (r == -EFBIG)
		return log_error(r, "`%s`: more than the limit of %llu bytes", path,
		                 (unsigned long long)max_bytes);
	if (r < 0)
		return log_errno(r, "`%s`: copy", path);
	return 0;
}

/* ---- extraction ---------------------------------------------------------- */

/* The regular files this extraction made, by normalised name: the only
 * targets a hard link may have. */
struct nameset {
	char **v;
	size_t cap, n;
};

static uint64_t name_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

static bool nameset_has(const struct nameset *s, const char *name)
{
	if (!s->cap)
		return false;
	for (size_t i = name_hash(name) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
		if (!s->v[i])
			return false;
		if (!strcmp(s->v[i], name))
			return true;
	}
}

static int nameset_add(struct nameset *s, const char *name)
{
	if (nameset_has(s, name))
		return 0;
	if ((s->n + 1) * 2 > s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		char **v = calloc(cap, sizeof(*v));

		if (!v)
			return -ENOMEM;
		for (size_t i = 0; i < s->cap; i++) {
			size_t j;

			if (!s->v[i])
				continue;
			for (j = name_hash(s->v[i]) & (cap - 1); v[j]; j = (j + 1) & (cap - 1))
				;
			v[j] = s->v[i];
		}
		free(s->v);
		s->v = v;
		s->cap = cap;
	}
	size_t j;
	for (j = name_hash(name) & (s->cap - 1); s->v[j]; j = (j + 1) & (s->cap - 1))
		;
	s->v[j] = strdup(name);
	if (!s->v[j])
		return -ENOMEM;
	s->n++;
	return 0;
}

static void nameset_free(struct nameset *s)
{
	for (size_t i = 0; i < s->cap; i++)
		free(s->v[i]);
	free(s->v);
}

/* A directory member's mode and mtime, applied at the end. */
struct dir_fix {
	char *name;
	mode_t mode;
	struct timespec mtime;
};

struct extract {
	const char *dir;        /* the target, as the caller named it (for errors) */
	int target;
	struct files_tar_reader *rd;
	uint64_t max_bytes, max_entries, bytes, entries;
	struct nameset files;
	struct dir_fix *fixes;
	size_t nfixes;
	/* the last member's parent, kept open for the next member */
	char *parent_name;
	int parent_fd;
	uint8_t *buf;
};

/* Normalise a member name in place: no leading "./", no empty or `.`
 * components, no trailing slash.  "" stands for the target itself.
 * -EINVAL (logged) for an absolute name or a `..` component. */
static int member_name(struct extract *x, const char *what, const char *in, char *out)
{
	size_t o = 0;
	const char *c = in;

	if (in[0] == '/')
		return log_error(-EINVAL, "tar into `%s`: `%s`: %s is absolute", x->dir, in, what);
	while (*c) {
		const char *e = strchrnul(c, '/');
		size_t n = (size_t)(e - c);

		if (n == 2 && c[0] == '.' && c[1] == '.')
			return log_error(-EINVAL, "tar into `%s`: `%s`: %s has a `..` component",
			                 x->dir, in, what);
		if (n > 0 && !(n == 1 && c[0] == '.')) {
			if (o)
				out[o++] = '/';
			memcpy(out + o, c, n);
			o += n;
		}
		c = *e ? e + 1 : e;
	}
	out[o] = 0;
	return 0;
}

/* The descriptor of the directory that holds member name (normalised, not
 * ""), made with its parents as needed, none of them through a symlink;
 * *ret_last gets name's last component.  Borrowed: valid until the next
 * call. */
static int member_parent(struct extract *x, const char *name, const char **ret_last, bool make)
{
	_cleanup_free_ char *p = NULL;
	_cleanup_close_ int cur = -1;
	const char *slash = strrchr(name, '/');
	size_t plen = slash ? (size_t)(slash - name) : 0;
	char *save = NULL, *c;

	*ret_last = slash ? slash + 1 : name;
	if (plen == 0)
		return x->target;
	if (x->parent_name && strlen(x->parent_name) == plen && !memcmp(x->parent_name, name, plen))
		return x->parent_fd;
	p = strndup(name, plen);
	if (!p)
		return -ENOMEM;
	cur = dup(x->target);
	if (cur < 0)
		return -errno;
	for (c = strtok_r(p, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		int fd;

		if (make && mkdirat(cur, c, 0755) < 0 && errno != EEXIST)
			return log_errno(-errno, "tar into `%s`: `%s`: make its parent `%s`",
			                 x->dir, name, c);
		fd = open_beneath(cur, c, O_RDONLY | O_DIRECTORY);
		if (fd < 0)
			return log_error(fd, "tar into `%s`: `%s`: its parent `%s`: %s", x->dir, name,
			                 c, errno_words(fd, strerror(-fd)));
		closep(&cur);
		cur = fd;
	}
	free(x->parent_name);
	closep(&x->parent_fd);
	x->parent_name = strndup(name, plen);
	if (!x->parent_name)
		return -ENOMEM;
	x->parent_fd = TAKE_FD(cur);
	return x->parent_fd;
}

static int extract_file(struct extract *x, const struct files_tar_hdr *h, const char *name)
{
	_cleanup_(tmpname_drop) struct tmpname tmp = { .dirfd = -1 };
	_cleanup_close_ int fd = -1;
	const char *last;
	struct timespec ts[2];
	int dirfd, r;

	dirfd = member_parent(x, name, &last, true);
	if (dirfd < 0)
		return dirfd;
	fd = tmpname_create(&tmp, dirfd);
	if (fd < 0)
		return log_errno(fd, "tar into `%s`: `%s`: create", x->dir, name);
	for (;;) {
		ssize_t n = files_tar_read(x->rd, x->buf, COPY_BUF);

		if (n < 0)
			return (int)n;
		if (n == 0)
			break;
		r = write_full(fd, x->buf, (size_t)n);
		if (r < 0)
			return log_errno(r, "tar into `%s`: `%s`: write", x->dir, name);
	}
	ts[0] = ts[1] = h->mtime;
	if (fchmod(fd, h->mode & 0777) < 0 || futimens(fd, ts) < 0)
		return log_errno(-errno, "tar into `%s`: `%s`: set mode and mtime", x->dir, name);
	if (close(TAKE_FD(fd)) < 0)
		return log_errno(-errno, "tar into `%s`: `%s`: write", x->dir, name);
	r = tmpname_commit(&tmp, last);
	if (r < 0)
		return log_error(r, "tar into `%s`: `%s`: %s", x->dir, name,
		                 r == -EISDIR ? "a directory is in the way" : strerror(-r));
	return nameset_add(&x->files, name);
}

static int extract_symlink(struct extract *x, const struct files_tar_hdr *h, const char *name)
{
	_cleanup_(tmpname_drop) struct tmpname tmp = { .dirfd = -1 };
	struct timespec ts[2] = { h->mtime, h->mtime };
	const char *last;
	int dirfd, r = -EEXIST;

	if (!h->link[0])
		return log_error(-EINVAL, "tar into `%s`: `%s`: a symlink with no target",
		                 x->dir, name);
	dirfd = member_parent(x, name, &last, true);
	if (dirfd < 0)
		return dirfd;
	for (int tries = 0; tries < 16 && r == -EEXIST; tries++) {
		tmpname_new(&tmp, dirfd);
		r = symlinkat(h->link, dirfd, tmp.name) < 0 ? -errno : 0;
	}
	if (r < 0)
		return log_errno(r, "tar into `%s`: `%s`: make the symlink", x->dir, name);
	tmp.live = true;
	(void)utimensat(dirfd, tmp.name, ts, AT_SYMLINK_NOFOLLOW);
	r = tmpname_commit(&tmp, last);
	if (r < 0)
		return log_error(r, "tar into `%s`: `%s`: %s", x->dir, name,
		                 r == -EISDIR ? "a directory is in the way" : strerror(-r));
	return 0;
}

static int extract_hardlink(struct extract *x, const struct files_tar_hdr *h, const char *name)
{
	_cleanup_(tmpname_drop) struct tmpname tmp = { .dirfd = -1 };
	_cleanup_close_ int tdir = -1;
	char target[FILES_TAR_NAME_MAX + 1];
	const char *last, *tlast;
	struct stat st;
	int dirfd, r = -EEXIST;

	r = member_name(x, "its link target", h->link, target);
	if (r < 0)
		return r;
	if (!nameset_has(&x->files, target))
		return log_error(-EPERM, "tar into `%s`: `%s`: a hard link to `%s`, which is not a "
		                 "file extracted before it", x->dir, name, h->link);
	/* the target's directory, opened afresh: the member's own parent
	 * may replace the one kept open */
	dirfd = member_parent(x, target, &tlast, false);
	if (dirfd < 0)
		return dirfd;
	tdir = dup(dirfd);
	if (tdir < 0)
		return -errno;
	dirfd = member_parent(x, name, &last, true);
	if (dirfd < 0)
		return dirfd;
	r = -EEXIST;
	for (int tries = 0; tries < 16 && r == -EEXIST; tries++) {
		tmpname_new(&tmp, dirfd);
		/* no AT_SYMLINK_FOLLOW: a symlink swapped in is linked itself */
		r = linkat(tdir, tlast, dirfd, tmp.name, 0) < 0 ? -errno : 0;
	}
	if (r < 0)
		return log_errno(r, "tar into `%s`: `%s`: link to `%s`", x->dir, name, h->link);
	tmp.live = true;
	if (fstatat(dirfd, tmp.name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
		return log_error(-EPERM, "tar into `%s`: `%s`: its link target `%s` is no longer "
		                 "a regular file", x->dir, name, h->link);
	r = tmpname_commit(&tmp, last);
	if (r < 0)
		return log_error(r, "tar into `%s`: `%s`: %s", x->dir, name,
		                 r == -EISDIR ? "a directory is in the way" : strerror(-r));
	return nameset_add(&x->files, name);
}

static int extract_dir(struct extract *x, const struct files_tar_hdr *h, const char *name)
{
	_cleanup_close_ int fd = -1;
	struct dir_fix *f;
	const char *last;
	int dirfd;

	if (name[0]) {
		dirfd = member_parent(x, name, &last, true);
		if (dirfd < 0)
			return dirfd;
		if (mkdirat(dirfd, last, 0700) < 0 && errno != EEXIST)
			return log_errno(-errno, "tar into `%s`: `%s`: make the directory", x->dir, name);
		fd = open_beneath(dirfd, last, O_RDONLY | O_DIRECTORY);
		if (fd < 0)
			return log_error(fd, "tar into `%s`: `%s`: %s", x->dir, name,
			                 fd == -ENOTDIR ? "something else is in the way"
			                                : errno_words(fd, strerror(-fd)));
	}
	f = realloc(x->fixes, (x->nfixes + 1) * sizeof(*f));
	if (!f)
		return -ENOMEM;
	x->fixes = f;
	f = &x->fixes[x->nfixes];
	f->name = strdup(name);
	if (!f->name)
		return -ENOMEM;
	f->mode = h->mode & 01777;
	f->mtime = h->mtime;
	x->nfixes++;
	return 0;
}

/* Directory modes and mtimes, deepest first (a child's entry changes its
 * parent's mtime); each reopened beneath the target, never through a
 * symlink.  The first error is returned, after every one has been tried. */
static int apply_dir_fixes(struct extract *x)
{
	int ret = 0;

	for (size_t i = x->nfixes; i-- > 0;) {
		struct dir_fix *f = &x->fixes[i];
		struct timespec ts[2] = { f->mtime, f->mtime };
		_cleanup_close_ int fd = -1;
		const char *last;
		int dirfd;

		if (f->name[0]) {
			dirfd = member_parent(x, f->name, &last, false);
			if (dirfd < 0) {
				ret = ret ?: dirfd;
				continue;
			}
			fd = open_beneath(dirfd, last, O_RDONLY | O_DIRECTORY);
		} else {
			fd = dup(x->target);
		}
		if (fd < 0 || fchmod(fd, f->mode) < 0 || futimens(fd, ts) < 0) {
			int r = fd < 0 ? fd : -errno;

			ret = ret ?: log_errno(r, "tar into `%s`: `%s`: set mode and mtime", x->dir,
			                       f->name[0] ? f->name : ".");
		}
	}
	return ret;
}

static int extract_all(struct extract *x)
{
	char name[FILES_TAR_NAME_MAX + 1];
	struct files_tar_hdr h;
	int r;

	for (;;) {
		r = files_tar_next(x->rd, &h);
		if (r <= 0)
			return r;
		if (++x->entries > x->max_entries)
			return log_error(-EFBIG, "tar into `%s`: more than the limit of %llu members",
			                 x->dir, (unsigned long long)x->max_entries);
		r = member_name(x, "its name", h.path, name);
		if (r < 0)
			return r;
		if (h.size > x->max_bytes - x->bytes)
			return log_error(-EFBIG, "tar into `%s`: `%s`: %llu bytes pass the limit of %llu "
			                 "for the archive", x->dir, h.path, (unsigned long long)h.size,
			                 (unsigned long long)x->max_bytes);
		x->bytes += h.size;
		if (!name[0] && h.type != FILES_TAR_DIR)
			return log_error(-EINVAL, "tar into `%s`: `%s`: names the target directory "
			                 "itself", x->dir, h.path);
		switch (h.type) {
		case FILES_TAR_FILE:
			r = extract_file(x, &h, name);
			break;
		case FILES_TAR_DIR:
			r = extract_dir(x, &h, name);
			break;
		case FILES_TAR_SYMLINK:
			r = extract_symlink(x, &h, name);
			break;
		case FILES_TAR_HARDLINK:
			r = extract_hardlink(x, &h, name);
			break;
		case FILES_TAR_CHAR:
		case FILES_TAR_BLOCKDEV:
			r = log_error(-EPERM, "tar into `%s`: `%s`: device nodes are refused", x->dir,
			              h.path);
			break;
		case FILES_TAR_FIFO:
			r = log_error(-EPERM, "tar into `%s`: `%s`: fifos are refused", x->dir, h.path);
			break;
		default:
			r = log_error(-EOPNOTSUPP, "tar into `%s`: `%s`: member type '%c' is not "
			              "supported", x->dir, h.path, h.type > ' ' && h.type < 127 ? h.type : '?');
			break;
		}
		if (r < 0)
			return r;
	}
}

int sandbox_tar_put(int in_fd, const char *dir, const struct sandbox_files_limits *lim)
{
	struct extract x = { .dir = dir, .target = -1, .parent_fd = -1 };
	int r, r2;

	limits_of(lim, &x.max_bytes, &x.max_entries);
	x.buf = malloc(COPY_BUF);
	if (!x.buf)
		return -ENOMEM;
	r = open_dir(dir, dir, true, &x.target);
	if (r >= 0)
		r = files_tar_reader_new(in_fd, &x.rd);
	if (r >= 0)
		r = extract_all(&x);
	if (x.target >= 0) {
		r2 = apply_dir_fixes(&x);
		r = r < 0 ? r : r2;
	}
	for (size_t i = 0; i < x.nfixes; i++)
		free(x.fixes[i].name);
	free(x.fixes);
	nameset_free(&x.files);
	free(x.parent_name);
	closep(&x.parent_fd);
	closep(&x.target);
	if (x.rd)
		files_tar_reader_free(x.rd);
	free(x.buf);
	return r < 0 ? r : 0;
}

/* ---- archiving ----------------------------------------------------------- */

struct archive {
	const char *dir;
	int out;
	uint64_t max_bytes, max_entries, bytes, entries;
	/* files with more than one link seen so far: later ones become hard links */
	struct seen { dev_t dev; ino_t ino; char *name; } *seen;
	size_t nseen;
	uint8_t *buf;
};

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* dfd's entries, sorted (the archive's order does not depend on the
 * filesystem's). */
static int list_dir(int dfd, char ***ret, size_t *ret_n)
{
	int fd = dup(dfd);
	DIR *d;
	struct dirent *de;
	char **v = NULL;
	size_t n = 0;

	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	rewinddir(d);
	while ((errno = 0, de = readdir(d))) {
		char **nv;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		nv = realloc(v, (n + 1) * sizeof(*v));
		if (!nv || !(nv[n] = strdup(de->d_name))) {
			v = nv ? nv : v;
			goto oom;
		}
		v = nv;
		n++;
	}
	if (errno) {
		int r = -errno;

		closedir(d);
		for (size_t i = 0; i < n; i++)
			free(v[i]);
		free(v);
		return r;
	}
	closedir(d);
	if (n)
		qsort(v, n, sizeof(*v), name_cmp);
	*ret = v;
	*ret_n = n;
	return 0;
oom:
	closedir(d);
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
	return -ENOMEM;
}

static int archive_file(struct archive *a, int dfd, const char *name, const char *rel,
                        const struct stat *st0)
{
	_cleanup_close_ int fd = open_beneath(dfd, name, O_RDONLY | O_NONBLOCK | O_NOCTTY);
	struct files_tar_hdr h = { .path = rel, .link = "", .type = FILES_TAR_FILE };
	struct stat st;
	uint64_t left;
	int r;

	if (fd == -ENOENT)
		return 0;       /* gone since the listing */
	if (fd < 0)
		return log_errno(fd, "tar of `%s`: `%s`: open", a->dir, rel);
	if (fstat(fd, &st) < 0)
		return log_errno(-errno, "tar of `%s`: `%s`: stat", a->dir, rel);
	if (!S_ISREG(st.st_mode) || st.st_ino != st0->st_ino)
		return log_error(-EAGAIN, "tar of `%s`: `%s`: changed while being archived",
		                 a->dir, rel);
	if (st.st_nlink > 1) {
		for (size_t i = 0; i < a->nseen; i++)
			if (a->seen[i].dev == st.st_dev && a->seen[i].ino == st.st_ino) {
				h.type = FILES_TAR_HARDLINK;
				h.link = a->seen[i].name;
				h.mode = st.st_mode & 07777;
				h.mtime = st.st_mtim;
				return files_tar_write_header(a->out, &h);
			}
		struct seen *s = realloc(a->seen, (a->nseen + 1) * sizeof(*s));
		if (!s)
			return -ENOMEM;
		a->seen = s;
		s[a->nseen] = (struct seen){ st.st_dev, st.st_ino, strdup(rel) };
		if (!s[a->nseen].name)
			return -ENOMEM;
		a->nseen++;
	}
	if ((uint64_t)st.st_size > a->max_bytes - a->bytes)
		return log_error(-EFBIG, "tar of `%s`: `%s`: %llu bytes pass the limit of %llu for "
		                 "the archive", a->dir, rel, (unsigned long long)st.st_size,
		                 (unsigned long long)a->max_bytes);
	a->bytes += (uint64_t)st.st_size;
	h.mode = st.st_mode & 07777;
	h.size = (uint64_t)st.st_size;
	h.mtime = st.st_mtim;
	r = files_tar_write_header(a->out, &h);
	if (r < 0)
		return log_errno(r, "tar of `%s`: `%s`: write", a->dir, rel);
	for (left = h.size; left > 0;) {
		ssize_t n = read(fd, a->buf, (size_t)MIN(left, (uint64_t)COPY_BUF));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return log_errno(-errno, "tar of `%s`: `%s`: read", a->dir, rel);
		if (n == 0)
			/* the header promised more: the stream cannot go on */
			return log_error(-EAGAIN, "tar of `%s`: `%s`: shrank while being archived",
			                 a->dir, rel);
		r = write_full(a->out, a->buf, (size_t)n);
		if (r < 0)
			return log_errno(r, "tar of `%s`: write", a->dir);
		left -= (uint64_t)n;
	}
	r = files_tar_write_pad(a->out, h.size);
	return r < 0 ? log_errno(r, "tar of `%s`: write", a->dir) : 0;
}

static int archive_dir(struct archive *a, int dfd, const char *prefix, unsigned depth)
{
	char **names = NULL;
	size_t n = 0;
	int r;

	if (depth > GET_DEPTH_MAX)
		return log_error(-ELOOP, "tar of `%s`: `%s`: more than %d levels deep", a->dir,
		                 prefix, GET_DEPTH_MAX);
	r = list_dir(dfd, &names, &n);
	if (r < 0)
		return log_errno(r, "tar of `%s`: `%s`: list", a->dir, prefix[0] ? prefix : ".");
	for (size_t i = 0; i < n && r >= 0; i++) {
		_cleanup_free_ char *rel = NULL;
		struct stat st;

		if (asprintf(&rel, "%s%s", prefix, names[i]) < 0) {
			rel = NULL;
			r = -ENOMEM;
			break;
		}
		if (fstatat(dfd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue;
			r = log_errno(-errno, "tar of `%s`: `%s`: stat", a->dir, rel);
			break;
		}
		if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode)) {
			log_msg(LOG_WARN, "tar of `%s`: `%s`: not a file, directory or symlink: left "
			        "out", a->dir, rel);
			continue;
		}
		if (++a->entries > a->max_entries) {
			r = log_error(-EFBIG, "tar of `%s`: more than the limit of %llu members",
			              a->dir, (unsigned long long)a->max_entries);
			break;
		}
		if (S_ISREG(st.st_mode)) {
			r = archive_file(a, dfd, names[i], rel, &st);
		} else if (S_ISLNK(st.st_mode)) {
			char target[FILES_TAR_NAME_MAX + 1];
			ssize_t len = readlinkat(dfd, names[i], target, sizeof(target));
			struct files_tar_hdr h = { .path = rel, .link = target,
			                           .type = FILES_TAR_SYMLINK, .mode = 0777,
			                           .mtime = st.st_mtim };

			if (len < 0 || (size_t)len >= sizeof(target)) {
				r = log_errno(len < 0 ? -errno : -ENAMETOOLONG,
				              "tar of `%s`: `%s`: read the symlink", a->dir, rel);
				break;
			}
			target[len] = 0;
			r = files_tar_write_header(a->out, &h);
		} else {
			_cleanup_free_ char *sub = NULL;
			_cleanup_close_ int cfd = open_beneath(dfd, names[i], O_RDONLY | O_DIRECTORY);
			struct files_tar_hdr h = { .path = NULL, .link = "", .type = FILES_TAR_DIR,
			                           .mode = st.st_mode & 07777, .mtime = st.st_mtim };

			if (cfd == -ENOENT)
				continue;
			if (cfd < 0) {
				r = log_error(cfd, "tar of `%s`: `%s`: %s", a->dir, rel,
				              cfd == -ELOOP || cfd == -ENOTDIR
				              ? "changed while being archived" : strerror(-cfd));
				break;
			}
			if (asprintf(&sub, "%s/", rel) < 0) {
				sub = NULL;
				r = -ENOMEM;
				break;
			}
			h.path = sub;
			r = files_tar_write_header(a->out, &h);
			if (r >= 0)
				r = archive_dir(a, cfd, sub, depth + 1);
		}
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return r;
}

int sandbox_tar_get(int out_fd, const char *dir, const struct sandbox_files_limits *lim)
{
	struct archive a = { .dir = dir, .out = out_fd };
	_cleanup_close_ int dfd = -1;
	int r;

	limits_of(lim, &a.max_bytes, &a.max_entries);
	r = open_dir(dir, dir, false, &dfd);
	if (r < 0)
		return r;
	a.buf = malloc(COPY_BUF);
	if (!a.buf)
		return -ENOMEM;
	r = archive_dir(&a, dfd, "", 0);
	if (r >= 0) {
		r = files_tar_write_end(out_fd);
		if (r < 0)
			log_errno(r, "tar of `%s`: write", dir);
	}
	for (size_t i = 0; i < a.nseen; i++)
		free(a.seen[i].name);
	free(a.seen);
	free(a.buf);
	return r < 0 ? r : 0;
}
