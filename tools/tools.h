/* tools.h — the `lazyroot` subcommands and the option helpers they share. */
#ifndef LAZYROOT_TOOLS_H
#define LAZYROOT_TOOLS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "node/config.h"

int cmd_build(int argc, char **argv);
int cmd_image(int argc, char **argv);
int cmd_mount(int argc, char **argv);
int cmd_umount(int argc, char **argv);
int cmd_cache(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_policy(int argc, char **argv);
int cmd_gc(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_store(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_node(int argc, char **argv);
int cmd_key(int argc, char **argv);
/* `lazyroot image sign` (tools/sign.c): argv[1] is "sign". */
int cmd_image_sign(int argc, char **argv);
int cmd_version(int argc, char **argv);
int cmd_doctor(int argc, char **argv);

/* A git-style command table and its dispatch. */
struct tools_command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
};
/* Run the entry of cmds (n of them) named by argv[1], with argc - 1, argv + 1.
 * No argv[1]: the usage on stderr, 2; --help, -h or help: the usage on stdout,
 * 0; an unknown name: one line naming it, 2.  prog is what the usage calls the
 * program ("lazyroot", "lazyroot cache"), what the word for an entry
 * ("command"); names are listed in a column width wide. */
int tools_dispatch(const char *prog, const char *what, const struct tools_command *cmds,
                   size_t n, int width, int argc, char **argv);

/* ---- usage errors ----------------------------------------------------------
 *
 * A usage error is one line on stderr, "lazyroot: CMD: what is wrong (see
 * 'lazyroot CMD --help')", and exit status 2 (lazyroot(1), EXIT STATUS); the
 * help itself goes to stdout, and only when asked for.  getopt's own messages
 * are off (opterr = 0, set in main) so that each command says it this way. */

/* The line above for cmd ("build", "image ls"); returns 2. */
__attribute__((format(printf, 2, 3)))
int tools_usage_error(const char *cmd, const char *fmt, ...);
/* After getopt_long() returned '?': the usage error naming what argv[optind - 1]
 * held, an unknown option or one that wants a value (shortopts and longopts as
 * given to getopt_long); returns 2. */
struct option;
int tools_option_error(const char *cmd, char **argv, const char *shortopts,
                       const struct option *longopts);

/* ---- the node's settings (node/config.h, docs/settings.md) ------------------ */

/* The setting flags a command was given, noted while its options are parsed
 * and applied after the config file and the environment. */
#define TOOLS_FLAGS_MAX 16
struct tools_flags {
	const char *config;             /* --config FILE, or NULL */
	struct {
		const char *flag, *value;
	} v[TOOLS_FLAGS_MAX];
	unsigned n;
};
/* Note flag (spelled as docs/settings.md spells it: "--cache-size") with its
 * value; NULL for a --no-… switch. */
void tools_flag(struct tools_flags *f, const char *flag, const char *value);
/* Note flag once more, keeping its earlier values: for flags that add to a
 * list (--trust-key).  Past TOOLS_FLAGS_MAX in all, the rest are dropped. */
void tools_flag_add(struct tools_flags *f, const char *flag, const char *value);
/* The command's settings, read once: node_config_setup() with f->config, then
 * f's flags in order.  Errors are logged (one line naming the file and line,
 * the variable or the flag); c is then destroyed. */
int tools_settings(const struct tools_flags *f, struct node_config *c);
/* The sandbox launcher's node settings from c (borrowed strings). */
struct sandbox_node;
void tools_sandbox_node(const struct node_config *c, struct sandbox_node *n);
/* Open c's store with c's options, kept in o (which must outlive the store);
 * a missing `dir:` store is an error, or made with create (store_create). */
struct store;
struct store_options;
int tools_store_open(const struct node_config *c, struct store_options *o, bool create,
                     struct store **ret);

int cmd_cache_prefetch(int argc, char **argv);

/* `lazyroot CMD VERB [OPTION…] ARG…` for commands of verbs on a store (image,
 * profile): --store, --s3-endpoint, --config, --json and --help after VERB,
 * one of verbs (NULL-terminated).  Returns -1 to go on, with o filled (o->cfg:
 * the settings, which the caller destroys), else the exit status: 0 for
 * --help (the usage on stdout), 2 for no verb, an unknown one, a bad option or
 * a bad setting (one line). */
struct tools_verb {
	const char *verb;
	char cmd[48];                   /* "image ls": what usage errors name */
	bool json;
	bool no_progress;               /* --no-progress */
	char **args;                    /* the arguments after the options */
	int nargs;
	struct tools_flags flags;
	struct node_config cfg;
};
int tools_verb_parse(int argc, char **argv, const char *cmd, const char *const *verbs,
                     void (*usage)(FILE *f), struct tools_verb *o);
/* The usage error for o's arguments: its verb wants `want` ("REF DIR"; "" for
 * none); returns 2. */
int tools_verb_args_error(const struct tools_verb *o, const char *want);
/* For _cleanup_: destroys o->cfg. */
void tools_verb_done(struct tools_verb *o);

/* ---- the node's shared image mounts (images.c) ---------------------------- */

/* Ask the node service (cfg: the command's settings, sent with the request)
 * for the mount of image ref (a tag or an index name) from cfg's store: the
 * directory where it is mounted (IMAGES/<hex>, or IMAGES/<hex>-<store hash>
 * for the same index from another store), mounted unless already there, once
 * however many callers race, and the image config JSON ("" when none).  Both
 * are the caller's to free.  Logs its errors. */
int images_mount(const struct node_config *cfg, const char *ref, char **ret_dir,
                 char **ret_config);

/* Apply the image config JSON (OCI: config.Env, config.WorkingDir,
 * config.User) to sb, as policy settings that later ones override.  root is
 * where the image is mounted, for user and group names; ref names the image
 * in errors.  An empty config sets nothing. */
struct sandbox;
int images_apply_config(struct sandbox *sb, const char *root, const char *ref, const void *json,
                        size_t len);

/* ---- speaking to the node service (node.c) --------------------------------- */

struct buf;
struct json_t;
/* Add "settings" to the request object req: every setting of cfg (but the
 * environment-only ones, which the node takes from its own environment),
 * for the node to apply to what the request makes (a store, a cache, a mount),
 * with the command's paths made absolute; and "secrets", the credentials of
 * this command's environment. */
int tools_node_settings(struct json_t *req, const struct node_config *cfg);
/* req (its reference taken) as the text of a request, NUL-terminated, in ret. */
int tools_node_request_text(struct json_t *req, struct buf *ret);
/* node_request() (node/node.h) on cfg's socket, starting a node with cfg's
 * config file, store, cache and images when none answers.  Logs its errors. */
int tools_node_request(const struct node_config *cfg, const char *request, struct json_t **ret);
/* tools_node_request() with the node's progress lines handed to cb as they come. */
int tools_node_request_progress(const struct node_config *cfg, const char *request,
                                void (*cb)(void *ud, const struct json_t *progress), void *ud,
                                struct json_t **ret);
/* path made absolute against the current directory (lexically); NULL: ENOMEM. */
char *tools_absolute(const char *path);
/* The store URL with every local member made absolute; NULL: ENOMEM. */
char *tools_absolute_store_url(const char *url);

#endif
