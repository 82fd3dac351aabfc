/*
 * test_files.c — the tar stream of the sandbox's file transfers
 * (sandbox/files-tar.c) and the transfers themselves (sandbox/files.c) on a
 * scratch directory: header round trips (ustar prefix, pax names, links,
 * sizes past 8 GiB, mtimes before 1970), GNU long names, malformed headers,
 * tree round trips with hard links and symlinks, and the hostile archives,
 * each checked for its error, its one line, and a target left as it was
 * outside.  Runs as any user; the confined runs are
 * tests/integration/sandbox_files.sh.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "lib/lib.h"
#include "sandbox/files-internal.h"
#include "sandbox/sandbox.h"

static int mem(void)
{
	int fd = memfd_create("tar", MFD_CLOEXEC);

	assert_true(fd >= 0);
	return fd;
}

static void rewind_fd(int fd)
{
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
}

static void add(int fd, const char *path, char type, const char *link, const void *data,
                uint64_t size, mode_t mode)
{
	struct files_tar_hdr h = { .path = path, .link = link ? link : "", .type = type,
	                           .mode = mode, .size = size, .mtime = { 1700000000, 0 } };

	assert_int_equal(files_tar_write_header(fd, &h), 0);
	if (data) {
		assert_int_equal(write_full(fd, data, (size_t)size), 0);
		assert_int_equal(files_tar_write_pad(fd, size), 0);
	}
}

/* ---- stderr, captured: the one line an error must leave ------------------ */

static int saved_err = -1, cap_fd = -1;

static void capture(void)
{
	cap_fd = mem();
	saved_err = dup(2);
	dup2(cap_fd, 2);
}

/* What was logged since capture(); asserts it is one line containing want. */
static void captured_line(const char *want)
{
	char b[4096] = { 0 };
	ssize_t n;

	dup2(saved_err, 2);
	close(saved_err);
	n = pread(cap_fd, b, sizeof(b) - 1, 0);
	close(cap_fd);
	assert_true(n > 0);
	if (!strstr(b, want) || strchr(b, '\n') != b + n - 1)
		fail_msg("wanted one line with \"%s\", got: %s", want, b);
}

/* Run call with stderr captured: it returns err and logs one line with
 * line in it (checked after stderr is back, so that a failure shows). */
#define EXPECT_LINE(err, line, call) do {                                    \
		int r_;                                                       \
		capture();                                                    \
		r_ = (call);                                                  \
		captured_line(line);                                          \
		assert_int_equal(r_, (err));                                  \
	} while (0)

/* ---- the format ---------------------------------------------------------- */

