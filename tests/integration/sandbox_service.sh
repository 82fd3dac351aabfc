#!/bin/bash
# The sandbox service's keeper (sandbox/service.h), driven through tests/progs/sbservice: an
# episode of a create, 20 execs, one over its timeout (its child dies with it: the exec's cgroup
# is killed whole), one over its output limit, one whose child outlives it, a retried exec id
# that runs once, a file put and got back through the exec's fn hook, the creating process
# killed with SIGKILL (the sandbox lives on), a destroy, and then nothing on the host: no
# process, cgroup (v1 and v2), mount, launcher record, keeper or state.  Also: a stage switch
# that a later exec starts at; the idle timeout and the ttl reap a sandbox and say why in
# ended.json; a keeper killed with SIGKILL takes its sandbox along and `lazyroot gc` removes
# what it left.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
workdir
export LAZYROOT_RECORD_DIR=$WORK/launchers
SB_RECORDS=$LAZYROOT_RECORD_DIR
SVC=/run/lazyroot/service
S=${LAZYROOT_BUILD:-$REPO/build}/tests/progs/sbservice
[ -x "$S" ] || fail "$S is missing: make tests-build"
cleanup_add sh -c "for d in $SVC/$SB_NAME-*; do [ -d \"\$d\" ] && '$S' destroy \"\${d##*/}\"; done; true"

create() {
	local name=$1
	shift
	"$S" create "$ROOTFS" --name "$name" --set "uid_base=$SB_UID_BASE" --set pool=false "$@"
}
field() { python3 -c 'import json,sys; v=json.load(sys.stdin)[sys.argv[1]]; print("null" if v is None else str(v).lower() if isinstance(v,bool) else v)' "$1"; }
# An exec's result, waited for (the keeper answers when it ends).
result() { "$S" wait "$1" "$2" 30; }
keeper_of() { "$S" get "$1" | field keeper_pid; }

sb=$SB_NAME-1
# The creator is killed with SIGKILL once create returned, mid-episode: nothing of the
# sandbox may depend on it.
( create "$sb" --label episode=a >"$WORK/id"; echo created >"$WORK/created"; exec sleep 600 ) &
creator=$!
cleanup_add sh -c "kill -9 $creator 2>/dev/null; true"
for _ in $(seq 600); do [ -s "$WORK/created" ] && break; sleep 0.05; done
check test "$(cat "$WORK/id")" = "$sb"
kill -9 "$creator"
wait "$creator" 2>/dev/null || true
check test "$("$S" get "$sb" | field state)" = running
check test "$("$S" list episode=a | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 1
check test "$("$S" list episode=b | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 0

ok=0
for i in $(seq 20); do
	"$S" exec "$sb" --id "n$i" -- sh -c "echo out $i; echo err $i >&2" >/dev/null
	r=$(result "$sb" "n$i")
	[ "$(echo "$r" | field status)" = 0 ] && [ "$(cat "$SVC/$sb/execs/n$i/stdout")" = "out $i" ] &&
		[ "$(cat "$SVC/$sb/execs/n$i/stderr")" = "err $i" ] && ok=$((ok + 1))
done
check test "$ok" = 20

# over its timeout: the leader and its child are killed (cgroup.kill of the exec's cgroup)
"$S" exec "$sb" --id slow --timeout 0.5 -- sh -c 'sleep 100 & echo $! ; sleep 100' >/dev/null
r=$(result "$sb" slow)
check test "$(echo "$r" | field killed_by)" = time
check test "$(echo "$r" | field signal)" = 9
check test "$("$S" get "$sb" | field pids)" = 1

# over its output limit
"$S" exec "$sb" --id loud --limit 1000 -- sh -c 'while :; do echo 0123456789; done' >/dev/null
r=$(result "$sb" loud)
check test "$(echo "$r" | field killed_by)" = output
check test "$(echo "$r" | field truncated)" = true
check test "$(stat -c %s "$SVC/$sb/execs/loud/stdout")" = 1000

