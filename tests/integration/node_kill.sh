#!/bin/bash
# The worker of the node service killed with kill -9, 20 times at random moments, while 16
# sandboxes on one image stream and checksum every file of it, pass after pass until the last
# kill (so that every kill lands while all 16 read): each takeover restores every
# connection and has the kernel resend what the dead worker had read, so every sandbox exits 0,
# every checksum matches the source, nothing hangs (every wait is bounded), and the node counts
# 20 takeovers.
# tests/run: alone (its 16 sandboxes keep every CPU busy; node_kill and node_upgrade side by side
# took 180-190 s each, against 28-38 s one at a time)
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
need_cmd fusermount3 sha256sum
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir
. "$(dirname "$0")/../lib/node.sh"
KILLS=${NODE_KILLS:-20}
SANDBOXES=${NODE_SANDBOXES:-16}

NODE_IMAGE=deb:1
node_image "$NODE_IMAGE"
check_status 0 nrun "$NODE_IMAGE" -- /bin/true    # starts the node, mounts the image
before=$(node_pid takeovers)

stream_start "$SANDBOXES"
pid=$(node_pid)
for k in $(seq "$KILLS"); do
	# a random moment: 0 to 0.5 s into the worker's life, which takes in its restore of every
	# connection and the first reads it serves (reads never stop meanwhile)
	sleep "0.$(printf %03d $((RANDOM % 500)))"
	kill -9 "$pid"
	pid=$(wait_worker "$pid") || { check false "a worker after kill $k"; break; }
done
stream_check
check test "$(node_pid takeovers)" = $((before + KILLS))
check_status 0 nrun "$NODE_IMAGE" -- /bin/true
check sb_no_leftovers
