#!/bin/bash
# Print the path of a cached Debian 12 (bookworm) root filesystem tarball, building it once with
# mmdebstrap from the Debian mirror this machine's apt is configured with.
#
#   tests/lib/rootfs.sh          path of the tarball (built on first call)
#   tests/lib/rootfs.sh --dir    path of an extracted copy of it (made on first call; needs root)
#
# LAZYROOT_ROOTFS_EXTRA=pkg[,pkg] adds packages (a separate cache entry): the benchmarks use it
# for "the same rootfs plus one more package".
#
# The cache lives in ${LAZYROOT_FIXTURES:-<repo>/tests/.cache} and is keyed by the mmdebstrap
# arguments and the mirror list, so that changing either builds a new tarball. A flock makes
# parallel callers wait for one build instead of building twice. Progress goes to stderr; stdout
# carries only the path. Treat both results as read-only: every caller shares them.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cache=${LAZYROOT_FIXTURES:-$repo/tests/.cache}
# an absolute path out: callers hand it to programs that run elsewhere (crun's bundle)
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
suite=bookworm
include=python3,gcc,git,libc6-dev${LAZYROOT_ROOTFS_EXTRA:+,$LAZYROOT_ROOTFS_EXTRA}
want_dir=0

case "${1:-}" in
"") ;;
--dir) want_dir=1 ;;
-h|--help) sed -n '2,11s/^# \{0,1\}//p' "$0"; exit 0 ;;
*) echo "rootfs.sh: unknown argument '$1' (try --dir)" >&2; exit 2 ;;
esac

# One "deb URI SUITE COMPONENTS" line per configured bookworm source, from deb822 files and
# one-line lists alike. Only Debian's own suites are taken: other vendors' lists are not ours.
mirror_lines() {
	local f
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk -v suite="$suite" '
			function flush() {
				if (types ~ /(^| )deb( |$)/ && uris != "" && suites != "")
					for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++)
						if (s[j] == suite || s[j] ~ "^" suite "-")
							print "deb " u[i] " " s[j] " " comps
				types = uris = suites = comps = ""; enabled = 1
			}
			BEGIN { enabled = 1 }
			/^[ \t]*#/ { next }
			/^[ \t]*$/ { if (enabled) flush(); else types = uris = ""; enabled = 1; next }
			{
				key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^[ \t]+/, "")
				if (key == "types") types = $0
				else if (key == "uris") { uris = $0; nu = split($0, u, /[ \t]+/) }
				else if (key == "suites") { suites = $0; ns = split($0, s, /[ \t]+/) }
				else if (key == "components") comps = $0
				else if (key == "enabled" && tolower($0) == "no") enabled = 0
			}
			END { if (enabled) flush() }
		' "$f"
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		# deb [opts] URI SUITE COMPONENTS...
		sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" |
			awk -v suite="$suite" '$1 == "deb" && ($3 == suite || index($3, suite "-") == 1)'
	done
}

mirrors=$(mirror_lines | awk '!seen[$0]++')
if [ -z "$mirrors" ]; then
	echo "rootfs.sh: no Debian $suite source in /etc/apt/sources.list{,.d}; cannot build the rootfs" >&2
	exit 1
fi

# A fixed SOURCE_DATE_EPOCH makes mmdebstrap's output reproducible for a given mirror state.
export SOURCE_DATE_EPOCH=1700000000
key=$(printf '%s\n' "mmdebstrap --variant=minbase --include=$include $suite" "$mirrors" \
	"SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH" |
	sha256sum | cut -c1-12)
tarball=$cache/debian12-minbase-$key.tar
tree=$cache/debian12-minbase-$key.d

mkdir -p "$cache"
exec 9>"$cache/rootfs.lock"
flock 9

if [ ! -f "$tarball" ]; then
	command -v mmdebstrap >/dev/null ||
		{ echo "rootfs.sh: mmdebstrap is missing: run scripts/install-deps test" >&2; exit 1; }
	echo "rootfs.sh: building $tarball with mmdebstrap (one time)" >&2
	tmp=$cache/.tmp.$$.tar
	trap 'rm -f "$tmp"' EXIT
	start=$SECONDS
	mapfile -t mirror_args <<<"$mirrors"
	mmdebstrap --quiet --variant=minbase --include="$include" --format=tar \
		"$suite" "$tmp" "${mirror_args[@]}" >&2
	mv -f "$tmp" "$tarball"
	trap - EXIT
	echo "rootfs.sh: built in $((SECONDS - start)) s, $(du -h "$tarball" | cut -f1)" >&2
fi

if [ "$want_dir" = 1 ]; then
	if [ ! -f "$tree.complete" ]; then
		[ "$(id -u)" = 0 ] || { echo "rootfs.sh: --dir needs root (device nodes, owners)" >&2; exit 77; }
		echo "rootfs.sh: extracting to $tree" >&2
		tmpd=$tree.tmp.$$
		trap 'rm -rf "$tmpd"' EXIT
		rm -rf "$tree" "$tree.complete"
		mkdir "$tmpd"
		tar --xattrs --xattrs-include='*' --acls --numeric-owner -xpf "$tarball" -C "$tmpd"
		# The marker sits beside the tree, not in it, so that the tree is exactly the tarball.
		mv "$tmpd" "$tree"
		trap - EXIT
		touch "$tree.complete"
	fi
	echo "$tree"
else
	echo "$tarball"
fi
