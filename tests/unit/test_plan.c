/* test_plan.c — the launcher as a plan (sandbox/launch-internal.h): the
 * steps in the order a launch runs them, and the list an exec into a running
 * sandbox gets (plan_exec_steps) against what the init and the command get:
 * every per-process step of theirs, in their order, with what its replay
 * needs; none of the init's own bookkeeping; and every row an exec gets
 * carries the replay sandbox_enter runs for it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "lib/lib.h"
#include "sandbox/launch-internal.h"

static const struct plan_step_info *find(const struct plan_step_info **v, size_t n,
                                         const char *name, size_t *at)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(v[i]->name, name)) {
			if (at)
				*at = i;
			return v[i];
		}
	return NULL;
}

/* Host steps up to the clone, the init's, the command's, the host's rest;
 * names unique within a side. */
static void test_plan__order(void **state)
{
	const struct plan_step_info *s, *prev = NULL;
	enum plan_side want[] = { PLAN_HOST, PLAN_INIT, PLAN_COMMAND, PLAN_HOST };
	size_t phase = 0, n = 0;

	(void)state;
	for (size_t i = 0; (s = plan_step_at(i)); i++, n++) {
		if (s->side != want[phase]) {
			assert_true(phase + 1 < ARRAY_SIZE(want));
			assert_int_equal(s->side, want[++phase]);
			if (phase == 1)
				assert_string_equal(prev->name, "clone");
		}
		for (size_t j = 0; j < i; j++) {
			const struct plan_step_info *o = plan_step_at(j);

			if (o->side == s->side && !strcmp(o->name, s->name))
				fail_msg("step '%s' twice on the %s side", s->name, plan_side_name(s->side));
		}
		prev = s;
	}
	assert_int_equal(phase, 3);
	assert_string_equal(prev->name, "watch");
	assert_true(n > 40);
}

/* An exec gets every step that confines a process, as the init and the
 * command had it, in the same order; nothing of the init's own. */
