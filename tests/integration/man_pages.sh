#!/bin/bash
# The man pages, the bash completion and `make install` against the binary's own help, so that
# the documentation cannot drift from the commands:
#   - every command `lazyroot --help` lists has a page man/lazyroot-CMD.1, and the completion
#     offers it;
#   - every option in `lazyroot CMD --help`, and in `lazyroot CMD SUB --help` for each
#     subcommand the help names, appears in that page (as roff source, `\-` read as `-`), and
#     every long one in the completion's list for that command;
#   - every option a page lists in its OPTIONS section is one the help names: a page documents
#     no option the binary lacks (a page whose command does not exist yet, such as a service
#     being built, is checked once the command is there);
#   - every page renders without a warning from groff, where groff is installed;
#   - `make install DESTDIR=... PREFIX=...` puts the binary, every page and the completion where
#     they belong (and the node's default settings file and systemd unit) and nothing outside
#     DESTDIR, and the
#     installed completion loads in bash and completes a command and an option.
. "$(dirname "$0")/../lib/common.sh"
workdir
MAN=$REPO/man
COMP=$REPO/completion/lazyroot.bash

# Options a help text names: long ones (--name, with --json[=FILE] read as --json) and short
# ones standing alone (-f, -h), one per line.
options_of() {
	grep -oE '(^|[][ ,|(])--?[a-zA-Z][a-zA-Z0-9-]*' | sed -E 's/^[][ ,|(]//' | grep -vE '^-[a-zA-Z][a-zA-Z0-9]+' |
		sort -u
}
# The options a help text lists as options (its lines that start with one), not those its prose
# mentions.
listed_options_of() { grep -E '^\s+-' | options_of; }
# A page's text with roff's \- read as -, and font changes dropped.
page_text() { sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' "$1"; }
# The options a page lists in its OPTIONS section: the first word of each line after .TP.
page_options() {
	page_text "$1" | awk '/^\.SH /{ in_opts = ($2 == "OPTIONS") } in_opts && prev == ".TP" { print } { prev = $0 }' |
		grep -oE '(^|[ ,"])--?[a-zA-Z][a-zA-Z0-9-]*' | sed -E 's/^[ ,"]//' | sort -u
}
# Subcommands a help names: "lazyroot CMD SUB" in its usage lines and the words under
# "subcommands:".
subcommands_of() {  # CMD, with the help on stdin
	awk -v cmd="$1" '
		/^[a-z]+:$/ { sect = $1; next }
		/^$/ { sect = "" }
		sect == "subcommands:" && $1 ~ /^[a-z]+$/ { print $1 }
		{ for (i = 1; i < NF; i++) if ($i == "lazyroot" && $(i + 1) == cmd && $(i + 2) ~ /^[a-z]+$/) print $(i + 2) }
	' | sort -u
}

helps=$("$LAZYROOT" --help)
mapfile -t commands < <(awk '/^commands:/ { on = 1; next } on && NF == 0 { on = 0 } on { print $1 }' <<<"$helps")
check test "${#commands[@]}" -ge 9
check test -f "$MAN/lazyroot.1"
top=$(bash -c '. "$1"; COMP_WORDS=(lazyroot ""); COMP_CWORD=1; _lazyroot; echo "${COMPREPLY[*]}"' _ "$COMP")

for cmd in "${commands[@]}"; do
	page=$MAN/lazyroot-$cmd.1
	check test -f "$page"
	[ -f "$page" ] || continue
	check grep -qE "lazyroot-$cmd|lazyroot\\\\-$cmd" "$MAN/lazyroot.1"
	check grep -qw -- "$cmd" <<<"$top"
	help=$("$LAZYROOT" "$cmd" --help)
	all=$help
	while read -r sub; do
		[ -n "$sub" ] || continue
		sh=$("$LAZYROOT" "$cmd" "$sub" --help) || { log "lazyroot $cmd $sub --help failed"; check false; continue; }
		all+=$'\n'"$sh"
		# the completion's list for CMD SUB holds each long option of SUB's help
		comp=$(bash -c '. "$1"; _lazyroot_opts "$2" "$3"' _ "$COMP" "$cmd" "$sub")
		while read -r o; do
			case $o in --*) check grep -qw -- "$o" <<<"$comp" ;; esac
		done < <(listed_options_of <<<"$sh")
	done < <(subcommands_of "$cmd" <<<"$help")
	comp=$(bash -c '. "$1"; _lazyroot_opts "$2" ""' _ "$COMP" "$cmd")
	text=$(page_text "$page")
	mapfile -t opts < <(options_of <<<"$all")
	check test "${#opts[@]}" -ge 1
	for o in "${opts[@]}"; do
		# a word of its own: --cache must not be satisfied by --cache-size alone
		check grep -qE -- "(^|[^a-zA-Z0-9-])$o([^a-zA-Z0-9-]|$)" <<<"$text"
	done
	while read -r o; do
		case $o in --*) check grep -qw -- "$o" <<<"$comp" ;; esac
	done < <(listed_options_of <<<"$help")
	while read -r o; do
		[ -n "$o" ] || continue
		check grep -qE -- "(^|[^a-zA-Z0-9-])$o([^a-zA-Z0-9-]|$)" <<<"$all"
	done < <(page_options "$page")
