/*
 * policy.c — the sandbox policy as a typed table (fields[]): one row per
 * field with its key, type, default, bounds and a line of meaning.  The
 * defaults (sandbox_new applies each row's default through the parser), the
 * setter (sandbox_set), the policy file and the dump (sandbox_policy_fields)
 * all go through it, so that a value means the same whichever way it came.
 * sandbox/POLICY.md documents the same table; tests/unit/test_policy.c
 * checks the two agree both ways.
 */
#include <arpa/inet.h>
#include <math.h>

#include "lib/lib.h"
#include "sandbox/sandbox-internal.h"

static int set_str(char **field, const char *value)
{
	char *s = strdup(value);

	if (!s)
		return -ENOMEM;
	free(*field);
	*field = s;
	return 0;
}

void strv_free(struct strv *l)
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
int policy_parse_user(const char *s, uid_t *uid, gid_t *gid)
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

/* ---- the table ------------------------------------------------------------ */

enum field_type {
	F_STR,          /* a string of min..max bytes */
	F_NAME,         /* [A-Za-z0-9._-], not starting with '.', at most 64 */
	F_ABSPATH,      /* an absolute path */
	F_USER,         /* UID[:GID] */
	F_ENV,          /* NAME=VALUE, repeatable */
	F_BIND,         /* SRC:DST[:rw|:ro], repeatable */
	F_ID_BASE,      /* auto, or a host id min..max */
	F_U32,          /* min..max into a uint32_t */
	F_U64,          /* min..max into a uint64_t */
	F_SIZE,         /* parse_size(), at least min, into a uint64_t */
	F_REAL,         /* a number 0..max (a fraction allowed) into a double */
	F_SECONDS,      /* parse_seconds(): F_REAL, or a whole number with ms, s, m or h */
	F_BOOL,
	F_WRITABLE,     /* a path, repeatable; the first replaces the default; none */
	F_PATHS,        /* a path, repeatable */
	F_PORTS,        /* any, none, or PORT,PORT,... */
	F_ADDRS,        /* ADDR:PORT, repeatable */
	F_FAMILIES,     /* none, or a list of unix, inet, inet6, netlink */
	F_STAGE_ALLOW,  /* stage.NAME.allow: ADDR:PORT, repeatable; empty declares */
	F_STAGE_HIDE,   /* stage.NAME.hide: a path, repeatable; empty declares */
};

/* What sandbox_field's type says of each. */
#define TN_F_STR "string"
#define TN_F_NAME "name"
#define TN_F_ABSPATH "path"
#define TN_F_USER "user"
#define TN_F_ENV "env"
#define TN_F_BIND "bind"
#define TN_F_ID_BASE "ids"
#define TN_F_U32 "count"
#define TN_F_U64 "count"
#define TN_F_SIZE "size"
#define TN_F_REAL "number"
#define TN_F_SECONDS "duration"
#define TN_F_BOOL "bool"
#define TN_F_WRITABLE "paths"
#define TN_F_PATHS "paths"
#define TN_F_PORTS "ports"
#define TN_F_ADDRS "addrs"
#define TN_F_FAMILIES "families"
#define TN_F_STAGE_ALLOW "addrs"
#define TN_F_STAGE_HIDE "paths"

struct field {
	struct sandbox_field pub;
	enum field_type type;
	size_t off;             /* of the field in struct sandbox */
	bool unset_default;     /* pub.dflt is what the field means while unset: not applied */
};

