"""A plain HTTP handler served on 127.0.0.1 in a thread, for tests that need a small server of
their own (an OTLP receiver, another origin, an endpoint that refuses)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["Quiet", "serving"]


class Quiet(BaseHTTPRequestHandler):
    """A handler that logs nothing (the test reads what it needs from its own state)."""

    def log_message(self, *args: object) -> None:
        pass

    def send_body(
        self, status: int, body: bytes = b"", kind: str = "application/json", **headers: str
    ) -> None:
        """One whole answer: ``status``, ``Content-Type`` ``kind``, its length and ``headers``
        (``Mcp_Session_Id="s1"`` is sent as ``Mcp-Session-Id``); a client gone is no error."""
        self.send_response(status)
        named = {"Content-Type": kind, "Content-Length": str(len(body))}
        named.update({key.replace("_", "-"): value for key, value in headers.items()})
        for key, value in named.items():
            self.send_header(key, value)
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(body)


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served on a free port of 127.0.0.1 while the block runs; yields its base URL
    (``http://127.0.0.1:PORT``, no trailing slash)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
