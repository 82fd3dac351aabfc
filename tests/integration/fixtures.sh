#!/bin/bash
# Prove the test fixtures before any test leans on them: gen-tree.sh makes a tree, cp -a and a
# tar round trip copy it, treecmp finds the copies identical; then one thing at a time is changed
# in a copy (a content byte, a mode, an mtime's nanoseconds, an xattr, a hard link, a hole, an
# owner, ...) and treecmp must report exactly that one difference, and none once it is undone.
# Last, oci.sh builds its image (it checks its own layers) and the archives are looked at.
# shellcheck source=../lib/common.sh
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd tar setfattr setfacl setcap fallocate umoci skopeo
workdir
[ -x "$TREECMP" ] || make -s -C "$REPO" "${TREECMP#"$REPO"/}" >&2 ||
	fail "cannot build treecmp"

A=$WORK/a B=$WORK/b C=$WORK/c
LAZYROOT_GEN_TREE_CACHE=off "$REPO"/tests/lib/gen-tree.sh "$A"
# The other tests get a copy of the tree gen-tree.sh keeps in the fixtures cache: the same tree,
# atimes too (made here when missing).
"$REPO"/tests/lib/gen-tree.sh "$C"
check compare_trees "$A" "$C"
rm -rf "$C"

# tar does not restore atimes, and reading a symlink updates its atime: no atimes here.
tar --format=posix --xattrs --xattrs-include='*' --acls --sparse --numeric-owner \
	--atime-preserve=system -C "$A" -cf "$WORK/a.tar" .
mkdir "$C"
tar --xattrs --xattrs-include='*' --acls --numeric-owner --warning=no-timestamp \
	-xpf "$WORK/a.tar" -C "$C"
check compare_trees --no-atime "$A" "$C"
rm -rf "$C" "$WORK/a.tar"

# cp -a copies atimes, but reading A moves A's: set both trees' atimes alike, then compare
# everything.
cp -a "$A" "$B"
check compare_trees --no-atime "$A" "$B"
find "$A" "$B" -exec touch -h -a -d '2020-01-01 00:00:00.5 UTC' {} +
check compare_trees "$A" "$B"
check compare_trees "$A" "$B"      # treecmp itself left every atime alone

treecmp_quiet() { "$TREECMP" "$@" 2>/dev/null; }
check_status 2 treecmp_quiet "$A"
check_status 2 treecmp_quiet "$A" "$WORK/missing"
check_status 2 treecmp_quiet --bogus "$A" "$B"

