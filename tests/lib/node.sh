# shellcheck shell=bash
# Helpers for tests/integration/node_*.sh (the node service); source after common.sh and
# sandbox.sh, after `workdir` (node_pid is common.sh's):
#
#   node_image TAG            build the Debian rootfs fixture into $WORK/store as TAG (once)
#   nrun IMAGE [OPTIONS] -- CMD...   lazyroot run on IMAGE with this test's names and id range
#   stream_start N            start N sandboxes that each read every file of the image and
#                             print its sha256 (sorted by path, as sha256sum does) into
#                             $WORK/sum.I, pass after pass, until stream_check; pids in SBPIDS
#   stream_check              tell them to stop (each ends at a file boundary once it has made
#                             one whole pass), wait for them (bounded: `timeout`), then check
#                             every one exited 0 and printed the source's checksums exactly:
#                             whole passes, then the start of one
#   wait_worker OLD           wait until a worker other than OLD answers (node status blocks in
#                             the socket's backlog while none runs: no polling)
export LAZYROOT_STORE=dir:$WORK/store LAZYROOT_CACHE=$WORK/cache LAZYROOT_IMAGES=$WORK/images
NODE_STREAM_TIMEOUT=${NODE_STREAM_TIMEOUT:-900}

node_image() {
	"$LAZYROOT" build "$ROOTFS" --tag "$1" --no-progress >/dev/null
}

nrun() {
	local img=$1
	shift
	_sb_count=$((_sb_count + 1))
	"$LAZYROOT" run --name "$SB_NAME-$_sb_count" --set "uid_base=$SB_UID_BASE" "$img" "$@"
}

# In the sandbox: every regular file under / on its file system (find / -xdev -type f), in
# LC_ALL=C order, hashed and printed as sha256sum prints it (the source's sums come from
# sha256sum itself, so the two agree only when both are right), pass after pass until the file
# $1 exists; it is looked at between files once a whole pass is done.  Passes that go on until
# the test's loop of kills or upgrades ends make every one of them land while 16 sandboxes read;
# Python's hashlib (OpenSSL) hashes at a third of sha256sum's CPU, and the sandboxes run at
# nice 10: they still keep reads in flight all the time, while the node's worker, its
# takeovers and upgrades come first on the CPU rather than waiting behind 16 hashers.
_STREAM='import hashlib, os, stat, sys
stop, out = sys.argv[1], sys.stdout.buffer
os.chdir("/")
dev = os.lstat(".").st_dev
paths = []
for d, dirs, files in os.walk(b"."):
    dirs[:] = [x for x in dirs if os.lstat(os.path.join(d, x)).st_dev == dev]
    paths += [p for p in (os.path.join(d, f) for f in files) if stat.S_ISREG(os.lstat(p).st_mode)]
paths.sort()
whole = False
while True:
    for p in paths:
        if whole and os.path.exists(stop):
            sys.exit(0)
        h = hashlib.sha256()
        with open(p, "rb") as f:
            while b := f.read(1 << 20):
                h.update(b)
        esc = b"\\" in p or b"\n" in p or b"\r" in p
        name = p.replace(b"\\", b"\\\\").replace(b"\n", b"\\n").replace(b"\r", b"\\r") if esc else p
        out.write((b"\\" if esc else b"") + h.hexdigest().encode() + b"  " + name + b"\n")
    out.flush()
    whole = True
    if os.path.exists(stop):
        sys.exit(0)'

# The source's sums, made while the sandboxes read (the streams only need them at the end).
_SRC_PID=
_source_sums_start() {
	[ -s "$WORK/sum.src" ] && return
	(cd "$ROOTFS" && find . -xdev -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) \
		>"$WORK/sum.src" &
	_SRC_PID=$!
}
_source_sums_wait() {
	[ -n "$_SRC_PID" ] || return 0
	check wait "$_SRC_PID"
	_SRC_PID=
	check test "$(wc -l <"$WORK/sum.src")" -gt 1000
}

# OUT holds whole copies of SRC (one or more), then the first lines of one more.
_passes_ok() {  # SRC OUT
	[ -s "$1" ] && cmp -s "$1" "$2" && return   # one whole pass, as most make: no Python
	python3 -c 'import sys
src = open(sys.argv[1], "rb").read().splitlines(True)
out = open(sys.argv[2], "rb").read().splitlines(True)
n, rest = divmod(len(out), len(src))
ok = n >= 1 and all(out[i * len(src):(i + 1) * len(src)] == src for i in range(n)) and \
    out[n * len(src):] == src[:rest]
print("%d whole passes and %d files" % (n, rest), file=sys.stderr)
sys.exit(0 if ok else 1)' "$1" "$2"
}

SBPIDS=()
stream_start() {
	local i
	_source_sums_start
	rm -rf "$WORK/stream"
	mkdir -p "$WORK/stream"
	for i in $(seq "$1"); do
		_sb_count=$((_sb_count + 1))
		nice -n 10 timeout "$NODE_STREAM_TIMEOUT" "$LAZYROOT" run --name "$SB_NAME-s$i" \
			--set "uid_base=$SB_UID_BASE" --timeout "$NODE_STREAM_TIMEOUT" --output-limit 0 \
			--bind "$WORK/stream:/stream" "$NODE_IMAGE" -- python3 -c "$_STREAM" /stream/stop \
			>"$WORK/sum.$i" 2>"$WORK/err.$i" &
		SBPIDS+=($!)
	done
}

stream_check() {
	local i st
	: >"$WORK/stream/stop"
	_source_sums_wait
	for i in "${!SBPIDS[@]}"; do
		st=0
		wait "${SBPIDS[$i]}" || st=$?
		[ "$st" = 0 ] || { log "sandbox $((i + 1)) exited $st:"; head -5 "$WORK/err.$((i + 1))" >&2; }
		check test "$st" = 0
		check _passes_ok "$WORK/sum.src" "$WORK/sum.$((i + 1))"
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
