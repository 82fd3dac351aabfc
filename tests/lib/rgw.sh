# shellcheck shell=bash
# A real S3 store for tests and benchmarks: a one-node Ceph (one ceph-mon, one bluestore
# ceph-osd on a sparse file, no ceph-mgr) and radosgw (beast) on 127.0.0.1, all under a
# temporary directory.  Source it after common.sh and nginx.sh (it uses cleanup_add,
# free_port and _pause):
#
#   rgw_start           start the cluster and radosgw on free ports (about 20 s), create
#                       an S3 user and the bucket $RGW_BUCKET; sets RGW_ENDPOINT
#                       (http://127.0.0.1:PORT), RGW_PORT, RGW_BUCKET, RGW_UID, RGW_ACCESS_KEY,
#                       RGW_SECRET_KEY and exports AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
#                       AWS_SECRET_ACCESS_KEY and AWS_REGION (us-east-1) for them; every
#                       daemon is stopped by PID and the directory removed at exit.
#                       Returns 77 when the Ceph packages are missing.
#                       With $LAZYROOT_TEST_RGW set (tests/run does, when a test it runs
#                       sources this file) it uses instead the cluster that
#                       tests/lib/rgw-server.sh started there in the background, with a
#                       user and bucket of this test's own (the same variables are set);
#                       that cluster stays up after the test.  When the shared cluster
#                       failed to start, it starts one of its own as above.
#   rgw_admin ARGS...   radosgw-admin against this cluster
#   rgw_user UID ACCESS SECRET
#                       create another S3 user with these keys
#   rgw_key ACCESS SECRET
#                       give the test user (the bucket's owner) another pair of keys
#   s3_curl KEY SECRET CURL-ARGS...
#                       curl with SigV4 against RGW (for setup only: making buckets)
#
# One OSD is enough for a healthy cluster only with pool size 1, `osd crush chooseleaf type = 0`
# and `mon allow pool size one = true`; radosgw does not need ceph-mgr, so none is started.
# Every daemon and client shares one cephx keyring made here; nothing listens beyond 127.0.0.1.
# beast runs with tcp_nodelay=1: without it every answer on a kept-alive connection waited
# ~40 ms for the client's delayed ACK (Nagle holds the last segment back): 100 sequential
# 150 KB GETs took 2.9 s instead of 0.35-0.5 s.

_rgw_ceph() {
	timeout 30 ceph -c "$RGW_DIR/ceph.conf" "$@"
}

rgw_admin() {
	timeout 60 radosgw-admin -c "$RGW_DIR/ceph.conf" -n client.admin "$@"
}

_rgw_stop_pid() {  # NAME
	local f=$RGW_DIR/$1.pidv
	[ -f "$f" ] || return 0
	local pid
	pid=$(cat "$f")
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	rm -f "$f"
}

rgw_stop() {
	[ -n "${RGW_DIR:-}" ] || return 0
	_rgw_stop_pid rgw
	_rgw_stop_pid osd
	_rgw_stop_pid mon
}

# Wait up to SECONDS of wall time (a probe of a daemon that does not answer can itself take
# up to 30 s) for CMD to succeed; give up at once when DAEMON's process (mon, osd or rgw) has
# exited: 1.
_rgw_wait() {  # SECONDS DESCRIPTION DAEMON CMD...
	local deadline=$((SECONDS + $1)) what=$2 daemon=$3
	shift 3
	while ((SECONDS < deadline)); do
		"$@" >/dev/null 2>&1 && return 0
		if ! kill -0 "$(cat "$RGW_DIR/$daemon.pidv" 2>/dev/null)" 2>/dev/null; then
			echo "rgw: $what: ceph-$daemon exited; logs in $RGW_DIR" >&2
			return 1
		fi
		_pause 0.1
	done
	echo "rgw: $what did not happen in time; logs in $RGW_DIR" >&2
	return 1
}

