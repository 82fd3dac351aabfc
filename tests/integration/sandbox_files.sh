#!/bin/bash
# Hostile file transfers (sandbox/files.c) in a confined process.  tests/helpers/sbfiles runs
# each transfer as sandbox_enter()'s fn would, confined the closest way it can by itself (a
# mount namespace, chroot into a scratch tree, an unprivileged uid of this test's id range
# that owns the tree's /sb, no_new_privs, no capabilities): the root and the uid are what the
# transfers rely on, as in a sandbox.  Each hostile case gets an error, one line naming the
# path, a non-zero exit, and nothing outside the target changes: the whole scratch tree but
# the target is listed with modes, sizes and SHA-256 of every file before and after.
#   - tars with `../`, absolute names, a symlink then a file through it, device nodes and a
#     fifo, hard links to a file outside, 10 GB of zeros (streamed: refused on the header,
#     never stored), more members than the limit;
#   - a file put, from a 10 GB sparse file and from a 10 GB stream of zeros;
#   - a file put through a symlink the sandbox made to /proc/1/root (a magic link);
#   - an extraction while a process of the sandbox swaps a directory on the way for a
#     symlink out of the target, in a loop;
#   - a round trip of a tree (pax long names, hard links, symlinks, modes) in and out, and a
#     get of a tree that holds a fifo and a symlink out (neither followed nor waited on).
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
need_cmd python3 tar sha256sum
workdir
SBFILES=${LAZYROOT_BUILD:-$REPO/build}/tests/progs/sbfiles
[ -x "$SBFILES" ] || fail "$SBFILES is missing: make tests-build"

U=$((SB_UID_BASE + 1000))
R=$WORK/root
mkdir -p "$R/proc" "$R/sb/target" "$R/sb/outside/deep" "$R/tmp"
echo secret >"$R/sb/outside/secret"
# a directory of the host, outside the tree, that the test's uid may write: what a transfer
# would reach through /proc/1/root if it followed magic links
mkdir -p "$WORK/host/open"
echo host >"$WORK/host/file"
chown -R "$U:$U" "$R/sb" "$R/tmp" "$WORK/host/open"
chmod 0755 "$WORK" "$R"

sbf() { "$SBFILES" --root "$R" --uid "$U" "$@"; }

# Everything in the tree but the target, and the host's side, with, and the hashes of its files.
state() {
	(cd "$WORK" && find ./root ./host -path ./root/sb/target -prune -o -path ./root/proc -prune -o \
		-printf '%p %y %m %U %s %l\n' | sort
	 find ./root ./host -path ./root/sb/target -prune -o -path ./root/proc -prune -o -type f -print0 |
		sort -z | xargs -0 sha256sum)
}

# refused DESC PATTERN CMD...: CMD exits non-zero with one line on stderr containing PATTERN,
# and nothing outside the target changed.
refused() {
	local desc=$1 pat=$2 rc=0 before after
	shift 2
	before=$(state)
	"$@" >"$WORK/out" 2>"$WORK/err" || rc=$?
	after=$(state)
	_check_result "$([ "$rc" != 0 ] && echo 1)" "$desc: exit $rc"
	_check_result "$([ "$(wc -l <"$WORK/err")" = 1 ] && grep -qF -- "$pat" "$WORK/err" && echo 1)" \
		"$desc: one line with \"$pat\": $(cat "$WORK/err")"
	_check_result "$([ "$before" = "$after" ] && echo 1)" "$desc: nothing outside the target changed"
	[ "$before" = "$after" ] || diff <(echo "$before") <(echo "$after") >&2 || true
}

