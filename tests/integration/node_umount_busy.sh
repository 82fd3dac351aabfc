#!/bin/bash
# `lazyroot umount` of a mount still in use: the node answers at once and goes on serving
# everything else, on a real node and real mounts:
#  1. a process keeps its working directory in the mount; `umount` returns within a few
#     seconds, says the mount is still in use, and exits 0;
#  2. meanwhile the node answers `node status` and serves its other mount;
#  3. the mountpoint is free: the image mounts there again and reads;
#  4. without fusectl, the detached mount outlives its worker: after a `node upgrade` and a
#     `kill -9` of the worker, it still serves the process that holds it (no error);
#  5. once that process is gone the node lets its connection go, and the holder its record;
#     with fusectl it is aborted instead;
#  6. `node stop` ends the rest.
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
status_of() {
	timeout 60 "$LAZYROOT" node status --json |
		python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}
node=$(status_of pid)
holder=$(status_of holder_pid)
fuse_fds() { find "/proc/${1:-$node}/fd" -lname /dev/fuse 2>/dev/null | wc -l; }
fds0=$(fuse_fds)
hfds0=$(fuse_fds "$holder")

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

# --- 4. the detached mount outlives its worker: an upgrade, then a kill -9
if ! grep -q fusectl /proc/mounts; then
	check timeout 60 "$LAZYROOT" node upgrade
	old=$node
	node=$(status_of pid)
	check test "$node" != "$old"
	kill -9 "$node"
	old=$node
	for _ in $(seq 600); do
		node=$(status_of pid) || break
		[ "$node" != "$old" ] && break
	done
	check test "$node" != "$old"
	check test "$(status_of holder_pid)" = "$holder"
	check grep -qx beside "$WORK/mnt/g"
fi

# --- 5. the detached mount and its user
echo go >"$WORK/go"
wait "$user" || true  # its read is checked below
if grep -q fusectl /proc/mounts; then
	# aborted: its user gets an error, never a hang
	check test -s "$WORK/late.err"
else
	check grep -qx beside "$WORK/late"
	# its user gone, the node lets the connection go: one /dev/fuse descriptor fewer than
	# with both mounts and the detached one
	for _ in $(seq 100); do [ "$(fuse_fds)" -le "$fds0" ] && break; sleep 0.1; done
	check test "$(fuse_fds)" -le "$fds0"
	# and the holder keeps no record of it
	for _ in $(seq 100); do [ "$(fuse_fds "$holder")" -le "$hfds0" ] && break; sleep 0.1; done
	check test "$(fuse_fds "$holder")" -le "$hfds0"
fi
check test ! -s "$WORK/late.err" -o -n "$(grep fusectl /proc/mounts)"
check grep -qx beside "$WORK/mnt/g"

# --- 6. stop
check timeout 30 "$LAZYROOT" node stop
check_not mountpoint -q "$WORK/mnt"
check_not mountpoint -q "$WORK/mnt2"
