#!/bin/bash
# The node service's control socket and its bookkeeping, on real mounts:
#  1. a mount through a node started on demand; `node status --json` names the worker (pid),
#     the holder (holder_pid), uptime, takeovers and the mount (image, store, mountpoint);
#  2. bad requests (garbage, truncated, huge, not an object, unknown verb, missing or wrong
#     fields) each get an error and the node goes on serving, its mount still read;
#  3. a mount is (store, index): the same index from another store is another mount, and a
#     store without the image is an error, never the existing mount;
#     a second node (its own socket) is refused the first node's mountpoints, its mounts not
#     stacked over them;
#  4. /metrics over HTTP: node and per-image counters;
#  5. `node stop` unmounts what it serves and ends holder and worker, and with no node exits 0;
#  6. the same when the holder reads its channel late: the stop queued behind the DEL of each
#     mount and the worker's exit all wait for it at once, and it must still stop.
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd fusermount3 python3 curl
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir

# `node stop` with no node answering says so and exits 0, as `systemctl stop` does
err=$("$LAZYROOT" node stop --socket "$WORK/none.sock" 2>&1) && rc=0 || rc=$?
check test "$rc" = 0
check grep -q "node '$WORK/none.sock': no node service answers; nothing to stop" <<<"$err"

mkdir -p "$WORK/src/d" "$WORK/mnt" "$WORK/mnt2" "$WORK/images"
echo hello >"$WORK/src/a"
seq 1 200000 >"$WORK/src/d/b"
"$LAZYROOT" build "$WORK/src" --store "dir:$WORK/store" --tag t:1 --no-progress >/dev/null
cp -a "$WORK/store" "$WORK/store2"
hex=$(cat "$WORK/store/tags/t:1")
export LAZYROOT_IMAGES=$WORK/images
port=$(free_port)
export LAZYROOT_METRICS=127.0.0.1:$port

exited() {  # PID: gone, or a zombie waiting for its reaper
	[ ! -e "/proc/$1" ] || [ "$(sed 's/.*) //' "/proc/$1/stat" | cut -d' ' -f1)" = Z ]
}
status() {  # KEY: a member of `node status --json`
	"$LAZYROOT" node status --json | python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}

# --- 1. mount through a node started on demand
check "$LAZYROOT" mount t:1 "$WORK/mnt" --store "dir:$WORK/store" --cache "$WORK/cache"
check cmp "$WORK/src/d/b" "$WORK/mnt/d/b"
check test -S "$WORK/node.sock"
pid=$(status pid) holder=$(status holder_pid)
check test "$pid" != "$holder"
check test "$(cat "/proc/$pid/comm")" = lazyroot
check test "$(awk '/^PPid:/ { print $2 }' "/proc/$pid/status")" = "$holder"
check test "$(status takeovers)" = 0
"$LAZYROOT" node status --json >"$WORK/status.json"
check python3 - "$WORK/status.json" "$WORK/mnt" "dir:$WORK/store" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
m = s["mounts"]
assert len(m) == 1 and m[0]["mountpoint"] == sys.argv[2] and m[0]["store"] == sys.argv[3], m
assert m[0]["image"] == "t:1" and s["uptime_s"] >= 0, s
PY
check "$LAZYROOT" node status
# a second node on the same socket is refused
check_not "$LAZYROOT" node --socket "$WORK/node.sock" --cache "$WORK/cache"

# --- 2. bad requests: an error each, the node goes on
st=0
python3 - "$WORK/node.sock" >"$WORK/bad.out" 2>&1 <<'PY' || st=$?
import json, socket, sys
path = sys.argv[1]
def ask(data):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(path)
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
    except (BrokenPipeError, ConnectionResetError):
        pass
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except ConnectionResetError:
        return None      # a huge request may be cut off: no answer is also refusal
    return out
bad = [b"garbage\n", b'{"verb":', b"\x00" * 200000, b"[1,2]\n", b'"mount"\n', b"{}\n",
       b'{"verb":"frobnicate"}\n', b'{"verb":"mount"}\n', b'{"verb":"mount","ref":7}\n',
       b'{"verb":"mount","ref":"t:1","mountpoint":"relative"}\n',
       b'{"verb":"mount","ref":"t:1","options":{"readahead":4}}\n',
       b'{"verb":"mount","ref":"t:1","options":{"suid":"yes"}}\n',
       b'{"verb":"mount","ref":"t:1","settings":{"readahead":"-1"}}\n',
       b'{"verb":"mount","ref":"t:1","settings":{"no_such_setting":"1"}}\n',
       b'{"verb":"mount","ref":"t:1","settings":[]}\n',
       b'{"verb":"mount","ref":"t:1","cache":"relative/cache"}\n',
       b'{"verb":"prefetch","ref":"t:1","paths":"/"}\n',
       b'{"verb":"umount","mountpoint":"/nowhere"}\n', b'{"verb":"umount"}\n',
       b'{"verb":"status"} trailing\n', b"\xff\xfe\n", b"{" * 100000 + b"\n"]
