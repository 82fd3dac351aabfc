/*
 * policy.c — the sandbox policy: defaults, one setter that parses every
 * field's text form, and the "key = value" policy file.  POLICY.md documents
 * each field; keep the two in step.
 */
#include <arpa/inet.h>
#include <math.h>

#include "lib/lib.h"
#include "sandbox/sandbox-internal.h"

#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

static int set_str(char **field, const char *value)
{
	char *s = strdup(value);

	if (!s)
		return -ENOMEM;
	free(*field);
	*field = s;
	return 0;
}

static void strv_free(struct strv *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

static int strv_add(struct strv *l, const char *s)
{
	char **v = realloc(l->v, (l->n + 2) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	l->v = v;
	v[l->n] = strdup(s);
	if (!v[l->n])
		return -ENOMEM;
	v[++l->n] = NULL;
	return 0;
}

int sandbox_new(struct sandbox **ret)
{
	struct sandbox *sb = calloc(1, sizeof(*sb));

	if (!sb)
		return -ENOMEM;
	sb->ids_auto = true;
	sb->ptys = 32;
	sb->inotify_instances = 128;
	sb->inotify_watches = 65536;
	sb->ipc_objects = 256;
	sb->tmpfs_size = 256ull << 20;
	sb->memory = 1ull << 30;
	sb->pids = 256;
	sb->cpus = 1;
	sb->nofile = 1024;
	sb->timeout = 600;
	sb->output = 64ull << 20;
	sb->kill_on_pids_limit = true;
	sb->landlock = true;
	sb->pool = true;
	sb->tcp_bind.any = true;
	sb->tcp_connect.any = true;
	sb->socket_families = SANDBOX_FAMILY_ALL;
	if (set_str(&sb->hostname, "sandbox") < 0 || set_str(&sb->workdir, "/") < 0) {
		sandbox_free(sb);
		return -ENOMEM;
	}
	*ret = sb;
	return 0;
}

void sandbox_set_node(struct sandbox *sb, const struct sandbox_node *n)
{
	sb->node = *n;
}

void sandbox_free(struct sandbox *sb)
{
	if (!sb)
		return;
	free(sb->rootfs);
	free(sb->name);
	free(sb->hostname);
	free(sb->workdir);
	for (size_t i = 0; i < sb->n_env; i++)
		free(sb->env[i]);
	free(sb->env);
	for (size_t i = 0; i < sb->n_binds; i++) {
		free(sb->binds[i].src);
		free(sb->binds[i].dst);
	}
	free(sb->binds);
	strv_free(&sb->writable);
	strv_free(&sb->read_only);
	strv_free(&sb->hide);
	free(sb->tcp_bind.v);
	free(sb->tcp_connect.v);
	free(sb->allow);
	for (size_t i = 0; i < sb->n_stages; i++) {
		free(sb->stages[i].name);
		free(sb->stages[i].allow);
		strv_free(&sb->stages[i].hide);
	}
	free(sb->stages);
	free(sb->stage);
	free(sb);
}

/* NAME=VALUE replaces an earlier NAME. */
static int add_env(struct sandbox *sb, const char *value)
{
	const char *eq = strchr(value, '=');
	size_t n;
	char **env, *s;

	if (!eq || eq == value)
		return -EINVAL;
	n = (size_t)(eq - value) + 1;
	s = strdup(value);
	if (!s)
		return -ENOMEM;
	for (size_t i = 0; i < sb->n_env; i++)
		if (!strncmp(sb->env[i], value, n)) {
			free(sb->env[i]);
			sb->env[i] = s;
			return 0;
		}
	env = realloc(sb->env, (sb->n_env + 2) * sizeof(*env));
	if (!env) {
		free(s);
		return -ENOMEM;
	}
	sb->env = env;
	env[sb->n_env++] = s;
	env[sb->n_env] = NULL;
	return 0;
}

/* SRC:DST[:rw|:ro]; both absolute. */
static int add_bind(struct sandbox *sb, const char *value)
{
	_cleanup_free_ char *src = NULL, *dst = NULL;
	const char *c1 = strchr(value, ':'), *c2;
	struct sandbox_bind *b;
	bool rw = false;

	if (!c1)
		return -EINVAL;
	c2 = strchr(c1 + 1, ':');
	if (c2) {
		if (!strcmp(c2 + 1, "rw"))
			rw = true;
		else if (strcmp(c2 + 1, "ro"))
			return -EINVAL;
	}
	src = strndup(value, (size_t)(c1 - value));
	dst = c2 ? strndup(c1 + 1, (size_t)(c2 - c1 - 1)) : strdup(c1 + 1);
	if (!src || !dst)
		return -ENOMEM;
	if (src[0] != '/' || dst[0] != '/' || strstr(dst, "/../") ||
	    (strlen(dst) >= 3 && !strcmp(dst + strlen(dst) - 3, "/..")))
		return -EINVAL;
	b = realloc(sb->binds, (sb->n_binds + 1) * sizeof(*b));
	if (!b)
		return -ENOMEM;
	sb->binds = b;
	b[sb->n_binds++] = (struct sandbox_bind){ TAKE_PTR(src), TAKE_PTR(dst), rw };
	return 0;
}

static int parse_bool(const char *s, bool *ret)
{
	if (!strcmp(s, "true") || !strcmp(s, "yes") || !strcmp(s, "on") || !strcmp(s, "1"))
		*ret = true;
	else if (!strcmp(s, "false") || !strcmp(s, "no") || !strcmp(s, "off") || !strcmp(s, "0"))
		*ret = false;
	else
		return -EINVAL;
	return 0;
}

static int parse_double(const char *s, double max, double *ret)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || v < 0 || v > max)
		return -EINVAL;
	*ret = v;
	return 0;
}

