#!/bin/bash
# Build a real multi-layer OCI image with umoci, plus the tree it should unpack to:
#
#   tests/lib/oci.sh OUT        (OUT must be missing or empty; needs root, else exit 77)
#
# Makes, in OUT:
#   layout/      an OCI image layout holding the image under the tag "test"
#   expected/    the root filesystem after applying every layer (umoci unpack), for treecmp
#   docker.tar   the same image as a `docker save` archive (skopeo), named lazyroot-test:latest
#   oci.tar      the same image as an OCI archive (skopeo), tag "test"
#   layers.txt   one line per layer, bottom first: its blob digest and what it is for
# and prints the path of layout/ on stdout.
#
# The layers, bottom first:
#   1 (umoci repack)   a base tree: /etc, /bin with a setuid tool, /usr/share with a 2 MiB file,
#                      /data/old and /data/replaced with files, /gone-dir, owners, a char device
#   2 (umoci repack)   deletions, which umoci writes as plain whiteouts: etc/.wh.remove-me,
#                      .wh.gone-dir, data/old/.wh.a, data/old/.wh.sub; a changed file; a new file
#   3 (raw add-layer)  a hand-made tar with an opaque directory: data/replaced/.wh..wh..opq plus
#                      new contents; gone-dir comes back as a regular file; a whiteout of a file
#                      in a dir that layer 3 itself does not otherwise touch
#   4 (umoci repack)   hard links (three names), symlinks (relative, absolute, dangling, to a
#                      dir), xattrs (user.*, trusted.*, security.capability), a fifo
# The config sets entrypoint, cmd, env, working dir, user, a label and an exposed port.
#
# Every layer's entries are checked with `tar -tzf` on its blob before the script succeeds, and
# the expected tree is checked for what the whiteouts must have removed.
set -euo pipefail

