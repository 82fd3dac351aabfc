/*
 * fuzz_files_tar.c — libFuzzer target for the tar reader of the sandbox's
 * file transfers (sandbox/files-tar.c): the input is a tar stream read
 * through a memfd; every member's header is taken and its data read to the
 * end, which must add up to the size the header gave.  Extraction is left
 * out: this target is about the parser of outside input.  The reader logs
 * every refusal: run with -close_fd_mask=2 to mute it.
 */
#include <sys/mman.h>

#include "lib/lib.h"
#include "sandbox/files-internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int fd = -1;
	struct files_tar_reader *rd = NULL;
	struct files_tar_hdr h;
	uint8_t buf[4096];
	int r;

	if (fd < 0) {
		fd = memfd_create("fuzz", MFD_CLOEXEC);
		if (fd < 0)
			abort();
	}
	if (ftruncate(fd, 0) < 0 || pwrite_full(fd, data, size, 0) < 0 || lseek(fd, 0, SEEK_SET))
		abort();
	if (files_tar_reader_new(fd, &rd) < 0)
		abort();
	while ((r = files_tar_next(rd, &h)) > 0) {
		uint64_t total = 0;
		ssize_t n;

		if (strlen(h.path) > FILES_TAR_NAME_MAX || strlen(h.link) > FILES_TAR_NAME_MAX)
			abort();
		while ((n = files_tar_read(rd, buf, sizeof(buf))) > 0)
			total += (uint64_t)n;
		if (n < 0)
			break;
		if (total != h.size)
			abort();   /* the data must add up to the size */
	}
	if (files_tar_offset(rd) > size)
		abort();
	files_tar_reader_free(rd);
	return 0;
}
