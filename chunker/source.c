/*
 * source.c — source_add(): what a source is, decided from its contents.
 *
 *   directory with oci-layout        → OCI image layout
 *   other directory                  → a root filesystem tree
 *   tar (any compression) that looks
 *   like an image archive            → docker save / OCI archive
 *   other tar                        → a root filesystem tarball
 *
 * An image archive holds only manifest.json, repositories, index.json,
 * oci-layout, blobs/ and names made of a digest (<hex>/, <hex>.json) at its
 * top level.  The peek reads member names only and stops at the first other
 * top-level name, so a root filesystem tarball is recognised after its first
 * member or two; an image archive is scanned to the end (data is seeked over
 * when the file is uncompressed, decompressed and dropped otherwise).
 */
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>

#include "chunker/chunker-internal.h"
#include "chunker/chunker.h"
#include "lib/lib.h"

static bool is_hex64(const char *s, size_t len)
{
	size_t i;

	if (len != 64)
		return false;
	for (i = 0; i < 64; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* Whether a normalised top-level name could belong to an image archive. */
static bool archive_name(const char *top, size_t len)
{
	static const char *const names[] = {
		"manifest.json", "repositories", "index.json", "oci-layout", "blobs",
	};
	size_t i;

	for (i = 0; i < ARRAY_SIZE(names); i++)
		if (len == strlen(names[i]) && memcmp(top, names[i], len) == 0)
			return true;
	/* <hex>/ layer directories, <hex>.json configs, <hex>.tar layers */
	return is_hex64(top, len) ||
	       (len == 69 && memcmp(top + 64, ".json", 5) == 0 && is_hex64(top, 64)) ||
	       (len == 68 && memcmp(top + 64, ".tar", 4) == 0 && is_hex64(top, 64));
}

/* 1 if the tar on fd is an image archive, 0 if not, -errno. */
static int peek_image_archive(int fd, const char *name)
{
	struct tar_reader *rd = NULL;
	bool manifest = false, layout = false, index = false, other = false;
	int r;

	r = tar_reader_new(fd, name, &rd);
	if (r < 0)
		return r;
	for (;;) {
		const struct tar_entry *e;
		char path[PATH_MAX];
		size_t top;

		r = tar_reader_next(rd, &e);
		if (r <= 0)
			break;
		if (image_path_normalize(e->path, path, sizeof(path)) < 0)
			continue;  /* the real pass reports it */
		if (!path[0])
			continue;
		top = strcspn(path, "/");
		if (!archive_name(path, top)) {
			other = true;
			break;
		}
		manifest |= strcmp(path, "manifest.json") == 0;
		layout |= strcmp(path, "oci-layout") == 0;
		index |= strcmp(path, "index.json") == 0;
	}
	tar_reader_free(rd);
	if (r < 0)
		return r;
	return !other && (manifest || (layout && index));
}

int source_add(struct build *b, const char *source, const char *platform)
{
	_cleanup_close_ int fd = -1;
	struct stat st;
	int r;

	fd = open(source, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0)
		return log_errno(-errno, "%s", source);
	if (S_ISDIR(st.st_mode)) {
		if (faccessat(fd, "oci-layout", F_OK, 0) == 0)
			return oci_build(b, fd, source, platform);
		return source_dir(b, source);
	}
	if (!S_ISREG(st.st_mode))
		return source_tar_fd(b, fd, source, false);  /* a pipe: no second pass */

	r = peek_image_archive(fd, source);
	if (r < 0)
		return r;
	if (r > 0)
		return docker_build(b, source, platform);
	if (lseek(fd, 0, SEEK_SET) < 0)
		return log_errno(-errno, "%s: seek", source);
	return source_tar_fd(b, fd, source, false);
}