if [ $# -ne 1 ]; then
	echo "usage: oci.sh OUT" >&2
	exit 2
fi
if [ "$(id -u)" != 0 ]; then
	echo "oci.sh: needs root (owners, devices, trusted.* xattrs); skipping" >&2
	exit 77
fi
for tool in umoci skopeo python3 setfattr setcap; do
	command -v "$tool" >/dev/null ||
		{ echo "oci.sh: $tool is missing: run scripts/install-deps test" >&2; exit 1; }
done

out=$1
mkdir -p "$out"
if [ -n "$(ls -A "$out")" ]; then
	echo "oci.sh: $out is not empty" >&2
	exit 1
fi
out=$(cd "$out" && pwd)
layout=$out/layout
img=$layout:test
scratch=$(mktemp -d "${TMPDIR:-/tmp}/lazyroot-oci.XXXXXX")
trap 'rm -rf --one-file-system "$scratch"' EXIT

die() {
	echo "oci.sh: $*" >&2
	exit 1
}

# Fixed times everywhere, so that layer blobs come out the same on every run.
when='2020-02-02T02:02:02Z'
settimes() {
	find "$1" -depth -exec touch -h -d '2020-02-02 02:02:02 UTC' {} +
}

# unpack DIR: a fresh bundle of the current image, quietly.
unpack() {
	umoci unpack --image "$img" "$1" >/dev/null
}

repack() {
	settimes "$1/rootfs"
	umoci repack --history.created "$when" --history.created_by "oci.sh: $2" --image "$img" "$1"
}

# Blob path of layer N (1 = bottom) of the tagged image.
layer_blob() {
	python3 - "$layout" "$1" <<'EOF'
import json, sys
layout, n = sys.argv[1], int(sys.argv[2])
def blob(d):
    return "%s/blobs/%s" % (layout, d.replace(":", "/"))
index = json.load(open(layout + "/index.json"))
m = [m for m in index["manifests"]
     if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == "test"][0]
print(blob(json.load(open(blob(m["digest"])))["layers"][n - 1]["digest"]))
EOF
}

# expect_entries N ENTRY...: layer N's tar holds each ENTRY (a path as tar -t prints it).
expect_entries() {
	local n=$1 list e; shift
	list=$(tar -tzf "$(layer_blob "$n")")
	for e in "$@"; do
		grep -qxF -- "$e" <<<"$list" || die "layer $n lacks '$e'; it holds: $(tr '\n' ' ' <<<"$list")"
	done
}

rnd() {
	python3 -c 'import random, sys
sys.stdout.buffer.write(random.Random(int(sys.argv[2])).randbytes(int(sys.argv[1])))' "$1" "$2"
}

umoci init --layout "$layout"
umoci new --image "$img"
umoci config --image "$img" --created "$when" --author lazyroot-tests --architecture amd64 --os linux \
	--no-history

# --- layer 1: the base tree
b=$scratch/b1
unpack "$b"
r=$b/rootfs
mkdir -p "$r"/{etc,bin,usr/share/doc/demo,data/old/sub,data/replaced/deeper,gone-dir,var/empty,dev}
printf 'NAME="lazyroot test image"\n' >"$r/etc/os-release"
printf 'hello from layer 1\n' >"$r/etc/hello"
printf 'deleted in layer 2\n' >"$r/etc/remove-me"
printf '#!/bin/sh\necho tool\n' >"$r/bin/tool"
chmod 4755 "$r/bin/tool"
rnd $((2 * 1024 * 1024)) 11 >"$r/usr/share/doc/demo/big"
printf 'readme\n' >"$r/usr/share/doc/demo/README"
for f in a b sub/c; do printf 'old %s\n' "$f" >"$r/data/old/$f"; done
for f in one two deeper/three; do printf 'replaced %s\n' "$f" >"$r/data/replaced/$f"; done
printf 'x\n' >"$r/gone-dir/x"
printf 'y\n' >"$r/gone-dir/y"
printf 'owned\n' >"$r/data/owned"
chown 1000:1000 "$r/data/owned"
chown 65534:65534 "$r/var/empty"
chmod 1777 "$r/var/empty"
mknod "$r/dev/null" c 1 3
repack "$b" "layer 1: base"

# --- layer 2: deletions (umoci writes .wh.NAME), a change, an addition
b=$scratch/b2
unpack "$b"
r=$b/rootfs
rm "$r/etc/remove-me" "$r/data/old/a"
rm -r "$r/gone-dir" "$r/data/old/sub"
printf 'hello from layer 2\n' >"$r/etc/hello"
printf 'new in layer 2\n' >"$r/data/old/new"
repack "$b" "layer 2: whiteouts"

# --- layer 3: a hand-made tar with an opaque directory
s=$scratch/l3
mkdir -p "$s/data/replaced" "$s/usr/share/doc/demo"
: >"$s/data/replaced/.wh..wh..opq"
printf 'fresh after the opaque whiteout\n' >"$s/data/replaced/fresh"
printf 'gone-dir is a file now\n' >"$s/gone-dir"
: >"$s/usr/share/doc/demo/.wh.README"
chmod 0600 "$s/data/replaced/.wh..wh..opq" "$s/usr/share/doc/demo/.wh.README"
settimes "$s"
# Parents are listed before children; the opaque marker comes first in its directory, as
# docker writes it.
(cd "$s" && tar --format=pax --pax-option=delete=atime,delete=ctime --numeric-owner \
	--owner=0 --group=0 --no-recursion -cf "$scratch/layer3.tar" \
	data data/replaced data/replaced/.wh..wh..opq data/replaced/fresh gone-dir \
	usr usr/share usr/share/doc usr/share/doc/demo usr/share/doc/demo/.wh.README)
umoci raw add-layer --history.created "$when" --history.created_by "oci.sh: layer 3: opaque" \
	--image "$img" "$scratch/layer3.tar"

# --- layer 4: hard links, symlinks, xattrs, a fifo
b=$scratch/b4
unpack "$b"
r=$b/rootfs
mkdir -p "$r/links" "$r/opt/app"
printf 'one inode, three names\n' >"$r/links/target"
ln "$r/links/target" "$r/links/hard-2"
ln "$r/links/target" "$r/opt/app/hard-3"
ln -s target "$r/links/relative"
ln -s /etc/os-release "$r/links/absolute"
ln -s does/not/exist "$r/links/dangling"
ln -s ../usr/share "$r/links/to-dir"
printf 'xattrs\n' >"$r/opt/app/xattrs"
setfattr -n user.text -v 'hello xattr' "$r/opt/app/xattrs"
setfattr -n user.binary -v 0x00ff10fe "$r/opt/app/xattrs"
setfattr -n trusted.lazyroot -v t "$r/opt/app/xattrs"
printf '#!/bin/sh\n' >"$r/opt/app/ping"
chmod 0755 "$r/opt/app/ping"
setcap cap_net_raw+ep "$r/opt/app/ping"
mkfifo "$r/opt/app/fifo"
repack "$b" "layer 4: links and xattrs"

umoci config --image "$img" --created "$when" --history.created "$when" \
	--history.created_by "oci.sh: config" \
	--config.entrypoint /bin/tool --config.cmd=--version \
	--config.env PATH=/usr/local/bin:/usr/bin:/bin --config.env LAZYROOT_TEST=1 \
	--config.workingdir /data --config.user 1000:1000 \
	--config.label org.example.fixture=lazyroot --config.exposedports 8080/tcp
umoci gc --layout "$layout"

# --- check what the layers really hold
expect_entries 1 bin/tool data/old/sub/c data/replaced/deeper/three dev/null gone-dir/x
expect_entries 2 etc/.wh.remove-me .wh.gone-dir data/old/.wh.a data/old/.wh.sub data/old/new \
	etc/hello
expect_entries 3 data/replaced/.wh..wh..opq data/replaced/fresh gone-dir \
	usr/share/doc/demo/.wh.README
expect_entries 4 links/target links/hard-2 opt/app/hard-3 links/relative opt/app/xattrs \
	opt/app/ping opt/app/fifo
# (listings are read whole first: `grep -q` on a pipe would end tar early and,
# under pipefail, fail the check at random)
listing=$(tar -tvzf "$(layer_blob 4)")
grep -q '^h.* links/hard-2 link to links/target$' <<<"$listing" ||
	grep -q '^h.* links/target link to ' <<<"$listing" ||
	die "layer 4 holds no hard link"
zcat "$(layer_blob 4)" >"$scratch/layer4.tar"
grep -qa 'SCHILY.xattr.security.capability' "$scratch/layer4.tar" ||
	die "layer 4 lost security.capability"
{
	for n in 1 2 3 4; do
		desc=$(sed -n "$n"p <<<'base tree
umoci whiteouts (.wh.NAME) for deleted files and dirs, a changed and a new file
hand-made: opaque dir data/replaced (.wh..wh..opq), gone-dir back as a file, .wh.README
hard links, symlinks, xattrs incl. security.capability, a fifo')
		echo "$(basename "$(layer_blob $n)") $desc"
	done
} >"$out/layers.txt"

# --- the expected tree: every layer applied
umoci unpack --image "$img" "$scratch/final" >/dev/null
mv "$scratch/final/rootfs" "$out/expected"
e=$out/expected
for gone in etc/remove-me data/old/a data/old/sub data/replaced/one data/replaced/deeper \
	usr/share/doc/demo/README; do
	if [ -e "$e/$gone" ] || [ -L "$e/$gone" ]; then
		die "expected tree still holds $gone"
	fi
done
[ -f "$e/gone-dir" ] || die "expected tree lacks gone-dir as a file"
[ "$(ls -A "$e/data/replaced")" = fresh ] || die "opaque dir data/replaced holds: $(ls -A "$e/data/replaced")"
[ "$(cat "$e/etc/hello")" = 'hello from layer 2' ] || die "etc/hello is not layer 2's"
[ "$(stat -c %i "$e/links/target")" = "$(stat -c %i "$e/opt/app/hard-3")" ] ||
	die "hard links were not kept"
[ -z "$(find "$e" -name '.wh.*')" ] || die "whiteout files left in the expected tree"

# --- the same image in the other transports
skopeo --insecure-policy copy --quiet "oci:$img" "docker-archive:$out/docker.tar:lazyroot-test:latest"
skopeo --insecure-policy copy --quiet "oci:$img" "oci-archive:$out/oci.tar:test"

echo "$layout"
