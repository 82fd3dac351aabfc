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
