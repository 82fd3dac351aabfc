/*
 * loop.h — the io_uring event loop that the cache and the store backends run
 * on (one per daemon thread).
 *
 * Every operation is asynchronous: it is queued on the ring and its callback
 * runs later from loop_run_once() on the loop's thread, with the operation's
 * result (>= 0, or -errno as the kernel returned it).  Buffers and paths given
 * to an operation belong to the ring until its callback runs.  Submission is
 * batched: queued operations reach the kernel at the next loop_run_once() (or
 * loop_submit()), so a burst of reads costs one system call.
 *
 * Thread-safety: a loop is used from one thread, except loop_post() and
 * loop_stop(), which any thread may call.
 *
 * Callbacks may be NULL (fire and forget, e.g. a close nobody waits for).
 */
#ifndef LAZYROOT_LOOP_H
#define LAZYROOT_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct loop;

/* res: bytes read or written, a new fd, 0, or -errno. */
typedef void (*loop_cb)(void *ud, int res);

/* A loop with room for entries operations in one submission (rounded up to a
 * power of two; more may be in flight, they queue in user space). */
int loop_new(unsigned entries, struct loop **ret);
/* Cancels nothing: free a loop only when no operation is in flight. */
void loop_free(struct loop *l);

int loop_read(struct loop *l, int fd, void *buf, size_t len, uint64_t off, loop_cb cb, void *ud);
int loop_write(struct loop *l, int fd, const void *buf, size_t len, uint64_t off, loop_cb cb,
              void *ud);
int loop_openat(struct loop *l, int dfd, const char *path, int flags, mode_t mode, loop_cb cb,
                void *ud);
int loop_close(struct loop *l, int fd, loop_cb cb, void *ud);
/* linkat(olddfd, oldpath, newdfd, newpath, flags). */
int loop_linkat(struct loop *l, int olddfd, const char *oldpath, int newdfd, const char *newpath,
                int flags, loop_cb cb, void *ud);
/* unlinkat(dfd, path, flags). */
int loop_unlinkat(struct loop *l, int dfd, const char *path, int flags, loop_cb cb, void *ud);
/* One-shot readiness of fd for events (POLLIN, POLLOUT…); res = revents. */
int loop_poll(struct loop *l, int fd, unsigned events, loop_cb cb, void *ud);
/* loop_poll() that can be cancelled: returns an id for loop_cancel_poll(). */
int64_t loop_poll_id(struct loop *l, int fd, unsigned events, loop_cb cb, void *ud);
/* Cancel a pending poll started by loop_poll_id(); its callback runs with
 * -ECANCELED (or with the readiness it reached first).  Closing the fd does not
 * end a poll: the ring holds the file until the poll completes or is cancelled. */
int loop_cancel_poll(struct loop *l, int64_t id);
/* A timer: cb(ud, 0) after ns nanoseconds.  Returns an id for loop_cancel_timer. */
int64_t loop_timer(struct loop *l, uint64_t ns, loop_cb cb, void *ud);
/* Cancel a pending timer; its callback runs with -ECANCELED. */
int loop_cancel_timer(struct loop *l, int64_t id);

/* Run fn(ud) on the loop's thread soon.  Safe from any thread. */
int loop_post(struct loop *l, void (*fn)(void *ud), void *ud);

/* Run fn(ud) from the next loop_run_once() on the loop's thread, without a
 * system call: for completions that are known at once but must not run from
 * inside the call that started them.  Loop thread only. */
int loop_defer(struct loop *l, void (*fn)(void *ud), void *ud);

/* Send queued operations to the kernel now. */
int loop_submit(struct loop *l);
/* Run the callbacks of completed operations, waiting for one first when
 * wait is set and something is in flight.  Returns the number run or -errno. */
int loop_run_once(struct loop *l, bool wait);
/* Run until loop_stop() is called. */
int loop_run(struct loop *l);
void loop_stop(struct loop *l);
/* Operations queued or in flight. */
unsigned loop_pending(const struct loop *l);

#endif
