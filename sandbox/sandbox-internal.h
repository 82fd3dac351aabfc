/*
 * sandbox-internal.h — what the launcher's files share: the policy struct,
 * the cgroup set of one sandbox, and the steps run inside the namespaces.
 */
#ifndef LAZYROOT_SANDBOX_INTERNAL_H
#define LAZYROOT_SANDBOX_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/stat.h>

#include "sandbox/sandbox.h"

#define SANDBOX_ID_RANGE 65536u   /* ids 0..65535 exist inside */

/* Socket families a policy may allow (socket_families); every other family
 * is refused by the seccomp filter whatever the policy says.  The bit
 * numbers are the generated filter's family numbers (gen/seccomp.c). */
#define SANDBOX_FAMILY_UNIX    (1u << 0)
#define SANDBOX_FAMILY_INET    (1u << 1)
#define SANDBOX_FAMILY_INET6   (1u << 2)
#define SANDBOX_FAMILY_NETLINK (1u << 3)   /* NETLINK_ROUTE only */
#define SANDBOX_FAMILY_ALL     0xfu

struct sandbox_bind {
	char *src, *dst;
	bool rw;
};

/* A growable list of strings, NULL-terminated when non-empty. */
struct strv {
	char **v;
	size_t n;
};

/* TCP ports for a Landlock bind or connect restriction. */
struct sandbox_ports {
	bool any;               /* not restricted (the default) */
	uint16_t *v;            /* the ports allowed when !any; none when n == 0 */
	size_t n;
};

/* One allowlist entry: an IPv6 address (IPv4 as ::ffff:a.b.c.d) and a port,
 * both in network byte order.  host: the address is the host side of the
 * sandbox's veth, known only at launch. */
struct sandbox_addr {
	uint8_t addr[16];
	uint16_t port;
	bool host;
};

/* A named stage: what the sandbox may reach and which paths it may not see
 * once an operator switches to it (`lazyroot policy NAME --stage STAGE`). */
struct sandbox_stage {
	char *name;
	bool has_allow;         /* false: the stage keeps the current allowlist */
	struct sandbox_addr *allow;
	size_t n_allow;
	struct strv hide;
};

/* The policy; every field is documented with its default in POLICY.md. */
struct sandbox {
	char *rootfs;
	char *name;             /* NULL: "lazyroot-<launcher pid>" */
	char *hostname;
	char *workdir;
	uid_t uid;              /* inside the sandbox */
	gid_t gid;
	bool ids_auto;          /* take the ids from the node's ranges (id_slot_take) */
	uint32_t uid_base;      /* host uid that inside id 0 maps to, unless ids_auto */
	uint32_t gid_base;      /* host gid that inside gid 0 maps to, unless ids_auto */
	uint32_t ptys;          /* the sandbox's devpts instance holds at most this many */
	uint32_t namespaces;    /* each kind the sandbox may make (/proc/sys/user/max_*_namespaces) */
	uint32_t inotify_instances;  /* per uid inside, in its user namespace */
	uint32_t inotify_watches;
	uint32_t ipc_objects;   /* each of msgmni, shmmni, semmni, mqueue queues_max */
	uint64_t tmpfs_size;     /* also bounds /dev/shm, a directory on the same tmpfs */
	uint64_t memory;        /* bytes; 0 = no limit */
	uint64_t pids;          /* 0 = no limit */
	double cpus;            /* 0 = no limit */
	uint64_t nofile;
	double timeout;         /* seconds; 0 = no limit */
	uint64_t output;        /* bytes; 0 = no cap */
	bool kill_on_pids_limit;
	bool sysfs;             /* mount a read-only sysfs on /sys */
	bool pool;              /* take a pooled network namespace when the policy allows (pool.c) */
	struct sandbox_node node;   /* the node's directories and pool switch (borrowed strings) */
	char **env;             /* NAME=VALUE, NULL-terminated */
	size_t n_env;
	struct sandbox_bind *binds;
	size_t n_binds;
	/* Landlock (landlock.c) */
	bool landlock;
	bool writable_set;      /* false: writable is still the default "/" */
	struct strv writable, read_only, hide;
	struct sandbox_ports tcp_bind, tcp_connect;
	bool io_uring;          /* let seccomp pass io_uring (Landlock and BPF still apply) */
	unsigned socket_families;   /* SANDBOX_FAMILY_* bits socket() may make */
	/* network allowlist and stages (netpolicy.c) */
	struct sandbox_addr *allow;
	size_t n_allow;
	struct sandbox_stage *stages;
	size_t n_stages;
	char *stage;            /* the stage the sandbox starts in; NULL: the first declared */
};

