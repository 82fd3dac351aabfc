#!/bin/bash
# The Ceph RGW cluster that the S3 tests of one tests/run share (tests/lib/rgw.sh): starting
# one takes about 20 s, most of it waiting on Ceph, so tests/run starts it in the background
# as the suite begins, and each test's rgw_start makes a user and a bucket of its own in it.
#
#   tests/lib/rgw-server.sh DIR
#
# DIR (made by the caller) gets `env` (RGW_DIR=..., RGW_PORT=...) and then `ready` once
# radosgw answers, or `failed`; the cluster serves until SIGTERM, then every daemon is
# stopped and its directory removed.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/nginx.sh"
. "$(dirname "$0")/rgw.sh"
out=${1:?usage: rgw-server.sh DIR}
unset LAZYROOT_TEST_RGW
rc=0
rgw_start || rc=$?
if [ "$rc" != 0 ]; then
	touch "$out/failed"
	exit "$rc"
fi
printf 'RGW_DIR=%s\nRGW_PORT=%s\n' "$RGW_DIR" "$RGW_PORT" >"$out/env"
touch "$out/ready"
# Until SIGTERM (common.sh's trap then runs the cleanups): wait returns on a trapped signal.
sleep infinity &
cleanup_add kill "$!"
wait "$!" || true
