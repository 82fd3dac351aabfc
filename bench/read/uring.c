/*
 * uring.c — a FUSE server of the benchmark's own that speaks the kernel's
 * protocol itself (no libfuse), over /dev/fuse or over FUSE-over-io_uring,
 * so that bench/read/uring-run can say what io_uring's per-CPU queues gain on
 * a machine before anyone builds them into the node.  It serves a tiny tree
 * from memory:
 *
 *   /s000 … /s099   4 KiB each, entry and attributes cached for a day
 *   /u              4 KiB, entry and attribute timeouts 0: every stat() is a
 *                   LOOKUP and a GETATTR that reach this process
 *   /big            a copy of FILE, read into memory at start
 *
 * OPEN answers keep_cache, so a warm read of a small file never reaches the
 * server; a read of /big through O_DIRECT always does.
 *
 *   uring serve --dev FILE MOUNTPOINT     one thread reads /dev/fuse and answers
 *   uring serve --uring FILE MOUNTPOINT   INIT over /dev/fuse, then one thread per
 *                                         possible CPU (pinned where online), each
 *                                         with its own ring serving queue qid = CPU;
 *                                         the /dev/fuse thread stays for what still
 *                                         comes that way (FORGET, INTERRUPT)
 *   uring serve … --idle …                the serving threads run SCHED_IDLE
 *   uring serve … --adopt=PID:FD …        a successor: serve the connection whose
 *                                         /dev/fuse is PID's FD (uring hold), no mount
 *   uring load TEST MOUNTPOINT COUNT      the measuring client: TEST is open, stat,
 *                                         pread or warm; prints one line of figures
 *   uring hold PID FD                     a second holder of a server's /dev/fuse
 *                                         (uring-run --kill; see hold())
 *
 * serve mounts MOUNTPOINT itself (mount(2), so it needs root), prints "ready"
 * on stdout once requests can be served, and runs until the mount goes
 * (umount, or SIGTERM/SIGINT, which detach it).  Every failure is one line on
 * stderr and a non-zero exit, the mount detached first.
 *
 * Protocol facts of FUSE over io_uring (kernel 6.14 on, uapi 7.42), from the
 * kernel's fs/fuse/dev_uring.c:
 *  - the ring is used only once every queue, one per *possible* CPU, holds an
 *    entry registered and waiting; until then requests block (not fall back),
 *    so a server must register all of them;
 *  - REGISTER needs the connection initialised (INIT answered) and a payload
 *    buffer of at least max(8 KiB, max_write, max_pages * page size);
 *  - a request is queued on the queue of the CPU its caller runs on and
 *    completed to the ring whose SQE fetched the entry; the kernel finds the
 *    entry of a COMMIT_AND_FETCH by its qid and commit id, not by the ring it
 *    comes from, but the reply is read from the entry's buffers in the
 *    committing task's memory, so a commit must come from the process that
 *    registered them;
 *  - the op header of a request is in header.op_in, its other arguments (a
 *    LOOKUP's name) in the payload; a reply's arguments all go in the payload,
 *    its fuse_out_header in header.in_out;
 *  - at exit, entries waiting for a request are cancelled (CQE -ENOTCONN);
 *    when the connection ends every registered entry completes with an error.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/fuse.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* FUSE over io_uring, as include/uapi/linux/fuse.h 7.42 (Linux 6.14) lays it
 * out; the installed header (7.38) predates it. */
#define URING_FUSE_OVER_IO_URING (1ULL << 41)
#define URING_CMD_REGISTER 1
#define URING_CMD_COMMIT_AND_FETCH 2

struct uring_ent_in_out {
	uint64_t flags;
	uint64_t commit_id;     /* the request's unique, echoed in the commit */
	uint32_t payload_sz;    /* bytes valid in the payload, either way */
	uint32_t padding;
	uint64_t reserved;
};

struct uring_req_header {
	char in_out[128];       /* fuse_in_header on fetch, fuse_out_header on commit */
	char op_in[128];        /* the op's fixed header (in_args[0]) */
	struct uring_ent_in_out ent;
};

struct uring_cmd_req {          /* in the 80-byte command area of an SQE128 */
	uint64_t flags;
	uint64_t commit_id;
	uint16_t qid;
	uint8_t padding[6];
};

_Static_assert(sizeof(struct uring_req_header) == 288, "uapi 7.42 header layout");
_Static_assert(sizeof(struct uring_cmd_req) == 24, "uapi 7.42 command layout");

#define SMALL_FILES 100
#define SMALL_SIZE 4096
#define INO_U (2 + SMALL_FILES)
#define INO_BIG (INO_U + 1)
#define INO_MAX INO_BIG
#define CACHED_SECS 86400

