/*
 * image.c — `lazyroot image ls|inspect|extract|pack`: reading images in a
 * store without mounting them, and writing an image's pack.  Extract verifies every chunk it reads and writes the
 * tree back with everything the index holds (owners, modes, times with
 * nanoseconds, devices, hard links, holes, extended attributes).
 */
#include <dirent.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <zstd.h>

#include "chunker/chunker.h"
#include "image/image.h"
#include "lib/json.h"
#include "lib/lib.h"
#include "lib/sha256.h"
#include "node/config.h"
#include "lib/loop.h"
#include "store/store.h"
#include "tools/tools.h"

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot image ls [--store URL] [--s3-endpoint URL] [--json]\n"
	        "       lazyroot image inspect REF [--store URL] [--s3-endpoint URL] [--json]\n"
	        "       lazyroot image extract REF DIR [--store URL] [--s3-endpoint URL] [--json]\n"
	        "                                      [--no-progress]\n"
	        "       lazyroot image pack REF [--store URL] [--json]\n"
	        "       lazyroot image rm REF... [--store URL] [--s3-endpoint URL] [--json]\n"
	        "       lazyroot image copy REF --from URL --to URL [--s3-endpoint URL] [--json]\n"
	        "       lazyroot image sign NAME[:TAG] --key FILE [--expires DURATION] [--store URL]\n"
	        "\n"
	        "REF is NAME[:TAG] or an index name (32 hex digits).\n"
	        "  ls        the tags in the store and the index each names\n"
	        "  inspect   entries, bytes, chunks, chunk-size histogram and config\n"
	        "  extract   write the image's tree into DIR (new or empty), verifying\n"
	        "            every chunk read\n"
	        "  pack      write the image's pack: its chunks, checked, in one file that\n"
	        "            a mount reads its misses from (dir: stores only)\n"
	        "  rm        remove tags; what only they reached goes at the next\n"
	        "            `lazyroot store gc`, unless a node still mounts it (said then)\n"
	        "  copy      copy an image between stores: the chunks the target lacks (checked,\n"
	        "            many at once), then the index, its profile and pack, then the tag\n"
	        "            and its signature\n"
	        "  sign      sign the tag with the private key FILE (`lazyroot key generate`):\n"
	        "            the index it names now, the next version, valid for DURATION\n"
	        "            (a number with s, m or h; default 90 days; 0: already expired)\n"
	        "\n"
	        "  --store URL   chunk store (default: $LAZYROOT_STORE, else %s)\n"
	        "  --s3-endpoint URL\n"
	        "                endpoint of s3:// stores (default: $AWS_ENDPOINT_URL_S3,\n"
	        "                else $AWS_ENDPOINT_URL, else AWS)\n"
	        "  --config FILE the node's settings (default: $LAZYROOT_CONFIG, else\n"
	        "                %s; docs/settings.md)\n"
	        "  --json        machine-readable output\n"
	        "  --no-progress no progress bar (extract) even on a terminal\n",
	        STORE_DEFAULT_URL, NODE_CONFIG_DEFAULT_PATH);
}

/* An opened image: the index bytes and the reader over them. */
struct loaded {
	struct buf data;
	struct image *img;
	char hex[HASH_HEX_SIZE];
};

static void loaded_free(struct loaded *l)
{
	image_free(l->img);
	buf_free(&l->data);
}

static int load_image(struct store *s, const char *ref, struct loaded *l)
{
	int r;

	r = store_resolve(s, ref, l->hex);
	if (r < 0)
		return r;
	r = store_get_index(s, l->hex, &l->data);
	if (r < 0)
		return r;
	r = image_open_mem(l->data.data, l->data.len, &l->img);
	if (r == 0)
		r = image_verify(l->img);
	if (r < 0)
		return log_errno(r, "image '%s': index %s is corrupt", ref, l->hex);
	return 0;
}

static bool is_index_name(const char *ref)
{
	if (strlen(ref) != 32)
		return false;
	for (const char *p = ref; *p; p++)
		if (!strchr("0123456789abcdef", *p))
			return false;
	return true;
}

/* ---- ls ----------------------------------------------------------------- */

