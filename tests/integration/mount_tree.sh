#!/bin/bash
# Mount the generated every-entry-type tree and compare it through the mountpoint with its
# source exactly: contents, holes (SEEK_DATA maps), types, modes, owners, times, devices,
# symlinks, hard links sharing an inode, xattrs with security.capability. Then: statfs, EROFS
# for every kind of write, getfattr dumps, two mounts of one image and a third of another image
# sharing one cache, a remount served from the cached index without the store, failures that
# leave nothing mounted, and both `lazyroot umount` and `fusermount3 -u` ending the mount in
# the node service that serves them all.
# tests/run: alone (it drops the whole machine's page cache)
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd fusermount3 getfattr setfattr python3
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir

src=$WORK/src
bash "$REPO/tests/lib/gen-tree.sh" "$src"
store=dir:$WORK/store
cache=$WORK/cache

unmount_quietly() {  # MNT: for the exit trap; the test may have unmounted it already
	if mountpoint -q "$1"; then umount -l "$1"; fi
}
# daemon_pid MNT: the daemon's pid, from the pid file the daemon keeps under the cache dir.
daemon_pid() {
	local dev
	dev=$(awk -v m="$1" '$5 == m && $0 ~ / - fuse\.lazyroot / { d = $3 } END { print d }' \
		/proc/self/mountinfo)
	[ -n "$dev" ] && cat "$cache/mounts/$dev"
}
# gone PID: wait on a pidfd (no polling) for at most 10 s; true once the process has exited.
gone() {
	python3 -c 'import os, select, sys
try:
    fd = os.pidfd_open(int(sys.argv[1]))
except ProcessLookupError:
    sys.exit(0)
sys.exit(0 if select.select([fd], [], [], 10)[0] else 1)' "$1"
}
# served MNT: true while the node service lists a mount at MNT.
served() {
	"$LAZYROOT" node status --json |
		python3 -c 'import json, sys; sys.exit(sys.argv[1] not in [m["mountpoint"] for m in json.load(sys.stdin)["mounts"]])' "$1"
}
# unserved MNT: the node stops serving MNT within 10 s (it notices an unmount on its loop).
unserved() {
	local _
	for _ in $(seq 100); do served "$1" || return 0; sleep 0.1; done
	return 1
}
mount_at() {  # REF MNT [OPTIONS]: mount and register the cleanup
	local ref=$1 mnt=$2; shift 2
	mkdir -p "$mnt"
	cleanup_add unmount_quietly "$mnt"
	"$LAZYROOT" mount "$ref" "$mnt" --store "$store" --cache "$cache" "$@"
}
erofs() {  # CMD...: fails, saying "Read-only file system"
	local out
	if out=$("$@" 2>&1); then return 1; fi
	grep -q 'Read-only file system' <<<"$out"
}

"$LAZYROOT" build "$src" --store "$store" --tag tree:1 --no-progress >/dev/null
"$LAZYROOT" build "$src/files" --store "$store" --tag files:1 --no-progress >/dev/null

# --- mount; readiness: the mount answers as soon as the command returns
mnt=$WORK/mnt
start=$(date +%s%N)
check mount_at tree:1 "$mnt"
log "mount took $(( ($(date +%s%N) - start) / 1000000 )) ms"
check test "$(stat -c %i "$mnt")" = 1
check test "$(stat -f -c %T "$mnt")" = fuseblk
check grep -q " $mnt .* - fuse.lazyroot lazyroot:[0-9a-f]\{12\} ro,.*allow_other" /proc/self/mountinfo
check grep -q " $mnt ro,nosuid,nodev" /proc/self/mountinfo
# the readahead window the daemon sets once INIT is answered (fs.c, FS_READ_AHEAD_KB)
check test "$(cat "/sys/class/bdi/$(mountpoint -d "$mnt")/read_ahead_kb")" = 512

# --- everything reads back as built
check compare_trees --no-atime --ignore-root-mtime "$src" "$mnt"
same_xattrs() {  # PATH: `getfattr -d -m -` prints the same through the mount as on the source
	[ "$(cd "$src" && getfattr -h -d -m - "$1" 2>&1)" = "$(cd "$mnt" && getfattr -h -d -m - "$1" 2>&1)" ]
}
for f in xattrs/file xattrs/dir xattrs/symlink xattrs/cap-setuid acl/file acl/dir; do
	check same_xattrs "$f"
