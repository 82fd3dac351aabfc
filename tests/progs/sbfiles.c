/*
 * sbfiles.c — runs one of sandbox/files.c's transfers in a confined process,
 * for tests/integration/sandbox_files.sh.
 *
 *   sbfiles --root DIR --uid N [--proc] [--max-bytes N] [--max-entries N] OP ARGS
 *
 *   put-file PATH MODE [parents]   stdin to PATH
 *   get-file PATH                  PATH to stdout
 *   put-tar DIR                    the tar stream on stdin into DIR
 *   get-tar DIR                    DIR as a tar stream on stdout
 *   swap NAME TARGET               until killed: NAME a directory, then a symlink
 *                                  to TARGET, and back; "ready" on stdout once
 *                                  it has swapped once (a sandbox process racing
 *                                  an extraction)
 *
 * The confinement is the closest this program can come to sandbox_enter()
 * by itself: a mount namespace of its own, chroot into DIR (a scratch tree
 * whose /sb uid N owns), no supplementary groups, gid and uid N,
 * no_new_privs, no capability left.  --proc adds a pid namespace and its
 * proc at DIR/proc, whose pid 1 is left outside the chroot (below), so that
 * the tree has a magic link out to try.  What the transfers rely on is the same as
 * in a sandbox: their root is the tree's, and their uid has no rights outside
 * it.  Exit status: 0, or 1 with the transfer's one line on stderr.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/lib.h"
#include "sandbox/sandbox.h"

/* LeakSanitizer cannot stop the world of a chrooted process of an
 * unprivileged uid (it reads /proc/self/task and attaches to its threads):
 * the sanitizer build checks these transfers' leaks in test_files instead. */
const char *__lsan_default_options(void);
const char *__lsan_default_options(void)
{
	return "detect_leaks=0";
}

static void usage(void)
{
	fprintf(stderr, "usage: sbfiles --root DIR --uid N [--proc] [--max-bytes N] "
	        "[--max-entries N] put-file|get-file|put-tar|get-tar|swap ARGS\n");
	exit(2);
}

static void drop_to(uid_t uid)
{
	if (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0 ||
	    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		perror("sbfiles: drop to the test's uid");
		exit(1);
	}
}

static void confine(const char *root, uid_t uid)
{
	if (chroot(root) < 0 || chdir("/") < 0) {
		perror("sbfiles: chroot");
		exit(1);
	}
	drop_to(uid);
}

static int wait_exit(pid_t pid)
{
	int st;

	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return 1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

/* --proc: a pid namespace whose pid 1 has the test's uid, is dumpable and was
 * never chrooted, and a proc of that namespace at DIR/proc.  The transfer
 * runs in a child of that pid 1, chrooted: /proc/1/root, a magic link, then
 * leads out of the tree to the host's root, which only
 * RESOLVE_NO_MAGICLINKS keeps the transfer from following.  Returns in the
 * child; the other two exit with its status. */
static void proc_namespace(const char *root, uid_t uid)
{
	char p[4096];
	int sync[2];
	pid_t pid;

	if (unshare(CLONE_NEWPID) < 0) {
		perror("sbfiles: pid namespace");
		exit(1);
	}
	pid = fork();
	if (pid < 0)
		exit(1);
	if (pid > 0)
		exit(wait_exit(pid));
	/* the namespace goes when the test's process does */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		exit(1);
	snprintf(p, sizeof(p), "%s/proc", root);
	if (mount("proc", p, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0 || pipe(sync) < 0) {
		perror("sbfiles: mount proc");
		exit(1);
	}
	pid = fork();
	if (pid < 0)
		exit(1);
	if (pid > 0) {
		close(sync[0]);
		drop_to(uid);
		if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
			exit(1);
		close(sync[1]);   /* pid 1 is the test's uid now */
		exit(wait_exit(pid));
	}
	close(sync[1]);
	(void)!read(sync[0], p, 1);
	close(sync[0]);
}

/* The sandbox's side of a race: swap name between a directory and a symlink
 * to target, as fast as it can. */
static int swap_loop(const char *name, const char *target)
{
	char dir[4096];

	snprintf(dir, sizeof(dir), "%s.dir", name);
	(void)mkdir(dir, 0755);
	/* errors are part of the race (the extraction makes name a directory
	 * of its own at times): keep swapping */
	for (unsigned long i = 0;; i++) {
		(void)unlink(name);
		(void)rename(dir, name);
		(void)rename(name, dir);
		(void)symlink(target, name);
		if (i == 0) {
			printf("ready\n");
			fflush(stdout);
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct sandbox_files_limits lim = { 0 };
	const char *root = NULL;
	long uid = -1;
	bool proc = false;
	int i, r;

	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--root") && i + 1 < argc)
			root = argv[++i];
		else if (!strcmp(argv[i], "--uid") && i + 1 < argc)
			uid = strtol(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--proc"))
			proc = true;
		else if (!strcmp(argv[i], "--max-bytes") && i + 1 < argc)
			lim.max_bytes = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--max-entries") && i + 1 < argc)
			lim.max_entries = strtoull(argv[++i], NULL, 10);
		else
			usage();
	}
	if (!root || uid <= 0 || i >= argc)
		usage();
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		perror("sbfiles: mount namespace");
		return 1;
	}
	if (proc)
		proc_namespace(root, (uid_t)uid);
	confine(root, (uid_t)uid);
	argv += i;
	argc -= i;
	if (!strcmp(argv[0], "put-file") && (argc == 3 || argc == 4))
		r = sandbox_file_put(0, argv[1], (mode_t)strtoul(argv[2], NULL, 8),
		                     argc == 4 && !strcmp(argv[3], "parents"), &lim);
	else if (!strcmp(argv[0], "get-file") && argc == 2)
		r = sandbox_file_get(1, argv[1], &lim);
	else if (!strcmp(argv[0], "put-tar") && argc == 2)
		r = sandbox_tar_put(0, argv[1], &lim);
	else if (!strcmp(argv[0], "get-tar") && argc == 2)
		r = sandbox_tar_get(1, argv[1], &lim);
	else if (!strcmp(argv[0], "swap") && argc == 3)
		return swap_loop(argv[1], argv[2]);
	else
		usage();
	return r < 0 ? 1 : 0;
}
