/*
 * mount.c — `lazyroot mount REF MOUNTPOINT` and `lazyroot umount MOUNTPOINT`.
 *
 * The daemon is an ordered list of steps that fail fast: resolve REF, open
 * the loop, the store and the cache, get the index (from DIR/indexes/<hex>
 * when an earlier mount kept it, else from the store, verified against its
 * name), mount, keep a fetched index in the cache from another thread, then
 * serve until the session ends or a signal asks it to unmount.
 *
 * Readiness, not sleeps: in the background mode the parent forks the daemon
 * with its stderr on a pipe.  The daemon writes its error lines there as they
 * happen; once mounted it writes a single NUL byte and moves its stderr to
 * DIR/daemon.log.  The parent relays what it read, and on the NUL checks that
 * MOUNTPOINT now answers as a lazyroot root (a stat the daemon serves) before
 * it exits 0.  EOF without the NUL means the daemon failed: exit non-zero.
 *
 * The daemon records its pid in DIR/mounts/<major>:<minor> (the mount's
 * device); `lazyroot umount` finds it there, unmounts and waits on a pidfd
 * until the daemon is gone.
 */
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>

#include "cache/cache.h"
#include "fs/fs.h"
#include "image/image.h"
#include "lib/lib.h"
#include "lib/loop.h"
#include "store/store.h"
#include "tools/tools.h"

#define FUSE_SUPER_MAGIC 0x65735546
#define MOUNT_LOOP_ENTRIES 256

static void mount_usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot mount REF MOUNTPOINT [OPTIONS]\n"
	        "\n"
	        "Show the image REF (NAME[:TAG] or an index name) read-only at MOUNTPOINT,\n"
	        "fetching chunks from the store only when they are first read and keeping\n"
	        "them in the node-local cache.  Returns once the mount answers; the daemon\n"
	        "then runs in the background until `lazyroot umount MOUNTPOINT`.\n"
	        "\n"
	        "  --config FILE      the node's settings (default: $LAZYROOT_CONFIG, else\n"
	        "                     %s; docs/settings.md has every setting)\n"
	        "  --store URL        chunk store (default: $LAZYROOT_STORE, else %s)\n"
        "  --s3-endpoint URL  endpoint of s3:// stores (default: $AWS_ENDPOINT_URL_S3,\n"
        "                     else $AWS_ENDPOINT_URL, else AWS)\n"
	        "  --cache DIR        node-local cache directory (default: $LAZYROOT_CACHE, else %s)\n"
	        "  --cache-size SIZE  bytes of chunks the cache keeps at most (default 10G)\n"
	        "  --cache-memory SIZE  bytes of chunks kept in memory while the cache disk is\n"
	        "                     full (default 256M; 0: none, readers are still served)\n"
	        "  --readahead N      chunks fetched ahead of a sequential reader (default %d)\n"
	        "  --fetch-timeout S  seconds a read waits for an unreachable or failing remote\n"
	        "                     store (retrying) before it gets EIO (default %d)\n"
	        "  --suid             honour setuid/setgid bits (default: nosuid)\n"
	        "  --dev              honour device nodes (default: nodev)\n"
	        "  --no-allow-other   only the mounting user may use the mount\n"
	        "  --no-passthrough   serve every read through the daemon, never by FUSE\n"
	        "                     passthrough from a wholly cached copy of a large file\n"
	        "                     (default: passthrough when root and the kernel has it,\n"
	        "                     unless $LAZYROOT_PASSTHROUGH is off)\n"
	        "  --no-cpu-latency   let idle CPUs halt while requests are being served, even\n"
	        "                     when the cpu_latency setting (off by default; the config\n"
	        "                     file or $LAZYROOT_CPU_LATENCY=on) asks, as root, for a CPU\n"
	        "                     wake-up latency of 0 until cpu_latency_hold (default\n"
	        "                     %d ms) after the last request (docs/settings.md)\n"
	        "  --record-profile FILE  note the image's chunks in the order they are first\n"
	        "                     read through this mount, and write them to FILE as an\n"
	        "                     access profile of one trace when the mount ends (implies\n"
	        "                     --no-passthrough); see `lazyroot profile`\n"
	        "  --no-profile       do not follow the image's access profile from the store\n"
	        "                     (default: when the store has one, the chunks a trace reads\n"
	        "                     next are fetched ahead of the reader; tuning:\n"
	        "                     $LAZYROOT_PROFILE_WINDOW chunks ahead, default %d, and\n"
	        "                     $LAZYROOT_PROFILE_INFLIGHT fetches at once, default %d)\n"
	        "  -f, --foreground   stay in the foreground\n"
	        "  --debug            FUSE debug output on stderr (implies -f)\n"
	        "  -h, --help         this text\n",
	        NODE_CONFIG_DEFAULT_PATH, STORE_DEFAULT_URL, CACHE_DEFAULT_DIR,
	        NODE_DEFAULT_READAHEAD, STORE_DEFAULT_FETCH_TIMEOUT_MS / 1000,
	        NODE_DEFAULT_CPU_LATENCY_HOLD_MS, NODE_DEFAULT_PROFILE_WINDOW,
	        NODE_DEFAULT_PROFILE_INFLIGHT);
}

