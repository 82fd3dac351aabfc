#!/bin/bash
# The sandbox's init and command sit in the sandbox's own cgroups in every hierarchy the
# launcher uses (memory, pids and cpu, v1 on a hybrid host, and cgroup2), below the launcher's
# own, while the launcher stays where it was. The init moves itself into its v1 cgroups (a write
# of 0 to each tasks file, through descriptors the launcher opened) and is born in its cgroup2
# directory; a sandbox's processes outside its cgroups would escape its limits. Checked for a
# pooled slot and for cgroups of the sandbox's own (LAZYROOT_POOL=0), and that a command
# forking inside stays there too.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
workdir

# The processes of this test's id range: "pid ppid" lines, zombies left out.
in_range() {
	ps -e -o pid=,ppid=,uid=,stat= | awk -v lo="$SB_UID_BASE" -v hi=$((SB_UID_BASE + 65536)) \
		'{ u = $3 < 0 ? $3 + 4294967296 : $3 } u >= lo && u < hi && $4 !~ /^Z/ { print $1, $2 }'
}
# PID's path in the hierarchy of controller CTRL ("" for the cgroup2 line).
cg_of() {
	awk -F: -v c="$2" 'c == "" && $1 == "0" { print $3; exit }
		c != "" { n = split($2, a, ","); for (i = 1; i <= n; i++) if (a[i] == c) { print $3; exit } }' \
		"/proc/$1/cgroup"
}
# The hierarchies the launcher uses here: v1 memory, pids, cpu where mounted, and cgroup2.
ctrls=("")
for c in memory pids cpu; do
	[ -n "$(cg_of $$ "$c")" ] && ctrls+=("$c")
done

one_sandbox() {   # LABEL, then the environment of the launch
	local label=$1 launcher init cmd c l i m
	SB_EXEC=1 sb_run -- sh -c 'sleep 30 & exec sleep 30' &
	launcher=$!
	for _ in $(seq 300); do
		[ "$(in_range | wc -l)" -ge 3 ] && break
		sleep 0.1
	done
	# the init is the launcher's child; the command and its own child are below it
	init=$(in_range | awk -v p="$launcher" '$2 == p { print $1; exit }')
	cmd=$(in_range | awk -v p="$init" '$2 == p { print $1; exit }')
	check test -n "$init" -a -n "$cmd"
	for c in "${ctrls[@]}"; do
		l=$(cg_of "$launcher" "$c")
		i=$(cg_of "$init" "$c")
		log "$label: ${c:-cgroup2}: launcher '$l', init '$i'"
		check test -n "$i"
		check test "$i" != "$l"
		# below the launcher's own cgroup
		check test "${i#"${l%/}"/}" != "$i"
		for m in $(in_range | awk -v p="$init" '$1 != p { print $1 }'); do
			check test "$(cg_of "$m" "$c")" = "$i"
		done
	done
	kill "$launcher"
	wait "$launcher" || true
}

one_sandbox pooled
export LAZYROOT_POOL=0
one_sandbox own
unset LAZYROOT_POOL
check sb_no_leftovers
