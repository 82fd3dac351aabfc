"""Typed calls for every route of docs/api.md, a Sandbox that destroys itself in a with block,
and an Exec whose output is followed across dropped connections by byte offset.

Every exec carries an exec id (the caller's, else one made here), so that a POST the client
must send again after a dropped connection runs the command once: the node answers the
second with the exec that exists.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from ._http import Body, Error, Transport, _DROPPED, _why
from .stream import RESULT, STDERR, STDOUT, Frame, StreamError, read_frames

PolicyValue = Union[str, int, bool, Sequence[str]]

WAIT_MAX = 600.0   # the longest ?wait= the node takes


@dataclass(frozen=True)
class Result:
    """An ended exec (result.json): ``status`` the exit status, ``signal`` the signal that
    ended it (0: none), ``killed_by`` None or "time", "output", "memory", "pids", "sandbox"."""
    exec_id: str
    status: int
    signal: int
    killed_by: Optional[str]
    wall_seconds: float
    cpu_seconds: float
    stdout_bytes: int
    stderr_bytes: int
    truncated: bool
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> "Result":
        return cls(exec_id=d.get("exec_id", ""), status=int(d.get("status") or 0),
                   signal=int(d.get("signal") or 0), killed_by=d.get("killed_by"),
                   wall_seconds=float(d.get("wall_seconds") or 0),
                   cpu_seconds=float(d.get("cpu_seconds") or 0),
                   stdout_bytes=int(d.get("stdout_bytes") or 0),
                   stderr_bytes=int(d.get("stderr_bytes") or 0),
                   truncated=bool(d.get("truncated")), raw=dict(d))

    @property
    def ok(self) -> bool:
        """It exited 0 and nothing killed it."""
        return self.status == 0 and self.signal == 0 and self.killed_by is None

    @property
    def exit_code(self) -> int:
        """As a shell reports it: the status, 128+N for signal N."""
        return 128 + self.signal if self.signal else self.status


class Exec:
    """A command started in a sandbox.  Iterating it yields its output's frames (stdout and
    stderr, as produced) from where the last iteration stopped, following until the exec ends;
    a dropped connection is re-attached from the byte counts received.  ``result()`` waits
    for the end; ``stdout``/``stderr`` are the whole output, read once it has ended."""

    def __init__(self, client: "Client", sandbox_id: str, exec_id: str, existed: bool = False):
        self.client = client
        self.sandbox_id = sandbox_id
        self.exec_id = exec_id
        self.existed = existed
        self.offsets = {STDOUT: 0, STDERR: 0}
        self._result: Optional[Result] = None
        self._out: Optional[bytes] = None
        self._err: Optional[bytes] = None
        self._first = None            # an attached POST's answer, read first
        self._stdin: Optional[threading.Thread] = None
        self._stdin_error: Optional[BaseException] = None
        self.reattached = 0           # how many times a dropped stream was asked for again

    def __repr__(self) -> str:
        return "Exec(%r, %r)" % (self.sandbox_id, self.exec_id)

    def __iter__(self) -> Iterator[Frame]:
        return self.frames()

    def frames(self, follow: bool = True) -> Iterator[Frame]:
        """Output frames from the current offsets.  follow=False stops at what there is now;
        follow=True goes on to the result (then ``result()`` answers without a request)."""
        deadline = None
        while True:
            r = self._first
            self._first = None
            try:
                if r is None:
                    r = self.client._t.request(
                        "GET", self._path("/output"),
                        {"stdout": self.offsets[STDOUT], "stderr": self.offsets[STDERR],
                         "follow": 1 if follow else None}, stream=True)
                try:
                    for fr in read_frames(r):
                        if fr.stream == RESULT:
                            self._result = Result.of(fr.result())
                            return
                        self.offsets[fr.stream] += len(fr.data)
                        yield fr
                finally:
                    r.close()
                    getattr(r, "_lazyroot_conn", r).close()
                if not follow:
                    return
            except _DROPPED as e:
                why = _why(e)
            except StreamError as e:
                why = str(e)
            except Error as e:
                if e.status != 0:
                    raise
                why = e.message
            else:
                why = "the stream ended before the result"
            # cut: ask again from the offsets, for as long as the transport would retry
            now = time.monotonic()
            if deadline is None:
                deadline = now + self.client._t.retry_seconds
            elif now > deadline:
                raise Error(0, "exec '%s' of sandbox '%s': output: %s"
                            % (self.exec_id, self.sandbox_id, why))
            self.reattached += 1

    def result(self, timeout: Optional[float] = None) -> Result:
        """Wait for the exec to end (at most timeout seconds; None: as long as it takes) and
        return its result.  Raises Error 0 when the timeout passes first."""
        if self._result is None:
            end = None if timeout is None else time.monotonic() + timeout
            while self._result is None:
                w = WAIT_MAX if end is None else max(0.0, min(WAIT_MAX, end - time.monotonic()))
                d = self.client.exec_get(self.sandbox_id, self.exec_id, wait=w)
                if "status" in d:
                    self._result = Result.of(d)
                elif end is not None and time.monotonic() >= end:
                    raise Error(0, "exec '%s' of sandbox '%s': still running after %gs"
                                % (self.exec_id, self.sandbox_id, timeout))
        self._join_stdin()
        return self._result

    def wait(self, timeout: Optional[float] = None) -> Result:
        """The same as result()."""
        return self.result(timeout)

    def output(self) -> "tuple[bytes, bytes]":
        """(stdout, stderr), whole: follows the exec to its end first."""
        if self._out is None:
            out, err = [], []
            if self.offsets[STDOUT] or self.offsets[STDERR]:
                self.offsets = {STDOUT: 0, STDERR: 0}
            for fr in self.frames():
                (out if fr.stream == STDOUT else err).append(fr.data)
            self._out, self._err = b"".join(out), b"".join(err)
            self._join_stdin()
        return self._out, self._err  # type: ignore[return-value]

    @property
    def stdout(self) -> bytes:
        """The exec's whole stdout (as kept: up to its output limit)."""
        return self.output()[0]

    @property
    def stderr(self) -> bytes:
        """The exec's whole stderr (as kept: up to its output limit)."""
        return self.output()[1]

    def _path(self, tail: str = "") -> str:
        return "/v1/sandboxes/%s/execs/%s%s" % (self.sandbox_id, self.exec_id, tail)

    def _send_stdin(self, data: Body) -> None:
        def run() -> None:
            try:
                self.client.put_stdin(self.sandbox_id, self.exec_id, data)
            except BaseException as e:  # handed to result()
                self._stdin_error = e
        self._stdin = threading.Thread(target=run, name="lazyroot-stdin", daemon=True)
        self._stdin.start()

    def _join_stdin(self) -> None:
        if self._stdin is not None:
            self._stdin.join()
            self._stdin = None
            if self._stdin_error is not None:
                e, self._stdin_error = self._stdin_error, None
                raise e