for data in bad:
    out = ask(data)
    if out is None:
        print("cut off:", data[:20])
        continue
    r = json.loads(out)
    assert r["ok"] is False and r["error"], (data[:40], r)
    print("refused:", data[:20], "->", r["error"])
r = json.loads(ask(b'{"verb":"status"}\n'))
assert r["ok"] and len(r["mounts"]) == 1, r
print("still serving")
PY
cat "$WORK/bad.out" >&2
check test "$st" = 0
check grep -q "still serving" "$WORK/bad.out"
check test "$(status pid)" = "$pid"
check cmp "$WORK/src/a" "$WORK/mnt/a"

# --- 3. (store, index): another store gets its own mount, a store without it an error
req() {  # a mount request as `lazyroot run` sends it: REF STORE -> the mountpoint
	python3 - "$WORK/node.sock" "$1" "$2" "$WORK/images" <<'PY'
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(json.dumps({"verb": "mount", "ref": sys.argv[2], "store": sys.argv[3],
                      "images": sys.argv[4]}).encode() + b"\n")
s.shutdown(socket.SHUT_WR)
out = b""
while (b := s.recv(65536)):
    out += b
r = json.loads(out)
if not r["ok"]:
    sys.stderr.write(r.get("log", r["error"]))
    sys.exit(1)
print(r["mountpoint"])
PY
}
m1=$(req t:1 "dir:$WORK/store")
m1again=$(req "$hex" "dir:$WORK/store")
m2=$(req t:1 "dir:$WORK/store2")
check test "$m1" = "$WORK/images/$hex"
check test "$m1again" = "$m1"
check test "$m2" != "$m1"
check test "${m2#"$WORK/images/$hex-"}" != "$m2"
check cmp "$WORK/src/d/b" "$m2/d/b"
check test "$(grep -c " - fuse.lazyroot " /proc/self/mountinfo | head -1)" -ge 3
err=$(req t:1 "dir:$WORK/empty-store" 2>&1) && fail "a store without the image was given a mount"
check grep -q "empty-store" <<<"$err"
check test "$(python3 -c 'import json, sys; print(len(json.load(sys.stdin)["mounts"]))' \
	< <("$LAZYROOT" node status --json))" = 3
check "$LAZYROOT" umount "$m2"
check_not mountpoint -q "$m2"
# a second node on the same images directory, as a mistyped socket makes one
cleanup_add _node_stop "$WORK/b.sock"
for target in "$WORK/mnt" "$m1"; do
	err=$("$LAZYROOT" mount t:1 "$target" --store "dir:$WORK/store" --socket "$WORK/b.sock" \
		--cache "$WORK/cache-b" 2>&1) && fail "a second node mounted over '$target'"
	check grep -q "a lazyroot mount of another node is there" <<<"$err"
	check test "$(awk -v t="$target" '$5 == t' /proc/self/mountinfo | grep -c ' - fuse.lazyroot ')" = 1
done
check "$LAZYROOT" node stop --socket "$WORK/b.sock"
check cmp "$WORK/src/d/b" "$WORK/mnt/d/b"

# --- 4. /metrics
out=$(curl -sf "http://127.0.0.1:$port/metrics")
check grep -q "^lazyroot_node_takeovers_total 0$" <<<"$out"
check grep -q "^lazyroot_node_mounts 2$" <<<"$out"
check grep -q "^lazyroot_cache_image_read_bytes{index=\"$hex\"" <<<"$out"
check grep -q "^lazyroot_cache_hits_total " <<<"$out"
check test "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/nope")" = 404

# --- 5. node stop
check "$LAZYROOT" node stop
check exited "$holder"
check exited "$pid"
check_not mountpoint -q "$WORK/mnt"
check_not mountpoint -q "$m1"
check_not test -S "$WORK/node.sock"
check_not "$LAZYROOT" node status

# --- 6. node stop, the holder late to read what the worker sent before it exited
check "$LAZYROOT" mount t:1 "$WORK/mnt" --store "dir:$WORK/store" --cache "$WORK/cache"
check "$LAZYROOT" mount t:1 "$WORK/mnt2" --store "dir:$WORK/store" --cache "$WORK/cache"
pid=$(status pid) holder=$(status holder_pid)
kill -STOP "$holder"
"$LAZYROOT" node stop >"$WORK/stop.out" 2>&1 &
stopper=$!
for _ in $(seq 200); do exited "$pid" && break; sleep 0.05; done
check exited "$pid"
kill -CONT "$holder"
st=0
wait "$stopper" || st=$?
cat "$WORK/stop.out" >&2
check test "$st" = 0
check exited "$holder"
check_not mountpoint -q "$WORK/mnt"
check_not mountpoint -q "$WORK/mnt2"
check_not "$LAZYROOT" node status
