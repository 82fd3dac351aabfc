#!/bin/bash
# The store's life on every backend — dir:, nginx WebDAV and Ceph RGW (S3), all real servers
# started here (RGW once, for every S3 case):
#  1. image rm, then store gc --grace 0 on a store nobody else writes: what only the removed
#     tag reached is gone (chunks, index), what the other tag reaches stays and extracts
#     exactly; a second gc finds nothing; --dry-run counts and changes nothing;
#  2. store verify: ok on a whole store; a deleted chunk and a flipped chunk are each reported
#     under their tag, with a non-zero exit (the flipped one with --data 100);
#  3. image copy between backends: into an empty target every chunk is sent (and the image's
#     access profile goes along), into one that holds the image's older version only the new
#     chunks (PUTs counted on nginx); the copy extracts exactly; a target that cannot be written fails with one line and no tag;
#  4. the race: 4 builders push images sharing most of their chunks while a loop of
#     `store gc --grace 0` runs and a mount reads; afterwards every tag's image extracts
#     exactly, and after a last collection nothing a tag does not reach is left;
#  5. a reader of a tag pushed while its chunks were aside (a builder that found them
#     present just before phase one moved them): mount and extract read every byte from
#     aside, phase two brings them back once the builder's lease ends;
#  6. gc killed with SIGKILL at random points while builders push: a rerun completes and
#     nothing reachable is lost.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/nginx.sh"
. "$(dirname "$0")/../lib/rgw.sh"
need_root
need_cmd nginx curl python3 fusermount3
workdir
mnt=$WORK/mnt
mkdir -p "$mnt"
cache=$WORK/cache

unmount_it() {  # [CACHE]: the mount's own (default $cache)
	mountpoint -q "$mnt" || return 0
	"$LAZYROOT" umount --cache "${1:-$cache}" "$mnt" 2>/dev/null || umount -l "$mnt"
}
cleanup_add unmount_it
one_line() { test "$(wc -l <<<"$1")" -eq 1; }
jget() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

# A family of trees sharing most of their bytes: base, and variants adding files.
mk_tree() {  # DIR SEED
	mkdir -p "$1/usr/lib" "$1/etc" "$1/var/$2"
	cp "$WORK/shared.bin" "$1/usr/lib/big.so"
	for i in $(seq 20); do echo "config $i" >"$1/etc/f$i"; done
	head -c 400000 "/dev/urandom" >"$1/var/$2/new.bin"
	echo "$2" >"$1/etc/version"
}
head -c 4000000 /dev/urandom >"$WORK/shared.bin"
for v in a b c d e f g h; do mk_tree "$WORK/t$v" "$v"; done

chunk_count() {  # STORE-KIND PATH-OR-URL: chunk objects in the store (not aside)
	case $1 in
	dir|nginx) find "$2/chunks" -type f 2>/dev/null | wc -l ;;
	s3) "$LAZYROOT" store gc --dry-run --json --store "$2" | jget live ;;
	esac
}

