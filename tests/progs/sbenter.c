/*
 * sbenter.c — run a command inside a running, named sandbox through
 * sandbox_enter, for the integration tests (sandbox_enter.sh):
 *
 *   sbenter [OPTIONS] NAME -- ARGV...
 *     --policy FILE, --set KEY=VALUE   the sandbox's policy, as it was launched
 *     --cwd DIR, --user UID[:GID], --env NAME=VALUE   the request's overrides
 *     --stdin-null                     stdin is the sandbox's /dev/null
 *     --pid-file FILE                  the new process's host pid, once it runs
 *     --bench N                        run ARGV N times; print p50 and p99 of the
 *                                      entry alone and of entry to exit, in ms
 *     --cgroup DIR                     give the exec this cgroup2 directory instead of
 *                                      one of its own beneath the init's
 *     --fn-wait                        run a function that reads stdin to its end
 *     --fn                             instead of exec'ing ARGV, run a function in the
 *                                      confined process (req.fn): it prints its ids,
 *                                      no_new_privs, seccomp and cwd, and returns 7
 *                                      (and sbenter leaves a line of its own in its
 *                                      stdout buffer, to be written once, at its exit)
 *
 * The sandbox is one of `lazyroot run --name NAME`: its launcher's record
 * ($LAZYROOT_RECORD_DIR or /run/lazyroot/launchers) names its init, and the
 * record's lock, held, says the launcher lives.  As a keeper would, it
 * makes the exec a cgroup2 directory of its own beneath the init's and
 * joins the init's memory, pids and cpu cgroups (v1); at the end it kills
 * what the exec left in its directory and removes it.  Exits with the
 * command's status (128 + signal), 125 when the entry failed.
 */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/magic.h>
#include <time.h>
#include <unistd.h>

#include "lib/lib.h"
#include "sandbox/sandbox.h"

static __attribute__((noreturn, format(printf, 1, 2))) void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "sbenter: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(125);
}

static pid_t find_init(const char *name)
{
	const char *dir = getenv("LAZYROOT_RECORD_DIR");
	char path[PATH_MAX], buf[8192], *l;
	_cleanup_close_ int fd = -1;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/%s", dir && *dir ? dir : "/run/lazyroot/launchers", name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die("sandbox '%s': no launcher record '%s': %s", name, path, strerror(errno));
	if (flock(fd, LOCK_SH | LOCK_NB) == 0)
		die("sandbox '%s': its launcher is not running", name);
	n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n < 0)
		die("sandbox '%s': read '%s': %s", name, path, strerror(errno));
	buf[n] = '\0';
	for (l = buf; l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (!strncmp(l, "init ", 5))
			return (pid_t)atoi(l + 5);
	die("sandbox '%s': its record names no init (not cloned yet?)", name);
}

struct cgroups {
	char v2[PATH_MAX];      /* the exec's own directory; "" without cgroup2 */
	char *v1[4];
	int n_v1;
};

static const char *v2_root(void)
{
	struct statfs st;

	if (statfs("/sys/fs/cgroup", &st) == 0 && st.f_type == CGROUP2_SUPER_MAGIC)
		return "/sys/fs/cgroup";
	if (statfs("/sys/fs/cgroup/unified", &st) == 0 && st.f_type == CGROUP2_SUPER_MAGIC)
		return "/sys/fs/cgroup/unified";
	return NULL;
}

static void find_cgroups(pid_t init, struct cgroups *cg)
{
	char path[64], line[PATH_MAX];
	_cleanup_fclose_ FILE *f = NULL;
	const char *root = v2_root();

	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)init);
	f = fopen(path, "re");
	if (!f)
		die("the init's cgroups: %s", strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;

		if (!c2)
			continue;
		line[strcspn(line, "\n")] = '\0';
		*c1 = *c2 = '\0';
		if (!strcmp(line, "0") && c2 == c1 + 1 && root) {
			snprintf(cg->v2, sizeof(cg->v2), "%s%s/sbenter-%d", root,
			         strcmp(c2 + 1, "/") ? c2 + 1 : "", (int)getpid());
			continue;
		}
		for (char *save = NULL, *t = strtok_r(c1 + 1, ",", &save); t;
		     t = strtok_r(NULL, ",", &save))
			if ((!strcmp(t, "memory") || !strcmp(t, "pids") || !strcmp(t, "cpu")) &&
			    cg->n_v1 < 3) {
				/* /sys/fs/cgroup/cpu: a link to cpu,cpuacct where joined */
				if (asprintf(&cg->v1[cg->n_v1], "/sys/fs/cgroup/%s%s", t, c2 + 1) < 0)
					die("out of memory");
				cg->n_v1++;
				break;
			}
	}
}

