/*
 * lease.c — leases in the store (store.h, store/GC.md): an object
 * "leases/<kind>-<ttl>-<random>" that a builder, a copy or a collector
 * writes before it starts and deletes when it is done, renewed by a thread
 * of its own every ttl/4 seconds.
 *
 * The holder's own measure of "still live" is its monotonic clock since it
 * sent its last renewal that succeeded: the renewal's mtime in the store is no
 * earlier than that send, so while less than ttl/2 passed, a collector reading
 * the store's clock still counts the lease live for at least another ttl/2
 * (clock rates, not readings, need to agree).  Its waits are on the
 * monotonic clock too: a step of the wall clock neither delays a renewal nor
 * brings one forward.
 *
 * A reader lease ("read") names the index it holds in its key,
 * "leases/read-<ttl>-<random>-<index>", so that a collector learns what every
 * mount holds from its one listing of leases/, with no request per lease.
 */
#include <pthread.h>
#include <sys/random.h>
#include <time.h>

#include "lib/json.h"
#include "store/store-internal.h"

struct store_lease {
	struct store *s;          /* its own handle: used under io only */
	char key[96];
	char *body;
	unsigned ttl;
	pthread_t thread;
	bool started;
	pthread_mutex_t io;       /* held for each request on s */
	pthread_mutex_t lock;     /* never held across a request */
	pthread_cond_t cond;
	bool stop;                /* protected by lock */
	bool release;             /* protected by lock: the thread deletes and frees */
	uint64_t renewed_ns;      /* send time of the last renewal that succeeded; atomic */
	/* renewed by a renewer (reader leases) instead of a thread of its own;
	 * the fields below are protected by rn->lock */
	struct store_renewer *rn;
	struct store_lease *next;
	uint64_t due_ns;          /* next renewal (0: the first write, at once) */
	unsigned fails;           /* renewals failed in a row */
	bool abandon;             /* the renewer frees it, leaving the object */
};

/* One thread renewing many leases: a node holds one for each mount, and a
 * thread each would make the worker's threads grow with its mounts. */
struct store_renewer {
	pthread_mutex_t lock;     /* never held across a request */
	pthread_cond_t cond;      /* on the monotonic clock */
	pthread_t thread;
	bool started, stop;       /* stop: protected by lock */
	struct store_lease *head; /* protected by lock */
};

int store_lease_parse(const char *key, char *kind, size_t kindlen, unsigned *ret_ttl)
{
	const char *k, *d1, *d2;
	char *end;
	unsigned long ttl;

	if (strncmp(key, "leases/", 7))
		return -EINVAL;
	k = key + 7;
	d1 = strchr(k, '-');
	d2 = d1 ? strchr(d1 + 1, '-') : NULL;
	if (!d1 || !d2 || d1 == k || (size_t)(d1 - k) >= kindlen || !d2[1])
		return -EINVAL;
	ttl = strtoul(d1 + 1, &end, 10);
	if (end != d2 || ttl == 0 || ttl > 86400 * 7)
		return -EINVAL;
	memcpy(kind, k, (size_t)(d1 - k));
	kind[d1 - k] = 0;
	*ret_ttl = (unsigned)ttl;
	return 0;
}

/* The index a reader lease's key names, into hex: 0, or -EINVAL when key is
 * not a reader lease's. */
int store_lease_held_index(const char *key, char hex[HASH_HEX_SIZE])
{
	char kind[16];
	unsigned ttl;
	const char *h;

	if (store_lease_parse(key, kind, sizeof(kind), &ttl) < 0 || strcmp(kind, "read"))
		return -EINVAL;
	h = strrchr(key, '-');
	if (!h || strlen(h + 1) != HASH_HEX_SIZE - 1 || !store_is_index_name(h + 1))
		return -EINVAL;
	memcpy(hex, h + 1, HASH_HEX_SIZE);
	return 0;
}

bool store_lease_entry_live(const struct store_entry *e, int64_t t, char *kind, size_t kindlen)
{
	unsigned ttl;

	if (store_lease_parse(e->key, kind, kindlen, &ttl) < 0)
		return false;
	/* +1: the clock and mtimes may be whole seconds */
	return t - e->mtime < (int64_t)ttl + 1;
}

/* The deadline delay_ns from now on the monotonic clock (the condition
 * variable's). */