/* PATH inside unless the policy's env sets it. */
#define SANDBOX_DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* The environment the command starts with: PATH and HOME unless the policy
 * sets them, then the policy's env entries.  *ret borrows the strings of sb;
 * free only the array. */
int policy_env(const struct sandbox *sb, char ***ret);

/* "UID[:GID]" (GID defaults to UID), both below SANDBOX_ID_RANGE.  -EINVAL. */
int policy_parse_user(const char *s, uid_t *uid, gid_t *gid);

/* ---- cgroups (cgroup.c) ------------------------------------------------- */

enum { CG_MEMORY, CG_PIDS, CG_CPU, CG_UNIFIED, CG_COUNT };

/* One directory per hierarchy that the sandbox uses; path NULL when unused.
 * v2[i] says whether controller i is served by the unified hierarchy. */
struct sandbox_cgroups {
	char *path[CG_COUNT];
	bool v2[CG_COUNT];
	/* Counters a reused (pooled) set had at the start: the reports count
	 * from these.  All 0 for a set made for the sandbox. */
	uint64_t base_oom_kill, base_pids_max, base_memory, base_cpu_usec;
	/* Set by cgroups_read_end: the counters once the sandbox is gone. */
	bool ended;
	uint64_t end_oom_kill, end_pids_max, end_cpu_usec;
};

/* What a pooled set carries from one sandbox to the next, kept in its slot's
 * lock file (pool.c) so that the next taker need not read the counters that
 * cannot be reset. */
struct cgroups_carry {
	uint64_t oom_kill, pids_max, cpu_usec;
};

/* The paths of the sandbox's cgroups: one named name under the launcher's own
 * cgroup in each hierarchy it needs; nothing is made yet.  A limit with no
 * controller to enforce it is an error (logged). */
int cgroups_resolve(const struct sandbox *sb, const char *name, struct sandbox_cgroups *cg);
/* Make the directories cgroups_resolve named and write the limits of sb.  On
 * failure nothing is left and the paths are freed. */
int cgroups_make(const struct sandbox *sb, struct sandbox_cgroups *cg);
/* The sandbox's init moves itself into cg's v1 cgroups, writing 0 to each
 * one's tasks file through a descriptor the launcher opened before the
 * clone (the kernel checks the opener's credentials, root's).  A write of
 * pid N to cgroup.procs takes the kernel's global cgroup_threadgroup_rwsem
 * for writing, which waits for an RCU grace period (~5-15 ms here) unless
 * another write came shortly before or the cgroup2 mount has favordynmods,
 * and it waits holding cgroup_mutex, so every other launcher's clone into
 * its cgroup waited too.  A thread that moves itself through tasks takes
 * neither the semaphore nor the wait (the init is single-threaded, so the
 * thread is the process); docs/perf-log.md, "Launch CPU, third pass".
 * cgroups_self_open: fds[i] the tasks file of each v1 hierarchy of cg, -1
 * elsewhere (on failure all -1, logged).  cgroups_self_move, in the init:
 * the writes, then closes them all.  cgroups_self_close: closes them. */
int cgroups_self_open(const struct sandbox_cgroups *cg, int fds[CG_COUNT]);
int cgroups_self_move(int fds[CG_COUNT]);
void cgroups_self_close(int fds[CG_COUNT]);
/* Move pid into cg's cgroup2 hierarchies the init is not in yet: none when
 * it was cloned into its cgroup2 directory (in_unified); v1 ones are the
 * init's own move (cgroups_self_move). */
int cgroups_attach(const struct sandbox_cgroups *cg, pid_t pid, bool in_unified);
/* Counters read while the sandbox runs and after it ends. */
bool cgroups_oom_killed(const struct sandbox_cgroups *cg);
bool cgroups_pids_hit(const struct sandbox_cgroups *cg);
/* The counters themselves (OOM kills, forks refused by the pids limit), to
 * compare two readings: those of one exec's life (sandbox/keeper.c).  A
 * counter without its controller is 0. */
uint64_t cgroups_oom_count(const struct sandbox_cgroups *cg);
uint64_t cgroups_pids_max_count(const struct sandbox_cgroups *cg);
uint64_t cgroups_memory_peak(const struct sandbox_cgroups *cg);