/* One request size for both transports: the ring's payload buffer must hold
 * max(8 KiB, max_write, max_pages pages), and a /dev/fuse read buffer must
 * hold max_write plus the headers. */
#define MAX_PAGES 32
#define MAX_WRITE (MAX_PAGES * 4096)
#define DEV_BUF (MAX_WRITE + 4096)
/* Entries per queue: one for the caller on that CPU, the rest for background
 * requests (RELEASE) and readahead. */
#define QUEUE_DEPTH 4
/* handle()'s answer to a request that takes none (FORGET, INTERRUPT) */
#define NO_REPLY ((ssize_t)-100000)

struct server {
	int fd;                 /* /dev/fuse */
	int uring;              /* --uring */
	int idle;               /* --idle: serving threads run SCHED_IDLE */
	unsigned nqueues;
	const char *big;        /* FILE's bytes */
	size_t big_size;
	char small[SMALL_SIZE];
};

static const char *g_mountpoint;

/*
 * --idle.  The kernel's wake-up placement counts a CPU that runs only
 * SCHED_IDLE tasks as idle: a ring thread answering on the reader's CPU wakes
 * the reader there, rather than on the other CPU, which on a VM whose idle
 * vCPUs halt costs a wake-up of that vCPU and sends the next request to
 * another queue.  The price: a SCHED_IDLE thread runs only when nothing else
 * wants its CPU, so on a busy machine it answers in milliseconds (uring-run
 * --busy).  Set on the main thread before any other starts, so that every
 * serving thread inherits it.
 */
static int idle_policy(void)
{
	struct sched_param sp = { 0 };

	return sched_setscheduler(0, SCHED_IDLE, &sp);
}

