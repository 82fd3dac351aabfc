/*
 * mount.c — making a mount (fs_mount), taking one over (fs_adopt), leaving
 * one to the next worker (fs_leave), ending one (fs_free, fs_abort_mount),
 * and the mount's settings in the kernel (its readahead window).
 *
 * A struct fs is not freed while a read of it is in flight, its session fd
 * is polled, a timer holds it or a prefetch of its is due: fs_free() and
 * fs_leave() run the loop until all of these have drained.
 */
#include "fs/fs-internal.h"

/* mountinfo escapes ' ', '\t', '\n' and '\\' as \ooo. */
static void unescape_octal(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = 0;
}

/* The mounts at mountpoint, in one read of mountinfo: the device of the
 * topmost lazyroot mount (*ret_lazyroot, 0 when none), and of the topmost
 * mount of any type (*ret_top), whose type and source go to what (n bytes,
 * n may be 0).  mountinfo lists a mount after the one it was mounted over,
 * so the last matching line is the one on top.  -ENOENT: nothing there. */
static int mounts_at(const char *mountpoint, dev_t *ret_lazyroot, dev_t *ret_top, char *what,
                     size_t n)
{
	_cleanup_fclose_ FILE *mi = fopen("/proc/self/mountinfo", "re");
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	int r = -ENOENT;

	if (!mi)
		return -errno;
	*ret_lazyroot = 0;
	while (getline(&line, &cap, mi) > 0) {
		char mnt[PATH_MAX], t[256], src[256] = "", *sep;
		unsigned maj, min;

		if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &maj, &min, mnt) != 3)
			continue;
		sep = strstr(line, " - ");
		if (!sep || sscanf(sep, " - %255s %255s", t, src) < 1)
			continue;
		unescape_octal(mnt);
		if (strcmp(mnt, mountpoint))
			continue;
		*ret_top = makedev(maj, min);
		if (!strcmp(t, "fuse.lazyroot"))
			*ret_lazyroot = *ret_top;
		if (n) {
			unescape_octal(src);
			snprintf(what, n, "%s from %s", t, src);
		}
		r = 0;
	}
	return r;
}

int fs_find_mount(const char *mountpoint, dev_t *ret_dev)
{
	dev_t top;
	int r = mounts_at(mountpoint, ret_dev, &top, NULL, 0);

	return r < 0 ? r : *ret_dev ? 0 : -ENOENT;
}

int fs_find_mount_on_top(const char *mountpoint, dev_t *ret_dev)
{
	dev_t top;
	int r = mounts_at(mountpoint, ret_dev, &top, NULL, 0);

	if (r < 0)
		return r;
	return !*ret_dev ? -ENOENT : top != *ret_dev ? -EBUSY : 0;
}

bool fs_on_top(const char *mountpoint, dev_t dev)
{
	struct statx sx;

	if (!dev || statx(AT_FDCWD, mountpoint, AT_STATX_DONT_SYNC | AT_NO_AUTOMOUNT |
	                  AT_SYMLINK_NOFOLLOW, STATX_INO, &sx) < 0)
		return false;
	return makedev(sx.stx_dev_major, sx.stx_dev_minor) == dev && sx.stx_ino == IMAGE_ROOT_INO;
}

int fs_covered(const struct fs *f, char *what, size_t n)
{
	dev_t lazyroot, top;
	int r;

	if (!f || !f->mounted || f->finished || !f->dev)
		return 0;
	r = mounts_at(f->mountpoint, &lazyroot, &top, what, n);
	if (r < 0)
		return r == -ENOENT ? 0 : r;
	return top != f->dev;
}

/* Widen the kernel's readahead for this mount: buffered reads are never
 * larger than the window, whatever max_pages allows.  Only once INIT is
 * answered: the kernel then lowers the window to the max_readahead of the
 * reply, which libfuse copies from the request (the 128 KiB default); set
 * before, the window read back 128 KiB on a live mount. */
void fs_set_read_ahead(struct fs *f)
{
	char path[96], val[32];
	_cleanup_close_ int fd = -1;

	if (!f->dev)
		return;
	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", major(f->dev),
	         minor(f->dev));
	fd = open(path, O_WRONLY | O_CLOEXEC);
	snprintf(val, sizeof(val), "%u", FS_READ_AHEAD_KB);
	if (fd < 0 || write_full(fd, val, strlen(val)) < 0)
		log_msg(LOG_WARN, "mount '%s': cannot set %s: %s", f->mountpoint, path,
		        strerror(errno));
}

/* What fs_mount and fs_adopt share: f with its copies of p's strings, the
 * access-profile engine, the state file mapped, and a libfuse session not
 * yet connected to anything. */
