/*
 * main.c — `lazyroot`: git-style dispatch to subcommands.
 *
 * Built twice (Makefile, FRONT).  The full program, dynamic, has every
 * command; it loads libcurl on first use (store/curl-dl.c), which a static
 * program cannot.  The front, built with LAZYROOT_FRONT and linked
 * static-pie with only what `run` needs, is the `lazyroot` a user and a
 * scheduler exec: it runs `run` itself and execs the full program for any
 * other command.  `run` is exec'd once per sandbox; on a paravirtualized VM,
 * where page faults and page-table teardown are the hypervisor's work, the
 * dynamic program's loader, libc mappings and larger text cost 59 page faults
 * more a launch and a fifth of the launch rate (docs/perf-log.md, "A static
 * front for `lazyroot run`").
 */
#include <getopt.h>
#include <limits.h>

#include "lib/lib.h"
#include "tools/tools.h"

#ifdef LAZYROOT_FRONT

/* Where the full program is, from the front's directory: the build tree's
 * layout, then the installed one (BINDIR/lazyroot beside
 * PREFIX/libexec/lazyroot/lazyroot; see `make install`). */
static const char *const full_paths[] = { "libexec/lazyroot", "../libexec/lazyroot/lazyroot" };

static int exec_full(char **argv)
{
	char self[PATH_MAX], path[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *slash;

	if (n <= 0) {
		log_errno(-errno, "readlink /proc/self/exe");
		return 127;
	}
	self[n] = 0;
	slash = strrchr(self, '/');
	if (slash)
		*slash = 0;
	for (size_t i = 0; i < ARRAY_SIZE(full_paths); i++) {
		snprintf(path, sizeof(path), "%s/%s", self, full_paths[i]);
		execv(path, argv);
		if (errno != ENOENT) {
			log_errno(-errno, "the full program '%s'", path);
			return 126;
		}
	}
	log_error(-ENOENT, "the full program (every command but run) is not beside '%s': no %s/%s, "
	          "no %s/%s", self, self, full_paths[0], self, full_paths[1]);
	return 127;
}

int main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "run"))
		return exec_full(argv);
	opterr = 0;
	return cmd_run(argc - 1, argv + 1);
}

#else

static const struct tools_command commands[] = {
	{ "build", cmd_build, "turn a directory, tar, OCI layout or docker archive into an image" },
	{ "image", cmd_image, "list, inspect and extract images in a store" },
	{ "mount", cmd_mount, "show an image read-only at a directory, fetching chunks as they are read" },
	{ "umount", cmd_umount, "unmount an image" },
	{ "cache", cmd_cache, "watch, verify and trim the node-local chunk cache" },
	{ "run", cmd_run, "run a command in a fresh, disposable sandbox" },
	{ "policy", cmd_policy, "tighten a running sandbox: switch it to a later stage" },
	{ "profile", cmd_profile, "record, combine, store and show access profiles" },
	{ "key", cmd_key, "make a key pair for signing tags" },
	{ "store", cmd_store, "collect garbage in a store and verify that it is whole" },
	{ "node", cmd_node, "the node service: serves every image mount, survives its own crash" },
	{ "gc", cmd_gc, "remove what sandboxes of killed launchers left behind" },
	{ "config", cmd_config, "print the node's settings: file, environment, defaults" },
	{ "doctor", cmd_doctor, "check what sandboxes and mounts need of this host, with fixes" },
	{ "version", cmd_version, "print the release and the commit lazyroot was built from" },
};

int main(int argc, char **argv)
{
	/* every command says a usage error its own way, in one line (tools.h) */
	opterr = 0;
	if (argc == 2 && !strcmp(argv[1], "--version"))
		return cmd_version(1, argv + 1);
	return tools_dispatch("lazyroot", "command", commands, ARRAY_SIZE(commands), 10, argc,
	                      argv);
}

#endif
