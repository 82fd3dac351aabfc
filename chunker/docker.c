/*
 * docker.c — `docker save` archives: the outer tar is unpacked into a
 * private directory under $TMPDIR (removed afterwards, whatever happens),
 * then read the way `docker load` reads it: manifest.json names the config
 * and the layers (each a tar, possibly compressed).  An archive without
 * manifest.json but with an OCI layout (oci-layout, index.json: `podman save
 * --format oci-archive`, or a tarred layout) goes to the OCI walker.
 * Archives from docker 25 and later carry both; manifest.json is preferred
 * because it lists exactly the blobs present, whereas their index.json may
 * name platforms whose blobs were not saved.
 *
 * The unpacking refuses to follow symlinks while creating files, and every
 * later open goes through open_beneath(), so a hostile archive can neither
 * write nor read outside the private directory.  Blobs named by digest
 * (blobs/sha256/<hex>, <hex>.json) are verified; legacy layer directories are
 * not named by a digest and cannot be.
 */
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <sys/stat.h>

#include "chunker/chunker-internal.h"
#include "chunker/chunker.h"
#include "lib/json.h"
#include "lib/lib.h"
#include "lib/sha256.h"

#define DOCKER_JSON_MAX (8u << 20)

/* ---- unpacking the outer tar --------------------------------------------------- */

/* The directory holding path's last component (created as needed, never
 * through a symlink) and where that component starts. */
static int open_parent(int root, const char *path, bool create, const char **ret_base)
{
	char comp[NAME_MAX + 1];
	const char *p = path, *slash;
	int fd = dup(root);

	if (fd < 0)
		return -errno;
	while ((slash = strchr(p, '/'))) {
		size_t n = (size_t)(slash - p);
		int next;

		if (n > NAME_MAX) {
			close(fd);
			return -ENAMETOOLONG;
		}
		memcpy(comp, p, n);
		comp[n] = 0;
		if (create && mkdirat(fd, comp, 0700) < 0 && errno != EEXIST) {
			int e = -errno;

			close(fd);
			return e;
		}
		next = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		close(fd);
		if (next < 0)
			return -errno;
		fd = next;
		p = slash + 1;
	}
	*ret_base = p;
	return fd;
}

static int extract_file(struct tar_reader *rd, int dirfd, const char *base, uint64_t size)
{
	_cleanup_close_ int fd = -1;
	int r;

	(void)unlinkat(dirfd, base, 0);
	fd = openat(dirfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	for (;;) {
		const void *data;
		size_t len;
		uint64_t hole;

		r = tar_reader_read(rd, &data, &len, &hole);
		if (r < 0)
			return r;
		if (r == 0)
			break;
		if (data)
			r = write_full(fd, data, len);
		else if (lseek(fd, (off_t)hole, SEEK_CUR) < 0)
			r = -errno;
		if (r < 0)
			return r;
	}
	if (ftruncate(fd, (off_t)size) < 0)
		return -errno;
	return 0;
}

static int extract_entry(struct tar_reader *rd, int root, const char *name,
                         const struct tar_entry *e)
{
	char path[PATH_MAX], target[PATH_MAX];
	const char *base, *tbase;
	_cleanup_close_ int dfd = -1, tfd = -1;
	int r;

	r = image_path_normalize(e->path, path, sizeof(path));
	if (r < 0)
		return log_error(-EINVAL, "%s: member '%s': name leaves the archive root", name,
		                 e->path);
	if (!path[0])
		return 0;
	if (e->type == '5') {
		char dir[PATH_MAX + 2];

		snprintf(dir, sizeof(dir), "%s/", path);
		dfd = open_parent(root, dir, true, &base);
		return dfd < 0 ? log_errno(dfd, "%s: unpack '%s'", name, e->path) : 0;
	}
	if (e->type != '0' && e->type != '1' && e->type != '2')
		return 0;  /* devices and fifos have no place in an image archive */

	dfd = open_parent(root, path, true, &base);
	if (dfd < 0)
		return log_errno(dfd, "%s: unpack '%s'", name, e->path);
	if (e->type == '0')
		r = extract_file(rd, dfd, base, e->size);
	else if (e->type == '2') {
		(void)unlinkat(dfd, base, 0);
		r = symlinkat(e->linkpath, dfd, base) < 0 ? -errno : 0;
	} else {
		r = image_path_normalize(e->linkpath, target, sizeof(target));
		if (r < 0)
			return log_error(-EINVAL, "%s: member '%s': link target leaves the archive root",
			                 name, e->path);
		tfd = open_parent(root, target, false, &tbase);
		r = tfd < 0 ? tfd : 0;
		if (r >= 0) {
			(void)unlinkat(dfd, base, 0);
			r = linkat(tfd, tbase, dfd, base, 0) < 0 ? -errno : 0;
		}
	}
	if (r == -EPIPE || r == -EBADMSG)
		return r;  /* the reader logged it */
	if (r < 0)
		return log_errno(r, "%s: unpack '%s'", name, e->path);
	return 0;
}

static int unpack(const char *path, int root)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct tar_reader *rd = NULL;
	int r;

	if (fd < 0)
		return log_errno(-errno, "%s", path);
	r = tar_reader_new(fd, path, &rd);
	if (r < 0)
		return r;
	for (;;) {
		const struct tar_entry *e;

		r = tar_reader_next(rd, &e);
		if (r <= 0)
			break;
		r = extract_entry(rd, root, path, e);
		if (r < 0)
			break;
	}
	if (r >= 0)
		r = tar_reader_finish(rd, NULL);
	tar_reader_free(rd);
	return r;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(p);
	else
		unlink(p);
	return 0;
}

