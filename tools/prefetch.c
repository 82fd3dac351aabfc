/*
 * prefetch.c — `lazyroot cache prefetch REF [PATH…]`: warm the node's cache
 * before sandboxes arrive.  A client of the node service, which fetches
 * through the cache its mounts use (node/prefetch.c says how) and answers
 * when every chunk is in; a node is started when none answers.
 */
#include <getopt.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/cache.h"
#include "image/image.h"
#include "lib/lib.h"
#include "lib/loop.h"
#include "store/store.h"
#include "lib/json.h"
#include "node/node.h"
#include "tools/tools.h"

/* One line on stderr, redrawn as the node reports: chunks and bytes done of
 * the total, the rate and what is left to wait. */
static void draw(void *ud, const json_t *pr)
{
	int64_t done = 0, chunks = 0, bytes = 0, total = 0;
	double secs = 0, rate;
	char a[32], b[32], eta[32] = "--";

	(void)ud;
	(void)json_int(json_object_get(pr, "chunks_done"), &done);
	(void)json_int(json_object_get(pr, "chunks"), &chunks);
	(void)json_int(json_object_get(pr, "bytes_done"), &bytes);
	(void)json_int(json_object_get(pr, "bytes"), &total);
	(void)json_double(json_object_get(pr, "seconds"), &secs);
	rate = secs > 0 ? (double)bytes / secs : 0;
	if (rate > 0 && secs >= 1 && total >= bytes)
		snprintf(eta, sizeof(eta), "%.0fs", (double)(total - bytes) / rate);
	fprintf(stderr, "\r\033[K%lld/%lld chunks  %s of %s  %.0f MB/s  ETA %s", (long long)done,
	        (long long)chunks, format_size((uint64_t)bytes, a, sizeof(a)),
	        format_size((uint64_t)total, b, sizeof(b)), rate / 1e6, eta);
	fflush(stderr);
}

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot cache prefetch REF [PATH…] [OPTIONS]\n"
	        "\n"
	        "Fetch the chunks of image REF into the node cache, through the node\n"
	        "service (started when none answers): all of them, or those of\n"
	        "the files under each PATH (a path inside the image).  Chunks are staged:\n"
	        "kept as the store holds them (compressed), then decoded, verified and\n"
	        "written out by the daemon the first time a reader needs each one, so that\n"
	        "warming a whole image costs no decoding and less disk.\n"
	        "\n"
	        "  --profiled         only the chunks the image's access profile names (see\n"
	        "                     `lazyroot profile`); without it they come first anyway\n"
	        "  --no-profile       ignore the access profile: chunks in the image's order\n"
	        "  --decode           decode, verify and write every chunk now instead (a\n"
	        "                     first read then costs no decoding; more CPU and disk)\n"
	        "  --store URL        chunk store (default: $LAZYROOT_STORE, else %s)\n"
        "  --s3-endpoint URL  endpoint of s3:// stores (default: $AWS_ENDPOINT_URL_S3,\n"
        "                     else $AWS_ENDPOINT_URL, else AWS)\n"
	        "  --cache DIR        cache directory (default: $LAZYROOT_CACHE, else %s)\n"
	        "  --cache-size SIZE  bytes of chunks the cache keeps at most (default 10G)\n"
	        "  --fetch-timeout S  seconds a chunk is retried on a failing remote store\n"
	        "                     before it counts as failed (default %d)\n"
	        "  --config FILE      the node's settings (default: $LAZYROOT_CONFIG, else\n"
	        "                     %s; docs/settings.md)\n"
	        "  --json             print a summary as JSON\n"
	        "  --no-progress      no progress line, even on a terminal\n"
	        "  --socket PATH      the node's control socket (default: $LAZYROOT_SOCKET,\n"
	        "                     else %s)\n"
	        "  -h, --help         this text\n",
	        STORE_DEFAULT_URL, CACHE_DEFAULT_DIR, STORE_DEFAULT_FETCH_TIMEOUT_MS / 1000,
	        NODE_CONFIG_DEFAULT_PATH, NODE_DEFAULT_SOCKET);
}

