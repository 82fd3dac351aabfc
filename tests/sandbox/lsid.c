/*
 * lsid — print "UID:GID MODE PATH" (mode in octal, type bits included) for
 * each PATH, not following a final symlink; exit 1 if any lstat failed.
 *
 * Static, so that it runs in a sandbox whose image has no tools of its own
 * (the generated every-entry-type tree): it shows which owners a sandbox
 * sees through its idmapped view of an image.
 */
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>

int main(int argc, char **argv)
{
	int status = 0;

	for (int i = 1; i < argc; i++) {
		struct stat st;

		if (lstat(argv[i], &st) < 0) {
			fprintf(stderr, "lsid: '%s': %s\n", argv[i], strerror(errno));
			status = 1;
			continue;
		}
		printf("%u:%u %o %s\n", (unsigned)st.st_uid, (unsigned)st.st_gid,
		       (unsigned)st.st_mode, argv[i]);
	}
	return status;
}