static void deadline_in(struct timespec *ts, uint64_t delay_ns)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += (time_t)(delay_ns / 1000000000ULL);
	ts->tv_nsec += (long)(delay_ns % 1000000000ULL);
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* One renewal. */
static int renew(struct store_lease *l)
{
	uint64_t sent = now_ns();
	int r;

	pthread_mutex_lock(&l->io);
	r = store_put_sync(l->s, l->key, l->body, strlen(l->body));
	pthread_mutex_unlock(&l->io);
	if (r == 0)
		__atomic_store_n(&l->renewed_ns, sent, __ATOMIC_RELEASE);
	return r;
}

static void lease_free(struct store_lease *l)
{
	store_free(l->s);
	free(l->body);
	pthread_mutex_destroy(&l->io);
	pthread_mutex_destroy(&l->lock);
	pthread_cond_destroy(&l->cond);
	free(l);
}

/* Delete the lease object, quietly: a lease that stays lapses after ttl, and
 * a store that cannot delete cannot be collected either. */
static void lease_delete(struct store_lease *l)
{
	int r;

	pthread_mutex_lock(&l->io);
	r = store_delete_sync(l->s, l->key);
	pthread_mutex_unlock(&l->io);
	if (r < 0 && r != -ENOENT)
		log_msg(LOG_INFO, "store '%s': deleting lease %s: %s (it lapses in %us)",
		        store_url(l->s), l->key, strerror(-r), l->ttl);
}

static void *renew_main(void *arg)
{
	struct store_lease *l = arg;
	unsigned fails = 0;
	bool release;

	pthread_mutex_lock(&l->lock);
	while (!l->stop) {
		struct timespec ts;
		uint64_t step = (uint64_t)l->ttl * 1000000000ULL / 4;
		uint64_t since = now_ns() - __atomic_load_n(&l->renewed_ns, __ATOMIC_ACQUIRE);
		int r;

		if (since < step) {
			deadline_in(&ts, step - since);
			pthread_cond_timedwait(&l->cond, &l->lock, &ts);
			continue;
		}
		pthread_mutex_unlock(&l->lock);
		r = renew(l);
		/* one line when renewals start failing and one when they work
		 * again, not one per attempt: a store that is down for an hour
		 * would otherwise log every few seconds for each lease */
		if (r < 0 && !fails++)
			log_msg(LOG_WARN, "store '%s': renewing lease %s: %s; retrying",
			        store_url(l->s), l->key, strerror(-r));
		else if (r == 0 && fails) {
			log_msg(LOG_INFO, "store '%s': lease %s renewed after %u failure(s)",
			        store_url(l->s), l->key, fails);
			fails = 0;
		}
		pthread_mutex_lock(&l->lock);
		if (r < 0 && !l->stop) {
			/* again a second later, doubling up to the renewal period */
			uint64_t wait = 1000000000ULL << MIN(fails - 1, 20U);

			deadline_in(&ts, MIN(wait, step));
			pthread_cond_timedwait(&l->cond, &l->lock, &ts);
		}
	}
	release = l->release;
	pthread_mutex_unlock(&l->lock);
	if (release) {
		lease_delete(l);
		lease_free(l);
	}
	return NULL;
}

/* A lease of kind; index: the index a reader lease holds, else NULL; rn:
 * the renewer that writes it at once and renews it (the caller does not wait
 * for the store), else NULL: written before this returns and renewed by a
 * thread of its own. */
static int lease_take(const struct store *s, const char *kind, unsigned ttl, const char *index,
                      struct store_renewer *rn, struct store_lease **ret)
{
	struct store_lease *l = calloc(1, sizeof(*l));
	pthread_condattr_t ca;
	uint8_t rnd[8];
	char hex[17], host[64] = "";
	const char *url = store_url(s);
	struct buf body = BUF_INIT;
	int r;

	if (!l)
		return -ENOMEM;
	pthread_mutex_init(&l->io, NULL);
	pthread_mutex_init(&l->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&l->cond, &ca);
	pthread_condattr_destroy(&ca);
	l->ttl = ttl ? ttl : STORE_LEASE_TTL_DEFAULT;
	/* a list of mirrors puts and deletes at its first: the lease goes there too */
	r = store_reopen(s, &l->s);
	if (r < 0) {
		lease_free(l);
		return r;
	}
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
		uint64_t t = now_ns() ^ ((uint64_t)getpid() << 40);

