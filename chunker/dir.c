/*
 * dir.c — a directory as a build source.
 *
 * Entries are visited in byte order of their names, so that the same tree
 * always builds the same index and the same packed chunks.  Hard links are
 * found by (device, inode) and become one inode in the index; sparse files
 * are read region by region with SEEK_DATA/SEEK_HOLE, so holes stay holes.
 * Every entry keeps its full mode, owner, mtime with nanoseconds, device
 * number and extended attributes.
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

#include "chunker/chunker.h"
#include "image/image.h"
#include "lib/lib.h"

#define READ_SIZE (1024 * 1024)

struct link_entry {
	dev_t dev;
	ino_t ino;
	char *path;
};

struct dir_walk {
	struct build *b;
	struct image_tree *t;
	const char *root;
	uint8_t *buf;
	struct link_entry *links;
	size_t nlinks, links_cap;
};

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The sorted names in the directory at path (without "." and ".."). */
static int list_dir(const char *path, char ***ret, size_t *ret_n)
{
	DIR *d = opendir(path);
	struct dirent *de;
	char **v = NULL;
	size_t n = 0, cap = 0;
	int r = 0;

	if (!d)
		return -errno;
	errno = 0;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (n == cap) {
			char **nv = realloc(v, (cap = cap ? cap * 2 : 32) * sizeof(*v));

			if (!nv) {
				r = -ENOMEM;
				break;
			}
			v = nv;
		}
		if (!(v[n] = strdup(de->d_name))) {
			r = -ENOMEM;
			break;
		}
		n++;
	}
	if (r == 0 && errno)
		r = -errno;
	closedir(d);
	if (r < 0) {
		while (n)
			free(v[--n]);
		free(v);
		return r;
	}
	if (n)
		qsort(v, n, sizeof(*v), cmp_names);
	*ret = v;
	*ret_n = n;
	return 0;
}

static void attr_from_stat(const struct stat *st, struct image_attr *a)
{
	a->mode = st->st_mode;
	a->uid = st->st_uid;
	a->gid = st->st_gid;
	a->mtime_sec = st->st_mtim.tv_sec;
	a->mtime_nsec = (uint32_t)st->st_mtim.tv_nsec;
	a->rdev = (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode)) ? st->st_rdev : 0;
}

static int copy_xattrs(const char *path, struct image_inode *ino)
{
	_cleanup_free_ char *names = NULL;
	_cleanup_free_ void *val = NULL;
	size_t vcap = 0;
	ssize_t n;

	n = llistxattr(path, NULL, 0);
	if (n < 0)
		return (errno == ENOTSUP || errno == ENODATA) ? 0 : -errno;
	if (n == 0)
		return 0;
	names = malloc((size_t)n);
	if (!names)
		return -ENOMEM;
	n = llistxattr(path, names, (size_t)n);
	if (n < 0)
		return -errno;
	for (char *p = names; p < names + n; p += strlen(p) + 1) {
		ssize_t vl = lgetxattr(path, p, NULL, 0);
		int r;

		if (vl < 0) {
			if (errno == ENODATA)
				continue;
			return -errno;
		}
		if ((size_t)vl + 1 > vcap) {
			void *nv = realloc(val, (size_t)vl + 1);

			if (!nv)
				return -ENOMEM;
			val = nv;
			vcap = (size_t)vl + 1;
		}
		vl = lgetxattr(path, p, val, vcap);
		if (vl < 0)
			return -errno;
		r = image_inode_set_xattr(ino, p, val, (size_t)vl);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Stream [off, end) of fd into the build. */
static int read_range(struct dir_walk *w, int fd, uint64_t off, uint64_t end)
{
	while (off < end) {
		size_t want = (size_t)MIN((uint64_t)READ_SIZE, end - off);
		ssize_t k = pread_full(fd, w->buf, want, off);
		int r;

		if (k < 0)
			return (int)k;
		if ((size_t)k != want)
			return -EIO;  /* shrank while we read */
		r = build_file_data(w->b, w->buf, (size_t)k);
		if (r < 0)
			return r;
		off += (uint64_t)k;
	}
	return 0;
}

static int add_file(struct dir_walk *w, const char *path, const struct stat *st,
                    struct image_inode *ino)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME);
	uint64_t size = (uint64_t)st->st_size, off = 0;
	int r;

	if (fd < 0 && errno == EPERM)
		fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	r = build_file_begin(w->b, ino, size);
	if (r < 0)
		return r;
	if ((uint64_t)st->st_blocks * 512 < size) {
		/* sparse: data regions only */
		while (off < size) {
			off_t data = lseek(fd, (off_t)off, SEEK_DATA), hole;

			if (data < 0) {
				if (errno != ENXIO)
					return -errno;
				data = (off_t)size;
			}
			if ((uint64_t)data > size)
				data = (off_t)size;
			if ((uint64_t)data > off) {
				r = build_file_hole(w->b, (uint64_t)data - off);
				if (r < 0)
					return r;
				off = (uint64_t)data;
			}
			if (off >= size)
				break;
			hole = lseek(fd, (off_t)off, SEEK_HOLE);
			if (hole < 0)
				return -errno;
			if ((uint64_t)hole > size)
				hole = (off_t)size;
			r = read_range(w, fd, off, (uint64_t)hole);
			if (r < 0)
				return r;
			off = (uint64_t)hole;
		}
	} else {
		r = read_range(w, fd, 0, size);
		if (r < 0)
			return r;
	}
	r = build_file_end(w->b);
	return r == -EIO ? -EAGAIN : r;
}

