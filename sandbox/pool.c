/*
 * pool.c — node-wide pools of network namespaces (for sandboxes that have
 * only their loopback: the default, no allowlist, no sysfs) and of cgroups
 * (for every sandbox, on hosts whose memory controller is v1 or absent).
 * sandbox/POLICY.md, "Pools", describes both for operators.
 *
 * Creating a network namespace registers its loopback in sysfs and sysctl,
 * and its teardown (cleanup_net, in a kworker after the last user is gone)
 * costs about as much again: together about an eighth of a node's CPU per
 * launch of /bin/true (docs/perf-log.md, "Pools of network
 * namespaces and cgroups").  A pooled namespace is made once,
 * with a user namespace of its own that owns it (make_netns): a sandbox,
 * whose own user namespace has no rights over it (and whose capabilities are
 * dropped anyway), can neither change its links, addresses, routes nor its
 * sysctls, and the host's uevents never reach it.  Its loopback is brought up
 * when it is made.
 *
 * Layout, under $LAZYROOT_POOL_DIR or /run/lazyroot/pool:
 *   net.N       an empty file with the namespace bind-mounted on it (nsfs)
 *   net.N.lock  flock()ed by the launcher that uses slot N; its mtime is 0
 *               while a launcher uses the slot, and the time of release once
 *               it is back in the pool; it holds "counted HASH", the hash of
 *               the namespace's counters as its last sandbox left them
 * A launcher takes the first slot whose lock it gets (N < 4 x CPUs); with
 * every slot taken it makes a namespace of its own as without a pool.  A
 * launcher that dies holding a slot releases the lock by dying, but leaves
 * the mtime at 0: the next taker throws that namespace away, since the dead
 * launcher's sandbox may still have been running in it.
 *
 * Reuse is safe when the previous sandbox left no state behind that the next
 * one could see.  Without rights over the namespace, what a sandbox can leave
 * is sockets: the launcher reads the namespace's own socket counts
 * (/proc/net/sockstat and sockstat6, and its unix sockets, opened while in
 * it) once every process of the sandbox is gone, and returns the namespace
 * to the pool only if no socket remains, TIME_WAIT included (one would keep
 * its port from a plain bind for a minute).  Nor may its statistics have
 * moved (/proc/net/dev, snmp, snmp6, netstat: the loopback's packet counters
 * above all), which cannot be reset: a sandbox that used its network at all
 * leaves a namespace that is thrown away, and with it the caches that only
 * traffic fills (TCP metrics of 127.0.0.1).  Sandboxes that never touch the
 * network, most of them, still share a few.
 */
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <linux/magic.h>
#include <dirent.h>
#include <time.h>

#include "lib/lib.h"
#include "sandbox/sandbox-internal.h"

#define POOL_DIR_DEFAULT "/run/lazyroot/pool"

/* The node's pool directory (docs/settings.md: pool_dir). */
static const char *pool_dir(const struct sandbox_node *n)
{
	return n->pool_dir ? n->pool_dir : POOL_DIR_DEFAULT;
}

/* Pooling is on unless the policy or the node (pool = off) turns it off. */
static bool pool_enabled(const struct sandbox *sb)
{
	return sb->pool && !sb->node.no_pool;
}

/* Read once: both pools ask, and get_nprocs() reads sysfs each time. */
static int pool_size(void)
{
	static int n;

	if (!n)
		n = 4 * get_nprocs();
	return n;
}

/* A slot's lock file has mtime 0 while a launcher uses the slot, and keeps
 * it when that launcher dies: the next taker then starts the slot over. */
static int mark_in_use(int lock_fd)
{
	return futimens(lock_fd, (struct timespec[2]){ { 0, UTIME_OMIT }, { 0, 0 } }) < 0 ? -errno : 0;
}

static bool left_in_use(int lock_fd)
{
	struct stat st;

	return fstat(lock_fd, &st) == 0 && st.st_mtim.tv_sec == 0 && st.st_mtim.tv_nsec == 0;
}

static int open_pool_dir(const char *dir, bool create)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0 && errno == ENOENT && create) {
		int r = mkdir_p(dir, 0700);

		if (r < 0)
			return r;
		fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	return fd < 0 ? -errno : fd;
}

/* Is the file at dfd/name a mounted network namespace?  Its fd, or -1. */
static int open_netns(int dfd, const char *name)
{
	_cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct statfs st;

	if (fd < 0 || fstatfs(fd, &st) < 0 || (long)st.f_type != NSFS_MAGIC)
		return -1;
	return TAKE_FD(fd);
}

