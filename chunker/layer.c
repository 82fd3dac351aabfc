/*
 * layer.c — applying a tar stream to a build: each member's name is
 * normalised into the image tree (names that climb out of it are refused;
 * a leading '/' is dropped as GNU tar does), its inode added with its
 * attributes and extended attributes, and a regular file's contents streamed
 * into the build pipeline, holes included.
 *
 * With whiteouts (OCI layer semantics), `.wh.NAME` removes NAME from the
 * layers below, `.wh..wh..opq` hides everything the layers below put in its
 * directory, and other `.wh..wh.` names (AUFS bookkeeping) are ignored.
 * Whiteout entries themselves never enter the tree.
 */
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "chunker/chunker-internal.h"
#include "chunker/chunker.h"
#include "lib/lib.h"

#define WH_PREFIX ".wh."
#define WH_META ".wh..wh."
#define WH_OPAQUE ".wh..wh..opq"

int open_beneath(int dirfd, const char *path, int flags)
{
	struct open_how how = {
		.flags = (uint64_t)(flags | O_CLOEXEC),
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));

	return fd < 0 ? -errno : (int)fd;
}

/* Normalise a member name (or hard link target) into out. */
static int member_path(const char *archive, const char *member, const char *in, char *out,
                       size_t outlen)
{
	int r;

	/* GNU tar strips a leading '/' and goes on; an image build refuses the
	 * archive instead: such a member was never meant for a root filesystem */
	if (in[0] == '/')
		return log_error(-EINVAL, "%s: member '%s': absolute name '%s'", archive, member, in);
	r = image_path_normalize(in, out, outlen);
	if (r == -ENAMETOOLONG)
		return log_error(-ENAMETOOLONG, "%s: member '%s': name too long", archive, member);
	if (r < 0)
		return log_error(-EINVAL, "%s: member '%s': name '%s' leaves the archive root",
		                 archive, member, in);
	return 0;
}

static int apply_whiteout(struct build *b, const char *name, const char *member,
                          const char *path, const char *base)
{
	struct image_tree *t = build_tree(b);
	char dir[PATH_MAX], victim[PATH_MAX];
	size_t dlen = (size_t)(base - path);
	const char *target = base + strlen(WH_PREFIX);
	int r;

	/* path is normalised: dir is everything before base, minus the '/'. */
	memcpy(dir, path, dlen);
	dir[dlen ? dlen - 1 : 0] = 0;

	if (strcmp(base, WH_OPAQUE) == 0) {
		r = image_tree_clear_lower(t, dir);
		if (r < 0 && r != -ENOENT && r != -ENOTDIR)
			return log_errno(r, "%s: member '%s': opaque directory", name, member);
		return 0;
	}
	if (strncmp(base, WH_META, strlen(WH_META)) == 0)
		return 0;
	if (!target[0] || strcmp(target, ".") == 0 || strcmp(target, "..") == 0)
		return log_error(-EINVAL, "%s: member '%s': invalid whiteout", name, member);
	if ((size_t)snprintf(victim, sizeof(victim), "%s%s%s", dir, dir[0] ? "/" : "", target) >=
	    sizeof(victim))
		return log_error(-ENAMETOOLONG, "%s: member '%s': name too long", name, member);
	r = image_tree_remove(t, victim);
	if (r < 0 && r != -ENOENT && r != -ENOTDIR)
		return log_errno(r, "%s: member '%s': whiteout", name, member);
	return 0;
}

