/* config.c — `lazyroot config`: the node's settings as the commands see them. */
#include <getopt.h>

#include "lib/json.h"
#include "lib/lib.h"
#include "tools/tools.h"

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot config [--config FILE] [--defaults] [--json]\n"
	        "\n"
	        "Print the node's settings as a config file, every setting with the value\n"
	        "the other commands would use: the defaults, overridden by the config file,\n"
	        "then by the environment (docs/settings.md lists every setting, its flag,\n"
	        "its variable and its default).  Fails with one line naming the file and\n"
	        "line, or the variable, of a bad setting.  Credentials from the environment\n"
	        "are never printed.\n"
	        "\n"
	        "  --config FILE  the config file (default: $LAZYROOT_CONFIG, else %s\n"
	        "                 when it exists)\n"
	        "  --defaults     the defaults alone, commented out, reading neither file nor\n"
	        "                 environment: the node.conf that `make install` installs\n"
	        "  --json         the settings as one JSON object, key to value as text\n"
	        "  -h, --help     this text\n",
	        NODE_CONFIG_DEFAULT_PATH);
}

int cmd_config(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "defaults", no_argument, NULL, 'd' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct tools_flags fl = { 0 };
	_cleanup_(node_config_destroy) struct node_config cfg = { 0 };
	bool defaults = false, json = false;
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': fl.config = optarg; break;
		case 'd': defaults = true; break;
		case 'j': json = true; break;
		case 'h': usage(stdout); return 0;
		default: return tools_option_error("config", argv, "h", opts);
		}
	}
	if (optind < argc) {
		return tools_usage_error("config", "unexpected argument '%s'", argv[optind]);
	}
	if (defaults && fl.config) {
		return tools_usage_error("config", "--defaults and --config exclude each other");
	}
	if (json) {
		if (defaults)
			node_config_init(&cfg);
		else if (tools_settings(&fl, &cfg) < 0)
			return 1;
		if (json_file_add(stdout, node_config_json(&cfg)) < 0)
			return 1;
	} else if (defaults) {
		node_config_init(&cfg);
		node_config_dump(&cfg, stdout, true);
	} else {
		if (tools_settings(&fl, &cfg) < 0)
			return 1;
		printf("# settings from %s, the environment and the defaults\n",
		       cfg.config_path ? cfg.config_path : "no config file");
		node_config_dump(&cfg, stdout, false);
	}
	return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}
