/*
 * profile.c — `lazyroot profile merge|push|show`: access profiles, the
 * chunks workloads read in the order they first read them (recorded by
 * `lazyroot mount --record-profile FILE`, one trace per mount), combined,
 * stored beside the image as profiles/<index hex> (so that a tag pushed
 * again never meets a profile of its old index) and shown.  Mounts follow
 * the profile of their index when the store has one (fs/ahead.c).
 */
#include <sys/stat.h>

#include "image/image.h"
#include "lib/json.h"
#include "lib/lib.h"
#include "node/node.h"
#include "store/store.h"
#include "tools/tools.h"

#define PROFILE_FILE_MAX (256ULL << 20)

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot profile merge OUT IN…\n"
	        "       lazyroot profile push REF FILE [--store URL] [--s3-endpoint URL]\n"
	        "       lazyroot profile show REF|FILE [--store URL] [--s3-endpoint URL] [--json]\n"
	        "\n"
	        "Access profiles: the chunks of an image that workloads read, in the order\n"
	        "they first read them, one trace per `lazyroot mount --record-profile FILE`.\n"
	        "A mount whose store holds a profile of its image fetches, as a reader\n"
	        "moves along a trace, the chunks the trace reads next.\n"
	        "\n"
	        "  merge         write the traces of every IN (profiles of one index) to OUT\n"
	        "  push          store FILE as the profile of REF's index (replacing one there)\n"
	        "  show          traces, their chunks and bytes, of a profile file or of the\n"
	        "                profile stored for REF\n"
	        "  --store URL   chunk store (default: $LAZYROOT_STORE, else %s)\n"
	        "  --s3-endpoint URL\n"
	        "                endpoint of s3:// stores (default: $AWS_ENDPOINT_URL_S3,\n"
	        "                else $AWS_ENDPOINT_URL, else AWS)\n"
	        "  --config FILE the node's settings (default: $LAZYROOT_CONFIG, else\n"
	        "                %s; docs/settings.md)\n"
	        "  --json        machine-readable output\n",
	        STORE_DEFAULT_URL, NODE_CONFIG_DEFAULT_PATH);
}

/* Read and parse a profile file; logs one line naming path on failure. */
static int profile_load(const char *path, struct image_profile **ret)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	const char *why = NULL;
	int r = read_file(path, PROFILE_FILE_MAX, &b);

	if (r < 0)
		return log_errno(r, "profile '%s'", path);
	r = image_profile_parse(b.data, b.len, ret, &why);
	if (r < 0)
		return log_error(r, "profile '%s': %s", path, why ? why : "unreadable");
	return 0;
}

static int profile_save(const char *path, const struct image_profile *p)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	int r = image_profile_encode(p, &b);

	if (r == 0)
		r = write_file_atomic(path, b.data, b.len, 0644);
	if (r < 0)
		return log_errno(r, "profile '%s': writing it", path);
	return 0;
}

static int profile_merge(int n, char **in, const char *out)
{
	struct image_profile *all = NULL;
	int r = 0;

	for (int i = 0; r == 0 && i < n; i++) {
		struct image_profile *p = NULL;

		r = profile_load(in[i], &p);
		if (r < 0)
			break;
		if (!all) {
			all = p;
			continue;
		}
		r = image_profile_merge(all, p);
		if (r == -EXDEV)
			log_error(r, "profile '%s': recorded for another index than '%s'", in[i], in[0]);
		else if (r < 0)
			log_errno(r, "profile '%s': merging it", in[i]);
		image_profile_free(p);
	}
	if (r == 0)
		r = profile_save(out, all);
	image_profile_free(all);
	return r;
}

/* The index named hex from s, opened (for chunk sizes); logs its errors. */
static int index_get(struct store *s, const char *hex, struct buf *b, struct image **ret)
{
	int r = store_get_index(s, hex, b);

	if (r < 0)
		return r;
	r = image_open_mem(b->data, b->len, ret);
	if (r < 0)
		return log_error(r, "index %s: the index is corrupt", hex);
	return 0;
}