struct mount_opts {
	const char *ref, *mountpoint, *store_url, *cache_dir;
	const char *record_path;    /* --record-profile, absolute */
	const struct node_config *cfg;   /* the node's settings */
	bool foreground, debug, suid, dev, allow_other;
};

static void pid_path(const char *cache_dir, dev_t dev, char *out, size_t outlen)
{
	snprintf(out, outlen, "%s/mounts/%u:%u", cache_dir, major(dev), minor(dev));
}

static int write_pid_file(const char *cache_dir, dev_t dev, char *path, size_t pathlen)
{
	char dir[PATH_MAX], line[32];
	int r;

	snprintf(dir, sizeof(dir), "%s/mounts", cache_dir);
	pid_path(cache_dir, dev, path, pathlen);
	snprintf(line, sizeof(line), "%d\n", (int)getpid());
	r = mkdir_p(dir, 0755);
	if (r == 0)
		r = write_file_atomic(path, line, strlen(line), 0644);
	if (r < 0)
		return log_errno(r, "writing pid file `%s`", path);
	return 0;
}

/* ---- the daemon ----------------------------------------------------------- */

struct daemon_state {
	int sfd;            /* signalfd for SIGTERM, SIGINT, SIGHUP, SIGUSR1 */
	bool polling;       /* a loop_poll on sfd is pending */
	bool stop;
};

static void on_signal(void *ud, int res)
{
	struct daemon_state *d = ud;
	struct signalfd_siginfo si;

	d->polling = false;
	while (read(d->sfd, &si, sizeof(si)) == sizeof(si))
		if (si.ssi_signo != SIGUSR1)
			d->stop = true;
}

static int arm_signals(struct loop *l, struct daemon_state *d)
{
	int r = loop_poll(l, d->sfd, POLLIN, on_signal, d);

	if (r == 0)
		d->polling = true;
	return r;
}

/* After a successful mount: tell the parent (the NUL byte), then move stderr
 * off its pipe so that nobody waits on the daemon's stderr. */
static void signal_ready(int notify_fd, const char *cache_dir)
{
	char path[PATH_MAX];
	int fd;

	if (notify_fd < 0)
		return;
	(void)write_full(notify_fd, "", 1);
	snprintf(path, sizeof(path), "%s/daemon.log", cache_dir);
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		dup2(fd, STDERR_FILENO);
		close(fd);
	}
}

/* Keep a fetched index off the loop's thread: its fsync took longer than the
 * rest of a mount of a million files (~250 ms of ~450 ms), and until it is
 * done the mount only has no cached copy to map next time. */
static void *keep_index_thread(void *ud)
{
	(void)index_map_keep(ud);
	return NULL;
}

