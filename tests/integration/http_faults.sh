#!/bin/bash
# Faults of a remote store survived through a real mount.  nginx (WebDAV, 127.0.0.1) holds
# the image; build/tests/faultproxy sits between the mount and nginx and makes the fault
# each case names:
#  1. connection resets (every 3rd request), HTTP 500 (every 2nd), 503 (every 2nd),
#     bodies cut in half (every 3rd), answers that stall (every 4th; the low-speed
#     timeout is 1 s): each on a fresh cache, every byte read through the mount is
#     right, no read fails, and the retries are counted;
#  2. the store goes away (the proxy refuses connections) during a workload: a read of
#     an uncached file waits for --fetch-timeout (1 s), then fails with EIO; the daemon
#     lives on; when the store is back the same mount serves the file, no remount;
#  3. two mirrors, the first flipping a bit in every chunk body: nothing wrong is ever
#     served, every file is right, the second mirror served them (failovers counted).
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/nginx.sh"
need_root
need_cmd python3 fusermount3 nginx
need_faultproxy
workdir
mnt=$WORK/mnt
mkdir -p "$mnt"

python3 - "$WORK/src" <<'PY'
import os, random, sys
r = random.Random(5)
root = sys.argv[1]
os.makedirs(os.path.join(root, "big"))
os.makedirs(os.path.join(root, "small"))
for i in range(8):
    open(os.path.join(root, "big", "b%02d" % i), "wb").write(r.randbytes(3 << 19))
for i in range(150):
    open(os.path.join(root, "small", "s%03d" % i), "wb").write(r.randbytes(r.randrange(1, 9000)))
PY
nginx_start "$WORK/data"
"$LAZYROOT" build "$WORK/src" --store "$NGINX_URL" --tag faults:1 --no-progress >/dev/null
faultproxy_start "$NGINX_PORT"
export LAZYROOT_HTTP_LOW_SPEED_TIME=1

unmount_it() {
	mountpoint -q "$mnt" || return 0
	"$LAZYROOT" umount --cache "$cache" "$mnt" 2>/dev/null || umount -l "$mnt"
}
cleanup_add unmount_it
stat_of() {  # KEY
	"$LAZYROOT" cache stats --cache "$cache" --json |
		python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}

# --- 1. transient faults: retried, counted, invisible
n=0
for f in "reset 3" "500 2" "503 2" "truncate 3" "stall 4"; do
	n=$((n + 1))
	cache=$WORK/cache1-$n
	fault ""
	check "$LAZYROOT" mount faults:1 "$mnt" --store "$PROXY_URL" --cache "$cache"
	fault "$f match /chunks/"
	check cmp_files "$WORK/src" "$mnt"
	check compare_trees --no-atime --ignore-root-mtime "$WORK/src" "$mnt"
	log "fault '$f': $(stat_of store_retries) retries, $(stat_of errors) errors"
	check test "$(stat_of store_retries)" -gt 0
	check test "$(stat_of errors)" -eq 0
	unmount_it
done

# --- 2. the store goes away during a workload, then comes back
cache=$WORK/cache2
fault ""
check "$LAZYROOT" mount faults:1 "$mnt" --store "$PROXY_URL" --cache "$cache" --fetch-timeout 1
check_store_outage "$mnt" "$WORK/src"
unmount_it

# --- 3. a mirror that corrupts chunks
cache=$WORK/cache3
check_corrupt_mirror "$mnt" "$WORK/src" "$cache" faults:1 "$PROXY_URL,$NGINX_URL"
