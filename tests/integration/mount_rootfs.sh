#!/bin/bash
# Mount the Debian rootfs fixture and compare it whole with its source through the mountpoint;
# then run real programs from it in a chroot on an overlay (the mount as lower layer, upper and
# work on a tmpfs): python3 imports json, sqlite3 and ssl; gcc compiles and runs hello.c; git
# makes a repository and a commit. Logs mount time and a metadata walk through the mount
# against the native tree.
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd fusermount3 chroot
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir
chroot=$(command -v chroot)

rootfs=$(bash "$REPO/tests/lib/rootfs.sh" --dir) || { log "no rootfs fixture; skipping"; exit 77; }
store=dir:$WORK/store
cache=$WORK/cache
mnt=$WORK/mnt
root=$WORK/root

ms_since() {  # START_NS: milliseconds since
	echo $(( ($(date +%s%N) - $1) / 1000000 ))
}
unmount_quietly() {  # MNT: for the exit trap; the test may have unmounted it already
	if mountpoint -q "$1"; then umount -l "$1"; fi
}
in_root() {  # CMD...: run in the chroot with a clean environment
	env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 "$chroot" "$root" "$@"
}

"$LAZYROOT" build "$rootfs" --store "$store" --tag rootfs:test --no-progress >/dev/null

mkdir -p "$mnt"
cleanup_add unmount_quietly "$mnt"
start=$(date +%s%N)
check "$LAZYROOT" mount rootfs:test "$mnt" --store "$store" --cache "$cache"
log "mount: $(ms_since "$start") ms"

# --- a metadata walk: cold through the daemon, warm from the kernel's caches, native
walk() { find "$1" -printf '%s %m %u\n' >/dev/null; }
start=$(date +%s%N); walk "$mnt"; cold=$(ms_since "$start")
start=$(date +%s%N); walk "$mnt"; warm=$(ms_since "$start")
walk "$rootfs"
start=$(date +%s%N); walk "$rootfs"; native=$(ms_since "$start")
log "find -printf: mount cold $cold ms, mount warm $warm ms, native (warm) $native ms"

# --- every entry, byte and attribute as built
check compare_trees --no-atime --ignore-root-mtime "$rootfs" "$mnt"

# --- programs from the mount, on an overlay in a chroot
tmp=$WORK/t
mkdir -p "$tmp" "$root"
cleanup_add unmount_quietly "$tmp"
mount -t tmpfs -o size=256m tmpfs "$tmp"
mkdir "$tmp/upper" "$tmp/work"
cleanup_add unmount_quietly "$root"
check mount -t overlay overlay -o "lowerdir=$mnt,upperdir=$tmp/upper,workdir=$tmp/work" "$root"
cleanup_add unmount_quietly "$root/proc"
mount -t proc proc "$root/proc"
cleanup_add unmount_quietly "$root/dev"
mount --bind /dev "$root/dev"

start=$(date +%s%N)
check in_root python3 -c 'import json, sqlite3, ssl'
log "python3 import json, sqlite3, ssl (first run): $(ms_since "$start") ms"
printf '#include <stdio.h>\nint main(void) { puts("hello, lazyroot"); return 0; }\n' \
	>"$root/tmp/hello.c"
check in_root gcc -O2 -o /tmp/hello /tmp/hello.c
check test "$(in_root /tmp/hello)" = "hello, lazyroot"
check in_root sh -c 'mkdir /tmp/repo && cd /tmp/repo && git init -q &&
	git config user.email t@example.com && git config user.name t &&
	echo data >file && git add file && git commit -qm first && git log --oneline | grep -q first'
# writes went to the overlay's upper layer; the image below is untouched
check test -f "$tmp/upper/tmp/hello"
check test ! -e "$mnt/tmp/hello"

umount "$root/dev" "$root/proc" "$root" "$tmp"
check "$LAZYROOT" umount "$mnt" --cache "$cache"
check_not mountpoint -q "$mnt"
