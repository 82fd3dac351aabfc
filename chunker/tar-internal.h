/*
 * tar-internal.h — what the tar reader's files share (chunker-internal.h has
 * the reader's interface): its limits, struct tar_reader, and the functions
 * one file calls in another.
 *
 *   tar.c         the stream: raw input, gzip/zstd, skipping, member data
 *   tar-header.c  headers: fields, checksums, pax and GNU extended headers
 *   tar-entry.c   a member's entry built from its headers, sparse maps
 */
#ifndef LAZYROOT_CHUNKER_TAR_INTERNAL_H
#define LAZYROOT_CHUNKER_TAR_INTERNAL_H

#include <zlib.h>
#include <zstd.h>

#include "chunker/chunker-internal.h"
#include "lib/lib.h"

#define TAR_BLOCK 512
#define TAR_IN_SIZE (128 * 1024)
#define TAR_OUT_SIZE (256 * 1024)
#define TAR_EXT_MAX (16u << 20)     /* largest pax header we accept */
#define TAR_NAME_MAX (64u << 10)    /* largest GNU long name / link name */
#define TAR_SPARSE_MAX (1u << 20)   /* most sparse map entries */

enum codec { CODEC_NONE, CODEC_GZIP, CODEC_ZSTD };

/* Extended-header values: local ('x', 'L', 'K') for the next member, or
 * global ('g'; only uid, gid, mtime and xattrs are honoured there). */
struct ext {
	char *path, *linkpath;
	bool has_size, has_uid, has_gid, has_mtime, has_major, has_minor;
	uint64_t size;
	uint32_t uid, gid;
	int64_t mtime;
	uint32_t mtime_nsec;
	uint32_t major, minor;
	struct tar_xattr *xattrs;
	size_t n_xattrs;
	/* GNU sparse in pax form */
	long sparse_major, sparse_minor;   /* -1: not given */
	char *sparse_name;
	bool has_realsize, sparse_map_given;
	uint64_t realsize;
	struct tar_sparse *map;
	size_t n_map;
	bool pending_offset;               /* 0.0: an offset waiting for its numbytes */
};

struct tar_reader {
	int fd;
	tar_read_fn read_fn;               /* instead of fd when set */
	void *read_ctx;
	const char *name;
	enum codec codec;
	bool seekable;                     /* plain regular file, not hashed */
	uint64_t file_size;                /* when seekable */

	/* raw input */
	uint8_t *in;
	size_t in_pos, in_len;
	bool in_eof;
	uint64_t raw_bytes;
	struct sha256 *hash;

	/* decompressed output (CODEC_NONE reads straight from in) */
	uint8_t *out;
	size_t out_pos, out_len;
	bool out_eof;
	z_stream z;
	bool z_init, z_member_done;
	ZSTD_DStream *zs;
	size_t zs_last;                    /* last ZSTD_decompressStream() hint */

	uint64_t offset;                   /* position in the uncompressed stream */
	bool detected;
	bool ended;                        /* end of archive seen */

	struct ext global, local;
	char *gnu_longname, *gnu_longlink;

	/* the current member */
	struct tar_entry e;
	char *path, *linkpath;
	struct tar_xattr *xattrs;
	size_t n_xattrs;
	struct tar_sparse *map;
	size_t n_map, map_i;
	uint64_t seg_done, pos;
	uint64_t data_left;                /* stored bytes of the member not yet consumed */
	uint64_t pad;                      /* padding after them */
};

/* tar.c */
/* Read up to n bytes; fewer only at the end of the stream. */
ssize_t tar_stream_read(struct tar_reader *r, void *buf, size_t n);
/* Skip n bytes; -EPIPE when the stream ends first (the caller names the member). */
int tar_stream_skip(struct tar_reader *r, uint64_t n);
int tar_detect(struct tar_reader *r);
void tar_ext_clear(struct ext *x);
void tar_entry_clear(struct tar_reader *r);

/* tar-header.c */
int tar_parse_num(const uint8_t *f, size_t len, bool allow_neg, int64_t *ret);
int tar_parse_unum(const uint8_t *f, size_t len, uint64_t max, uint64_t *ret);
char *tar_strndup_field(const uint8_t *f, size_t len);
/* Append a segment; -E2BIG past TAR_SPARSE_MAX, -ENOMEM. */
int tar_map_push(struct tar_sparse **map, size_t *n, uint64_t off, uint64_t len);

/* tar-entry.c */
/* Log "NAME: member 'PATH': what" and return err. */
int tar_member_error(struct tar_reader *r, int err, const char *what);
int tar_make_entry(struct tar_reader *r, const uint8_t *h, uint64_t hdr_off);

#endif
