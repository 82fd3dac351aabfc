/*
 * dir.c — the `dir:` store: objects as files under a root directory.
 *
 *   ROOT/chunks/ab/abcdef…   chunks, fanned out by the first two hex digits
 *   ROOT/indexes/<hex>       indexes
 *   ROOT/tags/<name>:<tag>   tags (names may hold '/': subdirectories)
 *   ROOT/signatures/<name>:<tag>  a tag's signature (store.h, "Signed tags"); replaced
 *                            by a rename when signed again
 *   ROOT/profiles/<hex>      access profiles, named by their index; replaced by a
 *                            rename when pushed again
 *   ROOT/packs/<hex>         packs: an image's chunks in one file (store.h), written
 *                            as a stream (store_put_begin) and renamed into place
 *
 * A reader sees a whole object or none: objects are linked or renamed into
 * place once written (see dir_put_now), and several builders may put the same
 * object at once.  Chunk puts are not fsynced one by one: store_flush()
 * (syncfs) is the barrier a build crosses before it publishes the index, and
 * index and tag puts are fsynced with their directory.  A chunk cut short by a
 * crash before the barrier (an empty file) is caught by the builder, which
 * checks the size HEAD reports before trusting an existing chunk.
 *
 * Without a loop, operations run synchronously and complete through the
 * deferred queue.  With a loop (store_set_loop), get — the operation a mount
 * makes on every cache miss — goes through the ring: openat, then reads until
 * the range is whole, then close, and its callback runs from the last
 * completion; the other operations (builders and tools use them) stay
 * synchronous and deferred.  A pack's descriptor is opened once and kept
 * (DIR_KEPT_FDS of them), so that a get from a pack is a read only.
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>

#include "lib/loop.h"
#include "store/store-internal.h"

/* Packs whose descriptors a store on a loop keeps open: a mount reads one. */
#define DIR_KEPT_FDS 8

struct kept_fd {
	char key[64];         /* "" while the slot is free */
	int fd;
	unsigned users;       /* gets in flight reading it: not closed meanwhile */
	uint64_t last;        /* for replacing the least recently used */
};

struct dir_store {
	int root_fd;
	char *root;
	uint64_t seq;
	unsigned ring_gets;   /* gets in flight on the loop */
	struct kept_fd kept[DIR_KEPT_FDS];
	uint64_t kept_clock;
};

static struct dir_store *D(struct store *s)
{
	return s->backend;
}

/* key → path relative to the root */
static int dir_path(const char *key, char *out, size_t outlen)
{
	return store_layout_path(key, out, outlen);
}

static int dir_get_now(struct store *s, const char *key, uint64_t off, uint64_t len,
                       store_get_cb cb, void *ud);

/* A get in flight on the loop.  path is read by the kernel until the openat
 * completes; b.data belongs to the ring while a read is in flight. */
struct ring_get {
	struct store *s;
	store_get_cb cb;
	void *ud;
	int fd;
	struct kept_fd *kept; /* fd is this kept one's: not closed at the end */
	uint64_t off, want;   /* range still to read: [off, off + want - b.len) */
	struct buf b;
	char path[PATH_MAX];
};

static void ring_get_done(struct ring_get *g, int64_t res)
{
	struct dir_store *d = D(g->s);

	if (g->kept)
		g->kept->users--;
	else if (g->fd >= 0 && loop_close(g->s->loop, g->fd, NULL, NULL) < 0)
		close(g->fd);
	d->ring_gets--;
	if (res >= 0 && g->b.data)
		g->b.data[g->b.len] = 0;
	g->cb(g->ud, res, &g->b);
	buf_free(&g->b);
	free(g);
}

static void ring_get_read_cb(void *ud, int res)
{
	struct ring_get *g = ud;

	if (res < 0) {
		ring_get_done(g, res);
		return;
	}
	g->b.len += (size_t)res;
	/* a short read is not the end: only 0 (end of file) is */
	if (res > 0 && g->b.len < g->want) {
		int r = loop_read(g->s->loop, g->fd, g->b.data + g->b.len, g->want - g->b.len,
		                  g->off + g->b.len, ring_get_read_cb, g);

		if (r < 0)
			ring_get_done(g, r);
		return;
	}
	ring_get_done(g, (int64_t)g->b.len);
}

