/*
 * mkseeds_index.c — write the seed indexes for fuzz_index into a directory,
 * each a small valid index (under 4 KiB) that reaches a different part of
 * the reader: every entry type, a wide directory, a fragmented sparse file,
 * a deep path, xattr-heavy inodes, an empty tree.
 *
 *   make build/liblazyroot.a
 *   cc -std=gnu11 -D_GNU_SOURCE -I. tests/fuzz/mkseeds_index.c \
 *      build/liblazyroot.a -o build/mkseeds_index
 *   build/mkseeds_index tests/fuzz/corpus/fuzz_index
 */
#include <stdio.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "image/image.h"
#include "lib/lib.h"

static const struct image_attr reg = { .mode = S_IFREG | 0644, .mtime_sec = 1700000000 };
static const struct image_attr dir = { .mode = S_IFDIR | 0755, .mtime_sec = 1700000000 };

static int chunk(struct image_tree *t, uint8_t tag, uint32_t size)
{
	struct image_chunk c = { .size = size, .stored_size = size / 3, .flags = IMAGE_CHUNK_ZSTD };
	int64_t idx = image_tree_new_chunk(t);

	if (idx < 0)
		return (int)idx;
	memset(c.name, tag, sizeof(c.name));
	return image_tree_set_chunk(t, (uint32_t)idx, &c) < 0 ? -EINVAL : (int)idx;
}

static int seed_every_type(struct image_tree *t)
{
	static const uint8_t cap[20] = { 0x01, 0, 0, 0x02, 0, 0x04 };
	struct image_attr a;
	struct image_inode *ino;
	int c = chunk(t, 1, 65536);

	if (c < 0)
		return c;
	if (image_tree_add(t, "etc/passwd", &reg, &ino) < 0)
		return -EINVAL;
	image_inode_set_size(ino, 300);
	if (image_inode_add_extent(ino, 0, (uint32_t)c, 0, 300) < 0)
		return -EINVAL;
	a = reg;
	a.mode = S_IFREG | S_ISUID | 0755;
	if (image_tree_add(t, "usr/bin/ping", &a, &ino) < 0)
		return -EINVAL;
	image_inode_set_size(ino, 10000);
	if (image_inode_add_extent(ino, 1000, (uint32_t)c, 300, 2000) < 0 ||
	    image_inode_add_extent(ino, 5000, (uint32_t)c, 9000, 5000) < 0 ||
	    image_inode_set_xattr(ino, "security.capability", cap, sizeof(cap)) < 0 ||
	    image_tree_link(t, "usr/bin/ping6", "usr/bin/ping") < 0)
		return -EINVAL;
	a = (struct image_attr){ .mode = S_IFLNK | 0777 };
	if (image_tree_add(t, "lib", &a, &ino) < 0 || image_inode_set_symlink(ino, "usr/lib") < 0)
		return -EINVAL;
	a = (struct image_attr){ .mode = S_IFCHR | 0666, .rdev = makedev(1, 3) };
	if (image_tree_add(t, "dev/null", &a, NULL) < 0)
		return -EINVAL;
	a = (struct image_attr){ .mode = S_IFBLK | 0660, .rdev = makedev(8, 0) };
	if (image_tree_add(t, "dev/sda", &a, NULL) < 0)
		return -EINVAL;
	a = (struct image_attr){ .mode = S_IFIFO | 0600 };
	if (image_tree_add(t, "run/fifo", &a, NULL) < 0)
		return -EINVAL;
	a = (struct image_attr){ .mode = S_IFSOCK | 0600 };
	if (image_tree_add(t, "run/sock", &a, NULL) < 0)
		return -EINVAL;
	a = (struct image_attr){ .mode = S_IFDIR | S_ISVTX | 0777 };
	if (image_tree_add(t, "tmp", &a, NULL) < 0)
		return -EINVAL;
	return image_tree_set_config(t, "{\"os\":\"linux\"}", 14);
}

static int seed_wide_dir(struct image_tree *t)
{
	char name[32];
	int i;

	for (i = 0; i < 36; i++) {
		snprintf(name, sizeof(name), "d/%d%s", (i * 7) % 36, i % 4 ? "" : "x");
		if (image_tree_add(t, name, i % 5 ? &reg : &dir, NULL) < 0)
			return -EINVAL;
	}
	return 0;
}

static int seed_sparse_file(struct image_tree *t)
{
	struct image_inode *ino;
	int c1 = chunk(t, 2, 8192), c2 = chunk(t, 3, 8192), i;

	if (c1 < 0 || c2 < 0 || image_tree_add(t, "sparse", &reg, &ino) < 0)
		return -EINVAL;
	image_inode_set_size(ino, 1 << 30);
	for (i = 0; i < 60; i++)
		if (image_inode_add_extent(ino, (uint64_t)i << 24, (uint32_t)(i % 2 ? c1 : c2),
		                           (uint32_t)i * 100, 100) < 0)
			return -EINVAL;
	return 0;
}

static int seed_deep(struct image_tree *t)
{
	char path[512] = "a";
	int i;

	for (i = 0; i < 40; i++)
		strcat(path, i % 2 ? "/a" : "/bb");
	return image_tree_add(t, path, &reg, NULL);
}

static int seed_xattrs(struct image_tree *t)
{
	static const uint8_t acl[28] = { 2, 0, 0, 0, 1, 0, 6, 0, 0xff, 0xff, 0xff, 0xff,
	                                 4, 0, 4, 0, 0xff, 0xff, 0xff, 0xff,
	                                 0x20, 0, 0, 0, 0xff, 0xff, 0xff, 0xff };
	struct image_inode *ino;
	char name[32];
	int i;

	if (image_tree_add(t, "x", &dir, &ino) < 0 ||
	    image_inode_set_xattr(ino, "system.posix_acl_access", acl, sizeof(acl)) < 0 ||
	    image_inode_set_xattr(ino, "system.posix_acl_default", acl, sizeof(acl)) < 0)
		return -EINVAL;
	for (i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "user.k%d", i);
		if (image_inode_set_xattr(ino, name, name, (size_t)i) < 0)
			return -EINVAL;
	}
	return 0;
}

static int seed_empty(struct image_tree *t)
{
	return 0;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fill)(struct image_tree *t);
	} seeds[] = {
		{ "every-type", seed_every_type },
		{ "wide-dir", seed_wide_dir },
		{ "sparse-file", seed_sparse_file },
		{ "deep", seed_deep },
		{ "xattrs", seed_xattrs },
		{ "empty", seed_empty },
	};
	char path[4096];
	size_t i;

	if (argc != 2) {
		fprintf(stderr, "usage: mkseeds_index DIR\n");
		return 2;
	}
	for (i = 0; i < ARRAY_SIZE(seeds); i++) {
		struct image_tree *t;
		struct buf out = BUF_INIT;
		int r;

		if (image_tree_new(&t) < 0)
			return 1;
		r = seeds[i].fill(t);
		if (r >= 0)
			r = image_write(t, &out);
		image_tree_free(t);
		if (r < 0)
			return log_errno(r, "build seed %s", seeds[i].name), 1;
		if (out.len > 4096)
			return log_error(1, "seed %s is %zu bytes", seeds[i].name, out.len);
		snprintf(path, sizeof(path), "%s/seed-%s", argv[1], seeds[i].name);
		r = write_file_atomic(path, out.data, out.len, 0644);
		buf_free(&out);
		if (r < 0)
			return log_errno(r, "write `%s`", path), 1;
	}
	return 0;
}