done
# size-0 probes and a buffer too small (ERANGE) through the raw syscalls
check python3 -c 'import errno, os, sys
p = sys.argv[1] + "/xattrs/file"
v = os.getxattr(p, "user.text")
assert v == b"hello xattr", v
assert os.getxattr(p, "user.empty") == b""
try:
    os.getxattr(p, "user.missing"); sys.exit(1)
except OSError as e:
    assert e.errno == errno.ENODATA, e
assert sorted(os.listxattr(p)) == sorted(os.listxattr(sys.argv[2] + "/xattrs/file"))' "$mnt" "$src"
check python3 -c 'import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
p = sys.argv[1].encode() + b"/xattrs/file"
buf = ctypes.create_string_buffer(4)
assert libc.getxattr(p, b"user.text", None, 0) == 11
assert libc.getxattr(p, b"user.text", buf, 4) == -1 and ctypes.get_errno() == 34
assert libc.listxattr(p, buf, 4) == -1 and ctypes.get_errno() == 34' "$mnt"
check test "$(readlink "$mnt/links/relative")" = "$(readlink "$src/links/relative")"
check test "$(stat -c %i "$mnt/hardlinks/one/a")" = "$(stat -c %i "$mnt/hardlinks/two/c")"
check test "$(stat -c %h "$mnt/hardlinks/one/a")" = 3

# --- statfs: blocks cover the image, one inode per entry, names up to 255 bytes
check test "$(stat -f -c %l "$mnt")" = 255
check test "$(stat -f -c %b "$mnt")" -gt 4000
check test "$(stat -f -c %c "$mnt")" -gt 2100
check test "$(stat -f -c %S "$mnt")" = 4096

# --- every kind of write is EROFS
check erofs touch "$mnt/new"
check erofs mkdir "$mnt/newdir"
check erofs rm "$mnt/files/small.txt"
check erofs rmdir "$mnt/nested"
check erofs bash -c "echo x >>'$mnt/files/small.txt'"
check erofs setfattr -n user.x -v 1 "$mnt/files/small.txt"
check erofs setfattr -x user.text "$mnt/xattrs/file"
check erofs chmod 600 "$mnt/files/small.txt"
check erofs chown 1:1 "$mnt/files/small.txt"
check erofs touch -d @0 "$mnt/files/small.txt"
check erofs ln -s x "$mnt/newlink"
check erofs ln "$mnt/files/small.txt" "$mnt/files/hard"
check erofs mv "$mnt/files/small.txt" "$mnt/files/moved"
check erofs mknod "$mnt/fifo" p
check erofs truncate -s 0 "$mnt/files/small.txt"

# --- a second mount of the same image and one of another image, one cache for all
mnt2=$WORK/mnt2 mnt3=$WORK/mnt3
check mount_at tree:1 "$mnt2"
check mount_at files:1 "$mnt3"
check cmp "$mnt/files/random-5m" "$mnt2/files/random-5m"
check compare_trees --no-atime --ignore-root-mtime "$src/files" "$mnt3"
check compare_trees --no-atime --ignore-root-mtime "$src/sparse" "$mnt2/sparse"
check test "$(stat -c %d "$mnt")" != "$(stat -c %d "$mnt2")"

# --- lazyroot umount ends the mount: once it returns, the node no longer serves it
pid=$(daemon_pid "$mnt2")
check test -n "$pid"
check served "$mnt2"
check "$LAZYROOT" umount "$mnt2" --cache "$cache"
check_not mountpoint -q "$mnt2"
check_not served "$mnt2"

# --- fusermount3 -u ends it too
check served "$mnt3"
check fusermount3 -u "$mnt3"
check unserved "$mnt3"
check_not mountpoint -q "$mnt3"

# --- a remount needs no store: the index is kept in the cache (a hex ref needs no tag)
hex=$(awk -v m="$mnt" '$5 == m { for (i = 1; i <= NF; i++) if (sub(/^lazyroot:/, "", $i)) print $i }' \
	/proc/self/mountinfo)
check test -n "$hex"
# kept by a thread of the mount's own once it serves: wait for it
full=
for _ in $(seq 100); do full=$(ls "$cache/indexes" | grep "^$hex") && break; sleep 0.1; done
check test -n "$full"
mnt4=$WORK/mnt4
mkdir -p "$mnt4"
cleanup_add unmount_quietly "$mnt4"
# an empty store: the index comes from the cache
mkdir -p "$WORK/empty"
check "$LAZYROOT" mount "$full" "$mnt4" --store "dir:$WORK/empty" --cache "$cache"
check test "$(stat -c %s "$mnt4/files/random-5m")" = "$(stat -c %s "$src/files/random-5m")"
check "$LAZYROOT" umount "$mnt4" --cache "$cache"
# the first mount served the dir: store's own file and kept a copy: the same bytes
check cmp "$cache/indexes/$full" "$WORK/store/indexes/$full"