static int image_ls(struct store *s, bool json)
{
	char **names = NULL;
	json_t *list;
	size_t n;
	int r;

	r = store_list_sync(s, "tags/", &names, &n);
	if (r < 0)
		return log_errno(r, "store '%s': listing tags", store_url(s));
	list = json ? json_array() : NULL;
	for (size_t i = 0; i < n; i++) {
		char hex[HASH_HEX_SIZE];
		const char *ref = names[i] + 5;

		if (store_resolve(s, ref, hex) < 0)
			snprintf(hex, sizeof(hex), "?");
		if (!json)
			printf("%-40s %s\n", ref, hex);
		/* a name the store lists need not be UTF-8 (another writer's, a web
		 * server's listing): shown with U+FFFD, the listing stays JSON */
		else if (list && json_array_append_new(list, json_pack("{s:o, s:s}", "ref",
		                                       json_text(ref, strlen(ref)), "index", hex)) < 0)
			r = -EINVAL;
	}
	if (json)
		r = r ?: json_file_add(stdout, json_incref(list));
	json_decref(list);
	store_names_free(names);
	return r;
}

/* ---- inspect ------------------------------------------------------------ */

static int image_inspect(struct store *s, const char *ref, bool json)
{
	struct loaded l = { 0 };
	struct image_info info;
	uint64_t hist[32] = { 0 }, types[8] = { 0 };
	const char *cfg;
	size_t cfglen;
	int r;

	r = load_image(s, ref, &l);
	if (r < 0) {
		loaded_free(&l);
		return r;
	}
	image_get_info(l.img, &info);
	for (uint32_t i = 0; i < info.chunks; i++) {
		struct image_chunk c;
		unsigned bucket = 0;

		if (image_chunk(l.img, i, &c) < 0)
			continue;
		while (bucket < 31 && (1ULL << (bucket + 1)) <= c.size)
			bucket++;
		hist[bucket]++;
	}
	for (uint64_t ino = 1; ino <= info.inodes; ino++) {
		struct image_stat st;

		if (image_getattr(l.img, ino, &st) < 0)
			continue;
		switch (st.mode & S_IFMT) {
		case S_IFREG: types[0]++; break;
		case S_IFDIR: types[1]++; break;
		case S_IFLNK: types[2]++; break;
		default: types[3]++; break;
		}
	}
	image_config(l.img, &cfg, &cfglen);
	if (json) {
		json_t *h = json_object(), *config = NULL;

		for (unsigned i = 0; h && i < 32; i++) {
			char k[24];

			if (!hist[i])
				continue;
			snprintf(k, sizeof(k), "%llu", 1ULL << i);
			if (json_object_set_new(h, k, json_u64(hist[i])) < 0) {
				json_decref(h);
				h = NULL;
			}
		}
		/* the image's config is the JSON document the build was given */
		if (cfglen && json_parse(cfg, cfglen, &config, NULL) < 0)
			config = json_str(cfg, cfglen);
		r = json_pack_file(stdout, "{s:s, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, "
		                   "s:o, s:o, s:o, s:o}", "index", l.hex,
		                   "version", (json_int_t)info.version,
		                   "entries", json_u64(info.entries), "inodes", json_u64(info.inodes),
		                   "files", json_u64(types[0]), "directories", json_u64(types[1]),
		                   "symlinks", json_u64(types[2]), "other", json_u64(types[3]),
		                   "file_bytes", json_u64(info.file_bytes),
		                   "chunks", json_u64(info.chunks),
		                   "chunk_bytes", json_u64(info.data_bytes),
		                   "stored_bytes", json_u64(info.stored_bytes),
		                   "index_bytes", json_u64(l.data.len), "chunk_size_histogram", h,
		                   "config", config ? config : json_null());
	} else {
		char a[32], b[32], c[32];

		printf("index        %s (format version %u, %s)\n", l.hex, info.version,
		       format_size(l.data.len, a, sizeof(a)));
		printf("entries      %llu (%llu inodes: %llu files, %llu directories, %llu symlinks, "
		       "%llu other)\n",
		       (unsigned long long)info.entries, (unsigned long long)info.inodes,
		       (unsigned long long)types[0], (unsigned long long)types[1],
		       (unsigned long long)types[2], (unsigned long long)types[3]);
		printf("file bytes   %s\n", format_size(info.file_bytes, a, sizeof(a)));
		printf("chunks       %llu, %s uncompressed, %s stored\n",
		       (unsigned long long)info.chunks, format_size(info.data_bytes, b, sizeof(b)),
		       format_size(info.stored_bytes, c, sizeof(c)));
		printf("chunk sizes\n");
		for (unsigned i = 0; i < 32; i++)
			if (hist[i])
				printf("  >= %-10s %llu\n", format_size(1ULL << i, a, sizeof(a)),
				       (unsigned long long)hist[i]);
		if (cfglen)
			printf("config       %.*s\n", (int)cfglen, cfg);
	}
	loaded_free(&l);
	return r;
}