/* Mount and serve until the session ends or a signal stops it.  notify_fd:
 * the parent's pipe (stderr is on it too), or -1 in the foreground. */
static int serve(const struct mount_opts *o, int notify_fd)
{
	struct daemon_state d = { .sfd = -1 };
	struct store_options so;
	struct index_map im = { 0 };
	struct loop *l = NULL;
	struct store *s = NULL;
	struct cache *c = NULL;
	struct fs *f = NULL;
	struct image_profile *prof = NULL;
	uint64_t *pack_offsets = NULL;
	char hex[HASH_HEX_SIZE], pidfile[PATH_MAX] = "", *mnt = NULL;
	sigset_t mask;
	dev_t dev;
	pthread_t keeper;
	bool keeping = false;
	int r;

	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGUSR1);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);

	mnt = realpath(o->mountpoint, NULL);
	if (!mnt) {
		r = log_errno(-errno, "mount '%s'", o->mountpoint);
		goto out;
	}
	r = loop_new(MOUNT_LOOP_ENTRIES, &l);
	if (r < 0) {
		log_errno(r, "mount '%s': creating the io_uring loop", mnt);
		goto out;
	}
	node_config_store_options(o->cfg, &so);
	r = store_open_with(o->store_url, &so, &s);
	if (r < 0)
		goto out;
	store_set_fetch_timeout(s, o->cfg->fetch_timeout_ms);
	r = store_set_loop(s, l);
	if (r < 0) {
		log_errno(r, "store '%s': attaching it to the loop", store_url(s));
		goto out;
	}
	r = store_resolve(s, o->ref, hex);
	if (r < 0)
		goto out;
	{
		struct cache_params cp;

		node_config_cache_params(o->cfg, &cp);
		cp.dir = o->cache_dir;   /* made absolute */
		r = cache_open(&cp, l, &c);   /* says why it failed */
		if (r < 0)
			goto out;
	}
	r = load_index(s, o->cache_dir, hex, &im);
	if (r < 0)
		goto out;
	if (o->cfg->profile)
		(void)tools_profile_fetch(s, hex, &prof);
	r = tools_pack_offsets(s, im.img, hex, &pack_offsets);
	if (r < 0) {
		log_errno(r, "mount '%s': the pack of %s", mnt, hex);
		goto out;
	}
	{
		struct fs_params fp = {
			.mountpoint = mnt,
			.image = im.img,
			.index_hex = hex,
			.pack_offsets = pack_offsets,
			.store = s,
			.cache = c,
			.loop = l,
			.allow_other = o->allow_other,
			.suid = o->suid,
			.dev = o->dev,
			.readahead_chunks = o->cfg->readahead,
			.no_passthrough = !o->cfg->passthrough,
			.no_cpu_latency = !o->cfg->cpu_latency,
			.cpu_hold_ms = o->cfg->cpu_latency_hold_ms,
			.debug = o->debug,
			.record = o->record_path != NULL,
			.profile = prof,
			.profile_window = o->cfg->profile_window,
			.profile_inflight = o->cfg->profile_inflight,
		};

		r = fs_mount(&fp, &f);
		if (r < 0)
			goto out;
	}
	if (fs_find_mount(mnt, &dev) == 0)
		(void)write_pid_file(o->cache_dir, dev, pidfile, sizeof(pidfile));

	d.sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (d.sfd < 0 || arm_signals(l, &d) < 0) {
		r = log_errno(d.sfd < 0 ? -errno : -EIO, "mount '%s': watching signals", mnt);
		goto out;
	}
	signal_ready(notify_fd, o->cache_dir);
	if (index_map_unkept(&im)) {
		keeping = pthread_create(&keeper, NULL, keep_index_thread, &im) == 0;
		if (!keeping)
			(void)index_map_keep(&im);
	}

	while (!d.stop && !fs_finished(f)) {
		r = loop_run_once(l, true);
		if (r < 0 && r != -EINTR) {
			log_errno(r, "mount '%s': running the loop", mnt);
			break;
		}
		if (!d.polling && !d.stop)
			(void)arm_signals(l, &d);
	}
	r = 0;
	if (o->record_path) {
		size_t n;
		const uint32_t *v = fs_trace(f, &n);

		r = tools_profile_write_trace(o->record_path, hex, v, n);
	}
