# shellcheck shell=bash
# Helpers for the integration scripts under tests/integration/. Source it first thing:
#
#   . "$(dirname "$0")/../lib/common.sh"
#
# It turns on `set -euo pipefail` and provides:
#   need_root                exit 77 (skip) unless running as root
#   need_cmd CMD...          exit 77 (skip) when a command is missing
#   cleanup_add CMD...       run CMD at exit, even on failure; last added runs first
#   workdir                  make $WORK, a fresh directory under $TMPDIR removed at exit, and
#                            point LAZYROOT_SOCKET at $WORK/node.sock (the test's own node
#                            service, stopped at exit) and LAZYROOT_METRICS at a free port
#   log MSG / fail MSG       a message on stderr; fail also exits 1
#   check CMD...             run CMD, print "ok - CMD" or "FAIL - CMD"; the test fails at exit
#   check_not CMD...         the same, but CMD must fail
#   check_status N CMD...    the same, but CMD must exit with status N
#   compare_trees [treecmp options] A B
#                            treecmp A B; prints the differences (the first 50) on stderr
#   cmp_files SRC DST        cmp every regular file under SRC with its namesake under DST, 8
#                            at once; prints the differences and failed reads (the first 20)
#                            on stderr. Readers at once keep a store's transfers in flight, so
#                            that retry backoffs and stalls of a faulty store overlap instead
#                            of adding up behind one reader
#   free_port                a loopback TCP port nothing listens on, for a server to bind
#   node_pid [KEY]           the pid of the process serving the test's node, or KEY of
#                            `node status --json` (holder_pid, takeovers, ...)
#   lazyroot_full            the full program the binary under test execs when it is the static
#                            front (tools/main.c), or nothing
#   copy_lazyroot DIR        copy the binary under test to DIR/lazyroot, with the full program
#                            its static front execs (DIR/libexec/lazyroot) where it has one;
#                            prints the path of the program that serves the node
#   make_install B DESTDIR PREFIX
#                            `make install` of build directory B as it is (never rebuilt)
# and sets $REPO (the checkout), $LAZYROOT (the binary under test, from $LAZYROOT_BIN) and
# $TREECMP. A failed check does not stop the script, so that one run shows every failure; the
# exit trap turns any failed check into exit status 1.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export LAZYROOT=${LAZYROOT_BIN:-$REPO/build/lazyroot}
TREECMP=${LAZYROOT_BUILD:-$REPO/build}/tests/treecmp
TEST_NAME=$(basename "$0" .sh)
_cleanups=()
_checks_failed=0

log() {
	echo "$TEST_NAME: $*" >&2
}

fail() {
	echo "$TEST_NAME: FAIL: $*" >&2
	exit 1
}

need_root() {
	if [ "$(id -u)" != 0 ]; then
		log "needs root; skipping"
		exit 77
	fi
}

need_cmd() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null || { log "$c is missing (scripts/install-deps test); skipping"; exit 77; }
	done
}

# Below the kernel's ephemeral range, so that no connection's local port can hold it; a server
# that still finds it taken (by another listener) must try again with another.
free_port() {
	local low p
	read -r low _ </proc/sys/net/ipv4/ip_local_port_range
	[ "$low" -gt 12000 ] || low=32768
	while :; do
		p=$((10000 + RANDOM % (low - 10000)))
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
	done
}

cleanup_add() {
	_cleanups+=("$(printf '%q ' "$@")")
}

_run_cleanups() {
	local rc=$? i
	set +e
	for ((i = ${#_cleanups[@]} - 1; i >= 0; i--)); do
		eval "${_cleanups[i]}"
	done
	if [ "$rc" = 0 ] && [ "$_checks_failed" -gt 0 ]; then
		log "$_checks_failed check(s) failed"
		rc=1
	fi
	exit "$rc"
}
trap _run_cleanups EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The test's own node service (started by its first mount or run): its socket under $WORK, so
# that tests stay apart; stopped at exit, which unmounts what it serves.
_node_stop() {
	[ -S "$1" ] || return 0
	timeout 150 "$LAZYROOT" node stop --socket "$1" >/dev/null 2>&1 || true
}

node_pid() {
	timeout 60 "$LAZYROOT" node status --json |
		python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "${1:-pid}"
}

workdir() {
	WORK=$(mktemp -d "${TMPDIR:-/tmp}/lazyroot-$TEST_NAME.XXXXXX")
	# --one-file-system: a mount left inside by a failed test is not descended into.
	cleanup_add rm -rf --one-file-system "$WORK"
	export LAZYROOT_SOCKET=$WORK/node.sock
	cleanup_add _node_stop "$WORK/node.sock"
	# /metrics on a port of the test's own: on the default one, the first node of tests that
	# run at once would serve it and every other would log that it cannot
	LAZYROOT_METRICS=127.0.0.1:$(free_port)
	export LAZYROOT_METRICS
}

_check_result() {
	local ok=$1; shift
	if [ "$ok" = 1 ]; then
		echo "ok - $*" >&2
	else
		echo "FAIL - $*" >&2
		_checks_failed=$((_checks_failed + 1))
	fi
}

check() {
	local ok=0
	"$@" && ok=1
	_check_result "$ok" "$*"
}

check_not() {
	local ok=1
	"$@" && ok=0
	_check_result "$ok" "! $*"
}

check_status() {
	local want=$1 got=0; shift
	"$@" || got=$?
	if [ "$got" = "$want" ]; then
		_check_result 1 "$* (exit $want)"
	else
		_check_result 0 "$* (exit $got, want $want)"
	fi
}

compare_trees() {
	local out rc=0
	[ -x "$TREECMP" ] || fail "$TREECMP is missing: make build/tests/treecmp"
	out=$("$TREECMP" "$@") || rc=$?
	if [ -n "$out" ]; then
		head -n 50 <<<"$out" | sed 's/^/  treecmp: /' >&2
		[ "$(wc -l <<<"$out")" -le 50 ] || echo "  treecmp: ... $(wc -l <<<"$out") differences in all" >&2
	fi
	return "$rc"
}

cmp_files() {
	local out
	# one cmp a file: a batch of files would be read one after another by one reader
	out=$(cd "$1" && find . -type f -print0 | xargs -0 -P 8 -I{} cmp -- {} "$2/{}" 2>&1) || true
	[ -z "$out" ] && return 0
	head -n 20 <<<"$out" | sed 's/^/  cmp_files: /' >&2
	return 1
}

# The full program beside $LAZYROOT when it is the static front (tools/main.c), else nothing.
lazyroot_full() {
	local f
	f=$(dirname "$LAZYROOT")/libexec/lazyroot
	[ -x "$f" ] && echo "$f" || true
}

copy_lazyroot() {
	local full
	full=$(lazyroot_full)
	mkdir -p "$1"
	cp "$LAZYROOT" "$1/lazyroot"
	if [ -n "$full" ]; then
		mkdir -p "$1/libexec"
		cp "$full" "$1/libexec/lazyroot"
		echo "$1/libexec/lazyroot"
	else
		echo "$1/lazyroot"
	fi
}

make_install() {
	local front=0
	[ -x "$1/libexec/lazyroot" ] && front=1
	make --no-print-directory -s -C "$REPO" -o "$1/lazyroot" -o "$1/libexec/lazyroot" install \
		BUILD="$1" FRONT=$front DESTDIR="$2" PREFIX="$3"
}