		memcpy(rnd, &t, sizeof(rnd));
	}
	hex_encode(rnd, sizeof(rnd), hex);
	snprintf(l->key, sizeof(l->key), "leases/%s-%u-%s%s%s", kind, l->ttl, hex,
	         index ? "-" : "", index ? index : "");
	gethostname(host, sizeof(host) - 1);
	r = json_pack_buf(&body, "{s:s, s:s, s:i, s:I, s:s*}", "kind", kind, "host", host, "pid",
	                  (int)getpid(), "ttl", (json_int_t)l->ttl, "index", index);
	r = r ?: buf_append(&body, "\n", 2);   /* and a NUL: the body is a C string */
	if (r < 0) {
		buf_free(&body);
		lease_free(l);
		return r;
	}
	l->body = (char *)body.data;
	if (rn) {
		pthread_mutex_lock(&rn->lock);
		l->rn = rn;
		l->next = rn->head;
		rn->head = l;
		*ret = l;
		pthread_cond_signal(&rn->cond);
		pthread_mutex_unlock(&rn->lock);
		return 0;
	}
	/* a plain PUT: the random name is the lease's own, and a store whose
	 * server cannot MOVE (nginx with dav_methods PUT alone) still takes
	 * builds */
	r = store_put_sync(l->s, l->key, l->body, strlen(l->body));
	if (r < 0) {
		log_errno(r, "store '%s': writing lease %s", url, l->key);
		lease_free(l);
		return r;
	}
	l->renewed_ns = now_ns();
	r = pthread_create(&l->thread, NULL, renew_main, l);
	if (r != 0) {
		(void)store_delete_sync(l->s, l->key);
		lease_free(l);
		return -r;
	}
	l->started = true;
	*ret = l;
	return 0;
}

int store_lease_take(const struct store *s, const char *kind, unsigned ttl,
                     struct store_lease **ret)
{
	return lease_take(s, kind, ttl, NULL, NULL, ret);
}

int store_lease_take_read(struct store_renewer *rn, const struct store *s, unsigned ttl,
                          const char *index, struct store_lease **ret)
{
	if (!store_is_index_name(index))
		return -EINVAL;
	return lease_take(s, "read", ttl, index, rn, ret);
}

bool store_lease_live(const struct store_lease *l)
{
	uint64_t since = now_ns() - __atomic_load_n(&l->renewed_ns, __ATOMIC_ACQUIRE);

	return since < (uint64_t)l->ttl * 1000000000ULL / 2;
}

int store_lease_check(struct store_lease *l)
{
	(void)renew(l);
	if (!store_lease_live(l))
		return log_error(-ETIMEDOUT, "store '%s': lease %s may have lapsed (not renewed for "
		                 "%us): a collection may have moved what this one found present",
		                 store_url(l->s), l->key, l->ttl / 2);
	return 0;
}

const char *store_lease_key(const struct store_lease *l)
{
	return l->key;
}

static void stop_renewing(struct store_lease *l)
{
	if (!l->started)
		return;
	pthread_mutex_lock(&l->lock);
	l->stop = true;
	pthread_cond_signal(&l->cond);
	pthread_mutex_unlock(&l->lock);
	pthread_join(l->thread, NULL);
	l->started = false;
}

/* Hand l to its renewer to end: deleted first when del. */
static void renewer_drop(struct store_lease *l, bool del)
{
	struct store_renewer *rn = l->rn;

	pthread_mutex_lock(&rn->lock);
	if (del)
		l->release = true;
	else
		l->abandon = true;
	pthread_cond_signal(&rn->cond);
	pthread_mutex_unlock(&rn->lock);
}

void store_lease_abandon(struct store_lease *l)
{
	if (!l)
		return;
	if (l->rn) {
		renewer_drop(l, false);
		return;
	}
	stop_renewing(l);
	lease_free(l);
}

void store_lease_end(struct store_lease *l)
{
	if (!l)
		return;
	stop_renewing(l);
	lease_delete(l);
	lease_free(l);
}

void store_lease_release(struct store_lease *l)
{
	if (!l)
		return;
	if (l->rn) {
		renewer_drop(l, true);
		return;
	}
	if (!l->started) {
		store_lease_end(l);
		return;
	}
	pthread_mutex_lock(&l->lock);
	l->stop = true;
	l->release = true;
	pthread_cond_signal(&l->cond);
	pthread_mutex_unlock(&l->lock);
	pthread_detach(l->thread);
}

