#!/bin/bash
# Attacks: "overwrite system binaries to intercept the grader" when the policy makes them
# read-only, and reading protected files (the grader's reference solutions): with Landlock, a
# path outside the writable ones refuses every kind of write (create, truncate, write, mkdir,
# unlink, rename, symlink) with EACCES (EROFS where the read-only mount that keeps its metadata
# refuses first), a hidden file or directory refuses every access, also
# through io_uring OPENAT (which seccomp does not see, so this test lets the ring through), and
# a Landlock TCP port rule refuses bind and connect on other ports. The same paths stay
# writable and readable where the policy allows, and without the rules the reads succeed, so the
# refusals are Landlock's.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"
workdir

mkdir "$WORK/solutions"
echo "the reference solution" >"$WORK/solutions/answer"
sol=(--bind "$WORK/solutions:/solutions")

# The default policy: the whole overlay is writable.
check_status 0 sb_run -- /bin/sh -c 'echo x >/x && echo y >/usr/bin/y && rm /usr/bin/y && cat /x' >"$WORK/out"
check grep -qx x "$WORK/out"

# writable = /tmp only: system binaries and /etc refuse writes; /tmp takes them.
check attack --set writable=/tmp -- landlock /usr/bin/python3.11 /bin/sh /etc/passwd
check_status 0 sb_run --set writable=/tmp -- /bin/sh -c 'echo ok >/tmp/f && cat /tmp/f' >"$WORK/out"
check grep -qx ok "$WORK/out"
# read_only under a writable tree: /usr refuses, /etc beside it still takes writes.
check attack --set read_only=/usr -- landlock /usr/bin/python3.11 /usr/lib/os-release
check_status 0 sb_run --set read_only=/usr -- /bin/sh -c 'echo ok >/etc/f && cat /etc/f' >"$WORK/out"
check grep -qx ok "$WORK/out"

# Hidden paths: readable without the rule, refused with it, also through io_uring.
check_status 0 sb_run "${sol[@]}" -- cat /solutions/answer /etc/hostname >/dev/null
check attack "${sol[@]}" --set hide=/solutions --set hide=/etc/hostname -- \
	landlock hidden:/solutions/answer hidden:/etc/hostname
check attack "${sol[@]}" --set io_uring=true --set hide=/solutions --set hide=/etc/hostname \
	--set read_only=/usr -- \
	uring OK:/etc/passwd OK:w:/tmp/ring /etc/hostname /solutions/answer w:/usr/bin/ring \
	w:/usr/bin/python3.11
# Only the names: the hidden directory lists as nothing.
check_not sb_run "${sol[@]}" --set hide=/solutions -- ls /solutions
# io_uring stays refused by seccomp unless the policy allows it.
check attack -- syscalls

# TCP ports: bind and connect only where the policy lists them.
check_status 0 sb_run --set tcp_bind=8080 --set tcp_connect=8080 -- python3 -c '
import errno, socket, sys
def refused(f):
    try:
        f()
    except PermissionError:
        return True
    except OSError as e:
        print("unexpected", e)
    return False
s = socket.socket(); s.bind(("127.0.0.1", 8080)); s.listen()
c = socket.socket(); c.connect(("127.0.0.1", 8080))
ok = refused(lambda: socket.socket().bind(("127.0.0.1", 8081)))
ok &= refused(lambda: socket.socket().connect(("127.0.0.1", 22)))
sys.exit(0 if ok else 1)'

# Bad values name the field.
check_status 125 sb_run --set writable=relative -- true
check_status 125 sb_run --set tcp_bind=70000 -- true
check_status 125 sb_run --set read_only=/no/such/path -- true
check_status 125 sb_run --set landlock=false --set hide=/etc/hostname -- true
check sb_no_leftovers