done

# Pages for commands the binary does not have yet are only rendered; say so.
for page in "$MAN"/lazyroot-*.1; do
	cmd=${page##*/lazyroot-}; cmd=${cmd%.1}
	printf '%s\n' "${commands[@]}" | grep -qx "$cmd" || log "man/lazyroot-$cmd.1: no such command yet; options not checked"
done

if command -v groff >/dev/null; then
	for page in "$MAN"/*.1; do
		check test -z "$(groff -man -ww -z "$page" 2>&1)"
	done
else
	log "groff missing: pages not rendered"
fi

# make install into a DESTDIR: the binary, every page and the completion, nothing outside it.
dest=$WORK/dest
[ ! -e /opt/lr ] || fail "/opt/lr exists: the install test needs a PREFIX nothing uses"
check make_install "$(dirname "$LAZYROOT")" "$dest" /opt/lr
check test -x "$dest/opt/lr/bin/lazyroot"
# a static front finds its full program where `make install` put it
full=0
if [ -n "$(lazyroot_full)" ]; then
	full=1
	check test -x "$dest/opt/lr/libexec/lazyroot/lazyroot"
	check grep -q '^  node ' <<<"$("$dest/opt/lr/bin/lazyroot" --help)"
fi
for page in "$MAN"/*.1; do
	check cmp "$page" "$dest/opt/lr/share/man/man1/${page##*/}"
done
check cmp "$COMP" "$dest/opt/lr/share/bash-completion/completions/lazyroot"
# the node service's systemd unit, naming the installed binary
unit=$dest/lib/systemd/system/lazyroot-node.service
check grep -qx "ExecStart=/opt/lr/bin/lazyroot node" "$unit"
check grep -qx "KillMode=mixed" "$unit"
# besides the node's default settings file (lazyroot-config(1)) and the unit, nothing else
check test "$(find "$dest" -type f ! -path "$dest/etc/lazyroot/node.conf" ! -path "$unit" | wc -l)" = $((1 + full + $(ls "$MAN"/*.1 | wc -l) + 1))
check_not test -e /opt/lr
if command -v man >/dev/null; then
	check grep -q 'lazyroot-run - run a command' <<<"$(MANPATH="$dest/opt/lr/share/man" MANWIDTH=100 man lazyroot-run 2>/dev/null | col -b)"
fi
# the installed completion, loaded as bash-completion would load it
out=$(bash -c '. "$1"
	COMP_WORDS=(lazyroot ru); COMP_CWORD=1; _lazyroot; echo "${COMPREPLY[*]}"
	COMP_WORDS=(lazyroot cache prefetch --deco); COMP_CWORD=3; _lazyroot; echo "${COMPREPLY[*]}"
	complete -p lazyroot' _ "$dest/opt/lr/share/bash-completion/completions/lazyroot")
check test "$(sed -n 1p <<<"$out")" = run
check test "$(sed -n 2p <<<"$out")" = --decode
check grep -q 'complete -F _lazyroot lazyroot' <<<"$out"