run_suite() {  # KIND STORE-URL DATA-DIR (the files behind it, for dir: and nginx)
	local kind=$1 s=$2 data=$3 out rc err n
	log "=== $kind: $s"
	# --- 1. rm and gc
	check "$LAZYROOT" build "$WORK/ta" --store "$s" --tag app:1 --no-progress
	check "$LAZYROOT" build "$WORK/tb" --store "$s" --tag app:2 --no-progress
	out=$("$LAZYROOT" store gc --dry-run --json --store "$s")
	check test "$(jget unreachable <<<"$out")" = 0
	check "$LAZYROOT" image rm app:1 --store "$s"
	check_not "$LAZYROOT" image rm app:1 --store "$s"
	out=$("$LAZYROOT" store gc --dry-run --grace 0 --json --store "$s")
	log "dry run: $out"
	n=$(jget unreachable <<<"$out")
	check test "$n" -ge 2              # app:1's index and its own chunk(s)
	check test "$(jget moved <<<"$out")" = "$n"
	out=$("$LAZYROOT" store gc --grace 0 --json --store "$s")
	log "gc: $out"
	check test "$(jget phase_one <<<"$out")" = True
	check test "$(jget phase_two <<<"$out")" = True
	check test "$(jget deleted <<<"$out")" = "$n"
	out=$("$LAZYROOT" store gc --grace 0 --json --store "$s")
	check test "$(jget unreachable <<<"$out")" = 0
	check test "$(jget deleted <<<"$out")" = 0
	rm -rf "$WORK/x"
	check "$LAZYROOT" image extract app:2 "$WORK/x" --store "$s"
	check compare_trees --no-atime --ignore-root-mtime "$WORK/tb" "$WORK/x"
	# a grace period keeps young objects: nothing moves
	check "$LAZYROOT" build "$WORK/tc" --store "$s" --tag app:3 --no-progress
	check "$LAZYROOT" image rm app:3 --store "$s"
	out=$("$LAZYROOT" store gc --grace 1h --json --store "$s")
	check test "$(jget moved <<<"$out")" = 0
	check test "$(jget unreachable <<<"$out")" -ge 2
	# the waiting collection ends (its grace cut short); a new one takes app:3's objects
	out=$("$LAZYROOT" store gc --grace 0 --json --store "$s")
	check test "$(jget phase_two <<<"$out")" = True
	check test "$(jget phase_one <<<"$out")" = False
	out=$("$LAZYROOT" store gc --grace 0 --json --store "$s")
	check test "$(jget deleted <<<"$out")" -ge 2
	out=$("$LAZYROOT" store gc --dry-run --grace 0 --json --store "$s")
	check test "$(jget unreachable <<<"$out")" = 0

	# --- 2. verify
	check "$LAZYROOT" store verify --data 100 --store "$s"
	if [ "$kind" != s3 ]; then
		local victim
		victim=$(find "$data/chunks" -type f | head -n 1)
		cp "$victim" "$WORK/victim"
		rm "$victim"
		rc=0; out=$("$LAZYROOT" store verify --store "$s" 2>"$WORK/err") || rc=$?
		log "verify, a chunk deleted: exit $rc: $out"
		check test "$rc" -ne 0
		check grep -q "^app:2 .*PROBLEM" <<<"$out"
		check grep -q "missing chunks/$(basename "$victim")" <<<"$out"
		check one_line "$(cat "$WORK/err")"
		cp "$WORK/victim" "$victim"
		python3 - "$victim" <<'EOF'
import sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
b[len(b) // 2] ^= 0x10
open(p, 'wb').write(bytes(b))
EOF
		check "$LAZYROOT" store verify --store "$s"        # sizes right: only data shows it
		rc=0; out=$("$LAZYROOT" store verify --data 100 --json --store "$s" 2>/dev/null) || rc=$?
		log "verify --data 100, a chunk flipped: exit $rc: $out"
		check test "$rc" -ne 0
		check grep -q "corrupt chunks/$(basename "$victim")" <<<"$out"
		cp "$WORK/victim" "$victim"
		check "$LAZYROOT" store verify --data 100 --store "$s"
	fi
}

copy_suite() {  # FROM TO TO-KIND
	local from=$1 to=$2 out
	log "=== copy $from -> $to"
	check "$LAZYROOT" build "$WORK/td" --store "$from" --tag copy:1 --no-progress
	check "$LAZYROOT" build "$WORK/te" --store "$from" --tag copy:2 --no-progress
	# an access profile of copy:1 in the source goes along
	rm -rf "$cache-prof"
	check "$LAZYROOT" mount copy:1 "$mnt" --store "$from" --cache "$cache-prof" \
		--record-profile "$WORK/prof"
	check cmp "$WORK/td/usr/lib/big.so" "$mnt/usr/lib/big.so"
	check "$LAZYROOT" umount --cache "$cache-prof" "$mnt"
	check "$LAZYROOT" profile push copy:1 "$WORK/prof" --store "$from"
	out=$("$LAZYROOT" image copy copy:1 --from "$from" --to "$to" --json)
	log "first copy: $out"
	check test "$(jget profile <<<"$out")" = True
	check "$LAZYROOT" profile show copy:1 --store "$to"
	check test "$(jget present <<<"$out")" = 0
	check test "$(jget sent <<<"$out")" = "$(jget chunks <<<"$out")"
	[ "$3" = nginx ] && : >"$NGINX_DIR/access.log"
	out=$("$LAZYROOT" image copy copy:2 --from "$from" --to "$to" --json)
	log "second copy: $out"
	check test "$(jget present <<<"$out")" -ge 1
	check test "$(jget sent <<<"$out")" -ge 1
	check test "$(jget sent <<<"$out")" -lt "$(jget chunks <<<"$out")"
	if [ "$3" = nginx ]; then
		check test "$(grep -c '"PUT /c/chunks/' "$NGINX_DIR/access.log")" = "$(jget sent <<<"$out")"
	fi
	rm -rf "$WORK/x"
	check "$LAZYROOT" image extract copy:2 "$WORK/x" --store "$to"
	check compare_trees --no-atime --ignore-root-mtime "$WORK/te" "$WORK/x"
}

# The race: builders and a mount against a loop of collections.
race_suite() {  # KIND STORE-URL
	local kind=$1 s=$2 pids=() i v out stop=$WORK/stop-$1
	log "=== race on $kind"
	for v in a b c d; do
		check "$LAZYROOT" build "$WORK/t$v" --store "$s" --tag "race/$v:0" --no-progress
	done
	check "$LAZYROOT" build "$WORK/ta" --store "$s" --tag race/keep:0 --no-progress
	check "$LAZYROOT" mount race/keep:0 "$mnt" --store "$s" --cache "$cache-$kind"
	rm -f "$stop"
	( while [ ! -e "$stop" ]; do
		"$LAZYROOT" store gc --grace 0 --lease-ttl 6 --store "$s" >/dev/null 2>>"$WORK/gc-$kind.err" || true
	done ) &
	local gcpid=$!
	for v in a b c d; do
		( for i in 1 2 3 4; do
			# each round pushes the image again and removes its tag (but the last): its
			# chunks are garbage while the next round's dedup checks find them, or not
			"$LAZYROOT" build "$WORK/t$v" --store "$s" --tag "race/$v:$i" --no-progress \
				>/dev/null || exit 1
			[ "$i" = 4 ] || "$LAZYROOT" image rm "race/$v:$i" --store "$s" || exit 1
			"$LAZYROOT" image rm "race/$v:0" --store "$s" 2>/dev/null || true
			"$LAZYROOT" build "$WORK/t$(tr abcd efgh <<<"$v")" --store "$s" \
				--tag "race/x$v:$i" --no-progress >/dev/null || exit 1
			[ "$i" = 4 ] || "$LAZYROOT" image rm "race/x$v:$i" --store "$s" || exit 1
		done ) &
		pids+=($!)
	done
	for i in 1 2 3; do check compare_trees --no-atime --ignore-root-mtime "$WORK/ta" "$mnt"; done
	for p in "${pids[@]}"; do check wait "$p"; done
	touch "$stop"
	wait "$gcpid"
	check compare_trees --no-atime --ignore-root-mtime "$WORK/ta" "$mnt"
	check "$LAZYROOT" umount --cache "$cache-$kind" "$mnt"
	for v in a b c d; do
		for t in "race/$v:4" "race/x$v:4"; do
			rm -rf "$WORK/x"
			check "$LAZYROOT" image extract "$t" "$WORK/x" --store "$s"
			[ "${t#race/x}" = "$t" ] && src=$WORK/t$v || src=$WORK/t$(tr abcd efgh <<<"$v")
			check compare_trees --no-atime --ignore-root-mtime "$src" "$WORK/x"
		done
	done
	check "$LAZYROOT" store verify --store "$s"
	# every chunk no tag reaches goes after the second phase
	"$LAZYROOT" store gc --grace 0 --wait --store "$s" >/dev/null
	out=$("$LAZYROOT" store gc --grace 0 --wait --json --store "$s")
	log "last gc: $out"
	check test "$(jget unreachable <<<"$out")" = 0
	out=$("$LAZYROOT" store gc --dry-run --json --store "$s")
	check test "$(jget deleted <<<"$out")" = 0      # nothing left aside
}

# SIGKILL of gc at random points, builders pushing; a rerun completes, nothing reachable lost.
kill_suite() {  # KIND STORE-URL
	local kind=$1 s=$2 i out
	log "=== gc killed at random points on $kind"
	for i in 1 2 3 4 5 6; do
		"$LAZYROOT" build "$WORK/t$(sed -n "${i}p" <<<$'e\nf\ng\nh\na\nb')" --store "$s" \
			--tag "kill:$i" --no-progress >/dev/null &
		local bp=$!
		"$LAZYROOT" image rm "kill:$((i - 1))" --store "$s" 2>/dev/null || true
		timeout -s KILL "0.0$((RANDOM % 9 + 1))" "$LAZYROOT" store gc --grace 0 --lease-ttl 2 \
			--store "$s" >/dev/null 2>&1 || true
		check wait "$bp"
	done
	# the killed collector's lease lapses (2 s, the shortest --lease-ttl takes: it only has to
	# outlive the 10-90 ms before the kill); then a rerun finishes (a collector killed
	# meanwhile holds its lease until it lapses: "at work" until then)
	for i in $(seq 40); do
		out=$("$LAZYROOT" store gc --grace 0 --wait --lease-ttl 4 --json --store "$s" 2>&1) && break
		grep -q "another collector is at work" <<<"$out" || break
		_pause 0.5
	done
	log "rerun: $out"
	check test "$(jget phase_two <<<"$out")" = True
	rm -rf "$WORK/x"
	check "$LAZYROOT" image extract kill:6 "$WORK/x" --store "$s"
	check compare_trees --no-atime --ignore-root-mtime "$WORK/tb" "$WORK/x"
	check "$LAZYROOT" store verify --data 100 --store "$s"
}

# A reader of a tag pushed while its chunks are aside: a builder (its lease written here, as
# `lazyroot build` writes it) found every chunk present, then phase one moved them aside, then
# it wrote its tag.  A mount with an empty cache and an extract read every byte from aside;
# phase two, once the lease ends, brings them back.
aside_suite() {  # KIND STORE-URL PUT-CMD (a command that writes KEY from stdin)
	local kind=$1 s=$2 put=$3 hex out
	log "=== reading across a collection on $kind"
	check "$LAZYROOT" build "$WORK/tg" --store "$s" --tag across:1 --no-progress
	hex=$("$LAZYROOT" image ls --json --store "$s" |
		python3 -c 'import json,sys; print([t["index"] for t in json.load(sys.stdin) if t["ref"]=="across:1"][0])')
	check "$LAZYROOT" image rm across:1 --store "$s"
	echo '{}' | $put "leases/build-300-0000000000000001"
	out=$("$LAZYROOT" store gc --grace 0 --json --store "$s")
	log "phase one with a lease: $out"
	check test "$(jget waiting <<<"$out")" = True
	check test "$(jget moved <<<"$out")" -ge 2
	echo "$hex" | $put "tags/across:1"           # the builder publishes
	rm -rf "$cache-across"
	check "$LAZYROOT" mount across:1 "$mnt" --store "$s" --cache "$cache-across"
	check compare_trees --no-atime --ignore-root-mtime "$WORK/tg" "$mnt"
	check "$LAZYROOT" umount --cache "$cache-across" "$mnt"
	rm -rf "$WORK/x"
	check "$LAZYROOT" image extract across:1 "$WORK/x" --store "$s"
	check compare_trees --no-atime --ignore-root-mtime "$WORK/tg" "$WORK/x"
	out=$("$LAZYROOT" store gc --grace 0 --json --store "$s")
	check test "$(jget waiting <<<"$out")" = True       # the lease still lives
	$put "leases/build-300-0000000000000001" delete
	out=$("$LAZYROOT" store gc --grace 0 --json --store "$s")
	log "phase two: $out"
	check test "$(jget phase_two <<<"$out")" = True
	check test "$(jget restored <<<"$out")" -ge 2
	check "$LAZYROOT" store verify --data 100 --store "$s"
	out=$("$LAZYROOT" store gc --dry-run --json --store "$s")
	check test "$(jget deleted <<<"$out")" = 0
}
put_dir() {  # KEY [delete]
	if [ "${2:-}" = delete ]; then rm -f "$WORK/dirstore/$1"; return; fi
	mkdir -p "$(dirname "$WORK/dirstore/$1")"
	cat >"$WORK/dirstore/$1"
}
put_nginx() {
	if [ "${2:-}" = delete ]; then curl -sf -X DELETE "$NGINX_URL/$1"; return; fi
	curl -sf -X PUT --data-binary @- "$NGINX_URL/$1"
}
put_s3() {
	local k=${1/:/%3A}
	if [ "${2:-}" = delete ]; then
		s3_curl "$RGW_ACCESS_KEY" "$RGW_SECRET_KEY" -f -X DELETE "$RGW_ENDPOINT/$RGW_BUCKET/life/$k"
		return
	fi
	s3_curl "$RGW_ACCESS_KEY" "$RGW_SECRET_KEY" -f -X PUT --data-binary @- \
		"$RGW_ENDPOINT/$RGW_BUCKET/life/$k"
}

# ---- dir:
run_suite dir "dir:$WORK/dirstore" "$WORK/dirstore"
aside_suite dir "dir:$WORK/dirstore" put_dir
race_suite dir "dir:$WORK/dirstore"
kill_suite dir "dir:$WORK/dirstore"

# ---- nginx WebDAV
nginx_start "$WORK/ngdata"
run_suite nginx "$NGINX_URL" "$WORK/ngdata"
copy_suite "dir:$WORK/dirstore" "$NGINX_URL/c" nginx
aside_suite nginx "$NGINX_URL" put_nginx
race_suite nginx "$NGINX_URL"
kill_suite nginx "$NGINX_URL"

# a target that cannot be written: a read-only bind mount
mkdir -p "$WORK/ro"
mount --bind "$WORK/ro" "$WORK/ro" && mount -o remount,bind,ro "$WORK/ro"
cleanup_add umount "$WORK/ro"
rc=0; err=$("$LAZYROOT" image copy copy:1 --from "dir:$WORK/dirstore" --to "dir:$WORK/ro" 2>&1) || rc=$?
log "copy to a read-only store: exit $rc: $err"
check test "$rc" -ne 0
check one_line "$err"
check grep -q "$WORK/ro" <<<"$err"
check test ! -e "$WORK/ro/tags/copy:1"

# ---- Ceph RGW (S3)
rc=0
rgw_start || rc=$?
if [ "$rc" = 77 ]; then
	log "Ceph is missing: S3 cases skipped"
	exit 0
fi
[ "$rc" = 0 ] || fail "RGW did not start"
s3=s3://$RGW_BUCKET/life
# conditional creation, as the protocol relies on it: a second If-None-Match: * PUT is refused
check s3_curl "$RGW_ACCESS_KEY" "$RGW_SECRET_KEY" -f -X PUT -H 'If-None-Match: *' --data-binary x \
	"$RGW_ENDPOINT/$RGW_BUCKET/cond/once"
check_not s3_curl "$RGW_ACCESS_KEY" "$RGW_SECRET_KEY" -f -X PUT -H 'If-None-Match: *' \
	--data-binary y "$RGW_ENDPOINT/$RGW_BUCKET/cond/once"
run_suite s3 "$s3" ""
copy_suite "dir:$WORK/dirstore" "s3://$RGW_BUCKET/copy" s3
aside_suite s3 "$s3" put_s3
race_suite s3 "$s3"
rc=0
err=$(AWS_SECRET_ACCESS_KEY=wrong "$LAZYROOT" image copy copy:1 --from "dir:$WORK/dirstore" \
	--to "s3://$RGW_BUCKET/denied" 2>&1) || rc=$?
log "copy to S3 with a wrong key: exit $rc: $err"
check test "$rc" -ne 0
check one_line "$err"
check_not s3_curl "$RGW_ACCESS_KEY" "$RGW_SECRET_KEY" -f -o /dev/null -I \
	"$RGW_ENDPOINT/$RGW_BUCKET/denied/tags/copy%3A1"
