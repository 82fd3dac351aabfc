/*
 * landlock.c — the Landlock ruleset a sandbox's init puts itself and every
 * later process of the sandbox under, once the new root is in place.
 *
 * Landlock rules grant rights on whole trees: a right given on a directory
 * holds for everything beneath it, and a later ruleset can only narrow.  So
 * the policy's paths are turned into rules like this: every path gets a level
 * — hidden (no right), read-only (read, list, execute) or writable (every
 * right) — from the longest configured path above or at it (hidden beats
 * read-only beats writable at the same path; "/" is read-only unless listed);
 * a directory with no configured path beneath it gets one rule for its level;
 * a directory with configured paths beneath gets only the rights that every
 * level beneath it also has (plus listing, unless it is itself hidden), and
 * each of its entries is then handled the same way.  Only the directories
 * above configured paths are ever listed, so the cost is a few hundred rules
 * at most.  The price: a directory above a read-only or hidden path cannot
 * itself get entries created or removed (with the default policy, hiding
 * /solutions makes "/" itself read-only; everything else stays writable).
 * /proc, /sys and /dev need no rule of their own: their mounts are read-only
 * where it matters (setup.c).
 *
 * Landlock cannot refuse metadata changes (chmod, chown, utime, xattrs) nor
 * hide a file from stat, so the levels are also mounts (apply_mounts):
 * read-only paths read-only binds, hidden ones covered by an empty mode-000
 * directory or file, so that not even a hidden directory's entries' names nor
 * a hidden file's size, times or xattrs show.  Landlock also checks opens
 * submitted through io_uring, which seccomp does not see.
 *
 * TCP ports: bind and connect are each either unrestricted or limited to a
 * port list (Landlock filters on ports, not addresses; the cgroup BPF
 * allowlist of netpolicy.c filters on addresses).  Scoping is always on: no
 * process of the sandbox can signal a process or connect to an abstract unix
 * socket outside its Landlock domain.
 *
 * Debian's headers describe Landlock ABI 2 at most; the ABI 4–6 structures
 * and flags are defined here and the syscalls made directly.
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>

#include "lib/lib.h"
#include "sandbox/sandbox-internal.h"

#define LL_CREATE_RULESET_VERSION (1u << 0)
#define LL_RULE_PATH_BENEATH 1
#define LL_RULE_NET_PORT 2

#define LL_FS_EXECUTE     (1ull << 0)
#define LL_FS_WRITE_FILE  (1ull << 1)
#define LL_FS_READ_FILE   (1ull << 2)
#define LL_FS_READ_DIR    (1ull << 3)
#define LL_FS_TRUNCATE    (1ull << 14)   /* ABI 3 */
#define LL_FS_IOCTL_DEV   (1ull << 15)   /* ABI 5 */
#define LL_FS_ALL         ((1ull << 16) - 1)
/* The rights that apply to a file that is not a directory. */
#define LL_FS_FILE        (LL_FS_EXECUTE | LL_FS_WRITE_FILE | LL_FS_READ_FILE | LL_FS_TRUNCATE | \
                           LL_FS_IOCTL_DEV)
#define LL_FS_RO          (LL_FS_EXECUTE | LL_FS_READ_FILE | LL_FS_READ_DIR)

#define LL_NET_BIND_TCP    (1ull << 0)   /* ABI 4 */
#define LL_NET_CONNECT_TCP (1ull << 1)

#define LL_SCOPE_ABSTRACT_UNIX_SOCKET (1ull << 0)   /* ABI 6 */
#define LL_SCOPE_SIGNAL               (1ull << 1)

#define LL_MIN_ABI 6

struct ll_ruleset_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net;
	uint64_t scoped;
};

struct ll_path_beneath_attr {
	uint64_t allowed_access;
	int32_t parent_fd;
} __attribute__((packed));

struct ll_net_port_attr {
	uint64_t allowed_access;
	uint64_t port;
};

enum level { LEVEL_HIDDEN, LEVEL_RO, LEVEL_RW };

static const uint64_t level_rights[] = {
	[LEVEL_HIDDEN] = 0, [LEVEL_RO] = LL_FS_RO, [LEVEL_RW] = LL_FS_ALL,
};

struct special {
	char *path;             /* canonical, inside the new root */
	enum level level;
};

struct rules {
	int fd;                 /* the ruleset */
	struct special *v;
	size_t n;
};

