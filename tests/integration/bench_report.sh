#!/bin/bash
# bench/README.md is generated: rendering bench/results/*.jsonl with bench/report gives it byte
# for byte, and the table in README.md between its markers is `bench/report --brief`, so a hand
# edit of either (or a summary committed without them) fails here.
# Also: a summary written through bench/lib/summary.sh renders, with its ratio and goal verdicts
# computed from its figures; a --smoke run's summary is refused unless --smoke-ok; bad input
# gets a one-line error naming the file, and nothing is written.
. "$(dirname "$0")/../lib/common.sh"
need_cmd python3
workdir

check "$REPO/bench/report" -o "$WORK/README.md"
check cmp "$REPO/bench/README.md" "$WORK/README.md"
"$REPO/bench/report" --brief >"$WORK/brief"
sed -n '/^<!-- begin: bench\/report --brief -->$/,/^<!-- end: bench\/report --brief -->$/p' "$REPO/README.md" |
	sed '1d;$d' >"$WORK/readme-brief"
check test -s "$WORK/readme-brief"
check cmp "$WORK/brief" "$WORK/readme-brief"

# A summary as a benchmark writes it.
mkdir "$WORK/r"
cd "$REPO"
. bench/lib/summary.sh
export BENCH_SUMMARY=$WORK/r/t.jsonl
summary_begin t "a test" 0 bench/t/run --x
summary_row "tab | one" "time" s 2.0 "peer a" 8.0 peer/lazyroot ">=4" headline
summary_row "tab | one" "bytes" MB .5 "peer a" 1.0 lazyroot/peer "<=0.4"
summary_row "tab | one" "mount" ms 150 "" "" "" "<200"
check test -e "$BENCH_SUMMARY.tmp"
check_not test -e "$BENCH_SUMMARY"
summary_end
unset BENCH_SUMMARY
check test -e "$WORK/r/t.jsonl"
check_not test -e "$WORK/r/t.jsonl.tmp"
out=$("$REPO/bench/report" --results "$WORK/r" -o -)
log "$out"
check grep -qF '| time | 2 s | peer a | 8 s | 4.00× (peer ÷ lazyroot) | ≥ 4× | met |' <<<"$out"
check grep -qF '| bytes | 0.5 MB | peer a | 1 MB | 0.50× (lazyroot ÷ peer) | ≤ 0.4× | **not met** |' <<<"$out"
check grep -qF '| mount | 150 ms | — | — | — | < 200 ms | met |' <<<"$out"
check grep -qF '**tab | one**' <<<"$out"
check grep -qF '`bench/t/run --x`' <<<"$out"
brief=$("$REPO/bench/report" --results "$WORK/r" --brief)
check test "$(grep -c '^| bench/t |' <<<"$brief")" = 1

# A smoke run's summary is refused without --smoke-ok, and marked with it.
sed -i '1s/"smoke":false/"smoke":true/' "$WORK/r/t.jsonl"
check_not "$REPO/bench/report" --results "$WORK/r" -o "$WORK/smoke.md"
check_not test -e "$WORK/smoke.md"
check grep -qF 'SMOKE RUN' <<<"$("$REPO/bench/report" --results "$WORK/r" --smoke-ok -o -)"

# Bad input: one line naming the file, non-zero, nothing written.
printf '{"bench":"x"\n' >"$WORK/r/bad.jsonl"
err=$("$REPO/bench/report" --results "$WORK/r" --smoke-ok -o "$WORK/bad.md" 2>&1 >/dev/null) && check false
log "$err"
check test "$(wc -l <<<"$err")" = 1
check grep -qF "$WORK/r/bad.jsonl: line 1" <<<"$err"
check_not test -e "$WORK/bad.md"