/* "UID[:GID]"; GID defaults to UID.  Both below SANDBOX_ID_RANGE. */
static int parse_user(const char *s, uid_t *uid, gid_t *gid)
{
	_cleanup_free_ char *u = strdup(s);
	char *colon;
	uint64_t a, b;

	if (!u)
		return -ENOMEM;
	colon = strchr(u, ':');
	if (colon)
		*colon = '\0';
	if (parse_uint(u, SANDBOX_ID_RANGE - 1, &a) < 0)
		return -EINVAL;
	b = a;
	if (colon && parse_uint(colon + 1, SANDBOX_ID_RANGE - 1, &b) < 0)
		return -EINVAL;
	*uid = (uid_t)a;
	*gid = (gid_t)b;
	return 0;
}

/* An absolute path with no ".." component. */
static bool good_path(const char *p)
{
	size_t n = strlen(p);

	return p[0] == '/' && !strstr(p, "/../") && !(n >= 3 && !strcmp(p + n - 3, "/.."));
}

/* "any", "none" or a comma-separated list of ports. */
static int parse_ports(const char *v, struct sandbox_ports *p)
{
	_cleanup_free_ char *s = strdup(v);
	_cleanup_free_ uint16_t *ports = NULL;
	size_t n = 0;

	if (!s)
		return -ENOMEM;
	if (!strcmp(v, "any") || !strcmp(v, "none")) {
		free(p->v);
		*p = (struct sandbox_ports){ .any = v[0] == 'a' };
		return 0;
	}
	for (char *save = NULL, *tok = strtok_r(s, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
		uint64_t port;
		uint16_t *np;

		if (parse_uint(tok, 65535, &port) < 0)
			return -EINVAL;
		np = realloc(ports, (n + 1) * sizeof(*np));
		if (!np)
			return -ENOMEM;
		ports = np;
		ports[n++] = (uint16_t)port;
	}
	if (!n)
		return -EINVAL;
	free(p->v);
	*p = (struct sandbox_ports){ .any = false, .v = TAKE_PTR(ports), .n = n };
	return 0;
}

int policy_parse_addr(const char *v, struct sandbox_addr *a)
{
	_cleanup_free_ char *s = strdup(v);
	char *colon, *host;
	uint64_t port;
	struct in_addr in4;

	if (!s)
		return -ENOMEM;
	colon = strrchr(s, ':');
	if (!colon || parse_uint(colon + 1, 65535, &port) < 0 || port == 0)
		return -EINVAL;
	*colon = '\0';
	host = s;
	memset(a, 0, sizeof(*a));
	a->port = htons((uint16_t)port);
	if (!strcmp(host, "host")) {
		a->host = true;
		return 0;
	}
	if (host[0] == '[') {
		size_t n = strlen(host);

		if (n < 3 || host[n - 1] != ']')
			return -EINVAL;
		host[n - 1] = '\0';
		return inet_pton(AF_INET6, host + 1, a->addr) == 1 ? 0 : -EINVAL;
	}
	if (inet_pton(AF_INET, host, &in4) != 1)
		return -EINVAL;
	a->addr[10] = a->addr[11] = 0xff;
	memcpy(a->addr + 12, &in4, 4);
	return 0;
}

/* ADDR:PORT appended to *list; an empty value only marks the list as set. */
static int add_addr(struct sandbox_addr **list, size_t *n, const char *v)
{
	struct sandbox_addr a, *l;
	int r;

	if (!v[0])
		return 0;
	r = policy_parse_addr(v, &a);
	if (r < 0)
		return r;
	l = realloc(*list, (*n + 1) * sizeof(*l));
	if (!l)
		return -ENOMEM;
	*list = l;
	l[(*n)++] = a;
	return 0;
}

/* "none" or a comma-separated list of unix, inet, inet6, netlink. */
static int parse_families(const char *v, unsigned *ret)
{
	static const char *const names[] = { "unix", "inet", "inet6", "netlink" };
	_cleanup_free_ char *s = strdup(v);
	unsigned bits = 0;

	if (!s)
		return -ENOMEM;
	if (!strcmp(v, "none")) {
		*ret = 0;
		return 0;
	}
	for (char *save = NULL, *tok = strtok_r(s, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
		size_t i = 0;

		while (i < ARRAY_SIZE(names) && strcmp(tok, names[i]))
			i++;
		if (i == ARRAY_SIZE(names))
			return -EINVAL;
		bits |= 1u << i;
	}
	if (!bits)
		return -EINVAL;
	*ret = bits;
	return 0;
}

static bool good_name(const char *v)
{
	return v[0] && v[0] != '.' && strlen(v) <= 64 &&
	       strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") ==
	       strlen(v);
}

/* stage.NAME.allow, stage.NAME.hide */
static int set_stage_field(struct sandbox *sb, const char *key, const char *v)
{
	const char *name = key + 6, *dot = strrchr(name, '.');
	_cleanup_free_ char *n = NULL;
	struct sandbox_stage *st = NULL;

	if (!dot || dot == name)
		return -ENOENT;
	n = strndup(name, (size_t)(dot - name));
	if (!n)
		return -ENOMEM;
	if (strcmp(dot, ".allow") && strcmp(dot, ".hide"))
		return -ENOENT;
	if (!good_name(n))
		return -EINVAL;
	for (size_t i = 0; i < sb->n_stages; i++)
		if (!strcmp(sb->stages[i].name, n))
			st = &sb->stages[i];
	if (!st) {
		struct sandbox_stage *s = realloc(sb->stages, (sb->n_stages + 1) * sizeof(*s));

		if (!s)
			return -ENOMEM;
		sb->stages = s;
		st = &s[sb->n_stages++];
		*st = (struct sandbox_stage){ .name = TAKE_PTR(n) };
	}
	if (!strcmp(dot, ".allow")) {
		st->has_allow = true;
		return add_addr(&st->allow, &st->n_allow, v);
	}
	if (!v[0])
		return 0;   /* "stage.S.hide =": declares S, hides nothing more */
	if (!good_path(v))
		return -EINVAL;
	return strv_add(&st->hide, v);
}

static int set_field(struct sandbox *sb, const char *key, const char *v)
{
	uint64_t n;
	double d;
	int r;

	if (!strcmp(key, "rootfs"))
		return v[0] ? set_str(&sb->rootfs, v) : -EINVAL;
	if (!strcmp(key, "name"))
		return good_name(v) ? set_str(&sb->name, v) : -EINVAL;
	if (!strcmp(key, "hostname"))
		return v[0] && strlen(v) <= 64 ? set_str(&sb->hostname, v) : -EINVAL;
	if (!strcmp(key, "workdir"))
		return v[0] == '/' ? set_str(&sb->workdir, v) : -EINVAL;
	if (!strcmp(key, "user"))
		return parse_user(v, &sb->uid, &sb->gid);
	if (!strcmp(key, "env"))
		return add_env(sb, v);
	if (!strcmp(key, "bind"))
		return add_bind(sb, v);
	if (!strcmp(key, "uid_base")) {
		if (!strcmp(v, "auto")) {
			sb->ids_auto = true;
			return 0;
		}
		if (parse_uint(v, UINT32_MAX - SANDBOX_ID_RANGE, &n) < 0 || n == 0)
			return -EINVAL;
		sb->ids_auto = false;
		sb->uid_base = sb->gid_base = (uint32_t)n;
		return 0;
	}
	/* The per-namespace limits, within the kernel's own ceilings: INT_MAX
	 * for a user namespace's counts, IPCMNI (32768) ids for IPC objects. */
	if (!strcmp(key, "namespaces") || !strcmp(key, "inotify_instances") ||
	    !strcmp(key, "inotify_watches")) {
		if (parse_uint(v, INT32_MAX, &n) < 0)
			return -EINVAL;
		if (!strcmp(key, "namespaces"))
			sb->namespaces = (uint32_t)n;
		else if (!strcmp(key, "inotify_instances"))
			sb->inotify_instances = (uint32_t)n;
		else
			sb->inotify_watches = (uint32_t)n;
		return 0;
	}
	if (!strcmp(key, "ipc_objects")) {
		if (parse_uint(v, 32768, &n) < 0 || n == 0)
			return -EINVAL;
		sb->ipc_objects = (uint32_t)n;
		return 0;
	}
	if (!strcmp(key, "ptys")) {
		if (parse_uint(v, 4096, &n) < 0 || n == 0)
			return -EINVAL;
		sb->ptys = (uint32_t)n;
		return 0;
	}
	if (!strcmp(key, "landlock"))
		return parse_bool(v, &sb->landlock);
	if (!strcmp(key, "io_uring"))
		return parse_bool(v, &sb->io_uring);
	if (!strcmp(key, "socket_families"))
		return parse_families(v, &sb->socket_families);
	if (!strcmp(key, "sysfs"))
		return parse_bool(v, &sb->sysfs);
	if (!strcmp(key, "pool"))
		return parse_bool(v, &sb->pool);
	if (!strcmp(key, "writable")) {
		if (!sb->writable_set || !strcmp(v, "none"))
			strv_free(&sb->writable);
		sb->writable_set = true;
		if (!strcmp(v, "none"))
			return 0;
		return good_path(v) ? strv_add(&sb->writable, v) : -EINVAL;
	}
	if (!strcmp(key, "read_only"))
		return good_path(v) ? strv_add(&sb->read_only, v) : -EINVAL;
	if (!strcmp(key, "hide"))
		return good_path(v) ? strv_add(&sb->hide, v) : -EINVAL;
	if (!strcmp(key, "tcp_bind"))
		return parse_ports(v, &sb->tcp_bind);
	if (!strcmp(key, "tcp_connect"))
		return parse_ports(v, &sb->tcp_connect);
	if (!strcmp(key, "allow"))
		return v[0] ? add_addr(&sb->allow, &sb->n_allow, v) : -EINVAL;
	if (!strcmp(key, "stage"))
		return good_name(v) ? set_str(&sb->stage, v) : -EINVAL;
	if (!strncmp(key, "stage.", 6))
		return set_stage_field(sb, key, v);
	if (!strcmp(key, "kill_on_pids_limit"))
		return parse_bool(v, &sb->kill_on_pids_limit);
	if (!strcmp(key, "cpus")) {
		if ((r = parse_double(v, 4096, &d)) < 0)
			return r;
		sb->cpus = d;
		return 0;
	}
	if (!strcmp(key, "timeout")) {
		if ((r = parse_double(v, 1e7, &d)) < 0)
			return r;
		sb->timeout = d;
		return 0;
	}
	if (!strcmp(key, "pids") || !strcmp(key, "nofile")) {
		if (parse_uint(v, 1u << 22, &n) < 0)
			return -EINVAL;
		if (key[0] == 'p')
			sb->pids = n;
		else if (n == 0)
			return -EINVAL;
		else
			sb->nofile = n;
		return 0;
	}
	{
		static const struct { const char *key; size_t off; bool nonzero; } sizes[] = {
			{ "memory", offsetof(struct sandbox, memory), false },
			{ "output", offsetof(struct sandbox, output), false },
			{ "tmpfs_size", offsetof(struct sandbox, tmpfs_size), true },
		};

		for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
			if (strcmp(key, sizes[i].key))
				continue;
			if (parse_size(v, &n) < 0 || (sizes[i].nonzero && n == 0))
				return -EINVAL;
			*(uint64_t *)((char *)sb + sizes[i].off) = n;
			return 0;
		}
	}
	return -ENOENT;
}

int sandbox_set(struct sandbox *sb, const char *key, const char *value)
{
	int r = set_field(sb, key, value);

	if (r == -ENOENT)
		return log_error(-EINVAL, "policy: unknown field '%s'", key);
	if (r < 0)
		return log_error(r == -ENOMEM ? r : -EINVAL, "policy: %s = '%s': not a valid value",
		                 key, value);
	return 0;
}

static char *trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n'))
		*--e = '\0';
	return s;
}

