/*
 * store.c — `lazyroot store gc|verify`: collect what no tag reaches (the
 * protocol is store/gc.c's, store/GC.md), and check that every tag's image is
 * whole.  What a tag reaches (its index, the index's chunks, profile and pack)
 * is marked here, where the image format is known.
 */
#include <getopt.h>
#include <zstd.h>

#include "image/image.h"
#include "lib/json.h"
#include "lib/lib.h"
#include "node/config.h"
#include "store/store.h"
#include "tools/tools.h"

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot store gc [--grace DURATION] [--dry-run] [--wait] [--json]\n"
	        "                         [--lease-ttl SECONDS] [--store URL] [--s3-endpoint URL]\n"
	        "       lazyroot store verify [--data PERCENT] [--json] [--store URL]\n"
	        "                             [--s3-endpoint URL]\n"
	        "\n"
	        "  gc      reclaim the chunks, indexes, profiles and packs no tag reaches, while\n"
	        "          builders push and mounts read (store/GC.md).  Phase one moves what\n"
	        "          is unreachable and older than the grace period aside; phase two, once\n"
	        "          the grace period passed again and every build seen then ended, brings\n"
	        "          back what became reachable and deletes the rest.  A run does what may\n"
	        "          run now: phase two of the collection in the store, else phase one of\n"
	        "          a new one, and its phase two at once when nothing holds it back.\n"
	        "          Safe at any grace: what a tag reaches, what a running build counts\n"
	        "          on, and every image a node has mounted (its reader lease, renewed\n"
	        "          while the mount lives) are kept; a node that died stops renewing,\n"
	        "          and its images go once its lease lapsed.  A build that finds an\n"
	        "          object gone before its tag (the store's clock jumped) publishes no tag\n"
	        "\n"
	        "  verify  check every tag: its index whole, every chunk it names present with\n"
	        "          its size; exit 1 when anything is missing or wrong\n"
	        "\n"
	        "  --grace DURATION  e.g. 90s, 30m, 1h, 2d (default 1h); 0 collects at once;\n"
	        "                    a grace only spares young objects the trip aside and back,\n"
	        "                    and readers of a replaced image that hold no lease (an\n"
	        "                    extract, a node with lease_ttl 0 or that cannot write)\n"
	        "  --dry-run         count what would be moved aside and deleted; change nothing\n"
	        "  --wait            wait for phase two instead of leaving it to a later run\n"
	        "  --lease-ttl S     the collector's lease (default %u s)\n"
	        "  --data PERCENT    also fetch, decompress and re-hash this share of the chunks\n"
	        "  --store URL       chunk store (default: $LAZYROOT_STORE, else %s)\n"
	        "  --s3-endpoint URL endpoint of s3:// stores\n"
	        "  --json            machine-readable output\n",
	        STORE_LEASE_TTL_DEFAULT, STORE_DEFAULT_URL);
}

/* "90", "90s", "30m", "1h", "2d" → seconds */
static int parse_grace(const char *s, int64_t *ret)
{
	char *end;
	unsigned long long v;
	int64_t mul = 1;

	if (!*s || *s == '-')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	if (*end) {
		switch (*end) {
		case 's': mul = 1; break;
		case 'm': mul = 60; break;
		case 'h': mul = 3600; break;
		case 'd': mul = 86400; break;
		default: return -EINVAL;
		}
		if (end[1])
			return -EINVAL;
	}
	if (v > (unsigned long long)INT64_MAX / (unsigned long long)mul)
		return -EINVAL;
	*ret = (int64_t)v * mul;
	return 0;
}

/* ---- marking --------------------------------------------------------------- */

