/*
 * fuzz_index.c — libFuzzer target for the index reader: open the input with
 * image_open_mem() and touch everything a mount would, so that any read the
 * bounds checks miss shows up under ASan.  Every call may fail; none may
 * crash, read outside the input, or run unbounded.
 *
 * The input is copied into a buffer of exactly its size, so that an overread
 * of even one byte lands in ASan's redzone.  Loops are capped, since a hostile
 * index can make every inode a directory listing the whole dirent table.
 *
 *   make fuzz FUZZ_SECONDS=60
 *
 * Seeds live in tests/fuzz/corpus/fuzz_index/ (see mkseeds_index.c).
 */
#include <endian.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "image/image.h"

#define MAX_INODES 512
#define TOTAL_SIZE_OFF 32   /* header field, FORMAT.md */
#define MAX_PER_INODE 512

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static void touch(const void *p, size_t len)
{
	const uint8_t *b = p;

	if (len)
		sink += b[0] + b[len - 1];
}

static void walk_dir(const struct image *img, uint64_t ino)
{
	const char *name;
	size_t len;
	uint64_t child, found, pos;
	int r;

	sink += (uint64_t)image_dir_size(img, ino);
	for (pos = 0; pos < MAX_PER_INODE; pos++) {
		r = image_readdir(img, ino, pos, &name, &len, &child);
		if (r <= 0)
			break;
		touch(name, len);
		if (image_lookup(img, ino, name, len, &found) == 0)
			sink += found;
	}
	/* names that are never stored, and one past the longest */
	sink += (uint64_t)image_lookup(img, ino, ".", 1, &found);
	sink += (uint64_t)image_lookup(img, ino, "zzzz", 4, &found);
}

static void walk_file(const struct image *img, uint64_t ino, uint64_t size)
{
	struct image_extent e;
	struct image_chunk c;
	int64_t n, i;

	n = image_extent_count(img, ino);
	for (i = 0; i < n && i < MAX_PER_INODE; i++)
		if (image_extent(img, ino, (uint64_t)i, &e) == 0 && image_chunk(img, e.chunk, &c) == 0)
			sink += c.size + e.len;
	sink += (uint64_t)image_extent_find(img, ino, 0);
	sink += (uint64_t)image_extent_find(img, ino, size / 2);
	sink += (uint64_t)image_extent_find(img, ino, UINT64_MAX);
}

static void walk_xattrs(const struct image *img, uint64_t ino)
{
	const char *name;
	const void *value;
	size_t nlen, vlen;
	char buf[256];
	uint32_t i;

	for (i = 0; i < MAX_PER_INODE; i++) {
		if (image_xattr(img, ino, i, &name, &nlen, &value, &vlen) <= 0)
			break;
		touch(name, nlen);
		touch(value, vlen);
		if (nlen < sizeof(buf)) {
			memcpy(buf, name, nlen);
			buf[nlen] = 0;
			sink += (uint64_t)image_getxattr(img, ino, buf, &value, &vlen);
		}
	}
	sink += (uint64_t)image_getxattr(img, ino, "security.capability", &value, &vlen);
}

/* Open copy (size bytes, owned) and walk it; frees copy. */
static void run(uint8_t *copy, size_t size)
{
	static const char *const paths[] = {
		"", "/", "etc/passwd", "usr/bin/ping", "a/b/c", "./x/../y", "dev/null",
	};
	struct image_info info;
	struct image_stat st;
	struct image_chunk c;
	struct image *img;
	const char *s;
	uint64_t ino, i;
	size_t len;

	if (image_open_mem(copy, size, &img) < 0) {
		free(copy);
		return;
	}
	sink += (uint64_t)image_verify(img);
	image_get_info(img, &info);
	image_config(img, &s, &len);
	touch(s, len);
	for (i = 0; i < info.chunks && i < MAX_PER_INODE; i++)
		if (image_chunk(img, (uint32_t)i, &c) == 0)
			sink += c.size;
	sink += (uint64_t)image_chunk(img, UINT32_MAX, &c);

	for (ino = 0; ino <= info.inodes + 1 && ino <= MAX_INODES; ino++) {
		if (image_getattr(img, ino, &st) < 0)
			continue;
		if (S_ISLNK(st.mode) && image_readlink(img, ino, &s, &len) == 0)
			touch(s, len);
		if (S_ISDIR(st.mode))
			walk_dir(img, ino);
		if (S_ISREG(st.mode))
			walk_file(img, ino, st.size);
		walk_xattrs(img, ino);
	}
	for (i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
		if (image_lookup_path(img, paths[i], &ino) == 0)
			sink += ino;

	image_free(img);
	free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t total = htole64(size);
	uint8_t *copy;

	copy = malloc(size ? size : 1);
	if (!copy)
		return 0;
	memcpy(copy, data, size);
	run(copy, size);

	/* Mutations that change the length fail the total-size check at once;
	 * once more with it patched, so the section checks meet them too. */
	if (size >= TOTAL_SIZE_OFF + 8 && memcmp(data + TOTAL_SIZE_OFF, &total, 8) != 0) {
		copy = malloc(size);
		if (!copy)
			return 0;
		memcpy(copy, data, size);
		memcpy(copy + TOTAL_SIZE_OFF, &total, 8);
		run(copy, size);
	}
	return 0;
}
