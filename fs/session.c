/*
 * session.c — the FUSE connection on the loop: reading requests, the hooks on
 * libfuse's I/O that add what libfuse 3.14 does not know, holding the CPUs
 * awake while serving, and taking over a connection another worker served.
 *
 * Takeover.  The kernel keeps a connection alive while any process holds its
 * /dev/fuse descriptor (the node's holder does), and requests wait in its
 * queue meanwhile.  A new worker cannot have libfuse negotiate again: the
 * kernel sends INIT once per connection.  So the first worker records the
 * INIT request as it came (state.c) before answering it, and a new worker
 * hands that record to libfuse as if the kernel had just sent it, answering
 * nobody (the kernel holds the first answer): libfuse and f then hold the
 * negotiated parameters exactly as before.  Node ids are image inode
 * numbers and file handles say only how an open is served, so they mean the
 * same to every worker; the opens the kernel holds and their passthrough
 * backing ids are in the state file.  Last, FUSE_NOTIFY_RESEND has the
 * kernel queue again every request the dead worker had read but not
 * answered (every request of a read-only image may be served twice).
 * Kernels before 6.9 cannot resend: a request read by the dead worker would
 * never be answered and its reader would wait until the mount ends, so such
 * a connection is not taken over (-EOPNOTSUPP): the node ends it, its
 * readers get ENOTCONN at once, and the next run mounts the image anew.
 */
#include "fs/fs-internal.h"

/*
 * Sandboxes see an image through idmapped mounts of its one node-wide mount
 * (sandbox/launch.c): each maps the owners as built (0, 1000, ...) into that
 * sandbox's own host id range, while the daemon knows of no range and the
 * mount itself keeps the owners exactly as built.  The kernel (6.12 and
 * later) allows an idmapped mount of a FUSE filesystem only if the server
 * opted in at INIT with FUSE_ALLOW_IDMAP and the mount has
 * default_permissions (ours always has: the kernel then checks access
 * against the mapped owners, the image being read-only either way).
 * libfuse 3.14 keeps INIT flags in 32 bits, so the session's writes go
 * through these hooks, which add the flag to the INIT reply when the kernel
 * offered it; every other message passes through unchanged, and splicing
 * stays as libfuse would do it.  Older kernels never offer the flag, and
 * an idmapped mount then fails with EINVAL.
 */
static ssize_t fs_io_read(int fd, void *buf, size_t len, void *ud)
{
	(void)ud;
	return read(fd, buf, len);
}

static ssize_t fs_io_splice(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
                            unsigned int flags, void *ud)
{
	(void)ud;
	return splice(fdin, offin, fdout, offout, len, flags);
}

/* Patch an OPEN reply for passthrough: the flag and the backing id where
 * libfuse 3.14 writes padding. */
static ssize_t write_open_reply(struct fs *f, int fd, struct iovec *iov)
{
	struct fuse_open_out oo;
	struct iovec patched[2];

	memcpy(&oo, iov[1].iov_base, sizeof(oo));
	oo.open_flags |= FS_FOPEN_PASSTHROUGH;
	memcpy(&oo.padding, &f->reply_backing_id, sizeof(oo.padding));
	patched[0] = iov[0];
	patched[1] = (struct iovec){ &oo, sizeof(oo) };
	return writev(fd, patched, 2);
}

