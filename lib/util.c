/* util.c — buffers, whole-file I/O, atomic writes, size parsing, time. */
#include <ctype.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/lib.h"

int buf_reserve(struct buf *b, size_t extra)
{
	size_t need, cap;
	uint8_t *p;

	if (extra > SIZE_MAX - b->len - 1)
		return -ENOMEM;
	need = b->len + extra + 1;  /* room for a NUL past len */
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	p = realloc(b->data, cap);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

int buf_room(struct buf *b, size_t first)
{
	if (b->len + 1 < b->cap)
		return 0;
	return buf_reserve(b, b->len > first ? b->len : first);
}

int buf_append(struct buf *b, const void *p, size_t n)
{
	int r = buf_reserve(b, n);

	if (r < 0)
		return r;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = 0;
	return 0;
}

int buf_append_zero(struct buf *b, size_t n)
{
	int r = buf_reserve(b, n);

	if (r < 0)
		return r;
	memset(b->data + b->len, 0, n + 1);
	b->len += n;
	return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n, r;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	r = buf_reserve(b, (size_t)n);
	if (r < 0)
		return r;
	va_start(ap, fmt);
	vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

void buf_free(struct buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

ssize_t read_full(int fd, void *p, size_t n)
{
	size_t done = 0;

	while (done < n) {
		ssize_t k = read(fd, (char *)p + done, n - done);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (k == 0)
			break;
		done += (size_t)k;
	}
	return (ssize_t)done;
}

int write_full(int fd, const void *p, size_t n)
{
	size_t done = 0;

	while (done < n) {
		ssize_t k = write(fd, (const char *)p + done, n - done);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		done += (size_t)k;
	}
	return 0;
}

ssize_t pread_full(int fd, void *p, size_t n, uint64_t off)
{
	size_t done = 0;

	while (done < n) {
		ssize_t k = pread(fd, (char *)p + done, n - done, (off_t)(off + done));

		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (k == 0)
			break;
		done += (size_t)k;
	}
	return (ssize_t)done;
}

int pwrite_full(int fd, const void *p, size_t n, uint64_t off)
{
	size_t done = 0;

	while (done < n) {
		ssize_t k = pwrite(fd, (const char *)p + done, n - done, (off_t)(off + done));

		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		done += (size_t)k;
	}
	return 0;
}

int read_file(const char *path, size_t max, struct buf *ret)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	size_t first;
	int r;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	if ((uint64_t)st.st_size > max)
		return -EFBIG;
	/* Room for the stated size and the read that finds the end; 4 KiB
	 * for a pseudo-file, which states none.  A fixed 64 KiB start cost a
	 * launch that reads a few short files an mmap and munmap of 128 KiB
	 * (glibc's threshold), each a TLB flush. */
	first = st.st_size > 0 ? (size_t)st.st_size + 1 : 4096;
	for (;;) {
		ssize_t k;

		r = buf_room(ret, first);
		if (r < 0)
			return r;
		k = read(fd, ret->data + ret->len, ret->cap - ret->len - 1);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (k == 0)
			break;
		ret->len += (size_t)k;
		if (ret->len > max)
			return -EFBIG;
	}
	ret->data[ret->len] = 0;
	return 0;
}

int mkdir_p(const char *path, mode_t mode)
{
	char tmp[PATH_MAX];
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof(tmp))
		return -ENAMETOOLONG;
	memcpy(tmp, path, len + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(tmp, mode) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

int fsync_dir_of(const char *path)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	_cleanup_close_ int fd = -1;

	if (!slash)
		strcpy(dir, ".");
	else if (slash == path)
		strcpy(dir, "/");
	else {
		if ((size_t)(slash - path) >= sizeof(dir))
			return -ENAMETOOLONG;
		memcpy(dir, path, (size_t)(slash - path));
		dir[slash - path] = 0;
	}
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		return -errno;
	return 0;
}

int write_file_atomic(const char *path, const void *data, size_t len, mode_t mode)
{
	char tmp[PATH_MAX];
	_cleanup_close_ int fd = -1;
	int r;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%d.%llx", path, (int)getpid(),
	                     (unsigned long long)now_ns()) >= sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	r = write_full(fd, data, len);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0) {
		unlink(tmp);
		return r;
	}
	return fsync_dir_of(path);
}

int parse_uint(const char *s, uint64_t max, uint64_t *ret)
{
	char *end;
	unsigned long long v;

	if (!s || !*s || *s == '-' || *s == '+')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v > max)
		return -EINVAL;
	*ret = v;
	return 0;
}

int parse_duration(const char *s, uint64_t unit_ms, uint64_t max_ms, uint64_t *ret_ms)
{
	static const struct { const char *name; uint64_t ms; } units[] = {
		{ "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 },
	};
	char *end;
	unsigned long long v;

	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	if (*end) {
		size_t i;

		for (i = 0; i < ARRAY_SIZE(units) && strcmp(end, units[i].name); i++)
			;
		if (i == ARRAY_SIZE(units))
			return -EINVAL;
		unit_ms = units[i].ms;
	}
	if (unit_ms && v > max_ms / unit_ms)
		return -EINVAL;
	*ret_ms = v * unit_ms;
	return 0;
}

int parse_seconds(const char *s, double max_s, double *ret_s)
{
	uint64_t ms;
	char *end;
	double v;

	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	if (parse_duration(s, 1000, (uint64_t)(max_s * 1000), &ms) == 0) {
		*ret_s = (double)ms / 1000;
		return 0;
	}
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || v > max_s)
		return -EINVAL;
	*ret_s = v;
	return 0;
}

int parse_size(const char *s, uint64_t *ret)
{
	char *end;
	double v;
	uint64_t mult = 1;

	if (!s || !*s || *s == '-' || *s == '+')
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || !isfinite(v) || v < 0)
		return -EINVAL;
	switch (*end) {
	case 0: break;
	case 'k': case 'K': mult = 1ULL << 10; end++; break;
	case 'm': case 'M': mult = 1ULL << 20; end++; break;
	case 'g': case 'G': mult = 1ULL << 30; end++; break;
	case 't': case 'T': mult = 1ULL << 40; end++; break;
	default: return -EINVAL;
	}
	if (mult > 1 && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0))
		end += strlen(end);
	if (*end)
		return -EINVAL;
	if (v * (double)mult >= 18446744073709551615.0)
		return -EINVAL;
	*ret = (uint64_t)(v * (double)mult);
	return 0;
}

const char *format_size(uint64_t n, char *out, size_t outlen)
{
	static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)n;
	unsigned u = 0;

	while (v >= 1024 && u + 1 < ARRAY_SIZE(units)) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(out, outlen, "%llu B", (unsigned long long)n);
	else
		snprintf(out, outlen, "%.1f %s", v, units[u]);
	return out;
}

uint32_t random_u32(void)
{
	uint32_t r;

	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r))
		r = (uint32_t)(now_ns() ^ ((uint64_t)getpid() << 16));
	return r;
}

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}