/* Add what index hex reaches (itself, its profile and pack, its chunks). */
static int mark_index(struct store *s, const char *hex, struct store_keys *keys)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	struct image *img = NULL;
	struct image_info info;
	char key[64];
	int r;

	snprintf(key, sizeof(key), "indexes/%s", hex);
	r = store_keys_add(keys, key);
	snprintf(key, sizeof(key), "profiles/%s", hex);
	if (r == 0)
		r = store_keys_add(keys, key);
	snprintf(key, sizeof(key), "packs/%s", hex);
	if (r == 0)
		r = store_keys_add(keys, key);
	if (r < 0)
		return r;
	r = store_get_index(s, hex, &b);
	if (r < 0)
		return r;
	r = image_open_mem(b.data, b.len, &img);
	if (r < 0)
		return log_errno(r, "index %s is corrupt", hex);
	image_get_info(img, &info);
	for (uint32_t i = 0; r == 0 && i < info.chunks; i++) {
		struct image_chunk c;
		char h[HASH_HEX_SIZE];

		r = image_chunk(img, i, &c);
		if (r < 0)
			break;
		hex_encode(c.name, HASH_SIZE, h);
		snprintf(key, sizeof(key), "chunks/%s", h);
		r = store_keys_add(keys, key);
	}
	image_free(img);
	if (r < 0)
		return log_errno(r, "index %s", hex);
	return 0;
}

/* Everything a tag reaches.  Any tag that cannot be followed stops the
 * collection: what only it reaches is unknown. */
static int mark(struct store *s, void *ud, struct store_keys *keys)
{
	struct store_keys seen = { 0 };
	char **tags = NULL;
	size_t n = 0;
	int r;

	(void)ud;
	r = store_list_sync(s, "tags/", &tags, &n);
	if (r < 0)
		return log_errno(r, "store '%s': listing tags", store_url(s));
	for (size_t i = 0; r == 0 && i < n; i++) {
		char hex[HASH_HEX_SIZE];

		r = store_resolve(s, tags[i] + 5, hex);
		if (r == -ENOENT)
			r = 0;   /* removed since the listing */
		else if (r == 0 && !store_keys_has(&seen, hex)) {
			r = mark_index(s, hex, keys);
			if (r == 0)
				r = store_keys_add(&seen, hex);
			store_keys_sort(&seen);
		}
		if (r < 0)
			log_error(r, "tag '%s': cannot follow it; collecting nothing", tags[i] + 5);
	}
	store_names_free(tags);
	store_keys_destroy(&seen);
	return r;
}

/* What an index a reader lease holds reaches: a node's mount of it reads it. */
static int mark_held(struct store *s, void *ud, const char *hex, struct store_keys *keys)
{
	(void)ud;
	return mark_index(s, hex, keys);
}

/* ---- gc ----------------------------------------------------------------------- */

