/*
 * nodeattack.c — what a sandbox tries against the node's shared kernel
 * state, and what it tries to learn of the host through its own
 * descriptors, run inside a sandbox by tests/integration/sandbox_node.sh.
 * Usage (attack.h says why it refuses to act outside a sandbox):
 *
 *   nodeattack HOST_PIDNS_INODE ATTACK [ARGS...]
 *
 *   aio                 hold the node's legacy AIO events (fs.aio-max-nr)
 *   sync                sync() and syncfs() return at once; fsync of the
 *                       sandbox's own file still works
 *   memfd               run a binary that exists only in a memfd
 *   meminfo LIMIT       /proc/meminfo shows at most LIMIT bytes and does not
 *                       move when the sandbox allocates
 *   setid               root drops to another user and group, as apt does
 *   stdin HOSTPATH      fd 0 reads, and its link does not name HOSTPATH
 *
 * Built static, so that it runs on any root filesystem.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <grp.h>
#include <linux/aio_abi.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "attack.h"

#ifndef MFD_EXEC
#define MFD_EXEC 0x10u
#endif

/* Take as many AIO events as the node allows, in contexts of 4096: any
 * event held is one the other sandboxes and the host lose. */
static void attack_aio(void)
{
	unsigned long held = 0;
	long r = 0;
	int e = 0;

	for (int i = 0; i < 1024; i++) {
		aio_context_t ctx = 0;

		r = syscall(SYS_io_setup, 4096, &ctx);
		if (r < 0) {
			e = errno;
			break;
		}
		held += 4096;
	}
	printf("# held %lu AIO events\n", held);
	result(held == 0 && e == ENOSYS, "io_setup takes none of the node's AIO events", e);
}

/* sync() and syncfs() would write back the host's dirty pages (the test
 * watches a host file's); they must return 0, and fsync must still work. */
static void attack_sync(void)
{
	int fd = open("/tmp/own", O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
	long r;

	sync();
	result(true, "sync() returned", 0);
	r = fd < 0 ? -1 : syscall(SYS_syncfs, fd);
	result(r == 0, "syncfs() returns 0", r < 0 ? errno : 0);
	r = fd < 0 || write(fd, "x", 1) != 1 ? -1 : fsync(fd);
	result(r == 0, "fsync of an own file works", r < 0 ? errno : 0);
	if (fd >= 0)
		close(fd);
}

/* memfd_create + execveat: a binary that exists only in memory. */
static void attack_memfd(const char *host_pidns)
{
	char *argv[] = { "nodeattack", (char *)host_pidns, "memfd-ran", NULL };
	char *envp[] = { NULL };
	int self, fd;
	struct stat st;
	pid_t pid;
	int status;

	fd = (int)syscall(SYS_memfd_create, "x", MFD_EXEC | MFD_CLOEXEC);
	expect_errno(fd, EACCES, "memfd_create(MFD_EXEC)");
	if (fd >= 0)
		close(fd);
	fd = (int)syscall(SYS_memfd_create, "y", MFD_CLOEXEC);
	self = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	if (fd < 0 || self < 0 || fstat(self, &st) < 0 ||
	    sendfile(fd, self, NULL, (size_t)st.st_size) != st.st_size) {
		result(false, "copy this program into a memfd", errno);
		return;
	}
	close(self);
	expect_fail(fchmod(fd, 0755), "fchmod a memfd executable");
	pid = fork();
	if (pid == 0) {
		syscall(SYS_execveat, fd, "", argv, envp, AT_EMPTY_PATH);
		_exit(errno == EACCES ? 0 : 2);
	}
	status = -1;
	if (pid > 0)
		waitpid(pid, &status, 0);
	result(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	       "execveat of a memfd fails with EACCES", 0);
	close(fd);
}

/* MemTotal, MemFree and MemAvailable of /proc/meminfo, in kB. */
static bool meminfo(unsigned long long v[3])
{
	static const char *const keys[] = { "MemTotal:", "MemFree:", "MemAvailable:" };
	char line[256];
	FILE *f = fopen("/proc/meminfo", "re");
	int found = 0;

	while (f && fgets(line, sizeof(line), f))
		for (int i = 0; i < 3; i++)
			if (!strncmp(line, keys[i], strlen(keys[i])) &&
			    sscanf(line + strlen(keys[i]), "%llu", &v[i]) == 1)
				found++;
	if (f)
		fclose(f);
	return found == 3;
}

/* The host's counters move with every sandbox's use: a channel.  Allocate
 * and touch 64 MiB, then free it; the view must not move. */
static void attack_meminfo(const char *limit_s)
{
	unsigned long long limit = strtoull(limit_s, NULL, 10) / 1024, a[3], b[3], c[3];
	size_t len = 64u << 20;
	char *p;

	if (!meminfo(a)) {
		result(false, "read /proc/meminfo", errno);
		return;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p != MAP_FAILED)
		memset(p, 1, len);
	meminfo(b);
	if (p != MAP_FAILED)
		munmap(p, len);
	meminfo(c);
	printf("# MemTotal %llu kB, MemFree %llu → %llu → %llu kB\n", a[0], a[1], b[1], c[1]);
	result(a[0] <= limit, "MemTotal is at most the sandbox's memory limit", 0);
	result(!memcmp(a, b, sizeof(a)) && !memcmp(a, c, sizeof(a)),
	       "meminfo does not move with the sandbox's own use", 0);
}

/* apt's privilege drop: setgroups, setresgid, setresuid to _apt. */
static void attack_setid(void)
{
	gid_t g = 65534;
	long r;

	r = setgroups(1, &g);
	result(r == 0, "setgroups(65534) as root inside", r < 0 ? errno : 0);
	r = setresgid(65534, 65534, 65534);
	result(r == 0, "setresgid(65534)", r < 0 ? errno : 0);
	r = setresuid(42, 42, 42);
	result(r == 0, "setresuid(42)", r < 0 ? errno : 0);
	expect_fail(setresuid(0, 0, 0), "back to root once dropped");
}

/* A file given as stdin: readable, but its link names no host path. */
static void attack_stdin(const char *host_path)
{
	char link[4096], buf[64];
	ssize_t n = readlink("/proc/self/fd/0", link, sizeof(link) - 1);

	if (n >= 0)
		link[n] = '\0';
	printf("# fd 0 is %s\n", n >= 0 ? link : "?");
	result(n >= 0 && !strstr(link, host_path), "fd 0's link does not name the host file", 0);
	n = read(0, buf, sizeof(buf));
	result(n > 0, "fd 0 reads the file's bytes", n < 0 ? errno : 0);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: nodeattack HOST_PIDNS_INODE ATTACK [ARGS...]\n");
		return 2;
	}
	refuse_on_host(argv[1]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(argv[2], "memfd-ran")) {
		printf("FAIL - a binary that exists only in a memfd ran\n");
		return 1;
	}
	if (!strcmp(argv[2], "aio"))
		attack_aio();
	else if (!strcmp(argv[2], "sync"))
		attack_sync();
	else if (!strcmp(argv[2], "memfd"))
		attack_memfd(argv[1]);
	else if (!strcmp(argv[2], "meminfo") && argc == 4)
		attack_meminfo(argv[3]);
	else if (!strcmp(argv[2], "setid"))
		attack_setid();
	else if (!strcmp(argv[2], "stdin") && argc == 4)
		attack_stdin(argv[3]);
	else {
		fprintf(stderr, "nodeattack: unknown attack '%s'\n", argv[2]);
		return 2;
	}
	return failures ? 1 : 0;
}
