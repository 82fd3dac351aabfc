/*
 * cgroup.c — one cgroup per sandbox in each hierarchy it needs, created under
 * the launcher's own cgroup (so that the launcher's own limits still bound
 * every sandbox it starts), and removed once the sandbox's last process is
 * gone — or, pooled (pool.c), kept and made ready for the next sandbox
 * (cgroups_reuse), the reports counting from baselines.
 *
 * Hybrid hosts are the norm here: memory, pids and cpu may be v1 controllers
 * (/sys/fs/cgroup/<controller>) while cgroup2 (/sys/fs/cgroup or
 * /sys/fs/cgroup/unified) has none of them.  A controller is taken from
 * cgroup2 when the launcher's cgroup2 directory already delegates it
 * (cgroup.subtree_control lists it), from v1 otherwise.  The sandbox always
 * gets a cgroup2 directory too when cgroup2 is mounted: it counts CPU time
 * whatever the controllers, and it is where BPF programs attach.
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>
#include <time.h>

#include "lib/lib.h"
#include "sandbox/sandbox-internal.h"

static const char *const ctrl_name[CG_COUNT] = { "memory", "pids", "cpu", NULL };

static bool is_fs(const char *path, long magic)
{
	struct statfs st;

	return statfs(path, &st) == 0 && (long)st.f_type == magic;
}

/* /proc/self/cgroup, read once: a launcher resolves a sandbox's cgroups
 * in up to four hierarchies, and its own cgroups do not change meanwhile
 * (nothing moves a launcher).  *ret is NUL-terminated; -errno when it cannot
 * be read. */
static int self_cgroups(const char **ret)
{
	static char *text;
	static int r = 1;

	if (r > 0) {
		_cleanup_(buf_freep) struct buf b = BUF_INIT;

		r = read_file("/proc/self/cgroup", 65536, &b);
		if (r == 0 && !(text = strdup((const char *)b.data)))
			r = -ENOMEM;
	}
	*ret = text;
	return r;
}

/* The launcher's own path in the hierarchy that holds controller ctrl
 * (NULL: the cgroup2 line).  *ret is malloc'd. */
static int own_cgroup(const char *ctrl, char **ret)
{
	const char *all = NULL;
	int r = self_cgroups(&all);
	_cleanup_free_ char *copy = r == 0 ? strdup(all) : NULL;

	if (r < 0)
		return r;
	if (!copy)
		return -ENOMEM;
	for (char *save = NULL, *line = strtok_r(copy, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char *c1 = strchr(line, ':'), *c2;

		if (!c1 || !(c2 = strchr(c1 + 1, ':')))
			continue;
		*c1 = '\0';
		*c2 = '\0';
		if (!ctrl) {
			if (!strcmp(line, "0") && c1[1] == '\0') {
				*ret = strdup(c2 + 1);
				return *ret ? 0 : -ENOMEM;
			}
			continue;
		}
		for (char *save2 = NULL, *tok = strtok_r(c1 + 1, ",", &save2); tok;
		     tok = strtok_r(NULL, ",", &save2))
			if (!strcmp(tok, ctrl)) {
				*ret = strdup(c2 + 1);
				return *ret ? 0 : -ENOMEM;
			}
	}
	return -ENOENT;
}

static int write_attr(const char *dir, const char *file, const char *value)
{
	char path[PATH_MAX];
	_cleanup_close_ int fd = -1;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, value, strlen(value)) < 0)
		return -errno;
	return 0;
}

/* The number after "key " in a flat-keyed cgroup file, or 0. */
static uint64_t read_key(const char *dir, const char *file, const char *key)
{
	char path[PATH_MAX], buf[4096];
	_cleanup_close_ int fd = -1;
	size_t klen = strlen(key);
	ssize_t n;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || (n = read(fd, buf, sizeof(buf) - 1)) <= 0)
		return 0;
	buf[n] = '\0';
	for (char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (!strncmp(l, key, klen) && l[klen] == ' ')
			return strtoull(l + klen + 1, NULL, 10);
	return 0;
}

static uint64_t read_number(const char *dir, const char *file)
{
	char path[PATH_MAX], buf[64];
	_cleanup_close_ int fd = -1;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || (n = read(fd, buf, sizeof(buf) - 1)) <= 0)
		return 0;
	buf[n] = '\0';
	return strtoull(buf, NULL, 10);
}

static bool list_has(const char *list, const char *word)
{
	size_t n = strlen(word);

	for (const char *p = list; (p = strstr(p, word)); p += n)
		if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\n' || p[n] == '\0'))
			return true;
	return false;
}

