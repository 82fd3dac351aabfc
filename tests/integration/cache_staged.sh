#!/bin/bash
# `lazyroot cache prefetch` stages chunks (kept compressed, decoded at first read):
#  1. a staged prefetch leaves chunks/ab/<hex>.z objects, counted by `cache stats`;
#     `cache verify` decodes and hashes them and drops a corrupted one;
#  2. a mount with the store gone serves every byte from them, converting each read
#     chunk into a chunk file; a corrupted staged object is never served: the files
#     of that chunk get EIO, every other file reads back equal, a verify failure is
#     counted;
#  3. `--decode` writes decoded chunk files now (no staged object), a mount with the
#     store gone serves every byte;
#  4. `cache trim` removes staged objects too;
#  5. a prefetch killed with SIGKILL half-way (nginx behind the fault proxy, every
#     answer delayed so that the kill lands mid-way): a mount with the store gone
#     serves only good bytes (a file reads back equal or fails with EIO), and
#     `cache verify` finds nothing torn.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/nginx.sh"
need_root
need_cmd python3
need_faultproxy
workdir
store=$WORK/store
mnt=$WORK/mnt
mkdir -p "$mnt"
# compressible files (so that chunks are stored with zstd) and one that is not
python3 - "$WORK/src" <<'PY'
import os, random, sys
r = random.Random(5)
root = sys.argv[1]
words = [bytes(r.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(r.randint(2, 9)))
         for _ in range(3000)]
for d in ("a", "b", "c"):
    os.makedirs(os.path.join(root, d))
    for i in range(5):
        n = 300_000 + i * 90_000
        out = bytearray()
        while len(out) < n:
            out += r.choice(words) + b" "
        open(os.path.join(root, d, "f%d" % i), "wb").write(out[:n])