static void remove_cgroup_kill(const char *dir)
{
	char path[PATH_MAX];
	int fd;

	if (!dir[0])
		return;
	snprintf(path, sizeof(path), "%s/cgroup.kill", dir);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		(void)!write(fd, "1", 1);
		close(fd);
	}
}

static void remove_cgroup(const char *dir)
{
	if (!dir[0])
		return;
	remove_cgroup_kill(dir);
	for (int i = 0; i < 500 && rmdir(dir) < 0 && errno == EBUSY; i++)
		nanosleep(&(struct timespec){ 0, 2 * 1000 * 1000 }, NULL);
}

/* The request's fn: what the process it runs in is. */
static int fn_probe(void *ud)
{
	char line[256], cwd[PATH_MAX];
	FILE *f = fopen("/proc/self/status", "re");

	(void)ud;
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "Uid:", 4) || !strncmp(line, "NoNewPrivs:", 11) ||
		    !strncmp(line, "Seccomp:", 8) || !strncmp(line, "CapEff:", 7))
			fputs(line, stdout);
	if (f)
		fclose(f);
	printf("cwd %s\n", getcwd(cwd, sizeof(cwd)) ? cwd : "?");
	return 7;
}

/* The request's fn, waiting: reads stdin to its end. */
static int fn_wait(void *ud)
{
	char buf[256];

	(void)ud;
	while (read(STDIN_FILENO, buf, sizeof(buf)) > 0)
		;
	return 0;
}

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	stop = sig;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double pct(uint64_t *v, size_t n, double p)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return (double)v[(size_t)(p * (double)(n - 1) + 0.5)] / 1e6;
}