static const char *find_link(struct dir_walk *w, const struct stat *st)
{
	for (size_t i = w->nlinks; i-- > 0;)
		if (w->links[i].dev == st->st_dev && w->links[i].ino == st->st_ino)
			return w->links[i].path;
	return NULL;
}

static int remember_link(struct dir_walk *w, const struct stat *st, const char *rel)
{
	if (w->nlinks == w->links_cap) {
		size_t cap = w->links_cap ? w->links_cap * 2 : 64;
		struct link_entry *v = realloc(w->links, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		w->links = v;
		w->links_cap = cap;
	}
	w->links[w->nlinks].path = strdup(rel);
	if (!w->links[w->nlinks].path)
		return -ENOMEM;
	w->links[w->nlinks].dev = st->st_dev;
	w->links[w->nlinks].ino = st->st_ino;
	w->nlinks++;
	return 0;
}

/* Add the entry at path (rel: its path in the image, "" for the root). */
static int walk(struct dir_walk *w, const char *path, const char *rel)
{
	struct stat st;
	struct image_attr a;
	struct image_inode *ino;
	const char *first;
	int r;

	if (lstat(path, &st) < 0)
		return log_errno(-errno, "source '%s'", path);
	if (*rel && !S_ISDIR(st.st_mode) && st.st_nlink > 1 && (first = find_link(w, &st))) {
		r = image_tree_link(w->t, rel, first);
		if (r < 0)
			return log_errno(r, "source '%s': hard link to '%s'", path, first);
		build_count_entry(w->b);
		return 0;
	}
	attr_from_stat(&st, &a);
	r = image_tree_add(w->t, rel, &a, &ino);
	if (r < 0)
		return log_errno(r, "source '%s': adding to the image", path);
	build_count_entry(w->b);
	r = copy_xattrs(path, ino);
	if (r < 0)
		return log_errno(r, "source '%s': reading extended attributes", path);
	if (S_ISLNK(st.st_mode)) {
		char target[PATH_MAX + 1];
		ssize_t n = readlink(path, target, sizeof(target) - 1);

		if (n < 0)
			return log_errno(-errno, "source '%s': reading symlink", path);
		target[n] = 0;
		r = image_inode_set_symlink(ino, target);
		if (r < 0)
			return log_errno(r, "source '%s'", path);
	} else if (S_ISREG(st.st_mode)) {
		r = add_file(w, path, &st, ino);
		if (r == -EAGAIN)
			return log_error(-EIO, "source '%s': file changed while it was read", path);
		if (r == -ECANCELED)
			return r;
		if (r < 0)
			return log_errno(r, "source '%s': reading", path);
	} else if (S_ISDIR(st.st_mode)) {
		char **names;
		size_t n;

		r = list_dir(path, &names, &n);
		if (r < 0)
			return log_errno(r, "source '%s': listing directory", path);
		for (size_t i = 0; i < n; i++) {
			char cpath[PATH_MAX], crel[PATH_MAX];

			if (r == 0 && ((size_t)snprintf(cpath, sizeof(cpath), "%s/%s", path, names[i]) >=
			               sizeof(cpath) ||
			               (size_t)snprintf(crel, sizeof(crel), "%s%s%s", rel, *rel ? "/" : "",
			                                names[i]) >= sizeof(crel)))
				r = log_error(-ENAMETOOLONG, "source '%s/%s': path too long", path, names[i]);
			if (r == 0)
				r = walk(w, cpath, crel);
			free(names[i]);
		}
		free(names);
		if (r < 0)
			return r;
	}
	if (!S_ISDIR(st.st_mode) && st.st_nlink > 1 && *rel) {
		r = remember_link(w, &st, rel);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Sum of regular file sizes under path, for the progress bar's ETA. */
static uint64_t du(const char *path)
{
	char **names;
	size_t n;
	uint64_t total = 0;

	if (list_dir(path, &names, &n) < 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char p[PATH_MAX];
		struct stat st;

		if ((size_t)snprintf(p, sizeof(p), "%s/%s", path, names[i]) < sizeof(p) &&
		    lstat(p, &st) == 0) {
			if (S_ISREG(st.st_mode))
				total += (uint64_t)st.st_size;
			else if (S_ISDIR(st.st_mode))
				total += du(p);
		}
		free(names[i]);
	}
	free(names);
	return total;
}

int source_dir(struct build *b, const char *path)
{
	struct dir_walk w = { .b = b, .t = build_tree(b), .root = path };
	struct stat st;
	int r;

	if (stat(path, &st) < 0)
		return log_errno(-errno, "source '%s'", path);
	if (!S_ISDIR(st.st_mode))
		return log_error(-ENOTDIR, "source '%s': not a directory", path);
	if (build_get_params(b)->progress)
		build_set_total(b, du(path));
	w.buf = malloc(READ_SIZE);
	if (!w.buf)
		return -ENOMEM;
	r = walk(&w, path, "");
	for (size_t i = 0; i < w.nlinks; i++)
		free(w.links[i].path);
	free(w.links);
	free(w.buf);
	return r;
}
