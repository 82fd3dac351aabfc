#!/bin/bash
# The node's pool of network namespaces (sandbox/pool.c): a sandbox with only its loopback runs in
# a pooled namespace that the host's user namespace owns, so nothing inside can change it
# (attack: an agent that changes the network for the sandboxes after it); the next sandbox in the
# slot sees no socket of the one before (attack: a listener left behind to answer the grader);
# a namespace with a socket left (TIME_WAIT) is not reused; a launcher killed by SIGKILL leaves a
# slot that the next launcher takes with a fresh namespace, and nothing else (nor a record, for
# a sandbox of the default name); each sandbox in a slot has its own limits, and the slot carries
# its cgroup counters to the next; a namespace whose packet counters moved is not handed on;
# `lazyroot gc --pool`
# removes the pool; an allowlist, sysfs = true, pool = false and LAZYROOT_POOL=0 keep a
# namespace of the sandbox's own.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
need_cmd nsenter ip
workdir
export LAZYROOT_RECORD_DIR=$WORK/launchers
SB_RECORDS=$LAZYROOT_RECORD_DIR
POOL=$LAZYROOT_POOL_DIR   # the test's own (tests/lib/sandbox.sh)
# Whatever happens, unmount the pool's namespaces before $WORK goes.
_pool_cleanup() {
	local m
	for m in $(awk -v p="$POOL/" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo); do
		umount -l "$m" 2>/dev/null || true
	done
	return 0
}
cleanup_add _pool_cleanup

