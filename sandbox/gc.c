/*
 * gc.c — what a launcher leaves behind when it dies without cleaning up
 * (SIGKILL, OOM kill, a crash), and the collector that removes it.
 *
 * A launcher claims its sandbox's name with a record,
 * /run/lazyroot/launchers/NAME (or $LAZYROOT_RECORD_DIR/NAME), which it
 * holds locked (flock) for as long as it lives and in which it lists the
 * cgroup directories before it makes them, and its init's pid once it is
 * cloned (an exec into the running sandbox finds the init there:
 * sandbox_enter); a sandbox that would leave
 * nothing behind and keeps the default name has none (launch.c).  A record
 * that can be locked therefore belongs to a dead launcher:
 * the collector kills whatever is still in the listed cgroups (cgroup.kill,
 * or SIGKILL to each pid of cgroup.procs on v1), removes them, removes the
 * sandbox's runtime state directory (/run/lazyroot/sandboxes/NAME) if any,
 * gives the writable binds it lists back (owner and mode as before the run,
 * every setuid and setgid bit under them cleared: binds.c), and last the
 * record.  Everything else of a sandbox dies with its
 * processes: the init dies with the launcher (PR_SET_PDEATHSIG) and takes its
 * pid namespace along, mounts live only in the sandbox's mount namespace,
 * BPF links and maps only in the launcher's descriptors, and the veth pair
 * with the network namespace.
 *
 * The sandbox service's state directories (service.h) are collected after
 * the records, so that a keeper killed with SIGKILL has lost its cgroups by
 * then: a directory whose keeper.lock is free goes when it has no
 * ended.json (the keeper was killed, and its sandbox with it) or when its
 * ended.json is SANDBOX_SERVICE_KEEP_ENDED seconds old (service.c).
 *
 * Races: a record is removed only by whoever holds its lock, and only if the
 * locked file is still the one at its path (a collector and a new launcher of
 * the same name may both have opened it).  `lazyroot run` collects at most
 * once every GC_INTERVAL seconds (the mtime of .gc in the record directory), so that a
 * launch costs one stat, not a scan.
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>

#include "lib/lib.h"
#include "sandbox/keeper-internal.h"
#include "sandbox/launch-internal.h"

#define RUN_DIR "/run/lazyroot"
#define RECORD_DIR_DEFAULT RUN_DIR "/launchers"
#define STATE_DIR_DEFAULT RUN_DIR "/sandboxes"
#define STAMP ".gc"
#define GC_INTERVAL 10   /* seconds between the collections `lazyroot run` makes */
#define RECORD_MAX 8192

/* Is path one that a launcher of this name would make: a directory named
 * name somewhere under /sys/fs/cgroup, without dot-dot components? */
static bool cgroup_path_ok(const char *path, const char *name)
{
	const char *base = strrchr(path, '/');

	return !strncmp(path, "/sys/fs/cgroup/", 15) && !strstr(path, "/../") &&
	       !strstr(path, "/./") && base && !strcmp(base + 1, name);
}

static void remove_state_dir(const struct sandbox_node *n, const char *name)
{
	char path[PATH_MAX];
	_cleanup_close_ int dfd = -1;
	DIR *d;
	struct dirent *e;

	snprintf(path, sizeof(path), "%s/%s", n && n->state_dir ? n->state_dir : STATE_DIR_DEFAULT,
	         name);
	dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return;
	d = fdopendir(dfd);
	if (!d)
		return;
	dfd = -1;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
	if (rmdir(path) < 0 && errno != ENOENT)
		log_errno(-errno, "gc: remove '%s'", path);
}

/* A record's "bind UID GID MODE DEV INO IDS_UID LENT PATH" line: the writable
 * bind PATH, owned UID:GID with MODE (octal) and inode DEV:INO before the
 * run, lent to the sandbox whose root is host uid IDS_UID when LENT is 1.
 * Given back as its launcher would have (bind_return), but only if PATH
 * still names that inode: a source replaced meanwhile (by a symlink to
 * somewhere else above all) is left alone, so that a collector never walks
 * and changes a tree the sandbox did not have. */
static void return_recorded_bind(const char *line, const char *name)
{
	unsigned long long dev, ino;
	unsigned uid, gid, mode, ids_uid, lent;
	struct lent_bind l = { .fd = -1 };
	struct sandbox_bind b = { 0 };
	struct stat st;
	int at = 0;

	if (sscanf(line, "bind %u %u %o %llu %llu %u %u %n", &uid, &gid, &mode, &dev, &ino,
	           &ids_uid, &lent, &at) != 7 || !at || line[at] != '/') {
		log_error(-EINVAL, "gc: record of '%s' has a bind line it cannot read; left alone", name);
		return;
	}
	b.src = (char *)line + at;
	l.fd = open(b.src, O_PATH | O_CLOEXEC);
	if (l.fd < 0 || fstat(l.fd, &st) < 0 || st.st_dev != (dev_t)dev || st.st_ino != (ino_t)ino) {
		if (l.fd >= 0)
			log_error(-ESTALE, "gc: bind '%s' of '%s' is another file now; left alone",
			          b.src, name);
		if (l.fd >= 0)
			close(l.fd);
		return;
	}
	l.st = st;
	l.st.st_uid = uid;
	l.st.st_gid = gid;
	l.st.st_mode = (st.st_mode & S_IFMT) | (mode & 07777);
	l.ids_uid = ids_uid;
	l.lent = lent == 1;
	bind_return(&b, &l);
}