/* What the launcher waits on to learn of an OOM kill or a refused fork
 * without reading the counters on a timer: each idle wakeup costs about 50 us
 * of CPU here, and a node holding thousands of sandboxes paid it ten times a
 * second for each (bench/launch/density).  fd[i] (-1: none) is polled for
 * events[i]; a counter the kernel does not announce (v1 pids.events never
 * notifies) or whose watch could not be set up is read every period_ms
 * instead (-1: never). */
enum { CGW_MEMORY, CGW_PIDS, CGW_COUNT };
struct cgroups_watch {
	int fd[CGW_COUNT];
	short events[CGW_COUNT];
	int period_ms;
};
#define CGROUPS_WATCH_INIT { { -1, -1 }, { 0, 0 }, -1 }
/* Set up the watches of cg's memory and pids cgroups (whichever it has):
 * v2 memory.events and pids.events are polled for POLLPRI, a v1 memory
 * cgroup's OOM notification arrives on an eventfd (cgroup.event_control).
 * want_pids: the pids limit ends the sandbox, so its event matters.  Never
 * fails: what cannot be watched is read every 100 ms (v1 pids: every
 * second, see sandbox/POLICY.md). */
void cgroups_watch_open(const struct sandbox_cgroups *cg, bool want_pids,
                        struct cgroups_watch *w);
/* Consume what made fd[i] ready, so that the next poll waits again. */
void cgroups_watch_ack(struct cgroups_watch *w, int i);
void cgroups_watch_close(struct cgroups_watch *w);
/* Memory charged and processes now (0 where the set has no such cgroup). */
void cgroups_usage(const struct sandbox_cgroups *cg, uint64_t *ret_memory, uint64_t *ret_pids);
/* CPU time in seconds, or a negative value when no hierarchy counts it. */
double cgroups_cpu_seconds(const struct sandbox_cgroups *cg);
/* Remove every directory (they must be empty of processes); frees paths.
 * -EBUSY (logged) when one could not be removed. */
int cgroups_destroy(struct sandbox_cgroups *cg);
/* Free the paths only. */
void cgroups_forget(struct sandbox_cgroups *cg);
/* Make the directories cg names that do not exist yet: how many it made,
 * or -errno, and then the ones made are removed again (the paths stay). */
int cgroups_make_missing(const struct sandbox_cgroups *cg);
/* Ready an existing set whose processes are all gone for the next sandbox:
 * its peak reset, the counters that cannot be reset taken as baselines (from
 * carry, what the set's last sandbox left, unless NULL), the limits of sb
 * written. */
int cgroups_reuse(const struct sandbox *sb, struct sandbox_cgroups *cg,
                  const struct cgroups_carry *carry);
/* Once every process of the sandbox is gone: read the counters the report
 * and the carry need, once; the report's functions use them from then on. */
void cgroups_read_end(struct sandbox_cgroups *cg);
/* What the set carries to the next sandbox; false before cgroups_read_end. */
bool cgroups_carry_get(const struct sandbox_cgroups *cg, struct cgroups_carry *ret);
/* Is the set free of processes (waiting up to a second for the last to
 * leave; one of its directories tells for all), and does its memory cgroup
 * hold no page cache and at most max_charge bytes?  A v1 memory cgroup keeps the charge
 * of page cache and kernel objects its processes were first to use. */
bool cgroups_reusable(const struct sandbox_cgroups *cg, uint64_t max_charge);
/* Remove one cgroup directory, first killing what is still in it when
 * kill_first; waits up to a second for the last process to leave.  A
 * directory that is already gone is success. */
int cgroup_remove(const char *path, bool kill_first);

/* ---- launcher records (gc.c) --------------------------------------------- */

/* Lock dfd/name (creating it with create) unless someone holds it, making
 * sure the locked file is still the one at that path (a collector may have
 * unlinked it meanwhile).  The locked fd, -EBUSY when held, -ENOENT when it
 * went away, or -errno.  Launcher records and pool slots are locked so. */
int lock_file_at(int dfd, const char *name, bool create);

/* The launcher's claim on its sandbox's name, held locked while it lives. */
struct launch_record {
	int fd;
	char *path;
};
#define LAUNCH_RECORD_INIT { -1, NULL }

/* Claim name: create and lock /run/lazyroot/launchers/NAME, first removing
 * what a dead launcher of the same name left.  -EBUSY (logged) when a live
 * launcher holds the name. */
int launch_record_open(const struct sandbox_node *n, const char *name, struct launch_record *rec);
/* List the cgroups of cg in the record; call before making them. */
int launch_record_add(struct launch_record *rec, const struct sandbox_cgroups *cg);
/* Note the init's host pid in the record ("init PID"), where there is one:
 * what finds a running sandbox's init by its name.  Lines other than
 * "cgroup" and "bind" ones are not the collector's. */