#define OFF(f) offsetof(struct sandbox, f)
#define ROW(k, t, f, mn, mx, d, list, doc) \
	{ { k, TN_##t, d, doc, list, mn, mx }, t, OFF(f), false }

/* In POLICY.md's order.  Bounds: the kernel's own where it has them
 * (INT32_MAX for a user namespace's counts, IPCMNI ids for IPC objects,
 * 4096 ptys per node), else what no sandbox could need more of. */
static const struct field fields[] = {
	ROW("rootfs", F_STR, rootfs, 1, 0, NULL, false,
	    "directory used as the read-only lower layer of the sandbox's overlay"),
	ROW("name", F_NAME, name, 1, 64, NULL, false,
	    "the sandbox's name (cgroups, tmpfs, stage state); default lazyroot-<launcher pid>"),
	ROW("hostname", F_STR, hostname, 1, 64, "sandbox", false, "hostname inside"),
	ROW("workdir", F_ABSPATH, workdir, 0, 0, "/", false,
	    "working directory of the command, inside"),
	ROW("user", F_USER, uid, 0, SANDBOX_ID_RANGE - 1, "0:0", false,
	    "UID[:GID] the command runs as inside"),
	ROW("env", F_ENV, env, 0, 0, NULL, true,
	    "NAME=VALUE of the command's environment; a later NAME replaces an earlier one"),
	ROW("bind", F_BIND, binds, 0, 0, NULL, true,
	    "SRC:DST[:rw]: host path SRC at DST inside, read-only unless :rw"),
	ROW("uid_base", F_ID_BASE, uid_base, 1, UINT32_MAX - SANDBOX_ID_RANGE, "auto", false,
	    "host uid and gid of id 0 inside; auto: a range of the node's of its own"),
	ROW("ptys", F_U32, ptys, 1, 4096, "32", false,
	    "the most pseudo-terminals the sandbox's devpts holds"),
	ROW("namespaces", F_U32, namespaces, 0, INT32_MAX, "0", false,
	    "namespaces of each kind the sandbox may make, per id inside"),
	ROW("inotify_instances", F_U32, inotify_instances, 0, INT32_MAX, "128", false,
	    "inotify instances per id inside"),
	ROW("inotify_watches", F_U32, inotify_watches, 0, INT32_MAX, "65536", false,
	    "inotify watches per id inside"),
	ROW("ipc_objects", F_U32, ipc_objects, 1, 32768, "256", false,
	    "System V and POSIX IPC objects of each kind in the sandbox's ipc namespace"),
	ROW("tmpfs_size", F_SIZE, tmpfs_size, 1, 0, "256M", false,
	    "size of the tmpfs holding everything the sandbox writes"),
	ROW("memory", F_SIZE, memory, 0, 0, "1G", false, "memory cgroup limit; 0: none"),
	ROW("pids", F_U64, pids, 0, 1u << 22, "256", false,
	    "processes and threads at once; 0: no limit"),
	ROW("kill_on_pids_limit", F_BOOL, kill_on_pids_limit, 0, 0, "true", false,
	    "end the sandbox when a fork fails on the pids limit"),
	ROW("cpus", F_REAL, cpus, 0, 4096, "1", false, "CPU bandwidth in cores; 0: no limit"),
	ROW("nofile", F_U64, nofile, 1, 1u << 22, "1024", false, "RLIMIT_NOFILE, soft and hard"),
	ROW("timeout", F_SECONDS, timeout, 0, 1e7, "600", false,
	    "wall-clock limit from the clone: seconds, or 500ms, 2s, 10m, 1h; 0: no limit"),
	ROW("output", F_SIZE, output, 0, 0, "64M", false,
	    "cap on stdout and stderr together; 0: no cap"),
	ROW("landlock", F_BOOL, landlock, 0, 0, "true", false,
	    "apply the Landlock rules of the path and port fields"),
	{ { "writable", TN_F_WRITABLE, "/",
	    "path inside the sandbox may change, repeatable; none: nothing", true, 0, 0 },
	  F_WRITABLE, OFF(writable), true },
	ROW("read_only", F_PATHS, read_only, 0, 0, NULL, true,
	    "path inside that may be read but not changed, repeatable"),
	ROW("hide", F_PATHS, hide, 0, 0, NULL, true,
	    "path inside that may not be accessed at all, repeatable"),
	ROW("tcp_bind", F_PORTS, tcp_bind, 0, 65535, "any", false,
	    "TCP ports the sandbox may bind: any, none or a list"),
	ROW("tcp_connect", F_PORTS, tcp_connect, 0, 65535, "any", false,
	    "TCP ports the sandbox may connect to: any, none or a list"),
	ROW("allow", F_ADDRS, allow, 0, 0, NULL, true,
	    "ADDR:PORT the sandbox may reach over TCP and UDP, repeatable"),
	ROW("stage", F_NAME, stage, 1, 64, NULL, false,
	    "the stage the sandbox starts in; default the first declared"),
	ROW("stage.NAME.allow", F_STAGE_ALLOW, stages, 0, 0, NULL, true,
	    "ADDR:PORT stage NAME allows, repeatable; empty: nothing"),
	ROW("stage.NAME.hide", F_STAGE_HIDE, stages, 0, 0, NULL, true,
	    "path stage NAME hides, repeatable"),
	ROW("sysfs", F_BOOL, sysfs, 0, 0, "false", false, "mount a read-only sysfs on /sys"),
	ROW("pool", F_BOOL, pool, 0, 0, "true", false,
	    "take cgroups and the network namespace from the node's pools"),
	ROW("io_uring", F_BOOL, io_uring, 0, 0, "false", false,
	    "let the io_uring syscalls through seccomp"),
	ROW("socket_families", F_FAMILIES, socket_families, 0, 0, "unix,inet,inet6,netlink", false,
	    "the socket families socket() may make, or none"),
};

const struct sandbox_field *sandbox_field_at(size_t i)
{
	return i < ARRAY_SIZE(fields) ? &fields[i].pub : NULL;
}

/* The row of key: stage.NAME.allow and stage.NAME.hide match any NAME. */
static const struct field *find_field(const char *key)
{
	const char *dot;

	if (!strncmp(key, "stage.", 6) && (dot = strrchr(key + 6, '.')) && dot > key + 6) {
		for (size_t i = 0; i < ARRAY_SIZE(fields); i++)
			if ((fields[i].type == F_STAGE_ALLOW || fields[i].type == F_STAGE_HIDE) &&
			    !strcmp(strrchr(fields[i].pub.key, '.'), dot))
				return &fields[i];
		return NULL;
	}
	for (size_t i = 0; i < ARRAY_SIZE(fields); i++)
		if (!strcmp(fields[i].pub.key, key))
			return &fields[i];
	return NULL;
}

/* Check v for row f (key as given) and store it in sb: 0, -EINVAL, -ENOMEM. */
static int apply(struct sandbox *sb, const struct field *f, const char *key, const char *v)
{
	void *p = (char *)sb + f->off;
	uint64_t n;
	double d;
	int r;

	switch (f->type) {
	case F_STR:
		if (strlen(v) < f->pub.min || (f->pub.max && strlen(v) > f->pub.max))
			return -EINVAL;
		return set_str(p, v);
	case F_NAME:
		return good_name(v) ? set_str(p, v) : -EINVAL;
	case F_ABSPATH:
		return v[0] == '/' ? set_str(p, v) : -EINVAL;
	case F_USER:
		return policy_parse_user(v, &sb->uid, &sb->gid);
	case F_ENV:
		return add_env(sb, v);
	case F_BIND:
		return add_bind(sb, v);
	case F_ID_BASE:
		if (!strcmp(v, "auto")) {
			sb->ids_auto = true;
			return 0;
		}
		if (parse_uint(v, (uint64_t)f->pub.max, &n) < 0 || n < f->pub.min)
			return -EINVAL;
		sb->ids_auto = false;
		sb->uid_base = sb->gid_base = (uint32_t)n;
		return 0;
	case F_U32:
	case F_U64:
		if (parse_uint(v, (uint64_t)f->pub.max, &n) < 0 || n < f->pub.min)
			return -EINVAL;
		if (f->type == F_U32)
			*(uint32_t *)p = (uint32_t)n;
		else
			*(uint64_t *)p = n;
		return 0;
	case F_SIZE:
		if (parse_size(v, &n) < 0 || n < f->pub.min)
			return -EINVAL;
		*(uint64_t *)p = n;
		return 0;
	case F_REAL:
	case F_SECONDS:
		r = f->type == F_REAL ? parse_double(v, f->pub.max, &d) :
		                        parse_seconds(v, f->pub.max, &d);
		if (r < 0)
			return r;
		*(double *)p = d;
		return 0;
	case F_BOOL:
		return parse_bool(v, p);
	case F_WRITABLE:
		if (!sb->writable_set || !strcmp(v, "none"))
			strv_free(&sb->writable);
		sb->writable_set = true;
		if (!strcmp(v, "none"))
			return 0;
		return good_path(v) ? strv_add(&sb->writable, v) : -EINVAL;
	case F_PATHS:
		return good_path(v) ? strv_add(p, v) : -EINVAL;
	case F_PORTS:
		return parse_ports(v, p);
	case F_ADDRS:
		return v[0] ? add_addr(&sb->allow, &sb->n_allow, v) : -EINVAL;
	case F_FAMILIES:
		return parse_families(v, p);
	case F_STAGE_ALLOW:
	case F_STAGE_HIDE:
		return set_stage_field(sb, key, v);
	}
	return -EINVAL;
}

static int set_field(struct sandbox *sb, const char *key, const char *v)
{
	const struct field *f = find_field(key);

	return f ? apply(sb, f, key, v) : -ENOENT;
}

int sandbox_new(struct sandbox **ret)
{
	struct sandbox *sb = calloc(1, sizeof(*sb));

	if (!sb)
		return -ENOMEM;
	for (size_t i = 0; i < ARRAY_SIZE(fields); i++) {
		const struct field *f = &fields[i];

		if (!f->pub.dflt || f->unset_default)
			continue;
		if (apply(sb, f, f->pub.key, f->pub.dflt) < 0) {
			sandbox_free(sb);
			return -ENOMEM;   /* the defaults parse: only an allocation fails */
		}
	}
	*ret = sb;
	return 0;
}

void sandbox_policy_fields(FILE *f)
{
	const struct sandbox_field *d;

	for (size_t i = 0; (d = sandbox_field_at(i)); i++) {
		char bounds[64] = "";
		const struct field *row = &fields[i];

		if (row->type == F_U32 || row->type == F_U64 || row->type == F_ID_BASE)
			snprintf(bounds, sizeof(bounds), " %.0f..%.0f", d->min, d->max);
		else if (row->type == F_REAL || row->type == F_SECONDS)
			snprintf(bounds, sizeof(bounds), " 0..%g", d->max);
		else if (row->type == F_SIZE && d->min > 0)
			snprintf(bounds, sizeof(bounds), " >0");
		else if ((row->type == F_STR || row->type == F_NAME) && d->max > 0)
			snprintf(bounds, sizeof(bounds), " %.0f..%.0f bytes", d->min, d->max);
		fprintf(f, "%s\t%s%s%s\t%s\t%s\n", d->key, d->type, d->list ? ", repeatable" : "",
		        bounds, d->dflt ? d->dflt : "-", d->doc);
	}
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

int sandbox_load_policy_text(struct sandbox *sb, char *text, const char *what)
{
	char *line, *next;
	unsigned lineno = 0;
	int r;

	for (line = text; line; line = next) {
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
			return log_error(-EINVAL, "%s line %u: want 'key = value'", what, lineno);
		*eq = '\0';
		key = trim(line);
		value = trim(eq + 1);
		r = set_field(sb, key, value);
		if (r == -ENOENT)
			return log_error(-EINVAL, "%s line %u: unknown field '%s'", what, lineno, key);
		if (r < 0)
			return log_error(r == -ENOMEM ? r : -EINVAL,
			                 "%s line %u: %s = '%s': not a valid value", what, lineno,
			                 key, value);
	}
	return 0;
}

int sandbox_load_policy(struct sandbox *sb, const char *path)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	_cleanup_free_ char *what = NULL;
	int r;

	r = read_file(path, 1 << 20, &b);
	if (r < 0)
		return log_errno(r, "policy '%s'", path);
	if (asprintf(&what, "policy '%s'", path) < 0)
		return -ENOMEM;
	return sandbox_load_policy_text(sb, (char *)b.data, what);
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
		env[n++] = (char *)"PATH=" SANDBOX_DEFAULT_PATH;
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
