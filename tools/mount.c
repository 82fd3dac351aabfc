/*
 * mount.c — `lazyroot mount REF MOUNTPOINT` and `lazyroot umount MOUNTPOINT`:
 * clients of the node service (node/node.h), which serves every mount of the
 * node from one process and starts when none answers.
 *
 * `mount` asks the node to mount REF at MOUNTPOINT with the options given
 * (those not given are the node's) and returns once the mount answers.
 * `umount` asks the node to end the mount; a lazyroot mount the node does not
 * know (its server gone, or one of another node) is unmounted here, waiting
 * for the process recorded in CACHE/mounts/<major>:<minor> to exit.
 */
#include <getopt.h>
#include <libgen.h>
#include <poll.h>
#include <limits.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>

#include "cache/cache.h"
#include "fs/fs.h"
#include "image/image.h"
#include "lib/json.h"
#include "lib/lib.h"
#include "node/node.h"
#include "store/store.h"
#include "tools/tools.h"

#define FUSE_SUPER_MAGIC 0x65735546

static void mount_usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot mount REF MOUNTPOINT [OPTIONS]\n"
	        "\n"
	        "Show the image REF (NAME[:TAG] or an index name) read-only at MOUNTPOINT,\n"
	        "fetching chunks from the store only when they are first read and keeping\n"
	        "them in the node-local cache.  The node service (`lazyroot node`) serves\n"
	        "it, started in the background when none answers; returns once the mount\n"
	        "answers, which lasts until `lazyroot umount MOUNTPOINT` or `node stop`.\n"
	        "The settings below go with the request: the node applies them to this\n"
	        "mount (a store or cache it opens for it; a cache already open stays as it is).\n"
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
	        "  --socket PATH      the node's control socket (default: $LAZYROOT_SOCKET,\n"
	        "                     else %s)\n"
	        "  --trust-key FILE.pub  accept REF's tag signed by this key (repeatable; adds\n"
	        "                     to the trust_keys setting)\n"
	        "  --require-signed   refuse REF when its tag is not signed by a trusted key\n"
	        "  --json             once mounted: {image, index, mountpoint, socket}\n"
	        "  -h, --help         this text\n",
	        NODE_CONFIG_DEFAULT_PATH, STORE_DEFAULT_URL, CACHE_DEFAULT_DIR,
	        NODE_DEFAULT_READAHEAD, STORE_DEFAULT_FETCH_TIMEOUT_MS / 1000,
	        NODE_DEFAULT_CPU_LATENCY_HOLD_MS, NODE_DEFAULT_PROFILE_WINDOW,
	        NODE_DEFAULT_PROFILE_INFLIGHT, NODE_DEFAULT_SOCKET);
}

/* Is mountpoint a lazyroot mount that answers?  stat() reaches the node. */
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

