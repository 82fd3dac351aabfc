#!/bin/bash
# A launch that fails at a step of its plan (sandbox/launch-internal.h) unwinds everything the
# steps before it did, whichever step it is: before the clone (the rootfs checked; a writable
# bind's source missing after another was lent), after it on the host (a read-only bind's source
# missing when the mount trees are made: the init is killed and reaped), and inside the init (a
# bind target that cannot be made). Each fails with one line naming the input (the init's adds
# a second, that setup failed), and leaves no
# process, cgroup, mount or launcher record, and the writable bind's source owned and moded as
# before.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
workdir
# Cgroups named after each sandbox and records of the test's own, so that what a failed launch
# left is found by name.
export LAZYROOT_RECORD_DIR=$WORK/launchers
export LAZYROOT_POOL=0
SB_RECORDS=$LAZYROOT_RECORD_DIR

chmod 0755 "$WORK"
mkdir -m 0750 "$WORK/out"
before=$(stat -c '%u:%g:%a' "$WORK/out")

# Run a launch that must fail with a message matching want; then nothing of it may be left.
fails_at() {  # STEP WANT ARGS... (sb_run's)
	local step=$1 want=$2 st=0
	shift 2
	sb_run "$@" 2>"$WORK/err.$step" >/dev/null || st=$?
	cat "$WORK/err.$step" >&2
	check test "$st" -ne 0
	check grep -q -- "$want" "$WORK/err.$step"
	check test "$(grep -c . "$WORK/err.$step")" -le "${lines:-1}"
	check test "$(stat -c '%u:%g:%a' "$WORK/out")" = "$before"
	check sb_no_leftovers
}

# before the clone: the check, then the second writable bind of two
ROOTFS=$WORK/none fails_at check "rootfs '$WORK/none'" -- /bin/true
fails_at lend "bind '$WORK/missing'" --bind "$WORK/out:/out:rw" --bind "$WORK/missing:/m:rw" \
	-- /bin/true
# after the clone, on the host: the mount trees
fails_at mounts "^lazyroot: '$WORK/missing'" --bind "$WORK/out:/out:rw" --bind "$WORK/missing:/m" \
	-- /bin/true
# inside the init: a bind target below a file of the image
lines=2 fails_at init "bind target '/etc/passwd/x'" --bind "$WORK/out:/out:rw" \
	--bind "$WORK/out:/etc/passwd/x" -- /bin/true
check grep -q "sandbox setup failed (init exit 125)" "$WORK/err.init"

# and a launch that does not fail, after them, lends and gives back the same source
check sb_run --bind "$WORK/out:/out:rw" -- /bin/sh -c 'touch /out/made'
check test -e "$WORK/out/made"
check test "$(stat -c '%u:%g:%a' "$WORK/out")" = "$before"
check sb_no_leftovers
