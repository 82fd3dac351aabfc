/* sign.c — `lazyroot key generate FILE` and `lazyroot image sign NAME[:TAG] --key FILE`. */
#include <getopt.h>

#include "lib/json.h"
#include "lib/lib.h"
#include "lib/sha256.h"
#include "lib/sign.h"
#include "store/store.h"
#include "tools/tools.h"

static void key_usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot key generate FILE [--json]\n"
	        "\n"
	        "Make an Ed25519 key pair for signing tags: the private key in FILE (mode\n"
	        "0600) and the public key in FILE.pub, both PEM as openssl writes them.\n"
	        "Neither file may exist.  Sign with `lazyroot build --sign FILE` or\n"
	        "`lazyroot image sign NAME:TAG --key FILE`; trust the key on a node with\n"
	        "`--trust-key FILE.pub` or the trust_keys setting.\n"
	        "\n"
	        "  --json        print the files and the key's id as JSON\n"
	        "  -h, --help    this text\n");
}

int cmd_key(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct sign_key k;
	char id[SIGN_KEY_ID_SIZE];
	bool json = false;
	int c, r;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'j': json = true; break;
		case 'h': key_usage(stdout); return 0;
		default:
			return tools_option_error(argc > 1 && !strcmp(argv[1], "generate") ?
			                          "key generate" : "key", argv, "h", opts);
		}
	}
	if (optind == argc)
		return tools_usage_error("key", "no verb given");
	if (strcmp(argv[optind], "generate"))
		return tools_usage_error("key", "unknown verb '%s'", argv[optind]);
	if (optind != argc - 2)
		return tools_usage_error("key generate", optind == argc - 1 ? "want FILE" :
		                         "unexpected argument '%s'", argv[argc - 1]);
	r = sign_key_generate(&k);
	r = r ?: sign_key_write(&k, argv[optind + 1]);
	r = r ?: sign_key_id(k.pub, id);
	sign_key_wipe(&k);
	if (r < 0)
		return 1;
	if (json)
		return json_pack_file(stdout, "{s:s, s:s+, s:s}", "private", argv[optind + 1],
		                      "public", argv[optind + 1], ".pub", "key", id) < 0;
	printf("%s, %s.pub: key %s\n", argv[optind + 1], argv[optind + 1], id);
	return 0;
}

static void sign_usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot image sign NAME[:TAG] --key FILE [--expires DURATION]\n"
	        "                           [--store URL] [--s3-endpoint URL] [--config FILE]\n"
	        "                           [--json]\n"
	        "\n"
	        "Sign the tag NAME[:TAG] of the store with the private key FILE: the SHA-256\n"
	        "of the index it names now, the version after the one the store's signature\n"
	        "has (1 for none), when it was signed and when it expires.  The signature is\n"
	        "written beside the tag; a node that trusts the key checks it at every mount\n"
	        "(image/FORMAT.md, \"Signed tags\").\n"
	        "\n"
	        "  --key FILE          the private key (`lazyroot key generate`)\n"
	        "  --expires DURATION  how long the signature is valid: a number with s, m or\n"
	        "                      h (default: 90 days); 0 makes one already expired\n"
	        "  --store URL         chunk store (default: $LAZYROOT_STORE, else %s)\n"
	        "  --s3-endpoint URL   endpoint of s3:// stores\n"
	        "  --config FILE       the node's settings (docs/settings.md)\n"
	        "  --json              print what was signed as JSON\n"
	        "  -h, --help          this text\n",
	        STORE_DEFAULT_URL);
}

int cmd_image_sign(int argc, char **argv)
{
	enum { O_KEY = 256, O_EXPIRES, O_STORE, O_S3_ENDPOINT, O_CONFIG, O_JSON };
	static const struct option opts[] = {
		{ "key", required_argument, NULL, O_KEY },
		{ "expires", required_argument, NULL, O_EXPIRES },
		{ "store", required_argument, NULL, O_STORE },
		{ "s3-endpoint", required_argument, NULL, O_S3_ENDPOINT },
		{ "config", required_argument, NULL, O_CONFIG },
		{ "json", no_argument, NULL, O_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct tools_flags fl = { 0 };
	_cleanup_(node_config_destroy) struct node_config cfg = { 0 };
	struct store_options so;
	struct store *s = NULL;
	struct sign_key k = { 0 };
	struct store_tag_sig t;
	const char *key = NULL, *ref;
	uint64_t expires_ms = (uint64_t)STORE_SIG_DEFAULT_EXPIRES_S * 1000;
	bool json = false;
	int c, r;

	optind = 1;
	while ((c = getopt_long(argc - 1, argv + 1, "h", opts, NULL)) != -1) {
		switch (c) {
		case O_KEY: key = optarg; break;
		case O_EXPIRES:
			if (parse_duration(optarg, 1000, 100ULL * 365 * 86400 * 1000, &expires_ms) < 0) {
				log_error(-EINVAL, "--expires '%s': want a duration (e.g. 30s, 12h), at "
				          "most 100 years", optarg);
				return 2;
			}
			break;
		case O_STORE: tools_flag(&fl, "--store", optarg); break;
		case O_S3_ENDPOINT: tools_flag(&fl, "--s3-endpoint", optarg); break;
		case O_CONFIG: fl.config = optarg; break;
		case O_JSON: json = true; break;
		case 'h': sign_usage(stdout); return 0;
		default: return tools_option_error("image sign", argv + 1, "h", opts);
		}
	}
	if (optind != argc - 2) {
		sign_usage(stderr);
		return 2;
	}
	ref = argv[1 + optind];
	if (!key) {
		log_error(-EINVAL, "image sign '%s': --key FILE is required", ref);
		return 2;
	}
	if (sign_key_load_private(key, &k) < 0 || tools_settings(&fl, &cfg) < 0) {
		sign_key_wipe(&k);
		return 2;
	}
	r = tools_store_open(&cfg, &so, false, &s);
	if (r == 0)
		r = store_tag_sign(s, ref, &k, (int64_t)(expires_ms / 1000), &t);
	sign_key_wipe(&k);
	store_free(s);
	if (r < 0)
		return 1;
	{
		char digest[SHA256_HEX_SIZE], id[SIGN_KEY_ID_SIZE] = "sha256:";

		hex_encode(t.digest, sizeof(t.digest), digest);
		hex_encode(t.key_id, sizeof(t.key_id), id + 7);
		if (json)
			return json_pack_file(stdout, "{s:s, s:s+, s:o, s:I, s:I, s:s}", "tag", t.tag,
			                      "digest", "sha256:", digest, "version",
			                      json_u64(t.version), "signed_at", (json_int_t)t.signed_at,
			                      "expires_at", (json_int_t)t.expires_at, "key", id) < 0;
		printf("%s: signed, version %llu, index sha256:%s, key %s\n", t.tag,
		       (unsigned long long)t.version, digest, id);
	}
	return 0;
}
