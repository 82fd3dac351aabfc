#!/bin/bash
# The sandbox API's server under hostile use (docs/api.md), on a real node: each hostile
# client gets an error or is cut off, the node keeps serving, and a concurrent client's cheap
# requests keep their latency (p99 of GET /v1 during the attack against before it, in this run).
#
#  1. the node refuses to start with api_listen and no token file, or a token file others can
#     read, and leaves no socket behind;
#  2. the unix socket is 0600, and a non-root client is refused;
#  3. TCP: no token, a wrong one -> 401 with a JSON error; the right one -> 200;
#  4. garbage, a truncated head, a truncated body, a huge head, a huge declared body, an
#     unknown query parameter, an unknown sandbox id: each an error (4xx, or the connection
#     closed), the next request served;
#  5. 1,000 idle connections, a head trickled a byte at a time, and a client that pipelines
#     requests without reading their answers, all at once: the trickled head is cut off within
#     the head bound (10 s), the idle ones are closed, and GET /v1 on another connection keeps
#     its p99 (< 10x the p99 before plus 10 ms, in the best of three rounds);
#  6. the worker that served all this is the one that started (no crash), and still serves.
. "$(dirname "$0")/../lib/common.sh"
need_root
need_cmd curl python3
workdir
port=$(free_port)
export LAZYROOT_STORE=dir:$WORK/store LAZYROOT_CACHE=$WORK/cache LAZYROOT_IMAGES=$WORK/images
api=$WORK/node-api.sock
umask 077
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/token"
umask 022

# --- 1. refused configurations (bounded: a node that starts instead runs until killed)
out=$(LAZYROOT_API_LISTEN=127.0.0.1:$port timeout 60 "$LAZYROOT" node --socket "$WORK/bad.sock" 2>&1) && st=0 || st=$?
check test "$st" != 0
check grep -q "api_listen '127.0.0.1:$port': needs api_token_file" <<<"$out"
check test ! -e "$WORK/bad.sock"
check test ! -e "$WORK/bad-api.sock"
cp "$WORK/token" "$WORK/token.open"
chmod 644 "$WORK/token.open"
out=$(LAZYROOT_API_LISTEN=127.0.0.1:$port LAZYROOT_API_TOKEN_FILE=$WORK/token.open \
	timeout 60 "$LAZYROOT" node --socket "$WORK/bad.sock" 2>&1) && st=0 || st=$?
check test "$st" != 0
check grep -q "token.open': readable by others than its owner" <<<"$out"
check test ! -e "$WORK/bad.sock"

# --- the node, started in the foreground of a python helper that waits for its READY=1
export LAZYROOT_API_LISTEN=127.0.0.1:$port LAZYROOT_API_TOKEN_FILE=$WORK/token
python3 - "$LAZYROOT" "$WORK" "$port" <<'PY' >"$WORK/results" 2>"$WORK/py.err" || true
import json, os, socket, subprocess, sys, threading, time

lazyroot, work, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
api = work + "/node-api.sock"
token = open(work + "/token").read().strip()

def say(ok, what):
    print(("ok - " if ok else "FAIL - ") + what, flush=True)

notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
notify.bind(work + "/notify.sock")
notify.settimeout(60)
env = dict(os.environ, NOTIFY_SOCKET=work + "/notify.sock")
node = subprocess.Popen([lazyroot, "node", "--log", work + "/node.log"], env=env,
                        stdout=subprocess.DEVNULL, stderr=open(work + "/node.err", "w"))
try:
    ready = notify.recv(64)
except socket.timeout:
    ready = b""
say(ready == b"READY=1", "the node is ready")

def unix_conn():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(api)
    return s

def tcp_conn():
    return socket.create_connection(("127.0.0.1", port), timeout=20)

def exchange(data, conn=unix_conn, timeout=20, shut=False):
    """send data, read to EOF; the raw answer (b'' when closed without one)"""
    s = conn()
    s.settimeout(timeout)
    try:
        s.sendall(data)
        if shut:
            s.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            b = s.recv(65536)
            if not b:
                return out
            out += b
    except (ConnectionResetError, BrokenPipeError):
        return b""
    finally:
        s.close()

