# shellcheck shell=bash
# A real OCI registry for tests and benchmarks: Debian's docker-registry (distribution 2.8) on
# 127.0.0.1 with a config file of the test's own, seeded with skopeo.  Source it after
# common.sh and nginx.sh (it uses cleanup_add, free_port and _pause):
#
#   registry_start DATA [AUTH]
#                      start docker-registry storing under DATA on a free port; sets
#                      REGISTRY (127.0.0.1:PORT), REGISTRY_PORT, REGISTRY_PID and stops it at
#                      exit.  AUTH (optional) is a YAML block for the config's `auth:` key,
#                      indented by two spaces (htpasswd or token); REGISTRY_REDIRECT=URL
#                      adds distribution's redirect storage middleware: every blob GET is
#                      answered with a redirect to URL/<path of the blob under DATA>
#   registry_stop      stop it now (the data stays: start it again with another AUTH)
#   registry_seed SRC NAME:TAG
#                      copy the image SRC (a skopeo source, e.g. oci:DIR:TAG) into the
#                      running registry as NAME:TAG; --all keeps an image index whole
#   registry_blob DATA DIGEST
#                      the file in DATA that holds blob DIGEST (sha256:…)
#   htpasswd_auth FILE USER PASS
#                      write a bcrypt htpasswd FILE and print the AUTH block for it
#   docker_config DIR HOST USER PASS
#                      write DIR/config.json as `docker login HOST` would (auths.HOST.auth)
#   tokenserver_start USER:PASS [--anonymous]
#                      a fresh RSA key and self-signed certificate (openssl), and
#                      tests/helpers/tokenserver.py on a free port issuing tokens signed with
#                      them; sets TOKEN_AUTH (the AUTH block for registry_start: realm, service
#                      lazyroot-registry, issuer, rootcertbundle), TOKEN_REALM, TOKEN_LOG (one
#                      JSON line per request) and TOKEN_PID; stops it at exit
#   nginx_conf_start SERVERS
#                      nginx with the server blocks SERVERS (their `listen` says @PORT@, which
#                      becomes a free port); $NGX_DIR/access.log has one line per request: the
#                      request line, the status and the Authorization header as received; sets
#                      NGX_PORT, NGX_PID, NGX_DIR; stops it at exit

registry_start() {
	local data=$1 auth=${2:-} port try conf mw=""
	command -v docker-registry >/dev/null ||
		{ echo "docker-registry is missing (scripts/install-deps test)" >&2; return 77; }
	mkdir -p "$data"
	REGISTRY_DIR=$(mktemp -d "${TMPDIR:-/tmp}/lazyroot-registry.XXXXXX")
	cleanup_add rm -rf "$REGISTRY_DIR"
	if [ -n "${REGISTRY_REDIRECT:-}" ]; then
		mw="middleware:
  storage:
    - name: redirect
      options:
        baseurl: $REGISTRY_REDIRECT"
	fi
	for try in $(seq 20); do
		port=$(free_port)
		conf=$REGISTRY_DIR/config.yml
		cat >"$conf" <<EOF
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
  secret: lazyroot-tests
${auth:+auth:
$auth}
$mw
EOF
		docker-registry serve "$conf" >>"$REGISTRY_DIR/registry.log" 2>&1 &
		REGISTRY_PID=$!
		# it exits at once when the port is taken: then try another
		local i
		for i in $(seq 500); do
			kill -0 "$REGISTRY_PID" 2>/dev/null || break
			curl -s -o /dev/null "http://127.0.0.1:$port/v2/" && break
			_pause 0.02
		done
		if kill -0 "$REGISTRY_PID" 2>/dev/null; then
			REGISTRY_PORT=$port
			REGISTRY=127.0.0.1:$port
			cleanup_add registry_stop
			return 0
		fi
		wait "$REGISTRY_PID" 2>/dev/null || true
	done
	echo "docker-registry did not start: $(tail -n 3 "$REGISTRY_DIR/registry.log")" >&2
	return 1
}

registry_stop() {
	[ -n "${REGISTRY_PID:-}" ] || return 0
	kill "$REGISTRY_PID" 2>/dev/null || true
	wait "$REGISTRY_PID" 2>/dev/null || true
	REGISTRY_PID=
}