static uint64_t now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	struct sandbox *sb = NULL;
	struct sandbox_enter_req req = { .stdio = { 0, 1, 2 } };
	const char *pid_file = NULL, *cgroup_dir = NULL, *name;
	char *env[64];
	size_t n_env = 0;
	struct cgroups cg = { .n_v1 = 0 };
	const char *v1[4] = { NULL };
	long runs = 0;
	int i, status = 125, cgfd = -1;
	pid_t init;

	if (sandbox_new(&sb) < 0)
		die("out of memory");
	for (i = 1; i < argc && strcmp(argv[i], "--"); i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--stdin-null")) {
			req.stdio[0] = -1;
			continue;
		}
		if (!strcmp(a, "--fn")) {
			req.fn = fn_probe;
			continue;
		}
		if (!strcmp(a, "--fn-wait")) {
			req.fn = fn_wait;
			continue;
		}
		if (a[0] != '-')
			break;
		if (!v)
			die("%s needs a value", a);
		i++;
		if (!strcmp(a, "--policy")) {
			if (sandbox_load_policy(sb, v) < 0)
				exit(125);
		} else if (!strcmp(a, "--set")) {
			_cleanup_free_ char *kv = strdup(v);
			char *eq = kv ? strchr(kv, '=') : NULL;

			if (!eq)
				die("--set '%s': KEY=VALUE", v);
			*eq = '\0';
			if (sandbox_set(sb, kv, eq + 1) < 0)
				exit(125);
		} else if (!strcmp(a, "--cwd")) {
			req.cwd = v;
		} else if (!strcmp(a, "--user")) {
			req.user = v;
		} else if (!strcmp(a, "--env")) {
			if (n_env + 1 >= ARRAY_SIZE(env))
				die("too many --env");
			env[n_env++] = (char *)v;
		} else if (!strcmp(a, "--cgroup")) {
			cgroup_dir = v;
		} else if (!strcmp(a, "--pid-file")) {
			pid_file = v;
		} else if (!strcmp(a, "--bench")) {
			runs = atol(v);
			if (runs < 1 || runs > 100000)
				die("--bench '%s': 1..100000", v);
		} else {
			die("unknown option '%s'", a);
		}
	}
	if (i >= argc || argv[i][0] == '-')
		die("usage: sbenter [OPTIONS] NAME -- ARGV...");
	name = argv[i++];
	if (i >= argc || strcmp(argv[i], "--") || i + 1 >= argc)
		die("no command (NAME -- ARGV...)");
	req.argv = &argv[i + 1];
	env[n_env] = NULL;
	req.env = n_env ? env : NULL;
	if (sandbox_set(sb, "name", name) < 0)
		exit(125);
	req.sb = sb;

	sigaction(SIGTERM, &(struct sigaction){ .sa_handler = on_signal }, NULL);
	sigaction(SIGINT, &(struct sigaction){ .sa_handler = on_signal }, NULL);
	sigaction(SIGHUP, &(struct sigaction){ .sa_handler = on_signal }, NULL);
	init = find_init(name);
	req.init_pidfd = (int)syscall(SYS_pidfd_open, init, 0);
	if (req.init_pidfd < 0)
		die("sandbox '%s': its init %d: %s", name, (int)init, strerror(errno));
	find_cgroups(init, &cg);
	for (int k = 0; k < cg.n_v1; k++)
		v1[k] = cg.v1[k];
	req.v1_cgroups = v1;
	if (cgroup_dir) {
		cgfd = open(cgroup_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (cgfd < 0)
			die("--cgroup '%s': %s", cgroup_dir, strerror(errno));
		cg.v2[0] = '\0';   /* not ours to remove */
	} else if (cg.v2[0]) {
		if (mkdir(cg.v2, 0755) < 0)
			die("cgroup '%s': %s", cg.v2, strerror(errno));
		cgfd = open(cg.v2, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (cgfd < 0) {
			remove_cgroup(cg.v2);
			die("cgroup '%s': %s", cg.v2, strerror(errno));
		}
	}
	req.cgroup_fd = cgfd;
	/* Left in the buffer: it must reach stdout once, from here at exit, not
	 * from the fn's process too. */
	if (req.fn == fn_probe)
		printf("sbenter: the caller's own buffered line\n");

	{
		long n = runs ? runs : 1;
		_cleanup_free_ uint64_t *t_enter = calloc((size_t)n, sizeof(uint64_t));
		_cleanup_free_ uint64_t *t_exit = calloc((size_t)n, sizeof(uint64_t));

		if (!t_enter || !t_exit)
			die("out of memory");
		for (long k = 0; k < n; k++) {
			uint64_t t0 = now();
			siginfo_t si = { 0 };
			pid_t pid;
			int pidfd;

			if (stop || sandbox_enter(&req, &pid, &pidfd) < 0) {
				status = 125;
				break;
			}
			t_enter[k] = now() - t0;
			if (pid_file) {
				FILE *f = fopen(pid_file, "we");

				if (!f || fprintf(f, "%d\n", (int)pid) < 0 || fclose(f) != 0)
					die("--pid-file '%s': %s", pid_file, strerror(errno));
			}
			/* SIGTERM, SIGINT, SIGHUP: end the exec's whole cgroup, then
			 * clean up as ever */
			while (waitid(P_PIDFD, (id_t)pidfd, &si, WEXITED) < 0 && errno == EINTR)
				if (stop)
					remove_cgroup_kill(cg.v2);
			t_exit[k] = now() - t0;
			close(pidfd);
			status = si.si_code == CLD_EXITED ? si.si_status : 128 + si.si_status;
		}
		if (runs && status != 125)
			printf("runs %ld enter_p50_ms %.3f enter_p99_ms %.3f exit_p50_ms %.3f "
			       "exit_p99_ms %.3f\n", runs, pct(t_enter, (size_t)n, 0.5),
			       pct(t_enter, (size_t)n, 0.99), pct(t_exit, (size_t)n, 0.5),
			       pct(t_exit, (size_t)n, 0.99));
	}
	if (cgfd >= 0)
		close(cgfd);
	remove_cgroup(cg.v2);
	for (int k = 0; k < cg.n_v1; k++)
		free(cg.v1[k]);
	close(req.init_pidfd);
	sandbox_free(sb);
	return status;
}
