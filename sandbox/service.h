/*
 * service.h — sandboxes that outlive a command: create one, run commands in
 * it (exec), switch its stage, read its state, destroy it.
 *
 * Each sandbox has a keeper (sandbox/keeper.c): one process, detached from
 * whoever created it (double fork, setsid, only its own descriptors), that
 * ran the launch plan's host steps with an init that runs no command, is
 * the parent of that init, and serves a socket until the sandbox ends.  A
 * crash or kill -9 of the caller (the node worker serving the API) ends no
 * sandbox and no exec: every sandbox and exec is found again by reading the
 * state tree, of which the keeper is the only writer:
 *
 *   DIR/<id>/            0700, root; DIR is the node's service_dir
 *     sandbox.json       id, name, labels, rootfs, image and image_index (the
 *                        image rootfs is the node's mount of, or null), the
 *                        policy as "key = value" lines, created (Unix
 *                        seconds), ttl, idle_timeout, keeper_pid, init_pid
 *     keeper.sock        the keeper's socket (SOCK_SEQPACKET, one JSON
 *                        message each way; descriptors by SCM_RIGHTS)
 *     keeper.lock        held (flock) by the keeper while it lives
 *     keeper.log         what the keeper logged after the sandbox was ready
 *     execs/<exec_id>/   request.json, stdout, stderr (the bytes as produced,
 *                        up to the exec's output limit), result.json (by
 *                        rename, once the exec has ended)
 *     ended.json         {"id", "reason", "at"} once the sandbox has ended:
 *                        reason destroyed, ttl, idle, init, signal or error;
 *                        kept until the directory is collected (sandbox_gc,
 *                        SANDBOX_SERVICE_KEEP_ENDED seconds after the end)
 *
 * A result.json is {"exec_id", "status", "signal", "killed_by" (null, "time",
 * "output", "memory": the sandbox's OOM killer took the leader, "pids": a
 * fork the sandbox's pids limit refused ended the exec, the one with the
 * most processes, or "sandbox"), "wall_seconds", "cpu_seconds",
 * "stdout_bytes", "stderr_bytes", "truncated"}.
 *
 * Ids: a sandbox's id is its name (the request's, refused when taken; else
 * generated); an exec's is the caller's ([A-Za-z0-9._-]{1,64}, not starting
 * with a dot) or generated, and a second exec with an id that exists returns
 * that exec and never runs the command again.
 *
 * Thread-safety: every function below is blocking and thread-safe; each call
 * opens its own connection to a keeper and keeps no state between calls, so
 * a server may call them from a thread per request.  None forks a sandbox
 * process in the caller except sandbox_service_create, whose forks detach at
 * once.  Errors: -errno, and err (may be NULL) gets one line saying why
 * (lowercase, no full stop, naming the sandbox or exec); nothing is logged.
 * Needs root.
 */
#ifndef LAZYROOT_SANDBOX_SERVICE_H
#define LAZYROOT_SANDBOX_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/json.h"
#include "sandbox/sandbox.h"

/* Seconds an ended sandbox's directory (ended.json, the execs' results)
 * stays for readers before sandbox_gc removes it. */
#define SANDBOX_SERVICE_KEEP_ENDED 600
/* Bounds of the finished execs a keeper keeps: the oldest finished ones go
 * first once either is passed. */
#define SANDBOX_SERVICE_KEEP_EXECS 1024
#define SANDBOX_SERVICE_KEEP_BYTES (256u << 20)
/* Execs running at once in one sandbox, and its waiting connections. */
#define SANDBOX_SERVICE_MAX_RUNNING 64
#define SANDBOX_SERVICE_ID_MAX 64

struct sandbox_service_err {
	char msg[256];
};

struct sandbox_service_kv {
	const char *key, *value;
};

/* What `lazyroot run` takes, as data.  Strings are borrowed for the call. */
struct sandbox_service_request {
	const char *rootfs;          /* a directory (an image's: the node's mount of it) */
	const char *image;           /* the image rootfs is the mount of, as asked; NULL: none */
	const char *image_index;     /* its index name; NULL: none (both only recorded) */
	const char *name;            /* the id; NULL: generated */
	const char *policy;          /* a policy file's text ("key = value" lines); NULL: none */
	const struct sandbox_service_kv *set;   /* then these fields, in order (--set) */
	size_t n_set;
	const struct sandbox_service_kv *labels;
	size_t n_labels;
	double ttl;                  /* seconds from creation; 0: none */
	double idle_timeout;         /* seconds with no exec running; 0: none */
};