static void test_files__header_round_trips(void **state)
{
	char prefixed[200], paxname[400], longlink[300];
	struct files_tar_reader *rd;
	struct files_tar_hdr h;
	int fd = mem();
	char b[16];

	memset(prefixed, 'a', sizeof(prefixed) - 1);
	prefixed[sizeof(prefixed) - 1] = 0;
	prefixed[120] = '/';                    /* 120 + 79: ustar's prefix field */
	memset(paxname, 'b', sizeof(paxname) - 1);
	paxname[sizeof(paxname) - 1] = 0;       /* no slash: only pax holds it */
	memset(longlink, 'c', sizeof(longlink) - 1);
	longlink[sizeof(longlink) - 1] = 0;
	add(fd, prefixed, FILES_TAR_FILE, NULL, "hello", 5, 0644);
	add(fd, paxname, FILES_TAR_SYMLINK, longlink, NULL, 0, 0777);
	struct files_tar_hdr old = { .path = "old", .link = "", .type = FILES_TAR_DIR,
	                             .mode = 01777, .mtime = { -100, 250000000 } };
	assert_int_equal(files_tar_write_header(fd, &old), 0);
	assert_int_equal(files_tar_write_end(fd), 0);
	/* a 9 GiB header last, with no data: its size must read back */
	struct files_tar_hdr big = { .path = "big", .link = "", .type = FILES_TAR_FILE,
	                             .mode = 0600, .size = 9ull << 30 };
	int bfd = mem();
	assert_int_equal(files_tar_write_header(bfd, &big), 0);

	rewind_fd(fd);
	assert_int_equal(files_tar_reader_new(fd, &rd), 0);
	assert_int_equal(files_tar_next(rd, &h), 1);
	assert_string_equal(h.path, prefixed);
	assert_int_equal(h.type, FILES_TAR_FILE);
	assert_int_equal(h.size, 5);
	assert_int_equal(h.mode, 0644);
	assert_int_equal(h.mtime.tv_sec, 1700000000);
	assert_int_equal(files_tar_read(rd, b, sizeof(b)), 5);
	assert_memory_equal(b, "hello", 5);
	assert_int_equal(files_tar_read(rd, b, sizeof(b)), 0);
	assert_int_equal(files_tar_next(rd, &h), 1);
	assert_string_equal(h.path, paxname);
	assert_string_equal(h.link, longlink);
	assert_int_equal(h.type, FILES_TAR_SYMLINK);
	assert_int_equal(files_tar_next(rd, &h), 1);   /* data of the one before skipped */
	assert_string_equal(h.path, "old");
	assert_int_equal(h.mode, 01777);
	assert_int_equal(h.mtime.tv_sec, -100);
	assert_int_equal(h.mtime.tv_nsec, 250000000);
	assert_int_equal(files_tar_next(rd, &h), 0);
	assert_int_equal(files_tar_next(rd, &h), 0);
	files_tar_reader_free(rd);

	rewind_fd(bfd);
	assert_int_equal(files_tar_reader_new(bfd, &rd), 0);
	assert_int_equal(files_tar_next(rd, &h), 1);
	assert_int_equal(h.size, 9ull << 30);
	EXPECT_LINE(-EBADMSG, "`big`: the stream ends inside it",
	            files_tar_read(rd, b, sizeof(b)));
	files_tar_reader_free(rd);
	close(fd);
	close(bfd);
}

static void test_files__gnu_long_names(void **state)
{
	char name[300], link[300];
	struct files_tar_reader *rd;
	struct files_tar_hdr h;
	int fd = mem();

	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = 0;
	memset(link, 'l', sizeof(link) - 1);
	link[sizeof(link) - 1] = 0;
	add(fd, "././@LongLink", 'L', NULL, name, sizeof(name), 0);
	add(fd, "././@LongLink", 'K', NULL, link, sizeof(link), 0);
	add(fd, "short", FILES_TAR_HARDLINK, "short-link", NULL, 0, 0644);
	assert_int_equal(files_tar_write_end(fd), 0);
	rewind_fd(fd);
	assert_int_equal(files_tar_reader_new(fd, &rd), 0);
	assert_int_equal(files_tar_next(rd, &h), 1);
	assert_string_equal(h.path, name);
	assert_string_equal(h.link, link);
	assert_int_equal(h.type, FILES_TAR_HARDLINK);
	assert_int_equal(files_tar_next(rd, &h), 0);
	files_tar_reader_free(rd);
	close(fd);
}

/* Read fd's archive to its end: the first error, or 0. */
static int read_all(int fd)
{
	struct files_tar_reader *rd;
	struct files_tar_hdr h;
	char b[512];
	int r;

	rewind_fd(fd);
	assert_int_equal(files_tar_reader_new(fd, &rd), 0);
	while ((r = files_tar_next(rd, &h)) > 0) {
		ssize_t n;

		while ((n = files_tar_read(rd, b, sizeof(b))) > 0)
			;
		if (n < 0) {
			r = (int)n;
			break;
		}
	}
	files_tar_reader_free(rd);
	return r;
}

static void expect_refused(int fd, int err, const char *line)
{
	EXPECT_LINE(err, line, read_all(fd));
	close(fd);
}

