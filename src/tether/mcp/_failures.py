"""How the MCP host reads a failure: a transport failure loses the connection (quarantine or
restart); anything else is the server's own answer failing (``UpstreamError``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import anyio

from tether.errors import DependencyUnavailable, ToolError, UpstreamError
from tether.mcp._connection import ConnectionLost, describe_error
from tether.mcp._tasks import NOT_READING

if TYPE_CHECKING:
    from tether.mcp._serverlog import ServerStderr
    from tether.mcp._tasks import TaskRelay

__all__ = [
    "AUTH_REFUSED",
    "DROPPED",
    "REFUSED_AS_ASKED",
    "SESSION_GONE",
    "SESSION_REFUSED",
    "Unavailable",
    "classify",
    "closed_underneath",
    "enabled",
    "ended",
    "exit_status",
    "failure_detail",
    "is_modern",
    "leaf",
    "session_gone",
    "session_refused",
    "stream_ended",
    "transport_failure",
]

_CONNECTION_CLOSED = -32000
# What the SDK itself says under -32000 when the connection (or a request's stream) ended; a server's
# own error under -32000 (the band's first code, which servers use for their own failures) says
# something else and is that server's answer, its connection still up, as is the SDK's word for a
# request answered ``202 Accepted`` (only a server that is there answers). An event stream ended
# without the answer stays a lost connection: it is also what a server dying mid-call leaves.
_SDK_CLOSED = re.compile(
    r"Connection closed|SSE stream failed: .*|SSE stream ended (without a response|and reconnection "
    r"attempts were exhausted)",
    re.DOTALL,
)
# Of those, what the SDK says when one request's event stream ended (or broke) without its answer:
# a server dying mid-call leaves it, and so does a live server (or a proxy before it) closing that
# one stream early; only asking the session tells them apart (``STREAM_CHECK_S``).
_STREAM_ENDED = re.compile(
    r"SSE stream (failed: .*|ended (without a response|and reconnection attempts were exhausted))",
    re.DOTALL,
)
# How long a session whose call's event stream ended without the answer is given to answer a ping.
STREAM_CHECK_S = 5.0
# What an HTTP 401 or 403 to a request becomes (``_httpcap``), outside the reserved band: no SDK or
# MCP code (a server sending it itself only names its own refusal).
AUTH_REFUSED = -31401
# What an HTTP 404 to a request carrying the session id becomes (``_httpcap``): the server no longer
# knows the session. Only the status says so: a server's own words about a session of its own
# making ("login session expired", "browser session not found") are its answer to the call.
SESSION_GONE = -31404
# What an HTTP 400 to a request carrying the session id becomes when a ping on that session is
# refused too (``_httpcap``): a server written before the spec said 404 no longer knows the session.
# Unlike a 404, a 400 does not say the request went unprocessed.
SESSION_REFUSED = -31400
# A server's own JSON-RPC error saying it read the request and serves no such method (-32601) or
# takes no such params (-32602): only a session that is there answers so, whatever HTTP status the
# server maps the code to (the 2026-07-28 revision has -32601 at 404 and -32602 at 400); the SDK's
# stand-ins for an HTTP status, and a server's words for a session it no longer knows, use others.
REFUSED_AS_ASKED = (-32601, -32602)
# What a request whose connection the server closed with no answer fails with (``_httpcap``), its
# session gone or not: it may have run.
DROPPED = "the server closed the connection without answering this request"
# How long a stdio server whose connection ended under a call is given to exit, for its exit status
# and last stderr lines (a process tearing down closes its output before it writes its last words).
EXIT_WAIT_S = 1.0


class Unavailable(DependencyUnavailable):
    """The server is gone for this call; ``meta`` says why (the host copies it to the observation)."""

    def __init__(self, message: str, **meta: Any) -> None:
        super().__init__(message)
        self.meta = {k: v for k, v in meta.items() if v is not None}


def enabled(gate: Any) -> bool:
    """A gate is given to the SDK (and so advertised) only when its config enables it."""
    return gate is not None and bool(getattr(getattr(gate, "config", None), "enabled", True))


def is_modern(version: str | None) -> bool:
    return bool(version) and str(version) >= "2026"


def leaf(err: BaseException | None) -> BaseException | None:
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    return err


def transport_failure(err: BaseException) -> bool:
    """Whether an error means the connection itself failed (not the server's answer)."""
    inner = leaf(err)
    if isinstance(err, ConnectionLost) or isinstance(inner, ConnectionLost):
        return True
    if type(inner).__name__ == "MCPError":
        closed = getattr(inner, "code", None) == _CONNECTION_CLOSED and _SDK_CLOSED.fullmatch(str(inner))
        return bool(closed) or session_gone(inner)
    if isinstance(inner, (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream)):
        return True
    module = type(inner).__module__ or ""
    return module.startswith(("httpx", "httpcore", "h11")) or isinstance(err, BaseExceptionGroup)


def stream_ended(err: BaseException | None) -> bool:
    """Whether a request's event stream ended or broke without its answer (the SDK's words for it),
    which leaves open whether the session is still there."""
    inner = leaf(err)
    return (
        type(inner).__name__ == "MCPError"
        and getattr(inner, "code", None) == _CONNECTION_CLOSED
        and _STREAM_ENDED.fullmatch(str(inner)) is not None
    )


def session_gone(err: BaseException | None) -> bool:
    """Whether an HTTP server no longer knows the session (its 404 to the session id, or a 400
    its ping confirmed: ``session_refused``)."""
    inner = leaf(err)
    return type(inner).__name__ == "MCPError" and getattr(inner, "code", None) in (
        SESSION_GONE,
        SESSION_REFUSED,
    )


def session_refused(err: BaseException | None) -> bool:
    """Whether the session is gone by a 400 (``SESSION_REFUSED``): the request may have been run."""
    inner = leaf(err)
    return type(inner).__name__ == "MCPError" and getattr(inner, "code", None) == SESSION_REFUSED


def classify(server: str, err: BaseException) -> ToolError:
    inner = leaf(err) or err
    if isinstance(inner, ToolError):
        return inner
    if type(inner).__name__ == "MCPError":
        if getattr(inner, "code", None) == -32042:
            return UpstreamError(
                f"server {server} needs the person to open a URL first (URL elicitation), which did not "
                "happen: it needs elicitation with url_mode enabled for this server and a person at the "
                "terminal (--ask console) who consents"
            )
        if getattr(inner, "code", None) == NOT_READING:  # (``TaskRelay``): the server reads nothing
            return Unavailable(f"server {server} is unavailable: {inner}", cause="not_reading")
        if getattr(inner, "code", None) == AUTH_REFUSED:  # a 401 or 403 (``_httpcap``): retrying cannot help
            return DependencyUnavailable(
                f"server {server} refused the host: {inner}",
                hint="a person must configure this server's credentials; do not retry now",
                details={"cause": "unauthorized"},
            )
        if "refused by the host" in str(inner):
            # 2026-07-28: a refused input request (sampling, a question) ends the call client-side.
            return UpstreamError(f"the host refused the server's {_what_refused(str(inner))}: {inner}")
        return UpstreamError(f"server {server} failed: {inner}")
    # e.g. an answer that is not valid MCP: the server's fault, the connection is still up.
    return UpstreamError(f"server {server} failed: {describe_error(inner)}")


def _what_refused(message: str) -> str:
    return "sampling request" if "sampling" in message else "request"


def closed_underneath(relay: TaskRelay | None) -> bool:
    """Whether the transport already ended under the session (the relay saw its read stream end,
    or there is no relay: the client was torn down)."""
    return relay is None or relay.closed


async def ended(process: Any, stderr: ServerStderr | None) -> int | None:
    """A stdio server's exit status once its connection ended (``None``: still running after
    ``EXIT_WAIT_S``, or no process), its stderr read to the end once it exited (bounded)."""
    if process is None:
        return None
    if process.returncode is None:
        with anyio.move_on_after(EXIT_WAIT_S):
            await process.wait()
    if process.returncode is not None and stderr is not None:
        await anyio.to_thread.run_sync(lambda: stderr.wait(1.0))
    returncode: int | None = process.returncode
    return returncode


def exit_status(returncode: int | None, *, confined: bool = False) -> str | None:
    """``code 3`` or ``signal 9`` (``None``: not exited). A confined server's launcher reports a
    signal that ended the server as 128 plus its number, as a shell does: named as both."""
    if returncode is None:
        return None
    if returncode < 0:
        return f"signal {-returncode}"
    if confined and 128 < returncode < 128 + 65:
        return f"code {returncode} (signal {returncode - 128}, as its sandbox launcher reports it)"
    return f"code {returncode}"


def failure_detail(why: str, exited: str | None, tail: list[str], hint: str | None = None) -> str | None:
    """For the person: ``why`` with how the process exited (``exit_status``), its last stderr
    lines and a hint (``None``: nothing to add)."""
    parts = [why]
    if exited is not None:
        parts.append(f"its process exited with {exited}")
    if tail:
        parts.append("its last stderr lines: " + " | ".join(tail[-4:]))
    if hint:
        parts.append(hint)
    return "; ".join(parts) if len(parts) > 1 else None
