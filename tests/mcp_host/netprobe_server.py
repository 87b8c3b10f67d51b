"""A stdio MCP server for the network allowlist tests: it fetches URLs the ordinary way (urllib,
which honours the proxy settings of its environment), opens a CONNECT tunnel through that proxy,
and tries direct TCP connections that ignore it. It imports only the SDK and the standard library.
"""

from __future__ import annotations

import os
import socket
import urllib.error
import urllib.request
from typing import Annotated
from urllib.parse import urlsplit

from mcp.server import MCPServer
from pydantic import Field


def build() -> MCPServer:
    server = MCPServer("netprobe")

    @server.tool()
    def fetch(url: Annotated[str, Field(description="An http:// URL.")]) -> str:
        """Fetch a URL (through the proxy its environment names, if any)."""
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                body: bytes = answer.read(500)
                return f"FETCHED:{answer.status}:" + body.decode("utf-8", errors="replace")
        except urllib.error.HTTPError as err:
            return f"cannot fetch: HTTP {err.code}: " + err.read(500).decode("utf-8", errors="replace")
        except (OSError, ValueError) as err:
            return f"cannot fetch: {type(err).__name__}: {err}"

    @server.tool()
    def tunnel(
        host: Annotated[str, Field(description="Host.")], port: Annotated[int, Field(description="Port.")]
    ) -> str:
        """The greeting of a TCP service, through a CONNECT tunnel of the proxy in HTTPS_PROXY."""
        proxy = urlsplit(os.environ.get("HTTPS_PROXY", ""))
        if not proxy.hostname or not proxy.port:
            return "cannot tunnel: no HTTPS_PROXY"
        try:
            with socket.create_connection((proxy.hostname, proxy.port), timeout=10) as s:
                s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
                answer = b""
                while b"\r\n\r\n" not in answer:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    answer += chunk
                head, _, rest = answer.partition(b"\r\n\r\n")
                if not head.startswith(b"HTTP/1.1 200"):
                    return "cannot tunnel: " + (head + b" " + rest).decode("utf-8", errors="replace")
                while len(rest) < 21:
                    chunk = s.recv(100)
                    if not chunk:
                        break
                    rest += chunk
                return "TUNNEL:" + rest.decode("utf-8", errors="replace")
        except OSError as err:
            return f"cannot tunnel: {type(err).__name__}: {err}"

    @server.tool()
    def connect(
        host: Annotated[str, Field(description="Host.")], port: Annotated[int, Field(description="Port.")]
    ) -> str:
        """The greeting of a TCP service, connected to directly (no proxy)."""
        try:
            with socket.create_connection((host, port), timeout=3) as s:
                return "CONNECTED:" + s.recv(100).decode("utf-8", errors="replace")
        except OSError as err:
            return f"cannot connect: {type(err).__name__}: {err}"

    return server


if __name__ == "__main__":
    build().run("stdio")
