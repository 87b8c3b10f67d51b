"""What the connection's relay (``tether.mcp._tasks.TaskRelay``) mends in a server's answers
before the SDK reads them, or answers for the host itself.

* A tool result's content block the SDK refuses (a type of a later revision, ``video``; an image
  without its ``mimeType``; a resource link without its ``name``; a text of ``null``) failed the
  whole call (``upstream_error`` naming a validation error), the blocks beside it lost: it is now
  replaced by a line saying which block the host could not read and why (``readable_content``),
  the rest read as sent.
* A request of the server's for a capability the host did not declare (``roots/list``,
  ``sampling/createMessage``, ``elicitation/create``) was answered by the SDK ``-32600`` (Invalid
  Request), a well-formed request called malformed: servers that fall back when the client lacks a
  method look for ``-32601`` (Method not found), as the spec has clients answer ``roots/list``
  they do not support and the TypeScript SDK answers any method it has no handler for. The relay
  now answers them so (``refusal``); the SDK never sees them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["CAPABILITY_METHODS", "readable_content", "refusal", "unsupported"]

# The server's requests the host answers only when it declared the capability (``open_client``).
CAPABILITY_METHODS = {
    "elicitation": "elicitation/create",
    "sampling": "sampling/createMessage",
    "roots": "roots/list",
}
_FALLBACK = "2025-11-25"  # the revision the SDK itself checks an unknown version's answers by


def unsupported(declared: Iterable[str]) -> frozenset[str]:
    """The methods of ``CAPABILITY_METHODS`` whose capability is not in ``declared``."""
    return frozenset(method for name, method in CAPABILITY_METHODS.items() if name not in set(declared))


def refusal(message: Any, methods: frozenset[str]) -> Any:
    """The host's ``-32601`` answer to ``message`` (a ``SessionMessage``) when it is a server's
    request for one of ``methods``, else ``None``."""
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    method, ident = getattr(message, "method", None), getattr(message, "id", None)
    if method not in methods or ident is None:
        return None
    error = types.ErrorData(code=types.METHOD_NOT_FOUND, message="Method not found", data=method)
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=ident, error=error))


def refused(method: str, result: Mapping[str, Any], version: str, model: Any = None) -> str | None:
    """Why the SDK refuses ``result`` as the answer to ``method`` (as it checks it for
    ``version``, and an unknown version as it checks its fallback revision's), or ``None``.
    ``model``: a result type the answer must also validate as (the SDK's own reading of it)."""
    from mcp_types.methods import validate_server_result
    from pydantic import ValidationError

    from tether.mcp._connection import describe_error

    try:
        try:
            validate_server_result(method, version, result)
        except (KeyError, ValueError) as err:  # an unknown version: the SDK's own fallback
            if isinstance(err, ValidationError):
                raise
            validate_server_result(method, _FALLBACK, result)
        if model is not None:
            model.model_validate(result, by_name=False)
    except (ValidationError, ValueError) as err:
        return describe_error(err)
    return None


def _refused(result: dict[str, Any], version: str) -> str | None:
    """Why the SDK refuses a call result, or ``None``."""
    return refused("tools/call", result, version)


def readable_content(result: Any, version: str | None) -> Any:
    """A ``tools/call`` result, each content block the SDK refuses replaced by a line naming it
    (its index, its type, why); any other result as it is (one refused for more than its
    content too)."""
    from tether.mcp._clean import escape_for_review

    content = result.get("content") if isinstance(result, dict) else None
    if not isinstance(content, list) or not content:
        return result
    version = version or _FALLBACK
    if _refused(result, version) is None or _refused({**result, "content": []}, version) is not None:
        return result  # (the first, one check, is the common case)
    mended: list[Any] = []
    for index, block in enumerate(content):
        why = _refused({**result, "content": [block]}, version)
        if why is None:
            mended.append(block)
            continue
        kind = block.get("type") if isinstance(block, dict) else None
        shown = escape_for_review(kind, limit=40) if isinstance(kind, str) else type(block).__name__
        why = escape_for_review(why.replace("CallToolResult: content.0.", "", 1), limit=200)
        line = f"[content block #{index} ({shown}) the host could not read: {why}]"
        mended.append({"type": "text", "text": line})
    return {**result, "content": mended}