/* Make a namespace with its loopback up and mount it on dfd/name; its fd, or
 * -errno.  A child makes it together with a user namespace of its own, which
 * then owns it: not the host's, so that the kernel sends it none of the
 * host's uevents (they go to the namespaces the initial user namespace
 * owns), and not the sandbox's, which is new for every sandbox.  No process
 * of a sandbox has any capability in that user namespace (a sibling of its
 * own): none can change the namespace's links, addresses, routes or sysctls.
 * The child lives until the namespace is mounted. */
static int make_netns(const char *dir, int dfd, const char *name)
{
	char path[PATH_MAX], ns[64], c = 0;
	_cleanup_close_ int f = openat(dfd, name, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	int ready[2] = { -1, -1 }, done[2] = { -1, -1 }, r = 0, st;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (f < 0)
		return -errno;
	if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(done, O_CLOEXEC) < 0) {
		r = -errno;
		goto out;
	}
	pid = fork();
	if (pid < 0) {
		r = -errno;
		goto out;
	}
	if (pid == 0) {
		close(done[1]);   /* so that the parent's close ends the read below */
		c = unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0 && loopback_up() == 0 ? 'Y' : 'N';
		(void)!write(ready[1], &c, 1);
		(void)!read(done[0], &c, 1);   /* until the parent closes its end */
		_exit(0);
	}
	close(ready[1]);
	ready[1] = -1;
	if (read(ready[0], &c, 1) != 1 || c != 'Y')
		r = -EIO;
	snprintf(ns, sizeof(ns), "/proc/%d/ns/net", (int)pid);
	if (r == 0 && mount(ns, path, NULL, MS_BIND, NULL) < 0)
		r = -errno;
	close(done[1]);
	done[1] = -1;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (r == 0) {
		r = open_netns(dfd, name);
		if (r < 0)
			r = -EIO;
	}
out:
	for (int i = 0; i < 2; i++) {
		if (ready[i] >= 0)
			close(ready[i]);
		if (done[i] >= 0)
			close(done[i]);
	}
	return r;
}

void netns_slot_init(struct netns_slot *s)
{
	*s = (struct netns_slot)NETNS_SLOT_INIT;
}

/* The namespace's statistics: the interfaces' packet and byte counters and
 * the protocols' (IP, ICMP, TCP, UDP, their extensions).  None can be reset
 * (a loopback cannot be deleted and made again), and the next sandbox reads
 * them (/proc/net, or RTM_GETLINK over netlink route, which it may use), so
 * they would carry what one sandbox did to the next: a namespace whose
 * counters moved while a sandbox had it is not reused (netns_slot_release). */
static const char *const count_files[4] = {
	"/proc/thread-self/net/dev", "/proc/thread-self/net/snmp",
	"/proc/thread-self/net/snmp6", "/proc/thread-self/net/netstat",
};

/* FNV-1a over the counters' text; 0 when one cannot be read. */
static uint64_t counters_hash(const struct netns_slot *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	char buf[8192];

	for (int i = 0; i < 4; i++) {
		ssize_t n;
		off_t at = 0;

		if (s->count_fd[i] < 0)
			return 0;
		while ((n = pread(s->count_fd[i], buf, sizeof(buf), at)) > 0) {
			for (ssize_t j = 0; j < n; j++)
				h = (h ^ (unsigned char)buf[j]) * 0x100000001b3ull;
			at += n;
		}
		if (n < 0)
			return 0;
	}
	return h ? h : 1;
}

/* The counters' hash a clean release wrote into the slot's lock file, 0 when
 * it has none (a namespace made, or thrown away, since). */
static uint64_t counted_read(int lock_fd)
{
	char buf[32];
	ssize_t n = pread(lock_fd, buf, sizeof(buf) - 1, 0);
	unsigned long long h = 0;

	if (n <= 0)
		return 0;
	buf[n] = '\0';
	return sscanf(buf, "counted %llx", &h) == 1 ? h : 0;
}

