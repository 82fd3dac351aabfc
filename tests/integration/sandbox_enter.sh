#!/bin/bash
# An exec into a running sandbox (sandbox_enter, driven by tests/progs/sbenter) gets the
# confinement of the sandbox's own command, compared item by item:
#   - seen from the host: every namespace (/proc/PID/ns/*), ids, capabilities, no_new_privs,
#     seccomp (/proc/PID/status), rlimits (/proc/PID/limits), v1 cgroups equal and the cgroup2
#     directory at or beneath the command's, the same root;
#   - seen from inside (tests/lib/probe.py): the same, plus a path the policy hides, a port
#     Landlock refuses (tcp_connect), a port the cgroup BPF allowlist refuses and the one it
#     allows; and after a stage switch, a new exec is refused what the stage drops.
# Then the attacks of tests/sandbox run through an exec as they do through `run`, an exec's cwd
# cannot lead out of the sandbox's root (/proc/self/fd/N of a host descriptor, ../.., a symlink
# out), and bad requests get one clear error. Nothing is left behind.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
. "$(dirname "$0")/../lib/netsb.sh"
workdir
SBENTER=${LAZYROOT_BUILD:-$REPO/build}/tests/progs/sbenter
[ -x "$SBENTER" ] || fail "$SBENTER is missing: make tests-build"

serve allowed 0.0.0.0
serve other 0.0.0.0
refused=$(free_port)
mkdir "$WORK/probe"
cp "$REPO/tests/lib/probe.py" "$WORK/probe/"
cat >"$WORK/policy" <<EOP
user = 1000:1000
nofile = 777
hide = /etc/hostname
tcp_connect = $allowed,$other
bind = $WORK/probe:/probe
stage.open.allow = host:$allowed
stage.closed.allow =
stage.closed.hide = /etc/issue
EOP
probe=(python3 /probe/probe.py "$allowed" "$other" "$refused" --
	/etc/hostname /etc/passwd /etc/issue)

# The sandbox's command answers each line on its stdin with the probe's report and "done".
sb_start enter --policy "$WORK/policy" -- \
	sh -c 'echo ready; while read -r x; do "$@"; echo done; done' sh "${probe[@]}"
name=$SB_LAST
enter=("$SBENTER" --policy "$WORK/policy" --set "uid_base=$SB_UID_BASE"
	--set "bind=$ATTACK_DIR:/lr")
init=$(sed -n 's/^init //p' "$SB_RECORDS/$name")
cmd=$(cat "/proc/$init/task/$init/children")
cmd=${cmd%% *}
check test -n "$cmd"

ask_probe() {
	local line
	echo probe >&8
	while IFS= read -r line <&7; do
		[ "$line" = done ] && return 0
		echo "$line"
	done
}

# What the host sees of pid's confinement; its cgroup2 path apart, on the last line.
host_view() {
	local pid=$1 f
	for f in /proc/"$pid"/ns/*; do echo "ns ${f##*/} $(readlink "$f")"; done
	grep -E '^(Uid|Gid|Groups|Cap[A-Za-z]+|NoNewPrivs|Seccomp|Seccomp_filters):' "/proc/$pid/status"
	cat "/proc/$pid/limits"
	grep -v '^0::' "/proc/$pid/cgroup"
	echo "root $(stat -L -c %d:%i "/proc/$pid/root")"
	sed -n 's/^0:://p' "/proc/$pid/cgroup"
}

# --- from the host: an exec's process against the command's
mkfifo "$WORK/pid"
"${enter[@]}" --pid-file "$WORK/pid" "$name" -- sleep 600 &
sbenter_pid=$!
cleanup_add kill "$sbenter_pid"
read -r exec_pid <"$WORK/pid"
host_view "$cmd" >"$WORK/host.cmd"
host_view "$exec_pid" >"$WORK/host.exec"
check diff <(head -n -1 "$WORK/host.cmd") <(head -n -1 "$WORK/host.exec")
cmd_v2=$(tail -n 1 "$WORK/host.cmd")
exec_v2=$(tail -n 1 "$WORK/host.exec")
check test "${exec_v2#"$cmd_v2"/}" != "$exec_v2"
check grep -q 'NoNewPrivs:.1' "$WORK/host.exec"
check grep -q 'Seccomp:.2' "$WORK/host.exec"
check grep -q "Max open files *777 *777" "$WORK/host.exec"
check grep -qE "^Uid:.$((SB_UID_BASE + 1000))\b" "$WORK/host.exec"
kill "$exec_pid"
check_status 143 wait "$sbenter_pid"

