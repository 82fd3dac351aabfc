#!/bin/bash
# /metrics answers after every takeover: the holder keeps the listening socket, as it keeps the
# control socket, and gives it to each new worker, so no worker binds the port again.
#
#  1. /metrics answers (HTTP/1.1, Prometheus text); a wrong path gets 404, a wrong method 405,
#     a head over the bound is refused; the node keeps serving;
#  2. deterministic: a process outside holds the worker's /metrics socket open (pidfd_getfd)
#     while the worker is killed.  A worker that binds the port itself then fails with "Address
#     already in use" (as one did when the dead worker's socket outlived it for a moment); one
#     that is given the holder's socket serves;
#  3. NODE_METRICS_KILLS kills (kill -9) and NODE_METRICS_UPGRADES upgrades in a row: after each,
#     /metrics answers from the new worker, with the takeover counted;
#  4. the log has no "no /metrics".
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd fusermount3 curl python3
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir
. "$(dirname "$0")/../lib/node.sh"
port=$(free_port)
export LAZYROOT_METRICS=127.0.0.1:$port
KILLS=${NODE_METRICS_KILLS:-10}
UPGRADES=${NODE_METRICS_UPGRADES:-5}
url=http://127.0.0.1:$port/metrics

mkdir -p "$WORK/src" "$WORK/mnt"
echo hello >"$WORK/src/f"
"$LAZYROOT" build "$WORK/src" --tag m:1 --no-progress >/dev/null
# the mount starts the node (logging to $LAZYROOT_CACHE/daemon.log); its connection is taken
# over each time
check "$LAZYROOT" mount m:1 "$WORK/mnt"
cleanup_add umount -lq "$WORK/mnt"
check grep -qx hello "$WORK/mnt/f"

# the counter a /metrics answer gives, or nothing; bounded (a socket nobody accepts on hangs)
takeovers() {
	curl -sf --max-time 10 "$url" | sed -n 's/^lazyroot_node_takeovers_total \([0-9]*\)$/\1/p'
}

# --- 1. what it answers
check test "$(takeovers)" = 0
out=$(curl -s --max-time 10 -D "$WORK/head" "$url")
check grep -q '^HTTP/1.1 200' "$WORK/head"
check grep -qi '^content-type: text/plain; version=0.0.4' "$WORK/head"
check grep -q '^lazyroot_node_mounts 1$' <<<"$out"
check grep -q "^lazyroot_node_mount_requests_total{index=\"[0-9a-f]*\",mountpoint=\"$WORK/mnt\"} [0-9]" <<<"$out"
check test "$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/nope")" = 404
check test "$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' -X POST "$url")" = 405
code=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' -H "X-Big: $(head -c 20000 /dev/zero | tr '\0' a)" "$url" || true)
check test "$code" != 200
check test "$(takeovers)" = 0

# --- 2. the worker's socket held open from outside across a kill
pid=$(node_pid)
mkfifo "$WORK/hold"
python3 - "$pid" "$port" "$WORK/hold" >"$WORK/held" <<'PY' &
import ctypes, os, sys
pid, port = int(sys.argv[1]), int(sys.argv[2])
inodes = set()
for name in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(name).read().splitlines()[1:]:
        f = line.split()
        if int(f[1].rsplit(":", 1)[1], 16) == port and f[3] == "0A":   # LISTEN
            inodes.add(f[9])
libc = ctypes.CDLL(None, use_errno=True)
pidfd = os.pidfd_open(pid)
held = []
for fd in os.listdir("/proc/%d/fd" % pid):
    try:
        target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
    except OSError:
        continue
    if target.startswith("socket:[") and target[8:-1] in inodes:
        got = libc.syscall(438, pidfd, int(fd), 0)   # pidfd_getfd
        if got >= 0:
            held.append(got)
print(len(held), flush=True)
open(sys.argv[3]).read()   # held until the test closes its end of the fifo
PY
holder_py=$!
quiet_kill() { kill "$@" 2>/dev/null || true; }
cleanup_add quiet_kill "$holder_py"
python3 -c 'import os, sys, time
t = time.time() + 30
while not os.path.getsize(sys.argv[1]) and time.time() < t:
    time.sleep(0.02)' "$WORK/held"
check test "$(cat "$WORK/held")" -ge 1
exec 7>"$WORK/hold"   # python holds the socket until this closes
kill -9 "$pid"
pid=$(wait_worker "$pid") || fail "no worker after the kill"
check test "$(takeovers)" = 1
check kill -0 "$holder_py"   # it held the socket all along
exec 7>&-
check wait "$holder_py"

# --- 3. kills and upgrades in a row
n=1
for k in $(seq "$KILLS"); do
	kill -9 "$pid"
	pid=$(wait_worker "$pid") || { check false "a worker after kill $k"; break; }
	n=$((n + 1))
	check test "$(takeovers)" = "$n"
done
for u in $(seq "$UPGRADES"); do
	check timeout 60 "$LAZYROOT" node upgrade
	pid=$(wait_worker "$pid") || { check false "a worker after upgrade $u"; break; }
	n=$((n + 1))
	check test "$(takeovers)" = "$n"
done
check grep -qx hello "$WORK/mnt/f"

# --- 4. no worker went without /metrics
check_not grep -q 'no /metrics' "$LAZYROOT_CACHE/daemon.log"
# (and, in a sanitizer build, that no worker died of a finding)
check_not grep -q 'Sanitizer' "$LAZYROOT_CACHE/daemon.log"
check "$LAZYROOT" umount "$WORK/mnt"
