#!/bin/bash
# Attacks: "read host files", "signal or ptrace a host process", "write to /proc/sys, /sys",
# and forging requests to the harness: a host file outside the rootfs cannot be opened by any
# path; a host process can be neither signalled nor traced (and survives); the init's socket to
# the launcher and its stdio are out of reach; /proc/sys, /proc/sysrq-trigger and /sys refuse
# writes (by default /sys is an empty read-only directory; with sysfs = true a read-only sysfs)
# and no block device can be made.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
workdir

secret=$WORK/secret-$$
echo "the reference solution" >"$secret"
check attack -- host-files "$secret" "$REPO/Makefile"

# A host process the sandbox must not touch; it blocks on a FIFO nobody writes.
mkfifo "$WORK/fifo"
exec 8<>"$WORK/fifo"
tail -f /dev/null <&8 &
victim=$!
cleanup_add kill "$victim"
check attack -- signal "$victim"
check kill -0 "$victim"

check attack -- write-proc-sys
check attack --user 1000 -- write-proc-sys
# With sysfs mounted (policy field sysfs), /sys refuses writes too.
check attack --set sysfs=true -- write-proc-sys
check sb_no_leftovers
