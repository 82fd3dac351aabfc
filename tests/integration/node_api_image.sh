#!/bin/bash
# The API's create from an image (docs/api.md, POST /v1/sandboxes with "image"), on a real node,
# a real FUSE mount and real sandboxes, through curl --unix-socket:
#  1. a sandbox from an image built from the Debian rootfs with a config: an exec reads a file
#     of the image, sees the config's env and working directory, and a request's policy field
#     overrides the config's; GET shows the image, its index and the rootfs (the node's mount of
#     it under the images dir, the same one `lazyroot run IMAGE` uses);
#  2. `lazyroot umount` of that mount while the sandbox runs is refused with one line naming the
#     sandbox, and the mount stays;
#  3. kill -9 of the worker between the create and an exec, then an upgrade: each new worker
#     finds the sandbox, and an exec reads the image (the holder kept the mount, the keeper
#     the sandbox);
#  4. an unknown image, a bad image name and a store that is down: one-line errors (404, 400,
#     502) naming the image, and nothing left: no sandbox directory, no keeper;
#  5. destroy: 204, nothing of the sandbox left; the mount then unmounts.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
need_cmd curl python3 fusermount3
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir
. "$(dirname "$0")/../lib/apinode.sh"
api=$WORK/node-api.sock
sb=$SB_NAME-1
services=/run/lazyroot/service
cleanup_add curl -s -m 60 --unix-socket "$api" -X DELETE "http://n/v1/sandboxes/$sb" -o /dev/null

cat >"$WORK/config.json" <<'EOF'
{"architecture": "amd64", "os": "linux",
 "config": {"Env": ["PATH=/usr/bin:/bin", "GREETING=hello"], "WorkingDir": "/usr/share"}}
EOF
check "$LAZYROOT" build "$ROOTFS" --tag deb:cfg --config "$WORK/config.json" --no-progress
hex=$(cat "$WORK/store/tags/deb:cfg")
mnt=$WORK/images/$hex

# the node, started detached once it has said READY=1
api_node_start
cleanup_add sh -c "umount -l '$mnt' 2>/dev/null; true"

# METHOD PATH [BODY]: the answer's body in $WORK/body, its status printed
req() {
	local args=(-s -m 120 --unix-socket "$api" -o "$WORK/body" -w '%{http_code}' -X "$1")
	[ $# -ge 3 ] && args+=(-d "$3")
	curl "${args[@]}" "http://n$2"
}
field() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); [v:=v[k] for k in sys.argv[2:]]; print("null" if v is None else str(v).lower() if isinstance(v,bool) else v)' "$WORK/body" "$@"; }
# EXEC_ID ARGV-JSON: run it, wait for it, its stdout in $WORK/out
run_exec() {
	check test "$(req POST "/v1/sandboxes/$sb/execs" "{\"exec_id\": \"$1\", \"argv\": $2}")" = 201
	check test "$(req GET "/v1/sandboxes/$sb/execs/$1?wait=60")" = 200
	check test "$(field status)" = 0
	python3 - "$WORK/out" <<-PY
	import http.client, socket, sys
	class C(http.client.HTTPConnection):
	    def connect(self):
	        self.sock = socket.socket(socket.AF_UNIX); self.sock.connect("$api")
	c = C("n"); c.request("GET", "/v1/sandboxes/$sb/execs/$1/output"); b = c.getresponse().read()
	out, i = b"", 0
	while i < len(b):
	    n = int.from_bytes(b[i + 4:i + 8], "big")
	    if b[i] == 1: out += b[i + 8:i + 8 + n]
	    i += 8 + n
	open(sys.argv[1], "wb").write(out)
	PY
}
# Sandbox directories of this test in the service's state, and processes in its id range.
ours() {
	find "$services" -mindepth 1 -maxdepth 1 -name "$SB_NAME-*" 2>/dev/null | sort
	ps -e -o pid=,uid=,stat= | awk -v lo="$SB_UID_BASE" -v hi=$((SB_UID_BASE + 65536)) \
		'{ u = $2 < 0 ? $2 + 4294967296 : $2 } u >= lo && u < hi && $3 !~ /^Z/ { print $1 }' | sort
}