/* Start reading g's range from fd: 1 when the first read is under way (g->want
 * is then the range's length, clamped to the file), 0 when the range is
 * empty, else -errno; nothing is started unless 1.  The inode is in memory
 * after an open: fstat does no I/O. */
static int ring_get_start(struct ring_get *g, int fd)
{
	struct stat st;
	uint64_t size, n;
	int r;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EISDIR;
	size = (uint64_t)st.st_size;
	n = g->off >= size ? 0 : size - g->off;
	if (g->want && g->want < n)
		n = g->want;
	r = buf_reserve(&g->b, n);
	if (r < 0 || n == 0)
		return r;
	r = loop_read(g->s->loop, fd, g->b.data, n, g->off, ring_get_read_cb, g);
	if (r < 0)
		return r;
	g->want = n;   /* read by the read's callback, which runs later */
	return 1;
}

static void ring_get_open_cb(void *ud, int res)
{
	struct ring_get *g = ud;
	int r;

	if (res < 0) {
		ring_get_done(g, res);
		return;
	}
	g->fd = res;
	r = ring_get_start(g, g->fd);
	if (r <= 0)
		ring_get_done(g, r);
}

/* The kept descriptor of the pack at key (path under the root), opened now
 * when it is not kept yet; NULL when it cannot be (the caller opens it the
 * usual way, which reports why). */
static struct kept_fd *kept_get(struct dir_store *d, const char *key, const char *path)
{
	struct kept_fd *k, *victim = NULL;
	int fd;

