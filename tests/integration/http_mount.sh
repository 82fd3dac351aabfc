#!/bin/bash
# An image pushed to a real HTTP store (nginx WebDAV on 127.0.0.1, started here) and
# mounted from it:
#  1. build --store http://… pushes every chunk, the index and the tag; a second build of
#     the same tree pushes no chunk (HEAD finds every one), only the index and tag again;
#  2. image ls lists the tag (nginx's JSON autoindex, tag names with '/'), extract
#     rebuilds the tree exactly;
#  3. mount over http://, every entry and byte compared through the mount;
#  4. store unreachable at mount time (nothing listens on the port): a one-line error,
#     a non-zero exit, nothing mounted.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/nginx.sh"
need_root
need_cmd python3 fusermount3 nginx
workdir
mnt=$WORK/mnt
mkdir -p "$mnt"

python3 - "$WORK/src" <<'PY'
import os, random, sys
r = random.Random(11)
root = sys.argv[1]
for d in ("big", "small/deep/er", "empty"):
    os.makedirs(os.path.join(root, d))
for i in range(12):
    open(os.path.join(root, "big", "b%02d" % i), "wb").write(r.randbytes(3 << 19))
for i in range(300):
    open(os.path.join(root, "small", "s%03d" % i), "wb").write(r.randbytes(r.randrange(0, 9000)))
open(os.path.join(root, "small/deep/er/text"), "w").write("hello\n" * 5000)
os.symlink("../big/b01", os.path.join(root, "small", "link"))
PY

nginx_start "$WORK/data"
url=$NGINX_URL

# --- 1. push, then push again
check "$LAZYROOT" build "$WORK/src" --store "$url" --tag lib/http:1 --no-progress
out=$("$LAZYROOT" build "$WORK/src" --store "$url" --tag lib/http:1 --no-progress --json)
check grep -q '"chunks_new":0' <<<"$out"
check test -f "$WORK/data/tags/lib/http:1"
# (leases, which builds write and renew, are not counted: store/GC.md)
puts=$(grep '"PUT ' "$NGINX_DIR/access.log" | grep -vc '/leases/')
chunks=$(find "$WORK/data/chunks" -type f | wc -l)
# each build writes its index and tag; only the first writes chunks
log "$puts PUTs for $chunks chunks and two builds' index and tag"
check test "$puts" -eq $((chunks + 4))

# --- 2. list and extract
check grep -q "^lib/http:1 " <("$LAZYROOT" image ls --store "$url")
check "$LAZYROOT" image extract lib/http:1 "$WORK/x" --store "$url"
check compare_trees --no-atime --ignore-root-mtime "$WORK/src" "$WORK/x"

# --- 3. mount over http
unmount_it() {
	mountpoint -q "$mnt" || return 0
	"$LAZYROOT" umount --cache "$WORK/cache" "$mnt" 2>/dev/null || umount -l "$mnt"
}
cleanup_add unmount_it
check "$LAZYROOT" mount lib/http:1 "$mnt" --store "$url" --cache "$WORK/cache"
check compare_trees --no-atime --ignore-root-mtime "$WORK/src" "$mnt"
unmount_it

# --- 4. nothing listens: the port nginx had, once nginx is stopped
nginx_stop
rc=0
err=$("$LAZYROOT" mount lib/http:1 "$mnt" --store "$url" --cache "$WORK/cache2" \
	--fetch-timeout 1 2>&1) || rc=$?
log "unreachable store: exit $rc: $err"
check test "$rc" -ne 0
check test "$(wc -l <<<"$err")" -eq 1
check grep -q "$url" <<<"$err"
check_not mountpoint -q "$mnt"
