/* version.c — `lazyroot version` and `lazyroot --version`. */
#include <getopt.h>

#include "lib/json.h"
#include "lib/lib.h"
#include "tools/tools.h"

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot version [--json]\n"
	        "       lazyroot --version\n"
	        "\n"
	        "Print the release of lazyroot and the git commit it was built from (with\n"
	        "-dirty after it when the tree had changes); a build from outside a git\n"
	        "checkout has no commit.\n"
	        "\n"
	        "  --json      {\"version\": ..., \"commit\": ...}, the commit null when unknown\n"
	        "  -h, --help  this text\n");
}

int cmd_version(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	bool json = false;
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'j': json = true; break;
		case 'h': usage(stdout); return 0;
		default: return tools_option_error("version", argv, "h", opts);
		}
	}
	if (optind < argc)
		return tools_usage_error("version", "unexpected argument '%s'", argv[optind]);
	if (json) {
		if (json_pack_file(stdout, "{s:s, s:s*}", "version", lib_version(), "commit",
		                   *lib_commit() ? lib_commit() : NULL) < 0)
			return 1;
	} else if (*lib_commit()) {
		printf("lazyroot %s (commit %s)\n", lib_version(), lib_commit());
	} else {
		printf("lazyroot %s\n", lib_version());
	}
	return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}