static int store_gc_cmd(struct store *s, int64_t grace, bool dry, bool wait, unsigned ttl,
                        bool json)
{
	struct store_gc_params p = { .grace = grace, .dry_run = dry, .wait = wait,
	                             .lease_ttl = ttl, .mark = mark,
	                             .mark_index = mark_held };
	struct store_gc_report rep;
	const struct store_counters *c = store_get_counters(s);
	char a[32], b[32], d[32];
	int r = store_gc(s, &p, &rep);

	if (r < 0)
		return r;
	if (json) {
		return json_pack_file(stdout, "{s:b, s:b, s:b, s:b, s:I, s:o, s:o, s:o, s:o, s:o, "
		                      "s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
		                      "dry_run", dry, "phase_one", rep.phase_one,
		                      "phase_two", rep.phase_two, "waiting", rep.waiting,
		                      "phase_two_at", (json_int_t)rep.phase_two_at,
		                      "leases_waited", json_u64(rep.leases_waited),
		                      "live", json_u64(rep.live), "live_bytes", json_u64(rep.live_bytes),
		                      "held", json_u64(rep.held), "held_bytes", json_u64(rep.held_bytes),
		                      "readers", json_u64(rep.readers),
		                      "held_indexes", json_u64(rep.held_indexes),
		                      "unreachable", json_u64(rep.unreachable),
		                      "unreachable_bytes", json_u64(rep.unreachable_bytes),
		                      "moved", json_u64(rep.moved),
		                      "moved_bytes", json_u64(rep.moved_bytes),
		                      "restored", json_u64(rep.restored),
		                      "deleted", json_u64(rep.deleted),
		                      "deleted_bytes", json_u64(rep.deleted_bytes),
		                      "operations", json_u64(rep.operations),
		                      "requests", json_u64(c->requests),
		                      "seconds", json_fixed(rep.seconds, 3));
	}
	printf("reachable    %llu objects, %s\n", (unsigned long long)rep.live,
	       format_size(rep.live_bytes, a, sizeof(a)));
	if (rep.held || rep.held_indexes)
		printf("held         %llu objects, %s: %llu image(s) no tag names, mounted by a "
		       "node (%llu reader lease(s))\n", (unsigned long long)rep.held,
		       format_size(rep.held_bytes, d, sizeof(d)), (unsigned long long)rep.held_indexes,
		       (unsigned long long)rep.readers);
	printf("unreachable  %llu objects, %s\n", (unsigned long long)rep.unreachable,
	       format_size(rep.unreachable_bytes, b, sizeof(b)));
	if (dry) {
		printf("would move aside %llu objects (%s); %llu aside now (%s)\n",
		       (unsigned long long)rep.moved, format_size(rep.moved_bytes, a, sizeof(a)),
		       (unsigned long long)rep.deleted, format_size(rep.deleted_bytes, d, sizeof(d)));
		return 0;
	}
	if (rep.phase_one)
		printf("phase one    moved %llu objects aside (%s)\n", (unsigned long long)rep.moved,
		       format_size(rep.moved_bytes, a, sizeof(a)));
	if (rep.phase_two)
		printf("phase two    deleted %llu objects (%s), brought back %llu\n",
		       (unsigned long long)rep.deleted, format_size(rep.deleted_bytes, d, sizeof(d)),
		       (unsigned long long)rep.restored);
	if (rep.waiting)
		printf("phase two waits for %llu lease(s) and until %lld (store clock): run "
		       "`lazyroot store gc` again later\n", (unsigned long long)rep.leases_waited,
		       (long long)rep.phase_two_at);
	printf("%llu operations, %.2f s\n", (unsigned long long)rep.operations, rep.seconds);
	return 0;
}

/* ---- verify --------------------------------------------------------------------- */

/* One problem line: what, then arg (an object's name, or ""). */
static int add_problem(struct buf *list, unsigned *n, const char *what, const char *arg)
{
	(*n)++;
	if (*n > 20)
		return 0;   /* a report, not a dump: the count says the rest */
	return buf_printf(list, "  %s%s\n", what, arg) < 0 ? -ENOMEM : 0;
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct store_entry *)a)->key, ((const struct store_entry *)b)->key);
}

static bool sampled(const uint8_t name[HASH_SIZE], double percent)
{
	uint64_t v;

	memcpy(&v, name + 8, sizeof(v));
	return (double)(v % 1000000) < percent * 10000.0;
}

