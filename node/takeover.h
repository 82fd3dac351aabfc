/*
 * takeover.h — the few fs/ calls that hand a FUSE connection from one worker
 * to the next, in one place.
 */
#ifndef LAZYROOT_NODE_TAKEOVER_H
#define LAZYROOT_NODE_TAKEOVER_H

#include <stdbool.h>
#include <stdint.h>

struct fs;
struct fs_params;

/* A state file for a new connection, or -1 when the fs keeps none. */
int node_state_new(void);
/* f's /dev/fuse descriptor for the holder (borrowed), or -1 when
 * connections cannot be taken over (the mount then ends with its worker). */
int node_fuse_fd(struct fs *f);
/* Serve a connection an earlier worker mounted; takes *fuse_fd.  -ENOTCONN:
 * it cannot be taken over (abort it). */
int node_adopt(const struct fs_params *p, int *fuse_fd, struct fs **ret);
/* Stop serving f, leaving the mount for the next worker. */
void node_leave(struct fs *f);
/* Detach the mount at mountpoint and abort its connection. */
int node_abort_mount(const char *mountpoint);

struct node_fs_status {
	uint64_t requests, resends;
	uint32_t open_files;
	bool adopted;
	/* what its readers read since this worker serves it (struct fs_status) */
	uint64_t image_bytes, bytes_served, chunks_read, bytes_read;
};
void node_fs_status(struct fs *f, struct node_fs_status *ret);

#endif