int launch_record_init(struct launch_record *rec, pid_t pid);
/* List a writable bind's source in the record (st: as it was before the
 * run; lent: its owner is to be changed to ids_uid), so that a collector of
 * a dead launcher's record gives it back and clears the setuid and setgid
 * bits the sandbox left (bind_return).  Call before lending it.  -EINVAL
 * (logged) for a path with a newline, which a record line cannot hold. */
int launch_record_add_bind(struct launch_record *rec, const char *path, const struct stat *st,
                           uid_t ids_uid, bool lent);
/* Close the record, and remove it when what it lists is gone (remove);
 * otherwise it stays for `lazyroot gc`.  Safe on an unopened one. */
void launch_record_close(struct launch_record *rec, bool remove);
/* sandbox_gc, quietly and at most once every few seconds per host (one stat
 * otherwise): the start of every run calls it. */
void sandbox_gc_maybe(const struct sandbox_node *n);

/* ---- host id ranges (pool.c) --------------------------------------------- */

/* The host ids a sandbox's ids 0..65535 map to: a range of its own while it
 * runs, locked in /run/lazyroot/ids, so that the kernel's per-user budgets
 * (charged to host uids and to the owner of the sandbox's user namespace)
 * are its own.  sandbox/POLICY.md, "Host ids", says where the ranges come
 * from. */
struct id_slot {
	int lock_fd;            /* -1: the policy's fixed uid_base, nothing held */
	uint32_t uid_base, gid_base;
};
#define ID_SLOT_INIT { -1, 0, 0 }
/* Take a free range of the node's (policy ids_auto), or use the policy's
 * fixed one.  -EBUSY (logged) when every range is in use; -errno. */
int id_slot_take(const struct sandbox *sb, struct id_slot *s);
/* Once every process of the sandbox is gone.  Safe on an untaken slot. */
void id_slot_release(struct id_slot *s);
/* Is uid one of the node's sandbox ranges (a host file owned by it belongs
 * to some sandbox, maybe a running one)? */
bool id_slot_node_owned(const struct sandbox_node *n, uid_t uid);

/* ---- the network namespace pool (pool.c) -------------------------------- */

/* A pooled network namespace held by one launcher. */
struct netns_slot {
	int lock_fd;            /* the slot's lock, held while in use; -1: no pooled namespace */
	int ns_fd;              /* the namespace */
	int host_fd;            /* the launcher's own network namespace */
	int stat_fd[3];         /* its sockstat, sockstat6 and unix, opened inside it */
	int count_fd[4];        /* its counters: dev, snmp, snmp6, netstat, opened inside it */
	uint64_t counted;       /* a hash of the counters as the sandbox found them */
	int index;
	const char *dir;        /* the pool directory it is in (borrowed from the sandbox) */
};
#define NETNS_SLOT_INIT { -1, -1, -1, { -1, -1, -1 }, { -1, -1, -1, -1 }, 0, -1, NULL }
void netns_slot_init(struct netns_slot *s);
/* Take a free slot of the pool (making its namespace if the slot has none)
 * when pooling is on and the policy has no allowlist and no sysfs.  0 with
 * s->lock_fd -1 when the sandbox must get a namespace of its own (pooling off,
 * or every slot in use); -errno (logged). */
int netns_slot_take(const struct sandbox *sb, struct netns_slot *s);
/* Move the calling thread into the slot's namespace, so that a clone without
 * CLONE_NEWNET starts there, and back to its own. */
int netns_slot_enter(struct netns_slot *s);
int netns_slot_leave(struct netns_slot *s);
/* Once every process of the sandbox is gone: put the namespace back when it
 * holds no socket, else unmount it (the slot gets a fresh one next time);
 * release the lock.  Safe on an untaken slot. */
void netns_slot_release(struct netns_slot *s);

/* A pooled set of cgroups (memory, pids, cpu and cgroup2 directories named
 * lazyroot-pool-HASH.N under the launcher's own) held by one launcher. */
struct cgroup_slot {
	int lock_fd;            /* -1: the sandbox's cgroups are its own */
	int index;
	size_t paths_len;       /* bytes of the lock file's "cgroup" lines */
	size_t file_len;        /* the lock file's length when taken */
};
#define CGROUP_SLOT_INIT { -1, -1, 0, 0 }
/* The most a pooled memory cgroup may still be charged (kernel objects its
 * sandboxes were first to use: dentries, inodes) and be used again. */
