/*
 * ops.c — the metadata requests of the FUSE low-level API, answered straight
 * from the mapped index (binary searches over its records, no allocation per
 * entry) before they return, and the table of every op.
 *
 * Invariants:
 *  - every request is answered exactly once, from one reply site per op;
 *    errors keep their meaning (ENOENT, ENOTDIR, ENODATA, ERANGE…);
 *  - the image is immutable, so the kernel may keep entries, attributes,
 *    directory listings and pages for as long as it likes (timeouts of
 *    FS_TIMEOUT, keep_cache, cache_readdir — the kernel's defaults for files
 *    and directories once open and opendir have answered ENOSYS);
 *  - image inode numbers are FUSE node ids (the root is 1 in both), so lookup
 *    counts need no bookkeeping, forget frees nothing, and a worker that
 *    takes a connection over knows every node id the kernel holds.
 */
#include "fs/fs-internal.h"

/* ---- attributes --------------------------------------------------------- */

static void stat_from_image(const struct image_stat *is, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = is->ino;
	st->st_mode = is->mode;
	st->st_nlink = is->nlink;
	st->st_uid = is->uid;
	st->st_gid = is->gid;
	st->st_size = (off_t)is->size;
	st->st_blocks = (blkcnt_t)is->blocks;
	st->st_blksize = 4096;
	st->st_rdev = (dev_t)is->rdev;
	st->st_mtim.tv_sec = st->st_atim.tv_sec = st->st_ctim.tv_sec = is->mtime_sec;
	st->st_mtim.tv_nsec = st->st_atim.tv_nsec = st->st_ctim.tv_nsec = is->mtime_nsec;
}

static int fill_entry(struct fs *f, uint64_t ino, struct fuse_entry_param *e)
{
	struct image_stat is;
	int r;

	r = image_getattr(f->p.image, ino, &is);
	if (r < 0)
		return r;
	memset(e, 0, sizeof(*e));
	e->ino = ino;
	e->generation = 1;
	e->attr_timeout = FS_TIMEOUT;
	e->entry_timeout = FS_TIMEOUT;
	stat_from_image(&is, &e->attr);
	return 0;
}

static void note_parent(struct fs *f, uint64_t parent, const struct fuse_entry_param *e)
{
	if (S_ISDIR(e->attr.st_mode) && e->ino <= f->info.inodes)
		f->parent[e->ino] = (uint32_t)parent;
}

/* ---- metadata operations ------------------------------------------------ */

static void fs_init(void *ud, struct fuse_conn_info *conn)
{
	struct fs *f = ud;
	unsigned want = FUSE_CAP_ASYNC_READ | FUSE_CAP_READDIRPLUS | FUSE_CAP_CACHE_SYMLINKS |
	                FUSE_CAP_PARALLEL_DIROPS | FUSE_CAP_POSIX_ACL;

	conn->want |= want & conn->capable;
	/* Always readdirplus: a walk then needs no lookup per entry. */
	conn->want &= ~(unsigned)(FUSE_CAP_READDIRPLUS_AUTO | FUSE_CAP_AUTO_INVAL_DATA |
	                          FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_SPLICE_READ);
	if (conn->max_write > FS_MAX_REQUEST)
		conn->max_write = FS_MAX_REQUEST;
	conn->max_background = FS_MAX_BACKGROUND;
	conn->congestion_threshold = FS_MAX_BACKGROUND * 3 / 4;
	conn->time_gran = 1;
	f->init_done = true;
}

static void fs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs *f = fuse_req_userdata(req);
	struct fuse_entry_param e;
	uint64_t ino;
	int r;

	r = image_lookup(f->p.image, parent, name, strlen(name), &ino);
	if (r == 0)
		r = fill_entry(f, ino, &e);
	if (r == -ENOENT) {
		/* A negative entry the kernel may keep: interpreters probe many
		 * paths that do not exist, again and again. */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = FS_TIMEOUT;
		r = 0;
	} else if (r == 0) {
		note_parent(f, parent, &e);
	}
	if (r < 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_entry(req, &e);
}

static void fs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	fuse_reply_none(req);
}

static void fs_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	fuse_reply_none(req);
}

static void fs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *f = fuse_req_userdata(req);
	struct image_stat is;
	struct stat st;
	int r;

	r = image_getattr(f->p.image, ino, &is);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	stat_from_image(&is, &st);
	fuse_reply_attr(req, &st, FS_TIMEOUT);
}

static void fs_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct fs *f = fuse_req_userdata(req);
	_cleanup_free_ char *s = NULL;
	const char *t;
	size_t len;
	int r;

	r = image_readlink(f->p.image, ino, &t, &len);
	if (r == 0) {
		/* The target in the index is not NUL-terminated. */
		s = strndup(t, len);
		if (!s)
			r = -ENOMEM;
	}
	if (r < 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_readlink(req, s);
}

/* No OPENDIR round trip: answering ENOSYS once makes the kernel open every
 * directory itself, with keep_cache and cache_readdir, and send no
 * RELEASEDIR either — two requests fewer per directory of a walk. */
static void fs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fuse_reply_err(req, ENOSYS);
}

/*
 * Directory offsets are entry positions: 0 is ".", 1 is "..", 2 + i the i-th
 * stored entry; the offset given with an entry is that of the next one.
 * Cost: O(1) per entry.
 */