static void on_signal(int sig)
{
	(void)sig;
	umount2(g_mountpoint, MNT_DETACH);   /* the connection ends, the loops see it */
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("uring: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return 1;
}

static void fill_attr(const struct server *s, uint64_t ino, struct fuse_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->ino = ino;
	a->blksize = 4096;
	if (ino == FUSE_ROOT_ID) {
		a->mode = S_IFDIR | 0755;
		a->nlink = 2;
		return;
	}
	a->mode = S_IFREG | 0444;
	a->nlink = 1;
	a->size = ino == INO_BIG ? s->big_size : SMALL_SIZE;
	a->blocks = (a->size + 511) / 512;
}

static uint64_t timeout_of(uint64_t ino)
{
	return ino == INO_U ? 0 : CACHED_SECS;
}

static void name_of(uint64_t ino, char name[8])
{
	if (ino == INO_U)
		strcpy(name, "u");
	else if (ino == INO_BIG)
		strcpy(name, "big");
	else
		snprintf(name, 8, "s%03u", (unsigned)(ino - 2));
}

static uint64_t ino_of(const char *name)
{
	char *end;
	unsigned long n;

	if (!strcmp(name, "u"))
		return INO_U;
	if (!strcmp(name, "big"))
		return INO_BIG;
	if (name[0] != 's' || strlen(name) != 4)
		return 0;
	n = strtoul(name + 1, &end, 10);
	return *end || n >= SMALL_FILES ? 0 : 2 + n;
}

/* Size of an op's fixed header: what /dev/fuse puts before its other
 * arguments and what the ring puts in op_in. */
static size_t op_header_size(uint32_t opcode)
{
	switch (opcode) {
	case FUSE_GETATTR: return sizeof(struct fuse_getattr_in);
	case FUSE_OPEN:
	case FUSE_OPENDIR: return sizeof(struct fuse_open_in);
	case FUSE_READ:
	case FUSE_READDIR: return sizeof(struct fuse_read_in);
	case FUSE_RELEASE:
	case FUSE_RELEASEDIR: return sizeof(struct fuse_release_in);
	case FUSE_FLUSH: return sizeof(struct fuse_flush_in);
	case FUSE_GETXATTR:
	case FUSE_LISTXATTR: return sizeof(struct fuse_getxattr_in);
	case FUSE_ACCESS: return sizeof(struct fuse_access_in);
	case FUSE_INTERRUPT: return sizeof(struct fuse_interrupt_in);
	case FUSE_FORGET: return sizeof(struct fuse_forget_in);
	case FUSE_BATCH_FORGET: return sizeof(struct fuse_batch_forget_in);
	default: return 0;
	}
}

/* The root's entries from index off on, as many as fit in size bytes */
static size_t readdir_fill(uint64_t off, char *out, size_t size)
{
	size_t used = 0;

	for (uint64_t i = off; i < 2 + SMALL_FILES + 2; i++) {
		char name[8];
		struct fuse_dirent *d = (struct fuse_dirent *)(out + used);
		uint64_t ino;
		size_t len;

		if (i == 0) {
			strcpy(name, ".");
			ino = FUSE_ROOT_ID;
		} else if (i == 1) {
			strcpy(name, "..");
			ino = FUSE_ROOT_ID;
		} else {
			ino = i;       /* entries 2.. are inodes 2.. */
			name_of(ino, name);
		}
		len = strlen(name);
		if (used + FUSE_DIRENT_ALIGN(FUSE_NAME_OFFSET + len) > size)
			break;
		d->ino = ino;
		d->off = i + 1;
		d->namelen = (uint32_t)len;
		d->type = i < 2 ? DT_DIR : DT_REG;
		memcpy(d->name, name, len);
		memset(d->name + len, 0, FUSE_DIRENT_ALIGN(FUSE_NAME_OFFSET + len) - FUSE_NAME_OFFSET - len);
		used += FUSE_DIRENT_ALIGN(FUSE_NAME_OFFSET + len);
	}
	return used;
}

/*
 * Answer one request (not INIT).  arg is the op's fixed header, payload its
 * other arguments.  Returns the reply's length (its bytes at *ret_out, in
 * scratch or in the served data), NO_REPLY, or -errno.
 */
static ssize_t handle(const struct server *s, const struct fuse_in_header *h,
                      const void *arg, const char *payload, size_t paylen,
                      char *scratch, const void **ret_out)
{
	uint64_t ino = h->nodeid;

	*ret_out = scratch;
	if (ino < FUSE_ROOT_ID || ino > INO_MAX)
		return h->opcode == FUSE_FORGET || h->opcode == FUSE_BATCH_FORGET ||
		       h->opcode == FUSE_INTERRUPT ? NO_REPLY : -ENOENT;

	switch (h->opcode) {
	case FUSE_LOOKUP: {
		struct fuse_entry_out *e = (struct fuse_entry_out *)scratch;
		char name[16];
		uint64_t child;

		if (ino != FUSE_ROOT_ID)
			return -ENOTDIR;
		if (paylen == 0 || paylen > sizeof(name))
			return -ENOENT;
		memcpy(name, payload, paylen);
		name[paylen - 1] = 0;
		child = ino_of(name);
		if (!child)
			return -ENOENT;
		memset(e, 0, sizeof(*e));
		e->nodeid = child;
		e->generation = 1;
		e->entry_valid = e->attr_valid = timeout_of(child);
		fill_attr(s, child, &e->attr);
		return sizeof(*e);
	}
	case FUSE_GETATTR: {
		struct fuse_attr_out *a = (struct fuse_attr_out *)scratch;

		memset(a, 0, sizeof(*a));
		a->attr_valid = timeout_of(ino);
		fill_attr(s, ino, &a->attr);
		return sizeof(*a);
	}
	case FUSE_OPEN:
	case FUSE_OPENDIR: {
		struct fuse_open_out *o = (struct fuse_open_out *)scratch;

		if ((h->opcode == FUSE_OPEN) != (ino != FUSE_ROOT_ID))
			return h->opcode == FUSE_OPEN ? -EISDIR : -ENOTDIR;
		memset(o, 0, sizeof(*o));
		o->open_flags = h->opcode == FUSE_OPEN ? FOPEN_KEEP_CACHE : 0;
		return sizeof(*o);
	}
	case FUSE_READ: {
		const struct fuse_read_in *r = arg;
		const char *data = ino == INO_BIG ? s->big : s->small;
		size_t size = ino == INO_BIG ? s->big_size : SMALL_SIZE;
		size_t n;

		if (ino == FUSE_ROOT_ID)
			return -EISDIR;
		if (r->offset >= size)
			return 0;
		n = size - r->offset < r->size ? size - r->offset : r->size;
		if (n > MAX_WRITE)
			n = MAX_WRITE;
		*ret_out = data + r->offset;
		return (ssize_t)n;
	}
	case FUSE_READDIR: {
		const struct fuse_read_in *r = arg;
		size_t size = r->size < MAX_WRITE ? r->size : MAX_WRITE;

		if (ino != FUSE_ROOT_ID)
			return -ENOTDIR;
		return (ssize_t)readdir_fill(r->offset, scratch, size);
	}
	case FUSE_RELEASE:
	case FUSE_RELEASEDIR:
	case FUSE_FLUSH:
	case FUSE_ACCESS:
	case FUSE_DESTROY:
		return 0;
	case FUSE_FORGET:
	case FUSE_BATCH_FORGET:
	case FUSE_INTERRUPT:
		/* nothing to forget; every request is answered at once, so an
		 * interrupt has nothing to stop */
		return NO_REPLY;
	case FUSE_STATFS: {
		struct fuse_statfs_out *st = (struct fuse_statfs_out *)scratch;

		memset(st, 0, sizeof(*st));
		st->st.bsize = st->st.frsize = 4096;
		st->st.blocks = (s->big_size + SMALL_FILES * SMALL_SIZE) / 4096 + 2;
		st->st.files = INO_MAX;
		st->st.namelen = 255;
		return sizeof(*st);
	}
	case FUSE_GETXATTR:
		return -ENODATA;
	case FUSE_LISTXATTR: {
		const struct fuse_getxattr_in *g = arg;
		struct fuse_getxattr_out *go = (struct fuse_getxattr_out *)scratch;

		if (g->size)
			return 0;       /* no names */
		memset(go, 0, sizeof(*go));
		return sizeof(*go);
	}
	default:
		return -ENOSYS;
	}
}

static int dev_reply(const struct server *s, uint64_t unique, ssize_t r, const void *out)
{
	struct fuse_out_header oh = { .unique = unique };
	struct iovec iov[2] = { { &oh, sizeof(oh) }, { (void *)out, r > 0 ? (size_t)r : 0 } };

	oh.error = r < 0 ? (int32_t)r : 0;
	oh.len = (uint32_t)(sizeof(oh) + iov[1].iov_len);
	if (writev(s->fd, iov, r > 0 ? 2 : 1) < 0 && errno != ENOENT)
		return -errno;  /* ENOENT: the request was interrupted meanwhile */
	return 0;
}

static ssize_t init_reply(const struct server *s, const struct fuse_init_in *in, size_t inlen,
                          struct fuse_init_out *out)
{
	uint64_t offered = in->flags;

	if (in->major != 7)
		return -EPROTO;
	if (inlen >= sizeof(*in) && (in->flags & FUSE_INIT_EXT))
		offered |= (uint64_t)in->flags2 << 32;
	if (s->uring && !(offered & URING_FUSE_OVER_IO_URING))
		return -EOPNOTSUPP;
	memset(out, 0, sizeof(*out));
	out->major = 7;
	out->minor = in->minor < 42 ? in->minor : 42;
	out->max_readahead = in->max_readahead;
	out->flags = (uint32_t)(offered & (FUSE_INIT_EXT | FUSE_MAX_PAGES | FUSE_PARALLEL_DIROPS));
	if (s->uring)
		out->flags2 = (uint32_t)(URING_FUSE_OVER_IO_URING >> 32);
	out->max_background = 16;
	out->congestion_threshold = 12;
	out->max_write = MAX_WRITE;
	out->time_gran = 1;
	out->max_pages = MAX_PAGES;
	return in->minor < 23 ? 24 : (ssize_t)sizeof(*out);
}

struct queue {
	struct server *srv;
	unsigned qid;
	pthread_t thread;
	struct io_uring ring;
	struct uring_req_header *hdr;   /* QUEUE_DEPTH headers */
	char *payload;                  /* QUEUE_DEPTH buffers of MAX_WRITE */
	char *scratch;
	struct iovec iov[QUEUE_DEPTH][2];
	int err;                        /* -errno of the setup, for main */
	int ring_made;                  /* ring set up: exit it at the end */
	unsigned live;                  /* entries registered and not yet ended */
	unsigned long served;           /* requests answered on this ring */
	pthread_mutex_t *lock;
	pthread_cond_t *cond;
	unsigned *registered;           /* queues done with setup, under lock */
};

static void queue_cmd(struct queue *q, struct io_uring_sqe *sqe, unsigned op, unsigned ent,
                      uint64_t commit_id)
{
	struct uring_cmd_req *c = (struct uring_cmd_req *)sqe->cmd;

	io_uring_prep_rw(IORING_OP_URING_CMD, sqe, q->srv->fd,
	                 op == URING_CMD_REGISTER ? q->iov[ent] : NULL,
	                 op == URING_CMD_REGISTER ? 2 : 0, 0);
	sqe->cmd_op = op;       /* shares the off field prep_rw cleared */
	memset(sqe->cmd, 0, 80);
	c->commit_id = commit_id;
	c->qid = (uint16_t)q->qid;
	io_uring_sqe_set_data64(sqe, ent);
}

/* Pin, make the ring, register QUEUE_DEPTH entries on queue qid. */
static int queue_setup(struct queue *q)
{
	struct io_uring_params p = { .flags = IORING_SETUP_SQE128 | IORING_SETUP_SINGLE_ISSUER |
	                                      IORING_SETUP_DEFER_TASKRUN };
	cpu_set_t set;
	struct io_uring_cqe *cqe;
	int r;

	CPU_ZERO(&set);
	CPU_SET(q->qid, &set);
	/* an offline CPU's queue must still be registered; it is served unpinned */
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	r = io_uring_queue_init_params(2 * QUEUE_DEPTH, &q->ring, &p);
	if (r < 0)
		return r;
	q->ring_made = 1;
	/* aligned_alloc wants a size that is a multiple of the alignment */
	q->hdr = aligned_alloc(4096, (QUEUE_DEPTH * sizeof(*q->hdr) + 4095) & ~(size_t)4095);
	q->payload = aligned_alloc(4096, (size_t)QUEUE_DEPTH * MAX_WRITE);
	q->scratch = aligned_alloc(4096, MAX_WRITE);
	if (!q->hdr || !q->payload || !q->scratch)
		return -ENOMEM;
	for (unsigned i = 0; i < QUEUE_DEPTH; i++) {
		q->iov[i][0] = (struct iovec){ &q->hdr[i], sizeof(q->hdr[i]) };
		q->iov[i][1] = (struct iovec){ q->payload + (size_t)i * MAX_WRITE, MAX_WRITE };
		queue_cmd(q, io_uring_get_sqe(&q->ring), URING_CMD_REGISTER, i, 0);
	}
	r = io_uring_submit(&q->ring);
	if (r < 0)
		return r;
	q->live = (unsigned)r;
	/* REGISTER is handled inside submit: a refusal is already a CQE */
	if (io_uring_peek_cqe(&q->ring, &cqe) == 0 && cqe->res < 0)
		return cqe->res;
	return 0;
}

static void *queue_main(void *arg)
{
	struct queue *q = arg;

	q->err = queue_setup(q);
	pthread_mutex_lock(q->lock);
	(*q->registered)++;
	pthread_cond_signal(q->cond);
	pthread_mutex_unlock(q->lock);

	/* after a failed setup too: the entries registered before it complete
	 * with an error once main has ended the connection */
	while (q->live) {
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		int r = io_uring_submit_and_wait(&q->ring, 1);

		if (r < 0 && r != -EINTR)
			break;
		io_uring_for_each_cqe(&q->ring, head, cqe) {
			unsigned ent = (unsigned)cqe->user_data;
			struct uring_req_header *h = &q->hdr[ent];
			char *payload = q->payload + (size_t)ent * MAX_WRITE;
			const struct fuse_in_header *in = (const struct fuse_in_header *)h->in_out;
			struct fuse_out_header *oh = (struct fuse_out_header *)h->in_out;
			uint64_t unique, commit_id;
			const void *out;
			ssize_t n;

			seen++;
			if (cqe->res < 0) {     /* refused, or the connection is gone */
				q->live--;
				continue;
			}
			unique = in->unique;
			commit_id = h->ent.commit_id;
			n = handle(q->srv, in, h->op_in, payload, h->ent.payload_sz, q->scratch, &out);
			if (n == NO_REPLY)
				n = -ENOSYS;    /* every ring request wants an answer */
			if (n > 0 && out != payload)
				memcpy(payload, out, (size_t)n);
			memset(oh, 0, sizeof(*oh));
			oh->unique = unique;
			oh->error = n < 0 ? (int32_t)n : 0;
			oh->len = (uint32_t)(sizeof(*oh) + (n > 0 ? n : 0));
			h->ent.payload_sz = n > 0 ? (uint32_t)n : 0;
			q->served++;
			queue_cmd(q, io_uring_get_sqe(&q->ring), URING_CMD_COMMIT_AND_FETCH, ent, commit_id);
		}
		io_uring_cq_advance(&q->ring, seen);
	}
	if (q->ring_made)
		io_uring_queue_exit(&q->ring);
	free(q->hdr);
	free(q->payload);
	free(q->scratch);
	return NULL;
}

static unsigned possible_cpus(void)
{
	char buf[64] = "";
	FILE *f = fopen("/sys/devices/system/cpu/possible", "r");
	char *p;

	if (f) {
		if (!fgets(buf, sizeof(buf), f))
			buf[0] = 0;
		fclose(f);
	}
	/* "0-N" or "0": the kernel's queue count is the highest id plus one */
	p = strrchr(buf, '-');
	p = p ? p + 1 : buf;
	return *p ? (unsigned)strtoul(p, NULL, 10) + 1 : (unsigned)sysconf(_SC_NPROCESSORS_CONF);
}

static int start_queues(struct server *s, struct queue **ret)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
	static unsigned registered;
	struct queue *qs = calloc(s->nqueues, sizeof(*qs));

	*ret = qs;
	if (!qs)
		return -ENOMEM;
	for (unsigned i = 0; i < s->nqueues; i++) {
		qs[i] = (struct queue){ .srv = s, .qid = i, .lock = &lock, .cond = &cond,
		                        .registered = &registered };
		if (pthread_create(&qs[i].thread, NULL, queue_main, &qs[i]))
			return -EAGAIN;
	}
	pthread_mutex_lock(&lock);
	while (registered < s->nqueues)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	for (unsigned i = 0; i < s->nqueues; i++)
		if (qs[i].err < 0)
			return qs[i].err;
	return 0;
}

