#!/bin/bash
# The launcher's contract, which every attack test relies on: exit status passed through
# (128 + signal), the --json report, namespaces and identity inside, --env/--workdir/--user/
# --hostname, --bind read-only by default and :rw on request, the policy file with flags
# overriding it, and one-line errors naming the bad input (exit 125).
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
workdir

check_status 0 sb_run -- /bin/true
check_status 3 sb_run -- /bin/sh -c 'exit 3'
check_status 143 sb_run -- /bin/sh -c 'kill -TERM $$'
check_status 127 sb_run -- /no/such/command
check_status 0 sb_run --json="$WORK/r.json" -- /bin/sh -c 'exit 0'
check test "$(json_field "$WORK/r.json" killed_by)" = null
check test "$(json_field "$WORK/r.json" signal)" = 0

# Inside: root of its own namespaces, pid 2 under an init, a fresh hostname, no host ids.
sb_run --hostname box7 --env FOO=bar --workdir /tmp -- /bin/sh -c \
	'echo "$(id -u) $(hostname) $FOO $(pwd) $$"; cat /proc/self/uid_map' >"$WORK/inside"
check grep -qx "0 box7 bar /tmp 2" "$WORK/inside"
check grep -q "^ *0 *$SB_UID_BASE *65536$" "$WORK/inside"
check_status 0 sb_run --user 1000:1001 -- /bin/sh -c 'test "$(id -u):$(id -g)" = 1000:1001'
for ns in user mnt pid net ipc uts cgroup; do
	host=$(readlink /proc/self/ns/$ns)
	check_not test "$(sb_run -- readlink /proc/self/ns/$ns)" = "$host"
done
# No capability survives but what root inside needs to change ids and owners in its own user
# namespace (CAP_CHOWN, CAP_SETGID, CAP_SETUID: 0xc1), and another user has none.
sb_run -- /bin/sh -c 'grep ^Cap /proc/self/status; grep NoNewPrivs /proc/self/status' >"$WORK/caps"
check test "$(grep -Ec '^Cap(Inh|Amb):[[:space:]]*0+$' "$WORK/caps")" = 2
check test "$(grep -Ec '^Cap(Prm|Eff|Bnd):[[:space:]]*0+c1$' "$WORK/caps")" = 3
check grep -q 'NoNewPrivs:[[:space:]]*1' "$WORK/caps"
sb_run --user 1000 -- /bin/sh -c 'grep ^Cap /proc/self/status' >"$WORK/caps"
check test "$(grep -Ec '^Cap(Inh|Prm|Eff|Amb):[[:space:]]*0+$' "$WORK/caps")" = 4

# Binds: read-only by default, writable with :rw; the rootfs's /dev has the minimal set.
mkdir "$WORK/ro" "$WORK/rw"
echo data >"$WORK/ro/file"
check_status 0 sb_run --bind "$WORK/ro:/data" -- /bin/sh -c 'cat /data/file && ! echo x 2>/dev/null >/data/file'
check grep -qx data "$WORK/ro/file"
check_status 0 sb_run --bind "$WORK/rw:/out:rw" -- /bin/sh -c 'echo written >/out/result'
check grep -qx written "$WORK/rw/result"
check_status 0 sb_run -- /bin/sh -c 'for d in null zero full random urandom tty pts shm; do test -e /dev/$d || exit 1; done'
# /dev is read-only; /dev/shm is sticky and writable by any user, on the sandbox's tmpfs and
# within its size.
check_status 0 sb_run -- /bin/sh -c '! touch /dev/new 2>/dev/null'
check_status 0 sb_run --user 1000 -- /bin/sh -c 'echo x >/dev/shm/f && test -k /dev/shm'
check_status 0 sb_run --set tmpfs_size=1M -- /bin/sh -c \
	'! dd if=/dev/zero of=/dev/shm/big bs=64k count=32 2>/dev/null && test "$(stat -f -c %b /dev/shm)" = 256'
# /sys: an empty read-only directory unless the policy asks for sysfs.
check_status 0 sb_run -- /bin/sh -c 'test -z "$(ls -A /sys)" && ! mkdir /sys/x 2>/dev/null'
check_status 0 sb_run --set sysfs=true -- /bin/sh -c 'test -e /sys/class/net/lo && test ! -e /sys/class/net/eth0'

# Policy file, with flags overriding single fields.
cat >"$WORK/policy" <<'P'
# test policy
hostname = from-policy
env = A=1
timeout = 0.3
P
check_status 124 sb_run --policy "$WORK/policy" --json="$WORK/r.json" -- sleep 600
check test "$(json_field "$WORK/r.json" killed_by)" = time
check test "$(sb_run --policy "$WORK/policy" --hostname from-flag -- hostname)" = from-flag
check test "$(sb_run --policy "$WORK/policy" -- /bin/sh -c 'echo $A')" = 1

# Errors: one line naming the input, exit 125.
echo "no_such_field = 1" >"$WORK/bad-policy"
check_status 125 sb_run --policy "$WORK/bad-policy" -- /bin/true 2>"$WORK/err"
check grep -q "no_such_field" "$WORK/err"
check_status 125 "$LAZYROOT" run --rootfs "$WORK/missing" -- /bin/true 2>"$WORK/err"
check grep -q "$WORK/missing" "$WORK/err"
check_status 125 sb_run --memory lots -- /bin/true 2>"$WORK/err"
check grep -q "lots" "$WORK/err"
check_status 0 "$LAZYROOT" run --help
check sb_no_leftovers
