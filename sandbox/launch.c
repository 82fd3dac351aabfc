/*
 * launch.c — sandbox_run: the launcher's ordered steps and the loop that
 * watches a running sandbox.
 *
 * Processes:
 *   launcher (host, root)  takes a host id range of the sandbox's own
 *       (pool.c), makes the cgroups and output pipes, clones the init into
 *       new user (owned by the range's base uid), mount, pid, net, ipc and
 *       uts namespaces, writes its id maps (inside 0..65535 = host
 *       uid_base..), moves it into the cgroups, makes idmapped read-only
 *       mount trees of the rootfs (a directory or the node's shared mount of
 *       an image) and the read-only binds, plain ones of the writable binds,
 *       and hands them over a socket; then copies output (up to the cap,
 *       never waiting on its own stdout or stderr) and enforces the wall
 *       clock, until the init is gone; then cleans up, gives writable binds
 *       back (their setuid and setgid bits cleared), and writes out the
 *       rest of the output.
 *   init (pid 1 inside)  takes root inside, unshares the cgroup namespace
 *       (now that it sits in its cgroups), builds the root (setup.c), sets
 *       rlimits, no_new_privs, an empty bounding set and the seccomp filter,
 *       forks the command, gives up its own capabilities and reaps until the
 *       command ends; then it sends the command's wait status and exits,
 *       and the kernel kills whatever else is left in the pid namespace.
 *   command (pid 2)  takes the policy's uid/gid, drops every capability,
 *       and execs with the policy's environment and working directory.
 *
 * The init dies with the launcher (PR_SET_PDEATHSIG), and with it the whole
 * sandbox; killing the init is how the launcher ends a sandbox early.
 * Every mount lives in the sandbox's mount namespace, so teardown is the
 * init's death plus rmdir of the cgroups (or their return to the pool, with
 * the network namespace's: pool.c).
 */
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <dirent.h>
#include <grp.h>

#include "lib/lib.h"
#include "sandbox/sandbox-internal.h"

#define SETUP_FAILED 125   /* the init's exit code when it could not build the sandbox */

enum { MSG_READY = 'R', MSG_STATUS = 'S' };

struct msg {
	char type;
	int status;
};

struct child_ctx {
	const struct sandbox *sb;
	const char *name;
	char *const *argv;
	int sock, in, out_w, err_w;
	bool pooled_net;        /* in a pooled network namespace (pool.c) */
	int *cg_tasks;          /* v1 tasks files to move into (cgroups_self_move) */
};

static int send_fds(int sock, const int *fds, size_t n)
{
	char byte = 'F';
	struct iovec iov = { &byte, 1 };
	size_t len = CMSG_SPACE(sizeof(int) * n);
	_cleanup_free_ char *ctl = calloc(1, len ? len : 1);
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (!ctl)
		return -ENOMEM;
	if (n) {
		struct cmsghdr *c;

		mh.msg_control = ctl;
		mh.msg_controllen = len;
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * n);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
	}
	if (sendmsg(sock, &mh, MSG_NOSIGNAL) < 0)
		return -errno;
	return 0;
}

/* Receive exactly n fds; 0 bytes (the launcher is gone) is -EPIPE. */
static int recv_fds(int sock, int *fds, size_t n)
{
	char byte;
	struct iovec iov = { &byte, 1 };
	size_t len = CMSG_SPACE(sizeof(int) * n);
	_cleanup_free_ char *ctl = calloc(1, len ? len : 1);
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
	                     .msg_controllen = n ? len : 0 };
	struct cmsghdr *c;
	ssize_t r;

	if (!ctl)
		return -ENOMEM;
	r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	if (r < 0)
		return -errno;
	if (r == 0)
		return -EPIPE;
	if (!n)
		return 0;
	c = CMSG_FIRSTHDR(&mh);
	if (!c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int) * n))
		return -EBADMSG;
	memcpy(fds, CMSG_DATA(c), sizeof(int) * n);
	return 0;
}

static void send_msg(int sock, char type, int status)
{
	struct msg m = { type, status };

	(void)!send(sock, &m, sizeof(m), MSG_NOSIGNAL);
}

static void set_rlimit(int res, uint64_t v, const char *what)
{
	struct rlimit rl = { v, v };

	if (setrlimit(res, &rl) < 0)
		log_errno(-errno, "rlimit %s", what);
}

