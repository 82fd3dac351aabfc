#!/bin/bash
# Attacks: "forge requests to the harness's unix socket" and "signal a host process", behind the
# namespaces: Landlock scoping. A process the test puts into the sandbox's own pid and network
# namespaces from outside (as the sandbox's own uid, so that plain permission checks would let
# a signal through) can be neither signalled nor reached on its abstract unix socket; with
# landlock = false the same attacks succeed, so the refusals are the scoping's. A host abstract
# socket is out of reach as well.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
. "$(dirname "$0")/../lib/netsb.sh"
need_cmd nsenter setpriv
[ -x /usr/bin/python3 ] || { log "/usr/bin/python3 is missing; skipping"; exit 77; }
workdir

sock=lrtest-scope-$$
# The harness's socket on the host.
python3 -c 'import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.bind("\0" + sys.argv[1] + "-host"); s.listen()
print("ready", flush=True); time.sleep(600)' "$sock" >"$WORK/host.out" &
cleanup_add kill $!

# Inside the sandbox started by sb_start: a process in its pid and network namespaces, outside
# its Landlock domain, running as the sandbox's root uid and listening on @$sock. Sets $inner
# (its pid inside).
plant() {
	local init host_pid line
	init=$(ps -e -o pid=,ppid= | awk -v p="$SB_PID" '$2 == p { print $1 }')
	[ -n "$init" ] || fail "no init under launcher $SB_PID"
	mkfifo "$WORK/plant.$1"
	nsenter -t "$init" -p -n -- setpriv --reuid="$SB_UID_BASE" --regid="$SB_UID_BASE" --clear-groups \
		/usr/bin/python3 -c 'import os, socket, sys, time
s = socket.socket(socket.AF_UNIX); s.bind("\0" + sys.argv[1]); s.listen()
print(os.getpid(), flush=True); time.sleep(600)' "$sock" >"$WORK/plant.$1" 7<&- 8>&- &
	cleanup_add _sb_kill $!
	disown $!   # its SIGKILL at the sandbox's end is expected: no job report
	read -r inner <"$WORK/plant.$1"
	[ -n "$inner" ] || fail "the planted process did not start"
}

sb_start scoped -- /lr/attack "$HOST_PIDNS" reach -
plant scoped
sb_ask "kill:$inner"
sb_ask "abstract:$sock"
sb_ask "abstract:$sock-host"
sb_stop
check test "$SB_RC" = 0

# The control: without Landlock the same signal and connect go through.
sb_start unscoped --set landlock=false -- /lr/attack "$HOST_PIDNS" reach -
plant unscoped
echo "abstract:$sock" >&8
read -r line <&7
check test "${line%% -*}" = FAIL
read -r line <&7
echo "kill:$inner" >&8
read -r line <&7
check test "${line%% -*}" = FAIL
read -r line <&7   # "it is still there": not, this time
read -r line <&7
check test "$line" = done
sb_stop
check sb_no_leftovers
