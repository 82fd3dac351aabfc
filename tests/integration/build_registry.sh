#!/bin/bash
# `lazyroot build docker://…` against a real registry: Debian's docker-registry (distribution
# 2.8) on 127.0.0.1 with htpasswd basic auth, seeded by skopeo with the four-layer umoci image
# of tests/lib/oci.sh (gzip layers) and with a two-platform image index, and by the registry's
# upload protocol with the same image in zstd and in uncompressed layers.  Each pulled image is extracted and
# compared exactly with the tree umoci unpacks.  Credentials come from --creds or from docker's
# config.json ($DOCKER_CONFIG, else ~/.docker).  Then the bad inputs, each a one-line error
# naming the input with no tag written: no or wrong credentials (401), an unknown tag (404), a
# registry answering 500, or 429 (waited for as its Retry-After asks, or refused when that is
# beyond a minute), and a blob cut off mid-answer (faultproxy in front of the registry),
# a blob whose bytes no longer match its digest and one cut short (the registry's own file of
# it altered), an unknown platform, a malformed reference.
. "$(dirname "$0")/../lib/common.sh"
. "$REPO/tests/lib/nginx.sh"
. "$REPO/tests/lib/registry.sh"
need_root
need_cmd umoci skopeo python3 docker-registry htpasswd curl zstd
need_faultproxy
workdir
store=dir:$WORK/store
data=$WORK/registry

layout=$(bash "$REPO/tests/lib/oci.sh" "$WORK/oci")
expected=$WORK/oci/expected

# A two-platform index: the host's platform gets the image, linux/riscv64 an image of its
# first layer alone (so that the tree shows which one was picked).
python3 - "$layout" "$WORK/multi" <<'PY'
import hashlib, json, os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
shutil.copytree(src, dst)
blobs = os.path.join(dst, "blobs", "sha256")
def put(doc, mt):
    data = json.dumps(doc).encode()
    d = hashlib.sha256(data).hexdigest()
    open(os.path.join(blobs, d), "wb").write(data)
    return {"mediaType": mt, "digest": "sha256:" + d, "size": len(data)}
def get(desc):
    return json.load(open(os.path.join(blobs, desc["digest"].split(":")[1])))
idx = json.load(open(os.path.join(dst, "index.json")))
mdesc = [m for m in idx["manifests"]
         if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == "test"][0]
man = get(mdesc)
cfg = get(man["config"])
cfg["architecture"] = "riscv64"
cfg["rootfs"]["diff_ids"] = cfg["rootfs"]["diff_ids"][:1]
cdata = json.dumps(cfg).encode()
cd = hashlib.sha256(cdata).hexdigest()
open(os.path.join(blobs, cd), "wb").write(cdata)
rman = dict(man, layers=man["layers"][:1],
            config={"mediaType": man["config"]["mediaType"], "digest": "sha256:" + cd, "size": len(cdata)})
rdesc = put(rman, mdesc["mediaType"])
host = "amd64" if os.uname().machine == "x86_64" else "arm64"
entries = [dict(rdesc, platform={"os": "linux", "architecture": "riscv64"}),
           {"mediaType": mdesc["mediaType"], "digest": mdesc["digest"], "size": mdesc["size"],
            "platform": {"os": "linux", "architecture": host}}]