/* Is p strictly beneath dir? Both canonical. */
static bool beneath(const char *p, const char *dir)
{
	size_t n = strlen(dir);

	if (!strcmp(dir, "/"))
		return strcmp(p, "/") != 0;
	return !strncmp(p, dir, n) && p[n] == '/';
}

/* The level of path: from the longest configured path at or above it. */
static enum level level_of(const struct rules *rs, const char *path)
{
	size_t best = 0;
	enum level l = LEVEL_RO;
	bool found = false;

	for (size_t i = 0; i < rs->n; i++) {
		const char *s = rs->v[i].path;
		size_t n = strlen(s);

		if (strcmp(s, path) && !beneath(path, s))
			continue;
		if (!found || n > best || (n == best && rs->v[i].level < l)) {
			best = n;
			l = rs->v[i].level;
			found = true;
		}
	}
	return l;
}

static bool is_special(const struct rules *rs, const char *path)
{
	for (size_t i = 0; i < rs->n; i++)
		if (!strcmp(rs->v[i].path, path))
			return true;
	return false;
}

/* The rights every configured path beneath dir keeps; ~0 when there is none. */
static uint64_t rights_beneath(const struct rules *rs, const char *dir, bool *any)
{
	uint64_t r = ~0ull;

	*any = false;
	for (size_t i = 0; i < rs->n; i++)
		if (beneath(rs->v[i].path, dir)) {
			r &= level_rights[level_of(rs, rs->v[i].path)];
			*any = true;
		}
	return r;
}