static void test_plan__exec_is_what_the_init_gets(void **state)
{
	static const struct { const char *name; enum plan_exec exec; unsigned needs; } confinement[] = {
		{ "clone", PLAN_EXEC_ENTER, PLAN_NEEDS_PIDFD | PLAN_NEEDS_CGROUP },
		{ "cgroups", PLAN_EXEC_REPLAY, PLAN_NEEDS_CGROUP },
		{ "join cgroups", PLAN_EXEC_REPLAY, PLAN_NEEDS_CGROUP },
		{ "root ids", PLAN_EXEC_REPLAY, 0 },
		{ "cgroup namespace", PLAN_EXEC_ENTER, PLAN_NEEDS_PIDFD },
		{ "pivot_root", PLAN_EXEC_ENTER, PLAN_NEEDS_PIDFD },
		{ "rlimits", PLAN_EXEC_REPLAY, PLAN_NEEDS_POLICY },
		{ "no_new_privs", PLAN_EXEC_REPLAY, 0 },
		{ "landlock", PLAN_EXEC_REPLAY, PLAN_NEEDS_POLICY | PLAN_NEEDS_STAGE },
		{ "bounding set", PLAN_EXEC_REPLAY, 0 },
		{ "seccomp", PLAN_EXEC_REPLAY, PLAN_NEEDS_POLICY },
		{ "not dumpable", PLAN_EXEC_REPLAY, 0 },
		{ "user", PLAN_EXEC_REPLAY, PLAN_NEEDS_REQUEST },
		{ "capabilities", PLAN_EXEC_REPLAY, 0 },
		{ "workdir", PLAN_EXEC_REPLAY, PLAN_NEEDS_REQUEST },
		{ "descriptors", PLAN_EXEC_REPLAY, 0 },
		{ "exec", PLAN_EXEC_REPLAY, PLAN_NEEDS_REQUEST },
	};
	/* a before b in the exec list, as the kernel needs them */
	static const char *const before[][2] = {
		{ "cgroups", "clone" }, { "clone", "join cgroups" }, { "pivot_root", "landlock" },
		{ "landlock", "seccomp" },
		{ "no_new_privs", "seccomp" }, { "root ids", "bounding set" },
		{ "bounding set", "seccomp" }, { "seccomp", "user" }, { "user", "capabilities" },
		{ "capabilities", "exec" }, { "workdir", "exec" }, { "descriptors", "exec" },
	};
	const struct plan_step_info **v = NULL, *s;
	size_t n = 0, k = 0, a = 0, b = 0;

	(void)state;
	assert_int_equal(plan_exec_steps(&v, &n), 0);
	/* the plan's rows that an exec gets, in the plan's order */
	for (size_t i = 0; (s = plan_step_at(i)); i++) {
		if (s->exec == PLAN_EXEC_NONE) {
			/* what the init and the command do to their own process is
			 * what an exec'd process must get too */
			if (s->side != PLAN_HOST && s->scope == PLAN_SCOPE_PROCESS)
				fail_msg("%s step '%s' confines the process but an exec does not get it",
				         plan_side_name(s->side), s->name);
			continue;
		}
		assert_true(k < n);
		assert_ptr_equal(v[k], s);
		k++;
		if (s->exec == PLAN_EXEC_ENTER && !(s->needs & PLAN_NEEDS_PIDFD))
			fail_msg("step '%s' enters the sandbox without its init's pidfd", s->name);
		if (s->side != PLAN_HOST && s->scope == PLAN_SCOPE_LAUNCH)
			fail_msg("step '%s' is the init's own bookkeeping, not an exec's", s->name);
	}
	assert_int_equal(k, n);
	for (size_t i = 0; i < ARRAY_SIZE(confinement); i++) {
		s = find(v, n, confinement[i].name, NULL);
		if (!s)
			fail_msg("an exec does not get '%s'", confinement[i].name);
		assert_int_equal(s->exec, confinement[i].exec);
		if ((s->needs & confinement[i].needs) != confinement[i].needs)
			fail_msg("'%s': a replay needs %#x, the row says %#x", s->name,
			         confinement[i].needs, s->needs);
	}
	for (size_t i = 0; i < ARRAY_SIZE(before); i++) {
		assert_non_null(find(v, n, before[i][0], &a));
		assert_non_null(find(v, n, before[i][1], &b));
		if (a >= b)
			fail_msg("an exec gets '%s' after '%s'", before[i][0], before[i][1]);
	}
	/* the sandbox's own: made once, found in place by an exec */
	assert_null(find(v, n, "tmpfs", NULL));
	assert_null(find(v, n, "namespace limits", NULL));
	assert_null(find(v, n, "id maps", NULL));
	assert_null(find(v, n, "lend binds", NULL));
	assert_null(find(v, n, "ready", NULL));
	assert_string_equal(plan_exec_name(v[0]->exec), "replay");
	free(v);
}

/* sandbox_enter runs the rows themselves: each row an exec gets carries
 * the function it runs for it, and no other row has one (a new step marked
 * for an exec without its replay fails here, not in a sandbox). */
static void test_plan__every_exec_row_has_its_replay(void **state)
{
	const struct plan_step_info *s;

	(void)state;
	for (size_t i = 0; (s = plan_step_at(i)); i++) {
		if (s->exec != PLAN_EXEC_NONE && !s->replay)
			fail_msg("%s step '%s' is marked %s but has no replay", plan_side_name(s->side),
			         s->name, plan_exec_name(s->exec));
		if (s->exec == PLAN_EXEC_NONE && s->replay)
			fail_msg("%s step '%s' is not an exec's but has a replay",
			         plan_side_name(s->side), s->name);
		for (size_t j = 0; j < i && s->replay; j++)
			if (plan_step_at(j)->replay == s->replay)
				fail_msg("steps '%s' and '%s' share one replay", plan_step_at(j)->name,
				         s->name);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plan__order),
		cmocka_unit_test(test_plan__exec_is_what_the_init_gets),
		cmocka_unit_test(test_plan__every_exec_row_has_its_replay),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