/* Is path used by an earlier entry of cg (several controllers share the
 * cgroup2 directory)? */
static bool seen_before(const struct sandbox_cgroups *cg, int i)
{
	for (int j = 0; j < i; j++)
		if (cg->path[j] && !strcmp(cg->path[j], cg->path[i]))
			return true;
	return false;
}

static int make_dir(const char *path)
{
	if (mkdir(path, 0755) < 0) {
		if (errno == EEXIST)
			return log_error(-EEXIST, "cgroup '%s' exists: another sandbox with this name?",
			                 path);
		return log_errno(-errno, "cgroup '%s'", path);
	}
	return 0;
}

static uint64_t want_cpu_quota(const struct sandbox *sb)
{
	long long quota = (long long)(sb->cpus * 100000 + 0.5);

	return sb->cpus > 0 ? (uint64_t)(quota < 1000 ? 1000 : quota) : 0;
}

/* A limit of 0 (none) is written only to a reused set (reset), which may
 * still have the limit of the sandbox before it. */
static int set_limits(const struct sandbox *sb, const struct sandbox_cgroups *cg, bool reset)
{
	uint64_t quota = want_cpu_quota(sb);
	char v[64];
	int r;

	if (reset && !sb->memory && cg->path[CG_MEMORY]) {
		r = write_attr(cg->path[CG_MEMORY], cg->v2[CG_MEMORY] ? "memory.max" :
		               "memory.limit_in_bytes", cg->v2[CG_MEMORY] ? "max" : "-1");
		if (r < 0)
			return log_errno(r, "cgroup '%s': lift the memory limit", cg->path[CG_MEMORY]);
	}
	if (reset && !sb->pids && cg->path[CG_PIDS]) {
		r = write_attr(cg->path[CG_PIDS], "pids.max", "max");
		if (r < 0)
			return log_errno(r, "cgroup '%s': lift the pids limit", cg->path[CG_PIDS]);
	}
	if (reset && !quota && cg->path[CG_CPU]) {
		r = write_attr(cg->path[CG_CPU], cg->v2[CG_CPU] ? "cpu.max" : "cpu.cfs_quota_us",
		               cg->v2[CG_CPU] ? "max" : "-1");
		if (r < 0)
			return log_errno(r, "cgroup '%s': lift the cpu limit", cg->path[CG_CPU]);
	}

	if (sb->memory) {
		snprintf(v, sizeof(v), "%llu", (unsigned long long)sb->memory);
		r = write_attr(cg->path[CG_MEMORY], cg->v2[CG_MEMORY] ? "memory.max" :
		               "memory.limit_in_bytes", v);
		if (r < 0)
			return log_errno(r, "cgroup '%s': memory limit %s", cg->path[CG_MEMORY], v);
		if (cg->v2[CG_MEMORY])
			(void)write_attr(cg->path[CG_MEMORY], "memory.swap.max", "0");
	}
	if (sb->pids) {
		snprintf(v, sizeof(v), "%llu", (unsigned long long)sb->pids);
		r = write_attr(cg->path[CG_PIDS], "pids.max", v);
		if (r < 0)
			return log_errno(r, "cgroup '%s': pids limit %s", cg->path[CG_PIDS], v);
	}
	if (quota) {
		if (cg->v2[CG_CPU]) {
			snprintf(v, sizeof(v), "%llu 100000", (unsigned long long)quota);
			r = write_attr(cg->path[CG_CPU], "cpu.max", v);
		} else {
			r = write_attr(cg->path[CG_CPU], "cpu.cfs_period_us", "100000");
			snprintf(v, sizeof(v), "%llu", (unsigned long long)quota);
			if (r == 0)
				r = write_attr(cg->path[CG_CPU], "cpu.cfs_quota_us", v);
		}
		if (r < 0)
			return log_errno(r, "cgroup '%s': cpu limit %s", cg->path[CG_CPU], v);
	}
	return 0;
}

