/*
 * loop.c — the io_uring event loop (liburing).
 *
 * Every operation is a heap-allocated struct loop_op whose address rides in
 * the SQE's user_data; the completion finds it there, runs its callback and
 * frees it.  Operations are prepared into the SQ ring at once when there is
 * room and reach the kernel in one io_uring_submit() per loop_run_once(), so
 * a burst of requests costs one system call.
 *
 * Invariants:
 *  - at most `cap` operations are owned by the kernel (prepared or submitted,
 *    not yet completed): cap is the CQ ring size, so completions never
 *    overflow the CQ ring; anything past that waits in the user-space queue
 *    (q_head..q_tail) in FIFO order and is prepared as completions free room;
 *  - an operation is in exactly one place: the user-space queue, the kernel,
 *    or the ready list (completions known without the kernel: loop_defer(),
 *    timers cancelled before they were submitted);
 *  - callbacks run only from loop_run_once(), never from inside the call that
 *    started the operation;
 *  - loop_post() is the only entry point used by other threads: it appends to
 *    a mutex-protected list and writes an eventfd that a POLL_ADD on the ring
 *    watches; the loop drains the list on the loop thread.
 */
#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>

#include "lib/lib.h"
#include "lib/loop.h"

enum op_kind {
	OP_READ,
	OP_WRITE,
	OP_OPENAT,
	OP_CLOSE,
	OP_LINKAT,
	OP_UNLINKAT,
	OP_POLL,
	OP_TIMER,
	OP_TIMER_REMOVE,  /* internal: cancels a submitted timer */
	OP_POLL_REMOVE,   /* internal: cancels a submitted cancellable poll */
	OP_WAKE,          /* internal: the eventfd poll of loop_post() */
	OP_DEFER,         /* never reaches the kernel */
};

struct loop_op {
	struct loop_op *next;             /* user-space queue or ready list */
	struct loop_op *tprev, *tnext;    /* live timers and cancellable polls */
	enum op_kind kind;
	bool submitted;                   /* prepared into the SQ ring */
	bool cancelled;
	loop_cb cb;
	void (*fn)(void *ud);             /* OP_DEFER */
	void *ud;
	int res;                          /* ready list: the result to deliver */
	int fd, fd2, flags;
	mode_t mode;
	unsigned events;
	void *buf;
	size_t len;
	uint64_t off;
	const char *path, *path2;
	struct loop_op *target;           /* OP_TIMER_REMOVE, OP_POLL_REMOVE */
	int64_t id;                       /* OP_TIMER, cancellable OP_POLL (0: not cancellable) */
	struct __kernel_timespec ts;      /* OP_TIMER: read by the kernel at submission */
};

struct post {
	struct post *next;
	void (*fn)(void *ud);
	void *ud;
};

struct loop {
	struct io_uring ring;
	unsigned cap;                     /* operations the kernel may own at once */
	unsigned owned;                   /* operations the kernel owns (wake poll included) */
	struct loop_op *q_head, *q_tail;  /* waiting for room in the ring */
	unsigned queued;
	struct loop_op *r_head, *r_tail;  /* ready: run at the next loop_run_once() */
	unsigned ready;
	struct loop_op *timers;           /* live timers and cancellable polls (doubly linked) */
	int64_t next_timer_id;
	struct loop_op wake;              /* embedded: lives as long as the loop */
	bool wake_armed;
	int efd;
	/* loop_post() state, shared with other threads */
	pthread_mutex_t post_lock;
	struct post *p_head, *p_tail;     /* protected by post_lock */
	unsigned posted;                  /* atomic: posts not yet run */
	int stop;                         /* atomic */
};

static void wake_rearm(struct loop *l);