#define POOL_CG_MAX_CHARGE (8u << 20)
/* Take a free cgroup slot when pooling is on, the policy has no allowlist
 * and the memory controller is v1 (or absent): *cg gets its paths, its directories exist and are ready
 * (cgroups_reuse).  0 with s->lock_fd -1 when the sandbox must get cgroups
 * of its own; -errno (logged). */
int cgroup_slot_take(const struct sandbox *sb, struct cgroup_slot *s, struct sandbox_cgroups *cg);
/* Once the sandbox is gone: keep the slot's directories for the next taker
 * when cgroups_reusable (POOL_CG_MAX_CHARGE), else remove them; frees the
 * paths of cg.  -EBUSY (logged) when a directory could not be removed. */
int cgroup_slot_release(struct cgroup_slot *s, struct sandbox_cgroups *cg);

/* ---- the filesystem (setup.c) ------------------------------------------- */

/* Inside the new user and mount namespaces, as the sandbox's init, one step
 * each (init.c runs them in this order): make the mount tree private and
 * mount the tmpfs (its source is name) with its directories; attach the
 * rootfs (lower_fd, a detached idmapped tree from the launcher, closed and
 * set to -1 once attached) and mount the overlay; /proc; /sys; the masks
 * over what /proc and /sys show of the host (and the mask source for hidden
 * paths); /dev; the binds (bind_fds[i], detached trees from the launcher,
 * each closed and set to -1 once attached); the hostname; then pivot into
 * the new root and detach the old one. */
int setup_tmpfs(const struct sandbox *sb, const char *name);
int setup_overlay(const struct sandbox *sb, int *lower_fd);
int setup_proc(const struct sandbox *sb);
int setup_sys(const struct sandbox *sb);
int setup_masks(const struct sandbox *sb);
int setup_dev(const struct sandbox *sb);
int setup_binds(const struct sandbox *sb, int *bind_fds);
int setup_hostname(const struct sandbox *sb);
int setup_pivot(void);
/* Bring up the loopback of the calling thread's network namespace; -errno. */
int loopback_up(void);
/* The per-namespace limits of the policy (namespaces, inotify, fanotify, IPC
 * objects), in two halves.  The kernel charges the launcher's own setup to
 * them: every mount tree open_tree(OPEN_TREE_CLONE) or fsmount detaches is a
 * mount namespace of the caller's user namespace while it lasts, so
 * max_mnt_namespaces = 0 in force during the init's setup would refuse its first
 * open_tree.  So the sandbox's init opens the sysctl files (bound to its own
 * user and ipc namespaces) before its setup, and writes them as its last
 * step before the command starts, while it is still root there with
 * CAP_SYS_RESOURCE (the kernel checks both at the write, not at the open).
 * After that, nothing may make a namespace owned by the sandbox's user
 * namespace, the launcher included (see netpolicy's cover_inside). */
struct ns_limit {
	int fd;
	char path[40];          /* under /proc/sys, for the error */
	char value[40];
};
struct ns_limits {
	struct ns_limit v[16];
	size_t n;
};
/* Open the files; 0 or -errno, logged (nothing left open on error). */
int ns_limits_open(const struct sandbox *sb, struct ns_limits *l);
/* Write and close them all; 0 or -errno, logged. */
int ns_limits_apply(struct ns_limits *l);
void ns_limits_close(struct ns_limits *l);
/* In the sandbox's init, once setup_masks has made the mask source: cover
 * path (relative to dirfd; a final symlink is not followed) with an empty,
 * read-only, mode-000 directory or file, whichever it is, so that not even its
 * size, times or extended attributes show.  A missing path is left alone. */
int mask_path(int dirfd, const char *path);

/* ---- seccomp (seccomp.c) ------------------------------------------------ */

/* Load the filter into the calling thread (no_new_privs must be set): the
 * one that lets io_uring through when sb->io_uring, socket() narrowed to
 * sb->socket_families. */
int seccomp_install(const struct sandbox *sb);

/* ---- Landlock (landlock.c) ---------------------------------------------- */

/* In the sandbox's init, after pivot_root and no_new_privs, before the
 * command: cover hidden directories with an empty, unreadable tmpfs and
 * restrict the calling process (and every process it starts) to the
 * policy's file, TCP port and scope rules.  Does nothing when sb->landlock is
 * off.  Fails (logged) when the kernel's Landlock ABI is below 6. */
