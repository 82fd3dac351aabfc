/*
 * files.c — whole-file objects: a file's bytes as one plain file on the cache
 * disk, DIR/files/<32 hex>, so that the filesystem can hand it to the kernel
 * for FUSE passthrough (reads and mmap then go straight to the cache disk's
 * page cache, with large folios, and a cold read is one contiguous file).
 *
 * An object is derived data: its name is the XXH3-128 of the file's piece
 * list (chunk names, sizes and the ranges taken from each), so it is shared
 * by every image holding the same file, and it can always be made again from
 * the chunks.  The XXH3-128 of its bytes is kept in the xattr
 * CACHE_FILE_XATTR.
 *
 * Invariants:
 *  - an object becomes visible only whole: it is written into an O_TMPFILE,
 *    every chunk read for it is hashed against its name first, and it is
 *    linked into files/ last; a kill at any moment leaves nothing behind;
 *  - a descriptor handed out (cache_file_open) is on an object this daemon
 *    has just made, or has just re-hashed against its xattr for this very
 *    call: every new passthrough registration is checked, since the kernel
 *    reads the object's pages from the disk without us for as long as the
 *    registration lives, and a disk rots under files this daemon wrote or
 *    checked itself; a mismatch is unlinked, counted, logged, and the file
 *    is served from its chunks (each hashed when read) until made again;
 *    recently checked objects (WF_MAPPED bytes) stay mapped, their pages in
 *    this process's page tables since the hash read them through the
 *    mapping; the kernel takes a page out of every page table that maps it
 *    before it reclaims it, so while /proc/self/pagemap shows each page
 *    present and the file is not written (its ctime), the pages are the
 *    ones hashed, never read again from the disk, and a new registration
 *    needs no re-hash (nothing is locked: memory pressure reclaims them as
 *    any page cache, and the next registration then re-hashes);
 *  - an object dropped while a registration of it lives (`cache verify`,
 *    `cache trim`, another daemon's eviction: its descriptor's link count is
 *    0) is re-hashed through that descriptor before a new open shares the
 *    registration (cache_file_held); one that fails is remembered as bad
 *    (WF_BAD) so that no open shares it again;
 *  - making and checking run on one worker thread, never on the loop's: the
 *    loop only queues jobs and takes their results;
 *  - objects count in the shared `used` gauge like chunk files, moved only by
 *    this process's own link or unlink; eviction takes them before chunks
 *    (an evicted object that the kernel still reads from keeps its blocks
 *    until the last such open is released).
 *
 * State other than the job queue belongs to the loop's thread.
 */
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include "cache/cache-internal.h"
#include "lib/loop.h"

#define WF_BUCKETS 256
#define WF_IO (4 << 20)                 /* bytes hashed per read while checking */
#define WF_WRITE (4 << 20)              /* bytes per write while making */
#define WF_LIMIT_SHARE 8                /* an object is at most limit / this */
/* Bytes of checked objects kept mapped, so that a new registration of one
 * whose pages stayed needs no re-hash (see wf_map): address space and page
 * tables only (2 KiB a MiB), the pages stay reclaimable */
#define WF_MAPPED (256ULL << 20)

enum wf_state {
	WF_UNCHECKED,                   /* on disk, not checked by this daemon */
	WF_BUSY,                        /* a job is out for it */
	WF_READY,                       /* fd open on a checked object */
	WF_FAILED,                      /* could not be made; not tried again */
	WF_BAD,                         /* failed its check: nothing handed out,
	                                   cache_file_held refuses; made again
	                                   when asked to make */
};

/* Someone waiting for an object's check (cache_file_open: -EINPROGRESS). */
struct wf_waiter {
	struct wf_waiter *next;
	cache_cb cb;
	void *ud;
};

