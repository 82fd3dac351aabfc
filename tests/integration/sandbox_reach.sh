#!/bin/bash
# Attacks: reach what the policy does not name, and learn what other sandboxes do.
#   - socket families: AF_VSOCK (which shares the VM's port space with the host), packet, ALG,
#     TIPC, RDS, UDP-Lite, MPTCP, SCTP, raw and ICMP sockets, netlink other than route
#     (uevents, sock_diag, audit, …) are refused; unix, TCP/UDP over IPv4 and IPv6 and netlink
#     route work; socket_families narrows them further, and a family it cannot name is an error;
#   - kernel uevents: even with io_uring let through (which makes sockets without seccomp
#     seeing it), a uevent the host emits reaches no sandbox: pooled network namespaces are
#     owned by a user namespace of the pool's, a sandbox's own one by its own, never the host's;
#   - the page cache of a shared file: a second sandbox cannot tell (mincore, cachestat,
#     preadv2 RWF_NOWAIT) which pages a first one read, although the host can.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
. "$(dirname "$0")/../lib/netsb.sh"
need_cmd pgrep
workdir

# --- socket families
check attack -- sockets all
check attack --user 1000:1000 -- sockets all
check attack --set socket_families=unix -- sockets unix
check attack --set socket_families=inet,netlink -- sockets inet,netlink
check attack --set socket_families=none -- sockets none
check attack --set io_uring=true --set socket_families=inet6 -- sockets inet6
check_status 125 sb_run --set socket_families=unix,vsock -- true 2>"$WORK/err"
check grep -q "socket_families = 'unix,vsock'" "$WORK/err"
check_status 125 sb_run --set socket_families= -- true
# Real programs: getaddrinfo's netlink route query and sockets of each allowed family.
check_status 0 sb_run -- python3 -c '
import socket
socket.socket(socket.AF_INET6).bind(("::1", 0))
a, b = socket.socketpair(); a.send(b"x"); assert b.recv(1) == b"x"
n = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0); n.bind((0, 0))
try:
    socket.socket(40, socket.SOCK_STREAM)
    raise SystemExit("AF_VSOCK worked")
except OSError as e:
    assert e.errno == 97, e'

# --- kernel uevents and the owner of the sandbox's network namespace
host_userns=$(stat -L -c %i /proc/self/ns/user)
# owner FILE: the inode of the user namespace that owns namespace FILE (NS_GET_USERNS)
owner() {
	python3 -c 'import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
print(os.fstat(fcntl.ioctl(fd, 0xb701)).st_ino)' "$1"
}
# Emit a uevent on the host and wait until a host listener has it: the kernel has then queued
# it on every socket it sends it to.
host_uevent() {
	python3 - <<'PY'
import socket, uuid
s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 15)
s.bind((0, 1))
s.settimeout(10)
u = str(uuid.uuid4())
with open("/sys/devices/virtual/mem/null/uevent", "w") as f:
    f.write("change " + u)
while u.encode() not in s.recv(65536):
    pass
PY
}
for pool in true false; do
	sb_start "uevent-$pool" --set io_uring=true --set pool=$pool -- /lr/attack "$HOST_PIDNS" uevent
	init=$(pgrep -P "$SB_PID" | head -n 1)
	net_owner=$(owner "/proc/$init/ns/net")
	sb_userns=$(stat -L -c %i "/proc/$init/ns/user")
	check_not test "$net_owner" = "$host_userns"
	if [ $pool = true ]; then
		# the pooled namespace, owned by neither the host nor the sandbox
		check test "$(stat -L -c %i "$LAZYROOT_POOL_DIR/net.0")" = "$(stat -L -c %i "/proc/$init/ns/net")"
		check_not test "$net_owner" = "$sb_userns"
	else
		check test "$net_owner" = "$sb_userns"
	fi
	check host_uevent
	echo checked >&8
	sb_stop
	check test "$SB_RC" = 0
done

# --- the page cache of a shared file
mkdir "$WORK/shared"
head -c $((64 * 4096)) /dev/urandom >"$WORK/shared/data"
# resident FILE: the page numbers of FILE in the page cache, as the host sees them
resident() {
	python3 - "$1" <<'PY'
import ctypes, mmap, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(sys.argv[1], os.O_RDONLY)
n = os.fstat(fd).st_size // 4096
libc.mmap.restype = ctypes.c_void_p
p = libc.mmap(None, n * 4096, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
vec = (ctypes.c_ubyte * n)()
if libc.mincore(ctypes.c_void_p(p), n * 4096, vec) != 0:
    raise SystemExit("mincore: %d" % ctypes.get_errno())
print(" ".join(str(i) for i in range(n) if vec[i] & 1))
PY
}
# evict: written back, then out of the page cache
evict() {
	python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.fsync(fd)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$1"
}
# The first sandbox reads pages 3 and 17 (without readahead, which would read on past them);
# the host sees them cached, the second sandbox cannot. A node that drops its caches meanwhile
# (another job's drop_caches) empties the page cache under the check: try up to three times.
before= after=
for try in 1 2 3; do
	evict "$WORK/shared/data"
	before=$(resident "$WORK/shared/data")
	sb_run --bind "$WORK/shared:/shared" -- python3 -c '
import os
fd = os.open("/shared/data", os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
assert len(os.pread(fd, 4096, 3 * 4096)) == len(os.pread(fd, 4096, 17 * 4096)) == 4096' || break
	after=$(resident "$WORK/shared/data")
	[ -z "$before" ] && [ "$after" = "3 17" ] && break
done
check test -z "$before"
check test "$after" = "3 17"
check attack --bind "$WORK/shared:/shared" -- pagecache /shared/data
check attack --bind "$WORK/shared:/shared" --set io_uring=true -- pagecache /shared/data
check attack -- pagecache /usr/bin/python3.11
check sb_no_leftovers