int landlock_apply(const struct sandbox *sb);
/* The same rules for the calling process alone, with hidden (the paths the
 * stage in force hides, policy's included) instead of the starting stage's,
 * and no mount: an exec into the running sandbox finds the init's in place
 * and the covers of a stage switch beside them (netpolicy.c). */
int landlock_restrict(const struct sandbox *sb, const struct strv *hidden);

/* The paths hidden at the start: the policy's hide list and the starting
 * stage's.  *ret borrows the strings of sb; free only the array. */
int policy_hidden(const struct sandbox *sb, struct strv *ret);
/* Does the init hide any path at its start (landlock on, policy_hidden not
 * empty)? */
bool policy_hides(const struct sandbox *sb);
/* "A.B.C.D:PORT", "[V6]:PORT" or "host:PORT" into *a.  -EINVAL. */
int policy_parse_addr(const char *v, struct sandbox_addr *a);
/* The starting stage, or NULL when the policy declares none. */
const struct sandbox_stage *policy_start_stage(const struct sandbox *sb);

/* ---- capabilities (caps.c) ---------------------------------------------- */

/* What a command run as root inside keeps, over its own user namespace
 * only: changing ids (setuid, setgid, setgroups) and owners, which a
 * package manager's privilege drop needs (apt to _apt, dpkg's chown).  The
 * namespace maps the sandbox's own block of host ids and nothing else, so
 * neither reaches a host object: the kernel grants them only to mapped ids,
 * and on an inode only when its owner and group are mapped
 * (docs/security.md, "Root inside").  Not CAP_DAC_OVERRIDE nor CAP_FOWNER:
 * masks and hidden paths are empty mode-000 directories and files of the
 * sandbox's own, which they would open. */
#define CAPS_ROOT_KEPT ((1ull << 0) /* CAP_CHOWN */ | (1ull << 6) /* CAP_SETGID */ | \
                        (1ull << 7) /* CAP_SETUID */)

/* Empty the ambient set and the bounding set but for CAPS_ROOT_KEPT (needs
 * CAP_SETPCAP, so call before caps_drop_all): no_new_privs keeps an exec from
 * gaining any of them, so only a command that holds them keeps them. */
int caps_drop_bounding(void);
/* Empty the inheritable, permitted and effective sets. */
int caps_drop_all(void);
/* Permitted and effective sets of keep (a mask of 1 << CAP_*) alone,
 * inheritable empty. */
int caps_limit(uint64_t keep);
/* Copy the permitted set into the effective set (after a change of the
 * effective uid from 0 cleared it). */
int caps_raise_effective(void);

/* ---- network allowlist and stages (netpolicy.c) ------------------------ */

/* What the launcher holds for a sandbox's network policy while it runs. */
struct net_state {
	int map_fd;             /* the allowlist map, or -1 */
	int links[4];           /* bpf_link fds: closing them detaches the programs */
	int n_links;
	char veth[16];          /* host side of the veth pair, or "" */
	uint32_t host_ip, sb_ip;   /* network byte order; 0 without a veth */
	char *state_dir;        /* STATE_ROOT/NAME when the policy has stages */
};
#define NET_STATE_INIT { .map_fd = -1 }

/* How many addresses the starting stage allows (0: loopback only). */
int netpolicy_start_allow(const struct sandbox *sb);
/* Refuse a policy whose starting stage is not declared, or that sets path or
 * port fields with Landlock off (they would do nothing). */
int netpolicy_check(const struct sandbox *sb);
/* Between the clone and the sandbox's first step, from the launcher: with a
 * non-empty starting allowlist, the veth pair into pid's network namespace
 * and the BPF programs on cgroup2 (the sandbox's cgroup2 directory); with
 * stages, the state file.  On failure call netpolicy_teardown. */
int netpolicy_setup(const struct sandbox *sb, const char *name, pid_t pid, const char *cgroup2,
                    struct net_state *ns);
/* Detach, delete and remove everything of ns; idempotent. */
void netpolicy_teardown(struct net_state *ns);
/* The stage in force now in the running sandbox name and every path hidden
 * so far (the policy's, the starting stage's, those of each switch), read
 * from its state under its lock, so that no switch is half-way meanwhile.
 * *ret_stage and the strings of *ret_hidden are malloc'd (strv_free).
 * -ENOENT when the sandbox has no state (it declares no stages). */
int netpolicy_stage_now(const struct sandbox_node *n, const char *name, char **ret_stage,
                        struct strv *ret_hidden);
void strv_free(struct strv *l);

#endif
