#!/bin/bash
# Attacks: "fetch answers through package and module proxies" after setup, and reading the
# grader's reference solutions while being graded: a sandbox in stage "setup" reaches the
# host's package mirror and service; `lazyroot policy NAME --stage solve` cuts the mirror off
# at once (the very next connect is refused), "grade" cuts everything and hides /solutions and
# /etc/hostname inside the running sandbox; going back to a looser stage is refused. Teardown
# leaves no BPF program, veth, state file, cgroup, mount or process.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
. "$(dirname "$0")/../lib/netsb.sh"
workdir

serve service 0.0.0.0
serve mirror 0.0.0.0
mkdir "$WORK/solutions"
echo "the reference solution" >"$WORK/solutions/answer"
cat >"$WORK/policy" <<EOP
# setup may reach the mirror and the service, solve only the service, grade nothing
stage.setup.allow = host:$mirror
stage.setup.allow = host:$service
stage.solve.allow = host:$service
stage.grade.allow =
stage.grade.hide = /solutions
stage.grade.hide = /etc/hostname
EOP
pol=(--policy "$WORK/policy" --bind "$WORK/solutions:/solutions")

sb_start stages "${pol[@]}" -- /lr/attack "$HOST_PIDNS" reach -
name=$SB_LAST
progs=$(bpf_progs "$name")
check test "$(wc -w <<<"$progs")" = 4
check test -f "/run/lazyroot/sandboxes/$name/state"
check test "$("$LAZYROOT" policy "$name")" = setup
sb_ask "ok:gw:$mirror"
sb_ask "ok:gw:$service"
sb_ask "read:/solutions/answer"
sb_ask "read:/etc/hostname"

check test "$("$LAZYROOT" policy "$name" --stage solve)" = solve
sb_ask "gw:$mirror"
sb_ask "ok:gw:$service"
sb_ask "read:/solutions/answer"

# Loosening is refused, and changes nothing.
check_status 1 "$LAZYROOT" policy "$name" --stage setup 2>"$WORK/err"
check grep -q "a stage can only tighten" "$WORK/err"
check_status 1 "$LAZYROOT" policy "$name" --stage nosuch
check test "$("$LAZYROOT" policy "$name" --json)" = "{\"name\":\"$name\",\"stage\":\"solve\"}"
sb_ask "gw:$mirror"

check test "$("$LAZYROOT" policy "$name" --stage grade)" = grade
sb_ask "gw:$service"
sb_ask "noread:/solutions/answer"
sb_ask "noread:/etc/hostname"
sb_ask "read:/etc/passwd"
sb_stop
check test "$SB_RC" = 0

check no_bpf_left $progs
check test ! -e "/run/lazyroot/sandboxes/$name"
check_status 1 "$LAZYROOT" policy "$name"
check sb_no_leftovers

# Starting in a later stage: its allowlist and hidden paths hold from the first instruction.
check attack "${pol[@]}" --stage solve -- reach "gw:$mirror" "ok:gw:$service" read:/solutions/answer
check attack "${pol[@]}" --stage grade -- reach "fail:gw:$service" noread:/solutions/answer noread:/etc/hostname
check_status 125 sb_run "${pol[@]}" --stage nosuch -- true
# The report names the sandbox, so that a scheduler knows what to pass to `lazyroot policy`.
check_status 0 sb_run --json="$WORK/report" -- true
check test "$(json_field "$WORK/report" name)" = "$SB_NAME-$_sb_count"
check sb_no_leftovers

# A launcher killed with SIGKILL: the programs go with its descriptors, the veth with the
# sandbox's network namespace; the state file stays behind, and is known to be stale. (Its
# cgroups stay too until a later gc: sandbox_teardown.sh covers that; the cleanup removes them.)
sb_start killed "${pol[@]}" -- /lr/attack "$HOST_PIDNS" reach -
name=$SB_LAST
cleanup_add rm -rf "/run/lazyroot/sandboxes/$name"
progs=$(bpf_progs "$name")
check test "$(wc -w <<<"$progs")" = 4
veth=$(cd /sys/class/net && ls -d "lr$SB_PID."*)
kill -KILL "$SB_PID"
wait "$SB_PID" || true
exec 7<&- 8>&-
gone() {
	local i
	for i in $(seq 100); do
		"$@" && return 0
		sleep 0.05
	done
	return 1
}
check gone no_bpf_left $progs
check gone test ! -e "/sys/class/net/$veth"
check_status 1 "$LAZYROOT" policy "$name" --stage grade
