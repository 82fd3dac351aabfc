/*
 * maint.c — the parts of the cache that need no daemon: the stats file,
 * the walk over chunk files and staged objects, `cache verify` and
 * `cache trim`.
 *
 * Both maintenance commands are safe while daemons run: they only unlink
 * files (a daemon reading one through an open descriptor keeps its bytes; a
 * daemon that opens it later finds it gone and fetches again), and they keep
 * the shared `used` gauge right by subtracting only what their own unlink
 * removed (an unlink that returns ENOENT was someone else's eviction).
 */
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <zstd.h>

#include "cache/cache-internal.h"

/* The file is at least a page so that later versions may grow the struct. */
static size_t stats_file_size(void)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return (sizeof(struct cache_stats) + page - 1) / page * page;
}

int cache_stats_open_rw(int dir_fd, bool reset, struct cache_stats **ret)
{
	_cleanup_close_ int fd = openat(dir_fd, "stats", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	size_t size = stats_file_size();
	struct cache_stats *st;
	uint64_t zero = 0;
	int r;

	if (fd < 0)
		return -errno;
	/* Blocks, not a hole: a page of a shared mapping that the disk has no
	 * room for is a SIGBUS at the first store into it (a full cache disk
	 * killed prefetch that way).  Growing is idempotent: racing daemons
	 * both ask for the same size. */
	r = posix_fallocate(fd, 0, (off_t)size);
	if (r)
		return -r;
	st = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (st == MAP_FAILED)
		return -errno;
	if (reset && (st->magic != CACHE_STATS_MAGIC || st->version != CACHE_STATS_VERSION)) {
		memset(st, 0, sizeof(*st));
		st->version = CACHE_STATS_VERSION;
		__atomic_store_n(&st->magic, CACHE_STATS_MAGIC, __ATOMIC_RELEASE);
	} else if (__atomic_compare_exchange_n(&st->magic, &zero, CACHE_STATS_MAGIC, false,
	                                       __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		/* a fresh file: the first to arrive stamps it */
		st->version = CACHE_STATS_VERSION;
	}
	if (st->magic != CACHE_STATS_MAGIC || st->version != CACHE_STATS_VERSION) {
		munmap(st, size);
		return -EPROTO;
	}
	if (reset)
		__atomic_store_n(&st->inflight, 0, __ATOMIC_RELAXED);
	*ret = st;
	return 0;
}

void cache_stats_unmap_rw(struct cache_stats *st)
{
	if (st)
		munmap(st, stats_file_size());
}

int cache_stats_map(const char *dir, const struct cache_stats **ret)
{
	char path[4096];
	_cleanup_close_ int fd = -1;
	struct cache_stats *st;
	struct stat sb;

	snprintf(path, sizeof(path), "%s/stats", dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb) < 0)
		return -errno;
	if ((size_t)sb.st_size < sizeof(*st))
		return -EBADMSG;
	st = mmap(NULL, stats_file_size(), PROT_READ, MAP_SHARED, fd, 0);
	if (st == MAP_FAILED)
		return -errno;
	if (st->magic != CACHE_STATS_MAGIC || st->version != CACHE_STATS_VERSION) {
		munmap(st, stats_file_size());
		return -EPROTO;
	}
	*ret = st;
	return 0;
}

void cache_stats_unmap(const struct cache_stats *st)
{
	if (st)
		munmap((void *)st, stats_file_size());
}

static bool is_lower_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return s[n] == 0;
}

