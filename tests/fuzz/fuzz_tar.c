/*
 * fuzz_tar.c — libFuzzer target for the tar reader: the input is a tar
 * stream (plain, gzip or zstd) read through a memfd; every member is
 * listed, its name normalised and its contents read to the end.  The build
 * pipeline is left out: this target is about the parser of outside input.
 * The reader logs every refusal: run with -close_fd_mask=2 to mute it.
 */
#include <sys/mman.h>

#include "chunker/chunker-internal.h"
#include "image/image.h"
#include "lib/lib.h"
#include "lib/sha256.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int fd = -1;
	struct tar_reader *rd = NULL;
	_cleanup_sha256_ struct sha256 h = SHA256_INIT;
	int r;

	if (fd < 0) {
		fd = memfd_create("fuzz", MFD_CLOEXEC);
		if (fd < 0)
			abort();
	}
	if (ftruncate(fd, 0) < 0 || pwrite_full(fd, data, size, 0) < 0 || lseek(fd, 0, SEEK_SET))
		abort();
	if (tar_reader_new(fd, "fuzz", &rd) < 0)
		abort();
	if (size && (data[0] & 1)) {  /* exercise the hashing path too */
		sha256_init(&h);
		tar_reader_hash(rd, &h);
	}
	for (;;) {
		const struct tar_entry *e;
		char path[4096];
		uint64_t total = 0, sum = 0;

		r = tar_reader_next(rd, &e);
		if (r <= 0)
			break;
		(void)image_path_normalize(e->path, path, sizeof(path));
		for (;;) {
			const void *p;
			size_t len;
			uint64_t hole;

			r = tar_reader_read(rd, &p, &len, &hole);
			if (r <= 0)
				break;
			if (p && len)
				sum += ((const uint8_t *)p)[len - 1];  /* touch the bytes */
			total += len + hole;
		}
		if (r < 0)
			break;
		if (e->type == '0' && total != e->size)
			abort();  /* contents must add up to the size */
		(void)sum;
	}
	if (r == 0)
		(void)tar_reader_finish(rd, NULL);
	tar_reader_free(rd);
	return 0;
}
