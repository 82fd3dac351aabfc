#!/bin/bash
# 200 images mounted at once by one node service: one worker serves them all (its thread count
# does not grow with the mounts), each reads back its own content, `node status` lists 200
# mounts, and `node stop` ends every one.
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd fusermount3 python3
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir
N=${NODE_IMAGES:-200}

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
pid=$("$LAZYROOT" node status --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["pid"])')
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
tn=$(threads "$pid")
log "worker threads: $t1 with one mount, $tn with $N"
check test "$tn" -le $((t1 + 2))
check test "$("$LAZYROOT" node status --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["pid"])')" = "$pid"
check "$LAZYROOT" node stop
check test "$(grep -c " $WORK/mnt/[0-9]* .* - fuse.lazyroot " /proc/self/mountinfo)" = 0
