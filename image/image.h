/*
 * image.h — the image index: an in-memory tree that builders fill and
 * serialise (the writer), and a reader that maps a serialised index and
 * answers lookups in place without a parse pass (the reader).
 *
 * The on-disk format is specified in image/FORMAT.md.  The reader treats its
 * input as hostile: every offset, count and length is checked before use, and
 * a corrupt index yields -EBADMSG (or -EINVAL/-ERANGE on bad arguments), never
 * a crash.
 *
 * Inode numbers are 1-based positions in the inode table; the root directory is
 * inode IMAGE_ROOT_INO.  Hard links share one inode.  Modes are full st_mode
 * values (S_IFMT type bits and permission bits, setuid/setgid/sticky included).
 *
 * Thread-safety: a tree is not thread-safe; a struct image is immutable after
 * image_open_*() and may be read from any number of threads at once.
 */
#ifndef LAZYROOT_IMAGE_H
#define LAZYROOT_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define IMAGE_ROOT_INO 1
#define IMAGE_NAME_MAX 255          /* longest entry name */
#define IMAGE_CHUNK_NONE UINT32_MAX /* no chunk */

/* Chunk flags, as stored in the chunk table and the store. */
#define IMAGE_CHUNK_ZSTD 0x1        /* stored zstd-compressed (else raw) */

struct image_attr {
	uint32_t mode;          /* st_mode: type and permission bits */
	uint32_t uid, gid;
	int64_t mtime_sec;
	uint32_t mtime_nsec;
	uint64_t rdev;          /* devices only, as makedev(major, minor) */
};

struct image_chunk {
	uint8_t name[16];       /* XXH3-128 of the uncompressed bytes */
	uint32_t size;          /* uncompressed bytes */
	uint32_t stored_size;   /* bytes in the store (compressed or raw) */
	uint32_t flags;         /* IMAGE_CHUNK_* */
};

/* One run of file data: file bytes [file_off, file_off+len) are the chunk's
 * bytes [chunk_off, chunk_off+len).  File ranges not covered by any extent are
 * holes and read as zeroes.  A file's extents are sorted by file_off and never
 * overlap. */
struct image_extent {
	uint64_t file_off;
	uint32_t chunk;         /* index in the chunk table */
	uint32_t chunk_off;
	uint32_t len;
};

/* ======================= building: the mutable tree ======================= */

struct image_tree;
struct image_inode;

int image_tree_new(struct image_tree **ret);
void image_tree_free(struct image_tree *t);

/*
 * Paths passed to the tree are relative to the root, '/'-separated, already
 * normalised (no "", "." or ".." components, no leading or trailing '/'); ""
 * names the root itself.  image_path_normalize() makes such a path from a
 * tar member name, and refuses names that would leave the tree: leading '/',
 * empty and "." components are dropped; ".." is resolved lexically (without
 * regard to symlinks, as docker does) and refused with -EINVAL where it would
 * climb above the root; -ENAMETOOLONG for a component over IMAGE_NAME_MAX or a
 * result that does not fit outlen.  Returns the length of out.
 */
int image_path_normalize(const char *in, char *out, size_t outlen);

/* Layers: entries remember the layer they were added in, so that an opaque
 * directory marker hides only entries of lower layers.  Starts at 0. */
void image_tree_set_layer(struct image_tree *t, unsigned layer);

/*
 * Add or replace the entry at path with a new inode of attributes a.  Missing
 * parent directories are created (0755, root:root, mtime 0) and may be given
 * their real attributes by a later add of the same path.  Adding a directory
 * where a directory already is updates its attributes and keeps its children;
 * anything else replaces the old entry (and its subtree).  The parent must not
 * be a non-directory (-ENOTDIR).  Adding the root ("") with a directory mode sets
 * the root's attributes.  *ret (optional) is valid until the tree is freed.
 */
int image_tree_add(struct image_tree *t, const char *path, const struct image_attr *a,
                   struct image_inode **ret);

/* Make path a hard link to the inode at target.  -ENOENT when target is
 * missing, -EPERM when target is a directory. */
int image_tree_link(struct image_tree *t, const char *path, const char *target);

