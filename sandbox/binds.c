/*
 * binds.c — writable binds lent to the sandbox for its run and given back
 * once it is gone (the idmapped mounts of the read-only ones are launch.c's).
 *
 * A writable bind's source, lent to the sandbox for its run.  Not shifted
 * (idmapped_tree), a source owned by host root would be out of the
 * sandbox's reach: its ids map to nothing inside.  So unless everyone may
 * write it already (mode o+w, e.g. a sticky 1777 directory that several
 * sandboxes share), the launcher makes the source itself (not what is in
 * it) owned by the sandbox's root (host uid_base, gid_base) for the run, and
 * gives it back, owner and mode as they were, once the sandbox is gone.  A
 * source owned by one of the node's sandbox ranges is lent already (to a
 * running sandbox, or left so by a killed launcher) and is not lent again.
 * Either way, once the sandbox is gone every setuid and setgid bit under
 * the source is cleared (bind_return).  Each source is listed in the
 * launcher's record before it is lent (launch_record_add_bind), so that when
 * the launcher is killed, `lazyroot gc` (or the next launch of the same
 * name) gives it back the same way (gc.c).
 */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "lib/lib.h"
#include "sandbox/launch-internal.h"

int bind_lend(const struct sandbox_node *n, const struct sandbox_bind *b,
              const struct id_slot *ids, struct lent_bind *l,
              struct launch_record *rec)
{
	bool lend;
	int r;

	l->ids_uid = ids->uid_base;
	l->fd = open(b->src, O_PATH | O_CLOEXEC);
	if (l->fd < 0 || fstat(l->fd, &l->st) < 0)
		return log_errno(-errno, "bind '%s'", b->src);
	lend = !((l->st.st_uid == ids->uid_base && l->st.st_gid == ids->gid_base) ||
	         (l->st.st_mode & S_IWOTH) || id_slot_node_owned(n, l->st.st_uid));
	/* Listed first: a launcher killed from here on leaves it to gc. */
	r = launch_record_add_bind(rec, b->src, &l->st, ids->uid_base, lend);
	if (r < 0)
		return r;
	if (!lend)
		return 0;
	if (fchownat(l->fd, "", ids->uid_base, ids->gid_base, AT_EMPTY_PATH) < 0)
		return log_errno(-errno, "bind '%s': lend it to the sandbox", b->src);
	l->lent = true;
	return 0;
}

/* Below this depth a tree is not walked; its directory is made mode 000
 * instead, which keeps every host user but root out of what is below. */
#define STRIP_DEPTH 128

/* Clear S_ISUID and S_ISGID of fd's inode (an O_PATH descriptor), through
 * /proc/self/fd: that names the inode itself, never a path that something
 * could have turned into a symlink meanwhile. */
static void strip_bits(int fd, const struct stat *st, mode_t mode)
{
	char path[32];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	if ((st->st_mode & 07777) != mode && chmod(path, mode) < 0)
		log_errno(-errno, "bind: clear the setuid and setgid bits of inode %llu",
		          (unsigned long long)st->st_ino);
}

/* Walk dir (an O_PATH descriptor of a directory, not closed here) and clear
 * the setuid and setgid bits of every file and directory under it; other
 * mounts are not entered.  Entries are opened O_PATH | O_NOFOLLOW. */
static void strip_tree(int dir, dev_t dev, int depth)
{
	int dfd = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *e;
	DIR *d;

	if (dfd < 0 || !(d = fdopendir(dfd))) {
		if (dfd >= 0)
			close(dfd);
		return;
	}
	while ((e = readdir(d))) {
		_cleanup_close_ int fd = -1;
		struct stat st;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		fd = openat(dirfd(d), e->d_name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st) < 0)
			continue;
		if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))
			strip_bits(fd, &st, st.st_mode & 01777);
		if (!S_ISDIR(st.st_mode) || st.st_dev != dev)
			continue;
		if (depth < STRIP_DEPTH)
			strip_tree(fd, dev, depth + 1);
		else
			strip_bits(fd, &st, 0);
	}
	closedir(d);
}

/* The sandbox is gone: give the source back and clear what it left. */
void bind_return(const struct sandbox_bind *b, struct lent_bind *l)
{
	struct stat st;

	if (l->fd < 0)
		return;
	if (fstat(l->fd, &st) < 0) {
		close(l->fd);
		l->fd = -1;
		return;
	}
	/* Given back only if it is still the sandbox's: someone else changed
	 * its owner meanwhile otherwise.  The source's own mode is the
	 * operator's, but what the sandbox owns loses its setuid and setgid
	 * bits. */
	if (l->lent && st.st_uid == l->ids_uid) {
		if (fchownat(l->fd, "", l->st.st_uid, l->st.st_gid, AT_EMPTY_PATH) < 0)
			log_errno(-errno, "bind '%s': give it back to its owner", b->src);
		else if (fstat(l->fd, &st) == 0)
			strip_bits(l->fd, &st, l->st.st_mode & 07777);
	} else if (st.st_uid >= l->ids_uid && st.st_uid - l->ids_uid < SANDBOX_ID_RANGE) {
		strip_bits(l->fd, &st, st.st_mode & 01777);
	}
	if (S_ISDIR(st.st_mode))
		strip_tree(l->fd, st.st_dev, 0);
	close(l->fd);
	l->fd = -1;
}