/* A copy of process PID's descriptor FD: the same open file, so for
 * /dev/fuse the same connection. */
static int take_fd(int pid, int fd)
{
	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0), r;

	if (pidfd < 0)
		return -1;
	r = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
	close(pidfd);
	return r;
}

#define NOTIFY_RESEND 7         /* FUSE_NOTIFY_RESEND, uapi 7.40 */

/* Have the kernel put the requests read over /dev/fuse and not answered back
 * on /dev/fuse (those held by ring entries it does not touch). */
static int notify_resend(int fd)
{
	struct fuse_out_header oh = { .len = sizeof(oh), .error = NOTIFY_RESEND };

	return write(fd, &oh, sizeof(oh)) == sizeof(oh) ? 0 : -1;
}

static int serve(int argc, char **argv)
{
	struct server s = { .fd = -1 };
	struct queue *qs = NULL;
	struct sigaction sa = { .sa_handler = on_signal };
	char *buf = NULL, *scratch = NULL, opts[128];
	int src, rc = 1, started = 0;
	ssize_t r;
	unsigned long served = 0;       /* requests answered over /dev/fuse */
	struct stat st;
	const char *adopt = NULL;       /* --adopt=PID:FD */
	int mode = 0, a;

	for (a = 1; a < argc && !strncmp(argv[a], "--", 2); a++) {
		if (!strcmp(argv[a], "--dev") || !strcmp(argv[a], "--uring")) {
			mode = 1;
			s.uring = !strcmp(argv[a], "--uring");
		} else if (!strcmp(argv[a], "--idle")) {
			s.idle = 1;
		} else if (!strncmp(argv[a], "--adopt=", 8) && strchr(argv[a], ':')) {
			adopt = argv[a] + 8;
		} else {
			mode = 0;
			break;
		}
	}
	if (!mode || argc - a != 2)
		return fail("usage: uring serve --dev|--uring [--idle] [--adopt=PID:FD] FILE MOUNTPOINT"), 2;
	argv += a - 1;
	g_mountpoint = argv[2];
	if (s.idle && idle_policy() < 0)
		return fail("cannot set SCHED_IDLE: %s", strerror(errno));
	src = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (src < 0 || fstat(src, &st) < 0 || !S_ISREG(st.st_mode)) {
		fail("'%s': not a readable regular file", argv[1]);
		goto out;
	}
	s.big_size = (size_t)st.st_size;
	s.big = malloc(s.big_size + 1);
	for (size_t got = 0; s.big && got < s.big_size;) {
		ssize_t n = pread(src, (char *)s.big + got, s.big_size - got, (off_t)got);

		if (n <= 0) {
			fail("'%s': read failed", argv[1]);
			goto out;
		}
		got += (size_t)n;
	}
	close(src);
	src = -1;
	for (size_t i = 0; i < SMALL_SIZE; i++)
		s.small[i] = (char)('a' + i % 26);
	s.nqueues = possible_cpus();
	buf = aligned_alloc(4096, DEV_BUF);
	scratch = aligned_alloc(4096, MAX_WRITE);
	if (!s.big || !buf || !scratch) {
		fail("out of memory");
		goto out;
	}

	if (adopt) {
		/* a successor: the connection is set up and INIT long answered; have
		 * the kernel resend what the dead server had read, then serve */
		s.fd = take_fd(atoi(adopt), atoi(strchr(adopt, ':') + 1));
		if (s.fd < 0 || notify_resend(s.fd) < 0) {
			fail("--adopt=%s: %s", adopt, strerror(errno));
			goto out;
		}
		rc = 0;
		if (s.uring && (r = start_queues(&s, &qs)) < 0) {
			fail("io_uring queue setup failed: %s", strerror((int)-r));
			rc = 1;
		}
		started = 1;
		printf("ready\n");
		fflush(stdout);
		goto serve;
	}
	s.fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (s.fd < 0) {
		fail("/dev/fuse: %s", strerror(errno));
		goto out;
	}
	snprintf(opts, sizeof(opts), "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", s.fd);
	if (mount("uringbench", g_mountpoint, "fuse.uringbench", MS_NOSUID | MS_NODEV | MS_RDONLY,
	          opts) < 0) {
		fail("cannot mount on '%s': %s", g_mountpoint, strerror(errno));
		goto out;
	}
	rc = 0;
serve:
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	while (!rc) {
		const struct fuse_in_header *h = (const struct fuse_in_header *)buf;
		ssize_t n = read(s.fd, buf, DEV_BUF);
		const void *out;
		size_t hs;

		if (n < 0 && (errno == EINTR || errno == ENOENT || errno == EAGAIN))
			continue;
		if (n < 0 && errno == ENODEV)
			break;          /* unmounted */
		if (n < (ssize_t)sizeof(*h) || (size_t)n < h->len) {
			rc = fail("short read from /dev/fuse: %s", n < 0 ? strerror(errno) : "truncated");
			break;
		}
		if (h->opcode == FUSE_INIT) {
			struct fuse_init_out io;

			r = init_reply(&s, (const void *)(h + 1), h->len - sizeof(*h), &io);
			if (dev_reply(&s, h->unique, r, &io) < 0 || r < 0) {
				rc = fail(r == -EOPNOTSUPP ? "unavailable: the kernel did not offer"
				                             " FUSE_OVER_IO_URING (fuse enable_uring off?)"
				                           : "INIT failed");
				break;
			}
			if (s.uring) {
				r = start_queues(&s, &qs);
				if (r < 0) {
					/* io_uring off (kernel.io_uring_disabled), or
					 * enable_uring turned off since INIT */
					rc = fail("%sio_uring queue setup failed: %s",
					          r == -EPERM || r == -ENOSYS || r == -EOPNOTSUPP ?
					          "unavailable: " : "", strerror((int)-r));
					break;
				}
			}
			started = 1;
			printf("ready\n");
			fflush(stdout);
			continue;
		}
		if (!started)
			continue;
		hs = op_header_size(h->opcode);
		r = handle(&s, h, h + 1, (const char *)(h + 1) + hs,
		           h->len - sizeof(*h) >= hs ? h->len - sizeof(*h) - hs : 0, scratch, &out);
		served++;
		if (r != NO_REPLY && dev_reply(&s, h->unique, r, out) == -ENODEV)
			break;
	}
	if (rc)
		umount2(g_mountpoint, MNT_DETACH);
	/* the connection's end completes every ring entry with an error */
	fprintf(stderr, "uring: served /dev/fuse %lu", served);
	if (qs)
		for (unsigned i = 0; i < s.nqueues; i++)
			if (qs[i].thread) {
				pthread_join(qs[i].thread, NULL);
				fprintf(stderr, ", queue %u %lu", i, qs[i].served);
			}
	fputc('\n', stderr);
out:
	if (src >= 0)
		close(src);
	if (s.fd >= 0)
		close(s.fd);
	free(qs);
	free(scratch);
	free(buf);
	free((char *)s.big);
	return rc;
}

