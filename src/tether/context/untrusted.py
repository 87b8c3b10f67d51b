"""Everything that enters the context from outside is data with a label.

Tool results, MCP responses, memory records and third-party text are wrapped in an
``<untrusted_data>`` block naming their source, tool and time. The block's own closing
tag inside the payload is neutralised so the payload cannot end the block early.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal
from xml.sax.saxutils import quoteattr

__all__ = ["Observation", "Trust", "rewrap", "unwrap", "wrap_untrusted"]

Trust = Literal["untrusted", "trusted"]

_CLOSE = "</untrusted_data"


def _neutralise(text: str) -> str:
    # Case-insensitive: a model may treat </UNTRUSTED_DATA> as the end of the block too.
    out, low, i = [], text.lower(), 0
    while True:
        j = low.find(_CLOSE, i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j] + "<\\/untrusted_data")
        i = j + len(_CLOSE)


def wrap_untrusted(text: str, **labels: str) -> str:
    attrs = " ".join(f"{k}={quoteattr(v)}" for k, v in labels.items() if v)
    return f"<untrusted_data {attrs}>\n{_neutralise(text)}\n</untrusted_data>"


@dataclass(frozen=True, slots=True)
class Observation:
    """One tool result as the host records it. ``trust`` is always ``untrusted`` for tool output."""

    call_id: str
    tool: str
    source: str
    observed_at: datetime
    text: str
    data: Any = None
    is_error: bool = False
    error_kind: str | None = None
    trust: Trust = "untrusted"
    meta: dict[str, Any] = field(default_factory=dict)

    def render(self) -> str:
        """The tool message content the model reads."""
        labels = {
            "source": self.source,
            "tool": self.tool,
            "observed_at": self.observed_at.isoformat(timespec="seconds"),
            "trust": self.trust,
        }
        if self.is_error:
            labels["error"] = self.error_kind or "error"
        return wrap_untrusted(self.text, **labels)


def rewrap(content: str, text: str, *, source: str = "harness") -> str:
    """New inner text under the same ``<untrusted_data …>`` labels as ``content``.

    Used when a rewrite (compression, preview) replaces a tool result: the replacement is
    still derived from untrusted data, so it keeps the original source, tool and time labels.
    """
    first, _, _ = content.partition("\n")
    if first.startswith("<untrusted_data") and first.endswith(">"):
        return f"{first}\n{_neutralise(text)}\n</untrusted_data>"
    return wrap_untrusted(text, source=source)


def unwrap(content: str) -> str:
    """The inner text of an ``<untrusted_data>`` block (the content itself if it is not one)."""
    first, sep, rest = content.partition("\n")
    if sep and first.startswith("<untrusted_data") and rest.endswith("\n</untrusted_data>"):
        return rest[: -len("\n</untrusted_data>")]
    return content
