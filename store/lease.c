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
 * (clock rates, not readings, need to agree).
 */
#include <pthread.h>
#include <sys/random.h>
#include <time.h>

#include "store/store-internal.h"

struct store_lease {
	struct store *s;          /* its own handle: used under lock only */
	char key[96];
	char *body;
	unsigned ttl;
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;                /* protected by lock */
	uint64_t renewed_ns;      /* send time of the last renewal that succeeded; atomic */
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

/* One renewal; the caller holds the lock. */
static int renew_locked(struct store_lease *l)
{
	uint64_t sent = now_ns();
	int r = store_put_sync(l->s, l->key, l->body, strlen(l->body));

	if (r == 0)
		__atomic_store_n(&l->renewed_ns, sent, __ATOMIC_RELEASE);
	return r;
}

static void *renew_main(void *arg)
{
	struct store_lease *l = arg;

	pthread_mutex_lock(&l->lock);
	while (!l->stop) {
		struct timespec ts;
		uint64_t step = (uint64_t)l->ttl * 1000000000ULL / 4;
		uint64_t since = now_ns() - __atomic_load_n(&l->renewed_ns, __ATOMIC_ACQUIRE);

		/* on time, or at once again after a failed renewal (a second apart) */
		if (since < step) {
			clock_gettime(CLOCK_REALTIME, &ts);
			step -= since;
			ts.tv_sec += (time_t)(step / 1000000000ULL);
			ts.tv_nsec += (long)(step % 1000000000ULL);
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&l->cond, &l->lock, &ts);
			continue;
		}
		if (renew_locked(l) < 0) {
			log_msg(LOG_WARN, "store '%s': renewing lease %s failed; retrying",
			        store_url(l->s), l->key);
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1;
			pthread_cond_timedwait(&l->cond, &l->lock, &ts);
		}
	}
	pthread_mutex_unlock(&l->lock);
	return NULL;
}

static void lease_free(struct store_lease *l)
{
	store_free(l->s);
	free(l->body);
	pthread_mutex_destroy(&l->lock);
	pthread_cond_destroy(&l->cond);
	free(l);
}

int store_lease_take(const struct store *s, const char *kind, unsigned ttl,
                     struct store_lease **ret)
{
	struct store_lease *l = calloc(1, sizeof(*l));
	uint8_t rnd[8];
	char hex[17], host[64] = "";
	const char *url = store_url(s);
	int r;

	if (!l)
		return -ENOMEM;
	pthread_mutex_init(&l->lock, NULL);
	pthread_cond_init(&l->cond, NULL);
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
	snprintf(l->key, sizeof(l->key), "leases/%s-%u-%s", kind, l->ttl, hex);
	gethostname(host, sizeof(host) - 1);
	if (asprintf(&l->body, "{\"kind\":\"%s\",\"host\":\"%s\",\"pid\":%d,\"ttl\":%u}\n", kind,
	             host, (int)getpid(), l->ttl) < 0) {
		l->body = NULL;
		lease_free(l);
		return -ENOMEM;
	}
	/* a plain PUT: the random name is the lease's own, and a store whose
	 * server cannot MOVE (nginx with dav_methods PUT alone) still takes builds */
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

bool store_lease_live(const struct store_lease *l)
{
	uint64_t since = now_ns() - __atomic_load_n(&l->renewed_ns, __ATOMIC_ACQUIRE);

	return since < (uint64_t)l->ttl * 1000000000ULL / 2;
}

int store_lease_check(struct store_lease *l)
{
	pthread_mutex_lock(&l->lock);
	(void)renew_locked(l);
	pthread_mutex_unlock(&l->lock);
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

void store_lease_end(struct store_lease *l)
{
	int r;

	if (!l)
		return;
	if (l->started) {
		pthread_mutex_lock(&l->lock);
		l->stop = true;
		pthread_cond_signal(&l->cond);
		pthread_mutex_unlock(&l->lock);
		pthread_join(l->thread, NULL);
	}
	/* quietly: a lease that stays lapses after ttl, and a store that cannot
	 * delete cannot be collected either */
	r = store_delete_sync(l->s, l->key);
	if (r < 0 && r != -ENOENT)
		log_msg(LOG_INFO, "store '%s': deleting lease %s: %s (it lapses in %us)",
		        store_url(l->s), l->key, strerror(-r), l->ttl);
	lease_free(l);
}
