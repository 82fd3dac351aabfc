/* takeover.c — see takeover.h. */
#include <sys/mount.h>

#include "fs/fs.h"
#include "lib/lib.h"
#include "node/takeover.h"

int node_state_new(void)
{
	return -1;
}

int node_fuse_fd(struct fs *f)
{
	(void)f;
	return -1;
}

int node_adopt(const struct fs_params *p, int *fuse_fd, struct fs **ret)
{
	(void)p;
	(void)ret;
	if (*fuse_fd >= 0)
		close(*fuse_fd);
	*fuse_fd = -1;
	return -ENOTCONN;
}

void node_leave(struct fs *f)
{
	fs_free(f);
}

int node_abort_mount(const char *mountpoint)
{
	if (umount2(mountpoint, MNT_DETACH | UMOUNT_NOFOLLOW) < 0)
		return -errno;
	return 0;
}

void node_fs_status(struct fs *f, struct node_fs_status *ret)
{
	(void)f;
	*ret = (struct node_fs_status){ 0 };
}
