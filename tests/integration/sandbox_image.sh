#!/bin/bash
# `lazyroot run IMAGE`: sandboxes on the node's one shared mount of an image (issue 5).
#   - commands run from an image of the Debian rootfs fixture and of the generated tree, which
#     the sandbox sees with the owners as built (its own idmapped view of the shared mount);
#   - two first runs of a new image at once mount it once, and both sandboxes use that mount;
#   - attack "overwrite system binaries (e.g. /bin/bash) to intercept the grader's answers":
#     a sandbox overwrites /bin/sh and /usr/bin/python3; a second sandbox, the shared mount and
#     `lazyroot image extract` still see the originals;
#   - the image config's env, working directory and user apply, and --env/--workdir/--user
#     override them;
#   - a bad REF fails with one line naming it and mounts nothing; a run naming another store
#     gets its own mount; a mount whose server was killed serves the next run;
#   - teardown leaves no sandbox, cgroup or mount except the shared node mounts, which
#     `lazyroot umount` ends.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
need_cmd fusermount3 sha256sum
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
[ -x "$ATTACK_DIR/lsid" ] || fail "$ATTACK_DIR/lsid is missing: make tests-build"
workdir

export LAZYROOT_STORE=dir:$WORK/store LAZYROOT_CACHE=$WORK/cache LAZYROOT_IMAGES=$WORK/images
images=$WORK/images

# Every lazyroot mount under $images, one per line.
node_mounts() {
	awk -v p="$images/" 'index($5, p) == 1 && / - fuse\.lazyroot / { print $5 }' /proc/self/mountinfo
}
unmount_all() {
	local m
	for m in $(node_mounts); do
		"$LAZYROOT" umount "$m" >/dev/null 2>&1 || umount -l "$m"
	done
}
cleanup_add unmount_all
# hex TAG: the index a tag names.
hex() { cat "$WORK/store/tags/$1"; }
# irun IMAGE [RUN OPTIONS] -- CMD...: a sandbox on IMAGE with this test's names and id range;
# the options come after IMAGE on purpose (run accepts them on both sides).
irun() {
	local img=$1
	shift
	_sb_count=$((_sb_count + 1))
	"$LAZYROOT" run --name "$SB_NAME-$_sb_count" --set "uid_base=$SB_UID_BASE" "$img" \
		--bind "$ATTACK_DIR:/lr" "$@"
}

cat >"$WORK/config.json" <<'EOF'
{"architecture": "amd64", "os": "linux",
 "config": {"Env": ["PATH=/usr/bin:/bin", "GREETING=hello", "LANG=C.UTF-8"],
            "WorkingDir": "/usr/share", "User": "nobody:mail"}}
EOF
check "$LAZYROOT" build "$ROOTFS" --tag deb:plain --no-progress
check "$LAZYROOT" build "$ROOTFS" --tag deb:config --config "$WORK/config.json" --no-progress
tree=$WORK/tree
bash "$REPO/tests/lib/gen-tree.sh" "$tree"
check "$LAZYROOT" build "$tree" --tag tree:test --no-progress
printf '{"config": {"User": "nosuchuser"}}' >"$WORK/baduser.json"
check "$LAZYROOT" build "$tree" --tag tree:baduser --config "$WORK/baduser.json" --no-progress
plain=$images/$(hex deb:plain)

# --- real programs from the rootfs image; owners as built; one mount for many runs
check_status 0 irun deb:plain -- python3 -c 'print(6 * 7)' >"$WORK/py"
check grep -qx 42 "$WORK/py"
check_status 0 irun deb:plain -- sh -c 'id -u; pwd; stat -c "%u:%g %a" /etc/shadow /usr/bin/dash' \
	>"$WORK/ids"
