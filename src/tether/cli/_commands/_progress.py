"""Progress a person can follow while a run goes on, and tool results kept for a third person.

``ProgressSink`` is a trace sink: it sees the run's events as the host emits them (already
sanitised and redacted) and prints one short line per model turn, call decision and result on
stderr, with rich, only when stderr is a terminal and ``--json`` is off. ``write_results`` stores
the content of every tool result beside the trace (``<run_id>.results.jsonl``), redacted like the
trace itself; it is off unless asked for (``--trace-results`` or ``trace.results: true``).
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
    """A streamed answer's text as it arrives, on stderr (a model's ``on_delta``)."""
    if kind == "text":
        sys.stderr.write(piece)
        sys.stderr.flush()


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
        kind, data = str(event.kind), event.data
        if kind in ("run_started", "run_resumed"):
            verb = "resumed" if kind == "run_resumed" else "started"
            tools = len(data.get("tools", []))
            self._line(f"run {event.run_id} {verb}: model {data.get('model')}, {tools} tools")
        elif kind == "server_launch" and data.get("state") == "failed":
            self._line(f"  server {data.get('server')} unavailable: {data.get('error', '')}", "red")
        elif kind == "context_composed":
            self.turns += 1
            self._line(f"model turn {self.turns} ({data.get('request_tokens', '?')} tokens) …", "dim")
        elif kind == "model_response":
            calls = [c.get("name") for c in data.get("tool_calls", [])]
            what = f"asks for {', '.join(calls)}" if calls else "answers"
            retries = len(data.get("retries", []))
            self._line(f"  model {what}" + (f" after {retries} retries" if retries else ""))
        elif kind == "model_error":
            self._line(f"  model error: {data.get('error')}", "red")
        elif kind == "policy_denied":
            self._line(f"  ✗ {data.get('tool')} denied: {data.get('reason')}", "red")
        elif kind == "tool_error":
            self._line(f"  ✗ {data.get('tool')} refused: {data.get('message')}", "red")
        elif kind == "approval_requested":
            self._line(f"  … {data.get('tool')} waits for approval", "yellow")
        elif kind == "tool_observation":
            ok = not data.get("is_error")
            status = "ok" if ok else f"error {data.get('error_kind') or ''}".strip()
            self._line(
                f"  {'✓' if ok else '✗'} {data.get('tool')} {status} ({data.get('chars')} chars)",
                "" if ok else "red",
            )
        elif kind == "budget_exhausted":
            self._line(f"  budget: {data.get('detail')}", "yellow")
        elif kind == "handoff_rejected":
            self._line(f"  handoff rejected: {'; '.join(data.get('problems', []))}", "red")
        elif kind == "stop":
            self._line(f"stop: {data.get('reason')} {data.get('detail') or ''}".rstrip(), "bold")

    def close(self) -> None:
        pass


def write_results(result: Any, secrets: frozenset[str] | set[str]) -> Path | None:
    """Store every tool result's content beside the run's trace, redacted; returns the path."""
    from tether.trace._sanitize import Redactor, sanitize_value

    if result.trace_path is None:
        return None
    path = Path(result.trace_path).with_suffix(".results.jsonl")
    redactor = Redactor(set(secrets))
    with path.open("a", encoding="utf-8") as f:
        for obs in result.observations:
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