/* Remove the entry at path and its subtree; -ENOENT when missing. */
int image_tree_remove(struct image_tree *t, const char *path);

/* Remove the children of the directory at path that were added in layers
 * below the current one (an OCI opaque-directory marker).  This reaches all
 * the way down: a subdirectory the current layer re-created, or added to,
 * stays but loses what lower layers put in it. */
int image_tree_clear_lower(struct image_tree *t, const char *path);

/* The inode at path, or NULL. */
struct image_inode *image_tree_find(struct image_tree *t, const char *path);

/* Inode contents.  Strings and values are copied. */
int image_inode_set_symlink(struct image_inode *ino, const char *target);
void image_inode_set_size(struct image_inode *ino, uint64_t size);
/* Add or replace an extended attribute; names are full ("user.x",
 * "security.capability", "system.posix_acl_access"). */
int image_inode_set_xattr(struct image_inode *ino, const char *name, const void *value,
                          size_t len);
/* Append an extent; extents must be appended in increasing file_off order. */
int image_inode_add_extent(struct image_inode *ino, uint64_t file_off, uint32_t chunk,
                           uint32_t chunk_off, uint32_t len);
/* Drop all extents (the file's data is being written anew). */
void image_inode_clear_extents(struct image_inode *ino);
const struct image_attr *image_inode_attr(const struct image_inode *ino);

/* Reserve a chunk-table slot before the chunk's name is known (the build
 * pipeline hashes chunks on worker threads); fill it with
 * image_tree_set_chunk().  Returns the slot index, or -errno. */
int64_t image_tree_new_chunk(struct image_tree *t);
int image_tree_set_chunk(struct image_tree *t, uint32_t idx, const struct image_chunk *c);

/* The image config (an OCI image config JSON document), kept verbatim. */
int image_tree_set_config(struct image_tree *t, const void *json, size_t len);

/*
 * Serialise the tree into out (appended).  Chunks that no extent references
 * are left out, and chunk-table slots holding the same name are merged, so the
 * index lists each chunk it needs exactly once.  Every chunk slot that is
 * referenced must have been set (-EINVAL otherwise).  Cost: O(n log n) in the
 * number of entries.
 */
struct buf;
int image_write(struct image_tree *t, struct buf *out);

/* ======================= reading: the mapped index ======================== */

struct image;

struct image_stat {
	uint64_t ino;
	uint32_t mode, uid, gid, nlink;
	uint64_t size;
	uint64_t rdev;
	int64_t mtime_sec;
	uint32_t mtime_nsec;
	uint64_t blocks;        /* 512-byte units the file's data occupies (holes excluded) */
};

struct image_info {
	uint32_t version;
	uint64_t inodes, entries, chunks, extents, xattrs;
	uint64_t file_bytes;    /* sum of regular file sizes (one per inode) */
	uint64_t data_bytes;    /* sum of chunk sizes, uncompressed */
	uint64_t stored_bytes;  /* sum of chunk sizes as stored */
};

/* Open an index held in memory (borrowed: must outlive the image).  Checks the
 * header and that every section lies within len, in O(1); does not check the
 * body checksum (see image_verify). */
int image_open_mem(const void *data, size_t len, struct image **ret);
/* Map an index file read-only, then as image_open_mem. */
int image_open_file(const char *path, struct image **ret);
/* Check the body checksum: O(size of the index). */
int image_verify(const struct image *img);
void image_free(struct image *img);

void image_get_info(const struct image *img, struct image_info *ret);

/* Attributes of ino; -ENOENT for an inode number out of range. */
int image_getattr(const struct image *img, uint64_t ino, struct image_stat *ret);

/* Look name (len bytes, not NUL-terminated) up in directory dir: binary search.
 * -ENOENT, -ENOTDIR. */
int image_lookup(const struct image *img, uint64_t dir, const char *name, size_t len,
                 uint64_t *ret_ino);
/* Resolve a '/'-separated path from the root, without following symlinks.
 * Empty and "." components are skipped; ".." is -EINVAL (no parent links). */
int image_lookup_path(const struct image *img, const char *path, uint64_t *ret_ino);

/* The pos-th entry (0-based, sorted by name; "." and ".." are not stored) of
 * directory dir.  Returns 1 and fills the outputs, 0 past the end, -errno.
 * *ret_name points into the index and is valid while img is. */