static int verify_tag(struct store *s, const char *tag, const struct store_entry *chunks,
                      size_t nchunks, double percent, json_t *report, ZSTD_DCtx *dctx,
                      unsigned *ret_bad)
{
	_cleanup_(buf_freep) struct buf idx = BUF_INIT, list = BUF_INIT, raw = BUF_INIT;
	struct image *img = NULL;
	struct image_info info = { 0 };
	char hex[HASH_HEX_SIZE] = "", key[64];
	unsigned problems = 0, aside = 0, checked = 0;
	uint8_t *out = NULL;
	int r;

	r = store_resolve(s, tag, hex);
	if (r < 0) {
		add_problem(&list, &problems, "tag unreadable", "");
		goto report;
	}
	r = store_get_index(s, hex, &idx);
	if (r == 0)
		r = image_open_mem(idx.data, idx.len, &img);
	if (r == 0)
		r = image_verify(img);
	if (r < 0) {
		add_problem(&list, &problems, r == -ENOENT ? "missing index " : "corrupt index ",
		            hex);
		goto report;
	}
	image_get_info(img, &info);
	for (uint32_t i = 0; i < info.chunks; i++) {
		struct image_chunk c;
		struct store_entry want, *e;
		char h[HASH_HEX_SIZE];

		if (image_chunk(img, i, &c) < 0) {
			add_problem(&list, &problems, "corrupt chunk table", "");
			break;
		}
		hex_encode(c.name, HASH_SIZE, h);
		snprintf(key, sizeof(key), "chunks/%s", h);
		want.key = key;
		e = nchunks ? bsearch(&want, chunks, nchunks, sizeof(*chunks), cmp_entry) : NULL;
		if (!e) {
			/* not in the listing: written since, or aside (a collection under way) */
			char ak[80];
			int64_t sz = store_head_sync(s, key);

			if (sz == -ENOENT && store_aside_key(key, ak, sizeof(ak)) == 0 &&
			    store_head_sync(s, ak) == (int64_t)c.stored_size) {
				aside++;
				continue;
			}
			if (sz != (int64_t)c.stored_size) {
				add_problem(&list, &problems, sz == -ENOENT ? "missing " :
				            "wrong size ", key);
				continue;
			}
		} else if (e->size != (int64_t)c.stored_size) {
			add_problem(&list, &problems, "wrong size ", key);
			continue;
		}
		if (percent <= 0 || !sampled(c.name, percent))
			continue;
		checked++;
		r = store_get_sync(s, key, &raw);
		if (r == 0) {
			free(out);
			out = malloc(c.size ? c.size : 1);
			r = out ? chunk_decode(dctx, c.name, c.flags, c.size, raw.data, raw.len, out) :
			          -ENOMEM;
		}
		if (r < 0)
			add_problem(&list, &problems, r == -EBADMSG ? "corrupt " : "unreadable ",
			            key);
	}
report:
	free(out);
	image_free(img);
	if (report) {
		json_t *details = json_array();

		if (list.len) {
			/* one problem per line → JSON strings */
			char *p = (char *)list.data, *nl;

			while (details && *p && (nl = strchr(p, '\n'))) {
				if (json_array_append_new(details, json_text(p, (size_t)(nl - p))) < 0) {
					json_decref(details);
					details = NULL;
				}
				p = nl + 1;
			}
		}
		if (json_array_append_new(report, json_pack("{s:o, s:s, s:o, s:i, s:i, s:i, s:o}",
		                          "tag", json_text(tag, strlen(tag)), "index", hex,
		                          "chunks", json_u64(info.chunks), "aside", (int)aside,
		                          "data_checked", (int)checked, "problems", (int)problems,
		                          "details", details)) < 0)
			r = -ENOMEM;
	} else {
		printf("%-40s %s  %llu chunks", tag, *hex ? hex : "-", (unsigned long long)info.chunks);
		if (checked)
			printf(", %u re-hashed", checked);
		if (aside)
			printf(", %u aside (a collection is under way)", aside);
		printf(problems ? ", %u PROBLEM(S)\n" : ", ok\n", problems);
		if (list.len)
			printf("%s", (char *)list.data);
	}
	*ret_bad += problems ? 1 : 0;
	return 0;
}

