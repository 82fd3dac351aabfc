#!/bin/bash
# Real workloads across takeovers: python3, gcc and git, each in its own sandbox on the Debian
# image, loop while the node's worker is killed (kill -9) three times and its page cache
# dropped, so that their opens, lookups and reads reach the new worker.  Every sandbox exits 0
# and printed what its workload computes.
# tests/run: alone (it drops the whole machine's page cache)
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
need_cmd fusermount3
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir
. "$(dirname "$0")/../lib/node.sh"
ROUNDS=${NODE_ROUNDS:-6}

NODE_IMAGE=deb:1
node_image "$NODE_IMAGE"
check_status 0 nrun "$NODE_IMAGE" -- /bin/true

py='for i in $(seq '$ROUNDS'); do
	python3 -c "import json, email.parser, http.client, sqlite3, decimal; print(json.dumps({\"v\": sum(range(10))}))" || exit 1
done'
cc='cd /tmp && for i in $(seq '$ROUNDS'); do
	printf "#include <stdio.h>\nint main(void) { printf(\"%%d\\\\n\", 6 * 7); return 0; }\n" >h.c
	gcc -O2 -o h h.c && ./h || exit 1
done'
git='cd /tmp && for i in $(seq '$ROUNDS'); do
	rm -rf r && git init -q r && cd r && echo "$i" >f && git add f &&
		git -c user.name=t -c user.email=t@t commit -qm "round $i" && git log --oneline | wc -l &&
		cd .. || exit 1
done'
pids=()
for w in py cc git; do
	_sb_count=$((_sb_count + 1))
	timeout 600 "$LAZYROOT" run --name "$SB_NAME-$w" --set "uid_base=$SB_UID_BASE" \
		"$NODE_IMAGE" -- sh -c "${!w}" >"$WORK/$w.out" 2>"$WORK/$w.err" &
	pids+=($!)
done
pid=$(node_pid)
for k in 1 2 3; do
	sleep "$(python3 -c 'import random; print(random.uniform(0.3, 1.5))')"
	echo 3 >/proc/sys/vm/drop_caches
	kill -9 "$pid"
	pid=$(wait_worker "$pid") || { check false "a worker after kill $k"; break; }
done
for i in 0 1 2; do
	st=0
	wait "${pids[$i]}" || st=$?
	check test "$st" = 0
done
for w in py cc git; do
	[ -s "$WORK/$w.err" ] && { log "$w said:"; head -5 "$WORK/$w.err" >&2; }
done
check test "$(grep -c '^{"v": 45}$' "$WORK/py.out")" = "$ROUNDS"
check test "$(grep -c '^42$' "$WORK/cc.out")" = "$ROUNDS"
check test "$(tail -1 "$WORK/git.out")" = 1
check test "$(wc -l <"$WORK/git.out")" = "$ROUNDS"
check test "$(node_pid takeovers)" -ge 3
check sb_no_leftovers
