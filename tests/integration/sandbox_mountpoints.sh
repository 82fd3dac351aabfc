#!/bin/bash
# An image whose /proc, /dev or /sys is not a directory (a symlink pointing elsewhere in the
# image or out of it, a plain file): the launcher mounts on directories of its own overlay,
# never where a symlink points.  Not an attack from the issue's list (images come from
# builders, not from the sandboxed program), but mount(2) follows symlinks, so an image could
# otherwise hide /etc under a proc mount or put the sandbox's /dev somewhere unexpected.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
workdir

# The test rootfs with its mount points replaced: hard links (no copy of the data) where the
# disk allows, a copy otherwise.
img=$WORK/img
cp -al "$ROOTFS" "$img" 2>/dev/null || { rm -rf "$img"; cp -a "$ROOTFS" "$img"; }
rm -rf "${img:?}/proc" "$img/dev"
ln -s etc "$img/proc"          # would put proc over /etc
ln -s /tmp "$img/dev"          # absolute: resolved outside the new root at setup
hostname_before=$(cat "$img/etc/hostname")

ROOTFS=$img
inside='
	test -d /proc && ! test -L /proc && test -r /proc/self/status &&
	test -f /etc/hostname && ! test -e /etc/self &&
	test -d /dev && ! test -L /dev && test -c /dev/null && echo x >/dev/null &&
	test -d /sys && ! test -L /sys'
check sb_run -- sh -c "$inside"
# /sys a plain file, and sysfs asked for
rm -rf "${img:?}/sys"
echo "not a directory" >"$img/sys"
check sb_run -- sh -c "$inside"
check sb_run --set sysfs=true -- sh -c "$inside && test -d /sys/class/net/lo"
# the image is as it was
check test -L "$img/proc"
check test "$(readlink "$img/dev")" = /tmp
check test -f "$img/sys"
check test "$(cat "$img/etc/hostname")" = "$hostname_before"
check sb_no_leftovers