/* The command, pid 2 inside.  Errors go to its stderr (the output pipe). */
static __attribute__((noreturn)) void command_main(struct child_ctx *c)
{
	const struct sandbox *sb = c->sb;
	char **env = NULL;
	int e;

	setsid();
	if (dup2(c->in, STDIN_FILENO) < 0 || dup2(c->out_w, STDOUT_FILENO) < 0 ||
	    dup2(c->err_w, STDERR_FILENO) < 0)
		_exit(SETUP_FAILED);
	if (setgroups(0, NULL) < 0 || setresgid(sb->gid, sb->gid, sb->gid) < 0 ||
	    setresuid(sb->uid, sb->uid, sb->uid) < 0) {
		log_errno(-errno, "user %u:%u", (unsigned)sb->uid, (unsigned)sb->gid);
		_exit(SETUP_FAILED);
	}
	if (caps_drop_all() < 0)
		_exit(SETUP_FAILED);
	if (chdir(sb->workdir) < 0) {
		log_errno(-errno, "workdir '%s'", sb->workdir);
		_exit(SETUP_FAILED);
	}
	if (policy_env(sb, &env) < 0)
		_exit(SETUP_FAILED);
	syscall(SYS_close_range, 3, ~0u, 0);
	execvpe(c->argv[0], c->argv, env);
	e = errno;
	log_errno(-e, "run '%s'", c->argv[0]);
	_exit(e == ENOENT ? 127 : 126);
}

/* The command's stack while it shares the init's memory (until its exec). */
static char cmd_stack[128 * 1024] __attribute__((aligned(64)));

static int command_entry(void *arg)
{
	struct child_ctx *c = arg;

	close(c->sock);   /* the command's own descriptor table: the init keeps its copy */
	command_main(c);
}

/* The sandbox's init: never returns. */
static __attribute__((noreturn)) void init_main(struct child_ctx *c)
{
	const struct sandbox *sb = c->sb;
	size_t nfds = 1 + sb->n_binds;
	_cleanup_free_ int *fds = calloc(nfds, sizeof(int));
	struct ns_limits limits;
	sigset_t none;
	pid_t cmd, p;
	int st = 0, r;

	/* Die with the launcher; if it already died, the receive below fails. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* Into the v1 cgroups before anything else: what the init allocates
	 * from here on is charged to the sandbox. */
	if (cgroups_self_move(c->cg_tasks) < 0)
		_exit(SETUP_FAILED);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	if (!fds)
		_exit(SETUP_FAILED);
	r = recv_fds(c->sock, fds, nfds);
	if (r < 0)
		_exit(SETUP_FAILED);
	if (setgroups(0, NULL) < 0 || setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0) {
		log_errno(-errno, "become root in the user namespace");
		_exit(SETUP_FAILED);
	}
	/* Changing ids clears the parent-death signal: set it again, then make
	 * sure the launcher did not die in between (its end of the socket
	 * closes with it). */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (poll(&(struct pollfd){ c->sock, POLLRDHUP, 0 }, 1, 0) != 0)
		_exit(SETUP_FAILED);
	if (unshare(CLONE_NEWCGROUP) < 0) {
		log_errno(-errno, "cgroup namespace");
		_exit(SETUP_FAILED);
	}
	/* Opened through the host's /proc while it is there (the sandbox's
	 * own has /proc/sys read-only), written once setup is done. */
	if (ns_limits_open(sb, &limits) < 0 ||
	    setup_root(sb, c->name, &fds[0], fds + 1, c->pooled_net) < 0)
		_exit(SETUP_FAILED);
	set_rlimit(RLIMIT_NOFILE, sb->nofile, "nofile");
	set_rlimit(RLIMIT_CORE, 0, "core");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		log_errno(-errno, "no_new_privs");
		_exit(SETUP_FAILED);
	}
	if (landlock_apply(sb) < 0)
		_exit(SETUP_FAILED);
	if (caps_drop_bounding() < 0 || seccomp_install(sb) < 0)
		_exit(SETUP_FAILED);
	/* Last: the init's setup has made its namespaces and detached mount
	 * trees; from here on neither it nor the command makes any. */
	if (ns_limits_apply(&limits) < 0)
		_exit(SETUP_FAILED);
	send_msg(c->sock, MSG_READY, 0);
	/* /proc/1 is closed to the command (not dumpable) from before it
	 * exists; its exec makes the command's own memory dumpable again. */
	prctl(PR_SET_DUMPABLE, 0);
	/* The command shares the init's memory until it execs (the init waits
	 * meanwhile, CLONE_VFORK): no page tables to copy, no copy-on-write
	 * faults, for a process that execs at once. */
	cmd = clone(command_entry, cmd_stack + sizeof(cmd_stack), CLONE_VM | CLONE_VFORK | SIGCHLD,
	            c);
	if (cmd < 0) {
		log_errno(-errno, "start the command");
		_exit(SETUP_FAILED);
	}
	/* From here on the init holds nothing the command could use: no
	 * capabilities, no output pipe, not even the launcher's stdio. */
	caps_drop_all();
	if (c->sock != 3) {
		dup2(c->sock, 3);
		c->sock = 3;
	}
	syscall(SYS_close_range, 0, 2, 0);
	syscall(SYS_close_range, 4, ~0u, 0);
	/* Setup's heap (the seccomp compiler's above all) is free now but
	 * private to the init: give its pages back for the sandbox's life. */
	malloc_trim(0);
	for (;;) {
		p = waitpid(-1, &st, __WALL);
		if (p == cmd)
			break;
		if (p < 0 && errno != EINTR)
			_exit(SETUP_FAILED);
	}
	send_msg(c->sock, MSG_STATUS, st);
	_exit(0);
}

