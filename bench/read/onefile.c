/*
 * onefile.c — the smallest useful FUSE filesystem: one regular file, `/f`,
 * whose reads are spliced from a file on another filesystem.  bench/read
 * mounts it beside lazyroot and squashfuse_ll to show what the kernel's FUSE
 * page-cache path costs on its own: with keep_cache and attributes cached
 * forever, a warm read never reaches this process, so whatever separates it
 * from native is the kernel's, not the server's.
 *
 *   onefile FILE MOUNTPOINT     serves FILE as MOUNTPOINT/f until unmounted
 *
 * Mounts read-only with the same request size as lazyroot (1008 KiB) and
 * runs in the foreground; the caller backgrounds it and waits for the mount.
 */
#define FUSE_USE_VERSION 314

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ONEFILE_INO 2

static int src_fd = -1;
static struct stat src_st;

static void fill(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	if (ino == FUSE_ROOT_ID) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = src_st.st_size;
		st->st_blocks = src_st.st_blocks;
	}
	st->st_blksize = 4096;
}

static void of_init(void *ud, struct fuse_conn_info *conn)
{
	conn->want &= ~(unsigned)(FUSE_CAP_AUTO_INVAL_DATA | FUSE_CAP_WRITEBACK_CACHE);
	if (conn->max_write > 1008 * 1024)
		conn->max_write = 1008 * 1024;
}

static void of_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e = { .attr_timeout = 1e9, .entry_timeout = 1e9 };

	if (parent != FUSE_ROOT_ID || strcmp(name, "f")) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	e.ino = ONEFILE_INO;
	fill(ONEFILE_INO, &e.attr);
	fuse_reply_entry(req, &e);
}

static void of_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;

	if (ino != FUSE_ROOT_ID && ino != ONEFILE_INO) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fill(ino, &st);
	fuse_reply_attr(req, &st, 1e9);
}

static void of_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino != ONEFILE_INO) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static void of_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(size);

	bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	bv.buf[0].fd = src_fd;
	bv.buf[0].pos = off;
	fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
}

static const struct fuse_lowlevel_ops of_ops = {
	.init = of_init,
	.lookup = of_lookup,
	.getattr = of_getattr,
	.open = of_open,
	.read = of_read,
};

int main(int argc, char **argv)
{
	char *fargv[] = { argv[0], "-o", "ro,default_permissions,fsname=onefile", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
	struct fuse_session *se;
	int r;

	if (argc != 3) {
		fprintf(stderr, "usage: onefile FILE MOUNTPOINT\n");
		return 2;
	}
	src_fd = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (src_fd < 0 || fstat(src_fd, &src_st) < 0 || !S_ISREG(src_st.st_mode)) {
		fprintf(stderr, "onefile: '%s': not a readable regular file\n", argv[1]);
		return 1;
	}
	se = fuse_session_new(&args, &of_ops, sizeof(of_ops), NULL);
	if (!se || fuse_session_mount(se, argv[2]) != 0) {
		fprintf(stderr, "onefile: cannot mount on '%s'\n", argv[2]);
		return 1;
	}
	r = fuse_session_loop(se);
	fuse_session_unmount(se);
	fuse_session_destroy(se);
	return r < 0 ? 1 : 0;
}
