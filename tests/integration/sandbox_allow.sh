#!/bin/bash
# Attacks: "scan ports for reference solutions" and "fetch answers through package and module
# proxies" with a network allowlist in force. The sandbox may reach exactly the allowed service
# on the host (host:PORT, the host side of its veth); another service on the same host address,
# a service on the host's loopback, the host's own addresses and every other port of a scan are
# refused (EPERM from the cgroup BPF connect hooks, also for UDP sendto, io_uring connect, TCP
# fast open and IPv4-mapped IPv6).
# Teardown leaves no BPF program or link, no veth, no state, cgroup, mount or process.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
. "$(dirname "$0")/../lib/netsb.sh"
workdir

serve allowed 0.0.0.0
serve other 0.0.0.0
serve loopback 127.0.0.1

items=("ok:gw:$allowed" "gw:$other" "fail:127.0.0.1:$loopback" "udp:gw:$other" "udp:gw:53"
	"uring:gw:$other" "tfo:gw:$other" "v6:gw:$other" "scan:gw:1-1024:0" "scan:gw:$((allowed - 20))-$((allowed + 20)):$allowed")
for a in $(hostname -I 2>/dev/null); do
	[[ $a == *.* ]] && items+=("$a:$allowed" "$a:$other")
done

sb_start allow --allow "host:$allowed" --set io_uring=true -- /lr/attack "$HOST_PIDNS" reach -
progs=$(bpf_progs "$SB_LAST")
check test "$(wc -w <<<"$progs")" = 4
veth=$(cd /sys/class/net && ls -d "lr$SB_PID."* 2>/dev/null || true)
check test -n "$veth"
for i in "${items[@]}"; do
	sb_ask "$i"
done
sb_stop
check test "$SB_RC" = 0

# Without an allowlist: no veth, no programs, the same service unreachable.
check attack -- net "127.0.0.1:$allowed"

check no_bpf_left $progs
check test ! -e "/sys/class/net/$veth"
check sb_no_leftovers

# Bad entries name the field.
check_status 125 sb_run --allow 10.0.0.1 -- true
check_status 125 sb_run --allow nohost:80 -- true
check_status 125 sb_run --allow 10.0.0.1:0 -- true