/* ---- the measuring client ---- */

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* How often the scheduler moved this process to another CPU: where idle
 * CPUs halt, each move is a wake-up of a halted one, and with io_uring it
 * sends the next request to another CPU's queue. */
static long migrations(void)
{
	char line[256];
	long n = -1;
	FILE *f = fopen("/proc/self/sched", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "se.nr_migrations", 16))
			n = strtol(strchr(line, ':') ? strchr(line, ':') + 1 : line, NULL, 10);
	fclose(f);
	return n;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int read_block(int fd, char *buf, off_t block, const char *path)
{
	ssize_t n = pread(fd, buf, 4096, block * 4096);

	if (n == 4096)
		return 0;
	return n < 0 ? fail("'%s': %s", path, strerror(errno))
	             : fail("'%s': read %zd of 4096 bytes", path, n);
}

/* One pass over the small files: open, read 4 KiB, close each. */
static int warm_pass(const char *mnt, char *buf)
{
	char path[4096];

	for (unsigned i = 0; i < SMALL_FILES; i++) {
		int fd;

		snprintf(path, sizeof(path), "%s/s%03u", mnt, i);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || read(fd, buf, SMALL_SIZE) != SMALL_SIZE)
			return fail("'%s': %s", path, fd < 0 ? strerror(errno) : "short read");
		close(fd);
	}
	return 0;
}

