#!/bin/bash
# `lazyroot build docker://…` against a real registry with Bearer token auth and blobs served
# elsewhere, as on a registry with a CDN or an object store behind it:
#   - docker-registry (distribution 2.8) with `auth: token`, trusting a certificate made here;
#     the tokens come from tests/helpers/tokenserver.py, which signs real JWTs (RS256, x5c)
#     that the registry verifies, and refuses anonymous requests;
#   - distribution's redirect storage middleware: every blob GET is answered with a redirect
#     to nginx on another port, which serves the registry's own blob files and refuses any
#     request that carries an Authorization header (its log shows each header it got);
#   - nginx in front of the registry rewriting one repository's manifest Content-Type to a
#     type nobody knows, for the unknown-media-type error.
# The pulled image is extracted and compared exactly with the tree umoci unpacks.
. "$(dirname "$0")/../lib/common.sh"
. "$REPO/tests/lib/nginx.sh"
. "$REPO/tests/lib/registry.sh"
need_root
need_cmd umoci skopeo python3 docker-registry nginx openssl curl
workdir
store=dir:$WORK/store
data=$WORK/registry
creds='puller:t0ken pass'

layout=$(bash "$REPO/tests/lib/oci.sh" "$WORK/oci")
expected=$WORK/oci/expected

# the blob host: the registry's files, never to be sent credentials
mkdir -p "$data"
nginx_conf_start "server {
		listen 127.0.0.1:@PORT@;
		root $data;
		location / {
			if (\$http_authorization) { return 403; }
		}
	}" || exit $?
blobs_port=$NGX_PORT
blobs_log=$NGX_DIR/access.log

registry_start "$data" || exit $?
check registry_seed "oci:$layout:test" lazyroot/test:1
check registry_seed "oci:$layout:test" lazyroot/weird:1
registry_stop
tokenserver_start "$creds" || exit $?
REGISTRY_REDIRECT=http://127.0.0.1:$blobs_port registry_start "$data" "$TOKEN_AUTH" || exit $?
ref=docker://$REGISTRY/lazyroot/test:1
log "registry at $REGISTRY (token auth: $TOKEN_REALM; blobs redirected to 127.0.0.1:$blobs_port)"
export HOME=$WORK/home DOCKER_CONFIG=
mkdir -p "$HOME"

# the registry really asks for a token, and really redirects blobs
code=$(curl -s -o /dev/null -w '%{http_code}' "http://$REGISTRY/v2/")
check test "$code" = 401
challenge=$(curl -s -D - -o /dev/null "http://$REGISTRY/v2/" | tr -d '\r' | grep -i '^www-authenticate:')
log "challenge: $challenge"
check grep -q "Bearer realm=\"$TOKEN_REALM\"" <<<"$challenge"

check "$LAZYROOT" build "$ref" --creds "$creds" --store "$store" --tag tok:1 --no-progress
check "$LAZYROOT" image extract tok:1 "$WORK/x" --store "$store"
check compare_trees --no-atime --ignore-root-mtime "$expected" "$WORK/x"

# the token was asked for with the credentials, for pull on the repository
check python3 - "$TOKEN_LOG" <<'PY'
import json, sys
reqs = [json.loads(l) for l in open(sys.argv[1])]
ok = [r for r in reqs if r["status"] == 200 and r["user"] == "puller"
      and r["service"] == "lazyroot-registry" and "repository:lazyroot/test:pull" in r["scopes"]]
assert ok, reqs
PY
# every blob came from the blob host (config and four layers at least), none with credentials
# (nginx logs an absent header as "-")
nblob=$(grep -c '^GET /docker/registry/v2/blobs/sha256/.* 200 authorization="-"$' "$blobs_log" || true)
log "blob host served $nblob blobs; its log: $(wc -l <"$blobs_log") lines"
check test "$nblob" -ge 5
check_not grep -v 'authorization="-"$' "$blobs_log"

# from docker's config.json as well
docker_config "$HOME/.docker" "$REGISTRY" puller 't0ken pass'
check "$LAZYROOT" build "$ref" --store "$store" --tag tok:cfg --no-progress
check test "$(cat "$WORK/store/tags/tok:cfg")" = "$(cat "$WORK/store/tags/tok:1")"
rm -r "$HOME/.docker"

bad_build() {
	local what=$1 pat=$2 tag=tok:bad; shift 2
	rm -f "$WORK/store/tags/$tag"
	if err=$("$LAZYROOT" build "$@" --store "$store" --tag "$tag" --no-progress 2>&1); then
		_check_result 0 "$what: build succeeded"
		return
	fi
	log "$what: $err"
	check grep -q -- "$pat" <<<"$err"
	check test "$(wc -l <<<"$err")" = 1
	check test ! -e "$WORK/store/tags/$tag"
}

bad_build "anonymous" "refused anonymous access" "$ref"
bad_build "wrong credentials" "refused the credentials" "$ref" --creds puller:wrong

# a manifest answered with a media type nobody knows (nginx rewrites the Content-Type of
# one repository's manifests; the answer is otherwise the registry's own)
nginx_conf_start "server {
		listen 127.0.0.1:@PORT@;
		location / {
			proxy_pass http://$REGISTRY;
			proxy_set_header Host \$http_host;
		}
		location ~ ^/v2/lazyroot/weird/manifests/ {
			proxy_pass http://$REGISTRY;
			proxy_set_header Host \$http_host;
			proxy_hide_header Content-Type;
			add_header Content-Type application/vnd.example.unknown.v1+json always;
		}
	}" || exit $?
check "$LAZYROOT" build "docker://127.0.0.1:$NGX_PORT/lazyroot/test:1" --creds "$creds" \
	--store "$store" --tag tok:proxied --no-progress
bad_build "unknown media type" "unsupported manifest media type 'application/vnd.example.unknown.v1+json'" \
	"docker://127.0.0.1:$NGX_PORT/lazyroot/weird:1" --creds "$creds"

# HTTPS: nginx with a certificate made here in front of the registry, reached by a name that
# is not a loopback literal (this host's name, when it resolves to 127.x), so https:// is
# used; the CA bundle comes from $CURL_CA_BUNDLE, and without it the certificate is refused.
host=$(hostname)
if [[ "$(getent hosts "$host" | awk '{ print $1; exit }')" == 127.* ]]; then
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$host" \
		-addext "subjectAltName=DNS:$host" -keyout "$WORK/tls.key" -out "$WORK/tls.pem" 2>/dev/null
	nginx_conf_start "server {
		listen 127.0.0.1:@PORT@ ssl;
		ssl_certificate $WORK/tls.pem;
		ssl_certificate_key $WORK/tls.key;
		location / {
			proxy_pass http://$REGISTRY;
			proxy_set_header Host \$http_host;
		}
	}" || exit $?
	tref=docker://$host:$NGX_PORT/lazyroot/test:1
	check env CURL_CA_BUNDLE="$WORK/tls.pem" "$LAZYROOT" build "$tref" --creds "$creds" \
		--store "$store" --tag tok:tls --no-progress
	check test "$(cat "$WORK/store/tags/tok:tls")" = "$(cat "$WORK/store/tags/tok:1")"
	check grep -q '^GET /v2/lazyroot/test/manifests/1 HTTP/1.1 200 authorization="Bearer ' "$NGX_DIR/access.log"
	bad_build "untrusted certificate" "https://$host:$NGX_PORT/v2/" "$tref" --creds "$creds"
else
	log "$host does not resolve to a loopback address: HTTPS not tested"
fi
