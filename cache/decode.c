/*
 * decode.c — decoding and verifying fetched chunks on worker threads, so that
 * the loop's thread (which also drives the store's transfers and answers FUSE
 * requests) does not spend its time in zstd and the hash: in a whole-image
 * prefetch over HTTP, decoding was a third of the process's CPU time, all of
 * it on the loop's thread.
 *
 * Jobs go to the workers through a mutex-protected queue; finished jobs come
 * back on a second list and an eventfd that the loop polls while any job is
 * out, so that loop_pending() counts them and a caller draining the loop
 * waits for them.  Each job's done() runs on the loop's thread.  The poll's
 * callback carries a small token of its own (as http.c does), so that the
 * decoder can be freed while a cancelled poll is still on the ring.
 */
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <zstd.h>

#include "cache/cache-internal.h"
#include "lib/loop.h"

#define DECODE_MAX_THREADS 4

struct decode_watch {
	struct decoder *d;             /* NULL once the decoder is gone */
	int64_t id;
};

struct decoder {
	struct loop *loop;             /* borrowed */
	int efd;
	unsigned nthreads;
	pthread_t threads[DECODE_MAX_THREADS];
	unsigned out;                  /* loop thread: jobs submitted, done() not yet run */
	struct decode_watch *watch;    /* loop thread: the armed poll, or NULL */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct decode_job *q_head, *q_tail;   /* protected by lock: to decode */
	struct decode_job *q_urgent;          /* protected by lock: the last urgent job queued */
	struct decode_job *done_head;         /* protected by lock: decoded (any order) */
	bool stop;                            /* protected by lock */
};

static void *worker_main(void *arg)
{
	struct decoder *d = arg;
	ZSTD_DCtx *dctx = ZSTD_createDCtx();   /* NULL: chunk_decode does without */

	pthread_mutex_lock(&d->lock);
	for (;;) {
		struct decode_job *j;
		uint64_t one = 1;

		while (!d->q_head && !d->stop)
			pthread_cond_wait(&d->cond, &d->lock);
		if (!d->q_head)
			break;
		j = d->q_head;
		d->q_head = j->next;
		if (!d->q_head)
			d->q_tail = NULL;
		if (d->q_urgent == j)
			d->q_urgent = NULL;
		pthread_mutex_unlock(&d->lock);
		j->res = chunk_decode(dctx, j->name, j->flags, j->size, j->in, j->inlen, j->out);
		pthread_mutex_lock(&d->lock);
		j->next = d->done_head;
		d->done_head = j;
		if (write(d->efd, &one, sizeof(one)) < 0) {
			/* the counter cannot overflow in practice; the poll sees it set */
		}
	}
	pthread_mutex_unlock(&d->lock);
	ZSTD_freeDCtx(dctx);
	return NULL;
}

static void arm(struct decoder *d);

static void watch_cb(void *ud, int res)
{
	struct decode_watch *w = ud;
	struct decoder *d = w->d;
	struct decode_job *j;
	uint64_t v;

	free(w);
	if (!d)
		return;
	d->watch = NULL;
	if (read(d->efd, &v, sizeof(v)) < 0) {
		/* EAGAIN: a wakeup read by an earlier turn; the list says what is done */
	}
	pthread_mutex_lock(&d->lock);
	j = d->done_head;
	d->done_head = NULL;
	pthread_mutex_unlock(&d->lock);
	while (j) {
		struct decode_job *next = j->next;

		d->out--;
		j->done(j);
		j = next;
	}
	(void)res;
	arm(d);
}

/* Keep one poll on the eventfd while jobs are out. */
static void arm(struct decoder *d)
{
	struct decode_watch *w;

	if (d->watch || !d->out)
		return;
	w = calloc(1, sizeof(*w));
	if (!w)
		return;   /* retried at the next submit; done jobs wait on the list */
	w->d = d;
	w->id = loop_poll_id(d->loop, d->efd, POLLIN, watch_cb, w);
	if (w->id < 0) {
		free(w);
		return;
	}
	d->watch = w;
}

int decoder_new(struct loop *loop, unsigned threads, struct decoder **ret)
{
	struct decoder *d;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	if (!threads)
		threads = cpus > 0 ? (unsigned)cpus : 1;
	threads = MIN(threads, DECODE_MAX_THREADS);
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->loop = loop;
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->cond, NULL);
	d->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (d->efd < 0) {
		int r = -errno;

		decoder_free(d);
		return r;
	}
	for (unsigned i = 0; i < threads; i++) {
		int r = pthread_create(&d->threads[i], NULL, worker_main, d);

		if (r) {
			decoder_free(d);
			return -r;
		}
		d->nthreads++;
	}
	*ret = d;
	return 0;
}

void decoder_submit(struct decoder *d, struct decode_job *j)
{
	j->next = NULL;
	d->out++;
	pthread_mutex_lock(&d->lock);
	if (j->urgent) {
		/* behind the urgent jobs already queued, ahead of the others */
		struct decode_job **pp = d->q_urgent ? &d->q_urgent->next : &d->q_head;

		j->next = *pp;
		*pp = j;
		if (!j->next)
			d->q_tail = j;
		d->q_urgent = j;
	} else {
		if (d->q_tail)
			d->q_tail->next = j;
		else
			d->q_head = j;
		d->q_tail = j;
	}
	pthread_cond_signal(&d->cond);
	pthread_mutex_unlock(&d->lock);
	arm(d);
}

void decoder_free(struct decoder *d)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	d->stop = true;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
	for (unsigned i = 0; i < d->nthreads; i++)
		pthread_join(d->threads[i], NULL);
	if (d->watch) {
		d->watch->d = NULL;
		loop_cancel_poll(d->loop, d->watch->id);
	}
	if (d->efd >= 0)
		close(d->efd);
	pthread_cond_destroy(&d->cond);
	pthread_mutex_destroy(&d->lock);
	free(d);
}
