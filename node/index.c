/*
 * index.c — an image's index, pack and access profile as the node serves
 * them: the index kept in the cache directory (DIR/indexes/<hex>) so that a
 * remount or a prefetch needs no fetch, and mapped; the offsets of its chunks
 * in a `dir:` store's pack; its profile from the store.
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
 *
 * From a `dir:` store, a first mount maps the store's own file once it hashed
 * to its name, and copies it into the cache off the serving thread (hashing
 * the copy as it writes it), then maps the copy over the store's file: a
 * million files' index is ~100 MB, and writing it before the mount answered
 * was most of that mount's time.
 */
#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image/image.h"
#include "lib/lib.h"
#include "node/node-internal.h"
#include "store/store.h"

#define INDEX_COPY_BUF (1u << 20)  /* bytes per read when keeping a store's file */

/* Unmap and free; m may be zeroed. */
void node_index_free(struct node_index *m)
{
	image_free(m->img);
	if (m->data)
		munmap(m->data, m->len);
	if (m->keep_fd > 0)
		close(m->keep_fd);
	if (m->src_fd > 0)
		close(m->src_fd);
	free(m->keep_path);
	memset(m, 0, sizeof(*m));
}

/* Map len bytes of fd and check the header. */
static int index_map_fd(int fd, struct node_index *m)
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
static int index_map_kept(const char *path, struct node_index *m)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	return index_map_fd(fd, m);
}

/* The length of m->keep_path's directory part (node_index_load made it DIR/hex). */
static int keep_dirlen(const struct node_index *m)
{
	return (int)(strrchr(m->keep_path, '/') - m->keep_path);
}

/* An unnamed file in the directory of m->keep_path; -EOPNOTSUPP where the
 * file system has none. */
static int index_tmpfile(const struct node_index *m)
{
	char dir[PATH_MAX];
	int fd;

	snprintf(dir, sizeof(dir), "%.*s", keep_dirlen(m), m->keep_path);
	fd = open(dir, O_RDWR | O_TMPFILE | O_CLOEXEC, 0644);
	if (fd < 0 && (errno == EISDIR || errno == EINVAL))
		return -EOPNOTSUPP;
	return fd < 0 ? -errno : fd;
}

/* Write the verified bytes b to an unnamed file beside m->keep_path and map
 * it from there (page cache, not anonymous memory: only what is used becomes
 * resident). */
static int index_map_fetched(const char *hex, const struct buf *b, struct node_index *m)
{
	int dirlen = keep_dirlen(m);
	int fd, r;

	fd = index_tmpfile(m);
	if (fd == -EOPNOTSUPP)
		return fd;
	if (fd < 0)
		return log_errno(fd, "index %s: creating a file in `%.*s`", hex, dirlen,
		                 m->keep_path);
	m->keep_fd = fd;
	r = write_full(fd, b->data, b->len);
	if (r < 0)
		return log_errno(r, "index %s: writing it into `%.*s`", hex, dirlen, m->keep_path);
	return index_map_fd(fd, m);
}

/* Serve from fd (a copy of the same bytes) from now on, at the same address:
 * a reader on another thread sees the old page or the new.  The store's file
 * may be on a network file system that goes away, or be cut short in place by
 * something else, and a mapped file that shrinks is a SIGBUS. */