/* open+close of one cached file, or stat of the uncached one, COUNT times */
static int load_loop(const char *mnt, int is_open, long count)
{
	char path[4096];
	double t0 = 0;

	snprintf(path, sizeof(path), "%s/%s", mnt, is_open ? "s000" : "u");
	for (long i = -count / 10; i < count; i++) {
		struct stat st;

		if (i == 0)
			t0 = now_us();
		if (is_open) {
			int fd = open(path, O_RDONLY | O_CLOEXEC);

			if (fd < 0)
				return fail("'%s': %s", path, strerror(errno));
			close(fd);
		} else if (stat(path, &st) < 0) {
			return fail("'%s': %s", path, strerror(errno));
		}
	}
	printf("us_per_op=%.3f migrations=%ld\n", (now_us() - t0) / (double)count, migrations());
	return 0;
}

/* COUNT O_DIRECT reads of 4 KiB at random offsets of /big, each timed */
static int load_pread(const char *mnt, long count, char *buf)
{
	double *lat = malloc((size_t)count * sizeof(*lat)), t0;
	char path[4096];
	unsigned seed = 12345;
	struct stat st;
	int fd, r = 1;
	off_t blocks;

	snprintf(path, sizeof(path), "%s/big", mnt);
	fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (!lat || fd < 0 || fstat(fd, &st) < 0 || st.st_size < 4096) {
		fail("'%s': cannot open for O_DIRECT reads of 4 KiB", path);
		goto out;
	}
	blocks = st.st_size / 4096;
	for (long i = 0; i < count / 10; i++)
		if (read_block(fd, buf, (off_t)(rand_r(&seed) % blocks), path))
			goto out;
	t0 = now_us();
	for (long i = 0; i < count; i++) {
		double a = now_us();

		if (read_block(fd, buf, (off_t)(rand_r(&seed) % blocks), path))
			goto out;
		lat[i] = now_us() - a;
	}
	t0 = now_us() - t0;
	qsort(lat, (size_t)count, sizeof(*lat), cmp_double);
	printf("p50_us=%.3f p90_us=%.3f p99_us=%.3f iops=%.0f migrations=%ld\n", lat[count / 2],
	       lat[(size_t)((double)count * 0.9)], lat[(size_t)((double)count * 0.99)],
	       (double)count / (t0 / 1e6), migrations());
	r = 0;
out:
	if (fd >= 0)
		close(fd);
	free(lat);
	return r;
}

