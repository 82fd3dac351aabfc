/*
 * treecmp — compare two directory trees exactly, for the integration tests.
 *
 *   treecmp [--no-atime] [--ignore-root-mtime] [--no-holes] [--quiet] A B
 *
 * Prints one line per difference, "PATH: WHAT: A-VALUE vs B-VALUE", and exits 0 when the trees
 * are identical, 1 when they differ, 2 on a usage error or when a tree cannot be read.
 *
 * Compared, for every entry (the roots included, named "."): presence; file type; the full mode
 * including setuid, setgid and sticky bits; uid and gid; atime and mtime to the nanosecond, for
 * directories and symlinks too; the size of regular files and symlinks; rdev of devices; symlink
 * targets; the contents of regular files byte for byte; their data/hole map as SEEK_DATA and
 * SEEK_HOLE report it; every extended attribute, security.* and system.posix_acl_* included,
 * byte for byte; and the hard-link structure: names that share an inode in A must share one in B,
 * and the other way round.
 *
 * Not compared, because no copy can reproduce them: ctime, inode numbers, st_dev, directory sizes
 * and link counts as such (they depend on the filesystem; the in-tree link structure is checked).
 *
 * The trees are read without disturbing them: every lstat happens before any read, files and
 * directories are opened with O_NOATIME where the kernel allows it, and a symlink's atime, which
 * readlink updates, is put back; so a second run sees the same atimes as the first.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/xattr.h>
#include <unistd.h>

#define BUF_SIZE (1 << 20)

struct entry {
	char *path;		/* relative to the tree's root; "." for the root */
	struct stat st;
	const char *link_peer;	/* smallest path in the tree sharing this inode (itself if none) */
};

struct tree {
	const char *root;
	int root_fd;
	struct entry *v;
	size_t n, cap;
};

static struct {
	bool atime;
	bool root_mtime;
	bool holes;
	bool quiet;
} opt = { .atime = true, .root_mtime = true, .holes = true };

static unsigned long ndiff;
static int trouble;		/* set when a tree could not be read: exit 2 */

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p) {
		fprintf(stderr, "treecmp: out of memory\n");
		exit(2);
	}
	return p;
}

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p) {
		fprintf(stderr, "treecmp: out of memory\n");
		exit(2);
	}
	return p;
}

static char *xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;

	return memcpy(xmalloc(n), s, n);
}

__attribute__((format(printf, 2, 3)))
static void io_error(const char *path, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "treecmp: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " `%s`: %s\n", path, strerror(errno));
	trouble = 1;
}

/* Print a path with control bytes and backslashes escaped, so that one difference is one line. */
static void put_escaped(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '\\')
			fputs("\\\\", stdout);
		else if (c < 0x20 || c == 0x7f)
			printf("\\%03o", c);
		else
			putchar(c);
	}
}