int cache_scan(int chunks_fd, int (*fn)(void *ud, const struct cache_file *f), void *ud)
{
	for (unsigned i = 0; i < 256; i++) {
		char sub[3];
		_cleanup_close_ int fd = -1;
		DIR *dp;
		struct dirent *de;
		int r = 0;

		snprintf(sub, sizeof(sub), "%02x", i);
		fd = openat(chunks_fd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0) {
			if (errno == ENOENT)
				continue;
			return -errno;
		}
		dp = fdopendir(fd);
		if (!dp)
			return -errno;
		fd = -1;
		while (r >= 0 && (de = readdir(dp))) {
			struct cache_file f;
			struct stat st;

			bool staged = !strcmp(de->d_name + strnlen(de->d_name, CACHE_CHUNK_NAME_LEN),
			                      CACHE_STAGED_SUFFIX);
			char hex[CACHE_CHUNK_NAME_LEN + 1];

			if (strnlen(de->d_name, CACHE_CHUNK_NAME_LEN + 1) < CACHE_CHUNK_NAME_LEN)
				continue;
			memcpy(hex, de->d_name, CACHE_CHUNK_NAME_LEN);
			hex[CACHE_CHUNK_NAME_LEN] = 0;
			if (!is_lower_hex(hex, CACHE_CHUNK_NAME_LEN) || memcmp(hex, sub, 2) ||
			    (!staged && de->d_name[CACHE_CHUNK_NAME_LEN]))
				continue;
			if (fstatat(dirfd(dp), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
			    !S_ISREG(st.st_mode))
				continue;  /* gone meanwhile (evicted), or not ours */
			hex_decode(hex, f.name, HASH_SIZE);
			snprintf(f.rel, sizeof(f.rel), "%s/%s%s", sub, hex,
			         staged ? CACHE_STAGED_SUFFIX : "");
			f.size = (uint64_t)st.st_size;
			f.mtime = st.st_mtim.tv_sec;
			f.staged = staged;
			r = fn(ud, &f);
		}
		closedir(dp);
		if (r < 0)
			return r;
	}
	return 0;
}

int cache_scan_files(int files_fd, int (*fn)(void *ud, const struct cache_file *f), void *ud)
{
	int fd = dup(files_fd);
	DIR *dp;
	struct dirent *de;
	int r = 0;

	if (fd < 0)
		return -errno;
	dp = fdopendir(fd);
	if (!dp) {
		r = -errno;
		close(fd);
		return r;
	}
	rewinddir(dp);
	while (r >= 0 && (de = readdir(dp))) {
		struct cache_file f;
		struct stat st;

		if (!is_lower_hex(de->d_name, CACHE_CHUNK_NAME_LEN))
			continue;
		if (fstatat(dirfd(dp), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		hex_decode(de->d_name, f.name, HASH_SIZE);
		snprintf(f.rel, sizeof(f.rel), "%.32s", de->d_name);
		f.size = (uint64_t)st.st_size;
		f.mtime = st.st_mtim.tv_sec;
		f.staged = false;
		r = fn(ud, &f);
	}
	closedir(dp);
	return r;
}

/* Both commands work on DIR: its chunk directory, and its stats when any
 * daemon ever created them (without, there are no gauges to keep). */
struct maint {
	int dir_fd, chunks_fd, files_fd;    /* files_fd: -1 when there is no files/ */
	struct cache_stats *st;
	uint64_t checked, dropped, freed;
	struct cache_files list;            /* trim: every file, then sorted */
};

static int maint_open(const char *dir, struct maint *m)
{
	memset(m, 0, sizeof(*m));
	m->chunks_fd = m->files_fd = -1;
	m->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (m->dir_fd < 0)
		return -errno;
	m->chunks_fd = openat(m->dir_fd, "chunks", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (m->chunks_fd < 0) {
		int r = -errno;

		close(m->dir_fd);
		return r;
	}
	m->files_fd = openat(m->dir_fd, "files", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (faccessat(m->dir_fd, "stats", F_OK, 0) == 0 &&
	    cache_stats_open_rw(m->dir_fd, false, &m->st) < 0)
		m->st = NULL;
	return 0;
}

static void maint_close(struct maint *m)
{
	cache_stats_unmap_rw(m->st);
	free(m->list.v);
	if (m->files_fd >= 0)
		close(m->files_fd);
	if (m->chunks_fd >= 0)
		close(m->chunks_fd);
	if (m->dir_fd >= 0)
		close(m->dir_fd);
}

/* Unlink one chunk file; true when this call removed it. */
static bool maint_unlink(struct maint *m, const struct cache_file *f)
{
	/* a chunk's rel has its fan-out directory; an object's is its name */
	int dfd = strchr(f->rel, '/') ? m->chunks_fd : m->files_fd;

	if (unlinkat(dfd, f->rel, 0) < 0)
		return false;
	if (m->st) {
		stat_sub(&m->st->used, f->size);
		if (f->staged) {
			stat_sub(&m->st->staged, 1);
			stat_sub(&m->st->staged_bytes, f->size);
		}
	}
	return true;
}

/* A staged object is one zstd frame that records its decoded size (the
 * build writes it so); it is good when it decodes to bytes of its name. */
static bool staged_good(const struct cache_file *f, const void *in, size_t inlen)
{
	unsigned long long size = ZSTD_getFrameContentSize(in, inlen);
	_cleanup_free_ uint8_t *out = NULL;

	if (size == ZSTD_CONTENTSIZE_UNKNOWN || size == ZSTD_CONTENTSIZE_ERROR ||
	    size > UINT32_MAX)
		return false;
	out = malloc(size ? size : 1);
	return out && chunk_decode(NULL, f->name, CHUNK_ZSTD, (uint32_t)size, in, inlen, out) == 0;
}

static int verify_one(void *ud, const struct cache_file *f)
{
	struct maint *m = ud;
	_cleanup_close_ int fd = openat(m->chunks_fd, f->rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_free_ uint8_t *data = NULL;
	uint8_t got[HASH_SIZE];
	ssize_t n;

	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	data = malloc(f->size ? f->size : 1);
	if (!data)
		return -ENOMEM;
	n = pread_full(fd, data, f->size, 0);
	if (n < 0)
		return (int)n;
	m->checked++;
	if (f->staged) {
		if ((uint64_t)n == f->size && staged_good(f, data, (size_t)n))
			return 0;
	} else {
		hash128(data, (size_t)n, got);
		if ((uint64_t)n == f->size && !memcmp(got, f->name, HASH_SIZE))
			return 0;
	}
	if (maint_unlink(m, f)) {
		m->dropped++;
		if (m->st) {
			stat_add(&m->st->verify_failures, 1);
			stat_add(&m->st->corrupt, 1);
		}
	}
	return 0;
}

/* A whole-file object against the hash in its xattr. */
static int verify_file(void *ud, const struct cache_file *f)
{
	struct maint *m = ud;
	int r = cache_file_check(m->files_fd, f->rel, f->size);

	if (r == -ENOENT)
		return 0;
	if (r < 0 && r != -EBADMSG)
		return r;
	m->checked++;
	if (r == 0 || unlinkat(m->files_fd, f->rel, 0) < 0)
		return 0;
	m->dropped++;
	if (m->st) {
		stat_sub(&m->st->used, f->size);
		stat_add(&m->st->file_failures, 1);
		stat_add(&m->st->corrupt, 1);
	}
	return 0;
}

int cache_verify(const char *dir, uint64_t *ret_checked, uint64_t *ret_dropped)
{
	struct maint m;
	int r = maint_open(dir, &m);

	if (r < 0)
		return r;
	r = cache_scan(m.chunks_fd, verify_one, &m);
	if (r == 0 && m.files_fd >= 0)
		r = cache_scan_files(m.files_fd, verify_file, &m);
	if (ret_checked)
		*ret_checked = m.checked;
	if (ret_dropped)
		*ret_dropped = m.dropped;
	maint_close(&m);
	return r;
}

int cache_files_add(void *ud, const struct cache_file *f)
{
	struct cache_files *l = ud;

	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 256;
		struct cache_file *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = *f;
	l->total += f->size;
	return 0;
}

static int cmp_mtime(const void *a, const void *b)
{
	const struct cache_file *x = a, *y = b;

	return x->mtime < y->mtime ? -1 : x->mtime > y->mtime;
}

void cache_files_sort(struct cache_files *l)
{
	if (l->n)
		qsort(l->v, l->n, sizeof(*l->v), cmp_mtime);
}

/* Cost: a walk of the whole cache and a sort; O(n log n) in chunk files. */
int cache_trim(const char *dir, uint64_t bytes, uint64_t *ret_freed)
{
	struct maint m;
	int r = maint_open(dir, &m);

	if (r < 0)
		return r;
	/* whole-file objects first (they sort before every chunk), oldest
	 * first; then chunks, oldest first */
	if (m.files_fd >= 0) {
		r = cache_scan_files(m.files_fd, cache_files_add, &m.list);
		for (size_t i = 0; i < m.list.n; i++)
			m.list.v[i].mtime = INT64_MIN;
	}
	if (r == 0)
		r = cache_scan(m.chunks_fd, cache_files_add, &m.list);
	if (r == 0)
		cache_files_sort(&m.list);
	for (size_t i = 0; r == 0 && i < m.list.n && m.list.total > bytes; i++) {
		m.list.total -= m.list.v[i].size;
		if (maint_unlink(&m, &m.list.v[i])) {
			m.freed += m.list.v[i].size;
			if (m.st) {
				stat_add(&m.st->evictions, 1);
				stat_add(&m.st->evicted_bytes, m.list.v[i].size);
			}
		}
	}
	if (ret_freed)
		*ret_freed = m.freed;
	maint_close(&m);
	return r;
}