/* COUNT passes of open, read 4 KiB, close over the small files, after one
 * untimed pass that fills the page cache (keep_cache holds it) */
static int load_warm(const char *mnt, long count, char *buf)
{
	double t0;

	if (warm_pass(mnt, buf))
		return 1;
	t0 = now_us();
	for (long p = 0; p < count; p++)
		if (warm_pass(mnt, buf))
			return 1;
	printf("us_per_op=%.3f migrations=%ld\n", (now_us() - t0) / (double)(count * SMALL_FILES),
	       migrations());
	return 0;
}

static int load(int argc, char **argv)
{
	const char *test;
	char *buf;
	long count;
	int r;

	if (argc != 4 || (count = strtol(argv[3], NULL, 10)) <= 0)
		return fail("usage: uring load open|stat|pread|warm MOUNTPOINT COUNT"), 2;
	test = argv[1];
	if (!strcmp(test, "open") || !strcmp(test, "stat"))
		return load_loop(argv[2], !strcmp(test, "open"), count);
	if (strcmp(test, "pread") && strcmp(test, "warm"))
		return fail("unknown test '%s'", test), 2;
	buf = aligned_alloc(4096, 4096);        /* O_DIRECT wants it aligned */
	if (!buf)
		return fail("out of memory");
	r = !strcmp(test, "pread") ? load_pread(argv[2], count, buf) : load_warm(argv[2], count, buf);
	free(buf);
	return r;
}

