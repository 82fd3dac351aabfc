/*
 * watch.c — the launcher's watch over a running sandbox: its output copied
 * out, its wall clock, the launcher's signals and its cgroups' events.
 *
 * One of the sandbox's output streams on its way to the launcher's own
 * stdout or stderr.  The launcher never blocks on its own output, whatever
 * its reader does: it writes through a descriptor that refuses instead of
 * waiting (a pipe, FIFO or terminal is opened anew through /proc/self/fd
 * with O_NONBLOCK, which leaves the caller's shared file description as it
 * was; a socket is written with MSG_DONTWAIT; a regular file does not wait
 * on a reader), and it reads the sandbox's pipe only once what it read
 * before is out.  A reader that stops reading therefore stops the sandbox's
 * writers on their full pipe, never the launcher's loop: the wall clock,
 * the cgroup events and the signals are watched meanwhile.  At most one
 * read (64 KiB) waits per stream while the sandbox runs; once it is gone,
 * what its pipe still holds is read, the sandbox is cleaned up, and only
 * then may the launcher wait for its reader.
 */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "lib/lib.h"
#include "sandbox/launch-internal.h"

#define OUT_CHUNK 65536

/* Where stream fd (1 or 2) of the launcher can be written without waiting. */
void out_open(struct out_stream *o, int fd)
{
	struct stat st;
	char path[32];

	o->out = -1;
	if (fstat(fd, &st) < 0)
		return;   /* closed: the sandbox's output is read and dropped */
	if (S_ISSOCK(st.st_mode)) {
		o->out = fd;
		o->sock = true;
		return;
	}
	if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		o->out = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
		if (o->out >= 0) {
			o->own = true;
			return;
		}
		/* Not to be opened again (a FIFO without a reader now, a device
		 * that refuses): one small write at a time after POLLOUT. */
		o->out = fd;
		o->guarded = true;
		return;
	}
	o->out = fd;   /* a regular file or a block device: no reader to wait for */
}

static bool out_waiting(const struct out_stream *o)
{
	return o->off < o->pending.len;
}

/* Write what o holds as far as out takes it now.  A reader that is gone
 * (EPIPE, any error but EAGAIN) makes the stream discard from then on. */
static void out_write(struct out_stream *o)
{
	while (out_waiting(o)) {
		size_t n = o->pending.len - o->off;
		ssize_t k;

		if (o->out < 0) {
			o->off = o->pending.len;
			break;
		}
		if (o->guarded && n > PIPE_BUF)
			n = PIPE_BUF;
		k = o->sock ? send(o->out, o->pending.data + o->off, n, MSG_DONTWAIT | MSG_NOSIGNAL) :
		              write(o->out, o->pending.data + o->off, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno == EAGAIN)
			return;
		if (k <= 0) {
			if (o->own)
				close(o->out);
			o->out = -1;
			continue;
		}
		o->off += (size_t)k;
		if (o->guarded)
			return;
	}
	o->pending.len = o->off = 0;
}

/* Wait (poll) until o is written out, or a signal in sigfd says to give up:
 * the sandbox is gone by now, only the launcher waits for its reader. */
void out_finish(struct out_stream *o, int sigfd)
{
	while (out_waiting(o) && o->out >= 0) {
		struct pollfd p[2] = { { o->out, POLLOUT, 0 }, { sigfd, POLLIN, 0 } };

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents & POLLIN)
			break;
		if (p[0].revents)
			out_write(o);
	}
	if (o->own && o->out >= 0)
		close(o->out);
	o->out = -1;
	buf_free(&o->pending);
	o->off = 0;
}

void kill_sandbox(struct watch *w, enum sandbox_kill why)
{
	if (w->killed)
		return;
	w->killed = true;
	w->killed_by = why;
	syscall(SYS_pidfd_send_signal, w->pidfd, SIGKILL, NULL, 0);
}

/* Read what the sandbox's pipe has into o, within the cap; -1 at end of
 * file (or, once the sandbox is gone, when nothing more is there). */
static int pump(struct watch *w, struct out_stream *o)
{
	ssize_t n;

	/* OUT_CHUNK with the NUL a buf keeps: 64 KiB, under glibc's mmap
	 * threshold, so an empty stream costs no mmap and munmap. */
	if (buf_reserve(&o->pending, OUT_CHUNK - 1) < 0)
		return -1;   /* out of memory: the stream ends here (its writers get EPIPE) */
	n = read(o->in, o->pending.data + o->pending.len, OUT_CHUNK - 1);
	if (n < 0)
		return errno == EINTR ? 0 : -1;
	if (n == 0)
		return -1;
	if (w->sb->output && w->output + (uint64_t)n > w->sb->output) {
		n = (ssize_t)(w->sb->output - w->output);
		kill_sandbox(w, SANDBOX_KILL_OUTPUT);
	}
	if (n > 0) {
		o->pending.len += (size_t)n;
		o->any = true;
		o->last = (char)o->pending.data[o->pending.len - 1];
	}
	w->output += (uint64_t)n;
	if (o->out < 0)
		o->pending.len = o->off = 0;
	return 0;
}

