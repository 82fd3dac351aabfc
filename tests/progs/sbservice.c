/*
 * sbservice.c — the sandbox service's calls (sandbox/service.h) from the
 * command line, for the integration tests (sandbox_service.sh):
 *
 *   sbservice create ROOTFS [--name N] [--set K=V]... [--label K=V]...
 *                    [--ttl S] [--idle S]            prints the id
 *   sbservice exec ID [--id EID] [--timeout S] [--limit BYTES] [--stdin]
 *                     [--fn NAME --arg K=V...] -- ARGV...
 *                     prints the exec id (and "existed" when it did);
 *                     --stdin copies this program's stdin into the exec's
 *   sbservice wait ID EID SECONDS                prints the exec's JSON
 *   sbservice get ID | list [LABEL] | destroy ID | stage ID [STAGE]
 *
 * The node's directories come from LAZYROOT_SERVICE_DIR,
 * LAZYROOT_RECORD_DIR and LAZYROOT_POOL_DIR.  Errors: the call's one line
 * on stderr, exit 1 (2: usage).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/json.h"
#include "lib/lib.h"
#include "sandbox/service.h"

static int usage(void)
{
	fprintf(stderr, "usage: sbservice create|exec|wait|get|list|destroy|stage ...\n");
	return 2;
}

static int failed(const char *what, int r, const struct sandbox_service_err *e)
{
	fprintf(stderr, "sbservice: %s: %s (%s)\n", what, e->msg[0] ? e->msg : "failed",
	        strerror(-r));
	return 1;
}

static void print_json(json_t *v)
{
	json_file_add(stdout, v);
}

static int split_kv(char *s, struct sandbox_service_kv *kv)
{
	char *eq = strchr(s, '=');

	if (!eq)
		return -EINVAL;
	*eq = '\0';
	*kv = (struct sandbox_service_kv){ s, eq + 1 };
	return 0;
}

int main(int argc, char **argv)
{
	struct sandbox_node node = {
		.service_dir = getenv("LAZYROOT_SERVICE_DIR"),
		.record_dir = getenv("LAZYROOT_RECORD_DIR"),
		.pool_dir = getenv("LAZYROOT_POOL_DIR"),
	};
	struct sandbox_service_err e = { "" };
	struct sandbox_service_kv set[64], labels[16];
	const char *cmd = argc > 1 ? argv[1] : "";
	json_t *out = NULL;
	int r;

	signal(SIGPIPE, SIG_IGN);
	if (argc < 3 && strcmp(cmd, "list"))
		return usage();
	if (!strcmp(cmd, "create")) {
		struct sandbox_service_request req = { .rootfs = argv[2], .set = set, .labels = labels };
		char *id = NULL;

		for (int i = 3; i + 1 < argc; i += 2) {
			if (!strcmp(argv[i], "--name"))
				req.name = argv[i + 1];
			else if (!strcmp(argv[i], "--set") && req.n_set < 64 &&
			         split_kv(argv[i + 1], &set[req.n_set]) == 0)
				req.n_set++;
			else if (!strcmp(argv[i], "--label") && req.n_labels < 16 &&
			         split_kv(argv[i + 1], &labels[req.n_labels]) == 0)
				req.n_labels++;
			else if (!strcmp(argv[i], "--ttl"))
				req.ttl = atof(argv[i + 1]);
			else if (!strcmp(argv[i], "--idle"))
				req.idle_timeout = atof(argv[i + 1]);
			else
				return usage();
		}
		r = sandbox_service_create(&node, &req, &id, &e);
		if (r < 0)
			return failed("create", r, &e);
		printf("%s\n", id);
		free(id);
		return 0;
	}
	if (!strcmp(cmd, "exec")) {
		struct sandbox_exec_request req = { 0 };
		json_t *args = json_object();
		bool existed = false, pipe_in = false;
		char *eid = NULL;
		int in = -1, i;

		for (i = 3; i < argc && strcmp(argv[i], "--"); i++) {
			if (!strcmp(argv[i], "--stdin")) {
				pipe_in = true;
				continue;
			}
			if (i + 1 >= argc)
				return usage();
			if (!strcmp(argv[i], "--id"))
				req.exec_id = argv[++i];
			else if (!strcmp(argv[i], "--timeout"))
				req.timeout = atof(argv[++i]);
			else if (!strcmp(argv[i], "--limit"))
				req.output_limit = strtoull(argv[++i], NULL, 10);
			else if (!strcmp(argv[i], "--fn"))
				req.fn = argv[++i];
			else if (!strcmp(argv[i], "--arg")) {
				struct sandbox_service_kv kv;

				if (split_kv(argv[++i], &kv) < 0)
					return usage();
				json_object_set_new(args, kv.key, !strcmp(kv.value, "true") ? json_true() :
				                    json_string(kv.value));
			} else
				return usage();
		}
		if (i < argc)
			req.argv = &argv[i + 1];
		req.stdin_pipe = pipe_in;
		req.fn_args = args;
		r = sandbox_service_exec(&node, argv[2], &req, &eid, &existed, pipe_in ? &in : NULL, &e);
		json_decref(args);
		if (r < 0)
			return failed("exec", r, &e);
		printf("%s%s\n", eid, existed ? " existed" : "");
		fflush(stdout);
		free(eid);
		if (in >= 0) {
			char buf[65536];
			ssize_t n;

			while ((n = read(STDIN_FILENO, buf, sizeof(buf))) > 0)
				if (write_full(in, buf, (size_t)n) < 0)
					break;
			close(in);
		}
		return 0;
	}
	if (!strcmp(cmd, "wait") && argc == 5)
		r = sandbox_service_exec_get(&node, argv[2], argv[3], atof(argv[4]), &out, &e);
	else if (!strcmp(cmd, "get"))
		r = sandbox_service_get(&node, argv[2], &out, &e);
	else if (!strcmp(cmd, "list"))
		r = sandbox_service_list(&node, argc > 2 ? argv[2] : NULL, &out, &e);
	else if (!strcmp(cmd, "destroy"))
		r = sandbox_service_destroy(&node, argv[2], &e);
	else if (!strcmp(cmd, "stage")) {
		char *cur = NULL;

		r = sandbox_service_stage(&node, argv[2], argc > 3 ? argv[3] : NULL, &cur, &e);
		if (r == 0)
			printf("%s\n", cur);
		free(cur);
	} else
		return usage();
	if (r < 0)
		return failed(cmd, r, &e);
	if (out)
		print_json(out);
	return 0;
}
