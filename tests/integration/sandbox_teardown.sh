#!/bin/bash
# Teardown when the launcher itself is stopped mid-run: SIGTERM ends the sandbox (reported as
# "signal") and leaves nothing. After SIGKILL of the launcher the sandbox's init dies with it
# (PR_SET_PDEATHSIG) and the kernel kills the rest of its pid namespace, so no process and no
# mount is left; the cgroups and the launcher's record are, until `lazyroot gc` or a later
# `lazyroot run` removes them — and neither touches a sandbox whose launcher still runs. gc kills
# what it still finds in a dead launcher's cgroups (v1 and cgroup2) before removing them.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
workdir
# Launcher records of our own: a launcher of another test on this host collects stale records
# when it starts, and would race this test's gc for its killed sandboxes.
export LAZYROOT_RECORD_DIR=$WORK/launchers
# Cgroups named after each sandbox, listed in its launcher's record: pooled ones (the default)
# outlive the sandbox and their teardown is tests/integration/sandbox_pool.sh's.
export LAZYROOT_POOL=0
SB_RECORDS=$LAZYROOT_RECORD_DIR

# Start a sandbox whose command announces itself on stdout, then runs CMD; return once announced.
# Sets $launcher and $sb (the sandbox's name).
start_blocked() {
	local tag=$1 cmd=$2
	mkfifo "$WORK/out.$tag"
	SB_EXEC=1 sb_run --json="$WORK/r.$tag" -- /bin/sh -c "echo ready; exec $cmd" >"$WORK/out.$tag" &
	launcher=$!
	# sb_run counted in the background subshell: count here too, so that names stay unique.
	_sb_count=$((_sb_count + 1))
	sb=$SB_NAME-$_sb_count
	exec 7<"$WORK/out.$tag"
	read -r line <&7
	check test "$line" = ready
}

# SIGKILL the launcher and wait until its sandbox's init (reparented, then reaped by the host's
# init) is gone.
kill_launcher() {
	local init
	init=$(ps -e -o pid=,ppid= | awk -v p="$launcher" '$2 == p { print $1 }')
	check test -n "$init"
	kill -KILL "$launcher"
	wait "$launcher" || true
	[ -n "$init" ] && python3 -c '
import os, select, sys
try:
    fd = os.pidfd_open(int(sys.argv[1]))
except ProcessLookupError:
    sys.exit(0)
select.select([fd], [], [], 10)' "$init"
	exec 7<&-
}

# No process of the sandbox runs (a zombie init waiting for the host's init holds nothing) and
# no mount namespace holds its tmpfs.
sandbox_gone() {
	local procs mounts
	procs=$(ps -e -o uid=,stat=,args= |
		awk -v lo="$SB_UID_BASE" -v hi=$((SB_UID_BASE + 65536)) '{ u = $1 < 0 ? $1 + 4294967296 : $1 } u >= lo && u < hi && $2 !~ /^Z/')
	mounts=$(grep -ls -- "$1" /proc/[0-9]*/mountinfo || true)
	[ -z "$procs" ] || log "left behind: $procs"
	[ -z "$mounts" ] || log "mounts of $1 seen by: $mounts"
	[ -z "$procs$mounts" ]
}

cgroups_of() { find /sys/fs/cgroup -maxdepth 8 -type d -name "$1" 2>/dev/null; }

start_blocked term 'tail -f /dev/null'
kill -TERM "$launcher"
rc=0
wait "$launcher" || rc=$?
exec 7<&-
check test "$rc" = 137
check test "$(json_field "$WORK/r.term" killed_by)" = signal
check sb_no_leftovers

# SIGKILL: the sandbox dies; its cgroups (v1 and v2) and the record stay for gc.
start_blocked kill 'sleep 1000'
killed=$sb
kill_launcher
check sandbox_gone "$killed"
check test -n "$(cgroups_of "$killed")"
check test -f "$SB_RECORDS/$killed"

out=$("$LAZYROOT" gc)
check grep -qx "removed $killed" <<<"$out"
check test -z "$(cgroups_of "$killed")"
check test ! -e "$SB_RECORDS/$killed"

# gc leaves a running sandbox alone...
start_blocked live 'tail -f /dev/null'
live=$sb
out=$("$LAZYROOT" gc)
check_not grep -q "removed $live" <<<"$out"
check test -n "$(cgroups_of "$live")"
check test -f "$SB_RECORDS/$live"
check kill -0 "$launcher"
# ...which still ends cleanly, and nothing of either is left.
kill -TERM "$launcher"
wait "$launcher" || true
exec 7<&-
check sb_no_leftovers
# A second gc finds nothing to do.
check test "$("$LAZYROOT" gc --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["removed"]))')" = 0

# A later `lazyroot run` collects too: it does so at most every 10 s, so make the last
# collection look old rather than wait.
start_blocked kill2 'sleep 1000'
killed=$sb
kill_launcher
check sandbox_gone "$killed"
check test -f "$SB_RECORDS/$killed"
touch -d '-1 min' "$SB_RECORDS/.gc"
check sb_run -- /bin/true
check test -z "$(cgroups_of "$killed")"
check sb_no_leftovers

# A name held by a running launcher cannot be taken; a dead launcher's can (its leftovers go).
start_blocked held 'tail -f /dev/null'
held=$sb
check_status 125 "$LAZYROOT" run --rootfs "$ROOTFS" --name "$held" --set "uid_base=$SB_UID_BASE" -- /bin/true
kill_launcher
check "$LAZYROOT" run --rootfs "$ROOTFS" --name "$held" --set "uid_base=$SB_UID_BASE" -- /bin/true
check sb_no_leftovers

# What gc finds still running in a dead launcher's cgroups, it kills first: a record (unlocked, as
# a dead launcher's is) listing a v1 and a cgroup2 directory that hold a live process.
orphan=$SB_NAME-orphan
quiet_kill() { kill -KILL "$1" 2>/dev/null || true; }
sleep 1000 &
victim=$!
cleanup_add quiet_kill "$victim"
dirs=()
for h in /sys/fs/cgroup/pids /sys/fs/cgroup/unified; do
	mountpoint -q "$h" || continue
	mkdir "$h/$orphan"
	echo "$victim" >"$h/$orphan/cgroup.procs"
	dirs+=("$h/$orphan")
done
check test "${#dirs[@]}" -gt 0
{ echo "lazyroot launcher 1"; printf 'cgroup %s\n' "${dirs[@]}"; } >"$SB_RECORDS/$orphan"
out=$("$LAZYROOT" gc)
check grep -qx "removed $orphan" <<<"$out"
wait "$victim" 2>/dev/null || true
check_not kill -0 "$victim" 2>/dev/null
check test -z "$(cgroups_of "$orphan")"
check test ! -e "$SB_RECORDS/$orphan"