# mktar KIND: a hostile tar on stdout (python's tarfile writes what GNU tar would refuse to).
mktar() {
	python3 - "$1" <<'EOF'
import io, sys, tarfile
kind = sys.argv[1]
t = tarfile.open(fileobj=sys.stdout.buffer, mode="w|", format=tarfile.PAX_FORMAT)
def reg(name, data=b"owned\n"):
    i = tarfile.TarInfo(name); i.size = len(data); t.addfile(i, io.BytesIO(data))
def special(name, typ, **kw):
    i = tarfile.TarInfo(name); i.type = typ
    for k, v in kw.items(): setattr(i, k, v)
    t.addfile(i)
class Zeros(io.RawIOBase):
    def readable(self):
        return True
    def readinto(self, b):
        b[:] = bytes(len(b)); return len(b)
if kind == "dotdot":
    reg("ok"); reg("../outside/secret")
elif kind == "dotdot-deep":
    reg("a/b/../../../outside/secret")
elif kind == "absolute":
    reg("/sb/outside/secret")
elif kind == "symlink-then-file":
    special("l", tarfile.SYMTYPE, linkname="/sb/outside"); reg("l/secret")
elif kind == "symlink-dir-then-file":
    special("d", tarfile.SYMTYPE, linkname="../outside/deep"); reg("d/planted")
elif kind == "chardev":
    special("null", tarfile.CHRTYPE, devmajor=1, devminor=3)
elif kind == "blockdev":
    special("sda", tarfile.BLKTYPE, devmajor=8, devminor=0)
elif kind == "fifo":
    special("fifo", tarfile.FIFOTYPE)
elif kind == "hardlink-out":
    special("h", tarfile.LNKTYPE, linkname="../outside/secret")
elif kind == "hardlink-abs":
    special("h", tarfile.LNKTYPE, linkname="/sb/outside/secret")
elif kind == "hardlink-nonmember":
    special("h", tarfile.LNKTYPE, linkname="sb/outside/secret")
elif kind == "zeros":
    i = tarfile.TarInfo("zeros"); i.size = 10 * 10**9
    try:
        t.addfile(i, io.BufferedReader(Zeros(), 1 << 20))
    except BrokenPipeError:
        sys.exit(0)
elif kind == "many":
    for n in range(20): reg("f%d" % n)
elif kind == "race":
    for n in range(3000): reg("race/f%d" % n, b"x")
t.close()
EOF
}

# put_tar KIND [OPTS]: the tar streamed into $PUT_DIR (the target); the status is sbfiles's.
put_tar() {
	local kind=$1 rc
	shift
	set +o pipefail
	mktar "$kind" 2>/dev/null | sbf "$@" put-tar "${PUT_DIR:-/sb/target}"
	rc=${PIPESTATUS[1]}
	set -o pipefail
	return "$rc"
}

refused "tar with ../" "\`../outside/secret\`: its name has a \`..\` component" put_tar dotdot
refused "tar with a/b/../../../" "has a \`..\` component" put_tar dotdot-deep
refused "tar with an absolute name" "\`/sb/outside/secret\`: its name is absolute" put_tar absolute
refused "tar with a symlink then a file through it" "\`l/secret\`: its parent \`l\`: a symlink is in the way" \
	put_tar symlink-then-file
refused "tar with a relative symlink then a file through it" "its parent \`d\`: a symlink is in the way" \
	put_tar symlink-dir-then-file
check test ! -e "$R/sb/outside/deep/planted"
refused "tar with a character device" "\`null\`: device nodes are refused" put_tar chardev
refused "tar with a block device" "\`sda\`: device nodes are refused" put_tar blockdev
refused "tar with a fifo" "\`fifo\`: fifos are refused" put_tar fifo
refused "tar with a hard link to ../outside" "its link target has a \`..\` component" put_tar hardlink-out
refused "tar with a hard link to an absolute path" "its link target is absolute" put_tar hardlink-abs
refused "tar with a hard link to a file it did not extract" "which is not a file extracted before it" \
	put_tar hardlink-nonmember
refused "tar of 10 GB of zeros" "\`zeros\`: 10000000000 bytes pass the limit of 1073741824" put_tar zeros
check test ! -e "$R/sb/target/zeros"
refused "tar past the entry limit" "more than the limit of 5 members" put_tar many --max-entries 5
# Nothing of a refused member, and no temporary name, is left in the target either.
check test -z "$(find "$R/sb/target" -name '.lazyroot-put-*' -o -name zeros -o -name null -o -name fifo)"
rm -rf "${R:?}/sb/target/"*

# --- one file
truncate -s 10G "$WORK/zeros"
refused "file put from a 10 GB sparse file" "\`/sb/target/z\`: 10737418240 bytes, past the limit of 1073741824" \
	sbf put-file /sb/target/z 0644 <"$WORK/zeros"
put_stream() {
	set +o pipefail
	head -c 10G /dev/zero | sbf put-file /sb/target/z 0644
	local rc=${PIPESTATUS[1]}
	set -o pipefail
	return "$rc"
}
refused "file put of a 10 GB stream of zeros" "\`/sb/target/z\`: more than the limit of 1073741824 bytes" put_stream
check test -z "$(ls -A "$R/sb/target")"
ln -s /proc/1/root "$R/sb/target/p"
chown -h "$U:$U" "$R/sb/target/p"
put_tar_magic() { PUT_DIR="/sb/target/p$WORK/host/open" put_tar many --proc; }
# (the test's own pid 1 of sbfiles --proc: outside the chroot, so /proc/1/root is the host's /)
refused "file put through a symlink to /proc/1/root" "a magic link (/proc/PID/...) or a symlink loop is in the way" \
	sbf --proc put-file "/sb/target/p$WORK/host/open/planted" 0644 </dev/null
