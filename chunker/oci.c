/*
 * oci.c — the OCI image layout walker: oci-layout, index.json, an image
 * index picked by platform when there is one, the manifest, its config (kept
 * verbatim in the image) and its layers applied in order with OCI whiteout
 * semantics.  Docker media types (schema 2 manifests and manifest lists) are
 * accepted beside the OCI ones.
 *
 * Every blob is checked against its descriptor: small JSON blobs before they
 * are parsed, layers while they stream through the build (a layer's digest is
 * known to be bad only at its end; the build then fails, and since the tag is
 * written last, nothing is published).  Files are opened with
 * open_beneath(), so a layout unpacked from a hostile archive cannot point
 * outside itself.
 */
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/utsname.h>

#include "chunker/chunker-internal.h"
#include "chunker/chunker.h"
#include "lib/json.h"
#include "lib/lib.h"
#include "lib/sha256.h"

#define OCI_JSON_MAX (8u << 20)      /* largest index, manifest or config we read */
#define OCI_INDEX_DEPTH 4            /* image indexes nested in image indexes */

#define MT_OCI_INDEX "application/vnd.oci.image.index.v1+json"
#define MT_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define MT_OCI_CONFIG "application/vnd.oci.image.config.v1+json"
#define MT_DOCKER_LIST "application/vnd.docker.distribution.manifest.list.v2+json"
#define MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define MT_DOCKER_CONFIG "application/vnd.docker.container.image.v1+json"

struct oci {
	struct build *b;
	const struct oci_source *src;
	const char *name;
	const char *top;        /* the top document, for messages: "index.json" */
	json_t **docs;     /* parsed documents that candidates point into */
	size_t n_docs;
};

/* An image layout's blobs: files under blobs/sha256/ of the directory. */
struct layout {
	int dirfd;
	const char *name;
};

struct platform {
	char os[32], arch[32], variant[32];
};

struct candidate {
	const json_t *desc;
	struct platform plat;
	bool has_plat;
};

static const char *const layer_types[] = {
	"application/vnd.oci.image.layer.v1.tar",
	"application/vnd.oci.image.layer.v1.tar+gzip",
	"application/vnd.oci.image.layer.v1.tar+zstd",
	"application/vnd.oci.image.layer.nondistributable.v1.tar",
	"application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
	"application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
	"application/vnd.docker.image.rootfs.diff.tar.gzip",
	"application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
};

static bool streq(const char *a, const char *b)
{
	return a && b && strcmp(a, b) == 0;
}

/* "sha256:<64 lowercase hex>" → the hex part. */
static int descriptor(struct oci *o, const json_t *desc, const char *what, char hex[65],
                      uint64_t *ret_size)
{
	const char *digest = json_get_cstr(desc, "digest");
	int64_t size;
	size_t i;

	if (!digest)
		return log_error(-EBADMSG, "%s: %s: descriptor without a digest", o->name, what);
	if (strncmp(digest, "sha256:", 7) != 0)
		return log_error(-EPROTONOSUPPORT, "%s: %s: unsupported digest '%.80s'", o->name,
		                 what, digest);
	for (i = 0; i < 64; i++) {
		char c = digest[7 + i];

		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			break;
	}
	if (i != 64 || digest[7 + 64])
		return log_error(-EBADMSG, "%s: %s: malformed digest '%.80s'", o->name, what,
		                 digest);
	memcpy(hex, digest + 7, 65);
	if (json_int(json_object_get(desc, "size"), &size) < 0 || size < 0)
		return log_error(-EBADMSG, "%s: %s: descriptor %s without a valid size", o->name,
		                 what, digest);
	*ret_size = (uint64_t)size;
	return 0;
}

