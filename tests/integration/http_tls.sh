#!/bin/bash
# HTTPS stores and the proxy environment, against real servers on 127.0.0.1:
#  1. nginx speaking TLS with a fresh self-signed certificate: build --store https://…
#     and a mount over it, with the certificate given by CURL_CA_BUNDLE (and by
#     SSL_CERT_FILE); every entry and byte compared through the mount;
#  2. the same store without the certificate: build and mount fail with one line naming
#     the URL and the certificate problem, a non-zero exit, no tag written, nothing mounted;
#  3. plain HTTP through a forward proxy (http_proxy): the store URL names an address
#     where nothing listens (127.0.0.2:9), so only a request sent to the proxy (the
#     project's faultproxy, in front of a second nginx) can succeed; the mount works
#     and the proxy's nginx logged the chunk requests.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/nginx.sh"
need_root
need_cmd python3 fusermount3 nginx openssl
need_faultproxy
workdir
mnt=$WORK/mnt
mkdir -p "$mnt"
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY no_proxy NO_PROXY CURL_CA_BUNDLE \
	SSL_CERT_FILE SSL_CERT_DIR

python3 - "$WORK/src" <<'PY'
import os, random, sys
r = random.Random(5)
root = sys.argv[1]
os.makedirs(os.path.join(root, "big"))
os.makedirs(os.path.join(root, "small"))
for i in range(4):
    open(os.path.join(root, "big", "b%02d" % i), "wb").write(r.randbytes(3 << 19))
for i in range(100):
    open(os.path.join(root, "small", "s%03d" % i), "wb").write(r.randbytes(r.randrange(0, 9000)))
PY

unmount_it() {
	mountpoint -q "$mnt" || return 0
	"$LAZYROOT" umount --cache "$cache" "$mnt" 2>/dev/null || umount -l "$mnt"
}
cleanup_add unmount_it

# --- 1. https with the certificate
NGINX_TLS=1 nginx_start "$WORK/tls"
url=$NGINX_URL
check grep -q '^https://' <<<"$url"
cache=$WORK/cache1
CURL_CA_BUNDLE=$NGINX_CERT check "$LAZYROOT" build "$WORK/src" --store "$url" --tag tls:1 \
	--no-progress
check test -f "$WORK/tls/tags/tls:1"
CURL_CA_BUNDLE=$NGINX_CERT check "$LAZYROOT" mount tls:1 "$mnt" --store "$url" --cache "$cache"
check compare_trees --no-atime --ignore-root-mtime "$WORK/src" "$mnt"
unmount_it
cache=$WORK/cache1b
SSL_CERT_FILE=$NGINX_CERT check "$LAZYROOT" mount tls:1 "$mnt" --store "$url" --cache "$cache"
check cmp "$WORK/src/big/b02" "$mnt/big/b02"
unmount_it

# --- 2. https without it: refused, one line, nothing written or mounted
rc=0
err=$("$LAZYROOT" build "$WORK/src/small" --store "$url" --tag tls:2 --no-progress 2>&1) || rc=$?
log "build without the certificate: exit $rc: $err"
check test "$rc" -ne 0
check test "$(wc -l <<<"$err")" -eq 1
check grep -q "$url" <<<"$err"
check grep -qi "certificate" <<<"$err"
check_not test -e "$WORK/tls/tags/tls:2"
cache=$WORK/cache2
rc=0
err=$("$LAZYROOT" mount tls:1 "$mnt" --store "$url" --cache "$cache" --fetch-timeout 1 2>&1) || rc=$?
log "mount without the certificate: exit $rc: $err"
check test "$rc" -ne 0
check test "$(wc -l <<<"$err")" -eq 1
check grep -q "$url" <<<"$err"
check grep -qi "certificate" <<<"$err"
check_not mountpoint -q "$mnt"
nginx_stop

# --- 3. through a forward proxy named by http_proxy: the proxy variables are the node
# service's environment (libcurl reads them), so each case starts a node of its own
nginx_start "$WORK/plain"
"$LAZYROOT" node stop 2>/dev/null || true
check "$LAZYROOT" build "$WORK/src" --store "$NGINX_URL" --tag proxied:1 --no-progress
faultproxy_start "$NGINX_PORT"
cache=$WORK/cache3
lines=$(wc -l <"$NGINX_DIR/access.log")
http_proxy=$PROXY_URL check "$LAZYROOT" mount proxied:1 "$mnt" --store http://127.0.0.2:9 \
	--cache "$cache"
check compare_trees --no-atime --ignore-root-mtime "$WORK/src" "$mnt"
unmount_it
check test "$(tail -n +"$((lines + 1))" "$NGINX_DIR/access.log" | grep -c '/chunks/')" -gt 0
# and without the proxy the same URL reaches nothing
"$LAZYROOT" node stop 2>/dev/null || true
cache=$WORK/cache4
rc=0
err=$("$LAZYROOT" mount proxied:1 "$mnt" --store http://127.0.0.2:9 --cache "$cache" \
	--fetch-timeout 1 2>&1) || rc=$?
log "no proxy: exit $rc: $err"
check test "$rc" -ne 0
check_not mountpoint -q "$mnt"