static void test_files__malformed_headers(void **state)
{
	uint8_t blk[512];
	int fd;

	/* a checksum off by one */
	fd = mem();
	add(fd, "f", FILES_TAR_FILE, NULL, "x", 1, 0644);
	assert_int_equal(files_tar_write_end(fd), 0);
	assert_int_equal(pread(fd, blk, 512, 0), 512);
	blk[150]++;
	assert_int_equal(pwrite(fd, blk, 512, 0), 512);
	expect_refused(fd, -EBADMSG, "bad header checksum at byte 0");

	/* no magic: a v7 header is not read */
	fd = mem();
	add(fd, "f", FILES_TAR_FILE, NULL, "x", 1, 0644);
	assert_int_equal(files_tar_write_end(fd), 0);
	assert_int_equal(pread(fd, blk, 512, 0), 512);
	memset(blk + 257, 0, 8);
	{
		unsigned sum = 0;
		char s[8];

		memset(blk + 148, ' ', 8);
		for (int i = 0; i < 512; i++)
			sum += blk[i];
		snprintf(s, sizeof(s), "%06o", sum);
		memcpy(blk + 148, s, 7);
	}
	assert_int_equal(pwrite(fd, blk, 512, 0), 512);
	expect_refused(fd, -EBADMSG, "is not ustar, pax or GNU");

	/* a member cut short, and an archive with no end blocks */
	fd = mem();
	add(fd, "cut", FILES_TAR_FILE, NULL, "abc", 3, 0644);
	assert_int_equal(ftruncate(fd, 512 + 2), 0);
	expect_refused(fd, -EBADMSG, "`cut`: the stream ends inside it");
	fd = mem();
	add(fd, "f", FILES_TAR_FILE, NULL, "abc", 3, 0644);
	expect_refused(fd, -EBADMSG, "without the end-of-archive blocks");
	fd = mem();
	assert_int_equal(write_full(fd, "not a tar at all", 16), 0);
	expect_refused(fd, -EBADMSG, "ends inside the header at byte 0");

	/* pax: a record whose length lies, a header past the bound */
	fd = mem();
	add(fd, "p", 'x', NULL, "99 path=x\n", 10, 0644);
	add(fd, "f", FILES_TAR_FILE, NULL, "", 0, 0644);
	assert_int_equal(files_tar_write_end(fd), 0);
	expect_refused(fd, -EBADMSG, "malformed pax header at byte 0");
	fd = mem();
	add(fd, "p", 'x', NULL, NULL, FILES_TAR_PAX_MAX + 1, 0644);
	expect_refused(fd, -EBADMSG, "extended header at byte 512");

	/* a run of meta headers with no member */
	fd = mem();
	for (int i = 0; i < FILES_TAR_META_MAX; i++)
		add(fd, "p", 'x', NULL, "10 path=x\n", 10, 0644);
	expect_refused(fd, -EBADMSG, "extended headers before a member");

	/* sparse members are refused, not read as their map */
	fd = mem();
	add(fd, "p", 'x', NULL, "22 GNU.sparse.major=1\n", 22, 0644);
	add(fd, "s", FILES_TAR_FILE, NULL, "", 0, 0644);
	assert_int_equal(files_tar_write_end(fd), 0);
	expect_refused(fd, -EOPNOTSUPP, "`s`: sparse members are not supported");

	/* a size field that is not a number */
	fd = mem();
	add(fd, "f", FILES_TAR_FILE, NULL, "", 0, 0644);
	assert_int_equal(files_tar_write_end(fd), 0);
	assert_int_equal(pread(fd, blk, 512, 0), 512);
	memcpy(blk + 124, "12x", 3);
	{
		unsigned sum = 0;
		char s[8];

		memset(blk + 148, ' ', 8);
		for (int i = 0; i < 512; i++)
			sum += blk[i];
		snprintf(s, sizeof(s), "%06o", sum);
		memcpy(blk + 148, s, 7);
	}
	assert_int_equal(pwrite(fd, blk, 512, 0), 512);
	expect_refused(fd, -EBADMSG, "bad size field at byte 0");
}

/* ---- the transfers, on a scratch directory ------------------------------- */

static char scratch[64];

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	if (flag == FTW_DP || flag == FTW_D)
		(void)chmod(p, 0700);
	return remove(p);
}

static int setup(void **state)
{
	strcpy(scratch, "/tmp/test_files.XXXXXX");
	assert_non_null(mkdtemp(scratch));
	return 0;
}

static int teardown(void **state)
{
	nftw(scratch, rm_entry, 32, FTW_DEPTH | FTW_PHYS);
	return 0;
}

