#!/bin/bash
# Read every byte of the Debian rootfs through a mount whose cache holds a small fraction of
# the image, with 16 readers at once, so that chunks are evicted all the time: `cmp` of every
# regular file against its source. Then a second pass from a new daemon over the same cache, and
# sequential reads of the largest files.
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd fusermount3 xargs cmp
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir

rootfs=$(bash "$REPO/tests/lib/rootfs.sh" --dir) || { log "no rootfs fixture; skipping"; exit 77; }
store=dir:$WORK/store
cache=$WORK/cache
mnt=$WORK/mnt

unmount_quietly() {
	if mountpoint -q "$1"; then umount -l "$1"; fi
}
cmp_all() {  # every regular file, 16 at a time; prints nothing when all match
	(cd "$rootfs" && find . -type f -print0) |
		xargs -0 -P 16 -n 64 sh -c 'm=$1; shift; for f; do cmp -- "$0/$f" "$m/$f" || echo "differs: $f"; done' \
			"$rootfs" "$mnt" 2>&1
}

"$LAZYROOT" build "$rootfs" --store "$store" --tag rootfs:read --no-progress >/dev/null
mkdir -p "$mnt"
cleanup_add unmount_quietly "$mnt"
check "$LAZYROOT" mount rootfs:read "$mnt" --store "$store" --cache "$cache" --cache-size 16M

start=$(date +%s%N)
check test -z "$(cmp_all)"
log "first pass, 16 readers, 16 MiB cache: $(( ($(date +%s%N) - start) / 1000000 )) ms"
# Mount again over the same cache: the new mount starts with no pages in the kernel, so the
# second pass goes to a fresh daemon, which finds what the first one left in the cache.
check "$LAZYROOT" umount "$mnt" --cache "$cache"
check "$LAZYROOT" mount rootfs:read "$mnt" --store "$store" --cache "$cache" --cache-size 16M
check test -z "$(cmp_all)"
big=$(cd "$rootfs" && find . -type f -size +8M -printf '%s %p\n' | sort -rn | sed -n '1,3p' | cut -d' ' -f2-)
for f in $big; do
	check cmp "$rootfs/$f" "$mnt/$f"
done
used=$(du -sb "$cache/chunks" | cut -f1)
log "cache holds $used bytes of chunk files"
check test "$used" -le $((32 * 1024 * 1024))
check "$LAZYROOT" umount "$mnt" --cache "$cache"
