#!/bin/bash
# Shared budgets: the kernel's per-user limits (inotify instances, descriptors in flight over unix
# sockets, pipe buffer pages) and the node's ptys. A sandbox that exhausts one holds it while a
# second sandbox, and host root, still get what they need: each sandbox has host ids of its own
# (uid_base auto, owner of its user namespace) and a devpts instance with a max. The same attack
# with both sandboxes on one fixed uid_base shows the budget is real: there the second one starves.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
workdir

# brun NAME [RUN OPTIONS] -- ATTACK ARGS: an attack in a sandbox whose host ids are the node's
# (uid_base auto, not the test's fixed range); its report in $WORK/NAME.json.
brun() {
	local name=$1 opts=(); shift
	while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
	shift
	"$LAZYROOT" run --rootfs "$ROOTFS" --name "$SB_NAME-$name" --bind "$ATTACK_DIR:/lr" \
		--json="$WORK/$name.json" "${opts[@]}" -- /lr/attack "$HOST_PIDNS" "$@"
}

# hold NAME KIND [RUN OPTIONS]: start a sandbox that exhausts KIND and holds it until release
# NAME; returns once it says so.
declare -A hold_fd hold_pid
hold() {
	local name=$1 kind=$2 fd; shift 2
	mkfifo "$WORK/$name.in"
	exec {fd}<>"$WORK/$name.in"
	hold_fd[$name]=$fd
	brun "$name" "$@" -- hog "$kind" <"$WORK/$name.in" >"$WORK/$name.out" 2>&1 {fd}>&- &
	hold_pid[$name]=$!
	for _ in $(seq 300); do
		grep -q '^held$' "$WORK/$name.out" 2>/dev/null && break
		kill -0 "${hold_pid[$name]}" 2>/dev/null || break
		sleep 0.1
	done
	grep '^took' "$WORK/$name.out" >&2 || cat "$WORK/$name.out" >&2
	grep -q '^held$' "$WORK/$name.out"
}
release() {
	local name=$1 rc=0
	exec {hold_fd[$name]}>&-
	wait "${hold_pid[$name]}" || rc=$?
	return "$rc"
}
took() { awk '/^took/ { print $2 }' "$WORK/$1.out"; }
report() { json_field "$WORK/$1.json" "$2"; }
cleanup_add bash -c 'for p in $(jobs -p); do kill "$p"; done 2>/dev/null; true'

host_inotify() { python3 -c 'import ctypes, sys; sys.exit(ctypes.CDLL(None).inotify_init1(0) < 0)'; }
host_pty() { python3 -c 'import os; os.openpty()'; }

# inotify instances: charged to the owner of the sandbox's user namespace, 128 each
# (fs.inotify.max_user_instances). Host root's own are charged to root, no longer shared.
for kind in inotify inflight pipes; do
	check hold "$kind-a" "$kind"
	check test "$(took "$kind-a")" -gt 0
	check brun "$kind-b" -- budget "$kind"
	[ "$kind" = inotify ] && check host_inotify
	check release "$kind-a"
	# each had a range of its own
	check test "$(report "$kind-a" uid_base)" != "$(report "$kind-b" uid_base)"
	check test "$(report "$kind-a" uid_base)" -ne 0
done
# (descriptors in flight and pipe pages: host root is exempt by CAP_SYS_RESOURCE whatever the
# sandboxes do, so only the second sandbox is checked)

# The control: both sandboxes on one fixed range share its budgets, and the second starves.
for kind in inotify inflight pipes; do
	check hold "$kind-shared-a" "$kind" --set "uid_base=$SB_UID_BASE"
	check_not brun "$kind-shared-b" --set "uid_base=$SB_UID_BASE" -- budget "$kind" \
		>"$WORK/$kind-shared-b.out"
	check grep -q "^FAIL - one more $kind" "$WORK/$kind-shared-b.out"
	check release "$kind-shared-a"
done

# ptys: each sandbox's devpts instance holds at most `ptys` (default 32), so that one sandbox
# never takes the node's pool (kernel.pty.max less the host's reserve).
check hold ptys-a ptys
check test "$(took ptys-a)" = 32
check grep -q 'No space left on device' "$WORK/ptys-a.out"
check brun ptys-b -- budget ptys
check host_pty
check release ptys-a
check hold ptys-small ptys --set ptys=5
check test "$(took ptys-small)" = 5
check release ptys-small

# Per-namespace limits, set by the launcher in the sandbox's own user and ipc namespaces: they
# read as the policy says, cannot be raised from inside, and hold.
check brun nslimits -- nslimits user/max_user_namespaces=0 user/max_mnt_namespaces=0 \
	user/max_net_namespaces=0 user/max_inotify_instances=128 user/max_inotify_watches=65536 \
	user/max_fanotify_groups=0 user/max_fanotify_marks=0 kernel/msgmni=256 kernel/shmmni=256 \
	fs/mqueue/queues_max=256 "kernel/sem=32000 8192000 500 256"
check brun nslimits-set --set namespaces=2 --set ipc_objects=7 --set inotify_watches=9 -- \
	nslimits user/max_pid_namespaces=2 user/max_inotify_watches=9 kernel/msgmni=7 \
	"kernel/sem=32000 224000 500 7"
for kind in msgqueues shm semsets; do
	check brun "$kind" --set ipc_objects=7 -- hog "$kind" </dev/null >"$WORK/$kind.out" 2>&1
	check test "$(took "$kind")" = 7
done
check brun inotify-small --set inotify_instances=5 -- hog inotify </dev/null \
	>"$WORK/inotify-small.out" 2>&1
check test "$(took inotify-small)" = 5
# a value the kernel could not hold is refused before anything starts
check_not "$LAZYROOT" run --rootfs "$ROOTFS" --set ipc_objects=40000 -- /bin/true 2>"$WORK/bad"
check grep -q "ipc_objects = '40000'" "$WORK/bad"

# Nothing of them is left: no process in any range they had, no cgroup, no record.
for f in "$WORK"/*.json; do
	base=$(json_field "$f" uid_base)
	check test -z "$(ps -e -o uid= | awk -v lo="$base" -v hi=$((base + 65536)) '{ u = $1 < 0 ? $1 + 4294967296 : $1 } u >= lo && u < hi')"
done
check sb_no_leftovers