# --- from inside
ask_probe >"$WORK/in.cmd"
check_status 0 "${enter[@]}" "$name" -- "${probe[@]}" >"$WORK/in.exec"
check diff "$WORK/in.cmd" "$WORK/in.exec"
check grep -qx "connect $allowed ok" "$WORK/in.exec"
check grep -qx "connect $other EPERM" "$WORK/in.exec"
check grep -qx "connect $refused EACCES" "$WORK/in.exec"
check grep -qx "read /etc/hostname EACCES" "$WORK/in.exec"
check grep -qx "read /etc/passwd read" "$WORK/in.exec"
check grep -qx "read /etc/issue read" "$WORK/in.exec"
check grep -q "^status Uid 1000 1000 1000 1000" "$WORK/in.exec"

# --- the attacks, through an exec as through `run` (both at the starting stage)
attacks=("syscalls" "allowlist" "ioctls" "write-proc-sys" "netns" "sockets all"
	"host-files /etc/shadow $REPO/Makefile" "pagecache /usr/bin/python3.11"
	"masks /proc/cmdline /proc/kallsyms /proc/kcore /proc/kmsg /proc/keys /proc/modules
		/proc/interrupts /proc/sched_debug /proc/sysrq-trigger /proc/acpi /proc/fs /proc/pressure"
	"reach ok:gw:$allowed gw:$other fail:127.0.0.1:$allowed noread:/etc/hostname read:/etc/passwd")
for a in "${attacks[@]}"; do
	# shellcheck disable=SC2086
	check "${enter[@]}" "$name" -- /lr/attack "$HOST_PIDNS" $a
	# shellcheck disable=SC2086
	check attack --policy "$WORK/policy" -- $a
done

# A stage switch holds for the execs after it: the allowed port refused, /etc/issue hidden.
check test "$("$LAZYROOT" policy "$name" --stage closed)" = closed
check_status 0 "${enter[@]}" "$name" -- "${probe[@]}" >"$WORK/in.closed"
check grep -qx "connect $allowed EPERM" "$WORK/in.closed"
check grep -qx "read /etc/issue EACCES" "$WORK/in.closed"
ask_probe >"$WORK/in.cmd.closed"
check diff "$WORK/in.cmd.closed" "$WORK/in.closed"
# An exec's Landlock domain is its own: the command (pid 2) is out of its reach, as the host is.
check "${enter[@]}" "$name" -- /lr/attack "$HOST_PIDNS" reach "gw:$allowed" noread:/etc/issue \
	kill:2 abstract:nosuch

# --- the request's overrides, and its cwd kept inside the sandbox's root
got=$("${enter[@]}" --user 0 --env FOO=bar --cwd /tmp "$name" -- \
	sh -c 'echo $(id -u) $FOO $HOME $(pwd)')
check test "$got" = "0 bar /root /tmp"
check test "$("${enter[@]}" --cwd /../../.. "$name" -- pwd)" = /
check_status 0 "${enter[@]}" --user 0 "$name" -- ln -s /../../../../.. /tmp/out
root_ino=$(stat -L -c %i "/proc/$cmd/root")
got=$("${enter[@]}" --cwd /tmp/out "$name" -- sh -c 'stat -c %i .; stat -c %i /' | tr '\n' ' ')
check test "$got" = "$root_ino $root_ino "
check_status 0 "${enter[@]}" --user 0 "$name" -- ln -s /proc/1/root /tmp/init-root
# a symlink to a magic link (/proc/1/root) is refused with the magic link
check_status 125 "${enter[@]}" --cwd /tmp/init-root "$name" -- true 2>"$WORK/err"
check grep -q "workdir '/tmp/init-root'" "$WORK/err"
for fd in 3 4 5 6 7 8 9 10; do
	check_status 125 "${enter[@]}" --cwd "/proc/self/fd/$fd" "$name" -- true 2>"$WORK/err"
	check grep -q "workdir '/proc/self/fd/$fd'" "$WORK/err"
done
check_status 125 "${enter[@]}" --cwd relative "$name" -- true 2>"$WORK/err"
check grep -q "cwd 'relative' is not absolute" "$WORK/err"
check_status 125 "${enter[@]}" --user nobody "$name" -- true 2>"$WORK/err"
check grep -q "bad user 'nobody'" "$WORK/err"
check_status 127 "${enter[@]}" "$name" -- /no/such/program
check_status 125 "${enter[@]}" "$name-none" -- true

