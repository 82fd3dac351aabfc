#!/bin/bash
# The node's settings through the real binary (docs/settings.md): every config-file error is one
# line naming the file, the line and the key, whichever command reads the file, and the command
# does nothing; errors in variables and flags name them; precedence defaults < file < environment
# < flags; a store and cache named only in a config file are the ones used; `make install`
# installs a default node.conf that loads as the defaults and is never overwritten.
. "$(dirname "$0")/../lib/common.sh"

workdir
# the host's own settings must not leak in
unset LAZYROOT_CONFIG LAZYROOT_STORE LAZYROOT_CACHE LAZYROOT_IMAGES LAZYROOT_CACHE_NEAR_MS \
	LAZYROOT_HTTP_TRANSFERS
mkdir -p "$WORK/mnt"

# one_line_error STATUS WANT CMD...: CMD exits STATUS and its stderr is exactly the line WANT
one_line_error() {
	local want_rc=$1 want=$2 rc=0 err
	shift 2
	err=$("$@" 2>&1 >/dev/null) || rc=$?
	if [ "$rc" = "$want_rc" ] && [ "$err" = "$want" ]; then
		echo "ok - $* -> $want"
	else
		echo "FAIL - $*: exit $rc (want $want_rc), stderr:"
		printf '  %s\n' "$err"
		echo "  want: $want"
		_checks_failed=$((_checks_failed + 1))
	fi
}

# Each bad file: the line through every command that takes --config.
bad() {   # NAME TEXT WANT-AFTER-"FILE:"
	local f=$WORK/$1.conf want
	printf '%b' "$2" >"$f"
	want="lazyroot: $f:$3"
	one_line_error 2 "$want" "$LAZYROOT" mount some:tag "$WORK/mnt" --config "$f"
	one_line_error 1 "$want" "$LAZYROOT" config --config "$f"
	one_line_error 125 "$want" "$LAZYROOT" run --config "$f" --rootfs / -- true
	one_line_error 2 "$want" "$LAZYROOT" cache stats --config "$f"
	one_line_error 2 "$want" "$LAZYROOT" image ls --config "$f"
	one_line_error 2 "$want" "$LAZYROOT" umount "$WORK/mnt" --config "$f"
}
bad unknown '# node\nstore = dir:/srv/store\ncache_sise = 1G\n' \
	"3: cache_sise: unknown setting (docs/settings.md lists them)"
bad size 'cache_size = lots\n' "1: cache_size: 'lots' is not a size (e.g. 512M, 10G)"
bad syntax '\n\nreadahead 8\n' "3: readahead: want key = value"
bad twice 'readahead = 4\nimages = /run/x\nreadahead = 8\n' \
	"3: readahead: set again (first on line 1)"
bad bool 'cpu_latency = sometimes\n' "1: cpu_latency: 'sometimes': want on or off"
bad duration 'fetch_timeout = 2 days\n' \
	"1: fetch_timeout: '2 days': want a duration from 0ms to 86400000ms (a bare number is in s)"
bad metrics 'metrics = 9477\n' "1: metrics: '9477': want HOST:PORT or off"
bad relative 'socket = run/node.sock\n' "1: socket: 'run/node.sock' is not an absolute path"
bad secret 'AWS_SECRET_ACCESS_KEY = x\n' \
	"1: AWS_SECRET_ACCESS_KEY: unknown setting (docs/settings.md lists them)"
check test ! -e "$WORK/mnt/etc"   # nothing was mounted

# a file named must exist; $LAZYROOT_CONFIG too; the default one need not
one_line_error 1 "lazyroot: config file '$WORK/none.conf': No such file or directory" \
	"$LAZYROOT" config --config "$WORK/none.conf"
one_line_error 1 "lazyroot: config file '$WORK/none.conf': No such file or directory" \
	env LAZYROOT_CONFIG="$WORK/none.conf" "$LAZYROOT" config