static int add_special(struct rules *rs, const char *path, enum level level, bool must_exist)
{
	char real[PATH_MAX];
	struct special *v;

	if (!realpath(path, real)) {
		if (errno == ENOENT && !must_exist)
			return 0;
		return log_errno(-errno, "landlock: path '%s'", path);
	}
	v = realloc(rs->v, (rs->n + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	rs->v = v;
	v[rs->n].path = strdup(real);
	v[rs->n].level = level;
	if (!v[rs->n].path)
		return -ENOMEM;
	rs->n++;
	return 0;
}

static int add_path_rule(struct rules *rs, int fd, const char *path, uint64_t rights)
{
	struct ll_path_beneath_attr pb = { .allowed_access = rights, .parent_fd = fd };
	struct stat st;

	if (fstat(fd, &st) < 0)
		return log_errno(-errno, "landlock: stat '%s'", path);
	if (!S_ISDIR(st.st_mode))
		pb.allowed_access &= LL_FS_FILE;
	if (!pb.allowed_access)
		return 0;
	if (syscall(SYS_landlock_add_rule, rs->fd, LL_RULE_PATH_BENEATH, &pb, 0) < 0)
		return log_errno(-errno, "landlock: rule for '%s'", path);
	return 0;
}

/* Rules for the tree at path (an open O_PATH fd), whose level is level. */
static int emit(struct rules *rs, int fd, const char *path, enum level level)
{
	uint64_t own = level_rights[level], dir;
	_cleanup_close_ int dfd = -1;
	DIR *d;
	struct dirent *de;
	bool any;
	int r = 0;

	dir = own & rights_beneath(rs, path, &any);
	if (!any)
		return add_path_rule(rs, fd, path, own);
	/* Above a configured path: only what holds for everything beneath, and
	 * listing (a hidden directory beneath shows as its empty tmpfs). */
	if (level != LEVEL_HIDDEN)
		dir |= own & LL_FS_READ_DIR;
	r = add_path_rule(rs, fd, path, dir);
	if (r < 0)
		return r;
	dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return log_errno(-errno, "landlock: list '%s'", path);
	d = fdopendir(dfd);
	if (!d)
		return log_errno(-errno, "landlock: list '%s'", path);
	dfd = -1;
	while (r == 0 && (de = readdir(d))) {
		char child[PATH_MAX];
		_cleanup_close_ int cfd = -1;
		struct stat st;
		bool below;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(child, sizeof(child), "%s/%s", strcmp(path, "/") ? path : "", de->d_name);
		cfd = openat(fd, de->d_name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (cfd < 0 || fstat(cfd, &st) < 0 || S_ISLNK(st.st_mode))
			continue;   /* gone meanwhile, or a symlink: checked at its target */
		rights_beneath(rs, child, &below);
		if (is_special(rs, child) || below)
			r = emit(rs, cfd, child, level_of(rs, child));
		else if (own & ~dir)
			r = add_path_rule(rs, cfd, child, own);
	}
	closedir(d);
	return r;
}

/* ---- mounts: what Landlock cannot refuse ---------------------------------- */

/* The mount id of path, or 0. */
static uint64_t mount_id(const char *path)
{
	struct statx stx;

	if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &stx) < 0 ||
	    !(stx.stx_mask & STATX_MNT_ID))
		return 0;
	return stx.stx_mnt_id;
}

/* The flags of path's mount, as mount(2) takes them, but MS_RDONLY. */
static unsigned long mount_flags(const char *path)
{
	static const struct { unsigned long st, ms; } map[] = {
		{ ST_NOSUID, MS_NOSUID }, { ST_NODEV, MS_NODEV }, { ST_NOEXEC, MS_NOEXEC },
		{ ST_NOATIME, MS_NOATIME }, { ST_NODIRATIME, MS_NODIRATIME },
		{ ST_RELATIME, MS_RELATIME },
	};
	struct statvfs sv;
	unsigned long f = 0;

	if (statvfs(path, &sv) < 0)
		return MS_NOSUID | MS_NODEV;
	for (size_t i = 0; i < ARRAY_SIZE(map); i++)
		if (sv.f_flag & map[i].st)
			f |= map[i].ms;
	return f;
}

/* Remount path's own mount (root: in place) or a bind of path onto itself
 * read-only or writable, keeping its other flags. */
static int remount(const char *path, bool ro, bool in_place)
{
	unsigned long f = mount_flags(path) | MS_BIND | MS_REMOUNT | (ro ? MS_RDONLY : 0);

	if (!in_place && mount(path, path, NULL, MS_BIND | MS_REC, NULL) < 0)
		return log_errno(-errno, "bind '%s'", path);
	if (mount(NULL, path, NULL, f, NULL) < 0)
		return log_errno(-errno, "remount '%s' %s", path, ro ? "read-only" : "writable");
	return 0;
}

static int by_length(const void *a, const void *b)
{
	size_t la = strlen(((const struct special *)a)->path);
	size_t lb = strlen(((const struct special *)b)->path);

	return la < lb ? -1 : la > lb;
}

/*
 * Landlock ABI 7 has no right for a file's metadata: chmod, chown, utime and
 * extended attributes pass wherever the owner may (and the sandbox's root
 * owns the image's files), and stat shows a hidden file's size, times and
 * extended attributes.  So the levels are also mounts, as bwrap's --ro-bind:
 * "/" read-only in place unless writable, a read-only path a read-only bind
 * of itself, a writable path beneath a read-only one a writable bind of
 * itself (only where that path lies on a mount made read-only here: a
 * read-only bind of the policy stays read-only), and each hidden path covered
 * by an empty, read-only, mode-000 directory or file (mask_path).  Shortest
 * paths first, so that a longer one is mounted over the shorter one's mount.
 * Renames and links between two of these mounts fail with EXDEV.
 */
static int apply_mounts(struct rules *rs)
{
	_cleanup_free_ uint64_t *made_ro = calloc(rs->n + 1, sizeof(*made_ro));
	size_t n_ro = 0;
	int r;

	if (!made_ro)
		return -ENOMEM;
	qsort(rs->v, rs->n, sizeof(*rs->v), by_length);
	if (level_of(rs, "/") != LEVEL_RW) {
		r = remount("/", true, true);
		if (r < 0)
			return r;
		made_ro[n_ro++] = mount_id("/");
	}
	for (size_t i = 0; i < rs->n; i++) {
		const char *p = rs->v[i].path;
		enum level l = level_of(rs, p);   /* at a path named twice, the stricter */
		struct statvfs sv;
		bool ro, want_ro = l == LEVEL_RO, ours = false;
		uint64_t id;

		if (l == LEVEL_HIDDEN || !strcmp(p, "/"))
			continue;
		if (statvfs(p, &sv) < 0)
			return log_errno(-errno, "landlock: path '%s'", p);
		ro = sv.f_flag & ST_RDONLY;
		if (ro == want_ro)
			continue;
		id = mount_id(p);
		for (size_t j = 0; j < n_ro; j++)
			ours |= id && made_ro[j] == id;
		if (!want_ro && !ours)
			continue;   /* a read-only mount of the policy's own (a bind) */
		r = remount(p, want_ro, false);
		if (r < 0)
			return r;
		if (want_ro)
			made_ro[n_ro++] = mount_id(p);
	}
	for (size_t i = 0; i < rs->n; i++)
		if (rs->v[i].level == LEVEL_HIDDEN) {
			r = mask_path(AT_FDCWD, rs->v[i].path);
			if (r < 0)
				return r;
		}
	return 0;
}

static int add_ports(int fd, uint64_t access, const struct sandbox_ports *p)
{
	for (size_t i = 0; i < p->n; i++) {
		struct ll_net_port_attr np = { .allowed_access = access, .port = p->v[i] };

		if (syscall(SYS_landlock_add_rule, fd, LL_RULE_NET_PORT, &np, 0) < 0)
			return log_errno(-errno, "landlock: port %u", p->v[i]);
	}
	return 0;
}

static void rules_destroy(struct rules *rs)
{
	for (size_t i = 0; i < rs->n; i++)
		free(rs->v[i].path);
	free(rs->v);
	if (rs->fd >= 0)
		close(rs->fd);
}

/* The policy's paths, each at its level, hidden the paths of hidden. */
static int collect(const struct sandbox *sb, const struct strv *hidden, struct rules *rs)
{
	int r = 0;

	if (!sb->writable_set)
		r = add_special(rs, "/", LEVEL_RW, true);
	for (size_t i = 0; r == 0 && i < sb->writable.n; i++)
		r = add_special(rs, sb->writable.v[i], LEVEL_RW, true);
	for (size_t i = 0; r == 0 && i < sb->n_binds; i++)
		if (sb->binds[i].rw)
			r = add_special(rs, sb->binds[i].dst, LEVEL_RW, true);
	for (size_t i = 0; r == 0 && i < sb->read_only.n; i++)
		r = add_special(rs, sb->read_only.v[i], LEVEL_RO, true);
	for (size_t i = 0; r == 0 && i < hidden->n; i++)
		r = add_special(rs, hidden->v[i], LEVEL_HIDDEN, false);
	return r;
}

static long check_abi(void)
{
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);

	if (abi < LL_MIN_ABI)
		return log_error(-EOPNOTSUPP, "landlock: the kernel has ABI %ld, the sandbox needs %d "
		                 "(set landlock = false to run without)", abi < 0 ? 0 : abi, LL_MIN_ABI);
	return 0;
}

