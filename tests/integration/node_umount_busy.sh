#!/bin/bash
# `lazyroot umount` of a mount still in use: the node answers at once and goes on serving
# everything else, on a real node and real mounts:
#  1. a process keeps its working directory in the mount; `umount` returns within a few
#     seconds, says the mount is still in use, and exits 0;
#  2. meanwhile the node answers `node status` and serves its other mount;
#  3. the mountpoint is free: the image mounts there again and reads;
#  4. without fusectl, the detached mount still serves the process that holds it, and once
#     that process is gone the node lets its connection go; with fusectl it is aborted;
#  5. `node stop` ends the rest.
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd fusermount3 python3
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir

mkdir -p "$WORK/src/d" "$WORK/mnt" "$WORK/mnt2"
echo inside >"$WORK/src/d/f"
echo beside >"$WORK/src/g"
"$LAZYROOT" build "$WORK/src" --store "dir:$WORK/store" --tag a:1 --no-progress >/dev/null
"$LAZYROOT" build "$WORK/src/d" --store "dir:$WORK/store" --tag b:1 --no-progress >/dev/null
check "$LAZYROOT" mount a:1 "$WORK/mnt" --store "dir:$WORK/store" --cache "$WORK/cache"
check "$LAZYROOT" mount b:1 "$WORK/mnt2" --store "dir:$WORK/store" --cache "$WORK/cache"
node=$("$LAZYROOT" node status --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["pid"])')
fuse_fds() { find "/proc/$node/fd" -lname /dev/fuse 2>/dev/null | wc -l; }
fds0=$(fuse_fds)

# A user of the mount: its working directory inside, reading a file of the mount (through
# that directory) when told to.
mkfifo "$WORK/go"
(cd "$WORK/mnt/d" && read -r _ <"$WORK/go" && cat ../g >"$WORK/late" 2>"$WORK/late.err"; true) &
user=$!
cleanup_add kill "$user"
until [ "$(readlink "/proc/$user/cwd" 2>/dev/null)" = "$WORK/mnt/d" ]; do sleep 0.05; done

# --- 1. umount answers although the mount is in use
t0=$(date +%s%N)
check timeout 20 "$LAZYROOT" umount "$WORK/mnt" 2>"$WORK/umount.err"
ms=$((($(date +%s%N) - t0) / 1000000))
log "umount of a mount in use: $ms ms"
check test "$ms" -lt 5000
if ! grep -q fusectl /proc/mounts; then
	check grep -q "still in use" "$WORK/umount.err"
fi

# --- 2. the node goes on serving: its control socket and its other mount
check timeout 10 "$LAZYROOT" node status
check grep -qx inside "$WORK/mnt2/f"

# --- 3. the mountpoint is free for the image again
check "$LAZYROOT" mount a:1 "$WORK/mnt" --store "dir:$WORK/store" --cache "$WORK/cache"
check grep -qx beside "$WORK/mnt/g"

# --- 4. the detached mount and its user
echo go >"$WORK/go"
wait "$user"
if grep -q fusectl /proc/mounts; then
	# aborted: its user gets an error, never a hang
	check test -s "$WORK/late.err"
else
	check grep -qx beside "$WORK/late"
	# its user gone, the node lets the connection go: one /dev/fuse descriptor fewer than
	# with both mounts and the detached one
	for _ in $(seq 100); do [ "$(fuse_fds)" -le "$fds0" ] && break; sleep 0.1; done
	check test "$(fuse_fds)" -le "$fds0"
fi
check grep -qx beside "$WORK/mnt/g"

# --- 5. stop
check timeout 30 "$LAZYROOT" node stop
check_not mountpoint -q "$WORK/mnt"
check_not mountpoint -q "$WORK/mnt2"
