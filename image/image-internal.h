/*
 * image-internal.h — what the tree, the writer and the reader share and no
 * other module may see: the in-memory tree's structs and the on-disk layout
 * constants of image/FORMAT.md (offsets, record sizes, limits).
 *
 * On-disk integers are little-endian and may sit at any alignment in a
 * caller's buffer, so they are always read and written through the le*()
 * helpers below, never through casts of the mapped bytes.
 */
#ifndef LAZYROOT_IMAGE_INTERNAL_H
#define LAZYROOT_IMAGE_INTERNAL_H

#include <endian.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "image/image.h"
#include "lib/lib.h"

/* ---- on-disk layout (FORMAT.md) ------------------------------------------ */

#define IDX_MAGIC "LZRIDX\0\0"
#define IDX_MAGIC_LEN 8
#define IDX_VERSION 1

/* Header field offsets. */
#define IDX_H_MAGIC 0
#define IDX_H_VERSION 8
#define IDX_H_FLAGS 12
#define IDX_H_CHECKSUM 16
#define IDX_H_HEADER_SIZE 24
#define IDX_H_SECTION_COUNT 28
#define IDX_H_TOTAL_SIZE 32
#define IDX_H_FILE_BYTES 40
#define IDX_H_DATA_BYTES 48
#define IDX_H_STORED_BYTES 56
#define IDX_H_SECTIONS 64
#define IDX_CHECKSUM_START 24   /* the checksum covers [24, total_size) */

enum idx_section {
	IDX_S_INODES,
	IDX_S_DIRENTS,
	IDX_S_EXTENTS,
	IDX_S_XATTRS,
	IDX_S_CHUNKS,
	IDX_S_STRINGS,
	IDX_S_CONFIG,
	IDX_S_COUNT,
};
#define IDX_SECTION_SIZE 24     /* offset u64, length u64, count u64 */
#define IDX_HEADER_SIZE (IDX_H_SECTIONS + IDX_S_COUNT * IDX_SECTION_SIZE)

/* Record sizes (0: a byte blob, count == length). */
#define IDX_INODE_SIZE 72
#define IDX_DIRENT_SIZE 12
#define IDX_EXTENT_SIZE 24
#define IDX_XATTR_SIZE 16
#define IDX_CHUNK_SIZE 32

/* Inode record field offsets. */
#define IDX_I_MODE 0
#define IDX_I_UID 4
#define IDX_I_GID 8
#define IDX_I_NLINK 12
#define IDX_I_SIZE 16
#define IDX_I_RDEV 24
#define IDX_I_MTIME_SEC 32
#define IDX_I_MTIME_NSEC 40
#define IDX_I_XATTR_COUNT 44
#define IDX_I_XATTR_FIRST 48
#define IDX_I_DATA_COUNT 52
#define IDX_I_DATA_FIRST 56
#define IDX_I_BLOCKS 64

/* Dirent record. */
#define IDX_D_NAME_OFF 0
#define IDX_D_INO 4
#define IDX_D_NAME_LEN 8

/* Extent record. */
#define IDX_E_FILE_OFF 0
#define IDX_E_CHUNK 8
#define IDX_E_CHUNK_OFF 12
#define IDX_E_LEN 16

/* Xattr record. */
#define IDX_X_NAME_OFF 0
#define IDX_X_VALUE_OFF 4
#define IDX_X_NAME_LEN 8
#define IDX_X_VALUE_LEN 12

/* Chunk record. */
#define IDX_C_NAME 0
#define IDX_C_SIZE 16
#define IDX_C_STORED_SIZE 20
#define IDX_C_FLAGS 24

/* Limits the writer enforces and the reader checks. */
#define IDX_SYMLINK_MAX 4095    /* PATH_MAX - 1, as Linux allows */
#define IDX_XATTR_NAME_MAX 255  /* XATTR_NAME_MAX */
#define IDX_XATTR_VALUE_MAX 65536 /* XATTR_SIZE_MAX */
#define IDX_DIR_SIZE 4096       /* st_size reported for directories */

static inline uint16_t le16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return le16toh(v); }
static inline uint32_t le32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }
static inline uint64_t le64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return le64toh(v); }
static inline void put_le16(uint8_t *p, uint16_t v) { v = htole16(v); memcpy(p, &v, 2); }
static inline void put_le32(uint8_t *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static inline void put_le64(uint8_t *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }

/* True for the seven st_mode file types an image may hold. */
static inline bool image_mode_valid(uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG: case S_IFDIR: case S_IFLNK: case S_IFCHR:
	case S_IFBLK: case S_IFIFO: case S_IFSOCK:
		return true;
	}
	return false;
}

/* Entry names sort by their bytes, a shorter name before a longer one it
 * prefixes: the order the reader's binary search relies on. */
static inline int image_name_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	int c = memcmp(a, b, MIN(alen, blen));

	if (c)
		return c;
	return alen < blen ? -1 : alen > blen;
}

/* ---- the mutable tree ------------------------------------------------------ */

struct tree_xattr {
	char *name;
	void *value;
	size_t len;
};

struct image_inode {
	struct image_attr attr;
	uint32_t refs;          /* entries naming this inode (hard links), plus one
	                         * held by image_tree.all */
	uint64_t size;
	char *symlink;
	struct tree_xattr *xattrs;
	uint32_t n_xattrs;
	uint32_t n_extents, cap_extents;
	struct image_extent *extents;
	/* writer scratch: inode number, valid when write_epoch matches */
	uint64_t write_epoch;
	uint32_t write_ino;
};

/* A directory entry.  Children hang off their parent as a doubly linked list
 * (cheap removal) and are found through the tree's hash table keyed by
 * (parent, name), so that no lookup scans a directory. */
struct tree_node {
	struct tree_node *parent;
	struct tree_node *first_child, *next, *prev;
	struct tree_node *hnext;        /* hash chain */
	struct image_inode *inode;
	uint64_t hash;
	uint32_t n_children;
	unsigned layer;
	uint16_t name_len;
	char name[];                    /* NUL-terminated */
};

struct tree_chunk {
	struct image_chunk c;
	bool set;
};

struct image_tree {
	struct tree_node *root;
	struct tree_node **htab;
	size_t hsize, hcount;           /* hsize is a power of two */
	uint64_t n_nodes;
	unsigned layer;
	struct tree_chunk *chunks;
	uint32_t n_chunks, cap_chunks;
	void *config;
	size_t config_len;
	uint64_t write_epoch;
	/* Every inode ever made, each holding one reference: an inode pointer a
	 * caller got stays valid until the tree is freed, even after its entry
	 * is replaced (the build pipeline maps data to inodes after the fact). */
	struct image_inode **all;
	size_t n_all, cap_all;
};

#endif
