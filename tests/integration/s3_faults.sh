#!/bin/bash
# Faults between lazyroot and a real S3 store, survived.  Ceph RGW (tests/lib/rgw.sh) holds
# the image; build/tests/faultproxy sits between lazyroot and RGW (--s3-endpoint points at
# it: requests are signed for the proxy's host:port, which the proxy passes on) and makes
# the fault each case names:
#  1. a build pushing through resets (every 4th request) and HTTP 500 (every 3rd): retried
#     PUTs are signed and sent again whole; the pushed image extracts exactly;
#  2. through a real mount, each on a fresh cache: connection resets (every 3rd chunk
#     request), HTTP 500 and 503 (every 2nd), bodies cut in half (every 3rd): every byte
#     read through the mount is right, no read fails, and the retries are counted;
#  3. the store goes away during a workload (the proxy refuses every connection): a read of
#     a missing chunk fails with EIO after --fetch-timeout, the mount stays and keeps
#     serving what it has; once the store is back the same mount serves everything;
#  4. two S3 mirrors, the first (through the proxy) flipping a bit in every chunk body:
#     no flipped byte is served, the second mirror serves each chunk, counted.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/nginx.sh"
. "$(dirname "$0")/../lib/rgw.sh"
need_root
need_cmd python3 fusermount3 curl ceph-mon ceph-osd radosgw
need_faultproxy
workdir
mnt=$WORK/mnt
mkdir -p "$mnt"

python3 - "$WORK/src" <<'PY'
import os, random, sys
r = random.Random(7)
root = sys.argv[1]
os.makedirs(os.path.join(root, "big"))
os.makedirs(os.path.join(root, "small"))
for i in range(6):
    open(os.path.join(root, "big", "b%02d" % i), "wb").write(r.randbytes(3 << 19))
for i in range(150):
    open(os.path.join(root, "small", "s%03d" % i), "wb").write(r.randbytes(r.randrange(1, 9000)))
PY

rc=0
rgw_start || rc=$?
[ "$rc" = 0 ] || { [ "$rc" = 77 ] && exit 77; fail "RGW did not start"; }
faultproxy_start "$RGW_PORT"
store=s3://$RGW_BUCKET/faults
export LAZYROOT_HTTP_LOW_SPEED_TIME=1

# --- 1. push through faults
fault "reset 4"
check "$LAZYROOT" build "$WORK/src" --store "$store" --s3-endpoint "$PROXY_URL" --tag f:1 \
	--no-progress
fault "500 3"
check "$LAZYROOT" build "$WORK/src/small" --store "$store" --s3-endpoint "$PROXY_URL" \
	--tag small:1 --no-progress
fault ""
check "$LAZYROOT" image extract f:1 "$WORK/x" --store "$store"
check compare_trees --no-atime --ignore-root-mtime "$WORK/src" "$WORK/x"
check "$LAZYROOT" image extract small:1 "$WORK/x2" --store "$store"
check compare_trees --no-atime --ignore-root-mtime "$WORK/src/small" "$WORK/x2"

# --- 2. transient faults under a mount: retried, counted, invisible
unmount_it() {
	mountpoint -q "$mnt" || return 0
	"$LAZYROOT" umount --cache "$cache" "$mnt" 2>/dev/null || umount -l "$mnt"
}
cleanup_add unmount_it
stat_of() {  # KEY
	"$LAZYROOT" cache stats --cache "$cache" --json |
		python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}
n=0
for f in "reset 3" "500 2" "503 2" "truncate 3"; do
	n=$((n + 1))
	cache=$WORK/cache-$n
	fault ""
	check "$LAZYROOT" mount f:1 "$mnt" --store "$store" --s3-endpoint "$PROXY_URL" --cache "$cache"
	fault "$f match /chunks/"
	check cmp_files "$WORK/src" "$mnt"
	check compare_trees --no-atime --ignore-root-mtime "$WORK/src" "$mnt"
	log "fault '$f': $(stat_of store_retries) retries, $(stat_of errors) errors"
	check test "$(stat_of store_retries)" -gt 0
	check test "$(stat_of errors)" -eq 0
	unmount_it
done

# --- 3. the store goes away during a workload, then comes back
cache=$WORK/cache-down
fault ""
check "$LAZYROOT" mount f:1 "$mnt" --store "$store" --s3-endpoint "$PROXY_URL" --cache "$cache" \
	--fetch-timeout 1
check_store_outage "$mnt" "$WORK/src"
unmount_it

# --- 4. a mirror that corrupts chunks: the same bucket through the proxy, then directly
cache=$WORK/cache-flip
check_corrupt_mirror "$mnt" "$WORK/src" "$cache" f:1 \
	"s3+$PROXY_URL/$RGW_BUCKET/faults,s3+$RGW_ENDPOINT/$RGW_BUCKET/faults"