# variables and flags name themselves
one_line_error 2 "lazyroot: LAZYROOT_CACHE_NEAR_MS: 'soon': want a duration (e.g. 5ms) or off" \
	env LAZYROOT_CACHE_NEAR_MS=soon "$LAZYROOT" cache stats
one_line_error 2 "lazyroot: --cache-size: 'lots' is not a size (e.g. 512M, 10G)" \
	"$LAZYROOT" mount some:tag "$WORK/mnt" --cache-size lots
one_line_error 2 "lazyroot: --fetch-timeout: '1d': want a duration from 0ms to 86400000ms (a bare number is in s)" \
	"$LAZYROOT" cache prefetch some:tag --fetch-timeout 1d

# precedence: defaults < file < environment (< flags, below)
printf 'cache = %s\nimages = %s\ncache_size = 3G\n' "$WORK/file-cache" "$WORK/file-images" \
	>"$WORK/prec.conf"
out=$("$LAZYROOT" config --config "$WORK/prec.conf")
check grep -qx "cache = $WORK/file-cache" <<<"$out"
check grep -qx "cache_size = 3G" <<<"$out"
check grep -qx "store = dir:/var/lib/lazyroot/store" <<<"$out"
out=$(LAZYROOT_CACHE=$WORK/env-cache LAZYROOT_CONFIG=$WORK/prec.conf "$LAZYROOT" config)
check grep -qx "cache = $WORK/env-cache" <<<"$out"
check grep -qx "images = $WORK/file-images" <<<"$out"
check grep -qx "# settings from $WORK/prec.conf, the environment and the defaults" <<<"$out"

# a store and a cache named only in the file are the ones every command uses; a flag wins
"$LAZYROOT" build "$REPO/image" --store "dir:$WORK/store" --tag conf:1 --no-progress >/dev/null
printf 'store = dir:%s\ncache = %s\n' "$WORK/store" "$WORK/cache" >"$WORK/node.conf"
check grep -q '^conf:1 ' <("$LAZYROOT" image ls --config "$WORK/node.conf")
check_not grep -q '^conf:1 ' <("$LAZYROOT" image ls --config "$WORK/node.conf" --store "dir:$WORK/nostore")
check grep -q '^conf:1 ' <(LAZYROOT_CONFIG=$WORK/node.conf "$LAZYROOT" image ls)
check "$LAZYROOT" cache prefetch conf:1 --config "$WORK/node.conf" --no-progress
check test -d "$WORK/cache/chunks"
if [ "$(id -u)" = 0 ] && [ -e /dev/fuse ]; then
	cleanup_add sh -c "! mountpoint -q '$WORK/mnt' || umount -l '$WORK/mnt'"
	check "$LAZYROOT" mount conf:1 "$WORK/mnt" --config "$WORK/node.conf"
	check cmp "$REPO/image/FORMAT.md" "$WORK/mnt/FORMAT.md"
	check "$LAZYROOT" umount "$WORK/mnt" --config "$WORK/node.conf"
fi

# make install: a default node.conf, every key commented out, loading as the defaults; an
# existing one is kept
if command -v make >/dev/null; then
	B=${LAZYROOT_BUILD:-$REPO/build}
	make_install "$B" "$WORK/dest" /usr >/dev/null
	conf=$WORK/dest/etc/lazyroot/node.conf
	check test -s "$conf"
	check_not grep -q '^[a-z]' "$conf"
	check diff <("$LAZYROOT" config --config "$conf" | tail -n +2) \
		<("$LAZYROOT" config --config /dev/null | tail -n +2)
	# uncommented, it is the defaults too, key for key
	sed 's/^# \([a-z_0-9]* =\)/\1/' "$conf" >"$WORK/uncommented.conf"
	check diff <("$LAZYROOT" config --config "$WORK/uncommented.conf" | tail -n +2) \
		<("$LAZYROOT" config --config /dev/null | tail -n +2)
	echo 'cache_size = 1G' >"$conf"
	make_install "$B" "$WORK/dest" /usr >/dev/null
	check test "$(cat "$conf")" = 'cache_size = 1G'
fi
