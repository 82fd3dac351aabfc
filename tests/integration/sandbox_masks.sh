#!/bin/bash
# Attacks: learn about the host from /proc, /sys and the mount table, and change what the policy
# makes read-only through its metadata.
#   - /proc masks as container runtimes mask it, and more (sandbox/POLICY.md, "Always on"): the
#     kernel's command line, /proc/config.gz, /proc/fs (the host disks' ext4 and jbd2 internals),
#     kallsyms, kmsg, keys, modules, interrupt counts, timer_list, pressure, acpi, driver, …
#     read as empty (or do not exist); with sysfs, /sys/firmware too; what a sandbox needs of
#     /proc still works;
#   - the mount table shows no host path of the root filesystem;
#   - read_only paths, and everything outside `writable`, refuse chmod, chown, utime, xattr
#     changes and writes with EROFS (read-only mounts: Landlock has no right for metadata),
#     while writable paths beneath them, and :rw binds, still take them; a read-only bind stays
#     read-only even when named writable;
#   - a hidden file or directory shows nothing of itself to stat: no size, mode, times or
#     extended attributes.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
workdir

# --- /proc and /sys
masked=(/proc/cmdline /proc/config.gz /proc/bootconfig /proc/kallsyms /proc/kcore /proc/kmsg
	/proc/keys /proc/key-users /proc/modules /proc/interrupts /proc/softirqs /proc/timer_list
	/proc/timer_stats /proc/sched_debug /proc/latency_stats /proc/sysrq-trigger /proc/acpi
	/proc/asound /proc/scsi /proc/fs /proc/driver /proc/pressure)
check attack -- masks "${masked[@]}"
check attack --user 1000:1000 -- masks "${masked[@]}"
check attack --set sysfs=true -- masks /sys/firmware /sys/devices/virtual/powercap
# The host has them (so the masks are what hides them) ...
check test -s /proc/cmdline
check test -n "$(ls /proc/fs)"
check test -n "$(ls /sys/firmware)"
# ... and what programs read of /proc still works.
check_status 0 sb_run -- /bin/sh -c 'grep -q "^Name:" /proc/self/status && grep -q . /proc/meminfo &&
	grep -q . /proc/cpuinfo && grep -q . /proc/stat && grep -q . /proc/self/mountinfo &&
	test -n "$(ls /proc/sys/kernel)" && ! echo 1 2>/dev/null >/proc/sys/kernel/hostname'
# The mount table: nothing of the root filesystem's host path.
check attack -- masks "nomount:$ROOTFS" "nomount:$(dirname "$ROOTFS")"

# --- read-only paths: no metadata change either
check attack --set read_only=/usr -- metadata ro:/usr/bin/python3.11 ro:/usr/lib/os-release \
	ro:/usr ro:/usr/bin
check attack --set writable=/tmp -- metadata ro:/etc/passwd ro:/usr/bin/dash ro:/ ro:/etc
# Beneath them, writable paths still take every change; beside them too.
check_status 0 sb_run --set writable=/ --set writable=/usr/local --set read_only=/usr -- /bin/sh -c \
	'touch /usr/local/f && chmod 600 /usr/local/f && touch -d @5 /usr/local/f && test "$(stat -c %a:%Y /usr/local/f)" = 600:5 && chmod 700 /etc/passwd'
check_status 0 sb_run --set writable=/tmp -- /bin/sh -c 'echo x >/tmp/f && chmod 600 /tmp/f && mv /tmp/f /tmp/g'
check attack --set read_only=/usr --set writable=/usr/local -- metadata ro:/usr/bin/dash
# A path both read-only and writable is read-only, its metadata too.
check attack --set writable=/ --set writable=/usr --set read_only=/usr -- metadata ro:/usr/bin/dash
# A read-only bind stays read-only, named writable or not; a :rw bind under a read-only path
# stays writable.
mkdir "$WORK/robind" "$WORK/rwbind"
echo original >"$WORK/robind/file"
check_status 0 sb_run --bind "$WORK/robind:/data" --set writable=/data -- /bin/sh -c \
	'! echo changed 2>/dev/null >/data/file && ! chmod 777 /data/file 2>/dev/null'
check grep -qx original "$WORK/robind/file"
check test "$(stat -c %a "$WORK/robind/file")" = 644
check_status 0 sb_run --bind "$WORK/rwbind:/usr/out:rw" --set read_only=/usr -- /bin/sh -c \
	'echo result >/usr/out/r && chmod 600 /usr/out/r'
check grep -qx result "$WORK/rwbind/r"

# --- hidden paths: nothing of them shows to stat
mkdir "$WORK/solutions"
echo "the reference solution" >"$WORK/solutions/answer"
python3 -c 'import os, sys
for p in sys.argv[1:]:
    os.setxattr(p, "user.secret", b"42")
    os.utime(p, (978307200, 978307200))' "$WORK/solutions/answer" "$WORK/solutions"
check_status 0 sb_run --bind "$WORK/solutions:/solutions" -- /bin/sh -c \
	'test "$(stat -c %s:%Y /solutions/answer)" = 23:978307200'
check attack --bind "$WORK/solutions:/solutions" --set hide=/solutions/answer -- \
	metadata hidden:/solutions/answer:978307200
check attack --bind "$WORK/solutions:/solutions" --set hide=/solutions -- \
	metadata hidden:/solutions:978307200 hidden:/solutions/answer:978307200
check attack --set hide=/etc/hostname --set hide=/usr/share/doc -- \
	metadata "hidden:/etc/hostname:$(stat -c %Y "$ROOTFS/etc/hostname")" \
	"hidden:/usr/share/doc:$(stat -c %Y "$ROOTFS/usr/share/doc")"
check attack --set hide=/etc/hostname --set writable=/tmp -- \
	metadata "hidden:/etc/hostname:$(stat -c %Y "$ROOTFS/etc/hostname")" ro:/etc
check sb_no_leftovers
