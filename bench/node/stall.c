/*
 * stall.c — a reader that never stops, for bench/node/run: 4 KiB reads with
 * O_DIRECT (each one a FUSE request, never the page cache) at random offsets
 * of FILE, one after another, until SIGTERM; then it prints every gap between
 * two completions longer than MIN_US as "START_NS END_NS" (CLOCK_REALTIME), so
 * that the caller can find the stall that holds each moment it killed the
 * worker, and the count of reads and of failed reads.
 *
 *   stall FILE MIN_US
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define GAPS_MAX 100000

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static uint64_t now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	static uint64_t gap[GAPS_MAX][2];
	uint64_t prev, reads = 0, errors = 0, min_ns;
	size_t ngaps = 0;
	struct stat st;
	void *buf;
	int fd;

	if (argc != 3) {
		fprintf(stderr, "usage: stall FILE MIN_US\n");
		return 2;
	}
	min_ns = strtoull(argv[2], NULL, 10) * 1000;
	fd = open(argv[1], O_RDONLY | O_DIRECT);
	if (fd < 0 || fstat(fd, &st) < 0 || st.st_size < 4096 ||
	    posix_memalign(&buf, 4096, 4096) != 0) {
		perror(argv[1]);
		return 1;
	}
	signal(SIGTERM, on_term);
	srand(1);
	prev = now();
	while (!stop) {
		off_t off = ((off_t)rand() % (st.st_size / 4096)) * 4096;
		uint64_t t;

		if (pread(fd, buf, 4096, off) != 4096 && errno != EINTR)
			errors++;
		reads++;
		t = now();
		if (t - prev > min_ns && ngaps < GAPS_MAX) {
			gap[ngaps][0] = prev;
			gap[ngaps][1] = t;
			ngaps++;
		}
		prev = t;
	}
	printf("reads %llu errors %llu\n", (unsigned long long)reads, (unsigned long long)errors);
	for (size_t i = 0; i < ngaps; i++)
		printf("%llu %llu\n", (unsigned long long)gap[i][0], (unsigned long long)gap[i][1]);
	return 0;
}
