/* node-internal.h — what the holder and the worker say to each other. */
#ifndef LAZYROOT_NODE_INTERNAL_H
#define LAZYROOT_NODE_INTERNAL_H

#include <stdint.h>

#include "node/node.h"

struct buf;

/*
 * The channel: a SOCK_SEQPACKET socketpair, one message per record, so that
 * a message and the descriptors it carries (SCM_RIGHTS) arrive together or
 * not at all.  A message is a 4-byte type and a JSON object.
 *
 * holder -> worker, at the worker's start: HELLO, then RECORD per mount it
 * holds (fds: the /dev/fuse descriptor and the state file), then END; later
 * LEAVE (upgrade: hand every mount back and exit).
 * worker -> holder: READY (serving), ADD (a new mount: its record, fds as
 * above; sent before the client hears of the mount), DEL (a mount ended:
 * {"mountpoint":M}), UPGRADE ({"binary":PATH}), STOP (the node is ending).
 */
enum node_msg_type {
	NODE_MSG_HELLO = 1,
	NODE_MSG_RECORD,
	NODE_MSG_END,
	NODE_MSG_LEAVE,
	NODE_MSG_READY,
	NODE_MSG_ADD,
	NODE_MSG_DEL,
	NODE_MSG_UPGRADE,
	NODE_MSG_STOP,
};

#define NODE_MSG_MAX (64u << 10)   /* a record is a few hundred bytes */
#define NODE_MSG_FDS 2

/* The descriptors the worker finds at exec: the channel and the control socket. */
#define NODE_WORKER_CHAN_FD 3
#define NODE_WORKER_LISTEN_FD 4

/* Send type + json (len bytes) with nfds descriptors.  Returns 0 or -errno. */
int node_msg_send(int fd, uint32_t type, const char *json, size_t len, const int *fds,
                  int nfds);
/* Receive one message: *ret_type, its JSON into b (NUL-terminated), up to
 * NODE_MSG_FDS descriptors into fds (-1 where absent; close-on-exec).
 * 0 on EOF (the peer is gone), 1 for a message, -errno. */
int node_msg_recv(int fd, uint32_t *ret_type, struct buf *b, int fds[NODE_MSG_FDS]);

#endif
