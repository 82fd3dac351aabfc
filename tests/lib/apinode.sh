# shellcheck shell=bash
# The test's own node, for the API's clients; source after sandbox.sh and `workdir`:
#
#   api_node_start    start `lazyroot node` detached (its own session) and return once it has
#                     said READY=1 (sd_notify); its API socket is $API (beside LAZYROOT_SOCKET),
#                     its state directory $API_STATE; stopped at exit by common.sh
export LAZYROOT_STORE=dir:$WORK/store LAZYROOT_CACHE=$WORK/cache LAZYROOT_IMAGES=$WORK/images
export LAZYROOT_RECORD_DIR=$WORK/launchers
SB_RECORDS=$LAZYROOT_RECORD_DIR
API=${LAZYROOT_SOCKET%.sock}-api.sock
API_STATE=/run/lazyroot/service

api_node_start() {
	python3 - "$LAZYROOT" "$WORK" <<'PY' || fail "the node did not start"
import os, socket, subprocess, sys
lazyroot, work = sys.argv[1], sys.argv[2]
n = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
n.bind(work + "/notify.sock")
n.settimeout(60)
subprocess.Popen([lazyroot, "node", "--log", work + "/node.log"], start_new_session=True,
                 env=dict(os.environ, NOTIFY_SOCKET=work + "/notify.sock"),
                 stdout=subprocess.DEVNULL, stderr=open(work + "/node.err", "w"))
sys.exit(0 if n.recv(64) == b"READY=1" else 1)
PY
}
