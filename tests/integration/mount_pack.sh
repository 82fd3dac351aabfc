#!/bin/bash
# Packs (image/FORMAT.md, "Packs"): an image's chunks in one store object that
# a mount reads its misses from, through a real mount:
#  1. `build --pack` writes a pack as long as the chunk objects together, and
#     `image pack` writes the same bytes for an image built without one;
#  2. with the chunk objects gone, the tree reads back whole from the pack
#     alone, and `cache prefetch` warms a cache from it;
#  3. a pack with flipped bytes: each chunk that fails is fetched from its
#     chunk object instead, counted as a verification failure, no read fails;
#  4. a pack of the wrong size is not used (one warning), the tree reads back;
#  5. `image pack` refuses a store whose chunk is corrupt or of another size
#     than the index says, naming the chunk, and leaves the earlier pack as it
#     was; `build --pack` into a store that
#     cannot hold packs is refused before anything is written.
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd python3 fusermount3 cmp
workdir
store=$WORK/store
mnt=$WORK/mnt
mkdir -p "$mnt" "$WORK/src"

# 16 incompressible files of 1.5 MiB (own chunks, stored raw), 300 small
# compressible ones (packed together, stored zstd) and a hard link.
python3 - "$WORK/src" <<'PY'
import os, random, sys
r = random.Random(11)
root = sys.argv[1]
os.makedirs(os.path.join(root, "big"))
os.makedirs(os.path.join(root, "small/deep"))
for i in range(16):
    open(os.path.join(root, "big", "b%02d" % i), "wb").write(r.randbytes(3 << 19))
for i in range(300):
    d = "small/deep" if i % 3 else "small"
    line = ("line %d of file %d\n" % (r.randrange(1000), i)).encode()
    open(os.path.join(root, d, "s%03d" % i), "wb").write(line * r.randrange(10, 900))
os.link(os.path.join(root, "big", "b00"), os.path.join(root, "big", "link"))
PY

mount_it() {  # CACHE [extra options]
	local cache=$1; shift
	"$LAZYROOT" mount pack:1 "$mnt" --store "dir:$store" --cache "$cache" "$@"
}
unmount_it() {
	mountpoint -q "$mnt" || return 0
	"$LAZYROOT" umount "$mnt" --cache "$cache" 2>/dev/null || fusermount3 -u "$mnt" 2>/dev/null ||
		umount -l "$mnt"
}
cleanup_add unmount_it
stat_of() {  # CACHE KEY
	"$LAZYROOT" cache stats --cache "$1" --json |
		python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$2"
}
chunk_bytes() {  # the bytes of every chunk object of STORE
	find "$1/chunks" -type f -printf '%s\n' | awk '{ n += $1 } END { print n + 0 }'
}

# --- 1. build --pack, and image pack of the same tree built without it
out=$("$LAZYROOT" build "$WORK/src" --store "dir:$store" --tag pack:1 --pack --json --no-progress)
idx=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["index"])' <<<"$out")
pack=$store/packs/$idx
check test -f "$pack"
log "pack: $(stat -c %s "$pack") bytes, chunk objects $(chunk_bytes "$store")"
check test "$(stat -c %s "$pack")" = "$(chunk_bytes "$store")"
check test "$(python3 -c 'import json, sys; print(json.load(sys.stdin)["pack_bytes"])' <<<"$out")" \
	= "$(stat -c %s "$pack")"
check "$LAZYROOT" build "$WORK/src" --store "dir:$WORK/store2" --tag pack:1 --no-progress
check test ! -e "$WORK/store2/packs/$idx"
check "$LAZYROOT" image pack pack:1 --store "dir:$WORK/store2"
check cmp "$pack" "$WORK/store2/packs/$idx"
# nothing left behind by the streamed writes
check test "$(find "$store/packs" "$WORK/store2/packs" -name '.tmp*' | wc -l)" = 0

# --- 2. the chunk objects gone: every read comes from the pack
mv "$store/chunks" "$store/chunks.away"
cache=$WORK/cache2
check mount_it "$cache"
check diff -r "$WORK/src" "$mnt"
check test "$(stat -c %i "$mnt/big/b00")" = "$(stat -c %i "$mnt/big/link")"
check test "$(stat_of "$cache" misses)" -gt 0
check test "$(stat_of "$cache" verify_failures)" = 0
check test "$(stat_of "$cache" errors)" = 0
unmount_it
cache=$WORK/cache2p
check "$LAZYROOT" cache prefetch pack:1 --store "dir:$store" --cache "$cache" --no-progress
check test "$(stat_of "$cache" verify_failures)" = 0
check test "$(stat_of "$cache" fetched_bytes)" = "$(stat -c %s "$pack")"
mv "$store/chunks.away" "$store/chunks"

# --- 3. flipped bytes in the pack: those chunks come from their objects
cp "$pack" "$WORK/pack.good"
python3 - "$pack" <<'PY'
import os, sys
p = sys.argv[1]
n = os.path.getsize(p)
with open(p, "r+b") as f:
    for off in range(4096, n, 256 << 10):   # several in every chunk
        f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0x20]))
PY
cache=$WORK/cache3
check mount_it "$cache"
check diff -r "$WORK/src" "$mnt"
log "flipped pack: $(stat_of "$cache" verify_failures) verification failures"
check test "$(stat_of "$cache" verify_failures)" -gt 0
check test "$(stat_of "$cache" errors)" = 0
unmount_it

# --- 4. a pack of the wrong size is not read at all
cp "$WORK/pack.good" "$pack"
truncate -s -1 "$pack"
cache=$WORK/cache4
check mount_it "$cache" 2>"$WORK/warn4"
log "short pack: $(cat "$WORK/warn4")"
check grep -q "packs/$idx is .* bytes, not the" "$WORK/warn4"
check diff -r "$WORK/src" "$mnt"
check test "$(stat_of "$cache" verify_failures)" = 0
unmount_it

# --- 5. refusals
cp "$WORK/pack.good" "$pack"
# (whole, not through `head`: under pipefail, sort could die of SIGPIPE)
mapfile -t objects < <(find "$store/chunks" -type f | sort)
victim=${objects[0]}
cp "$victim" "$WORK/victim.good"
python3 - "$victim" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0x01
open(p, "wb").write(b)
PY
err=$("$LAZYROOT" image pack pack:1 --store "dir:$store" 2>&1 >/dev/null) && st=0 || st=$?
log "corrupt chunk: $err"
check test "$st" != 0
check test "$(grep -c . <<<"$err")" = 1
check grep -q "chunk $(basename "$victim") fails verification" <<<"$err"
check cmp "$pack" "$WORK/pack.good"
check test "$(find "$store/packs" -name '.tmp*' | wc -l)" = 0
# a chunk object of another size than the index records
truncate -s -1 "$victim"
err=$("$LAZYROOT" image pack pack:1 --store "dir:$store" 2>&1 >/dev/null) && st=0 || st=$?
log "short chunk: $err"
check test "$st" != 0
check grep -q "chunk $(basename "$victim") is [0-9]* bytes, not the [0-9]* index" <<<"$err"
check cmp "$pack" "$WORK/pack.good"
cp "$WORK/victim.good" "$victim"
mkdir -p "$WORK/m2"   # only the first of a list of mirrors is created by build
err=$("$LAZYROOT" build "$WORK/src" --store "dir:$WORK/m1,dir:$WORK/m2" --tag pack:1 --pack \
	--no-progress 2>&1 >/dev/null) && st=0 || st=$?
log "mirrors: $err"
check test "$st" != 0
check grep -q "cannot hold packs" <<<"$err"
check test ! -e "$WORK/m1/chunks"