int sandbox_load_policy(struct sandbox *sb, const char *path)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	char *line, *next;
	unsigned lineno = 0;
	int r;

	r = read_file(path, 1 << 20, &b);
	if (r < 0)
		return log_errno(r, "policy '%s'", path);
	for (line = (char *)b.data; line; line = next) {
		char *eq, *key, *value;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		lineno++;
		line = trim(line);
		if (!*line || *line == '#')
			continue;
		eq = strchr(line, '=');
		if (!eq)
			return log_error(-EINVAL, "policy '%s' line %u: want 'key = value'", path, lineno);
		*eq = '\0';
		key = trim(line);
		value = trim(eq + 1);
		r = set_field(sb, key, value);
		if (r == -ENOENT)
			return log_error(-EINVAL, "policy '%s' line %u: unknown field '%s'", path, lineno, key);
		if (r < 0)
			return log_error(r == -ENOMEM ? r : -EINVAL,
			                 "policy '%s' line %u: %s = '%s': not a valid value", path, lineno,
			                 key, value);
	}
	return 0;
}

const char *sandbox_kill_name(enum sandbox_kill k)
{
	switch (k) {
	case SANDBOX_KILL_NONE: return "none";
	case SANDBOX_KILL_TIME: return "time";
	case SANDBOX_KILL_MEMORY: return "memory";
	case SANDBOX_KILL_PIDS: return "pids";
	case SANDBOX_KILL_OUTPUT: return "output";
	case SANDBOX_KILL_SIGNAL: return "signal";
	}
	return "unknown";
}

