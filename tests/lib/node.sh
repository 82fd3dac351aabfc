# shellcheck shell=bash
# Helpers for tests/integration/node_*.sh (the node service); source after common.sh and
# sandbox.sh, after `workdir`:
#
#   node_image TAG            build the Debian rootfs fixture into $WORK/store as TAG (once)
#   node_pid [KEY]            the worker's pid (or KEY of `node status --json`: holder_pid, ...)
#   nrun IMAGE [OPTIONS] -- CMD...   lazyroot run on IMAGE with this test's names and id range
#   stream_start N            start N sandboxes that each read every file of the image and
#                             print its sha256 (sorted by path) into $WORK/sum.I; pids in SBPIDS
#   stream_check              wait for them (bounded: `timeout`), then check every one exited 0
#                             and printed exactly the source's checksums
#   wait_worker OLD           wait until a worker other than OLD answers (node status blocks in
#                             the socket's backlog while none runs: no polling)
export LAZYROOT_STORE=dir:$WORK/store LAZYROOT_CACHE=$WORK/cache LAZYROOT_IMAGES=$WORK/images
NODE_STREAM_TIMEOUT=${NODE_STREAM_TIMEOUT:-900}

node_image() {
	"$LAZYROOT" build "$ROOTFS" --tag "$1" --no-progress >/dev/null
}

node_pid() {
	timeout 60 "$LAZYROOT" node status --json |
		python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "${1:-pid}"
}

nrun() {
	local img=$1
	shift
	_sb_count=$((_sb_count + 1))
	"$LAZYROOT" run --name "$SB_NAME-$_sb_count" --set "uid_base=$SB_UID_BASE" "$img" "$@"
}

# Every regular file under the root (one file system: not /proc, /dev, /tmp), by path.
_STREAM='cd / && find . -xdev -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum'

_source_sums() {
	[ -s "$WORK/sum.src" ] && return
	(cd "$ROOTFS" && find . -xdev -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) \
		>"$WORK/sum.src"
	check test "$(wc -l <"$WORK/sum.src")" -gt 1000
}

SBPIDS=()
stream_start() {
	local i
	_source_sums
	for i in $(seq "$1"); do
		_sb_count=$((_sb_count + 1))
		timeout "$NODE_STREAM_TIMEOUT" "$LAZYROOT" run --name "$SB_NAME-s$i" \
			--set "uid_base=$SB_UID_BASE" --timeout "$NODE_STREAM_TIMEOUT" --output-limit 0 \
			"$NODE_IMAGE" -- sh -c "$_STREAM" >"$WORK/sum.$i" 2>"$WORK/err.$i" &
		SBPIDS+=($!)
	done
}

stream_check() {
	local i st
	for i in "${!SBPIDS[@]}"; do
		st=0
		wait "${SBPIDS[$i]}" || st=$?
		[ "$st" = 0 ] || { log "sandbox $((i + 1)) exited $st:"; head -5 "$WORK/err.$((i + 1))" >&2; }
		check test "$st" = 0
		cmp -s "$WORK/sum.src" "$WORK/sum.$((i + 1))" ||
			diff "$WORK/sum.src" "$WORK/sum.$((i + 1))" | head -5 >&2
		check cmp -s "$WORK/sum.src" "$WORK/sum.$((i + 1))"
	done
	SBPIDS=()
}

wait_worker() {
	local deadline=$((SECONDS + 60)) p
	while [ "$SECONDS" -lt "$deadline" ]; do
		p=$(node_pid) || return 1
		[ "$p" != "$1" ] && { echo "$p"; return 0; }
	done
	return 1
}
