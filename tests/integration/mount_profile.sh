#!/bin/bash
# Access profiles through real mounts, on a dir: store and on nginx (127.0.0.1, started here):
#  1. a mount with --record-profile, warm or cold, writes the chunks in first-read order
#     when it is unmounted; `profile show` counts them; `profile merge` keeps both traces;
#  2. pushed beside the image, the profile is followed by a mount with an empty cache: after
#     the first file the reader opens, the chunks its trace reads next are fetched
#     (profile_fetches) and the files after it are served without a fetch of their own
#     (profile_hits), every byte right, nothing fetched outside the trace;
#     with the traces of two workloads that open the same file first, the reader of one
#     gets nothing fetched that only the other reads;
#  3. --no-profile: nothing fetched ahead;
#  4. a profile of another index and a corrupt one in the store: one warning line each on
#     the mount's stderr, nothing fetched ahead, every byte right;
#  5. bad input: push of a profile for another image, merge of a non-profile: one line,
#     non-zero exit, nothing written;
#  6. the same over http: (nginx), pushed through the store's PUT;
#  7. `cache prefetch --profiled` warms exactly the profile's chunks; a plain prefetch all;
#     on a cache of staged chunks, the profile decodes its chunks ahead of the reader.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/nginx.sh"
need_root
need_cmd python3 fusermount3 nginx cmp
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir
mnt=$WORK/mnt
mkdir -p "$mnt"
store=dir:$WORK/store

# 40 files of 384 KiB, each its own chunks; read in an order unlike the build's
python3 - "$WORK/src" "$WORK/other" <<'PY'
import os, random, sys
r = random.Random(11)
for root, n in ((sys.argv[1], 40), (sys.argv[2], 4)):
    os.makedirs(os.path.join(root, "lib"))
    for i in range(n):
        open(os.path.join(root, "lib", "f%02d.so" % i), "wb").write(r.randbytes(384 << 10))
PY
order="f31 f07 f22 f13 f38 f02 f19 f26 f11 f35 f04 f29 f17 f09 f33 f24"
check "$LAZYROOT" build "$WORK/src" --store "$store" --tag prof:1 --no-progress
check "$LAZYROOT" build "$WORK/other" --store "$store" --tag other:1 --no-progress
hex=$("$LAZYROOT" image inspect prof:1 --store "$store" --json |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["index"])')
check test ${#hex} = 32

unmount_it() {
	mountpoint -q "$mnt" || return 0
	"$LAZYROOT" umount --cache "$1" "$mnt" 2>/dev/null || umount -l "$mnt"
}
cleanup_add unmount_it "$WORK/cache"
# KEY... of cache $CACHE's stats, once nothing is in flight and at least $WANT fetches (0 when
# unset) have ended; waits up to 30 s.  "Nothing in flight" alone does not say that a profile's
# prefetching is over: a prefetch starts as the one before it ends, and the gauge is read
# apart from the counters.  A caller that expects the profile to fetch says how many fetches
# make the whole of it.
stat_of() {
	local i
	for i in $(seq 1500); do
		out=$("$LAZYROOT" cache stats --cache "$CACHE" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
d["fetches"] = sum(b["count"] for b in d["fetch_latency_us"])
if d["inflight"] or d["fetches"] < int(sys.argv[1]):
    sys.exit(1)
print(*(d[k] for k in sys.argv[2:]))' "${WANT:-0}" "$@") && { echo "$out"; return; }
		_pause 0.02
	done
	echo "fetches still in flight, or fewer than ${WANT:-0}, after 30 s" >&2
}
read_order() {  # cmp the files of $order through the mount; prints the bad ones
	local f
	for f in $order; do cmp -s "$WORK/src/lib/$f.so" "$mnt/lib/$f.so" || echo "$f"; done
}

# --- 1. recording: cold, then warm (the node cache already holds every chunk)
CACHE=$WORK/cache
check "$LAZYROOT" mount prof:1 "$mnt" --store "$store" --cache "$CACHE" --record-profile "$WORK/p1"
check test -z "$(read_order)"
check "$LAZYROOT" umount --cache "$CACHE" "$mnt"
check test -s "$WORK/p1"
# a relative FILE is the caller's, not the daemon's (which runs from /)
check env -C "$WORK" "$LAZYROOT" mount prof:1 "$mnt" --store "$store" --cache "$CACHE" \
	--record-profile p2
check test -z "$(read_order)"
check "$LAZYROOT" umount --cache "$CACHE" "$mnt"
check test -s "$WORK/p2"
check cmp "$WORK/p1" "$WORK/p2"
show=$("$LAZYROOT" profile show "$WORK/p1" --store "$store" --json)
log "recorded: $show"
chunks=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["traces"][0]["chunks"])' "$show")
bytes=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["traces"][0]["bytes"])' "$show")
check test "$chunks" -ge 16
check test "$bytes" -ge $((16 * 384 << 10))
check test "$bytes" -lt $((24 * 384 << 10))
check "$LAZYROOT" profile merge "$WORK/p12" "$WORK/p1" "$WORK/p2"
check test "$("$LAZYROOT" profile show "$WORK/p12" --json |
	python3 -c 'import json,sys; print(len(json.load(sys.stdin)["traces"]))')" = 2

