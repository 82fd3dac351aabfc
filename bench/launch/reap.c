/*
 * reap.c — run a command as a child subreaper and wait for every process it
 * leaves, so that the CPU time of all of them reaches the caller's rusage.
 *
 *   reap CMD [ARG...]
 *
 * A process whose parent exits without waiting for it is reparented, and its
 * CPU time then goes to whoever reaps it: with no subreaper, the node's init,
 * out of sight of `/usr/bin/time xargs ...`.  bubblewrap's launcher leaves
 * its sandbox's pid 1 that way, so bench/launch saw only part of
 * bubblewrap's CPU per launch.  Under reap, every descendant that outlives
 * its parent is reparented to reap (PR_SET_CHILD_SUBREAPER) and reaped here,
 * and its time is in reap's children's rusage like anyone else's.
 * The exit status is CMD's (128 + signal if it was killed); 127 when CMD
 * cannot be run.  Errors: one line on stderr.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int st, status = 0;
	pid_t cmd, p;

	if (argc < 2) {
		fprintf(stderr, "reap: usage: reap CMD [ARG...]\n");
		return 2;
	}
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0) {
		fprintf(stderr, "reap: subreaper: %s\n", strerror(errno));
		return 1;
	}
	cmd = fork();
	if (cmd < 0) {
		fprintf(stderr, "reap: fork: %s\n", strerror(errno));
		return 1;
	}
	if (cmd == 0) {
		execvp(argv[1], argv + 1);
		fprintf(stderr, "reap: run '%s': %s\n", argv[1], strerror(errno));
		_exit(127);
	}
	/* Until no child is left: the command and whatever it orphaned. */
	while ((p = wait(&st)) > 0 || errno == EINTR)
		if (p == cmd)
			status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	return status;
}