/* ---- a second holder of a server's /dev/fuse descriptor ---- */

/*
 * uring hold PID FD: take a copy of PID's descriptor FD (pidfd_getfd, so the
 * same open /dev/fuse, not a new connection) and keep the connection alive
 * when PID dies, as the node's holder does; then act on lines of stdin:
 * "resend" writes FUSE_NOTIFY_RESEND on it, "read" waits up to 2 s for a
 * request on it and names it.  Answers one line per command on stdout.
 */
static int hold(int argc, char **argv)
{
	char line[64], *buf;
	int fd;

	if (argc != 3)
		return fail("usage: uring hold PID FD"), 2;
	fd = take_fd(atoi(argv[1]), atoi(argv[2]));
	if (fd < 0)
		return fail("cannot take descriptor %s of process %s: %s", argv[2], argv[1],
		            strerror(errno));
	buf = malloc(DEV_BUF);
	if (!buf)
		return fail("out of memory");
	printf("held %d\n", fd);
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		if (!strcmp(line, "resend\n")) {
			if (notify_resend(fd) < 0)
				printf("resend failed: %s\n", strerror(errno));
			else
				printf("resend sent\n");
		} else if (!strcmp(line, "read\n")) {
			struct pollfd pfd = { .fd = fd, .events = POLLIN };
			const struct fuse_in_header *h = (const struct fuse_in_header *)buf;
			ssize_t n = poll(&pfd, 1, 2000) == 1 ? read(fd, buf, DEV_BUF) : 0;

			if (n >= (ssize_t)sizeof(*h))
				printf("request opcode %u unique 0x%llx\n", h->opcode,
				       (unsigned long long)h->unique);
			else
				printf("no request in 2 s\n");
		} else {
			printf("unknown command\n");
		}
		fflush(stdout);
	}
	free(buf);
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "serve"))
		return serve(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "load"))
		return load(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "hold"))
		return hold(argc - 1, argv + 1);
	fprintf(stderr, "usage: uring serve --dev|--uring [--idle] [--adopt=PID:FD] FILE MOUNTPOINT\n"
	                "       uring load open|stat|pread|warm MOUNTPOINT COUNT\n"
	                "       uring hold PID FD\n");
	return 2;
}
