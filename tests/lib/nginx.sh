# shellcheck shell=bash
# A real HTTP chunk store for tests and benchmarks: nginx on 127.0.0.1 with WebDAV PUT
# (atomic: nginx writes a temporary file in the data directory and renames it), DELETE and
# MOVE (what `lazyroot store gc` needs) and JSON directory listings.  Source it after common.sh (it uses cleanup_add):
#
#   nginx_start DATA_DIR     start nginx serving DATA_DIR (created when missing) on a free
#                            port; sets NGINX_URL (http://127.0.0.1:PORT), NGINX_PORT and
#                            NGINX_PID, stops it at exit; the access log, one line per
#                            request, is $NGINX_DIR/access.log
#                            With NGINX_TLS=1 it speaks HTTPS instead, with a fresh
#                            self-signed certificate for 127.0.0.1 ($NGINX_CERT; NGINX_URL
#                            is https://127.0.0.1:PORT)
#   nginx_stop               stop it now
#   wait_port PORT           poll 127.0.0.1:PORT until it accepts (bounded: 10 s)
#   need_faultproxy          exit 77 (skip) when build/tests/faultproxy is not built
#   faultproxy_start PORT    start build/tests/faultproxy in front of 127.0.0.1:PORT; sets
#                            PROXY_URL, PROXY_PID and PROXY_CONTROL (the file that selects
#                            the fault: see tests/helpers/faultproxy.c); stops it at exit
#   fault WORDS...           set the proxy's fault ("" for none), atomically
#   check_store_outage MNT SRC
#                            with MNT a mount of the tree SRC (big/b00 and big/b01 in it)
#                            through the proxy with --fetch-timeout 1: take the store away
#                            (fault down), check that a read of a missing chunk fails with
#                            EIO within 1-15 s while the mount stays and serves what it has,
#                            then bring it back and check the same mount serves everything
#   check_corrupt_mirror MNT SRC CACHE REF STORES
#                            with the proxy first in STORES (a mirror list) and the real
#                            store after it: make the proxy flip a byte of every chunk it
#                            serves, mount REF at MNT with cache CACHE, and check that every
#                            byte of SRC reads back, each corrupt chunk was refused and
#                            fetched from the next mirror (verify failures = failovers > 0),
#                            with no error; then unmount and clear the fault

# A tiny pause without sleep(1): read with a timeout on a pipe nobody writes to.
_pause() {
	read -r -t "$1" <> <(:) || true
}

wait_port() {
	local i
	for i in $(seq 500); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		_pause 0.02
	done
	echo "nothing listens on 127.0.0.1:$1" >&2
	return 1
}

