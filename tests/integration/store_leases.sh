#!/bin/bash
# Reader leases and clock steps (store/GC.md):
#  1. a node's mount of an image whose tag is removed, then `store gc --grace 0` (both phases
#     at once): the mount, whose cache is empty, reads every file right afterwards; `image rm`
#     says a node still mounts the image; gc's report counts what the lease held and deletes
#     nothing of it;
#  2. once the mount is unmounted its lease is gone, and gc collects the image;
#  3. a node killed with SIGKILL holding a mount: its lease stops being renewed, lapses, and
#     gc then collects the image (and not before);
#  4. a forward step of the store's clock while a build runs: the builder found chunks present
#     (HEAD) and stored others, then a collector that counts its lease lapsed deletes them;
#     the build must not publish a tag naming them.  The step is made as a collector sees it: the lease's
#     mtime aged by a day on nginx's disk (a store's clock that jumps ahead makes every
#     object written before the jump look that much older).
. "$(dirname "$0")/../lib/common.sh"
. "$REPO/tests/lib/nginx.sh"
need_root
need_cmd fusermount3 nginx python3 curl
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir
jget() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

store=$WORK/store
S=dir:$store
export LAZYROOT_METRICS=off LAZYROOT_CACHE=$WORK/cache LAZYROOT_STORE=$S
# short reader leases: a killed node's lapse within seconds (part 3)
export LAZYROOT_LEASE_TTL=3

mk_tree() {  # DIR SEED: 24 files of random bytes, 3.6 MB
	mkdir -p "$1/d"
	for i in $(seq 24); do head -c 150000 /dev/urandom >"$1/d/f$i"; done
	echo "$2" >"$1/version"
}
mk_tree "$WORK/t1" one
mk_tree "$WORK/t2" two
mk_tree "$WORK/t3" three

unmount_all() {
	local m
	for m in "$WORK"/m*; do
		mountpoint -q "$m" 2>/dev/null && umount -l "$m"
	done
	return 0
}
cleanup_add unmount_all

leases() { ls "$store/leases" 2>/dev/null | grep "^read-" || true; }
# wait (at most 10 s) until the store holds N reader leases
wait_leases() {
	local i
	for i in $(seq 500); do
		[ "$(leases | wc -l)" = "$1" ] && return 0
		_pause 0.02
	done
	log "reader leases: $(leases | tr '\n' ' ') (want $1)"
	return 1
}
chunks_in_store() { { find "$store/chunks" "$store/aside" -type f 2>/dev/null || true; } | wc -l; }

# --- 1. a mount held across image rm and gc --grace 0
"$LAZYROOT" build "$WORK/t1" --tag app:1 --no-progress >/dev/null
"$LAZYROOT" build "$WORK/t3" --tag keep:1 --no-progress >/dev/null
hex=$(cat "$store/tags/app:1")
base=$(chunks_in_store)
mkdir -p "$WORK/m1"
check "$LAZYROOT" mount app:1 "$WORK/m1"
check wait_leases 1
check grep -q -- "-$hex\$" <<<"$(leases)"
err=$("$LAZYROOT" image rm app:1 2>&1)
log "image rm: $err"
check test ! -e "$store/tags/app:1"
check grep -q "a node still mounts its index $hex" <<<"$err"
out=$("$LAZYROOT" store gc --grace 0 --json)
log "gc with the mount: $out"
check test "$(jget phase_one <<<"$out")" = True
check test "$(jget phase_two <<<"$out")" = True
check test "$(jget readers <<<"$out")" = 1
check test "$(jget held_indexes <<<"$out")" = 1
check test "$(jget held <<<"$out")" -ge 25       # the index, its chunks (24 files at least)
check test "$(jget deleted <<<"$out")" = 0
check test "$(chunks_in_store)" = "$base"
# the mount's cache is empty: every read goes to the store
check compare_trees --no-atime --ignore-root-mtime "$WORK/t1" "$WORK/m1"
human=$("$LAZYROOT" store gc --grace 0)
log "gc again: $human"
check grep -q "^held .*1 image(s) no tag names, mounted by a node" <<<"$human"

# --- 2. unmounted: the lease goes, and gc collects the image
check "$LAZYROOT" umount "$WORK/m1"
check wait_leases 0
out=$("$LAZYROOT" store gc --grace 0 --json)
log "gc after umount: $out"
check test "$(jget phase_two <<<"$out")" = True
check test "$(jget readers <<<"$out")" = 0
check test "$(jget deleted <<<"$out")" -ge 25
check test ! -e "$store/indexes/$hex"
rm -rf "$WORK/x"
check "$LAZYROOT" image extract keep:1 "$WORK/x"
check compare_trees --no-atime --ignore-root-mtime "$WORK/t3" "$WORK/x"