int netns_slot_take(const struct sandbox *sb, struct netns_slot *s)
{
	const char *dir = pool_dir(&sb->node);
	_cleanup_close_ int dfd = -1;
	int n = pool_size();

	netns_slot_init(s);
	if (!pool_enabled(sb) || sb->sysfs || netpolicy_start_allow(sb) > 0)
		return 0;
	s->dir = dir;
	dfd = open_pool_dir(dir, true);
	if (dfd < 0)
		return log_errno(dfd, "pool: directory '%s'", dir);
	for (int i = 0; i < n; i++) {
		char lock[32], ns[32];
		int fd, r;

		snprintf(lock, sizeof(lock), "net.%d.lock", i);
		snprintf(ns, sizeof(ns), "net.%d", i);
		fd = lock_file_at(dfd, lock, true);
		if (fd == -EBUSY || fd == -EAGAIN)
			continue;
		if (fd < 0)
			return log_errno(fd, "pool: '%s/%s'", dir, lock);
		s->lock_fd = fd;
		s->index = i;
		if (left_in_use(fd)) {
			/* Its launcher died with it in use: whatever ran in it may be
			 * alive still, or have left state behind. */
			char path[PATH_MAX];

			snprintf(path, sizeof(path), "%s/%s", dir, ns);
			umount2(path, MNT_DETACH);
		}
		s->host_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
		if (s->host_fd < 0) {
			r = log_errno(-errno, "pool: the launcher's network namespace");
			netns_slot_release(s);
			return r;
		}
		s->ns_fd = open_netns(dfd, ns);
		if (s->ns_fd >= 0)
			s->counted = counted_read(fd);
		if (s->ns_fd < 0) {
			s->ns_fd = make_netns(dir, dfd, ns);
			if (s->ns_fd < 0) {
				r = log_errno(s->ns_fd, "pool: make a network namespace at '%s/%s'",
				              dir, ns);
				netns_slot_release(s);
				return r;
			}
		}
		/* In use from now on, until released clean. */
		r = mark_in_use(fd);
		if (r < 0) {
			r = log_errno(r, "pool: '%s/%s'", dir, lock);
			netns_slot_release(s);
			return r;
		}
		return 0;
	}
	return 0;   /* every slot in use: a namespace of the sandbox's own */
}

int netns_slot_enter(struct netns_slot *s)
{
	if (setns(s->ns_fd, CLONE_NEWNET) < 0)
		return log_errno(-errno, "pool: enter network namespace %d", s->index);
	/* Opened in the namespace, these show its sockets whenever read. */
	s->stat_fd[0] = open("/proc/thread-self/net/sockstat", O_RDONLY | O_CLOEXEC);
	s->stat_fd[1] = open("/proc/thread-self/net/sockstat6", O_RDONLY | O_CLOEXEC);
	s->stat_fd[2] = open("/proc/thread-self/net/unix", O_RDONLY | O_CLOEXEC);
	for (int i = 0; i < 4; i++)
		s->count_fd[i] = open(count_files[i], O_RDONLY | O_CLOEXEC);
	/* A namespace back from the pool has its counters' hash in the lock
	 * file (netns_slot_release): one reading of them per launch, not two. */
	if (!s->counted)
		s->counted = counters_hash(s);
	return 0;
}

int netns_slot_leave(struct netns_slot *s)
{
	if (setns(s->host_fd, CLONE_NEWNET) < 0)
		return log_errno(-errno, "pool: return to the launcher's network namespace");
	return 0;
}

/* Does the sockstat text in buf count no socket?  The per-namespace fields
 * are "used" (sockets with a file, of every family: with_used), "inuse"
 * (hashed, orphans included) and "tw" (TIME_WAIT); "orphan", "alloc" and
 * "mem" are node-wide. */
static bool sockstat_empty(char *buf, bool with_used)
{
	for (char *save = NULL, *tok = strtok_r(buf, " \n", &save); tok;
	     tok = strtok_r(NULL, " \n", &save)) {
		if ((!with_used || strcmp(tok, "used")) && strcmp(tok, "inuse") && strcmp(tok, "tw"))
			continue;
		tok = strtok_r(NULL, " \n", &save);
		if (!tok || strcmp(tok, "0"))
			return false;
	}
	return true;
}

static ssize_t read_at0(int fd, char *buf, size_t len)
{
	ssize_t n = fd < 0 ? -1 : pread(fd, buf, len - 1, 0);

	if (n >= 0)
		buf[n] = '\0';
	return n;
}

/* Has the namespace no socket left?  Usually every count is 0.  Sockets
 * closed just before are sometimes still counted in "used": the kernel frees
 * netlink sockets (glibc's getaddrinfo opens one) after an RCU grace period.
 * Then the namespace is still clean if no protocol has a socket hashed or in
 * TIME_WAIT and no unix socket exists (a socket outlives its processes only
 * as a descriptor in flight in a unix socket, which is listed until the
 * kernel's garbage collector frees it). */