static int write_map(pid_t pid, const char *file, uint32_t base)
{
	char path[64], map[64];
	_cleanup_close_ int fd = -1;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	snprintf(map, sizeof(map), "0 %u %u\n", base, SANDBOX_ID_RANGE);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, map, strlen(map)) < 0)
		return log_errno(-errno, "write %s", path);
	return 0;
}

/* A detached copy of path's mount tree (dfd's when path is ""), nosuid and
 * nodev.  Read-only ones are shifted by the sandbox's user namespace
 * (userns), so that the image's owners hold inside.  A writable one (rw)
 * is not shifted: what the sandbox creates in it is owned on the host by
 * the sandbox's own host ids (uid_base + its id inside), never by host root
 * or a host user, since a process of the sandbox can only chown to ids its
 * user namespace maps, and those are its range alone. */
static int idmapped_tree(int dfd, const char *path, int userns, bool rw)
{
	struct mount_attr attr = {
		.attr_set = (rw ? 0 : MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY) | MOUNT_ATTR_NOSUID |
		            MOUNT_ATTR_NODEV,
		.userns_fd = rw ? 0 : (uint64_t)userns,
	};
	_cleanup_close_ int fd = open_tree(dfd, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC |
	                                   AT_RECURSIVE | (path[0] ? 0 : AT_EMPTY_PATH));

	if (fd < 0)
		return log_errno(-errno, "'%s'", path);
	if (mount_setattr(fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) < 0)
		return log_errno(-errno, "'%s': idmapped mount", path);
	return TAKE_FD(fd);
}

/* A writable bind's source, lent to the sandbox for its run.  Not shifted
 * (idmapped_tree), a source owned by host root would be out of the
 * sandbox's reach: its ids map to nothing inside.  So unless everyone may
 * write it already (mode o+w, e.g. a sticky 1777 directory that several
 * sandboxes share), the launcher makes the source itself (not what is in
 * it) owned by the sandbox's root (host uid_base, gid_base) for the run, and
 * gives it back, owner and mode as they were, once the sandbox is gone.  A
 * source owned by one of the node's sandbox ranges is lent already (to a
 * running sandbox, or left so by a killed launcher) and is not lent again.
 * Either way, once the sandbox is gone every setuid and setgid bit under
 * the source is cleared (bind_return).  A launcher killed meanwhile leaves
 * the source owned by the sandbox's ids. */
struct lent_bind {
	int fd;                 /* O_PATH, the source as bound */
	struct stat st;         /* its owner and mode before */
	bool lent;
	uid_t ids_uid;          /* the sandbox's root on the host */
};

static int bind_lend(const struct sandbox_bind *b, const struct id_slot *ids,
                     struct lent_bind *l)
{
	l->ids_uid = ids->uid_base;
	l->fd = open(b->src, O_PATH | O_CLOEXEC);
	if (l->fd < 0 || fstat(l->fd, &l->st) < 0)
		return log_errno(-errno, "bind '%s'", b->src);
	if ((l->st.st_uid == ids->uid_base && l->st.st_gid == ids->gid_base) ||
	    (l->st.st_mode & S_IWOTH) || id_slot_node_owned(l->st.st_uid))
		return 0;
	if (fchownat(l->fd, "", ids->uid_base, ids->gid_base, AT_EMPTY_PATH) < 0)
		return log_errno(-errno, "bind '%s': lend it to the sandbox", b->src);
	l->lent = true;
	return 0;
}