int cmd_cache_prefetch(int argc, char **argv)
{
	enum { O_STORE = 256, O_S3_ENDPOINT, O_CACHE, O_SIZE, O_JSON, O_NOPROG, O_FETCH_TIMEOUT,
	       O_DECODE, O_PROFILED, O_NOPROFILE, O_CONFIG, O_SOCKET };
	static const struct option opts[] = {
		{ "store", required_argument, NULL, O_STORE },
		{ "s3-endpoint", required_argument, NULL, O_S3_ENDPOINT },
		{ "fetch-timeout", required_argument, NULL, O_FETCH_TIMEOUT },
		{ "cache", required_argument, NULL, O_CACHE },
		{ "cache-size", required_argument, NULL, O_SIZE },
		{ "config", required_argument, NULL, O_CONFIG },
		{ "json", no_argument, NULL, O_JSON },
		{ "no-progress", no_argument, NULL, O_NOPROG },
		{ "decode", no_argument, NULL, O_DECODE },
		{ "profiled", no_argument, NULL, O_PROFILED },
		{ "no-profile", no_argument, NULL, O_NOPROFILE },
		{ "socket", required_argument, NULL, O_SOCKET },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	_cleanup_(buf_freep) struct buf req = BUF_INIT;
	_cleanup_(node_config_destroy) struct node_config cfg = { 0 };
	struct tools_flags fl = { 0 };
	json_t *reply = NULL, *q, *paths;
	const char *ref;
	bool json = false, profiled = false, noprofile = false, decode = false, noprog = false;
	bool progress;
	int c, r = 0;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case O_STORE: tools_flag(&fl, "--store", optarg); break;
		case O_S3_ENDPOINT: tools_flag(&fl, "--s3-endpoint", optarg); break;
		case O_FETCH_TIMEOUT: tools_flag(&fl, "--fetch-timeout", optarg); break;
		case O_CACHE: tools_flag(&fl, "--cache", optarg); break;
		case O_SIZE: tools_flag(&fl, "--cache-size", optarg); break;
		case O_CONFIG: fl.config = optarg; break;
		case O_SOCKET: tools_flag(&fl, "--socket", optarg); break;
		case O_JSON: json = true; break;
		case O_NOPROG: noprog = true; break;
		case O_DECODE: decode = true; break;
		case O_PROFILED: profiled = true; break;
		case O_NOPROFILE: noprofile = true; break;
		case 'h': usage(stdout); return 0;
		default: return tools_option_error("cache prefetch", argv, "h", opts);
		}
	}
	if (profiled && noprofile)
		return tools_usage_error("cache prefetch", "--profiled and --no-profile exclude each other");
	if (optind >= argc)
		return tools_usage_error("cache prefetch", "no IMAGE given");
	ref = argv[optind++];
	if (tools_settings(&fl, &cfg) < 0)
		return 2;
	/* a terminal gets a progress line; a pipe or a file nothing extra */
	progress = !noprog && !json && isatty(STDERR_FILENO);
	q = json_pack("{s:s, s:b, s:s}", "verb", "prefetch", "progress", progress, "ref", ref);
	r = q ? tools_node_settings(q, &cfg) : -EINVAL;
	paths = json_array();
	for (int i = optind; r == 0 && i < argc; i++)
		if (!paths || json_array_append_new(paths, json_str(argv[i], strlen(argv[i]))) < 0)
			r = -EINVAL;
	if (r == 0 && json_object_update_new(q, json_pack("{s:b, s:b, s:b, s:O}", "decode", decode,
	                                     "profiled", profiled, "no_profile", noprofile,
	                                     "paths", paths)) < 0)
		r = -ENOMEM;
	json_decref(paths);
	r = r ?: tools_node_request_text(json_incref(q), &req);
	json_decref(q);
	if (r < 0) {
		log_errno(r, "prefetch '%s'", ref);
		return 1;
	}
	r = tools_node_request_progress(&cfg, (char *)req.data, progress ? draw : NULL, NULL,
	                                &reply);
	if (progress) {
		/* the last line: the figures of the answer, then a newline */
		int64_t chunks = 0, bytes = 0;
		double secs = 0;
		char a[32];

		if (r == 0) {
			(void)json_int(json_object_get(reply, "chunks"), &chunks);
			(void)json_int(json_object_get(reply, "bytes"), &bytes);
			(void)json_double(json_object_get(reply, "seconds"), &secs);
			fprintf(stderr, "\r\033[K%lld/%lld chunks  %s in %.1fs\n", (long long)chunks,
			        (long long)chunks, format_size((uint64_t)bytes, a, sizeof(a)), secs);
		} else {
			fputs("\r\033[K", stderr);
		}
	}
	if (r < 0)
		return 1;
	if (json) {
		int64_t chunks = 0, bytes = 0, failed = 0;
		double secs = 0;

		(void)json_int(json_object_get(reply, "chunks"), &chunks);
		(void)json_int(json_object_get(reply, "bytes"), &bytes);
		(void)json_int(json_object_get(reply, "failed"), &failed);
		(void)json_double(json_object_get(reply, "seconds"), &secs);
		(void)json_pack_file(stdout, "{s:s?, s:s?, s:I, s:I, s:I, s:o}",
		                     "index", json_get_cstr(reply, "index"),
		                     "mode", json_get_cstr(reply, "mode"), "chunks", (json_int_t)chunks,
		                     "bytes", (json_int_t)bytes, "failed", (json_int_t)failed,
		                     "seconds", json_fixed(secs, 3));
	}
	json_decref(reply);
	return 0;
}
