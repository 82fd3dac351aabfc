/* main.c — `lazyroot`: git-style dispatch to subcommands. */
#include "lib/lib.h"
#include "tools/tools.h"

static const struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} commands[] = {
	{ "build", cmd_build, "turn a directory, tar, OCI layout or docker archive into an image" },
	{ "image", cmd_image, "list, inspect and extract images in a store" },
	{ "mount", cmd_mount, "show an image read-only at a directory, fetching chunks as they are read" },
	{ "umount", cmd_umount, "unmount an image and wait for its daemon to exit" },
	{ "cache", cmd_cache, "watch, verify and trim the node-local chunk cache" },
	{ "run", cmd_run, "run a command in a fresh, disposable sandbox" },
	{ "policy", cmd_policy, "tighten a running sandbox: switch it to a later stage" },
	{ "gc", cmd_gc, "remove what sandboxes of killed launchers left behind" },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: lazyroot COMMAND [ARGS]\n\ncommands:\n");
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\n'lazyroot COMMAND --help' describes each.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].run(argc - 1, argv + 1);
	fprintf(stderr, "lazyroot: unknown command '%s' (see lazyroot --help)\n", argv[1]);
	return 2;
}