class Sandbox:
    """One sandbox of a node: the client's calls with its id filled in.  Used as a context
    manager (``with client.sandbox(...) as sb:``) it is destroyed when the block ends, however
    it ends."""

    def __init__(self, client: "Client", id: str, info: Optional[Dict[str, Any]] = None):
        self.client = client
        self.id = id
        self.info = info or {"id": id}

    def __repr__(self) -> str:
        return "Sandbox(%r)" % self.id

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.destroy()

    def get(self) -> Dict[str, Any]:
        """The sandbox's state (GET /v1/sandboxes/{id})."""
        return self.client.get(self.id)

    def destroy(self) -> None:
        """Kill everything in it and tear it down; no error when it is already gone."""
        self.client.destroy(self.id)

    def exec(self, argv: Sequence[str], **kw: Any) -> Exec:
        """Start argv (Client.exec's keywords); returns at once."""
        return self.client.exec(self.id, argv, **kw)

    def run(self, argv: Sequence[str], **kw: Any) -> Exec:
        """Run argv to its end, its output read (Client.run's keywords)."""
        return self.client.run(self.id, argv, **kw)

    def put_file(self, path: str, data: Body, mode: Optional[int] = None,
                 parents: bool = False) -> Dict[str, Any]:
        """Client.put_file in this sandbox."""
        return self.client.put_file(self.id, path, data, mode=mode, parents=parents)

    def get_file(self, path: str) -> bytes:
        """Client.get_file in this sandbox."""
        return self.client.get_file(self.id, path)

    def get_file_to(self, path: str, out: BinaryIO) -> "FileInfo":
        """Client.get_file_to in this sandbox."""
        return self.client.get_file_to(self.id, path, out)

    def put_tar(self, path: str, data: Body) -> Dict[str, Any]:
        """Client.put_tar in this sandbox."""
        return self.client.put_tar(self.id, path, data)

    def get_tar(self, path: str) -> bytes:
        """Client.get_tar in this sandbox."""
        return self.client.get_tar(self.id, path)

    def get_tar_to(self, path: str, out: BinaryIO) -> int:
        """Client.get_tar_to in this sandbox."""
        return self.client.get_tar_to(self.id, path, out)

    def stage(self, stage: str) -> Optional[str]:
        """Client.stage in this sandbox."""
        return self.client.stage(self.id, stage)