out:
	fs_free(f);  /* unmounts if a signal ended us */
	if (*pidfile)
		unlink(pidfile);
	if (d.polling) {
		/* Complete our own pending poll so that the loop can go idle. */
		kill(getpid(), SIGUSR1);
		while (d.polling && loop_run_once(l, true) >= 0)
			;
	}
	/* Read-ahead fetches may still be in flight: the cache and the loop
	 * are freed only once nothing is. */
	while (l && loop_pending(l) && loop_run_once(l, true) >= 0)
		;
	if (d.sfd >= 0)
		close(d.sfd);
	if (keeping)
		pthread_join(keeper, NULL);
	cache_free(c);
	store_free(s);
	loop_free(l);
	index_map_free(&im);
	free(pack_offsets);
	image_profile_free(prof);
	free(mnt);
	return r < 0 ? 1 : 0;
}

/* ---- the parent ------------------------------------------------------------ */

/* Is mountpoint a lazyroot mount that answers?  stat() reaches the daemon. */
static int check_mounted(const char *mountpoint)
{
	_cleanup_free_ char *mnt = realpath(mountpoint, NULL);
	struct statfs sfs;
	struct stat st;
	dev_t dev;

	if (!mnt || stat(mnt, &st) < 0 || statfs(mnt, &sfs) < 0)
		return log_errno(-errno, "mount '%s': the mount does not answer", mountpoint);
	if (sfs.f_type != FUSE_SUPER_MAGIC || st.st_ino != IMAGE_ROOT_INO ||
	    fs_find_mount(mnt, &dev) < 0 || dev != st.st_dev)
		return log_error(-EIO, "mount '%s': not a lazyroot mount after mounting", mountpoint);
	return 0;
}

static int run_background(const struct mount_opts *o)
{
	_cleanup_(buf_freep) struct buf msg = BUF_INIT;
	int p[2], status, devnull;
	bool ready = false;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return log_errno(-errno, "mount: pipe");
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return log_errno(-errno, "mount: fork");
	if (pid == 0) {
		close(p[0]);
		setsid();
		devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (devnull >= 0) {
			dup2(devnull, STDIN_FILENO);
			dup2(devnull, STDOUT_FILENO);
			close(devnull);
		}
		dup2(p[1], STDERR_FILENO);
		/* Whatever else the caller left open (a pipe it waits on for EOF,
		 * a lock) must not live on in the daemon. */
		if (p[1] > 3)
			syscall(SYS_close_range, 3, p[1] - 1, 0);
		syscall(SYS_close_range, p[1] + 1, ~0u, 0);
		if (chdir("/") < 0)
			_exit(1);
		_exit(serve(o, p[1]));
	}
	close(p[1]);
	for (;;) {
		char b[512];
		ssize_t n = read(p[0], b, sizeof(b));
		char *nul;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		nul = memchr(b, 0, (size_t)n);
		if (buf_append(&msg, b, nul ? (size_t)(nul - b) : (size_t)n) < 0)
			break;
		if (nul) {
			ready = true;
			break;
		}
	}
	close(p[0]);
	if (msg.len)
		fwrite(msg.data, 1, msg.len, stderr);
	if (!ready) {
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		if (!msg.len)
			log_error(-EIO, "mount '%s': the daemon failed", o->mountpoint);
		return 1;
	}
	return check_mounted(o->mountpoint) < 0 ? 1 : 0;
}

/* path against the current directory, which the daemon leaves for "/"
 * (lexically: the path need not exist yet).  NULL on ENOMEM. */
