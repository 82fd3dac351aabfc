#!/bin/bash
# Bad input to `lazyroot build`: each case must fail with a one-line error that
# names the input, exit non-zero, write no tag, and write nothing outside the
# store.  Also: a build killed half-way leaves no tag, and the next build of the
# same source succeeds.
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd python3 gzip zstd setpriv
workdir
store=dir:$WORK/store

# expect_fail NAME WORD SOURCE: the build fails, its stderr is one line
# containing WORD, and no tag NAME exists afterwards.
expect_fail() {
	local tag=$1 word=$2 src=$3 err rc=0
	err=$("$LAZYROOT" build "$src" --store "${4:-$store}" --tag "$tag" --no-progress 2>&1 >/dev/null) || rc=$?
	log "$tag: $err"
	check test "$rc" -ne 0
	check test -n "$err"
	check test "$(wc -l <<<"$err")" = 1
	check grep -qF -- "$word" <<<"$err"
	check_not test -e "${5:-$WORK/store}/tags/$tag:latest"
}

mktar() {  # OUT then python statements adding members to tar t
	local out=$1; shift
	python3 - "$out" "$@" <<'PY'
import io, sys, tarfile
out = sys.argv[1]
t = tarfile.open(out, "w", format=tarfile.GNU_FORMAT)
def add(name, data=b"", type=tarfile.REGTYPE, linkname=""):
    ti = tarfile.TarInfo(name); ti.type = type; ti.linkname = linkname
    ti.size = len(data) if type in (tarfile.REGTYPE,) else 0
    t.addfile(ti, io.BytesIO(data) if ti.size else None)
for stmt in sys.argv[2:]:
    exec(stmt)
t.close()
PY
}

# members escaping the tree
mktar "$WORK/dotdot.tar" 'add("ok.txt", b"fine")' 'add("../escape.txt", b"evil")'
expect_fail dotdot escape.txt "$WORK/dotdot.tar"
mktar "$WORK/dotdot2.tar" 'add("a/b/../../../escape.txt", b"evil")'
expect_fail dotdot2 escape.txt "$WORK/dotdot2.tar"
check_not test -e "$WORK/escape.txt"
mktar "$WORK/abs.tar" 'add("/etc/lazyroot-evil", b"evil")'
expect_fail abs lazyroot-evil "$WORK/abs.tar"
check_not test -e /etc/lazyroot-evil

# a hard link to a member that is not there
mktar "$WORK/link.tar" 'add("a.txt", b"x")' 'add("b.txt", type=tarfile.LNKTYPE, linkname="missing.txt")'
expect_fail badlink missing.txt "$WORK/link.tar"

# an unknown member type
mktar "$WORK/type.tar" 'add("weird", type=b"Z")'
expect_fail badtype weird "$WORK/type.tar"

# truncated and corrupt archives
mktar "$WORK/big.tar" 'import random; random.seed(1); add("big.bin", random.randbytes(3 << 20))' \
	'add("after.txt", b"after")'
cp "$WORK/big.tar" "$WORK/trunc.tar"
truncate -s 1000000 "$WORK/trunc.tar"
expect_fail trunc-tar trunc.tar "$WORK/trunc.tar"
gzip -c "$WORK/big.tar" >"$WORK/trunc.tar.gz"
truncate -s 1500000 "$WORK/trunc.tar.gz"
expect_fail trunc-gz trunc.tar.gz "$WORK/trunc.tar.gz"
zstd -q -c "$WORK/big.tar" >"$WORK/trunc.tar.zst"
truncate -s 1500000 "$WORK/trunc.tar.zst"
expect_fail trunc-zst trunc.tar.zst "$WORK/trunc.tar.zst"
gzip -c "$WORK/big.tar" >"$WORK/corrupt.tar.gz"
printf '\xff\xff\xff\xff' | dd of="$WORK/corrupt.tar.gz" bs=1 seek=500000 conv=notrunc status=none
expect_fail corrupt-gz corrupt.tar.gz "$WORK/corrupt.tar.gz"
cp "$WORK/big.tar" "$WORK/badsum.tar"
printf 'X' | dd of="$WORK/badsum.tar" bs=1 seek=5 conv=notrunc status=none
expect_fail badsum badsum.tar "$WORK/badsum.tar"

# an empty file, a tar cut at a member boundary (no end-of-archive marker) and
# a file that is no tar: refused, never published
: >"$WORK/empty.tar"
expect_fail empty "empty.tar: empty file, not a tar archive" "$WORK/empty.tar"
head -c $((512 + (3 << 20))) "$WORK/big.tar" >"$WORK/cut.tar"
expect_fail cut "cut.tar: truncated archive" "$WORK/cut.tar"
echo "hello" >"$WORK/text.txt"
expect_fail text "text.txt: not a tar archive" "$WORK/text.txt"
head -c 100000 "$WORK/big.tar" | tail -c 50000 >"$WORK/middle.bin"
expect_fail middle "middle.bin: not a tar archive" "$WORK/middle.bin"
gzip -c "$WORK/cut.tar" >"$WORK/cut.tar.gz"
expect_fail cut-gz "cut.tar.gz: truncated archive" "$WORK/cut.tar.gz"

