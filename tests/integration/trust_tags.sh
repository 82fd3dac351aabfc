#!/bin/bash
# Signed tags and the node's trust policy, on a real node and a real dir: store.  Images a:1 and
# b:1 are built and signed with key k1; the store is then tampered with as someone who can write
# to it could, and every mount that would serve the wrong image is refused with one line naming
# the image, the store and the reason, while the mounts that should work still read the right
# bytes:
#  - a tag pointed at another index (b's), the signature left alone: the index's SHA-256 is not
#    the signed digest (by `mount`, and by `run` onto b's shared mount already there);
#  - the index replaced by another image's (b's bytes under a's name): refused before use;
#  - the signature rolled back to its previous, validly signed version, before and after a
#    node restart (the newest version seen is on disk);
#  - an expired signature; an unknown key; a signature copied from another tag (as it is, and
#    with its tag field edited);
#  - key rotation: a:1 signed with k2 while b:1 stays signed with k1, both trusted at once;
#  - an unsigned tag, mounted without --require-signed and refused with it; a mount by index
#    name needs no tag;
#  - the refusals are counted in `node status` and /metrics;
#  - image copy copies the signature with the tag, when it is for the index copied;
#  - from an HTTP store (nginx), the signature is read once while the tag is answered from
#    memory (tag_ttl), and a moved tag is still refused.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/nginx.sh"
need_root
need_cmd fusermount3 python3 curl nginx
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir

