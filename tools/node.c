/*
 * node.c — `lazyroot node` (the node service, in the foreground), `node
 * status`, `node stop`, `node upgrade`.
 */
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "cache/cache.h"
#include "lib/json.h"
#include "lib/lib.h"
#include "node/node.h"
#include "store/store.h"
#include "tools/tools.h"

#define NODE_STOP_WAIT_MS 120000  /* a stop unmounts every mount, one after another */

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: lazyroot node [OPTIONS]\n"
	        "       lazyroot node status [--json]\n"
	        "       lazyroot node stop [--json]\n"
	        "       lazyroot node upgrade [--binary PATH] [--json]\n"
	        "\n"
	        "The node service: one process serving every image mount of this node from\n"
	        "one cache, in the foreground (as systemd expects).  A small holder keeps\n"
	        "each mount's FUSE connection and starts a worker that serves them; a worker\n"
	        "that dies (or is upgraded) is replaced and takes every mount over.\n"
	        "`lazyroot run`, `mount` and `umount` speak to it over its socket, and start\n"
	        "one in the background when none answers.\n"
	        "\n"
	        "  --config FILE      node settings, `key = value` lines\n"
	        "  --store URL        default chunk store (default: $LAZYROOT_STORE, else %s)\n"
	        "  --cache DIR        node cache (default: $LAZYROOT_CACHE, else %s)\n"
	        "  --images DIR       where `run` mounts images (default: $LAZYROOT_IMAGES,\n"
	        "                     else %s)\n"
	        "  --socket PATH      control socket (default: $LAZYROOT_SOCKET, else %s)\n"
	        "  --metrics ADDR     Prometheus /metrics on HOST:PORT, or off (default %s)\n"
	        "  --cache-size SIZE  bytes of chunks the cache keeps at most (default 10G)\n"
	        "  --cache-memory SIZE  chunks kept in memory while the cache disk is full\n"
	        "                     (default 256M)\n"
	        "  --readahead N      chunks fetched ahead of a sequential reader (default %d)\n"
	        "  --fetch-timeout S  seconds a read retries a failing store (default %d)\n"
	        "  --no-passthrough   no FUSE passthrough of wholly cached large files\n"
	        "  --no-cpu-latency   let idle CPUs halt while requests are being served\n"
	        "  --log FILE         stderr goes to FILE once the node serves\n"
	        "\n"
	        "  status [--json]    pids (worker serving FUSE, holder), uptime, takeovers,\n"
	        "                     mounts (image, store, mountpoint, open files), signed\n"
	        "                     tags verified and refused (by reason)\n"
	        "  stop               unmount every mount of the node and end it (one with\n"
	        "                     another mount over it is left there, its connection\n"
	        "                     ended); exits 0 when no node answers.  --json:\n"
	        "                     {socket, stopped (false when none answered), holder_pid}\n"
	        "  upgrade [--binary PATH]  hand every mount to a new worker of PATH (default:\n"
	        "                     this binary); readers see a pause, not an error.\n"
	        "                     --json: {socket, old_pid, pid} of the workers\n",
	        STORE_DEFAULT_URL, CACHE_DEFAULT_DIR, NODE_DEFAULT_IMAGES_DIR, NODE_DEFAULT_SOCKET,
	        NODE_DEFAULT_METRICS, NODE_DEFAULT_READAHEAD,
	        STORE_DEFAULT_FETCH_TIMEOUT_MS / 1000);
}

/* ---- status, stop, upgrade ---------------------------------------------------- */

static int call(const char *socket, const char *req, json_t **ret)
{
	int r = node_call(socket, req, ret);

	if (r == -ECONNREFUSED || r == -ENOENT)
		return log_error(r, "node '%s': no node service answers", socket);
	if (r < 0)
		return log_errno(r, "node '%s'", socket);
	return 0;
}