int cgroups_resolve(const struct sandbox *sb, const char *name, struct sandbox_cgroups *cg)
{
	_cleanup_free_ char *v2own = NULL;
	char v2root[64] = "", path[PATH_MAX];
	bool needed[CG_COUNT] = { sb->memory > 0, sb->pids > 0, sb->cpus > 0, false };
	int r;

	memset(cg, 0, sizeof(*cg));
	if (is_fs("/sys/fs/cgroup", CGROUP2_SUPER_MAGIC))
		strcpy(v2root, "/sys/fs/cgroup");
	else if (is_fs("/sys/fs/cgroup/unified", CGROUP2_SUPER_MAGIC))
		strcpy(v2root, "/sys/fs/cgroup/unified");
	if (v2root[0] && own_cgroup(NULL, &v2own) == 0) {
		_cleanup_(buf_freep) struct buf ctl = BUF_INIT;

		snprintf(path, sizeof(path), "%s%s", v2root, strcmp(v2own, "/") ? v2own : "");
		cg->path[CG_UNIFIED] = NULL;
		if (asprintf(&cg->path[CG_UNIFIED], "%s/%s", path, name) < 0) {
			cg->path[CG_UNIFIED] = NULL;
			return -ENOMEM;
		}
		cg->v2[CG_UNIFIED] = true;
		snprintf(path + strlen(path), sizeof(path) - strlen(path), "/cgroup.subtree_control");
		if (read_file(path, 4096, &ctl) == 0)
			for (int i = 0; i < CG_UNIFIED; i++)
				if (list_has((char *)ctl.data, ctrl_name[i])) {
					cg->path[i] = strdup(cg->path[CG_UNIFIED]);
					cg->v2[i] = true;
					if (!cg->path[i])
						goto nomem;
				}
	}
	for (int i = 0; i < CG_UNIFIED; i++) {
		_cleanup_free_ char *own = NULL;
		char mnt[64];

		if (cg->path[i])
			continue;
		snprintf(mnt, sizeof(mnt), "/sys/fs/cgroup/%s", ctrl_name[i]);
		if (!is_fs(mnt, CGROUP_SUPER_MAGIC) || own_cgroup(ctrl_name[i], &own) < 0) {
			if (needed[i]) {
				r = log_error(-EOPNOTSUPP, "no %s cgroup controller (v1 or delegated v2) "
				              "for the %s limit", ctrl_name[i], ctrl_name[i]);
				goto fail;
			}
			continue;
		}
		if (asprintf(&cg->path[i], "%s%s/%s", mnt, strcmp(own, "/") ? own : "", name) < 0) {
			cg->path[i] = NULL;
			goto nomem;
		}
	}
	return 0;
nomem:
	r = -ENOMEM;
fail:
	cgroups_forget(cg);
	return r;
}

int cgroups_make(const struct sandbox *sb, struct sandbox_cgroups *cg)
{
	int r;

	for (int i = 0; i < CG_COUNT; i++) {
		if (!cg->path[i] || seen_before(cg, i))
			continue;
		r = make_dir(cg->path[i]);
		if (r < 0) {
			/* Remove only what this call made: the directories before i. */
			for (int j = i - 1; j >= 0; j--)
				if (cg->path[j] && !seen_before(cg, j))
					rmdir(cg->path[j]);
			cgroups_forget(cg);
			return r;
		}
	}
	r = set_limits(sb, cg, false);
	if (r < 0) {
		cgroups_destroy(cg);
		return r;
	}
	return 0;
}

int cgroups_self_open(const struct sandbox_cgroups *cg, int fds[CG_COUNT])
{
	char path[PATH_MAX];

	for (int i = 0; i < CG_COUNT; i++)
		fds[i] = -1;
	for (int i = 0; i < CG_COUNT; i++) {
		if (!cg->path[i] || cg->v2[i] || seen_before(cg, i))
			continue;
		snprintf(path, sizeof(path), "%s/tasks", cg->path[i]);
		fds[i] = open(path, O_WRONLY | O_CLOEXEC);
		if (fds[i] < 0) {
			int r = log_errno(-errno, "cgroup '%s'", cg->path[i]);

			cgroups_self_close(fds);
			return r;
		}
	}
	return 0;
}

