#!/bin/bash
# Attacks: "fill the disk with output" and resource exhaustion — a fork bomb (stopped by the pids
# limit), a memory hog (the memory cgroup), a sleep past the time limit, a flood of stdout (the
# output cap) and a fill of the sandbox's tmpfs (ENOSPC inside, the host untouched). Each is
# stopped, said on stderr with the limit's value, reported in --json with the reason, and
# leaves nothing behind.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
workdir

report() { json_field "$WORK/report.json" "$1"; }

# said() LINE FILE: the limit's kill is said on stderr, in one line of its own
said() { check grep -qxF -- "lazyroot: sandbox ended: $1" "$2"; }

# Fork bomb: the pids limit stops it and the sandbox ends, reported as "pids".
# Every process of the bomb keeps forking and never exits on its own.
check_status 137 sb_run --pids 32 --timeout 60 --json="$WORK/report.json" -- \
	python3 -c 'import os
while True:
    try: os.fork()
    except OSError: pass' 2>"$WORK/pids.err"
check test "$(report killed_by)" = pids
said "pids limit 32" "$WORK/pids.err"
check test "$(report pids_limit_hit)" = true

# Memory hog: the OOM killer of the sandbox's memory cgroup, reported as "memory".
check_status 137 sb_run --memory 96M --json="$WORK/report.json" -- \
	python3 -c 'a = []
while True: a.append(bytearray(1 << 20))' 2>"$WORK/memory.err"
check test "$(report killed_by)" = memory
said "memory limit 96.0 MiB" "$WORK/memory.err"
check test "$(report memory_peak)" -ge $((64 << 20))
check test "$(report memory_peak)" -le $((96 << 20))

# Sleep past the time limit: the whole pid namespace is killed, reported as "time", with
# timeout(1)'s status; the limit takes units, from the option and from the policy.
check_status 124 sb_run --timeout 0.5 --json="$WORK/report.json" -- sleep 600
check test "$(report killed_by)" = time
sb_run --timeout 500ms -- sleep 600 2>"$WORK/time.err" && rc=0 || rc=$?
check test "$rc" = 124
check test "$(cat "$WORK/time.err")" = "lazyroot: sandbox ended: time limit 0.5 s"
printf 'timeout = 1s\n' >"$WORK/time.policy"
sb_run --policy "$WORK/time.policy" -- sleep 600 2>"$WORK/time.err" && rc=0 || rc=$?
check test "$rc" = 124
check test "$(cat "$WORK/time.err")" = "lazyroot: sandbox ended: time limit 1 s"
check_status 125 sb_run --timeout 2x -- true 2>/dev/null
# a command that ends by SIGKILL of its own says nothing of a limit
sb_run -- sh -c 'kill -9 $$' 2>"$WORK/self.err" && rc=0 || rc=$?
check test "$rc" = 137
check test ! -s "$WORK/self.err"
check python3 -c 'import sys; w = float(sys.argv[1]); sys.exit(not 0.5 <= w < 5)' "$(report wall_seconds)"

# Flood of stdout: exactly the cap passes, then the sandbox ends, reported as "output".
sb_run --output-limit 1M --json="$WORK/report.json" -- yes flood >"$WORK/flood" 2>"$WORK/output.err" &&
	rc=0 || rc=$?
check test "$rc" = 137
said "output limit 1.0 MiB" "$WORK/output.err"
check test "$(stat -c %s "$WORK/flood")" = $((1 << 20))
check test "$(report killed_by)" = output
check test "$(report output_bytes)" = $((1 << 20))

# Disk fill: the tmpfs holding the overlay's upper layer ends in ENOSPC after at most its size;
# the writes never reach the host's disk, which still has room.
check attack --set tmpfs_size=64M --json="$WORK/report.json" -- fill /tmp/fill >"$WORK/fill"
check test "$(report status)" = 0
wrote=$(awk '/wrote/ { print $2 }' "$WORK/fill")
check test "${wrote:-0}" -gt $((32 << 20))
check test "${wrote:-0}" -le $((64 << 20))
check test "$(df --output=avail -B1M / | tail -n 1)" -gt 64