static int status_cmd(const char *socket, bool json)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	json_t *j = NULL;
	const json_t *mounts;
	double up = 0;
	int64_t pid = 0, hpid = 0, tk = 0;
	int r;

	if (json) {
		r = node_call_text(socket, "{\"verb\":\"status\"}", &b);
		if (r == -ECONNREFUSED || r == -ENOENT)
			log_error(r, "node '%s': no node service answers", socket);
		else if (r < 0)
			log_errno(r, "node '%s'", socket);
		else
			fwrite(b.data, 1, b.len, stdout);
		return r < 0 ? 1 : 0;
	}
	if (call(socket, "{\"verb\":\"status\"}", &j) < 0)
		return 1;
	(void)json_int(json_object_get(j, "pid"), &pid);
	(void)json_int(json_object_get(j, "holder_pid"), &hpid);
	(void)json_int(json_object_get(j, "takeovers"), &tk);
	(void)json_double(json_object_get(j, "uptime_s"), &up);
	mounts = json_object_get(j, "mounts");
	printf("node %s: lazyroot %s%s%s%s, worker pid %lld, holder pid %lld, up %.1f s, "
	       "%lld takeovers, %zu mounts\n", socket,
	       json_get_cstr(j, "version") ? json_get_cstr(j, "version") : "(unknown)",
	       json_get_cstr(j, "commit") ? " (commit " : "",
	       json_get_cstr(j, "commit") ? json_get_cstr(j, "commit") : "",
	       json_get_cstr(j, "commit") ? ")" : "", (long long)pid, (long long)hpid, up,
	       (long long)tk, json_array_size(mounts));
	{
		const json_t *t = json_object_get(j, "trust"), *v;
		const char *k;
		int64_t n = 0, sum = 0;

		(void)json_int(json_object_get(t, "verified"), &n);
		printf("signed tags: %lld mounts verified, refused:", (long long)n);
		json_object_foreach ((json_t *)json_object_get(t, "refused"), k, v) {
			int64_t c = 0;

			(void)json_int(v, &c);
			sum += c;
			if (c)
				printf(" %s %lld", k, (long long)c);
		}
		printf("%s\n", sum ? "" : " none");
	}
	if (json_array_size(mounts))
		printf("%-24s %-32s %-6s %s\n", "image", "store", "open", "mountpoint");
	for (size_t i = 0; i < json_array_size(mounts); i++) {
		const json_t *m = json_array_get(mounts, i);
		int64_t open = 0;

		(void)json_int(json_object_get(m, "open_files"), &open);
		printf("%-24s %-32s %-6lld %s\n", json_get_cstr(m, "image"),
		       json_get_cstr(m, "store"), (long long)open, json_get_cstr(m, "mountpoint"));
	}
	json_decref(j);
	return 0;
}

/* Wait (bounded) until pid has exited. */
static int wait_gone(pid_t pid, int ms)
{
	_cleanup_close_ int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	struct pollfd p = { .fd = fd, .events = POLLIN };

	if (fd < 0)
		return errno == ESRCH ? 0 : -errno;
	while (poll(&p, 1, ms) < 0)
		if (errno != EINTR)
			return -errno;
	return p.revents ? 0 : -ETIMEDOUT;
}