/* Remove what the record in fd (locked by the caller) lists: its cgroups
 * first (so that no process of the sandbox is left), then its binds are
 * given back.  0 when all of it is gone. */
static int clean_record(const struct sandbox_node *nd, int fd, const char *name)
{
	char buf[RECORD_MAX + 1];
	ssize_t n = pread(fd, buf, RECORD_MAX, 0);
	int r = 0;

	if (n < 0)
		return log_errno(-errno, "gc: read the record of '%s'", name);
	buf[n] = '\0';
	for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		if (!strncmp(l, "bind ", 5))
			continue;   /* below, once the cgroups are gone */
		if (strncmp(l, "cgroup ", 7))
			continue;
		if (!cgroup_path_ok(l + 7, name)) {
			log_error(-EINVAL, "gc: record of '%s' names '%s', not its cgroup; left alone",
			          name, l + 7);
			continue;
		}
		if (cgroup_remove(l + 7, true) < 0)
			r = -EBUSY;
	}
	/* strtok_r cut buf into lines: walk them again. */
	for (ssize_t i = 0; i < n; i += (ssize_t)strlen(buf + i) + 1)
		if (!strncmp(buf + i, "bind ", 5))
			return_recorded_bind(buf + i, name);
	remove_state_dir(nd, name);
	return r;
}

int lock_file_at(int dfd, const char *name, bool create)
{
	for (int tries = 0; tries < 8; tries++) {
		_cleanup_close_ int fd = openat(dfd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC |
		                                (create ? O_CREAT : 0), 0600);
		struct stat a, b;

		if (fd < 0)
			return -errno;
		if (flock(fd, LOCK_EX | LOCK_NB) < 0)
			return errno == EWOULDBLOCK ? -EBUSY : -errno;
		if (fstat(fd, &a) < 0)
			return -errno;
		if (fstatat(dfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_ino == b.st_ino &&
		    a.st_dev == b.st_dev)
			return TAKE_FD(fd);
		if (!create)
			return -ENOENT;   /* removed (or replaced) by someone else */
	}
	return -EAGAIN;
}

/* The node's record directory (docs/settings.md: record_dir): launchers and
 * collectors that share one see each other's sandboxes (tests keep theirs
 * apart from whatever else runs on the host). */
static const char *record_dir(const struct sandbox_node *n)
{
	return n->record_dir ? n->record_dir : RECORD_DIR_DEFAULT;
}

static int open_record_dir(const char *dir, bool create)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0 && errno == ENOENT && create) {
		int r = mkdir_p(dir, 0755);

		if (r < 0)
			return log_errno(r, "launcher record directory '%s'", dir);
		fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	return fd < 0 ? -errno : fd;
}

int launch_record_open(const struct sandbox_node *n, const char *name, struct launch_record *rec)
{
	const char *dir = record_dir(n);
	_cleanup_close_ int dfd = open_record_dir(dir, true);
	char head[64];
	struct stat st;
	bool empty;
	int fd, r;

	if (dfd < 0)
		return log_errno(dfd, "launcher record directory '%s'", dir);
	/* Held for a moment by a collector removing a dead launcher's record of
	 * the same name (pids wrap): wait up to a second before calling it in
	 * use. */
	for (int tries = 0; (fd = lock_file_at(dfd, name, true)) == -EBUSY && tries < 200; tries++)
		nanosleep(&(struct timespec){ 0, 5 * 1000 * 1000 }, NULL);
	if (fd == -EBUSY)
		return log_error(-EBUSY, "sandbox name '%s' is in use by a running launcher", name);
	if (fd < 0)
		return log_errno(fd, "launcher record '%s/%s'", dir, name);
	rec->fd = fd;
	if (asprintf(&rec->path, "%s/%s", dir, name) < 0) {
		rec->path = NULL;
		launch_record_close(rec, true);
		return -ENOMEM;
	}
	empty = fstat(fd, &st) == 0 && st.st_size == 0;
	/* Left by a dead launcher of the same name: its cgroups would be in the way. */
	if (!empty) {
		r = clean_record(n, fd, name);
		if (r < 0) {
			launch_record_close(rec, true);
			return log_error(r, "sandbox name '%s': what a dead launcher left cannot be "
			                 "removed", name);
		}
	}
	snprintf(head, sizeof(head), "lazyroot launcher %d\n", (int)getpid());
	/* Truncate only a record that has something in it: ext4 writes back at
	 * close a file truncated to zero and then written (auto_da_alloc), and
	 * then the unlink at the end waits for that write and its discard. */
	if ((!empty && ftruncate(fd, 0) < 0) || pwrite(fd, head, strlen(head), 0) < 0) {
		r = log_errno(-errno, "launcher record '%s'", rec->path);
		launch_record_close(rec, true);
		return r;
	}
	return 0;
}

