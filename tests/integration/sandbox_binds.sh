#!/bin/bash
# What a sandbox leaves on the host through a writable bind (--bind SRC:DST:rw): whatever it
# tries (setuid and setgid executables, a setgid directory, chown to root inside, a FIFO and a
# symlink to /etc/shadow named like the result file, a device node, a setuid file deeper than
# the launcher walks), every file it made is owned by its own host ids, none has a setuid or
# setgid bit a host user can reach, and SRC is given back as it was. A consumer that opens
# results with O_NOFOLLOW | O_NONBLOCK is not fooled by the symlink nor held by the FIFO. After
# a SIGKILL of the launcher, `lazyroot gc` gives SRC back and clears the bits the same way.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
need_cmd setpriv find
workdir

# A directory as a consumer makes it: host root's, 0755, under a path every user may walk.
chmod 0755 "$WORK"
mkdir -m 0755 "$WORK/out"
before=$(stat -c '%u:%g:%a' "$WORK/out")
check attack --bind "$WORK/out:/out:rw" --json="$WORK/report.json" -- bind-leave /out >"$WORK/leave"
cat "$WORK/leave" >&2
base=$(json_field "$WORK/report.json" uid_base)
check test "$base" = "$SB_UID_BASE"

# SRC is given back: owner, group and mode as before the run.
check test "$(stat -c '%u:%g:%a' "$WORK/out")" = "$before"
# Every file the sandbox made is owned by its own host ids, not host root nor any host user.
find "$WORK/out" -mindepth 1 -printf '%U %G %p\n' >"$WORK/owners"
check test -s "$WORK/owners"
check test -z "$(awk -v lo="$base" -v hi=$((base + 65536)) '$1 < lo || $1 >= hi || $2 < lo || $2 >= hi' "$WORK/owners")"
check grep -q "^$base $base $WORK/out/suid\$" "$WORK/owners"
# No setuid or setgid bit is left where the launcher walks (128 levels) ...
check test -z "$(find "$WORK/out" -not -path "$WORK/out/deep/*" -perm /6000)"
check test -z "$(find "$WORK/out" -maxdepth 100 -perm /6000)"
# ... and below, where a setuid file was made 200 levels down, no host user but root can reach
# it (whom a setuid file of an unprivileged id gives nothing).
deep=$WORK/out/deep$(printf '/d%.0s' $(seq 200))/suid
check test -u "$deep"
check_not setpriv --reuid=65534 --regid=65534 --clear-groups test -e "$deep"
# What the sandbox could still make: a FIFO and a symlink named like results. Opened as a
# consumer should (O_NOFOLLOW | O_NONBLOCK, then a regular file is required), neither passes.
check test -p "$WORK/out/result.fifo"
check test -L "$WORK/out/result.json"
check python3 - "$WORK/out" <<'PY'
import errno, os, stat, sys
d = sys.argv[1]
for name in ("result.json", "result.fifo"):
    try:
        fd = os.open(os.path.join(d, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        assert e.errno == errno.ELOOP, (name, e)
        continue
    assert not stat.S_ISREG(os.fstat(fd).st_mode), name
    os.close(fd)
PY

# A world-writable sticky SRC (shared by several sandboxes) is not lent: it keeps its owner.
mkdir -m 1777 "$WORK/shared"
# While it runs, the sandbox may set the bit on what it owns (sandbox/POLICY.md, "Writable binds":
# the window is documented); the launcher clears it once the sandbox is gone.
check sb_run --bind "$WORK/shared:/shared:rw" -- /bin/sh -c \
	'echo x >/shared/f && chmod 4755 /shared/f && test -u /shared/f'
check test "$(stat -c '%u:%a' "$WORK/shared")" = 0:1777
check test "$(stat -c '%u:%a' "$WORK/shared/f")" = "$SB_UID_BASE:755"
# A writable bind of a file: written in place, given back as it was.
echo before >"$WORK/file"
check sb_run --bind "$WORK/file:/result:rw" -- /bin/sh -c 'echo after >/result'
check grep -qx after "$WORK/file"
check test "$(stat -c '%u:%g:%a' "$WORK/file")" = 0:0:644

# A launcher killed by SIGKILL cannot give its bind back: the record it listed the bind in
# before lending it lets `lazyroot gc` do it, owner and mode as before and no setuid or setgid
# bit left. Records of this test's own, so that no other launcher's collection races its gc.
export LAZYROOT_RECORD_DIR=$WORK/launchers
SB_RECORDS=$LAZYROOT_RECORD_DIR
mkdir -m 0755 "$WORK/killed"
before=$(stat -c '%u:%g:%a' "$WORK/killed")
mkfifo "$WORK/killed.out"
SB_EXEC=1 sb_run --bind "$WORK/killed:/out:rw" -- /bin/sh -c \
	'echo x >/out/suid && chmod 4755 /out/suid && mkdir /out/d && chmod 2755 /out/d && echo ready && exec sleep 600' \
	>"$WORK/killed.out" &
launcher=$!
_sb_count=$((_sb_count + 1))
cleanup_add kill -KILL "$launcher"
read -r line <"$WORK/killed.out" || line=
check test "$line" = ready
check test "$(stat -c %u "$WORK/killed")" = "$SB_UID_BASE"
init=$(ps -e -o pid=,ppid= | awk -v p="$launcher" '$2 == p { print $1 }')
kill -KILL "$launcher"
wait "$launcher" || true
# The init dies with its launcher (PR_SET_PDEATHSIG), and the pid namespace with it.
[ -z "$init" ] || python3 -c '
import os, select, sys
try:
    fd = os.pidfd_open(int(sys.argv[1]))
except ProcessLookupError:
    sys.exit(0)
select.select([fd], [], [], 10)' "$init"
check test -u "$WORK/killed/suid"
check "$LAZYROOT" gc
check test "$(stat -c '%u:%g:%a' "$WORK/killed")" = "$before"
check test -z "$(find "$WORK/killed" -perm /6000)"
check test -z "$(find "$LAZYROOT_RECORD_DIR" -name "$SB_NAME-*")"
check sb_no_leftovers
