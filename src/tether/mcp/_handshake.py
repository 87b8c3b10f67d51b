"""A server that refuses the protocol version the host offers at ``initialize`` and names the
versions it speaks, as the spec's lifecycle shows it (``-32602`` "Unsupported protocol version",
``data.supported``): the host asks once more, at the newest of them that the SDK also speaks.

The SDK offers only its newest handshake version and takes the refusal as the end of the
connection: a server speaking only ``2024-11-05`` (older SDKs in Java, Go and C#, gateways pinned
to a version) never started, though the host speaks that version. One more ``initialize`` is
sent, under the same id, so the SDK reads the server's answer to it as the answer to its own;
a refusal naming no version the host speaks, or a second refusal, is passed on as it was.
"""

from __future__ import annotations

from typing import Any

__all__ = ["asked_again"]


def asked_again(sent: Any, answer: Any) -> Any | None:
    """The ``initialize`` request ``sent`` (a ``SessionMessage``) again at the newest version that
    both the server's refusal ``answer`` names in ``data.supported`` and the SDK speaks; ``None``
    when ``answer`` is no such refusal."""
    import mcp_types as types
    from mcp.shared.message import SessionMessage
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    data = getattr(getattr(answer, "error", None), "data", None)
    supported = data.get("supported") if isinstance(data, dict) else None
    params = getattr(sent.message, "params", None)
    if not isinstance(supported, list) or not isinstance(params, dict):
        return None
    offered = params.get("protocolVersion")
    mutual = [v for v in HANDSHAKE_PROTOCOL_VERSIONS if v in supported and v != offered]
    if not mutual:
        return None
    request = types.JSONRPCRequest(
        jsonrpc="2.0",
        id=sent.message.id,
        method="initialize",
        params={**params, "protocolVersion": mutual[-1]},
    )
    return SessionMessage(request, metadata=sent.metadata)
