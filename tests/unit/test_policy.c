/* test_policy.c — the sandbox policy's field table (sandbox/policy.c): the
 * defaults sandbox_new applies, the bounds the parser enforces for every
 * numeric row, unknown keys and stage keys, and sandbox/POLICY.md agreeing
 * with the table both ways (every field documented with its default, every
 * documented field taken by the parser). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>

#include "lib/lib.h"
#include "sandbox/sandbox-internal.h"

/* The defaults, spelled out: a row whose default text changes changes what
 * every sandbox gets, so it must change here too. */
static void test_policy__defaults(void **state)
{
	struct sandbox *sb;

	(void)state;
	assert_int_equal(sandbox_new(&sb), 0);
	assert_null(sb->rootfs);
	assert_null(sb->name);
	assert_string_equal(sb->hostname, "sandbox");
	assert_string_equal(sb->workdir, "/");
	assert_int_equal(sb->uid, 0);
	assert_int_equal(sb->gid, 0);
	assert_true(sb->ids_auto);
	assert_int_equal(sb->ptys, 32);
	assert_int_equal(sb->namespaces, 0);
	assert_int_equal(sb->inotify_instances, 128);
	assert_int_equal(sb->inotify_watches, 65536);
	assert_int_equal(sb->ipc_objects, 256);
	assert_int_equal(sb->tmpfs_size, 256ull << 20);
	assert_int_equal(sb->memory, 1ull << 30);
	assert_int_equal(sb->pids, 256);
	assert_true(sb->cpus == 1);
	assert_int_equal(sb->nofile, 1024);
	assert_true(sb->timeout == 600);
	assert_int_equal(sb->output, 64ull << 20);
	assert_true(sb->kill_on_pids_limit);
	assert_true(sb->landlock);
	assert_false(sb->writable_set);
	assert_int_equal(sb->writable.n, 0);
	assert_true(sb->tcp_bind.any);
	assert_true(sb->tcp_connect.any);
	assert_false(sb->sysfs);
	assert_true(sb->pool);
	assert_false(sb->io_uring);
	assert_int_equal(sb->socket_families, SANDBOX_FAMILY_ALL);
	assert_int_equal(sb->n_env, 0);
	assert_int_equal(sb->n_binds, 0);
	assert_int_equal(sb->n_allow, 0);
	assert_int_equal(sb->n_stages, 0);
	assert_null(sb->stage);
	sandbox_free(sb);
}

static int try_set(const char *key, const char *value)
{
	struct sandbox *sb;
	int r;

	assert_int_equal(sandbox_new(&sb), 0);
	r = sandbox_set(sb, key, value);
	sandbox_free(sb);
	return r;
}

/* Every bounded row: its bounds parse, one past them does not. */
static void test_policy__bounds(void **state)
{
	const struct sandbox_field *f;
	unsigned checked = 0;
	char v[64];

	(void)state;
	for (size_t i = 0; (f = sandbox_field_at(i)); i++) {
		if (strcmp(f->type, "count") && strcmp(f->type, "ids"))
			continue;
		snprintf(v, sizeof(v), "%.0f", f->min);
		assert_int_equal(try_set(f->key, v), 0);
		snprintf(v, sizeof(v), "%.0f", f->max);
		assert_int_equal(try_set(f->key, v), 0);
		snprintf(v, sizeof(v), "%.0f", f->max + 1);
		assert_int_equal(try_set(f->key, v), -EINVAL);
		if (f->min > 0) {
			snprintf(v, sizeof(v), "%.0f", f->min - 1);
			assert_int_equal(try_set(f->key, v), -EINVAL);
		}
		checked++;
	}
	assert_true(checked >= 8);
	assert_int_equal(try_set("cpus", "4096"), 0);
	assert_int_equal(try_set("cpus", "4096.5"), -EINVAL);
	assert_int_equal(try_set("timeout", "0.5"), 0);
	assert_int_equal(try_set("timeout", "-1"), -EINVAL);
	assert_int_equal(try_set("tmpfs_size", "0"), -EINVAL);
	assert_int_equal(try_set("memory", "0"), 0);
	assert_int_equal(try_set("hostname", ""), -EINVAL);
	assert_int_equal(try_set("hostname",
	                         "a123456789b123456789c123456789d123456789e123456789f123456789g1234"),
	                 -EINVAL);
	assert_int_equal(try_set("uid_base", "auto"), 0);
	assert_int_equal(try_set("user", "65535:0"), 0);
	assert_int_equal(try_set("user", "65536"), -EINVAL);
}

