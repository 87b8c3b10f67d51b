"""Everything that enters the context from outside is data in an ``<untrusted_data>`` block
naming its source, tool and time; a closing tag inside the payload is neutralised."""

from __future__ import annotations

from tether.core.types import Observation, Trust, _neutralise, wrap_untrusted

__all__ = ["Observation", "Trust", "rewrap", "unwrap", "wrap_untrusted"]


def rewrap(content: str, text: str, *, source: str = "harness") -> str:
    """New inner text under the same ``<untrusted_data …>`` labels as ``content``."""
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