# --- 5. bad input
check_status 1 "$LAZYROOT" profile push other:1 "$WORK/p1" --store "$store"
check test ! -e "$WORK/store/profiles"
echo "not a profile" >"$WORK/junk"
check_status 1 "$LAZYROOT" profile merge "$WORK/out" "$WORK/p1" "$WORK/junk"
check test ! -e "$WORK/out"
err=$("$LAZYROOT" profile show "$WORK/junk" 2>&1 >/dev/null || true)
check test "$(printf '%s\n' "$err" | wc -l)" = 1
log "bad profile: $err"

# --- 2. followed by a mount with an empty cache
check "$LAZYROOT" profile push prof:1 "$WORK/p1" --store "$store"
check test -s "$WORK/store/profiles/$hex"
# one cold mount, the first $lead files of $order read alone (1 unless set), then the rest;
# sets PF0 and F0 (counters after the first files: once $want fetches have ended, when set)
# and the counters after all
follow() {  # URL EXTRA-MOUNT-OPTIONS...
	local url=$1 first rest n
	shift
	CACHE=$WORK/cache-$RANDOM
	cleanup_add unmount_it "$CACHE"
	check sh -c '"$@" 2>"$0"' "$WORK/mount.err" \
		"$LAZYROOT" mount prof:1 "$mnt" --store "$url" --cache "$CACHE" "$@"
	rest=$order
	for ((n = 0; n < ${lead:-1}; n++)); do
		first=${rest%% *}
		rest=${rest#* }
		check cmp "$WORK/src/lib/$first.so" "$mnt/lib/$first.so"
	done
	read -r PF0 F0 <<<"$(WANT=${want:-0} stat_of profile_fetches fetches)"
	check test -z "$(order=$rest read_order)"
	read -r PF PH MISS F RAW <<<"$(stat_of profile_fetches profile_hits misses fetches fetched_raw_bytes)"
	check "$LAZYROOT" umount --cache "$CACHE" "$mnt"
	log "$url $*: after the first file $F0 fetches ($PF0 for the profile); in all $F fetches ($PF for the profile, $PH reads found them), $MISS misses, $RAW bytes"
}
# The trace is shorter than the profile's window (FS_PROFILE_WINDOW, 64 chunks) and budget:
# once its first file is read, the profile fetches all of it, and the rest of the reader is
# counted after that, not while the profile still fetches (a reader running ahead of it
# fetches for itself, and only finds in flight what the profile started)
check test "$chunks" -lt 64
want=$chunks follow "$store"
check test "$PF0" -gt 0
check test "$PH" -gt 0
# the files after the first: no reader fetched a chunk of them itself
check test $((F - PF)) = $((F0 - PF0))
check test "$RAW" -le "$bytes"
check test ! -s "$WORK/mount.err"

# two workloads that share their first file: following the merged profile while the
# second runs fetches none of the chunks only the first reads
orderb="f31 f01 f03 f05 f08 f10 f12 f14 f16 f18"
CACHE=$WORK/cache-b
check "$LAZYROOT" mount prof:1 "$mnt" --store "$store" --cache "$CACHE" --record-profile "$WORK/pb"
check test -z "$(order=$orderb read_order)"
check "$LAZYROOT" umount --cache "$CACHE" "$mnt"
read -r chunksb bytesb <<<"$("$LAZYROOT" profile show "$WORK/pb" --store "$store" --json |
	python3 -c 'import json,sys; t=json.load(sys.stdin)["traces"][0]; print(t["chunks"], t["bytes"])')"
check "$LAZYROOT" profile merge "$WORK/pab" "$WORK/p1" "$WORK/pb"
check "$LAZYROOT" profile push prof:1 "$WORK/pab" --store "$store"
# f31 leaves the two traces tied; f01 makes the second lead, which is then fetched whole
lead=2 want=$chunksb order=$orderb follow "$store"
check test "$PF" -gt 0
check test "$PH" -gt 0
check test $((F - PF)) = $((F0 - PF0))
check test "$RAW" = "$bytesb"
check "$LAZYROOT" profile push prof:1 "$WORK/p1" --store "$store"

# --- 3. --no-profile
follow "$store" --no-profile
check test "$PF" = 0
check test "$F" -gt "$F0"

