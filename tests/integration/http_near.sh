#!/bin/bash
# What a miss fetches besides its chunk when the store is slow: the image on nginx
# (127.0.0.1, started here) behind the fault proxy's `delay 20` (20 ms per answer), read
# through a mount by one reader, file after file, as a program loading modules does:
#  1. threshold above the store's latency (LAZYROOT_CACHE_NEAR_MS=200): each chunk of the
#     small files is fetched when the reader first reaches it, none ahead; a 4 KiB direct
#     read of a 6 MiB file fetches only the chunk it reads;
#  2. the default threshold (5 ms, below the 20 ms): a miss on a small file also fetches
#     the next chunks in build order (counted as near_fetches), so that fewer than half as
#     many fetches start when the reader reaches a chunk (each a round trip it waits
#     for in turn), for at most four fetches more in all; the 4 KiB read fetches the whole
#     6 MiB file;
#  3. every byte read is right in both.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/nginx.sh"
need_root
need_cmd python3 fusermount3 nginx dd
need_faultproxy
workdir
mnt=$WORK/mnt
mkdir -p "$mnt"

python3 - "$WORK/src" <<'PY'
import os, random, sys
r = random.Random(7)
root = sys.argv[1]
os.makedirs(os.path.join(root, "mods"))
os.makedirs(os.path.join(root, "alib"))
for i in range(400):
    open(os.path.join(root, "mods", "m%03d.py" % i), "wb").write(r.randbytes(8192))
open(os.path.join(root, "alib", "big.so"), "wb").write(r.randbytes(6 << 20))
PY

nginx_start "$WORK/data"
faultproxy_start "$NGINX_PORT"
check "$LAZYROOT" build "$WORK/src" --store "$NGINX_URL" --tag near:1 --no-progress
fault "delay 20"

unmount_it() {
	mountpoint -q "$mnt" || return 0
	"$LAZYROOT" umount --cache "$WORK/cache" "$mnt" 2>/dev/null || umount -l "$mnt"
}
cleanup_add unmount_it
stat_of() { "$LAZYROOT" cache stats --cache "$WORK/cache" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(d["near_fetches"], sum(b["count"] for b in d["fetch_latency_us"]), d["fetched_raw_bytes"],
      d["inflight"])'; }
# the counters once no fetch is in flight (a read returns when its own chunk is in; the
# neighbours fetched with it may still be arriving)
settled() {
	local i m f r n
	for i in $(seq 500); do
		read -r m f r n <<<"$(stat_of)"
		[ "$n" = 0 ] && { echo "$m $f $r"; return; }
		_pause 0.02
	done
	echo "fetches still in flight after 10 s" >&2
	echo "$m $f $r"
}

# one mount with LAZYROOT_CACHE_NEAR_MS=$1 ("" for the default); sets NEAR and FETCHES
# (after the small files) and BIG (raw bytes the 4 KiB read of big.so fetched)
run_case() {
	local raw0 raw1 bad=0 f
	# a fresh cache with this case's setting: a new node service, which opens it anew
	"$LAZYROOT" node stop 2>/dev/null || true
	rm -rf "$WORK/cache"
	LAZYROOT_CACHE_NEAR_MS=$1 "$LAZYROOT" mount near:1 "$mnt" --store "$PROXY_URL" \
		--cache "$WORK/cache" || { check false; return; }
	for f in $(cd "$WORK/src/mods" && ls | sort); do
		cmp -s "$WORK/src/mods/$f" "$mnt/mods/$f" || bad=1
	done
	check test "$bad" = 0
	read -r NEAR FETCHES raw0 <<<"$(settled)"
	check dd if="$mnt/alib/big.so" of="$WORK/head" bs=4096 count=1 iflag=direct status=none
	check cmp -n 4096 "$WORK/head" "$WORK/src/alib/big.so"
	read -r _ _ raw1 <<<"$(settled)"
	BIG=$((raw1 - raw0))
	unmount_it
}

# --- 1. threshold above the store's latency: nothing but what is read
run_case 200
log "near off: $FETCHES fetches ($NEAR ahead) for 400 small files; 4 KiB of big.so fetched $BIG bytes"
fetches_off=$FETCHES
check test "$NEAR" -eq 0
check test "$FETCHES" -ge 8
check test "$BIG" -lt $((6 << 20))

# --- 2. the default: neighbours on a slow store
run_case ""
log "near on: $FETCHES fetches ($NEAR ahead) for 400 small files; 4 KiB of big.so fetched $BIG bytes"
check test "$NEAR" -gt 0
check test $(((FETCHES - NEAR) * 2)) -lt "$fetches_off"
check test "$FETCHES" -le $((fetches_off + 4))
check test "$BIG" -ge $((6 << 20))
