/* takeover.c — see takeover.h: fs/'s takeover calls, and what the node does
 * when one is not possible. */
#include "fs/fs.h"
#include "lib/lib.h"
#include "node/takeover.h"

int node_state_new(void)
{
	int fd = fs_state_new();

	if (fd < 0) {
		log_errno(fd, "node: a state file for a new mount (it will end with its worker)");
		return -1;
	}
	return fd;
}

int node_fuse_fd(struct fs *f)
{
	return fs_fuse_fd(f);
}

int node_adopt(const struct fs_params *p, int *fuse_fd, struct fs **ret)
{
	return fs_adopt(p, fuse_fd, ret);
}

void node_leave(struct fs *f)
{
	fs_leave(f);
}

int node_abort_mount(const char *mountpoint)
{
	return fs_abort_mount(mountpoint);
}

void node_fs_status(struct fs *f, struct node_fs_status *ret)
{
	struct fs_status st;

	*ret = (struct node_fs_status){ 0 };
	if (!f)
		return;
	fs_get_status(f, &st);
	*ret = (struct node_fs_status){
		.requests = st.requests,
		.resends = st.resends,
		.open_files = st.open_files,
		.adopted = st.adopted,
		.image_bytes = st.image_bytes,
		.bytes_served = st.bytes_served,
		.chunks_read = st.chunks_read,
		.bytes_read = st.bytes_read,
	};
}
