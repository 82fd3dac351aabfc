#!/bin/bash
# A real Debian 12 root filesystem (mmdebstrap minbase + python3, gcc, git),
# built from its tarball and from the extracted tree, extracted again and
# compared exactly with the tree.  The tarball is cached: it is made once per
# CI run (tests/lib/rootfs.sh).
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd mmdebstrap
workdir
store=dir:$WORK/store

tarball=$(bash "$REPO/tests/lib/rootfs.sh")
tree=$(bash "$REPO/tests/lib/rootfs.sh" --dir)

check "$LAZYROOT" build "$tree" --store "$store" --tag rootfs:dir --no-progress
check "$LAZYROOT" image extract rootfs:dir "$WORK/x-dir" --store "$store"
check compare_trees --no-atime --ignore-root-mtime "$tree" "$WORK/x-dir"
rm -rf "$WORK/x-dir"

check "$LAZYROOT" build "$tarball" --store "$store" --tag rootfs:tar --no-progress
check "$LAZYROOT" image extract rootfs:tar "$WORK/x-tar" --store "$store"
check compare_trees --no-atime --ignore-root-mtime "$tree" "$WORK/x-tar"
# gone while its blocks are not yet written back: cheap now, seconds at exit
rm -rf "$WORK/x-tar"

# the tree and its tarball hold the same files: the second build adds few chunks
n=$(find "$WORK/store/chunks" -type f | wc -l)
log "$n chunks in the store after both builds"
"$LAZYROOT" image inspect rootfs:dir --store "$store" >&2