static int fs_new(const struct fs_params *p, struct fs **ret)
{
	_cleanup_free_ char *opts = NULL;
	struct fs *f;
	int r;

	if (!p->mountpoint || !p->image || !p->index_hex || !p->cache || !p->loop)
		return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	*ret = f;
	f->p = *p;
	if (!f->p.cpu_hold_ms)
		f->p.cpu_hold_ms = FS_CPU_HOLD_MS;
	f->slot = -1;
	f->hold_fd = p->no_cpu_latency ? -1 : open("/dev/cpu_dma_latency", O_WRONLY | O_CLOEXEC);
	f->mountpoint = realpath(p->mountpoint, NULL);
	if (!f->mountpoint)
		return log_errno(-errno, "mount '%s'", p->mountpoint);
	f->index_hex = strdup(p->index_hex);
	if (!f->index_hex)
		return -ENOMEM;
	image_get_info(p->image, &f->info);
	f->p.mountpoint = f->mountpoint;
	f->p.index_hex = f->index_hex;
	if (p->record)
		f->p.no_passthrough = true;
	{
		struct ahead_params ap = {
			.image = p->image,
			.index_hex = f->index_hex,
			.name = f->mountpoint,
			.pack_offsets = p->pack_offsets,
			.store = p->store,
			.cache = p->cache,
			.slot = -1,
			.record = p->record,
			.profile = p->profile,
			.profile_window = p->profile_window,
			.profile_bytes = p->profile_bytes,
			.profile_inflight = p->profile_inflight,
			.readahead_chunks = p->readahead_chunks,
			.seq_slack = FS_SEQ_SLACK,
		};

		r = ahead_new(&ap, &f->ahead);
		if (r < 0)
			return log_errno(r, "mount '%s': setting up the access profile", f->mountpoint);
	}
	r = fs_state_map(f);
	if (r < 0)
		return r;
	if (asprintf(&opts, "ro,default_permissions,%s%s,%s,fsname=lazyroot:%.12s,subtype=lazyroot",
	             p->allow_other ? "allow_other," : "", p->suid ? "suid" : "nosuid",
	             p->dev ? "dev" : "nodev", p->index_hex) < 0) {
		opts = NULL;
		return -ENOMEM;
	}
	{
		char *argv[] = { "lazyroot", "-o", opts, p->debug ? "-d" : NULL, NULL };
		struct fuse_args args = FUSE_ARGS_INIT(p->debug ? 4 : 3, argv);

		f->se = fuse_session_new(&args, &fs_ops, sizeof(fs_ops), f);
		fuse_opt_free_args(&args);
	}
	if (!f->se)
		return log_error(-EINVAL, "mount '%s': cannot set up the FUSE session", f->mountpoint);
	return 0;
}

/* f's connection is mounted: learn the mount's device, count the image in
 * the cache's per-image counters and start serving. */
static int fs_start(struct fs *f)
{
	f->mounted = !f->p.detached;
	/* From mountinfo, not stat(): the mount answers only once the loop runs. */
	if (f->mounted)
		(void)fs_find_mount(f->mountpoint, &f->dev);
	/* the cache's slots are few (its stats file, for readers without a
	 * node); the fs counts every mount itself (fs_get_status) */
	f->slot = cache_image_register(f->p.cache, f->index_hex, f->info.data_bytes, f->mountpoint);
	if (f->slot < 0)
		f->slot = -1;
	ahead_set_slot(f->ahead, f->slot);
	fs_arm(f);
	return f->finished ? -EIO : 0;
}

int fs_mount(const struct fs_params *p, struct fs **ret)
{
	struct fs *f = NULL;
	int r = fs_new(p, &f);

	if (r < 0)
		goto fail;
	if (fuse_session_mount(f->se, f->mountpoint) != 0) {
		r = log_error(-EIO, "mount '%s': the FUSE mount failed", f->mountpoint);
		goto fail;
	}
	f->mounted = true;
	r = fs_session_attach(f, fuse_session_fd(f->se));
	if (r == 0)
		r = fs_start(f);
	if (r < 0)
		goto fail;
	*ret = f;
	return 0;
fail:
	fs_free(f);
	return r;
}

int fs_adopt(const struct fs_params *p, int *fuse_fd, struct fs **ret)
{
	struct fs *f = NULL;
	int fd = *fuse_fd, r;

	*fuse_fd = -1;
	if (p->state_fd <= 0) {
		r = -EINVAL;
		goto fail;
	}
	r = fs_new(p, &f);
	if (r < 0)
		goto fail;
	r = fs_session_attach(f, fd);
	if (fuse_session_fd(f->se) == fd)
		fd = -1;                /* the session closes it from now on */
	if (r < 0)
		goto fail;
	r = fs_session_adopt(f);
	if (r == 0)
		r = fs_start(f);
	if (r < 0)
		goto fail;
	if (p->detached)
		fs_unmount(f);  /* closing: not mounted, so nothing done by path */
	*ret = f;
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	if (f) {
		/* not ours to unmount: the holder decides */
		f->mounted = false;
		fs_free(f);
	}
	return r;
}

