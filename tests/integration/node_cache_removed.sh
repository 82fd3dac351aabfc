#!/bin/bash
# A cache directory removed while the node has it open, as a benchmark or an operator resetting
# a cache does between runs: the next mount naming the path gets a new cache there, and the old
# one, once no mount uses it, is freed with its descriptors and decoder threads.  Eight rounds of
# mount, read, umount and `rm -rf` of the cache leave the worker with about as many threads and
# descriptors as the first round did (kept, the old caches added two threads and about six
# descriptors a round); the node's own cache is unaffected.
# tests/run: alone (with a busy CPU beside it, a removed cache was still open 5 s after its
# umount and the descriptor bound failed)
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd fusermount3 python3
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir

mkdir -p "$WORK/src/d" "$WORK/mnt"
seq 1 300000 >"$WORK/src/d/b"
head -c 3000000 /dev/urandom >"$WORK/src/big"
"$LAZYROOT" build "$WORK/src" --store "dir:$WORK/store" --tag t:1 --no-progress >/dev/null
export LAZYROOT_METRICS=off LAZYROOT_SOCKET=$WORK/node.sock LAZYROOT_CACHE=$WORK/own \
	LAZYROOT_IMAGES=$WORK/images

counts() {  # the worker's threads and open descriptors
	echo "$(ls "/proc/$pid/task" | wc -l) $(ls "/proc/$pid/fd" | wc -l)"
}
for round in 1 2 3 4 5 6 7 8; do
	check "$LAZYROOT" mount t:1 "$WORK/mnt" --store "dir:$WORK/store" --cache "$WORK/c"
	check cmp "$WORK/src/d/b" "$WORK/mnt/d/b"
	check cmp "$WORK/src/big" "$WORK/mnt/big"
	check "$LAZYROOT" umount "$WORK/mnt"
	rm -rf "$WORK/c"
	if [ "$round" = 1 ]; then
		pid=$(node_pid)
		read -r threads1 fds1 <<<"$(counts)"
		threads=$threads1 fds=$fds1
	else
		# the old cache goes once what it had in flight (writes, an object) has ended
		for _ in $(seq 100); do
			read -r threads fds <<<"$(counts)"
			[ "$threads" -le $((threads1 + 3)) ] && [ "$fds" -le $((fds1 + 6)) ] && break
			sleep 0.05
		done
	fi
	log "round $round: $threads threads, $fds descriptors"
done
check test "$threads" -le $((threads1 + 3))
check test "$fds" -le $((fds1 + 6))
check "$LAZYROOT" mount t:1 "$WORK/mnt" --store "dir:$WORK/store"
check cmp "$WORK/src/big" "$WORK/mnt/big"
check test -d "$WORK/own/chunks"
check "$LAZYROOT" node stop