registry_seed() {
	skopeo --insecure-policy copy --quiet --all --dest-tls-verify=false "$1" "docker://$REGISTRY/$2"
}

registry_blob() {
	local hex=${2#sha256:}
	echo "$1/docker/registry/v2/blobs/sha256/${hex:0:2}/$hex/data"
}

htpasswd_auth() {
	command -v htpasswd >/dev/null ||
		{ echo "htpasswd is missing (apache2-utils; scripts/install-deps test)" >&2; return 77; }
	htpasswd -B -b -c "$1" "$2" "$3" 2>/dev/null
	printf '  htpasswd:\n    realm: lazyroot-tests\n    path: %s\n' "$1"
}

docker_config() {
	mkdir -p "$1"
	printf '{"auths": {"%s": {"auth": "%s"}}}\n' "$2" "$(printf '%s:%s' "$3" "$4" | base64 -w0)" \
		>"$1/config.json"
}

tokenserver_start() {
	local dir port
	command -v openssl >/dev/null || { echo "openssl is missing (scripts/install-deps test)" >&2; return 77; }
	dir=$(mktemp -d "${TMPDIR:-/tmp}/lazyroot-token.XXXXXX")
	cleanup_add rm -rf "$dir"
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=lazyroot-token \
		-keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null ||
		{ echo "openssl could not make a certificate" >&2; return 1; }
	TOKEN_LOG=$dir/requests.log
	: >"$TOKEN_LOG"
	coproc TOKENSERVER { exec python3 "$REPO/tests/helpers/tokenserver.py" --key "$dir/key.pem" \
		--cert "$dir/cert.pem" --issuer lazyroot-tests --user "$1" --log "$TOKEN_LOG" "${@:2}" \
		2>>"$dir/stderr"; }
	TOKEN_PID=$TOKENSERVER_PID
	cleanup_add _tokenserver_stop "$TOKEN_PID"
	read -r -t 10 port <&"${TOKENSERVER[0]}" ||
		{ echo "tokenserver did not start: $(tail -n 3 "$dir/stderr")" >&2; return 1; }
	TOKEN_REALM=http://127.0.0.1:$port/token
	TOKEN_AUTH=$(printf '  token:\n    realm: %s\n    service: lazyroot-registry\n    issuer: lazyroot-tests\n    rootcertbundle: %s\n' \
		"$TOKEN_REALM" "$dir/cert.pem")
}

_tokenserver_stop() {
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

nginx_conf_start() {
	local servers=$1 port try i
	command -v nginx >/dev/null || { echo "nginx is missing (scripts/install-deps test)" >&2; return 77; }
	NGX_DIR=$(mktemp -d "${TMPDIR:-/tmp}/lazyroot-nginx.XXXXXX")
	cleanup_add rm -rf "$NGX_DIR"
	for try in $(seq 20); do
		port=$(free_port)
		cat >"$NGX_DIR/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
$( [ "$(id -u)" = 0 ] && echo "user root;" )
pid $NGX_DIR/nginx.pid;
error_log $NGX_DIR/error.log warn;
events { worker_connections 1024; }
http {
	log_format auth '\$request \$status authorization="\$http_authorization"';
	access_log $NGX_DIR/access.log auth;
	client_body_temp_path $NGX_DIR/body;
	proxy_temp_path $NGX_DIR/proxy;
	fastcgi_temp_path $NGX_DIR/fastcgi;
	uwsgi_temp_path $NGX_DIR/uwsgi;
	scgi_temp_path $NGX_DIR/scgi;
	default_type application/octet-stream;
	${servers//@PORT@/$port}
}
EOF
		nginx -c "$NGX_DIR/nginx.conf" -e "$NGX_DIR/error.log" 2>>"$NGX_DIR/error.log" &
		NGX_PID=$!
		for i in $(seq 500); do
			kill -0 "$NGX_PID" 2>/dev/null || break
			(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
			_pause 0.02
		done
		if kill -0 "$NGX_PID" 2>/dev/null; then
			NGX_PORT=$port
			cleanup_add _nginx_conf_stop "$NGX_PID"
			return 0
		fi
		wait "$NGX_PID" 2>/dev/null || true
	done
	echo "nginx did not start: $(tail -n 3 "$NGX_DIR/error.log")" >&2
	return 1
}

_nginx_conf_stop() {
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}