static char *at(const char *rel)
{
	static char p[8][512];
	static int i;

	i = (i + 1) % 8;
	snprintf(p[i], sizeof(p[i]), "%s/%s", scratch, rel);
	return p[i];
}

static void put(const char *rel, const char *data)
{
	int fd = open(at(rel), O_WRONLY | O_CREAT | O_TRUNC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write_full(fd, data, strlen(data)), 0);
	close(fd);
}

static void assert_content(const char *rel, const char *want)
{
	struct buf b = BUF_INIT;

	assert_int_equal(read_file(at(rel), 1 << 20, &b), 0);
	assert_int_equal(b.len, strlen(want));
	assert_memory_equal(b.data, want, b.len);
	buf_free(&b);
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every name under dir, sorted, one a line, with a type letter: what an
 * extraction may not change outside its target. */
static void listing(const char *dir, const char *prefix, struct buf *out)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char *names[256];
	size_t n = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && n < 256)
			names[n++] = strdup(de->d_name);
	closedir(d);
	qsort(names, n, sizeof(*names), cmp_names);
	for (size_t i = 0; i < n; i++) {
		char p[1024];
		struct stat st;

		snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
		assert_int_equal(lstat(p, &st), 0);
		buf_printf(out, "%s%s %o %lld\n", prefix, names[i], st.st_mode,
		           S_ISDIR(st.st_mode) ? 0LL : (long long)st.st_size);
		if (S_ISDIR(st.st_mode)) {
			char sub[1024];

			snprintf(sub, sizeof(sub), "%s%s/", prefix, names[i]);
			listing(p, sub, out);
		}
		free(names[i]);
	}
}

static void test_files__tree_round_trip(void **state)
{
	struct buf a = BUF_INIT, b = BUF_INIT;
	char deep[300];
	int fd = mem();

	assert_int_equal(mkdir(at("src"), 0755), 0);
	assert_int_equal(mkdir(at("src/sub"), 0750), 0);
	assert_int_equal(mkdir(at("src/ro"), 0755), 0);
	put("src/a", "alpha");
	put("src/sub/b", "beta");
	put("src/ro/c", "gamma");
	assert_int_equal(chmod(at("src/ro"), 0555), 0);
	assert_int_equal(chmod(at("src/a"), 0640), 0);
	assert_int_equal(link(at("src/a"), at("src/sub/a-link")), 0);
	assert_int_equal(symlink("/etc/passwd", at("src/abs-link")), 0);
	/* a name only pax holds */
	memset(deep, 'd', 250);
	deep[250] = 0;
	{
		char p[600];

		snprintf(p, sizeof(p), "src/sub/%s", deep);
		put(p, "long");
	}
	assert_int_equal(mkfifo(at("src/fifo"), 0644), 0);  /* left out, never opened */

	EXPECT_LINE(0, "`fifo`: not a file, directory or symlink: left out",
	            sandbox_tar_get(fd, at("src"), NULL));
	rewind_fd(fd);
	assert_int_equal(sandbox_tar_put(fd, at("dst"), NULL), 0);
	close(fd);
	assert_int_equal(unlink(at("src/fifo")), 0);
	listing(at("src"), "", &a);
	listing(at("dst"), "", &b);
	assert_string_equal((char *)a.data, (char *)b.data);
	assert_content("dst/sub/a-link", "alpha");
	assert_content("dst/ro/c", "gamma");
	{
		struct stat s1, s2;
		char l[64] = { 0 };

		assert_int_equal(stat(at("dst/a"), &s1), 0);
		assert_int_equal(stat(at("dst/sub/a-link"), &s2), 0);
		assert_int_equal(s1.st_ino, s2.st_ino);   /* the hard link kept */
		assert_int_equal(readlink(at("dst/abs-link"), l, sizeof(l) - 1), 11);
		assert_string_equal(l, "/etc/passwd");
	}
	buf_free(&a);
	buf_free(&b);
}

