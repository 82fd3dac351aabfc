#!/bin/bash
# An exec's killed_by for the sandbox's memory and pids limits (docs/api.md, sandbox/service.h),
# on a real node and a real sandbox with a 64 MiB memory limit and a pids limit of 48:
#  1. an exec that allocates past the memory limit is OOM-killed in the sandbox's memory cgroup:
#     killed_by "memory", signal 9; a second one likewise (each exec is judged by the OOM kills
#     during its own life, not by whether the sandbox ever had one);
#  2. an exec that forks past the pids limit (a fork fails: pids.events max) is ended, its whole
#     cgroup with it: killed_by "pids", and none of its processes is left;
#  3. the sandbox lives on: an exec after them, and one that fails by itself, have killed_by null.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
need_cmd curl python3
workdir
. "$(dirname "$0")/../lib/apinode.sh"
export LAZYROOT_RECORD_DIR=$WORK/launchers LAZYROOT_SERVICE_DIR=$WORK/service
SB_RECORDS=$LAZYROOT_RECORD_DIR
api=$WORK/node-api.sock
sb=$SB_NAME-1
cleanup_add curl -s -m 60 --unix-socket "$api" -X DELETE "http://n/v1/sandboxes/$sb" -o /dev/null

# the node, started detached once it has said READY=1
api_node_start

req() {
	local args=(-s -m 120 --unix-socket "$api" -o "$WORK/body" -w '%{http_code}' -X "$1")
	[ $# -ge 3 ] && args+=(-d "$3")
	curl "${args[@]}" "http://n$2"
}
field() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); [v:=v[k] for k in sys.argv[2:]]; print("null" if v is None else str(v).lower() if isinstance(v,bool) else v)' "$WORK/body" "$@"; }
# EXEC_ID ARGV-JSON: run it and wait for its result (in $WORK/body)
run_exec() {
	check test "$(req POST "/v1/sandboxes/$sb/execs" "{\"exec_id\": \"$1\", \"argv\": $2, \"timeout\": 60}")" = 201
	check test "$(req GET "/v1/sandboxes/$sb/execs/$1?wait=90")" = 200
	log "exec $1: $(cat "$WORK/body")"
}
# processes in the test's id range (the sandbox's), but its init
in_sandbox() {
	ps -e -o pid=,uid=,stat= | awk -v lo="$SB_UID_BASE" -v hi=$((SB_UID_BASE + 65536)) -v init="$1" \
		'{ u = $2 < 0 ? $2 + 4294967296 : $2 } u >= lo && u < hi && $3 !~ /^Z/ && $1 != init' | wc -l
}

check test "$(req POST /v1/sandboxes "{\"rootfs\": \"$ROOTFS\", \"name\": \"$sb\", \"policy\": {\"uid_base\": \"$SB_UID_BASE\", \"pool\": \"false\", \"memory\": \"64M\", \"pids\": \"48\", \"tmpfs_size\": \"16M\"}}")" = 201
check test "$(req GET "/v1/sandboxes/$sb")" = 200
init=$(field init_pid)

# --- 1. memory, twice
for e in mem1 mem2; do
	run_exec "$e" '["python3", "-c", "b = [bytearray(1 << 20) for _ in range(512)]"]'
	check test "$(field killed_by)" = memory
	check test "$(field signal)" = 9
done

# --- 2. pids: a fork fails; the exec and everything it started end
run_exec fork '["sh", "-c", "for i in $(seq 100); do sleep 600 & done; wait"]'
check test "$(field killed_by)" = pids
check test "$(in_sandbox "$init")" = 0

# --- 3. the sandbox goes on
run_exec after '["sh", "-c", "echo fine"]'
check test "$(field status)" = 0
check test "$(field killed_by)" = null
run_exec fails '["sh", "-c", "exit 3"]'
check test "$(field status)" = 3
check test "$(field killed_by)" = null
check test "$(req GET "/v1/sandboxes/$sb")" = 200
check test "$(field state)" = running

check test "$(req DELETE "/v1/sandboxes/$sb")" = 204
sb_no_leftovers
