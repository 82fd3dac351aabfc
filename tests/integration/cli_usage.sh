#!/bin/bash
# Usage errors, as lazyroot(1) says (EXIT STATUS): one line on stderr naming what is wrong and
# "(see 'lazyroot CMD --help')", nothing on stdout, exit status 2 (125 for `run`, whose other
# statuses are its command's), and never the whole help; --help prints the help on stdout and
# exits 0.  Every command `lazyroot --help` lists and every verb its help names is tried, so a
# command added later is held to it too:
#  1. an unknown option, an option without its value, an option given a value it does not take;
#  2. no command, no verb, an unknown command or verb; `run` without a command;
#  3. `node --socket` with a relative path is refused as `run` refuses it (the clients could
#     never reach a node listening there), and no node starts.
. "$(dirname "$0")/../lib/common.sh"
workdir
export LAZYROOT_STORE=dir:$WORK/store LAZYROOT_CACHE=$WORK/cache LAZYROOT_IMAGES=$WORK/images

# Verbs a help names: "lazyroot CMD VERB" in its usage lines, and the words under "subcommands:"
verbs_of() {  # CMD, with the help on stdin
	awk -v cmd="$1" '
		/^[a-z]+:$/ { sect = $1; next }
		/^$/ { sect = "" }
		sect == "subcommands:" && $1 ~ /^[a-z]+$/ { print $1 }
		{ for (i = 1; i < NF; i++) if ($i == "lazyroot" && $(i + 1) == cmd && $(i + 2) ~ /^[a-z]+$/) print $(i + 2) }
	' | sort -u
}

# one_line STATUS LINE ARGS...: lazyroot ARGS exits STATUS, prints nothing on stdout and
# exactly LINE on stderr
one_line() {
	local want=$1 line=$2 rc=0
	shift 2
	timeout 20 "$LAZYROOT" "$@" >"$WORK/out" 2>"$WORK/err" </dev/null || rc=$?
	if [ "$rc" = "$want" ] && [ ! -s "$WORK/out" ] && [ "$(wc -l <"$WORK/err")" = 1 ] &&
		[ "$(cat "$WORK/err")" = "$line" ]; then
		_check_result 1 "lazyroot $*: exit $want, one line"
	else
		_check_result 0 "lazyroot $*: exit $rc (want $want), stdout $(wc -c <"$WORK/out") bytes, stderr:"
		sed 's/^/    /' "$WORK/err" | head -5 >&2
		echo "    want: $line" >&2
	fi
}
# usage_error STATUS CMD WHAT ARGS...: one_line with "lazyroot: CMD: WHAT (see 'lazyroot CMD
# --help')" (CMD empty: the program itself)
usage_error() {
	local want=$1 cmd=$2 what=$3
	shift 3
	if [ -n "$cmd" ]; then
		one_line "$want" "lazyroot: $cmd: $what (see 'lazyroot $cmd --help')" "$@"
	else
		one_line "$want" "lazyroot: $what (see 'lazyroot --help')" "$@"
	fi
}

helps=$("$LAZYROOT" --help)
mapfile -t commands < <(awk '/^commands:/ { on = 1; next } on && NF == 0 { on = 0 } on { print $1 }' <<<"$helps")
check test "${#commands[@]}" -ge 10

# --- 1. every command and verb with a bad option
n=0
for cmd in "${commands[@]}"; do
	mapfile -t verbs < <("$LAZYROOT" "$cmd" --help | verbs_of "$cmd")
	status=2
	[ "$cmd" = run ] && status=125
	for v in "" "${verbs[@]}"; do
		c=$cmd${v:+ $v}
		# a command made of verbs has none to take an option before its verb
		if [ -z "$v" ] && [ "${#verbs[@]}" -gt 0 ] && [ "$cmd" != node ]; then
			usage_error "$status" "$cmd" "unknown option '--no-such-option'" "$cmd" --no-such-option
			continue
		fi
		# shellcheck disable=SC2086
		usage_error "$status" "$c" "unknown option '--no-such-option'" $c --no-such-option
		# shellcheck disable=SC2086
		usage_error "$status" "$c" "unknown option '-Z'" $c -Z
		# shellcheck disable=SC2086
		usage_error "$status" "$c" "option '--help' takes no value" $c --help=x
		# shellcheck disable=SC2086
		check_status 0 "$LAZYROOT" $c --help >/dev/null
		n=$((n + 1))
	done
done
check test "$n" -ge 25
usage_error 2 "image ls" "option '--store' wants a value" image ls --store
usage_error 2 "build" "option '--tag' wants a value" build "$WORK" --tag
usage_error 125 "run" "option '--memory' wants a value" run --rootfs / --memory
usage_error 2 "node status" "option '--socket' wants a value" node status --socket

# --- 2. no command, no verb, unknown ones, no arguments
usage_error 2 "" "no command given"
usage_error 2 "" "unknown command 'nope'" nope
usage_error 2 "" "unknown option '--nope'" --nope
usage_error 2 "image" "no verb given" image
usage_error 2 "image" "unknown verb 'nope'" image nope
usage_error 2 "profile" "no verb given" profile
usage_error 2 "store" "unknown verb 'nope'" store nope
usage_error 2 "cache" "no subcommand given" cache
usage_error 2 "cache" "unknown subcommand 'nope'" cache nope
usage_error 2 "node" "unknown verb 'nope'" node nope
usage_error 2 "image inspect" "want REF (given 0 arguments)" image inspect
usage_error 2 "mount" "want IMAGE and MOUNTPOINT" mount x:1
usage_error 2 "build" "no SOURCE given" build
usage_error 125 "run" "no command given" run
usage_error 125 "run" "no command given" run --rootfs /
usage_error 125 "run" "no command given to run in image 'x:1'" run x:1 --

# --- 3. a relative socket
cd "$WORK"
one_line 2 "lazyroot: --socket: 'rel.sock' is not an absolute path" node --socket rel.sock
check test ! -e "$WORK/rel.sock"
one_line 2 "lazyroot: --socket: 'rel.sock' is not an absolute path" node status --socket rel.sock
one_line 125 "lazyroot: --socket: 'rel.sock' is not an absolute path" run --socket rel.sock x:1 -- true
