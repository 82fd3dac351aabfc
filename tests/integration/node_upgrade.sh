#!/bin/bash
# `lazyroot node upgrade` 20 times, alternating between two copies of the binary (built
# separately: a different file, so every upgrade execs a new image), while 16 sandboxes on one
# image stream and checksum every file of it, pass after pass until the last upgrade (so that
# every upgrade happens while all 16 read): the old worker leaves every connection to the
# new one, so every sandbox exits 0 and every checksum matches the source.
# tests/run: alone (its 16 sandboxes keep every CPU busy; node_kill and node_upgrade side by side
# took 180-190 s each, against 28-38 s one at a time)
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
need_cmd fusermount3 sha256sum
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir
. "$(dirname "$0")/../lib/node.sh"
UPGRADES=${NODE_UPGRADES:-20}
SANDBOXES=${NODE_SANDBOXES:-16}

# each copy with the full program its front execs, the one that serves the node
serves_a=$(copy_lazyroot "$WORK/a")
serves_b=$(copy_lazyroot "$WORK/b")
NODE_IMAGE=deb:1
node_image "$NODE_IMAGE"
check_status 0 nrun "$NODE_IMAGE" -- /bin/true
holder=$(node_pid holder_pid)

stream_start "$SANDBOXES"
took=()
for k in $(seq "$UPGRADES"); do
	bin=$WORK/a/lazyroot serves=$serves_a
	[ $((k % 2)) = 0 ] && bin=$WORK/b/lazyroot serves=$serves_b
	old=$(node_pid)
	t0=$(date +%s%N)
	check timeout 60 "$LAZYROOT" node upgrade --binary "$bin"
	took+=($((($(date +%s%N) - t0) / 1000000)))
	new=$(node_pid)
	check test "$new" != "$old"
	check test "$(readlink "/proc/$new/exe")" = "$serves"
done
stream_check
check test "$(node_pid holder_pid)" = "$holder"
# The old worker leaves at once: nothing it had planned (a whole-file object
# for passthrough, made once reads go quiet, up to 2 s later) holds it back.
# Reads make such plans all the time here, so a worker that waited for them
# took about 1 s an upgrade; leaving now takes tens of ms.
median=$(printf '%s\n' "${took[@]}" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
log "upgrades took ${took[*]} ms (median $median)"
check test "$median" -lt 800
# a binary that is not there: refused, the worker serving goes on
pid=$(node_pid)
check_not "$LAZYROOT" node upgrade --binary "$WORK/nowhere"
check test "$(node_pid)" = "$pid"
check_status 0 nrun "$NODE_IMAGE" -- /bin/true
check sb_no_leftovers