int cmd_mount(int argc, char **argv)
{
	enum { O_STORE = 256, O_S3_ENDPOINT, O_CACHE, O_CACHE_SIZE, O_CACHE_MEMORY, O_READAHEAD,
	       O_SUID, O_DEV, O_NOALLOW, O_NOPASSTHROUGH, O_NOCPULATENCY, O_FETCH_TIMEOUT,
	       O_RECORD, O_NOPROFILE, O_SOCKET, O_CONFIG, O_TRUST_KEY, O_REQUIRE_SIGNED, O_JSON };
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
		{ "record-profile", required_argument, NULL, O_RECORD },
		{ "no-profile", no_argument, NULL, O_NOPROFILE },
		{ "socket", required_argument, NULL, O_SOCKET },
		{ "trust-key", required_argument, NULL, O_TRUST_KEY },
		{ "require-signed", no_argument, NULL, O_REQUIRE_SIGNED },
		{ "json", no_argument, NULL, O_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	_cleanup_(buf_freep) struct buf req = BUF_INIT;
	_cleanup_free_ char *mnt_abs = NULL, *record_abs = NULL;
	_cleanup_(node_config_destroy) struct node_config cfg = { 0 };
	struct tools_flags fl = { 0 };
	const char *record = NULL;
	bool suid = false, dev = false, allow_other = true, json = false;
	json_auto_t *reply = NULL;
	json_t *q, *mo;
	struct stat st;
	int c, r = 0;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case O_CONFIG: fl.config = optarg; break;
		case O_STORE: tools_flag(&fl, "--store", optarg); break;
		case O_S3_ENDPOINT: tools_flag(&fl, "--s3-endpoint", optarg); break;
		case O_CACHE: tools_flag(&fl, "--cache", optarg); break;
		case O_CACHE_SIZE: tools_flag(&fl, "--cache-size", optarg); break;
		case O_CACHE_MEMORY: tools_flag(&fl, "--cache-memory", optarg); break;
		case O_READAHEAD: tools_flag(&fl, "--readahead", optarg); break;
		case O_FETCH_TIMEOUT: tools_flag(&fl, "--fetch-timeout", optarg); break;
		case O_SUID: suid = true; break;
		case O_DEV: dev = true; break;
		case O_NOALLOW: allow_other = false; break;
		case O_NOPASSTHROUGH: tools_flag(&fl, "--no-passthrough", NULL); break;
		case O_NOCPULATENCY: tools_flag(&fl, "--no-cpu-latency", NULL); break;
		case O_RECORD: record = optarg; break;
		case O_NOPROFILE: tools_flag(&fl, "--no-profile", NULL); break;
		case O_SOCKET: tools_flag(&fl, "--socket", optarg); break;
		case O_TRUST_KEY: tools_flag_add(&fl, "--trust-key", optarg); break;
		case O_REQUIRE_SIGNED: tools_flag(&fl, "--require-signed", NULL); break;
		case O_JSON: json = true; break;
		case 'h': mount_usage(stdout); return 0;
		default: return tools_option_error("mount", argv, "h", opts);
		}
	}
	if (optind != argc - 2)
		return tools_usage_error("mount", optind > argc - 2 ? "want IMAGE and MOUNTPOINT" :
		                         "unexpected argument '%s'", argv[argc - 1]);
	if (tools_settings(&fl, &cfg) < 0)
		return 2;
	if (stat(argv[optind + 1], &st) < 0) {
		log_errno(-errno, "mount '%s'", argv[optind + 1]);
		return 1;
	}
	if (!S_ISDIR(st.st_mode)) {
		log_error(-ENOTDIR, "mount '%s': not a directory", argv[optind + 1]);
		return 1;
	}
	/* The node runs from "/": relative paths would name other places there. */
	mnt_abs = tools_absolute(argv[optind + 1]);
	if (!mnt_abs) {
		log_errno(-ENOMEM, "mount '%s'", argv[optind + 1]);
		return 1;
	}
	if (record) {
		_cleanup_free_ char *dir = NULL;

		record_abs = tools_absolute(record);
		dir = record_abs ? strdup(record_abs) : NULL;
		if (!dir) {
			log_errno(-ENOMEM, "--record-profile '%s'", record);
			return 1;
		}
		/* fail now, not when the mount ends and the trace is lost */
		if (access(dirname(dir), W_OK) < 0) {
			log_errno(-errno, "--record-profile '%s': its directory is not writable",
			          record);
			return 1;
		}
	}
	q = json_pack("{s:s, s:s, s:s}", "verb", "mount", "ref", argv[optind], "mountpoint",
	              mnt_abs);
	r = q ? tools_node_settings(q, &cfg) : -EINVAL;
	/* (after the settings, as the node's mount record has them) */
	mo = json_pack("{s:b, s:b, s:b}", "suid", suid, "dev", dev, "allow_other", allow_other);
	if (r == 0 && (!mo || (record_abs && json_object_set_new(mo, "record",
	                                                          json_str(record_abs,
	                                                                   strlen(record_abs))))))
		r = -EINVAL;
	if (r == 0 && json_object_set_new(q, "options", json_incref(mo)) < 0)
		r = -ENOMEM;
	json_decref(mo);
	r = r ?: tools_node_request_text(json_incref(q), &req);
	json_decref(q);
	if (r < 0) {
		log_errno(r, "mount '%s'", argv[optind + 1]);
		return 1;
	}
	r = tools_node_request(&cfg, (char *)req.data, &reply);
	if (r < 0 || check_mounted(mnt_abs) < 0)
		return 1;
	if (json && json_pack_file(stdout, "{s:o, s:s*, s:s, s:s}", "image",
	                           json_str(argv[optind], strlen(argv[optind])), "index",
	                           json_get_cstr(reply, "index"), "mountpoint", mnt_abs,
	                           "socket", cfg.socket_path) < 0)
		return 1;
	return 0;
}

/* ---- umount ------------------------------------------------------------------ */

