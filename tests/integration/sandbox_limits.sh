#!/bin/bash
# Attacks: "fill the disk with output" and resource exhaustion — a fork bomb (stopped by the pids
# limit), a memory hog (the memory cgroup), a sleep past the time limit, a flood of stdout (the
# output cap) and a fill of the sandbox's tmpfs (ENOSPC inside, the host untouched). Each is
# stopped, reported in --json with the reason, and leaves nothing behind.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
workdir

report() { json_field "$WORK/report.json" "$1"; }

# Fork bomb: the pids limit stops it and the sandbox ends, reported as "pids".
# Every process of the bomb keeps forking and never exits on its own.
check_status 137 sb_run --pids 32 --timeout 60 --json="$WORK/report.json" -- \
	python3 -c 'import os
while True:
    try: os.fork()
    except OSError: pass'
check test "$(report killed_by)" = pids
check test "$(report pids_limit_hit)" = true

# Memory hog: the OOM killer of the sandbox's memory cgroup, reported as "memory".
check_status 137 sb_run --memory 96M --json="$WORK/report.json" -- \
	python3 -c 'a = []
while True: a.append(bytearray(1 << 20))'
check test "$(report killed_by)" = memory
check test "$(report memory_peak)" -ge $((64 << 20))
check test "$(report memory_peak)" -le $((96 << 20))

# Sleep past the time limit: the whole pid namespace is killed, reported as "time".
check_status 137 sb_run --timeout 0.5 --json="$WORK/report.json" -- sleep 600
check test "$(report killed_by)" = time
check python3 -c 'import sys; w = float(sys.argv[1]); sys.exit(not 0.5 <= w < 5)' "$(report wall_seconds)"

# Flood of stdout: exactly the cap passes, then the sandbox ends, reported as "output".
sb_run --output-limit 1M --json="$WORK/report.json" -- yes flood >"$WORK/flood" && rc=0 || rc=$?
check test "$rc" = 137
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
# timer, which woke every launcher of a node holding thousands ten times a second. Over 4 idle
# seconds that timer alone made 40 wakeups; setup takes about 15, the once-a-second read 4.
check /usr/bin/time -o "$WORK/time" -f %w "$LAZYROOT" run --rootfs "$ROOTFS" --name "$SB_NAME-idle" \
	--set "uid_base=$SB_UID_BASE" -- sleep 4
check test "$(tail -n 1 "$WORK/time")" -lt 40

# The launcher's own limits: RLIMIT_NOFILE reaches the command.
check_status 0 sb_run --nofile 77 -- /bin/sh -c 'test "$(ulimit -n)" = 77'
check sb_no_leftovers