static ssize_t fs_io_writev(int fd, struct iovec *iov, int count, void *ud)
{
	struct fs *f = ud;
	const struct fuse_out_header *oh = iov[0].iov_base;
	const size_t need = offsetof(struct fuse_init_out, flags2) + 2 * sizeof(uint32_t);
	struct fuse_init_out io;
	struct iovec patched[2];
	uint32_t depth = 1;

	if (f->reply_backing_id > 0 && count == 2 && iov[0].iov_len == sizeof(*oh) &&
	    !oh->error && iov[1].iov_len == sizeof(struct fuse_open_out))
		return write_open_reply(f, fd, iov);
	if (!f->init_unique || count != 2 || iov[0].iov_len != sizeof(*oh) ||
	    oh->unique != f->init_unique)
		return writev(fd, iov, count);
	f->init_unique = 0;
	f->init_error = oh->error;
	if (oh->error || (!f->idmap_offered && !f->pt_offered) || iov[1].iov_len < need ||
	    iov[1].iov_len > sizeof(io))
		return f->adopting ? (ssize_t)(iov[0].iov_len + iov[1].iov_len) : writev(fd, iov, count);
	memcpy(&io, iov[1].iov_base, iov[1].iov_len);
	io.flags |= FUSE_INIT_EXT;
	if (f->idmap_offered)
		io.flags2 |= (uint32_t)(FS_FUSE_ALLOW_IDMAP >> 32);
	if (f->pt_offered) {
		/* max_stack_depth 1: backing files on a plain filesystem;
		 * the mount itself then counts as one level of stacking
		 * (an overlay above it is the second, the most allowed) */
		io.flags2 |= (uint32_t)(FS_FUSE_PASSTHROUGH >> 32);
		memcpy((char *)&io + offsetof(struct fuse_init_out, flags2) + sizeof(uint32_t),
		       &depth, sizeof(depth));
		f->pt_on = true;
	}
	patched[0] = iov[0];
	patched[1] = (struct iovec){ &io, iov[1].iov_len };
	/* A replayed INIT was answered by the worker that first read it: the
	 * kernel holds that answer, and this one only sets up libfuse and f. */
	if (f->adopting)
		return (ssize_t)(iov[0].iov_len + iov[1].iov_len);
	return writev(fd, patched, 2);
}

/* Before libfuse answers it: note the INIT request's id and what the kernel
 * offers (FUSE_ALLOW_IDMAP, passthrough, resend), and record the request in
 * the state file so that a later worker can replay it.  INIT is the
 * session's first request. */
static void note_init(struct fs *f, const void *buf, size_t len)
{
	const struct fuse_in_header *ih = buf;
	const struct fuse_init_in *in = (const void *)(ih + 1);
	bool ext;

	f->init_seen = true;
	if (len < sizeof(*ih) + offsetof(struct fuse_init_in, flags2) + sizeof(uint32_t) ||
	    ih->opcode != FUSE_INIT)
		return;
	if (!f->adopting)
		fs_state_note_init(f, buf, len);
	f->init_unique = ih->unique;
	ext = in->major == 7 && in->minor >= 40 && (in->flags & FUSE_INIT_EXT);
	f->idmap_offered = ext && (in->flags2 & (uint32_t)(FS_FUSE_ALLOW_IDMAP >> 32));
	f->resend_known = ext && (in->flags2 & (uint32_t)(FS_FUSE_HAS_RESEND >> 32));
	/* passthrough's ioctls need CAP_SYS_ADMIN */
	f->pt_offered = ext && (in->flags2 & (uint32_t)(FS_FUSE_PASSTHROUGH >> 32)) &&
	                geteuid() == 0 && !f->p.no_passthrough;
}

/* ---- holding the CPUs awake while serving (cpu_hold_ms) ------------------ */

static void cpu_latency_set(struct fs *f, int32_t us)
{
	if (write(f->hold_fd, &us, sizeof(us)) != (ssize_t)sizeof(us)) {
		log_errno(-errno, "mount '%s': /dev/cpu_dma_latency; CPUs left to halt",
		          f->mountpoint);
		close(f->hold_fd);
		f->hold_fd = -1;
	}
}

static void cpu_hold_check(void *ud, int res)
{
	struct fs *f = ud;
	uint64_t now = now_ns(), until = f->last_req_ns + FS_CPU_HOLD_NS(f);

	f->timers--;
	if (res != -ECANCELED && !f->closing && !f->finished && now < until &&
	    (f->hold_timer = loop_timer(f->p.loop, until - now, cpu_hold_check, f)) >= 0) {
		f->timers++;
		return;
	}
	f->held = false;
	if (f->hold_fd >= 0)
		cpu_latency_set(f, FS_CPU_LATENCY_ANY);
}

/* A request came: hold the CPUs awake until cpu_hold_ms after the last. */
static void cpu_hold(struct fs *f)
{
	f->last_req_ns = now_ns();
	if (f->hold_fd < 0 || f->held || f->closing ||
	    (f->hold_timer = loop_timer(f->p.loop, FS_CPU_HOLD_NS(f), cpu_hold_check, f)) < 0)
		return;
	f->timers++;
	f->held = true;
	cpu_latency_set(f, 0);
}