# names and tags outside the OCI reference grammar: refused before anything is read
mkdir -p "$WORK/tagsrc"
echo x >"$WORK/tagsrc/x"
for t in -x:1 X:1 x:1:2 'x;rm:1' 'x:' 'a//b:1' 'x:-1' 'reg.com:port/x:1'; do
	err=$("$LAZYROOT" build "$WORK/tagsrc" --store "$store" --tag "$t" --no-progress 2>&1 \
		>/dev/null) && fail "--tag $t accepted"
	log "tag $t: $err"
	check test "$(wc -l <<<"$err")" = 1
	check grep -qF -- "--tag '$t': not a valid reference" <<<"$err"
	check_not test -e "$WORK/store/tags/$t"
done
check_not test -e "$WORK/store/tags/x;rm:1"
for t in x:1 lib/app:v1.2-rc_3 localhost:5000/a__b:latest; do
	check "$LAZYROOT" build "$WORK/tagsrc" --store "$store" --tag "$t" --no-progress
	check test -e "$WORK/store/tags/$t"
done

# sources that do not exist or cannot be read
expect_fail missing "$WORK/nope" "$WORK/nope"
mkdir -p "$WORK/unreadable/sub" "$WORK/store-nobody"
echo secret >"$WORK/unreadable/sub/secret.txt"
chmod 000 "$WORK/unreadable/sub/secret.txt"
chmod 755 "$WORK"
chown 65534:65534 "$WORK/store-nobody"
err=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$LAZYROOT" build "$WORK/unreadable" \
	--store "dir:$WORK/store-nobody" --tag unreadable --no-progress 2>&1 >/dev/null) && fail "unreadable source built"
log "unreadable: $err"
check grep -q 'secret.txt' <<<"$err"
check_not test -e "$WORK/store-nobody/tags/unreadable:latest"

# a store that cannot be written: a path under a regular file, and a full disk
touch "$WORK/notadir"
expect_fail badstore notadir "$REPO/tests" "dir:$WORK/notadir/store" "$WORK/notadir/store"
mkdir "$WORK/small"
mount -t tmpfs -o size=1m tmpfs "$WORK/small"
cleanup_add umount "$WORK/small"
expect_fail full "$WORK/small" "$WORK/big.tar" "dir:$WORK/small" "$WORK/small"

# killed half-way: feed half of an archive through a FIFO, kill -9 once chunks
# are being stored, then check that no tag exists and a new build succeeds
mktar "$WORK/many.tar" 'import random; random.seed(2)' \
	'[add("f%03d.bin" % i, random.randbytes(1 << 20)) for i in range(40)]'
mkfifo "$WORK/fifo"
"$LAZYROOT" build "$WORK/fifo" --store "dir:$WORK/kill" --tag killed --no-progress 2>/dev/null &
pid=$!
cleanup_add sh -c "kill -9 $pid 2>/dev/null || true"
exec 7>"$WORK/fifo"
head -c $((25 << 20)) "$WORK/many.tar" >&7
# the build blocks on the FIFO once it has consumed what we wrote; wait for chunks
for _ in $(seq 200); do
	n=$(find "$WORK/kill/chunks" -type f 2>/dev/null | wc -l)
	[ "$n" -ge 10 ] && break
	read -r -t 0.05 <> <(:) || true
done
check test "$n" -ge 10
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
exec 7>&-
check_not test -e "$WORK/kill/tags/killed:latest"
check "$LAZYROOT" build "$WORK/many.tar" --store "dir:$WORK/kill" --tag killed --no-progress
check test -e "$WORK/kill/tags/killed:latest"
check "$LAZYROOT" image extract killed "$WORK/x-killed" --store "dir:$WORK/kill"
check cmp "$WORK/x-killed/f039.bin" <(python3 -c '
import random, sys; random.seed(2)
for i in range(40): b = random.randbytes(1 << 20)
sys.stdout.buffer.write(b)')

# --config: a file that is missing, not JSON or not a JSON object is refused by name before
# anything is stored; a good one becomes the image config
mkdir -p "$WORK/cfgsrc/etc"
echo x >"$WORK/cfgsrc/etc/x"
printf '{"config": ' >"$WORK/cut.json"
printf '[1]' >"$WORK/array.json"
for c in "$WORK/nope.json" "$WORK/cut.json" "$WORK/array.json"; do
	err=$("$LAZYROOT" build "$WORK/cfgsrc" --store "$store" --tag cfgbad --config "$c" \
		--no-progress 2>&1 >/dev/null) && fail "--config $c accepted"
	log "config $(basename "$c"): $err"
	check test "$(wc -l <<<"$err")" = 1
	check grep -qF -- "$c" <<<"$err"
	check_not test -e "$WORK/store/tags/cfgbad:latest"
done
printf '{"config": {"WorkingDir": "/etc"}}' >"$WORK/good.json"
check "$LAZYROOT" build "$WORK/cfgsrc" --store "$store" --tag cfggood --config "$WORK/good.json" \
	--no-progress
check test "$("$LAZYROOT" image inspect cfggood --store "$store" --json |
	python3 -c 'import json, sys; print(json.load(sys.stdin)["config"]["config"]["WorkingDir"])')" = /etc
