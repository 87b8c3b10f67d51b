"""An MCP ``CallToolResult`` as a ``ToolOutput``: what of a server's answer may enter context.

Text is kept, cleaned (``tether.mcp._clean``) and cut at the size cap; resource links are shown,
never fetched; binary and other content is named only; ``structuredContent`` is validated against
the pinned output schema (else ``invalid_output``); paths outside the roots are flagged.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread

from tether.core._schema import SchemaViolation, UnusableSchema, validate
from tether.mcp._clean import clean_result_data, clean_result_text, escape_for_review
from tether.tools._contract import ToolOutput, ToolSpec
from tether.trace._events import EventKind

__all__ = ["checked_output", "convert_result", "invalid_output", "output_failure"]

Emit = Callable[..., None]


def _rejected(emit: Emit, server: str, spec: ToolSpec, reason: str, **data: Any) -> None:
    """Trace what the host refused, removed or flagged in one result (the reviewer's list)."""
    emit(EventKind.MCP_RESULT_REJECTED, server=server, tool=spec.name, reason=reason, **data)


def invalid_output(server: str, spec: ToolSpec, why: str, emit: Emit) -> ToolOutput:
    _rejected(emit, server, spec, "output_schema", why=why)
    message = "the server returned structured content that does not match the approved output schema"
    return ToolOutput(
        text=json.dumps({"error": "invalid_output", "message": message}),
        is_error=True,
        error_kind="invalid_output",
    )


_ABS_PATH = re.compile(r"(?<![\w:/.~-])(?:file://)?(/(?:[\w.@+-]+/)*[\w.@+-]+)")


def paths_outside(text: str, roots: Sequence[Path]) -> list[str]:
    """Absolute paths (and file:// URIs) quoted in a result that lie outside every root."""
    found: list[str] = []
    for m in _ABS_PATH.finditer(text):
        raw = m.group(1)
        path = Path(os.path.normpath(raw))
        if not any(path == r or r in path.parents for r in roots) and raw not in found:
            found.append(raw)
        if len(found) >= 10:
            break
    return found


def _content_parts(content: Sequence[Any]) -> tuple[list[str], list[str]]:
    """The text of each content block (what is not text, described) and the links shown."""
    parts: list[str] = []
    links = []
    for c in content:
        kind = getattr(c, "type", "")
        if kind == "text":
            parts.append(c.text)
        elif kind == "resource_link":
            # Shown as data, never fetched: a link is the server's claim, not the host's errand.
            links.append(str(c.uri))
            parts.append(f"[resource_link not fetched: {c.uri} ({getattr(c, 'name', '')})]")
        elif kind == "resource":
            res = c.resource
            text = getattr(res, "text", None)
            parts.append(text if text is not None else f"[embedded binary resource omitted: {res.uri}]")
        else:
            parts.append(f"[{kind} content omitted]")
    return parts, links


def output_failure(result: Any, definition: Mapping[str, Any]) -> str | None:
    """Why ``result``'s structured content fails the pinned output schema (``None``: it passes,
    or there is no schema, or the result is an error). The host's one engine checks it, its work
    bounded (``tether.core._work``): slow for a large result, so callers run it off the event
    loop (``checked_output``)."""
    schema = definition.get("outputSchema")
    if schema is None or result.is_error:
        return None
    try:
        validate(schema, result.structured_content)
    except SchemaViolation as err:
        return str(err)
    except UnusableSchema as err:
        return f"invalid output schema: {err}"
    except Exception as err:  # what the engine does not foresee is still the server's doing
        return f"unusable output schema: {type(err).__name__}"
    return None


async def checked_output(result: Any, definition: Mapping[str, Any]) -> str | None:
    """``output_failure`` in a worker thread: a costly check (a large result, a schema that
    multiplies its work) never stalls other servers, approvals or the console; a cancelled
    call leaves it to finish within its budget."""
    return await anyio.to_thread.run_sync(output_failure, result, definition, abandon_on_cancel=True)


def convert_result(
    server: str,
    spec: ToolSpec,
    result: Any,
    why: str | None,
    emit: Emit,
    roots: Sequence[Path] = (),
) -> ToolOutput:
    """What of ``result`` may enter context; ``why``: how its structured content failed the
    output schema (``checked_output``), which makes it ``invalid_output``."""
    parts, links = _content_parts(result.content)
    raw = "\n".join(parts)
    data: Any = result.structured_content
    if why is not None:
        return invalid_output(server, spec, why, emit)
    if data is None and len(parts) == 1 and getattr(result.content[0], "type", "") == "text":
        # A lone text block of JSON is the server's answer in its own shape; an embedded resource
        # is a document it relays (a file someone uploaded): text, never fields of the answer.
        try:
            data = json.loads(parts[0])
        except ValueError:
            data = None
    text, cleaned = clean_result_text(raw)
    if data is not None:
        data, data_cleaned = clean_result_data(data)
        for key, value in data_cleaned.items():
            cleaned.setdefault(key, value)
        if not parts:  # structured content alone (no text block, as the spec allows): the model reads it
            text = json.dumps(data, ensure_ascii=False)
    meta: dict[str, Any] = {"server": server}
    if links:
        meta["resource_links"] = links
    if cleaned:
        meta["cleaned"] = cleaned
        escaped = escape_for_review(raw, limit=2000)
        _rejected(emit, server, spec, "hidden_content", cleaned=cleaned, raw_escaped=escaped)
    if roots and (outside := paths_outside(text, roots)):
        # Flagged, not removed: the server was told its roots and quotes a path beyond them.
        meta["paths_outside_roots"] = outside
        _rejected(emit, server, spec, "paths_outside_roots", paths=outside)
    if (total := len(text)) > spec.max_result_chars:
        # Reported here; the host cuts it as every tool's result (``HostCore._finish``).
        _rejected(emit, server, spec, "oversized", chars=total)
    if result.is_error:
        return ToolOutput(text=text, data=data, is_error=True, error_kind="server_error", meta=meta)
    return ToolOutput(text=text, data=data, meta=meta)