static bool netns_clean(const struct netns_slot *s)
{
	char buf[2][1024], unix_buf[256];
	bool all_zero = true;

	for (int i = 0; i < 2; i++) {
		char copy[1024];

		if (read_at0(s->stat_fd[i], buf[i], sizeof(buf[i])) <= 0)
			return false;
		memcpy(copy, buf[i], sizeof(copy));
		all_zero = all_zero && sockstat_empty(copy, true);
	}
	if (all_zero)
		return true;
	if (!sockstat_empty(buf[0], false) || !sockstat_empty(buf[1], false))
		return false;
	/* Only the header line: "Num       RefCount Protocol ...\n". */
	return read_at0(s->stat_fd[2], unix_buf, sizeof(unix_buf)) > 0 &&
	       strchr(unix_buf, '\n') && !strchr(unix_buf, '\n')[1];
}

void netns_slot_release(struct netns_slot *s)
{
	if (s->lock_fd >= 0) {
		if (s->ns_fd >= 0 && netns_clean(s) && s->counted &&
		    counters_hash(s) == s->counted) {
			char line[32];
			int n = snprintf(line, sizeof(line), "counted %016llx\n",
			                 (unsigned long long)s->counted);

			/* Kept for the next taker; written once per namespace. */
			if (counted_read(s->lock_fd) != s->counted &&
			    pwrite(s->lock_fd, line, (size_t)n, 0) != n)
				(void)!ftruncate(s->lock_fd, 0);
			futimens(s->lock_fd, NULL);
		} else if (s->ns_fd >= 0) {
			char path[PATH_MAX];

			snprintf(path, sizeof(path), "%s/net.%d", s->dir, s->index);
			if (umount2(path, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
				log_errno(-errno, "pool: unmount '%s'", path);
			else {
				(void)!ftruncate(s->lock_fd, 0);   /* its hash goes with it */
				futimens(s->lock_fd, NULL);
			}
		}
		close(s->lock_fd);
	}
	for (int i = 0; i < 3; i++)
		if (s->stat_fd[i] >= 0)
			close(s->stat_fd[i]);
	for (int i = 0; i < 4; i++)
		if (s->count_fd[i] >= 0)
			close(s->count_fd[i]);
	if (s->ns_fd >= 0)
		close(s->ns_fd);
	if (s->host_fd >= 0)
		close(s->host_fd);
	netns_slot_init(s);
}

/* ---- cgroups ------------------------------------------------------------ */

/*
 * A v1 memory cgroup costs the most of a sandbox's cgroups: its creation
 * allocates shrinker maps sized by every superblock on the node, and its
 * offlining and freeing (in kworkers, after the rmdir) walk them again.  A
 * slot (cg.N.lock) is a set of directories, one per hierarchy, that the next
 * sandbox reuses once the one before has no process left in it and holds at
 * most POOL_CG_MAX_CHARGE bytes: emptying a memory cgroup (force_empty)
 * reclaims and runs every shrinker, dearer than a new cgroup (6-9 ms here).
 * The lock file lists the directories, which sit under the cgroup of the
 * launcher that made them; a launcher under another cgroup remakes them
 * under its own.
 */

/* A slot's directories are named lazyroot-pool-HASH.N, HASH of the pool's
 * directory: pools of different directories (tests keep their own) never
 * share cgroups under one parent. */
static void slot_name(const char *dir, int index, char *out, size_t len)
{
	uint32_t h = 2166136261u;

	for (const char *p = dir; *p; p++)
		h = (h ^ (uint8_t)*p) * 16777619u;
	snprintf(out, len, "lazyroot-pool-%08x.%d", h, index);
}

/* The "cgroup PATH" lines a slot's lock file lists: the directories of the
 * slot as its last taker made them (the launcher's own cgroup, under which
 * they sit, may differ between launchers). */
static int slot_paths(const struct sandbox_cgroups *cg, struct buf *b)
{
	for (int i = 0; i < CG_COUNT; i++) {
		bool dup = false;

		for (int j = 0; j < i && cg->path[i]; j++)
			dup = dup || (cg->path[j] && !strcmp(cg->path[j], cg->path[i]));
		if (cg->path[i] && !dup && buf_printf(b, "cgroup %s\n", cg->path[i]) < 0)
			return -ENOMEM;
	}
	return 0;
}

/* Remove the directories the lock file fd lists, killing what is still in
 * them; only paths under /sys/fs/cgroup named as slot index's are touched.
 * 0 when all are gone. */
static int remove_listed(const char *dir, int fd, int index)
{
	char buf[4096], want[48];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	int r = 0;

	if (n <= 0)
		return 0;
	buf[n] = '\0';
	slot_name(dir, index, want, sizeof(want));
	for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		const char *path = l + 7, *base = strrchr(l, '/');

		if (strncmp(l, "cgroup /sys/fs/cgroup/", 22) || strstr(path, "/../") || !base ||
		    strcmp(base + 1, want))
			continue;
		if (cgroup_remove(path, true) < 0)
			r = -EBUSY;
	}
	return r;
}

static int slot_index(const char *name, const char *prefix)
{
	size_t n = strlen(prefix);
	char *end;
	long i;

	if (strncmp(name, prefix, n))
		return -1;
	i = strtol(name + n, &end, 10);
	return end != name + n && !strcmp(end, ".lock") && i >= 0 && i < 100000 ? (int)i : -1;
}

/* The lock file's line after its "cgroup" lines, written by a launcher that
 * returns the slot to the pool: what the set carries (cgroups_carry).  Fixed
 * width, so that a release rewriting it leaves the file's length as it was. */
#define CARRY_FMT "carry %020llu %020llu %020llu\n"
#define CARRY_LEN (6 + 3 * 21)

static bool carry_parse(const char *s, size_t len, struct cgroups_carry *c)
{
	unsigned long long v[3];
	char line[CARRY_LEN + 1];

	if (len != CARRY_LEN)
		return false;
	memcpy(line, s, len);
	line[len] = '\0';
	if (sscanf(line, "carry %llu %llu %llu", &v[0], &v[1], &v[2]) != 3 ||
	    line[len - 1] != '\n')
		return false;
	*c = (struct cgroups_carry){ v[0], v[1], v[2] };
	return true;
}

int cgroup_slot_take(const struct sandbox *sb, struct cgroup_slot *s, struct sandbox_cgroups *cg)
{
	const char *dir = pool_dir(&sb->node);
	_cleanup_close_ int dfd = -1;
	int n = pool_size();

	*s = (struct cgroup_slot)CGROUP_SLOT_INIT;
	/* With an allowlist, BPF programs go on the cgroup2 directory, which
	 * then stays the sandbox's own and named after it (for operators, and
	 * the links die with the launcher either way). */
	if (!pool_enabled(sb) || netpolicy_start_allow(sb) > 0)
		return 0;
	dfd = open_pool_dir(dir, true);
	if (dfd < 0)
		return log_errno(dfd, "pool: directory '%s'", dir);
	for (int i = 0; i < n; i++) {
		_cleanup_(buf_freep) struct buf want = BUF_INIT;
		char lock[32], name[48], have[4096];
		struct cgroups_carry carry;
		bool same, dead, carried;
		ssize_t len;
		int fd, r;

		snprintf(lock, sizeof(lock), "cg.%d.lock", i);
		fd = lock_file_at(dfd, lock, true);
		if (fd == -EBUSY || fd == -EAGAIN)
			continue;
		if (fd < 0)
			return log_errno(fd, "pool: '%s/%s'", dir, lock);
		slot_name(dir, i, name, sizeof(name));
		r = cgroups_resolve(sb, name, cg);
		if (r < 0) {
			close(fd);
			return r;
		}
		/* A v2 memory cgroup's peak cannot be reset for the next reader. */
		if (cg->path[CG_MEMORY] && cg->v2[CG_MEMORY]) {
			cgroups_forget(cg);
			close(fd);
			return 0;
		}
		if (slot_paths(cg, &want) < 0) {
			cgroups_forget(cg);
			close(fd);
			return -ENOMEM;
		}
		len = pread(fd, have, sizeof(have), 0);
		same = len >= (ssize_t)want.len && !memcmp(have, want.data, want.len);
		/* A dead launcher's slot (mtime 0: its sandbox may still be in
		 * it), or one made under another launcher's cgroup: start over,
		 * carrying nothing. */
		dead = left_in_use(fd);
		carried = !dead && same &&
		          carry_parse(have + want.len, (size_t)len - want.len, &carry);
		if (dead || !same) {
			if (remove_listed(dir, fd, i) < 0) {
				cgroups_forget(cg);
				close(fd);
				continue;   /* left dirty for gc; try the next slot */
			}
		}
		if (!same || (len != (ssize_t)want.len && !carried)) {
			if (pwrite(fd, want.data, want.len, 0) != (ssize_t)want.len ||
			    ftruncate(fd, (off_t)want.len) < 0) {
				r = log_errno(-errno, "pool: '%s/%s'", dir, lock);
				cgroups_forget(cg);
				close(fd);
				return r;
			}
			len = (ssize_t)want.len;
		}
		s->paths_len = want.len;
		s->file_len = (size_t)len;
		/* In use from now on (mtime 0), until released.  A carry line
		 * stays in the file meanwhile but counts only with a release's
		 * mtime, which the release sets after rewriting the line. */
		r = mark_in_use(fd);
		if (r == 0) {
			r = cgroups_make_missing(cg);
			if (r > 0)
				carried = false;   /* new directories: zero counters */
		}
		if (r >= 0)
			r = cgroups_reuse(sb, cg, carried ? &carry : NULL);
		if (r < 0) {
			/* E.g. a memory limit below what the slot is still charged:
			 * remove the slot's directories, use cgroups of the sandbox's
			 * own. */
			if (remove_listed(dir, fd, i) == 0 && ftruncate(fd, (off_t)want.len) == 0)
				futimens(fd, NULL);
			cgroups_forget(cg);
			close(fd);
			return 0;
		}
		s->lock_fd = fd;
		s->index = i;
		return 0;
	}
	return 0;   /* every slot in use: cgroups of the sandbox's own */
}

/* Write the carry line after the "cgroup" lines; false if it could not be. */
static bool carry_write(const struct cgroup_slot *s, const struct sandbox_cgroups *cg)
{
	struct cgroups_carry c;
	char line[CARRY_LEN + 1];

	if (!cgroups_carry_get(cg, &c))
		return false;
	if (snprintf(line, sizeof(line), CARRY_FMT, (unsigned long long)c.oom_kill,
	             (unsigned long long)c.pids_max, (unsigned long long)c.cpu_usec) != CARRY_LEN)
		return false;
	if (pwrite(s->lock_fd, line, CARRY_LEN, (off_t)s->paths_len) != CARRY_LEN)
		return false;
	return s->file_len <= s->paths_len + CARRY_LEN ||
	       ftruncate(s->lock_fd, (off_t)(s->paths_len + CARRY_LEN)) == 0;
}

int cgroup_slot_release(struct cgroup_slot *s, struct sandbox_cgroups *cg)
{
	int r = 0;

	if (s->lock_fd < 0)
		return 0;
	if (cgroups_reusable(cg, POOL_CG_MAX_CHARGE)) {
		/* A slot whose carry line cannot be written goes back without
		 * one (its next taker reads the counters).  One that cannot lose
		 * a stale line either is marked as a dead launcher's (mtime 0; a
		 * failed write may have stamped the file), which its next taker
		 * starts over. */
		if (carry_write(s, cg) || ftruncate(s->lock_fd, (off_t)s->paths_len) == 0)
			futimens(s->lock_fd, NULL);
		else
			mark_in_use(s->lock_fd);
	} else {
		for (int i = CG_COUNT - 1; i >= 0; i--) {
			bool dup = false;

			for (int j = 0; j < i && cg->path[i]; j++)
				dup = dup || (cg->path[j] && !strcmp(cg->path[j], cg->path[i]));
			if (cg->path[i] && !dup && cgroup_remove(cg->path[i], true) < 0)
				r = -EBUSY;
		}
		/* Gone: made afresh by the next taker.  Else marked as a dead
		 * launcher's, to be removed by the next taker or gc. */
		if (r == 0 && ftruncate(s->lock_fd, (off_t)s->paths_len) == 0)
			futimens(s->lock_fd, NULL);
		else
			mark_in_use(s->lock_fd);
	}
	cgroups_forget(cg);
	close(s->lock_fd);
	*s = (struct cgroup_slot)CGROUP_SLOT_INIT;
	return r;
}

int sandbox_pool_gc(const struct sandbox_node *n, double max_idle,
                    struct sandbox_pool_gc_result *ret)
{
	const char *dir = pool_dir(n);
	_cleanup_close_ int dfd = open_pool_dir(dir, false);
	struct sandbox_pool_gc_result res = { 0 };
	struct timespec now;
	DIR *d;
	struct dirent *e;

	if (dfd == -ENOENT)
		goto out;
	if (dfd < 0)
		return log_errno(dfd, "gc: pool '%s'", dir);
	d = fdopendir(dfd);
	if (!d)
		return log_errno(-errno, "gc: pool '%s'", dir);
	dfd = -1;
	clock_gettime(CLOCK_REALTIME, &now);
	while ((e = readdir(d))) {
		char ns[64], path[PATH_MAX];
		size_t len = strlen(e->d_name);
		struct stat st;
		int fd;

		int cg_index = slot_index(e->d_name, "cg.");

		if (cg_index < 0 && (slot_index(e->d_name, "net.") < 0 || len >= sizeof(ns)))
			continue;
		fd = lock_file_at(dirfd(d), e->d_name, false);
		if (fd == -EBUSY) {
			res.busy++;
			continue;
		}
		if (fd < 0)
			continue;
		if (fstat(fd, &st) == 0 && max_idle > 0 && st.st_mtim.tv_sec != 0 &&
		    (double)(now.tv_sec - st.st_mtim.tv_sec) < max_idle) {
			res.kept++;
			close(fd);
			continue;
		}
		if (cg_index >= 0) {
			if (remove_listed(dir, fd, cg_index) < 0) {
				res.failed++;
				close(fd);
				continue;
			}
			unlinkat(dirfd(d), e->d_name, 0);
			close(fd);
			res.removed++;
			continue;
		}
		memcpy(ns, e->d_name, len - 5);
		ns[len - 5] = '\0';
		snprintf(path, sizeof(path), "%s/%s", dir, ns);
		if (umount2(path, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT) {
			log_errno(-errno, "gc: unmount '%s'", path);
			res.failed++;
			close(fd);
			continue;
		}
		unlinkat(dirfd(d), ns, 0);
		unlinkat(dirfd(d), e->d_name, 0);   /* while locked, as a launcher's record */
		close(fd);
		res.removed++;
	}
	closedir(d);
out:
	if (ret)
		*ret = res;
	return res.failed ? -EBUSY : 0;
}

/* ---- host id ranges ----------------------------------------------------- */

/*
 * Each running sandbox has a range of 65536 host uids and gids of its own:
 * the kernel charges per-user budgets to host ids (pipe buffer pages and
 * descriptors in flight over unix sockets to the uid a process runs as;
 * inotify instances and watches, message queue bytes, pending signals and
 * the like to the owner of its user namespace, launch.c), so sandboxes
 * that shared one range shared, and could exhaust, one budget.  The ranges
 * are the node's ids_range when it has one (many nodes on one machine each
 * get their own), else the subordinate ids of the user ID_USER
 * (/etc/subuid, /etc/subgid), cut in blocks of 65536; without an entry
 * there, the built-in range below, which the node setup should reserve
 * there (sandbox/POLICY.md, "Host ids").  Block N is held with a lock on
 * IDS/N.lock (IDS the node's ids_dir) while its sandbox runs (id_slot_take
 * says which block a launcher tries first).  A
 * launcher that dies releases its lock by dying; its sandbox's processes die
 * with it (PR_SET_PDEATHSIG, the pid namespace), so the next taker of that
 * block finds no process of it left but the ones still being killed.
 */
#define ID_USER "lazyroot"
#define ID_DIR_DEFAULT "/run/lazyroot/ids"
#define ID_DEFAULT_START 3000000000u
#define ID_DEFAULT_COUNT (4096u * SANDBOX_ID_RANGE)
#define ID_COLUMNS 64u

/* ID_USER's first range in file (subuid or subgid format, "name:start:count"),
 * else the default.  Read at every launch: a few hundred bytes. */
static void id_range(const char *file, uint32_t *start, uint32_t *count)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;

	*start = ID_DEFAULT_START;
	*count = ID_DEFAULT_COUNT;
	if (read_file(file, 1 << 20, &b) < 0)
		return;
	for (char *save = NULL, *l = strtok_r((char *)b.data, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save)) {
		unsigned long long s, c;
		int end = 0;

		if (strncmp(l, ID_USER ":", sizeof(ID_USER)) ||
		    sscanf(l + sizeof(ID_USER), "%llu:%llu%n", &s, &c, &end) != 2 ||
		    l[sizeof(ID_USER) + (size_t)end] != '\0')
			continue;
		if (s == 0 || c < SANDBOX_ID_RANGE || s + c > UINT32_MAX)
			continue;   /* host root never, and nothing past the last id */
		*start = (uint32_t)s;
		*count = (uint32_t)c;
		return;
	}
}

/* The node's ranges: its ids_range setting, else the files'. */
static void node_ranges(const struct sandbox_node *nd, uint32_t *ustart, uint32_t *ucount,
                        uint32_t *gstart, uint32_t *gcount)
{
	if (nd && nd->ids_count) {
		*ustart = *gstart = nd->ids_start;
		*ucount = *gcount = nd->ids_count;
		return;
	}
	id_range("/etc/subuid", ustart, ucount);
	id_range("/etc/subgid", gstart, gcount);
}

int id_slot_take(const struct sandbox *sb, struct id_slot *s)
{
	const char *dir = sb->node.ids_dir ? sb->node.ids_dir : ID_DIR_DEFAULT;
	_cleanup_close_ int dfd = -1;
	uint32_t ustart, ucount, gstart, gcount, n, first, levels;

	*s = (struct id_slot)ID_SLOT_INIT;
	if (!sb->ids_auto) {
		s->uid_base = sb->uid_base;
		s->gid_base = sb->gid_base;
		return 0;
	}
	node_ranges(&sb->node, &ustart, &ucount, &gstart, &gcount);
	n = (ucount < gcount ? ucount : gcount) / SANDBOX_ID_RANGE;
	if (!n)
		return log_error(-EBUSY, "ids: the node's id range holds no block of %u ids",
		                 SANDBOX_ID_RANGE);
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 && errno == ENOENT) {
		int r = mkdir_p(dir, 0700);

		if (r < 0)
			return log_errno(r, "ids: directory '%s'", dir);
		dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	if (dfd < 0)
		return log_errno(-errno, "ids: directory '%s'", dir);
	/* Blocks are tried column by column: block (c + l * ID_COLUMNS) for
	 * every level l of column c, starting at the column of the launcher's
	 * pid.  Launchers at once rarely share a column, so the first try is
	 * usually free; thousands of sandboxes held fill the levels of each
	 * column, and a launch tries about as many blocks as levels are full,
	 * not one per sandbox held.  And lock files are made level by level:
	 * a node that runs few sandboxes at once uses (and creates, once) the
	 * first ID_COLUMNS lock files only; making a file is the dear part of
	 * taking a block where /run is ext4 without a journal (about 10% of
	 * the launch rate when every launch made one: docs/perf-log.md,
	 * "Sandboxes that cannot starve each other"). */
	levels = (n + ID_COLUMNS - 1) / ID_COLUMNS;
	first = (uint32_t)getpid() % (n < ID_COLUMNS ? n : ID_COLUMNS);
	for (uint32_t c = 0; c < ID_COLUMNS && c < n; c++) {
		for (uint32_t l = 0; l < levels; l++) {
			uint32_t i = (first + c) % (n < ID_COLUMNS ? n : ID_COLUMNS) + l * ID_COLUMNS;
			char lock[32];
			int fd;

			if (i >= n)
				break;
			snprintf(lock, sizeof(lock), "%u.lock", (unsigned)i);
			fd = lock_file_at(dfd, lock, true);
			if (fd == -EBUSY || fd == -EAGAIN)
				continue;
			if (fd < 0)
				return log_errno(fd, "ids: '%s/%s'", dir, lock);
			s->lock_fd = fd;
			s->uid_base = ustart + i * SANDBOX_ID_RANGE;
			s->gid_base = gstart + i * SANDBOX_ID_RANGE;
			return 0;
		}
	}
	if (sb->node.ids_count)
		return log_error(-EBUSY, "ids: all %u id ranges of the node's ids_range %u:%u are "
		                 "in use", (unsigned)n, (unsigned)ustart, (unsigned)ucount);
	return log_error(-EBUSY, "ids: all %u id ranges of '%s' are in use (/etc/subuid, "
	                 "/etc/subgid)", (unsigned)n, ID_USER);
}

bool id_slot_node_owned(const struct sandbox_node *nd, uid_t uid)
{
	uint32_t start, count, gs, gc;

	node_ranges(nd, &start, &count, &gs, &gc);
	return uid >= start && uid - start < count;
}

void id_slot_release(struct id_slot *s)
{
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	*s = (struct id_slot)ID_SLOT_INIT;
}
