#!/bin/bash
# Attacks: "scan ports for reference solutions" and "fetch answers through package and module
# proxies": the sandbox has no interface but its own loopback; a service the test runs on the
# host (on 127.0.0.1 and on every address) is reachable from the host and unreachable from
# inside, and a scan of the low ports finds nothing.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
workdir

mkfifo "$WORK/ready"
python3 - "$WORK/ready" <<'PY' &
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 0))
s.listen(16)
with open(sys.argv[1], "w") as f:
    f.write("%d\n" % s.getsockname()[1])
while True:
    c, _ = s.accept()
    c.sendall(b"the answers\n")
    c.close()
PY
server=$!
cleanup_add kill "$server"
read -r port <"$WORK/ready"

# The service really is there: the host reaches it.
check python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 5)' "$port"

targets=("127.0.0.1:$port")
for a in $(hostname -I 2>/dev/null); do
	[[ $a == *.* ]] && targets+=("$a:$port")
done
check attack -- net "${targets[@]}"
check sb_no_leftovers