open(os.path.join(root, "noise"), "wb").write(r.randbytes(700_000))
PY
"$LAZYROOT" build "$WORK/src" --store "dir:$store" --tag staged:1 --no-progress >/dev/null
jget() { python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
stat_of() { jget "$("$LAZYROOT" cache stats --cache "$1" --json)" "$2"; }
nstaged() { find "$1/chunks" -name '*.z' | wc -l; }
files() { (cd "$WORK/src" && find . -type f | sort); }

# Read every file of the tree through $mnt: prints "bad" lines for files whose bytes
# differ, "eio" lines for files that fail with EIO, nothing for files equal.
read_all() {
	local f err
	while read -r f; do
		if err=$(cmp "$WORK/src/$f" "$mnt/$f" 2>&1); then
			continue
		elif grep -q "Input/output error" <<<"$err"; then
			echo "eio $f"
		else
			echo "bad $f: $err"
		fi
	done < <(files)
}

mount_gone() {  # CACHE INDEX: mount over an empty store (nothing of the image behind it)
	mkdir -p "$WORK/nostore"
	check "$LAZYROOT" mount "$2" "$mnt" --store "dir:$WORK/nostore" --cache "$1"
}
cleanup_add sh -c "mountpoint -q '$mnt' && umount '$mnt'"

# --- 1. staged prefetch, stats, verify
c1=$WORK/c1
out=$("$LAZYROOT" cache prefetch staged:1 --store "dir:$store" --cache "$c1" --json)
log "staged prefetch: $out"
index=$(jget "$out" index)
check test "$(jget "$out" mode)" = staged
check test "$(jget "$out" failed)" = 0
z=$(nstaged "$c1")
check test "$z" -gt 0
check test "$(stat_of "$c1" staged)" = "$z"
check test "$(stat_of "$c1" staged_bytes)" = "$(find "$c1/chunks" -name '*.z' -printf '%s\n' | awk '{ n += $1 } END { print n }')"
check test "$(stat_of "$c1" used)" = "$(find "$c1/chunks" -type f -printf '%s\n' | awk '{ n += $1 } END { print n }')"
# the chunk stored raw (the noise file) is a plain chunk file
check test "$(find "$c1/chunks" -type f ! -name '*.z' | wc -l)" -gt 0
check bash -c "'$LAZYROOT' cache stats --cache '$c1' | grep -q '^  staged chunks *$z '"
check bash -c "'$LAZYROOT' cache stats --cache '$c1' --prometheus | grep -q '^lazyroot_cache_staged_chunks $z\$'"
out=$("$LAZYROOT" cache verify --cache "$c1" --json)
check test "$(jget "$out" dropped)" = 0
mapfile -t zs < <(find "$c1/chunks" -name '*.z' | sort)
printf 'xyz' | dd of="${zs[0]}" bs=1 seek=40 conv=notrunc status=none
out=$("$LAZYROOT" cache verify --cache "$c1" --json)
log "verify: $out"
check test "$(jget "$out" dropped)" = 1
check_not test -e "${zs[0]}"
check test "$(stat_of "$c1" staged)" = $((z - 1))

# --- 2. mount with the store gone; one more staged object corrupted
bad=${zs[1]}
printf 'xyz' | dd of="$bad" bs=1 seek=60 conv=notrunc status=none
failures0=$(stat_of "$c1" verify_failures)
mount_gone "$c1" "$index"
res=$(read_all)
log "reads with two staged objects gone bad: $(grep -c . <<<"$res") failing files"
check_not grep -q '^bad' <<<"$res"
check grep -q '^eio' <<<"$res"
check test "$(grep -c '^eio' <<<"$res")" -lt "$(files | wc -l)"
check "$LAZYROOT" umount "$mnt" --cache "$c1"
check_not test -e "$bad"
check test "$(stat_of "$c1" verify_failures)" = $((failures0 + 1))
check test "$(stat_of "$c1" staged_used)" -gt 0
check test "$(stat_of "$c1" misses)" = 0
check test "$(nstaged "$c1")" = 0      # every good one read is a chunk file now

# --- 3. --decode, then a clean staged prefetch served whole; 4. trim
c2=$WORK/c2
out=$("$LAZYROOT" cache prefetch staged:1 --decode --store "dir:$store" --cache "$c2" --json)
check test "$(jget "$out" mode)" = decoded
check test "$(nstaged "$c2")" = 0
check test "$(stat_of "$c2" staged)" = 0
mount_gone "$c2" "$index"
check test -z "$(read_all)"
check "$LAZYROOT" umount "$mnt" --cache "$c2"
check test "$(stat_of "$c2" misses)" = 0

c3=$WORK/c3
check "$LAZYROOT" cache prefetch staged:1 --store "dir:$store" --cache "$c3" --no-progress
mount_gone "$c3" "$index"
check test -z "$(read_all)"
check diff -r "$WORK/src" "$mnt"
check "$LAZYROOT" umount "$mnt" --cache "$c3"
check test "$(stat_of "$c3" misses)" = 0
# chunks already cached (decoded) are not staged again
check "$LAZYROOT" cache prefetch staged:1 --store "dir:$store" --cache "$c2" --no-progress
check test "$(nstaged "$c2")" = 0
c4=$WORK/c4
check "$LAZYROOT" cache prefetch staged:1 --store "dir:$store" --cache "$c4" --no-progress
check test "$(nstaged "$c4")" -gt 0
check "$LAZYROOT" cache trim --to 0 --cache "$c4"
check test "$(nstaged "$c4")" = 0
check test "$(stat_of "$c4" staged)" = 0
check test "$(stat_of "$c4" used)" = 0

# --- 5. SIGKILL mid-way (needs nginx; the rest above does not)
kill_midway() {
	nginx_start "$WORK/www"
	faultproxy_start "$NGINX_PORT"
	check "$LAZYROOT" build "$WORK/src" --store "$NGINX_URL" --tag staged:1 --no-progress
	fault "delay 150"
	c5=$WORK/c5
	"$LAZYROOT" cache prefetch staged:1 --store "$PROXY_URL" --cache "$c5" --no-progress \
		2>/dev/null &
	pid=$!
	# readiness: the first staged object is there (bounded: 20 s)
	for ((i = 0; i < 2000; i++)); do
		[ -d "$c5/chunks" ] && [ "$(nstaged "$c5")" -gt 0 ] && break
		_pause 0.01
	done
	kill -9 "$pid"
	rc=0
	wait "$pid" || rc=$?
	check test "$rc" = 137
	fault ""
	log "killed with $(nstaged "$c5") staged objects on disk"
	index5=$("$LAZYROOT" image ls --store "$NGINX_URL" | awk '$1 == "staged:1" { print $2 }')
	mount_gone "$c5" "$index5"
	res=$(read_all)
	check_not grep -q '^bad' <<<"$res"
	check "$LAZYROOT" umount "$mnt" --cache "$c5"
	out=$("$LAZYROOT" cache verify --cache "$c5" --json)
	log "verify after the kill: $out"
	check test "$(jget "$out" dropped)" = 0
}
if command -v nginx >/dev/null; then
	kill_midway
else
	log "nginx is missing (scripts/install-deps test): the SIGKILL case is not run"
fi
