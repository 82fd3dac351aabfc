#!/bin/bash
# Create, in DIR, a tree that holds every kind of entry a lazyroot image can hold, with the
# same content every run:
#
#   tests/lib/gen-tree.sh DIR        (DIR must be missing or empty; needs root, else exit 77)
#
# files/     empty, tiny, multi-MiB random, > 1 MiB of repeated blocks, a duplicate of a big file
# sparse/    holes at start, middle and end; all hole; data at an unaligned offset
# many/      2,000 tiny files in one directory
# nested/    nested dirs; deep/ 64 levels; long/ a path of ~300 bytes; a 255-byte name
# names/     spaces, UTF-8, quotes, backslash, leading dash, a 255-byte UTF-8 name
# links/     symlinks: relative, absolute, dangling, to a dir, to itself, a 300-byte target
# hardlinks/ three names on one inode across two dirs, a hard-linked symlink
# dev/       char device 1,3, block device 7,200, fifo
# modes/     000, 0640, 4755, 2755, 6755, sticky 1777 dir, 2775 dir, 0555 dir, 000 dir with a child
# owners/    1000:1000, 65534:65534, 12345:54321, 3000000:3000000 (too big for ustar octal)
# xattrs/    user.* text, binary and empty, a 2,000-byte value (ext4 keeps all of an inode's
#            xattrs in one block), trusted.*, security.capability, xattrs on a dir and a symlink
# acl/       access ACLs and a default ACL on a directory
# times/     nanosecond mtimes; one before 1970 and one after 2038
#
# Times are set last, directories after their contents, so that every mtime sticks. Random
# content comes from Python's seeded generator: same bytes on every machine and run.
set -euo pipefail

if [ $# -ne 1 ]; then
	echo "usage: gen-tree.sh DIR" >&2
	exit 2
fi
if [ "$(id -u)" != 0 ]; then
	echo "gen-tree.sh: needs root (devices, owners, trusted.* xattrs); skipping" >&2
	exit 77
fi
for tool in python3 setfattr setfacl setcap mknod; do
	command -v "$tool" >/dev/null ||
		{ echo "gen-tree.sh: $tool is missing: run scripts/install-deps test" >&2; exit 1; }
done

d=$1
mkdir -p "$d"
if [ -n "$(ls -A "$d")" ]; then
	echo "gen-tree.sh: $d is not empty" >&2
	exit 1
fi
d=$(cd "$d" && pwd)
cd "$d"

# Times are set last, on the finished tree: every mtime sticks.
set_times() {
	find . -depth ! -type d -exec touch -h -d '2001-02-03 04:05:06.123456789 UTC' {} +
	touch -h -d '1969-07-20 20:17:40.500000001 UTC' times/before-1970
	touch -h -d '2100-01-01 00:00:00.999999999 UTC' times/after-2038
	touch -h -d '2011-11-11 11:11:11.000000001 UTC' links/relative dev/fifo dev/loop200
	# Access time differs from mtime on one file.
	touch -h -a -d '2005-05-05 05:05:05.555555555 UTC' files/small.txt
	find . -depth -type d -exec touch -h -d '2002-03-04 05:06:07.987654321 UTC' {} +
	chmod 0755 .
	chown 0:0 .
	touch -h -d '2003-04-05 06:07:08.246813579 UTC' .
}

# Making the tree takes seconds of many small commands; five tests use it. Made once, it is kept
# in the fixtures cache (keyed by this script) and copied with cp -a (tests/integration/fixtures.sh
# proves the copy exact), times set again on the copy (reading the cache moves its atimes).
# LAZYROOT_GEN_TREE_CACHE=off makes it afresh (fixtures.sh: it proves this script).
cache=
if [ "${LAZYROOT_GEN_TREE_CACHE:-on}" != off ]; then
	repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
	cache=${LAZYROOT_FIXTURES:-$repo/tests/.cache}
	mkdir -p "$cache"
	cache=$(cd "$cache" && pwd)/gen-tree-$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)