void cgroups_self_close(int fds[CG_COUNT])
{
	for (int i = 0; i < CG_COUNT; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
}

int cgroups_self_move(int fds[CG_COUNT])
{
	int r = 0;

	for (int i = 0; i < CG_COUNT && r == 0; i++)
		if (fds[i] >= 0 && write(fds[i], "0", 1) < 0)
			r = log_errno(-errno, "cgroup: move the sandbox into its %s cgroup",
			              ctrl_name[i]);
	cgroups_self_close(fds);
	return r;
}

int cgroups_attach(const struct sandbox_cgroups *cg, pid_t pid, bool in_unified)
{
	char v[32];
	int r;

	snprintf(v, sizeof(v), "%d", (int)pid);
	for (int i = 0; i < CG_COUNT; i++) {
		if (!cg->path[i] || seen_before(cg, i))
			continue;
		if (!cg->v2[i])
			continue;   /* the init moves itself: cgroups_self_move */
		if (in_unified)
			continue;   /* cloned into it: CLONE_INTO_CGROUP */
		r = write_attr(cg->path[i], "cgroup.procs", v);
		if (r < 0)
			return log_errno(r, "cgroup '%s': move the sandbox in", cg->path[i]);
	}
	return 0;
}

static uint64_t oom_kills(const struct sandbox_cgroups *cg)
{
	if (cg->ended)
		return cg->end_oom_kill;
	if (!cg->path[CG_MEMORY])
		return 0;
	return read_key(cg->path[CG_MEMORY], cg->v2[CG_MEMORY] ? "memory.events" :
	                "memory.oom_control", "oom_kill");
}

static uint64_t pids_max_events(const struct sandbox_cgroups *cg)
{
	if (cg->ended)
		return cg->end_pids_max;
	return cg->path[CG_PIDS] ? read_key(cg->path[CG_PIDS], "pids.events", "max") : 0;
}

static uint64_t cpu_usec(const struct sandbox_cgroups *cg)
{
	if (cg->ended)
		return cg->end_cpu_usec;
	return cg->path[CG_UNIFIED] ? read_key(cg->path[CG_UNIFIED], "cpu.stat", "usage_usec") : 0;
}

uint64_t cgroups_oom_count(const struct sandbox_cgroups *cg)
{
	return oom_kills(cg);
}

uint64_t cgroups_pids_max_count(const struct sandbox_cgroups *cg)
{
	return pids_max_events(cg);
}

bool cgroups_oom_killed(const struct sandbox_cgroups *cg)
{
	return oom_kills(cg) > cg->base_oom_kill;
}

bool cgroups_pids_hit(const struct sandbox_cgroups *cg)
{
	return pids_max_events(cg) > cg->base_pids_max;
}

void cgroups_read_end(struct sandbox_cgroups *cg)
{
	cg->ended = false;
	cg->end_oom_kill = oom_kills(cg);
	cg->end_pids_max = pids_max_events(cg);
	cg->end_cpu_usec = cpu_usec(cg);
	cg->ended = true;
}

bool cgroups_carry_get(const struct sandbox_cgroups *cg, struct cgroups_carry *ret)
{
	if (!cg->ended)
		return false;
	*ret = (struct cgroups_carry){
		.oom_kill = cg->end_oom_kill, .pids_max = cg->end_pids_max,
		.cpu_usec = cg->end_cpu_usec,
	};
	return true;
}

uint64_t cgroups_memory_peak(const struct sandbox_cgroups *cg)
{
	uint64_t v;

	if (!cg->path[CG_MEMORY])
		return 0;
	v = read_number(cg->path[CG_MEMORY], cg->v2[CG_MEMORY] ? "memory.peak" :
	                "memory.max_usage_in_bytes");
	return v > cg->base_memory ? v - cg->base_memory : 0;
}

int cgroups_make_missing(const struct sandbox_cgroups *cg)
{
	bool made[CG_COUNT] = { false };
	int n = 0;

	for (int i = 0; i < CG_COUNT; i++) {
		if (!cg->path[i] || seen_before(cg, i))
			continue;
		if (mkdir(cg->path[i], 0755) == 0) {
			made[i] = true;
			n++;
		} else if (errno != EEXIST) {
			int r = log_errno(-errno, "cgroup '%s'", cg->path[i]);

			for (int j = i - 1; j >= 0; j--)
				if (made[j])
					rmdir(cg->path[j]);
			return r;
		}
	}
	return n;
}

int cgroups_reuse(const struct sandbox *sb, struct sandbox_cgroups *cg,
                  const struct cgroups_carry *carry)
{
	const char *mem = cg->path[CG_MEMORY];

	/* v1 resets its peak to the current usage, the charge the sandbox
	 * starts with (base_memory).  (A v2 memory cgroup's peak cannot be
	 * reset for later readers: pool.c pools none.) */
	if (mem && !cg->v2[CG_MEMORY]) {
		(void)write_attr(mem, "memory.max_usage_in_bytes", "0");
		cg->base_memory = read_number(mem, "memory.usage_in_bytes");
	}
	if (carry) {
		/* Nothing ran in the set since its last sandbox's counters were
		 * read, so they still hold. */
		cg->base_oom_kill = carry->oom_kill;
		cg->base_pids_max = carry->pids_max;
		cg->base_cpu_usec = carry->cpu_usec;
	} else {
		cg->base_oom_kill = oom_kills(cg);
		cg->base_pids_max = pids_max_events(cg);
		cg->base_cpu_usec = cpu_usec(cg);
	}
	/* Written every time, carried or not: a limit is the sandbox's policy,
	 * and the directories' files are what holds, whatever the lock file
	 * says (root may have changed one; a cgroup2 controller switched off
	 * and on resets its limits). */
	return set_limits(sb, cg, true);
}

/* Does the cgroup at path list no process? */
static bool no_procs(const char *path)
{
	char file[PATH_MAX], buf[16];
	_cleanup_close_ int fd = -1;

	snprintf(file, sizeof(file), "%s/cgroup.procs", path);
	fd = open(file, O_RDONLY | O_CLOEXEC);
	return fd >= 0 && read(fd, buf, sizeof(buf)) == 0;
}

bool cgroups_reusable(const struct sandbox_cgroups *cg, uint64_t max_charge)
{
	/* One directory tells for all: every process of a sandbox descends
	 * from its init, which was in all of them before it forked, and a
	 * process leaves every hierarchy at once (its css_set).  The init was
	 * born in the cgroup2 directory (CLONE_INTO_CGROUP), else moved into
	 * the first of them before the others. */
	const char *dir = cg->path[CG_UNIFIED];

	for (int i = 0; !dir && i < CG_COUNT; i++)
		dir = cg->path[i];
	/* The last process may take a moment to leave after it was reaped, as
	 * for rmdir (cgroup_remove). */
	for (int tries = 0; dir && !no_procs(dir); tries++) {
		if (tries >= 500 || access(dir, F_OK) < 0)
			return false;
		nanosleep(&(struct timespec){ 0, 2 * 1000 * 1000 }, NULL);
	}
	/* No page cache: an OOM in the next sandbox would evict it, which the
	 * sandboxes that share it (the image's files) would then read again. */
	if (cg->path[CG_MEMORY] &&
	    (read_key(cg->path[CG_MEMORY], "memory.stat", cg->v2[CG_MEMORY] ? "file" : "cache") ||
	     read_number(cg->path[CG_MEMORY], cg->v2[CG_MEMORY] ? "memory.current" :
	                 "memory.usage_in_bytes") > max_charge))
		return false;
	return true;
}

/* A v2 events file opened for POLLPRI: kernfs signals a change to each
 * open file until that file is read again. */
static int events_fd(const char *dir, const char *file)
{
	char path[PATH_MAX], buf[256];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0)
		(void)!pread(fd, buf, sizeof(buf), 0);
	return fd;
}