__attribute__((format(printf, 2, 3)))
static void diff(const char *path, const char *fmt, ...)
{
	va_list ap;

	ndiff++;
	if (opt.quiet)
		return;
	put_escaped(path, strlen(path));
	fputs(": ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

/* Open PATH (relative to the tree) for reading without updating its atime when we may. */
static int open_noatime(const struct tree *t, const char *path, int flags)
{
	int fd = openat(t->root_fd, path, flags | O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME);

	if (fd < 0 && errno == EPERM)
		fd = openat(t->root_fd, path, flags | O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	return fd;
}

static void add_entry(struct tree *t, char *path, const struct stat *st)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 1024;
		t->v = xrealloc(t->v, t->cap * sizeof(*t->v));
	}
	t->v[t->n].path = path;
	t->v[t->n].st = *st;
	t->v[t->n].link_peer = path;
	t->n++;
}

/* Record every entry below directory PATH (already recorded itself), depth first. */
static void walk(struct tree *t, const char *path)
{
	struct dirent *de;
	DIR *d;
	int fd;

	fd = open_noatime(t, path, O_DIRECTORY);
	if (fd < 0) {
		io_error(path, "open directory");
		return;
	}
	d = fdopendir(fd);
	if (!d) {
		io_error(path, "fdopendir");
		close(fd);
		return;
	}
	while ((errno = 0, de = readdir(d))) {
		struct stat st;
		size_t len;
		char *child;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (!strcmp(path, ".")) {
			child = xstrdup(de->d_name);
		} else {
			len = strlen(path) + 1 + strlen(de->d_name) + 1;
			child = xmalloc(len);
			snprintf(child, len, "%s/%s", path, de->d_name);
		}
		if (fstatat(t->root_fd, child, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			io_error(child, "lstat");
			free(child);
			continue;
		}
		add_entry(t, child, &st);
		if (S_ISDIR(st.st_mode))
			walk(t, child);
	}
	if (errno)
		io_error(path, "readdir");
	closedir(d);
}

static int cmp_path(const void *a, const void *b)
{
	return strcmp(((const struct entry *)a)->path, ((const struct entry *)b)->path);
}

static int cmp_inode(const void *a, const void *b)
{
	const struct entry *x = *(const struct entry *const *)a, *y = *(const struct entry *const *)b;

	if (x->st.st_dev != y->st.st_dev)
		return x->st.st_dev < y->st.st_dev ? -1 : 1;
	if (x->st.st_ino != y->st.st_ino)
		return x->st.st_ino < y->st.st_ino ? -1 : 1;
	return strcmp(x->path, y->path);
}

/*
 * Give every non-directory entry the smallest path that shares its inode, so that the link
 * structures of two trees compare entry by entry: equal peers everywhere means equal partitions.
 */
static void find_link_peers(struct tree *t)
{
	struct entry **by_ino = xmalloc(t->n * sizeof(*by_ino));
	size_t m = 0;

	for (size_t i = 0; i < t->n; i++)
		if (!S_ISDIR(t->v[i].st.st_mode) && t->v[i].st.st_nlink > 1)
			by_ino[m++] = &t->v[i];
	qsort(by_ino, m, sizeof(*by_ino), cmp_inode);
	for (size_t i = 0; i < m; ) {
		size_t j = i;

		while (j < m && by_ino[j]->st.st_dev == by_ino[i]->st.st_dev &&
		       by_ino[j]->st.st_ino == by_ino[i]->st.st_ino)
			by_ino[j++]->link_peer = by_ino[i]->path;
		i = j;
	}
	free(by_ino);
}

static int load_tree(struct tree *t, const char *root)
{
	struct stat st;

	t->root = root;
	t->root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (t->root_fd < 0 || fstat(t->root_fd, &st) < 0) {
		io_error(root, "open tree");
		return -1;
	}
	add_entry(t, xstrdup("."), &st);
	walk(t, ".");
	qsort(t->v, t->n, sizeof(*t->v), cmp_path);
	find_link_peers(t);
	return 0;
}

static void free_tree(struct tree *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->v[i].path);
	free(t->v);
	if (t->root_fd >= 0)
		close(t->root_fd);
}

static const char *type_name(mode_t m)
{
	switch (m & S_IFMT) {
	case S_IFREG: return "regular file";
	case S_IFDIR: return "directory";
	case S_IFLNK: return "symlink";
	case S_IFCHR: return "char device";
	case S_IFBLK: return "block device";
	case S_IFIFO: return "fifo";
	case S_IFSOCK: return "socket";
	default: return "unknown type";
	}
}

static void cmp_time(const char *path, const char *what, const struct timespec *a,
		     const struct timespec *b)
{
	if (a->tv_sec != b->tv_sec || a->tv_nsec != b->tv_nsec)
		diff(path, "%s: %lld.%09ld vs %lld.%09ld", what, (long long)a->tv_sec, a->tv_nsec,
		     (long long)b->tv_sec, b->tv_nsec);
}

/*
 * readlink updates a symlink's atime (there is no O_NOATIME for it), so put the atime seen by
 * the walk back afterwards; on a read-only tree that fails harmlessly, and ctime is not compared.
 */
static ssize_t read_link(const struct tree *t, const struct entry *e, char *buf, size_t cap)
{
	ssize_t n = readlinkat(t->root_fd, e->path, buf, cap - 1);
	struct stat st;

	if (n < 0) {
		io_error(e->path, "readlink");
		return -1;
	}
	buf[n] = '\0';
	if (fstatat(t->root_fd, e->path, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    (st.st_atim.tv_sec != e->st.st_atim.tv_sec ||
	     st.st_atim.tv_nsec != e->st.st_atim.tv_nsec)) {
		struct timespec ts[2] = { e->st.st_atim, { .tv_nsec = UTIME_OMIT } };

		(void)utimensat(t->root_fd, e->path, ts, AT_SYMLINK_NOFOLLOW);
	}
	return n;
}

static void cmp_symlink(const struct tree *a, const struct tree *b, const struct entry *ea,
			const struct entry *eb)
{
	char ta[PATH_MAX + 1], tb[PATH_MAX + 1];
	const char *path = ea->path;

	if (read_link(a, ea, ta, sizeof(ta)) < 0 || read_link(b, eb, tb, sizeof(tb)) < 0)
		return;
	if (strcmp(ta, tb)) {
		ndiff++;
		if (opt.quiet)
			return;
		put_escaped(path, strlen(path));
		fputs(": symlink target: ", stdout);
		put_escaped(ta, strlen(ta));
		fputs(" vs ", stdout);
		put_escaped(tb, strlen(tb));
		putchar('\n');
	}
}

/*
 * The data segments of an open file as SEEK_DATA/SEEK_HOLE report them, as a flat array of
 * [start, end) pairs. Returns the number of pairs, or -1 on error.
 */
static ssize_t data_map(int fd, off_t size, off_t **ret_map)
{
	off_t *map = NULL, pos = 0;
	size_t n = 0, cap = 0;

	while (pos < size) {
		off_t start = lseek(fd, pos, SEEK_DATA), end;

		if (start < 0) {
			if (errno == ENXIO)
				break;	/* nothing but a hole up to EOF */
			free(map);
			return -1;
		}
		end = lseek(fd, start, SEEK_HOLE);
		if (end < 0) {
			free(map);
			return -1;
		}
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			map = xrealloc(map, 2 * cap * sizeof(*map));
		}
		map[2 * n] = start;
		map[2 * n + 1] = end;
		n++;
		pos = end;
	}
	*ret_map = map;
	return (ssize_t)n;
}

static void format_map(char *buf, size_t cap, const off_t *map, ssize_t n)
{
	size_t len = 0;

	buf[0] = '\0';
	if (n == 0)
		snprintf(buf, cap, "all hole");
	for (ssize_t i = 0; i < n && len < cap; i++) {
		if (i == 4) {
			snprintf(buf + len, cap - len, " ... (%zd data segments)", n);
			break;
		}
		len += (size_t)snprintf(buf + len, cap - len, "%sdata %lld-%lld", i ? ", " : "",
					(long long)map[2 * i], (long long)map[2 * i + 1]);
	}
}

static void cmp_holes(const char *path, int fa, int fb, off_t size)
{
	off_t *ma = NULL, *mb = NULL;
	ssize_t na = data_map(fa, size, &ma), nb;
	char sa[256], sb[256];

	if (na < 0) {
		io_error(path, "SEEK_DATA/SEEK_HOLE in A on");
		return;
	}
	nb = data_map(fb, size, &mb);
	if (nb < 0) {
		io_error(path, "SEEK_DATA/SEEK_HOLE in B on");
		free(ma);
		return;
	}
	if (na != nb || (na && memcmp(ma, mb, 2 * (size_t)na * sizeof(*ma)))) {
		format_map(sa, sizeof(sa), ma, na);
		format_map(sb, sizeof(sb), mb, nb);
		diff(path, "hole map differs: %s vs %s", sa, sb);
	}
	free(ma);
	free(mb);
}

static void cmp_contents(const struct tree *a, const struct tree *b, const char *path, off_t size)
{
	static char *ba, *bb;
	off_t off = 0;
	int fa, fb;

	if (!ba) {
		ba = xmalloc(BUF_SIZE);
		bb = xmalloc(BUF_SIZE);
	}
	fa = open_noatime(a, path, 0);
	if (fa < 0) {
		io_error(path, "open in A");
		return;
	}
	fb = open_noatime(b, path, 0);
	if (fb < 0) {
		io_error(path, "open in B");
		close(fa);
		return;
	}
	if (opt.holes)
		cmp_holes(path, fa, fb, size);
	while (off < size) {
		size_t want = size - off < BUF_SIZE ? (size_t)(size - off) : BUF_SIZE;
		ssize_t ra = pread(fa, ba, want, off), rb = pread(fb, bb, want, off);

		if (ra < 0 || rb < 0) {
			io_error(path, "read in %s", ra < 0 ? "A" : "B");
			break;
		}
		if (ra != rb || ra == 0) {
			diff(path, "contents: short read at byte %lld: %zd vs %zd bytes",
			     (long long)off, ra, rb);
			break;
		}
		if (memcmp(ba, bb, (size_t)ra)) {
			size_t i = 0;

			while (ba[i] == bb[i])
				i++;
			diff(path, "contents differ at byte %lld: 0x%02x vs 0x%02x",
			     (long long)(off + (off_t)i), (unsigned char)ba[i], (unsigned char)bb[i]);
			break;
		}
		off += ra;
	}
	close(fa);
	close(fb);
}

/* A sorted, NUL-separated xattr name list of an entry. Returns its length or -1. */
static ssize_t list_xattrs(const struct tree *t, const char *path, char **ret)
{
	char full[PATH_MAX * 2];
	ssize_t n;
	char *buf;

	snprintf(full, sizeof(full), "%s/%s", t->root, path);
	for (;;) {
		n = llistxattr(full, NULL, 0);
		if (n < 0) {
			if (errno == ENOTSUP) {
				*ret = NULL;
				return 0;
			}
			io_error(full, "llistxattr");
			return -1;
		}
		buf = xmalloc((size_t)n + 1);
		n = llistxattr(full, buf, (size_t)n);
		if (n >= 0)
			break;
		free(buf);
		if (errno != ERANGE) {
			io_error(full, "llistxattr");
			return -1;
		}
	}
	*ret = buf;
	return n;
}

static ssize_t get_xattr(const struct tree *t, const char *path, const char *name, char **ret)
{
	char full[PATH_MAX * 2];
	ssize_t n;
	char *buf;

	snprintf(full, sizeof(full), "%s/%s", t->root, path);
	for (;;) {
		n = lgetxattr(full, name, NULL, 0);
		if (n < 0) {
			io_error(full, "lgetxattr %s", name);
			return -1;
		}
		buf = xmalloc((size_t)n);
		n = lgetxattr(full, name, buf, (size_t)n);
		if (n >= 0)
			break;
		free(buf);
		if (errno != ERANGE) {
			io_error(full, "lgetxattr %s", name);
			return -1;
		}
	}
	*ret = buf;
	return n;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Split a NUL-separated list into a sorted array of names. */
static size_t split_names(char *list, ssize_t len, char ***ret)
{
	size_t n = 0;
	char **v;

	for (ssize_t i = 0; i < len; i++)
		if (list[i] == '\0')
			n++;
	v = xmalloc(n * sizeof(*v));
	n = 0;
	for (ssize_t i = 0; i < len; i += (ssize_t)strlen(list + i) + 1)
		v[n++] = list + i;
	qsort(v, n, sizeof(*v), cmp_str);
	*ret = v;
	return n;
}

/* Show an xattr value as text when it is printable, else as hex; long values are cut. */
static void format_value(char *out, size_t cap, const char *v, ssize_t n)
{
	bool text = n > 0;
	size_t len = 0;

	for (ssize_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)v[i];

		if ((c < 0x20 || c >= 0x7f) && !(c == '\0' && i == n - 1))
			text = false;
	}
	if (text) {
		snprintf(out, cap, "\"%.*s\"", (int)(n > 48 ? 48 : n), v);
		len = strlen(out);
	} else {
		len += (size_t)snprintf(out, cap, "0x");
		for (ssize_t i = 0; i < n && i < 24 && len < cap; i++)
			len += (size_t)snprintf(out + len, cap - len, "%02x", (unsigned char)v[i]);
	}
	if (n > 48 && len < cap)
		snprintf(out + len, cap - len, "... (%zd bytes)", n);
}

static void cmp_xattrs(const struct tree *a, const struct tree *b, const char *path)
{
	char *la = NULL, *lb = NULL, **na = NULL, **nb = NULL;
	ssize_t lena, lenb;
	size_t ca, cb, i = 0, j = 0;

	lena = list_xattrs(a, path, &la);
	lenb = list_xattrs(b, path, &lb);
	if (lena < 0 || lenb < 0)
		goto out;
	ca = split_names(la, lena, &na);
	cb = split_names(lb, lenb, &nb);
	while (i < ca || j < cb) {
		int c = i == ca ? 1 : j == cb ? -1 : strcmp(na[i], nb[j]);
		char *va, *vb, sa[160], sb[160];
		ssize_t sza, szb;

		if (c < 0) {
			diff(path, "xattr %s: present vs absent", na[i++]);
			continue;
		}
		if (c > 0) {
			diff(path, "xattr %s: absent vs present", nb[j++]);
			continue;
		}
		sza = get_xattr(a, path, na[i], &va);
		szb = get_xattr(b, path, nb[j], &vb);
		if (sza >= 0 && szb >= 0 && (sza != szb || memcmp(va, vb, (size_t)sza))) {
			format_value(sa, sizeof(sa), va, sza);
			format_value(sb, sizeof(sb), vb, szb);
			diff(path, "xattr %s: %s vs %s", na[i], sa, sb);
		}
		if (sza >= 0)
			free(va);
		if (szb >= 0)
			free(vb);
		i++;
		j++;
	}
out:
	free(na);
	free(nb);
	free(la);
	free(lb);
}

static void cmp_entry(const struct tree *a, const struct tree *b, const struct entry *ea,
		      const struct entry *eb)
{
	const struct stat *sa = &ea->st, *sb = &eb->st;
	const char *path = ea->path;
	bool is_root = !strcmp(path, ".");

	if ((sa->st_mode & S_IFMT) != (sb->st_mode & S_IFMT)) {
		diff(path, "type: %s vs %s", type_name(sa->st_mode), type_name(sb->st_mode));
		return;
	}
	if ((sa->st_mode & 07777) != (sb->st_mode & 07777))
		diff(path, "mode: %04o vs %04o", sa->st_mode & 07777, sb->st_mode & 07777);
	if (sa->st_uid != sb->st_uid)
		diff(path, "uid: %u vs %u", sa->st_uid, sb->st_uid);
	if (sa->st_gid != sb->st_gid)
		diff(path, "gid: %u vs %u", sa->st_gid, sb->st_gid);
	if (!S_ISDIR(sa->st_mode) && sa->st_size != sb->st_size)
		diff(path, "size: %lld vs %lld", (long long)sa->st_size, (long long)sb->st_size);
	if (opt.root_mtime || !is_root)
		cmp_time(path, "mtime", &sa->st_mtim, &sb->st_mtim);
	if (opt.atime)
		cmp_time(path, "atime", &sa->st_atim, &sb->st_atim);
	if ((S_ISCHR(sa->st_mode) || S_ISBLK(sa->st_mode)) && sa->st_rdev != sb->st_rdev)
		diff(path, "rdev: %u,%u vs %u,%u", major(sa->st_rdev), minor(sa->st_rdev),
		     major(sb->st_rdev), minor(sb->st_rdev));
	if (strcmp(ea->link_peer, eb->link_peer))
		diff(path, "hard link: same inode as %s vs same inode as %s", ea->link_peer,
		     eb->link_peer);
	if (S_ISLNK(sa->st_mode))
		cmp_symlink(a, b, ea, eb);
	if (S_ISREG(sa->st_mode) && sa->st_size == sb->st_size)
		cmp_contents(a, b, path, sa->st_size);
	cmp_xattrs(a, b, path);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: treecmp [--no-atime] [--ignore-root-mtime] [--no-holes] [--quiet] A B\n"
		"Compare two trees exactly; print one line per difference.\n"
		"  --no-atime           do not compare access times\n"
		"  --ignore-root-mtime  do not compare the mtimes of A and B themselves\n"
		"  --no-holes           do not compare data/hole maps of regular files\n"
		"  -q, --quiet          print nothing; only the exit status tells\n"
		"Exit status: 0 identical, 1 different, 2 usage or read error.\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "no-atime", no_argument, NULL, 'a' },
		{ "ignore-root-mtime", no_argument, NULL, 'r' },
		{ "no-holes", no_argument, NULL, 'H' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct tree a = { .root_fd = -1 }, b = { .root_fd = -1 };
	size_t i = 0, j = 0;
	int c;

	while ((c = getopt_long(argc, argv, "qh", longopts, NULL)) != -1) {
		switch (c) {
		case 'a': opt.atime = false; break;
		case 'r': opt.root_mtime = false; break;
		case 'H': opt.holes = false; break;
		case 'q': opt.quiet = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (argc - optind != 2) {
		usage(stderr);
		return 2;
	}
	if (load_tree(&a, argv[optind]) < 0 || load_tree(&b, argv[optind + 1]) < 0) {
		free_tree(&a);
		free_tree(&b);
		return 2;
	}

	while (i < a.n || j < b.n) {
		int r = i == a.n ? 1 : j == b.n ? -1 : strcmp(a.v[i].path, b.v[j].path);

		if (r < 0) {
			diff(a.v[i].path, "entry: present (%s) vs absent", type_name(a.v[i].st.st_mode));
			i++;
		} else if (r > 0) {
			diff(b.v[j].path, "entry: absent vs present (%s)", type_name(b.v[j].st.st_mode));
			j++;
		} else {
			cmp_entry(&a, &b, &a.v[i], &b.v[j]);
			i++;
			j++;
		}
	}
	fflush(stdout);
	free_tree(&a);
	free_tree(&b);
	if (trouble)
		return 2;
	return ndiff ? 1 : 0;
}
