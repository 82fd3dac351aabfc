"""The Python client (clients/python) against a real node, run by
tests/integration/client_python.sh, which starts the node and a listener on the host and
passes them in the environment:

  LAZYROOT_SOCKET  the node's control socket (the API's socket is found beside it)
  LAZYROOT         the lazyroot binary under test (node status, for the worker's pid)
  ROOTFS           the Debian root filesystem fixture
  SB_NAME, SB_UID_BASE   this test's sandbox names and host id range
  ALLOWED_PORT     a port on the host that answers every connection

The episode of issue 32: create, put a tree, 50 execs (one over its timeout, one over its
output limit, one whose child outlives it), a stage change that refuses a connection allowed
before, get a tar, destroy.  A step whose route the node does not serve yet is skipped with a
line saying so (SKIP: ...), never passed.  What is left on the host after destroy is checked
by the shell script.
"""
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
import time
import unittest

import lazyroot

ROOTFS = os.environ["ROOTFS"]
SB_NAME = os.environ["SB_NAME"]
UID_BASE = os.environ["SB_UID_BASE"]
PORT = int(os.environ["ALLOWED_PORT"])
LAZYROOT = os.environ["LAZYROOT"]
NOTES = os.environ.get("CLIENT_NOTES")    # the shell script reads the ids of what was made

# connect to the sandbox's gateway (the host side of its veth) on a port; print ok or the errno
CONNECT = r"""
import errno, socket, struct, sys
gw = "127.0.0.1"
for line in open("/proc/net/route").readlines()[1:]:
    f = line.split()
    if f[1] == "00000000":
        gw = socket.inet_ntoa(struct.pack("<I", int(f[2], 16)))
s = socket.socket()
s.settimeout(5)
try:
    s.connect((gw, int(sys.argv[1])))
    print("ok")
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno))
"""

# the pids of processes whose command line holds argv[1], as the sandbox sees them
PGREP = r"""
import os, sys
me = str(os.getpid())
for p in os.listdir("/proc"):
    if p.isdigit() and p != me:
        try:
            cmd = open("/proc/%s/cmdline" % p, "rb").read().replace(b"\0", b" ")
        except OSError:
            continue
        if sys.argv[1].encode() in cmd:
            print(p)
"""


def skip_step(what, e):
    """A route this node does not serve yet: say so on stderr, loudly."""
    print("SKIP: %s: the node does not serve it yet (%d %s)" % (what, e.status, e.message),
          file=sys.stderr, flush=True)


def not_served(e):
    """The error of a route or a field the node does not have (as opposed to a refusal)."""
    m = e.message
    return (e.status in (404, 405) and m.startswith("/v1/") and
            (m.endswith(": not found") or "method not allowed" in m)) or \
        (e.status == 400 and "not served by the API" in m)


T0 = time.monotonic()


def step(what):
    """A line on stderr per step, with the time since the start (a slow step shows)."""
    print("%6.2fs %s" % (time.monotonic() - T0, what), file=sys.stderr, flush=True)


def note(key, value):
    if NOTES:
        with open(NOTES, "a") as f:
            f.write("%s %s\n" % (key, value))


def worker_pid():
    out = subprocess.run([LAZYROOT, "node", "status", "--json"], check=True, timeout=60,
                         capture_output=True).stdout
    return json.loads(out)["pid"]


def task_tar():
    """The task tree put into the sandbox: a file, an executable script, a nested file."""
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data, mode in (("README", b"the task\n", 0o644),
                                 ("run.sh", b"#!/bin/sh\necho ran \"$@\"\n", 0o755),
                                 ("src/lib/x.txt", b"x" * 10000, 0o600)):
            i = tarfile.TarInfo(name)
            i.size, i.mode, i.mtime = len(data), mode, 1700000000
            t.addfile(i, io.BytesIO(data))
    return b.getvalue()