/* The ruleset of rs and the policy's ports, in force for the calling
 * process and every process it starts. */
static int restrict_self(const struct sandbox *sb, struct rules *rs)
{
	struct ll_ruleset_attr attr = {
		.handled_access_fs = LL_FS_ALL,
		.scoped = LL_SCOPE_ABSTRACT_UNIX_SOCKET | LL_SCOPE_SIGNAL,
	};
	_cleanup_close_ int root = -1;
	int r;

	if (!sb->tcp_bind.any)
		attr.handled_access_net |= LL_NET_BIND_TCP;
	if (!sb->tcp_connect.any)
		attr.handled_access_net |= LL_NET_CONNECT_TCP;
	rs->fd = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0);
	if (rs->fd < 0)
		return log_errno(-errno, "landlock: create the ruleset");
	root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		return log_errno(-errno, "landlock: open /");
	r = emit(rs, root, "/", level_of(rs, "/"));
	if (r == 0 && !sb->tcp_bind.any)
		r = add_ports(rs->fd, LL_NET_BIND_TCP, &sb->tcp_bind);
	if (r == 0 && !sb->tcp_connect.any)
		r = add_ports(rs->fd, LL_NET_CONNECT_TCP, &sb->tcp_connect);
	if (r < 0)
		return r;
	if (syscall(SYS_landlock_restrict_self, rs->fd, 0) < 0)
		return log_errno(-errno, "landlock: restrict the sandbox");
	return 0;
}

int landlock_apply(const struct sandbox *sb)
{
	_cleanup_(rules_destroy) struct rules rs = { .fd = -1 };
	_cleanup_free_ char **hidden_v = NULL;
	struct strv hidden;
	int r;

	if (!sb->landlock)
		return 0;
	r = check_abi();
	if (r < 0)
		return r;
	r = policy_hidden(sb, &hidden);
	if (r < 0)
		return r;
	hidden_v = hidden.v;
	r = collect(sb, &hidden, &rs);
	if (r == 0)
		r = apply_mounts(&rs);
	return r < 0 ? r : restrict_self(sb, &rs);
}

int landlock_restrict(const struct sandbox *sb, const struct strv *hidden)
{
	_cleanup_(rules_destroy) struct rules rs = { .fd = -1 };
	int r;

	if (!sb->landlock)
		return 0;
	r = check_abi();
	if (r == 0)
		r = collect(sb, hidden, &rs);
	return r < 0 ? r : restrict_self(sb, &rs);
}
