#!/bin/bash
# lazyroot doctor: one line per check (kernel, Landlock, user namespaces, cgroups, subordinate
# ids, FUSE, passthrough, idmapped FUSE, the node), a "fix:" line under each problem, --json
# saying the same, and exit 1 exactly when a check fails:
#  1. on this host (Landlock ABI 6 or later, /dev/fuse; facts the suite's other tests need);
#  2. the node: none answering with node_start off fails with its fix; a running node is named
#     with its version;
#  3. pure cgroup2 (a cgroup2 mounted over /sys/fs/cgroup in a mount namespace of the test's
#     own, as stock Debian 12 has it) whose launcher's cgroup delegates no controller: the
#     cgroups check fails and gives the delegation recipe.
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd python3 unshare fusermount3
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir
export LAZYROOT_STORE=dir:$WORK/store LAZYROOT_CACHE=$WORK/cache LAZYROOT_IMAGES=$WORK/images
names="kernel|landlock|user namespaces|cgroups|subordinate ids|fuse|fuse passthrough|idmapped fuse|node"

# state NAME: the state --json (on stdin) gives check NAME
state() {
	python3 -c 'import json, sys; print([c["state"] for c in json.load(sys.stdin)["checks"] if c["name"] == sys.argv[1]][0])' "$1"
}

# --- 1.
rc=0
"$LAZYROOT" doctor >"$WORK/text" || rc=$?
"$LAZYROOT" doctor --json >"$WORK/json" || true
check test "$(python3 -c 'import json, sys; print("|".join(c["name"] for c in json.load(sys.stdin)["checks"]))' <"$WORK/json")" = "$names"
check test "$(grep -cv '^      fix: ' "$WORK/text")" = 9
check test "$(grep -c '^      fix: ' "$WORK/text")" = "$(grep -cE '^(warn|FAIL) ' "$WORK/text")"
check test "$rc" = "$(grep -q '^FAIL ' "$WORK/text" && echo 1 || echo 0)"
check test "$(python3 -c 'import json, sys; print(json.load(sys.stdin)["ok"])' <"$WORK/json")" = "$([ "$rc" = 0 ] && echo True || echo False)"
check test "$(state landlock <"$WORK/json")" = ok
check test "$(state fuse <"$WORK/json")" = ok

# --- 2.
check test "$(state node <"$WORK/json")" = ok
rc=0
LAZYROOT_NODE_START=off "$LAZYROOT" doctor >"$WORK/text" || rc=$?
check test "$rc" = 1
check grep -qx "FAIL  node              none at $LAZYROOT_SOCKET (No such file or directory), and node_start is off" "$WORK/text"
check grep -A1 '^FAIL  node' "$WORK/text" | grep -q '^      fix: systemctl start lazyroot-node'
mkdir -p "$WORK/src" "$WORK/mnt"
echo hi >"$WORK/src/a"
"$LAZYROOT" build "$WORK/src" --tag d:1 --no-progress >/dev/null
check "$LAZYROOT" mount d:1 "$WORK/mnt"
cleanup_add umount -lq "$WORK/mnt"
check grep -q "^ok    node              $LAZYROOT_SOCKET answers: lazyroot $("$LAZYROOT" version --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])'), worker pid $(node_pid)\$" <("$LAZYROOT" doctor)
check "$LAZYROOT" umount "$WORK/mnt"

# --- 3.
rc=0
unshare -m sh -c 'mount --make-rprivate / && mount -t cgroup2 none /sys/fs/cgroup && exec "$0" doctor' "$LAZYROOT" >"$WORK/text" || rc=$?
check test "$rc" = 1
check grep -q '^FAIL  cgroups           cgroup2; the launcher.s cgroup .* delegates no memory pids cpu$' "$WORK/text"
check grep -A1 '^FAIL  cgroups' "$WORK/text" | grep -qF "echo '+memory +pids +cpu' > /sys/fs/cgroup/cgroup.subtree_control"