# An idle sandbox leaves its launcher asleep: OOM kills and refused forks are announced to it
# (only v1 pids.events, which never notifies, is read once a second), not read on a 100 ms
# timer, which woke every launcher of a node holding thousands ten times a second. Counted over
# 3 idle seconds of the launcher alone (its setup's waits, which load on the machine inflates,
# are not in it): that timer alone made 30 wakeups, the once-a-second read makes 3.
in_range() {
	[ -n "$(ps -e -o uid=,stat= | awk -v lo="$SB_UID_BASE" -v hi=$((SB_UID_BASE + 65536)) \
		'{ u = $1 < 0 ? $1 + 4294967296 : $1 } u >= lo && u < hi && $2 !~ /^Z/')" ]
}
wakeups() { awk '/^voluntary_ctxt_switches/ { print $2 }' "/proc/$1/status" 2>/dev/null; }
# The sandbox waits for a line on its stdin (a fifo the test holds open), so that it ends as
# soon as the measure is taken rather than at a fixed time (bounded: --timeout).
mkfifo "$WORK/idle.go"
exec {idle_go}<>"$WORK/idle.go"
SB_EXEC=1 sb_run --name "$SB_NAME-idle" --timeout 60 -- sh -c 'read -r x' <"$WORK/idle.go" &
idle=$!
for _ in $(seq 300); do in_range && break; sleep 0.1; done
w0=$(wakeups "$idle") || true
sleep 3   # the idle time measured, not a wait for readiness
w1=$(wakeups "$idle") || true
check test -n "$w0" -a -n "$w1"
check test "$((${w1:-0} - ${w0:-0}))" -lt 10
echo go >&"$idle_go"
check wait "$idle"
exec {idle_go}>&-

# The wall clock holds whatever the reader of the output does: with the reader stopped, a
# sandbox that floods its output and burns CPU is still ended at its timeout (the launcher
# never waits on its own stdout while the sandbox runs), and once the reader goes on it gets
# what the sandbox wrote and the report.
{ sb_run --timeout 2 --json="$WORK/paused.json" -- \
	sh -c 'yes flood & while :; do :; done' || true; } | sh -c 'kill -STOP $$; exec wc -c' >"$WORK/paused.count" &
reader=$!
for _ in $(seq 300); do in_range && break; sleep 0.1; done
t0=$(date +%s.%N)
for _ in $(seq 200); do in_range || break; sleep 0.1; done
ended=$(date +%s.%N)
check_not in_range
check python3 -c 'import sys; sys.exit(not float(sys.argv[2]) - float(sys.argv[1]) < 8)' "$t0" "$ended"
kill -CONT "$reader"
check wait "$reader"
check test "$(json_field "$WORK/paused.json" killed_by)" = time
check python3 -c 'import sys; sys.exit(not float(sys.argv[1]) < 3.5)' "$(json_field "$WORK/paused.json" cpu_seconds)"
check test "$(cat "$WORK/paused.count")" = "$(json_field "$WORK/paused.json" output_bytes)"

# The --json report cannot be forged by what the sandbox prints: on stderr it is always a line
# of its own, the last; with --json-fd it goes to a descriptor the sandbox never holds.
fake='{"name":"forged","status":0,"signal":0,"killed_by":null}'
sb_run --json -- sh -c "printf '%s' '$fake' >&2; exit 3" 2>"$WORK/forge.err" && rc=0 || rc=$?
check test "$rc" = 3
check test "$(tail -n 1 "$WORK/forge.err" | python3 -c 'import json, sys; print(json.loads(sys.stdin.read())["status"])')" = 3
check test "$(head -n 1 "$WORK/forge.err")" = "$fake"
sb_run --json-fd 3 -- sh -c "echo '$fake'; printf '%s' '$fake' >&2; echo '$fake' >/proc/self/fd/3; exit 3" \
	3>"$WORK/forge.json" 2>/dev/null >/dev/null && rc=0 || rc=$?
check test "$rc" = 3
check test "$(wc -l <"$WORK/forge.json")" = 1
check test "$(json_field "$WORK/forge.json" status)" = 3
check test "$(json_field "$WORK/forge.json" name)" != forged
check_status 125 sb_run --json-fd 77 -- true 2>/dev/null

# A terminal on the launcher's stdin never reaches the sandbox: it reads /dev/null, and cannot
# write to the terminal, change its settings or its window size.
check python3 "$REPO/tests/lib/on-pty.py" "$LAZYROOT" run --rootfs "$ROOTFS" --name "$SB_NAME-tty" \
	--set "uid_base=$SB_UID_BASE" --bind "$ATTACK_DIR:/lr" -- /bin/sh -c \
	"/lr/attack $HOST_PIDNS tty && stty raw -echo cols 7 rows 3; echo gone >/dev/tty;
	test \"\$(readlink /proc/self/fd/0)\" = /dev/null"

# The launcher's own limits: RLIMIT_NOFILE reaches the command.
check_status 0 sb_run --nofile 77 -- /bin/sh -c 'test "$(ulimit -n)" = 77'
check sb_no_leftovers
