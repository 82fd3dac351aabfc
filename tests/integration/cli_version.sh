#!/bin/bash
# The version a user and an operator read:
#  1. `lazyroot --version` and `lazyroot version` print "lazyroot VERSION (commit C)", VERSION
#     the Makefile's and C a commit of this checkout (12 hex digits, "-dirty" after them when
#     the tree had changes); `version --json` says the same as JSON;
#  2. `node status` names the worker's version, `node status --json` has it as "version" and
#     "commit", and /metrics as lazyroot_build_info{version=...,commit=...} 1.
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd fusermount3 python3 curl git
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir
export LAZYROOT_STORE=dir:$WORK/store LAZYROOT_CACHE=$WORK/cache LAZYROOT_IMAGES=$WORK/images

want=$(sed -n 's/^VERSION = //p' "$REPO/Makefile")
check test -n "$want"

# --- 1. the command
line=$("$LAZYROOT" --version)
check test "$("$LAZYROOT" version)" = "$line"
commit=$(sed -n "s/^lazyroot $want (commit \\([0-9a-f]\\{12\\}\\(-dirty\\)\\?\\))\$/\\1/p" <<<"$line")
check test -n "$commit"
log "$line"
# a commit this checkout has (the build is of it; a later commit may have followed)
check git -C "$REPO" cat-file -e "${commit%-dirty}^{commit}"
json=$("$LAZYROOT" version --json)
check test "$(python3 -c 'import json, sys; d = json.loads(sys.argv[1]); print(d["version"], d["commit"])' "$json")" = "$want $commit"

# --- 2. the node's
mkdir -p "$WORK/src" "$WORK/mnt"
echo hello >"$WORK/src/f"
"$LAZYROOT" build "$WORK/src" --tag v:1 --no-progress >/dev/null
check "$LAZYROOT" mount v:1 "$WORK/mnt"
cleanup_add umount -lq "$WORK/mnt"
check grep -q "^node $LAZYROOT_SOCKET: lazyroot $want (commit $commit), worker pid " <("$LAZYROOT" node status)
check test "$(node_pid version) $(node_pid commit)" = "$want $commit"
metrics=$(curl -sf --max-time 10 "http://$LAZYROOT_METRICS/metrics")
check grep -qx "lazyroot_build_info{version=\"$want\",commit=\"$commit\"} 1" <<<"$metrics"
check "$LAZYROOT" umount "$WORK/mnt"
