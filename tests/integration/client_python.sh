#!/bin/bash
# The Python client (clients/python) against a real node and real sandboxes: the episode of
# tests/python/test_client.py (create, put a tree, 50 execs with a timeout, an output limit
# and a child that outlives its exec, a stream re-attached after the worker's kill -9, a
# stage that refuses a connection allowed before, get a tar, destroy), its errors, and one
# client shared by four threads.  Then nothing of the sandboxes is left on the host: no
# process, cgroup, mount, network namespace or state directory.  Steps whose routes the node
# does not serve yet print SKIP lines.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
. "$(dirname "$0")/../lib/netsb.sh"
workdir
. "$(dirname "$0")/../lib/apinode.sh"
for i in 1 t0 t1 t2 t3; do
	cleanup_add curl -s -m 60 --unix-socket "$API" -X DELETE "http://n/v1/sandboxes/$SB_NAME-$i" -o /dev/null
done
need_cmd curl
serve allowed 0.0.0.0
api_node_start

export ROOTFS SB_NAME SB_UID_BASE LAZYROOT WORK ALLOWED_PORT=$allowed CLIENT_NOTES=$WORK/notes
check env PYTHONPATH="$REPO/clients/python" PYTHONDONTWRITEBYTECODE=1 \
	python3 "$REPO/tests/python/test_client.py"

# nothing left of the episode's sandbox: its netns (held by no process, no nsfs mount)
init=$(sed -n 's/^init_pid //p' "$WORK/notes")
netns=$(sed -n 's/^netns //p' "$WORK/notes")
check test -n "$init"
for i in 1 t0 t1 t2 t3; do
	check test ! -e "$API_STATE/$SB_NAME-$i"
done
check sb_no_leftovers
# a network namespace is held by a process in it or by a bind mount of it
netns_held() {
	ls -l /proc/[0-9]*/ns/net 2>/dev/null | grep -qF "$1" ||
		grep -qsF "$1" /proc/[0-9]*/mountinfo
}
check test -n "$netns"
[ -z "$netns" ] || check_not netns_held "$netns"

# The README's agent loop, run as it is written there.
python3 - "$REPO/README.md" >"$WORK/agent.py" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
sec = text[text.index("## An agent loop in Python"):]
print(re.search(r"```python\n(.*?)```", sec, re.S).group(1), end="")
PY
check grep -q 'client.sandbox' "$WORK/agent.py"
served=$(curl -s -m 60 --unix-socket "$API" -X PUT --data-binary x \
	'http://n/v1/sandboxes/no-such-sandbox/files?path=/x')
if [[ $served == *"/files: not found"* ]]; then
	log "SKIP: the README's agent loop: the node does not serve PUT /v1/sandboxes/{id}/files yet"
else
	check env PYTHONPATH="$REPO/clients/python" PYTHONDONTWRITEBYTECODE=1 \
		python3 "$WORK/agent.py" "$ROOTFS" >"$WORK/agent.out"
	cat "$WORK/agent.out" >&2
	check test "$(grep -c '^\$ ' "$WORK/agent.out")" = 10
	check grep -qx '$ python3 -c '\''import add; print(add.add(2, 3))'\'' -> 0 ' "$WORK/agent.out"
	check grep -qx 'grade: pass' "$WORK/agent.out"
	id=$(sed -n 's/^sandbox //p' "$WORK/agent.out")
	check test -n "$id"
	check test ! -e "$API_STATE/$id"
	check test -z "$(find /sys/fs/cgroup -maxdepth 8 -type d -name "$id" 2>/dev/null)"
fi