static char *absolute(const char *path)
{
	_cleanup_free_ char *cwd = NULL;
	char *out;

	if (path[0] == '/')
		return strdup(path);
	cwd = getcwd(NULL, 0);
	if (!cwd || asprintf(&out, "%s/%s", cwd, path) < 0)
		return NULL;
	return out;
}

/* The store URL with every local member (dir:PATH or a plain path, as
 * store_open reads them; mirrors are comma-separated) made absolute. */
static char *absolute_store_url(const char *url)
{
	_cleanup_free_ char *copy = strdup(url);
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	char *save = NULL;

	if (!copy)
		return NULL;
	for (char *u = strtok_r(copy, ",", &save); u; u = strtok_r(NULL, ",", &save)) {
		bool dir = !strncmp(u, "dir:", 4);
		const char *path = dir ? u + 4 : strstr(u, "://") ? NULL : u;
		_cleanup_free_ char *abs = path && path[0] && path[0] != '/' ? absolute(path) : NULL;

		if (path && path[0] && path[0] != '/' && !abs)
			return NULL;
		if (buf_printf(&b, "%s%s%s", b.len ? "," : "", abs && dir ? "dir:" : "",
		               abs ? abs : u) < 0)
			return NULL;
	}
	if (buf_append_zero(&b, 1) < 0)
		return NULL;
	return (char *)TAKE_PTR(b.data);
}

