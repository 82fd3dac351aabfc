#!/bin/bash
# Attack: "overwrite system binaries (e.g. /bin/bash) to intercept the grader's answers".
# A sandbox overwrites /bin/sh and /usr/bin/python3; it sees its own copy change, while a second
# sandbox and the rootfs itself still have the originals.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
workdir

sha_dash=$(sha256sum "$ROOTFS/usr/bin/dash" | cut -d' ' -f1)
sha_py=$(sha256sum "$ROOTFS/usr/bin/python3.11" | cut -d' ' -f1)

check attack -- overwrite /bin/sh /usr/bin/python3
check_status 0 sb_run -- /bin/sh -c 'echo still-a-shell' >"$WORK/out2"
check grep -qx still-a-shell "$WORK/out2"
check_status 0 sb_run -- python3 -c 'print(6 * 7)' >"$WORK/out3"
check grep -qx 42 "$WORK/out3"
check_status 0 sb_run -- sha256sum /usr/bin/dash /usr/bin/python3.11 >"$WORK/sums"
check grep -q "^$sha_dash " "$WORK/sums"
check grep -q "^$sha_py " "$WORK/sums"
check test "$(sha256sum "$ROOTFS/usr/bin/dash" | cut -d' ' -f1)" = "$sha_dash"
check test "$(sha256sum "$ROOTFS/usr/bin/python3.11" | cut -d' ' -f1)" = "$sha_py"
check sb_no_leftovers