int image_readdir(const struct image *img, uint64_t dir, uint64_t pos, const char **ret_name,
                  size_t *ret_len, uint64_t *ret_ino);
/* Number of entries in directory dir. */
int64_t image_dir_size(const struct image *img, uint64_t dir);

/* Symlink target (not NUL-terminated); -EINVAL if ino is not a symlink. */
int image_readlink(const struct image *img, uint64_t ino, const char **ret, size_t *ret_len);

/* The i-th extended attribute of ino: 1 and outputs, 0 past the end, -errno. */
int image_xattr(const struct image *img, uint64_t ino, uint32_t i, const char **ret_name,
                size_t *ret_name_len, const void **ret_value, size_t *ret_value_len);
/* Look up one xattr by name (NUL-terminated): 0, -ENODATA. */
int image_getxattr(const struct image *img, uint64_t ino, const char *name,
                   const void **ret_value, size_t *ret_value_len);

/* Extents of a regular file (-EINVAL otherwise): the count, and the i-th
 * (-ERANGE past the end). */
int64_t image_extent_count(const struct image *img, uint64_t ino);
int image_extent(const struct image *img, uint64_t ino, uint64_t i, struct image_extent *ret);
/* Index of the first extent of ino that ends after file offset off (binary
 * search); equals the count when none does. */
int64_t image_extent_find(const struct image *img, uint64_t ino, uint64_t off);

int image_chunk(const struct image *img, uint32_t idx, struct image_chunk *ret);
/* Where each chunk lies in the image's pack (FORMAT.md, "Packs"): *ret, to
 * free(), holds n+1 offsets for the n chunks of the table, the last being the
 * pack's size.  Cost: O(n), one pass over the chunk table. */
int image_pack_offsets(const struct image *img, uint64_t **ret);

/* The image config JSON (may be empty); points into the index. */
void image_config(const struct image *img, const char **ret, size_t *ret_len);

/* ---- access profiles (FORMAT.md, "Access profiles") ------------------------ */

/*
 * A profile: traces of chunk indices of one index, each in the order one
 * recorded workload first read them.  Stored as profiles/<index hex> beside
 * the image.  A struct image_profile is not thread-safe.
 */
struct buf;
struct image_profile;
#define IMAGE_PROFILE_MAX_TRACES 4096
#define IMAGE_PROFILE_MAX_CHUNKS (1u << 24)   /* per trace */

/* An empty profile for the index named index (16 bytes). */
int image_profile_new(const uint8_t index[16], struct image_profile **ret);
void image_profile_free(struct image_profile *p);
/* Append a trace (copied); -E2BIG past the limits above. */
int image_profile_add_trace(struct image_profile *p, const uint32_t *chunks, size_t n);
/* Append src's traces to dst: -EXDEV when they belong to different indexes. */
int image_profile_merge(struct image_profile *dst, const struct image_profile *src);
/* The index's name (16 bytes, valid while p is). */
const uint8_t *image_profile_index(const struct image_profile *p);
size_t image_profile_traces(const struct image_profile *p);
/* Trace i: its chunk indices (valid while p is), *ret_n of them. */
const uint32_t *image_profile_trace(const struct image_profile *p, size_t i, size_t *ret_n);
/* Append p's serialised form to out. */
int image_profile_encode(const struct image_profile *p, struct buf *out);
/* Write a profile of one trace (chunks[0..n)) of the index named index to
 * path, atomically (a reader sees the old file or the whole new one).
 * 0 or -errno; logs nothing. */
int image_profile_write_trace(const char *path, const uint8_t index[16], const uint32_t *chunks,
                              size_t n);
/* Parse len bytes (hostile): -EBADMSG (or -EPROTONOSUPPORT, -ENOMEM) with
 * *ret_why (static, may be NULL) saying what is wrong in a few words. */
int image_profile_parse(const void *data, size_t len, struct image_profile **ret,
                        const char **ret_why);
/* -EBADMSG (and *ret_why) when a chunk index is not below nchunks. */
int image_profile_check(const struct image_profile *p, uint64_t nchunks, const char **ret_why);

#endif
