/*
 * host.c — what sandboxes and mounts need of the host, checked without
 * changing anything, each with the fix for a problem (`lazyroot doctor`, as
 * CernVM-FS's `cvmfs_config chksetup`).  The tests mirror what the launcher
 * does: the cgroup check takes controllers as cgroups_resolve() does, the ids
 * check reads /etc/subuid as id_slot_take() does, the Landlock check asks for
 * the ABI landlock_apply() needs.
 */
#include <limits.h>
#include <linux/magic.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/utsname.h>

#include "lib/lib.h"
#include "sandbox/sandbox.h"

#define HOST_LANDLOCK_ABI 6          /* sandbox/landlock.c's LL_MIN_ABI */
#define HOST_ID_LINE "lazyroot:3000000000:268435456"

__attribute__((format(printf, 4, 5)))
static void say(struct sandbox_check *c, enum sandbox_check_state st, const char *fix,
                const char *fmt, ...)
{
	va_list ap;

	c->state = st;
	snprintf(c->fix, sizeof(c->fix), "%s", fix ? fix : "");
	va_start(ap, fmt);
	vsnprintf(c->found, sizeof(c->found), fmt, ap);
	va_end(ap);
}

static bool is_fs(const char *path, long magic)
{
	struct statfs st;

	return statfs(path, &st) == 0 && (long)st.f_type == magic;
}

/* The kernel's major.minor, as one number: 6.12 → 612. */
static unsigned kernel_version(char *release, size_t len)
{
	struct utsname u;
	unsigned maj = 0, min = 0;

	if (uname(&u) < 0)
		return 0;
	snprintf(release, len, "%s", u.release);
	(void)sscanf(u.release, "%u.%u", &maj, &min);
	return maj * 100 + min;
}

static void check_kernel(struct sandbox_check *c, unsigned v, const char *release)
{
	c->name = "kernel";
	if (v >= 612)
		say(c, SANDBOX_CHECK_OK, NULL, "Linux %s", release);
	else
		say(c, SANDBOX_CHECK_WARN, "run a kernel of 6.12 or later (Debian 12: the "
		    "bookworm-backports linux-image-amd64)", "Linux %s: before 6.12, sandboxes lack "
		    "Landlock ABI 6 and mounts idmapped FUSE", release);
}

static void check_landlock(struct sandbox_check *c)
{
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, 1UL /* _VERSION */);

	c->name = "landlock";
	if (abi >= HOST_LANDLOCK_ABI)
		say(c, SANDBOX_CHECK_OK, NULL, "ABI %ld", abi);
	else if (abi < 0)
		say(c, SANDBOX_CHECK_FAIL, "enable the Landlock LSM: add landlock to the kernel's "
		    "lsm= boot parameter (e.g. lsm=landlock,lockdown,yama,bpf), or set "
		    "landlock = false in the policy to run sandboxes without it",
		    "Landlock is not enabled (%s)", strerror(errno));
	else
		say(c, SANDBOX_CHECK_FAIL, "run a kernel of 6.12 or later, or set landlock = false "
		    "in the policy to run sandboxes without it",
		    "ABI %ld; sandboxes need %d", abi, HOST_LANDLOCK_ABI);
}

static void check_userns(struct sandbox_check *c)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	uint64_t n = 0;

	c->name = "user namespaces";
	if (read_file("/proc/sys/user/max_user_namespaces", 64, &b) < 0 ||
	    parse_uint(strtok((char *)b.data, "\n"), UINT32_MAX, &n) < 0)
		say(c, SANDBOX_CHECK_FAIL, "build the kernel with CONFIG_USER_NS",
		    "no /proc/sys/user/max_user_namespaces");
	else if (n == 0)
		say(c, SANDBOX_CHECK_FAIL, "sysctl -w user.max_user_namespaces=63000 (and the same "
		    "in /etc/sysctl.d/)", "user.max_user_namespaces is 0");
	else
		say(c, SANDBOX_CHECK_OK, NULL, "at most %llu", (unsigned long long)n);
}

