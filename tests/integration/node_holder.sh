#!/bin/bash
# The holder of the node service killed (kill -9): nothing keeps the connections for a next
# worker, so the worker ends every mount at once: a sandbox reading the image gets errors, not
# a hang (bounded by `timeout`), the worker exits, and the mounts are gone.  The next run starts
# a new node, which mounts the image again at the same place.
# tests/run: alone (it drops the whole machine's page cache)
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
need_cmd fusermount3 sha256sum
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir
. "$(dirname "$0")/../lib/node.sh"

NODE_IMAGE=deb:1
node_image "$NODE_IMAGE"
check_status 0 nrun "$NODE_IMAGE" -- /bin/true
mnt=$WORK/images/$(cat "$WORK/store/tags/deb:1")
check mountpoint -q "$mnt"
pid=$(node_pid) holder=$(node_pid holder_pid)

# a sandbox that reads the image's files over and over until they fail
sync=$WORK/sync
mkdir -p "$sync"
timeout 120 "$LAZYROOT" run --name "$SB_NAME-reader" --set "uid_base=$SB_UID_BASE" \
	--bind "$sync:/sync:rw" "$NODE_IMAGE" -- sh -c '
	touch /sync/started
	while :; do
		for f in /usr/bin/* /usr/lib/x86_64-linux-gnu/*.so*; do
			cat "$f" >/dev/null 2>/sync/err || { echo failed >/sync/failed; exit 3; }
		done
	done' &
reader=$!
python3 -c 'import os, sys, time
t = time.time() + 60
while not os.path.exists(sys.argv[1]) and time.time() < t:
    time.sleep(0.05)' "$sync/started"
check test -e "$sync/started"

kill -9 "$holder"
# the worker ends every mount and exits (at once: its channel to the holder is gone)
check timeout 30 python3 -c 'import os, select, sys
try:
    fd = os.pidfd_open(int(sys.argv[1]))
except ProcessLookupError:
    sys.exit(0)
sys.exit(0 if select.select([fd], [], [], 30)[0] else 1)' "$pid"
# what the reader has in the page cache it may still read; the rest needs the worker
echo 3 >/proc/sys/vm/drop_caches
st=0
wait "$reader" || st=$?
check test "$st" = 3          # its reads failed; 124 would be a hang that timeout ended
check test -e "$sync/failed"
log "the reader saw: $(cat "$sync/err" 2>/dev/null)"
check_not mountpoint -q "$mnt"
check_not timeout 10 "$LAZYROOT" node status

# the next run recovers: a new node, the same mountpoint
check_status 0 nrun "$NODE_IMAGE" -- /bin/true
check mountpoint -q "$mnt"
check test "$(node_pid holder_pid)" != "$holder"
check_status 0 nrun "$NODE_IMAGE" -- sh -c 'cat /usr/bin/* >/dev/null'
check sb_no_leftovers