struct wfile {
	struct wf_waiter *waiters;      /* WF_BUSY on a check: called when it ends */
	uint8_t key[HASH_SIZE];
	uint64_t size;
	enum wf_state state;
	bool on_disk;                   /* a file files/<hex> (as far as we know) */
	bool fresh;                     /* fd made or checked, not handed out since */
	bool held_ok;                   /* fd's file unlinked, re-hashed since: good */
	int fd;                         /* WF_READY: read-only, checked */
	void *map;                      /* mapped since checked through it, or NULL */
	struct timespec ctime;          /* the file's ctime when it was mapped */
	struct wfile *kprev, *knext;    /* mapped LRU, head = most recently registered */
	struct wfile *hnext;
	struct wfile *lprev, *lnext;    /* on-disk LRU, head = most recently used */
};

struct wf_job {
	struct wf_job *next;
	struct wfiles *w;
	struct wfile *e;                /* NULL once the entry is gone */
	bool make;                      /* assemble (else: check what is on disk) */
	int fd;                         /* check this descriptor (a dup, owned), not
	                                   the file under the name; -1: by name */
	struct cache_piece *pieces;     /* make: the file's pieces, owned */
	unsigned npieces;
	uint64_t size;
	/* results */
	int res;                        /* fd (read-only) or -errno */
	bool linked;                    /* make: this job linked the object */
	void *map;                      /* res mapped and hashed through it (wf_map), or NULL */
	struct timespec ctime;
	bool dropped;                   /* check: this job unlinked a bad object */
};

struct wlist {
	struct wfile *head, *tail;
};

struct wfiles {
	struct cache *c;                /* borrowed */
	struct loop *loop;              /* borrowed */
	struct cache_stats *st;         /* borrowed */
	int files_fd, chunks_fd;        /* files_fd owned */
	uint64_t limit;                 /* the cache's limit in bytes */
	struct wfile *buckets[WF_BUCKETS];
	struct wlist lru;
	struct wlist mapped;            /* objects with map, by kprev/knext */
	uint64_t mapped_bytes;
	int pagemap_fd;                 /* /proc/self/pagemap, or -1: always re-hash */
	unsigned out;                   /* jobs queued or running, results not yet taken */
	bool thread_started;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct wf_job *q_head, *q_tail; /* protected by lock */
	bool stop;                      /* protected by lock */
};

static struct wfile **wf_slot(struct wfiles *w, const uint8_t key[HASH_SIZE])
{
	struct wfile **pp = &w->buckets[key[0]];

	while (*pp && memcmp((*pp)->key, key, HASH_SIZE))
		pp = &(*pp)->hnext;
	return pp;
}

static void lru_unlink(struct wlist *l, struct wfile *e)
{
	if (e->lprev)
		e->lprev->lnext = e->lnext;
	else
		l->head = e->lnext;
	if (e->lnext)
		e->lnext->lprev = e->lprev;
	else
		l->tail = e->lprev;
	e->lprev = e->lnext = NULL;
}

static void lru_push_head(struct wlist *l, struct wfile *e)
{
	e->lprev = NULL;
	e->lnext = l->head;
	if (l->head)
		l->head->lprev = e;
	else
		l->tail = e;
	l->head = e;
}

static struct wfile *wf_add(struct wfiles *w, const uint8_t key[HASH_SIZE], uint64_t size)
{
	struct wfile *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	memcpy(e->key, key, HASH_SIZE);
	e->size = size;
	e->fd = -1;
	e->hnext = w->buckets[key[0]];
	w->buckets[key[0]] = e;
	return e;
}

static void wf_set_on_disk(struct wfiles *w, struct wfile *e, bool on)
{
	if (e->on_disk == on)
		return;
	e->on_disk = on;
	if (on)
		lru_push_head(&w->lru, e);
	else
		lru_unlink(&w->lru, e);
}

static void wf_unmap(struct wfiles *w, struct wfile *e)
{
	if (!e->map)
		return;
	LIST_UNLINK(&w->mapped, e, kprev, knext);
	munmap(e->map, e->size);
	e->map = NULL;
	w->mapped_bytes -= e->size;
}

/* e is mapped at map (its ctime then), checked through it: keep it,
 * unmapping the least recently registered others beyond WF_MAPPED. */
