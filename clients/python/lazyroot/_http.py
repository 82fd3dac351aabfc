"""HTTP/1.1 over the node's unix socket or TCP, with the standard library only.

One connection per thread is kept alive for ordinary requests; a stream (an exec's output, a
file or tar download) takes a connection of its own, closed when it is read to the end or
dropped.  A request is sent again on a fresh connection only when that cannot run anything
twice: when the connection could not be made, when a kept-alive connection turned out closed
before the request reached the server, or when the request is idempotent (every request but
create: an exec always carries an exec id, see client.py).
"""
from __future__ import annotations

import http.client
import os
import socket
import threading
import time
import urllib.parse
from typing import Any, BinaryIO, Iterable, Mapping, Optional, Union

DEFAULT_SOCKET = "/run/lazyroot/node.sock"

Body = Union[None, bytes, BinaryIO, Iterable[bytes]]


class Error(Exception):
    """Every failure of the client: the API's answer (``status`` its HTTP status, ``message``
    its one-line ``error``) or a failure to reach the node (``status`` 0)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message

    def __repr__(self) -> str:
        return "lazyroot.Error(%d, %r)" % (self.status, self.message)


def default_api() -> str:
    """Where the API is when the caller does not say: $LAZYROOT_API, else the unix socket beside
    the node's control socket ($LAZYROOT_SOCKET, DIR/NAME.sock gives DIR/NAME-api.sock), else
    /run/lazyroot/node-api.sock."""
    api = os.environ.get("LAZYROOT_API")
    if api:
        return api
    ctl = os.environ.get("LAZYROOT_SOCKET") or DEFAULT_SOCKET
    base = ctl[:-5] if ctl.endswith(".sock") else ctl
    return base + "-api.sock"


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("node", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self._path)
        except BaseException:
            s.close()
            raise
        self.sock = s


# Errors after which a request may be sent again on a fresh connection.
_DROPPED = (ConnectionError, http.client.RemoteDisconnected, http.client.IncompleteRead,
            http.client.BadStatusLine, socket.timeout, BrokenPipeError)


class Transport:
    """Sends requests to one API endpoint: a unix socket path, or http://HOST:PORT."""

    def __init__(self, api: Optional[str] = None, token_file: Optional[str] = None,
                 timeout: float = 60.0, retry_seconds: float = 30.0):
        api = api or default_api()
        self.timeout = timeout
        self.retry_seconds = retry_seconds
        self._local = threading.local()
        self._headers: dict = {}
        if "://" in api:
            u = urllib.parse.urlsplit(api)
            if u.scheme != "http" or not u.hostname or (u.path not in ("", "/")):
                raise Error(0, "%s: the API is a unix socket path or http://HOST:PORT" % api)
            self._unix = None
            self._host, self._port = u.hostname, u.port or 80
        else:
            self._unix = api
        self.api = api
        if token_file:
            try:
                with open(token_file, encoding="utf-8") as f:
                    token = f.readline().strip()
            except OSError as e:
                raise Error(0, "%s: %s" % (token_file, e.strerror)) from None
            if not token:
                raise Error(0, "%s: no token on its first line" % token_file)
            self._headers["Authorization"] = "Bearer " + token

    def _connect(self, timeout: Optional[float] = None) -> http.client.HTTPConnection:
        t = self.timeout if timeout is None else timeout
        if self._unix is not None:
            return _UnixConnection(self._unix, t)
        return http.client.HTTPConnection(self._host, self._port, timeout=t)

    def _kept(self) -> http.client.HTTPConnection:
        k = getattr(self._local, "kept", None)
        if k is None:
            k = self._local.kept = _Kept()
        if k.conn is None:
            k.conn = self._connect()
        return k.conn

    def _has_kept(self) -> bool:
        k = getattr(self._local, "kept", None)
        return k is not None and k.conn is not None

    def _drop_kept(self) -> None:
        k = getattr(self._local, "kept", None)
        if k is not None and k.conn is not None:
            k.conn.close()
            k.conn = None

    def close(self) -> None:
        """Close this thread's kept-alive connection (others close as their threads end)."""
        self._drop_kept()

    def _send(self, c: http.client.HTTPConnection, method: str, target: str, body: Body,
              headers: Mapping[str, str]) -> None:
        h = dict(self._headers)
        h.update(headers)
        if body is None:
            c.request(method, target, headers=h)
        elif isinstance(body, (bytes, bytearray, memoryview)):
            c.request(method, target, body=bytes(body), headers=h)
        else:
            size = _known_size(body)
            if size is not None:
                h["Content-Length"] = str(size)
                c.request(method, target, body=body, headers=h)
            else:
                c.request(method, target, body=_chunks(body), headers=h, encode_chunked=True)

    def request(self, method: str, path: str, query: Optional[Mapping[str, Any]] = None,
                body: Body = None, headers: Optional[Mapping[str, str]] = None,
                idempotent: bool = True, stream: bool = False,
                timeout: Optional[float] = None) -> http.client.HTTPResponse:
        """Send one request and return its answer, raising Error for a status of 400 or more.

        With stream=False the answer's body is read whole (``.data``) and the connection kept;
        with stream=True the caller reads the answer and closes it (its connection is its
        own).  A body that is a file or an iterable is sent once: never retried.
        """
        target = path + ("?" + urllib.parse.urlencode(
            {k: v for k, v in query.items() if v is not None}) if query else "")
        retriable_body = body is None or isinstance(body, (bytes, bytearray, memoryview))
        deadline = time.monotonic() + self.retry_seconds
        delay = 0.05
        while True:
            kept = not stream and self._has_kept()
            c = self._connect(timeout) if stream else self._kept()
            if not stream and timeout is not None:
                c.timeout = timeout
                if c.sock is not None:
                    c.sock.settimeout(timeout)
            sent = False
            try:
                try:
                    if c.sock is None:
                        c.connect()
                except (FileNotFoundError, ConnectionRefusedError) as e:
                    raise _Unreachable(e) from None
                self._send(c, method, target, body, headers or {})
                sent = True
                r = c.getresponse()
                if not stream:
                    r.data = r.read()  # type: ignore[attr-defined]
                    if timeout is not None:
                        c.timeout = self.timeout
                        if c.sock is not None:
                            c.sock.settimeout(self.timeout)
            except _Unreachable as e:
                c.close()
                if not stream:
                    self._drop_kept()
                if time.monotonic() < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
                    continue
                raise Error(0, "%s: %s" % (self.api, e.err.strerror or e.err)) from None
            except _DROPPED as e:
                c.close()
                if not stream:
                    self._drop_kept()
                # a kept connection the server had closed before our request, or a request
                # that can run only once
                again = retriable_body and (idempotent or (kept and not sent))
                if again and time.monotonic() < deadline:
                    if not kept:
                        time.sleep(delay)
                        delay = min(delay * 2, 1.0)
                    continue
                raise Error(0, "%s %s: %s" % (method, path, _why(e))) from None
            except OSError as e:
                c.close()
                if not stream:
                    self._drop_kept()
                raise Error(0, "%s %s: %s" % (method, path, e.strerror or e)) from None
            if r.status >= 400:
                data = r.data if not stream else _read_quietly(r)  # type: ignore[attr-defined]
                if stream:
                    r.close()
                    c.close()
                raise Error(r.status, _message(r.status, data))
            if stream:
                r._lazyroot_conn = c  # type: ignore[attr-defined]
            elif r.getheader("Connection", "").lower() == "close":
                self._drop_kept()
            return r