	if (strlen(key) >= sizeof(k->key))
		return NULL;
	for (k = d->kept; k < d->kept + DIR_KEPT_FDS; k++) {
		if (k->key[0] && !strcmp(k->key, key)) {
			k->last = ++d->kept_clock;
			return k;
		}
		/* a free slot's last is 0: it goes first */
		if (!k->users && (!victim || k->last < victim->last))
			victim = k;
	}
	if (!victim)
		return NULL;
	fd = openat(d->root_fd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return NULL;
	/* Each read is one chunk the cache asked for.  The kernel's readahead
	 * would read on past it (up to the device's read_ahead_kb, 8 MiB on
	 * some disks) into chunks nobody asked for, and the asked-for read
	 * would wait for that I/O. */
	(void)posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
	if (victim->key[0])
		close(victim->fd);
	snprintf(victim->key, sizeof(victim->key), "%s", key);
	victim->fd = fd;
	victim->last = ++d->kept_clock;
	return victim;
}

/* Start g's reads on a kept pack descriptor: true when they are under way;
 * else nothing started, and the caller opens the file anew, so that any error
 * (an empty range too) is reported from a completion, not from this call. */
static bool ring_get_kept(struct ring_get *g, struct kept_fd *k)
{
	if (ring_get_start(g, k->fd) <= 0)
		return false;
	g->fd = k->fd;
	g->kept = k;
	k->users++;
	return true;
}

static int dir_get_ring(struct store *s, const char *key, uint64_t off, uint64_t len,
                        store_get_cb cb, void *ud)
{
	struct ring_get *g = calloc(1, sizeof(*g));
	struct kept_fd *k;
	int r;

	if (!g)
		return -ENOMEM;
	r = dir_path(key, g->path, sizeof(g->path));
	if (r < 0) {
		free(g);
		return r;
	}
	g->s = s;
	g->cb = cb;
	g->ud = ud;
	g->fd = -1;
	g->off = off;
	g->want = len;
	if (!strncmp(key, "packs/", 6) && (k = kept_get(D(s), key, g->path)) &&
	    ring_get_kept(g, k)) {
		D(s)->ring_gets++;
		return 0;
	}
	r = loop_openat(s->loop, D(s)->root_fd, g->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0,
	                ring_get_open_cb, g);
	if (r < 0) {
		free(g);
		return r;
	}
	D(s)->ring_gets++;
	return 0;
}

static unsigned dir_pending(struct store *s)
{
	return D(s)->ring_gets;
}

static int dir_get(struct store *s, const char *key, uint64_t off, uint64_t len,
                   store_get_cb cb, void *ud)
{
	if (s->loop)
		return dir_get_ring(s, key, off, len, cb, ud);
	return dir_get_now(s, key, off, len, cb, ud);
}

static int dir_get_now(struct store *s, const char *key, uint64_t off, uint64_t len,
                       store_get_cb cb, void *ud)
{
	char path[PATH_MAX];
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	_cleanup_close_ int fd = -1;
	struct stat st;
	int64_t res;
	int r;

	r = dir_path(key, path, sizeof(path));
	if (r < 0)
		return r;
	fd = openat(D(s)->root_fd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 || fstat(fd, &st) < 0) {
		res = -errno;
	} else if (!S_ISREG(st.st_mode)) {
		res = -EISDIR;
	} else {
		uint64_t size = (uint64_t)st.st_size;
		uint64_t n = off >= size ? 0 : size - off;
		ssize_t k;

		if (len && len < n)
			n = len;
		res = buf_reserve(&b, n);
		if (res == 0) {
			k = pread_full(fd, b.data, n, off);
			if (k < 0) {
				res = k;
			} else {
				b.len = (size_t)k;
				b.data[b.len] = 0;
				res = k;
			}
		}
	}
	return store_defer_get(s, cb, ud, res, &b);
}

static int dir_head(struct store *s, const char *key, store_cb cb, void *ud)
{
	char path[PATH_MAX];
	struct stat st;
	int r = dir_path(key, path, sizeof(path));

	if (r < 0)
		return r;
	if (fstatat(D(s)->root_fd, path, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return store_defer(s, cb, ud, -errno);
	return store_defer(s, cb, ud, S_ISREG(st.st_mode) ? (int64_t)st.st_size : -EISDIR);
}

static int mkdir_parents_at(int dfd, const char *path)
{
	char tmp[PATH_MAX];
	size_t len = strlen(path);

	if (len >= sizeof(tmp))
		return -ENAMETOOLONG;
	memcpy(tmp, path, len + 1);
	for (char *p = tmp; (p = strchr(p, '/')); p++) {
		*p = 0;
		if (mkdirat(dfd, tmp, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	return 0;
}

/* Open the directory that will hold path (relative to the root), creating
 * it when missing; *ret_base points at path's last component. */
static int open_parent(struct dir_store *d, char *path, const char **ret_base)
{
	char *slash = strrchr(path, '/');
	int fd;

	if (!slash) {
		*ret_base = path;
		fd = fcntl(d->root_fd, F_DUPFD_CLOEXEC, 3);
		return fd < 0 ? -errno : fd;
	}
	*slash = 0;
	*ret_base = slash + 1;
	fd = openat(d->root_fd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		*slash = '/';
		if (mkdir_parents_at(d->root_fd, path) < 0)
			return -errno;
		*slash = 0;
		fd = openat(d->root_fd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	*slash = '/';
	return fd < 0 ? -errno : fd;
}

/* Write data under a temporary name in dfd and rename it over base. */
static int put_renamed(struct dir_store *d, int dfd, const char *base, const void *data,
                       size_t len, bool durable)
{
	char tmp[NAME_MAX + 1];
	_cleanup_close_ int fd = -1;
	int r;

	snprintf(tmp, sizeof(tmp), ".tmp.%d.%llu.%llx", (int)getpid(),
	         (unsigned long long)__atomic_add_fetch(&d->seq, 1, __ATOMIC_RELAXED),
	         (unsigned long long)now_ns());
	fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	r = write_full(fd, data, len);
	if (r == 0 && durable && fsync(fd) < 0)
		r = -errno;
	if (r == 0 && renameat(dfd, tmp, dfd, base) < 0)
		r = -errno;
	if (r < 0)
		unlinkat(dfd, tmp, 0);
	return r;
}

/*
 * Write data as an unnamed file (O_TMPFILE) in dfd and link it in as base:
 * one directory change, and nothing left behind by a crash.  -EEXIST when
 * base exists; -EOPNOTSUPP where the filesystem has no O_TMPFILE.
 */
static int put_linked(int dfd, const char *base, const void *data, size_t len, bool durable)
{
	_cleanup_close_ int fd = openat(dfd, ".", O_WRONLY | O_TMPFILE | O_CLOEXEC, 0644);
	char proc[64];
	int r;

	if (fd < 0)
		return errno == EISDIR || errno == EINVAL ? -EOPNOTSUPP : -errno;
	r = write_full(fd, data, len);
	if (r == 0 && durable && fsync(fd) < 0)
		r = -errno;
	/* start writeback now, so that the flush barrier finds little to do */
	if (r == 0 && !durable)
		sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
	if (r < 0)
		return r;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	return linkat(AT_FDCWD, proc, dfd, base, AT_SYMLINK_FOLLOW) < 0 ? -errno : 0;
}

/*
 * Content-addressed objects (chunks, indexes) are linked into place from an
 * unnamed file; one that is already there is replaced only through a rename
 * (the builder puts a chunk again only when the one there is torn).  Tags
 * are renamed over the old ones.  Every write stays within the object's own
 * directory, which spreads directory locks over the fan-out and avoids the
 * filesystem-wide lock that a cross-directory rename takes.  Chunks are not
 * fsynced one by one: store_flush() is the barrier.
 */
static int dir_put_now(struct store *s, const char *key, const void *data, size_t len)
{
	struct dir_store *d = D(s);
	bool chunk = !strncmp(key, "chunks/", 7), tag = !strncmp(key, "tags/", 5);
	char path[PATH_MAX];
	const char *base;
	_cleanup_close_ int dfd = -1;
	int r = -EEXIST;

	r = dir_path(key, path, sizeof(path));
	if (r < 0)
		return r;
	dfd = open_parent(d, path, &base);
	if (dfd < 0)
		return dfd;
	r = tag ? -EEXIST : put_linked(dfd, base, data, len, !chunk);
	if (r == -EEXIST || r == -EOPNOTSUPP)
		r = put_renamed(d, dfd, base, data, len, !chunk);
	if (r == 0 && !chunk && fsync(dfd) < 0)
		r = -errno;
	return r;
}

static int dir_put(struct store *s, const char *key, const void *data, size_t len, store_cb cb,
                   void *ud)
{
	return store_defer(s, cb, ud, dir_put_now(s, key, data, len));
}

/*
 * A streamed put: an object too large to hold in memory (a pack) is written
 * into an unnamed file in its own directory (a named temporary one where the
 * filesystem has no O_TMPFILE), and renamed over key once durable, replacing
 * any object there.  The temporary name is derived from key and the process,
 * so that the end finds it again without state: one streamed put of a key per
 * process at a time.
 */
static int stream_tmp_name(const char *base, char *out, size_t outlen)
{
	int n = snprintf(out, outlen, ".tmp.%s.%d", base, (int)getpid());

	return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

/* The directory of key's streamed put (created when missing), key's last
 * component in path (*ret_base) and the temporary name in tmp. */
static int stream_dir(struct store *s, const char *key, char path[PATH_MAX],
                      const char **ret_base, char tmp[NAME_MAX + 1])
{
	int dfd, r;

	r = dir_path(key, path, PATH_MAX);
	if (r < 0)
		return r;
	dfd = open_parent(D(s), path, ret_base);
	if (dfd < 0)
		return dfd;
	r = stream_tmp_name(*ret_base, tmp, NAME_MAX + 1);
	if (r < 0) {
		close(dfd);
		return r;
	}
	return dfd;
}

static int dir_put_begin(struct store *s, const char *key)
{
	char path[PATH_MAX], tmp[NAME_MAX + 1];
	const char *base;
	_cleanup_close_ int dfd = stream_dir(s, key, path, &base, tmp);
	int fd;

	if (dfd < 0)
		return dfd;
	unlinkat(dfd, tmp, 0);   /* left by an earlier process of this pid */
	fd = openat(dfd, ".", O_RDWR | O_TMPFILE | O_CLOEXEC, 0644);
	if (fd < 0 && (errno == EISDIR || errno == EINVAL || errno == EOPNOTSUPP))
		fd = openat(dfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	return fd < 0 ? -errno : fd;
}

static int dir_put_end(struct store *s, const char *key, int fd, bool commit)
{
	char path[PATH_MAX], tmp[NAME_MAX + 1], proc[64];
	const char *base;
	_cleanup_close_ int dfd = stream_dir(s, key, path, &base, tmp);
	int r = 0;

	if (dfd < 0)
		return dfd;
	if (commit && fsync(fd) < 0)
		r = -errno;
	if (r == 0 && commit) {
		/* an unnamed file gets the temporary name first; a named one has it */
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
		if (linkat(AT_FDCWD, proc, dfd, tmp, AT_SYMLINK_FOLLOW) < 0 && errno != EEXIST)
			r = -errno;
	}
	if (r == 0 && commit && renameat(dfd, tmp, dfd, base) < 0)
		r = -errno;
	if (r == 0 && commit && fsync(dfd) < 0)
		r = -errno;
	if (r < 0 || !commit)
		unlinkat(dfd, tmp, 0);
	return r;
}

struct name_list {
	char **v;
	size_t n, cap;
};

static int names_add(struct name_list *l, const char *a, const char *b)
{
	char *s;

	if (l->n + 1 >= l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		char **v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	if (asprintf(&s, "%s%s", a, b) < 0)
		return -ENOMEM;
	l->v[l->n++] = s;
	l->v[l->n] = NULL;
	return 0;
}

/* Add every regular file under dir (relative to the root; "" for the root
 * itself) as its key, with its size and mtime when ent is set. */
static int list_walk(int root_fd, const char *dir, struct name_list *l, struct name_list *times)
{
	_cleanup_close_ int fd = openat(root_fd, *dir ? dir : ".",
	                                O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *dp;
	struct dirent *de;
	int r = 0;

	if (fd < 0)
		return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
	dp = fdopendir(fd);
	if (!dp)
		return -errno;
	fd = -1;
	while (r == 0 && (de = readdir(dp))) {
		char sub[PATH_MAX], key[PATH_MAX];
		struct stat st;
		unsigned char type = de->d_type;

		if (de->d_name[0] == '.')
			continue;
		if ((size_t)snprintf(sub, sizeof(sub), "%s%s%s", dir, *dir ? "/" : "", de->d_name) >=
		    sizeof(sub))
			continue;
		if (type == DT_UNKNOWN || (type == DT_REG && times)) {
			if (fstatat(dirfd(dp), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
				continue;   /* gone meanwhile */
			type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN;
		}
		if (type == DT_DIR) {
			r = list_walk(root_fd, sub, l, times);
		} else if (type == DT_REG && store_layout_key(sub, key, sizeof(key))) {
			r = names_add(l, key, "");
			if (r == 0 && times) {
				char t[64];

				snprintf(t, sizeof(t), "%lld %lld", (long long)st.st_size,
				         (long long)st.st_mtim.tv_sec);
				r = names_add(times, t, "");
			}
		}
	}
	closedir(dp);
	return r;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The directory to walk for keys under prefix: its whole directories. */
static void walk_root(const char *prefix, char *out, size_t outlen)
{
	const char *slash = strrchr(prefix, '/');

	snprintf(out, outlen, "%.*s", slash ? (int)(slash - prefix) : 0, prefix);
}

static int dir_list(struct store *s, const char *prefix, store_list_cb cb, void *ud)
{
	struct name_list l = { 0 };
	char top[PATH_MAX];
	int r;

	walk_root(prefix, top, sizeof(top));
	r = list_walk(D(s)->root_fd, top, &l, NULL);
	if (r == 0) {
		size_t keep = 0, pl = strlen(prefix);

		for (size_t i = 0; i < l.n; i++) {
			if (!strncmp(l.v[i], prefix, pl))
				l.v[keep++] = l.v[i];
			else
				free(l.v[i]);
		}
		l.n = keep;
		if (l.v) {
			l.v[keep] = NULL;
			qsort(l.v, l.n, sizeof(*l.v), cmp_str);
		}
	}
	if (r < 0) {
		if (l.v)
			store_names_free(l.v);
		return store_defer_list(s, cb, ud, r, NULL, 0);
	}
	if (!l.v) {
		l.v = calloc(1, sizeof(*l.v));
		if (!l.v)
			return -ENOMEM;
	}
	return store_defer_list(s, cb, ud, 0, l.v, l.n);
}

static int dir_scan(struct store *s, const char *prefix, store_scan_cb cb, void *ud)
{
	struct name_list l = { 0 }, t = { 0 };
	struct store_entry *e = NULL;
	char top[PATH_MAX];
	size_t n = 0, pl = strlen(prefix);
	int r;

	walk_root(prefix, top, sizeof(top));
	r = list_walk(D(s)->root_fd, top, &l, &t);
	if (r == 0 && l.n && !(e = calloc(l.n, sizeof(*e))))
		r = -ENOMEM;
	for (size_t i = 0; i < l.n; i++) {
		long long size = 0, mtime = 0;

		if (r == 0 && !strncmp(l.v[i], prefix, pl) &&
		    sscanf(t.v[i], "%lld %lld", &size, &mtime) == 2) {
			e[n++] = (struct store_entry){ l.v[i], size, mtime };
			l.v[i] = NULL;
		}
		free(l.v[i]);
		free(t.v[i]);
	}
	free(l.v);
	free(t.v);
	if (r < 0) {
		store_entries_free(e, n);
		return store_defer_scan(s, cb, ud, r, NULL, 0);
	}
	return store_defer_scan(s, cb, ud, 0, e, n);
}

static int dir_del(struct store *s, const char *key, store_cb cb, void *ud)
{
	char path[PATH_MAX];
	int r = dir_path(key, path, sizeof(path));

	if (r < 0)
		return r;
	r = unlinkat(D(s)->root_fd, path, 0) < 0 ? -errno : 0;
	return store_defer(s, cb, ud, r == -EISDIR ? -ENOENT : r);
}

static int dir_move_now(struct store *s, const char *from, const char *to, bool replace)
{
	char pf[PATH_MAX], pt[PATH_MAX];
	int r;

	r = dir_path(from, pf, sizeof(pf));
	if (r == 0)
		r = dir_path(to, pt, sizeof(pt));
	if (r < 0)
		return r;
	for (int attempt = 0; attempt < 2; attempt++) {
		if (renameat2(D(s)->root_fd, pf, D(s)->root_fd, pt,
		              replace ? 0 : RENAME_NOREPLACE) == 0)
			return 0;
		r = -errno;
		if (r != -ENOENT || attempt)
			break;
		/* the source is missing, or the target's directory: make that and try once more */
		if (faccessat(D(s)->root_fd, pf, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
			return -ENOENT;
		r = mkdir_parents_at(D(s)->root_fd, pt);
		if (r < 0)
			return r;
	}
	return r;
}

static int dir_move(struct store *s, const char *from, const char *to, bool replace,
                    store_cb cb, void *ud)
{
	return store_defer(s, cb, ud, dir_move_now(s, from, to, replace));
}

/* Create key only when absent: linked into place from an unnamed file (or a
 * named temporary one where the filesystem has none), durable. */
static int dir_put_new_now(struct store *s, const char *key, const void *data, size_t len)
{
	char path[PATH_MAX], tmp[NAME_MAX + 1];
	const char *base;
	_cleanup_close_ int dfd = -1;
	int r;

	r = dir_path(key, path, sizeof(path));
	if (r < 0)
		return r;
	dfd = open_parent(D(s), path, &base);
	if (dfd < 0)
		return dfd;
	r = put_linked(dfd, base, data, len, true);
	if (r == -EOPNOTSUPP) {
		_cleanup_close_ int fd = -1;

		snprintf(tmp, sizeof(tmp), ".tmp.new.%d.%llx", (int)getpid(),
		         (unsigned long long)now_ns());
		fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0)
			return -errno;
		r = write_full(fd, data, len);
		if (r == 0 && fsync(fd) < 0)
			r = -errno;
		if (r == 0 && linkat(dfd, tmp, dfd, base, 0) < 0)
			r = -errno;
		unlinkat(dfd, tmp, 0);
	}
	if (r == 0 && fsync(dfd) < 0)
		r = -errno;
	return r;
}

static int dir_put_new(struct store *s, const char *key, const void *data, size_t len,
                       store_cb cb, void *ud)
{
	return store_defer(s, cb, ud, dir_put_new_now(s, key, data, len));
}

/* The store's clock: the mtime the filesystem gives a file made now under the
 * root (on a shared filesystem, the server's clock). */
static int dir_now(struct store *s, store_cb cb, void *ud)
{
	char tmp[NAME_MAX + 1];
	struct stat st;
	int fd, r = 0;

	snprintf(tmp, sizeof(tmp), ".clock.%d.%llx", (int)getpid(), (unsigned long long)now_ns());
	fd = openat(D(s)->root_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return store_defer(s, cb, ud, -errno);
	if (fstat(fd, &st) < 0)
		r = -errno;
	close(fd);
	unlinkat(D(s)->root_fd, tmp, 0);
	return store_defer(s, cb, ud, r < 0 ? r : (int64_t)st.st_mtim.tv_sec);
}

static int dir_flush(struct store *s)
{
	return syncfs(D(s)->root_fd) < 0 ? -errno : 0;
}

static void dir_free(struct store *s)
{
	struct dir_store *d = D(s);

	if (d) {
		for (struct kept_fd *k = d->kept; k < d->kept + DIR_KEPT_FDS; k++)
			if (k->key[0])
				close(k->fd);
		if (d->root_fd >= 0)
			close(d->root_fd);
		free(d->root);
		free(d);
	}
	free(s);
}

static int dir_open_file(struct store *s, const char *key)
{
	char path[PATH_MAX];
	struct stat st;
	int fd, r;

	r = dir_path(key, path, sizeof(path));
	if (r < 0)
		return r;
	fd = openat(D(s)->root_fd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		r = -errno;
	else if (!S_ISREG(st.st_mode))
		r = -EISDIR;
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

static const struct store_ops dir_ops = {
	.get = dir_get,
	.head = dir_head,
	.put = dir_put,
	.list = dir_list,
	.flush = dir_flush,
	.pending = dir_pending,
	.open_file = dir_open_file,
	.put_begin = dir_put_begin,
	.put_end = dir_put_end,
	.del = dir_del,
	.move = dir_move,
	.put_new = dir_put_new,
	.scan = dir_scan,
	.now = dir_now,
	.free = dir_free,
};

/*
 * Open the store rooted at path, an absolute path (the caller checked).  With
 * create, a missing root is made, so that the first build into a new store
 * works; without it a missing root is -ENOENT and a root that is not a
 * directory -ENOTDIR, neither logged (the caller names the URL it was given),
 * so that a mistyped store is an error rather than a new, empty store that
 * lists nothing.  A root that exists but cannot be opened is logged.
 */
int store_dir_open(const char *path, bool create, struct store **ret)
{
	struct store *s;
	struct dir_store *d;
	struct stat st;
	int r;

	if (!*path)
		return log_error(-EINVAL, "store: empty directory path");
	if (create) {
		r = mkdir_p(path, 0755);
		if (r < 0)
			return log_errno(r, "store '%s': cannot create directory", path);
	} else if (stat(path, &st) < 0) {
		r = -errno;
		if (r == -ENOENT)
			return r;  /* the caller names its URL */
		return log_errno(r, "store '%s'", path);
	} else if (!S_ISDIR(st.st_mode)) {
		return -ENOTDIR;
	}
	d = calloc(1, sizeof(*d));
	s = d ? store_alloc(&dir_ops, d) : NULL;
	if (!s) {
		free(d);
		return -ENOMEM;
	}
	d->root = strdup(path);
	d->root_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (d->root_fd < 0 || !d->root) {
		r = d->root ? -errno : -ENOMEM;
		dir_free(s);
		return log_errno(r, "store '%s': cannot open directory", path);
	}
	*ret = s;
	return 0;
}