static int stop_cmd(const char *socket, bool json)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	json_t *j = NULL;
	int64_t hpid = 0;
	bool ok = false;
	int r;

	/* idempotent, as `systemctl stop` is: no node is the state asked for */
	r = node_call(socket, "{\"verb\":\"stop\"}", &j);
	if (r == -ECONNREFUSED || r == -ENOENT) {
		log_msg(LOG_WARN, "node '%s': no node service answers; nothing to stop", socket);
		if (json && json_pack_file(stdout, "{s:s, s:b, s:n}", "socket", socket, "stopped", 0,
		                           "holder_pid") < 0)
			return 1;
		return 0;
	}
	if (r < 0) {
		log_errno(r, "node '%s'", socket);
		return 1;
	}
	/* what the node said while ending its mounts (one it could not
	 * unmount, one still in use) */
	if (json_get_cstr(j, "log"))
		fputs(json_get_cstr(j, "log"), stderr);
	if (json_bool(json_object_get(j, "ok"), &ok) < 0 || !ok) {
		log_error(-EIO, "node '%s': stop: %s", socket,
		          json_get_cstr(j, "error") ? json_get_cstr(j, "error") : "failed");
		json_decref(j);
		return 1;
	}
	(void)json_int(json_object_get(j, "holder_pid"), &hpid);
	json_decref(j);
	r = hpid > 0 ? wait_gone((pid_t)hpid, NODE_STOP_WAIT_MS) : 0;
	if (r < 0) {
		log_errno(r, "node '%s': waiting for the holder (pid %lld) to exit", socket,
		          (long long)hpid);
		return 1;
	}
	if (json && json_pack_file(stdout, "{s:s, s:b, s:I}", "socket", socket, "stopped", 1,
	                           "holder_pid", (json_int_t)hpid) < 0)
		return 1;
	return 0;
}

static int upgrade_cmd(const char *socket, const char *binary, bool json)
{
	_cleanup_(buf_freep) struct buf req = BUF_INIT;
	_cleanup_free_ char *abs = binary ? realpath(binary, NULL) : NULL;
	json_t *j = NULL;
	int64_t old = 0, now = 0;
	uint64_t deadline = now_ns() + (uint64_t)NODE_STOP_WAIT_MS * 1000000;
	bool ok = false;

	if (binary && !abs) {
		log_errno(-errno, "--binary '%s'", binary);
		return 1;
	}
	if (tools_node_request_text(json_pack("{s:s, s:s*}", "verb", "upgrade", "binary", abs),
	                            &req) < 0)
		return 1;
	if (call(socket, (char *)req.data, &j) < 0)
		return 1;
	if (json_bool(json_object_get(j, "ok"), &ok) < 0 || !ok) {
		const char *log = json_get_cstr(j, "log");

		if (log)
			fputs(log, stderr);
		else
			log_error(-EIO, "node '%s': upgrade failed", socket);
		json_decref(j);
		return 1;
	}
	(void)json_int(json_object_get(j, "pid"), &old);
	json_decref(j);
	/* Each status call waits in the socket's backlog until a worker answers:
	 * only the moment before the old worker leaves answers with its pid. */
	while (now_ns() < deadline) {
		j = NULL;
		if (call(socket, "{\"verb\":\"status\"}", &j) < 0)
			return 1;
		now = 0;
		(void)json_int(json_object_get(j, "pid"), &now);
		json_decref(j);
		if (now && now != old && json)
			return json_pack_file(stdout, "{s:s, s:I, s:I}", "socket", socket, "old_pid",
			                      (json_int_t)old, "pid", (json_int_t)now) < 0 ? 1 : 0;
		if (now && now != old)
			return 0;
	}
	log_error(-ETIMEDOUT, "node '%s': no new worker after the upgrade", socket);
	return 1;
}

/* ---- the service ------------------------------------------------------------------ */