# --- failures: one line, non-zero, nothing mounted
mnt5=$WORK/mnt5
mkdir -p "$mnt5"
cleanup_add unmount_quietly "$mnt5"
out=$("$LAZYROOT" mount nosuch:tag "$mnt5" --store "$store" --cache "$cache" 2>&1) && rc=0 || rc=$?
check test "$rc" != 0
check test "$(wc -l <<<"$out")" = 1
check grep -q "nosuch:tag" <<<"$out"
check_not mountpoint -q "$mnt5"
out=$("$LAZYROOT" mount tree:1 "$mnt5" --store "dir:$WORK/nowhere" --cache "$cache" 2>&1) &&
	rc=0 || rc=$?
check test "$rc" != 0
check test "$(wc -l <<<"$out")" = 1
check_not mountpoint -q "$mnt5"
check_not "$LAZYROOT" mount tree:1 "$WORK/no-such-dir" --store "$store" --cache "$cache"
check_not "$LAZYROOT" umount "$mnt5" --cache "$cache"
# an index in the store that no longer hashes to its name: refused, nothing mapped or kept
cp -a "$WORK/store" "$WORK/badstore"
python3 -c 'import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(200); b = f.read(1); f.seek(200); f.write(bytes([b[0] ^ 0x40]))' \
	"$WORK/badstore/indexes/$full"
out=$("$LAZYROOT" mount tree:1 "$mnt5" --store "dir:$WORK/badstore" --cache "$WORK/cache2" 2>&1) &&
	rc=0 || rc=$?
check test "$rc" != 0
check test "$(wc -l <<<"$out")" = 1
check grep -q "index $full: content does not match its name" <<<"$out"
check_not mountpoint -q "$mnt5"
check test -z "$(ls -A "$WORK/cache2/indexes")"

# --- a dir: store's index is served in place only until the copy is kept: then the daemon maps
#     the copy, so the store's file may go away or be cut short under a live mount
cp -a "$WORK/store" "$WORK/store3"
mnt7=$WORK/mnt7
mkdir -p "$mnt7"
cleanup_add unmount_quietly "$mnt7"
check "$LAZYROOT" mount tree:1 "$mnt7" --store "dir:$WORK/store3" --cache "$WORK/cache3"
pid=$(cache=$WORK/cache3 daemon_pid "$mnt7")
check test -n "$pid"
maps_serve_copy() {  # the daemon maps the kept copy and no longer the store's file (by inode)
	local kept store_ino
	kept=$(stat -c %i "$WORK/cache3/indexes/$full" 2>/dev/null) || return 1
	store_ino=$(stat -c %i "$WORK/store3/indexes/$full")
	awk -v k="$kept" -v s="$store_ino" '$5 == k { a = 1 } $5 == s { b = 1 } END { exit !(a && !b) }' \
		"/proc/$pid/maps"
}
for _ in $(seq 100); do maps_serve_copy && break; sleep 0.1; done
check maps_serve_copy
check cmp "$WORK/cache3/indexes/$full" "$WORK/store/indexes/$full"
truncate -s 0 "$WORK/store3/indexes/$full"
echo 3 >/proc/sys/vm/drop_caches
check compare_trees --no-atime --ignore-root-mtime "$src/files" "$mnt7/files"
check kill -0 "$pid"
check "$LAZYROOT" umount "$mnt7" --cache "$WORK/cache3"

# --- relative mountpoint, store and cache: the daemon, which leaves for "/", still finds them
mnt6=$WORK/mnt6
mkdir -p "$mnt6"
cleanup_add unmount_quietly "$mnt6"
store_rel=${store#dir:$WORK/}
check bash -c 'cd "$1" && "$2" mount tree:1 mnt6 --store "dir:$3" --cache cache' _ "$WORK" \
	"$LAZYROOT" "$store_rel"
check cmp "$src/files/random-5m" "$mnt6/files/random-5m"
check bash -c 'cd "$1" && "$2" umount mnt6 --cache cache' _ "$WORK" "$LAZYROOT"
check_not mountpoint -q "$mnt6"

# --- the first mount last, with lazyroot umount; node stop ends the node
pid=$(daemon_pid "$mnt")
check "$LAZYROOT" umount "$mnt" --cache "$cache"
check_not served "$mnt"
check "$LAZYROOT" node stop
check gone "$pid"
check_not pgrep -f "lazyroot (mount|node) .* $WORK/"
