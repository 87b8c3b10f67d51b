"""What the person is told to change when a server could not be started: a connect timeout to
raise (a first ``npx -y`` / ``uvx`` run downloads its package), or, for a URL whose server refused
the ``initialize`` POST, whether that URL serves the older HTTP+SSE transport (2024-11-05), which
the host does not speak: the spec's own test for it (its backwards-compatibility section) is a
``GET`` whose event stream opens with an ``endpoint`` event. The probe reads at most
``PROBE_BYTES`` within ``PROBE_S``, with the server's configured headers and nothing else (no
redirects followed, no proxy or ``~/.netrc`` from the environment).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from tether.mcp._source import McpServerSource

__all__ = ["PROBE_BYTES", "PROBE_S", "serves_legacy_sse", "start_setting"]

PROBE_S = 3.0
PROBE_BYTES = 4096
_ENDPOINT_EVENT = re.compile(r"^event:[ \t]*endpoint[ \t]*\r?$", re.MULTILINE)


async def start_setting(source: McpServerSource, *, timed_out: bool, answered: bool) -> str | None:
    """The setting to change for a server that could not be started (``None``: none to name)."""
    if timed_out:
        return f"raise connect_timeout_s for server {source.name} if it is slow to start" + (
            " (a first `npx -y` or `uvx` run downloads its package: run it once beforehand)"
            if source.command
            else ""
        )
    if source.url is None or answered or not await serves_legacy_sse(source.url, source.headers):
        return None
    return (
        f"{source.describe()['url']} serves the older HTTP+SSE transport (2024-11-05: its event "
        "stream opens with an `endpoint` event), which tether does not speak: set `url` to the "
        "server's Streamable HTTP endpoint (often `/mcp`; some servers serve it only in another "
        "mode or with a flag, e.g. server-everything's `streamableHttp`), or launch its stdio "
        "form with `command`"
    )


async def serves_legacy_sse(url: str, headers: dict[str, str] | None = None) -> bool:
    """Whether a ``GET`` of ``url`` opens an event stream whose first event is ``endpoint``."""
    import httpx2

    seen = b""
    with anyio.move_on_after(PROBE_S):
        try:
            async with (
                httpx2.AsyncClient(
                    headers=headers or None, follow_redirects=False, trust_env=False, timeout=PROBE_S
                ) as http,
                http.stream("GET", url, headers={"Accept": "text/event-stream"}) as response,
            ):
                kind = response.headers.get("content-type", "")
                if response.status_code != 200 or not kind.startswith("text/event-stream"):
                    return False
                async for chunk in response.aiter_bytes():
                    seen += chunk
                    if len(seen) >= PROBE_BYTES or b"\n\n" in seen or b"\r\n\r\n" in seen:
                        break
        except Exception:
            return False
    first = seen[:PROBE_BYTES].decode("utf-8", "replace").replace("\r\n", "\n").split("\n\n")[0]
    return _ENDPOINT_EVENT.search(first) is not None
