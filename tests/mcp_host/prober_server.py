"""A hostile stdio MCP server for the sandbox tests: it tries to read, write, list and connect
wherever it is told, and says what it can see of the host (its ``/proc/1/cmdline``, its home,
the kernel's list of its mounts).

Run as ``python prober_server.py`` or ``python -m prober_server`` (with its folder on the
PYTHONPATH), or from a console script that calls ``main()``. It imports only the SDK.
"""

from __future__ import annotations

import os
import socket
from typing import Annotated

from mcp.server import MCPServer
from pydantic import Field


def build() -> MCPServer:
    server = MCPServer("prober")

    @server.tool()
    def read(path: Annotated[str, Field(description="A file.")]) -> str:
        """Read a file."""
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                return "READ:" + f.read(2000)
        except OSError as err:
            return f"cannot read: {type(err).__name__}: {err.strerror}"

    @server.tool()
    def write(path: Annotated[str, Field(description="A file.")]) -> str:
        """Write a file."""
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write("written by the prober")
            return "WROTE"
        except OSError as err:
            return f"cannot write: {type(err).__name__}: {err.strerror}"

    @server.tool()
    def listing(path: Annotated[str, Field(description="A folder.")]) -> str:
        """List a folder."""
        try:
            return "LIST:" + ",".join(sorted(os.listdir(path)))
        except OSError as err:
            return f"cannot list: {type(err).__name__}: {err.strerror}"

    @server.tool()
    def connect(
        host: Annotated[str, Field(description="Host.")], port: Annotated[int, Field(description="Port.")]
    ) -> str:
        """The greeting of a TCP service."""
        try:
            with socket.create_connection((host, port), timeout=3) as s:
                return "CONNECTED:" + s.recv(100).decode("utf-8", errors="replace")
        except OSError as err:
            return f"cannot connect: {type(err).__name__}: {err}"

    gate = {"opened": False}

    @server.tool()
    def gated() -> str:
        """Works once the person has opened the sign-in page (a -32042 error until then)."""
        import mcp_types as t
        from mcp.shared.exceptions import UrlElicitationRequiredError

        if not gate["opened"]:
            gate["opened"] = True  # the next attempt stands for "after the person signed in"
            page = t.ElicitRequestURLParams(
                mode="url",
                message="Sign in first",
                url="https://auth.example/sign-in?s=1",
                elicitation_id="e1",
            )
            raise UrlElicitationRequiredError([page])
        return "GATED-OK"

    @server.tool()
    def whereami() -> str:
        """What this process sees of where it runs."""
        try:
            with open("/proc/1/cmdline", "rb") as f:
                pid1 = f.read().replace(b"\0", b" ").decode("utf-8", errors="replace")
        except OSError as err:
            pid1 = f"unreadable: {err.strerror}"
        return f"PID1={pid1}\nHOME={os.environ.get('HOME')}\nCWD={os.getcwd()}\nPATH={os.environ.get('PATH')}"

    @server.tool()
    def mounts() -> str:
        """The kernel's view of this process's mounts, and of process 1's."""
        out = []
        for path in ("/proc/self/mountinfo", "/proc/1/mountinfo", "/proc/1/cmdline"):
            try:
                with open(path, "rb") as f:
                    out.append(f"{path}:\n" + f.read().replace(b"\0", b" ").decode("utf-8", errors="replace"))
            except OSError as err:
                out.append(f"{path}: unreadable: {err.strerror}")
        return "MOUNTS:\n" + "\n".join(out)

    return server


def main() -> None:
    required = os.environ.get("PROBER_REQUIRE")
    if required:  # a server that needs a file at start, and dies without it
        with open(required, encoding="utf-8") as f:
            f.read()
    build().run("stdio")


if __name__ == "__main__":
    main()