/* ---- extract ------------------------------------------------------------ */

#define EXTRACT_CACHE 8

struct extractor {
	struct store *s;
	struct image *img;
	ZSTD_DCtx *dctx;
	struct { uint32_t idx; uint8_t *data; uint32_t size; uint64_t used; } cache[EXTRACT_CACHE];
	uint64_t tick;
	struct buf raw;
	char **first_path;  /* per inode: where a hard-linked inode was first written */
	uint64_t ninodes;
	bool root;          /* may set owners */
	uint64_t entries, bytes;        /* written so far (a hard link's bytes once) */
	uint64_t total_entries, total_bytes;
	bool progress;                  /* a bar on stderr, a terminal */
	uint64_t shown_ns;
};

/* The bar, at most ten times a second (and once more at the end, done). */
static void extract_progress(struct extractor *x, bool done)
{
	char b[32], t[32];
	uint64_t now = now_ns();

	if (!x->progress || (!done && now - x->shown_ns < 100000000))
		return;
	x->shown_ns = now;
	fprintf(stderr, "\r\033[Kentries %llu/%llu  %s/%s%s", (unsigned long long)x->entries,
	        (unsigned long long)x->total_entries, format_size(x->bytes, b, sizeof(b)),
	        format_size(x->total_bytes, t, sizeof(t)), done ? "\n" : "");
}

/* The decoded bytes of chunk idx, from a small cache (packed small files hit
 * the same chunk one after another). */
static int get_chunk(struct extractor *x, uint32_t idx, const uint8_t **ret)
{
	struct image_chunk c;
	char key[64], hex[HASH_HEX_SIZE];
	unsigned victim = 0;
	int r;

	for (unsigned i = 0; i < EXTRACT_CACHE; i++) {
		if (x->cache[i].data && x->cache[i].idx == idx) {
			x->cache[i].used = ++x->tick;
			*ret = x->cache[i].data;
			return 0;
		}
		if (x->cache[i].used < x->cache[victim].used)
			victim = i;
	}
	r = image_chunk(x->img, idx, &c);
	if (r < 0)
		return r;
	hex_encode(c.name, HASH_SIZE, hex);
	snprintf(key, sizeof(key), "chunks/%s", hex);
	r = store_get_sync(x->s, key, &x->raw);
	if (r < 0)
		return log_errno(r, "chunk %s: reading from store '%s'", hex, store_url(x->s));
	free(x->cache[victim].data);
	x->cache[victim].data = malloc(c.size ? c.size : 1);
	if (!x->cache[victim].data)
		return -ENOMEM;
	r = chunk_decode(x->dctx, c.name, c.flags, c.size, x->raw.data, x->raw.len,
	                 x->cache[victim].data);
	if (r < 0) {
		free(x->cache[victim].data);
		x->cache[victim].data = NULL;
		return log_error(-EBADMSG, "chunk %s: content does not match its name", hex);
	}
	x->cache[victim].idx = idx;
	x->cache[victim].size = c.size;
	x->cache[victim].used = ++x->tick;
	*ret = x->cache[victim].data;
	return 0;
}

static int write_data(struct extractor *x, int fd, uint64_t ino, const struct image_stat *st)
{
	int64_t n = image_extent_count(x->img, ino);
	int r;

	if (n < 0)
		return (int)n;
	for (int64_t i = 0; i < n; i++) {
		struct image_extent e;
		struct image_chunk c;
		const uint8_t *data = NULL;

		r = image_extent(x->img, ino, (uint64_t)i, &e);
		if (r < 0)
			return r;
		r = image_chunk(x->img, e.chunk, &c);
		if (r < 0)
			return r;
		if ((uint64_t)e.chunk_off + e.len > c.size || e.file_off + e.len > st->size)
			return -EBADMSG;
		r = get_chunk(x, e.chunk, &data);
		if (r < 0)
			return r;
		r = pwrite_full(fd, data + e.chunk_off, e.len, e.file_off);
		if (r < 0)
			return r;
		x->bytes += e.len;
		extract_progress(x, false);
	}
	return ftruncate(fd, (off_t)st->size) < 0 ? -errno : 0;
}

/* Owner, mode, xattrs, times — in that order: chown clears setuid bits and
 * security.capability, so both come after it. */
