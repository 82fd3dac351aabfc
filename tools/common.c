/* common.c — option helpers and the command dispatch shared by the subcommands. */
#include <ctype.h>
#include <getopt.h>
#include <stdarg.h>

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
	node_config_sandbox_node(c, n);
}

int tools_usage_error(const char *cmd, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "lazyroot: %s%s%s (see 'lazyroot%s%s --help')\n", cmd, *cmd ? ": " : "",
	        msg, *cmd ? " " : "", cmd);
	return 2;
}

/* The long option that argv's "--name[=value]" names, exactly or by a prefix that
 * fits one alone (as getopt_long takes it); NULL, and *ret_many, when it fits several. */
static const struct option *long_option(const char *arg, const struct option *longopts,
                                        size_t len, bool *ret_many)
{
	const struct option *found = NULL;
	unsigned n = 0;

	*ret_many = false;
	for (const struct option *o = longopts; o && o->name; o++) {
		if (strncmp(o->name, arg, len))
			continue;
		if (strlen(o->name) == len)
			return o;
		found = o;
		n++;
	}
	*ret_many = n > 1;
	return n == 1 ? found : NULL;
}

int tools_option_error(const char *cmd, char **argv, const char *shortopts,
                       const struct option *longopts)
{
	const char *arg = optind > 0 ? argv[optind - 1] : "";
	const struct option *o = NULL;
	const char *p;
	size_t len = 0;
	bool many = false;

	/* getopt_long leaves optopt 0 for an unknown or ambiguous long option, the
	 * option's value for a long one that wants or refuses a value, and the
	 * letter for a short one (whose cluster argv[optind - 1] need not be) */
	if (!strncmp(arg, "--", 2)) {
		len = strcspn(arg + 2, "=");
		o = long_option(arg + 2, longopts, len, &many);
		if (o && optopt && o->val != optopt)
			o = NULL;
	}
	if (o && o->has_arg == no_argument)
		return tools_usage_error(cmd, "option '--%s' takes no value", o->name);
	if (o)
		return tools_usage_error(cmd, "option '--%s' wants a value", o->name);
	if (!optopt && many)
		return tools_usage_error(cmd, "option '%.*s' is ambiguous", (int)len + 2, arg);
	if (!optopt)
		return tools_usage_error(cmd, "unknown option '%.*s'", (int)len + 2, arg);
	if ((p = strchr(shortopts, optopt)) && p[1] == ':')
		return tools_usage_error(cmd, "option '-%c' wants a value", optopt);
	return tools_usage_error(cmd, "unknown option '-%c'", optopt);
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
	/* prog without "lazyroot", as tools_usage_error names a command */
	const char *cmd = !strncmp(prog, "lazyroot", 8) ? prog + 8 + (prog[8] == ' ') : prog;

	if (argc < 2)
		return tools_usage_error(cmd, "no %s given", what);
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		dispatch_usage(stdout, prog, what, cmds, n, width);
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		if (!strcmp(argv[1], cmds[i].name))
			return cmds[i].run(argc - 1, argv + 1);
	if (argv[1][0] == '-')
		return tools_usage_error(cmd, "unknown option '%s'", argv[1]);
	return tools_usage_error(cmd, "unknown %s '%s'", what, argv[1]);
}

int tools_verb_parse(int argc, char **argv, const char *cmd, const char *const *verbs,
                     void (*usage)(FILE *f), struct tools_verb *o)
{
	static const struct option opts[] = {
		{ "store", required_argument, NULL, 's' },
		{ "s3-endpoint", required_argument, NULL, 'e' },
		{ "config", required_argument, NULL, 'c' },
		{ "json", no_argument, NULL, 'j' },
		{ "no-progress", no_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	size_t k;
	int c;

	*o = (struct tools_verb){ 0 };
	if (argc < 2)
		return tools_usage_error(cmd, "no verb given");
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return 0;
	}
	for (k = 0; verbs[k] && strcmp(verbs[k], argv[1]); k++)
		;
	if (!verbs[k])
		return tools_usage_error(cmd, argv[1][0] == '-' ? "unknown option '%s'" :
		                         "unknown verb '%s'", argv[1]);
	o->verb = argv[1];
	snprintf(o->cmd, sizeof(o->cmd), "%s %s", cmd, o->verb);
	optind = 1;
	while ((c = getopt_long(argc - 1, argv + 1, "h", opts, NULL)) != -1) {
		switch (c) {
		case 's': tools_flag(&o->flags, "--store", optarg); break;
		case 'e': tools_flag(&o->flags, "--s3-endpoint", optarg); break;
		case 'c': o->flags.config = optarg; break;
		case 'j': o->json = true; break;
		case 'P': o->no_progress = true; break;
		case 'h': usage(stdout); return 0;
		default: return tools_option_error(o->cmd, argv + 1, "h", opts);
		}
	}
	o->args = argv + 1 + optind;
	o->nargs = argc - 1 - optind;
	if (tools_settings(&o->flags, &o->cfg) < 0)
		return 2;
	return -1;
}

int tools_verb_args_error(const struct tools_verb *o, const char *want)
{
	if (!*want)
		return tools_usage_error(o->cmd, "unexpected argument '%s'", o->args[0]);
	return tools_usage_error(o->cmd, "want %s (given %d argument%s)", want, o->nargs,
	                         o->nargs == 1 ? "" : "s");
}

void tools_verb_done(struct tools_verb *o)
{
	node_config_destroy(&o->cfg);
}