refused "file put through it, parents made" "a magic link (/proc/PID/...) or a symlink loop is in the way" \
	sbf --proc put-file "/sb/target/p$WORK/host/open/new/planted" 0644 parents </dev/null
refused "file get through a symlink to /proc/1/root" "a magic link (/proc/PID/...) or a symlink loop is in the way" \
	sbf --proc get-file "/sb/target/p$WORK/host/file"
refused "tar put through a symlink to /proc/1/root" "a magic link (/proc/PID/...) or a symlink loop is in the way" \
	put_tar_magic
check test -z "$(ls -A "$WORK/host/open")"
refused "file put onto a symlink" "\`/sb/target/p\`: is a symlink" sbf put-file /sb/target/p 0644 </dev/null
rm -f "$R/sb/target/p"
refused "file put outside the user's rights" "\`/etc-made/f\`: make \`/etc-made\`: Permission denied" \
	sbf put-file /etc-made/f 0644 parents </dev/null
mkfifo "$R/sb/target/fifo"
chown "$U:$U" "$R/sb/target/fifo"
refused "file get of a fifo" "\`/sb/target/fifo\`: not a regular file" sbf get-file /sb/target/fifo
rm -f "$R/sb/target/fifo"
echo payload | check sbf put-file /sb/target/new/dir/f 4755 parents
check test "$(cat "$R/sb/target/new/dir/f")" = payload
check test "$(stat -c %a:%u "$R/sb/target/new/dir/f")" = "755:$U"
check test "$(sbf get-file /sb/target/new/dir/f)" = payload

# --- a symlink swapped in while extracting: a process of the sandbox swaps target/race between a
# directory and a symlink to /sb/outside, as fast as it can, while 3000 members go into race/.
rm -rf "${R:?}/sb/target/"*
mkfifo "$WORK/ready"
"$SBFILES" --root "$R" --uid "$U" swap /sb/target/race /sb/outside >"$WORK/ready" &
swapper=$!
cleanup_add sh -c "kill $swapper 2>/dev/null || true"
read -r line <"$WORK/ready"
check test "$line" = ready
before=$(state)
for round in 1 2 3; do
	rc=0
	put_tar race 2>"$WORK/err" || rc=$?
	log "race round $round: exit $rc: $(head -c 200 "$WORK/err")"
	[ "$rc" = 0 ] || check test "$(wc -l <"$WORK/err")" = 1
done
kill "$swapper" 2>/dev/null || true
wait "$swapper" 2>/dev/null || true
after=$(state)
check test "$before" = "$after"
check test -z "$(find "$R/sb/outside" -name 'f*' -o -name '.lazyroot-put-*')"

# --- a tree in and out: pax names, hard links, symlinks, modes
rm -rf "${R:?}/sb/target/"*
mkdir -p "$WORK/src/sub/$(printf 'd%.0s' {1..120})/deeper" "$WORK/src/ro"
long=$WORK/src/sub/$(printf 'd%.0s' {1..120})/deeper/$(printf 'f%.0s' {1..200})
echo long >"$long"
head -c 300000 /dev/urandom >"$WORK/src/blob"
ln "$WORK/src/blob" "$WORK/src/sub/blob-link"
ln -s /sb/outside/secret "$WORK/src/out-link"
echo ro >"$WORK/src/ro/f"
chmod 0555 "$WORK/src/ro"
chmod 0600 "$WORK/src/blob"
put_src() { tar -C "$WORK/src" --format=pax -cf - . | sbf put-tar /sb/target/copy; }
check put_src
check cmp "$WORK/src/blob" "$R/sb/target/copy/sub/blob-link"
check test "$(stat -c %i "$R/sb/target/copy/blob")" = "$(stat -c %i "$R/sb/target/copy/sub/blob-link")"
check test "$(readlink "$R/sb/target/copy/out-link")" = /sb/outside/secret
check test "$(stat -c %a "$R/sb/target/copy/ro"):$(stat -c %a "$R/sb/target/copy/blob")" = 555:600
check cmp "$long" "${long/$WORK\/src/$R/sb/target/copy}"
# out again, with a fifo in it that must neither block nor be archived
mkfifo "$R/sb/target/copy/fifo"
chown "$U:$U" "$R/sb/target/copy/fifo"
mkdir "$WORK/back"
get_copy() { sbf get-tar /sb/target/copy 2>"$WORK/err" | tar -C "$WORK/back" -xf -; }
check get_copy
check grep -qF "\`fifo\`: not a file, directory or symlink: left out" "$WORK/err"
check diff -r --no-dereference "$WORK/src" "$WORK/back"
check test "$(readlink "$WORK/back/out-link")" = /sb/outside/secret
chmod 0755 "$WORK/src/ro" "$WORK/back/ro" "$R/sb/target/copy/ro"