# The sandboxes run from a tmpfs copy of the part of $ROOTFS they use. Page cache can be evicted
# at any moment (a node's proactive reclaim pages out regions idle for a minute, read pages with
# them), and a sandbox that reads an evicted file again is charged for it: its slot's memory
# cgroup then holds page cache and is made afresh at its end (sandbox/pool.c), which the checks
# of a kept slot below would take for a pool bug. tmpfs pages stay (there is no swap to put them
# in), charged to this shell, which copied them.
pool_root() {
	local r=$WORK/root
	mkdir "$r"
	mount -t tmpfs -o mode=0755 lazyroot-test "$r" || return 1
	cleanup_add umount -l "$r"
	(cd "$ROOTFS" && cp -a --parents bin lib lib64 sbin etc usr/lib64 usr/lib/python3.11 \
		usr/lib/x86_64-linux-gnu/*.so* usr/bin/sh usr/bin/dash usr/bin/python3 usr/bin/python3.11 \
		usr/bin/true usr/bin/echo usr/bin/cat usr/bin/head usr/bin/tail usr/bin/tr usr/bin/wc \
		usr/bin/grep usr/bin/sleep "$r") || return 1
	mkdir -p "$r/dev" "$r/proc" "$r/sys" "$r/run" "$r/root" "$r/tmp"
	chmod 1777 "$r/tmp"
}
pool_root || fail "no tmpfs root"
ROOTFS=$WORK/root

# A network namespace is known by its cookie (SO_NETNS_COOKIE, read on a socket made in it): the
# kernel never gives one twice. Its inode number (readlink /proc/self/ns/net) is no identity: a
# namespace made after another was freed may get the same one.
cookie='import socket
s = socket.socket(socket.AF_UNIX)
print("netns:%d" % int.from_bytes(s.getsockopt(socket.SOL_SOCKET, 71, 8), "little"))'
netns_of() { sb_run "$@" -- /usr/bin/python3 -c "$cookie"; }
slot_ns() { nsenter --net="$POOL/net.$1" python3 -c "$cookie"; }
pool_mounts() { awk -v p="$POOL/" 'index($5, p) == 1' /proc/self/mountinfo | wc -l; }

# Two sandboxes one after the other run in the same pooled namespace, slot 0's.
a=$(netns_of)
b=$(netns_of)
check test "$a" = "$b"
check test "$a" = "$(slot_ns 0)"
check test "$a" != "$(python3 -c "$cookie")"
check test "$(pool_mounts)" = 1

# Nothing inside can change it; seen from the host it is as made: only lo, up, with the
# loopback's addresses.
links0=$(nsenter --net="$POOL/net.0" ip -o link)
addrs0=$(nsenter --net="$POOL/net.0" ip -o addr)
routes0=$(nsenter --net="$POOL/net.0" ip route show table all)
check attack -- netns
check test "$(netns_of)" = "$a"
check test "$(nsenter --net="$POOL/net.0" ip -o link | awk '{ print $2 }')" = "lo:"
check grep -q 'state UNKNOWN\|LOWER_UP' <<<"$links0"
check test "$(nsenter --net="$POOL/net.0" ip -o link)" = "$links0"
check test "$(nsenter --net="$POOL/net.0" ip -o addr)" = "$addrs0"
check test "$(nsenter --net="$POOL/net.0" ip route show table all)" = "$routes0"
check grep -q '127.0.0.1/8' <<<"$addrs0"

# A listener left running in the background by the first sandbox is killed at its teardown; the
# next sandbox in the slot finds nothing listening and no socket at all.
listen='import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 7777)); s.listen()
while True: s.accept()[0].close()'
# (7777 is 1E61; state 0A is LISTEN)
out=$(sb_run -- /bin/sh -c 'python3 -c "$1" & until grep -q ":1E61 00000000:0000 0A" /proc/net/tcp; do :; done
	echo listening; python3 -c "$2"' sh "$listen" "$cookie")
check test "$out" = "listening
$a"
probe='import socket
s = socket.socket()
try:
    s.connect(("127.0.0.1", 7777)); print("connected")
except ConnectionRefusedError:
    print("refused")
print(open("/proc/net/sockstat").readline().strip())'
out=$(sb_run -- /bin/sh -c 'python3 -c "$2"; python3 -c "$1"; tail -n +2 /proc/net/tcp | wc -l' sh "$probe" "$cookie")
check test "$(sed -n 1p <<<"$out")" = "$a"
check test "$(sed -n 2p <<<"$out")" = refused
check test "$(sed -n 3p <<<"$out")" = "sockets: used 1"
check test "$(sed -n 4p <<<"$out")" = 0

# The probe's refused connection went over the loopback and moved the namespace's counters,
# which cannot be reset: the slot has a fresh namespace now.
# A namespace left with a socket (here TIME_WAIT, after the server closed first) is not reused:
# the slot gets a fresh one, and the old one is unmounted.
tw='import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
c = socket.create_connection(s.getsockname()); a, _ = s.accept(); a.close(); c.recv(1); c.close()
print(open("/proc/net/sockstat").read().split("\n")[1])'
out=$(sb_run -- /bin/sh -c 'python3 -c "$2"; python3 -c "$1"' sh "$tw" "$cookie")
tw_ns=$(sed -n 1p <<<"$out")
check test "$tw_ns" != "$a"
check grep -q 'tw 1' <<<"$(sed -n 2p <<<"$out")"
c=$(netns_of)
check test "$c" != "$tw_ns"
check test "$c" != "$a"
check test "$c" = "$(slot_ns 0)"
check test "$(pool_mounts)" = 1

# Sandboxes that need a namespace of their own do not touch the pool.
check test "$(netns_of --set sysfs=true)" != "$c"
check test "$(netns_of --set pool=false)" != "$c"
check test "$(LAZYROOT_POOL=0 netns_of)" != "$c"
check test "$(netns_of --allow 127.0.0.1:9)" != "$c"
check test "$(netns_of)" = "$c"
check test "$(pool_mounts)" = 1

# Start a sandbox that prints its namespace and then waits for a line on stdin; return once it
# printed. Sets $launcher; `exec 9>&-` lets it end.
start_held() {
	rm -f "$WORK/in" "$WORK/out"
	mkfifo "$WORK/in" "$WORK/out"
	SB_EXEC=1 sb_run "$@" -- /bin/sh -c 'python3 -c "$1"; read -r x || true' sh "$cookie" <"$WORK/in" >"$WORK/out" &
	launcher=$!
	_sb_count=$((_sb_count + 1))
	exec 9>"$WORK/in" 7<"$WORK/out"
	read -r held_ns <&7
}

# Two at once take two slots.
start_held
check test "$held_ns" = "$c"
d=$(netns_of)
check test "$d" = "$(slot_ns 1)"
# gc --pool leaves a slot in use alone.
out=$("$LAZYROOT" gc --pool --json)
check test "$(python3 -c 'import json, sys; j = json.load(sys.stdin); print(j["pool_busy"], j["pool_removed"])' <<<"$out")" = "2 2"
check test "$(pool_mounts)" = 1
exec 9>&- 7<&-
check wait "$launcher"

# Cgroups come from the pool too: slot 0's directories (lazyroot-pool-HASH.0 under this shell's
# own cgroups) stay between sandboxes, and each sandbox's report counts only its own peak memory,
# OOM kill and refused fork.
memdir=$(awk '$1 == "cgroup" && $2 ~ "^/sys/fs/cgroup/memory/" { print $2 }' "$POOL/cg.0.lock")
check grep -q '^lazyroot-pool-[0-9a-f]\{8\}\.0$' <<<"$(basename "$memdir")"
slotdirs=$(awk '$1 == "cgroup" { print $2 }' "$POOL/cg.0.lock")
check test "$(wc -l <<<"$slotdirs")" -ge 2

# A slot whose memory cgroup was charged for page cache is made afresh after its sandbox, and
# memory pressure (or a drop of the page cache) elsewhere can make any sandbox the first to read
# some file again: run each pair once outside the pool (to read its files), then in the pool,
# until both of it ran in the same slot (up to 5 tries), then check the second's report. The
# sandboxes use only sh, head, tr and sleep, and a memory hog made of a shell variable.
same_slot() {
	local try ino
	for try in 1 2 3 4 5; do
		LAZYROOT_POOL=0 "$1" || true
		LAZYROOT_POOL=0 "$2" || true
		sb_run -- /bin/true
		ino=$(stat -c %i "$memdir" 2>/dev/null) || continue
		"$1" || true
		[ "$(stat -c %i "$memdir" 2>/dev/null)" = "$ino" ] || continue
		"$2" || true
		[ "$(stat -c %i "$memdir" 2>/dev/null)" = "$ino" ] && return 0
		log "slot 0 made afresh (try $try)"
	done
	return 1
}
peak() { json_field "$1" memory_peak; }
true1() { sb_run -- /bin/true; }
hog='x=$(head -c "$1" /dev/zero | tr "\0" a); echo ${#x}'
big() { sb_run --json="$WORK/big.json" -- /bin/sh -c "$hog" sh 100M >/dev/null; }
small() { sb_run --json="$WORK/small.json" -- /bin/true; }
oom() { sb_run --json="$WORK/oom.json" --memory 64M --set tmpfs_size=16M -- /bin/sh -c "$hog" sh 200M; }
after_oom() { sb_run --json="$WORK/after-oom.json" -- /bin/true; }
pids() {
	sb_run --json="$WORK/pids.json" --pids 8 --set kill_on_pids_limit=false -- /bin/sh -c \
		'i=0; while [ $i -lt 16 ]; do sleep 10 & i=$((i + 1)); done' 2>/dev/null
}
after_pids() { sb_run --json="$WORK/after-pids.json" -- /bin/true; }
check same_slot true1 true1
check same_slot big small
check test "$(peak "$WORK/big.json")" -ge $((100 << 20))
check test "$(peak "$WORK/small.json")" -lt $((16 << 20))
check same_slot oom after_oom
check test "$(json_field "$WORK/oom.json" killed_by)" = memory
check test "$(json_field "$WORK/after-oom.json" status)" = 0
check test "$(json_field "$WORK/after-oom.json" killed_by)" = null
check same_slot pids after_pids
check test "$(json_field "$WORK/pids.json" pids_limit_hit)" = true
check test "$(json_field "$WORK/after-pids.json" pids_limit_hit)" = false
check test "$(json_field "$WORK/after-pids.json" killed_by)" = null
# Each sandbox in a slot runs under its own limits, read from the host while it holds slot 0:
# default and smaller ones in turn.
pidsdir=$(awk '$1 == "cgroup" && $2 ~ "^/sys/fs/cgroup/pids/" { print $2 }' "$POOL/cg.0.lock")
cpudir=$(awk '$1 == "cgroup" && $2 ~ "^/sys/fs/cgroup/cpu/" { print $2 }' "$POOL/cg.0.lock")
unidir=$(awk '$1 == "cgroup" && $2 ~ "^/sys/fs/cgroup/unified/" { print $2 }' "$POOL/cg.0.lock")
held_limits() {
	start_held "$@"
	echo "$(cat "$memdir/memory.limit_in_bytes") $(cat "$pidsdir/pids.max")" \
		"$(cat "$cpudir/cpu.cfs_quota_us")"
	exec 9>&- 7<&-
	wait "$launcher"
}
default_limits="$((1 << 30)) 256 100000"
check test "$(held_limits)" = "$default_limits"
check test "$(held_limits)" = "$default_limits"
check test "$(held_limits --memory 64M --pids 8 --cpus 0.5)" = "$((64 << 20)) 8 50000"
check test "$(held_limits --memory 64M --pids 8 --cpus 0.5)" = "$((64 << 20)) 8 50000"
check test "$(held_limits)" = "$default_limits"
check test "$(held_limits --memory 96M)" = "$((96 << 20)) 256 100000"
check test "$(held_limits --pids 9 --cpus 0)" = "$((1 << 30)) 9 -1"
check test "$(held_limits)" = "$default_limits"

# A slot kept between two sandboxes carries the counters that cannot be reset, as the second
# left them, in its lock file's carry line (the next taker's baselines).
check same_slot true1 true1
carry=$(grep '^carry ' "$POOL/cg.0.lock" || true)
counters="$(awk '$1 == "oom_kill" { print $2 }' "$memdir/memory.oom_control")"
counters+=" $(awk '$1 == "max" { print $2 }' "$pidsdir/pids.events")"
counters+=" $(awk '$1 == "usage_usec" { print $2 }' "$unidir/cpu.stat")"
check test "$(awk '{ print $2 + 0, $3 + 0, $4 + 0 }' <<<"$carry")" = "$counters"

# pool = false: cgroups named after the sandbox, removed at its end; the slot stays as it was.
# (A pooled sandbox that happens to be charged for page cache has its slot made afresh at its
# end, as above: run one until slot 0's memory cgroup is there, up to 5 tries.)
slot_memino() {
	local try
	for try in 1 2 3 4 5; do
		sb_run -- /bin/true
		memino=$(stat -c %i "$memdir" 2>/dev/null) && return 0
		log "slot 0 made afresh (try $try)"
	done
	return 1
}
check slot_memino
check sb_run --set pool=false -- /bin/true
check test "$(stat -c %i "$memdir")" = "$memino"

# A launcher killed by SIGKILL while its sandbox runs: the next launcher takes the slot with a
# fresh namespace and fresh cgroups (the dead one's sandbox may have been alive in them), and
# nothing is left.
start_held
check test "$held_ns" = "$(slot_ns 0)"
init=$(ps -e -o pid=,ppid= | awk -v p="$launcher" '$2 == p { print $1 }')
kill -KILL "$launcher"
wait "$launcher" || true
[ -n "$init" ] && python3 -c '
import os, select, sys
try:
    fd = os.pidfd_open(int(sys.argv[1]))
except ProcessLookupError:
    sys.exit(0)
select.select([fd], [], [], 10)' "$init"
exec 9>&- 7<&-
check test "$(stat -c %Y "$POOL/net.0.lock")" = 0
check test "$(stat -c %Y "$POOL/cg.0.lock")" = 0
e=$(netns_of)
check test "$(stat -c %i "$memdir")" != "$memino"
check test -e "$memdir/cgroup.procs"
check test -z "$(cat "$memdir/cgroup.procs")"
check test "$e" = "$(slot_ns 0)"
check test "$e" != "$held_ns"
check test "$(pool_mounts)" = 1
"$LAZYROOT" gc >/dev/null || true
check sb_no_leftovers

# A sandbox with pooled cgroups and the default name (lazyroot-PID: unique among running
# launchers) has no launcher record; killed with its launcher, it leaves nothing for gc, and
# the next launcher takes its slots afresh.
rm -f "$WORK/in" "$WORK/out"
mkfifo "$WORK/in" "$WORK/out"
"$LAZYROOT" run --rootfs "$ROOTFS" --set "uid_base=$SB_UID_BASE" -- \
	/bin/sh -c 'echo up; read -r x || true' <"$WORK/in" >"$WORK/out" &
launcher=$!
exec 9>"$WORK/in" 7<"$WORK/out"
read -r up <&7
check test "$up" = up
check test -z "$(ls "$SB_RECORDS")"
check test "$(stat -c %Y "$POOL/cg.0.lock")" = 0
kill -KILL "$launcher"
wait "$launcher" || true
exec 9>&- 7<&-
check test -z "$(ls "$SB_RECORDS")"
check test "$(sb_run -- /bin/echo next)" = next
check test "$(stat -c %Y "$POOL/cg.0.lock")" != 0
check test -e "$memdir/cgroup.procs"
check test -z "$(cat "$memdir/cgroup.procs")"
out=$("$LAZYROOT" gc --json)
check test "$(python3 -c 'import json, sys; print(len(json.load(sys.stdin)["removed"]))' <<<"$out")" = 0
check sb_no_leftovers

# A sandbox that sends over its loopback moves the namespace's counters (/proc/net/dev, snmp),
# which cannot be reset: that namespace is not handed on, and the next sandbox's loopback has
# counted nothing (attack: a message left in the packet counters for the sandbox after it).
used=$(netns_of)
check test "$used" = "$(netns_of)"
check sb_run -- /usr/bin/python3 -c 'import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(3):
    s.sendto(b"x", ("127.0.0.1", 9))'
check test "$(netns_of)" != "$used"
lo_packets='print([l.split()[2] for l in open("/proc/net/dev") if l.strip().startswith("lo:")][0])'
check test "$(sb_run -- /usr/bin/python3 -c "$lo_packets")" = 0
check test "$(pool_mounts)" = 1
check sb_no_leftovers

# gc --pool removes every idle pooled namespace and cgroup slot; plain gc keeps recent ones.
out=$("$LAZYROOT" gc --json)
check test "$(python3 -c 'import json, sys; j = json.load(sys.stdin); print(j["pool_removed"], j["pool_kept"])' <<<"$out")" = "0 2"
check "$LAZYROOT" gc --pool
check test "$(pool_mounts)" = 0
check test -z "$(ls -A "$POOL")"
for d in $slotdirs; do check test ! -e "$d"; done
check sb_no_leftovers