/* Below this depth a tree is not walked; its directory is made mode 000
 * instead, which keeps every host user but root out of what is below. */
#define STRIP_DEPTH 128

/* Clear S_ISUID and S_ISGID of fd's inode (an O_PATH descriptor), through
 * /proc/self/fd: that names the inode itself, never a path that something
 * could have turned into a symlink meanwhile. */
static void strip_bits(int fd, const struct stat *st, mode_t mode)
{
	char path[32];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	if ((st->st_mode & 07777) != mode && chmod(path, mode) < 0)
		log_errno(-errno, "bind: clear the setuid and setgid bits of inode %llu",
		          (unsigned long long)st->st_ino);
}

/* Walk dir (an O_PATH descriptor of a directory, not closed here) and clear
 * the setuid and setgid bits of every file and directory under it; other
 * mounts are not entered.  Entries are opened O_PATH | O_NOFOLLOW. */
static void strip_tree(int dir, dev_t dev, int depth)
{
	int dfd = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *e;
	DIR *d;

	if (dfd < 0 || !(d = fdopendir(dfd))) {
		if (dfd >= 0)
			close(dfd);
		return;
	}
	while ((e = readdir(d))) {
		_cleanup_close_ int fd = -1;
		struct stat st;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		fd = openat(dirfd(d), e->d_name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st) < 0)
			continue;
		if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))
			strip_bits(fd, &st, st.st_mode & 01777);
		if (!S_ISDIR(st.st_mode) || st.st_dev != dev)
			continue;
		if (depth < STRIP_DEPTH)
			strip_tree(fd, dev, depth + 1);
		else
			strip_bits(fd, &st, 0);
	}
	closedir(d);
}

/* The sandbox is gone: give the source back and clear what it left. */
static void bind_return(const struct sandbox_bind *b, struct lent_bind *l)
{
	struct stat st;

	if (l->fd < 0)
		return;
	if (fstat(l->fd, &st) < 0) {
		close(l->fd);
		l->fd = -1;
		return;
	}
	/* Given back only if it is still the sandbox's: someone else changed
	 * its owner meanwhile otherwise.  The source's own mode is the
	 * operator's, but what the sandbox owns loses its setuid and setgid
	 * bits. */
	if (l->lent && st.st_uid == l->ids_uid) {
		if (fchownat(l->fd, "", l->st.st_uid, l->st.st_gid, AT_EMPTY_PATH) < 0)
			log_errno(-errno, "bind '%s': give it back to its owner", b->src);
		else if (fstat(l->fd, &st) == 0)
			strip_bits(l->fd, &st, l->st.st_mode & 07777);
	} else if (st.st_uid >= l->ids_uid && st.st_uid - l->ids_uid < SANDBOX_ID_RANGE) {
		strip_bits(l->fd, &st, st.st_mode & 01777);
	}
	if (S_ISDIR(st.st_mode))
		strip_tree(l->fd, st.st_dev, 0);
	close(l->fd);
	l->fd = -1;
}

/* Everything the launcher does between the clone and the init's first step. */
static int prepare_child(const struct sandbox *sb, const char *name, pid_t pid,
                         const struct id_slot *ids, const struct lent_bind *lent,
                         const struct sandbox_cgroups *cg, struct net_state *net, int sock)
{
	char path[64];
	_cleanup_close_ int userns = -1;
	_cleanup_free_ int *fds = calloc(1 + sb->n_binds, sizeof(int));
	size_t n = 0;
	int r;

	if (!fds)
		return -ENOMEM;

	r = write_map(pid, "uid_map", ids->uid_base);
	if (r == 0)
		r = write_map(pid, "gid_map", ids->gid_base);
	if (r == 0)
		r = cgroups_attach(cg, pid, cg->path[CG_UNIFIED] != NULL);
	if (r == 0)
		r = netpolicy_setup(sb, name, pid, cg->path[CG_UNIFIED], net);
	if (r < 0)
		return r;
	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
	userns = open(path, O_RDONLY | O_CLOEXEC);
	if (userns < 0)
		return log_errno(-errno, "open %s", path);
	r = idmapped_tree(AT_FDCWD, sb->rootfs, userns, false);
	if (r < 0)
		return log_error(r, "rootfs '%s' cannot be mounted", sb->rootfs);
	fds[n++] = r;
	for (size_t i = 0; i < sb->n_binds; i++) {
		r = sb->binds[i].rw ? idmapped_tree(lent[i].fd, "", -1, true) :
		                      idmapped_tree(AT_FDCWD, sb->binds[i].src, userns, false);
		if (r < 0)
			break;
		fds[n++] = r;
	}
	if (r >= 0)
		r = send_fds(sock, fds, n);
	if (r < 0 && r != -EPIPE)
		log_errno(r, "hand the mounts to the sandbox");
	for (size_t i = 0; i < n; i++)
		close(fds[i]);
	return r < 0 ? r : 0;
}