# --- 1. create from the image; an exec reads it
check test "$(req POST /v1/sandboxes "{\"image\": \"deb:cfg\", \"name\": \"$sb\", \"policy\": {\"uid_base\": \"$SB_UID_BASE\", \"pool\": \"false\", \"env\": \"GREETING=overridden\"}}")" = 201
check test "$(field id)" = "$sb"
check test "$(req GET "/v1/sandboxes/$sb")" = 200
check test "$(field state)" = running
check test "$(field image)" = deb:cfg
check test "$(field image_index)" = "$hex"
check test "$(field rootfs)" = "$mnt"
check grep -q " $mnt fuse.lazyroot " /proc/self/mounts
run_exec e1 '["sh", "-c", "cat /etc/debian_version; echo $GREETING; pwd"]'
check test "$(sed -n 1p "$WORK/out")" = "$(cat "$ROOTFS/etc/debian_version")"
check test "$(sed -n 2p "$WORK/out")" = overridden
check test "$(sed -n 3p "$WORK/out")" = /usr/share

# --- 2. umount of the mount a live sandbox uses: refused, the mount stays
rc=0
"$LAZYROOT" umount "$mnt" 2>"$WORK/umount.err" || rc=$?
check test "$rc" = 1
check grep -q "umount '$mnt': sandbox '$sb' runs on it" "$WORK/umount.err"
check test "$(wc -l <"$WORK/umount.err")" = 1
check grep -q " $mnt fuse.lazyroot " /proc/self/mounts

# --- 3. kill -9 of the worker between create and exec
old=$(node_pid)
kill -9 "$old"
# the holder starts a new worker; each status request waits for one to answer
for _ in $(seq 600); do
	new=$(node_pid 2>/dev/null) && [ "$new" != "$old" ] && break
done
check test "$new" != "$old"
run_exec e2 '["sha256sum", "/usr/bin/dash"]'
check test "$(cut -d' ' -f1 "$WORK/out")" = "$(sha256sum "$ROOTFS/usr/bin/dash" | cut -d' ' -f1)"
# and an upgrade of the worker
old=$new
check timeout 120 "$LAZYROOT" node upgrade
check test "$(node_pid)" != "$old"
run_exec e3 '["cat", "/etc/os-release"]'
check cmp "$WORK/out" "$ROOTFS/etc/os-release"

# --- 4. errors, with nothing left
before=$(ours)
check test "$(req POST /v1/sandboxes "{\"image\": \"nosuch:1\", \"name\": \"$SB_NAME-2\", \"policy\": {\"uid_base\": \"$SB_UID_BASE\"}}")" = 404
log "unknown image: $(cat "$WORK/body")"
check grep -q "nosuch:1" "$WORK/body"
check test "$(wc -l <"$WORK/body")" -le 1
check test "$(req POST /v1/sandboxes "{\"image\": \"../../etc\", \"name\": \"$SB_NAME-3\"}")" = 400
log "bad image name: $(cat "$WORK/body")"
check test "$(req POST /v1/sandboxes "{\"image\": \"deb:cfg\", \"store\": \"http://127.0.0.1:$(free_port)/s\", \"name\": \"$SB_NAME-4\", \"policy\": {\"uid_base\": \"$SB_UID_BASE\"}}")" = 502
log "store down: $(cat "$WORK/body")"
check grep -q "deb:cfg" "$WORK/body"
check test "$(req POST /v1/sandboxes "{\"rootfs\": \"$ROOTFS\", \"store\": \"dir:$WORK/store\"}")" = 400
check test "$(ours)" = "$before"
check test ! -e "$services/$SB_NAME-2"
check test ! -e "$services/$SB_NAME-4"

# --- 5. destroy; then the mount is free to go
check test "$(req DELETE "/v1/sandboxes/$sb")" = 204
check test ! -e "$services/$sb"
check "$LAZYROOT" umount "$mnt"
sb_no_leftovers
