/* common.c — option helpers and the command dispatch shared by the subcommands. */
#include <ctype.h>
#include <getopt.h>

#include "lib/lib.h"
#include "cache/cache.h"
#include "image/image.h"
#include "node/config.h"
#include "sandbox/sandbox.h"
#include "store/store.h"
#include "tools/tools.h"

void tools_flag(struct tools_flags *f, const char *flag, const char *value)
{
	unsigned i;

	/* a flag given again replaces its value (the last one wins), so that
	 * the slots hold one per setting flag: fewer than TOOLS_FLAGS_MAX */
	for (i = 0; i < f->n && strcmp(f->v[i].flag, flag); i++)
		;
	if (i == TOOLS_FLAGS_MAX)
		return;
	f->v[i].flag = flag;
	f->v[i].value = value;
	if (i == f->n)
		f->n++;
}

void tools_flag_add(struct tools_flags *f, const char *flag, const char *value)
{
	if (f->n < TOOLS_FLAGS_MAX) {
		f->v[f->n].flag = flag;
		f->v[f->n++].value = value;
	}
}

int tools_settings(const struct tools_flags *f, struct node_config *c)
{
	int r = node_config_setup(c, f->config);

	for (unsigned i = 0; r == 0 && i < f->n; i++)
		r = node_config_set_flag(c, f->v[i].flag, f->v[i].value);
	if (r < 0)
		node_config_destroy(c);
	return r;
}

void tools_sandbox_node(const struct node_config *c, struct sandbox_node *n)
{
	*n = (struct sandbox_node){
		.pool_dir = c->pool_dir,
		.record_dir = c->record_dir,
		.no_pool = !c->pool,
	};
}

static void dispatch_usage(FILE *f, const char *prog, const char *what,
                           const struct tools_command *cmds, size_t n, int width)
{
	char word[32];
	size_t k = 0;

	for (; what[k] && k + 1 < sizeof(word); k++)
		word[k] = (char)toupper((unsigned char)what[k]);
	word[k] = 0;
	fprintf(f, "usage: %s %s [ARGS]\n\n%ss:\n", prog, word, what);
	for (size_t i = 0; i < n; i++)
		fprintf(f, "  %-*s %s\n", width, cmds[i].name, cmds[i].summary);
	fprintf(f, "\n'%s %s --help' describes each.\n", prog, word);
}

int tools_dispatch(const char *prog, const char *what, const struct tools_command *cmds,
                   size_t n, int width, int argc, char **argv)
{
	if (argc < 2) {
		dispatch_usage(stderr, prog, what, cmds, n, width);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		dispatch_usage(stdout, prog, what, cmds, n, width);
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		if (!strcmp(argv[1], cmds[i].name))
			return cmds[i].run(argc - 1, argv + 1);
	fprintf(stderr, "%s: unknown %s '%s' (see %s --help)\n", prog, what, argv[1], prog);
	return 2;
}

int tools_verb_parse(int argc, char **argv, void (*usage)(FILE *f), struct tools_verb *o)
{
	static const struct option opts[] = {
		{ "store", required_argument, NULL, 's' },
		{ "s3-endpoint", required_argument, NULL, 'e' },
		{ "config", required_argument, NULL, 'c' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	int c;

	*o = (struct tools_verb){ 0 };
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	o->verb = argv[1];
	optind = 1;
	while ((c = getopt_long(argc - 1, argv + 1, "h", opts, NULL)) != -1) {
		switch (c) {
		case 's': tools_flag(&o->flags, "--store", optarg); break;
		case 'e': tools_flag(&o->flags, "--s3-endpoint", optarg); break;
		case 'c': o->flags.config = optarg; break;
		case 'j': o->json = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	o->args = argv + 1 + optind;
	o->nargs = argc - 1 - optind;
	if (tools_settings(&o->flags, &o->cfg) < 0)
		return 2;
	return -1;
}

void tools_verb_done(struct tools_verb *o)
{
	node_config_destroy(&o->cfg);
}
