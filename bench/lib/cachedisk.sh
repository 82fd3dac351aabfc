# bench/lib/cachedisk.sh — a node's cache disk for a benchmark: a fresh ext4
# (mkfs's defaults, so with a journal) on a loop device that reads and writes
# its image file with direct I/O, as a disk of its own would be.
#
# Without direct I/O a loop device goes through the page cache of its image
# file: every block cached twice and copied once more, and a cold random read
# from it took 307 µs against 208 µs from the disk under it; with direct I/O,
# 210 µs (docs/perf-log.md, "The cache disk of the benchmarks").
#
# cachedisk_mount IMG DIR: makes IMG (4 GiB, sparse) and mounts it on DIR
# (made when missing); non-zero with nothing mounted and IMG gone when it
# cannot.  The loop device goes with the unmount of DIR.  Says so on stderr
# when the loop device could not take direct I/O (the figures then carry the
# double caching).
cachedisk_mount() {
	local img=$1 dir=$2 dev
	command -v mkfs.ext4 >/dev/null && command -v losetup >/dev/null || return 1
	if ! mkdir -p "$dir" || ! truncate -s 4G "$img" || ! mkfs.ext4 -q -F "$img" ||
		! dev=$(losetup --find --show --direct-io=on "$img"); then
		rm -f "$img"
		return 1
	fi
	if ! mount "$dev" "$dir"; then
		losetup -d "$dev"
		rm -f "$img"
		return 1
	fi
	# the device is open (mounted): this only marks it to go at the unmount
	losetup -d "$dev"
	[ "$(cat "/sys/block/${dev#/dev/}/loop/dio" 2>/dev/null)" = 1 ] ||
		echo "cache disk $img: the loop device reads through the page cache (no direct I/O)" >&2
	return 0
}
