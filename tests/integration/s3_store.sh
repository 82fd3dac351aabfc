#!/bin/bash
# An image pushed to a real S3 store (Ceph RGW on a one-node cluster on 127.0.0.1, started
# here: tests/lib/rgw.sh) and used from it:
#  1. build --store s3://BUCKET/PREFIX pushes the tree (tests/lib/gen-tree.sh: every kind of
#     entry); a second build pushes no chunk (HEAD finds every one); image ls lists the tag
#     (ListObjectsV2, also in pages of one key); extract rebuilds the tree exactly;
#  2. mount over s3://, every entry and byte compared through the mount;
#  3. a wrong secret key: a one-line error naming the URL and RGW's SignatureDoesNotMatch,
#     a non-zero exit, no tag written;
#  4. a missing bucket: build and mount fail with one line naming NoSuchBucket, nothing
#     mounted;
#  5. the endpoint unreachable at mount (--s3-endpoint to a port nobody listens on): a
#     one-line error naming the URL, a non-zero exit, nothing mounted;
#  6. credentials from a shared credentials file (AWS_SHARED_CREDENTIALS_FILE, AWS_PROFILE),
#     for a user whose access key and secret hold ':' (radosgw-admin allows it);
#  7. mirrors mixing http and s3: an http mirror that is down before the s3 store, and an s3
#     prefix without the image before an nginx copy of it; the mount serves every byte;
#  8. an access profile recorded from an s3 mount, pushed to the s3 store (the object
#     profiles/<index hex> beside the image), shown from it, and followed by a mount with an
#     empty cache: chunks fetched for the profile before the reader asks, every byte right.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/nginx.sh"
. "$(dirname "$0")/../lib/rgw.sh"
need_root
need_cmd fusermount3 nginx curl ceph-mon ceph-osd radosgw
workdir
mnt=$WORK/mnt
mkdir -p "$mnt"
src=$WORK/src
bash "$REPO/tests/lib/gen-tree.sh" "$src"

rc=0
rgw_start || rc=$?
[ "$rc" = 0 ] || { [ "$rc" = 77 ] && exit 77; fail "RGW did not start"; }
log "RGW at $RGW_ENDPOINT"
store=s3://$RGW_BUCKET/images/test

unmount_it() {
	mountpoint -q "$mnt" || return 0
	"$LAZYROOT" umount --cache "$cache" "$mnt" 2>/dev/null || umount -l "$mnt"
}
cleanup_add unmount_it
one_line() {  # the error output of a failed command is exactly one line
	test "$(wc -l <<<"$1")" -eq 1
}
tag_exists() {  # STORE-PREFIX TAG: the tag object is there (read with the right keys)
	s3_curl "$RGW_ACCESS_KEY" "$RGW_SECRET_KEY" -f -o /dev/null -I \
		"$RGW_ENDPOINT/$RGW_BUCKET/$1/tags/${2/:/%3A}"
}

# --- 1. push, push again, list, extract
check "$LAZYROOT" build "$src" --store "$store" --tag lib/tree:1 --no-progress
out=$("$LAZYROOT" build "$src" --store "$store" --tag lib/tree:1 --no-progress --json)
log "second build: $out"
check grep -q '"chunks_new":0' <<<"$out"
check grep -q '"bytes_stored":0' <<<"$out"
check "$LAZYROOT" build "$src/files" --store "$store" --tag files:1 --no-progress
ls_out=$("$LAZYROOT" image ls --store "$store")
check grep -q "^lib/tree:1 " <<<"$ls_out"
check grep -q "^files:1 " <<<"$ls_out"
check test "$(LAZYROOT_S3_LIST_MAX_KEYS=1 "$LAZYROOT" image ls --store "$store")" = "$ls_out"
check "$LAZYROOT" image extract lib/tree:1 "$WORK/x" --store "$store"
check compare_trees --no-atime --ignore-root-mtime "$src" "$WORK/x"

# --- 2. mount over s3
cache=$WORK/cache
check "$LAZYROOT" mount lib/tree:1 "$mnt" --store "$store" --cache "$cache"
check compare_trees --no-atime --ignore-root-mtime "$src" "$mnt"
unmount_it

# --- 3. a wrong secret key
rc=0
err=$(AWS_SECRET_ACCESS_KEY=wrong-$RGW_SECRET_KEY "$LAZYROOT" build "$src/files" \
	--store "s3://$RGW_BUCKET/images/wrongkey" --tag bad:1 --no-progress 2>&1) || rc=$?
log "wrong secret (build): exit $rc: $err"
check test "$rc" -ne 0
check one_line "$err"
check grep -q "$RGW_ENDPOINT/$RGW_BUCKET/images/wrongkey" <<<"$err"
check grep -q "HTTP 403" <<<"$err"
check_not tag_exists images/wrongkey bad:1
rc=0
err=$(AWS_SECRET_ACCESS_KEY=wrong "$LAZYROOT" image ls --store "$store" 2>&1) || rc=$?
log "wrong secret (ls): exit $rc: $err"
check test "$rc" -ne 0
check one_line "$err"
check grep -q "SignatureDoesNotMatch" <<<"$err"
check grep -q "$RGW_ENDPOINT/$RGW_BUCKET" <<<"$err"

