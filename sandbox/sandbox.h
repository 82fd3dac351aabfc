/*
 * sandbox.h — the launcher: run one command in a fresh, disposable sandbox and
 * report how it ended.
 *
 * A sandbox is a new user, mount, pid, net, ipc, uts and cgroup namespace
 * around an overlay whose lower layer is a read-only root filesystem and whose
 * upper layer lives on a size-limited tmpfs; a fresh /proc, a minimal /dev,
 * no new privileges, no capabilities, a seccomp filter, Landlock rules on
 * paths, TCP ports and scope, cgroup limits on memory, pids and CPU, a
 * wall-clock limit, a cap on output, and no network beyond its loopback
 * unless an allowlist (enforced by cgroup BPF) opens a path to given
 * addresses; a running sandbox can be tightened by stages.  Every mount
 * lives in the sandbox's own mount namespace and dies with it; the launcher
 * removes the sandbox's cgroups once its last process is gone, or puts them
 * back in the node's pool, as it does a pooled network namespace (pool.c).
 *
 * What a sandbox may do is its policy: a set of named fields, each with a
 * default, documented in sandbox/POLICY.md.  Fields are set from a policy file
 * (sandbox_load_policy) and one at a time (sandbox_set), later settings
 * overriding earlier ones; list fields (env, bind) append instead.
 *
 * The launcher needs root: it maps the sandbox's ids 0..65535 to a host
 * range of the sandbox's own (uid_base: a block of the node's sandbox ranges
 * while it runs, and the owner of its user namespace, so that the kernel's
 * per-user budgets are its own) and shows the root filesystem through an
 * idmapped mount, so that files keep their owners inside while no sandbox
 * process is ever a host id that owns anything but what the sandbox wrote
 * into a writable bind.
 *
 * The root filesystem is a directory or, for `lazyroot run IMAGE`, the
 * node's one FUSE mount of the image, shared by every sandbox of it.  That
 * mount shows the owners as built (host ids 0, 1000, ...), and each sandbox
 * gets its own idmapped view of it exactly as of a directory: the kernel
 * (6.12+) allows idmapped mounts of FUSE when the daemon opts in with
 * FUSE_ALLOW_IDMAP and default_permissions (fs/session.c).  Chosen over the
 * alternatives because it is the only one that is both shared and correct:
 *   - a daemon that shifts every owner by uid_base would tie a mount to one
 *     id range, while uid_base is per sandbox (a policy field: pools and
 *     tests pick their own), and would make the host mount show files owned
 *     by the very ids sandbox processes run as;
 *   - a mount per sandbox (with shifted owners or a userns-owned FUSE mount)
 *     loses the sharing: a daemon, an index map and a cold kernel page and
 *     dentry cache per sandbox.
 * The idmapped view is read-only and the overlay's upper layer is the
 * sandbox's tmpfs, so a sandbox never writes the image, and host files keep
 * their host owners: the mapping exists only inside the sandbox's view.
 * Measured (bench/image): a warm `run IMAGE -- /bin/true` by index name costs
 * 7% more CPU than `--rootfs DIR` (mapping the index, finding the mount);
 * reads through the opt-in hooks cost the daemon no measurable CPU.
 *
 * Not thread-safe: one struct sandbox per thread, and sandbox_run forks.
 */
#ifndef LAZYROOT_SANDBOX_H
#define LAZYROOT_SANDBOX_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

struct sandbox;

/* A policy with every field at its default.  -ENOMEM. */
int sandbox_new(struct sandbox **ret);
/* NULL is accepted. */
void sandbox_free(struct sandbox *sb);

/* What the launchers of a node share, from the node's settings
 * (docs/settings.md: pool, pool_dir, record_dir, service_dir, ids_dir,
 * ids_range, sandbox_state_dir).  Zeroed: the defaults.  Two nodes on one
 * machine whose directories and id ranges all differ share nothing of these.
 * Strings are borrowed: they must outlive the sandbox, or the gc call. */
