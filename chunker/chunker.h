/*
 * chunker.h — turning a source tree into chunks and an index.
 *
 * Three layers:
 *  - FastCDC: a pure function that finds the next cut point in a buffer;
 *  - the build pipeline: source walkers fill the image tree (image.h) and
 *    stream each regular file's bytes into the pipeline, which packs small
 *    files together, cuts large ones on their own, and hands chunks to worker
 *    threads that hash, compress and store them;
 *  - the source walkers: directory, tar (plain/gzip/zstd), OCI image layout,
 *    `docker save` archive, an image in an OCI registry.
 *
 * Publishing order is chunks, then the index, then the tag: build_finish()
 * writes the tag only after every chunk and the index are stored.
 */
#ifndef LAZYROOT_CHUNKER_H
#define LAZYROOT_CHUNKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct image_tree;
struct image_inode;
struct store;

/* ---- FastCDC ------------------------------------------------------------ */

struct fastcdc {
	uint32_t min, avg, max;
	uint64_t mask_s, mask_l;  /* normalized chunking: stricter mask before avg */
};

/* The gear table: 256 fixed pseudo-random 64-bit values (part of the format:
 * changing it changes every cut point). */
extern const uint64_t fastcdc_gear[256];

/* Check 64 <= min <= avg <= max <= 64 MiB with avg a power of two; -EINVAL. */
int fastcdc_init(struct fastcdc *c, uint32_t min, uint32_t avg, uint32_t max);

/* The length of the first chunk of buf[0, len): a content-defined cut point
 * in [min, max], or len itself when len <= min, or when no cut point lies in
 * buf and len < max (the caller then either has more data — and should call
 * again with more — or is at the end of the stream).  Pure; O(returned length). */
size_t fastcdc_cut(const struct fastcdc *c, const uint8_t *buf, size_t len);

/* The rolling hash value after feeding buf[0, len) from zero: the quantity
 * fastcdc_cut() tests at each byte (for tests). */
uint64_t fastcdc_hash(const uint8_t *buf, size_t len);

/* ---- the build pipeline ------------------------------------------------- */

struct build_params {
	uint32_t min_size, avg_size, max_size;  /* FastCDC bounds */
	int level;                              /* zstd level */
	unsigned threads;                       /* worker threads; 0 = one per core */
	const char *platform;                   /* "os/arch[/variant]" or NULL = host */
	bool progress;                          /* draw a progress bar on stderr */
	bool pack;                              /* also write the image's pack
	                                           (build_pack) before the tag */
	const char *tmp_dir;                    /* scratch space (a docker archive is
	                                           unpacked there); NULL: /tmp */
};

#define BUILD_DEFAULT_MIN (32 * 1024)
#define BUILD_DEFAULT_AVG (256 * 1024)
#define BUILD_DEFAULT_MAX (1024 * 1024)
#define BUILD_DEFAULT_LEVEL 1

void build_params_default(struct build_params *p);

struct build_summary {
	uint64_t entries;        /* directory entries (hard links counted each) */
	uint64_t bytes_in;       /* file bytes read from the source (holes excluded) */
	uint64_t chunks;         /* distinct chunks the index references */
	uint64_t chunks_new;     /* chunks the store did not have */
	uint64_t bytes_stored;   /* bytes written to the store for new chunks */
	uint64_t chunk_bytes;    /* distinct chunk bytes, uncompressed */
	uint64_t pack_bytes;     /* the pack's size (build_params.pack), else 0 */
	double seconds;
	char index[33];          /* the index's name, hex */
};

struct build;

/* A build writing into store (borrowed; must outlive the build). */
int build_new(const struct build_params *p, struct store *store, struct build **ret);
void build_free(struct build *b);

/* The parameters the build was made with (borrowed). */
const struct build_params *build_get_params(const struct build *b);

/* The tree walkers fill. */
struct image_tree *build_tree(struct build *b);

/*
 * Streaming one regular file's contents: begin, then data and holes in file
 * order, then end.  size is the file's final size (data plus holes), known
 * from the source's metadata; end checks that exactly that much was given
 * (-EIO otherwise).  Files smaller than the pack threshold and without holes
 * are packed with their neighbours into shared chunks.
 *
 * Once storing a chunk has failed, these return -ECANCELED: the failure was
 * logged where it happened, and the caller passes the error up without
 * logging again.
 */
int build_file_begin(struct build *b, struct image_inode *ino, uint64_t size);
int build_file_data(struct build *b, const void *data, size_t len);
int build_file_hole(struct build *b, uint64_t len);
int build_file_end(struct build *b);

/* Count one entry for the summary and the progress bar. */
void build_count_entry(struct build *b);
/* The file bytes the source will give in all, when known: the progress bar's
 * ETA. */
void build_set_total(struct build *b, uint64_t bytes);

/*
 * Flush the last chunks, wait for the workers, write the index, store it,
 * then (if tag is not NULL) point tag at it.  Any earlier failure (a worker
 * that could not store a chunk) fails this call and no tag is written.
 */
int build_finish(struct build *b, const char *tag, struct build_summary *ret);

/*
 * Write the pack of image img (its index named hex) into store s
 * (image/FORMAT.md, "Packs"; store.h): each chunk object is read, checked to
 * be its stored size and to decode to its name, and appended in table order;
 * the pack replaces an earlier one only once whole and durable, and a failure
 * leaves nothing.  -EOPNOTSUPP for a store that cannot hold packs (only `dir:`
 * can).  *ret_bytes (may be NULL): the pack's size.  Logs its errors.
 * Cost: a read, decode and hash of every chunk of the image.
 */
struct image;
int build_pack(struct store *s, const struct image *img, const char *hex, uint64_t *ret_bytes);

/* ---- sources ------------------------------------------------------------ */

/* Add SOURCE to the build: a directory, a tar archive (plain, gzip, zstd), an
 * OCI image layout directory, or a `docker save` archive, detected from its
 * contents.  Errors are logged with the source's name. */
int source_add(struct build *b, const char *source, const char *platform);

int source_dir(struct build *b, const char *path);
/* A tar stream from fd (any compression, detected).  With whiteouts, `.wh.`
 * entries delete from lower layers (OCI layer semantics); without, they are
 * ordinary files.  name is used in messages. */
int source_tar_fd(struct build *b, int fd, const char *name, bool whiteouts);
int source_oci(struct build *b, const char *dir, const char *platform);
int source_docker(struct build *b, const char *path);

/*
 * An image in an OCI registry (the distribution API), pulled straight into
 * the build: docker://HOST[:PORT]/NAME[:TAG|@sha256:DIGEST], or oci://… (a
 * HOST without '.' or ':' is a Docker Hub name).  Every blob is checked
 * against its digest as it streams; layers go through the tar reader as
 * they arrive, with no copy on disk.  Plain HTTP for loopback hosts (and
 * with plain_http), HTTPS otherwise.  Credentials go to the registry's own
 * origin only, never to a host it redirects to.  Errors are logged, naming
 * ref.  See chunker/registry.c.
 */
struct registry_params {
	const char *platform;       /* "os/arch[/variant]", or NULL = this host */
	const char *creds;          /* "USER:PASS", or NULL */
	const char *docker_config;  /* docker's config.json to take credentials from
	                               (auths.HOST.auth) when creds is NULL; may be
	                               NULL or missing */
	const char *ca_file;        /* CA bundle for HTTPS, or NULL = the system's */
	bool plain_http;            /* http:// for any host */
};

/* Whether source names a registry image (docker:// or oci://). */
bool source_is_registry(const char *source);
int source_registry(struct build *b, const char *ref, const struct registry_params *p);

#endif
