/*
 * attack.h — what the attack programs share (attack.c, nodeattack.c): one
 * "ok - ..." or "FAIL - ..." line per attempt, a count of failures for the
 * exit status, and the check that refuses to act outside a sandbox.
 */
#ifndef LAZYROOT_TESTS_SANDBOX_ATTACK_H
#define LAZYROOT_TESTS_SANDBOX_ATTACK_H

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int failures;

static inline void result(bool ok, const char *what, int err)
{
	printf("%s - %s (%s)\n", ok ? "ok" : "FAIL", what, err ? strerror(err) : "succeeded");
	if (!ok)
		failures++;
}

/* r is a syscall's return; the attempt must fail with want. */
static inline void expect_errno(long r, int want, const char *what)
{
	int e = r < 0 ? errno : 0;

	result(r < 0 && e == want, what, e);
}

/* The attempt must fail, with any error. */
static inline void expect_fail(long r, const char *what)
{
	int e = r < 0 ? errno : 0;

	result(r < 0, what, e);
}

/* A write refused by Landlock (EACCES) or by a read-only mount (EROFS). */
static inline void expect_write_refused(long r, const char *what)
{
	int e = r < 0 ? errno : 0;

	result(r < 0 && (e == EACCES || e == EROFS), what, e);
}

static inline void refuse_on_host(const char *host_inode)
{
	struct stat st;

	if (stat("/proc/self/ns/pid", &st) < 0 || strtoull(host_inode, NULL, 10) == 0 ||
	    (unsigned long long)st.st_ino == strtoull(host_inode, NULL, 10) || getpid() > 64) {
		fprintf(stderr, "attack: not inside a sandbox's pid namespace; refusing to act\n");
		exit(3);
	}
}

#endif
