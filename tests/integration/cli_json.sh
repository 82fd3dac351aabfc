#!/bin/bash
# --json prints data on the commands that had none, and image extract draws a progress bar on a
# terminal, as build and image copy do:
#  1. config --json (and with --defaults): one object, the values the config file would hold;
#  2. mount --json: image, index, mountpoint, socket; umount --json: mountpoint, node, in_use;
#  3. image extract --json: index, dir, entries, bytes (the tree extracted is the source's);
#     on a terminal a bar ending "entries N/N", none with --no-progress or --json;
#  4. image rm --json: the tags removed and their index, also when another REF fails (exit 1);
#  5. node upgrade --json: old and new worker pids; node stop --json: stopped true, then
#     (no node) stopped false, exit 0.
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd fusermount3 python3 script
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir
export LAZYROOT_STORE=dir:$WORK/store LAZYROOT_CACHE=$WORK/cache LAZYROOT_IMAGES=$WORK/images

# get JSON KEY...: the members (str() of each, space-separated) of the JSON object on stdin
get() {
	python3 -c 'import json, sys; d = json.load(sys.stdin); print(*[d[k] for k in sys.argv[1:]])' "$@"
}

mkdir -p "$WORK/src/d" "$WORK/mnt"
echo hello >"$WORK/src/a"
seq 1 100000 >"$WORK/src/d/b"
ln -s a "$WORK/src/l"
"$LAZYROOT" build "$WORK/src" --tag j:1 --no-progress >/dev/null
"$LAZYROOT" build "$WORK/src" --tag j:2 --no-progress >/dev/null
hex=$(cat "$WORK/store/tags/j:1")

# --- 1. config
check test "$("$LAZYROOT" config --json | get store)" = "dir:$WORK/store"
check test "$("$LAZYROOT" config --json --defaults | get store)" = "dir:/var/lib/lazyroot/store"

# --- 2. mount, umount
out=$("$LAZYROOT" mount j:1 "$WORK/mnt" --json)
cleanup_add umount -lq "$WORK/mnt"
check test "$(get image index mountpoint socket <<<"$out")" = "j:1 $hex $WORK/mnt $LAZYROOT_SOCKET"
check grep -qx hello "$WORK/mnt/a"
out=$("$LAZYROOT" umount "$WORK/mnt" --json)
check test "$(get mountpoint node in_use <<<"$out")" = "$WORK/mnt True False"
check_not mountpoint -q "$WORK/mnt"

# --- 3. extract
out=$("$LAZYROOT" image extract j:1 "$WORK/x" --json 2>"$WORK/err")
check test "$(get index dir entries <<<"$out")" = "$hex $WORK/x 5"
check test "$(get bytes <<<"$out")" = "$(($(stat -c %s "$WORK/src/a") + $(stat -c %s "$WORK/src/d/b")))"
check test ! -s "$WORK/err"
check compare_trees --no-atime "$WORK/src" "$WORK/x"
# a terminal on stderr (script(1) gives the command one; stdout goes to a file)
script -qec "$LAZYROOT image extract j:1 $WORK/y >$WORK/y.out" "$WORK/tty" >/dev/null
check grep -q 'entries 5/5' "$WORK/tty"
check test ! -s "$WORK/y.out"
script -qec "$LAZYROOT image extract j:1 $WORK/z --no-progress" "$WORK/tty2" >/dev/null
check_not grep -q 'entries' "$WORK/tty2"
check compare_trees --no-atime "$WORK/src" "$WORK/z"

# --- 4. rm
rc=0
out=$("$LAZYROOT" image rm j:2 nope:1 --json 2>"$WORK/err") || rc=$?
check test "$rc" = 1
check grep -q "image 'nope:1': no such tag" "$WORK/err"
check test "$(python3 -c 'import json, sys; print(json.load(sys.stdin)["removed"])' <<<"$out")" = "[{'tag': 'j:2', 'index': '$hex'}]"
check test ! -e "$WORK/store/tags/j:2"

# --- 5. node upgrade, node stop
check "$LAZYROOT" mount j:1 "$WORK/mnt"
old=$(node_pid)
out=$("$LAZYROOT" node upgrade --json)
check test "$(get socket old_pid <<<"$out")" = "$LAZYROOT_SOCKET $old"
new=$(get pid <<<"$out")
check test "$new" != "$old"
check test "$(node_pid)" = "$new"
holder=$(node_pid holder_pid)
out=$("$LAZYROOT" node stop --json)
check test "$(get socket stopped holder_pid <<<"$out")" = "$LAZYROOT_SOCKET True $holder"
check_not mountpoint -q "$WORK/mnt"
out=$("$LAZYROOT" node stop --json 2>/dev/null)
check test "$(get stopped holder_pid <<<"$out")" = "False None"
