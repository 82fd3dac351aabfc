/*
 * run.c — `lazyroot run [OPTIONS] IMAGE|--rootfs DIR -- CMD [ARG...]`.
 *
 * With IMAGE: resolve it in the store, map its index (from the cache when an
 * earlier run or mount kept it), mount it once per node (images.c), then
 * settle the policy in this order, later overriding earlier: defaults, the
 * image config (env, working directory, user), the policy file, the options;
 * the root filesystem is the node's mount.  Options and the policy file are
 * checked before anything is mounted.
 */
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>

#include "cache/cache.h"
#include "image/image.h"
#include "lib/json.h"
#include "lib/lib.h"
#include "sandbox/sandbox.h"
#include "store/store.h"
#include "tools/tools.h"

#define RUN_FAILED 125   /* the launcher itself failed: bad option, setup error */
#define RUN_TIMED_OUT 124  /* the time limit ended the sandbox, as timeout(1) says */

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot run [OPTIONS] IMAGE [OPTIONS] -- CMD [ARG...]\n"
	        "       lazyroot run [OPTIONS] --rootfs DIR -- CMD [ARG...]\n"
	        "\n"
	        "Run CMD in a fresh sandbox on an overlay above the image IMAGE (NAME[:TAG]\n"
	        "or an index name) or above DIR, neither of which ever changes; pass its\n"
	        "output through and exit with its status (128 + N when signal N ended it).\n"
	        "Nothing of the sandbox is left afterwards.  Needs root.\n"
	        "\n"
	        "IMAGE is mounted once per node and store by the node service (`lazyroot\n"
	        "node`, started in the background when none answers), at IMAGES/<index\n"
	        "name>, by the first run that needs it, and stays mounted for later runs\n"
	        "until `lazyroot umount IMAGES/<index name>`.  The same index from another\n"
	        "store is another mount, IMAGES/<index name>-<store hash>.\n"
	        "Its config's env, working directory and user apply\n"
	        "unless the policy file or the options below set them.\n"
	        "Every limit has a default; sandbox/POLICY.md documents each field.\n"
	        "\n"
	        "  --store URL          chunk store of IMAGE (default: $LAZYROOT_STORE, else\n"
	        "                       %s)\n"
	        "  --cache DIR          node-local cache for IMAGE's mount (default:\n"
	        "                       $LAZYROOT_CACHE, else %s)\n"
	        "  --images DIR         where the node's image mounts live (default:\n"
	        "                       $LAZYROOT_IMAGES, else %s)\n"
	        "  --socket PATH        the node's control socket (default: $LAZYROOT_SOCKET,\n"
	        "                       else %s)\n"
	        "  --trust-key FILE.pub accept IMAGE's tag signed by this key (repeatable; adds\n"
	        "                       to the trust_keys setting)\n"
	        "  --require-signed     refuse IMAGE when its tag is not signed by a trusted key\n"
	        "  --config FILE        the node's settings (default: $LAZYROOT_CONFIG, else\n"
	        "                       %s; docs/settings.md)\n"
	        "  --rootfs DIR         a root filesystem directory instead of IMAGE\n"
	        "  --policy FILE        policy file (key = value lines); the options below\n"
	        "                       override its fields whatever their order\n"
	        "  --set KEY=VALUE      set any policy field\n"
	        "  --env NAME=VALUE     add to the environment (repeatable)\n"
	        "  --workdir DIR        working directory inside (default: the image's, else /)\n"
	        "  --user UID[:GID]     ids inside, below 65536 (default: the image's, else 0:0)\n"
	        "  --bind SRC:DST[:rw]  bind a host path, read-only unless :rw (repeatable)\n"
	        "  --hostname NAME      (default sandbox)\n"
	        "  --name NAME          names the sandbox: its cgroups, its state for\n"
	        "                       `lazyroot policy` (default lazyroot-PID)\n"
	        "  --memory SIZE        memory limit, 0 for none (default 1G)\n"
	        "  --pids N             process limit, 0 for none (default 256)\n"
	        "  --cpus N             CPU limit in cores, 0 for none (default 1)\n"
	        "  --nofile N           open files limit (default 1024)\n"
	        "  --tmpfs-size SIZE    room for the sandbox's writes (default 256M)\n"
	        "  --timeout DURATION   wall-clock limit: seconds, or with a unit (500ms, 2s,\n"
	        "                       10m, 1h); 0 for none (default 600)\n"
	        "  --output-limit SIZE  stdout + stderr cap, 0 for none (default 64M)\n"
	        "  --allow ADDR:PORT    let the sandbox reach ADDR:PORT (IPv4, [IPv6], or host:PORT\n"
	        "                       for the host side of its veth); nothing else (repeatable)\n"
	        "  --stage NAME         the stage to start in (default: the first declared)\n"
	        "  --json[=FILE]        write a report as JSON to FILE, or as the last line\n"
	        "                       on stderr (always a line of its own)\n"
	        "  --json-fd N          write the report to descriptor N, which the sandbox\n"
	        "                       never holds: what it prints cannot pass for it\n"
	        "  -h, --help           this text\n"
	        "\n"
	        "Exit status: CMD's, 128 + signal, 126 when CMD cannot run, 127 when it is\n"
	        "not found, 125 when the launcher fails (the message says why), 124 when\n"
	        "the time limit ended it, 137 when the memory, output or pids limit did;\n"
	        "a limit's kill is said on stderr: \"sandbox ended: time limit 2 s\".\n",
	        STORE_DEFAULT_URL, CACHE_DEFAULT_DIR, NODE_DEFAULT_IMAGES_DIR, NODE_DEFAULT_SOCKET,
	        NODE_CONFIG_DEFAULT_PATH);
}