static void test_policy__keys(void **state)
{
	struct sandbox *sb;

	(void)state;
	assert_int_equal(try_set("memroy", "1G"), -EINVAL);
	assert_int_equal(try_set("stage.solve", "x"), -EINVAL);
	assert_int_equal(try_set("stage..allow", "host:80"), -EINVAL);
	assert_int_equal(try_set("stage.solve.other", "x"), -EINVAL);
	assert_int_equal(try_set("stage.NAME.allow", "host:80"), 0);
	assert_int_equal(sandbox_new(&sb), 0);
	assert_int_equal(sandbox_set(sb, "stage.solve.allow", "10.0.0.1:80"), 0);
	assert_int_equal(sandbox_set(sb, "stage.grade.allow", ""), 0);
	assert_int_equal(sandbox_set(sb, "stage.grade.hide", "/solutions"), 0);
	assert_int_equal(sb->n_stages, 2);
	assert_string_equal(sb->stages[1].name, "grade");
	assert_int_equal(sb->stages[1].hide.n, 1);
	/* the first writable replaces the default "/", later ones append */
	assert_int_equal(sandbox_set(sb, "writable", "/tmp"), 0);
	assert_int_equal(sandbox_set(sb, "writable", "/work"), 0);
	assert_int_equal(sb->writable.n, 2);
	assert_int_equal(sandbox_set(sb, "socket_families", "unix,inet"), 0);
	assert_int_equal(sb->socket_families, SANDBOX_FAMILY_UNIX | SANDBOX_FAMILY_INET);
	assert_int_equal(sandbox_set(sb, "tcp_connect", "80,443"), 0);
	assert_int_equal(sb->tcp_connect.n, 2);
	sandbox_free(sb);
}

/* The last `VALUE` of a default column: "the image's `User`, else `0:0`"
 * is 0:0.  "" when it has none. */
static void last_code(const char *col, char *out, size_t len)
{
	const char *p = col, *open = NULL, *close = NULL;

	out[0] = '\0';
	while ((p = strchr(p, '`'))) {
		const char *e = strchr(p + 1, '`');

		if (!e)
			break;
		open = p + 1;
		close = e;
		p = e + 1;
	}
	if (open)
		snprintf(out, len, "%.*s", (int)(close - open), open);
}

/* sandbox/POLICY.md's "Fields" table and the field table agree, both ways:
 * every row names a field the parser takes, once; every field has a row;
 * a field with a default has it as the row's last `value` in the default
 * column, and one without says something there. */
static void test_policy__docs_agree(void **state)
{
	_cleanup_(buf_freep) struct buf doc = BUF_INIT;
	const struct sandbox_field *f;
	bool seen[128] = { false }, in_fields = false;
	unsigned rows = 0, defaults = 0;
	char *save = NULL;

	(void)state;
	assert_int_equal(read_file("sandbox/POLICY.md", 1 << 20, &doc), 0);
	assert_int_equal(buf_append_zero(&doc, 1), 0);
	for (char *line = strtok_r((char *)doc.data, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char key[128] = "", def[1024] = "", code[256];
		size_t i;

		if (!strncmp(line, "## ", 3)) {
			in_fields = !strcmp(line, "## Fields");
			continue;
		}
		/* | `key` | default | meaning | */
		if (!in_fields || strncmp(line, "| `", 3))
			continue;
		if (sscanf(line, "| `%127[^`]` | %1023[^|]|", key, def) != 2)
			fail_msg("sandbox/POLICY.md: a row that does not parse: %s", line);
		for (i = 0; (f = sandbox_field_at(i)); i++)
			if (!strcmp(f->key, key))
				break;
		if (!f)
			fail_msg("sandbox/POLICY.md documents `%s`, which the policy does not take", key);
		assert_true(i < ARRAY_SIZE(seen));
		if (seen[i])
			fail_msg("sandbox/POLICY.md documents `%s` twice", key);
		seen[i] = true;
		rows++;
		if (!f->dflt) {
			if (!def[0] || def[0] == ' ')
				fail_msg("sandbox/POLICY.md: `%s`: no default given", key);
			continue;
		}
		last_code(def, code, sizeof(code));
		if (strcmp(code, f->dflt))
			fail_msg("sandbox/POLICY.md: `%s`: default `%s`, the table's is `%s`", key, code,
			         f->dflt);
		defaults++;
	}
	for (size_t i = 0; (f = sandbox_field_at(i)); i++)
		if (!seen[i])
			fail_msg("sandbox/POLICY.md lacks a row for `%s`", f->key);
	assert_true(rows >= 35);
	assert_true(defaults >= 25);
}

/* Every default the table gives parses back to itself through sandbox_set,
 * and the dump names every field. */
static void test_policy__dump(void **state)
{
	const struct sandbox_field *f;
	char *text = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&text, &len);

	(void)state;
	assert_non_null(m);
	sandbox_policy_fields(m);
	assert_int_equal(fclose(m), 0);
	for (size_t i = 0; (f = sandbox_field_at(i)); i++) {
		char want[256];

		snprintf(want, sizeof(want), "%s\t%s", f->key, f->type);
		assert_non_null(strstr(text, want));
		if (f->dflt)
			assert_int_equal(try_set(f->key, f->dflt), 0);
	}
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_policy__defaults),
		cmocka_unit_test(test_policy__bounds),
		cmocka_unit_test(test_policy__keys),
		cmocka_unit_test(test_policy__docs_agree),
		cmocka_unit_test(test_policy__dump),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
