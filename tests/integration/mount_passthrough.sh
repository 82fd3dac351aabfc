#!/bin/bash
# FUSE passthrough from whole-file objects, through a real mount:
#  1. a large file read whole is copied into one file on the cache disk
#     (files_made); its next open passes through (passthrough_opens): with the
#     page cache dropped, reading and mapping it again send no READ to the
#     daemon (served_bytes unchanged), and the bytes are right;
#  2. an inode is served one way at a time: while a page-cache open of a file
#     is held, a new open of it does not pass through (the kernel would fail
#     it with EIO); once closed, it does; passthrough opens held together
#     share it;
#  3. an object corrupted on disk is found by the next daemon before use
#     (file_failures), not served, and made again;
#  4. `cache verify` keeps good objects and drops a bad one; `cache trim`
#     removes objects before any chunk, and keeps the `used` gauge right;
#  5. kill -9 of the daemon while it writes an object: nothing half-written
#     is left visible;
#  6. --no-passthrough: no open passes through;
#  7. a cache directory on an overlay (the kernel refuses stacked backing
#     files): the mount falls back to serving every read itself.
# Skips when the kernel has no FUSE passthrough.
# tests/run: alone (it drops the whole machine's page cache)
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd python3 cmp fusermount3
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
config=$( (zcat /proc/config.gz || cat "/boot/config-$(uname -r)") 2>/dev/null || true)
if [ -n "$config" ] && ! grep -q '^CONFIG_FUSE_PASSTHROUGH=y' <<<"$config"; then
	log "kernel without CONFIG_FUSE_PASSTHROUGH; skipping"
	exit 77
fi
workdir
store=$WORK/store
cache=$WORK/cache
mnt=$WORK/mnt
mkdir -p "$mnt" "$WORK/src"

python3 - "$WORK/src" <<'PY'
import os, random, sys
r = random.Random(11)
root = sys.argv[1]
open(os.path.join(root, "big"), "wb").write(r.randbytes(24 << 20))
open(os.path.join(root, "med"), "wb").write(r.randbytes(3 << 20))
open(os.path.join(root, "huge"), "wb").write(r.randbytes(96 << 20))
open(os.path.join(root, "small"), "wb").write(r.randbytes(100 << 10))
PY
"$LAZYROOT" build "$WORK/src" --store "dir:$store" --tag pt:1 --no-progress >/dev/null

mount_it() {
	"$LAZYROOT" mount pt:1 "$mnt" --store "dir:$store" --cache "$cache" --cache-size 2G
}
unmount_it() {
	mountpoint -q "$mnt" || return 0
	"$LAZYROOT" umount "$mnt" --cache "$cache" 2>/dev/null || fusermount3 -u "$mnt" 2>/dev/null ||
		umount -l "$mnt"
}
cleanup_add unmount_it
stat_of() {  # KEY
	"$LAZYROOT" cache stats --cache "$cache" --json |
		python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}
wait_stat() {  # KEY MIN: until the counter reaches MIN (10 s at most)
	for _ in $(seq 500); do
		[ "$(stat_of "$1")" -ge "$2" ] && return 0
		read -r -t 0.02 <> <(:) || true
	done
	return 1
}
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
objects() { find "$cache/files" -type f | wc -l; }
mapped_equal() {  # FILE A, B: read A through mmap, compare with B
	python3 - "$1" "$2" <<'PY'
import mmap, sys
with open(sys.argv[1], "rb") as f:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    sys.exit(0 if m[:] == open(sys.argv[2], "rb").read() else 1)
PY
}

# --- 1. read whole, then passthrough
check mount_it
check cmp "$WORK/src/big" "$mnt/big"
check cmp "$WORK/src/small" "$mnt/small"
check wait_stat files_made 1
check test "$(objects)" = 1
check test "$(stat_of passthrough_opens)" = 0
served=$(stat_of served_bytes)
drop
check cmp "$WORK/src/big" "$mnt/big"
check mapped_equal "$mnt/big" "$WORK/src/big"
check test "$(stat_of passthrough_opens)" = 2
check test "$(stat_of served_bytes)" = "$served"
# the small file is below the threshold: never an object
check cmp "$WORK/src/small" "$mnt/small"
check test "$(objects)" = 1

# --- 2. one way at a time
exec 7<"$mnt/med"                       # a page-cache open, before any object
check cmp "$WORK/src/med" "$mnt/med"    # read whole: the object is made
check wait_stat files_made 2
pt=$(stat_of passthrough_opens)
check cmp "$WORK/src/med" "$mnt/med"    # fd 7 still open: through the daemon
check test "$(stat_of passthrough_opens)" = "$pt"
exec 7<&-
# the kernel sends RELEASE in the background: open until the daemon has it
for _ in $(seq 100); do
	cmp -s "$WORK/src/med" "$mnt/med" || break
	[ "$(stat_of passthrough_opens)" -gt "$pt" ] && break
	read -r -t 0.02 <> <(:) || true