# --- 4. a missing bucket
rc=0
err=$("$LAZYROOT" build "$src/files" --store s3://no-such-bucket/p --tag x:1 --no-progress 2>&1) ||
	rc=$?
log "missing bucket (build): exit $rc: $err"
check test "$rc" -ne 0
check one_line "$err"
check grep -q "NoSuchBucket" <<<"$err"
rc=0
cache=$WORK/cache-nobucket
err=$("$LAZYROOT" mount x:1 "$mnt" --store s3://no-such-bucket/p --cache "$cache" 2>&1) || rc=$?
log "missing bucket (mount): exit $rc: $err"
check test "$rc" -ne 0
check one_line "$err"
check grep -q "NoSuchBucket" <<<"$err"
check_not mountpoint -q "$mnt"

# --- 5. endpoint unreachable at mount time
dead=$(free_port)
rc=0
cache=$WORK/cache-dead
err=$("$LAZYROOT" mount lib/tree:1 "$mnt" --store "$store" --s3-endpoint "http://127.0.0.1:$dead" \
	--cache "$cache" --fetch-timeout 1 2>&1) || rc=$?
log "unreachable endpoint: exit $rc: $err"
check test "$rc" -ne 0
check one_line "$err"
check grep -q "http://127.0.0.1:$dead/$RGW_BUCKET/images/test" <<<"$err"
check_not mountpoint -q "$mnt"

# --- 6. a credentials file, keys with colons
check rgw_key 'AK:COLON:1' 'se:cr:et/+='
cat >"$WORK/credentials" <<EOF
[default]
aws_access_key_id = nobody
aws_secret_access_key = nothing

[lazy]
aws_access_key_id = AK:COLON:1
aws_secret_access_key = se:cr:et/+=
EOF
filecreds() {  # PROFILE CMD...: keys from the file only
	local profile=$1
	shift
	env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY AWS_SHARED_CREDENTIALS_FILE="$WORK/credentials" \
		AWS_PROFILE="$profile" "$@"
}
check filecreds lazy "$LAZYROOT" build "$src/files" --store "s3://$RGW_BUCKET/colon" --tag c:1 \
	--no-progress
check tag_exists colon c:1
check grep -q "^c:1 " <(filecreds lazy "$LAZYROOT" image ls --store "s3://$RGW_BUCKET/colon")
rc=0
err=$(filecreds default "$LAZYROOT" image ls --store "s3://$RGW_BUCKET/colon" 2>&1) || rc=$?
log "default profile (an unknown key): exit $rc: $err"
check test "$rc" -ne 0
check grep -q "InvalidAccessKeyId" <<<"$err"
rc=0
err=$(filecreds missing "$LAZYROOT" image ls --store "s3://$RGW_BUCKET/colon" 2>&1) || rc=$?
log "missing profile: exit $rc: $err"
check test "$rc" -ne 0
check grep -q "no profile 'missing'" <<<"$err"

# --- 7. mirrors mixing http and s3
nginx_start "$WORK/nginx-data"
check "$LAZYROOT" build "$src/files" --store "$NGINX_URL" --tag files:1 --no-progress
nginx_dead=http://127.0.0.1:$(free_port)
n=0
for mirrors in "$nginx_dead,$store" "s3://$RGW_BUCKET/images/empty,$NGINX_URL"; do
	cache=$WORK/cache-mirrors-$((++n))
	check "$LAZYROOT" mount files:1 "$mnt" --store "$mirrors" --cache "$cache"
	check cmp_files "$src/files" "$mnt"
	check compare_trees --no-atime --ignore-root-mtime "$src/files" "$mnt"
	failovers=$("$LAZYROOT" cache stats --cache "$cache" --json |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["store_failovers"])')
	log "mirrors $mirrors: $failovers failovers"
	check test "$failovers" -gt 0
	unmount_it
done

# --- 8. an access profile in the s3 store
cache=$WORK/cache-rec
big="files/random-5m files/random-3m files/exact-1m files/repeated-text-2m"
check "$LAZYROOT" mount lib/tree:1 "$mnt" --store "$store" --cache "$cache" --record-profile "$WORK/prof"
for f in $big; do check cmp "$src/$f" "$mnt/$f"; done
unmount_it
check "$LAZYROOT" profile push lib/tree:1 "$WORK/prof" --store "$store"
hex=$("$LAZYROOT" image inspect lib/tree:1 --store "$store" --json |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["index"])')
check s3_curl "$RGW_ACCESS_KEY" "$RGW_SECRET_KEY" -f -o /dev/null -I \
	"$RGW_ENDPOINT/$RGW_BUCKET/images/test/profiles/$hex"
show=$("$LAZYROOT" profile show lib/tree:1 --store "$store")
log "profile in s3: $show"
check grep -q "1 traces" <<<"$show"
cache=$WORK/cache-follow
check "$LAZYROOT" mount lib/tree:1 "$mnt" --store "$store" --cache "$cache"
for f in $big; do check cmp "$src/$f" "$mnt/$f"; done
pf=$("$LAZYROOT" cache stats --cache "$cache" --json |
	python3 -c 'import json, sys; print(json.load(sys.stdin)["profile_fetches"])')
log "followed over s3: $pf chunks fetched for the profile"
check test "$pf" -gt 0
unmount_it
