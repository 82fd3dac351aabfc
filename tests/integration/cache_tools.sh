#!/bin/bash
# The cache's tools: prefetch (a path, then a whole image, its progress line on a terminal
# and nothing extra off one; a mount then serves
# every byte with the store gone), stats as table, JSON and Prometheus text,
# verify (drops a corrupted chunk file), trim (down to a size).
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd python3 script
workdir
store=$WORK/store
cache=$WORK/cache
mnt=$WORK/mnt
mkdir -p "$mnt"
python3 - "$WORK/src" <<'PY'
import os, random, sys
r = random.Random(11)
root = sys.argv[1]
for d in ("a", "b"):
    os.makedirs(os.path.join(root, d))
    for i in range(6):
        open(os.path.join(root, d, "f%d" % i), "wb").write(r.randbytes(400_000 + i * 50_000))
PY
"$LAZYROOT" build "$WORK/src" --store "dir:$store" --tag tools:1 --no-progress >/dev/null
json() { "$LAZYROOT" cache stats --cache "$cache" --json |
	python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

# prefetch of one directory fetches some chunks, not all
out=$("$LAZYROOT" cache prefetch tools:1 a --store "dir:$store" --cache "$cache" --json)
log "prefetch a: $out"
part=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["chunks"])' "$out")
all=$("$LAZYROOT" image inspect tools:1 --store "dir:$store" --json |
	python3 -c 'import json, sys; print(json.load(sys.stdin)["chunks"])')
check test "$part" -gt 0
check test "$part" -lt "$all"
check_status 1 "$LAZYROOT" cache prefetch tools:1 no/such/path --store "dir:$store" --cache "$cache"

# progress: a line on a terminal (chunks and bytes done of the total, the last one whole);
# nothing on stderr that is not one
script -qec "'$LAZYROOT' cache prefetch tools:1 --store 'dir:$store' --cache '$WORK/tty-cache'" \
	/dev/null >"$WORK/tty.out" </dev/null || fail "prefetch on a terminal"
check grep -q "^$all/$all chunks  " <(tr '\r' '\n' <"$WORK/tty.out" | sed 's/\x1b\[K//g')
"$LAZYROOT" cache prefetch tools:1 --store "dir:$store" --cache "$WORK/pipe-cache" 2>"$WORK/pipe.err" ||
	fail "prefetch with stderr to a file"
check test ! -s "$WORK/pipe.err"

# prefetch of everything, then a mount by index name with the store emptied:
# the store must exist (only build creates one) but has nothing to give, so
# every byte comes from the cache
out=$("$LAZYROOT" cache prefetch tools:1 --store "dir:$store" --cache "$cache" --json)
index=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["index"])' "$out")
mkdir "$store.away"
find "$store" -mindepth 1 -maxdepth 1 -exec mv -t "$store.away" {} +
check "$LAZYROOT" mount "$index" "$mnt" --store "dir:$store" --cache "$cache"
cleanup_add sh -c "mountpoint -q '$mnt' && umount '$mnt'"
check diff -r "$WORK/src" "$mnt"
check test "$(json misses)" = 0
check test "$(json hits)" -gt 0
check "$LAZYROOT" umount "$mnt" --cache "$cache"
rm -rf "$store"   # the emptied store and what the mount left there
mv "$store.away" "$store"

# stats in three forms
check "$LAZYROOT" cache stats --cache "$cache"
check bash -c "'$LAZYROOT' cache stats --cache '$cache' --prometheus | grep -q '^lazyroot_cache_hits_total '"
check bash -c "'$LAZYROOT' cache stats --cache '$cache' --prometheus | grep -q '^# TYPE '"

# verify drops a corrupted file; trim shrinks to a size
mapfile -t all_files < <(find "$cache/chunks" -type f | sort)
f=${all_files[0]}
printf 'x' | dd of="$f" bs=1 seek=10 conv=notrunc status=none
out=$("$LAZYROOT" cache verify --cache "$cache" --json)
log "verify: $out"
check test "$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["dropped"])' "$out")" = 1
check_not test -e "$f"
check "$LAZYROOT" cache trim --to 1M --cache "$cache"
check test "$(find "$cache/chunks" -type f -printf '%s\n' | awk '{ n += $1 } END { print n + 0 }')" -le $((1 << 20))
check test "$(json used)" -le $((1 << 20))

# a full cache disk: one line that says what could not be written, exit 1, and
# no crash (the stats file is a shared mapping: a page without room was SIGBUS)
tiny=$WORK/tiny
mkdir -p "$tiny"
mount -t tmpfs -o size=64k tmpfs "$tiny"
cleanup_add umount -l "$tiny"   # the node service keeps the cache there open until it stops
full_prefetch() {
	local rc=0
	"$LAZYROOT" cache prefetch tools:1 --store "dir:$store" --cache "$tiny/c" --no-progress \
		2>"$WORK/err" || rc=$?
	log "full: exit $rc: $(cat "$WORK/err")"
	check test "$rc" = 1
	check grep -q "$1" "$WORK/err"
	check_not grep -q corrupt "$WORK/err"
	check test "$(wc -l <"$WORK/err")" = 1
}
# no room for the index at all
dd if=/dev/zero of="$tiny/fill" bs=4k status=none 2>/dev/null || true
full_prefetch "index [0-9a-f]*: writing it into .*No space left on device"
# room for the index, not for the stats file (20 KiB)
rm -rf "$tiny/c"
dd if=/dev/zero of="$tiny/fill" bs=4k count=$(( (64 - 16) / 4 )) status=none
full_prefetch "cannot map its stats file: No space left on device"
# room for the index and the stats file, not for the chunks: fetched into
# memory only, which warms nothing: said, exit 1.  On a node of its own: a node
# keeps the caches it opened (and the chunks they hold in memory) by path, and
# an earlier case's node may have fetched these chunks into memory already.
"$LAZYROOT" node stop >/dev/null 2>&1 || true
rm -rf "$tiny/c" "$tiny/fill"
dd if=/dev/zero of="$tiny/fill" bs=4k count=$(( (64 - 32) / 4 )) status=none
full_prefetch "chunks could not be written into cache"
