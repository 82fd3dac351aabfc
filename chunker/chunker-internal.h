/*
 * chunker-internal.h — what the source walkers share among themselves: the
 * streaming tar reader (tar.c), the step that applies a tar stream to a build
 * (layer.c), and the OCI walker's entry point with an explicit blob root
 * (oci.c), which the docker archive walker (docker.c) reuses.
 */
#ifndef LAZYROOT_CHUNKER_INTERNAL_H
#define LAZYROOT_CHUNKER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "image/image.h"

struct build;
struct sha256;

/* ---- the tar reader ----------------------------------------------------- */

/*
 * A pull reader over a tar stream on an fd: plain, gzip (multi-member) or
 * zstd (multi-frame), detected from the first bytes.  Understands ustar,
 * POSIX pax ('x' and 'g' extended headers, SCHILY/LIBARCHIVE xattrs, GNU
 * sparse 0.0/0.1/1.0), GNU ('L', 'K', old sparse 'S' with extension blocks,
 * base-256 numbers) and v7 headers.
 *
 * Every error is logged here, once, naming the archive (and the member when
 * there is one); callers just pass the -errno value up.
 */
struct tar_reader;

struct tar_xattr {
	char *name;             /* full name: "security.capability" */
	uint8_t *value;
	size_t len;
};

struct tar_sparse {
	uint64_t off, len;      /* file bytes [off, off+len) are stored data */
};

struct tar_entry {
	char type;              /* '0' regular (also for '\0' and '7'), '1'..'6', 'D' */
	const char *path;       /* member name as recorded (pax/GNU long name applied) */
	const char *linkpath;   /* hard link or symlink target, "" otherwise */
	struct image_attr attr; /* mode holds S_IFMT bits matching type */
	uint64_t size;          /* regular files: the file's size (holes included) */
	const struct tar_xattr *xattrs;
	size_t n_xattrs;
	bool sparse;            /* data comes with holes (tar_reader_read says where) */
	uint64_t offset;        /* header's offset in the uncompressed stream */
};

/* fd is borrowed; name is used in messages and must outlive the reader. */
int tar_reader_new(int fd, const char *name, struct tar_reader **ret);
void tar_reader_free(struct tar_reader *r);

/* The input as a pull function instead of an fd: fn(ctx, buf, len) returns
 * up to len bytes, 0 at the end of the input, or -errno after logging its
 * own error (the reader passes it up without logging again).  ctx and name
 * must outlive the reader. */
typedef ssize_t (*tar_read_fn)(void *ctx, void *buf, size_t len);
int tar_reader_new_fn(tar_read_fn fn, void *ctx, const char *name, struct tar_reader **ret);

/* Feed every raw (still compressed) byte read from fd from now on into h. */
void tar_reader_hash(struct tar_reader *r, struct sha256 *h);

/* The next member: 1 and *ret (valid until the next call), 0 at the end of
 * the archive, -errno.  Data the caller did not read is skipped. */
int tar_reader_next(struct tar_reader *r, const struct tar_entry **ret);

/*
 * The current member's contents, piece by piece in file order: returns 1 with
 * either a data piece (*ret_data, *ret_len; valid until the next call) or a
 * hole (*ret_data NULL, *ret_hole bytes of zeroes); 0 when the contents are
 * done; -errno (a truncated member, a corrupt stream).
 */
int tar_reader_read(struct tar_reader *r, const void **ret_data, size_t *ret_len,
                    uint64_t *ret_hole);

/* After the end of the archive: read the raw input to its end, checking that
 * the compressed stream ends properly (its checksums included).  *ret_raw
 * (optional) is the number of raw bytes read from fd in all. */
int tar_reader_finish(struct tar_reader *r, uint64_t *ret_raw);

/* ---- sources ------------------------------------------------------------ */

/* Apply every member of the stream r to the build (see source_tar_fd), up to
 * the end of the archive. */
int tar_apply(struct build *b, struct tar_reader *r, const char *name, bool whiteouts);

/*
 * Where an OCI walk reads its blobs: an image layout's files (oci.c) or a
 * registry (registry.c).  Both log their own errors.
 *  - read_doc: the small JSON document (an image index or manifest when
 *    manifest is set, else a config) named sha256:hex, size bytes, whole into
 *    raw, checked against its digest;
 *  - apply_layer: the layer blob sha256:hex through the tar reader into b
 *    (tar_apply with whiteouts), its size and digest checked by its end.
 */
struct buf;
struct oci_source {
	const char *name;
	int (*read_doc)(void *ctx, bool manifest, const char *hex, uint64_t size,
	                const char *what, struct buf *raw);
	int (*apply_layer)(void *ctx, struct build *b, const char *hex, uint64_t size,
	                   const char *what);
	void *ctx;
};

/* Apply the top document doc of an image (already checked against its
 * digest when it has one): an image index, from which a manifest is picked by
 * platform as for a layout, or an image manifest.  mt is its media type as
 * served, NULL to take the document's own mediaType field; any other type is
 * refused (-EPROTONOSUPPORT). */
int oci_apply_doc(struct build *b, const struct oci_source *src, const char *platform,
                  const char *mt, const struct buf *doc);

/* ---- registries (registry.c): the parsers of outside input --------------- */

/* An image reference, docker://HOST[:PORT]/NAME[:TAG|@sha256:DIGEST] or
 * oci://…; a HOST without '.' or ':' (and not localhost) is a Docker Hub name
 * (registry-1.docker.io, library/ added to a one-part NAME), as docker reads
 * it.  NAME is lower-case [a-z0-9._-] parts joined by single '/'; TAG is
 * [A-Za-z0-9._-]{1,128}, latest when absent.  0, or -EINVAL (not logged). */
struct registry_ref {
	char host[256];         /* host[:port] */
	char repo[256];
	char reference[160];    /* the tag, or sha256:<64 lower-case hex> */
	bool by_digest;
};
int registry_parse_ref(const char *ref, struct registry_ref *ret);

/* The value of parameter key (case-insensitive) in a WWW-Authenticate
 * challenge's list after its scheme (key="value", key=token, …; quoted
 * values unescaped), into out (len bytes, NUL-terminated, cut to fit);
 * false when the list lacks it. */
bool registry_challenge_param(const char *s, const char *key, char *out, size_t len);
/* A Retry-After header's value (delta-seconds, or an HTTP-date, which is
 * taken against now) in seconds, never below 0; -1 when it is neither. */
long registry_retry_after(const char *value, time_t now);

/* The OCI walker over the layout at dirfd (borrowed); name is used in
 * messages.  platform may be NULL (see source_oci). */
int oci_build(struct build *b, int dirfd, const char *name, const char *platform);

/* The docker archive walker with a platform for archives that hold an OCI
 * layout. */
int docker_build(struct build *b, const char *path, const char *platform);

/* openat() of path below dirfd with "..", absolute names and symlinks all
 * resolved as if dirfd were the root (openat2 RESOLVE_IN_ROOT), so that a
 * hostile archive cannot reach outside it.  Returns the fd or -errno. */
int open_beneath(int dirfd, const char *path, int flags);

#endif