/* An eventfd the v1 memory cgroup at dir signals when it goes out of
 * memory (before its OOM killer picks a victim). */
static int oom_eventfd(const char *dir)
{
	char path[PATH_MAX], v[32];
	_cleanup_close_ int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), cfd = -1;

	snprintf(path, sizeof(path), "%s/memory.oom_control", dir);
	cfd = open(path, O_RDONLY | O_CLOEXEC);
	if (efd < 0 || cfd < 0)
		return -1;
	snprintf(v, sizeof(v), "%d %d", efd, cfd);
	if (write_attr(dir, "cgroup.event_control", v) < 0)
		return -1;
	return TAKE_FD(efd);
}

void cgroups_watch_open(const struct sandbox_cgroups *cg, bool want_pids,
                        struct cgroups_watch *w)
{
	*w = (struct cgroups_watch)CGROUPS_WATCH_INIT;
	if (cg->path[CG_MEMORY]) {
		if (cg->v2[CG_MEMORY]) {
			w->fd[CGW_MEMORY] = events_fd(cg->path[CG_MEMORY], "memory.events");
			w->events[CGW_MEMORY] = POLLPRI;
		} else {
			w->fd[CGW_MEMORY] = oom_eventfd(cg->path[CG_MEMORY]);
			w->events[CGW_MEMORY] = POLLIN;
		}
		if (w->fd[CGW_MEMORY] < 0)
			w->period_ms = 100;
	}
	if (cg->path[CG_PIDS] && want_pids) {
		if (cg->v2[CG_PIDS]) {
			w->fd[CGW_PIDS] = events_fd(cg->path[CG_PIDS], "pids.events");
			w->events[CGW_PIDS] = POLLPRI;
		}
		if (w->fd[CGW_PIDS] < 0 && w->period_ms < 0)
			w->period_ms = cg->v2[CG_PIDS] ? 100 : 1000;
	}
}