static int open_blob(struct layout *o, const char *hex, uint64_t size, char *path,
                     size_t pathlen)
{
	struct stat st;
	int fd;

	snprintf(path, pathlen, "blobs/sha256/%s", hex);
	fd = open_beneath(o->dirfd, path, O_RDONLY);
	if (fd == -ENOENT)
		return log_error(fd, "%s: missing blob sha256:%s", o->name, hex);
	if (fd < 0)
		return log_errno(fd, "%s: blob sha256:%s", o->name, hex);
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return log_error(-EBADMSG, "%s: blob sha256:%s is not a regular file", o->name, hex);
	}
	if ((uint64_t)st.st_size != size) {
		close(fd);
		return log_error(-EBADMSG, "%s: blob sha256:%s: size %llu, descriptor says %llu",
		                 o->name, hex, (unsigned long long)st.st_size,
		                 (unsigned long long)size);
	}
	return fd;
}

static int check_digest(const char *name, const char *hex, struct sha256 *h)
{
	uint8_t d[SHA256_SIZE];
	char got[SHA256_HEX_SIZE];

	if (sha256_final(h, d) < 0)
		return log_error(-EIO, "%s: blob sha256:%s: libcrypto failed to hash it", name, hex);
	hex_encode(d, sizeof(d), got);
	if (strcmp(got, hex) != 0)
		return log_error(-EBADMSG, "%s: blob sha256:%s: digest mismatch (content is sha256:%s)",
		                 name, hex, got);
	return 0;
}

static int parse_doc(struct oci *o, const char *what, const struct buf *data,
                     json_t **ret)
{
	char name[PATH_MAX + 64];
	int r;

	snprintf(name, sizeof(name), "%s: %s", o->name, what);
	r = json_parse_logged(data->data, data->len, name, ret);
	if (r < 0)
		return r;
	if (!json_is_object(*ret)) {
		json_decref(*ret);
		*ret = NULL;
		return log_error(-EBADMSG, "%s: %s: not a JSON object", o->name, what);
	}
	return 0;
}

/* A layout's small blob, read whole and verified. */
static int layout_read_doc(void *ctx, bool manifest, const char *hex, uint64_t size,
                           const char *what, struct buf *raw)
{
	struct layout *o = ctx;
	_cleanup_close_ int fd = -1;
	char path[96];
	_cleanup_sha256_ struct sha256 h = SHA256_INIT;
	ssize_t n;
	int r;

	(void)manifest;
	(void)what;
	fd = open_blob(o, hex, size, path, sizeof(path));
	if (fd < 0)
		return fd;
	r = buf_reserve(raw, size);
	if (r < 0)
		return log_errno(r, "%s", o->name);
	n = read_full(fd, raw->data, size);
	if (n < 0)
		return log_errno((int)n, "%s: blob sha256:%s", o->name, hex);
	if ((uint64_t)n != size)
		return log_error(-EBADMSG, "%s: blob sha256:%s: short read", o->name, hex);
	raw->len = size;
	raw->data[size] = 0;
	(void)sha256_init(&h);   /* a failure is sha256_final's */
	sha256_update(&h, raw->data, raw->len);
	return check_digest(o->name, hex, &h);
}

/* Read a small blob whole, verify it, and parse it. */
static int read_json_blob(struct oci *o, const json_t *desc, const char *what, bool manifest,
                          struct buf *raw, json_t **ret)
{
	char hex[65];
	uint64_t size;
	int r;

	r = descriptor(o, desc, what, hex, &size);
	if (r < 0)
		return r;
	if (size > OCI_JSON_MAX)
		return log_error(-EFBIG, "%s: %s sha256:%s too large (%llu bytes)", o->name, what,
		                 hex, (unsigned long long)size);
	r = o->src->read_doc(o->src->ctx, manifest, hex, size, what, raw);
	if (r < 0)
		return r;
	return parse_doc(o, what, raw, ret);
}

static int read_layout_file(struct oci *o, int dirfd, const char *path, json_t **ret)
{
	_cleanup_(buf_freep) struct buf data = BUF_INIT;
	_cleanup_close_ int fd = -1;
	struct stat st;
	ssize_t n;
	int r;

	fd = open_beneath(dirfd, path, O_RDONLY);
	if (fd < 0)
		return log_errno(fd, "%s: %s", o->name, path);
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return log_error(-EBADMSG, "%s: %s is not a regular file", o->name, path);
	if ((uint64_t)st.st_size > OCI_JSON_MAX)
		return log_error(-EFBIG, "%s: %s too large", o->name, path);
	r = buf_reserve(&data, (size_t)st.st_size);
	if (r < 0)
		return log_errno(r, "%s", o->name);
	n = read_full(fd, data.data, (size_t)st.st_size);
	if (n < 0)
		return log_errno((int)n, "%s: %s", o->name, path);
	data.len = (size_t)n;
	return parse_doc(o, path, &data, ret);
}