struct sandbox_node {
	const char *pool_dir;     /* pooled namespaces and slots; NULL: /run/lazyroot/pool */
	const char *record_dir;   /* launcher records; NULL: /run/lazyroot/launchers */
	const char *service_dir;  /* the sandbox service's state (service.h); NULL: /run/lazyroot/service */
	const char *ids_dir;      /* the host id blocks' locks; NULL: /run/lazyroot/ids */
	const char *state_dir;    /* each running sandbox's state (network allowlist, stage);
	                           * NULL: /run/lazyroot/sandboxes */
	/* The host ids of uid_base = auto (uids and gids alike); ids_count 0:
	 * user lazyroot's entries of /etc/subuid and /etc/subgid, else the
	 * built-in range (POLICY.md, "Host ids") */
	uint32_t ids_start, ids_count;
	bool no_pool;             /* pool nothing, whatever the policy's pool field says */
};
/* Use n (copied; its strings borrowed) for sb's records and pools. */
void sandbox_set_node(struct sandbox *sb, const struct sandbox_node *n);

/* Set one policy field from its text form, as a policy file line would
 * ("memory", "512M").  -EINVAL (logged, naming key and value) for an unknown
 * key or a value that does not parse. */
int sandbox_set(struct sandbox *sb, const char *key, const char *value);

/* Apply a policy file: "key = value" lines, '#' comments, blank lines.
 * Errors name the file and line. */
int sandbox_load_policy(struct sandbox *sb, const char *path);
/* The same from a policy file's text, changed in place (NUL-terminated);
 * errors name what ("policy 'FILE'") and the line. */
int sandbox_load_policy_text(struct sandbox *sb, char *text, const char *what);

/* The policy's fields, one row each as sandbox/POLICY.md documents them: the
 * i-th field's key (stage.NAME.allow and stage.NAME.hide stand for any stage
 * NAME), the kind of value it takes, its default in text form (what
 * sandbox_new applies, or what the field means while unset; NULL: none, or
 * one that depends on the launch: POLICY.md says), a line of meaning,
 * whether it may be given more than once, and the bounds of a number (of a
 * string: its length; 0..0: none).  NULL past the end.  Static data. */
struct sandbox_field {
	const char *key;
	const char *type;       /* string, name, path, user, env, bind, ids, count, size,
	                         * number, bool, paths, ports, addrs, families */
	const char *dflt;
	const char *doc;
	bool list;
	double min, max;
};
const struct sandbox_field *sandbox_field_at(size_t i);
/* Print the table: a line per field, tab-separated: key, type (with
 * ", repeatable" and the bounds), default ("-": none), meaning. */
void sandbox_policy_fields(FILE *f);

/* Why the launcher ended a sandbox early. */
enum sandbox_kill {
	SANDBOX_KILL_NONE,
	SANDBOX_KILL_TIME,      /* wall-clock limit */
	SANDBOX_KILL_MEMORY,    /* the memory cgroup's OOM killer fired */
	SANDBOX_KILL_PIDS,      /* a fork failed on the pids limit */
	SANDBOX_KILL_OUTPUT,    /* stdout + stderr passed the output cap */
	SANDBOX_KILL_SIGNAL,    /* the launcher itself got SIGINT, SIGTERM or SIGHUP */
};
const char *sandbox_kill_name(enum sandbox_kill k);

struct sandbox_result {
	char name[96];          /* the sandbox's name (policy field or generated) */
	int status;             /* exit code, or 128 + signal */
	int signal;             /* the signal that ended the command, or 0 */
	enum sandbox_kill killed_by;
	double wall_seconds;    /* from clone to the last process gone */
	double cpu_seconds;     /* user + system of every process of the sandbox */
	uint64_t memory_peak;   /* bytes, from the memory cgroup; 0 when unknown */
	uint64_t output_bytes;  /* stdout + stderr bytes passed through */
	bool pids_limit_hit;    /* a fork failed on the pids limit */
	bool stderr_open_line;  /* the sandbox's stderr did not end with a newline */
	uint32_t uid_base;      /* host uid of id 0 inside (gid: gid_base) */
	uint32_t gid_base;
	/* the limits in force, for a message naming the one that killed_by names */
	double time_limit;      /* seconds; 0: none */
	uint64_t memory_limit;  /* bytes; 0: none */
	uint64_t output_limit;  /* bytes; 0: none */
	uint64_t pids_limit;    /* processes; 0: none */
};

/* Run argv[0] (searched in the sandbox's PATH) with the policy in force.
 * stdin is passed when it is a regular file or a pipe (opened anew,
 * read-only), else the command reads /dev/null: a terminal never reaches
 * it.  stdout and stderr are copied to the launcher's own, up to the output
 * cap, without the launcher ever waiting on them while the sandbox runs;
 * once the sandbox is gone and cleaned up, sandbox_run may wait for its
 * reader to take the rest (a SIGINT, SIGTERM or SIGHUP gives up).  Returns 0 once the sandbox is gone, with *ret
 * filled, whatever the command did; -errno (logged) when the sandbox could
 * not be set up, in which case nothing of it is left either. */
