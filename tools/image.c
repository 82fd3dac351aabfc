/*
 * image.c — `lazyroot image ls|inspect|extract|pack`: reading images in a
 * store without mounting them, and writing an image's pack.  Extract verifies every chunk it reads and writes the
 * tree back with everything the index holds (owners, modes, times with
 * nanoseconds, devices, hard links, holes, extended attributes).
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <zstd.h>

#include "chunker/chunker.h"
#include "image/image.h"
#include "lib/lib.h"
#include "store/store.h"
#include "tools/tools.h"

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot image ls [--store URL] [--s3-endpoint URL] [--json]\n"
	        "       lazyroot image inspect REF [--store URL] [--s3-endpoint URL] [--json]\n"
	        "       lazyroot image extract REF DIR [--store URL] [--s3-endpoint URL]\n"
	        "       lazyroot image pack REF [--store URL] [--json]\n"
	        "\n"
	        "REF is NAME[:TAG] or an index name (32 hex digits).\n"
	        "  ls        the tags in the store and the index each names\n"
	        "  inspect   entries, bytes, chunks, chunk-size histogram and config\n"
	        "  extract   write the image's tree into DIR (new or empty), verifying\n"
	        "            every chunk read\n"
	        "  pack      write the image's pack: its chunks, checked, in one file that\n"
	        "            a mount reads its misses from (dir: stores only)\n"
	        "\n"
	        "  --store URL   chunk store (default: $LAZYROOT_STORE, else %s)\n"
	        "  --s3-endpoint URL\n"
	        "                endpoint of s3:// stores (default: $AWS_ENDPOINT_URL_S3,\n"
	        "                else $AWS_ENDPOINT_URL, else AWS)\n"
	        "  --config FILE the node's settings (default: $LAZYROOT_CONFIG, else\n"
	        "                %s; docs/settings.md)\n"
	        "  --json        machine-readable output\n",
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

/* ---- ls ----------------------------------------------------------------- */

static int image_ls(struct store *s, bool json)
{
	char **names = NULL;
	size_t n;
	int r;

	r = store_list_sync(s, "tags/", &names, &n);
	if (r < 0)
		return log_errno(r, "store '%s': listing tags", store_url(s));
	if (json)
		printf("[");
	for (size_t i = 0; i < n; i++) {
		char hex[HASH_HEX_SIZE];
		const char *ref = names[i] + 5;

		if (store_resolve(s, ref, hex) < 0)
			snprintf(hex, sizeof(hex), "?");
		if (json) {
			printf("%s{\"ref\":", i ? "," : "");
			tools_json_string(stdout, ref, strlen(ref));
			printf(",\"index\":\"%s\"}", hex);
		} else {
			printf("%-40s %s\n", ref, hex);
		}
	}
	if (json)
		printf("]\n");
	store_names_free(names);
	return 0;
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
		bool first = true;

		printf("{\"index\":\"%s\",\"version\":%u,\"entries\":%llu,\"inodes\":%llu,"
		       "\"files\":%llu,\"directories\":%llu,\"symlinks\":%llu,\"other\":%llu,"
		       "\"file_bytes\":%llu,\"chunks\":%llu,\"chunk_bytes\":%llu,\"stored_bytes\":%llu,"
		       "\"index_bytes\":%zu,\"chunk_size_histogram\":{",
		       l.hex, info.version, (unsigned long long)info.entries,
		       (unsigned long long)info.inodes, (unsigned long long)types[0],
		       (unsigned long long)types[1], (unsigned long long)types[2],
		       (unsigned long long)types[3], (unsigned long long)info.file_bytes,
		       (unsigned long long)info.chunks, (unsigned long long)info.data_bytes,
		       (unsigned long long)info.stored_bytes, l.data.len);
		for (unsigned i = 0; i < 32; i++) {
			if (!hist[i])
				continue;
			printf("%s\"%llu\":%llu", first ? "" : ",", 1ULL << i, (unsigned long long)hist[i]);
			first = false;
		}
		printf("},\"config\":");
		if (cfglen)
			fwrite(cfg, 1, cfglen, stdout);
		else
			printf("null");
		printf("}\n");
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
	return 0;
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
};

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

static int image_extract(struct store *s, const char *ref, const char *dir)
{
	struct loaded l = { 0 };
	struct extractor x = { .s = s, .root = geteuid() == 0 };
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
	x.first_path = calloc(info.inodes + 1, sizeof(*x.first_path));
	x.dctx = ZSTD_createDCtx();
	if (!x.first_path || !x.dctx) {
		r = -ENOMEM;
		goto out;
	}
	r = extract_entry(&x, dir, IMAGE_ROOT_INO);
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
			printf("{\"index\":\"%s\",\"chunks\":%llu,\"bytes\":%llu}\n", l.hex,
			       (unsigned long long)info.chunks, (unsigned long long)bytes);
		else
			printf("packs/%s: %llu chunks, %s\n", l.hex, (unsigned long long)info.chunks,
			       format_size(bytes, sz, sizeof(sz)));
	}
	loaded_free(&l);
	return r;
}

int cmd_image(int argc, char **argv)
{
	_cleanup_(tools_verb_done) struct tools_verb o = { 0 };
	struct store_options so;
	const char *verb;
	struct store *s = NULL;
	int r, nargs;

	r = tools_verb_parse(argc, argv, usage, &o);
	if (r >= 0)
		return r;
	verb = o.verb;
	argv = o.args;
	nargs = o.nargs;
	if (!strcmp(verb, "ls") ? nargs != 0 :
	    !strcmp(verb, "inspect") ? nargs != 1 :
	    !strcmp(verb, "extract") ? nargs != 2 :
	    !strcmp(verb, "pack") ? nargs != 1 : 1) {
		usage(stderr);
		return 2;
	}
	r = tools_store_open(&o.cfg, &so, &s);
	if (r < 0)
		return 1;
	if (!strcmp(verb, "ls"))
		r = image_ls(s, o.json);
	else if (!strcmp(verb, "inspect"))
		r = image_inspect(s, argv[0], o.json);
	else if (!strcmp(verb, "pack"))
		r = image_pack(s, argv[0], o.json);
	else
		r = image_extract(s, argv[0], argv[1]);
	store_free(s);
	if (r < 0 && !strcmp(verb, "extract"))
		log_error(r, "extract '%s' to '%s': failed", argv[0], argv[1]);
	return r < 0 ? 1 : 0;
}
