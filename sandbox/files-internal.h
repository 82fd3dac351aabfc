/*
 * files-internal.h — the tar stream format of the sandbox's file transfers
 * (sandbox/files-tar.c), shared by the transfers themselves (sandbox/files.c),
 * their unit test and the fuzz target.
 *
 * The reader takes POSIX ustar, pax extended headers ('x': path, linkpath,
 * size, mtime; 'g' is skipped) and GNU long names ('L', 'K').  It hands every
 * member up with its type as the archive says it; what may be extracted is
 * the extractor's decision.  It refuses what it cannot read exactly: a bad
 * checksum, a number that does not parse, a meta header past its bound, a
 * sparse or multi-volume member, a stream that ends inside a member or
 * without its end blocks.  Every refusal is logged once, naming the member
 * (or the byte offset where no name is known yet), and returns -EBADMSG
 * (malformed), -EOPNOTSUPP (a member kind it does not read) or the read
 * error.
 *
 * The writer emits ustar headers, preceded by a pax 'x' header only for what
 * ustar cannot hold: a name or link target too long, a size of 8 GiB or more,
 * an mtime before 1970 or past ustar's 11 octal digits.
 */
#ifndef LAZYROOT_SANDBOX_FILES_INTERNAL_H
#define LAZYROOT_SANDBOX_FILES_INTERNAL_H

#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define FILES_TAR_BLOCK 512
/* A member's name or link target, whatever header carried it (PATH_MAX). */
#define FILES_TAR_NAME_MAX 4096
/* A pax header's data: records for a name, a link target and a few numbers
 * fit many times over; anything larger is refused before it is read. */
#define FILES_TAR_PAX_MAX (64 * 1024)
/* Meta headers ('x', 'g', 'L', 'K') before one member: more is a stream that
 * only says nothing. */
#define FILES_TAR_META_MAX 8

/* Member types (ustar typeflag values; '\0' and '7' are read as '0'). */
#define FILES_TAR_FILE     '0'
#define FILES_TAR_HARDLINK '1'
#define FILES_TAR_SYMLINK  '2'
#define FILES_TAR_CHAR     '3'
#define FILES_TAR_BLOCKDEV '4'
#define FILES_TAR_DIR      '5'
#define FILES_TAR_FIFO     '6'

struct files_tar_hdr {
	const char *path;       /* as in the archive, not normalised */
	const char *link;       /* hard link or symlink target; "" otherwise */
	char type;              /* FILES_TAR_* or any other typeflag byte */
	mode_t mode;            /* the 12 permission bits as the archive says */
	uint64_t size;          /* data bytes that follow (0 for all but files) */
	struct timespec mtime;
};

struct files_tar_reader;

/* A reader of the tar stream on fd (read from its current position, never
 * seeked; a pipe or socket will do).  -ENOMEM only. */
int files_tar_reader_new(int fd, struct files_tar_reader **ret);
void files_tar_reader_free(struct files_tar_reader *rd);

/* The next member: 1 and *ret filled (its strings valid until the next call),
 * 0 at the end of the archive, or -errno (logged).  The data of the member
 * before, read or not, is skipped. */
int files_tar_next(struct files_tar_reader *rd, struct files_tar_hdr *ret);

/* Up to n bytes of the current member's data into buf: the count, 0 once the
 * member's size has been read, or -errno (logged: a stream that ends early
 * is -EBADMSG). */
ssize_t files_tar_read(struct files_tar_reader *rd, void *buf, size_t n);

/* Bytes consumed from the stream so far (headers, data and padding). */
uint64_t files_tar_offset(const struct files_tar_reader *rd);

/* Write h's headers to fd (a pax header first where ustar cannot hold h); the
 * h->size data bytes follow, then files_tar_write_pad.  -ENAMETOOLONG
 * (logged) for a name past FILES_TAR_NAME_MAX, else a write error. */
int files_tar_write_header(int fd, const struct files_tar_hdr *h);
/* The zero padding that completes the last block of size data bytes. */
int files_tar_write_pad(int fd, uint64_t size);
/* The two zero blocks that end an archive. */
int files_tar_write_end(int fd);

#endif
