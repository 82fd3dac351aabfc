#!/bin/bash
# Teardown when the launcher itself is stopped mid-run: SIGTERM ends the sandbox (reported as
# "signal") and leaves nothing; after SIGKILL of the launcher the sandbox's init dies with it
# (and the kernel kills the rest of its pid namespace): no process and no mount is left. The
# launcher cannot remove its cgroups after SIGKILL; the test's cleanup removes them (a later
# `lazyroot gc` is the follow-up).
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
workdir

# Start a sandbox whose command announces itself on stdout, then blocks; return once announced.
start_blocked() {
	mkfifo "$WORK/out.$1"
	SB_EXEC=1 sb_run --json="$WORK/r.$1" -- /bin/sh -c 'echo ready; exec tail -f /dev/null' >"$WORK/out.$1" &
	launcher=$!
	exec 7<"$WORK/out.$1"
	read -r line <&7
	check test "$line" = ready
}

start_blocked term
kill -TERM "$launcher"
rc=0
wait "$launcher" || rc=$?
exec 7<&-
check test "$rc" = 137
check test "$(json_field "$WORK/r.term" killed_by)" = signal
check sb_no_leftovers

start_blocked kill
init=$(ps -e -o pid=,ppid= | awk -v p="$launcher" '$2 == p { print $1 }')
check test -n "$init"
kill -KILL "$launcher"
wait "$launcher" || true
# Wait for the init (reparented, then reaped by the host's init) to be gone.
[ -n "$init" ] && python3 -c '
import os, select, sys
try:
    fd = os.pidfd_open(int(sys.argv[1]))
except ProcessLookupError:
    sys.exit(0)
select.select([fd], [], [], 10)' "$init"
exec 7<&-
# A zombie init waits only for the host's init to reap it: it runs nothing and holds no mount.
procs=$(ps -e -o uid=,stat=,args= |
	awk -v lo="$SB_UID_BASE" -v hi=$((SB_UID_BASE + 65536)) '$1 >= lo && $1 < hi && $2 !~ /^Z/')
[ -z "$procs" ] || log "left behind: $procs"
check test -z "$procs"
mounts=$(grep -ls -- "$SB_NAME-" /proc/[0-9]*/mountinfo || true)
check test -z "$mounts"
