/*
 * api-stream.c — see api-internal.h: an exec's output as frames, from the
 * state tree, re-attachable by offset.
 *
 * The end is decided without a race against the keeper: result.json is
 * looked for first, then both outputs are read to their ends; only when
 * result.json existed before those reads found nothing more is the output
 * known to be whole (the keeper renames it in after the last byte), and the
 * result frame is sent.
 */
#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>

#include "lib/lib.h"
#include "node/api-internal.h"

#define STREAM_WAIT_MS 250
#define RESULT_MAX (64u << 10)

struct api_output {
	int out_fd, err_fd, dir_fd, ino_fd;
	uint64_t off[2];
	bool follow, ended;
	uint64_t deadline_ns, quiet_since_ns;
	const volatile bool *stopping;
	char *pending;            /* the frame being sent */
	size_t pending_len, pending_off;
};

int api_output_open(const char *exec_dir, uint64_t out_off, uint64_t err_off, bool follow,
                    double max_s, const volatile bool *stopping, struct api_output **ret)
{
	struct api_output *o = calloc(1, sizeof(*o));
	int r = 0;

	if (!o)
		return -ENOMEM;
	o->out_fd = o->err_fd = o->ino_fd = -1;
	o->dir_fd = open(exec_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (o->dir_fd < 0)
		r = -errno;
	if (!r) {
		o->out_fd = openat(o->dir_fd, "stdout", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		o->err_fd = openat(o->dir_fd, "stderr", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (o->out_fd < 0 || o->err_fd < 0)
			r = -errno;
	}
	if (!r && follow) {
		o->ino_fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
		if (o->ino_fd < 0 || inotify_add_watch(o->ino_fd, exec_dir, IN_MODIFY | IN_MOVED_TO |
		                                       IN_CLOSE_WRITE | IN_DELETE_SELF) < 0)
			r = -errno;
	}
	if (r < 0) {
		api_output_free(o);
		return r;
	}
	o->off[0] = out_off;
	o->off[1] = err_off;
	o->follow = follow;
	o->stopping = stopping;
	o->deadline_ns = now_ns() + (uint64_t)(max_s * 1e9);
	o->quiet_since_ns = now_ns();
	*ret = o;
	return 0;
}

/* A frame of stream s with len bytes read from fd at o's offset (or the
 * whole result): 1 made, 0 nothing there, -errno. */
static int frame_from(struct api_output *o, int s, int fd, size_t max)
{
	char *f = malloc(8 + max);
	ssize_t n;

	if (!f)
		return -ENOMEM;
	n = s == 3 ? read_full(fd, f + 8, max) : pread(fd, f + 8, max, (off_t)o->off[s - 1]);
	if (n <= 0) {
		free(f);
		return n < 0 ? -errno : 0;
	}
	if (s != 3)
		o->off[s - 1] += (uint64_t)n;
	f[0] = (char)s;
	f[1] = f[2] = f[3] = 0;
	f[4] = (char)((uint32_t)n >> 24);
	f[5] = (char)((uint32_t)n >> 16);
	f[6] = (char)((uint32_t)n >> 8);
	f[7] = (char)n;
	o->pending = f;
	o->pending_len = (size_t)n + 8;
	o->pending_off = 0;
	return 1;
}

static int keepalive(struct api_output *o)
{
	char *f = calloc(1, 8);

	if (!f)
		return -ENOMEM;
	f[0] = 1;
	o->pending = f;
	o->pending_len = 8;
	o->pending_off = 0;
	return 1;
}

/* The next frame into o->pending: 1, 0 at the end, -errno. */
static int next_frame(struct api_output *o)
{
	for (;;) {
		bool result = faccessat(o->dir_fd, "result.json", F_OK, 0) == 0;
		struct pollfd p;
		uint64_t now;
		int r;

		if (o->ended)
			return 0;
		r = frame_from(o, 1, o->out_fd, API_STREAM_FRAME);
		if (r)
			return o->quiet_since_ns = now_ns(), r;
		r = frame_from(o, 2, o->err_fd, API_STREAM_FRAME);
		if (r)
			return o->quiet_since_ns = now_ns(), r;
		if (result) {
			_cleanup_close_ int fd = openat(o->dir_fd, "result.json",
			                                O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

			o->ended = true;
			if (fd < 0)
				return -errno;
			r = frame_from(o, 3, fd, RESULT_MAX);
			return r ? r : -EBADMSG;
		}
		now = now_ns();
		if (!o->follow || now >= o->deadline_ns || *o->stopping)
			return 0;
		if (now - o->quiet_since_ns >= (uint64_t)API_STREAM_KEEPALIVE_S * 1000000000) {
			o->quiet_since_ns = now;
			return keepalive(o);
		}
		p = (struct pollfd){ .fd = o->ino_fd, .events = POLLIN };
		if (poll(&p, 1, STREAM_WAIT_MS) > 0) {
			char ev[4096];

			while (read(o->ino_fd, ev, sizeof(ev)) > 0)
				;
		}
	}
}

ssize_t api_output_read(void *ud, char *buf, size_t max)
{
	struct api_output *o = ud;
	size_t n;

	if (!o->pending) {
		int r = next_frame(o);

		if (r <= 0)
			return r;
	}
	n = MIN(max, o->pending_len - o->pending_off);
	memcpy(buf, o->pending + o->pending_off, n);
	o->pending_off += n;
	if (o->pending_off == o->pending_len) {
		free(o->pending);
		o->pending = NULL;
	}
	return (ssize_t)n;
}

void api_output_free(void *ud)
{
	struct api_output *o = ud;

	if (!o)
		return;
	if (o->out_fd >= 0)
		close(o->out_fd);
	if (o->err_fd >= 0)
		close(o->err_fd);
	if (o->dir_fd >= 0)
		close(o->dir_fd);
	if (o->ino_fd >= 0)
		close(o->ino_fd);
	free(o->pending);
	free(o);
}