done
check test "$(stat_of passthrough_opens)" -gt "$pt"
exec 8<"$mnt/med"                       # held: a passthrough open
pt=$(stat_of passthrough_opens)
check cmp "$WORK/src/med" "$mnt/med"    # a second passthrough open beside it
check test "$(stat_of passthrough_opens)" = $((pt + 1))
exec 8<&-
check unmount_it
# the next mount's server must be a new daemon (a new node service), which checks objects anew
check "$LAZYROOT" node stop

# --- 3. an object corrupted on disk, found by the next daemon
obj=$(find "$cache/files" -type f -size +10M)
check test -n "$obj"
python3 - "$obj" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
b = bytearray(os.pread(fd, 1, 5 << 20))
b[0] ^= 0x20
os.pwrite(fd, bytes(b), 5 << 20)
PY
failures=$(stat_of file_failures)
made=$(stat_of files_made)
check mount_it
drop
check cmp "$WORK/src/big" "$mnt/big"
check test "$(stat_of file_failures)" = $((failures + 1))
check wait_stat files_made $((made + 1))   # made again from the chunks
check cmp "$WORK/src/big" "$mnt/big"
check cmp "$WORK/src/med" "$mnt/med"
check unmount_it

# --- 4. verify and trim
out=$("$LAZYROOT" cache verify --cache "$cache" --json)
log "verify: $out"
check test "$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["dropped"])' "$out")" = 0
printf 'x' | dd of="$obj" bs=1 seek=100 conv=notrunc status=none
out=$("$LAZYROOT" cache verify --cache "$cache" --json)
check test "$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["dropped"])' "$out")" = 1
check test "$(objects)" = 1
chunks=$(find "$cache/chunks" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')
check "$LAZYROOT" cache trim --to "$chunks" --cache "$cache"
check test "$(objects)" = 0
check test "$(find "$cache/chunks" -type f | wc -l)" -gt 0
check test "$(stat_of used)" = "$chunks"

# --- 5. kill -9 while an object is written
check mount_it
pid=$("$LAZYROOT" cache stats --cache "$cache" --json | python3 -c '
import json, sys
for i in json.load(sys.stdin)["images"]:
    if i["mountpoint"] == sys.argv[1]:
        print(i["pid"])' "$mnt")
check test -n "$pid"
cat "$mnt/huge" >/dev/null
# the daemon's worker holds the unnamed file it writes in files/: kill then
writing=0
for _ in $(seq 500); do
	if ls -l "/proc/$pid/fd" 2>/dev/null | grep -q "$cache/files/#"; then
		writing=1
		break
	fi
	read -r -t 0.01 <> <(:) || true
done
kill -9 "$pid"
log "killed while writing an object: $writing"
umount -l "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null || true
# whatever is visible is whole: verify drops nothing, every object has its size
out=$("$LAZYROOT" cache verify --cache "$cache" --json)
check test "$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["dropped"])' "$out")" = 0
for f in "$cache"/files/*; do
	[ -e "$f" ] || continue
	check test "$(stat -c %s "$f")" = $((96 << 20))
done
check mount_it
check cmp "$WORK/src/huge" "$mnt/huge"
check unmount_it

# --- 6. --no-passthrough: every open through the daemon, objects or not
pt=$(stat_of passthrough_opens)
check "$LAZYROOT" mount pt:1 "$mnt" --store "dir:$store" --cache "$cache" --no-passthrough
check cmp "$WORK/src/huge" "$mnt/huge"
check cmp "$WORK/src/huge" "$mnt/huge"
check test "$(stat_of passthrough_opens)" = "$pt"
check unmount_it

# --- 7. the cache on an overlay: passthrough refused (ELOOP), reads served (by a node whose
# cache that is: its log is beside it)
"$LAZYROOT" node stop
mkdir -p "$WORK/ov/lower" "$WORK/ov/upper" "$WORK/ov/work" "$WORK/ov/m"
mount -t overlay overlay \
	-o "lowerdir=$WORK/ov/lower,upperdir=$WORK/ov/upper,workdir=$WORK/ov/work" "$WORK/ov/m"
cleanup_add umount -l "$WORK/ov/m"
cleanup_add unmount_it
cache=$WORK/ov/m/cache
check mount_it
check cmp "$WORK/src/med" "$mnt/med"
check wait_stat files_made 1
for _ in 1 2 3; do
	check cmp "$WORK/src/med" "$mnt/med"
done
check test "$(stat_of passthrough_opens)" = 0
check grep -q "passthrough refused" "$cache/daemon.log"
check unmount_it