int store_leases_held(struct store *s, struct store_keys *ret_indexes, size_t *ret_leases)
{
	struct store_entry *e = NULL;
	size_t n = 0, leases = 0;
	int64_t t;
	int r;

	*ret_indexes = (struct store_keys){ 0 };
	*ret_leases = 0;
	r = store_now_sync(s, &t);
	if (r < 0)
		return log_errno(r, "store '%s': reading the store's clock", store_url(s));
	r = store_scan_sync(s, "leases/", &e, &n);
	if (r < 0)
		return log_errno(r, "store '%s': listing leases/", store_url(s));
	for (size_t i = 0; r == 0 && i < n; i++) {
		char kind[16], hex[HASH_HEX_SIZE];

		if (!store_lease_entry_live(&e[i], t, kind, sizeof(kind)) ||
		    store_lease_held_index(e[i].key, hex) < 0)
			continue;
		leases++;
		r = store_keys_add(ret_indexes, hex);
	}
	store_entries_free(e, n);
	if (r < 0) {
		store_keys_destroy(ret_indexes);
		return r;
	}
	store_keys_sort(ret_indexes);
	*ret_leases = leases;
	return 0;
}

/* ---- the renewer ---------------------------------------------------------------- */

static void renewer_unlink(struct store_renewer *rn, struct store_lease *l)
{
	for (struct store_lease **p = &rn->head; *p; p = &(*p)->next)
		if (*p == l) {
			*p = l->next;
			return;
		}
}

static void *renewer_main(void *arg)
{
	struct store_renewer *rn = arg;

	pthread_mutex_lock(&rn->lock);
	while (!rn->stop) {
		struct store_lease *pick = NULL;
		uint64_t now = now_ns(), step;
		bool ending;
		int r;

		/* one that ends, else the next due */
		for (struct store_lease *l = rn->head; l; l = l->next) {
			if (l->release || l->abandon) {
				pick = l;
				break;
			}
			if (!pick || l->due_ns < pick->due_ns)
				pick = l;
		}
		if (!pick) {
			pthread_cond_wait(&rn->cond, &rn->lock);
			continue;
		}
		ending = pick->release || pick->abandon;
		if (!ending && pick->due_ns > now) {
			struct timespec ts;

			deadline_in(&ts, pick->due_ns - now);
			pthread_cond_timedwait(&rn->cond, &rn->lock, &ts);
			continue;
		}
		if (ending) {
			bool del = pick->release;

			renewer_unlink(rn, pick);
			pthread_mutex_unlock(&rn->lock);
			if (del)
				lease_delete(pick);
			lease_free(pick);
			pthread_mutex_lock(&rn->lock);
			continue;
		}
		/* only this thread frees a lease: pick stays while unlocked */
		pthread_mutex_unlock(&rn->lock);
		r = renew(pick);
		if (r < 0 && !pick->fails)
			log_msg(LOG_WARN, "store '%s': writing lease %s: %s; retrying",
			        store_url(pick->s), pick->key, strerror(-r));
		else if (r == 0 && pick->fails)
			log_msg(LOG_INFO, "store '%s': lease %s written after %u failure(s)",
			        store_url(pick->s), pick->key, pick->fails);
		pthread_mutex_lock(&rn->lock);
		step = (uint64_t)pick->ttl * 1000000000ULL / 4;
		if (r == 0) {
			pick->fails = 0;
			pick->due_ns = now_ns() + step;
		} else {
			/* again a second later, doubling up to the renewal period */
			pick->fails++;
			pick->due_ns = now_ns() + MIN(1000000000ULL << MIN(pick->fails - 1, 20U), step);
		}
	}
	pthread_mutex_unlock(&rn->lock);
	return NULL;
}

int store_renewer_new(struct store_renewer **ret)
{
	struct store_renewer *rn = calloc(1, sizeof(*rn));
	pthread_condattr_t ca;
	int r;

	if (!rn)
		return -ENOMEM;
	pthread_mutex_init(&rn->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&rn->cond, &ca);
	pthread_condattr_destroy(&ca);
	r = pthread_create(&rn->thread, NULL, renewer_main, rn);
	if (r != 0) {
		pthread_mutex_destroy(&rn->lock);
		pthread_cond_destroy(&rn->cond);
		free(rn);
		return -r;
	}
	rn->started = true;
	*ret = rn;
	return 0;
}

void store_renewer_free(struct store_renewer *rn)
{
	if (!rn)
		return;
	pthread_mutex_lock(&rn->lock);
	rn->stop = true;
	pthread_cond_signal(&rn->cond);
	pthread_mutex_unlock(&rn->lock);
	pthread_join(rn->thread, NULL);
	/* released ones are deleted now; any other lapses */
	while (rn->head) {
		struct store_lease *l = rn->head;

		rn->head = l->next;
		if (l->release)
			lease_delete(l);
		lease_free(l);
	}
	pthread_mutex_destroy(&rn->lock);
	pthread_cond_destroy(&rn->cond);
	free(rn);
}