int cmd_mount(int argc, char **argv)
{
	enum { O_STORE = 256, O_S3_ENDPOINT, O_CACHE, O_CACHE_SIZE, O_CACHE_MEMORY, O_READAHEAD,
	       O_SUID, O_DEV, O_NOALLOW, O_NOPASSTHROUGH, O_NOCPULATENCY, O_DEBUG,
	       O_FETCH_TIMEOUT, O_RECORD, O_NOPROFILE, O_CONFIG };
	static const struct option opts[] = {
		{ "config", required_argument, NULL, O_CONFIG },
		{ "store", required_argument, NULL, O_STORE },
		{ "s3-endpoint", required_argument, NULL, O_S3_ENDPOINT },
		{ "cache", required_argument, NULL, O_CACHE },
		{ "cache-size", required_argument, NULL, O_CACHE_SIZE },
		{ "cache-memory", required_argument, NULL, O_CACHE_MEMORY },
		{ "readahead", required_argument, NULL, O_READAHEAD },
		{ "fetch-timeout", required_argument, NULL, O_FETCH_TIMEOUT },
		{ "suid", no_argument, NULL, O_SUID },
		{ "dev", no_argument, NULL, O_DEV },
		{ "no-allow-other", no_argument, NULL, O_NOALLOW },
		{ "no-passthrough", no_argument, NULL, O_NOPASSTHROUGH },
		{ "no-cpu-latency", no_argument, NULL, O_NOCPULATENCY },
		{ "foreground", no_argument, NULL, 'f' },
		{ "debug", no_argument, NULL, O_DEBUG },
		{ "record-profile", required_argument, NULL, O_RECORD },
		{ "no-profile", no_argument, NULL, O_NOPROFILE },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct mount_opts o = { .allow_other = true };
	struct tools_flags fl = { 0 };
	_cleanup_(node_config_destroy) struct node_config cfg = { 0 };
	_cleanup_free_ char *mnt_abs = NULL, *cache_abs = NULL, *store_abs = NULL;
	_cleanup_free_ char *record_abs = NULL;
	struct stat st;
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "fh", opts, NULL)) != -1) {
		switch (c) {
		case O_CONFIG: fl.config = optarg; break;
		case O_STORE: tools_flag(&fl, "--store", optarg); break;
		case O_S3_ENDPOINT: tools_flag(&fl, "--s3-endpoint", optarg); break;
		case O_CACHE: tools_flag(&fl, "--cache", optarg); break;
		case O_CACHE_SIZE: tools_flag(&fl, "--cache-size", optarg); break;
		case O_CACHE_MEMORY: tools_flag(&fl, "--cache-memory", optarg); break;
		case O_READAHEAD: tools_flag(&fl, "--readahead", optarg); break;
		case O_FETCH_TIMEOUT: tools_flag(&fl, "--fetch-timeout", optarg); break;
		case O_SUID: o.suid = true; break;
		case O_DEV: o.dev = true; break;
		case O_NOALLOW: o.allow_other = false; break;
		case O_NOPASSTHROUGH: tools_flag(&fl, "--no-passthrough", NULL); break;
		case O_NOCPULATENCY: tools_flag(&fl, "--no-cpu-latency", NULL); break;
		case O_RECORD: o.record_path = optarg; break;
		case O_NOPROFILE: tools_flag(&fl, "--no-profile", NULL); break;
		case 'f': o.foreground = true; break;
		case O_DEBUG: o.debug = o.foreground = true; break;
		case 'h': mount_usage(stdout); return 0;
		default: mount_usage(stderr); return 2;
		}
	}
	if (optind != argc - 2) {
		mount_usage(stderr);
		return 2;
	}
	o.ref = argv[optind];
	o.mountpoint = argv[optind + 1];
	if (tools_settings(&fl, &cfg) < 0)
		return 2;
	o.cfg = &cfg;
	o.cache_dir = cfg.cache_dir;
	if (stat(o.mountpoint, &st) < 0) {
		log_errno(-errno, "mount '%s'", o.mountpoint);
		return 1;
	}
	if (!S_ISDIR(st.st_mode)) {
		log_error(-ENOTDIR, "mount '%s': not a directory", o.mountpoint);
		return 1;
	}
	/* The daemon runs from "/": relative paths would then name other places. */
	mnt_abs = absolute(o.mountpoint);
	cache_abs = absolute(o.cache_dir);
	store_abs = absolute_store_url(cfg.store_url);
	if (!mnt_abs || !cache_abs || !store_abs) {
		log_errno(-ENOMEM, "mount '%s'", o.mountpoint);
		return 1;
	}
	o.mountpoint = mnt_abs;
	o.cache_dir = cache_abs;
	o.store_url = store_abs;
	if (o.record_path) {
		_cleanup_free_ char *dir = NULL;

		record_abs = absolute(o.record_path);
		dir = record_abs ? strdup(record_abs) : NULL;
		if (!dir) {
			log_errno(-ENOMEM, "--record-profile '%s'", o.record_path);
			return 1;
		}
		/* fail now, not when the mount ends and the trace is lost */
		if (access(dirname(dir), W_OK) < 0) {
			log_errno(-errno, "--record-profile '%s': its directory is not writable",
			          o.record_path);
			return 1;
		}
		o.record_path = record_abs;
	}
	if (o.foreground)
		return serve(&o, -1);
	return run_background(&o);
}

/* ---- umount ------------------------------------------------------------------ */

static void umount_usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot umount MOUNTPOINT [--cache DIR]\n"
	        "\n"
	        "Unmount a lazyroot mount and wait until its daemon has exited.\n"
	        "\n"
	        "  --cache DIR   the cache directory the mount was made with (default: $LAZYROOT_CACHE,\n                else %s)\n"
	        "  --config FILE the node's settings (docs/settings.md)\n"
	        "  -h, --help    this text\n",
	        CACHE_DEFAULT_DIR);
}

/* The absolute path of mountpoint without asking the mounted filesystem
 * (whose daemon may be gone): resolve its parent, append its name. */
static int canonical_mountpoint(const char *mountpoint, char *out, size_t outlen)
{
	_cleanup_free_ char *a = strdup(mountpoint), *b = strdup(mountpoint), *parent = NULL;
	const char *base;

	if (!a || !b)
		return -ENOMEM;
	while (strlen(a) > 1 && a[strlen(a) - 1] == '/')
		a[strlen(a) - 1] = 0;
	strcpy(b, a);
	base = basename(b);
	parent = realpath(dirname(a), NULL);
	if (!parent)
		return -errno;
	if (!strcmp(base, "/"))
		return snprintf(out, outlen, "/") >= (int)outlen ? -ENAMETOOLONG : 0;
	if (snprintf(out, outlen, "%s/%s", strcmp(parent, "/") ? parent : "", base) >= (int)outlen)
		return -ENAMETOOLONG;
	return 0;
}

