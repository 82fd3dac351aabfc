#!/bin/bash
# The fault proxy's `delay` mode, which the remote benchmark uses to add round-trip
# latency (the kernel here has no netem).  nginx on 127.0.0.1 serves a few files;
# build/tests/faultproxy sits in front of it:
#  1. delay 0: a 40 MB file comes through byte for byte (streamed), HEAD keeps its length;
#  2. delay 50: one request on a fresh connection takes >= 100 ms (handshake + request),
#     a second one on the same connection >= 50 ms more;
#  3. delay 50, 16 requests at once on 16 connections: each waits on its own, so the lot
#     takes about 100 ms, well under the 16 x 100 ms one queue would take;
#  4. the delay holds faults' answers too (503 after >= 50 ms).
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/nginx.sh"
need_cmd nginx curl
need_faultproxy
workdir

mkdir -p "$WORK/data/d"
head -c $((40 << 20)) /dev/urandom >"$WORK/data/big"
for i in $(seq 16); do echo "file $i" >"$WORK/data/d/f$i"; done
nginx_start "$WORK/data"
faultproxy_start "$NGINX_PORT"

# seconds (with fractions) that curl reports for its whole run, several URLs in one
curl_time() {
	curl -sf -o /dev/null -w '%{time_total}\n' "$@" | awk '{ s += $1 } END { print s }'
}
ms_of() { awk -v s="$1" 'BEGIN { printf "%d\n", s * 1000 }'; }

# --- 1. streaming at delay 0
fault ""
check curl -sf -o "$WORK/got" "$PROXY_URL/big"
check cmp "$WORK/data/big" "$WORK/got"
check test "$(curl -sfI "$PROXY_URL/big" | tr -d '\r' | awk 'tolower($1) == "content-length:" { print $2 }')" \
	= $((40 << 20))

# --- 2. one connection
fault "delay 50"
one=$(ms_of "$(curl_time "$PROXY_URL/d/f1")")
log "delay 50, one request on a new connection: $one ms"
check test "$one" -ge 100
two=$(ms_of "$(curl_time "$PROXY_URL/d/f1" "$PROXY_URL/d/f2")")
log "delay 50, two requests on one connection: $two ms"
check test "$two" -ge 150

# --- 3. sixteen connections at once
urls=()
for i in $(seq 16); do urls+=("$PROXY_URL/d/f$i"); done
t0=$(date +%s%N)
check curl -sf --no-progress-meter -Z --parallel-max 16 --parallel-immediate \
	--output-dir "$WORK/par" --create-dirs --remote-name-all "${urls[@]}"
t1=$(date +%s%N)
par=$(( (t1 - t0) / 1000000 ))
log "delay 50, 16 requests on 16 connections at once: $par ms"
check test "$par" -ge 100
check test "$par" -lt 800
check test "$(cat "$WORK"/par/f* | wc -l)" -eq 16

# --- 4. a fault's answer is held too
fault "delay 50 503 1"
code=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' "$PROXY_URL/d/f3")
log "delay 50 with 503: $code"
check test "${code% *}" = 503
check test "$(ms_of "${code#* }")" -ge 100
fault ""