static void wf_keep_mapped(struct wfiles *w, struct wfile *e, void *map,
                           const struct timespec *ctime)
{
	wf_unmap(w, e);
	if (!map)
		return;
	while (w->mapped_bytes + e->size > WF_MAPPED && w->mapped.tail)
		wf_unmap(w, w->mapped.tail);
	e->map = map;
	e->ctime = *ctime;
	w->mapped_bytes += e->size;
	LIST_PUSH_HEAD(&w->mapped, e, kprev, knext);
}

/* Whether every page of [map, map + size) is still in this process's page
 * tables: a page reclaimed since is not (nor one being migrated: a copy of
 * the same bytes, re-hashed all the same).  One 8-byte entry a page. */
static bool pages_present(int pagemap_fd, const void *map, uint64_t size)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), v[512];
	uint64_t first = (uintptr_t)map / page, n = (size + page - 1) / page;

	for (uint64_t i = 0; i < n;) {
		size_t k = (size_t)MIN(n - i, (uint64_t)ARRAY_SIZE(v));

		if (pread_full(pagemap_fd, v, k * sizeof(v[0]), (off_t)((first + i) * sizeof(v[0]))) !=
		    (ssize_t)(k * sizeof(v[0])))
			return false;
		for (size_t j = 0; j < k; j++)
			if (!(v[j] >> 63))      /* bit 63: page present */
				return false;
		i += k;
	}
	return true;
}

/* Whether e's mapped pages are still the bytes checked: its file neither
 * unlinked nor written since (a write moves ctime), and no page of it
 * reclaimed (so none read again from the disk, where rot reaches). */
static bool wf_still_mapped(struct wfiles *w, struct wfile *e)
{
	struct stat sb;

	return e->map && w->pagemap_fd >= 0 && fstat(e->fd, &sb) == 0 && sb.st_nlink > 0 &&
	       (uint64_t)sb.st_size == e->size && sb.st_ctim.tv_sec == e->ctime.tv_sec &&
	       sb.st_ctim.tv_nsec == e->ctime.tv_nsec && pages_present(w->pagemap_fd, e->map, e->size);
}

/* Forget e: out of the table and the LRUs, its fd closed (a kernel backing
 * file registered from it keeps its own reference). */
static void wf_remove(struct wfiles *w, struct wfile *e)
{
	struct wfile **pp = wf_slot(w, e->key);

	*pp = e->hnext;
	wf_set_on_disk(w, e, false);
	wf_unmap(w, e);
	if (e->fd >= 0)
		close(e->fd);
	free(e);
}

/* ---- the worker ----------------------------------------------------------- */

/* Hash the object at fd (size bytes) and compare with its xattr: through
 * map (fd mapped whole, wf_map) when there is one, else read WF_IO at a
 * time. */
static int check_fd(int fd, uint64_t size, const void *map)
{
	_cleanup_free_ uint8_t *buf = NULL;
	struct hash128_state *hs = NULL;
	uint8_t want[HASH_SIZE], got[HASH_SIZE];
	struct stat sb;
	uint64_t off = 0;
	int r = 0;

	if (fstat(fd, &sb) < 0)
		return -errno;
	if ((uint64_t)sb.st_size != size)
		return -EBADMSG;
	if (fgetxattr(fd, CACHE_FILE_XATTR, want, sizeof(want)) != sizeof(want))
		return errno == ENODATA || errno == ERANGE ? -EBADMSG : -errno;
	if (map) {
		hash128(map, (size_t)size, got);
		return memcmp(got, want, HASH_SIZE) ? -EBADMSG : 0;
	}
	buf = malloc(WF_IO);
	hs = hash128_new();
	if (!buf || !hs) {
		hash128_free(hs);
		return -ENOMEM;
	}
	while (off < size) {
		ssize_t n = pread_full(fd, buf, (size_t)MIN((uint64_t)WF_IO, size - off), off);

		if (n <= 0) {
			r = n < 0 ? (int)n : -EBADMSG;
			break;
		}
		hash128_update(hs, buf, (size_t)n);
		off += (uint64_t)n;
	}
	if (r == 0) {
		hash128_final(hs, got);
		if (memcmp(got, want, HASH_SIZE))
			r = -EBADMSG;
	}
	hash128_free(hs);
	return r;
}