int launch_record_add(struct launch_record *rec, const struct sandbox_cgroups *cg)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	struct stat st;

	for (int i = 0; i < CG_COUNT; i++) {
		bool dup = false;

		for (int j = 0; j < i && cg->path[i]; j++)
			dup = dup || (cg->path[j] && !strcmp(cg->path[j], cg->path[i]));
		if (cg->path[i] && !dup && buf_printf(&b, "cgroup %s\n", cg->path[i]) < 0)
			return -ENOMEM;
	}
	if (fstat(rec->fd, &st) < 0 || pwrite(rec->fd, b.data, b.len, st.st_size) != (ssize_t)b.len)
		return log_errno(errno ? -errno : -EIO, "launcher record '%s'", rec->path);
	return 0;
}

int launch_record_init(struct launch_record *rec, pid_t pid)
{
	char line[32];
	struct stat st;
	int n = snprintf(line, sizeof(line), "init %d\n", (int)pid);

	if (rec->fd < 0)
		return 0;
	if (fstat(rec->fd, &st) < 0 || pwrite(rec->fd, line, (size_t)n, st.st_size) != n)
		return log_errno(errno ? -errno : -EIO, "launcher record '%s'", rec->path);
	return 0;
}

int launch_record_add_bind(struct launch_record *rec, const char *path, const struct stat *st,
                           uid_t ids_uid, bool lent)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	struct stat rs;

	if (strchr(path, '\n'))
		return log_error(-EINVAL, "bind '%s': a source path with a newline cannot be recorded",
		                 path);
	if (rec->fd < 0)
		return log_error(-EINVAL, "bind '%s': no launcher record to list it in", path);
	if (buf_printf(&b, "bind %u %u %o %llu %llu %u %u %s\n", (unsigned)st->st_uid,
	               (unsigned)st->st_gid, (unsigned)(st->st_mode & 07777),
	               (unsigned long long)st->st_dev, (unsigned long long)st->st_ino,
	               (unsigned)ids_uid, lent ? 1u : 0u, path) < 0)
		return -ENOMEM;
	if (fstat(rec->fd, &rs) < 0 || pwrite(rec->fd, b.data, b.len, rs.st_size) != (ssize_t)b.len)
		return log_errno(errno ? -errno : -EIO, "launcher record '%s'", rec->path);
	return 0;
}

void launch_record_close(struct launch_record *rec, bool remove)
{
	if (remove && rec->path && rec->fd >= 0)
		unlink(rec->path);   /* while still locked: a collector never sees it unlocked */
	if (rec->fd >= 0)
		close(rec->fd);
	rec->fd = -1;
	free(rec->path);
	rec->path = NULL;
}

int sandbox_gc(const struct sandbox_node *n, void (*removed)(const char *name, void *ud),
               void *ud, struct sandbox_gc_result *ret)
{
	const char *dir = record_dir(n);
	_cleanup_close_ int dfd = open_record_dir(dir, false);
	struct sandbox_gc_result res = { 0 };
	DIR *d;
	struct dirent *e;

	if (dfd == -ENOENT)
		goto out;   /* no launcher ever ran here */
	if (dfd < 0)
		return log_errno(dfd, "gc: '%s'", dir);
	d = fdopendir(dfd);
	if (!d)
		return log_errno(-errno, "gc: '%s'", dir);
	dfd = -1;
	while ((e = readdir(d))) {
		int fd;

		if (e->d_name[0] == '.')
			continue;
		fd = lock_file_at(dirfd(d), e->d_name, false);
		if (fd == -EBUSY) {
			res.live++;
			continue;
		}
		if (fd < 0)
			continue;
		if (clean_record(n, fd, e->d_name) == 0) {
			unlinkat(dirfd(d), e->d_name, 0);
			res.removed++;
			if (removed)
				removed(e->d_name, ud);
		} else {
			res.failed++;
		}
		close(fd);
	}
	closedir(d);
out:
	/* after the records: a killed keeper's cgroups are gone by now */
	service_gc(n);
	if (ret)
		*ret = res;
	return res.failed ? -EBUSY : 0;
}

void sandbox_gc_maybe(const struct sandbox_node *n)
{
	_cleanup_close_ int dfd = open_record_dir(record_dir(n), false);
	struct timespec now;
	struct stat st;
	int fd;

	if (dfd < 0)
		return;
	clock_gettime(CLOCK_REALTIME, &now);
	if (fstatat(dfd, STAMP, &st, 0) == 0 && now.tv_sec - st.st_mtim.tv_sec < GC_INTERVAL &&
	    st.st_mtim.tv_sec <= now.tv_sec)
		return;
	fd = openat(dfd, STAMP, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return;
	futimens(fd, NULL);
	close(fd);
	(void)sandbox_gc(n, NULL, NULL, NULL);
	(void)sandbox_pool_gc(n, SANDBOX_POOL_IDLE, NULL);
}