void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* Move what the stdin source has into the sandbox's stdin pipe, without
 * waiting on either: splice (no copy through the launcher's memory), one
 * call per wakeup.  EAGAIN after the pipe said it had room means the source
 * has nothing yet (a named FIFO), after the source said it had something
 * that the pipe is full: wait for the other one then.  End of file, or a
 * sandbox that closed its stdin, ends the copy and closes the pipe, which
 * the sandbox then reads as end of file. */
static void stdin_pump(struct watch *w)
{
	ssize_t n = splice(w->in_src, NULL, w->in_pipe, NULL, 1 << 16, SPLICE_F_NONBLOCK);

	if (n > 0)
		return;
	if (n < 0 && errno == EINTR)
		return;
	if (n < 0 && errno == EAGAIN) {
		w->in_wait_src = !w->in_wait_src;
		return;
	}
	close_fd(&w->in_src);
	close_fd(&w->in_pipe);
}

/* Watch the running sandbox until its init is gone: output, wall clock, the
 * launcher's own signals, and the cgroups' OOM and pids events (cgroup.c
 * says which are announced and which are read on a timer).  An idle
 * sandbox wakes its launcher only for what it watches on a timer.  Nothing
 * in here waits on the launcher's own output (struct out_stream). */
void watch_loop(struct watch *w, const struct sandbox_cgroups *cg, int sigfd, uint64_t start)
{
	uint64_t deadline = w->sb->timeout > 0 ? start + (uint64_t)(w->sb->timeout * 1e9) : 0;
	struct cgroups_watch cw;
	uint64_t next_read = 0;
	int oom_pending = 0;
	bool read_now;

	cgroups_watch_open(cg, w->sb->kill_on_pids_limit, &cw);
	if (cw.period_ms >= 0)
		next_read = now_ns() + (uint64_t)cw.period_ms * 1000000;
	for (;;) {
		struct pollfd pfd[9] = {
			{ w->pidfd, POLLIN, 0 }, { -1, POLLIN, 0 }, { -1, POLLIN, 0 },
			{ sigfd, POLLIN, 0 }, { cw.fd[CGW_MEMORY], cw.events[CGW_MEMORY], 0 },
			{ cw.fd[CGW_PIDS], cw.events[CGW_PIDS], 0 },
			{ -1, POLLOUT, 0 }, { -1, POLLOUT, 0 },
			{ -1, 0, 0 },   /* stdin's source or pipe (stdin_pump) */
		};
		int timeout = -1, n;
		uint64_t now = now_ns();

		/* A stream's pipe is read only once its last read is out; until
		 * then the launcher waits for its own output to take more. */
		for (int i = 0; i < 2; i++) {
			if (out_waiting(&w->o[i]))
				pfd[6 + i].fd = w->o[i].out;
			else
				pfd[1 + i].fd = w->o[i].in;
		}
		if (w->in_pipe >= 0) {
			pfd[8].fd = w->in_wait_src ? w->in_src : w->in_pipe;
			pfd[8].events = w->in_wait_src ? POLLIN : POLLOUT;
		}
		if (next_read)
			timeout = now >= next_read ? 0 : (int)((next_read - now) / 1000000) + 1;
		/* A v1 OOM notification comes before the OOM killer has picked its
		 * victim: look again shortly, for up to a second. */
		if (oom_pending > 0)
			timeout = 10;
		if (deadline && !w->killed) {
			uint64_t left_ms;

			if (now >= deadline)
				kill_sandbox(w, SANDBOX_KILL_TIME);
			left_ms = now < deadline ? (deadline - now) / 1000000 + 1 : 0;
			if (!w->killed && (timeout < 0 || left_ms < (uint64_t)timeout))
				timeout = (int)(left_ms < INT_MAX ? left_ms : INT_MAX);
		}
		n = poll(pfd, 9, timeout);
		if (n < 0 && errno != EINTR)
			break;
		read_now = next_read && now_ns() >= next_read;
		if (read_now)
			next_read = now_ns() + (uint64_t)cw.period_ms * 1000000;
		for (int i = 0; i < 2; i++) {
			if (pfd[6 + i].fd >= 0 && pfd[6 + i].revents)
				out_write(&w->o[i]);
			if (pfd[1 + i].fd >= 0 && (pfd[1 + i].revents & (POLLIN | POLLHUP | POLLERR))) {
				if (pump(w, &w->o[i]) < 0)
					close_fd(&w->o[i].in);
				else
					out_write(&w->o[i]);
			}
		}
		if (pfd[8].fd >= 0 && pfd[8].revents)
			stdin_pump(w);
		if (pfd[3].revents & POLLIN) {
			struct signalfd_siginfo si;

			(void)!read(sigfd, &si, sizeof(si));
			kill_sandbox(w, SANDBOX_KILL_SIGNAL);
		}
		if (pfd[4].revents) {
			cgroups_watch_ack(&cw, CGW_MEMORY);
			oom_pending = 100;
		}
		if (pfd[5].revents)
			cgroups_watch_ack(&cw, CGW_PIDS);
		if (!w->killed && (pfd[4].revents || oom_pending > 0 || read_now) &&
		    cgroups_oom_killed(cg))
			kill_sandbox(w, SANDBOX_KILL_MEMORY);
		if (oom_pending > 0)
			oom_pending--;
		if (!w->killed && w->sb->kill_on_pids_limit && (pfd[5].revents || read_now) &&
		    cgroups_pids_hit(cg))
			kill_sandbox(w, SANDBOX_KILL_PIDS);
		if (pfd[0].revents & POLLIN)
			break;
	}
	cgroups_watch_close(&cw);
	/* The init is gone and with it every process of the sandbox: take in
	 * what its pipes still hold (within the cap), without waiting for a
	 * writer that is not there (a write end kept alive in flight on a
	 * unix socket could otherwise hold the launcher). */
	for (int i = 0; i < 2; i++) {
		if (w->o[i].in < 0)
			continue;
		fcntl(w->o[i].in, F_SETFL, O_NONBLOCK);
		while (w->o[i].in >= 0)
			if (pump(w, &w->o[i]) < 0)
				close_fd(&w->o[i].in);
	}
}

