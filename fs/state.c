/*
 * state.c — the connection's state file (struct fs_state_hdr in
 * fs-internal.h): laid out when a mount is made, checked and mapped again
 * when a worker takes the connection over.
 *
 * It lives in a memfd that the node's holder keeps open beside the
 * connection's /dev/fuse descriptor, so it outlives the worker that writes
 * it, and a new worker maps the same pages.  Only what a stateless
 * restart cannot rebuild is kept: the INIT request, the directory parents
 * learnt from lookups (".." of a directory read later), and the opens the
 * kernel holds.  Pages are touched as used: the tables are sparse.
 */
#include <sys/mman.h>

#include "fs/fs-internal.h"

static size_t parent_bytes(uint64_t inodes)
{
	return ((size_t)(inodes + 1) * sizeof(uint32_t) + 4095) & ~(size_t)4095;
}

static size_t state_bytes(uint64_t inodes)
{
	return FS_STATE_PARENT_OFF + parent_bytes(inodes) +
	       (size_t)FS_STATE_OPEN_SLOTS * sizeof(struct fs_open_rec);
}

int fs_state_new(void)
{
	int fd = memfd_create("lazyroot-fs-state", MFD_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

int fs_state_map(struct fs *f)
{
	size_t len = state_bytes(f->info.inodes);
	int fd = f->p.state_fd;
	bool fresh = true;
	struct stat st;
	void *m;

	_Static_assert(sizeof(struct fs_state_hdr) <= FS_STATE_PARENT_OFF, "header overlaps");
	if (fd > 0) {
		if (fstat(fd, &st) < 0)
			return log_errno(-errno, "mount '%s': the state file", f->mountpoint);
		fresh = st.st_size == 0;
		if (fresh && ftruncate(fd, (off_t)len) < 0)
			return log_errno(-errno, "mount '%s': sizing the state file", f->mountpoint);
		if (!fresh && (uint64_t)st.st_size != len)
			return log_error(-ESTALE, "mount '%s': the state file is not this image's",
			                 f->mountpoint);
		m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	} else {
		m = mmap(NULL, len, PROT_READ | PROT_WRITE,
		         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	}
	if (m == MAP_FAILED)
		return log_errno(-errno, "mount '%s': mapping the state file", f->mountpoint);
	f->state = m;
	f->state_len = len;
	f->parent = (uint32_t *)((char *)m + FS_STATE_PARENT_OFF);
	f->opens = (struct fs_open_rec *)((char *)f->parent + parent_bytes(f->info.inodes));
	if (fresh) {
		f->state->inodes = f->info.inodes;
		f->state->open_slots = FS_STATE_OPEN_SLOTS;
		__atomic_store_n(&f->state->magic, FS_STATE_MAGIC, __ATOMIC_RELEASE);
	} else if (f->state->magic != FS_STATE_MAGIC || f->state->inodes != f->info.inodes ||
	           f->state->open_slots != FS_STATE_OPEN_SLOTS) {
		fs_state_unmap(f);
		return log_error(-ESTALE, "mount '%s': the state file is not this image's",
		                 f->mountpoint);
	}
	return 0;
}

void fs_state_unmap(struct fs *f)
{
	if (f->state)
		munmap(f->state, f->state_len);
	f->state = NULL;
	f->parent = NULL;
	f->opens = NULL;
}

void fs_state_note_init(struct fs *f, const void *buf, size_t len)
{
	if (!f->state || f->state->init_len || len > FS_STATE_INIT_MAX) {
		if (len > FS_STATE_INIT_MAX)
			log_msg(LOG_WARN, "mount '%s': INIT of %zu bytes not recorded; the mount "
			        "cannot be taken over", f->mountpoint, len);
		return;
	}
	memcpy(f->state->init, buf, len);
	__atomic_store_n(&f->state->init_len, (uint32_t)len, __ATOMIC_RELEASE);
}
