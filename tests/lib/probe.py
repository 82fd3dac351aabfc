# What a process inside a sandbox sees of its own confinement, one line per fact, for
# tests/integration/sandbox_enter.sh to compare between processes started differently:
#   python3 probe.py HOST_PORT... -- PATH...
# prints its ids, capabilities, no_new_privs and seccomp (from /proc/self/status), its
# namespaces, rlimits and v1 cgroups as the sandbox shows them, and for each HOST_PORT a
# TCP connect to the sandbox's gateway (the host side of its veth) and for each PATH a read,
# each with the error it got.
import errno, os, socket, struct, sys

args = sys.argv[1:]
ports = args[:args.index("--")] if "--" in args else args
paths = args[args.index("--") + 1:] if "--" in args else []

keys = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
        "NoNewPrivs", "Seccomp", "Seccomp_filters")
for line in open("/proc/self/status"):
    k, _, v = line.partition(":")
    if k in keys:
        print("status", k, " ".join(v.split()))
for ns in sorted(os.listdir("/proc/self/ns")):
    print("ns", ns, os.readlink("/proc/self/ns/" + ns))
for line in open("/proc/self/limits"):
    print("limit", " ".join(line.split()))
for line in open("/proc/self/cgroup"):
    if not line.startswith("0::"):
        print("cgroup", line.strip())
print("root", os.stat("/").st_ino, "cwd", os.getcwd())


def gateway():
    for line in open("/proc/net/route").readlines()[1:]:
        f = line.split()
        if f[1] == "00000000":
            return socket.inet_ntoa(struct.pack("<I", int(f[2], 16)))
    return "127.0.0.1"


def err(e):
    return errno.errorcode.get(e.errno, str(e.errno))


gw = gateway()
for p in ports:
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((gw, int(p)))
        r = "ok"
    except OSError as e:
        r = err(e)
    s.close()
    print("connect", p, r)
for p in paths:
    try:
        open(p, "rb").read()
        r = "read"
    except OSError as e:
        r = err(e)
    print("read", p, r)
