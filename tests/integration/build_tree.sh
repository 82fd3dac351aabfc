#!/bin/bash
# Build the generated every-entry-type tree from a directory and from tar
# archives of it (GNU, pax; plain, gzip, zstd), extract each image, and compare
# the result with the source exactly: contents, holes, types, modes, owners,
# mtimes with nanoseconds, devices, symlinks, hard links, xattrs and ACLs.
# Also: a rebuild stores nothing new and names the same index.
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd zstd gzip tar
workdir

src=$WORK/src
bash "$REPO/tests/lib/gen-tree.sh" "$src"
store=dir:$WORK/store

build_json() {  # SOURCE TAG → JSON summary on stdout
	"$LAZYROOT" build "$1" --store "$store" --tag "$2" --json
}
field() {  # JSON KEY
	sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p" <<<"$1"
}

# --- from the directory
out1=$(build_json "$src" tree:dir)
log "directory build: $out1"
check test "$(field "$out1" chunks)" -gt 0
check "$LAZYROOT" image extract tree:dir "$WORK/x-dir" --store "$store"
check compare_trees --no-atime --ignore-root-mtime "$src" "$WORK/x-dir"
# Each extract goes once compared: removed while its blocks are not yet written back, it costs
# next to nothing; at exit, written back, every file's blocks are freed (and discarded) one by one.
rm -rf "$WORK/x-dir"

# --- rebuild: same index, nothing new
out2=$(build_json "$src" tree:again)
check test "$(field "$out2" chunks_new)" = 0
check test "$(sed -n 's/.*"index":"\([0-9a-f]*\)".*/\1/p' <<<"$out1")" = \
	"$(sed -n 's/.*"index":"\([0-9a-f]*\)".*/\1/p' <<<"$out2")"

# --- from tar archives: pax keeps nanoseconds, xattrs and ACLs
tar -C "$src" --format=posix --xattrs --xattrs-include='*' --acls --sparse --numeric-owner \
	-cf "$WORK/tree.tar" .
gzip -c "$WORK/tree.tar" >"$WORK/tree.tar.gz"
zstd -q -c "$WORK/tree.tar" >"$WORK/tree.tar.zst"
for f in tree.tar tree.tar.gz tree.tar.zst; do
	check "$LAZYROOT" build "$WORK/$f" --store "$store" --tag "tree:$f" --no-progress
	check "$LAZYROOT" image extract "tree:$f" "$WORK/x-$f" --store "$store"
	check compare_trees --no-atime --ignore-root-mtime "$src" "$WORK/x-$f"
	rm -rf "$WORK/x-$f"
done

# --- GNU format: long names through 'L' records, whole-second mtimes
tar -C "$src" --format=gnu --xattrs --xattrs-include='*' --sparse --numeric-owner \
	-cf "$WORK/gnu.tar" .
mkdir "$WORK/x-gnu-tar"
tar -C "$WORK/x-gnu-tar" --xattrs --xattrs-include='*' --numeric-owner -xpf "$WORK/gnu.tar"
check "$LAZYROOT" build "$WORK/gnu.tar" --store "$store" --tag tree:gnu --no-progress
check "$LAZYROOT" image extract tree:gnu "$WORK/x-gnu" --store "$store"
check compare_trees --no-atime --ignore-root-mtime "$WORK/x-gnu-tar" "$WORK/x-gnu"
rm -rf "$WORK/x-gnu-tar" "$WORK/x-gnu"

# --- inspect and ls
check "$LAZYROOT" image inspect tree:dir --store "$store"
check bash -c "'$LAZYROOT' image inspect tree:dir --store '$store' --json | python3 -m json.tool >/dev/null"
check bash -c "'$LAZYROOT' image ls --store '$store' | grep -q '^tree:dir '"