int fs_fuse_fd(const struct fs *f)
{
	return fuse_session_fd(f->se);
}

bool fs_finished(const struct fs *f)
{
	return f->finished;
}

const uint32_t *fs_trace(const struct fs *f, size_t *ret_n)
{
	return ahead_trace(f->ahead, ret_n);
}

void fs_get_status(const struct fs *f, struct fs_status *ret)
{
	*ret = (struct fs_status){
		.requests = f->requests,
		.resends = f->resends,
		.open_files = fs_open_count(f),
		.adopted = f->adopted,
		.image_bytes = f->info.data_bytes,
		.bytes_served = f->bytes_served,
		.chunks_read = f->chunks_read,
		.bytes_read = f->bytes_read,
	};
}

/* Abort the connection through fusectl: a lazily detached mount that is
 * still in use would otherwise keep the session alive. */
static void abort_connection(struct fs *f)
{
	char path[96];
	_cleanup_close_ int fd = -1;

	if (!f->dev)
		return;
	snprintf(path, sizeof(path), "/sys/fs/fuse/connections/%u/abort", minor(f->dev));
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd >= 0)
		(void)write_full(fd, "1", 1);
}

int fs_abort_mount(const char *mountpoint)
{
	char path[96];
	_cleanup_close_ int fd = -1;
	dev_t dev;
	/* by path only when it is on top: never another mount over it */
	int r = fs_find_mount_on_top(mountpoint, &dev);

	if (r < 0)
		return r;
	if (umount2(mountpoint, MNT_DETACH) < 0)
		r = -errno;
	snprintf(path, sizeof(path), "/sys/fs/fuse/connections/%u/abort", minor(dev));
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd >= 0)
		(void)write_full(fd, "1", 1);
	return r;
}

/* Run the loop until nothing of f's is in flight. */
static void drain(struct fs *f)
{
	while (!fs_unmount_done(f))
		if (loop_run_once(f->p.loop, true) < 0)
			break;
}

/* Free f once drained; the kernel mount is left as it is. */
static void fs_destroy(struct fs *f)
{
	if (f->slot >= 0)
		cache_image_unregister(f->p.cache, f->slot);
	if (f->se)
		fuse_session_destroy(f->se);
	fs_read_bufs_free(f);
	if (f->hold_fd >= 0)
		close(f->hold_fd);              /* drops the latency request */
	free(f->rbuf.mem);
	ahead_free(f->ahead);
	fs_state_unmap(f);
	free(f->index_hex);
	free(f->mountpoint);
	free(f);
}

void fs_leave(struct fs *f)
{
	if (!f)
		return;
	f->closing = true;
	f->leaving = true;
	if (f->ahead)
		ahead_close(f->ahead);
	fs_whole_laters_cancel(f);
	fs_cpu_release(f);
	if (f->polling)
		(void)loop_cancel_poll(f->p.loop, f->poll_id);
	/* Replies under way go out; a read still waiting for the store holds
	 * its request unanswered, to be resent to the next worker.  Its
	 * buffer is ours to free once its pieces complete, which drain waits
	 * for. */
	drain(f);
	fs_destroy(f);
}

void fs_unmount(struct fs *f)
{
	if (!f || f->closing)
		return;
	f->closing = true;
	if (f->ahead)
		ahead_close(f->ahead);
	fs_whole_laters_cancel(f);
	fs_cpu_release(f);
	if (f->se && f->mounted && !f->finished) {
		/* Detach, keeping the session fd: a mount still in use goes on
		 * being served until its last user lets go.  libfuse's own
		 * unmount (for users who need fusermount3) closes the fd.  Both
		 * go by path, which would take another mount made over this one:
		 * that one is left, and so is this (fs_covered). */
		if (fs_covered(f, NULL, 0) != 1 &&
		    (geteuid() != 0 || umount2(f->mountpoint, MNT_DETACH) < 0)) {
			f->fd_closed = true;
			fuse_session_unmount(f->se);
		}
		abort_connection(f);
	}
	f->pt_on = false;
}

bool fs_connected(const struct fs *f)
{
	return f->polling;
}

bool fs_unmount_done(const struct fs *f)
{
	return !(f->reads_inflight || f->polling || f->timers || f->opens_waiting ||
	         (f->ahead && ahead_busy(f->ahead)));
}

void fs_free(struct fs *f)
{
	if (!f)
		return;
	fs_unmount(f);
	/* Reads in flight write into their buffers and reply through the
	 * session; the pending poll holds f: both must complete first.  After
	 * the unmount the poll reports the connection's end — at once, or, when
	 * the detached mount is still in use and fusectl is not mounted, once
	 * its last user lets go (requests are served until then). */
	drain(f);
	fs_destroy(f);
}
