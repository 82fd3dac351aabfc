#!/bin/bash
# `lazyroot cache stats` and /metrics show what a real read through a real mount caused:
#  1. with a node answering, `cache stats --json | --prometheus` and the table are the node's
#     answer: the mount's bytes served equal the bytes read through it, its distinct chunks
#     cover the file, and the cache's own served bytes agree; /metrics has the same series;
#  2. with no node answering, the counters come from the cache's stats file, one line on
#     stderr says so, and the cache's counters are still those of the reads.
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd fusermount3 python3 curl
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir

mkdir -p "$WORK/src/d" "$WORK/mnt"
echo small >"$WORK/src/a"
seq 1 300000 >"$WORK/src/d/b"
"$LAZYROOT" build "$WORK/src" --store "dir:$WORK/store" --tag t:1 --no-progress >/dev/null
hex=$(cat "$WORK/store/tags/t:1")
size=$(stat -c %s "$WORK/src/d/b")
port=$(free_port)
export LAZYROOT_METRICS=127.0.0.1:$port LAZYROOT_SOCKET=$WORK/node.sock LAZYROOT_CACHE=$WORK/cache

# --- 1. through the node
check "$LAZYROOT" mount t:1 "$WORK/mnt" --store "dir:$WORK/store"
check cmp "$WORK/src/d/b" "$WORK/mnt/d/b"
"$LAZYROOT" cache stats --json >"$WORK/stats.json" 2>"$WORK/stats.err" || fail "cache stats --json"
check test ! -s "$WORK/stats.err"
check python3 - "$WORK/stats.json" "$hex" "$WORK/mnt" "$size" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
hexname, mnt, size = sys.argv[2], sys.argv[3], int(sys.argv[4])
im = [i for i in s["images"] if i["mountpoint"] == mnt]
assert len(im) == 1 and im[0]["index"] == hexname, s["images"]
im = im[0]
# what the read caused: every byte of the file once, from the chunks holding it
assert im["bytes_served"] == size, (im, size)
assert im["chunks_read"] >= 1 and im["bytes_read"] >= size, im
assert im["bytes_read"] <= im["image_bytes"], im
assert s["served_bytes"] == size, (s["served_bytes"], size)
assert s["misses"] >= 1 and s["fetched_raw_bytes"] >= im["bytes_read"], s
PY
prom=$("$LAZYROOT" cache stats --prometheus)
check grep -qx "lazyroot_cache_image_served_bytes_total{index=\"$hex\",mountpoint=\"$WORK/mnt\"} $size" <<<"$prom"
check grep -qx "lazyroot_cache_served_bytes_total $size" <<<"$prom"
table=$("$LAZYROOT" cache stats)
check grep -q "^$hex  $WORK/mnt" <<<"$table"
metrics=$(curl -sf "http://127.0.0.1:$port/metrics")
check grep -qx "lazyroot_cache_image_served_bytes_total{index=\"$hex\",mountpoint=\"$WORK/mnt\"} $size" <<<"$metrics"
check grep -qx "lazyroot_cache_served_bytes_total $size" <<<"$metrics"
# a second read is served from the page cache (the mount keeps it across opens): the file
# does not reach the mount again.  A few of its pages may: the kernel may reclaim page cache at
# any time, and machines with proactive reclaim (DAMON's pageout) do so within seconds.
check cmp "$WORK/src/d/b" "$WORK/mnt/d/b"
served=$("$LAZYROOT" cache stats --prometheus |
	sed -n "s|^lazyroot_cache_image_served_bytes_total{index=\"$hex\",mountpoint=\"$WORK/mnt\"} ||p")
log "bytes served after the second read: $served (the file: $size)"
check test "$served" -ge "$size" -a "$served" -lt $((size + size / 4))

# --- 2. no node: the stats file, said so on stderr in one line
check "$LAZYROOT" node stop
"$LAZYROOT" cache stats --json >"$WORK/file.json" 2>"$WORK/file.err" || fail "cache stats without a node"
check test "$(wc -l <"$WORK/file.err")" = 1
check grep -q "no node answers at '$WORK/node.sock'; reading the stats file" "$WORK/file.err"
check python3 - "$WORK/file.json" "$served" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["served_bytes"] == int(sys.argv[2]) and s["images"] == [], s
PY
# no node and no stats file: an error naming the cache
check_not "$LAZYROOT" cache stats --cache "$WORK/nocache"
