#!/bin/bash
# Another mount over one the node serves (an operator's bind or tmpfs on the mountpoint): the
# node never unmounts what is not its own, and never hangs on it.
#  1. `lazyroot umount` of the path refuses with one line naming it and what is on top; the
#     other mount stays, and the node goes on serving its own mount below it (through a
#     descriptor opened before) and its other mount;
#  2. with the other mount gone, `lazyroot umount` works as usual;
#  3. the same stacking, then `node stop`: it ends within seconds, leaves the other mount where
#     it is, and says which mount it could not unmount.  Once the other mount is gone the node's
#     mount below it is found dead, and a new mount there works.
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd fusermount3 python3
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir

mkdir -p "$WORK/src/d" "$WORK/mnt" "$WORK/mnt2" "$WORK/over"
seq 1 100000 >"$WORK/src/d/f"
echo other >"$WORK/over/mark"
"$LAZYROOT" build "$WORK/src" --store "dir:$WORK/store" --tag a:1 --no-progress >/dev/null
export LAZYROOT_METRICS=off LAZYROOT_CACHE=$WORK/cache LAZYROOT_STORE=dir:$WORK/store

# unmount whatever is left at mnt, the top first, at most a few deep
unmount_all() {
	for _ in 1 2 3 4; do umount -l "$WORK/mnt" 2>/dev/null || break; done
}
cleanup_add unmount_all

for part in umount stop; do
	check "$LAZYROOT" mount a:1 "$WORK/mnt"
	check "$LAZYROOT" mount a:1 "$WORK/mnt2"
	exec 3<"$WORK/mnt/d/f"
	check mount --bind "$WORK/over" "$WORK/mnt"
	check grep -qx other "$WORK/mnt/mark"
	if [ "$part" = umount ]; then
		# --- 1. refused, nothing changed
		rc=0
		timeout 20 "$LAZYROOT" umount "$WORK/mnt" 2>"$WORK/umount.err" || rc=$?
		cat "$WORK/umount.err" >&2
		check test "$rc" = 1
		check test "$(wc -l <"$WORK/umount.err")" = 1
		check grep -q "$WORK/mnt" "$WORK/umount.err"
		check grep -qx other "$WORK/mnt/mark"
		check cmp - "$WORK/src/d/f" <&3
		check grep -qx 7 <(sed -n 7p "$WORK/mnt2/d/f")
		check timeout 10 "$LAZYROOT" node status
		# --- 2. the other mount gone: an ordinary umount
		exec 3<&-
		check umount "$WORK/mnt"
		check timeout 20 "$LAZYROOT" umount "$WORK/mnt"
		check_not mountpoint -q "$WORK/mnt"
		check timeout 20 "$LAZYROOT" umount "$WORK/mnt2"
	else
		# --- 3. stop: ends, leaves the other mount, says so
		exec 3<&-
		rc=0
		timeout 30 "$LAZYROOT" node stop 2>"$WORK/stop.err" || rc=$?
		cat "$WORK/stop.err" >&2
		check test "$rc" = 0
		check grep -qx other "$WORK/mnt/mark"
		check grep -q "$WORK/mnt" "$WORK/stop.err"
		check_not mountpoint -q "$WORK/mnt2"
		check umount "$WORK/mnt"
		# the node's mount is still there below, its connection ended: a new mount replaces it
		check "$LAZYROOT" mount a:1 "$WORK/mnt"
		check cmp "$WORK/src/d/f" "$WORK/mnt/d/f"
		check timeout 30 "$LAZYROOT" node stop
		check_not mountpoint -q "$WORK/mnt"
	fi
done
