"""Progress on stderr while a run goes on (``ProgressSink``, a trace sink: the events are
already redacted; only on a terminal without ``--json``), and every tool result kept, redacted,
beside the trace when asked for (``write_results``: ``<run_id>.results.jsonl``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["ProgressSink", "progress_wanted", "show_text", "write_results"]

MAX_RESULT_CHARS = 64_000


def progress_wanted(as_json: bool) -> bool:
    return not as_json and sys.stderr.isatty()


def show_text(kind: str, piece: str) -> None:
    """A streamed answer's text as it arrives, on stderr (a model's ``on_delta``); text an
    attempt that then failed streamed is marked as no answer where the next attempt's begins
    (``discard``), so the two are not read as one."""
    if kind == "text" and piece:
        _SHOWN[0] = True
        sys.stderr.write(piece)
        sys.stderr.flush()
    elif kind == "discard" and _SHOWN[0]:
        _SHOWN[0] = False
        sys.stderr.write(f"\n[the text above is no answer: {piece}]\n")
        sys.stderr.flush()


_SHOWN = [False]  # whether ``show_text`` wrote text since the last discard


class _Fields(dict[str, Any]):
    """An event's data to format a line from: a field it lacks shows as ``None``."""

    def __missing__(self, key: str) -> None:
        return None


# The events shown as one line of their fields, and the style of that line.
_ONE_LINE: dict[str, tuple[str, str]] = {
    "model_error": ("  model error: {error}", "red"),
    "policy_denied": ("  ✗ {tool} denied: {reason}", "red"),
    "tool_error": ("  ✗ {tool} refused: {message}", "red"),
    "approval_requested": ("  … {tool} waits for approval", "yellow"),
    "budget_exhausted": ("  budget: {detail}", "yellow"),
}


class ProgressSink:
    """Prints the run's progress on stderr (a ``TraceSink``)."""

    def __init__(self, console: Any = None) -> None:
        if console is None:
            from rich.console import Console

            console = Console(stderr=True, highlight=False)
        self.console = console
        self.turns = 0

    def _line(self, text: str, style: str = "") -> None:
        from rich.text import Text

        self.console.print(Text(text, style=style))

    def write(self, event: Any) -> None:
        kind, d = str(event.kind), event.data
        if kind in ("run_started", "run_resumed"):
            verb = "resumed" if kind == "run_resumed" else "started"
            self._line(f"run {event.run_id} {verb}: model {d.get('model')}, {len(d.get('tools', []))} tools")
        elif kind == "server_launch" and d.get("state") == "failed":
            self._line(f"  server {d.get('server')} unavailable: {d.get('error', '')}", "red")
        elif kind == "context_composed":
            self.turns += 1
            self._line(f"model turn {self.turns} ({d.get('request_tokens', '?')} tokens) …", "dim")
        elif kind == "model_response":
            calls = [c.get("name") for c in d.get("tool_calls", [])]
            retries = len(d.get("retries", []))
            what = f"asks for {', '.join(calls)}" if calls else "answers"
            self._line(f"  model {what}" + (f" after {retries} retries" if retries else ""))
        elif kind == "tool_observation":
            if not d.get("is_error"):
                self._line(f"  ✓ {d.get('tool')} ok ({d.get('chars')} chars)")
            else:
                status = f"error {d.get('error_kind') or ''}".strip()
                self._line(f"  ✗ {d.get('tool')} {status} ({d.get('chars')} chars)", "red")
        elif kind in _ONE_LINE:
            line, style = _ONE_LINE[kind]
            self._line(line.format_map(_Fields(d)), style)
        elif kind == "handoff_rejected":
            self._line(f"  handoff rejected: {'; '.join(d.get('problems', []))}", "red")
        elif kind == "stop":
            self._line(f"stop: {d.get('reason')} {d.get('detail') or ''}".rstrip(), "bold")

    def close(self) -> None:
        pass


def write_results(result: Any, secrets: frozenset[str] | set[str]) -> Path | None:
    """Store every tool result's content beside the run's trace, redacted; returns the path."""
    from tether.trace._sanitize import Redactor, sanitize_value

    if result.trace_path is None:
        return None
    path = Path(result.trace_path).with_suffix(".results.jsonl")
    redactor = Redactor(set(secrets))
    kept = _kept_calls(path)  # a resumed run's results of before the pause are there already
    with path.open("a", encoding="utf-8") as f:
        for obs in result.observations:
            if obs.call_id in kept:
                continue
            text = obs.text
            line = {
                "run_id": result.run_id,
                "call_id": obs.call_id,
                "tool": obs.tool,
                "source": obs.source,
                "is_error": obs.is_error,
                "error_kind": obs.error_kind,
                "chars": len(text),
                "text": text[:MAX_RESULT_CHARS],
                "cut": len(text) > MAX_RESULT_CHARS,
            }
            f.write(json.dumps(sanitize_value(line, redactor), ensure_ascii=True) + "\n")
    return path


def _kept_calls(path: Path) -> set[str]:
    """The call ids whose results ``path`` holds (none when it does not exist)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return set()
    kept: set[str] = set()
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("call_id"), str):
            kept.add(entry["call_id"])
    return kept