@dataclass(frozen=True)
class FileInfo:
    """A file read out of a sandbox: its path there, bytes written and mode (None when the
    node did not say)."""
    path: str
    bytes: int
    mode: Optional[int]


class Client:
    """A client of one node's API.

    api: a unix socket path or http://HOST:PORT (default: $LAZYROOT_API, else the socket
    beside $LAZYROOT_SOCKET's, else /run/lazyroot/node-api.sock).  token_file: a file whose
    first line is the bearer token, for TCP.  timeout: seconds a request may stay silent.
    retry_seconds: how long a request that could not reach the node (or a stream that was
    cut) is tried again.  Safe to share between threads.
    """

    def __init__(self, api: Optional[str] = None, token_file: Optional[str] = None,
                 timeout: float = 60.0, retry_seconds: float = 30.0):
        self._t = Transport(api, token_file, timeout=timeout, retry_seconds=retry_seconds)

    @property
    def api(self) -> str:
        """Where this client sends its requests."""
        return self._t.api

    def close(self) -> None:
        """Close the calling thread's kept-alive connection."""
        self._t.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _json(self, method: str, path: str, body: Any = None,
              query: Optional[Mapping[str, Any]] = None, idempotent: bool = True,
              timeout: Optional[float] = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        h = {"Content-Type": "application/json"} if data is not None else {}
        r = self._t.request(method, path, query, data, h, idempotent=idempotent,
                            timeout=timeout)
        if not r.data:  # type: ignore[attr-defined]
            return None
        try:
            return json.loads(r.data)  # type: ignore[attr-defined]
        except ValueError:
            raise Error(r.status, "%s %s: the answer is not JSON" % (method, path)) from None

    # --- GET /v1

    def version(self) -> Dict[str, Any]:
        """What serves the API: {"api": "v1", "server": ...}."""
        return self._json("GET", "/v1")

    # --- sandboxes

    def create(self, rootfs: Optional[str] = None, image: Optional[str] = None, *,
               name: Optional[str] = None, policy: Optional[Mapping[str, PolicyValue]] = None,
               labels: Optional[Mapping[str, str]] = None, ttl: Optional[float] = None,
               idle_timeout: Optional[float] = None, store: Optional[str] = None) -> Sandbox:
        """Create a sandbox from rootfs (an absolute directory on the node) or image (NAME:TAG),
        and wait until its init is ready.  policy holds the fields of sandbox/POLICY.md (a list
        for a field given more than once); ttl and idle_timeout are seconds (0: none).  Not
        sent again after a dropped connection: a create that did happen would be refused as a
        name taken."""
        if (rootfs is None) == (image is None):
            raise Error(0, "create: give one of rootfs and image")
        body: Dict[str, Any] = {}
        for k, v in (("rootfs", rootfs), ("image", image), ("store", store), ("name", name),
                     ("ttl", ttl), ("idle_timeout", idle_timeout)):
            if v is not None:
                body[k] = v
        if policy:
            body["policy"] = {k: _policy_value(v) for k, v in policy.items()}
        if labels:
            body["labels"] = dict(labels)
        d = self._json("POST", "/v1/sandboxes", body, idempotent=False)
        return Sandbox(self, d["id"], d)

    def sandbox(self, rootfs: Optional[str] = None, image: Optional[str] = None,
                **kw: Any) -> Sandbox:
        """create(), for a with block: ``with client.sandbox(rootfs=R) as sb:`` destroys the
        sandbox when the block ends."""
        return self.create(rootfs, image, **kw)

    def get(self, id: str) -> Dict[str, Any]:
        """A sandbox's state: its record, "state" (running, ended), "stage", "idle_seconds",
        resource use while it runs, "ended" (why, or None).  Error 404 for an unknown id."""
        return self._json("GET", "/v1/sandboxes/" + _seg(id))

    def list(self, label: Optional[str] = None) -> List[Dict[str, Any]]:
        """Every sandbox of the node as get() gives them; label="KEY=VALUE" keeps those with
        that label."""
        return self._json("GET", "/v1/sandboxes", query={"label": label})["sandboxes"]

    def destroy(self, id: str) -> None:
        """Kill everything in the sandbox and tear it down; no error when it is gone."""
        self._json("DELETE", "/v1/sandboxes/" + _seg(id))

    def stage(self, id: str, stage: str) -> Optional[str]:
        """Switch the sandbox to a stage of its policy (stages only tighten); returns the stage
        in force."""
        return self._json("POST", "/v1/sandboxes/%s/stage" % _seg(id), {"stage": stage})["stage"]

    # --- execs

    def exec(self, id: str, argv: Sequence[str], *, exec_id: Optional[str] = None,
             env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
             user: Optional[str] = None, timeout: Optional[float] = None,
             output_limit: Optional[int] = None, stdin: Body = None,
             attach: bool = False) -> Exec:
        """Start argv (no shell unless argv runs one) in sandbox id and return its Exec at
        once.  exec_id names it (made here when None): a second call with the same id runs
        nothing and returns the exec that exists (``existed``).  timeout is seconds (the whole
        exec is killed at it), output_limit bytes kept of stdout and stderr (0: the policy's).
        stdin (bytes, a binary file or an iterable of bytes) is sent as the exec's stdin on a
        connection of its own; None: no stdin.  attach=True asks for the output stream in the
        same request (iterate the Exec to read it)."""
        eid = exec_id or "c-" + uuid.uuid4().hex
        body: Dict[str, Any] = {"exec_id": eid, "argv": list(argv)}
        for k, v in (("env", dict(env) if env else None), ("cwd", cwd), ("user", user),
                     ("timeout", timeout), ("output_limit", output_limit)):
            if v is not None:
                body[k] = v
        if stdin is not None:
            body["stdin"] = "pipe"
        data = json.dumps(body).encode()
        path = "/v1/sandboxes/%s/execs" % _seg(id)
        h = {"Content-Type": "application/json"}
        if attach:
            r = self._t.request("POST", path, {"attach": 1}, data, h, stream=True)
            e = Exec(self, id, eid)
            e._first = r
        else:
            r = self._t.request("POST", path, None, data, h)
            d = json.loads(r.data)  # type: ignore[attr-defined]
            e = Exec(self, id, d.get("exec_id", eid), bool(d.get("existed")))
        if stdin is not None:
            e._send_stdin(stdin)
        return e

    def run(self, id: str, argv: Sequence[str], **kw: Any) -> Exec:
        """exec() with attach=True, its output read to the end: the returned Exec has its
        ``stdout``, ``stderr`` and ``result()`` at hand."""
        e = self.exec(id, argv, attach=True, **kw)
        e.output()
        return e

    def exec_get(self, id: str, exec_id: str, wait: Optional[float] = None) -> Dict[str, Any]:
        """The exec's result.json once it has ended, else {"state": "running", ...}; wait
        seconds (up to 600) for the end first."""
        return self._json("GET", "/v1/sandboxes/%s/execs/%s" % (_seg(id), _seg(exec_id)),
                          query={"wait": _num(wait) if wait else None},
                          timeout=None if not wait else self._t.timeout + wait)

    def attach(self, id: str, exec_id: str) -> Exec:
        """An Exec for an exec started earlier (by this client or another), to follow its
        output or wait for it."""
        return Exec(self, id, exec_id, True)

    def output(self, id: str, exec_id: str, stdout: int = 0, stderr: int = 0,
               follow: bool = False) -> Iterator[Frame]:
        """The output stream's frames from those byte offsets, once (no re-attach: see Exec),
        the result frame last when the stream reached it."""
        r = self._t.request("GET", "/v1/sandboxes/%s/execs/%s/output" % (_seg(id), _seg(exec_id)),
                            {"stdout": stdout, "stderr": stderr, "follow": 1 if follow else None},
                            stream=True)
        try:
            yield from read_frames(r)
        finally:
            r.close()
            r._lazyroot_conn.close()  # type: ignore[attr-defined]

    def put_stdin(self, id: str, exec_id: str, data: Body) -> None:
        """Send data as the stdin of an exec started with stdin (once; the pipe is closed at
        its end)."""
        self._t.request("PUT", "/v1/sandboxes/%s/execs/%s/stdin" % (_seg(id), _seg(exec_id)),
                        body=data if data is not None else b"",
                        headers={"Content-Type": "application/octet-stream"}, idempotent=False)

    # --- files

    def put_file(self, id: str, path: str, data: Body, mode: Optional[int] = None,
                 parents: bool = False) -> Dict[str, Any]:
        """Write data (bytes, a binary file or an iterable of bytes) as the file at path (absolute,
        in the sandbox), mode as an int (0o644), parents made when asked.  Returns {"path",
        "bytes"}."""
        q = {"path": path, "mode": "%o" % mode if mode is not None else None,
             "parents": 1 if parents else None}
        r = self._t.request("PUT", "/v1/sandboxes/%s/files" % _seg(id), q, data,
                            {"Content-Type": "application/octet-stream"})
        return json.loads(r.data) if r.data else {}  # type: ignore[attr-defined]

    def get_file(self, id: str, path: str) -> bytes:
        """The bytes of the file at path in the sandbox."""
        import io
        b = io.BytesIO()
        self.get_file_to(id, path, b)
        return b.getvalue()

    def get_file_to(self, id: str, path: str, out: BinaryIO) -> FileInfo:
        """Copy the file at path in the sandbox into out; returns its size and mode."""
        r = self._t.request("GET", "/v1/sandboxes/%s/files" % _seg(id), {"path": path},
                            stream=True)
        n = _copy(r, out, "GET %s" % path)
        m = r.getheader("X-Lazyroot-Mode")
        return FileInfo(path, n, int(m, 8) if m else None)

    def put_tar(self, id: str, path: str, data: Body) -> Dict[str, Any]:
        """Unpack a tar stream (ustar or pax: bytes, a binary file or an iterable) under the
        directory path in the sandbox, made when missing.  Returns {"path", "entries",
        "bytes"}."""
        r = self._t.request("PUT", "/v1/sandboxes/%s/tar" % _seg(id), {"path": path}, data,
                            {"Content-Type": "application/x-tar"})
        return json.loads(r.data) if r.data else {}  # type: ignore[attr-defined]

    def get_tar(self, id: str, path: str) -> bytes:
        """A tar stream of path in the sandbox (a directory, or one file)."""
        import io
        b = io.BytesIO()
        self.get_tar_to(id, path, b)
        return b.getvalue()

    def get_tar_to(self, id: str, path: str, out: BinaryIO) -> int:
        """Copy a tar stream of path in the sandbox into out; returns its bytes."""
        r = self._t.request("GET", "/v1/sandboxes/%s/tar" % _seg(id), {"path": path},
                            stream=True)
        return _copy(r, out, "GET tar %s" % path)


def _copy(r: Any, out: BinaryIO, what: str) -> int:
    n = 0
    try:
        while True:
            b = r.read(1 << 16)
            if not b:
                break
            out.write(b)
            n += len(b)
    except _DROPPED as e:
        raise Error(0, "%s: %s" % (what, _why(e))) from None
    finally:
        r.close()
        r._lazyroot_conn.close()
    return n


def _seg(s: str) -> str:
    import urllib.parse
    return urllib.parse.quote(s, safe="")


def _num(x: float) -> str:
    return ("%.3f" % x).rstrip("0").rstrip(".")


def _policy_value(v: PolicyValue) -> Union[str, List[str]]:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return [str(x) for x in v]
    return str(v)
