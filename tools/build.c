/* build.c — `lazyroot build SOURCE --tag NAME[:TAG]`. */
#include <getopt.h>
#include <limits.h>

#include "chunker/chunker.h"
#include "image/image.h"
#include "lib/json.h"
#include "lib/lib.h"
#include "lib/sign.h"
#include "store/store.h"
#include "tools/tools.h"

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot build SOURCE --tag NAME[:TAG] [OPTIONS]\n"
	        "\n"
	        "Turn SOURCE into content-defined chunks and an index, store the chunks the\n"
	        "store lacks, then the index, then the tag.  SOURCE is a directory, a tar\n"
	        "archive (plain, gzip or zstd), an OCI image layout directory, a\n"
	        "`docker save` archive, or an image in an OCI registry:\n"
	        "docker://HOST[:PORT]/NAME[:TAG|@sha256:DIGEST] (oci://… is the same), pulled\n"
	        "straight into the build with every blob checked against its digest.\n"
	        "\n"
	        "  --store URL        chunk store (default: $LAZYROOT_STORE, else %s)\n"
        "  --s3-endpoint URL  endpoint of s3:// stores (default: $AWS_ENDPOINT_URL_S3,\n"
        "                     else $AWS_ENDPOINT_URL, else AWS)\n"
	        "  --tag NAME[:TAG]   name to publish the image under (TAG defaults to latest)\n"
	        "  --platform P       os/arch[/variant] to pick from a multi-platform OCI index\n"
	        "                     (default: this host)\n"
	        "  --creds USER:PASS  registry credentials (default: auths.HOST.auth of\n"
	        "                     $DOCKER_CONFIG/config.json, else ~/.docker/config.json)\n"
	        "  --plain-http       reach the registry over http:// (always so for\n"
	        "                     localhost and 127.0.0.0/8; https:// otherwise, trusting\n"
	        "                     the node's tls_ca_file: $CURL_CA_BUNDLE, else\n"
	        "                     $SSL_CERT_FILE, else the system's CA store)\n"
	        "  --config FILE      the image config, an OCI image config JSON document whose\n"
	        "                     config.Env, config.WorkingDir and config.User `lazyroot run`\n"
	        "                     applies (default: an OCI or docker source's own, else none)\n"
	        "  --min-size SIZE    smallest chunk (default %uK)\n"
	        "  --avg-size SIZE    average chunk, a power of two (default %uK)\n"
	        "  --max-size SIZE    largest chunk (default %uK)\n"
	        "  --level N          zstd level, 1-19 (default %d)\n"
	        "  --threads N        worker threads (default: one per core)\n"
	        "  --pack             also write the image's pack: its chunks in one file, which\n"
	        "                     a mount reads its misses from (dir: stores only)\n"
	        "  --sign FILE        sign the tag with the private key FILE (`lazyroot key\n"
	        "                     generate`), valid for 90 days, after the tag is written\n"
	        "  --json             print a summary as JSON on stdout\n"
	        "  --no-progress      no progress bar even on a terminal\n"
	        "  -h, --help         this text\n",
	        STORE_DEFAULT_URL, BUILD_DEFAULT_MIN / 1024, BUILD_DEFAULT_AVG / 1024,
	        BUILD_DEFAULT_MAX / 1024, BUILD_DEFAULT_LEVEL);
}

#define BUILD_CONFIG_MAX (8u << 20)  /* as for an OCI source's config */

/* Read an image config file and check that it is a JSON object. */
static int read_config(const char *path, struct buf *ret)
{
	json_t *doc = NULL;
	char what[64 + PATH_MAX];
	int r;

	r = read_file(path, BUILD_CONFIG_MAX, ret);
	if (r < 0)
		return log_errno(r, "--config '%s'", path);
	snprintf(what, sizeof(what), "--config '%s'", path);
	r = json_parse_logged(ret->data, ret->len, what, &doc);
	if (r == 0 && !json_is_object(doc))
		r = log_error(-EINVAL, "--config '%s': not a JSON object", path);
	json_decref(doc);
	return r;
}

static int parse_chunk_size(const char *opt, const char *arg, uint32_t *ret)
{
	uint64_t v;

	if (parse_size(arg, &v) < 0 || v > UINT32_MAX)
		return log_error(-EINVAL, "%s '%s': not a size", opt, arg);
	*ret = (uint32_t)v;
	return 0;
}

