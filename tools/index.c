/*
 * index.c — images' indexes for the tools that serve them: kept in the cache
 * directory (DIR/indexes/<hex>) so that a remount or a prefetch needs no fetch,
 * and mapped.
 *
 * Invariant: a file is named DIR/indexes/<hex> only once its bytes hashed to
 * <hex> (in memory, as fetched) and were made durable (fsync) — or an earlier
 * version of this code wrote it, which hashed and fsynced it before renaming
 * it into place.  A mount therefore maps a kept index and checks only its
 * header and size: hashing it again cost two passes over the whole file (a
 * hash128 of the name and the index checksum) and made every page resident,
 * which was most of the daemon's RSS for a million files (108 MB).  Records
 * are bounds-checked on every access (image/reader.c), so even a file damaged
 * on disk after it was kept cannot make the daemon read outside the map.
 */
#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "image/image.h"
#include "lib/lib.h"
#include "store/store.h"
#include "tools/tools.h"

/* Unmap and free; m may be zeroed. */
void index_map_free(struct index_map *m)
{
	image_free(m->img);
	if (m->data)
		munmap(m->data, m->len);
	if (m->keep_fd > 0)
		close(m->keep_fd);
	free(m->keep_path);
	memset(m, 0, sizeof(*m));
}

/* Map len bytes of fd and check the header. */
static int index_map_fd(int fd, struct index_map *m)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (st.st_size == 0)
		return -EBADMSG;
	m->len = (size_t)st.st_size;
	m->data = mmap(NULL, m->len, PROT_READ, MAP_SHARED, fd, 0);
	if (m->data == MAP_FAILED) {
		m->data = NULL;
		return -errno;
	}
	/* Lookups touch the index all over: read it in now, in the background,
	 * rather than one page fault (a disk read on the daemon's only thread) at
	 * a time.  Page cache only: it does not count in the daemon's RSS. */
	posix_madvise(m->data, m->len, POSIX_MADV_WILLNEED);
	return image_open_mem(m->data, m->len, &m->img);
}

/* A kept index: verified and fsynced before it was named (see the top). */
static int index_map_kept(const char *path, struct index_map *m)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	return index_map_fd(fd, m);
}

/* Write the verified bytes b to an unnamed file in dir and map it from there
 * (page cache, not anonymous memory: only what is used becomes resident). */
static int index_map_fetched(const char *dir, const char *hex, const struct buf *b,
                             struct index_map *m)
{
	int fd, r;

	fd = open(dir, O_RDWR | O_TMPFILE | O_CLOEXEC, 0644);
	if (fd < 0 && (errno == EISDIR || errno == EINVAL))
		return -EOPNOTSUPP;
	if (fd < 0)
		return log_errno(-errno, "index %s: creating a file in `%s`", hex, dir);
	m->keep_fd = fd;
	r = write_full(fd, b->data, b->len);
	if (r < 0)
		return log_errno(r, "index %s: writing it into `%s`", hex, dir);
	return index_map_fd(fd, m);
}

int index_map_keep(struct index_map *m)
{
	char proc[64];
	int r = 0;

	if (m->keep_fd <= 0)
		return 0;
	if (fsync(m->keep_fd) < 0)
		r = -errno;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", m->keep_fd);
	if (r == 0 && linkat(AT_FDCWD, proc, AT_FDCWD, m->keep_path, AT_SYMLINK_FOLLOW) < 0 &&
	    errno != EEXIST)
		r = -errno;
	if (r == 0)
		r = fsync_dir_of(m->keep_path);
	close(m->keep_fd);
	m->keep_fd = -1;
	if (r < 0)
		return log_errno(r, "index: keeping `%s`", m->keep_path);
	return 0;
}

int load_index(struct store *s, const char *cache_dir, const char *hex,
                      struct index_map *m)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	char dir[PATH_MAX], path[PATH_MAX + HASH_HEX_SIZE];
	int r;

	if (snprintf(dir, sizeof(dir), "%s/indexes", cache_dir) >= (int)sizeof(dir))
		return log_error(-ENAMETOOLONG, "cache '%s': path too long", cache_dir);
	snprintf(path, sizeof(path), "%s/%s", dir, hex);
	r = index_map_kept(path, m);
	if (r == 0)
		return 0;
	index_map_free(m);
	if (!s)
		return r;  /* the caller fetches it with a store if it must */
	if (r != -ENOENT)
		log_msg(LOG_WARN, "index %s: the cached copy is unusable (%s); fetching it again", hex,
		        strerror(-r));
	/* checked against its name: every byte, the checksum included */
	r = store_get_index(s, hex, &b);
	if (r < 0)
		return r;
	r = mkdir_p(dir, 0755);
	if (r < 0)
		return log_errno(r, "index %s: creating `%s`", hex, dir);
	m->keep_path = strdup(path);
	if (!m->keep_path)
		return -ENOMEM;
	r = index_map_fetched(dir, hex, &b, m);
	if (r < 0 && r != -EOPNOTSUPP && !m->data)
		return r;  /* not written: said so above */
	if (r == -EOPNOTSUPP) {
		/* no unnamed files here: kept the slow way, durable at once */
		index_map_free(m);
		r = write_file_atomic(path, b.data, b.len, 0644);
		if (r < 0)
			return log_errno(r, "index %s: writing `%s`", hex, path);
		r = index_map_kept(path, m);
	}
	if (r < 0)
		return log_errno(r, "index %s: the index is corrupt", hex);
	return 0;
}