/*
 * Map the object at fd (size bytes) whole, its pages in this process's page
 * tables (MAP_POPULATE), for it to be hashed through the mapping: every page
 * hashed is then one a page table maps, and stays there until the kernel
 * reclaims it (wf_still_mapped), as long as the file is not written (ctime,
 * taken now: a write during the hash either shows in it or moves ctime
 * after).  *ret_map is NULL when it cannot be mapped: the object is then
 * hashed by reads, and again at every registration.  Worker thread.
 */
static void wf_map(int fd, uint64_t size, void **ret_map, struct timespec *ret_ctime)
{
	struct stat sb;
	void *m;

	*ret_map = NULL;
	if (!size || size > WF_MAPPED || fstat(fd, &sb) < 0)
		return;
	m = mmap(NULL, size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (m == MAP_FAILED)
		return;
	*ret_map = m;
	*ret_ctime = sb.st_ctim;
}

static void wf_map_drop(void **map, uint64_t size)
{
	if (*map)
		munmap(*map, size);
	*map = NULL;
}

int cache_file_check(int files_fd, const char *hex, uint64_t size)
{
	_cleanup_close_ int fd = openat(files_fd, hex, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0)
		return -errno;
	return check_fd(fd, size, NULL);
}

static void job_check(struct wf_job *j)
{
	char hex[HASH_HEX_SIZE];
	int fd, r;

	if (j->fd >= 0) {
		/* an unlinked file of a live registration: nothing to unlink */
		r = check_fd(j->fd, j->size, NULL);
		j->res = r < 0 ? r : 0;
		return;
	}
	hex_encode(j->e ? j->e->key : (const uint8_t *)"", HASH_SIZE, hex);
	fd = openat(j->w->files_fd, hex, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		j->res = -errno;
		return;
	}
	wf_map(fd, j->size, &j->map, &j->ctime);
	r = check_fd(fd, j->size, j->map);
	if (r < 0)
		wf_map_drop(&j->map, j->size);
	if (r == -EBADMSG) {
		j->dropped = unlinkat(j->w->files_fd, hex, 0) == 0;
		close(fd);
		j->res = r;
		return;
	}
	if (r < 0) {
		close(fd);
		j->res = r;
		return;
	}
	j->res = fd;
}

/* Read chunk ch whole from the chunk files and check it against its name. */
static int read_chunk(int chunks_fd, const struct cache_chunk *ch, uint8_t *buf)
{
	char hex[HASH_HEX_SIZE], rel[CACHE_REL_LEN];
	_cleanup_close_ int fd = -1;
	uint8_t got[HASH_SIZE];
	ssize_t n;

	hex_encode(ch->name, HASH_SIZE, hex);
	snprintf(rel, sizeof(rel), "%.2s/%s", hex, hex);
	fd = openat(chunks_fd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	n = pread_full(fd, buf, ch->size, 0);
	if (n < 0)
		return (int)n;
	hash128(buf, (size_t)n, got);
	if ((uint64_t)n != ch->size || memcmp(got, ch->name, HASH_SIZE))
		return -EBADMSG;
	return 0;
}

static void job_make(struct wf_job *j)
{
	struct wfiles *w = j->w;
	_cleanup_close_ int fd = -1;
	_cleanup_free_ uint8_t *buf = NULL, *out = NULL;
	struct hash128_state *hs = NULL;
	uint8_t sum[HASH_SIZE];
	char hex[HASH_HEX_SIZE], proc[64];
	uint32_t bufsize = 0;
	uint64_t pos = 0;                /* file offset of out[0] */
	size_t used = 0;                 /* bytes in out */
	int r = 0;

	for (unsigned i = 0; i < j->npieces; i++)
		bufsize = MAX(bufsize, j->pieces[i].ch.size);
	buf = malloc(bufsize ? bufsize : 1);
	out = malloc(WF_WRITE);
	hs = hash128_new();
	fd = openat(w->files_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
	if (!buf || !out || !hs)
		r = -ENOMEM;
	else if (fd < 0)
		r = -errno;
	for (unsigned i = 0; r == 0 && i < j->npieces; i++) {
		const struct cache_piece *p = &j->pieces[i];

		r = read_chunk(w->chunks_fd, &p->ch, buf);
		if (r < 0)
			break;
		hash128_update(hs, buf + p->off, p->len);
		/* written in aligned WF_WRITE blocks: the page cache then holds
		 * the object in large folios, as a read-ahead would */
		for (uint32_t done = 0; r == 0 && done < p->len;) {
			size_t n = MIN((size_t)(p->len - done), WF_WRITE - used);

			memcpy(out + used, buf + p->off + done, n);
			used += n;
			done += (uint32_t)n;
			if (used == WF_WRITE) {
				r = pwrite_full(fd, out, used, pos);
				pos += used;
				used = 0;
			}
		}
	}
	if (r == 0 && used)
		r = pwrite_full(fd, out, used, pos);
	if (r == 0) {
		hash128_final(hs, sum);
		if (fsetxattr(fd, CACHE_FILE_XATTR, sum, sizeof(sum), 0) < 0)
			r = -errno;
	}
	hash128_free(hs);
	if (r < 0) {
		j->res = r;
		return;
	}
	hex_encode(j->e ? j->e->key : (const uint8_t *)"", HASH_SIZE, hex);
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	if (linkat(AT_FDCWD, proc, w->files_fd, hex, AT_SYMLINK_FOLLOW) == 0)
		j->linked = true;
	else if (errno != EEXIST) {
		j->res = -errno;
		return;
	}
	/* Hand out a read-only descriptor: the backing file of a passthrough
	 * open must not be writable through it. */
	j->res = open(proc, O_RDONLY | O_CLOEXEC);
	if (j->res < 0) {
		j->res = -errno;
		return;
	}
	/* what stays mapped is hashed once more through the mapping: pages
	 * written back and reclaimed since they were written came from the disk */
	wf_map(j->res, j->size, &j->map, &j->ctime);
	if (j->map && (r = check_fd(j->res, j->size, j->map)) < 0) {
		wf_map_drop(&j->map, j->size);
		close(j->res);
		j->res = r;
	}
}

static void job_done(void *ud);

static void *worker_main(void *arg)
{
	struct wfiles *w = arg;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		struct wf_job *j;

		while (!w->q_head && !w->stop)
			pthread_cond_wait(&w->cond, &w->lock);
		if (w->stop)
			break;
		j = w->q_head;
		w->q_head = j->next;
		if (!w->q_head)
			w->q_tail = NULL;
		pthread_mutex_unlock(&w->lock);
		if (j->make)
			job_make(j);
		else
			job_check(j);
		if (loop_post(w->loop, job_done, j) < 0) {
			/* the loop cannot take it: the job's result is lost, the
			 * entry stays busy (never handed out) */
			if (j->res >= 0)
				close(j->res);
		}
		pthread_mutex_lock(&w->lock);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

/* ---- on the loop ---------------------------------------------------------- */

static void job_free(struct wf_job *j)
{
	wf_map_drop(&j->map, j->size);
	if (j->fd >= 0)
		close(j->fd);
	free(j->pieces);
	free(j);
}

/* e failed its check: counted, logged once, remembered as bad. */
static void wf_bad(struct wfiles *w, struct wfile *e)
{
	char hex[HASH_HEX_SIZE];

	hex_encode(e->key, HASH_SIZE, hex);
	stat_add(&w->st->corrupt, 1);
	log_msg(LOG_WARN, "cache: whole-file object files/%s is corrupt; dropped, its file is "
	        "served from its chunks", hex);
	wf_unmap(w, e);
	if (e->fd >= 0)
		close(e->fd);
	e->fd = -1;
	e->fresh = e->held_ok = false;
	e->state = WF_BAD;
	wf_set_on_disk(w, e, false);
}

static void waiters_run(struct wf_waiter *wt, int res)
{
	while (wt) {
		struct wf_waiter *next = wt->next;

		wt->cb(wt->ud, res);
		free(wt);
		wt = next;
	}
}

static void job_done(void *ud)
{
	struct wf_job *j = ud;
	struct wfiles *w = j->w;
	struct wfile *e = j->e;
	struct wf_waiter *wt = e ? e->waiters : NULL;
	int res;

	w->out--;
	if (e)
		e->waiters = NULL;
	if (j->linked)
		stat_add(&w->st->used, j->size);
	if (j->dropped) {
		stat_sub(&w->st->used, j->size);
		stat_add(&w->st->file_failures, 1);
	}
	if (j->linked)
		stat_add(&w->st->files_made, 1);
	if (!e) {
		if (j->res >= 0 && j->fd < 0)
			close(j->res);
		job_free(j);
		return;
	}
	if (j->fd >= 0) {
		/* a live registration's unlinked file, re-hashed */
		if (j->res == 0) {
			e->state = WF_READY;
			e->held_ok = true;
		} else {
			/* not known good: no open shares it again */
			if (j->res == -EBADMSG)
				stat_add(&w->st->file_failures, 1);
			else
				log_errno(j->res, "cache: checking a whole-file object");
			wf_bad(w, e);
		}
	} else if (j->res >= 0) {
		e->state = WF_READY;
		if (e->fd >= 0)
			close(e->fd);
		e->fd = j->res;
		e->fresh = true;
		e->held_ok = false;
		wf_keep_mapped(w, e, j->map, &j->ctime);
		j->map = NULL;
		wf_set_on_disk(w, e, true);
	} else if (j->res == -EBADMSG && !j->make) {
		/* bad bytes (dropped): made again later from the chunks; until
		 * then no open shares a registration of them */
		wf_bad(w, e);
	} else if (j->res == -ENOENT || j->res == -EBADMSG) {
		/* gone (`cache verify`, `cache trim`, another daemon), or a chunk
		 * evicted meanwhile or found bad (a reader's read of it fetches it
		 * again): made again later from the chunks */
		wf_remove(w, e);
	} else {
		/* ENOSPC and the like: the chunks stay enough; not tried again
		 * by this daemon */
		if (j->res != -ENOSPC && j->res != -EDQUOT)
			log_errno(j->res, "cache: whole-file object");
		e->state = WF_FAILED;
		wf_set_on_disk(w, e, false);
	}
	res = j->res >= 0 ? 0 : j->res;
	if (j->linked)
		cache_evict_over(w->c);
	job_free(j);
	waiters_run(wt, res);
}

static int job_queue(struct wfiles *w, struct wf_job *j)
{
	if (!w->thread_started) {
		if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
			return -EAGAIN;
		w->thread_started = true;
	}
	pthread_mutex_lock(&w->lock);
	if (w->q_tail)
		w->q_tail->next = j;
	else
		w->q_head = j;
	w->q_tail = j;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	w->out++;
	return 0;
}

static void piece_key(const struct cache_piece *p, unsigned n, uint8_t key[HASH_SIZE])
{
	struct hash128_state *hs = hash128_new();

	if (!hs) {
		memset(key, 0, HASH_SIZE);
		return;
	}
	for (unsigned i = 0; i < n; i++) {
		uint8_t rec[HASH_SIZE + 12];

		memcpy(rec, p[i].ch.name, HASH_SIZE);
		memcpy(rec + HASH_SIZE, &p[i].ch.size, 4);
		memcpy(rec + HASH_SIZE + 4, &p[i].off, 4);
		memcpy(rec + HASH_SIZE + 8, &p[i].len, 4);
		hash128_update(hs, rec, sizeof(rec));
	}
	hash128_final(hs, key);
	hash128_free(hs);
}

/* Wait for e's check: -EINPROGRESS, or -EAGAIN when no one may wait. */
static int wait_check(struct wfile *e, cache_cb cb, void *cb_ud)
{
	struct wf_waiter *wt;

	if (!cb || !(wt = malloc(sizeof(*wt))))
		return -EAGAIN;
	wt->cb = cb;
	wt->ud = cb_ud;
	wt->next = e->waiters;
	e->waiters = wt;
	return -EINPROGRESS;
}

int wfiles_get(struct wfiles *w, const struct cache_piece *pieces, unsigned npieces,
               bool (*have)(void *ud, const struct cache_chunk *ch), void *ud, cache_cb cb,
               void *cb_ud)
{
	static const uint8_t zero[HASH_SIZE];
	uint8_t key[HASH_SIZE];
	struct wfile *e;
	struct wf_job *j;
	uint64_t size = 0;
	bool make;
	int r;

	if (!npieces)
		return -EINVAL;
	for (unsigned i = 0; i < npieces; i++) {
		if ((uint64_t)pieces[i].off + pieces[i].len > pieces[i].ch.size)
			return -EINVAL;
		size += pieces[i].len;
	}
	piece_key(pieces, npieces, key);
	if (!memcmp(key, zero, HASH_SIZE))
		return -ENOMEM;
	e = *wf_slot(w, key);
	if (e && e->state == WF_READY) {
		lru_unlink(&w->lru, e);
		lru_push_head(&w->lru, e);
		if (e->fresh) {
			e->fresh = false;
			return e->fd;
		}
		/* its pages in place since checked, and the file unchanged */
		if (wf_still_mapped(w, e)) {
			LIST_UNLINK(&w->mapped, e, kprev, knext);
			LIST_PUSH_HEAD(&w->mapped, e, kprev, knext);
			return e->fd;
		}
		/* checked before, but not for this registration: again (below) */
	}
	if (e && e->state == WF_BAD) {
		/* made again from the chunks when asked to */
		wf_remove(w, e);
		e = NULL;
	}
	if (e && e->state == WF_BUSY)
		return e->on_disk ? wait_check(e, cb, cb_ud) : -EAGAIN;
	if (e && e->state == WF_FAILED)
		return -ENOENT;
	if (e && e->size != size) {
		/* a file of another size under this name: not ours to trust */
		e->state = WF_FAILED;
		return -ENOENT;
	}
	if (!e) {
		/* an object that large would push out as many chunks, or be
		 * evicted as soon as made */
		if (size > w->limit / WF_LIMIT_SHARE)
			return -ENOENT;
		if (!have)
			return -ENOENT;
		for (unsigned i = 0; i < npieces; i++)
			if (!have(ud, &pieces[i].ch))
				return -ENOENT;
	}
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->w = w;
	j->size = size;
	j->fd = -1;
	j->make = !e;
	if (j->make) {
		j->pieces = malloc(npieces * sizeof(*pieces));
		e = wf_add(w, key, size);
		if (!j->pieces || !e) {
			if (e)
				wf_remove(w, e);
			job_free(j);
			return -ENOMEM;
		}
		memcpy(j->pieces, pieces, npieces * sizeof(*pieces));
		j->npieces = npieces;
	}
	j->e = e;
	make = j->make;
	r = job_queue(w, j);
	if (r < 0) {
		if (make)
			wf_remove(w, e);
		job_free(j);
		return r;
	}
	e->state = WF_BUSY;
	return make ? -EAGAIN : wait_check(e, cb, cb_ud);
}

int wfiles_held(struct wfiles *w, const struct cache_piece *pieces, unsigned npieces,
                cache_cb cb, void *cb_ud)
{
	uint8_t key[HASH_SIZE];
	struct wf_job *j;
	struct wfile *e;
	struct stat sb;
	int r;

	piece_key(pieces, npieces, key);
	e = *wf_slot(w, key);
	if (e && e->state == WF_BAD)
		return -EBADMSG;
	/* gone from the table (evicted by this daemon: good bytes), being
	 * checked or made: nothing known against it */
	if (!e || e->state != WF_READY || e->fd < 0 || e->held_ok)
		return 0;
	if (fstat(e->fd, &sb) < 0 || sb.st_nlink > 0)
		return 0;
	/* unlinked by someone else, maybe for its bytes: hash what the
	 * registration reads */
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->w = w;
	j->e = e;
	j->size = e->size;
	j->fd = fcntl(e->fd, F_DUPFD_CLOEXEC, 0);
	if (j->fd < 0) {
		r = -errno;
		free(j);
		return r;
	}
	r = job_queue(w, j);
	if (r < 0) {
		job_free(j);
		return r;
	}
	e->state = WF_BUSY;
	return wait_check(e, cb, cb_ud);
}

uint64_t wfiles_evict(struct wfiles *w, uint64_t limit, uint64_t need)
{
	uint64_t freed = 0;
	struct wfile *e = w->lru.tail;

	while (e && (__atomic_load_n(&w->st->used, __ATOMIC_RELAXED) > limit || freed < need)) {
		struct wfile *prev = e->lprev;
		char hex[HASH_HEX_SIZE];

		/* one being checked stays: its job holds the name */
		if (e->state != WF_BUSY) {
			hex_encode(e->key, HASH_SIZE, hex);
			if (unlinkat(w->files_fd, hex, 0) == 0) {
				stat_sub(&w->st->used, e->size);
				stat_add(&w->st->evictions, 1);
				stat_add(&w->st->evicted_bytes, e->size);
				freed += e->size;
			}
			wf_remove(w, e);
		}
		e = prev;
	}
	return freed;
}

static int scan_one(void *ud, const struct cache_file *f)
{
	struct wfiles *w = ud;
	struct wfile *e;

	if (*wf_slot(w, f->name))
		return 0;
	e = wf_add(w, f->name, f->size);
	if (!e)
		return -ENOMEM;
	wf_set_on_disk(w, e, true);
	return 0;
}

int wfiles_new(struct cache *c, struct loop *loop, int dir_fd, int chunks_fd, uint64_t limit,
               struct cache_stats *st, bool alone, struct wfiles **ret)
{
	struct wfiles *w = calloc(1, sizeof(*w));
	struct cache_files s = { 0 };
	int r;

	if (!w)
		return -ENOMEM;
	w->c = c;
	w->loop = loop;
	w->st = st;
	w->chunks_fd = chunks_fd;
	w->limit = limit;
	w->files_fd = -1;
	/* without it (no /proc), every registration re-hashes */
	w->pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	if (mkdirat(dir_fd, "files", 0755) < 0 && errno != EEXIST) {
		r = -errno;
		goto fail;
	}
	w->files_fd = openat(dir_fd, "files", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (w->files_fd < 0) {
		r = -errno;
		goto fail;
	}
	/* oldest first, so that the newest end up at the LRU head */
	r = cache_scan_files(w->files_fd, cache_files_add, &s);
	if (r == 0)
		cache_files_sort(&s);
	for (size_t i = 0; r == 0 && i < s.n; i++)
		r = scan_one(w, &s.v[i]);
	free(s.v);
	if (r < 0)
		goto fail;
	/* alone on DIR: the chunk scan has just set the gauge; add ours */
	if (alone)
		stat_add(&st->used, s.total);
	*ret = w;
	return 0;
fail:
	wfiles_free(w);
	return r;
}

bool wfiles_idle(const struct wfiles *w)
{
	return !w || w->out == 0;
}

void wfiles_free(struct wfiles *w)
{
	if (!w)
		return;
	if (w->thread_started) {
		struct wf_job *j;

		pthread_mutex_lock(&w->lock);
		w->stop = true;
		j = w->q_head;
		w->q_head = w->q_tail = NULL;
		pthread_cond_signal(&w->cond);
		pthread_mutex_unlock(&w->lock);
		pthread_join(w->thread, NULL);
		while (j) {
			struct wf_job *next = j->next;

			job_free(j);
			w->out--;
			j = next;
		}
		/* what the worker finished is posted: take it before freeing */
		while (w->out && loop_run_once(w->loop, true) >= 0)
			;
	}
	for (unsigned i = 0; i < WF_BUCKETS; i++)
		while (w->buckets[i]) {
			struct wf_waiter *wt = w->buckets[i]->waiters;

			w->buckets[i]->waiters = NULL;
			waiters_run(wt, -ECANCELED);
			wf_remove(w, w->buckets[i]);
		}
	if (w->files_fd >= 0)
		close(w->files_fd);
	if (w->pagemap_fd >= 0)
		close(w->pagemap_fd);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cond);
	free(w);
}
