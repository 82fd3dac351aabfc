#!/bin/bash
# The API's sandbox routes on a real node and real sandboxes (docs/api.md), through
# curl --unix-socket: create from the Debian rootfs, get, list by label, execs (exit status,
# stdout and stderr apart as frames, a retried exec id run once, a timeout, ?attach=1, a
# re-attach from offsets), a stage that is not in the policy refused, bad bodies and unknown
# ids refused, destroy (twice: 204 both times) and nothing of the sandbox left.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
need_cmd curl python3
workdir
. "$(dirname "$0")/../lib/apinode.sh"
api=$WORK/node-api.sock
sb=$SB_NAME-1
cleanup_add curl -s -m 60 --unix-socket "$api" -X DELETE "http://n/v1/sandboxes/$sb" -o /dev/null

# the node, started detached once it has said READY=1
api_node_start

# METHOD PATH [BODY]: the answer's body in $WORK/body, its status printed
req() {
	local args=(-s -m 60 --unix-socket "$api" -o "$WORK/body" -w '%{http_code}' -X "$1")
	[ $# -ge 3 ] && args+=(-d "$3")
	curl "${args[@]}" "http://n$2"
}
field() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); [v:=v[k] for k in sys.argv[2:]]; print("null" if v is None else str(v).lower() if isinstance(v,bool) else v)' "$WORK/body" "$@"; }
# frames of the stream in $WORK/body as "S:text|..." (text with newlines as \n)
frames() {
	python3 - "$WORK/body" <<'PY'
import sys
b = open(sys.argv[1], "rb").read()
out, i = [], 0
while i < len(b):
    s, n = b[i], int.from_bytes(b[i + 4:i + 8], "big")
    assert b[i + 1:i + 4] == b"\0\0\0" and i + 8 + n <= len(b)
    t = b[i + 8:i + 8 + n]
    out.append("%d:%s" % (s, t.decode().replace("\n", "\\n") if s != 3 else "result"))
    i += 8 + n
print("|".join(out))
PY
}

check test "$(req POST /v1/sandboxes "{\"rootfs\": \"$ROOTFS\", \"name\": \"$sb\", \"labels\": {\"t\": \"api\"}, \"policy\": {\"uid_base\": \"$SB_UID_BASE\", \"pool\": \"false\"}}")" = 201
check test "$(field id)" = "$sb"
check test "$(req POST /v1/sandboxes "{\"rootfs\": \"$ROOTFS\", \"name\": \"$sb\", \"policy\": {\"uid_base\": \"$SB_UID_BASE\"}}")" = 409
check test "$(req GET "/v1/sandboxes/$sb")" = 200
check test "$(field state)" = running
check test "$(req GET '/v1/sandboxes?label=t=api')" = 200
check test "$(python3 -c 'import json,sys; print([s["id"] for s in json.load(open(sys.argv[1]))["sandboxes"]])' "$WORK/body")" = "['$sb']"
check test "$(req GET '/v1/sandboxes?label=t=other')" = 200
check test "$(field sandboxes)" = "[]"

# an exec: status, output apart, once per id
check test "$(req POST "/v1/sandboxes/$sb/execs" '{"exec_id": "e1", "argv": ["sh", "-c", "echo out; echo err >&2; exit 3"]}')" = 201
check test "$(req GET "/v1/sandboxes/$sb/execs/e1?wait=30")" = 200
check test "$(field status)" = 3
check test "$(field killed_by)" = null
check test "$(req GET "/v1/sandboxes/$sb/execs/e1/output")" = 200
check test "$(frames)" = '1:out\n|2:err\n|3:result'
check test "$(req GET "/v1/sandboxes/$sb/execs/e1/output?stdout=2&stderr=4")" = 200
check test "$(frames)" = '1:t\n|3:result'
check test "$(req POST "/v1/sandboxes/$sb/execs" '{"exec_id": "e1", "argv": ["sh", "-c", "echo again"]}')" = 200
check test "$(field existed)" = true
check test "$(req GET "/v1/sandboxes/$sb/execs/e1/output")" = 200
check test "$(frames)" = '1:out\n|2:err\n|3:result'
# attached: the stream from the start to the result
check test "$(req POST "/v1/sandboxes/$sb/execs?attach=1" '{"argv": ["sh", "-c", "echo a; sleep 0.3; echo b"]}')" = 200
check test "$(frames)" = '1:a\n|1:b\n|3:result'
# a timeout kills it
check test "$(req POST "/v1/sandboxes/$sb/execs" '{"exec_id": "slow", "argv": ["sleep", "100"], "timeout": 0.5}')" = 201
check test "$(req GET "/v1/sandboxes/$sb/execs/slow?wait=30")" = 200
check test "$(field killed_by)" = time

# refused
check test "$(req POST "/v1/sandboxes/$sb/execs" '{"argv": ["true"], "timout": 1}')" = 400
check grep -q "unknown field 'timout'" "$WORK/body"
check test "$(req POST "/v1/sandboxes/$sb/execs" '{"argv": []}')" = 400
check test "$(req GET "/v1/sandboxes/$sb/execs/nope?wait=1")" = 404
check test "$(req GET "/v1/sandboxes/$sb/execs/nope/output")" = 404
check test "$(req GET /v1/sandboxes/no-such-sandbox)" = 404
check grep -q '"error"' "$WORK/body"
check test "$(req POST /v1/sandboxes/no-such-sandbox/execs '{"argv": ["true"]}')" = 404
check test "$(req POST "/v1/sandboxes/$sb/stage" '{"stage": "no-such-stage"}')" -ge 400
check test "$(req GET "/v1/sandboxes/$sb/execs/e1?wait=x")" = 400

# destroy: 204, twice; nothing of it left
check test "$(req DELETE "/v1/sandboxes/$sb")" = 204
check test "$(req DELETE "/v1/sandboxes/$sb")" = 204
check test ! -e "/run/lazyroot/service/$sb"
sb_no_leftovers