# --- 3. a node killed with SIGKILL: its lease lapses, then gc collects
"$LAZYROOT" build "$WORK/t2" --tag app:2 --no-progress >/dev/null
hex=$(cat "$store/tags/app:2")
mkdir -p "$WORK/m2"
check "$LAZYROOT" mount app:2 "$WORK/m2"
check wait_leases 1
check cmp "$WORK/t2/version" "$WORK/m2/version"
"$LAZYROOT" image rm app:2 2>/dev/null
worker=$(node_pid pid)
holder=$(node_pid holder_pid)
kill -9 "$holder" "$worker"
while kill -0 "$worker" 2>/dev/null || kill -0 "$holder" 2>/dev/null; do _pause 0.02; done
umount -l "$WORK/m2" 2>/dev/null || true
rm -f "$WORK/node.sock"
out=$("$LAZYROOT" store gc --grace 0 --json)
log "gc while the dead node's lease lives: $out"
check test "$(jget deleted <<<"$out")" = 0
check test -e "$store/indexes/$hex"
# the lease lapses 3 s (+1 s: whole seconds) after its last renewal by the store's clock
for i in $(seq 100); do
	out=$("$LAZYROOT" store gc --grace 0 --json)
	[ "$(jget deleted <<<"$out")" != 0 ] && break
	_pause 0.1
done
log "gc once the lease lapsed: $out"
check test "$(jget readers <<<"$out")" = 0
check test "$(jget deleted <<<"$out")" -ge 25
check test ! -e "$store/indexes/$hex"

# --- 4. a clock step under a build (nginx: its access log shows the builder's HEADs)
nginx_start "$WORK/ng" || exit $?
N=$NGINX_URL
head -c 3000000 /dev/urandom >"$WORK/shared.bin"
mkdir -p "$WORK/ta" "$WORK/tb/a" "$WORK/tb/z"
cp "$WORK/shared.bin" "$WORK/ta/shared.bin"
cp "$WORK/shared.bin" "$WORK/tb/a/shared.bin"
# enough after the shared file that the build is still at work when it is stopped
head -c 300000000 /dev/urandom >"$WORK/tb/z/big.bin"
check "$LAZYROOT" build "$WORK/ta" --store "$N" --tag old:1 --no-progress
check "$LAZYROOT" image rm old:1 --store "$N"
mapfile -t shared < <(cd "$WORK/ng/chunks" && find . -type f -printf '%f\n')
log "chunks of the shared file: ${#shared[@]}"
: >"$NGINX_DIR/access.log"
"$LAZYROOT" build "$WORK/tb" --store "$N" --tag new:1 --no-progress --threads 2 \
	>"$WORK/build.out" 2>"$WORK/build.err" &
bp=$!
# every shared chunk found present by the builder (its HEAD answered 200)
heads_done() {
	local c
	for c in "${shared[@]}"; do
		grep -q "\"HEAD /chunks/${c:0:2}/$c HTTP/1.1\" 200" "$NGINX_DIR/access.log" || return 1
	done
}
for i in $(seq 1000); do heads_done && break; kill -0 "$bp" 2>/dev/null || break; _pause 0.01; done
kill -STOP "$bp"
check heads_done
check kill -0 "$bp"
lease=$(ls "$WORK/ng/leases" | grep '^build-')
check test -n "$lease"
touch -d '-1 day' "$WORK/ng/leases/$lease"
out=$("$LAZYROOT" store gc --grace 0 --json --store "$N")
log "gc across the step: $out"
check test "$(jget phase_two <<<"$out")" = True
check test "$(jget deleted <<<"$out")" -ge "${#shared[@]}"
kill -CONT "$bp"
rc=0; wait "$bp" || rc=$?
log "build after the step: exit $rc: $(cat "$WORK/build.err")"
check test "$rc" -ne 0
check test "$(wc -l <"$WORK/build.err")" = 1
check grep -q "chunks/.* is gone" "$WORK/build.err"
check_not curl -sf -o /dev/null "$N/tags/new:1"
# built again, the image is whole
check "$LAZYROOT" build "$WORK/tb" --store "$N" --tag new:1 --no-progress
check "$LAZYROOT" store verify --store "$N"