void cgroups_watch_ack(struct cgroups_watch *w, int i)
{
	char buf[256];

	if (w->fd[i] < 0)
		return;
	if (w->events[i] == POLLIN)
		(void)!read(w->fd[i], buf, sizeof(uint64_t));   /* eventfd: no pread */
	else
		(void)!pread(w->fd[i], buf, sizeof(buf), 0);
}

void cgroups_watch_close(struct cgroups_watch *w)
{
	for (int i = 0; i < CGW_COUNT; i++)
		if (w->fd[i] >= 0)
			close(w->fd[i]);
	*w = (struct cgroups_watch)CGROUPS_WATCH_INIT;
}

double cgroups_cpu_seconds(const struct sandbox_cgroups *cg)
{
	uint64_t v;

	if (!cg->path[CG_UNIFIED])
		return -1;
	v = cpu_usec(cg);
	return (double)(v > cg->base_cpu_usec ? v - cg->base_cpu_usec : 0) / 1e6;
}

/* Kill what is left in the cgroup at path: cgroup.kill where the kernel has
 * it (cgroup2), else SIGKILL to every pid cgroup.procs lists, until it lists
 * none (a process may fork while the list is read; bounded by 100 passes). */
static void kill_members(const char *path)
{
	char file[PATH_MAX];

	if (write_attr(path, "cgroup.kill", "1") == 0)
		return;
	snprintf(file, sizeof(file), "%s/cgroup.procs", path);
	for (int pass = 0; pass < 100; pass++) {
		_cleanup_fclose_ FILE *f = fopen(file, "re");
		unsigned long pid;
		bool any = false;

		if (!f)
			return;
		while (fscanf(f, "%lu", &pid) == 1) {
			kill((pid_t)pid, SIGKILL);
			any = true;
		}
		if (!any)
			return;
	}
}

/* A sandbox's cgroup2 directory holds one of each exec's (the sandbox
 * service's, sandbox/keeper.c): they go first, as rmdir refuses a parent
 * with children.  Depth is bounded by the callers' names (two levels). */
static void remove_children(const char *path, bool kill_first, int depth)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *e;
	DIR *d;

	if (fd < 0 || depth > 4)
		return;
	d = fdopendir(fd);
	if (!d)
		return;
	fd = -1;
	while ((e = readdir(d))) {
		char sub[PATH_MAX];

		if (e->d_type != DT_DIR || e->d_name[0] == '.')
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
		remove_children(sub, kill_first, depth + 1);
		if (kill_first)
			kill_members(sub);
		for (int tries = 0; rmdir(sub) < 0 && errno == EBUSY && tries < 500; tries++)
			nanosleep(&(struct timespec){ 0, 2 * 1000 * 1000 }, NULL);
	}
	closedir(d);
}

void cgroups_usage(const struct sandbox_cgroups *cg, uint64_t *ret_memory, uint64_t *ret_pids)
{
	*ret_memory = cg->path[CG_MEMORY] ?
	              read_number(cg->path[CG_MEMORY], cg->v2[CG_MEMORY] ? "memory.current" :
	                          "memory.usage_in_bytes") : 0;
	*ret_pids = cg->path[CG_PIDS] ? read_number(cg->path[CG_PIDS], "pids.current") : 0;
}

int cgroup_remove(const char *path, bool kill_first)
{
	remove_children(path, kill_first, 0);
	if (kill_first)
		kill_members(path);
	/* The last process may still be leaving the cgroup for a moment after it
	 * was reaped (or killed): retry EBUSY for up to a second. */
	for (int tries = 0; rmdir(path) < 0; tries++) {
		struct timespec ts = { 0, 2 * 1000 * 1000 };

		if (errno == ENOENT)
			return 0;
		if (errno != EBUSY || tries >= 500)
			return log_errno(-errno, "remove cgroup '%s'", path);
		nanosleep(&ts, NULL);
	}
	return 0;
}

void cgroups_forget(struct sandbox_cgroups *cg)
{
	for (int i = 0; i < CG_COUNT; i++) {
		free(cg->path[i]);
		cg->path[i] = NULL;
	}
}

int cgroups_destroy(struct sandbox_cgroups *cg)
{
	int r = 0;

	for (int i = CG_COUNT - 1; i >= 0; i--)
		if (cg->path[i] && !seen_before(cg, i) && cgroup_remove(cg->path[i], false) < 0)
			r = -EBUSY;
	cgroups_forget(cg);
	return r;
}
