#!/bin/bash
# A real four-layer OCI image made by umoci (whiteouts, an opaque directory,
# hard links, xattrs): built from the OCI layout, from a `docker save` archive
# and from an OCI archive made by skopeo; each extracted and compared exactly
# with the tree umoci unpacks.  The image config is kept.  Then the bad OCI
# inputs: a missing blob and a blob whose digest does not match.
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd umoci skopeo python3
workdir
store=dir:$WORK/store

layout=$(bash "$REPO/tests/lib/oci.sh" "$WORK/oci")
expected=$WORK/oci/expected

check "$LAZYROOT" build "$layout" --store "$store" --tag oci:layout --no-progress
check "$LAZYROOT" image extract oci:layout "$WORK/x-layout" --store "$store"
check compare_trees --no-atime --ignore-root-mtime "$expected" "$WORK/x-layout"

check "$LAZYROOT" build "$WORK/oci/docker.tar" --store "$store" --tag oci:docker --no-progress
check "$LAZYROOT" image extract oci:docker "$WORK/x-docker" --store "$store"
check compare_trees --no-atime --ignore-root-mtime "$expected" "$WORK/x-docker"

# the config travels with the image: entrypoint, env, working dir, user
cfg=$("$LAZYROOT" image inspect oci:layout --store "$store" --json)
check python3 -c '
import json, sys
c = json.loads(sys.argv[1])["config"]["config"]
assert c["Entrypoint"] and c["Env"] and c["WorkingDir"] and c["User"], c
' "$cfg"

# a multi-platform index: --platform picks, an unknown platform is refused by name
python3 - "$layout" <<'PY'
import json, sys, os, hashlib
lay = sys.argv[1]
idx = json.load(open(os.path.join(lay, "index.json")))
m = idx["manifests"][0]
def entry(arch):
    e = dict(m); e["platform"] = {"os": "linux", "architecture": arch}; e.pop("annotations", None)
    return e
inner = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
         "manifests": [entry("riscv64"), entry("amd64" if os.uname().machine == "x86_64" else "arm64")]}
data = json.dumps(inner).encode()
d = hashlib.sha256(data).hexdigest()
open(os.path.join(lay, "blobs", "sha256", d), "wb").write(data)
idx["manifests"] = [{"mediaType": inner["mediaType"], "digest": "sha256:" + d, "size": len(data)}]
json.dump(idx, open(os.path.join(lay, "index.json"), "w"))
PY
check "$LAZYROOT" build "$layout" --store "$store" --tag oci:multi --no-progress
check "$LAZYROOT" build "$layout" --store "$store" --tag oci:riscv --platform linux/riscv64 --no-progress
err=$("$LAZYROOT" build "$layout" --store "$store" --tag oci:s390 --platform linux/s390x --no-progress 2>&1) && fail "unknown platform accepted"
log "unknown platform: $err"
check grep -q s390x <<<"$err"
check_not test -e "$WORK/store/tags/oci:s390"

# a missing blob, then a blob whose bytes do not match its digest
layer=$(awk 'NR == 2 { sub(/^sha256:/, "", $1); print $1 }' "$WORK/oci/layers.txt")
cp -a "$layout" "$WORK/missing"
rm "$WORK/missing/blobs/sha256/$layer"
err=$("$LAZYROOT" build "$WORK/missing" --store "$store" --tag oci:missing --no-progress 2>&1) && fail "missing blob accepted"
log "missing blob: $err"
check grep -q "$layer" <<<"$err"
check test "$(wc -l <<<"$err")" = 1
check_not test -e "$WORK/store/tags/oci:missing"

cp -a "$layout" "$WORK/corrupt"
# same size, other bytes: the gzip header's mtime field (ignored by gunzip)
printf '\x01\x02\x03\x04' | dd of="$WORK/corrupt/blobs/sha256/$layer" bs=1 seek=4 conv=notrunc status=none
err=$("$LAZYROOT" build "$WORK/corrupt" --store "$store" --tag oci:corrupt --no-progress 2>&1) && fail "digest mismatch accepted"
log "digest mismatch: $err"
check grep -q "$layer" <<<"$err"
check test "$(wc -l <<<"$err")" = 1
check_not test -e "$WORK/store/tags/oci:corrupt"
