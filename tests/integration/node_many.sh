#!/bin/bash
# 200 images mounted at once by one node service: one worker serves them all (its thread count
# does not grow with the mounts), each reads back its own content, `node status` lists 200
# mounts, /metrics has per-image series for every one of them (the bytes its read was served),
# and `node stop` ends every one.
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd fusermount3 python3 curl
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir
N=${NODE_IMAGES:-200}
port=$(free_port)
export LAZYROOT_METRICS=127.0.0.1:$port

store=dir:$WORK/store
for i in $(seq "$N"); do
	mkdir -p "$WORK/src/$i/d"
	echo "image $i" >"$WORK/src/$i/d/id"
	"$LAZYROOT" build "$WORK/src/$i" --store "$store" --tag "img:$i" --no-progress >/dev/null ||
		fail "build of image $i"
done
threads() { awk '/^Threads:/ { print $2 }' "/proc/$1/status"; }
mkdir -p "$WORK/mnt/1"
check "$LAZYROOT" mount img:1 "$WORK/mnt/1" --store "$store" --cache "$WORK/cache"
pid=$(node_pid)
t1=$(threads "$pid")
for i in $(seq 2 "$N"); do
	mkdir -p "$WORK/mnt/$i"
	"$LAZYROOT" mount "img:$i" "$WORK/mnt/$i" --store "$store" --cache "$WORK/cache" ||
		check false "mount of image $i"
done
bad=0
for i in $(seq "$N"); do
	[ "$(cat "$WORK/mnt/$i/d/id")" = "image $i" ] || bad=$((bad + 1))
done
check test "$bad" = 0
check test "$(grep -c " $WORK/mnt/[0-9]* .* - fuse.lazyroot " /proc/self/mountinfo)" = "$N"
check test "$("$LAZYROOT" node status --json | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["mounts"]))')" = "$N"
curl -sf "http://127.0.0.1:$port/metrics" >"$WORK/metrics" || fail "GET /metrics"
check python3 - "$WORK/metrics" "$WORK/mnt" "$N" <<'PY'
import re, sys
text, mnt, n = open(sys.argv[1]).read(), sys.argv[2], int(sys.argv[3])
served = {}
for m in re.finditer(r'^lazyroot_cache_image_served_bytes_total\{index="[0-9a-f]{32}",'
                     r'mountpoint="([^"]*)"\} (\d+)$', text, re.M):
    served[m.group(1)] = int(m.group(2))
for name in ("image_size_bytes", "image_read_bytes", "image_read_chunks", "image_read_ratio"):
    k = len(re.findall(r'^lazyroot_cache_%s\{' % name, text, re.M))
    assert k == n, (name, k)
want = {f"{mnt}/{i}": len(f"image {i}\n") for i in range(1, n + 1)}
assert served == want, sorted(set(served.items()) ^ set(want.items()))[:5]
PY
tn=$(threads "$pid")
log "worker threads: $t1 with one mount, $tn with $N"
check test "$tn" -le $((t1 + 2))
check test "$(node_pid)" = "$pid"
t0=$EPOCHREALTIME
check "$LAZYROOT" node stop
log "node stop with $N mounts: $(python3 -c "print(f'{$EPOCHREALTIME - $t0:.2f}')") s"
check test "$(grep -c " $WORK/mnt/[0-9]* .* - fuse.lazyroot " /proc/self/mountinfo)" = 0
