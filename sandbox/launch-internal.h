/*
 * launch-internal.h — the launcher as a plan: what its files share.
 *
 * sandbox_run is three ordered lists of named steps (bubblewrap's setup-op
 * list is the model):
 *   - the host's (launch.c), run by the launcher as root: each has an undo,
 *     which one loop pushes on one stack before the step runs and unwinds
 *     in reverse on the first failure and at the end, so that a launch that
 *     fails anywhere leaves what a finished one leaves: nothing;
 *   - the init's (init.c), run inside the new namespaces as pid 1: each
 *     fails fast and has no undo, since everything it makes dies with the
 *     namespaces;
 *   - the command's (init.c), run by pid 2 up to its exec.
 * Every step says what it changes (the sandbox as a whole, or the process
 * that runs it) and what a process that enters the running sandbox later
 * (an exec) must do about it: nothing, join what the init made (enter), or
 * do it again (replay), and what the replay needs.  plan_exec_steps lists
 * the steps an exec gets, in the order the init ran them, and each of those
 * rows carries the function an exec runs for it (enter.c): sandbox_enter
 * walks that list and nothing else, so a step added to the launch with an
 * exec mark is one the exec runs too (test_plan checks that every marked
 * row has its function).
 *
 * The files: launch.c (the host's steps and the loop), init.c (the init's
 * and the command's steps), enter.c (an exec's entry and the replays),
 * watch.c (the running sandbox's watch: output,
 * wall clock, signals, cgroup events), binds.c (writable binds lent and
 * given back).
 */
#ifndef LAZYROOT_SANDBOX_LAUNCH_INTERNAL_H
#define LAZYROOT_SANDBOX_LAUNCH_INTERNAL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "lib/lib.h"
#include "sandbox/sandbox-internal.h"

/* ---- the steps, as data ---------------------------------------------------- */

/* Who runs a step. */
enum plan_side {
	PLAN_HOST,              /* the launcher, root on the host */
	PLAN_INIT,              /* the sandbox's init, pid 1 inside */
	PLAN_COMMAND,           /* the command, pid 2, up to its exec */
};

/* What a step changes. */
enum plan_scope {
	PLAN_SCOPE_LAUNCH,      /* the launcher's own bookkeeping (ids, records, pipes, watch) */
	PLAN_SCOPE_SANDBOX,     /* the sandbox as a whole: namespaces, mounts, sysctls, maps */
	PLAN_SCOPE_PROCESS,     /* the process that runs it: ids, caps, filters, limits, cwd */
};

/* What a process that enters the running sandbox (an exec) does about it. */
enum plan_exec {
	PLAN_EXEC_NONE,         /* nothing: the sandbox has it, or it is the init's own */
	PLAN_EXEC_ENTER,        /* joins what the init made (setns through its pidfd) */
	PLAN_EXEC_REPLAY,       /* does it again for itself, as the init or command did */
};

/* What a replay needs besides the step itself. */
#define PLAN_NEEDS_POLICY   (1u << 0)   /* the sandbox's policy */
#define PLAN_NEEDS_STAGE    (1u << 1)   /* the stage in force now (its state file) */
#define PLAN_NEEDS_PIDFD    (1u << 2)   /* the init's pidfd, to enter its namespaces */
#define PLAN_NEEDS_CGROUP   (1u << 3)   /* the sandbox's cgroups, the exec's own beneath */
#define PLAN_NEEDS_REQUEST  (1u << 4)   /* the exec's request: argv, env, cwd, user, stdio */

struct enter;           /* one exec's entry into a running sandbox (enter.c) */

struct plan_step_info {
	const char *name;
	enum plan_side side;
	enum plan_scope scope;
	enum plan_exec exec;
	unsigned needs;         /* PLAN_NEEDS_* for a replay or an entry */
	/* exec != NONE: what an exec does for the step (enter.c), run where the
	 * side says: a host row by sandbox_enter's caller, the init's and the
	 * command's rows by the entered process before its exec; NULL else */
	int (*replay)(struct enter *e);
};