static int index_remap(struct node_index *m, int fd)
{
	if (!m->data)
		return -EINVAL;
	if (mmap(m->data, m->len, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
		return log_errno(-errno, "index: mapping `%s` in place of the store's file; still "
		                 "serving from the store's", m->keep_path);
	return 0;
}

/* Copy the store's file m->src_fd into an unnamed file (m->keep_fd), hashing
 * what is written: the store's file was checked when it was opened, but only
 * what hashes to the name now may be kept under it. */
static int index_copy(struct node_index *m)
{
	const char *hex = m->keep_path + keep_dirlen(m) + 1;
	uint8_t want[HASH_SIZE], got[HASH_SIZE];
	struct hash128_state *h = NULL;
	_cleanup_free_ uint8_t *buf = NULL;
	uint64_t off = 0;
	ssize_t n;
	int fd, r = 0;

	if (hex_decode(hex, want, HASH_SIZE) < 0)
		return -EINVAL;
	fd = index_tmpfile(m);
	if (fd == -EOPNOTSUPP) {
		/* no unnamed files here: the mapped bytes, checked, the slow way */
		hash128(m->data, m->len, got);
		r = memcmp(want, got, HASH_SIZE) ? -EBADMSG
		                                 : write_file_atomic(m->keep_path, m->data, m->len, 0644);
		fd = r == 0 ? open(m->keep_path, O_RDONLY | O_CLOEXEC) : -1;
		if (fd < 0 || index_remap(m, fd) < 0)
			posix_madvise(m->data, m->len, POSIX_MADV_DONTNEED);  /* the hash's pages */
		if (fd >= 0)
			close(fd);
		return r;
	}
	if (fd < 0)
		return fd;
	buf = malloc(INDEX_COPY_BUF);
	h = hash128_new();
	while (buf && h) {
		n = pread(m->src_fd, buf, INDEX_COPY_BUF, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n < 0 ? -errno : 0;
			break;
		}
		hash128_update(h, buf, (size_t)n);
		r = write_full(fd, buf, (size_t)n);
		if (r < 0)
			break;
		off += (uint64_t)n;
	}
	if (!buf || !h)
		r = -ENOMEM;
	if (h)
		hash128_final(h, got);
	hash128_free(h);
	if (r == 0 && memcmp(want, got, HASH_SIZE))
		r = -EBADMSG;
	if (r < 0) {
		close(fd);
		return r;
	}
	m->keep_fd = fd;
	return 0;
}

int node_index_keep(struct node_index *m)
{
	char proc[64];
	bool copied = m->src_fd > 0;
	int r = 0;

	if (copied) {
		int dirlen = keep_dirlen(m);
		const char *hex = m->keep_path + dirlen + 1;

		r = index_copy(m);
		close(m->src_fd);
		m->src_fd = -1;
		if (r == -EBADMSG)
			return log_error(r, "index %s: the store's file no longer matches its name; "
			                 "not kept", hex);
		if (r < 0)
			return log_errno(r, "index %s: writing it into `%.*s`", hex, dirlen, m->keep_path);
	}
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
	if (r == 0 && copied)
		(void)index_remap(m, m->keep_fd);
	close(m->keep_fd);
	m->keep_fd = -1;
	if (r < 0)
		return log_errno(r, "index: keeping `%s`", m->keep_path);
	return 0;
}

bool node_index_unkept(const struct node_index *m)
{
	return m->keep_fd > 0 || m->src_fd > 0;
}

int node_index_load(struct store *s, const char *cache_dir, const char *hex,
                      struct node_index *m)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	char dir[PATH_MAX], path[PATH_MAX + HASH_HEX_SIZE];
	int fd, r;

	if (snprintf(dir, sizeof(dir), "%s/indexes", cache_dir) >= (int)sizeof(dir))
		return log_error(-ENAMETOOLONG, "cache '%s': path too long", cache_dir);
	snprintf(path, sizeof(path), "%s/%s", dir, hex);
	r = index_map_kept(path, m);
	if (r == 0)
		return 0;
	node_index_free(m);
	if (!s)
		return r;  /* the caller fetches it with a store if it must */
	if (r != -ENOENT)
		log_msg(LOG_WARN, "index %s: the cached copy is unusable (%s); fetching it again", hex,
		        strerror(-r));
	r = mkdir_p(dir, 0755);
	if (r < 0)
		return log_errno(r, "index %s: creating `%s`", hex, dir);
	m->keep_path = strdup(path);
	if (!m->keep_path)
		return -ENOMEM;
	/* checked against its name: every byte, the checksum included */
	fd = store_open_index(s, hex);
	if (fd >= 0) {
		m->src_fd = fd;
		r = index_map_fd(fd, m);
		if (r < 0)
			return log_errno(r, "index %s: the index is corrupt", hex);
		return 0;
	}
	if (fd != -EOPNOTSUPP)
		return fd;  /* said why */
	r = store_get_index(s, hex, &b);
	if (r < 0)
		return r;
	r = index_map_fetched(hex, &b, m);
	if (r < 0 && r != -EOPNOTSUPP && !m->data)
		return r;  /* not written: said so above */
	if (r == -EOPNOTSUPP) {
		/* no unnamed files here: kept the slow way, durable at once */
		node_index_free(m);
		r = write_file_atomic(path, b.data, b.len, 0644);
		if (r < 0)
			return log_errno(r, "index %s: writing `%s`", hex, path);
		r = index_map_kept(path, m);
	}
	if (r < 0)
		return log_errno(r, "index %s: the index is corrupt", hex);
	return 0;
}

/* ---- the image's pack and profile in the store ---------------------------- */

int node_pack_offsets(struct store *s, const struct image *img, const char *hex,
                       uint64_t **ret)
{
	char key[64];
	int64_t size;
	struct image_info info;
	uint64_t *v;
	int r;

	*ret = NULL;
	snprintf(key, sizeof(key), "packs/%s", hex);
	size = store_local_size(s, key);
	if (size == -EOPNOTSUPP || size == -ENOENT)
		return 0;
	if (size < 0) {
		log_errno((int)size, "store '%s': %s unusable, reading chunk objects", store_url(s),
		          key);
		return 0;
	}
	r = image_pack_offsets(img, &v);
	if (r < 0)
		return r;
	image_get_info(img, &info);
	if ((uint64_t)size != v[info.chunks]) {
		log_msg(LOG_WARN, "store '%s': %s is %lld bytes, not the %llu its index says; "
		        "reading chunk objects", store_url(s), key, (long long)size,
		        (unsigned long long)v[info.chunks]);
		free(v);
		return 0;
	}
	*ret = v;
	return 0;
}
void node_profile_key(const char *hex, char out[64])
{
	snprintf(out, 64, "profiles/%s", hex);
}

int node_profile_fetch(struct store *s, const char *hex, struct image_profile **ret)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	struct image_profile *p = NULL;
	const char *why = NULL;
	uint8_t idx[HASH_SIZE];
	char key[64];
	int r;

	*ret = NULL;
	node_profile_key(hex, key);
	r = store_get_sync(s, key, &b);
	if (r == -ENOENT)
		return 0;
	if (r < 0) {
		log_msg(LOG_WARN, "profile of index %s: cannot read it from '%s' (%s); not used", hex,
		        store_url(s), strerror(-r));
		return 0;
	}
	r = image_profile_parse(b.data, b.len, &p, &why);
	if (r < 0) {
		log_msg(LOG_WARN, "profile of index %s: %s; not used", hex, why ? why : "unreadable");
		return 0;
	}
	if (hex_decode(hex, idx, HASH_SIZE) < 0 || memcmp(idx, image_profile_index(p), HASH_SIZE)) {
		log_msg(LOG_WARN, "profile of index %s: it was recorded for another index; not used",
		        hex);
		image_profile_free(p);
		return 0;
	}
	*ret = p;
	return 0;
}