/* One of the sandbox's output streams on its way to the launcher's own
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
 * then may the launcher wait for its reader. */
#define OUT_CHUNK 65536

struct out_stream {
	int in;                 /* the sandbox's pipe (read end); -1 at end of file */
	int out;                /* where the bytes go; -1: discarded */
	bool own;               /* out was opened here: close it at the end */
	bool sock;              /* out is a socket: send with MSG_DONTWAIT */
	bool guarded;           /* out may block: write at most PIPE_BUF after POLLOUT */
	struct buf pending;     /* read from in, not yet written */
	size_t off;             /* of pending, written so far */
	bool any;               /* a byte was passed through */
	char last;              /* the last byte passed through */
};

struct watch {
	const struct sandbox *sb;
	int pidfd;
	enum sandbox_kill killed_by;
	uint64_t output;
	bool killed;
	struct out_stream o[2];   /* stdout, stderr */
};

/* Where stream fd (1 or 2) of the launcher can be written without waiting. */
static void out_open(struct out_stream *o, int fd)
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
static void out_finish(struct out_stream *o, int sigfd)
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

static void kill_sandbox(struct watch *w, enum sandbox_kill why)
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

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* Watch the running sandbox until its init is gone: output, wall clock, the
 * launcher's own signals, and the cgroups' OOM and pids events (cgroup.c
 * says which are announced and which are read on a timer).  An idle
 * sandbox wakes its launcher only for what it watches on a timer.  Nothing
 * in here waits on the launcher's own output (struct out_stream). */