static int add_contents(struct build *b, struct tar_reader *rd, const char *name,
                        const struct tar_entry *e, struct image_inode *ino)
{
	int r;

	r = build_file_begin(b, ino, e->size);
	if (r < 0)
		return r == -ECANCELED ? r : log_errno(r, "%s: member '%s'", name, e->path);
	for (;;) {
		const void *data;
		size_t len;
		uint64_t hole;

		r = tar_reader_read(rd, &data, &len, &hole);
		if (r < 0)
			return r;  /* logged by the reader */
		if (r == 0)
			break;
		r = data ? build_file_data(b, data, len) : build_file_hole(b, hole);
		if (r < 0)
			return r == -ECANCELED ? r : log_errno(r, "%s: member '%s'", name, e->path);
	}
	r = build_file_end(b);
	if (r < 0)
		return r == -ECANCELED ? r : log_errno(r, "%s: member '%s'", name, e->path);
	return 0;
}

static int apply_entry(struct build *b, struct tar_reader *rd, const char *name,
                       const struct tar_entry *e, bool whiteouts)
{
	struct image_tree *t = build_tree(b);
	struct image_inode *ino = NULL;
	char path[PATH_MAX];
	const char *base;
	size_t i;
	int r;

	r = member_path(name, e->path, e->path, path, sizeof(path));
	if (r < 0)
		return r;
	base = strrchr(path, '/');
	base = base ? base + 1 : path;
	if (whiteouts && strncmp(base, WH_PREFIX, strlen(WH_PREFIX)) == 0)
		return apply_whiteout(b, name, e->path, path, base);

	if (!path[0] && e->type != '5')
		return log_error(-EINVAL, "%s: member '%s': not a directory at the archive root",
		                 name, e->path);

	if (e->type == '1') {
		char target[PATH_MAX];

		r = member_path(name, e->path, e->linkpath, target, sizeof(target));
		if (r < 0)
			return r;
		r = image_tree_link(t, path, target);
		if (r == -ENOENT)
			return log_error(r, "%s: member '%s': hard link to missing '%s'", name,
			                 e->path, e->linkpath);
		if (r == -EPERM)
			return log_error(r, "%s: member '%s': hard link to directory '%s'", name,
			                 e->path, e->linkpath);
		if (r < 0)
			return log_errno(r, "%s: member '%s': hard link to '%s'", name, e->path,
			                 e->linkpath);
		build_count_entry(b);
		return 0;
	}

	if (e->type == '2' && !e->linkpath[0])
		return log_error(-EINVAL, "%s: member '%s': empty symlink target", name, e->path);

	r = image_tree_add(t, path, &e->attr, &ino);
	if (r == -ENOTDIR)
		return log_error(r, "%s: member '%s': a parent is not a directory", name, e->path);
	if (r < 0)
		return r == -ECANCELED ? r : log_errno(r, "%s: member '%s'", name, e->path);
	if (e->type == '2') {
		r = image_inode_set_symlink(ino, e->linkpath);
		if (r < 0)
			return log_errno(r, "%s: member '%s': symlink", name, e->path);
	}
	for (i = 0; i < e->n_xattrs; i++) {
		r = image_inode_set_xattr(ino, e->xattrs[i].name, e->xattrs[i].value,
		                          e->xattrs[i].len);
		if (r < 0)
			return log_errno(r, "%s: member '%s': xattr '%s'", name, e->path,
			                 e->xattrs[i].name);
	}
	build_count_entry(b);
	if (e->type == '0')
		return add_contents(b, rd, name, e, ino);
	return 0;
}

int tar_apply(struct build *b, struct tar_reader *rd, const char *name, bool whiteouts)
{
	for (;;) {
		const struct tar_entry *e;
		int r = tar_reader_next(rd, &e);

		if (r <= 0)
			return r;
		r = apply_entry(b, rd, name, e, whiteouts);
		if (r < 0)
			return r;
	}
}

int source_tar_fd(struct build *b, int fd, const char *name, bool whiteouts)
{
	struct tar_reader *rd = NULL;
	int r;

	r = tar_reader_new(fd, name, &rd);
	if (r < 0)
		return r;
	r = tar_apply(b, rd, name, whiteouts);
	if (r >= 0)
		r = tar_reader_finish(rd, NULL);
	tar_reader_free(rd);
	return r;
}