static void umount_usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot umount MOUNTPOINT [--cache DIR] [--socket PATH] [--config FILE]\n"
	        "                       [--json]\n"
	        "\n"
	        "Unmount a lazyroot mount: the node service ends it; a mount the node does\n"
	        "not serve is unmounted here, and its daemon waited for.  A mount with\n"
	        "another mount over it is refused: unmount that one first.  So is a mount\n"
	        "a running sandbox of the sandbox service has its root on: destroy it first.\n"
	        "\n"
	        "  --cache DIR   the cache directory of a mount the node does not serve\n"
	        "                (default: $LAZYROOT_CACHE, else %s)\n"
	        "  --socket PATH the node's control socket (default: $LAZYROOT_SOCKET, else\n"
	        "                %s)\n"
	        "  --config FILE the node's settings (default: $LAZYROOT_CONFIG, else\n"
	        "                /etc/lazyroot/node.conf)\n"
	        "  --json        once unmounted: {mountpoint, node (the node served it),\n"
	        "                in_use (users keep it until they let go)}\n"
	        "  -h, --help    this text\n",
	        CACHE_DEFAULT_DIR, NODE_DEFAULT_SOCKET);
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

static void pid_path(const char *cache_dir, dev_t dev, char *out, size_t outlen)
{
	snprintf(out, outlen, "%s/mounts/%u:%u", cache_dir, major(dev), minor(dev));
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

/* umount --json: the mountpoint, whether the node served it, and whether
 * users keep it until they let go; the exit status. */
static int umount_json(const char *mnt, bool node, bool in_use)
{
	return json_pack_file(stdout, "{s:s, s:b, s:b}", "mountpoint", mnt, "node", node,
	                      "in_use", in_use) < 0 ? 1 : 0;
}

int cmd_umount(int argc, char **argv)
{
	enum { O_CACHE = 256, O_SOCKET, O_CONFIG, O_JSON };
	static const struct option opts[] = {
		{ "cache", required_argument, NULL, O_CACHE },
		{ "socket", required_argument, NULL, O_SOCKET },
		{ "config", required_argument, NULL, O_CONFIG },
		{ "json", no_argument, NULL, O_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	_cleanup_(buf_freep) struct buf req = BUF_INIT;
	struct tools_flags fl = { 0 };
	_cleanup_(node_config_destroy) struct node_config cfg = { 0 };
	const char *cache_dir;
	json_t *reply = NULL;
	_cleanup_close_ int pidfd = -1;
	char mnt[PATH_MAX];
	dev_t dev;
	bool json = false;
	int c, r;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case O_CACHE: tools_flag(&fl, "--cache", optarg); break;
		case O_SOCKET: tools_flag(&fl, "--socket", optarg); break;
		case O_CONFIG: fl.config = optarg; break;
		case O_JSON: json = true; break;
		case 'h': umount_usage(stdout); return 0;
		default: return tools_option_error("umount", argv, "h", opts);
		}
	}
	if (optind != argc - 1)
		return tools_usage_error("umount", optind == argc ? "no MOUNTPOINT given" :
		                         "unexpected argument '%s'", argv[argc - 1]);
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
	if (tools_node_request_text(json_pack("{s:s, s:s}", "verb", "umount", "mountpoint", mnt),
	                            &req) == 0 &&
	    node_call(cfg.socket_path, (char *)req.data, &reply) == 0) {
		bool ok = false, unknown = false, in_use = false;

		(void)json_bool(json_object_get(reply, "ok"), &ok);
		(void)json_bool(json_object_get(reply, "unknown"), &unknown);
		(void)json_bool(json_object_get(reply, "in_use"), &in_use);
		if (ok && in_use)
			log_msg(LOG_WARN, "umount '%s': unmounted, but still in use: the node serves "
			        "it until its last user lets go", argv[optind]);
		if (ok || !unknown) {
			if (!ok)
				log_error(-EIO, "%s", json_get_cstr(reply, "error") ?
				          json_get_cstr(reply, "error") : "umount failed");
			json_decref(reply);
			if (ok && json)
				return umount_json(mnt, true, in_use);
			return ok ? 0 : 1;
		}
		json_decref(reply);
	}
	/* Not the node's: a mount whose server is gone, or of another node. */
	pidfd = daemon_pidfd(cache_dir, dev);
	if (unmount_path(mnt) < 0)
		return 1;
	if (pidfd < 0) {
		log_msg(LOG_WARN, "umount '%s': no daemon recorded under '%s/mounts'; not waiting",
		        argv[optind], cache_dir);
		return json ? umount_json(mnt, false, false) : 0;
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
	return json ? umount_json(mnt, false, false) : 0;
}