int loop_new(unsigned entries, struct loop **ret)
{
	struct loop *l;
	struct io_uring_params p = { 0 };
	int r;

	if (entries < 4)
		entries = 4;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	r = io_uring_queue_init_params(entries, &l->ring, &p);
	if (r < 0) {
		free(l);
		return r;
	}
	l->cap = p.cq_entries;
	l->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (l->efd < 0) {
		r = -errno;
		io_uring_queue_exit(&l->ring);
		free(l);
		return r;
	}
	pthread_mutex_init(&l->post_lock, NULL);
	l->wake.kind = OP_WAKE;
	l->wake.fd = l->efd;
	l->wake.events = POLLIN;
	l->next_timer_id = 1;
	wake_rearm(l);
	*ret = l;
	return 0;
}

void loop_free(struct loop *l)
{
	if (!l)
		return;
	/* Tearing the ring down makes the kernel drop whatever it still owns;
	 * the caller promised that is only the wake poll. */
	io_uring_queue_exit(&l->ring);
	while (l->q_head) {
		struct loop_op *op = l->q_head;

		l->q_head = op->next;
		if (op != &l->wake)
			free(op);
	}
	while (l->r_head) {
		struct loop_op *op = l->r_head;

		l->r_head = op->next;
		free(op);
	}
	while (l->p_head) {
		struct post *p = l->p_head;

		l->p_head = p->next;
		free(p);
	}
	close(l->efd);
	pthread_mutex_destroy(&l->post_lock);
	free(l);
}

/* Put op into the SQ ring if the kernel may own one more operation and the
 * ring has a free entry.  Cost: no system call. */
static bool op_prep(struct loop *l, struct loop_op *op)
{
	struct io_uring_sqe *sqe;

	if (l->owned >= l->cap)
		return false;
	sqe = io_uring_get_sqe(&l->ring);
	if (!sqe)
		return false;
	switch (op->kind) {
	case OP_READ:
		io_uring_prep_read(sqe, op->fd, op->buf, (unsigned)op->len, op->off);
		break;
	case OP_WRITE:
		io_uring_prep_write(sqe, op->fd, op->buf, (unsigned)op->len, op->off);
		break;
	case OP_OPENAT:
		io_uring_prep_openat(sqe, op->fd, op->path, op->flags, op->mode);
		break;
	case OP_CLOSE:
		io_uring_prep_close(sqe, op->fd);
		break;
	case OP_LINKAT:
		io_uring_prep_linkat(sqe, op->fd, op->path, op->fd2, op->path2, op->flags);
		break;
	case OP_UNLINKAT:
		io_uring_prep_unlinkat(sqe, op->fd, op->path, op->flags);
		break;
	case OP_POLL:
	case OP_WAKE:
		io_uring_prep_poll_add(sqe, op->fd, op->events);
		break;
	case OP_TIMER:
		io_uring_prep_timeout(sqe, &op->ts, 0, 0);
		break;
	case OP_TIMER_REMOVE:
		io_uring_prep_timeout_remove(sqe, (uint64_t)(uintptr_t)op->target, 0);
		break;
	case OP_POLL_REMOVE:
		io_uring_prep_poll_remove(sqe, (uint64_t)(uintptr_t)op->target);
		break;
	case OP_DEFER:
		break;
	}
	io_uring_sqe_set_data(sqe, op);
	op->submitted = true;
	l->owned++;
	return true;
}

static void queue_append(struct loop *l, struct loop_op *op)
{
	op->next = NULL;
	if (l->q_tail)
		l->q_tail->next = op;
	else
		l->q_head = op;
	l->q_tail = op;
	l->queued++;
}

/* FIFO: a new operation waits behind older queued ones. */
static void op_start(struct loop *l, struct loop_op *op)
{
	if (l->q_head || !op_prep(l, op))
		queue_append(l, op);
}

static void ready_append(struct loop *l, struct loop_op *op, int res)
{
	op->res = res;
	op->next = NULL;
	if (l->r_tail)
		l->r_tail->next = op;
	else
		l->r_head = op;
	l->r_tail = op;
	l->ready++;
}

