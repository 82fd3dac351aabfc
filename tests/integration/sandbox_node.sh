#!/bin/bash
# Attacks on node-wide kernel state that no namespace divides, and on what a sandbox's own
# descriptors tell it of the host (sandbox/POLICY.md, "Node-wide state"):
# - legacy AIO: io_setup takes no event of the node's fs.aio-max-nr (it fails with ENOSYS),
#   so that no sandbox can make it fail for every other process;
# - sync() and syncfs() return 0 and write back nothing: a host file's dirty pages stay
#   dirty (cachestat on the host), while fsync of the sandbox's own file works;
# - a binary that exists only in a memfd does not run (vm.memfd_noexec = 2 in the sandbox's
#   pid namespace; the host's value is untouched);
# - /proc/meminfo is a fixed view of the sandbox's memory limit; vmstat, zoneinfo, buddyinfo,
#   pagetypeinfo, slabinfo and swaps are masked;
# - root inside drops to another user as apt does (setgroups, setresgid, setresuid), and
#   `apt-get update` gets past its privilege drop;
# - a file given as stdin reads, but /proc/self/fd/0 names no host path;
# - the host side of the veth is lr<launcher pid>.<n> in decimal.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
. "$(dirname "$0")/../lib/netsb.sh"
workdir

node() {
	local opts=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
	[ $# -gt 0 ] && shift
	sb_run "${opts[@]}" -- /lr/nodeattack "$HOST_PIDNS" "$@"
}

aio_before=$(cat /proc/sys/fs/aio-nr)
check node -- aio
check test "$(cat /proc/sys/fs/aio-nr)" -le "$aio_before"

# How many pages of FILE are dirty in the host's page cache (cachestat, 6.5+).
dirty_pages() {
	python3 - "$1" <<'PY'
import ctypes, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
rng = (ctypes.c_uint64 * 2)(0, 0)
cs = (ctypes.c_uint64 * 5)()
libc = ctypes.CDLL(None, use_errno=True)
if libc.syscall(451, fd, rng, cs, 0) != 0:
    sys.exit(1)
print(cs[1])
PY
}
# The host's writeback can flush the file on its own (another process's sync, the dirty
# ratio): a sandbox that cannot write it back leaves it dirty at least once in three tries,
# one that can never does.
stayed=no
for try in 1 2 3; do
	rm -f "$WORK/dirty"
	head -c 4M /dev/urandom >"$WORK/dirty"
	before=$(dirty_pages "$WORK/dirty") || { log "no cachestat; skipping the sync check"; stayed=skip; break; }
	check node -- sync
	after=$(dirty_pages "$WORK/dirty")
	log "try $try: dirty pages of a host file before a sandbox's sync: $before, after: $after"
	[ "$before" -gt 0 ] && [ "$after" -gt 0 ] && { stayed=yes; break; }
done
check test "$stayed" != no

host_noexec=$(cat /proc/sys/vm/memfd_noexec)
check node -- memfd
check node --user 1000:1000 -- memfd
check test "$(cat /proc/sys/vm/memfd_noexec)" = "$host_noexec"

check node --set memory=256M -- meminfo $((256 << 20))
check attack -- masks /proc/vmstat /proc/zoneinfo /proc/buddyinfo /proc/pagetypeinfo /proc/slabinfo /proc/swaps
check_status 0 sb_run --set memory=256M -- /bin/sh -c 'grep -qx "MemTotal: *262144 kB" /proc/meminfo'

check node -- setid
sb_run -- apt-get -o Acquire::Retries=0 -o Acquire::http::Timeout=1 update >"$WORK/apt" 2>&1 || true
check_not grep -E "setgroups|setegid|seteuid" "$WORK/apt"
# Another user inside keeps no capability.
check_status 0 sb_run --user 1000:1000 -- /bin/sh -c \
	'test "$(grep -Ec "^Cap(Inh|Prm|Eff|Amb):[[:space:]]*0+$" /proc/self/status)" = 4'

echo "the sandbox reads this" >"$WORK/stdin-file"
check node -- stdin "$WORK/stdin-file" <"$WORK/stdin-file"
mkfifo "$WORK/stdin-fifo"
{ echo "through a named pipe" >"$WORK/stdin-fifo"; } &
check node -- stdin "$WORK/stdin-fifo" <"$WORK/stdin-fifo"
wait
# The caller's offset in the file is its own: the sandbox reads from it on, and it stays.
printf '1\n2\n3\n' >"$WORK/lines"
{ read -r _; sb_run -- /bin/cat >"$WORK/rest"; cat >"$WORK/after"; } <"$WORK/lines"
check test "$(cat "$WORK/rest")" = "$(printf '2\n3')"
check test "$(cat "$WORK/after")" = "$(printf '2\n3')"

serve port 127.0.0.1
sb_start veth --allow "host:$port" -- /bin/sh -c 'echo ready; read -r _ || true'
check ip link show "lr$SB_PID.0"
sb_stop
check test "$SB_RC" = 0

check sb_no_leftovers
