#!/bin/bash
# A store URL that names no store is an error, never a new, empty store: every
# command that reads a store refuses a missing one with one line naming it and
# creates nothing; an unknown scheme and a relative path are refused; only
# `build` and `image copy`'s target make a store, at an absolute path.
. "$(dirname "$0")/../lib/common.sh"
workdir
cd "$WORK"
mkdir -p src/etc
echo hello >src/etc/hello

# expect_refused WORD CMD...: fails, one line on stderr containing WORD, and
# nothing appears in $WORK but what was there
expect_refused() {
	local word=$1 err rc=0 before after
	shift
	before=$(find "$WORK" | sort | md5sum)
	err=$("$@" 2>&1 >/dev/null) || rc=$?
	after=$(find "$WORK" | sort | md5sum)
	log "$*: $err"
	check test "$rc" -ne 0
	check test "$(wc -l <<<"$err")" = 1
	check grep -qF -- "$word" <<<"$err"
	check test "$before" = "$after"
}

for url in "dir:$WORK/typo" "$WORK/typo"; do
	expect_refused "$url': no such store" "$LAZYROOT" image ls --store "$url"
	expect_refused "$url': no such store" "$LAZYROOT" image ls --store "$url" --json
	expect_refused "$url': no such store" "$LAZYROOT" image inspect x:1 --store "$url"
	expect_refused "$url': no such store" "$LAZYROOT" store verify --store "$url"
	expect_refused "$url': no such store" "$LAZYROOT" store gc --grace 0 --store "$url"
	expect_refused "$url': no such store" "$LAZYROOT" image rm x:1 --store "$url"
	expect_refused "$url': no such store" "$LAZYROOT" image extract x:1 "$WORK/out" \
		--store "$url"
done
for url in dri:/x dir:relative relative ./relative; do
	for cmd in "image ls" "store verify" "store gc --grace 0"; do
		# shellcheck disable=SC2086
		expect_refused "store '$url'" "$LAZYROOT" $cmd --store "$url"
	done
	expect_refused "store '$url'" "$LAZYROOT" build src --store "$url" --tag t:1 --no-progress
	check_not test -e dri:
done
expect_refused "unsupported URL scheme" "$LAZYROOT" image ls --store dri:/x
expect_refused "not an absolute path" "$LAZYROOT" image ls --store dir:relative
# the environment's store is checked as the flag's is
expect_refused "store '$WORK/typo'" env LAZYROOT_STORE="$WORK/typo" "$LAZYROOT" image ls

# build makes the store it publishes into, at an absolute path; then others read it
check "$LAZYROOT" build src --store "dir:$WORK/a/store" --tag t:1 --no-progress
check test -e "$WORK/a/store/tags/t:1"
check test "$("$LAZYROOT" image ls --store "dir:$WORK/a/store" | wc -l)" -ge 1
check "$LAZYROOT" store verify --store "dir:$WORK/a/store"
# image copy makes its target, never its source
expect_refused "$WORK/nosrc': no such store" "$LAZYROOT" image copy t:1 --from "dir:$WORK/nosrc" \
	--to "dir:$WORK/b"
check "$LAZYROOT" image copy t:1 --from "dir:$WORK/a/store" --to "dir:$WORK/b" --json
check test -e "$WORK/b/tags/t:1"

# A remote store that is not there fails in seconds, saying what happened: a refused
# connection is retried briefly (not for the 30 s fetch timeout), and a name that does not
# resolve is said as such.  remote_fails WORD URL
remote_fails() {
	local err rc=0 t0 ms
	t0=$(date +%s%N)
	err=$("$LAZYROOT" image ls --store "$2" 2>&1 >/dev/null) || rc=$?
	ms=$((($(date +%s%N) - t0) / 1000000))
	log "$2 (${ms} ms): $err"
	check test "$rc" -ne 0
	check test "$(wc -l <<<"$err")" = 1
	check grep -qF -- "$1" <<<"$err"
	check test "$ms" -lt 8000
}
remote_fails "Connection refused" "http://127.0.0.1:$(free_port)/store"
remote_fails "cannot resolve host name" "http://lazyroot-no-such-host.invalid/store"
# S3 with no keys anywhere says, once, that its requests go unsigned
err=$(HOME=$WORK AWS_ACCESS_KEY_ID='' AWS_SECRET_ACCESS_KEY='' "$LAZYROOT" image ls \
	--store "s3+http://127.0.0.1:$(free_port)/bucket" 2>&1 >/dev/null) || true
log "s3 unsigned: $err"
check test "$(grep -c 'sending unsigned requests' <<<"$err")" = 1