export LAZYROOT_CACHE=$WORK/cache LAZYROOT_IMAGES=$WORK/images LAZYROOT_TRUST_STATE=$WORK/trust
port=${LAZYROOT_METRICS##*:}
S=dir:$WORK/store
mkdir -p "$WORK/a" "$WORK/b" "$WORK/c" "$WORK/mnt"
seq 1 20000 >"$WORK/a/file"
seq 5 30000 >"$WORK/b/file"
echo c >"$WORK/c/file"
cd "$WORK"
check "$LAZYROOT" key generate k1
check "$LAZYROOT" key generate k2
k3=$("$LAZYROOT" key generate k3 --json)
check python3 -c 'import json, sys; j = json.loads(sys.argv[1]); assert j["public"] == "k3.pub"
assert j["key"].startswith("sha256:") and len(j["key"]) == 71' "$k3"
check test "$(stat -c %a k1)" = 600
check "$LAZYROOT" build a --tag a:1 --store "$S" --sign k1 --no-progress
check "$LAZYROOT" build b --tag b:1 --store "$S" --sign k1 --no-progress
check "$LAZYROOT" build c --tag c:1 --store "$S" --no-progress
ha=$(cat store/tags/a:1)
hb=$(cat store/tags/b:1)
cleanup_add fusermount3 -u -q "$WORK/mnt"

# mounts REF [FLAG…]: mounted at $WORK/mnt with the right bytes (SRC the tree it was built
# from), then unmounted
mounts() {
	local src=$1 ref=$2; shift 2
	"$LAZYROOT" mount "$ref" "$WORK/mnt" --store "$S" "$@" || return 1
	local ok=0
	cmp -s "$WORK/$src/file" "$WORK/mnt/file" && ok=1
	"$LAZYROOT" umount "$WORK/mnt" || return 1
	[ "$ok" = 1 ]
}
# refused WHY REF [FLAG…]: not mounted, and one line saying why
refused() {
	local why=$1 ref=$2; shift 2
	if "$LAZYROOT" mount "$ref" "$WORK/mnt" --store "$S" "$@" 2>"$WORK/err"; then
		log "mounted $ref: want refused ($why)"
		"$LAZYROOT" umount "$WORK/mnt"
		return 1
	fi
	if ! grep -q "image '$ref' from store '$S': refused: .*$why" "$WORK/err"; then
		log "refused $ref, but not for '$why':"; cat "$WORK/err" >&2
		return 1
	fi
	! mountpoint -q "$WORK/mnt"
}
T1=(--trust-key k1.pub)

check mounts a a:1 "${T1[@]}" --require-signed
check mounts b b:1 "${T1[@]}" --require-signed

# a tag pointed at another index
echo "$hb" >store/tags/a:1
check refused "index $hb is not the one the signature names" a:1 "${T1[@]}"
echo "$ha" >store/tags/a:1
check mounts a a:1 "${T1[@]}"
# the same through `run`, whose shared mount of b's index is already there: the image runs
# (exit 126: it has no program to run), then a's tag moved onto that mount is refused (125:
# run failed before the command)
run_status() {  # REF [FLAG…]: run's exit status, its stderr in $WORK/err
	local ref=$1 rc=0; shift
	"$LAZYROOT" run "$ref" --store "$S" "$@" -- /file 2>"$WORK/err" || rc=$?
	echo "$rc"
}
check test "$(run_status b:1 "${T1[@]}" --require-signed)" = 126
check mountpoint -q "$WORK/images/$hb"
echo "$hb" >store/tags/a:1
check test "$(run_status a:1 "${T1[@]}")" = 125
check grep -q "image 'a:1' from store '$S': refused: index $hb is not the one" "$WORK/err"
echo "$ha" >store/tags/a:1
check test "$(run_status a:1 "${T1[@]}" --require-signed)" = 126

# the index replaced by another image's, read by a node that has not kept a's index yet
cp "store/indexes/$ha" "$WORK/index-a"
cp "store/indexes/$hb" "store/indexes/$ha"
check_not "$LAZYROOT" mount a:1 "$WORK/mnt" --store "$S" --cache "$WORK/cache2" "${T1[@]}"
check_not mountpoint -q "$WORK/mnt"
cp "$WORK/index-a" "store/indexes/$ha"

# rollback: version 2 is mounted, then the store serves version 1 again
cp store/signatures/a:1 "$WORK/sig-v1"
signed=$("$LAZYROOT" image sign a:1 --key k1 --store "$S" --json)
check python3 -c 'import json, sys; j = json.loads(sys.argv[1]); assert j["version"] == 2
assert j["tag"] == "a:1" and j["expires_at"] - j["signed_at"] == 90 * 86400' "$signed"
check grep -q '"version":2' store/signatures/a:1
check mounts a a:1 "${T1[@]}"
cp store/signatures/a:1 "$WORK/sig-v2"
cp "$WORK/sig-v1" store/signatures/a:1
check refused "version 1 is older than version 2" a:1 "${T1[@]}"
refusals=$("$LAZYROOT" node status --json | python3 -c 'import json, sys
t = json.load(sys.stdin)["trust"]; print(t["refused"]["rollback"], t["refused"]["wrong_index"])')
check test "$refusals" = "1 2"
out=$(curl -sf "http://127.0.0.1:$port/metrics")
check grep -q '^lazyroot_node_trust_refusals_total{reason="rollback"} 1$' <<<"$out"
check grep -q '^lazyroot_node_trust_refusals_total{reason="wrong_index"} 2$' <<<"$out"
check "$LAZYROOT" node stop
check refused "version 1 is older than version 2" a:1 "${T1[@]}"
cp "$WORK/sig-v2" store/signatures/a:1
check mounts a a:1 "${T1[@]}"

# expired
check "$LAZYROOT" image sign a:1 --key k1 --store "$S" --expires 0
check refused "the signature (version 3) expired at " a:1 "${T1[@]}"
check "$LAZYROOT" image sign a:1 --key k1 --store "$S"

# an unknown key
check refused "signed by key sha256:[0-9a-f]*, which is not trusted" a:1 --trust-key k3.pub

# a signature copied from another tag, as it is and with its tag field edited
cp store/signatures/a:1 "$WORK/sig-a"
cp store/signatures/b:1 store/signatures/a:1
check refused "the signature is for tag 'b:1'" a:1 "${T1[@]}"
sed 's/"tag":"b:1"/"tag":"a:1"/' store/signatures/b:1 >store/signatures/a:1
check refused "does not verify" a:1 "${T1[@]}"
cp "$WORK/sig-a" store/signatures/a:1
check mounts a a:1 "${T1[@]}"

# key rotation: a:1 signed with k2, b:1 still with k1; both keys trusted at once
check "$LAZYROOT" image sign a:1 --key k2 --store "$S"
check mounts a a:1 "${T1[@]}" --trust-key k2.pub --require-signed
check mounts b b:1 "${T1[@]}" --trust-key k2.pub --require-signed
check refused "which is not trusted" a:1 "${T1[@]}"
# a key trusted for this store only, and one trusted for another store
check mounts a a:1 --require-signed --trust-key "$S=$WORK/k2.pub"
check refused "which is not trusted" a:1 --trust-key "dir:/elsewhere=$WORK/k2.pub"

# unsigned: taken unless a signature is required; a mount by index name needs no tag
check mounts c c:1 "${T1[@]}"
check refused "the tag is not signed" c:1 "${T1[@]}" --require-signed
check refused "the tag is not signed" c:1 --require-signed
check mounts a "$ha" --require-signed

# image copy takes the signature along, after the tag: the copy mounts as signed
check "$LAZYROOT" image copy a:1 --from "$S" --to "dir:$WORK/copy"
check cmp store/signatures/a:1 copy/signatures/a:1
check "$LAZYROOT" mount a:1 "$WORK/mnt" --store "dir:$WORK/copy" --trust-key k2.pub --require-signed
check cmp "$WORK/a/file" "$WORK/mnt/file"
check "$LAZYROOT" umount "$WORK/mnt"
# a signature for another index than the one copied stays behind
echo "$hb" >store/tags/a:1
check "$LAZYROOT" image copy a:1 --from "$S" --to "dir:$WORK/copy2"
check test ! -e copy2/signatures/a:1
echo "$ha" >store/tags/a:1

# an HTTP store (nginx over the same directory): the signature is read with the tag and answered
# from memory as long as the tag is (tag_ttl), and checked at every mount all the same
nginx_start "$WORK/store"
H=$NGINX_URL
hmounts() {
	"$LAZYROOT" mount a:1 "$WORK/mnt" --store "$H" "$@" || return 1
	local ok=0
	cmp -s "$WORK/a/file" "$WORK/mnt/file" && ok=1
	"$LAZYROOT" umount "$WORK/mnt" || return 1
	[ "$ok" = 1 ]
}
check hmounts --trust-key k2.pub --require-signed
check hmounts --trust-key k2.pub --require-signed
check test "$(grep -c 'GET /signatures/a:1 ' "$NGINX_DIR/access.log")" = 1
echo "$hb" >store/tags/a:1
if LAZYROOT_TAG_TTL=0 "$LAZYROOT" mount a:1 "$WORK/mnt" --store "$H" --trust-key k2.pub \
	2>"$WORK/err"; then
	"$LAZYROOT" umount "$WORK/mnt"
	check false "an HTTP store's tag moved to another index was mounted"
else
	check grep -q "image 'a:1' from store '$H': refused: index $hb is not the one" "$WORK/err"
fi
echo "$ha" >store/tags/a:1
check "$LAZYROOT" node stop