# A function run in the confined process instead of a program (file transfers): confined
# alike, its output its own (nothing the caller had buffered), its value the exit status.
check_status 7 "${enter[@]}" --fn --cwd /tmp "$name" -- none >"$WORK/fn"
check grep -qE "^Uid:.1000\b" "$WORK/fn"
check grep -qE "^NoNewPrivs:.1" "$WORK/fn"
check grep -qE "^Seccomp:.2" "$WORK/fn"
check grep -qE "^CapEff:.0+$" "$WORK/fn"
check grep -qx "cwd /tmp" "$WORK/fn"
check test "$(grep -c "caller's own buffered line" "$WORK/fn")" = 1
check test "$(wc -l <"$WORK/fn")" = 6

# The exec's cgroup2 directory must be beneath the sandbox's, where its BPF programs hold.
check_status 125 "${enter[@]}" --cgroup /sys/fs/cgroup/unified "$name" -- true 2>"$WORK/err"
check grep -q "is not beneath the sandbox's" "$WORK/err"

# A command is searched in the sandbox's PATH (the policy's env), by `run` as by an exec.
check test "$(sb_run --set env=PATH=/lr:/usr/bin:/bin -- lsid /lr/lsid)" = "0:0 100755 /lr/lsid"
got=$("${enter[@]}" --user 0 --env PATH=/lr:/usr/bin:/bin "$name" -- lsid /lr/lsid)
check test "$got" = "0:0 100755 /lr/lsid"

# A directory as stdio would be a host descriptor out of the root: refused.
check_status 125 "${enter[@]}" "$name" -- true </ 2>"$WORK/err"
check grep -q "stdio 0 (fd 0) is not a file, pipe, socket or device" "$WORK/err"

# Only stdio reaches the exec: no descriptor above 2.
got=$("${enter[@]}" "$name" -- sh -c 'ls /proc/self/fd | sort -n | tr "\n" " "')
check test "$got" = "0 1 2 3 "

sb_stop
check test "$SB_RC" = 0

# Not dumpable until it execs: without Landlock (whose domains would refuse it anyway), root of
# the sandbox reads the environment of an exec'd process of root's, not that of one that is still
# the entering helper's copy (a fn's process, which never execs).
mkfifo "$WORK/fnin" "$WORK/pid.fn" "$WORK/pid.sleep"
sb_start nd --set landlock=false -- sh -c 'echo ready; read -r x; exit 0'
nd=$SB_LAST
nd_enter=("$SBENTER" --set landlock=false --set "uid_base=$SB_UID_BASE")
# (the sandbox's stdin and stdout, and the fn's stdin, stay the test's alone)
"${nd_enter[@]}" --fn-wait --pid-file "$WORK/pid.fn" "$nd" -- none <"$WORK/fnin" 7<&- 8>&- &
fn_sbenter=$!
exec 6>"$WORK/fnin"
"${nd_enter[@]}" --pid-file "$WORK/pid.sleep" "$nd" -- sleep 600 6>&- 7<&- 8>&- &
sleep_sbenter=$!
cleanup_add kill "$fn_sbenter" "$sleep_sbenter"
read -r fn_host <"$WORK/pid.fn"
read -r sleep_host <"$WORK/pid.sleep"
fn_in=$(awk '/^NSpid:/ { print $NF }' "/proc/$fn_host/status")
sleep_in=$(awk '/^NSpid:/ { print $NF }' "/proc/$sleep_host/status")
check grep -q "^Uid:.$SB_UID_BASE\b" "/proc/$fn_host/status"
check_status 0 "${nd_enter[@]}" "$nd" -- cat "/proc/$sleep_in/environ" >/dev/null
for f in environ mem; do
	check_status 1 "${nd_enter[@]}" "$nd" -- \
		sh -c 'cat "$1" 2>&1 | grep -q "Permission denied" || exit 2; exit 1' \
		sh "/proc/$fn_in/$f"
done
exec 6>&-
check_status 0 wait "$fn_sbenter"
kill "$sleep_host"
check_status 143 wait "$sleep_sbenter"
sb_stop
check test "$SB_RC" = 0
check sb_no_leftovers
check test -z "$(find /sys/fs/cgroup -maxdepth 8 -type d -name 'sbenter-*' 2>/dev/null)"