check test "$(sed -n 1p "$WORK/ids")" = 0
check test "$(sed -n 2p "$WORK/ids")" = /
check test "$(sed -n 3p "$WORK/ids")" = "$(stat -c '%u:%g %a' "$ROOTFS/etc/shadow")"
check test "$(sed -n 4p "$WORK/ids")" = "$(stat -c '%u:%g %a' "$ROOTFS/usr/bin/dash")"
check test "$(node_mounts)" = "$plain"
# the shared mount itself shows the owners as built (the id shift is per sandbox, not in it)
check test "$(stat -c %u:%g "$plain/etc/shadow")" = "$(stat -c %u:%g "$ROOTFS/etc/shadow")"

# --- the generated tree, which has no programs: the static lsid shows what the sandbox sees.
# Owners inside the sandbox's 65536 ids keep their ids; 3000000 is outside: the overflow id.
# (The image's /dev is under the sandbox's own.)
mapfile -t paths < <(cd "$tree" && printf '/%s\n' owners/* modes/* files/small.txt links/relative)
check_status 0 irun tree:test -- /lr/lsid "${paths[@]}" >"$WORK/tree-in"
for p in "${paths[@]}"; do
	read -r ids mode _ < <(stat -c '%u:%g %f' "$tree$p")
	[ "$ids" = 3000000:3000000 ] && ids=65534:65534
	check grep -qx "$ids $(printf %o $((16#$mode))) $p" "$WORK/tree-in"
done

# --- two first runs of a new image at once: one mount, both sandboxes on it. Each says where
# it runs through a fifo and waits for the test's go before it ends. The fifos are opened
# read-write here, so that a sandbox that died cannot leave the test blocked in open().
sync=$WORK/sync
mkdir -m 0777 "$sync"
mkfifo -m 0666 "$sync/ready1" "$sync/ready2" "$sync/go1" "$sync/go2"
exec {ready1}<>"$sync/ready1" {ready2}<>"$sync/ready2" {go1}<>"$sync/go1" {go2}<>"$sync/go2"
pids=()
for i in 1 2; do
	_sb_count=$((_sb_count + 1))  # irun counts in its subshell: keep the names apart
	irun deb:config --bind "$sync:/sync:rw" -- \
		sh -c "pwd > /sync/ready$i; read x < /sync/go$i" >"$WORK/pair$i" 2>&1 &
	pids+=($!)
done
where1=timeout where2=timeout
read -r -t 60 -u "$ready1" where1 || true
read -r -t 60 -u "$ready2" where2 || true
check test "$where1" = /usr/share
check test "$where2" = /usr/share
check test "$(node_mounts | grep -c "/$(hex deb:config)\$")" = 1
echo go >&"$go1"
echo go >&"$go2"
for i in 1 2; do
	check wait "${pids[$((i - 1))]}"
	cat "$WORK/pair$i" >&2
done
exec {ready1}<&- {ready2}<&- {go1}<&- {go2}<&-
# the daemon one of them started kept none of the fds the test had open (the fifos)
cfgdev=$(awk -v m="$images/$(hex deb:config)" '$5 == m { print $3 }' /proc/self/mountinfo)
cfgpid=$(cat "$WORK/cache/mounts/$cfgdev")
check test "$(find "/proc/$cfgpid/fd" -lname "$sync/*" | wc -l)" = 0
check test "$(node_mounts | wc -l)" = 3

# --- the image config applies, and the options override it
check_status 0 irun deb:config -- sh -c 'id -u; id -g; pwd; echo "$GREETING:$PATH"' >"$WORK/cfg"
check test "$(tr '\n' ' ' <"$WORK/cfg")" = "65534 8 /usr/share hello:/usr/bin:/bin "
check_status 0 irun deb:config --env GREETING=bye --workdir /tmp --user 12:34 -- \
	sh -c 'id -u; id -g; pwd; echo "$GREETING:$PATH"' >"$WORK/cfg2"
check test "$(tr '\n' ' ' <"$WORK/cfg2")" = "12 34 /tmp bye:/usr/bin:/bin "
err=$(irun tree:baduser -- /lr/lsid / 2>&1) && fail "an unknown image user was accepted"
check test "$(wc -l <<<"$err")" = 1
check grep -q "nosuchuser" <<<"$err"

# --- overwrite /bin/sh and /usr/bin/python3 inside; nobody else sees it
sha_dash=$(sha256sum "$ROOTFS/usr/bin/dash" | cut -d' ' -f1)
sha_py=$(sha256sum "$ROOTFS/usr/bin/python3.11" | cut -d' ' -f1)
check irun deb:plain -- /lr/attack "$HOST_PIDNS" overwrite /bin/sh /usr/bin/python3
check_status 0 irun deb:plain -- sha256sum /usr/bin/dash /usr/bin/python3.11 >"$WORK/sums"
check grep -q "^$sha_dash " "$WORK/sums"
check grep -q "^$sha_py " "$WORK/sums"
check test "$(sha256sum "$plain/usr/bin/dash" | cut -d' ' -f1)" = "$sha_dash"
check test "$(sha256sum "$plain/usr/bin/python3.11" | cut -d' ' -f1)" = "$sha_py"
check "$LAZYROOT" image extract deb:plain "$WORK/extract"
check test "$(sha256sum "$WORK/extract/usr/bin/dash" | cut -d' ' -f1)" = "$sha_dash"
check test "$(sha256sum "$WORK/extract/usr/bin/python3.11" | cut -d' ' -f1)" = "$sha_py"
rm -rf --one-file-system "$WORK/extract"

# --- a bad REF: one line naming it, status 125, nothing mounted or made
before=$(node_mounts)
for ref in nosuch:tag 0123456789abcdef0123456789abcdef 'bad name'; do
	err=$(irun "$ref" -- /bin/true 2>&1) && fail "image '$ref' accepted"
	check test "$(wc -l <<<"$err")" = 1
	check grep -qF "$ref" <<<"$err"
	log "bad ref: $err"
done
check_status 125 irun nosuch:tag -- /bin/true
check test "$(node_mounts)" = "$before"
check test "$(find "$images" -mindepth 1 -maxdepth 1 -type d | wc -l)" = "$(wc -l <<<"$before")"
# image and --rootfs together are refused before anything happens
check_status 125 "$LAZYROOT" run deb:plain --rootfs "$ROOTFS" -- /bin/true

# --- a mount is (store, index): by index name, a run naming another store (here a copy) gets
# a mount of its own, IMAGES/<index>-<store hash>, never the existing one's
cp -a "$WORK/store" "$WORK/store-copy"
check_status 0 irun "$(hex deb:plain)" --store "dir:$WORK/store-copy" -- /bin/true
other=$(node_mounts | grep "^$plain-")
check test -n "$other"
check test "$(node_mounts | grep -c "^$plain")" = 2
check "$LAZYROOT" umount "$other"
rm -rf "$WORK/store-copy"   # now, not yet written back: cheap (at exit, seconds)
err=$(irun "$(hex tree:test | tr 0-9a-f a-f0-9)" --store "dir:$WORK/no-store" -- /bin/true 2>&1) &&
	fail "an index the node does not keep ran without its store"
check test "$(wc -l <<<"$err")" = 1

# --- the process serving a shared mount is killed: the next run finds the image mounted
dev=$(awk -v m="$plain" '$5 == m { print $3 }' /proc/self/mountinfo)
pid=$(cat "$WORK/cache/mounts/$dev")
kill -KILL "$pid"
check_status 0 irun deb:plain -- /bin/true
check test "$(node_mounts | grep -c "^$plain\$")" = 1
check test "$(stat -c %i "$plain")" = 1

# --- teardown: nothing but the shared mounts; `lazyroot umount` ends them
check sb_no_leftovers
check test "$(node_mounts | wc -l)" = 4  # deb:plain, deb:config, tree:test, tree:baduser
for m in $(node_mounts); do
	st=0
	"$LAZYROOT" umount "$m" 2>"$WORK/umount-err" || st=$?
	cat "$WORK/umount-err" >&2
	check test "$st" = 0
	check test ! -s "$WORK/umount-err"  # it found the daemon and waited for it
done
check test -z "$(node_mounts)"