/* A pidfd for the daemon recorded for dev, or -1 when none is running. */
static int daemon_pidfd(const char *cache_dir, dev_t dev)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT, comm = BUF_INIT;
	char path[PATH_MAX];
	uint64_t pid;
	int fd;

	pid_path(cache_dir, dev, path, sizeof(path));
	if (read_file(path, 64, &b) < 0)
		return -1;
	while (b.len && b.data[b.len - 1] == '\n')
		b.data[--b.len] = 0;
	if (parse_uint((char *)b.data, INT32_MAX, &pid) < 0 || pid == 0)
		return -1;
	fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
	if (fd < 0)
		return -1;
	/* The pidfd pins the process: check, after opening it, that the pid
	 * was not reused by something else since the file was written. */
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	if (read_file(path, 64, &comm) < 0 || strncmp((char *)comm.data, "lazyroot", 8)) {
		close(fd);
		return -1;
	}
	return fd;
}

static int unmount_path(const char *mnt)
{
	pid_t pid;
	int status;

	if (geteuid() == 0) {
		if (umount2(mnt, UMOUNT_NOFOLLOW) < 0)
			return log_errno(-errno, "umount '%s'", mnt);
		return 0;
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return log_errno(-errno, "umount '%s': fork", mnt);
	if (pid == 0) {
		execlp("fusermount3", "fusermount3", "-u", "--", mnt, (char *)NULL);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return log_errno(-errno, "umount '%s': waiting for fusermount3", mnt);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return log_error(-EIO, "umount '%s': fusermount3 -u failed", mnt);
	return 0;
}

int cmd_umount(int argc, char **argv)
{
	enum { O_CACHE = 256, O_CONFIG };
	static const struct option opts[] = {
		{ "cache", required_argument, NULL, O_CACHE },
		{ "config", required_argument, NULL, O_CONFIG },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct tools_flags fl = { 0 };
	_cleanup_(node_config_destroy) struct node_config cfg = { 0 };
	const char *cache_dir;
	_cleanup_close_ int pidfd = -1;
	char mnt[PATH_MAX];
	dev_t dev;
	int c, r;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case O_CACHE: tools_flag(&fl, "--cache", optarg); break;
		case O_CONFIG: fl.config = optarg; break;
		case 'h': umount_usage(stdout); return 0;
		default: umount_usage(stderr); return 2;
		}
	}
	if (optind != argc - 1) {
		umount_usage(stderr);
		return 2;
	}
	if (tools_settings(&fl, &cfg) < 0)
		return 2;
	cache_dir = cfg.cache_dir;
	r = canonical_mountpoint(argv[optind], mnt, sizeof(mnt));
	if (r < 0) {
		log_errno(r, "umount '%s'", argv[optind]);
		return 1;
	}
	if (fs_find_mount(mnt, &dev) < 0) {
		log_error(-EINVAL, "umount '%s': not a lazyroot mount", argv[optind]);
		return 1;
	}
	pidfd = daemon_pidfd(cache_dir, dev);
	if (unmount_path(mnt) < 0)
		return 1;
	if (pidfd < 0) {
		log_msg(LOG_WARN, "umount '%s': no daemon recorded under '%s/mounts'; not waiting",
		        argv[optind], cache_dir);
		return 0;
	}
	for (;;) {
		struct pollfd pfd = { .fd = pidfd, .events = POLLIN };

		if (poll(&pfd, 1, -1) >= 0)
			break;
		if (errno != EINTR) {
			log_errno(-errno, "umount '%s': waiting for the daemon", argv[optind]);
			return 1;
		}
	}
	return 0;
}
