/* doctor.c — `lazyroot doctor`: what this host lacks for sandboxes and mounts
 * (sandbox_host_check), and whether the node answers, one line each with the
 * fix for a problem. */
#include <getopt.h>

#include "lib/json.h"
#include "lib/lib.h"
#include "node/node.h"
#include "sandbox/sandbox.h"
#include "tools/tools.h"

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot doctor [--json] [--socket PATH] [--config FILE]\n"
	        "\n"
	        "Check what sandboxes and mounts need of this host: the kernel version,\n"
	        "the Landlock ABI, user namespaces, the cgroup layout and the controllers\n"
	        "the launcher's cgroup delegates, the subordinate ids, /dev/fuse, FUSE\n"
	        "passthrough, idmapped FUSE mounts, and the node service.  One line per\n"
	        "check (ok, warn or FAIL), and under each problem the fix.  Changes\n"
	        "nothing.  Exits 1 when a check fails, 0 otherwise (warnings included).\n"
	        "\n"
	        "  --json         {checks: [{name, state, found, fix}], ok}\n"
	        "  --socket PATH  the node's control socket (default: $LAZYROOT_SOCKET, else\n"
	        "                 %s)\n"
	        "  --config FILE  the node's settings (default: $LAZYROOT_CONFIG, else\n"
	        "                 %s)\n"
	        "  -h, --help     this text\n",
	        NODE_DEFAULT_SOCKET, NODE_CONFIG_DEFAULT_PATH);
}

/* The node: its version when one answers; without one, a problem only when
 * clients may not start it (node_start off). */
static void check_node(const struct node_config *cfg, struct sandbox_check *c)
{
	json_auto_t *j = NULL;
	int r = node_call(cfg->socket_path, "{\"verb\":\"status\"}", &j);

	*c = (struct sandbox_check){ .name = "node" };
	if (r == 0) {
		int64_t pid = 0;

		(void)json_int(json_object_get(j, "pid"), &pid);
		snprintf(c->found, sizeof(c->found), "%s answers: lazyroot %s, worker pid %lld",
		         cfg->socket_path, json_get_cstr(j, "version") ?: "(unknown)",
		         (long long)pid);
		return;
	}
	if (cfg->node_start) {
		c->state = SANDBOX_CHECK_OK;
		snprintf(c->found, sizeof(c->found), "none at %s; the first client starts one",
		         cfg->socket_path);
		return;
	}
	c->state = SANDBOX_CHECK_FAIL;
	snprintf(c->found, sizeof(c->found), "none at %s (%s), and node_start is off",
	         cfg->socket_path, strerror(-r));
	snprintf(c->fix, sizeof(c->fix), "systemctl start lazyroot-node (or lazyroot node "
	         "--socket %s), or set node_start = on", cfg->socket_path);
}

int cmd_doctor(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "socket", required_argument, NULL, 's' },
		{ "config", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static const char *const states[] = { "ok", "warn", "FAIL" };
	_cleanup_(node_config_destroy) struct node_config cfg = { 0 };
	struct tools_flags fl = { 0 };
	struct sandbox_check checks[16];
	bool json = false, failed = false;
	size_t n;
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'j': json = true; break;
		case 's': tools_flag(&fl, "--socket", optarg); break;
		case 'c': fl.config = optarg; break;
		case 'h': usage(stdout); return 0;
		default: return tools_option_error("doctor", argv, "h", opts);
		}
	}
	if (optind < argc)
		return tools_usage_error("doctor", "unexpected argument '%s'", argv[optind]);
	if (tools_settings(&fl, &cfg) < 0)
		return 2;
	n = sandbox_host_check(checks, ARRAY_SIZE(checks) - 1);
	check_node(&cfg, &checks[n++]);
	for (size_t i = 0; i < n; i++)
		failed |= checks[i].state == SANDBOX_CHECK_FAIL;
	if (json) {
		json_t *a = json_array();

		for (size_t i = 0; a && i < n; i++)
			if (json_array_append_new(a, json_pack("{s:s, s:s, s:o, s:s*}", "name",
			                          checks[i].name, "state", states[checks[i].state],
			                          "found", json_text(checks[i].found,
			                                             strlen(checks[i].found)),
			                          "fix", *checks[i].fix ? checks[i].fix : NULL)) < 0) {
				json_decref(a);
				a = NULL;
			}
		if (!a || json_pack_file(stdout, "{s:o, s:b}", "checks", a, "ok", !failed) < 0)
			return 1;
	} else {
		for (size_t i = 0; i < n; i++) {
			printf("%-4s  %-17s %s\n", states[checks[i].state], checks[i].name,
			       checks[i].found);
			if (*checks[i].fix)
				printf("      fix: %s\n", checks[i].fix);
		}
	}
	if (fflush(stdout) != 0 || ferror(stdout))
		return 1;
	return failed ? 1 : 0;
}