class _Kept:
    """A thread's kept-alive connection, closed when the thread's locals go with it."""

    def __init__(self) -> None:
        self.conn: Optional[http.client.HTTPConnection] = None

    def __del__(self) -> None:
        if self.conn is not None:
            self.conn.close()


class _Unreachable(Exception):
    def __init__(self, err: OSError):
        self.err = err


def _why(e: BaseException) -> str:
    if isinstance(e, socket.timeout):
        return "timed out"
    if isinstance(e, http.client.IncompleteRead):
        return "connection closed in the middle of the answer"
    if isinstance(e, (http.client.RemoteDisconnected, http.client.BadStatusLine)):
        return "connection closed without an answer"
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def _message(status: int, data: bytes) -> str:
    import json
    try:
        msg = json.loads(data)["error"]
        if isinstance(msg, str) and msg:
            return msg
    except (ValueError, KeyError, TypeError):
        pass
    text = data.decode("utf-8", "replace").strip().splitlines()
    return text[0] if text else "HTTP status %d" % status


def _read_quietly(r: http.client.HTTPResponse) -> bytes:
    try:
        return r.read(65536)
    except (OSError, http.client.HTTPException):
        return b""


def _known_size(body: Any) -> Optional[int]:
    try:
        fd = body.fileno()
        st = os.fstat(fd)
        import stat
        if stat.S_ISREG(st.st_mode):
            return st.st_size - body.tell()
    except (AttributeError, OSError, ValueError):
        pass
    return None


def _chunks(body: Any) -> Iterable[bytes]:
    if hasattr(body, "read"):
        while True:
            b = body.read(1 << 16)
            if not b:
                return
            yield b
    else:
        for b in body:
            if b:
                yield bytes(b)