/* Where docker keeps credentials: the docker_config setting's config.json
 * ($DOCKER_CONFIG), else ~/.docker/config.json; and the CA bundle, as for
 * HTTP stores (tls_ca_file). */
static int registry_setup(const struct node_config *c, struct registry_params *rp,
                          const char *platform, char **ret_config)
{
	char *path = NULL;

	rp->platform = platform;
	if (c->docker_config) {
		if (asprintf(&path, "%s/config.json", c->docker_config) < 0)
			return log_errno(-ENOMEM, "docker_config");
	} else if (c->home) {
		if (asprintf(&path, "%s/.docker/config.json", c->home) < 0)
			return log_errno(-ENOMEM, "HOME");
	}
	rp->docker_config = *ret_config = path;
	rp->ca_file = c->tls_ca_file;
	return 0;
}

int cmd_build(int argc, char **argv)
{
	enum { O_STORE = 256, O_S3_ENDPOINT, O_TAG, O_PLATFORM, O_MIN, O_AVG, O_MAX, O_LEVEL,
	       O_THREADS, O_JSON, O_NOPROG, O_CONFIG, O_PACK, O_CREDS, O_PLAIN_HTTP, O_SIGN };
	static const struct option opts[] = {
		{ "store", required_argument, NULL, O_STORE },
		{ "s3-endpoint", required_argument, NULL, O_S3_ENDPOINT },
		{ "tag", required_argument, NULL, O_TAG },
		{ "platform", required_argument, NULL, O_PLATFORM },
		{ "config", required_argument, NULL, O_CONFIG },
		{ "min-size", required_argument, NULL, O_MIN },
		{ "avg-size", required_argument, NULL, O_AVG },
		{ "max-size", required_argument, NULL, O_MAX },
		{ "level", required_argument, NULL, O_LEVEL },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "json", no_argument, NULL, O_JSON },
		{ "no-progress", no_argument, NULL, O_NOPROG },
		{ "pack", no_argument, NULL, O_PACK },
		{ "creds", required_argument, NULL, O_CREDS },
		{ "plain-http", no_argument, NULL, O_PLAIN_HTTP },
		{ "sign", required_argument, NULL, O_SIGN },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct build_params p;
	struct build_summary sum = { 0 };
	struct build *b = NULL;
	struct store *s = NULL;
	_cleanup_(buf_freep) struct buf config = BUF_INIT;
	struct tools_flags fl = { 0 };
	_cleanup_(node_config_destroy) struct node_config cfg = { 0 };
	struct store_options so;
	const char *tag = NULL, *config_path = NULL, *sign_path = NULL, *source;
	struct sign_key skey = { 0 };
	struct store_tag_sig sig;
	struct registry_params rp = { 0 };
	_cleanup_free_ char *docker_config = NULL;
	bool json = false, noprog = false;
	uint64_t v;
	int c, r;

	build_params_default(&p);
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case O_STORE: tools_flag(&fl, "--store", optarg); break;
		case O_S3_ENDPOINT: tools_flag(&fl, "--s3-endpoint", optarg); break;
		case O_TAG: tag = optarg; break;
		case O_PLATFORM: p.platform = optarg; break;
		case O_CONFIG: config_path = optarg; break;
		case O_MIN: if (parse_chunk_size("--min-size", optarg, &p.min_size) < 0) return 2; break;
		case O_AVG: if (parse_chunk_size("--avg-size", optarg, &p.avg_size) < 0) return 2; break;
		case O_MAX: if (parse_chunk_size("--max-size", optarg, &p.max_size) < 0) return 2; break;
		case O_LEVEL:
			if (parse_uint(optarg, 22, &v) < 0 || v < 1) {
				log_error(-EINVAL, "--level '%s': want 1 to 22", optarg);
				return 2;
			}
			p.level = (int)v;
			break;
		case O_THREADS:
			if (parse_uint(optarg, 1024, &v) < 0 || v < 1) {
				log_error(-EINVAL, "--threads '%s': want 1 to 1024", optarg);
				return 2;
			}
			p.threads = (unsigned)v;
			break;
		case O_JSON: json = true; break;
		case O_NOPROG: noprog = true; break;
		case O_PACK: p.pack = true; break;
		case O_CREDS:
			if (!strchr(optarg, ':') || optarg[0] == ':') {
				log_error(-EINVAL, "--creds: want USER:PASS");
				return 2;
			}
			rp.creds = optarg;
			break;
		case O_PLAIN_HTTP: rp.plain_http = true; break;
		case O_SIGN: sign_path = optarg; break;
		case 'h': usage(stdout); return 0;
		default: return tools_option_error("build", argv, "h", opts);
		}
	}
	if (optind == argc)
		return tools_usage_error("build", "no SOURCE given");
	if (optind < argc - 1)
		return tools_usage_error("build", "unexpected argument '%s'", argv[optind + 1]);
	source = argv[optind];
	if (!tag) {
		return tools_usage_error("build", "--tag NAME[:TAG] is required (building '%s')", source);
	}
	{
		char key[1200];

		if (store_tag_key(tag, key, sizeof(key)) < 0) {
			log_error(-EINVAL, "--tag '%s': not a valid reference: %s", tag,
			          store_ref_invalid(tag) ?: "too long");
			return 2;
		}
	}
	if (config_path && read_config(config_path, &config) < 0)
		return 2;
	/* the key is read before anything is built: a bad one stops the build */
	if (sign_path && sign_key_load_private(sign_path, &skey) < 0)
		return 2;
	/* --config is the image's config here: the node's settings come from
	 * $LAZYROOT_CONFIG or the default file */
	if (tools_settings(&fl, &cfg) < 0)
		return 2;
	p.progress = !noprog && !json && isatty(STDERR_FILENO);
	p.tmp_dir = cfg.tmp_dir;

	r = tools_store_open(&cfg, &so, true, &s);
	if (r < 0)
		return 1;
	if (p.pack && !store_holds_packs(s)) {
		log_error(-EOPNOTSUPP, "--pack: store '%s' cannot hold packs (only dir: stores can)",
		          store_url(s));
		store_free(s);
		return 2;
	}
	r = build_new(&p, s, &b);
	if (r == 0 && source_is_registry(source)) {
		r = registry_setup(&cfg, &rp, p.platform, &docker_config);
		if (r == 0)
			r = source_registry(b, source, &rp);
	} else if (r == 0) {
		r = source_add(b, source, p.platform);
	}
	if (r == 0 && config_path) {
		r = image_tree_set_config(build_tree(b), config.data, config.len);
		if (r < 0)
			log_errno(r, "--config '%s'", config_path);
	}
	if (r == 0)
		r = build_finish(b, tag, &sum);
	if (r == 0 && sign_path)
		r = store_tag_sign(s, tag, &skey, STORE_SIG_DEFAULT_EXPIRES_S, &sig);
	sign_key_wipe(&skey);
	build_free(b);
	store_free(s);
	if (r < 0)
		return 1;  /* the failure was logged where it happened, naming the input */
	if (json) {
		double dedup = sum.bytes_in ? (double)sum.bytes_in / (double)MAX(sum.chunk_bytes, 1) : 1;

		if (json_pack_file(stdout, "{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
		                   "index", sum.index, "tag", json_str(tag, strlen(tag)),
		                   "entries", json_u64(sum.entries), "bytes_in", json_u64(sum.bytes_in),
		                   "chunks", json_u64(sum.chunks), "chunks_new", json_u64(sum.chunks_new),
		                   "chunk_bytes", json_u64(sum.chunk_bytes),
		                   "bytes_stored", json_u64(sum.bytes_stored),
		                   "dedup_ratio", json_fixed(dedup, 3),
		                   "pack_bytes", json_u64(sum.pack_bytes),
		                   "seconds", json_fixed(sum.seconds, 3)) < 0)
			return 1;
	} else {
		char a[32], bb[32];

		char pk[48] = "", pb[32];

		if (p.pack)
			snprintf(pk, sizeof(pk), ", pack %s", format_size(sum.pack_bytes, pb, sizeof(pb)));
		printf("%s %s: %llu entries, %s in, %llu chunks (%llu new, %s stored)%s, %.2f s\n",
		       tag, sum.index, (unsigned long long)sum.entries,
		       format_size(sum.bytes_in, a, sizeof(a)), (unsigned long long)sum.chunks,
		       (unsigned long long)sum.chunks_new, format_size(sum.bytes_stored, bb, sizeof(bb)),
		       pk, sum.seconds);
		if (sign_path)
			printf("%s: signed, version %llu\n", tag, (unsigned long long)sig.version);
	}
	return 0;
}
