/*
 * keeper-fn.c — the functions an exec may run instead of a command (the
 * request's "fn"): the file transfers of sandbox/files.c, reading the
 * exec's stdin and writing its stdout.  Each runs in the exec's process,
 * already confined by sandbox_enter, so its paths are the sandbox's own.
 * Arguments (fn_args): "path" (required), "mode" (file_put: an octal
 * string or a number, default 0644), "parents" (file_put: bool),
 * "max_bytes" and "max_entries" (default: files.c's, SANDBOX_FILES_MAX_*).
 */
#include <unistd.h>

#include "lib/json.h"
#include "lib/lib.h"
#include "sandbox/keeper-internal.h"

static int limits(const json_t *a, struct sandbox_files_limits *l)
{
	int64_t v;

	*l = (struct sandbox_files_limits){ 0, 0 };   /* 0: files.c's defaults */
	if (json_int(json_object_get(a, "max_bytes"), &v) == 0 && v > 0)
		l->max_bytes = (uint64_t)v;
	if (json_int(json_object_get(a, "max_entries"), &v) == 0 && v > 0)
		l->max_entries = (uint64_t)v;
	return 0;
}

static const char *path_arg(const json_t *a)
{
	const char *p = json_get_cstr(a, "path");

	if (!p)
		log_error(-EINVAL, "fn: no path");
	return p;
}

static int status(int r)
{
	return r < 0 ? 1 : 0;
}

static int fn_file_put(json_t *a)
{
	struct sandbox_files_limits l;
	const char *p = path_arg(a), *ms = json_get_cstr(a, "mode");
	int64_t mode = 0644;
	bool parents = false;

	if (!p)
		return 2;
	if (ms) {
		char *end;

		mode = strtol(ms, &end, 8);
		if (*end || mode < 0 || mode > 07777)
			return log_error(-EINVAL, "fn: bad mode '%s'", ms), 2;
	} else if (json_object_get(a, "mode") && json_int(json_object_get(a, "mode"), &mode) < 0) {
		return log_error(-EINVAL, "fn: bad mode"), 2;
	}
	json_bool(json_object_get(a, "parents"), &parents);
	limits(a, &l);
	return status(sandbox_file_put(STDIN_FILENO, p, (mode_t)mode, parents, &l));
}

static int fn_file_get(json_t *a)
{
	struct sandbox_files_limits l;
	const char *p = path_arg(a);

	if (!p)
		return 2;
	limits(a, &l);
	return status(sandbox_file_get(STDOUT_FILENO, p, &l));
}

static int fn_tar_put(json_t *a)
{
	struct sandbox_files_limits l;
	const char *p = path_arg(a);

	if (!p)
		return 2;
	limits(a, &l);
	return status(sandbox_tar_put(STDIN_FILENO, p, &l));
}

static int fn_tar_get(json_t *a)
{
	struct sandbox_files_limits l;
	const char *p = path_arg(a);

	if (!p)
		return 2;
	limits(a, &l);
	return status(sandbox_tar_get(STDOUT_FILENO, p, &l));
}

static const struct keeper_fn fns[] = {
	{ "file_put", fn_file_put },
	{ "file_get", fn_file_get },
	{ "tar_put", fn_tar_put },
	{ "tar_get", fn_tar_get },
};

const struct keeper_fn *keeper_fn_find(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(fns); i++)
		if (!strcmp(fns[i].name, name))
			return &fns[i];
	return NULL;
}
