#!/bin/bash
# The node_start setting: with it off (where systemd runs the node), a client that finds no node
# fails with one line saying so and starts none, so that an unmanaged node never holds the
# socket the unit would serve; with it on (the default) the client starts one.
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd fusermount3
[ -c /dev/fuse ] || { log "no /dev/fuse; skipping"; exit 77; }
workdir
export LAZYROOT_STORE=dir:$WORK/store LAZYROOT_CACHE=$WORK/cache LAZYROOT_IMAGES=$WORK/images

mkdir -p "$WORK/src" "$WORK/mnt"
echo hello >"$WORK/src/a"
"$LAZYROOT" build "$WORK/src" --tag s:1 --no-progress >/dev/null
want="lazyroot: node '$LAZYROOT_SOCKET': no node service answers, and node_start is off: start the node service (systemctl start lazyroot-node)"

# from the environment
rc=0
LAZYROOT_NODE_START=off "$LAZYROOT" mount s:1 "$WORK/mnt" 2>"$WORK/err" || rc=$?
check test "$rc" = 1
check test "$(cat "$WORK/err")" = "$want"
check test ! -e "$LAZYROOT_SOCKET"
check_not mountpoint -q "$WORK/mnt"
# from the config file, for `run IMAGE` too
echo "node_start = off" >"$WORK/node.conf"
rc=0
LAZYROOT_CONFIG=$WORK/node.conf "$LAZYROOT" run s:1 -- true 2>"$WORK/err" || rc=$?
check test "$rc" = 125
check grep -qxF "$want" "$WORK/err"
check test ! -e "$LAZYROOT_SOCKET"

# on: the client starts the node
check "$LAZYROOT" mount s:1 "$WORK/mnt"
cleanup_add umount -lq "$WORK/mnt"
check test -S "$LAZYROOT_SOCKET"
check grep -qx hello "$WORK/mnt/a"
# and with it off, a running node is used
check env LAZYROOT_NODE_START=off "$LAZYROOT" umount "$WORK/mnt"
