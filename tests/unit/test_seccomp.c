/*
 * test_seccomp.c — the sandbox's syscall filter as built (gen/seccomp.c), loaded for real into a
 * forked child of this test, which then only checks what it may still do: the allowlist's
 * default (ENOSYS), the refusals (EPERM), the socket families and the policy field that narrows
 * them.  The parent asserts on the child's exit code, which names the first check that failed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "lib/lib.h"
#include "sandbox/sandbox-internal.h"

/* In the child, check i: the call that returned r must have failed with err
 * (0: must have succeeded); a socket it made is closed. */
static void check(int i, long r, int err)
{
	if (err ? !(r < 0 && errno == err) : r < 0)
		_exit(i);
	if (r >= 0 && i >= 20)
		close((int)r);
}

/* Load the filter for a policy with socket_families = families (NULL: the
 * default) in a child, run the checks, return the child's exit status. */
static int run_child(const char *families)
{
	pid_t pid = fork();
	int st;

	assert_true(pid >= 0);
	if (pid == 0) {
		struct sandbox *sb;
		unsigned char vec[1];
		void *m = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		bool unix_ok, inet_ok, netlink_ok;

		if (sandbox_new(&sb) < 0 || (families && sandbox_set(sb, "socket_families", families) < 0))
			_exit(100);
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || seccomp_install(sb) < 0)
			_exit(101);
		unix_ok = sb->socket_families & SANDBOX_FAMILY_UNIX;
		inet_ok = sb->socket_families & SANDBOX_FAMILY_INET;
		netlink_ok = sb->socket_families & SANDBOX_FAMILY_NETLINK;
		check(1, syscall(461 /* lsm_list_modules */, NULL, NULL, 0), ENOSYS);
		check(2, syscall(600), ENOSYS);
		check(3, syscall(SYS_modify_ldt, 0, NULL, 0), EPERM);
		check(4, syscall(467 /* open_tree_attr */, -1, "", 0, NULL, 0), EPERM);
		check(5, mincore(m, 4096, vec), EPERM);
		check(6, syscall(SYS_personality, 0x0040000ul), EPERM);
		check(7, syscall(SYS_personality, 0xfffffffful), 0);
		check(8, syscall(SYS_unshare, CLONE_NEWNS), EPERM);
		check(9, syscall(SYS_getpid), 0);
		check(20, socket(40 /* AF_VSOCK */, SOCK_STREAM, 0), EAFNOSUPPORT);
		check(21, socket(AF_INET, SOCK_DGRAM, 136 /* UDP-Lite */),
		      inet_ok ? EPROTONOSUPPORT : EAFNOSUPPORT);
		check(22, socket(AF_NETLINK, SOCK_DGRAM, 15 /* uevents */),
		      netlink_ok ? EPROTONOSUPPORT : EAFNOSUPPORT);
		check(23, socket(AF_UNIX, SOCK_STREAM, 0), unix_ok ? 0 : EAFNOSUPPORT);
		check(24, socket(AF_INET, SOCK_STREAM, 0), inet_ok ? 0 : EAFNOSUPPORT);
		check(25, socket(AF_NETLINK, SOCK_RAW, 0), netlink_ok ? 0 : EAFNOSUPPORT);
		sandbox_free(sb);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static void test_seccomp__default_policy(void **state)
{
	(void)state;
	assert_int_equal(run_child(NULL), 0);
}

static void test_seccomp__families_narrowed(void **state)
{
	(void)state;
	assert_int_equal(run_child("unix"), 0);
	assert_int_equal(run_child("inet,netlink"), 0);
	assert_int_equal(run_child("none"), 0);
}

static void test_seccomp__families_parsed(void **state)
{
	struct sandbox *sb;

	(void)state;
	assert_int_equal(sandbox_new(&sb), 0);
	assert_int_equal(sb->socket_families, SANDBOX_FAMILY_ALL);
	assert_int_equal(sandbox_set(sb, "socket_families", "inet6, unix"), 0);
	assert_int_equal(sb->socket_families, SANDBOX_FAMILY_INET6 | SANDBOX_FAMILY_UNIX);
	assert_int_equal(sandbox_set(sb, "socket_families", "none"), 0);
	assert_int_equal(sb->socket_families, 0);
	assert_int_equal(sandbox_set(sb, "socket_families", "unix,vsock"), -EINVAL);
	assert_int_equal(sandbox_set(sb, "socket_families", ""), -EINVAL);
	assert_int_equal(sb->socket_families, 0);   /* a bad value changes nothing */
	sandbox_free(sb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_seccomp__default_policy),
		cmocka_unit_test(test_seccomp__families_narrowed),
		cmocka_unit_test(test_seccomp__families_parsed),
	};

	return cmocka_run_group_tests_name("seccomp", tests, NULL, NULL);
}