# Make and start the monitor on a free port.  A port found free can be taken by someone else
# before the monitor binds it (it then exits): up to three ports are tried.
_rgw_mon_start() {  # FSID
	local mon_port
	for _ in 1 2 3; do
		mon_port=$(free_port)
		sed -i "s/^mon host = .*/mon host = [v2:127.0.0.1:$mon_port]/" "$RGW_DIR/ceph.conf"
		rm -rf "$RGW_DIR/mon.a" "$RGW_DIR/monmap"
		mkdir -p "$RGW_DIR/mon.a"
		monmaptool --create --addv a "[v2:127.0.0.1:$mon_port]" --fsid "$1" \
			"$RGW_DIR/monmap" >/dev/null
		ceph-mon -c "$RGW_DIR/ceph.conf" --mkfs -i a --monmap "$RGW_DIR/monmap" \
			--keyring "$RGW_DIR/keyring" >"$RGW_DIR/mkfs.out" 2>&1 ||
			{ echo "rgw: ceph-mon --mkfs failed: $(tail -n 3 "$RGW_DIR/mkfs.out")" >&2; return 1; }
		ceph-mon -c "$RGW_DIR/ceph.conf" -i a -f >>"$RGW_DIR/mon.err" 2>&1 &
		echo $! >"$RGW_DIR/mon.pidv"
		_rgw_wait 30 "the monitor answering" mon _rgw_ceph mon stat && return 0
		grep -q 'Address already in use' "$RGW_DIR/mon.err" || return 1
		_rgw_stop_pid mon
		: >"$RGW_DIR/mon.err"
	done
	return 1
}

# Start radosgw on a free port (RGW_PORT), retried on another as the monitor is.  Ready when
# the port answers as S3 does (an anonymous bucket listing), not merely when it accepts.
_rgw_gw_start() {
	for _ in 1 2 3; do
		RGW_PORT=$(free_port)
		sed -i "s/^rgw frontends = .*/rgw frontends = beast endpoint=127.0.0.1:$RGW_PORT tcp_nodelay=1/" \
			"$RGW_DIR/ceph.conf"
		radosgw -c "$RGW_DIR/ceph.conf" -n client.rgw -f >>"$RGW_DIR/rgw.err" 2>&1 &
		echo $! >"$RGW_DIR/rgw.pidv"
		_rgw_wait 60 "radosgw answering on 127.0.0.1:$RGW_PORT" rgw _rgw_gw_answers && return 0
		grep -q 'Address already in use' "$RGW_DIR/rgw.err" "$RGW_DIR/client.rgw.log" 2>/dev/null ||
			return 1
		_rgw_stop_pid rgw
		: >"$RGW_DIR/rgw.err"
		: >"$RGW_DIR/client.rgw.log"
	done
	return 1
}

_rgw_gw_answers() {
	curl -s --max-time 5 "http://127.0.0.1:$RGW_PORT/" | grep -q ListAllMyBucketsResult
}

s3_curl() {  # KEY SECRET ARGS...
	local key=$1 secret=$2
	shift 2
	curl -sS --aws-sigv4 "aws:amz:us-east-1:s3" --user "$key:$secret" \
		-H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"
}

rgw_user() {  # UID ACCESS SECRET
	rgw_admin user create --uid "$1" --display-name "$1" --access-key "$2" --secret "$3" >/dev/null
}

rgw_key() {  # ACCESS SECRET
	rgw_admin key create --uid "$RGW_UID" --key-type s3 --access-key "$1" --secret "$2" >/dev/null
}

_rgw_osd_up() {
	_rgw_ceph osd dump 2>/dev/null | grep -q '^osd\.0 up'
}

_rgw_keys() {
	local k=$RGW_DIR/keyring
	ceph-authtool --create-keyring "$k" --gen-key -n mon. --cap mon 'allow *' &&
	ceph-authtool "$k" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' \
		--cap mgr 'allow *' &&
	ceph-authtool "$k" --gen-key -n client.rgw --cap mon 'allow rw' --cap osd 'allow rwx' &&
	ceph-authtool "$k" --gen-key -n osd.0 --cap mon 'allow profile osd' --cap osd 'allow *' \
		--cap mgr 'allow profile osd'
} >/dev/null

# The cluster that tests/lib/rgw-server.sh started in DIR: wait for it (it starts while
# earlier tests run), then take its RGW_DIR and RGW_PORT.  1 when it failed or does not answer.
_rgw_attach() {  # DIR
	local deadline=$((SECONDS + 300))
	until [ -e "$1/ready" ]; do
		[ ! -e "$1/failed" ] && ((SECONDS < deadline)) || return 1
		_pause 0.2
	done
	RGW_DIR=$(sed -n 's/^RGW_DIR=//p' "$1/env")
	RGW_PORT=$(sed -n 's/^RGW_PORT=//p' "$1/env")
	[ -f "$RGW_DIR/ceph.conf" ] && _rgw_gw_answers
}

