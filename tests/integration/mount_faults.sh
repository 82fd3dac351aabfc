#!/bin/bash
# Faults a node survives, through a real mount (each case says which fault it
# makes):
#  1. kill -9 of the node's worker during heavy reads, then a mount on the same
#     cache: every byte correct;
#  2. a cache file truncated, and one with a flipped byte, on disk: detected at
#     the next daemon's first use, fetched again, counted, bytes correct;
#  3. a chunk corrupted in the store: EIO for the file that needs it, counted,
#     the daemon alive and every other file fine;
#  4. the cache disk full (a small tmpfs as cache dir): reads still succeed,
#     served from memory, counted; read again, they fetch nothing.
# tests/run: alone (it drops the whole machine's page cache)
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd python3 fusermount3
workdir
store=$WORK/store
mnt=$WORK/mnt
mkdir -p "$mnt" "$WORK/src"

# A tree of distinct, incompressible files: 24 files of 1.5 MiB (own chunks)
# and 200 small ones (packed).
python3 - "$WORK/src" <<'PY'
import os, random, sys
r = random.Random(7)
root = sys.argv[1]
os.makedirs(os.path.join(root, "big"))
os.makedirs(os.path.join(root, "small"))
for i in range(24):
    open(os.path.join(root, "big", "b%02d" % i), "wb").write(r.randbytes(3 << 19))
for i in range(200):
    open(os.path.join(root, "small", "s%03d" % i), "wb").write(r.randbytes(r.randrange(100, 9000)))
PY
"$LAZYROOT" build "$WORK/src" --store "dir:$store" --tag faults:1 --no-progress >/dev/null

mount_it() {  # CACHE [extra options]
	local cache=$1; shift
	"$LAZYROOT" mount faults:1 "$mnt" --store "dir:$store" --cache "$cache" "$@"
}
unmount_it() {
	mountpoint -q "$mnt" || return 0
	"$LAZYROOT" umount "$mnt" 2>/dev/null || fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt"
}
cleanup_add unmount_it
stat_of() {  # CACHE KEY
	"$LAZYROOT" cache stats --cache "$1" --json |
		python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$2"
}
daemon_pid() {  # the daemon serving $mnt, from the cache's image slots
	"$LAZYROOT" cache stats --cache "$1" --json | python3 -c '
import json, sys
for i in json.load(sys.stdin)["images"]:
    if i["mountpoint"] == sys.argv[1]:
        print(i["pid"])' "$mnt"
}

# --- 1. kill -9 during heavy reads
cache=$WORK/cache1
check mount_it "$cache"
pid=$(daemon_pid "$cache")
check test -n "$pid"
readers=()
for i in $(seq 8); do
	(find "$mnt" -type f -exec cat {} + >/dev/null 2>&1) &
	readers+=($!)
done
# wait until reads are under way (chunks are landing in the cache), then kill
for _ in $(seq 400); do
	[ "$(stat_of "$cache" misses)" -gt 20 ] && break
	read -r -t 0.02 <> <(:) || true
done
check test "$(stat_of "$cache" misses)" -gt 20
kill -9 "$pid"
wait "${readers[@]}" 2>/dev/null || true
umount -l "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null || true
check mount_it "$cache"
check diff -r "$WORK/src" "$mnt"
unmount_it
# the node took the killed worker's place and still has the cache open, with
# the chunks it verified known good: case 2 needs a node that never saw them
check "$LAZYROOT" node stop

# --- 2. a cache file truncated and one flipped, while no daemon runs
# (read whole, not through `head`: under pipefail, sort could die of SIGPIPE)
mapfile -t files < <(find "$cache/chunks" -type f | sort)
files=("${files[@]:0:2}")
check test "${#files[@]}" = 2
truncate -s 100 "${files[0]}"
python3 - "${files[1]}" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0x40
open(p, "wb").write(b)
PY
before=$(stat_of "$cache" verify_failures)
# without passthrough: the big files would be read from their whole-file
# objects (mount_passthrough.sh), and their chunk files not at all
check mount_it "$cache" --no-passthrough
check diff -r "$WORK/src" "$mnt"
after=$(stat_of "$cache" verify_failures)
log "verify failures: $before -> $after"
check test "$after" -ge $((before + 2))
unmount_it

# --- 3. a chunk corrupted in the store: EIO for that file only
cache=$WORK/cache3
# the first chunk of big/b05 (a file of its own chunks): flip a byte in the middle
victim=$(python3 - "$store" "$WORK/src/big/b05" <<'PY'
import sys, os
store, path = sys.argv[1], sys.argv[2]
data = open(path, "rb").read()
# find the stored chunk whose raw bytes begin this file: try each chunk object
best = None
for d in sorted(os.listdir(os.path.join(store, "chunks"))):
    for n in os.listdir(os.path.join(store, "chunks", d)):
        p = os.path.join(store, "chunks", d, n)
        raw = open(p, "rb").read()
        if len(raw) > 1000 and raw[:64] == data[:64]:   # stored raw (incompressible)
            best = p
print(best or "")
PY
)
check test -n "$victim"
python3 - "$victim" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 3] ^= 0x01
open(p, "wb").write(b)
PY
check mount_it "$cache"
check_not cat "$mnt/big/b05"
err=$(cat "$mnt/big/b05" 2>&1 >/dev/null || true)
log "corrupt chunk: $err"
check grep -q 'Input/output error' <<<"$err"
check test "$(stat_of "$cache" verify_failures)" -ge 1
check test "$(stat_of "$cache" errors)" -ge 1
for f in big/b00 big/b04 big/b06 big/b23 small/s000 small/s199; do
	check cmp "$WORK/src/$f" "$mnt/$f"
done
check kill -0 "$(daemon_pid "$cache")"
unmount_it
# put the byte back for the next case
python3 - "$victim" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 3] ^= 0x01
open(p, "wb").write(b)
PY

# --- 4. the cache disk full: a 4 MiB tmpfs as cache dir, filled up by another
# file once the daemon has started (evicting chunks cannot make room)
cache=$WORK/cache4
mkdir -p "$cache"
mount -t tmpfs -o size=4m tmpfs "$cache"
cleanup_add umount -l "$cache"
check mount_it "$cache" --cache-size 1G
dd if=/dev/zero of="$cache/filler" bs=64k status=none 2>/dev/null || true
check test "$(df --output=avail -B1 "$cache" | tail -1)" -lt 65536
check diff -r "$WORK/src" "$mnt"
check test "$(stat_of "$cache" memory_served)" -gt 0
check test "$(stat_of "$cache" errors)" = 0
# a second pass, page cache dropped, is served from the chunks kept in memory
# (--cache-memory, 256M by default, far above the tree): nothing fetched again
misses=$(stat_of "$cache" misses)
sync; echo 3 >/proc/sys/vm/drop_caches
check diff -r "$WORK/src" "$mnt"
check test "$(stat_of "$cache" misses)" = "$misses"
unmount_it