# expect DESC REGEX: treecmp A B must exit 1 with exactly one line, matching REGEX.
expect() {
	local out rc=0
	out=$("$TREECMP" "$A" "$B") || rc=$?
	if [ "$rc" = 1 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -qE -- "$2" <<<"$out"; then
		_check_result 1 "treecmp catches $1: $out"
	else
		_check_result 0 "treecmp catches $1 (exit $rc, want 1 and one line matching '$2'):"
		sed 's/^/  treecmp: /' <<<"$out" | head -n 20 >&2
	fi
}

# times PATH...: copy atime and mtime from A to B for each path (undoes a side effect).
times() {
	local p
	for p in "$@"; do touch -h -r "$A/$p" "$B/$p"; done
}

f=files/random-5m
printf 'X' | dd of="$B/$f" bs=1 seek=3000001 conv=notrunc status=none
times $f
expect "a content byte" "^$f: contents differ at byte 3000001: "
dd if="$A/$f" of="$B/$f" bs=1 skip=3000001 seek=3000001 count=1 conv=notrunc status=none
times $f

truncate -s +1 "$B/files/small.txt"
times files/small.txt
expect "a size" "^files/small.txt: size: 16 vs 17$"
truncate -s -1 "$B/files/small.txt"
times files/small.txt

chmod 0644 "$B/modes/f0640"
expect "a mode" "^modes/f0640: mode: 0640 vs 0644$"
chmod 0640 "$B/modes/f0640"

chmod u-s "$B/modes/f4755"
expect "a setuid bit" "^modes/f4755: mode: 4755 vs 0755$"
chmod 4755 "$B/modes/f4755"

chmod -t "$B/modes/sticky-1777"
expect "a sticky bit" "^modes/sticky-1777: mode: 1777 vs 0777$"
chmod 1777 "$B/modes/sticky-1777"

touch -h -m -d '2001-02-03 04:05:06.123456788 UTC' "$B/nested/a/b/c/d/e/file"
expect "an mtime's last nanosecond" "^nested/a/b/c/d/e/file: mtime: 981173106.123456789 vs 981173106.123456788$"
times nested/a/b/c/d/e/file

touch -h -m -d '2002-03-04 05:06:07.987654320 UTC' "$B/nested/empty-dir"
expect "a directory's mtime" "^nested/empty-dir: mtime: .*987654321 vs .*987654320$"
times nested/empty-dir

touch -h -m -d '2011-11-11 11:11:11.000000002 UTC' "$B/links/relative"
expect "a symlink's mtime" "^links/relative: mtime: "
times links/relative

touch -h -a -d '2020-01-01 00:00:00.6 UTC' "$B/files/empty"
expect "an atime" "^files/empty: atime: "
times files/empty

setfattr -n user.text -v 'hellO xattr' "$B/xattrs/file"
expect "an xattr value" '^xattrs/file: xattr user.text: "hello xattr" vs "hellO xattr"$'
setfattr -n user.text -v 'hello xattr' "$B/xattrs/file"

setfattr -x user.empty "$B/xattrs/file"
expect "a missing xattr" "^xattrs/file: xattr user.empty: present vs absent$"
setfattr -n user.empty "$B/xattrs/file"

setfattr -h -n trusted.on-symlink -v link-valuf "$B/xattrs/symlink"
expect "a symlink's xattr" "^xattrs/symlink: xattr trusted.on-symlink: "
setfattr -h -n trusted.on-symlink -v link-value "$B/xattrs/symlink"

setcap cap_net_admin+ep "$B/xattrs/ping-like"
expect "a capability" "^xattrs/ping-like: xattr security.capability: 0x"
setcap cap_net_raw+ep "$B/xattrs/ping-like"

setfacl -m g:54321:rw- "$B/acl/file"
expect "an ACL entry" "^acl/file: xattr system.posix_acl_access: 0x"
setfacl -m g:54321:r-- "$B/acl/file"

setfacl -d -m u:1000:r-x "$B/acl/dir"
expect "a default ACL entry" "^acl/dir: xattr system.posix_acl_default: 0x"
setfacl -d -m u:1000:rwx "$B/acl/dir"

cp -a "$B/hardlinks/two/c" "$B/hardlinks/two/c.new"
mv "$B/hardlinks/two/c.new" "$B/hardlinks/two/c"
times hardlinks/two hardlinks/one/a hardlinks/two/c     # cp read the inode: atime moved
expect "a broken hard link" "^hardlinks/two/c: hard link: same inode as hardlinks/one/a vs same inode as hardlinks/two/c$"
ln -f "$B/hardlinks/one/a" "$B/hardlinks/two/c"
times hardlinks/two

# A hard link added where A has two separate files with the same content.
ln -f "$B/files/random-3m" "$B/files/random-3m-copy"
times files files/random-3m
expect "a new hard link" "^files/random-3m-copy: hard link: same inode as files/random-3m-copy vs same inode as files/random-3m$"
cp -a "$A/files/random-3m-copy" "$B/files/random-3m-copy.new"
mv "$B/files/random-3m-copy.new" "$B/files/random-3m-copy"
times files files/random-3m-copy

dd if=/dev/zero of="$B/sparse/holes" bs=64K count=1 conv=notrunc status=none
times sparse/holes
expect "a filled hole" "^sparse/holes: hole map differs: "
fallocate -p -o 0 -l 65536 "$B/sparse/holes"
times sparse/holes

chown -h 1001 "$B/owners/file-1000-1000"
expect "a uid" "^owners/file-1000-1000: uid: 1000 vs 1001$"
chown -h 1000 "$B/owners/file-1000-1000"

chown -h :65533 "$B/owners/symlink-65534"
expect "a symlink's gid" "^owners/symlink-65534: gid: 65534 vs 65533$"
chown -h :65534 "$B/owners/symlink-65534"

ln -sfn ../files/SMALL.txt "$B/links/relative"
times links links/relative
expect "a symlink target" "^links/relative: symlink target: \.\./files/small\.txt vs \.\./files/SMALL\.txt$"
ln -sfn ../files/small.txt "$B/links/relative"
times links links/relative

rm "$B/dev/null-like"
mknod "$B/dev/null-like" c 1 5
times dev dev/null-like
expect "an rdev" "^dev/null-like: rdev: 1,3 vs 1,5$"
rm "$B/dev/null-like"
mknod "$B/dev/null-like" c 1 3
times dev dev/null-like

rm "$B/dev/fifo"
: >"$B/dev/fifo"
chmod 0644 "$B/dev/fifo"
times dev dev/fifo
expect "a type" "^dev/fifo: type: fifo vs regular file$"
rm "$B/dev/fifo"
mkfifo -m 0644 "$B/dev/fifo"
times dev dev/fifo

: >"$B/many/extra"
times many
expect "an extra entry" "^many/extra: entry: absent vs present \(regular file\)$"
rm "$B/many/extra"
times many

mv "$B/names/with space" "$WORK/saved"
times names
expect "a missing entry" "^names/with space: entry: present \(regular file\) vs absent$"
mv "$WORK/saved" "$B/names/with space"
times names

touch -h -m -d '2003-04-05 06:07:08.246813578 UTC' "$B"
expect "the root's mtime" "^\.: mtime: "
check "$TREECMP" --ignore-root-mtime "$A" "$B"
times .

# Each expect above wants exactly one line, so an undo that failed shows up in the next one;
# after the last, nothing at all may differ.
check compare_trees "$A" "$B"

# The OCI fixture: four layers in the layout and in the docker archive, and an expected tree.
O=$WORK/oci
check "$REPO"/tests/lib/oci.sh "$O"
check test -d "$O/expected/opt/app"
layers_in_docker_archive() {
	tar -xOf "$O/docker.tar" manifest.json |
		python3 -c 'import json, sys; print(len(json.load(sys.stdin)[0]["Layers"]))'
}
check test "$(layers_in_docker_archive)" = 4
check test "$(tar -tf "$O/oci.tar" | grep -c '^blobs/sha256/.')" -ge 6