/* The i-th step of a launch in the order the steps run: the host's up to
 * the clone, then the init's and the command's (which run while the host
 * runs its steps after the clone), then the host's after the clone.  NULL
 * past the end.  Static data. */
const struct plan_step_info *plan_step_at(size_t i);
/* The steps an exec'd process gets (exec != PLAN_EXEC_NONE), in that order:
 * *ret is a malloc'd array of *ret_n pointers to static data.  -ENOMEM. */
int plan_exec_steps(const struct plan_step_info ***ret, size_t *ret_n);
const char *plan_side_name(enum plan_side s);
const char *plan_exec_name(enum plan_exec e);

/* The init's and the command's steps (init.c); the host's are launch.c's. */
const struct plan_step_info *init_step_at(size_t i);
const struct plan_step_info *command_step_at(size_t i);

/* ---- the replays (enter.c), named by their rows ----------------------------- */

int enter_output(struct enter *e);
int enter_pipes(struct enter *e);
int enter_stdin(struct enter *e);
int enter_cgroups(struct enter *e);
int enter_cgroup_fds(struct enter *e);
int enter_clone(struct enter *e);
int enter_cgroup_attach(struct enter *e);
int enter_watch(struct enter *e);
int enter_join_cgroups(struct enter *e);
int enter_signals(struct enter *e);
int enter_root_ids(struct enter *e);
int enter_cgroup_ns(struct enter *e);
int enter_pivot_root(struct enter *e);
int enter_rlimits(struct enter *e);
int enter_no_new_privs(struct enter *e);
int enter_landlock(struct enter *e);
int enter_bounding_set(struct enter *e);
int enter_seccomp(struct enter *e);
int enter_not_dumpable(struct enter *e);
int enter_session(struct enter *e);
int enter_stdio(struct enter *e);
int enter_user(struct enter *e);
int enter_capabilities(struct enter *e);
int enter_workdir(struct enter *e);
int enter_environment(struct enter *e);
int enter_descriptors(struct enter *e);
int enter_exec(struct enter *e);

/* ---- the init (init.c) ------------------------------------------------------ */

#define SETUP_FAILED 125   /* the init's exit code when it could not build the sandbox */

enum { MSG_READY = 'R', MSG_STATUS = 'S' };

struct msg {
	char type;
	int status;
};

/* What the init starts with, from the launcher (its copy of the launcher's
 * memory after the clone). */
struct child_ctx {
	const struct sandbox *sb;
	const char *name;
	char *const *argv;
	int sock, in, out_w, err_w;
	bool pooled_net;        /* in a pooled network namespace (pool.c) */
	int *cg_tasks;          /* v1 tasks files to move into (cgroups_self_move) */
};

/* Run the init's steps, start the command, reap until it ends, report its
 * status on the socket; never returns. */
__attribute__((noreturn)) void init_main(struct child_ctx *c);
/* What the init's steps of these names do, for the init and for an exec's
 * replay alike: root inside (ids 0, no groups); the policy's rlimits. */
int init_root_ids(void);
void init_rlimits(const struct sandbox *sb);
/* Send n descriptors (n may be 0) in one message on a unix socket. */
int send_fds(int sock, const int *fds, size_t n);

/* ---- the watch of a running sandbox (watch.c) ------------------------------ */

/* One of the sandbox's output streams on its way to the launcher's own
 * stdout or stderr (watch.c says how it never waits on its reader). */
struct out_stream {
	int in;                 /* the sandbox's pipe (read end); -1 at end of file */
	int out;                /* where the bytes go; -1: discarded */
	bool own;               /* out was opened here: close it at the end */
	bool sock;              /* out is a socket: send with MSG_DONTWAIT */
	bool guarded;           /* out may block: write at most PIPE_BUF after POLLOUT */
	struct buf pending;     /* read from in, not yet written */
	size_t off;             /* of pending, written so far */
	bool any;               /* a byte was passed through */
	char last;              /* the last byte passed through */
};

