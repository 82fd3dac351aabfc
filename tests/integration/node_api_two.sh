#!/bin/bash
# Two node services on one machine at once, each with every node-wide path and port of its own
# (docs/settings.md, "Many nodes on one machine"): socket, cache, images, metrics off, pool,
# launcher records, the sandbox service's state (service_dir), the sandboxes' state
# (sandbox_state_dir) and the host id allocator (ids_dir, ids_range).
#  1. each creates a sandbox through its own API (node a from an image, node b, which requires
#     signed tags, refuses the unsigned image with 403 and nothing left, then from the rootfs),
#     with uid_base auto: each sandbox's init runs as the first id of its own node's range;
#  2. each sandbox's state is under its own node's directories and nowhere else (not under
#     /run/lazyroot), and each node's API sees only its own sandbox;
#  3. execs and a stage change through each API; destroy; nothing left in either node's dirs.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
need_cmd curl python3 fusermount3
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir

# A second host id block for node b, held as sandbox.sh holds the first.
_b=$(((_sb_block + 1) % 2000))
for _ in $(seq 2000); do
	exec {IDS_B_FD}>"/run/lock/lazyroot-tests/ids.$_b"
	flock -n "$IDS_B_FD" && break
	exec {IDS_B_FD}>&-
	_b=$(((_b + 1) % 2000))
	IDS_B_FD=
done
[ -n "$IDS_B_FD" ] || fail "no second test id range is free (/run/lock/lazyroot-tests)"
UID_A=$SB_UID_BASE
UID_B=$((2100000000 + _b * 65536))

check "$LAZYROOT" build "$ROOTFS" --tag deb:1 --store "dir:$WORK/store" --no-progress
hex=$(cat "$WORK/store/tags/deb:1")

# NODE: its settings, as the environment of everything that speaks for it
node_env() {
	local d=$WORK/$1
	echo "LAZYROOT_SOCKET=$d/node.sock LAZYROOT_STORE=dir:$WORK/store LAZYROOT_CACHE=$d/cache" \
		"LAZYROOT_IMAGES=$d/images LAZYROOT_METRICS=off LAZYROOT_POOL_DIR=$d/pool" \
		"LAZYROOT_RECORD_DIR=$d/launchers LAZYROOT_SERVICE_DIR=$d/service" \
		"LAZYROOT_SANDBOX_STATE_DIR=$d/sandboxes LAZYROOT_IDS_DIR=$d/ids" \
		"LAZYROOT_IDS_RANGE=$2:65536"
}
# NODE UID_START [VAR=VALUE...]: start it detached once it has said READY=1
start_node() {
	local n=$1 ids=$2
	shift 2
	mkdir -p "$WORK/$n"
	cleanup_add _node_stop "$WORK/$n/node.sock"
	# shellcheck disable=SC2046 # node_env is words of VAR=VALUE
	env $(node_env "$n" "$ids") "$@" python3 - "$LAZYROOT" "$WORK/$n" <<-'PY' ||
	import os, socket, subprocess, sys
	lazyroot, d = sys.argv[1], sys.argv[2]
	n = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
	n.bind(d + "/notify.sock")
	n.settimeout(60)
	subprocess.Popen([lazyroot, "node", "--log", d + "/node.log"], start_new_session=True,
	                 env=dict(os.environ, NOTIFY_SOCKET=d + "/notify.sock"),
	                 stdout=subprocess.DEVNULL, stderr=open(d + "/node.err", "w"))
	sys.exit(0 if n.recv(64) == b"READY=1" else 1)
	PY
		fail "node $n did not start"
}
start_node a "$UID_A"
start_node b "$UID_B" LAZYROOT_REQUIRE_SIGNED=on
cleanup_add sh -c "umount -l '$WORK/a/images/$hex' 2>/dev/null; true"
sa=$SB_NAME-a
sb=$SB_NAME-b
for n in a b; do
	cleanup_add curl -s -m 60 --unix-socket "$WORK/$n/node-api.sock" -X DELETE \
		"http://n/v1/sandboxes/$SB_NAME-$n" -o /dev/null
done

