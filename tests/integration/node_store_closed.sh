#!/bin/bash
# The worker closes a local store once its last mount of it has ended: nothing of the node stays
# open on the store's filesystem, which can then be unmounted while the node serves on.
#  1. while the image is mounted, the worker holds the store open (a check that the check sees);
#  2. after `umount`, within a bounded number of requests to the node, it holds nothing under
#     the store's filesystem, and that filesystem unmounts (no EBUSY);
#  3. the node still serves: a mount from another store works.
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd fusermount3 python3
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir
export LAZYROOT_CACHE=$WORK/cache LAZYROOT_IMAGES=$WORK/images

mkdir -p "$WORK/fs" "$WORK/src" "$WORK/mnt" "$WORK/mnt2"
mount -t tmpfs -o size=64m lazyroot-test "$WORK/fs"
cleanup_add umount -lq "$WORK/fs"
echo hello >"$WORK/src/a"
"$LAZYROOT" build "$WORK/src" --store "dir:$WORK/fs/store" --tag c:1 --no-progress >/dev/null
"$LAZYROOT" build "$WORK/src" --store "dir:$WORK/store2" --tag c:1 --no-progress >/dev/null

# open_under PID DIR: how many descriptors and mappings of PID name a file under DIR
open_under() {
	{ ls -l "/proc/$1/fd" 2>/dev/null; cat "/proc/$1/maps" 2>/dev/null; } | grep -c -- "$2/" || true
}

# --- 1.
check "$LAZYROOT" mount c:1 "$WORK/mnt" --store "dir:$WORK/fs/store"
cleanup_add umount -lq "$WORK/mnt"
check grep -qx hello "$WORK/mnt/a"
pid=$(node_pid)
check test "$(open_under "$pid" "$WORK/fs")" -gt 0

# --- 2. each status request is one turn of the worker's loop, where ended mounts are reaped
# and unused stores closed
check "$LAZYROOT" umount "$WORK/mnt"
n=$(open_under "$pid" "$WORK/fs")
for _ in $(seq 1 50); do
	[ "$n" = 0 ] && break
	node_pid >/dev/null
	n=$(open_under "$pid" "$WORK/fs")
done
check test "$n" = 0
check test "$(node_pid)" = "$pid"
check umount "$WORK/fs"

# --- 3.
check "$LAZYROOT" mount c:1 "$WORK/mnt2" --store "dir:$WORK/store2"
cleanup_add umount -lq "$WORK/mnt2"
check grep -qx hello "$WORK/mnt2/a"
check test "$(node_pid)" = "$pid"
check "$LAZYROOT" umount "$WORK/mnt2"