struct setting {
	const char *key, *value;
};

static void print_report(FILE *f, const struct sandbox_result *res)
{
	(void)json_pack_file(f, "{s:o, s:i, s:i, s:s?, s:o, s:o, s:o, s:o, s:b, s:I, s:I}",
	                     "name", json_str(res->name, strlen(res->name)),
	                     "status", res->status, "signal", res->signal,
	                     "killed_by", res->killed_by == SANDBOX_KILL_NONE ? NULL :
	                                  sandbox_kill_name(res->killed_by),
	                     "wall_seconds", json_fixed(res->wall_seconds, 6),
	                     "cpu_seconds", json_fixed(res->cpu_seconds, 6),
	                     "memory_peak", json_u64(res->memory_peak),
	                     "output_bytes", json_u64(res->output_bytes),
	                     "pids_limit_hit", res->pids_limit_hit,
	                     "uid_base", (json_int_t)res->uid_base,
	                     "gid_base", (json_int_t)res->gid_base);
}

/* One line on stderr naming the limit that ended the sandbox and its value,
 * so that a kill by a limit does not pass for the command's own crash or an
 * outside kill -9.  The launcher's own signal (SIGINT, SIGTERM, SIGHUP) came
 * from whoever is watching it and needs no line. */
static bool print_kill(const struct sandbox_result *res)
{
	char v[32];

	switch (res->killed_by) {
	case SANDBOX_KILL_TIME:
		snprintf(v, sizeof(v), "%g s", res->time_limit);
		break;
	case SANDBOX_KILL_MEMORY:
		format_size(res->memory_limit, v, sizeof(v));
		break;
	case SANDBOX_KILL_OUTPUT:
		format_size(res->output_limit, v, sizeof(v));
		break;
	case SANDBOX_KILL_PIDS:
		snprintf(v, sizeof(v), "%llu", (unsigned long long)res->pids_limit);
		break;
	default:
		return false;
	}
	if (res->stderr_open_line)
		fputc('\n', stderr);
	log_msg(LOG_ERR, "sandbox ended: %s limit %s", sandbox_kill_name(res->killed_by), v);
	return true;
}

/* Apply the policy file and the options, in that order. */
static int apply_settings(struct sandbox *sb, const char *policy, const struct setting *set,
                          size_t nset)
{
	int r = policy ? sandbox_load_policy(sb, policy) : 0;

	for (size_t i = 0; r == 0 && i < nset; i++)
		r = sandbox_set(sb, set[i].key, set[i].value);
	return r;
}

/* The sandbox for IMAGE: mounted on this node by the node service (the
 * command's settings go with the request); then its config, the policy file
 * and the options. */
static int image_sandbox(const char *ref, const struct node_config *cfg, const char *policy,
                         const struct setting *set, size_t nset, struct sandbox **ret)
{
	struct sandbox_node node;
	struct sandbox *sb = NULL;
	_cleanup_free_ char *dir = NULL, *icfg = NULL;
	int r;

	r = images_mount(cfg, ref, &dir, &icfg);
	if (r == 0)
		r = sandbox_new(&sb);
	if (r == 0) {
		tools_sandbox_node(cfg, &node);
		sandbox_set_node(sb, &node);
		r = images_apply_config(sb, dir, ref, icfg, strlen(icfg));
	}
	if (r == 0)
		r = apply_settings(sb, policy, set, nset);
	if (r == 0)
		r = sandbox_set(sb, "rootfs", dir);
	if (r < 0) {
		sandbox_free(sb);
		return r;
	}
	*ret = sb;
	return 0;
}

