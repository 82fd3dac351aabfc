#!/bin/bash
# A node cache that rots under a running node, read through a real mount: never a wrong byte.
#  1. a byte flipped in 3 chunk files and in the whole-file object of a file the kernel has
#     passed through, after the node wrote and checked them all: read again through new opens
#     with the mount's page cache dropped, every file has its right bytes (the chunk files are
#     hashed whole when read, the object at its next registration); the bad ones are dropped
#     and counted (`corrupt`, `file_failures`);
#  2. `cache verify` drops a flipped object while a passthrough open of its file is held: a
#     new open beside it reads the right bytes or fails with EIO (the kernel lets it share
#     only the held registration), never the bad bytes; once the held open is closed, a new
#     one reads the right bytes.
# The image's small files (below the passthrough threshold, 1 MiB) add up to more than the
# worker keeps of verified chunks in memory (32 MiB), so the second pass reads chunk files
# off the cache disk rather than from that memory.  Skips without FUSE passthrough.
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd python3 fusermount3
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
config=$( (zcat /proc/config.gz || cat "/boot/config-$(uname -r)") 2>/dev/null || true)
if [ -n "$config" ] && ! grep -q '^CONFIG_FUSE_PASSTHROUGH=y' <<<"$config"; then
	log "kernel without CONFIG_FUSE_PASSTHROUGH; skipping"
	exit 77
fi
workdir
export LAZYROOT_METRICS=off LAZYROOT_SOCKET=$WORK/node.sock LAZYROOT_CACHE=$WORK/cache \
	LAZYROOT_IMAGES=$WORK/images LAZYROOT_STORE=dir:$WORK/store
cache=$WORK/cache
mnt=$WORK/mnt
mkdir -p "$WORK/src" "$mnt"
python3 - "$WORK/src" <<'PY'
import os, random, sys
r = random.Random(33)
for i in range(48):
    open(os.path.join(sys.argv[1], "f%02d" % i), "wb").write(r.randbytes(900 << 10))
open(os.path.join(sys.argv[1], "big"), "wb").write(r.randbytes(6 << 20))
PY
"$LAZYROOT" build "$WORK/src" --tag c:1 --no-progress >/dev/null
unmount_it() {
	mountpoint -q "$mnt" || return 0
	"$LAZYROOT" umount "$mnt" 2>/dev/null || umount -l "$mnt"
}
cleanup_add "$LAZYROOT" node stop
cleanup_add unmount_it

stat_of() {  # KEY
	"$LAZYROOT" cache stats --json |
		python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}
open_files() {
	"$LAZYROOT" node status --json |
		python3 -c 'import json, sys; print(sum(m["open_files"] for m in json.load(sys.stdin)["mounts"]))'
}
until_true() {  # CMD...: until it succeeds (10 s at most); the kernel sends RELEASE in the background
	for _ in $(seq 500); do
		"$@" && return 0
		read -r -t 0.02 <> <(:) || true
	done
	return 1
}
stat_at_least() { [ "$(stat_of "$1")" -ge "$2" ]; }
no_open_files() { [ "$(open_files)" = 0 ]; }
flip() {  # FILE OFFSET: one bit of the byte at OFFSET, through the page cache
	python3 - "$1" "$2" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
off = int(sys.argv[2])
b = bytearray(os.pread(fd, 1, off))
b[0] ^= 0x10
os.pwrite(fd, bytes(b), off)
os.close(fd)
PY
}
# Drop the mount's page cache of every file named, then read each through a new open:
# exit 0 when every one read right; with --or-eio, a read failing with EIO is right too.
read_right() {
	python3 - "$WORK/src" "$mnt" "$@" <<'PY'
import errno, os, sys
src, mnt, names = sys.argv[1], sys.argv[2], sys.argv[3:]
or_eio = names[0] == "--or-eio"
names = names[1:] if or_eio else names
bad = 0
def drop(n):
    fd = os.open(os.path.join(mnt, n), os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
for n in names:
    want = open(os.path.join(src, n), "rb").read()
    try:
        drop(n)
        with open(os.path.join(mnt, n), "rb") as f:
            got = f.read()
    except OSError as e:
        if or_eio and e.errno == errno.EIO:
            print("%s: EIO" % n, file=sys.stderr)
            continue
        raise
    if got != want:
        at = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), -1)
        print("%s: wrong bytes (first at %d)" % (n, at), file=sys.stderr)
        bad += 1
sys.exit(1 if bad else 0)
PY
}
smalls=$(cd "$WORK/src" && ls f*)

# --- 1. chunk files and an object flipped under the running node
"$LAZYROOT" mount c:1 "$mnt" || fail "mount c:1 failed"
# shellcheck disable=SC2086
check read_right $smalls big
check until_true stat_at_least files_made 1
pt=$(stat_of passthrough_opens)
check read_right big
check test "$(stat_of passthrough_opens)" -gt "$pt"
check until_true no_open_files
mapfile -t chunks < <(find "$cache/chunks" -type f -size +100k | sort | head -3)
obj=$(find "$cache/files" -type f)
check test "${#chunks[@]}" = 3
check test -n "$obj"
for f in "${chunks[@]}"; do
	check flip "$f" 50000
done
check flip "$obj" $((3 << 20))
corrupt=$(stat_of corrupt)
failures=$(stat_of file_failures)
# shellcheck disable=SC2086
check read_right $smalls big
check test "$(stat_of file_failures)" = $((failures + 1))
check test "$(stat_of corrupt)" -ge $((corrupt + 2))
# what is on the cache disk now is whole again (fetched anew, or made again)
check test "$("$LAZYROOT" cache verify --json |
	python3 -c 'import json, sys; print(json.load(sys.stdin)["dropped"])')" = 0
# shellcheck disable=SC2086
check read_right $smalls big
check grep -q "is corrupt; dropped" "$cache/daemon.log"

# --- 2. cache verify under a held passthrough open
check until_true stat_at_least files_made 2      # made again from the chunks
check until_true no_open_files
pt=$(stat_of passthrough_opens)
exec 8<"$mnt/big"
check test "$(stat_of passthrough_opens)" -gt "$pt"
obj=$(find "$cache/files" -type f)
check test -n "$obj"
check flip "$obj" $((1 << 20))
check "$LAZYROOT" cache verify
check test ! -e "$obj"
check read_right --or-eio big
exec 8<&-
check until_true no_open_files
check read_right big
check unmount_it