fi
save_cache() {
	[ -n "$cache" ] && [ ! -d "$cache" ] || return 0
	local tmp
	tmp=$(mktemp -d "$cache.XXXXXX")
	cp -a "$d/." "$tmp/" && mv -T "$tmp" "$cache" 2>/dev/null || rm -rf "$tmp"
}
if [ -n "$cache" ] && [ -d "$cache" ]; then
	cp -a "$cache/." "$d/"
	set_times
	exit 0
fi

# rnd FILE SIZE SEED: SIZE bytes from a seeded generator.
rnd() {
	python3 -c 'import random, sys
r = random.Random(int(sys.argv[3]))
with open(sys.argv[1], "wb") as f:
    left = int(sys.argv[2])
    while left:
        n = min(left, 1 << 20)
        f.write(r.randbytes(n))
        left -= n' "$1" "$2" "$3"
}

# --- regular files
mkdir files
: >files/empty
printf 'hello, lazyroot\n' >files/small.txt
printf 'x' >files/one-byte
rnd files/random-3m $((3 * 1024 * 1024 + 123)) 1
rnd files/random-5m $((5 * 1024 * 1024 + 7)) 2
cp files/random-3m files/random-3m-copy
# 4 MiB + 100 bytes of one 64 KiB block repeated: dedups inside one file.
rnd files/.block $((64 * 1024)) 3
for _ in $(seq 64); do cat files/.block; done >files/repeated-4m
head -c 100 files/.block >>files/repeated-4m
rm files/.block
python3 -c 'import sys
line = b"the same line of text, over and over again\n"
sys.stdout.buffer.write((line * (2 * 1024 * 1024 // len(line) + 1))[:2 * 1024 * 1024 + 1])' >files/repeated-text-2m
# Exactly 4 KiB and 1 MiB: boundaries.
rnd files/page-4k 4096 4
rnd files/exact-1m $((1024 * 1024)) 5

# --- sparse files (holes are 4 KiB-aligned so that every filesystem keeps them)
mkdir sparse
truncate -s 8M sparse/holes
rnd sparse/.chunk $((64 * 1024)) 6
dd if=sparse/.chunk of=sparse/holes bs=64K seek=16 conv=notrunc status=none   # at 1 MiB
dd if=sparse/.chunk of=sparse/holes bs=64K seek=64 conv=notrunc status=none   # at 4 MiB
truncate -s 3M sparse/all-hole
truncate -s $((1024 * 1024 + 3)) sparse/unaligned
dd if=sparse/.chunk of=sparse/unaligned bs=1 seek=5000 count=100 conv=notrunc status=none
# Data at the very start and the very end, hole between.
cp sparse/.chunk sparse/data-hole-data
truncate -s 2M sparse/data-hole-data
dd if=sparse/.chunk of=sparse/data-hole-data bs=64K seek=31 conv=notrunc status=none
rm sparse/.chunk

# --- many tiny files
mkdir many
python3 -c 'import sys
for i in range(2000):
    with open("many/f%04d" % i, "w") as f:
        f.write("tiny file %d\n" % i * (1 + i % 7))'

# --- nesting and long names
mkdir -p nested/a/b/c/d/e
printf 'deep\n' >nested/a/b/c/d/e/file
mkdir nested/empty-dir
p=deep
for i in $(seq 2 64); do p=$p/d$i; done
mkdir -p "$p"
printf 'bottom\n' >"$p/bottom"
seg=$(printf 'long-component-%.0s' 1 2 3 4 5)   # 75 bytes
mkdir -p "long/$seg-1/$seg-2/$seg-3"
printf 'a path longer than 100 and 255 bytes\n' >"long/$seg-1/$seg-2/$seg-3/$seg-file.txt"
name255=$(printf 'n%.0s' $(seq 251)).txt
printf '255\n' >"long/$name255"

mkdir names
printf 's\n' >'names/with space'
printf 's\n' >'names/  leading and trailing spaces  '
printf 'u\n' >'names/ünïcødé-日本語-🙂'
printf 'q\n' >"names/quote'double\"back\\slash"
printf 'd\n' >'names/-leading-dash'
printf 'h\n' >'names/.hidden'
printf 'c\n' >'names/colon:star*question?'
printf 'e\n' >"names/$(printf 'é%.0s' $(seq 127))x"     # 255 bytes of UTF-8

# --- symlinks
mkdir links
ln -s ../files/small.txt links/relative
ln -s /etc/passwd links/absolute
ln -s does/not/exist links/dangling
ln -s ../nested links/to-dir
ln -s to-dir/a/b links/through-dir
ln -s loop links/loop
ln -s relative links/chain
ln -s "$(printf 'x/%.0s' $(seq 150))target" links/long-target

# --- hard links
mkdir -p hardlinks/one hardlinks/two
printf 'one inode, three names\n' >hardlinks/one/a
ln hardlinks/one/a hardlinks/one/b
ln hardlinks/one/a hardlinks/two/c
: >hardlinks/empty-1
ln hardlinks/empty-1 hardlinks/empty-2
ln -s one/a hardlinks/symlink-1
ln -P hardlinks/symlink-1 hardlinks/symlink-2

# --- special files
mkdir dev
mknod dev/null-like c 1 3
mknod dev/loop200 b 7 200
mkfifo dev/fifo

# --- modes
mkdir modes
for m in 000 0640 0600 0444 4755 2755 6755 0711 0007; do
	printf 'mode %s\n' "$m" >"modes/f$m"
	chmod "$m" "modes/f$m"
done
mkdir modes/sticky-1777 modes/setgid-2775 modes/readonly-0555 modes/locked-0000
: >modes/readonly-0555/child
: >modes/locked-0000/child
chmod 1777 modes/sticky-1777
chmod 2775 modes/setgid-2775
chmod 0555 modes/readonly-0555
chmod 0000 modes/locked-0000

# --- owners
mkdir owners
for o in 1000:1000 65534:65534 12345:54321 3000000:3000000 0:12345; do
	printf 'owned by %s\n' "$o" >"owners/file-${o/:/-}"
	chown "$o" "owners/file-${o/:/-}"
done
mkdir owners/dir-1000
chown 1000:1000 owners/dir-1000
ln -s ../files/small.txt owners/symlink-65534
chown -h 65534:65534 owners/symlink-65534
# Owner change clears setuid bits: owner first, then mode.
printf 'setuid, not root\n' >owners/setuid-12345
chown 12345:54321 owners/setuid-12345
chmod 4750 owners/setuid-12345

# --- extended attributes
mkdir xattrs
printf 'xattrs\n' >xattrs/file
setfattr -n user.text -v 'hello xattr' xattrs/file
setfattr -n user.binary -v 0x00ff10fe7f80 xattrs/file
setfattr -n user.empty xattrs/file
setfattr -n trusted.lazyroot.test -v trusted-value xattrs/file
setfattr -n user.big -v "0x$(python3 -c 'print(bytes(i % 251 for i in range(2000)).hex())')" xattrs/file
mkdir xattrs/dir
setfattr -n user.on-dir -v dir-value xattrs/dir
ln -s file xattrs/symlink
setfattr -h -n trusted.on-symlink -v link-value xattrs/symlink
# A capability: owner and mode first, since chown drops security.capability.
printf '#!/bin/sh\n' >xattrs/ping-like
chmod 0755 xattrs/ping-like
setcap cap_net_raw+ep xattrs/ping-like
printf 'caps and setuid\n' >xattrs/cap-setuid
chmod 4755 xattrs/cap-setuid
setcap 'cap_net_bind_service,cap_sys_time=ep' xattrs/cap-setuid

# --- POSIX ACLs
mkdir -p acl/dir/sub
printf 'acl\n' >acl/file
setfacl -m u:1000:rwx,g:54321:r acl/file
setfacl -m u:1000:rx acl/dir
setfacl -d -m u:1000:rwx,g:100:rx acl/dir
# Made after the default ACL exists: inherits it.
printf 'inherited\n' >acl/dir/inherited
setfacl -d -m u:65534:r acl/dir/sub

# --- times: everything gets a nanosecond time, then a few get special ones; dirs last.
mkdir times
printf 'old\n' >times/before-1970
printf 'new\n' >times/after-2038
save_cache
set_times