static int apply_meta(struct extractor *x, const char *path, uint64_t ino,
                      const struct image_stat *st)
{
	bool lnk = S_ISLNK(st->mode);
	struct timespec ts[2] = { { st->mtime_sec, st->mtime_nsec },
	                          { st->mtime_sec, st->mtime_nsec } };

	if (lchown(path, st->uid, st->gid) < 0 && (x->root || errno != EPERM))
		return -errno;
	if (!lnk && chmod(path, st->mode & 07777) < 0)
		return -errno;
	for (uint32_t i = 0;; i++) {
		const char *name;
		const void *val;
		size_t nl, vl;
		char nbuf[XATTR_NAME_MAX + 1];
		int r = image_xattr(x->img, ino, i, &name, &nl, &val, &vl);

		if (r < 0)
			return r;
		if (r == 0)
			break;
		if (nl >= sizeof(nbuf))
			return -EBADMSG;
		memcpy(nbuf, name, nl);
		nbuf[nl] = 0;
		if (lsetxattr(path, nbuf, val, vl, 0) < 0 && (x->root || errno != EPERM))
			return log_errno(-errno, "'%s': setting xattr %s", path, nbuf);
	}
	if (utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	return 0;
}

static int extract_entry(struct extractor *x, const char *path, uint64_t ino);

static int extract_dir(struct extractor *x, const char *path, uint64_t ino)
{
	for (uint64_t pos = 0;; pos++) {
		const char *name;
		size_t len;
		uint64_t child;
		char cpath[PATH_MAX];
		int r = image_readdir(x->img, ino, pos, &name, &len, &child);

		if (r < 0)
			return r;
		if (r == 0)
			break;
		if (len == 0 || memchr(name, '/', len) || (len == 1 && name[0] == '.') ||
		    (len == 2 && name[0] == '.' && name[1] == '.'))
			return log_error(-EBADMSG, "'%s': the index holds a bad entry name", path);
		if ((size_t)snprintf(cpath, sizeof(cpath), "%s/%.*s", path, (int)len, name) >=
		    sizeof(cpath))
			return log_error(-ENAMETOOLONG, "'%s/%.*s': path too long", path, (int)len, name);
		r = extract_entry(x, cpath, child);
		if (r < 0)
			return r;
	}
	return 0;
}

static int extract_entry(struct extractor *x, const char *path, uint64_t ino)
{
	struct image_stat st;
	int r;

	r = image_getattr(x->img, ino, &st);
	if (r < 0)
		return r;
	x->entries++;
	extract_progress(x, false);
	if (!S_ISDIR(st.mode) && st.nlink > 1 && ino <= x->ninodes && x->first_path[ino]) {
		if (link(x->first_path[ino], path) < 0)
			return log_errno(-errno, "'%s': hard link to '%s'", path, x->first_path[ino]);
		return 0;
	}
	switch (st.mode & S_IFMT) {
	case S_IFDIR:
		if (mkdir(path, 0700) < 0 && !(errno == EEXIST && ino == IMAGE_ROOT_INO))
			return log_errno(-errno, "'%s': mkdir", path);
		r = extract_dir(x, path, ino);
		break;
	case S_IFREG: {
		_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

		if (fd < 0)
			return log_errno(-errno, "'%s': create", path);
		r = write_data(x, fd, ino, &st);
		if (r < 0)
			return log_errno(r, "'%s': writing contents", path);
		break;
	}
	case S_IFLNK: {
		const char *target;
		size_t len;
		_cleanup_free_ char *t = NULL;

		r = image_readlink(x->img, ino, &target, &len);
		if (r < 0)
			return r;
		t = strndup(target, len);
		if (!t)
			return -ENOMEM;
		if (symlink(t, path) < 0)
			return log_errno(-errno, "'%s': symlink", path);
		break;
	}
	case S_IFCHR: case S_IFBLK: case S_IFIFO: case S_IFSOCK:
		if (mknod(path, (st.mode & S_IFMT) | 0600, (dev_t)st.rdev) < 0)
			return log_errno(-errno, "'%s': mknod", path);
		break;
	default:
		return log_error(-EBADMSG, "'%s': unknown file type %o in the index", path, st.mode);
	}
	if (r < 0)
		return r;
	r = apply_meta(x, path, ino, &st);
	if (r < 0)
		return log_errno(r, "'%s': setting owner, mode, xattrs or times", path);
	if (!S_ISDIR(st.mode) && st.nlink > 1 && ino <= x->ninodes &&
	    !(x->first_path[ino] = strdup(path)))
		return -ENOMEM;
	return 0;
}

static int image_extract(struct store *s, const char *ref, const char *dir, bool json,
                         bool progress)
{
	struct loaded l = { 0 };
	struct extractor x = { .s = s, .root = geteuid() == 0,
	                       .progress = progress && !json && isatty(STDERR_FILENO) };
	struct image_info info;
	struct stat st;
	int r;

	if (stat(dir, &st) == 0) {

		DIR *d;
		struct dirent *de;
		int n = 0;

		if (!S_ISDIR(st.st_mode))
			return log_error(-ENOTDIR, "extract to '%s': not a directory", dir);
		d = opendir(dir);
		if (!d)
			return log_errno(-errno, "extract to '%s'", dir);
		while ((de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
				n++;
		closedir(d);
		if (n)
			return log_error(-ENOTEMPTY, "extract to '%s': directory is not empty", dir);
	} else if (errno != ENOENT) {
		return log_errno(-errno, "extract to '%s'", dir);
	}
	r = load_image(s, ref, &l);
	if (r < 0)
		goto out;
	x.img = l.img;
	image_get_info(l.img, &info);
	x.ninodes = info.inodes;
	x.total_entries = info.entries + 1;   /* and the root */
	x.total_bytes = info.file_bytes;
	x.first_path = calloc(info.inodes + 1, sizeof(*x.first_path));
	x.dctx = ZSTD_createDCtx();
	if (!x.first_path || !x.dctx) {
		r = -ENOMEM;
		goto out;
	}
	r = extract_entry(&x, dir, IMAGE_ROOT_INO);
	if (r == 0)
		extract_progress(&x, true);
	else if (x.progress)
		fputc('\n', stderr);
	if (r == 0 && json)
		r = json_pack_file(stdout, "{s:s, s:s, s:o, s:o}", "index", l.hex, "dir", dir,
		                   "entries", json_u64(x.entries), "bytes", json_u64(x.bytes));
out:
	if (x.first_path)
		for (uint64_t i = 0; i <= x.ninodes; i++)
			free(x.first_path[i]);
	free(x.first_path);
	for (unsigned i = 0; i < EXTRACT_CACHE; i++)
		free(x.cache[i].data);
	buf_free(&x.raw);
	ZSTD_freeDCtx(x.dctx);
	loaded_free(&l);
	return r;
}

/* ---- pack ----------------------------------------------------------------- */

static int image_pack(struct store *s, const char *ref, bool json)
{
	struct loaded l = { 0 };
	struct image_info info;
	uint64_t bytes = 0;
	char sz[32];
	int r;

	if (!store_holds_packs(s))
		return log_error(-EOPNOTSUPP, "pack '%s': store '%s' cannot hold packs (only dir: "
		                 "stores can)", ref, store_url(s));
	r = load_image(s, ref, &l);
	if (r == 0)
		r = build_pack(s, l.img, l.hex, &bytes);
	if (r == 0) {
		image_get_info(l.img, &info);
		if (json)
			r = json_pack_file(stdout, "{s:s, s:o, s:o}", "index", l.hex, "chunks",
			                   json_u64(info.chunks), "bytes", json_u64(bytes));
		else
			printf("packs/%s: %llu chunks, %s\n", l.hex, (unsigned long long)info.chunks,
			       format_size(bytes, sz, sizeof(sz)));
	}
	loaded_free(&l);
	return r;
}

/* ---- rm ------------------------------------------------------------------- */

/* After tag ref (naming index hex) went: say so when a node still mounts
 * that index, and no other tag names it, so that the operator knows why gc
 * keeps its objects. */
static void rm_tell_held(struct store *s, const char *ref, const char *hex)
{
	struct store_keys held = { 0 };
	size_t readers = 0;

	if (!*hex || store_leases_held(s, &held, &readers) < 0)
		return;
	if (store_keys_has(&held, hex))
		log_msg(LOG_WARN, "image '%s': tag removed, but a node still mounts its index %s: "
		        "`lazyroot store gc` keeps it while that mount lives", ref, hex);
	store_keys_destroy(&held);
}

static int image_rm(struct store *s, char **refs, int n, bool json)
{
	json_auto_t *removed = json ? json_array() : NULL;
	int r, ret = 0;

	if (json && !removed)
		return log_errno(-ENOMEM, "image rm");

	for (int i = 0; i < n; i++) {
		char key[1200], hex[HASH_HEX_SIZE] = "";

		r = store_tag_key(refs[i], key, sizeof(key));
		if (r < 0) {
			ret = log_error(r, "image '%s': not a valid reference: %s", refs[i],
			                store_ref_invalid(refs[i]) ?: "too long");
			continue;
		}
		/* a HEAD first: S3 answers a DELETE of nothing with success */
		r = (int)store_head_sync(s, key);
		if (r >= 0 && store_resolve(s, refs[i], hex) < 0)
			hex[0] = 0;
		if (r >= 0)
			r = store_delete_sync(s, key);
		if (r == 0)
			rm_tell_held(s, refs[i], hex);
		if (r == 0 && removed &&
		    json_array_append_new(removed, json_pack("{s:o, s:s*}", "tag",
		                          json_str(refs[i], strlen(refs[i])), "index",
		                          *hex ? hex : NULL)) < 0)
			ret = log_errno(-ENOMEM, "image rm");
		if (r == -ENOENT)
			ret = log_error(r, "image '%s': no such tag in store '%s'", refs[i], store_url(s));
		else if (r < 0)
			ret = log_errno(r, "image '%s': removing tag from store '%s'", refs[i],
			                store_url(s));
	}
	/* what went, also when some did not (they are said on stderr) */
	if (removed && json_pack_file(stdout, "{s:O}", "removed", removed) < 0)
		ret = -EIO;
	return ret;
}

/* ---- copy ------------------------------------------------------------------- */

struct copier {
	struct image *img;
	struct image_chunk *chunks;   /* by position in keys */
	ZSTD_DCtx *dctx;
	bool progress;
	uint64_t started;
};

static int copy_check(void *ud, size_t i, const struct buf *data)
{
	struct copier *c = ud;
	const struct image_chunk *ch = &c->chunks[i];
	_cleanup_free_ uint8_t *out = malloc(ch->size ? ch->size : 1);
	char hex[HASH_HEX_SIZE];

	if (!out)
		return -ENOMEM;
	if (chunk_decode(c->dctx, ch->name, ch->flags, ch->size, data->data, data->len, out) < 0) {
		hex_encode(ch->name, HASH_SIZE, hex);
		return log_error(-EBADMSG, "chunk %s: the source's copy does not match its name; "
		                 "nothing of the image was tagged", hex);
	}
	return 0;
}

static void copy_progress(void *ud, const struct store_copy_report *r)
{
	struct copier *c = ud;
	char b[32];
	double secs = (double)(now_ns() - c->started) / 1e9;

	if (!c->progress)
		return;
	fprintf(stderr, "\r\033[Kchunks %llu/%llu  sent %llu (%s)  %.0f MB/s",
	        (unsigned long long)r->done, (unsigned long long)r->objects,
	        (unsigned long long)r->copied, format_size(r->bytes, b, sizeof(b)),
	        secs > 0 ? (double)r->bytes / 1e6 / secs : 0.0);
}

/* A whole small object from src to dst, when src has it: 1 copied, 0 absent. */
static int copy_small(struct store *src, struct store *dst, const char *key)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	int r = store_get_sync(src, key, &b);

	if (r == -ENOENT)
		return 0;
	if (r == 0)
		r = store_put_sync(dst, key, b.data, b.len);
	if (r < 0)
		return log_errno(r, "copying %s from '%s' to '%s'", key, store_url(src), store_url(dst));
	return 1;
}

/* The tag's signature from src to dst, after the tag (store.h, "Signed
 * tags"), when src has one that names the index copied (index: its bytes):
 * 1 copied, 0 none (or one for another index: the tag moved in src since it
 * was read, said). */
static int copy_signature(struct store *src, struct store *dst, const char *ref,
                          const struct buf *index)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	struct store_tag_sig t;
	uint8_t digest[SHA256_SIZE];
	char key[STORE_TAG_NAME_MAX + 16];
	int r = store_tag_sig_get(src, ref, &t);

	if (r == -ENOENT)
		return 0;
	r = r ?: sha256(index->data, index->len, digest);
	if (r < 0)
		return r;
	if (memcmp(digest, t.digest, sizeof(digest))) {
		log_msg(LOG_WARN, "image '%s': the signature in '%s' is for another index; not "
		        "copied (sign the copy with `lazyroot image sign`)", ref, store_url(src));
		return 0;
	}
	r = store_sig_key(ref, key, sizeof(key));
	r = r ?: copy_small(src, dst, key);
	return r;
}

static int image_copy(const char *ref, const char *from, const char *to, bool json,
                      const struct node_config *cfg)
{
	struct store_options so;
	struct store *src = NULL, *dst = NULL;
	struct loop *lp = NULL;
	struct store_lease *lease = NULL;
	struct loaded l = { 0 };
	struct copier c = { .progress = !json && isatty(2), .started = now_ns() };
	struct store_copy_params p = { .check = copy_check, .progress = copy_progress, .ud = &c };
	struct store_copy_report rep = { 0 };
	struct image_info info;
	char **keys = NULL, key[1200];
	uint64_t pack_bytes = 0;
	size_t n = 0;
	bool tagged = false, profile = false, pack = false, signature = false;
	int r;

	/* both stores on one loop, so that reading one and writing the other overlap;
	 * the sync calls below drive it too */
	r = loop_new(256, &lp);
	if (r < 0) {
		lp = NULL;
		log_errno(r, "image copy: setting up");
		goto out;
	}
	node_config_store_options(cfg, &so);
	r = store_open_with(from, &so, &src);
	if (r == 0)
		r = store_create(to, &so, &dst);
	if (r == 0 && ((r = store_set_loop(src, lp)) < 0 || (r = store_set_loop(dst, lp)) < 0))
		log_errno(r, "image copy: setting up");
	if (r == 0)
		r = load_image(src, ref, &l);
	if (r < 0)
		goto out;
	image_get_info(l.img, &info);
	keys = calloc(info.chunks + 1, sizeof(*keys));
	c.chunks = calloc(info.chunks + 1, sizeof(*c.chunks));
	c.dctx = ZSTD_createDCtx();
	if (!keys || !c.chunks || !c.dctx) {
		r = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < info.chunks && r == 0; i++) {
		char hex[HASH_HEX_SIZE];

		r = image_chunk(l.img, i, &c.chunks[n]);
		if (r < 0)
			break;
		hex_encode(c.chunks[n].name, HASH_SIZE, hex);
		if (asprintf(&keys[n], "chunks/%s", hex) < 0) {
			keys[n] = NULL;
			r = -ENOMEM;
		}
		n++;
	}
	if (r < 0)
		goto out;
	/* the lease before the first dedup check (store/GC.md) */
	r = store_lease_take(dst, "copy", 0, &lease);
	if (r < 0)
		goto out;
	r = store_copy_objects(src, dst, keys, n, &p, &rep);
	if (c.progress)
		fputc('\n', stderr);
	if (r < 0)
		goto out;
	r = store_flush(dst);
	if (r < 0) {
		log_errno(r, "store '%s': flushing chunks", to);
		goto out;
	}
	snprintf(key, sizeof(key), "indexes/%s", l.hex);
	r = store_put_sync(dst, key, l.data.data, l.data.len);
	if (r < 0) {
		log_errno(r, "store '%s': writing index %s", to, l.hex);
		goto out;
	}
	snprintf(key, sizeof(key), "profiles/%s", l.hex);
	r = copy_small(src, dst, key);
	if (r < 0)
		goto out;
	profile = r == 1;
	if (store_holds_packs(dst)) {
		snprintf(key, sizeof(key), "packs/%s", l.hex);
		/* the pack goes along when the source has one: written from the
		 * target's own chunk objects, each checked */
		if (store_holds_packs(src) ? store_local_size(src, key) >= 0 :
		                             store_head_sync(src, key) >= 0) {
			r = build_pack(dst, l.img, l.hex, &pack_bytes);
			if (r < 0)
				goto out;
			pack = true;
		}
	}
	r = store_lease_check(lease);
	if (r < 0)
		goto out;
	if (!is_index_name(ref)) {
		char content[40];

		r = store_tag_key(ref, key, sizeof(key));
		snprintf(content, sizeof(content), "%s\n", l.hex);
		if (r == 0)
			r = store_put_sync(dst, key, content, strlen(content));
		if (r < 0) {
			log_errno(r, "store '%s': writing tag '%s'", to, ref);
			goto out;
		}
		tagged = true;
		r = copy_signature(src, dst, ref, &l.data);
		if (r < 0)
			goto out;
		signature = r == 1;
	}
	{
		double secs = (double)(now_ns() - c.started) / 1e9;
		char b[32];

		if (json)
			(void)json_pack_file(stdout, "{s:s, s:o, s:o, s:o, s:o, s:b, s:o, s:b, s:b, s:o}",
			                     "index", l.hex, "chunks", json_u64(rep.objects),
			                     "present", json_u64(rep.present), "sent",
			                     json_u64(rep.copied), "bytes_sent", json_u64(rep.bytes),
			                     "profile", profile, "pack_bytes", json_u64(pack_bytes),
			                     "tagged", tagged, "signed", signature,
			                     "seconds", json_fixed(secs, 3));
		else
			printf("%s → %s: %llu chunks, %llu sent (%s), %llu there already%s%s%s, "
			       "%.2f s\n", ref, to, (unsigned long long)rep.objects,
			       (unsigned long long)rep.copied, format_size(rep.bytes, b, sizeof(b)),
			       (unsigned long long)rep.present, profile ? ", profile" : "",
			       pack ? ", pack" : "", signature ? ", signature" : "", secs);
	}
out:
	store_lease_end(lease);
	for (size_t i = 0; keys && i < n; i++)
		free(keys[i]);
	free(keys);
	free(c.chunks);
	ZSTD_freeDCtx(c.dctx);
	loaded_free(&l);
	store_free(src);
	store_free(dst);
	/* the stores' cancelled polls and timers complete, and free what they hold */
	while (lp && loop_pending(lp) && loop_run_once(lp, true) >= 0)
		;
	loop_free(lp);
	return r;
}

static int image_copy_main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "from", required_argument, NULL, 'f' },
		{ "to", required_argument, NULL, 't' },
		{ "s3-endpoint", required_argument, NULL, 'e' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	const char *from = NULL, *to = NULL;
	struct tools_flags fl = { 0 };
	_cleanup_(node_config_destroy) struct node_config cfg = { 0 };
	bool json = false;
	int ch;

	optind = 1;
	while ((ch = getopt_long(argc - 1, argv + 1, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'f': from = optarg; break;
		case 't': to = optarg; break;
		case 'e': tools_flag(&fl, "--s3-endpoint", optarg); break;
		case 'j': json = true; break;
		case 'h': usage(stdout); return 0;
		default: return tools_option_error("image copy", argv + 1, "h", opts);
		}
	}
	if (!from || !to)
		return tools_usage_error("image copy", "both --from and --to are needed");
	if (optind != argc - 2)
		return tools_usage_error("image copy", optind < argc - 2 ?
		                         "unexpected argument '%s'" : "want one REF%s",
		                         optind < argc - 2 ? argv[optind + 2] : "");
	if (tools_settings(&fl, &cfg) < 0)
		return 2;
	return image_copy(argv[1 + optind], from, to, json, &cfg) < 0 ? 1 : 0;
}

static const char *const image_verbs[] = { "ls", "inspect", "extract", "pack", "rm", "copy", "sign", NULL };

int cmd_image(int argc, char **argv)
{
	_cleanup_(tools_verb_done) struct tools_verb o = { 0 };
	struct store_options so;
	const char *verb;
	struct store *s = NULL;
	int r, nargs;

	if (argc >= 2 && !strcmp(argv[1], "copy"))
		return image_copy_main(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "sign"))
		return cmd_image_sign(argc, argv);
	r = tools_verb_parse(argc, argv, "image", image_verbs, usage, &o);
	if (r >= 0)
		return r;
	verb = o.verb;
	argv = o.args;
	nargs = o.nargs;
	if (!strcmp(verb, "ls") ? nargs != 0 :
	    !strcmp(verb, "inspect") ? nargs != 1 :
	    !strcmp(verb, "extract") ? nargs != 2 :
	    !strcmp(verb, "pack") ? nargs != 1 :
	    nargs < 1)
		return tools_verb_args_error(&o, !strcmp(verb, "ls") ? "" :
		                             !strcmp(verb, "extract") ? "REF DIR" :
		                             !strcmp(verb, "rm") ? "REF..." : "REF");
	r = tools_store_open(&o.cfg, &so, false, &s);
	if (r < 0)
		return 1;
	if (!strcmp(verb, "ls"))
		r = image_ls(s, o.json);
	else if (!strcmp(verb, "inspect"))
		r = image_inspect(s, argv[0], o.json);
	else if (!strcmp(verb, "pack"))
		r = image_pack(s, argv[0], o.json);
	else if (!strcmp(verb, "rm"))
		r = image_rm(s, argv, nargs, o.json);
	else
		r = image_extract(s, argv[0], argv[1], o.json, !o.no_progress);
	store_free(s);
	if (r < 0 && !strcmp(verb, "extract"))
		log_error(r, "extract '%s' to '%s': failed", argv[0], argv[1]);
	return r < 0 ? 1 : 0;
}