int cmd_node(int argc, char **argv)
{
	enum { O_CONFIG = 256, O_STORE, O_CACHE, O_IMAGES, O_SOCKET, O_METRICS, O_CACHE_SIZE,
	       O_CACHE_MEMORY, O_READAHEAD, O_FETCH_TIMEOUT, O_NOPASS, O_NOCPU, O_LOG, O_WORKER,
	       O_JSON, O_BINARY };
	static const struct option opts[] = {
		{ "config", required_argument, NULL, O_CONFIG },
		{ "store", required_argument, NULL, O_STORE },
		{ "cache", required_argument, NULL, O_CACHE },
		{ "images", required_argument, NULL, O_IMAGES },
		{ "socket", required_argument, NULL, O_SOCKET },
		{ "metrics", required_argument, NULL, O_METRICS },
		{ "cache-size", required_argument, NULL, O_CACHE_SIZE },
		{ "cache-memory", required_argument, NULL, O_CACHE_MEMORY },
		{ "readahead", required_argument, NULL, O_READAHEAD },
		{ "fetch-timeout", required_argument, NULL, O_FETCH_TIMEOUT },
		{ "no-passthrough", no_argument, NULL, O_NOPASS },
		{ "no-cpu-latency", no_argument, NULL, O_NOCPU },
		{ "log", required_argument, NULL, O_LOG },
		{ "worker", no_argument, NULL, O_WORKER },
		{ "json", no_argument, NULL, O_JSON },
		{ "binary", required_argument, NULL, O_BINARY },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	_cleanup_(node_config_destroy) struct node_config cfg = { 0 };
	struct tools_flags fl = { 0 };
	const char *verb = NULL, *log = NULL, *binary = NULL;
	char cmd[16];
	char **wargs = calloc((size_t)argc * 2 + 1, sizeof(char *));
	bool worker = false, json = false;
	int nwargs = 0, c, r = 2;

	if (!wargs)
		return 1;
	if (argc > 1 && argv[1][0] != '-') {
		verb = argv[1];
		argc--;
		argv++;
		if (strcmp(verb, "status") && strcmp(verb, "stop") && strcmp(verb, "upgrade")) {
			free(wargs);
			return tools_usage_error("node", "unknown verb '%s'", verb);
		}
	}
	snprintf(cmd, sizeof(cmd), "node%s%s", verb ? " " : "", verb ? verb : "");
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		char *v = NULL, *flag;

		switch (c) {
		case O_CONFIG: fl.config = optarg; v = tools_absolute(optarg); break;
		case O_LOG: log = optarg; v = strdup(optarg); break;
		case O_WORKER: worker = true; continue;
		case O_JSON: json = true; continue;
		case O_BINARY: binary = optarg; continue;
		case O_NOPASS: case O_NOCPU: break;
		case 'h': usage(stdout); r = 0; goto out;
		default:
			if (c < O_STORE || c > O_FETCH_TIMEOUT) {
				r = tools_option_error(cmd, argv, "h", opts);
				goto out;
			}
			/* workers run from "/": relative paths would name other places.
			 * The socket is not made absolute: every client names it, and
			 * they refuse a relative one (docs/settings.md), so the node
			 * refuses it too rather than serve where none can reach it. */
			if (c == O_STORE)
				v = tools_absolute_store_url(optarg);
			else if (c == O_CACHE || c == O_IMAGES)
				v = tools_absolute(optarg);
			else
				v = strdup(optarg);
			if (!v)
				goto out;
		}
		/* the flags are the options' names (docs/settings.md); the workers
		 * get the same, paths made absolute */
		if (asprintf(&flag, "--%s", opts[c - 256].name) < 0) {
			free(v);
			goto out;
		}
		wargs[nwargs++] = flag;
		if (v)
			wargs[nwargs++] = v;
		if (c != O_CONFIG && c != O_LOG)
			tools_flag(&fl, flag, v);
	}
	if (optind < argc) {
		r = tools_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
		goto out;
	}
	if (tools_settings(&fl, &cfg) < 0)
		goto out;
	if (verb) {
		if (!strcmp(verb, "status"))
			r = status_cmd(cfg.socket_path, json);
		else if (!strcmp(verb, "stop"))
			r = stop_cmd(cfg.socket_path, json);
		else
			r = upgrade_cmd(cfg.socket_path, binary, json);
		goto out;
	}
	if (chdir("/") < 0) {
		r = log_errno(-errno, "node: chdir /");
		r = 1;
		goto out;
	}
	if (worker)
		r = node_worker_main(&cfg, NODE_WORKER_CHAN_FD, NODE_WORKER_LISTEN_FD, log);
	else
		r = node_holder_main(&cfg, wargs, nwargs);
out:
	for (int i = 0; i < nwargs; i++)
		free(wargs[i]);
	free(wargs);
	return r;
}