int sandbox_run(struct sandbox *sb, char *const argv[], struct sandbox_result *ret);

/* Switch the running sandbox name to stage (declared in its policy), which
 * must only tighten: its allowlist a subset of the current one.  Connects
 * the new stage drops are refused from then on; its hidden paths are covered
 * inside the sandbox at once (descriptors already open in them stay usable).
 * With stage NULL, only report the current stage.  *ret_current (may be NULL)
 * gets the stage now in force, malloc'd.  Errors are logged: -ENOENT/-ESRCH
 * (no such running sandbox), -EINVAL (no such stage), -EPERM (loosening). */
int sandbox_stage_switch(const struct sandbox_node *n, const char *name, const char *stage,
                         char **ret_current);

/* What sandbox_gc found. */
struct sandbox_gc_result {
	unsigned removed;       /* sandboxes of dead launchers, now gone */
	unsigned live;          /* sandboxes whose launcher still runs (left alone) */
	unsigned failed;        /* left behind something that could not be removed */
};

/* Remove what sandboxes whose launcher died without cleaning up (SIGKILL, a
 * crash) left on this host: kill any process still in their cgroups, remove
 * the cgroups (v1 and v2), their runtime state and the launcher's record.
 * Sandboxes of running launchers are left alone.  removed (may be NULL) is
 * called with each removed sandbox's name.  Returns 0, or -EBUSY (logged per
 * item) when something could not be removed; *ret (may be NULL) is filled
 * either way.  Needs root. */
int sandbox_gc(const struct sandbox_node *n, void (*removed)(const char *name, void *ud),
               void *ud, struct sandbox_gc_result *ret);

/* Seconds a pooled namespace may stay idle before a collection removes it. */
#define SANDBOX_POOL_IDLE 600

/* What sandbox_pool_gc found. */
struct sandbox_pool_gc_result {
	unsigned removed;       /* pooled namespaces unmounted and their slots removed */
	unsigned kept;          /* idle for less than max_idle */
	unsigned busy;          /* in use by a running launcher */
	unsigned failed;
};

/* Remove the idle network namespaces of the node's pool (sandbox/POLICY.md,
 * "Pools"): those idle for max_idle seconds or more, every idle one when
 * max_idle <= 0, and those a dead launcher held.  Slots in use are left
 * alone.  -EBUSY (logged) when one could not be removed.  Needs root. */
int sandbox_pool_gc(const struct sandbox_node *n, double max_idle,
                    struct sandbox_pool_gc_result *ret);

/* ---- entering a running sandbox (enter.c) ---------------------------------- */

/* One process to start inside a running sandbox, from the host (root).
 * Every descriptor is borrowed: sandbox_enter closes none of the caller's. */
struct sandbox_enter_req {
	const struct sandbox *sb;      /* the sandbox's policy, as it was launched */
	const char *name;              /* the sandbox's name (its stage state); NULL: sb's */
	int init_pidfd;                /* the sandbox's init */
	int cgroup_fd;                 /* the exec's cgroup2 directory, at or beneath the
	                                * init's (CLONE_INTO_CGROUP; its BPF programs apply);
	                                * -1 only when the init has no cgroup2 directory */
	const char *const *v1_cgroups; /* v1 cgroup directories the exec joins (the
	                                * sandbox's memory, pids, cpu), NULL-terminated;
	                                * NULL: none */
	char *const *argv;             /* argv[0] searched in the exec's PATH */
	char *const *env;              /* NAME=VALUE, added to the policy's environment (a
	                                * NAME given replaces the policy's); NULL: none */
	const char *cwd;               /* absolute, resolved inside the sandbox's root;
	                                * NULL: the policy's workdir */
	const char *user;              /* "UID[:GID]" inside; NULL: the policy's user */
	int stdio[3];                  /* the exec's stdin, stdout, stderr; -1: the
	                                * sandbox's /dev/null */
	/* Set: instead of exec'ing argv, the process runs fn(ud), confined exactly
	 * the same way, and exits with its return value (0..255). */
	int (*fn)(void *ud);
	void *ud;
};