int cmd_run(int argc, char **argv)
{
	enum { O_ROOTFS = 256, O_POLICY, O_SET, O_ENV, O_WORKDIR, O_USER, O_BIND, O_HOSTNAME,
	       O_NAME, O_MEMORY, O_PIDS, O_CPUS, O_NOFILE, O_TMPFS, O_TIMEOUT, O_OUTPUT, O_ALLOW,
	       O_STAGE, O_JSON, O_STORE, O_CACHE, O_IMAGES, O_CONFIG, O_JSON_FD, O_SOCKET,
	       O_TRUST_KEY, O_REQUIRE_SIGNED };
	static const struct option opts[] = {
		{ "rootfs", required_argument, NULL, O_ROOTFS },
		{ "policy", required_argument, NULL, O_POLICY },
		{ "set", required_argument, NULL, O_SET },
		{ "env", required_argument, NULL, O_ENV },
		{ "workdir", required_argument, NULL, O_WORKDIR },
		{ "user", required_argument, NULL, O_USER },
		{ "bind", required_argument, NULL, O_BIND },
		{ "hostname", required_argument, NULL, O_HOSTNAME },
		{ "name", required_argument, NULL, O_NAME },
		{ "memory", required_argument, NULL, O_MEMORY },
		{ "pids", required_argument, NULL, O_PIDS },
		{ "cpus", required_argument, NULL, O_CPUS },
		{ "nofile", required_argument, NULL, O_NOFILE },
		{ "tmpfs-size", required_argument, NULL, O_TMPFS },
		{ "timeout", required_argument, NULL, O_TIMEOUT },
		{ "output-limit", required_argument, NULL, O_OUTPUT },
		{ "allow", required_argument, NULL, O_ALLOW },
		{ "stage", required_argument, NULL, O_STAGE },
		{ "json", optional_argument, NULL, O_JSON },
		{ "json-fd", required_argument, NULL, O_JSON_FD },
		{ "store", required_argument, NULL, O_STORE },
		{ "cache", required_argument, NULL, O_CACHE },
		{ "images", required_argument, NULL, O_IMAGES },
		{ "socket", required_argument, NULL, O_SOCKET },
		{ "trust-key", required_argument, NULL, O_TRUST_KEY },
		{ "require-signed", no_argument, NULL, O_REQUIRE_SIGNED },
		{ "config", required_argument, NULL, O_CONFIG },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static const char *const keys[] = {
		[O_ROOTFS - 256] = "rootfs", [O_ENV - 256] = "env", [O_WORKDIR - 256] = "workdir",
		[O_USER - 256] = "user", [O_BIND - 256] = "bind", [O_HOSTNAME - 256] = "hostname",
		[O_NAME - 256] = "name", [O_MEMORY - 256] = "memory", [O_PIDS - 256] = "pids",
		[O_CPUS - 256] = "cpus", [O_NOFILE - 256] = "nofile", [O_TMPFS - 256] = "tmpfs_size",
		[O_TIMEOUT - 256] = "timeout", [O_OUTPUT - 256] = "output", [O_ALLOW - 256] = "allow",
		[O_STAGE - 256] = "stage",
	};
	_cleanup_free_ struct setting *set = calloc((size_t)argc, sizeof(*set));
	struct tools_flags fl = { 0 };
	_cleanup_(node_config_destroy) struct node_config cfg = { 0 };
	struct sandbox_node node;
	struct sandbox_result res;
	struct sandbox *sb = NULL;
	const char *policy = NULL, *json = NULL, *image = NULL;
	bool want_json = false, rootfs = false, said;
	int json_fd = -1;
	size_t nset = 0;
	int c, r;

	if (!set)
		return RUN_FAILED;
	optind = 1;
	/* '+': stop at the first non-option, so that CMD's own options stay its
	 * own.  Without --rootfs the first non-option before "--" is IMAGE, and
	 * options may follow it. */
	for (;;) {
		c = getopt_long(argc, argv, "+h", opts, NULL);
		if (c == -1) {
			if (image || rootfs || optind >= argc || !strcmp(argv[optind - 1], "--"))
				break;
			image = argv[optind++];
			continue;
		}
		switch (c) {
		case O_POLICY: policy = optarg; break;
		case O_JSON: want_json = true; json = optarg; break;
		case O_JSON_FD: {
			uint64_t n;

			if (parse_uint(optarg, INT_MAX, &n) < 0 || n <= 2 ||
			    fcntl((int)n, F_GETFD) < 0) {
				log_error(-EINVAL, "--json-fd '%s': want an open descriptor above 2",
				          optarg);
				return RUN_FAILED;
			}
			json_fd = (int)n;
			/* The sandbox's init must not inherit it either. */
			fcntl(json_fd, F_SETFD, FD_CLOEXEC);
			break;
		}
		case O_STORE: tools_flag(&fl, "--store", optarg); break;
		case O_CACHE: tools_flag(&fl, "--cache", optarg); break;
		case O_IMAGES: tools_flag(&fl, "--images", optarg); break;
		case O_SOCKET: tools_flag(&fl, "--socket", optarg); break;
		case O_TRUST_KEY: tools_flag_add(&fl, "--trust-key", optarg); break;
		case O_REQUIRE_SIGNED: tools_flag(&fl, "--require-signed", NULL); break;
		case O_CONFIG: fl.config = optarg; break;
		case O_SET: {
			char *eq = strchr(optarg, '=');

			if (!eq || eq == optarg) {
				log_error(-EINVAL, "--set '%s': want KEY=VALUE", optarg);
				return RUN_FAILED;
			}
			*eq = '\0';
			set[nset++] = (struct setting){ optarg, eq + 1 };
			break;
		}
		case 'h': usage(stdout); return 0;
		default:
			if (c >= O_ROOTFS && c <= O_STAGE && keys[c - 256]) {
				rootfs |= c == O_ROOTFS;
				set[nset++] = (struct setting){ keys[c - 256], optarg };
				break;
			}
			/* a usage error, said as every command says it; run's own
			 * status for it, as for any failure of the launcher */
			(void)tools_option_error("run", argv, "+h", opts);
			return RUN_FAILED;
		}
	}
	if (optind >= argc) {
		(void)tools_usage_error("run", image ? "no command given to run in image '%s'" :
		                        "no command given", image);
		return RUN_FAILED;
	}
	if (image && rootfs) {
		log_error(-EINVAL, "run: image '%s' and --rootfs: give one of them", image);
		return RUN_FAILED;
	}
	/* Settings, options and the policy file first, so that a typo mounts
	 * nothing. */
	if (tools_settings(&fl, &cfg) < 0 || sandbox_new(&sb) < 0)
		return RUN_FAILED;
	tools_sandbox_node(&cfg, &node);
	sandbox_set_node(sb, &node);
	r = apply_settings(sb, policy, set, nset);
	if (r == 0 && image) {
		sandbox_free(sb);
		sb = NULL;
		r = image_sandbox(image, &cfg, policy, set, nset, &sb);
	}
	if (r == 0)
		r = sandbox_run(sb, argv + optind, &res);
	sandbox_free(sb);
	if (r < 0)
		return RUN_FAILED;
	said = print_kill(&res);
	if (json_fd >= 0) {
		FILE *f = fdopen(json_fd, "w");

		if (!f) {
			log_errno(-errno, "--json-fd %d", json_fd);
			return RUN_FAILED;
		}
		print_report(f, &res);
		if (fclose(f) != 0) {
			log_errno(-EIO, "--json-fd %d", json_fd);
			return RUN_FAILED;
		}
	}
	if (want_json) {
		if (json && *json) {
			FILE *f = fopen(json, "we");

			if (!f) {
				log_errno(-errno, "--json '%s'", json);
				return RUN_FAILED;
			}
			print_report(f, &res);
			if (fclose(f) != 0) {
				log_errno(-EIO, "--json '%s'", json);
				return RUN_FAILED;
			}
		} else {
			/* A line of its own: whatever the sandbox left unfinished
			 * on stderr, the report is the whole last line. */
			if (res.stderr_open_line && !said)
				fputc('\n', stderr);
			print_report(stderr, &res);
		}
	}
	/* timeout(1)'s status for the time limit, so that scripts tell it apart
	 * from the command's own SIGKILL (137) */
	return res.killed_by == SANDBOX_KILL_TIME ? RUN_TIMED_OUT : res.status;
}