/* ---- manifest.json --------------------------------------------------------------- */

/* The digest a member name carries, if any: blobs/sha256/<hex> or <hex>.json. */
static bool digest_of(const char *path, char hex[65])
{
	const char *h = NULL;
	size_t i;

	if (strncmp(path, "blobs/sha256/", 13) == 0 && strlen(path) == 13 + 64)
		h = path + 13;
	else if (strlen(path) == 64 + 5 && strcmp(path + 64, ".json") == 0)
		h = path;
	if (!h)
		return false;
	for (i = 0; i < 64; i++)
		if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
			return false;
	memcpy(hex, h, 64);
	hex[64] = 0;
	return true;
}

static int check_hash(const char *name, const char *member, const char *hex, struct sha256 *h)
{
	uint8_t d[SHA256_SIZE];
	char got[SHA256_HEX_SIZE];

	if (sha256_final(h, d) < 0)
		return log_error(-EIO, "%s: '%s': libcrypto failed to hash it", name, member);
	hex_encode(d, sizeof(d), got);
	if (strcmp(got, hex) != 0)
		return log_error(-EBADMSG, "%s: '%s': digest mismatch (content is sha256:%s)", name,
		                 member, got);
	return 0;
}

static int read_member(int root, const char *name, const char *member, struct buf *out)
{
	_cleanup_close_ int fd = open_beneath(root, member, O_RDONLY);
	struct stat st;
	ssize_t n;
	int r;

	if (fd < 0)
		return log_errno(fd, "%s: '%s'", name, member);
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return log_error(-EBADMSG, "%s: '%s' is not a regular file", name, member);
	if ((uint64_t)st.st_size > DOCKER_JSON_MAX)
		return log_error(-EFBIG, "%s: '%s' too large", name, member);
	r = buf_reserve(out, (size_t)st.st_size);
	if (r < 0)
		return log_errno(r, "%s", name);
	n = read_full(fd, out->data, (size_t)st.st_size);
	if (n < 0)
		return log_errno((int)n, "%s: '%s'", name, member);
	out->len = (size_t)n;
	out->data[n] = 0;
	return 0;
}

static int parse_member(const char *name, const char *member, const struct buf *data,
                        json_t **ret)
{
	char what[PATH_MAX + 64];

	snprintf(what, sizeof(what), "%s: '%s'", name, member);
	return json_parse_logged(data->data, data->len, what, ret);
}