# NODE METHOD PATH [BODY]: the answer's body in $WORK/body, its status printed
req() {
	local args=(-s -m 120 --unix-socket "$WORK/$1/node-api.sock" -o "$WORK/body" -w '%{http_code}'
		-X "$2")
	[ $# -ge 4 ] && args+=(-d "$4")
	curl "${args[@]}" "http://n$3"
}
field() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); [v:=v[k] for k in sys.argv[2:]]; print("null" if v is None else str(v).lower() if isinstance(v,bool) else v)' "$WORK/body" "$@"; }
policy='"policy": {"pool": "false", "stage.solve.hide": "", "stage.grade.hide": "/tmp"}'

# --- 1. a sandbox through each node's own API
check test "$(req a POST /v1/sandboxes "{\"image\": \"deb:1\", \"name\": \"$sa\", $policy}")" = 201
check test "$(req b POST /v1/sandboxes "{\"image\": \"deb:1\", \"name\": \"$sb\", $policy}")" = 403
log "unsigned image on node b: $(cat "$WORK/body")"
check grep -q "deb:1" "$WORK/body"
check test ! -e "$WORK/b/service/$sb"
check test "$(req b POST /v1/sandboxes "{\"rootfs\": \"$ROOTFS\", \"name\": \"$sb\", $policy}")" = 201
for n in a b; do
	check test "$(req "$n" GET "/v1/sandboxes/$SB_NAME-$n")" = 200
	init=$(field init_pid)
	want=$UID_A
	[ "$n" = b ] && want=$UID_B
	check test "$(stat -c %u "/proc/$init")" = "$want"
done
check test "$(req a GET /v1/sandboxes/$sa)" = 200
check test "$(field rootfs)" = "$WORK/a/images/$hex"

# --- 2. each one's state under its own node's directories only
for n in a b; do
	o=a
	[ "$n" = a ] && o=b
	check test -f "$WORK/$n/service/$SB_NAME-$n/sandbox.json"
	check test -d "$WORK/$n/sandboxes/$SB_NAME-$n"
	check test -e "$WORK/$n/launchers/$SB_NAME-$n"
	check test -n "$(find "$WORK/$n/ids" -name '*.lock')"
	check test ! -e "$WORK/$o/service/$SB_NAME-$n"
	check test ! -e "/run/lazyroot/service/$SB_NAME-$n"
	check test ! -e "/run/lazyroot/sandboxes/$SB_NAME-$n"
	check test ! -e "/run/lazyroot/launchers/$SB_NAME-$n"
	check test "$(req "$n" GET /v1/sandboxes)" = 200
	check test "$(python3 -c 'import json,sys; print([s["id"] for s in json.load(open(sys.argv[1]))["sandboxes"]])' "$WORK/body")" = "['$SB_NAME-$n']"
	check test "$(req "$n" GET "/v1/sandboxes/$SB_NAME-$o")" = 404
done

# --- 3. execs and a stage through each API, then destroy
for n in a b; do
	s=$SB_NAME-$n
	check test "$(req "$n" POST "/v1/sandboxes/$s/execs" '{"exec_id": "e1", "argv": ["sh", "-c", "id -u; cat /etc/debian_version"]}')" = 201
	check test "$(req "$n" GET "/v1/sandboxes/$s/execs/e1?wait=60")" = 200
	check test "$(field status)" = 0
	check test "$(req "$n" POST "/v1/sandboxes/$s/stage" '{"stage": "grade"}')" = 200
	check test "$(field stage)" = grade
	check test "$(req "$n" POST "/v1/sandboxes/$s/execs" '{"exec_id": "e2", "argv": ["ls", "/tmp"]}')" = 201
	check test "$(req "$n" GET "/v1/sandboxes/$s/execs/e2?wait=60")" = 200
	check test "$(field status)" != 0
	check test "$(req "$n" DELETE "/v1/sandboxes/$s")" = 204
	check test ! -e "$WORK/$n/service/$s"
	check test ! -e "$WORK/$n/sandboxes/$s"
	check test ! -e "$WORK/$n/launchers/$s"
done
sb_no_leftovers
procs=$(ps -e -o uid=,stat= | awk -v lo="$UID_B" -v hi=$((UID_B + 65536)) \
	'{ u = $1 < 0 ? $1 + 4294967296 : $1 } u >= lo && u < hi && $2 !~ /^Z/')
check test -z "$procs"