inner = put({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": entries}, "application/vnd.oci.image.index.v1+json")
inner["annotations"] = {"org.opencontainers.image.ref.name": "multi"}
json.dump({"schemaVersion": 2, "manifests": [inner]}, open(os.path.join(dst, "index.json"), "w"))
PY

# push_variant KIND NAME:TAG: the image with its layers stored zstd-compressed or plain (no
# compression), pushed with the registry's own upload protocol (POST, then PUT with the digest;
# skopeo would compress plain layers again)
push_variant() {
	python3 - "$layout" "$1" "$REGISTRY" "$2" <<'PY'
import gzip, hashlib, json, os, subprocess, sys, urllib.request
layout, kind, registry, ref = sys.argv[1:5]
name, tag = ref.rsplit(":", 1)
blobs = os.path.join(layout, "blobs", "sha256")
def blob(d):
    return open(os.path.join(blobs, d.split(":")[1]), "rb").read()
def req(method, url, data=None, ctype=None):
    r = urllib.request.Request(url, data=data, method=method)
    if ctype:
        r.add_header("Content-Type", ctype)
    return urllib.request.urlopen(r)
def push(data):
    d = "sha256:" + hashlib.sha256(data).hexdigest()
    loc = req("POST", "http://%s/v2/%s/blobs/uploads/" % (registry, name)).headers["Location"]
    if loc.startswith("/"):
        loc = "http://" + registry + loc
    req("PUT", loc + ("&" if "?" in loc else "?") + "digest=" + d, data, "application/octet-stream")
    return d
idx = json.load(open(os.path.join(layout, "index.json")))
m = [m for m in idx["manifests"]
     if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == "test"][0]
man = json.loads(blob(m["digest"]))
push(blob(man["config"]["digest"]))
for l in man["layers"]:
    raw = gzip.decompress(blob(l["digest"]))
    if kind == "zstd":
        raw = subprocess.run(["zstd", "-q", "-c"], input=raw, capture_output=True, check=True).stdout
    l["mediaType"] = "application/vnd.oci.image.layer.v1.tar" + ("+zstd" if kind == "zstd" else "")
    l["digest"], l["size"] = push(raw), len(raw)
man["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
req("PUT", "http://%s/v2/%s/manifests/%s" % (registry, name, tag), json.dumps(man).encode(),
    man["mediaType"])
PY
}

# Seed without auth, then serve the same data with htpasswd basic auth.
registry_start "$data" || exit $?
check registry_seed "oci:$layout:test" lazyroot/test:1
check registry_seed "oci:$WORK/multi:multi" lazyroot/multi:1
check push_variant zstd lazyroot/zstd:1
check push_variant plain lazyroot/plain:1
registry_stop
auth=$(htpasswd_auth "$WORK/htpasswd" builder 's3cret pass') || exit $?
registry_start "$data" "$auth" || exit $?
ref=docker://$REGISTRY/lazyroot/test:1
log "registry at $REGISTRY (basic auth)"
export HOME=$WORK/home DOCKER_CONFIG=
mkdir -p "$HOME"

# --creds; the image and its config arrive whole
check "$LAZYROOT" build "$ref" --creds 'builder:s3cret pass' --store "$store" --tag reg:creds --no-progress
check "$LAZYROOT" image extract reg:creds "$WORK/x-creds" --store "$store"
check compare_trees --no-atime --ignore-root-mtime "$expected" "$WORK/x-creds"
cfg=$("$LAZYROOT" image inspect reg:creds --store "$store" --json)
check python3 -c '
import json, sys
c = json.loads(sys.argv[1])["config"]["config"]
assert c["Entrypoint"] == ["/bin/tool"] and c["WorkingDir"] == "/data" and c["User"] == "1000:1000", c
' "$cfg"

# the same from docker's config.json: ~/.docker, then $DOCKER_CONFIG (which wins), oci:// too
docker_config "$HOME/.docker" "$REGISTRY" builder 's3cret pass'
check "$LAZYROOT" build "oci://$REGISTRY/lazyroot/test:1" --store "$store" --tag reg:home --no-progress
check "$LAZYROOT" image extract reg:home "$WORK/x-home" --store "$store"
check compare_trees --no-atime --ignore-root-mtime "$expected" "$WORK/x-home"
docker_config "$WORK/dockercfg" "http://$REGISTRY" builder 's3cret pass'
docker_config "$HOME/.docker" "$REGISTRY" builder wrong
check env DOCKER_CONFIG="$WORK/dockercfg" "$LAZYROOT" build "$ref" --store "$store" --tag reg:env --no-progress
rm -r "$HOME/.docker"

# zstd and uncompressed layers
for kind in zstd plain; do
	check "$LAZYROOT" build "docker://$REGISTRY/lazyroot/$kind:1" --creds 'builder:s3cret pass' \
		--store "$store" --tag "reg:$kind" --no-progress
	check "$LAZYROOT" image extract "reg:$kind" "$WORK/x-$kind" --store "$store"
	check compare_trees --no-atime --ignore-root-mtime "$expected" "$WORK/x-$kind"
done

# by digest: the manifest the tag names
digest=sha256:$(skopeo inspect --raw --tls-verify=false --creds 'builder:s3cret pass' "$ref" | sha256sum | cut -d' ' -f1)
check "$LAZYROOT" build "docker://$REGISTRY/lazyroot/test@$digest" --creds 'builder:s3cret pass' \
	--store "$store" --tag reg:digest --no-progress
check test "$(cat "$WORK/store/tags/reg:digest")" = "$(cat "$WORK/store/tags/reg:creds")"

# an image index: the host's platform by default, --platform picks, an unknown one is named
mref=docker://$REGISTRY/lazyroot/multi:1
check "$LAZYROOT" build "$mref" --creds 'builder:s3cret pass' --store "$store" --tag reg:multi --no-progress
check "$LAZYROOT" image extract reg:multi "$WORK/x-multi" --store "$store"
check compare_trees --no-atime --ignore-root-mtime "$expected" "$WORK/x-multi"
check "$LAZYROOT" build "$mref" --creds 'builder:s3cret pass' --platform linux/riscv64 \
	--store "$store" --tag reg:riscv --no-progress
check "$LAZYROOT" image extract reg:riscv "$WORK/x-riscv" --store "$store"
check test -e "$WORK/x-riscv/etc/remove-me"     # layer 2 removes it: layer 1 alone
check test ! -e "$WORK/x-riscv/links"           # layer 4 adds it

# bad_build WHAT GREP ARGS...: the build fails with one line that holds GREP, and writes no tag;
# the waits a 429 asked for are said before it, one line each (counted in $waits)
WAIT_SAID='the registry limits requests (429); waiting'
bad_build() {
	local what=$1 pat=$2 tag=reg:bad; shift 2
	rm -f "$WORK/store/tags/$tag"
	if err=$("$LAZYROOT" build "$@" --store "$store" --tag "$tag" --no-progress 2>&1); then
		_check_result 0 "$what: build succeeded"
		return
	fi
	log "$what: $err"
	waits=$(grep -c -F -- "$WAIT_SAID" <<<"$err" || true)
	err=$(grep -v -F -- "$WAIT_SAID" <<<"$err" || true)
	check grep -q -- "$pat" <<<"$err"
	check test "$(wc -l <<<"$err")" = 1
	check test ! -e "$WORK/store/tags/$tag"
}

bad_build "no credentials" "asks for credentials" "$ref"
bad_build "wrong credentials" "401" "$ref" --creds builder:wrong
bad_build "unknown tag" "MANIFEST_UNKNOWN" "docker://$REGISTRY/lazyroot/test:nope" --creds 'builder:s3cret pass'
bad_build "unknown repository" "404" "docker://$REGISTRY/lazyroot/none:1" --creds 'builder:s3cret pass'
bad_build "unknown platform" "s390x" "$mref" --creds 'builder:s3cret pass' --platform linux/s390x
bad_build "malformed reference" "not an image reference" "docker://$REGISTRY/Bad//name:1"
bad_build "nothing listening" "docker://127.0.0.1:1/x:1" "docker://127.0.0.1:1/x:1"

# 500s and a connection cut mid-blob, from a proxy in front of the registry
faultproxy_start "$REGISTRY_PORT"
pref=docker://127.0.0.1:$PROXY_PORT/lazyroot/test:1
check "$LAZYROOT" build "$pref" --creds 'builder:s3cret pass' --store "$store" --tag reg:proxy --no-progress
fault "500 1 match /manifests/"
bad_build "manifest answered 500" "500" "$pref" --creds 'builder:s3cret pass'
fault "500 1 match /blobs/"
bad_build "blob answered 500" "500" "$pref" --creds 'builder:s3cret pass'
layer=$(awk 'NR == 2 { print $1 }' "$WORK/oci/layers.txt")
big=$(awk 'NR == 1 { print $1 }' "$WORK/oci/layers.txt")   # 2 MiB: cut mid-file
fault "truncate 1 match /blobs/sha256:$big"
bad_build "big layer cut off" "truncated" "$pref" --creds 'builder:s3cret pass'
fault "truncate 1 match /blobs/sha256:$layer"
bad_build "layer cut off" "truncated" "$pref" --creds 'builder:s3cret pass'
fault "truncate 1 match /blobs/"
bad_build "config cut off" "truncated" "$pref" --creds 'builder:s3cret pass'

# a registry that limits requests (429): what its Retry-After asks is waited for, and the pull
# gets through whole; a wait beyond a minute (a quota spent for hours) fails at once, saying so
since() { echo $((($(date +%s%N) - $1) / 1000000)); }
fault "429 2 match /blobs/ retry-after 1"
t0=$(date +%s%N)
err_to() { local f=$1; shift; "$@" 2>"$f"; }   # FILE CMD…: CMD's stderr to FILE
check err_to "$WORK/limited.err" "$LAZYROOT" build "$pref" --creds 'builder:s3cret pass' \
	--store "$store" --tag reg:limited --no-progress
ms=$(since "$t0")
log "every second blob request answered 429 (Retry-After: 1): pulled in $ms ms"
check test "$ms" -ge 1000
# each wait is said (a pull that stops for up to a minute must not look hung), and nothing else
log "stderr: $(head -c 300 "$WORK/limited.err")"
check grep -q -F -- "$WAIT_SAID 1 s as it asks" "$WORK/limited.err"
check_not grep -q -v -F -- "$WAIT_SAID 1 s as it asks" "$WORK/limited.err"
check test "$(cat "$WORK/store/tags/reg:limited")" = "$(cat "$WORK/store/tags/reg:proxy")"
fault "429 2 match /blobs/"
check "$LAZYROOT" build "$pref" --creds 'builder:s3cret pass' --store "$store" --tag reg:limited2 \
	--no-progress
check test "$(cat "$WORK/store/tags/reg:limited2")" = "$(cat "$WORK/store/tags/reg:proxy")"
fault "429 1 match /manifests/ retry-after 1"
t0=$(date +%s%N)
bad_build "manifest answered 429 every time" "limits requests (429)" "$pref" --creds 'builder:s3cret pass'
check test "$(since "$t0")" -ge 2000
check test "$waits" = 2
fault "429 1 match /manifests/ retry-after 3600"
t0=$(date +%s%N)
bad_build "429 asking for an hour" "asks to wait 3600 s" "$pref" --creds 'builder:s3cret pass'
check test "$(since "$t0")" -lt 5000
fault ""

# the registry's own copy of a layer altered: other bytes of the same size (the gzip header's
# mtime, which gunzip ignores: only the digest can tell), then cut short
blob=$(registry_blob "$data" "$layer")
cp "$blob" "$WORK/blob.orig"
printf '\x01\x02\x03\x04' | dd of="$blob" bs=1 seek=4 conv=notrunc status=none
bad_build "digest mismatch" "digest mismatch" "$ref" --creds 'builder:s3cret pass'
check grep -q "${layer#sha256:}" <<<"$err"
cp "$WORK/blob.orig" "$blob"
truncate -s -100 "$blob"
bad_build "truncated blob" "truncated" "$ref" --creds 'builder:s3cret pass'
cp "$WORK/blob.orig" "$blob"
check "$LAZYROOT" build "$ref" --creds 'builder:s3cret pass' --store "$store" --tag reg:again --no-progress