static int apply_layer(struct build *b, int root, const char *name, const char *member,
                       unsigned i)
{
	_cleanup_close_ int fd = -1;
	struct tar_reader *rd = NULL;
	char lname[PATH_MAX * 2], hex[65];
	bool verify = digest_of(member, hex);
	_cleanup_sha256_ struct sha256 h = SHA256_INIT;
	int r;

	fd = open_beneath(root, member, O_RDONLY);
	if (fd == -ENOENT)
		return log_error(fd, "%s: missing layer '%s'", name, member);
	if (fd < 0)
		return log_errno(fd, "%s: layer '%s'", name, member);
	snprintf(lname, sizeof(lname), "%s: %s", name, member);
	image_tree_set_layer(build_tree(b), i);
	r = tar_reader_new(fd, lname, &rd);
	if (r < 0)
		return r;
	if (verify) {
		(void)sha256_init(&h);   /* a failure is check_hash's */
		tar_reader_hash(rd, &h);
	}
	r = tar_apply(b, rd, lname, true);
	if (r >= 0)
		r = tar_reader_finish(rd, NULL);
	tar_reader_free(rd);
	if (r >= 0 && verify)
		r = check_hash(name, member, hex, &h);
	return r;
}

static int apply_manifest(struct build *b, int root, const char *name)
{
	_cleanup_(buf_freep) struct buf mraw = BUF_INIT, craw = BUF_INIT;
	json_t *m = NULL, *config = NULL;
	const json_t *img, *layers;
	const char *cfg;
	char hex[65];
	size_t i;
	int r;

	r = read_member(root, name, "manifest.json", &mraw);
	if (r < 0)
		return r;
	r = parse_member(name, "manifest.json", &mraw, &m);
	if (r < 0)
		return r;
	r = -EBADMSG;
	if (!json_is_array(m) || json_array_size(m) == 0) {
		log_error(r, "%s: manifest.json lists no image", name);
		goto out;
	}
	if (json_array_size(m) > 1) {
		log_error(r, "%s: manifest.json lists %zu images; save one image per archive", name,
		          json_array_size(m));
		goto out;
	}
	img = json_array_get(m, 0);
	cfg = json_get_cstr(img, "Config");
	layers = json_object_get(img, "Layers");
	if (!cfg || !json_is_array(layers)) {
		log_error(r, "%s: manifest.json: no Config or Layers", name);
		goto out;
	}
	r = read_member(root, name, cfg, &craw);
	if (r < 0)
		goto out;
	if (digest_of(cfg, hex)) {
		_cleanup_sha256_ struct sha256 h = SHA256_INIT;

		(void)sha256_init(&h);
		sha256_update(&h, craw.data, craw.len);
		r = check_hash(name, cfg, hex, &h);
		if (r < 0)
			goto out;
	}
	r = parse_member(name, cfg, &craw, &config);
	if (r < 0)
		goto out;
	r = image_tree_set_config(build_tree(b), craw.data, craw.len);
	if (r < 0) {
		log_errno(r, "%s: config", name);
		goto out;
	}
	for (i = 0; i < json_array_size(layers); i++) {
		const char *l = json_cstr(json_array_get(layers, i));

		if (!l) {
			r = log_error(-EBADMSG, "%s: manifest.json: layer %zu is not a path", name, i);
			goto out;
		}
		r = apply_layer(b, root, name, l, (unsigned)i);
		if (r < 0)
			goto out;
	}
	r = 0;
out:
	json_decref(m);
	json_decref(config);
	return r;
}

int docker_build(struct build *b, const char *path, const char *platform)
{
	const char *tmp = build_get_params(b)->tmp_dir;
	char dir[PATH_MAX];
	int root, r;

	if (!tmp || !tmp[0])
		tmp = "/tmp";
	if ((size_t)snprintf(dir, sizeof(dir), "%s/lazyroot-docker-XXXXXX", tmp) >= sizeof(dir))
		return log_error(-ENAMETOOLONG, "scratch directory '%s': too long", tmp);
	if (!mkdtemp(dir))
		return log_errno(-errno, "%s: create a scratch directory in %s", path, tmp);
	root = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root < 0) {
		r = log_errno(-errno, "%s", dir);
		goto out;
	}
	r = unpack(path, root);
	if (r < 0)
		goto out;
	if (faccessat(root, "manifest.json", F_OK, AT_SYMLINK_NOFOLLOW) == 0)
		r = apply_manifest(b, root, path);
	else if (faccessat(root, "oci-layout", F_OK, AT_SYMLINK_NOFOLLOW) == 0)
		r = oci_build(b, root, path, platform);
	else
		r = log_error(-EINVAL, "%s: not an image archive (no manifest.json or oci-layout)",
		              path);
out:
	if (root >= 0)
		close(root);
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	return r;
}

int source_docker(struct build *b, const char *path)
{
	return docker_build(b, path, NULL);
}
