"""What the model reads of anything from outside: cleaned, cut to size and labelled, here only:
tool results (``finish``), recalled memory claims (``memory_line``) and the host's own notes
(``host_note``), each inside an ``<untrusted_data …>`` block whose closing tag the text cannot forge."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tether.core.types import Observation, Trust, wrap_untrusted
from tether.mcp._clean import clean_result_data, clean_result_text

__all__ = ["LABEL_KEYS", "finish", "host_note", "memory_line", "memory_origin", "truncate"]

# What the host's provenance labelers attach, never taken from a tool source's output.
LABEL_KEYS = frozenset({"provenance", "sources", "references"})


def finish(
    obs: Observation,
    *,
    limit: int,
    trust: Trust,
    labeler: Callable[[Observation], Observation] | None = None,
) -> Observation:
    """A tool's result as the run keeps it: hidden characters, HTML comments and markdown targets
    neutralised (``meta["cleaned"]``), the text cut to ``limit``, the trust label set, then the
    host's provenance ``labeler``, if any."""
    if "cleaned" not in obs.meta:
        text, found = clean_result_text(obs.text)
        data: Any
        if obs.data is obs.text:  # a text result: its data is the same string, cleaned once
            data, found_in_data = text, found
        else:
            data, found_in_data = clean_result_data(obs.data) if obs.data is not None else (None, {})
        if found or found_in_data:
            obs = replace(obs, text=text, data=data, meta={**obs.meta, "cleaned": found or found_in_data})
    obs = truncate(obs, limit)
    if obs.trust != trust:
        obs = replace(obs, trust=trust)
    if labeler is not None:
        obs = labeler(obs)
    return obs


def truncate(obs: Observation, limit: int) -> Observation:
    """``obs`` with its text cut to fit ``limit`` (a note of what was kept out included) and its
    structured data dropped (it would carry the whole payload past the cap)."""
    total = len(obs.text)
    if total <= limit:
        return obs
    marker = (
        f"\n[TRUNCATED by host: {total} characters from {obs.source}; only the first {{shown}} are "
        "shown, the rest was kept out of context]"
    )
    shown = max(0, limit - len(marker) - 8)
    text = obs.text[:shown] + marker.format(shown=shown)
    return replace(obs, text=text, data=None, meta={**obs.meta, "truncated": True})


def memory_origin(source: Any) -> str:
    """Where a memory record's claim came from (``system/record``), as traces and labels say it."""
    return f"{source.system}/{source.record}" if source is not None else "unknown"


def memory_line(record: Any, *, conflict: bool) -> str:
    """A recalled memory claim, cleaned and labelled untrusted with its origin."""
    claim, _ = clean_result_text(record.claim)
    src = record.source
    return wrap_untrusted(
        claim,
        source=f"memory:{memory_origin(src)}",
        subject=record.subject,
        observed_at=src.observed_at.isoformat() if src is not None else "",
        confidence=record.confidence,
        trust="untrusted",
        conflict="yes" if conflict else "",
    )


def host_note(body: str) -> str:
    """A note the host writes in place of a tool's result: its own text, labelled trusted."""
    return wrap_untrusted(body, source="host", trust="trusted")