def status(ans):
    try:
        return int(ans.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0

def body_json(ans):
    try:
        return json.loads(ans.split(b"\r\n\r\n", 1)[1])
    except (IndexError, ValueError):
        return None

GET = b"GET /v1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
def serves(what):
    a = exchange(GET)
    say(status(a) == 200 and body_json(a) == {"api": "v1", "server": "lazyroot"},
        "still serves after " + what)

a = exchange(GET)
say(status(a) == 200 and body_json(a)["api"] == "v1", "GET /v1 over the unix socket")
say(b"Content-Type: application/json\r\n" in a, "answered as JSON")
def worker_pid():
    out = subprocess.run([lazyroot, "node", "status", "--json"], capture_output=True,
                         timeout=60, text=True).stdout
    return json.loads(out)["pid"]
pid0 = worker_pid()

# --- 2. the unix socket: root only
say(os.stat(api).st_mode & 0o777 == 0o600, "the API socket is 0600")
child = os.fork()
if child == 0:
    os.setgid(65534); os.setuid(65534)
    try:
        unix_conn()
        os._exit(1)
    except PermissionError:
        os._exit(0)
say(os.waitpid(child, 0)[1] == 0, "a non-root client cannot connect")
# past the mode too (were it opened up): refused on its credentials as it connects
os.chmod(api, 0o666)
os.chmod(work, 0o711)
child = os.fork()
if child == 0:
    os.setgid(65534); os.setuid(65534)
    os._exit(0 if exchange(GET) == b"" else 1)
say(os.waitpid(child, 0)[1] == 0, "a non-root client that connects gets no answer")
os.chmod(api, 0o600)
os.chmod(work, 0o700)
serves("a non-root client")

# --- 3. TCP and the token
a = exchange(GET, tcp_conn)
say(status(a) == 401 and "no bearer token" in (body_json(a) or {}).get("error", ""),
    "TCP without a token: 401 %r" % a[:12])
a = exchange(b"GET /v1/nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", tcp_conn)
say(status(a) == 401, "TCP without a token, an unknown path: 401, not 404")
a = exchange(b"GET /v1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token[:-1].encode() +
             b"0\r\nConnection: close\r\n\r\n", tcp_conn)
say(status(a) == 401 and "wrong bearer token" in (body_json(a) or {}).get("error", ""),
    "TCP with a wrong token: 401")
a = exchange(b"GET /v1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode() +
             b"\r\nConnection: close\r\n\r\n", tcp_conn)
say(status(a) == 200, "TCP with the token: 200")

# --- 4. bad requests
a = exchange(b"\x00\xff\x16\x03\x01garbage\r\n\r\n")
say(status(a) in (0, 400), "garbage: 400 or closed (%d)" % status(a))
serves("garbage")
a = exchange(b"GET /v1 HTTP/1.1\r\nHost: x\r\n", shut=True)
say(status(a) in (0, 400), "a truncated head: closed (%d)" % status(a))
serves("a truncated head")
a = exchange(b"PUT /v1 HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789", shut=True)
say(status(a) != 200, "a truncated body: no 200 (%d)" % status(a))
serves("a truncated body")
a = exchange(b"GET /v1 HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
say(status(a) in (0, 431), "a 20 kB head: 431 or closed (%d)" % status(a))
serves("a huge head")
a = exchange(b"POST /v1 HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000000\r\n"
             b"Connection: close\r\n\r\n")
say(status(a) == 413 and "larger than" in (body_json(a) or {}).get("error", ""),
    "a 2 GB declared body: 413 (%d)" % status(a))
serves("a huge body")
a = exchange(b"GET /v1?x=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
say(status(a) == 400 and "unknown query parameter 'x'" in body_json(a)["error"],
    "an unknown query parameter: 400")
a = exchange(b"GET /v1/sandboxes/no-such-sandbox HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
say(status(a) == 404 and "error" in (body_json(a) or {}), "an unknown sandbox id: 404 (%d)" % status(a))
a = exchange(b"DELETE /v1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
say(status(a) == 405 and b"Allow: GET\r\n" in a, "a wrong method: 405 with Allow")

# --- 5. latency of a cheap route without and with the attack, on one kept-alive connection
def p99(n):
    s = unix_conn()
    s.settimeout(20)
    req = b"GET /v1 HTTP/1.1\r\nHost: x\r\n\r\n"
    times = []
    for _ in range(n):
        t = time.monotonic()
        s.sendall(req)
        buf = b""
        while not (b"\r\n\r\n" in buf and buf.endswith(b"}\n")):
            b = s.recv(65536)
            if not b:
                raise RuntimeError("closed")
            buf += b
        times.append(time.monotonic() - t)
    s.close()
    times.sort()
    return times[int(len(times) * 0.99) - 1], times[len(times) // 2]

before = p99(400)
idle = [unix_conn() for _ in range(1000)]
trickle = unix_conn()
trickle_cut = []
def trickler():
    t = time.monotonic()
    try:
        for i in range(200):
            trickle.send(b"GET /v1 HTTP/1.1\r\nX-Slow: "[i:i + 1] or b"a")
            trickle.settimeout(0.5)
            try:
                if trickle.recv(1) == b"":
                    break
            except socket.timeout:
                pass
    except (BrokenPipeError, ConnectionResetError):
        pass
    trickle_cut.append(time.monotonic() - t)
tt = threading.Thread(target=trickler); tt.start()
hog = unix_conn()
hog.setblocking(False)
sent = 0
try:
    while sent < 64 << 20:
        sent += hog.send(b"GET /v1 HTTP/1.1\r\nHost: x\r\n\r\n" * 512)
except BlockingIOError:
    pass
# a neighbour's burst on a loaded two-core machine can move one round's p99 by tens of ms: the
# attack is judged by the best of up to three rounds, each of which it slows alike
for _ in range(3):
    during = p99(400)
    if during[0] < 10 * before[0] + 0.010:
        break
tt.join()
say(trickle_cut and trickle_cut[0] < 16, "a trickled head cut off in %.1f s" % trickle_cut[0])
print("p99/p50 of GET /v1: before %.2f/%.2f ms, during 1000 idle + trickle + a reader that "
      "never reads %.2f/%.2f ms" % (before[0] * 1e3, before[1] * 1e3, during[0] * 1e3,
                                    during[1] * 1e3), file=sys.stderr)
say(during[0] < 10 * before[0] + 0.010, "p99 during the attack %.2f ms, before %.2f ms"
    % (during[0] * 1e3, before[0] * 1e3))
closed = 0
for s in idle:
    s.settimeout(30)
    try:
        closed += s.recv(1) == b""
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
say(closed == 1000, "the 1000 idle connections were closed (%d)" % closed)
hog.close()
trickle.close()

# --- 6.
serves("the attack")
say(worker_pid() == pid0, "the same worker served it all")
subprocess.run([lazyroot, "node", "stop"], timeout=150, capture_output=True)
node.wait(timeout=60)
say(not os.path.exists(api), "the API socket is gone with the node")
PY
cat "$WORK/py.err" >&2
while read -r line; do
	case $line in
	"ok - "*) check true "${line#ok - }" ;;
	*) check false "${line#FAIL - }" ;;
	esac
done <"$WORK/results"
check test "$(grep -c '^ok - ' "$WORK/results")" -ge 30