static void fs_readdir_common(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus)
{
	struct fs *f = fuse_req_userdata(req);
	_cleanup_free_ char *buf = NULL;
	size_t used = 0;
	int64_t n;
	int r = 0;

	n = image_dir_size(f->p.image, ino);
	if (n < 0) {
		fuse_reply_err(req, (int)-n);
		return;
	}
	buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (uint64_t pos = (uint64_t)off; pos < (uint64_t)n + 2; pos++) {
		struct fuse_entry_param e;
		char name[IMAGE_NAME_MAX + 1];
		uint64_t child;
		size_t len, need;

		if (pos < 2) {
			/* "." and "..": the kernel takes no reference and wants
			 * no attributes for them (e.ino 0). */
			memset(&e, 0, sizeof(e));
			e.attr.st_mode = S_IFDIR;
			e.attr.st_ino = ino;
			if (pos == 1 && ino != FUSE_ROOT_ID && ino <= f->info.inodes &&
			    f->parent[ino])
				e.attr.st_ino = f->parent[ino];
			strcpy(name, pos ? ".." : ".");
		} else {
			const char *nm;

			r = image_readdir(f->p.image, ino, pos - 2, &nm, &len, &child);
			if (r <= 0)
				break;
			memcpy(name, nm, len);
			name[len] = 0;
			r = fill_entry(f, child, &e);
			if (r < 0)
				break;
		}
		if (plus)
			need = fuse_add_direntry_plus(req, buf + used, size - used, name, &e,
			                              (off_t)pos + 1);
		else
			need = fuse_add_direntry(req, buf + used, size - used, name, &e.attr,
			                         (off_t)pos + 1);
		if (need > size - used)
			break;
		if (plus && pos >= 2)
			note_parent(f, ino, &e);
		used += need;
	}
	/* An entry that failed to read after others fitted is reported on the
	 * next call, when it comes first. */
	if (r < 0 && used == 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_buf(req, buf, used);
}

static void fs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
	fs_readdir_common(req, ino, size, off, false);
}

static void fs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi)
{
	fs_readdir_common(req, ino, size, off, true);
}

static void fs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct fs *f = fuse_req_userdata(req);
	struct statvfs sv = {
		.f_bsize = 4096,
		.f_frsize = 4096,
		.f_blocks = (f->info.file_bytes + 4095) / 4096,
		.f_files = f->info.inodes,
		.f_namemax = IMAGE_NAME_MAX,
		.f_flag = ST_RDONLY,
	};

	fuse_reply_statfs(req, &sv);
}

/* size 0 asks for the value's length; a value longer than size is ERANGE.
 * An image without a single xattr answers ENOSYS, once: the kernel then
 * fails every getxattr itself with EOPNOTSUPP (what a filesystem without
 * xattrs says) instead of asking.  The kernel caches no xattrs, and overlayfs
 * asks its lower layer for trusted.overlay.* on every lookup of a new overlay
 * mount: 122 GETXATTR round trips in a warm python3 start in a chroot. */
static void fs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct fs *f = fuse_req_userdata(req);
	const void *v;
	size_t len;
	int r;

	if (f->info.xattrs == 0) {
		fuse_reply_err(req, ENOSYS);
		return;
	}
	r = image_getxattr(f->p.image, ino, name, &v, &len);
	if (r == 0 && size && len > size)
		r = -ERANGE;
	if (r < 0)
		fuse_reply_err(req, -r);
	else if (size == 0)
		fuse_reply_xattr(req, len);
	else
		fuse_reply_buf(req, v, len);
}

static void fs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct fs *f = fuse_req_userdata(req);
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	struct image_stat is;
	int r;

	r = image_getattr(f->p.image, ino, &is);
	for (uint32_t i = 0; r >= 0; i++) {
		const char *name;
		const void *v;
		size_t nlen, vlen;

		r = image_xattr(f->p.image, ino, i, &name, &nlen, &v, &vlen);
		if (r <= 0)
			break;
		r = buf_append(&b, name, nlen);
		if (r == 0)
			r = buf_append(&b, "", 1);
	}
	if (r == 0 && size && b.len > size)
		r = -ERANGE;
	if (r < 0)
		fuse_reply_err(req, -r);
	else if (size == 0)
		fuse_reply_xattr(req, b.len);
	else
		fuse_reply_buf(req, (const char *)b.data, b.len);
}

/* ---- everything that would write ---------------------------------------- */

/* The mount is read-only, so the kernel refuses most of these itself; these
 * answer what reaches us anyway (e.g. through another mount of the
 * connection) with what a read-only filesystem says. */
static void fs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

static void fs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	fuse_reply_err(req, EROFS);
}

static void fs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	fuse_reply_err(req, EROFS);
}

static void fs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, EROFS);
}

static void fs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, EROFS);
}

static void fs_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
	fuse_reply_err(req, EROFS);
}

static void fs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	fuse_reply_err(req, EROFS);
}

static void fs_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

static void fs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags)
{
	fuse_reply_err(req, EROFS);
}

static void fs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	fuse_reply_err(req, EROFS);
}

static void fs_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

static void fs_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                         struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

const struct fuse_lowlevel_ops fs_ops = {
	.init = fs_init,
	.lookup = fs_lookup,
	.forget = fs_forget,
	.forget_multi = fs_forget_multi,
	.getattr = fs_getattr,
	.readlink = fs_readlink,
	.opendir = fs_opendir,
	.readdir = fs_readdir,
	.readdirplus = fs_readdirplus,
	.open = fs_open,
	.release = fs_release,
	.read = fs_read,
	.lseek = fs_lseek,
	.statfs = fs_statfs,
	.getxattr = fs_getxattr,
	.listxattr = fs_listxattr,
	.setattr = fs_setattr,
	.mknod = fs_mknod,
	.mkdir = fs_mkdir,
	.unlink = fs_unlink,
	.rmdir = fs_unlink,
	.symlink = fs_symlink,
	.rename = fs_rename,
	.link = fs_link,
	.write = fs_write,
	.setxattr = fs_setxattr,
	.removexattr = fs_removexattr,
	.create = fs_create,
	.fallocate = fs_fallocate,
};