/* ---- platforms ------------------------------------------------------------------ */

static int parse_platform(const char *s, struct platform *p)
{
	const char *a, *v;

	memset(p, 0, sizeof(*p));
	a = strchr(s, '/');
	if (!a || a == s)
		return -EINVAL;
	v = strchr(a + 1, '/');
	if ((size_t)(a - s) >= sizeof(p->os))
		return -EINVAL;
	memcpy(p->os, s, (size_t)(a - s));
	if (v) {
		if (v == a + 1 || (size_t)(v - a - 1) >= sizeof(p->arch) || !v[1] ||
		    strlen(v + 1) >= sizeof(p->variant) || strchr(v + 1, '/'))
			return -EINVAL;
		memcpy(p->arch, a + 1, (size_t)(v - a - 1));
		strcpy(p->variant, v + 1);
	} else {
		if (!a[1] || strlen(a + 1) >= sizeof(p->arch))
			return -EINVAL;
		strcpy(p->arch, a + 1);
	}
	return 0;
}

static void host_platform(struct platform *p)
{
	static const struct {
		const char *machine, *arch, *variant;
	} map[] = {
		{ "x86_64", "amd64", "" },   { "amd64", "amd64", "" },   { "aarch64", "arm64", "" },
		{ "arm64", "arm64", "" },    { "armv7l", "arm", "v7" },  { "armv6l", "arm", "v6" },
		{ "i386", "386", "" },       { "i686", "386", "" },      { "ppc64le", "ppc64le", "" },
		{ "s390x", "s390x", "" },    { "riscv64", "riscv64", "" }, { "loongarch64", "loong64", "" },
	};
	struct utsname u;
	size_t i;

	memset(p, 0, sizeof(*p));
	strcpy(p->os, "linux");
	if (uname(&u) < 0) {
		strcpy(p->arch, "unknown");
		return;
	}
	for (i = 0; i < ARRAY_SIZE(map); i++)
		if (strcmp(u.machine, map[i].machine) == 0) {
			strcpy(p->arch, map[i].arch);
			strcpy(p->variant, map[i].variant);
			return;
		}
	snprintf(p->arch, sizeof(p->arch), "%.31s", u.machine);
}

static void format_platform(const struct platform *p, char *out, size_t len)
{
	snprintf(out, len, "%s/%s%s%s", p->os, p->arch, p->variant[0] ? "/" : "", p->variant);
}

/* arm64 images often say "v8" where others say nothing: the same thing. */
static bool variant_eq(const struct platform *a, const struct platform *b)
{
	const char *va = a->variant, *vb = b->variant;

	if (strcmp(a->arch, "arm64") == 0) {
		if (streq(va, "v8"))
			va = "";
		if (streq(vb, "v8"))
			vb = "";
	}
	return strcmp(va, vb) == 0;
}

static bool platform_match(const struct platform *want, const struct platform *have)
{
	if (strcmp(want->os, have->os) != 0 || strcmp(want->arch, have->arch) != 0)
		return false;
	return !want->variant[0] || variant_eq(want, have);
}

/* ---- choosing the manifest ------------------------------------------------------ */

static bool is_index_type(const char *mt)
{
	return streq(mt, MT_OCI_INDEX) || streq(mt, MT_DOCKER_LIST);
}

static bool is_manifest_type(const char *mt)
{
	return streq(mt, MT_OCI_MANIFEST) || streq(mt, MT_DOCKER_MANIFEST);
}

static int keep_doc(struct oci *o, json_t *doc)
{
	json_t **d = reallocarray(o->docs, o->n_docs + 1, sizeof(*d));

	if (!d) {
		json_decref(doc);
		return log_errno(-ENOMEM, "%s", o->name);
	}
	o->docs = d;
	o->docs[o->n_docs++] = doc;
	return 0;
}