static struct loop_op *op_new(enum op_kind kind, loop_cb cb, void *ud)
{
	struct loop_op *op = calloc(1, sizeof(*op));

	if (op) {
		op->kind = kind;
		op->cb = cb;
		op->ud = ud;
	}
	return op;
}

static void wake_rearm(struct loop *l)
{
	l->wake.submitted = false;
	l->wake_armed = true;
	op_start(l, &l->wake);
}

int loop_read(struct loop *l, int fd, void *buf, size_t len, uint64_t off, loop_cb cb, void *ud)
{
	struct loop_op *op = op_new(OP_READ, cb, ud);

	if (!op)
		return -ENOMEM;
	op->fd = fd;
	op->buf = buf;
	op->len = MIN(len, (size_t)INT32_MAX);
	op->off = off;
	op_start(l, op);
	return 0;
}

int loop_write(struct loop *l, int fd, const void *buf, size_t len, uint64_t off, loop_cb cb,
               void *ud)
{
	struct loop_op *op = op_new(OP_WRITE, cb, ud);

	if (!op)
		return -ENOMEM;
	op->fd = fd;
	op->buf = (void *)buf;
	op->len = MIN(len, (size_t)INT32_MAX);
	op->off = off;
	op_start(l, op);
	return 0;
}

int loop_openat(struct loop *l, int dfd, const char *path, int flags, mode_t mode, loop_cb cb,
                void *ud)
{
	struct loop_op *op = op_new(OP_OPENAT, cb, ud);

	if (!op)
		return -ENOMEM;
	op->fd = dfd;
	op->path = path;
	op->flags = flags;
	op->mode = mode;
	op_start(l, op);
	return 0;
}

int loop_close(struct loop *l, int fd, loop_cb cb, void *ud)
{
	struct loop_op *op = op_new(OP_CLOSE, cb, ud);

	if (!op)
		return -ENOMEM;
	op->fd = fd;
	op_start(l, op);
	return 0;
}

int loop_linkat(struct loop *l, int olddfd, const char *oldpath, int newdfd, const char *newpath,
                int flags, loop_cb cb, void *ud)
{
	struct loop_op *op = op_new(OP_LINKAT, cb, ud);

	if (!op)
		return -ENOMEM;
	op->fd = olddfd;
	op->path = oldpath;
	op->fd2 = newdfd;
	op->path2 = newpath;
	op->flags = flags;
	op_start(l, op);
	return 0;
}

int loop_unlinkat(struct loop *l, int dfd, const char *path, int flags, loop_cb cb, void *ud)
{
	struct loop_op *op = op_new(OP_UNLINKAT, cb, ud);

	if (!op)
		return -ENOMEM;
	op->fd = dfd;
	op->path = path;
	op->flags = flags;
	op_start(l, op);
	return 0;
}

int loop_poll(struct loop *l, int fd, unsigned events, loop_cb cb, void *ud)
{
	struct loop_op *op = op_new(OP_POLL, cb, ud);

	if (!op)
		return -ENOMEM;
	op->fd = fd;
	op->events = events;
	op_start(l, op);
	return 0;
}

/* Give op an id and put it on the list of operations that can be cancelled. */
static int64_t live_add(struct loop *l, struct loop_op *op)
{
	op->id = l->next_timer_id++;
	op->tnext = l->timers;
	if (l->timers)
		l->timers->tprev = op;
	l->timers = op;
	op_start(l, op);
	return op->id;
}

int64_t loop_poll_id(struct loop *l, int fd, unsigned events, loop_cb cb, void *ud)
{
	struct loop_op *op = op_new(OP_POLL, cb, ud);

	if (!op)
		return -ENOMEM;
	op->fd = fd;
	op->events = events;
	return live_add(l, op);
}