int policy_env(const struct sandbox *sb, char ***ret)
{
	bool has_path = false, has_home = false;
	size_t n = 0;
	char **env = calloc(sb->n_env + 3, sizeof(*env));

	if (!env)
		return -ENOMEM;
	for (size_t i = 0; i < sb->n_env; i++) {
		has_path |= !strncmp(sb->env[i], "PATH=", 5);
		has_home |= !strncmp(sb->env[i], "HOME=", 5);
	}
	if (!has_path)
		env[n++] = (char *)"PATH=" DEFAULT_PATH;
	if (!has_home)
		env[n++] = (char *)(sb->uid == 0 ? "HOME=/root" : "HOME=/");
	for (size_t i = 0; i < sb->n_env; i++)
		env[n++] = sb->env[i];
	env[n] = NULL;
	*ret = env;
	return 0;
}

const struct sandbox_stage *policy_start_stage(const struct sandbox *sb)
{
	if (!sb->n_stages)
		return NULL;
	for (size_t i = 0; sb->stage && i < sb->n_stages; i++)
		if (!strcmp(sb->stages[i].name, sb->stage))
			return &sb->stages[i];
	return sb->stage ? NULL : &sb->stages[0];
}

int policy_hidden(const struct sandbox *sb, struct strv *ret)
{
	const struct sandbox_stage *st = policy_start_stage(sb);
	size_t n = sb->hide.n + (st ? st->hide.n : 0);
	char **v = calloc(n + 1, sizeof(*v));

	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < sb->hide.n; i++)
		v[i] = sb->hide.v[i];
	for (size_t i = 0; st && i < st->hide.n; i++)
		v[sb->hide.n + i] = st->hide.v[i];
	ret->v = v;
	ret->n = n;
	return 0;
}

bool policy_hides(const struct sandbox *sb)
{
	const struct sandbox_stage *st = policy_start_stage(sb);

	return sb->landlock && (sb->hide.n || (st && st->hide.n));
}