static void test_files__file_put_and_get(void **state)
{
	struct sandbox_files_limits small = { .max_bytes = 4 };
	int in = mem(), out = mem();
	char b[16] = { 0 };
	struct stat st;

	assert_int_equal(write_full(in, "payload", 7), 0);
	rewind_fd(in);
	EXPECT_LINE(-ENOENT, "open the directory",
	            sandbox_file_put(in, at("p/q/f"), 04755, false, NULL));
	rewind_fd(in);
	assert_int_equal(sandbox_file_put(in, at("p/q/f"), 04755, true, NULL), 0);
	assert_int_equal(stat(at("p/q/f"), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0755);        /* setuid dropped */
	assert_content("p/q/f", "payload");
	assert_int_equal(sandbox_file_get(out, at("p/q/f"), NULL), 0);
	assert_int_equal(pread(out, b, sizeof(b), 0), 7);

	/* past the limit: refused from the size, nothing left behind */
	rewind_fd(in);
	EXPECT_LINE(-EFBIG, "past the limit of 4",
	            sandbox_file_put(in, at("p/q/g"), 0644, false, &small));
	{
		struct buf l = BUF_INIT;

		listing(at("p/q"), "", &l);
		assert_string_equal((char *)l.data, "f 100755 7\n");
		buf_free(&l);
	}
	EXPECT_LINE(-EFBIG, "past the limit of 4",
	            sandbox_file_get(out, at("p/q/f"), &small));

	/* a fifo is refused at once, never waited on */
	assert_int_equal(mkfifo(at("p/fifo"), 0644), 0);
	EXPECT_LINE(-EINVAL, "not a regular file",
	            sandbox_file_get(out, at("p/fifo"), NULL));

	/* a symlink at the name is neither followed nor replaced */
	assert_int_equal(symlink("f", at("p/q/link")), 0);
	rewind_fd(in);
	EXPECT_LINE(-ELOOP, "is a symlink",
	            sandbox_file_put(in, at("p/q/link"), 0644, false, NULL));
	/* parents are never made through one */
	assert_int_equal(mkdir(at("outside"), 0755), 0);
	assert_int_equal(symlink(at("outside"), at("p/out")), 0);
	rewind_fd(in);
	assert_int_equal(sandbox_file_put(in, at("p/out/made/f"), 0644, true, NULL), 0);
	assert_int_equal(access(at("outside/made/f"), F_OK), 0);  /* an existing link is the caller's path */
	close(in);
	close(out);
}

/* A listing's lines that are not t or under it, in place. */
static const char *outside_t(struct buf *l)
{
	char *o = (char *)l->data, *w = o;

	for (char *p = o, *q; p && *p; p = q) {
		q = strchr(p, '\n') + 1;
		if (strncmp(p, "t/", 2) && strncmp(p, "t ", 2)) {
			memmove(w, p, (size_t)(q - p));
			w += q - p;
		}
	}
	*w = 0;
	return o;
}

/* Extract fd into scratch/t; the error and line wanted; and the scratch
 * tree outside t the same before and after. */
static void hostile(int fd, const struct sandbox_files_limits *lim, int err, const char *line)
{
	struct buf before = BUF_INIT, after = BUF_INIT;

	listing(scratch, "", &before);
	rewind_fd(fd);
	EXPECT_LINE(err, line, sandbox_tar_put(fd, at("t"), lim));
	close(fd);
	listing(scratch, "", &after);
	/* only t's own entries may differ */
	assert_string_equal(outside_t(&before), outside_t(&after));
	buf_free(&before);
	buf_free(&after);
}

static void test_files__hostile_archives(void **state)
{
	struct sandbox_files_limits lim = { .max_bytes = 1 << 20, .max_entries = 4 };
	int fd;

	assert_int_equal(mkdir(at("t"), 0755), 0);
	assert_int_equal(mkdir(at("etc"), 0755), 0);
	put("etc/passwd", "root");

	fd = mem();
	add(fd, "../etc/passwd", FILES_TAR_FILE, NULL, "owned", 5, 0644);
	files_tar_write_end(fd);
	hostile(fd, NULL, -EINVAL, "`../etc/passwd`: its name has a `..` component");

	fd = mem();
	add(fd, "ok/../../etc/passwd", FILES_TAR_FILE, NULL, "owned", 5, 0644);
	files_tar_write_end(fd);
	hostile(fd, NULL, -EINVAL, "has a `..` component");

	fd = mem();
	add(fd, at("etc/passwd"), FILES_TAR_FILE, NULL, "owned", 5, 0644);
	files_tar_write_end(fd);
	hostile(fd, NULL, -EINVAL, "its name is absolute");

	/* a symlink, then a file through it */
	fd = mem();
	add(fd, "l", FILES_TAR_SYMLINK, at("etc"), NULL, 0, 0777);
	add(fd, "l/passwd", FILES_TAR_FILE, NULL, "owned", 5, 0644);
	files_tar_write_end(fd);
	hostile(fd, NULL, -ELOOP, "`l/passwd`: its parent `l`: a symlink is in the way");
	assert_content("etc/passwd", "root");
	assert_int_equal(unlink(at("t/l")), 0);   /* the member before the error stays */

	fd = mem();
	add(fd, "dev", FILES_TAR_CHAR, NULL, NULL, 0, 0666);
	files_tar_write_end(fd);
	hostile(fd, NULL, -EPERM, "`dev`: device nodes are refused");
	fd = mem();
	add(fd, "fifo", FILES_TAR_FIFO, NULL, NULL, 0, 0666);
	files_tar_write_end(fd);
	hostile(fd, NULL, -EPERM, "`fifo`: fifos are refused");

	/* hard links: only to what this archive extracted */
	fd = mem();
	add(fd, "h", FILES_TAR_HARDLINK, "../etc/passwd", NULL, 0, 0644);
	files_tar_write_end(fd);
	hostile(fd, NULL, -EINVAL, "`../etc/passwd`: its link target has a `..` component");
	fd = mem();
	add(fd, "h", FILES_TAR_HARDLINK, at("etc/passwd") + 1, NULL, 0, 0644);
	files_tar_write_end(fd);
	hostile(fd, NULL, -EPERM, "which is not a file extracted before it");

	/* 10 GB declared: refused on the header, no byte of it read */
	fd = mem();
	add(fd, "zeros", FILES_TAR_FILE, NULL, NULL, 10000000000ull, 0644);
	hostile(fd, &lim, -EFBIG, "`zeros`: 10000000000 bytes pass the limit of 1048576");
	fd = mem();
	for (int i = 0; i < 5; i++) {
		char n[16];

		snprintf(n, sizeof(n), "f%d", i);
		add(fd, n, FILES_TAR_FILE, NULL, "x", 1, 0644);
	}
	files_tar_write_end(fd);
	hostile(fd, &lim, -EFBIG, "more than the limit of 4 members");
	/* the members before the limit are whole; no temporary name is left */
	{
		struct buf l = BUF_INIT;

		listing(at("t"), "", &l);
		assert_string_equal((char *)l.data, "f0 100644 1\nf1 100644 1\nf2 100644 1\n"
		                    "f3 100644 1\n");
		buf_free(&l);
	}
	/* a file cut short leaves no temporary name */
	fd = mem();
	add(fd, "cut", FILES_TAR_FILE, NULL, "abcdef", 6, 0644);
	assert_int_equal(ftruncate(fd, 512 + 3), 0);
	hostile(fd, NULL, -EBADMSG, "`cut`: the stream ends inside it");
	{
		struct buf l = BUF_INIT;

		listing(at("t"), "", &l);
		assert_null(strstr((char *)l.data, "lazyroot-put"));
		assert_null(strstr((char *)l.data, "cut"));
		buf_free(&l);
	}
	/* a member over a directory in the way */
	assert_int_equal(mkdir(at("t/d"), 0755), 0);
	fd = mem();
	add(fd, "d", FILES_TAR_FILE, NULL, "x", 1, 0644);
	files_tar_write_end(fd);
	hostile(fd, NULL, -EISDIR, "`d`: a directory is in the way");
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_files__header_round_trips),
		cmocka_unit_test(test_files__gnu_long_names),
		cmocka_unit_test(test_files__malformed_headers),
		T(test_files__tree_round_trip),
		T(test_files__file_put_and_get),
		T(test_files__hostile_archives),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
