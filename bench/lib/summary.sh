# bench/lib/summary.sh — the machine-readable summary a benchmark run leaves for bench/report.
#
# A bench/*/run sources this file and, with BENCH_SUMMARY=FILE in its environment, writes FILE
# as JSON lines (without BENCH_SUMMARY nothing is written and every function returns at once):
#
#   line 1   {"bench":NAME,"title":TEXT,"date":"YYYY-MM-DD","commit":HASH,"dirty":BOOL,
#             "command":TEXT,"smoke":BOOL,"cores":N,"load":TEXT,"source":"run"}
#   then     {"table":TEXT,"measure":TEXT,"unit":TEXT,"lazyroot":NUM,"peer":TEXT,
#             "peer_value":NUM,"ratio":"lazyroot/peer"|"peer/lazyroot"|"","goal":TEXT,
#             "headline":BOOL}
#
# "ratio" says which way the quotient is taken, so that the goal reads as the issue stated it
# ("cold start within 1.5x of native" is lazyroot/peer <= 1.5; "4x casync's throughput", taken on
# seconds, is peer/lazyroot >= 4). "goal" is "" (none), ">= X", "<= X", "> X" or "< X", applied to
# the ratio, or to the lazyroot value when the row has no peer. A headline row also goes into the
# short table `bench/report --brief` prints for the top-level README. bench/report renders the
# files of bench/results/ into bench/README.md.
#
# The file is written under a temporary name and renamed by summary_end, so that a run that
# fails half-way leaves the previous summary in place rather than half of a new one.

_summary_str() {  # TEXT -> a JSON string
	local s=${1//\\/\\\\}
	s=${s//\"/\\\"}
	s=${s//$'\t'/ }
	s=${s//$'\n'/ }
	printf '"%s"' "$s"
}
_summary_num() {  # TEXT -> a JSON number, or null when TEXT is not one (bc's ".5" is taken)
	local v=${1/#./0.}
	v=${v/#-./-0.}
	if [[ $v =~ ^-?[0-9]+(\.[0-9]+)?$ ]]; then printf '%s' "$v"; else printf 'null'; fi
}

# summary_begin NAME TITLE SMOKE(0|1) COMMAND...
summary_begin() {
	[ -n "${BENCH_SUMMARY:-}" ] || return 0
	local name=$1 title=$2 smoke=$3 commit dirty=false
	shift 3
	commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
	[ -z "$(git status --porcelain --untracked-files=no -- . 2>/dev/null)" ] || dirty=true
	mkdir -p "$(dirname "$BENCH_SUMMARY")"
	{
		printf '{"bench":%s,"title":%s,"date":"%s","commit":"%s","dirty":%s,"command":%s,' \
			"$(_summary_str "$name")" "$(_summary_str "$title")" "$(date -u +%F)" "$commit" "$dirty" \
			"$(_summary_str "$*")"
		printf '"smoke":%s,"cores":%s,"load":%s,"source":"run"}\n' \
			"$([ "$smoke" = 1 ] && echo true || echo false)" "$(nproc)" \
			"$(_summary_str "$(cut -d' ' -f1-3 /proc/loadavg) at the start")"
	} >"$BENCH_SUMMARY.tmp"
}

# summary_row TABLE MEASURE UNIT LAZYROOT PEER PEER_VALUE RATIO GOAL [headline]
summary_row() {
	[ -n "${BENCH_SUMMARY:-}" ] || return 0
	printf '{"table":%s,"measure":%s,"unit":%s,"lazyroot":%s,"peer":%s,"peer_value":%s,"ratio":%s,"goal":%s,"headline":%s}\n' \
		"$(_summary_str "$1")" "$(_summary_str "$2")" "$(_summary_str "$3")" "$(_summary_num "$4")" \
		"$(_summary_str "$5")" "$(_summary_num "$6")" "$(_summary_str "$7")" "$(_summary_str "$8")" \
		"$([ "${9:-}" = headline ] && echo true || echo false)" >>"$BENCH_SUMMARY.tmp"
}

summary_end() {
	[ -n "${BENCH_SUMMARY:-}" ] || return 0
	mv "$BENCH_SUMMARY.tmp" "$BENCH_SUMMARY"
}