int64_t loop_timer(struct loop *l, uint64_t ns, loop_cb cb, void *ud)
{
	struct loop_op *op = op_new(OP_TIMER, cb, ud);

	if (!op)
		return -ENOMEM;
	op->ts.tv_sec = (long long)(ns / 1000000000ULL);
	op->ts.tv_nsec = (long long)(ns % 1000000000ULL);
	return live_add(l, op);
}

static void timer_unlink(struct loop *l, struct loop_op *op)
{
	if (op->tprev)
		op->tprev->tnext = op->tnext;
	else
		l->timers = op->tnext;
	if (op->tnext)
		op->tnext->tprev = op->tprev;
	op->tprev = op->tnext = NULL;
}

/* Cost: O(live timers and cancellable polls); daemons keep a handful. */
static int cancel_live(struct loop *l, int64_t id, enum op_kind kind)
{
	struct loop_op *op, *rm;

	for (op = l->timers; op && op->id != id; op = op->tnext)
		;
	if (!op || op->kind != kind)
		return -ENOENT;
	if (op->cancelled)
		return -EALREADY;
	op->cancelled = true;
	if (!op->submitted) {
		/* still in the user-space queue: take it out, complete it here */
		struct loop_op **pp = &l->q_head, *prev = NULL;

		while (*pp != op) {
			prev = *pp;
			pp = &(*pp)->next;
		}
		*pp = op->next;
		if (l->q_tail == op)
			l->q_tail = prev;
		l->queued--;
		timer_unlink(l, op);
		ready_append(l, op, -ECANCELED);
		return 0;
	}
	rm = op_new(kind == OP_TIMER ? OP_TIMER_REMOVE : OP_POLL_REMOVE, NULL, NULL);
	if (!rm)
		return -ENOMEM;
	rm->target = op;
	op_start(l, rm);
	return 0;
}

int loop_cancel_timer(struct loop *l, int64_t id)
{
	return cancel_live(l, id, OP_TIMER);
}

int loop_cancel_poll(struct loop *l, int64_t id)
{
	return cancel_live(l, id, OP_POLL);
}

int loop_defer(struct loop *l, void (*fn)(void *ud), void *ud)
{
	struct loop_op *op = op_new(OP_DEFER, NULL, ud);

	if (!op)
		return -ENOMEM;
	op->fn = fn;
	ready_append(l, op, 0);
	return 0;
}