static int collect(struct oci *o, const json_t *index, const char *what, unsigned depth,
                   struct candidate **cands, size_t *n)
{
	const json_t *list = json_object_get(index, "manifests");
	size_t i;
	int r;

	if (!json_is_array(list))
		return log_error(-EBADMSG, "%s: %s: no manifests list", o->name, what);
	for (i = 0; i < json_array_size(list); i++) {
		const json_t *d = json_array_get(list, i), *p = json_object_get(d, "platform");
		const char *mt = json_get_cstr(d, "mediaType");
		struct candidate *c;

		if (is_index_type(mt)) {
			_cleanup_(buf_freep) struct buf raw = BUF_INIT;
			json_t *sub = NULL;

			if (depth >= OCI_INDEX_DEPTH)
				return log_error(-ELOOP, "%s: image indexes nested too deep", o->name);
			r = read_json_blob(o, d, "image index", true, &raw, &sub);
			if (r < 0)
				return r;
			r = keep_doc(o, sub);
			if (r < 0)
				return r;
			r = collect(o, sub, "image index", depth + 1, cands, n);
			if (r < 0)
				return r;
			continue;
		}
		if (!is_manifest_type(mt))
			continue;  /* artifacts, signatures, ... */
		if (streq(json_get_cstr(json_object_get(d, "annotations"), "vnd.docker.reference.type"),
		          "attestation-manifest"))
			continue;
		c = reallocarray(*cands, *n + 1, sizeof(**cands));
		if (!c)
			return log_errno(-ENOMEM, "%s", o->name);
		*cands = c;
		c = &c[(*n)++];
		memset(c, 0, sizeof(*c));
		c->desc = d;
		if (json_is_object(p)) {
			const char *os = json_get_cstr(p, "os"), *arch = json_get_cstr(p, "architecture");
			const char *var = json_get_cstr(p, "variant");

			if (os && arch && strlen(os) < sizeof(c->plat.os) &&
			    strlen(arch) < sizeof(c->plat.arch) &&
			    (!var || strlen(var) < sizeof(c->plat.variant))) {
				strcpy(c->plat.os, os);
				strcpy(c->plat.arch, arch);
				strcpy(c->plat.variant, var ? var : "");
				c->has_plat = true;
			}
		}
		if (c->has_plat && streq(c->plat.os, "unknown") && streq(c->plat.arch, "unknown"))
			(*n)--;  /* buildkit attestations without the annotation */
	}
	return 0;
}

static int pick(struct oci *o, const struct candidate *c, size_t n, const char *platform,
                const json_t **ret)
{
	struct platform want;
	struct buf list = BUF_INIT;
	char s[100];
	size_t i;

	if (n == 0)
		return log_error(-ENOENT, "%s: no image manifest in %s", o->name, o->top);
	/* A lone manifest is the image, unless it says it is for another
	 * platform than the one asked for. */
	if (n == 1 && (!platform || !c[0].has_plat)) {
		*ret = c[0].desc;
		return 0;
	}
	if (platform) {
		if (parse_platform(platform, &want) < 0)
			return log_error(-EINVAL, "invalid platform '%s' (expected os/arch[/variant])",
			                 platform);
	} else {
		host_platform(&want);
	}
	for (i = 0; i < n; i++)
		if (c[i].has_plat && platform_match(&want, &c[i].plat)) {
			*ret = c[i].desc;
			return 0;
		}
	/* Without a variant asked for, the host's own variant is a preference,
	 * not a requirement. */
	if (!platform && want.variant[0]) {
		want.variant[0] = 0;
		for (i = 0; i < n; i++)
			if (c[i].has_plat && platform_match(&want, &c[i].plat)) {
				*ret = c[i].desc;
				return 0;
			}
	}
	for (i = 0; i < n; i++) {
		if (c[i].has_plat)
			format_platform(&c[i].plat, s, sizeof(s));
		else
			snprintf(s, sizeof(s), "(unspecified)");
		buf_printf(&list, "%s%s", i ? ", " : "", s);
	}
	format_platform(&want, s, sizeof(s));
	log_error(-ENOENT, "%s: no image for platform %s; available: %s", o->name, s,
	          list.data ? (char *)list.data : "");
	buf_free(&list);
	return -ENOENT;
}