static void watch_loop(struct watch *w, const struct sandbox_cgroups *cg, int sigfd,
                       uint64_t start)
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
		struct pollfd pfd[8] = {
			{ w->pidfd, POLLIN, 0 }, { -1, POLLIN, 0 }, { -1, POLLIN, 0 },
			{ sigfd, POLLIN, 0 }, { cw.fd[CGW_MEMORY], cw.events[CGW_MEMORY], 0 },
			{ cw.fd[CGW_PIDS], cw.events[CGW_PIDS], 0 },
			{ -1, POLLOUT, 0 }, { -1, POLLOUT, 0 },
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
		n = poll(pfd, 8, timeout);
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

static int make_name(const struct sandbox *sb, char *out, size_t len)
{
	if (sb->name)
		snprintf(out, len, "%s", sb->name);
	else
		snprintf(out, len, "lazyroot-%d", (int)getpid());
	return 0;
}

/* The sandbox's processes are gone: its cgroups go, or back to the pool. */
static int cgroups_end(struct cgroup_slot *cslot, struct sandbox_cgroups *cg)
{
	return cslot->lock_fd >= 0 ? cgroup_slot_release(cslot, cg) : cgroups_destroy(cg);
}

static int become_owner(const struct id_slot *ids)
{
	if (syscall(SYS_setresgid, -1, ids->gid_base, -1) < 0)
		return log_errno(-errno, "run: effective gid %u", (unsigned)ids->gid_base);
	if (syscall(SYS_setresuid, -1, ids->uid_base, -1) < 0) {
		int r = -errno;

		syscall(SYS_setresgid, -1, 0, -1);
		return log_errno(r, "run: effective uid %u", (unsigned)ids->uid_base);
	}
	if (caps_raise_effective() < 0) {
		int r = -errno;

		syscall(SYS_setresuid, -1, 0, -1);
		syscall(SYS_setresgid, -1, 0, -1);
		return log_errno(r, "run: raise the capabilities");
	}
	return 0;
}

/* Back to effective root (which gives the capabilities back to the
 * effective set) and dumpable, as a change of effective ids made the
 * launcher not dumpable. */
static void back_to_root(void)
{
	syscall(SYS_setresuid, -1, 0, -1);
	syscall(SYS_setresgid, -1, 0, -1);
	prctl(PR_SET_DUMPABLE, 1);
}

/* What the command reads as stdin: the launcher's own when it is a regular
 * file or a pipe, opened anew read-only (so that a descriptor the caller
 * opened for writing too, `<>file`, stays the caller's); /dev/null for
 * anything else.  A terminal above all never reaches a sandbox: through it
 * a sandbox could write to the operator's screen past the output pipes and
 * cap, and change the terminal's settings and window size for good.
 * Sockets and devices get /dev/null as well (a socket's peer would be
 * reachable by writes).  The descriptor is the launcher's; -errno. */
static int sandbox_stdin(void)
{
	struct stat st;
	char path[32];
	int fd = -1;

	if (fstat(STDIN_FILENO, &st) == 0 && (S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode))) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", STDIN_FILENO);
		/* O_NONBLOCK: opening a FIFO that has no writer must not wait. */
		fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
		if (fd >= 0 && S_ISREG(st.st_mode)) {
			off_t at = lseek(STDIN_FILENO, 0, SEEK_CUR);

			if (at > 0 && lseek(fd, at, SEEK_SET) < 0) {
				close(fd);
				fd = -1;
			}
		}
		if (fd >= 0 && fcntl(fd, F_SETFL, 0) < 0) {
			close(fd);
			fd = -1;
		}
	}
	if (fd < 0)
		fd = open("/dev/null", O_RDONLY | O_NOCTTY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

int sandbox_run(struct sandbox *sb, char *const argv[], struct sandbox_result *ret)
{
	struct sandbox_cgroups cg;
	struct net_state net = NET_STATE_INIT;
	struct launch_record rec = LAUNCH_RECORD_INIT;
	struct netns_slot nslot = NETNS_SLOT_INIT;
	struct cgroup_slot cslot = CGROUP_SLOT_INIT;
	struct id_slot ids = ID_SLOT_INIT;
	_cleanup_free_ struct lent_bind *lent = NULL;
	_cleanup_close_ int sigfd = -1, pidfd = -1, cgfd = -1;
	int cg_tasks[CG_COUNT] = { -1, -1, -1, -1 };
	int out[2] = { -1, -1 }, err[2] = { -1, -1 }, sp[2] = { -1, -1 }, in = -1;
	struct clone_args ca = { 0 };
	struct watch w = { .sb = sb, .pidfd = -1,
	                   .o = { { .in = -1, .out = -1 }, { .in = -1, .out = -1 } } };
	struct msg m;
	bool ready = false, have_status = false, cg_left = false, masked = false;
	int status = 0, wst = 0, r;
	struct rusage ru;
	sigset_t mask, old;
	char name[96];
	uint64_t start;
	double cpu;
	pid_t pid;

	memset(ret, 0, sizeof(*ret));
	if (!argv || !argv[0])
		return log_error(-EINVAL, "run: no command");
	if (!sb->rootfs)
		return log_error(-EINVAL, "run: no rootfs");
	if (geteuid() != 0)
		return log_error(-EPERM, "run: the launcher needs root (idmapped mounts, cgroups)");
	if (access(sb->rootfs, X_OK) < 0)
		return log_errno(-errno, "rootfs '%s'", sb->rootfs);
	make_name(sb, name, sizeof(name));
	snprintf(ret->name, sizeof(ret->name), "%s", name);
	r = netpolicy_check(sb);
	if (r < 0)
		return r;
	lent = calloc(sb->n_binds + 1, sizeof(*lent));
	if (!lent)
		return -ENOMEM;
	for (size_t i = 0; i < sb->n_binds; i++)
		lent[i].fd = -1;

	if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
		r = log_errno(-errno, "run: pipes");
		goto close_all;
	}
	in = sandbox_stdin();
	if (in < 0) {
		r = log_errno(in, "run: stdin");
		goto close_all;
	}
	out_open(&w.o[0], STDOUT_FILENO);
	out_open(&w.o[1], STDERR_FILENO);
	sandbox_gc_maybe(&sb->node);
	r = id_slot_take(sb, &ids);
	if (r < 0)
		goto close_all;
	ret->uid_base = ids.uid_base;
	ret->gid_base = ids.gid_base;
	for (size_t i = 0; i < sb->n_binds; i++) {
		if (!sb->binds[i].rw)
			continue;
		r = bind_lend(&sb->binds[i], &ids, &lent[i]);
		if (r < 0)
			goto close_all;
	}
	/* A record only where a dead launcher would leave something for gc
	 * (cgroups of the sandbox's own, a stage state directory) or a name
	 * is to be claimed; a name asked for is claimed first.  The default
	 * name holds the launcher's pid, and a pooled sandbox leaves nothing:
	 * the next taker of a dead launcher's slot starts it over (pool.c).
	 * Where /run is ext4, the record's create and unlink cost about 3% of
	 * the launch rate (docs/perf-log.md, "Fewer files per launch").  Pooled
	 * cgroups are never listed in a record: they outlive the sandbox, and
	 * a collector of the record must not touch them. */
	if (sb->name || sb->n_stages) {
		r = launch_record_open(&sb->node, name, &rec);
		if (r < 0)
			goto close_all;
	}
	r = cgroup_slot_take(sb, &cslot, &cg);
	if (r < 0)
		goto close_all;
	if (cslot.lock_fd < 0 && rec.fd < 0) {
		r = launch_record_open(&sb->node, name, &rec);
		if (r < 0)
			goto close_all;
	}
	if (cslot.lock_fd < 0) {
		r = cgroups_resolve(sb, name, &cg);
		if (r == 0) {
			r = launch_record_add(&rec, &cg);
			if (r < 0)
				cgroups_forget(&cg);
		}
		if (r == 0)
			r = cgroups_make(sb, &cg);
	}
	if (r < 0)
		goto close_all;
	r = netns_slot_take(sb, &nslot);
	if (r < 0) {
		cg_left = cgroups_end(&cslot, &cg) < 0;
		goto close_all;
	}

	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, &old);
	masked = true;
	sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	signal(SIGPIPE, SIG_IGN);

	start = now_ns();
	ca.flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS |
	           CLONE_PIDFD;
	ca.pidfd = (uint64_t)(uintptr_t)&pidfd;
	ca.exit_signal = SIGCHLD;
	/* Born in its cgroup2 directory: one cgroup.procs write fewer. */
	if (cg.path[CG_UNIFIED]) {
		cgfd = open(cg.path[CG_UNIFIED], O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (cgfd < 0) {
			r = log_errno(-errno, "cgroup '%s'", cg.path[CG_UNIFIED]);
			cg_left = cgroups_end(&cslot, &cg) < 0;
			goto restore;
		}
		ca.flags |= CLONE_INTO_CGROUP;
		ca.cgroup = (uint64_t)cgfd;
	}
	r = cgroups_self_open(&cg, cg_tasks);
	if (r < 0) {
		cg_left = cgroups_end(&cslot, &cg) < 0;
		goto restore;
	}
	/* A pooled network namespace is entered by the launcher and inherited
	 * by the clone; otherwise the sandbox gets a new one of its own. */
	if (nslot.lock_fd >= 0) {
		r = netns_slot_enter(&nslot);
		if (r < 0) {
			cg_left = cgroups_end(&cslot, &cg) < 0;
			goto restore;
		}
	} else {
		ca.flags |= CLONE_NEWNET;
	}
	/* The clone makes the sandbox's user namespace, which is owned by the
	 * effective uid that makes it, and the kernel charges the namespace's
	 * per-user budgets (inotify instances and watches, message queue
	 * bytes, pending signals, ...: its ucounts) to that owner in the
	 * host's namespace.  Made by root, every sandbox shared root's budget
	 * with the others and with root's own daemons; made with the effective
	 * ids set to the sandbox's own base ids (real and saved ids stay root,
	 * the capabilities raised again for the clone's cgroup), each has its
	 * own.  The launcher is root again at once. */
	r = become_owner(&ids);
	if (r < 0) {
		cg_left = cgroups_end(&cslot, &cg) < 0;
		if (nslot.lock_fd >= 0)
			netns_slot_leave(&nslot);
		goto restore;
	}
	pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
	if (pid != 0)
		back_to_root();
	if (pid == 0) {
		struct child_ctx c = { sb, name, argv, sp[1], in, out[1], err[1],
		                       nslot.lock_fd >= 0, cg_tasks };

		close(sp[0]);
		close(out[0]);
		close(err[0]);
		/* The record's and the slot's locks must end with the launcher, not
		 * with its init. */
		if (rec.fd >= 0)
			close(rec.fd);
		if (cslot.lock_fd >= 0)
			close(cslot.lock_fd);
		if (nslot.lock_fd >= 0) {
			close(nslot.lock_fd);
			close(nslot.ns_fd);
			close(nslot.host_fd);
			for (int i = 0; i < 3; i++)
				close(nslot.stat_fd[i]);
		}
		init_main(&c);
	}
	cgroups_self_close(cg_tasks);
	if (pid < 0)
		r = log_errno(-errno, "run: clone the sandbox");
	if (nslot.lock_fd >= 0) {
		int r2 = netns_slot_leave(&nslot);

		if (r2 < 0 && pid > 0) {
			syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
			while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
				;
		}
		if (r2 < 0 && r == 0)
			r = r2;
	}
	if (r < 0) {
		cg_left = cgroups_end(&cslot, &cg) < 0;
		goto restore;
	}
	close_fd(&sp[1]);
	close_fd(&out[1]);
	close_fd(&err[1]);
	close_fd(&in);
	w.pidfd = pidfd;

	r = prepare_child(sb, name, pid, &ids, lent, &cg, &net, sp[0]);
	if (r < 0)
		kill_sandbox(&w, SANDBOX_KILL_NONE);
	w.o[0].in = TAKE_FD(out[0]);
	w.o[1].in = TAKE_FD(err[0]);
	watch_loop(&w, &cg, sigfd, start);
	while (wait4(pid, &wst, 0, &ru) < 0 && errno == EINTR)
		;
	ret->wall_seconds = (double)(now_ns() - start) / 1e9;
	while (recv(sp[0], &m, sizeof(m), MSG_DONTWAIT) == (ssize_t)sizeof(m)) {
		if (m.type == MSG_READY)
			ready = true;
		else if (m.type == MSG_STATUS) {
			have_status = true;
			status = m.status;
		}
	}

	ret->output_bytes = w.output;
	cgroups_read_end(&cg);
	ret->memory_peak = cgroups_memory_peak(&cg);
	ret->pids_limit_hit = cgroups_pids_hit(&cg);
	cpu = cgroups_cpu_seconds(&cg);
	if (cpu < 0)
		cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
		      (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
	ret->cpu_seconds = cpu;
	if (!w.killed && cgroups_oom_killed(&cg))
		w.killed_by = SANDBOX_KILL_MEMORY;
	netpolicy_teardown(&net);
	cg_left = cgroups_end(&cslot, &cg) < 0;

	if (r == 0 && !ready && !w.killed) {
		/* The init printed why on stderr. */
		r = log_error(-EIO, "run: sandbox setup failed (init exit %d)",
		              WIFEXITED(wst) ? WEXITSTATUS(wst) : 128 + WTERMSIG(wst));
	}
	if (r < 0)
		goto restore;
	ret->killed_by = w.killed_by;
	if (have_status && WIFEXITED(status)) {
		ret->status = WEXITSTATUS(status);
	} else {
		ret->signal = have_status && WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
		ret->status = 128 + ret->signal;
	}
	r = 0;
restore:
close_all:
	cgroups_self_close(cg_tasks);
	/* Every process of the sandbox is gone by now (the init waited for
	 * them): its namespace may go back to the pool. */
	netns_slot_release(&nslot);
	launch_record_close(&rec, !cg_left);
	for (size_t i = 0; i < sb->n_binds; i++)
		bind_return(&sb->binds[i], &lent[i]);
	id_slot_release(&ids);
	for (int i = 0; i < 2; i++) {
		close_fd(&out[i]);
		close_fd(&err[i]);
		close_fd(&sp[i]);
	}
	close_fd(&in);
	/* The sandbox is gone and cleaned up: only now may the launcher wait
	 * for its reader to take the rest of the output. */
	for (int i = 0; i < 2; i++) {
		close_fd(&w.o[i].in);
		out_finish(&w.o[i], sigfd);
	}
	ret->stderr_open_line = w.o[1].any && w.o[1].last != '\n';
	if (masked)
		sigprocmask(SIG_SETMASK, &old, NULL);
	return r;
}
