"""A client of lazyroot's sandbox API (docs/api.md), standard library only.

    import lazyroot
    client = lazyroot.Client()                  # the node's unix socket, or api="http://H:P"
    with client.sandbox(rootfs="/srv/root", policy={"net": "none"}) as sb:
        sb.put_file("/task/main.py", b"print(42)\\n", parents=True)
        e = sb.run(["python3", "/task/main.py"], timeout=10)
        print(e.result().status, e.stdout)

Every failure is a lazyroot.Error: ``status`` the HTTP status (0 when the node could not be
reached) and ``message`` the API's one line.
"""
from ._http import Error, default_api
from .client import Client, Exec, FileInfo, Result, Sandbox
from .stream import RESULT, STDERR, STDOUT, Frame, StreamError, parse, read_frames

__all__ = ["Client", "Sandbox", "Exec", "Result", "FileInfo", "Error", "Frame", "StreamError",
           "STDOUT", "STDERR", "RESULT", "read_frames", "parse", "default_api"]
__version__ = "1"