# A user of the test's own (RGW_UID, RGW_ACCESS_KEY, RGW_SECRET_KEY) and its bucket
# RGW_BUCKET; exports the AWS_* variables for them.
_rgw_tenant() {
	local id
	id=$(uuidgen | tr -d - | tr a-f A-F)
	RGW_ENDPOINT=http://127.0.0.1:$RGW_PORT
	RGW_UID=tester-${id:0:8}
	RGW_BUCKET=lazyroot-${id:0:8}
	RGW_BUCKET=${RGW_BUCKET,,}
	RGW_ACCESS_KEY=LAZYROOT${id:8:12}
	RGW_SECRET_KEY=$(head -c 30 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 40)
	rgw_user "$RGW_UID" "$RGW_ACCESS_KEY" "$RGW_SECRET_KEY" ||
		{ echo "rgw: radosgw-admin user create failed" >&2; return 1; }
	s3_curl "$RGW_ACCESS_KEY" "$RGW_SECRET_KEY" -f -X PUT "$RGW_ENDPOINT/$RGW_BUCKET" ||
		{ echo "rgw: creating bucket $RGW_BUCKET failed" >&2; return 1; }
	export AWS_ENDPOINT_URL=$RGW_ENDPOINT AWS_ACCESS_KEY_ID=$RGW_ACCESS_KEY
	export AWS_SECRET_ACCESS_KEY=$RGW_SECRET_KEY AWS_REGION=us-east-1
	unset AWS_SESSION_TOKEN AWS_PROFILE AWS_SHARED_CREDENTIALS_FILE AWS_DEFAULT_REGION
}

rgw_start() {
	local c fsid osd_uuid
	for c in ceph-mon ceph-osd radosgw radosgw-admin ceph ceph-authtool monmaptool uuidgen curl; do
		command -v "$c" >/dev/null || { echo "$c is missing (scripts/install-deps test)" >&2; return 77; }
	done
	if [ -n "${LAZYROOT_TEST_RGW:-}" ]; then
		if _rgw_attach "$LAZYROOT_TEST_RGW"; then
			_rgw_tenant
			return
		fi
		echo "rgw: the shared cluster in $LAZYROOT_TEST_RGW is not there; starting one" >&2
	fi
	RGW_DIR=$(mktemp -d "${TMPDIR:-/tmp}/lazyroot-rgw.XXXXXX")
	cleanup_add rm -rf "$RGW_DIR"
	cleanup_add rgw_stop
	fsid=$(uuidgen)
	osd_uuid=$(uuidgen)
	mkdir -p "$RGW_DIR/mon.a" "$RGW_DIR/osd.0" "$RGW_DIR/rgw"
	cat >"$RGW_DIR/ceph.conf" <<EOF
[global]
fsid = $fsid
mon host = (written by _rgw_mon_start)
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
ms bind ipv6 = false
run dir = $RGW_DIR
log file = $RGW_DIR/\$name.log
crash dir = $RGW_DIR/crash
keyring = $RGW_DIR/keyring
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail crit = 1
mon data avail warn = 2
[mon]
admin socket = $RGW_DIR/\$name.asok
mon data = $RGW_DIR/mon.\$id
[osd]
admin socket = $RGW_DIR/\$name.asok
osd data = $RGW_DIR/osd.\$id
osd objectstore = bluestore
bluestore block path = $RGW_DIR/osd.\$id.block
bluestore block create = true
bluestore block size = 10737418240
bluestore cache autotune = false
bluestore cache size = 67108864
osd memory target = 939524096
osd max object name len = 1024
osd max object namespace len = 256
[client.rgw]
admin socket = $RGW_DIR/\$name.asok
rgw data = $RGW_DIR/rgw
rgw frontends = (written by _rgw_gw_start)
rgw thread pool size = 64
EOF
	_rgw_keys || { echo "rgw: making keys failed" >&2; return 1; }
	_rgw_mon_start "$fsid" || return 1

	[ "$(_rgw_ceph osd new "$osd_uuid" 2>>"$RGW_DIR/osd.err")" = 0 ] ||
		{ echo "rgw: ceph osd new did not give osd.0" >&2; return 1; }
	ceph-osd -c "$RGW_DIR/ceph.conf" -i 0 --mkfs --osd-uuid "$osd_uuid" >>"$RGW_DIR/osd.err" 2>&1 ||
		{ echo "rgw: ceph-osd --mkfs failed: $(tail -n 3 "$RGW_DIR/osd.err")" >&2; return 1; }
	ceph-osd -c "$RGW_DIR/ceph.conf" -i 0 -f >>"$RGW_DIR/osd.err" 2>&1 &
	echo $! >"$RGW_DIR/osd.pidv"
	_rgw_wait 60 "osd.0 coming up" osd _rgw_osd_up || return 1

	_rgw_gw_start || return 1
	_rgw_tenant
}