/* ---- the session on the loop -------------------------------------------- */

/* The session fd is readable (or the connection is gone): take every queued
 * request, then poll again.  Requests are answered in place or, for reads
 * that wait on the cache, from later loop callbacks. */
static void fs_on_readable(void *ud, int res)
{
	struct fs *f = ud;

	f->polling = false;
	if (f->fd_closed) {
		f->finished = true;
		return;
	}
	if (f->leaving)
		return;
	for (;;) {
		int r = fuse_session_receive_buf(f->se, &f->rbuf);

		if (r == -EINTR)
			continue;
		if (r == -EAGAIN)
			break;
		if (r <= 0 || fuse_session_exited(f->se)) {
			/* 0: libfuse saw ENODEV (unmounted or aborted) */
			if (r < 0)
				log_errno(r, "mount '%s': reading the FUSE device", f->mountpoint);
			f->finished = true;
			return;
		}
		if (!f->init_seen && !(f->rbuf.flags & FUSE_BUF_IS_FD))
			note_init(f, f->rbuf.mem, (size_t)r);
		f->requests++;
		cpu_hold(f);
		fuse_session_process_buf(f->se, &f->rbuf);
		if (f->init_done) {
			f->init_done = false;
			fs_set_read_ahead(f);
		}
	}
	fs_arm(f);
}

void fs_arm(struct fs *f)
{
	int64_t id;

	if (f->finished || f->polling || f->leaving)
		return;
	id = loop_poll_id(f->p.loop, fuse_session_fd(f->se), POLLIN, fs_on_readable, f);
	if (id < 0) {
		log_errno((int)id, "mount '%s': polling the FUSE device", f->mountpoint);
		f->finished = true;
		return;
	}
	f->poll_id = id;
	f->polling = true;
}


void fs_cpu_release(struct fs *f)
{
	if (f->held)
		(void)loop_cancel_timer(f->p.loop, f->hold_timer);
}

int fs_session_attach(struct fs *f, int fd)
{
	static const struct fuse_custom_io io = {
		.writev = fs_io_writev,
		.read = fs_io_read,
		.splice_receive = fs_io_splice,
		.splice_send = fs_io_splice,
	};
	int r = fuse_session_custom_io(f->se, &io, fd);

	if (r < 0)
		return log_errno(r, "mount '%s': hooking the FUSE session's I/O", f->mountpoint);
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0)
		return log_errno(-errno, "mount '%s': making the FUSE device non-blocking",
		                 f->mountpoint);
	return 0;
}

int fs_session_adopt(struct fs *f)
{
	struct fuse_out_header oh = {
		.len = sizeof(oh),
		.error = FS_FUSE_NOTIFY_RESEND,
	};
	size_t len = f->state->init_len;
	struct fuse_buf b = { .size = len };

	if (!len || len > FS_STATE_INIT_MAX)
		return -ENOTCONN;
	b.mem = malloc(len);
	if (!b.mem)
		return -ENOMEM;
	memcpy(b.mem, f->state->init, len);
	f->adopting = true;
	note_init(f, b.mem, len);
	if (!f->resend_known) {
		f->adopting = false;
		free(b.mem);
		return log_error(-EOPNOTSUPP, "mount '%s': this kernel cannot resend the requests "
		                 "a dead worker left (FUSE_NOTIFY_RESEND, Linux 6.9); the mount "
		                 "is ended rather than left to hang", f->mountpoint);
	}
	fuse_session_process_buf(f->se, &b);
	f->adopting = false;
	free(b.mem);
	if (f->init_unique || f->init_error) {
		/* libfuse refused the record */
		return log_error(-EPROTO, "mount '%s': the recorded INIT could not be replayed",
		                 f->mountpoint);
	}
	f->init_done = false;
	f->adopted = true;
	if (write(fuse_session_fd(f->se), &oh, sizeof(oh)) != (ssize_t)sizeof(oh))
		return log_errno(-errno == -EINVAL ? -EOPNOTSUPP : -errno,
		                 "mount '%s': FUSE_NOTIFY_RESEND; the mount is ended rather than "
		                 "left to hang", f->mountpoint);
	f->resends++;
	return 0;
}