/* ---- the manifest and its layers ------------------------------------------------ */

/* A layout's layer blob through the tar reader into the build. */
static int layout_apply_layer(void *ctx, struct build *b, const char *hex, uint64_t size,
                              const char *what)
{
	struct layout *o = ctx;
	_cleanup_close_ int fd = -1;
	struct tar_reader *rd = NULL;
	char path[96], name[PATH_MAX + 128];
	uint64_t raw = 0;
	_cleanup_sha256_ struct sha256 h = SHA256_INIT;
	int r;

	(void)what;
	fd = open_blob(o, hex, size, path, sizeof(path));
	if (fd < 0)
		return fd;
	snprintf(name, sizeof(name), "%s/%s", o->name, path);

	r = tar_reader_new(fd, name, &rd);
	if (r < 0)
		return r;
	(void)sha256_init(&h);
	tar_reader_hash(rd, &h);
	r = tar_apply(b, rd, name, true);
	if (r >= 0)
		r = tar_reader_finish(rd, &raw);
	tar_reader_free(rd);
	if (r < 0)
		return r;
	if (raw != size)
		return log_error(-EBADMSG, "%s: blob sha256:%s changed while read (%llu bytes)",
		                 o->name, hex, (unsigned long long)raw);
	return check_digest(o->name, hex, &h);
}

static int apply_layer(struct oci *o, const json_t *desc, size_t i)
{
	const char *mt = json_get_cstr(desc, "mediaType");
	char hex[65], what[32];
	uint64_t size;
	size_t k;
	int r;

	snprintf(what, sizeof(what), "layer %zu", i);
	for (k = 0; k < ARRAY_SIZE(layer_types); k++)
		if (streq(mt, layer_types[k]))
			break;
	if (k == ARRAY_SIZE(layer_types))
		return log_error(-EPROTONOSUPPORT, "%s: %s: unsupported media type '%.100s'",
		                 o->name, what, mt ? mt : "(none)");
	r = descriptor(o, desc, what, hex, &size);
	if (r < 0)
		return r;
	image_tree_set_layer(build_tree(o->b), (unsigned)i);
	return o->src->apply_layer(o->src->ctx, o->b, hex, size, what);
}

/* The image manifest m (parsed): its config, then its layers in order. */
static int apply_manifest_doc(struct oci *o, const json_t *m)
{
	_cleanup_(buf_freep) struct buf craw = BUF_INIT;
	json_t *config = NULL;
	const json_t *cdesc, *layers;
	const char *mt, *cmt;
	int64_t schema;
	size_t i;
	int r;

	r = -EBADMSG;
	mt = json_get_cstr(m, "mediaType");
	if (json_int(json_object_get(m, "schemaVersion"), &schema) < 0 || schema != 2) {
		log_error(r, "%s: manifest: schemaVersion is not 2", o->name);
		goto out;
	}
	if (mt && !is_manifest_type(mt)) {
		log_error(r, "%s: manifest: unexpected media type '%.100s'", o->name, mt);
		goto out;
	}
	cdesc = json_object_get(m, "config");
	cmt = json_get_cstr(cdesc, "mediaType");
	if (!streq(cmt, MT_OCI_CONFIG) && !streq(cmt, MT_DOCKER_CONFIG)) {
		log_error(-EPROTONOSUPPORT, "%s: not a container image (config type '%.100s')",
		          o->name, cmt ? cmt : "(none)");
		r = -EPROTONOSUPPORT;
		goto out;
	}
	r = read_json_blob(o, cdesc, "config", false, &craw, &config);
	if (r < 0)
		goto out;
	r = image_tree_set_config(build_tree(o->b), craw.data, craw.len);
	if (r < 0) {
		log_errno(r, "%s: config", o->name);
		goto out;
	}
	layers = json_object_get(m, "layers");
	if (!json_is_array(layers)) {
		r = log_error(-EBADMSG, "%s: manifest: no layers list", o->name);
		goto out;
	}
	for (i = 0; i < json_array_size(layers); i++) {
		r = apply_layer(o, json_array_get(layers, i), i);
		if (r < 0)
			goto out;
	}
	r = 0;
out:
	json_decref(config);
	return r;
}

