/* index.c — images' indexes for the tools that serve them: kept in the cache
 * directory (DIR/indexes/<hex>) so that a remount or a prefetch needs no fetch,
 * mapped, and checked against their names every time they are opened. */
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
	memset(m, 0, sizeof(*m));
}

/* Map path and check that its bytes hash to hex: -EBADMSG when they do not. */
static int index_map_open(const char *path, const char *hex, struct index_map *m)
{
	_cleanup_close_ int fd = -1;
	uint8_t want[HASH_SIZE], got[HASH_SIZE];
	struct stat st;
	int r;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (st.st_size == 0)
		return -EBADMSG;
	m->len = (size_t)st.st_size;
	m->data = mmap(NULL, m->len, PROT_READ, MAP_PRIVATE, fd, 0);
	if (m->data == MAP_FAILED) {
		m->data = NULL;
		return -errno;
	}
	hash128(m->data, m->len, got);
	if (hex_decode(hex, want, HASH_SIZE) < 0 || memcmp(want, got, HASH_SIZE))
		return -EBADMSG;
	r = image_open_mem(m->data, m->len, &m->img);
	if (r == 0)
		r = image_verify(m->img);
	return r;
}

/* The index named hex: from the cache directory when an earlier mount kept
 * it, else fetched from the store (which checks it against its name) and
 * kept for the next mount. */
int load_index(struct store *s, const char *cache_dir, const char *hex,
                      struct index_map *m)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	char dir[PATH_MAX], path[PATH_MAX + HASH_HEX_SIZE];
	int r;

	if (snprintf(dir, sizeof(dir), "%s/indexes", cache_dir) >= (int)sizeof(dir))
		return log_error(-ENAMETOOLONG, "cache '%s': path too long", cache_dir);
	snprintf(path, sizeof(path), "%s/%s", dir, hex);
	r = index_map_open(path, hex, m);
	if (r == 0)
		return 0;
	index_map_free(m);
	if (r != -ENOENT)
		log_msg(LOG_WARN, "index %s: the cached copy is unusable (%s); fetching it again", hex,
		        strerror(-r));
	r = store_get_index(s, hex, &b);
	if (r < 0)
		return r;
	r = mkdir_p(dir, 0755);
	if (r == 0)
		r = write_file_atomic(path, b.data, b.len, 0644);
	if (r < 0)
		return log_errno(r, "index %s: writing `%s`", hex, path);
	r = index_map_open(path, hex, m);
	if (r < 0)
		return log_errno(r, "index %s: the index is corrupt", hex);
	return 0;
}

