/* main.c — `lazyroot`: git-style dispatch to subcommands. */
#include "lib/lib.h"
#include "tools/tools.h"

static const struct tools_command commands[] = {
	{ "build", cmd_build, "turn a directory, tar, OCI layout or docker archive into an image" },
	{ "image", cmd_image, "list, inspect and extract images in a store" },
	{ "mount", cmd_mount, "show an image read-only at a directory, fetching chunks as they are read" },
	{ "umount", cmd_umount, "unmount an image" },
	{ "cache", cmd_cache, "watch, verify and trim the node-local chunk cache" },
	{ "run", cmd_run, "run a command in a fresh, disposable sandbox" },
	{ "policy", cmd_policy, "tighten a running sandbox: switch it to a later stage" },
	{ "profile", cmd_profile, "record, combine, store and show access profiles" },
	{ "store", cmd_store, "collect garbage in a store and verify that it is whole" },
	{ "node", cmd_node, "the node service: serves every image mount, survives its own crash" },
	{ "gc", cmd_gc, "remove what sandboxes of killed launchers left behind" },
	{ "config", cmd_config, "print the node's settings: file, environment, defaults" },
};

int main(int argc, char **argv)
{
	return tools_dispatch("lazyroot", "command", commands, ARRAY_SIZE(commands), 10, argc,
	                      argv);
}