struct watch {
	const struct sandbox *sb;
	int pidfd;
	enum sandbox_kill killed_by;
	uint64_t output;
	bool killed;
	struct out_stream o[2];   /* stdout, stderr */
	/* A stdin that has a path, copied into the sandbox's stdin pipe:
	 * in_src (non-blocking, the launcher's own open of it) to in_pipe (the
	 * write end, non-blocking); -1 when there is none or it has ended. */
	int in_src, in_pipe;
	bool in_wait_src;         /* the source had nothing: wait for it, not the pipe */
};

/* Where stream fd (1 or 2) of the launcher can be written without waiting. */
void out_open(struct out_stream *o, int fd);
/* Wait until o is written out, or a signal in sigfd says to give up. */
void out_finish(struct out_stream *o, int sigfd);
/* End the sandbox (SIGKILL to its init) once, for why. */
void kill_sandbox(struct watch *w, enum sandbox_kill why);
/* Watch the running sandbox until its init is gone, then drain its pipes. */
void watch_loop(struct watch *w, const struct sandbox_cgroups *cg, int sigfd, uint64_t start);
void close_fd(int *fd);

/* ---- one launch, and the keeper's seam (launch.c) --------------------------- */

#define LAUNCH_MAX_STEPS 32

/* One launch: what the host's steps make, and the undos take back. */
struct launch {
	struct sandbox *sb;
	char *const *argv;                /* NULL: the init runs no command (a keeper's) */
	struct sandbox_result *ret;
	char name[96];
	sigset_t old_mask;
	bool masked;
	int sigfd;
	int out[2], err[2], sp[2], in;    /* the sandbox's ends go to the init at the clone */
	struct watch w;
	struct id_slot ids;
	struct lent_bind *lent;           /* one per bind; fd -1 unless lent */
	struct launch_record rec;
	struct cgroup_slot cslot;
	struct sandbox_cgroups cg;
	bool cg_held;                     /* cg names directories of the sandbox's (own or pooled) */
	bool cg_left;                     /* some could not be removed: the record stays for gc */
	struct netns_slot nslot;
	int cgfd;                         /* the cgroup2 directory, for CLONE_INTO_CGROUP */
	int cg_tasks[CG_COUNT];
	uint64_t start;
	pid_t pid;                        /* the init; 0 once reaped */
	int pidfd;
	struct net_state net;
	size_t undo[LAUNCH_MAX_STEPS];    /* rows of the steps run that have an undo, in order */
	size_t n_undo;
};

/* Ready l for a launch of sb: argv as sandbox_run takes it, or NULL for a
 * sandbox whose init runs no command and only reaps (a keeper's,
 * sandbox/keeper.c); ret is filled by the watch and may be a scratch one. */
void launch_init(struct launch *l, struct sandbox *sb, char *const *argv,
                 struct sandbox_result *ret);
/* Run the host's steps before the watch, each undo pushed before its step
 * runs; on failure the stack is unwound (nothing left) and -errno returned.
 * On success the init runs its own steps meanwhile: launch_wait_ready says
 * when it is done. */
int launch_open(struct launch *l);
/* Wait until the init of an opened launch said it is ready (0), or ended
 * before (-EIO, logged; it said why on stderr). */
int launch_wait_ready(struct launch *l);
/* Kill the init if it still runs, reap it, and unwind the stack: what a
 * finished launch leaves, nothing.  Safe after a failed launch_open. */
void launch_close(struct launch *l);

/* ---- writable binds lent to the sandbox (binds.c) -------------------------- */

struct lent_bind {
	int fd;                 /* O_PATH, the source as bound */
	struct stat st;         /* its owner and mode before */
	bool lent;
	uid_t ids_uid;          /* the sandbox's root on the host */
};

/* Lend b's source to the sandbox of ids for its run (binds.c says when). */
int bind_lend(const struct sandbox_node *n, const struct sandbox_bind *b,
              const struct id_slot *ids, struct lent_bind *l,
              struct launch_record *rec);
/* The sandbox is gone: give the source back and clear the setuid and setgid
 * bits of what it left.  Safe on one never lent (fd -1). */
void bind_return(const struct sandbox_bind *b, struct lent_bind *l);

#endif
