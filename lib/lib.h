/*
 * lib.h — small helpers every lazyroot module shares: cleanup attributes, error
 * logging, hashing, hex, growable buffers, whole-file I/O and size parsing.
 *
 * Conventions: functions return >= 0 on success and -errno on failure.  Nothing
 * here aborts; callers decide whether a failure is fatal.
 */
#ifndef LAZYROOT_LIB_H
#define LAZYROOT_LIB_H

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- ownership ---------------------------------------------------------- */

static inline void freep(void *p) { free(*(void **)p); }
static inline void closep(int *fd) { if (*fd >= 0) close(*fd); }
static inline void fclosep(FILE **f) { if (*f) fclose(*f); }
#define _cleanup_(f) __attribute__((cleanup(f)))
#define _cleanup_free_ _cleanup_(freep)
#define _cleanup_close_ _cleanup_(closep)
#define _cleanup_fclose_ _cleanup_(fclosep)

/* Hand a cleanup-owned pointer or fd over to someone else. */
#define TAKE_PTR(p) ({ __typeof__(p) _p = (p); (p) = NULL; _p; })
#define TAKE_FD(fd) ({ int _fd = (fd); (fd) = -1; _fd; })

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* ---- errors and logging ------------------------------------------------- */

enum log_level { LOG_ERR, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* Messages go to stderr prefixed "lazyroot: "; level LOG_INFO and above is
 * printed when log_verbosity allows it (default LOG_WARN). */
extern int log_verbosity;
void log_msg(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Log "lazyroot: <message>: <strerror(-err)>" and return err (a -errno value),
 * so that callers can write `return log_errno(r, "open `%s`", path);`. */
int log_errno(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Log "lazyroot: <message>" and return err. */
int log_error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Say more about error err than strerror() can, where the detail is known but
 * the context is not (a store request: its URL, the server's status and error
 * code): the next log_errno(err, …) on this thread prints
 * "<message>: <strerror> (<detail>)" and forgets it.  A detail for another
 * error, or a new one, replaces it. */
void log_detail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* log_detail, and the next log_errno(err, …) says cause instead of
 * strerror: for an errno that stands for something it has no words for. */
void log_detail_as(int err, const char *cause, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- hashing and hex ---------------------------------------------------- */

#define HASH_SIZE 16       /* XXH3-128, canonical (big-endian) byte order */
#define HASH_HEX_SIZE 33   /* 32 hex digits and a NUL */

/* XXH3-128 of buf; the canonical form, so hex(out) equals `xxh128sum`. */
void hash128(const void *buf, size_t len, uint8_t out[HASH_SIZE]);
/* XXH3-64 of buf. */
uint64_t hash64(const void *buf, size_t len);

/* Incremental XXH3-128 over several pieces. */
struct hash128_state;
struct hash128_state *hash128_new(void);
void hash128_update(struct hash128_state *s, const void *buf, size_t len);
void hash128_final(struct hash128_state *s, uint8_t out[HASH_SIZE]);
void hash128_free(struct hash128_state *s);

void hex_encode(const uint8_t *in, size_t len, char *out); /* out holds 2*len+1 */
/* Percent-encode the string in into out (outlen bytes, NUL included): every
 * byte but [A-Za-z0-9] and those in keep becomes %XX, upper case.
 * 0, or -ENAMETOOLONG when out is too small. */
int url_encode(const char *in, const char *keep, char *out, size_t outlen);
/* The value of one hex digit (either case), or -1. */
int hex_digit(char c);
/* Decode exactly 2*len hex digits; -EINVAL on any other character. */
int hex_decode(const char *in, uint8_t *out, size_t len);

/* ---- chunk encoding ----------------------------------------------------- */

#define CHUNK_ZSTD 0x1   /* same value as IMAGE_CHUNK_ZSTD */

struct ZSTD_CCtx_s;
struct ZSTD_DCtx_s;
struct buf;
/* Compress len bytes at level into out (replacing its contents); when zstd
 * does not shrink them, out holds the raw bytes.  *ret_flags gets CHUNK_ZSTD
 * or 0.  cctx may be NULL (a temporary context is used). */
int chunk_encode(struct ZSTD_CCtx_s *cctx, int level, const void *in, size_t len,
                 struct buf *out, uint32_t *ret_flags);
/* Decode a stored chunk into out (room for size bytes) and verify that it
 * hashes to name.  -EBADMSG when it does not decompress to exactly size bytes
 * or fails verification: such bytes must never be served. */
int chunk_decode(struct ZSTD_DCtx_s *dctx, const uint8_t name[HASH_SIZE], uint32_t flags,
                 uint32_t size, const void *in, size_t inlen, void *out);

/* ---- intrusive doubly linked lists -------------------------------------- */

/* l points to a struct with head and tail; e's links are its fields prev and
 * next (named, so that one element can be on several lists). */
#define LIST_UNLINK(l, e, prev, next) do {                                    \
	if ((e)->prev) (e)->prev->next = (e)->next; else (l)->head = (e)->next; \
	if ((e)->next) (e)->next->prev = (e)->prev; else (l)->tail = (e)->prev; \
	(e)->prev = (e)->next = NULL;                                          \
} while (0)
#define LIST_PUSH_HEAD(l, e, prev, next) do {                                 \
	(e)->prev = NULL; (e)->next = (l)->head;                               \
	if ((l)->head) (l)->head->prev = (e); else (l)->tail = (e);            \
	(l)->head = (e);                                                       \
} while (0)
#define LIST_PUSH_TAIL(l, e, prev, next) do {                                 \
	(e)->next = NULL; (e)->prev = (l)->tail;                               \
	if ((l)->tail) (l)->tail->next = (e); else (l)->head = (e);            \
	(l)->tail = (e);                                                       \
} while (0)

/* ---- growable buffer ---------------------------------------------------- */

struct buf {
	uint8_t *data;
	size_t len, cap;
};
#define BUF_INIT { NULL, 0, 0 }
int buf_reserve(struct buf *b, size_t extra);   /* room for len+extra bytes */
/* Room to read at least one more byte into b (cap - len - 1 of them): none
 * made while there is some; else first bytes at the start, and the buffer
 * doubled after that.  For reading a stream of unknown length in place. */
int buf_room(struct buf *b, size_t first);
int buf_append(struct buf *b, const void *p, size_t n);
int buf_append_zero(struct buf *b, size_t n);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_free(struct buf *b);
static inline void buf_freep(struct buf *b) { buf_free(b); }

/* ---- files -------------------------------------------------------------- */

/* Read/write all of n bytes, retrying on EINTR and short transfers.
 * read_full returns the bytes read (less than n only at end of file). */
ssize_t read_full(int fd, void *p, size_t n);
int write_full(int fd, const void *p, size_t n);
ssize_t pread_full(int fd, void *p, size_t n, uint64_t off);
int pwrite_full(int fd, const void *p, size_t n, uint64_t off);

/* Read a whole file into *ret (NUL-terminated past len).  Refuses files
 * larger than max bytes with -EFBIG. */
int read_file(const char *path, size_t max, struct buf *ret);
/* Create every missing directory of path (mode 0755). */
int mkdir_p(const char *path, mode_t mode);
/* Write data to path atomically: temporary file in the same directory,
 * fsync, rename over path, fsync of the directory. */
int write_file_atomic(const char *path, const void *data, size_t len, mode_t mode);
int fsync_dir_of(const char *path);

/* ---- parsing ------------------------------------------------------------ */

/* "4096", "64K", "1M", "2G", "1.5G", "512KiB" → bytes.  -EINVAL otherwise. */
int parse_size(const char *s, uint64_t *ret);
/* "12" → 12; rejects trailing junk and overflow. */
int parse_uint(const char *s, uint64_t max, uint64_t *ret);
/* A duration → milliseconds: a whole number with a unit "ms", "s", "m" or
 * "h", or a bare number in unit_ms milliseconds ("30" with unit_ms 1000 is
 * 30 s).  -EINVAL for anything else or more than max_ms. */
int parse_duration(const char *s, uint64_t unit_ms, uint64_t max_ms, uint64_t *ret_ms);
/* Seconds as a limit: a number (a fraction allowed: "0.5") or a whole number
 * with a unit as parse_duration takes ("500ms", "2s", "10m", "1h"), at most
 * max_s.  -EINVAL otherwise. */
int parse_seconds(const char *s, double max_s, double *ret_s);
/* Human-readable size into out (e.g. "1.4 MiB"). */
const char *format_size(uint64_t n, char *out, size_t outlen);

/* Monotonic time in nanoseconds. */
uint64_t now_ns(void);
/* A number to spread retries over time: getrandom's, else the clock's and
 * the pid's (random() is unseeded, so every process would draw the same).
 * Not for secrets. */
uint32_t random_u32(void);

/* The release ("0.1.0", the Makefile's VERSION) and the git commit it was built from
 * (12 hex digits, "-dirty" after them when the tree differed from it; "" when not built
 * from a checkout).  Static strings. */
const char *lib_version(void);
const char *lib_commit(void);

/* Load the shared library soname now (RTLD_NOW, RTLD_LOCAL), or NULL (logged, naming it).
 * It stays loaded as long as the caller keeps it: the loaders never close one in use. */
void *dl_open(const char *soname);
/* Store the address of name in lib (opened from soname) into slot, a function pointer's
 * storage of the right type.  false (logged, naming soname and name) when lib lacks it. */
bool dl_sym(void *lib, const char *soname, const char *name, void *slot);

#endif