static int apply_manifest(struct oci *o, const json_t *desc)
{
	_cleanup_(buf_freep) struct buf mraw = BUF_INIT;
	json_t *m = NULL;
	int r;

	r = read_json_blob(o, desc, "manifest", true, &mraw, &m);
	if (r < 0)
		return r;
	r = apply_manifest_doc(o, m);
	json_decref(m);
	return r;
}

/* An image index: pick a manifest by platform and apply it. */
static int apply_index(struct oci *o, const json_t *index, const char *platform)
{
	struct candidate *cands = NULL;
	const json_t *chosen = NULL;
	size_t n = 0;
	int r;

	r = collect(o, index, o->top, 0, &cands, &n);
	if (r >= 0)
		r = pick(o, cands, n, platform, &chosen);
	if (r >= 0)
		r = apply_manifest(o, chosen);
	free(cands);
	return r;
}

static void oci_done(struct oci *o)
{
	size_t i;

	for (i = 0; i < o->n_docs; i++)
		json_decref(o->docs[i]);
	free(o->docs);
}

int oci_apply_doc(struct build *b, const struct oci_source *src, const char *platform,
                  const char *mt, const struct buf *doc)
{
	struct oci o = { .b = b, .src = src, .name = src->name, .top = "the image index" };
	json_t *top = NULL;
	int64_t schema;
	int r;

	r = parse_doc(&o, "manifest", doc, &top);
	if (r < 0)
		return r;
	if (!mt)
		mt = json_get_cstr(top, "mediaType");
	if (json_int(json_object_get(top, "schemaVersion"), &schema) < 0 || schema != 2) {
		r = log_error(-EPROTONOSUPPORT, "%s: manifest: schemaVersion is not 2", o.name);
	} else if (is_index_type(mt)) {
		r = apply_index(&o, top, platform);
	} else if (is_manifest_type(mt)) {
		r = apply_manifest_doc(&o, top);
	} else {
		r = log_error(-EPROTONOSUPPORT, "%s: unsupported manifest media type '%.100s'", o.name,
		              mt ? mt : "(none)");
	}
	oci_done(&o);
	json_decref(top);
	return r;
}

int oci_build(struct build *b, int dirfd, const char *name, const char *platform)
{
	struct layout lay = { .dirfd = dirfd, .name = name };
	const struct oci_source src = {
		.name = name,
		.read_doc = layout_read_doc,
		.apply_layer = layout_apply_layer,
		.ctx = &lay,
	};
	struct oci o = { .b = b, .src = &src, .name = name, .top = "index.json" };
	json_t *layout = NULL, *index = NULL;
	const char *ver;
	int64_t schema;
	int r;

	r = read_layout_file(&o, dirfd, "oci-layout", &layout);
	if (r < 0)
		return r;
	ver = json_get_cstr(layout, "imageLayoutVersion");
	if (!ver || strncmp(ver, "1.", 2) != 0) {
		r = log_error(-EPROTONOSUPPORT, "%s: unsupported image layout version '%.40s'", name,
		              ver ? ver : "(none)");
		goto out;
	}
	r = read_layout_file(&o, dirfd, "index.json", &index);
	if (r < 0)
		goto out;
	if (json_int(json_object_get(index, "schemaVersion"), &schema) < 0 || schema != 2) {
		r = log_error(-EBADMSG, "%s: index.json: schemaVersion is not 2", name);
		goto out;
	}
	r = apply_index(&o, index, platform);
out:
	oci_done(&o);
	json_decref(index);
	json_decref(layout);
	return r;
}

int source_oci(struct build *b, const char *dir, const char *platform)
{
	_cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return log_errno(-errno, "%s", dir);
	return oci_build(b, fd, dir, platform);
}