nginx_start() {
	local data=$1 port try
	command -v nginx >/dev/null || { echo "nginx is missing (scripts/install-deps test)" >&2; return 77; }
	mkdir -p "$data/.tmp"
	NGINX_DIR=$(mktemp -d "${TMPDIR:-/tmp}/lazyroot-nginx.XXXXXX")
	cleanup_add rm -rf "$NGINX_DIR"
	local listen_opts="" tls="" scheme=http
	if [ "${NGINX_TLS:-0}" = 1 ]; then
		command -v openssl >/dev/null || { echo "openssl is missing (scripts/install-deps test)" >&2; return 77; }
		NGINX_CERT=$NGINX_DIR/cert.pem
		openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 \
			-addext subjectAltName=IP:127.0.0.1 -keyout "$NGINX_DIR/key.pem" \
			-out "$NGINX_CERT" 2>/dev/null || { echo "openssl could not make a certificate" >&2; return 1; }
		listen_opts=" ssl"
		tls="ssl_certificate $NGINX_CERT; ssl_certificate_key $NGINX_DIR/key.pem;"
		scheme=https
	fi
	for try in $(seq 20); do
		port=$(free_port)
		cat >"$NGINX_DIR/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
$( [ "$(id -u)" = 0 ] && echo "user root;" )
pid $NGINX_DIR/nginx.pid;
error_log $NGINX_DIR/error.log warn;
events { worker_connections 4096; }
http {
	access_log $NGINX_DIR/access.log;
	client_body_temp_path $data/.tmp;
	proxy_temp_path $NGINX_DIR/proxy;
	fastcgi_temp_path $NGINX_DIR/fastcgi;
	uwsgi_temp_path $NGINX_DIR/uwsgi;
	scgi_temp_path $NGINX_DIR/scgi;
	sendfile on;
	tcp_nopush on;
	keepalive_requests 1000000;
	keepalive_timeout 120s;
	default_type application/octet-stream;
	server {
		listen 127.0.0.1:$port$listen_opts;
		$tls
		root $data;
		client_max_body_size 0;
		dav_methods PUT DELETE MOVE;
		create_full_put_path on;
		dav_access user:rw group:r all:r;
		location / {
			autoindex on;
			autoindex_format json;
		}
	}
}
EOF
		nginx -c "$NGINX_DIR/nginx.conf" -e "$NGINX_DIR/error.log" 2>>"$NGINX_DIR/error.log" &
		NGINX_PID=$!
		# nginx exits at once when the port is taken: then try another
		local i
		for i in $(seq 500); do
			kill -0 "$NGINX_PID" 2>/dev/null || break
			(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
			_pause 0.02
		done
		if kill -0 "$NGINX_PID" 2>/dev/null; then
			NGINX_PORT=$port
			NGINX_URL=$scheme://127.0.0.1:$port
			cleanup_add nginx_stop
			return 0
		fi
		wait "$NGINX_PID" 2>/dev/null || true
	done
	echo "nginx did not start: $(tail -n 3 "$NGINX_DIR/error.log")" >&2
	return 1
}

nginx_stop() {
	[ -n "${NGINX_PID:-}" ] || return 0
	kill "$NGINX_PID" 2>/dev/null || true
	wait "$NGINX_PID" 2>/dev/null || true
	NGINX_PID=
}

_FAULTPROXY=${LAZYROOT_BUILD:-$REPO/build}/tests/faultproxy

need_faultproxy() {
	[ -x "$_FAULTPROXY" ] && return 0
	log "$_FAULTPROXY is missing (make tests-build); skipping"
	exit 77
}

faultproxy_start() {
	local upstream=$1 bin=$_FAULTPROXY port
	[ -x "$bin" ] || { echo "$bin is missing (make tests-build)" >&2; return 77; }
	PROXY_CONTROL=$(mktemp "${TMPDIR:-/tmp}/lazyroot-fault.XXXXXX")
	cleanup_add rm -f "$PROXY_CONTROL" "$PROXY_CONTROL.new"
	coproc FAULTPROXY { exec "$bin" --upstream "$upstream" --control "$PROXY_CONTROL" 2>/dev/null; }
	PROXY_PID=$FAULTPROXY_PID
	cleanup_add _faultproxy_stop "$PROXY_PID"
	read -r -t 10 port <&"${FAULTPROXY[0]}" || { echo "faultproxy did not start" >&2; return 1; }
	PROXY_PORT=$port
	PROXY_URL=http://127.0.0.1:$port
}

_faultproxy_stop() {
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

fault() {
	printf '%s\n' "$*" >"$PROXY_CONTROL.new"
	mv -f "$PROXY_CONTROL.new" "$PROXY_CONTROL"
}

check_store_outage() {
	local mnt=$1 src=$2 start took err
	check cmp "$src/big/b00" "$mnt/big/b00"
	fault down
	start=$SECONDS
	err=$(cat "$mnt/big/b01" 2>&1 >/dev/null) && fail "a read succeeded with the store down"
	took=$((SECONDS - start))
	log "store down: read failed after ${took}s: $err"
	check grep -q "Input/output error" <<<"$err"
	check test "$took" -ge 1
	check test "$took" -le 15
	check mountpoint -q "$mnt"
	check cmp "$src/big/b00" "$mnt/big/b00"   # cached: still served
	fault ""
	check cmp "$src/big/b01" "$mnt/big/b01"
	check cmp_files "$src" "$mnt"
	check compare_trees --no-atime --ignore-root-mtime "$src" "$mnt"
}

check_corrupt_mirror() {
	local mnt=$1 src=$2 cache=$3 ref=$4 stores=$5 vf fo errs
	_mirror_stat() { "$LAZYROOT" cache stats --cache "$cache" --json |
		python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
	fault "flip 1 match /chunks/"
	check "$LAZYROOT" mount "$ref" "$mnt" --store "$stores" --cache "$cache"
	check cmp_files "$src" "$mnt"
	check compare_trees --no-atime --ignore-root-mtime "$src" "$mnt"
	vf=$(_mirror_stat verify_failures) fo=$(_mirror_stat store_failovers)
	errs=$(_mirror_stat errors)
	log "corrupt mirror: $vf verify failures, $fo failovers"
	check test "$vf" -gt 0
	check test "$fo" -eq "$vf"
	check test "$errs" -eq 0
	check "$LAZYROOT" umount "$mnt" --cache "$cache"
	fault ""
}