# --- 4. a profile of another index, then a corrupt one
check "$LAZYROOT" mount other:1 "$mnt" --store "$store" --cache "$WORK/cache-o" --record-profile "$WORK/po"
check cat "$mnt/lib/f01.so" >/dev/null
check "$LAZYROOT" umount --cache "$WORK/cache-o" "$mnt"
cp "$WORK/po" "$WORK/store/profiles/$hex"
follow "$store"
check test "$PF" = 0
check test "$(grep -c profile "$WORK/mount.err")" = 1
log "other index: $(cat "$WORK/mount.err")"
head -c 100 /dev/urandom >"$WORK/store/profiles/$hex"
follow "$store"
check test "$PF" = 0
check test "$(grep -c profile "$WORK/mount.err")" = 1
log "corrupt: $(cat "$WORK/mount.err")"

# --- 6. http: push through nginx's PUT, follow over HTTP
nginx_start "$WORK/data"
check "$LAZYROOT" build "$WORK/src" --store "$NGINX_URL" --tag prof:1 --no-progress
check "$LAZYROOT" profile push prof:1 "$WORK/p1" --store "$NGINX_URL"
check test "$("$LAZYROOT" profile show prof:1 --store "$NGINX_URL" --json |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["traces"][0]["chunks"])')" = "$chunks"
want=$chunks follow "$NGINX_URL"
check test "$PF0" -gt 0
check test "$PH" -gt 0
check test $((F - PF)) = $((F0 - PF0))
check test ! -s "$WORK/mount.err"

# --- 7. cache prefetch: the profiled chunks alone, then everything (profile first)
out=$("$LAZYROOT" cache prefetch prof:1 --profiled --store "$NGINX_URL" --cache "$WORK/cache-pf" \
	--no-progress --json)
log "prefetch --profiled: $out"
check test "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["chunks"])' "$out")" = "$chunks"
check test "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["bytes"])' "$out")" = "$bytes"
out=$("$LAZYROOT" cache prefetch prof:1 --store "$NGINX_URL" --cache "$WORK/cache-pf" --no-progress --json)
check test "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["chunks"])' "$out")" = 81
check_status 1 "$LAZYROOT" cache prefetch other:1 --profiled --store "$store" --cache "$WORK/cache-pf" \
	--no-progress
# a node warmed with staged chunks (compressible files: random ones are kept raw, never
# staged): the profile decodes its chunks ahead of the reader, which turns their staged
# objects into chunk files; the rest stay staged
python3 - "$WORK/zsrc" <<'PY'
import os, random, sys
r = random.Random(5)
os.makedirs(os.path.join(sys.argv[1], "lib"))
for i in range(24):
    words = [b"w%05d" % r.randrange(100000) for _ in range(60000)]
    open(os.path.join(sys.argv[1], "lib", "z%02d.txt" % i), "wb").write(b" ".join(words))
PY
check "$LAZYROOT" build "$WORK/zsrc" --store "$NGINX_URL" --tag z:1 --no-progress
zorder="z05 z17 z02 z11 z20 z08"
zread() { local f; for f in $zorder; do cmp -s "$WORK/zsrc/lib/$f.txt" "$mnt/lib/$f.txt" || echo "$f"; done; }
CACHE=$WORK/cache-z1
check "$LAZYROOT" mount z:1 "$mnt" --store "$NGINX_URL" --cache "$CACHE" --record-profile "$WORK/pz"
check test -z "$(zread)"
check "$LAZYROOT" umount --cache "$CACHE" "$mnt"
check "$LAZYROOT" profile push z:1 "$WORK/pz" --store "$NGINX_URL"
zchunks=$("$LAZYROOT" profile show "$WORK/pz" --json |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["traces"][0]["chunks"])')
CACHE=$WORK/cache-z2
check "$LAZYROOT" cache prefetch z:1 --store "$NGINX_URL" --cache "$CACHE" --no-progress
all=$(stat_of staged)
check test "$all" -gt "$zchunks"
check "$LAZYROOT" mount z:1 "$mnt" --store "$NGINX_URL" --cache "$CACHE"
first=${zorder%% *}
check cmp "$WORK/zsrc/lib/$first.txt" "$mnt/lib/$first.txt"
# the profile decodes on its own pace: the first file may be back before its last chunks are
# (up to 30 s: on a loaded node the decoder thread may wait long for a CPU)
for _ in $(seq 300); do
	read -r staged pf <<<"$(stat_of staged profile_fetches)"
	[ "$staged" -gt $((all - zchunks)) ] || break
	_pause 0.1
done
log "staged cache: $all staged, $staged left after the first file ($zchunks in the trace)"
check test "$staged" = $((all - zchunks))
check test "$pf" = 0
check test -z "$(zread)"
check "$LAZYROOT" umount --cache "$CACHE" "$mnt"