/* The launcher's own cgroup2 path ("/" for the root), from /proc/self/cgroup. */
static int own_v2(char *out, size_t len)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	char *l, *save = NULL;

	if (read_file("/proc/self/cgroup", 1 << 16, &b) < 0)
		return -ENOENT;
	for (l = strtok_r((char *)b.data, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
		if (!strncmp(l, "0::", 3)) {
			snprintf(out, len, "%s", l + 3);
			return 0;
		}
	return -ENOENT;
}

static bool word_in(const char *list, const char *w)
{
	size_t n = strlen(w);

	for (const char *p = list; (p = strstr(p, w)); p += n)
		if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\n' || !p[n]))
			return true;
	return false;
}

static void check_cgroups(struct sandbox_check *c)
{
	static const char *const ctrl[] = { "memory", "pids", "cpu" };
	const char *v2root = is_fs("/sys/fs/cgroup", CGROUP2_SUPER_MAGIC) ? "/sys/fs/cgroup" :
	                     is_fs("/sys/fs/cgroup/unified", CGROUP2_SUPER_MAGIC) ?
	                     "/sys/fs/cgroup/unified" : NULL;
	_cleanup_(buf_freep) struct buf ctl = BUF_INIT;
	char own[PATH_MAX] = "/", path[PATH_MAX + 64], from[160] = "", missing[64] = "";
	bool pure = v2root && !strcmp(v2root, "/sys/fs/cgroup");

	c->name = "cgroups";
	if (v2root && own_v2(own, sizeof(own)) == 0) {
		snprintf(path, sizeof(path), "%s%s/cgroup.subtree_control", v2root,
		         strcmp(own, "/") ? own : "");
		(void)read_file(path, 4096, &ctl);
	}
	for (size_t i = 0; i < ARRAY_SIZE(ctrl); i++) {
		char mnt[64], *end = from + strlen(from);

		snprintf(mnt, sizeof(mnt), "/sys/fs/cgroup/%s", ctrl[i]);
		if (ctl.data && word_in((char *)ctl.data, ctrl[i]))
			snprintf(end, sizeof(from) - (size_t)(end - from), " %s:v2", ctrl[i]);
		else if (is_fs(mnt, CGROUP_SUPER_MAGIC))
			snprintf(end, sizeof(from) - (size_t)(end - from), " %s:v1", ctrl[i]);
		else
			snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), "%s%s",
			         *missing ? " " : "", ctrl[i]);
	}
	if (!*missing) {
		say(c, SANDBOX_CHECK_OK, NULL, "%s;%s", pure ? "cgroup2" : v2root ?
		    "hybrid (cgroup2 at /sys/fs/cgroup/unified)" : "cgroup v1 only", from);
		return;
	}
	if (pure)
		/* the launcher makes its sandboxes' cgroups under its own, and takes a
		 * controller when its own cgroup.subtree_control lists it; cgroup2 lets
		 * only the root cgroup hold processes and delegate at once */
		say(c, SANDBOX_CHECK_FAIL, "on pure cgroup2 (stock Debian 12) the launcher's "
		    "cgroup must delegate memory, pids and cpu to its children: as root, "
		    "echo '+memory +pids +cpu' > /sys/fs/cgroup/cgroup.subtree_control, then start "
		    "lazyroot from the root cgroup (echo $$ > /sys/fs/cgroup/cgroup.procs in its "
		    "shell), or set memory, pids and cpus to 0 in the policy",
		    "cgroup2; the launcher's cgroup %s delegates no %s", own, missing);
	else {
		say(c, SANDBOX_CHECK_FAIL, NULL, "no %s controller, v1 or delegated v2", missing);
		snprintf(c->fix, sizeof(c->fix), "mount the missing v1 controllers (mount -t cgroup "
		         "-o NAME cgroup /sys/fs/cgroup/NAME for %s), or set memory, pids and cpus "
		         "to 0 in the policy", missing);
	}
}

static void check_ids(struct sandbox_check *c)
{
	static const char *const files[] = { "/etc/subuid", "/etc/subgid" };
	char lack[64] = "";

	c->name = "subordinate ids";
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		_cleanup_(buf_freep) struct buf b = BUF_INIT;
		bool has = false;

		if (read_file(files[i], 1 << 20, &b) == 0)
			for (char *save = NULL, *l = strtok_r((char *)b.data, "\n", &save); l;
			     l = strtok_r(NULL, "\n", &save))
				has |= !strncmp(l, "lazyroot:", 9);
		if (!has)
			snprintf(lack + strlen(lack), sizeof(lack) - strlen(lack), "%s%s",
			         *lack ? ", " : "", files[i]);
	}
	if (!*lack)
		say(c, SANDBOX_CHECK_OK, NULL, "lazyroot's range in /etc/subuid and /etc/subgid");
	else
		say(c, SANDBOX_CHECK_WARN, "reserve the range for sandboxes, so that no user is given "
		    "its ids: echo " HOST_ID_LINE " >> /etc/subuid; echo " HOST_ID_LINE
		    " >> /etc/subgid", "no lazyroot line in %s: sandboxes use the built-in range "
		    "3000000000-3268435455", lack);
}

static void check_fuse(struct sandbox_check *c)
{
	struct stat st;

	c->name = "fuse";
	if (stat("/dev/fuse", &st) == 0 && S_ISCHR(st.st_mode))
		say(c, SANDBOX_CHECK_OK, NULL, "/dev/fuse");
	else
		say(c, SANDBOX_CHECK_FAIL, "modprobe fuse (and apt-get install fuse3 for "
		    "fusermount3)", "no /dev/fuse: no image can be mounted");
}

static void check_since(struct sandbox_check *c, const char *name, unsigned v, unsigned need,
                        const char *what, const char *without)
{
	c->name = name;
	if (v >= need)
		say(c, SANDBOX_CHECK_OK, NULL, "%s (Linux %u.%u or later)", what, need / 100,
		    need % 100);
	else
		say(c, SANDBOX_CHECK_WARN, "run a kernel of 6.12 or later", "needs Linux %u.%u: %s",
		    need / 100, need % 100, without);
}

size_t sandbox_host_check(struct sandbox_check *out, size_t max)
{
	struct sandbox_check all[8] = { 0 };
	char release[65] = "";
	unsigned v = kernel_version(release, sizeof(release));
	size_t n = 0;

	check_kernel(&all[n++], v, release);
	check_landlock(&all[n++]);
	check_userns(&all[n++]);
	check_cgroups(&all[n++]);
	check_ids(&all[n++]);
	check_fuse(&all[n++]);
	check_since(&all[n++], "fuse passthrough", v, 609, "reads of wholly cached large files "
	            "bypass the daemon", "every read goes through the daemon (slower, still right)");
	check_since(&all[n++], "idmapped fuse", v, 612, "a sandbox's ids map onto the mount",
	            "sandboxes see the image's files owned by nobody");
	if (n > max)
		n = max;
	memcpy(out, all, n * sizeof(*out));
	return n;
}