int loop_post(struct loop *l, void (*fn)(void *ud), void *ud)
{
	struct post *p = calloc(1, sizeof(*p));
	uint64_t one = 1;

	if (!p)
		return -ENOMEM;
	p->fn = fn;
	p->ud = ud;
	pthread_mutex_lock(&l->post_lock);
	if (l->p_tail)
		l->p_tail->next = p;
	else
		l->p_head = p;
	l->p_tail = p;
	__atomic_add_fetch(&l->posted, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&l->post_lock);
	/* EAGAIN means the counter is already non-zero: the loop will wake. */
	if (write(l->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		return -errno;
	return 0;
}

void loop_stop(struct loop *l)
{
	uint64_t one = 1;

	__atomic_store_n(&l->stop, 1, __ATOMIC_RELEASE);
	if (write(l->efd, &one, sizeof(one)) < 0) {
		/* counter already non-zero: the loop wakes anyway */
	}
}

/* Run what other threads posted, in order. */
static int run_posts(struct loop *l)
{
	struct post *p;
	uint64_t v;
	int n = 0;

	if (read(l->efd, &v, sizeof(v)) < 0) {
		/* EAGAIN: nothing signalled since the last drain */
	}
	pthread_mutex_lock(&l->post_lock);
	p = l->p_head;
	l->p_head = l->p_tail = NULL;
	pthread_mutex_unlock(&l->post_lock);
	while (p) {
		struct post *next = p->next;

		p->fn(p->ud);
		__atomic_sub_fetch(&l->posted, 1, __ATOMIC_RELEASE);
		free(p);
		p = next;
		n++;
	}
	return n;
}

int loop_submit(struct loop *l)
{
	for (;;) {
		int r;

		while (l->q_head && op_prep(l, l->q_head)) {
			l->q_head = l->q_head->next;
			if (!l->q_head)
				l->q_tail = NULL;
			l->queued--;
		}
		if (!io_uring_sq_ready(&l->ring))
			return 0;
		r = io_uring_submit(&l->ring);
		if (r < 0 && r != -EAGAIN && r != -EBUSY && r != -EINTR)
			return r;
		/* stop when the queue is empty, the kernel owns all it may, or
		 * the kernel took nothing (it is short of resources: retry at
		 * the next turn, after completions) */
		if (!l->q_head || l->owned >= l->cap || r <= 0)
			return 0;
	}
}

/* Deliver one completion.  The op leaves the loop's books before its
 * callback runs, so the callback may start new operations freely. */
static int dispatch(struct loop *l, struct loop_op *op, int res)
{
	switch (op->kind) {
	case OP_WAKE:
		l->wake_armed = false;
		wake_rearm(l);
		return run_posts(l);
	case OP_TIMER_REMOVE:
	case OP_POLL_REMOVE:
		free(op);
		return 0;
	case OP_TIMER:
	case OP_POLL:
		if (op->kind == OP_TIMER && res == -ETIME)
			res = 0;
		if (op->tprev || op->tnext || l->timers == op)
			timer_unlink(l, op);
		break;
	case OP_DEFER:
		op->fn(op->ud);
		free(op);
		return 1;
	default:
		break;
	}
	if (op->cb)
		op->cb(op->ud, res);
	free(op);
	return 1;
}

static int reap(struct loop *l)
{
	struct io_uring_cqe *cqe;
	int n = 0;

	while (io_uring_peek_cqe(&l->ring, &cqe) == 0) {
		struct loop_op *op = io_uring_cqe_get_data(cqe);
		int res = cqe->res;

		io_uring_cqe_seen(&l->ring, cqe);
		l->owned--;
		n += dispatch(l, op, res);
	}
	return n;
}

/* Run the ready list as it is now: what its callbacks add waits a turn. */
static int run_ready(struct loop *l)
{
	struct loop_op *op = l->r_head;
	unsigned count = l->ready;
	int n = 0;

	l->r_head = l->r_tail = NULL;
	l->ready = 0;
	while (count--) {
		struct loop_op *next = op->next;

		n += dispatch(l, op, op->res);
		op = next;
	}
	return n;
}

static int run_once(struct loop *l, bool wait, bool idle_wait)
{
	int r, n;

	r = loop_submit(l);
	if (r < 0)
		return r;
	n = reap(l) + run_ready(l);
	if (n == 0 && wait && !l->ready && !__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE) &&
	    (idle_wait || loop_pending(l))) {
		struct io_uring_cqe *cqe;

		r = loop_submit(l);
		if (r < 0)
			return r;
		r = io_uring_wait_cqe(&l->ring, &cqe);
		if (r < 0 && r != -EINTR && r != -ETIME)
			return r;
		n = reap(l);
	}
	return n;
}

int loop_run_once(struct loop *l, bool wait)
{
	return run_once(l, wait, false);
}

int loop_run(struct loop *l)
{
	int r = 0;

	while (r >= 0 && !__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE))
		r = run_once(l, true, true);
	/* re-arm: a later loop_run() runs until the next loop_stop() */
	__atomic_store_n(&l->stop, 0, __ATOMIC_RELEASE);
	return r < 0 ? r : 0;
}

unsigned loop_pending(const struct loop *l)
{
	unsigned kernel = l->owned - (l->wake_armed && l->wake.submitted ? 1 : 0);
	unsigned queued = l->queued - (l->wake_armed && !l->wake.submitted ? 1 : 0);

	return kernel + queued + l->ready + __atomic_load_n(&l->posted, __ATOMIC_ACQUIRE);
}