/* Start a sandbox's keeper and wait until the sandbox is ready: 0 and *ret_id
 * (malloc'd) its id, or the launch's error (-EINVAL a bad request or
 * policy, -EEXIST a name taken, -EIO the sandbox's setup failed, ...) with
 * nothing of it left.  The policy's timeout field (`run`'s wall clock) does
 * not apply: the ttl does; its output field is each exec's default output
 * limit. */
int sandbox_service_create(const struct sandbox_node *node,
                           const struct sandbox_service_request *req, char **ret_id,
                           struct sandbox_service_err *err);

/* A sandbox's state, as a new JSON object: sandbox.json's fields and
 * "state" ("running" or "ended"), "stage" (null without stages), "ended"
 * (ended.json, or null), "idle_seconds", "execs_running", and while it runs
 * "memory_bytes", "memory_peak_bytes", "pids", "cpu_seconds" from its cgroups.
 * -ENOENT: no such sandbox. */
int sandbox_service_get(const struct sandbox_node *node, const char *id, json_t **ret,
                        struct sandbox_service_err *err);

/* Every sandbox of the node, running or ended, as a JSON array of what
 * sandbox_service_get gives, those with label (a "key=value", NULL: all)
 * only.  Unreadable entries are skipped. */
int sandbox_service_list(const struct sandbox_node *node, const char *label, json_t **ret,
                         struct sandbox_service_err *err);

/* Whether a running sandbox (its keeper alive) has its rootfs at dir or
 * under it: 1 and its id in ret_id (len bytes), else 0.  For an unmount
 * that would pull a sandbox's root from under it.  Reads every
 * sandbox.json of the node: a few small files per sandbox. */
int sandbox_service_using(const struct sandbox_node *node, const char *dir, char *ret_id,
                          size_t len);

/* Kill everything in the sandbox, tear it down and remove its state: no
 * process, cgroup, mount, network namespace or file of it is left.  0 also
 * when it is already gone (or never was). */
int sandbox_service_destroy(const struct sandbox_node *node, const char *id,
                            struct sandbox_service_err *err);

/* An exec: argv (searched in the sandbox's PATH; no shell) or, with fn, one
 * of the keeper's functions run by a helper confined exactly the same way
 * (file transfers: "file_put", "file_get", "tar_put", "tar_get"; fn_args a
 * JSON object of its arguments, borrowed). */
struct sandbox_exec_request {
	const char *exec_id;         /* NULL: generated */
	char *const *argv;
	char *const *env;            /* NAME=VALUE added to the policy's; NULL: none */
	const char *cwd;             /* NULL: the policy's workdir */
	const char *user;            /* NULL: the policy's user */
	double timeout;              /* seconds; 0: none */
	uint64_t output_limit;       /* stdout + stderr bytes kept; 0: the policy's output */
	bool stdin_pipe;             /* hand back a pipe to its stdin; else it reads /dev/null */
	const char *fn;
	const json_t *fn_args;
};

/* Start an exec in a running sandbox and return at once: *ret_exec_id
 * (malloc'd) its id, *ret_existed true when that id existed already (then
 * nothing ran, and no stdin is handed back), and with stdin_pipe the write
 * end of its stdin in *ret_stdin (the caller closes it to end the input;
 * may be NULL otherwise).  The exec runs on whatever becomes of the caller.
 * -ENOENT no such sandbox, -ESRCH it has ended, -EINVAL a bad request,
 * -EAGAIN too many execs running. */
int sandbox_service_exec(const struct sandbox_node *node, const char *id,
                         const struct sandbox_exec_request *req, char **ret_exec_id,
                         bool *ret_existed, int *ret_stdin, struct sandbox_service_err *err);

/* An exec's state as a new JSON object: result.json once it has ended, else
 * {"exec_id", "state": "running", "stdout_bytes", "stderr_bytes"}.  With
 * wait > 0, waits up to that many seconds for the end first.  -ENOENT: no
 * such sandbox or exec. */
int sandbox_service_exec_get(const struct sandbox_node *node, const char *id,
                             const char *exec_id, double wait, json_t **ret,
                             struct sandbox_service_err *err);

/* Where the exec's output files are (DIR/<id>/execs/<exec_id>, to read
 * stdout and stderr from an offset), into out.  -ENAMETOOLONG, -EINVAL. */
int sandbox_service_exec_dir(const struct sandbox_node *node, const char *id,
                             const char *exec_id, char *out, size_t len);

/* Switch a running sandbox to stage (sandbox_stage_switch: only tightens);
 * execs started from then on start at it.  stage NULL: only report.
 * *ret_current (may be NULL) gets the stage in force, malloc'd. */
int sandbox_service_stage(const struct sandbox_node *node, const char *id, const char *stage,
                          char **ret_current, struct sandbox_service_err *err);

#endif
