/* policy.c — `lazyroot policy NAME [--stage STAGE] [--json]`: tighten a running sandbox;
 * `lazyroot policy --fields`: the policy's fields. */
#include <getopt.h>

#include "lib/json.h"
#include "lib/lib.h"
#include "sandbox/sandbox.h"
#include "tools/tools.h"

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot policy NAME [--stage STAGE] [--json]\n"
	        "       lazyroot policy --fields\n"
	        "\n"
	        "Switch the running sandbox NAME (lazyroot run --name) to STAGE, one of the\n"
	        "stages its policy declares (stage.STAGE.allow, stage.STAGE.hide).  A stage can\n"
	        "only tighten: connects it no longer allows are refused from the next one on,\n"
	        "its hidden paths vanish inside the sandbox at once; a stage that would allow\n"
	        "more than the current one is refused.  Without --stage, print the current\n"
	        "stage.  Needs root.  sandbox/POLICY.md describes stages.\n"
	        "\n"
	        "  --stage STAGE   the stage to switch to\n"
	        "  --json          print {\"name\":...,\"stage\":...} instead of the stage's name\n"
	        "  --fields        print every policy field, a line each: key, type, default,\n"
	        "                  meaning (tab-separated)\n"
	        "  -h, --help      this text\n");
}

int cmd_policy(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "stage", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "fields", no_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	_cleanup_free_ char *current = NULL;
	const char *stage = NULL, *name;
	bool json = false, fields = false;
	struct tools_flags fl = { 0 };
	_cleanup_(node_config_destroy) struct node_config cfg = { 0 };
	struct sandbox_node node;
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 's': stage = optarg; break;
		case 'j': json = true; break;
		case 'f': fields = true; break;
		case 'h': usage(stdout); return 0;
		default: return tools_option_error("policy", argv, "h", opts);
		}
	}
	if (fields && optind == argc && !stage && !json) {
		sandbox_policy_fields(stdout);
		return 0;
	}
	if (fields)
		return tools_usage_error("policy", "--fields takes no NAME and no other option");
	if (optind != argc - 1)
		return tools_usage_error("policy", optind == argc ? "no sandbox NAME given" :
		                         "unexpected argument '%s'", argv[argc - 1]);
	name = argv[optind];
	if (tools_settings(&fl, &cfg) < 0)
		return 2;
	tools_sandbox_node(&cfg, &node);
	if (sandbox_stage_switch(&node, name, stage, &current) < 0)
		return 1;
	if (json) {
		if (json_pack_file(stdout, "{s:o, s:o}", "name", json_str(name, strlen(name)),
		                   "stage", json_str(current, strlen(current))) < 0)
			return 1;
	} else {
		printf("%s\n", current);
	}
	return 0;
}