# a child that outlives its parent: the exec ends with its leader, the child keeps running
"$S" exec "$sb" --id parent -- sh -c 'sleep 300 >/dev/null 2>&1 & echo started' >/dev/null
r=$(result "$sb" parent)
check test "$(echo "$r" | field status)" = 0
check test "$("$S" get "$sb" | field pids)" = 2

# a retried exec id runs once
"$S" exec "$sb" --id once -- sh -c 'echo x >>/tmp/count' >/dev/null
result "$sb" once >/dev/null
check test "$("$S" exec "$sb" --id once -- sh -c 'echo x >>/tmp/count')" = "once existed"
"$S" exec "$sb" --id count -- cat /tmp/count >/dev/null
result "$sb" count >/dev/null
check test "$(cat "$SVC/$sb/execs/count/stdout")" = x

# the fn hook: a file put through the exec's stdin, read back by a command and by file_get
echo "hello keeper" | "$S" exec "$sb" --id put --stdin --fn file_put --arg path=/tmp/d/f \
	--arg parents=true >/dev/null
check test "$(result "$sb" put | field status)" = 0
"$S" exec "$sb" --id get --fn file_get --arg path=/tmp/d/f >/dev/null
check test "$(result "$sb" get | field status)" = 0
check test "$(cat "$SVC/$sb/execs/get/stdout")" = "hello keeper"

# a bad request gets one line and leaves the sandbox serving
check_not "$S" exec "$sb" --id ../x -- true
check_not "$S" exec no-such-sandbox-$$ -- true
check_not create "$sb"

kpid=$(keeper_of "$sb")
check "$S" destroy "$sb"
# gone, or a zombie its reaper has not waited for yet (the test runner may be a subreaper)
gone() { [ ! -e "/proc/$1" ] || grep -q '^State:[[:space:]]*Z' "/proc/$1/status"; }
check gone "$kpid"
check_not test -e "$SVC/$sb"
check "$S" destroy "$sb"

# a stage switch through the keeper: an exec started after it runs at the new stage
create "$SB_NAME-5" --set stage.a.allow= --set stage.b.hide=/etc/hostname >/dev/null
check test "$("$S" stage "$SB_NAME-5")" = a
"$S" exec "$SB_NAME-5" --id before -- cat /etc/hostname >/dev/null
check test "$(result "$SB_NAME-5" before | field status)" = 0
check test "$("$S" stage "$SB_NAME-5" b)" = b
"$S" exec "$SB_NAME-5" --id after -- cat /etc/hostname >/dev/null
check test "$(result "$SB_NAME-5" after | field status)" = 1
check_not "$S" stage "$SB_NAME-5" nope
check test "$("$S" get "$SB_NAME-5" | field stage)" = b
check "$S" destroy "$SB_NAME-5"

# the idle timeout and the ttl reap, and say why
create "$SB_NAME-2" --idle 0.3 >/dev/null
create "$SB_NAME-3" --ttl 0.5 >/dev/null
for n in 2 3; do
	p=$(keeper_of "$SB_NAME-$n")
	tail --pid="$p" -f /dev/null
done
check test "$("$S" get "$SB_NAME-2" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ended"]["reason"])')" = idle
check test "$("$S" get "$SB_NAME-3" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ended"]["reason"])')" = ttl
check "$S" destroy "$SB_NAME-2"
check "$S" destroy "$SB_NAME-3"

# a keeper killed with SIGKILL: its sandbox dies with it, gc removes the rest
create "$SB_NAME-4" >/dev/null
"$S" exec "$SB_NAME-4" --id bg -- sleep 300 >/dev/null
p=$(keeper_of "$SB_NAME-4")
kill -9 "$p"
tail --pid="$p" -f /dev/null
check test "$("$S" get "$SB_NAME-4" | field state)" = ended
check "$LAZYROOT" gc
check_not test -e "$SVC/$SB_NAME-4"

check sb_no_leftovers