class Episode(unittest.TestCase):
    maxDiff = None

    def setUp(self):
        self.c = lazyroot.Client(timeout=120)
        self.policy = {"uid_base": UID_BASE, "pool": "false", "tcp_connect": str(PORT),
                       "stage.open.allow": "host:%d" % PORT, "stage.closed.allow": ""}

    def test_episode(self):
        c = self.c
        self.assertEqual(c.version()["api"], "v1")
        name = SB_NAME + "-1"
        with c.sandbox(rootfs=ROOTFS, name=name, policy=self.policy,
                       labels={"test": "client_python"}, ttl=600) as sb:
            self.assertEqual(sb.id, name)
            note("sandbox", sb.id)
            info = sb.get()
            self.assertEqual(info["state"], "running")
            note("init_pid", info["init_pid"])
            netns = os.readlink("/proc/%d/ns/net" % info["init_pid"])
            self.assertNotEqual(netns, os.readlink("/proc/self/ns/net"))
            note("netns", netns)
            self.assertEqual([s["id"] for s in c.list(label="test=client_python")], [name])
            self.assertEqual(c.list(label="test=none"), [])

            step("put a tree")
            tree = True
            try:
                got = sb.put_tar("/task", task_tar())
                self.assertEqual((got["path"], got["entries"]), ("/task", 3))
            except lazyroot.Error as e:
                if not not_served(e):
                    raise
                skip_step("PUT /v1/sandboxes/{id}/tar (put a tree)", e)
                tree = False
            if tree:
                e = sb.run(["sh", "-c", "cat /task/README; /task/run.sh a b; "
                            "wc -c </task/src/lib/x.txt; stat -c %a /task/run.sh"])
                self.assertEqual(e.stdout, b"the task\nran a b\n10000\n755\n")
                self.assertTrue(e.result().ok)

            step("50 execs")
            n = 0
            for i in range(46):
                if i % 2:
                    e = sb.run(["sh", "-c", "echo out %d; echo err %d >&2; exit %d" % (i, i, i % 7)])
                else:
                    e = sb.exec(["sh", "-c", "echo out %d; echo err %d >&2; exit %d" % (i, i, i % 7)],
                                exec_id="step-%d" % i)
                    self.assertFalse(e.existed)
                r = e.result()
                self.assertEqual((r.status, r.signal, r.killed_by, r.truncated),
                                 (i % 7, 0, None, False))
                self.assertEqual((e.stdout, e.stderr), (b"out %d\n" % i, b"err %d\n" % i))
                n += 1
            # a retried exec id runs nothing again
            again = sb.exec(["sh", "-c", "echo twice >>/tmp/twice"], exec_id="step-0")
            self.assertTrue(again.existed)
            self.assertEqual(again.stdout, b"out 0\n")

            step("over its timeout: killed_by time, its whole tree gone")
            t0 = time.monotonic()
            e = sb.run(["sh", "-c", "sleep 1001 & sleep 1002 & echo started; wait"],
                       timeout=1.0)
            r = e.result()
            n += 1
            self.assertEqual(r.killed_by, "time")
            self.assertEqual(e.stdout, b"started\n")
            self.assertLess(time.monotonic() - t0, 30)
            left = sb.run(["python3", "-c", PGREP, "sleep 100"])
            self.assertEqual(left.stdout, b"", "the timed-out exec's children outlived it")
            self.assertTrue(left.result().ok)
            n += 1

            step("over its output limit: truncated, exactly the limit kept")
            e = sb.run(["sh", "-c", "yes; echo unreachable >&2"], output_limit=100000)
            r = e.result()
            n += 1
            self.assertTrue(r.truncated)
            self.assertEqual(r.killed_by, "output")
            self.assertEqual(len(e.stdout) + len(e.stderr), 100000)
            self.assertEqual(e.stdout[:8], b"y\ny\ny\ny\n")

            step("a child that outlives its exec")
            e = sb.run(["sh", "-c", "setsid sleep 1003 </dev/null >/dev/null 2>&1 & echo $!"],
                       timeout=60)
            r = e.result()
            n += 1
            self.assertTrue(r.ok)
            self.assertLess(r.wall_seconds, 30)
            child = int(e.stdout)
            alive = sb.run(["python3", "-c", PGREP, "sleep 1003"])
            self.assertEqual(alive.stdout, b"%d\n" % child)
            self.assertEqual(n, 50)

            step("re-attach after the worker's kill -9")
            e = sb.exec(["sh", "-c", "for i in $(seq 1 20); do echo line $i; sleep 0.1; done"])
            got, killed = [], False
            for fr in e:
                got.append(fr.data)
                if not killed:
                    os.kill(worker_pid(), 9)
                    killed = True
            self.assertTrue(e.reattached >= 1, "the stream was never re-attached")
            self.assertEqual(b"".join(got), b"".join(b"line %d\n" % i for i in range(1, 21)))
            self.assertTrue(e.result().ok)
            # the node, served by the next worker, still has every exec
            self.assertEqual(c.exec_get(sb.id, "step-2")["status"], 2)

            step("stdin")
            try:
                e = sb.run(["sh", "-c", "tr a-z A-Z; echo end"], stdin=b"some input\n",
                           timeout=30)
                self.assertEqual(e.stdout, b"SOME INPUT\nend\n")
            except lazyroot.Error as e:
                if not not_served(e):
                    raise
                skip_step("\"stdin\": \"pipe\" and PUT .../stdin", e)

            step("a stage change refuses a connection allowed before")
            before = sb.run(["python3", "-c", CONNECT, str(PORT)])
            self.assertEqual(before.stdout, b"ok\n")
            self.assertEqual(sb.stage("closed"), "closed")
            self.assertEqual(sb.get()["stage"], "closed")
            after = sb.run(["python3", "-c", CONNECT, str(PORT)])
            self.assertEqual(after.stdout, b"EPERM\n")
            with self.assertRaises(lazyroot.Error) as cm:
                sb.stage("no-such-stage")
            self.assertGreaterEqual(cm.exception.status, 400)

            step("get a tar")
            if tree:
                sb.run(["sh", "-c", "echo graded >/task/grade.txt"])
                t = tarfile.open(fileobj=io.BytesIO(sb.get_tar("/task")))
                names = {m.name.lstrip("./").rstrip("/"): m for m in t.getmembers()}
                self.assertIn("grade.txt", {k.split("/")[-1] for k in names})
                member = [m for k, m in names.items() if k.endswith("grade.txt")][0]
                self.assertEqual(t.extractfile(member).read(), b"graded\n")
                member = [m for k, m in names.items() if k.endswith("src/lib/x.txt")][0]
                self.assertEqual(t.extractfile(member).read(), b"x" * 10000)
            else:
                try:
                    sb.get_tar("/tmp")
                except lazyroot.Error as e:
                    if not not_served(e):
                        raise
                    skip_step("GET /v1/sandboxes/{id}/tar (get a tar)", e)
                else:
                    self.fail("GET tar is served but PUT tar was not")
        step("destroyed")
        with self.assertRaises(lazyroot.Error) as cm:
            c.get(name)
        self.assertEqual(cm.exception.status, 404)
        c.destroy(name)   # already gone: no error

    def test_errors(self):
        c = self.c
        with self.assertRaises(lazyroot.Error) as cm:
            c.get("no-such-sandbox")
        self.assertEqual(cm.exception.status, 404)
        self.assertIn("no-such-sandbox", cm.exception.message)
        with self.assertRaises(lazyroot.Error) as cm:
            c.create(rootfs=ROOTFS, policy={"no_such_field": "1"}, name=SB_NAME + "-bad")
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("no_such_field", cm.exception.message)
        with self.assertRaises(lazyroot.Error) as cm:
            c.exec("no-such-sandbox", ["true"])
        self.assertEqual(cm.exception.status, 404)
        # an API nobody serves: status 0, the socket named, after the retry time
        dead = lazyroot.Client(api=os.environ["WORK"] + "/nothing.sock", retry_seconds=0.2)
        with self.assertRaises(lazyroot.Error) as cm:
            dead.version()
        self.assertEqual(cm.exception.status, 0)
        self.assertIn("nothing.sock", cm.exception.message)

    def test_threads(self):
        """One client shared by threads, each on a sandbox of its own."""
        c = self.c
        errors = []

        def episode(k):
            try:
                with c.sandbox(rootfs=ROOTFS, name="%s-t%d" % (SB_NAME, k),
                               policy={"uid_base": UID_BASE}) as sb:
                    for i in range(5):
                        e = sb.run(["echo", str(k), str(i)])
                        if e.stdout != b"%d %d\n" % (k, i) or not e.result().ok:
                            errors.append("sandbox %d exec %d: %r" % (k, i, e.stdout))
            except Exception as e:  # the test's verdict below
                errors.append("sandbox %d: %r" % (k, e))

        ts = [threading.Thread(target=episode, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