static int store_verify_cmd(struct store *s, double percent, bool json)
{
	struct store_entry *chunks = NULL;
	size_t nchunks = 0, ntags = 0;
	char **tags = NULL;
	unsigned bad = 0;
	json_t *out;
	ZSTD_DCtx *dctx = ZSTD_createDCtx();
	int r;

	if (!dctx)
		return -ENOMEM;
	r = store_list_sync(s, "tags/", &tags, &ntags);
	if (r < 0) {
		ZSTD_freeDCtx(dctx);
		return log_errno(r, "store '%s': listing tags", store_url(s));
	}
	r = store_scan_sync(s, "chunks/", &chunks, &nchunks);
	if (r < 0) {
		/* no listing (e.g. a plain web server): a HEAD per chunk */
		chunks = NULL;
		nchunks = 0;
	}
	out = json ? json_array() : NULL;
	r = json && !out ? -ENOMEM : 0;
	for (size_t i = 0; r == 0 && i < ntags; i++)
		verify_tag(s, tags[i] + 5, chunks, nchunks, percent, out, dctx, &bad);
	if (json && r == 0)
		r = json_pack_file(stdout, "{s:O, s:i}", "tags", out, "bad_tags", (int)bad);
	else if (bad)
		printf("%u of %zu tags have problems\n", bad, ntags);
	fflush(stdout);
	json_decref(out);
	store_entries_free(chunks, nchunks);
	store_names_free(tags);
	ZSTD_freeDCtx(dctx);
	if (r < 0)
		return log_errno(r, "store '%s': verify", store_url(s));
	if (bad)
		return log_error(-EBADMSG, "store '%s': %u of %zu tags have problems", store_url(s),
		                 bad, ntags);
	return 0;
}

int cmd_store(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "store", required_argument, NULL, 's' },
		{ "s3-endpoint", required_argument, NULL, 'e' },
		{ "grace", required_argument, NULL, 'g' },
		{ "lease-ttl", required_argument, NULL, 'l' },
		{ "data", required_argument, NULL, 'd' },
		{ "dry-run", no_argument, NULL, 'n' },
		{ "wait", no_argument, NULL, 'w' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	const char *verb;
	char cmd[32];
	struct tools_flags fl = { 0 };
	_cleanup_(node_config_destroy) struct node_config cfg = { 0 };
	struct store_options so;
	int64_t grace = STORE_GC_GRACE_DEFAULT;
	uint64_t ttl = 0;
	double percent = 0;
	bool dry = false, wait = false, json = false;
	struct store *s = NULL;
	char *end;
	int c, r;

	if (argc < 2)
		return tools_usage_error("store", "no verb given (gc, verify)");
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return 0;
	}
	verb = argv[1];
	if (strcmp(verb, "gc") && strcmp(verb, "verify"))
		return tools_usage_error("store", verb[0] == '-' ? "unknown option '%s'" :
		                         "unknown verb '%s'", verb);
	snprintf(cmd, sizeof(cmd), "store %s", verb);
	optind = 1;
	while ((c = getopt_long(argc - 1, argv + 1, "h", opts, NULL)) != -1) {
		switch (c) {
		case 's': tools_flag(&fl, "--store", optarg); break;
		case 'e': tools_flag(&fl, "--s3-endpoint", optarg); break;
		case 'g':
			if (parse_grace(optarg, &grace) < 0) {
				log_error(-EINVAL, "--grace '%s': want a duration (90s, 30m, 1h, 2d)", optarg);
				return 2;
			}
			break;
		case 'l':
			if (parse_uint(optarg, 86400, &ttl) < 0 || ttl < 2) {
				log_error(-EINVAL, "--lease-ttl '%s': want 2 to 86400 seconds", optarg);
				return 2;
			}
			break;
		case 'd':
			errno = 0;
			percent = strtod(optarg, &end);
			if (errno || end == optarg || *end || percent < 0 || percent > 100) {
				log_error(-EINVAL, "--data '%s': want a percentage, 0 to 100", optarg);
				return 2;
			}
			break;
		case 'n': dry = true; break;
		case 'w': wait = true; break;
		case 'j': json = true; break;
		case 'h': usage(stdout); return 0;
		default: return tools_option_error(cmd, argv + 1, "h", opts);
		}
	}
	if (optind != argc - 1)
		return tools_usage_error(cmd, "unexpected argument '%s'", argv[1 + optind]);
	if (tools_settings(&fl, &cfg) < 0)
		return 2;
	r = tools_store_open(&cfg, &so, false, &s);
	if (r < 0)
		return 1;
	if (!strcmp(verb, "gc"))
		r = store_gc_cmd(s, grace, dry, wait, (unsigned)ttl, json);
	else
		r = store_verify_cmd(s, percent, json);
	store_free(s);
	return r < 0 ? 1 : 0;
}
