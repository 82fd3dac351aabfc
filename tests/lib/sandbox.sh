# shellcheck shell=bash
# Helpers for tests/integration/sandbox_*.sh; source after common.sh:
#
#   . "$(dirname "$0")/../lib/sandbox.sh"
#
# Skips unless root. Sets $ROOTFS (the cached Debian rootfs, read-only to every test), $HOST_PIDNS
# (the host's pid namespace inode, which the attack program refuses to act in) and gives each
# test its own sandbox names ($SB_NAME-N) and host id range ($SB_UID_BASE), so that leftovers are
# found exactly even while other sandboxes run. Provides:
#   sb_run [RUN OPTIONS] -- CMD...   lazyroot run with this test's name, id range and the attack
#                                    programs bound read-only at /lr; with SB_EXEC=1 it execs
#                                    (so that `SB_EXEC=1 sb_run ... &` makes $! the launcher)
#   attack [RUN OPTIONS] -- NAME ARGS...   run tests/sandbox/attack NAME in a sandbox
#   sb_no_leftovers                  no process in the id range, no cgroup, no launcher record and
#                                    no mount namespace holding a tmpfs of this test's sandboxes
#   json_field FILE KEY              a field of a --json report (python3)
need_root
need_cmd python3 ps /usr/bin/time
ROOTFS=$(bash "$REPO/tests/lib/rootfs.sh" --dir)
ATTACK_DIR=${LAZYROOT_BUILD:-$REPO/build}/tests/sandbox
[ -x "$ATTACK_DIR/attack" ] || fail "$ATTACK_DIR/attack is missing: make tests-build"
HOST_PIDNS=$(stat -L -c %i /proc/self/ns/pid)
SB_NAME=lrtest-$TEST_NAME-$$
# A host id range of the test's own: one of 2,000 blocks of 65536 ids from 2,100,000,000 (below
# the node's own blocks, sandbox/POLICY.md "Host ids"), the first free one from one chosen by the
# pid, held with a lock for as long as the test runs.  Two tests that ran at once on one range
# (tests/run -j, or a second checkout's suite) would each find the other's processes as
# leftovers, and share the kernel's per-user budgets.  The launcher and the node close the lock's
# descriptor (close_range), so nothing a test starts holds it longer.
mkdir -p /run/lock/lazyroot-tests
_sb_block=$(($$ % 2000))
for _ in $(seq 2000); do
	exec {_SB_IDS_FD}>"/run/lock/lazyroot-tests/ids.$_sb_block"
	flock -n "$_SB_IDS_FD" && break
	exec {_SB_IDS_FD}>&-
	_sb_block=$(((_sb_block + 1) % 2000))
	_SB_IDS_FD=
done
[ -n "$_SB_IDS_FD" ] || fail "every test id range is held (/run/lock/lazyroot-tests)"
SB_UID_BASE=$((2100000000 + _sb_block * 65536))
_sb_count=0

sb_run() {
	local opts=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
	[ $# -gt 0 ] && shift
	_sb_count=$((_sb_count + 1))
	${SB_EXEC:+exec} "$LAZYROOT" run --rootfs "$ROOTFS" --name "$SB_NAME-$_sb_count" --set "uid_base=$SB_UID_BASE" \
		--bind "$ATTACK_DIR:/lr" "${opts[@]}" -- "$@"
}

attack() {
	local opts=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
	[ $# -gt 0 ] && shift
	sb_run "${opts[@]}" -- /lr/attack "$HOST_PIDNS" "$@"
}

SB_RECORDS=${LAZYROOT_RECORD_DIR:-/run/lazyroot/launchers}
# A pool of the test's own (sandbox/POLICY.md, "Pools"), emptied at exit: pooled namespaces and
# cgroups outlive the sandboxes that used them, but not the test.
_SB_POOL=$(mktemp -d "${TMPDIR:-/tmp}/lazyroot-pool.XXXXXX")
export LAZYROOT_POOL_DIR=$_SB_POOL

sb_no_leftovers() {
	local procs cgroups mounts records
	procs=$(ps -e -o pid=,uid=,stat=,args= |
		awk -v lo="$SB_UID_BASE" -v hi=$((SB_UID_BASE + 65536)) '{ u = $2 < 0 ? $2 + 4294967296 : $2 } u >= lo && u < hi && $3 !~ /^Z/')
	cgroups=$(find /sys/fs/cgroup -maxdepth 8 -type d -name "$SB_NAME-*" 2>/dev/null || true)
	mounts=$(grep -l -- "$SB_NAME-" /proc/[0-9]*/mountinfo 2>/dev/null || true)
	records=$(find "$SB_RECORDS" -maxdepth 1 -name "$SB_NAME-*" 2>/dev/null || true)
	[ -z "$procs" ] || log "left behind: processes: $procs"
	[ -z "$cgroups" ] || log "left behind: cgroups: $cgroups"
	[ -z "$mounts" ] || log "left behind: mounts seen by: $mounts"
	[ -z "$records" ] || log "left behind: launcher records: $records"
	[ -z "$procs$cgroups$mounts$records" ]
}

json_field() {
	python3 -c 'import json, sys; v = json.load(open(sys.argv[1]))[sys.argv[2]]; print("null" if v is None else str(v).lower() if isinstance(v, bool) else v)' "$1" "$2"
}

# Whatever happens, remove cgroups and launcher records this test's sandboxes may have left (a
# launcher killed by SIGKILL cannot remove its own; `lazyroot gc` would, but a failed test must
# not depend on it).
_sb_cleanup() {
	local try
	# A launcher still ending (killed by an earlier cleanup) holds its slots for a moment.
	for try in $(seq 50); do
		LAZYROOT_POOL_DIR=$_SB_POOL "$LAZYROOT" gc --pool --json 2>/dev/null |
			grep -q '"pool_busy":0' && break
		sleep 0.1
	done
	rmdir "$_SB_POOL" 2>/dev/null
	find /sys/fs/cgroup -maxdepth 8 -depth -type d -name "$SB_NAME-*" -exec rmdir {} + 2>/dev/null
	rm -f "$SB_RECORDS/$SB_NAME-"* 2>/dev/null
	return 0
}
cleanup_add _sb_cleanup