/* Start r's process inside the running sandbox with the confinement the
 * sandbox's processes have, replayed step by step from the launch plan
 * (launch-internal.h, plan_exec_steps): the init's namespaces (user, mnt,
 * pid, ipc, uts, net, cgroup) entered through its pidfd, born in r's
 * cgroup2 directory and joined to its v1 ones, root inside, rlimits,
 * no_new_privs, the Landlock rules of the stage in force now (read from
 * the sandbox's stage state under its lock), an empty bounding set,
 * seccomp, r's user or the policy's, no capabilities, cwd resolved with
 * openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS), the policy's
 * environment with r's added, and no descriptor but stdio.  The helper that
 * enters is not dumpable from before it enters, so no sandbox process can
 * ptrace or read it (nor the new process before its exec).
 *
 * Returns 0 once argv was exec'd (or fn started), with the pidfd of the new
 * process in *ret_pidfd (the caller's, to close) and its pid on the host in
 * *ret_pid (may be NULL).  The process is the caller's child (the helper
 * clones it with CLONE_PARENT): reap it with waitid(P_PIDFD) for its status
 * and rusage.  An exec that fails (no such program) is a started process
 * that exits 127 (126: not executable), as `lazyroot run` does.  -errno
 * (logged, naming the step) when the process could not be entered or set
 * up; nothing of it is left then.  Forks: call it from a single-threaded
 * process that does not ignore SIGCHLD nor reap children it did not start
 * while the call runs.  Needs root. */
int sandbox_enter(const struct sandbox_enter_req *r, pid_t *ret_pid, int *ret_pidfd);

/* ---- files in and out of a sandbox (sandbox/files.c) -------------------------
 *
 * Put and get one file, or a directory as a tar stream (ustar and pax; GNU
 * long names read).  Each runs in a process that sandbox_enter() has
 * confined (its fn): paths are the sandbox's own, resolved inside its root
 * and never through a magic link (/proc/PID/root, /proc/self/fd/N); the
 * sandbox's hide and read_only rules and its user's rights hold.  Errors are
 * one line on stderr naming the path and what failed, and a -errno return:
 * nothing is left half-written (temporary names are removed), and nothing
 * outside the target changes.  sandbox/POLICY.md, "Files", says what each
 * refuses. */

/* Byte and entry limits of one transfer; a zero field (or NULL limits) takes
 * the default below. */
struct sandbox_files_limits {
	uint64_t max_bytes;     /* file data, summed over an archive's members */
	uint64_t max_entries;   /* members of an archive */
};
#define SANDBOX_FILES_MAX_BYTES   ((uint64_t)1 << 30)
#define SANDBOX_FILES_MAX_ENTRIES 100000

/* Write in_fd's bytes (to its end) to path, with mode's permission bits
 * (setuid, setgid and sticky dropped), through a temporary name renamed over
 * any file or symlink there; a directory there is refused.  parents: make
 * missing parent directories (0755 less the umask), one at a time, none
 * through a symlink.  -EFBIG past max_bytes. */
int sandbox_file_put(int in_fd, const char *path, mode_t mode, bool parents,
                     const struct sandbox_files_limits *lim);
/* Copy the regular file at path to out_fd; anything else (a directory, a
 * fifo: never opened for blocking) is refused.  -EFBIG past max_bytes. */
int sandbox_file_get(int out_fd, const char *path, const struct sandbox_files_limits *lim);
/* Extract the tar stream on in_fd into dir (made with its parents when
 * missing). */
int sandbox_tar_put(int in_fd, const char *dir, const struct sandbox_files_limits *lim);
/* Write dir's tree to out_fd as a tar stream, names relative to dir. */
int sandbox_tar_get(int out_fd, const char *dir, const struct sandbox_files_limits *lim);

/* ---- the host's readiness (`lazyroot doctor`) --------------------------- */

enum sandbox_check_state { SANDBOX_CHECK_OK, SANDBOX_CHECK_WARN, SANDBOX_CHECK_FAIL };
struct sandbox_check {
	const char *name;               /* "kernel", "landlock", "cgroups" ... (static) */
	enum sandbox_check_state state;
	char found[256];                /* what the host has */
	char fix[768];                  /* what to do about it; "" when ok */
};
/* Check what sandboxes and mounts need of this host: kernel version, Landlock
 * ABI, user namespaces, the cgroup layout and the controllers the launcher's
 * cgroup gets (as the launcher takes them), subordinate ids, /dev/fuse, FUSE
 * passthrough and idmapped FUSE mounts.  Fills at most max of out, in that
 * order; returns how many.  Reads /proc, /sys and /etc; changes nothing. */
size_t sandbox_host_check(struct sandbox_check *out, size_t max);

#endif
