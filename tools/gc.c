/* gc.c — `lazyroot gc`: remove what sandboxes of dead launchers left behind. */
#include <getopt.h>

#include "lib/json.h"
#include "lib/lib.h"
#include "sandbox/sandbox.h"
#include "tools/tools.h"

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot gc [--pool] [--json]\n"
	        "\n"
	        "Remove what sandboxes left on this host when their launcher (`lazyroot run`)\n"
	        "died without cleaning up, e.g. by SIGKILL: processes still in their cgroups\n"
	        "are killed, then the cgroups (v1 and v2), the sandbox's runtime state and\n"
	        "the launcher's record under /run/lazyroot are removed.  Sandboxes whose\n"
	        "launcher still runs are left alone.  `lazyroot run` does the same for stale\n"
	        "entries at most every 10 seconds.  Needs root.  The record_dir setting\n"
	        "replaces /run/lazyroot/launchers (docs/settings.md).\n"
	        "\n"
	        "Also removes the pooled network namespaces (/run/lazyroot/pool, or the\n"
	        "pool_dir setting) idle for 10 minutes or more, and those a dead\n"
	        "launcher held; with --pool every idle one.  Pooled namespaces in use are\n"
	        "left alone.\n"
	        "\n"
	        "  --pool      remove every idle pooled namespace, however recent\n"
	        "  --config FILE  the node's settings (docs/settings.md)\n"
	        "  --json      print {\"removed\":[NAME...],\"live\":N,\"failed\":N,\n"
	        "              \"pool_removed\":N,\"pool_kept\":N,\"pool_busy\":N}\n"
	        "  -h, --help  this text\n"
	        "\n"
	        "Without --json, prints the name of each removed sandbox.  Exit status 1\n"
	        "when something could not be removed (the message says what).\n");
}

struct names {
	bool json;
	json_t *removed;     /* with --json: the names, printed at the end */
};

static void print_removed(const char *name, void *ud)
{
	struct names *nm = ud;

	if (!nm->json)
		printf("removed %s\n", name);
	else if (nm->removed &&
	         json_array_append_new(nm->removed, json_str(name, strlen(name))) < 0) {
		json_decref(nm->removed);
		nm->removed = NULL;
	}
}

int cmd_gc(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "pool", no_argument, NULL, 'p' },
		{ "config", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct names nm = { 0 };
	struct sandbox_gc_result res;
	struct sandbox_pool_gc_result pres;
	struct tools_flags fl = { 0 };
	_cleanup_(node_config_destroy) struct node_config cfg = { 0 };
	struct sandbox_node node;
	bool all_pool = false;
	int c, r, rp;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'j': nm.json = true; break;
		case 'p': all_pool = true; break;
		case 'c': fl.config = optarg; break;
		case 'h': usage(stdout); return 0;
		default: return tools_option_error("gc", argv, "h", opts);
		}
	}
	if (optind < argc) {
		return tools_usage_error("gc", "unexpected argument '%s'", argv[optind]);
	}
	if (tools_settings(&fl, &cfg) < 0)
		return 2;
	tools_sandbox_node(&cfg, &node);
	if (geteuid() != 0) {
		log_error(-EPERM, "gc: needs root (cgroups, /run/lazyroot)");
		return 1;
	}
	if (nm.json)
		nm.removed = json_array();
	r = sandbox_gc(&node, print_removed, &nm, &res);
	/* After the sandboxes: a dead launcher's slot is free only once its
	 * record is collected and its sandbox gone. */
	rp = sandbox_pool_gc(&node, all_pool ? 0 : SANDBOX_POOL_IDLE, &pres);
	if (nm.json) {
		if (json_pack_file(stdout, "{s:o, s:i, s:i, s:i, s:i, s:i}", "removed", nm.removed,
		                   "live", (int)res.live, "failed", (int)(res.failed + pres.failed),
		                   "pool_removed", (int)pres.removed, "pool_kept", (int)pres.kept,
		                   "pool_busy", (int)pres.busy) < 0)
			return 1;
	} else if (pres.removed)
		printf("removed %u idle pool slot%s\n", pres.removed, pres.removed == 1 ? "" : "s");
	return r < 0 || rp < 0 ? 1 : 0;
}
