# shellcheck shell=bash
# Helpers for the network allowlist and stage tests; source after sandbox.sh:
#
#   serve VAR ADDR         start a TCP server on the host at ADDR (port chosen by the kernel) that
#                          answers every connection; sets VAR to its port; stopped at exit
#   sb_start TAG [RUN OPTIONS] -- CMD...
#                          start a sandbox in the background with its stdin on fd 8 and its stdout
#                          on fd 7; returns once CMD printed "ready"; $SB_PID is the launcher,
#                          $SB_LAST the sandbox's name
#   sb_ask ITEM            send one line to the sandbox and wait for its "done"
#   sb_stop                close the sandbox's stdin and wait for the launcher; sets $SB_RC
#   bpf_progs NAME         ids of the BPF programs attached to sandbox NAME's cgroup2 directory
#   no_bpf_left IDS...     none of these BPF programs exists any more (so neither do their links)
need_cmd bpftool

serve() {
	local var=$1 addr=$2 fifo
	fifo=$(mktemp -u "$WORK/ready.XXXXXX")
	mkfifo "$fifo"
	python3 - "$fifo" "$addr" <<'PY' &
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[2], 0))
s.listen(64)
with open(sys.argv[1], "w") as f:
    f.write("%d\n" % s.getsockname()[1])
while True:
    c, _ = s.accept()
    c.close()
PY
	cleanup_add kill $!
	read -r "${var?}" <"$fifo"
}

sb_start() {
	local tag=$1 line; shift
	mkfifo "$WORK/in.$tag" "$WORK/out.$tag"
	SB_EXEC=1 sb_run "$@" <"$WORK/in.$tag" >"$WORK/out.$tag" &
	SB_PID=$!
	# sb_run counted in the background subshell: count here too.
	_sb_count=$((_sb_count + 1))
	SB_LAST=$SB_NAME-$_sb_count
	exec 8>"$WORK/in.$tag" 7<"$WORK/out.$tag"
	cleanup_add _sb_kill "$SB_PID"
	read -r line <&7 || line=
	[ "$line" = ready ] || fail "sandbox $tag did not start: '$line'"
}

_sb_kill() {
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true   # its pooled slots are free again once it is gone
}

sb_ask() {
	local line
	echo "$1" >&8
	while read -r line <&7; do
		[ "$line" = done ] && return 0
		echo "$line" >&2
		[[ $line == FAIL* ]] && _checks_failed=$((_checks_failed + 1))
	done
	fail "sandbox ended before answering '$1'"
}

sb_stop() {
	local line
	exec 8>&-
	while read -r line <&7; do echo "$line" >&2; done
	exec 7<&-
	SB_RC=0
	wait "$SB_PID" || SB_RC=$?
}

bpf_progs() {
	local cg
	cg=$(find /sys/fs/cgroup/unified -maxdepth 8 -type d -name "$1" -print -quit 2>/dev/null)
	[ -n "$cg" ] || return 1
	bpftool -j cgroup show "$cg" | python3 -c 'import json, sys; print(" ".join(str(p["id"]) for p in json.load(sys.stdin)))'
}

no_bpf_left() {
	local id
	for id in "$@"; do
		if bpftool prog show id "$id" >/dev/null 2>&1; then
			log "left behind: BPF program $id"
			return 1
		fi
	done
}
