/*
 * keeper-internal.h — what the service's client side (service.c) and the
 * keeper (keeper.c) share.
 */
#ifndef LAZYROOT_SANDBOX_KEEPER_INTERNAL_H
#define LAZYROOT_SANDBOX_KEEPER_INTERNAL_H

#include <sys/types.h>

#include "lib/json.h"
#include "sandbox/service.h"

#define SERVICE_DIR_DEFAULT "/run/lazyroot/service"

/* What the creator hands the keeper (its memory, copied by the fork). */
struct keeper_args {
	const struct sandbox_node *node;
	const struct sandbox_service_request *req;
	const char *root;       /* the service directory */
	int status_fd;          /* "ok ID\n" or "err ERRNO MESSAGE\n", then closed */
};

/* Become the keeper of a new sandbox; never returns.  Called in the
 * grandchild of sandbox_service_create, a session leader of its own. */
__attribute__((noreturn)) void keeper_main(const struct keeper_args *a);

/* A function an exec with "fn" runs instead of a command, confined as one
 * (sandbox_enter's fn): its arguments are the request's fn_args, its stdin,
 * stdout and stderr the exec's; it returns the exit status (0..255). */
struct keeper_fn {
	const char *name;
	int (*run)(json_t *args);
};
const struct keeper_fn *keeper_fn_find(const char *name);

/* Remove dfd/name and everything under it; 0 when gone (or never there). */
int rm_tree_at(int dfd, const char *name);
/* The first line logged to logfd from offset from on, without "lazyroot: ". */
void keeper_log_line(int logfd, off_t from, char *out, size_t len);
/* Sandbox service directories of dead keepers (sandbox_gc, service.c). */
void service_gc(const struct sandbox_node *n);

#endif