static int profile_push(struct store *s, const char *ref, const char *path)
{
	_cleanup_(buf_freep) struct buf ib = BUF_INIT, pb = BUF_INIT;
	struct image_profile *p = NULL;
	struct image *img = NULL;
	struct image_info info;
	char hex[HASH_HEX_SIZE], phex[HASH_HEX_SIZE], key[64];
	const char *why = NULL;
	int r;

	r = profile_load(path, &p);
	if (r < 0)
		return r;
	r = store_resolve(s, ref, hex);
	if (r < 0)
		goto out;
	hex_encode(image_profile_index(p), HASH_SIZE, phex);
	if (strcmp(hex, phex)) {
		r = log_error(-EXDEV, "profile '%s': recorded for index %s, not %s ('%s')", path, phex,
		              hex, ref);
		goto out;
	}
	r = index_get(s, hex, &ib, &img);
	if (r < 0)
		goto out;
	image_get_info(img, &info);
	r = image_profile_check(p, info.chunks, &why);
	if (r < 0) {
		log_error(r, "profile '%s': %s", path, why);
		goto out;
	}
	r = image_profile_encode(p, &pb);
	node_profile_key(hex, key);
	if (r == 0)
		r = store_put_sync(s, key, pb.data, pb.len);
	if (r < 0)
		log_errno(r, "profile '%s': storing it as %s in '%s'", path, key, store_url(s));
out:
	image_free(img);
	image_profile_free(p);
	return r;
}

static int profile_show(struct store *s, const char *arg, bool json)
{
	_cleanup_(buf_freep) struct buf ib = BUF_INIT;
	struct image_profile *p = NULL;
	struct image *img = NULL;
	json_t *traces = NULL;
	char hex[HASH_HEX_SIZE];
	struct stat st;
	int r;

	if (stat(arg, &st) == 0) {
		r = profile_load(arg, &p);
		if (r < 0)
			return r;
		hex_encode(image_profile_index(p), HASH_SIZE, hex);
	} else {
		r = store_resolve(s, arg, hex);
		if (r < 0)
			return r;
		r = node_profile_fetch(s, hex, &p);
		if (r == 0 && !p)
			r = log_error(-ENOENT, "image '%s': no profile of index %s in '%s'", arg, hex,
			              store_url(s));
		if (r < 0)
			return r;
	}
	/* bytes need the index: without it (not in this store), chunks only */
	{
		char key[64];

		snprintf(key, sizeof(key), "indexes/%s", hex);
		if (store_get_sync(s, key, &ib) == 0 && image_open_mem(ib.data, ib.len, &img) == 0) {
			struct image_info info;

			image_get_info(img, &info);
			if (image_profile_check(p, info.chunks, NULL) < 0) {
				image_free(img);
				img = NULL;
			}
		}
	}
	if (json)
		traces = json_array();
	else
		printf("profile of index %s: %zu traces\n%6s %8s %12s\n", hex,
		       image_profile_traces(p), "trace", "chunks", "bytes");
	for (size_t t = 0; t < image_profile_traces(p); t++) {
		size_t n;
		const uint32_t *v = image_profile_trace(p, t, &n);
		uint64_t bytes = 0;
		char a[32];

		for (size_t i = 0; img && i < n; i++) {
			struct image_chunk ic;

			if (image_chunk(img, v[i], &ic) == 0)
				bytes += ic.size;
		}
		if (json) {
			if (traces && json_array_append_new(traces, json_pack("{s:I, s:o}", "chunks",
			                                    (json_int_t)n, "bytes", img ?
			                                    json_u64(bytes) : json_null())) < 0) {
				json_decref(traces);
				traces = NULL;
			}
		} else {
			printf("%6zu %8zu %12s\n", t, n, img ? format_size(bytes, a, sizeof(a)) : "-");
		}
	}
	r = json ? json_pack_file(stdout, "{s:s, s:o}", "index", hex, "traces", traces) : 0;
	image_free(img);
	image_profile_free(p);
	return r;
}

static const char *const profile_verbs[] = { "merge", "push", "show", NULL };

int cmd_profile(int argc, char **argv)
{
	_cleanup_(tools_verb_done) struct tools_verb o = { 0 };
	struct store_options so;
	const char *verb;
	struct store *s = NULL;
	int r, nargs;

	r = tools_verb_parse(argc, argv, "profile", profile_verbs, usage, &o);
	if (r >= 0)
		return r;
	verb = o.verb;
	argv = o.args;
	nargs = o.nargs;
	if (!strcmp(verb, "merge") ? nargs < 2 :
	    !strcmp(verb, "push") ? nargs != 2 : nargs != 1)
		return tools_verb_args_error(&o, !strcmp(verb, "merge") ? "OUT IN..." :
		                             !strcmp(verb, "push") ? "REF FILE" : "REF|FILE");
	if (!strcmp(verb, "merge"))
		return profile_merge(nargs - 1, argv + 1, argv[0]) < 0 ? 1 : 0;
	r = tools_store_open(&o.cfg, &so, false, &s);
	if (r < 0)
		return 1;
	if (!strcmp(verb, "push"))
		r = profile_push(s, argv[0], argv[1]);
	else
		r = profile_show(s, argv[0], o.json);
	store_free(s);
	return r < 0 ? 1 : 0;
}
