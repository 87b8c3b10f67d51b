"""Runs from their traces (sanitised and redacted when written): a filtered list, and one run
as a timeline. Embedded, one ``<run_id>.jsonl`` per run (summaries cached by size and mtime); a
deployment's come from its shared trace store (``StoredTraceIndex``).
"""

from __future__ import annotations

import json
import os
import re
import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from tether.trace._stats import number, trace_stats
from tether.trace._tracer import line_event

__all__ = [
    "SCANNED_RUNS",
    "SHOWN_RUNS",
    "RunFilter",
    "RunIndex",
    "RunSummary",
    "RunView",
    "StoredTraceIndex",
    "TimelineItem",
    "TraceIndex",
    "nests_deeper",
    "run_filter",
    "run_totals",
    "shallow",
    "timeline",
    "valid_run_id",
]

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def valid_run_id(run_id: str) -> bool:
    """Whether ``run_id`` is one (whole: ``$`` would let a trailing newline through) and no ``..``."""
    return bool(_RUN_ID.fullmatch(run_id)) and ".." not in run_id


@dataclass(frozen=True, slots=True)
class RunSummary:
    run_id: str
    tenant: str | None
    agent: str
    design: str
    model: str
    objective: str
    started: str
    ended: str
    stop_reason: str  # the last stop; "" while running (or if the trace was cut short)
    detail: str
    events: int
    resumed: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class RunFilter:
    tenant: str = ""
    stop_reason: str = ""
    agent: str = ""
    since: str = ""  # ISO date or date-time (UTC)
    until: str = ""
    # The tenants a principal may see (``None``: all), applied before a list is cut at its limit.
    visible: frozenset[str] | None = None

    def matches(self, run: RunSummary) -> bool:
        if self.visible is not None and run.tenant not in self.visible:
            return False
        if self.tenant and run.tenant != self.tenant:
            return False
        if self.stop_reason and run.stop_reason != self.stop_reason:
            return False
        if self.agent and self.agent not in (run.agent, run.design):
            return False
        if self.since and run.started[: len(self.since)] < self.since:
            return False
        return not (self.until and run.started[: len(self.until)] > self.until)


def run_filter(params: Mapping[str, str]) -> RunFilter:
    """The filter a page's or the API's query string asks for (unknown bounds ignored)."""
    return RunFilter(
        tenant=params.get("tenant", ""),
        stop_reason=params.get("stop_reason", ""),
        agent=params.get("agent", "")[:100],
        since=parse_day(params.get("since", "")),
        until=parse_day(params.get("until", "")),
    )


SHOWN_RUNS = 500  # on the runs page and in the API's list, newest first, after the filters
SCANNED_RUNS = 20_000  # the runs a list reads to fill it and the page's choices (a folder's all, cached)

# What one view of a run (its page, its API) reads of its trace: the one owner of these bounds.
VIEW_EVENTS = 2000  # events read and shown; the rest of the trace is not read
VIEW_BYTES = 32 << 20  # bytes of trace read; the rest is not read
LINE_BYTES = 1 << 20  # one trace line; a longer one is skipped (counted), never loaded whole
SCANNED_EVENTS = 200  # events of the kinds looked for that one scan of a run keeps (``RunIndex.scan``)
# Which events a scan keeps besides their kind (a proposal's page: its turn's calls); None: all.
Where = Callable[[dict[str, Any]], bool] | None


@dataclass(slots=True)
class RunView:
    """What a view read of one run's trace: its first events, and what it left: lines over
    ``LINE_BYTES`` skipped, and the bytes after the last one read (``cut``: not all was read)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    skipped_lines: int = 0
    skipped_bytes: int = 0
    unread_bytes: int = 0
    unread_events: int = 0  # where a store gave them all (a folder's trace counts bytes)

    @property
    def cut(self) -> bool:
        return bool(self.skipped_lines or self.unread_bytes or self.unread_events)

    def notice(self) -> dict[str, Any] | None:
        """The cut, as the page and the API say it (``None``: the whole trace was read)."""
        if not self.cut:
            return None
        return {
            "events_shown": len(self.events),
            "lines_skipped": self.skipped_lines,
            "bytes_skipped": self.skipped_bytes,
            "bytes_unread": self.unread_bytes,
            "events_unread": self.unread_events,
        }


def _lines(f: IO[bytes], view: RunView) -> Iterator[bytes]:
    """The lines of ``f``, each at most ``LINE_BYTES`` (a longer one is read past in pieces,
    counted in ``view``, and never held whole)."""
    while line := f.readline(LINE_BYTES + 1):
        if len(line) > LINE_BYTES and not line.endswith(b"\n"):
            size = len(line)
            while (rest := f.readline(LINE_BYTES)) and not rest.endswith(b"\n"):
                size += len(rest)
            view.skipped_lines += 1
            view.skipped_bytes += size + len(rest)
            continue
        yield line


def _stream(f: IO[bytes], view: RunView, names: Collection[bytes] = ()) -> Iterator[dict[str, Any]]:
    """The events of ``f``'s lines (with ``names``: only of lines holding one of them)."""
    for line in _lines(f, view):
        if names and not any(name in line for name in names):
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):  # blank, cut by a crash, or nested past reading
            value = line_event(line)  # an event an earlier release glued after a cut line
        if isinstance(value, dict):
            yield value


def read_view(path: Path) -> RunView:
    """The first ``VIEW_EVENTS`` events of a trace file, reading at most about ``VIEW_BYTES``."""
    view = RunView()
    with path.open("rb") as f:
        for event in _stream(f, view):
            view.events.append(event)
            if len(view.events) >= VIEW_EVENTS or f.tell() >= VIEW_BYTES:
                break
        view.unread_bytes = max(0, os.fstat(f.fileno()).st_size - f.tell())
    return view


def _kinds(
    events: Iterable[dict[str, Any]], kinds: Collection[str], where: Where, limit: int
) -> list[dict[str, Any]]:
    """The first ``limit`` of ``events`` of one of ``kinds`` that ``where`` keeps."""
    found: list[dict[str, Any]] = []
    for e in events:
        if e.get("kind") in kinds and (where is None or where(e)):
            found.append(e)
            if len(found) >= limit:
                break
    return found


def scan_file(
    path: Path, kinds: Collection[str], where: Where = None, limit: int = SCANNED_EVENTS
) -> list[dict[str, Any]]:
    """``RunIndex.scan`` of a trace file: read as a stream, a line parsed only when it names one of
    ``kinds`` (a long trace costs its reading, never its events' memory)."""
    with path.open("rb") as f:
        return _kinds(_stream(f, RunView(), [json.dumps(k).encode() for k in kinds]), kinds, where, limit)


def _read(path: Path) -> Iterator[dict[str, Any]]:
    """Every event of a trace file, as a stream (a line over ``LINE_BYTES`` skipped)."""
    with path.open("rb") as f:
        yield from _stream(f, RunView())


def summarise(run_id: str, events: Iterable[dict[str, Any]]) -> RunSummary:
    """A run's summary from its events, read once as a stream (none of them kept)."""
    head: dict[str, Any] = {"start": None, "stop": None, "first_ts": "", "events": 0, "resumed": False}
    named: set[str] = set()  # each tenant a start names (``_summary``: more than one is nobody's)
    for e in events:
        kind = e.get("kind")
        if not head["events"]:
            head["first_ts"] = e.get("ts", "")
        head["events"] += 1
        if kind in ("run_started", "run_resumed"):
            named.add(json.dumps(e.get("tenant"), sort_keys=True, default=str))
            head["start"] = head["start"] or e
        if kind == "stop":
            head["stop"] = e
        head["resumed"] = head["resumed"] or kind == "run_resumed"
    return _summary(run_id, {**head, "tenants": len(named)})


def _summary(run_id: str, head: Mapping[str, Any]) -> RunSummary:
    """A run's summary from its head (as a trace store's ``runs`` gives it). Its tenant is the one
    its starts name: ``None`` (no tenant's: only a grant of every tenant sees it) where they name
    more than one (``tenants``: another run's events under this id, its start first or after) or
    a tenant as anything but text (JSON ``null``, ``42``: no tenant named ``None`` or ``42`` sees it)."""
    start, stop = head.get("start") or {}, head.get("stop") or {}
    tenant = start.get("tenant")
    if not isinstance(tenant, str) or int(number(head.get("tenants")) or 1) > 1:
        tenant = None
    return RunSummary(
        run_id=run_id,
        tenant=tenant,
        agent=str(start.get("agent") or start.get("workflow") or start.get("design") or ""),
        design=str(start.get("design") or ""),
        model=str(start.get("model") or ""),
        objective=str(start.get("objective") or ""),
        started=str(head.get("first_ts") or ""),
        ended=str(stop.get("ts", "")),
        stop_reason=str(stop.get("reason") or ""),
        detail=str(stop.get("detail") or ""),
        events=int(number(head.get("events")) or 0),
        resumed=bool(head.get("resumed")),
    )


class RunIndex(ABC):
    """Where the console reads runs: ``TraceIndex`` (a folder) or ``StoredTraceIndex`` (a deployment)."""

    @abstractmethod
    def runs(self, flt: RunFilter | None = None, *, limit: int = 500) -> list[RunSummary]:
        """The runs ``flt`` selects, newest first, at most ``limit``."""

    @abstractmethod
    def events(self, run_id: str) -> list[dict[str, Any]]:
        """One run's trace events, in order."""

    def get(self, run_id: str) -> RunSummary | None:
        events = self.events(run_id)
        return summarise(run_id, events) if events else None

    def view(self, run_id: str) -> RunView:
        """What a run's page and API show of its trace: its first ``VIEW_EVENTS`` events."""
        events = self.events(run_id)
        return RunView(events[:VIEW_EVENTS], unread_events=max(0, len(events) - VIEW_EVENTS))

    def scan(
        self, run_id: str, kinds: Collection[str], where: Where = None, limit: int = SCANNED_EVENTS
    ) -> list[dict[str, Any]]:
        """The first ``limit`` events of ``kinds`` in a run's trace that ``where`` keeps (what the
        questions page and a proposal's page look for in a run), never the whole trace held."""
        return _kinds(self.events(run_id), kinds, where, limit)


class TraceIndex(RunIndex):
    """The runs of one trace folder."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._cache: dict[str, tuple[int, int, RunSummary]] = {}
        self._lock = threading.Lock()

    def path(self, run_id: str) -> Path | None:
        if not valid_run_id(run_id):
            return None
        path = self.directory / f"{run_id}.jsonl"
        return path if self._inside(path) else None

    def _inside(self, path: Path) -> bool:
        """Whether ``path`` is a file of this folder: a link to a file elsewhere is no run."""
        try:
            return path.is_file() and path.resolve().parent == self.directory.resolve()
        except OSError:
            return False

    def runs(self, flt: RunFilter | None = None, *, limit: int = 500) -> list[RunSummary]:
        if not self.directory.is_dir():
            return []
        out, seen = [], set()
        for path in self.directory.glob("*.jsonl"):
            seen.add(path.stem)
            summary = self._summary(path)
            if summary is not None and (flt is None or flt.matches(summary)):
                out.append(summary)
        with self._lock:  # a trace deleted since: its memo goes too
            for run_id in self._cache.keys() - seen:
                del self._cache[run_id]
        out.sort(key=lambda r: (r.started, r.run_id), reverse=True)
        return out[:limit]

    def get(self, run_id: str) -> RunSummary | None:
        path = self.path(run_id)
        if path is None:
            self._forget(run_id)
            return None
        return self._summary(path)

    def events(self, run_id: str) -> list[dict[str, Any]]:
        path = self.path(run_id)
        return list(_read(path)) if path is not None else []

    def view(self, run_id: str) -> RunView:
        path = self.path(run_id)
        try:
            return read_view(path) if path is not None else RunView()
        except OSError:
            return RunView()

    def scan(
        self, run_id: str, kinds: Collection[str], where: Where = None, limit: int = SCANNED_EVENTS
    ) -> list[dict[str, Any]]:
        path = self.path(run_id)
        try:
            return scan_file(path, kinds, where, limit) if path is not None else []
        except OSError:
            return []

    def _forget(self, run_id: str) -> None:
        with self._lock:
            self._cache.pop(run_id, None)

    def _summary(self, path: Path) -> RunSummary | None:
        run_id = path.stem
        if not valid_run_id(run_id) or not self._inside(path):
            self._forget(run_id)
            return None
        try:
            st = path.stat()
        except OSError:
            self._forget(run_id)
            return None
        with self._lock:
            cached = self._cache.get(run_id)
        if cached and cached[0] == st.st_mtime_ns and cached[1] == st.st_size:
            return cached[2]
        try:
            summary = summarise(run_id, _read(path))
        except OSError:
            self._forget(run_id)
            return None
        with self._lock:
            self._cache[run_id] = (st.st_mtime_ns, st.st_size, summary)
        return summary


_CATEGORY = {
    kind: category
    for category, kinds in {
        "lifecycle": "run_started run_resumed",
        "pause": "run_paused",
        "model": "context_composed model_response model_error",
        "proposal": "tool_proposed",
        "decision": "policy_allowed policy_denied tool_error",
        "approval": "approval_requested approval_granted approval_denied",
        "observation": "tool_observation tool_crashed",
        "effect": "effect_intent effect_recorded effect_replayed effect_reconciled effect_escalated",
        "question": "mcp_elicitation",
        "stop": "stop",
    }.items()
    for kind in kinds.split()
}
_SKIP = {"run_id", "seq", "ts", "kind"}
SHOWN_DEPTH = 32  # of a value in an event's facts: deeper parts are cut (a run may nest hundreds deep)


def shallow(value: Any, depth: int = SHOWN_DEPTH) -> Any:
    """``value`` with whatever is nested deeper than ``depth`` replaced by a marker, so that
    rendering, copying and encoding it stay within Python's recursion limit (a trace's event, a
    proposal's arguments: a model may nest hundreds deep)."""
    if not isinstance(value, dict | list):
        return value
    if depth <= 0:
        return f"… (nested deeper than {SHOWN_DEPTH} levels: cut)"
    if isinstance(value, list):
        return [shallow(v, depth - 1) for v in value]
    return {k: shallow(v, depth - 1) for k, v in value.items()}


def nests_deeper(value: Any, depth: int = SHOWN_DEPTH) -> bool:
    """Whether ``shallow`` cuts ``value`` (read without recursion: it may nest past the limit)."""
    stack = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            if level >= depth:
                return True
            stack.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


def _category(kind: str, e: Mapping[str, Any]) -> str:
    """The event's colour on the timeline: a call paused for a question is a pause, not an error."""
    if kind == "tool_observation" and e.get("error_kind") == PAUSED_KIND:
        return "pause"
    return _CATEGORY.get(kind, "other")


@dataclass(frozen=True, slots=True)
class TimelineItem:
    seq: int
    ts: str
    kind: str
    category: str
    title: str
    facts: dict[str, Any] = field(default_factory=dict)
    rule: str | None = None  # a decision links to its rule
    proposal: str | None = None  # an approval links to its proposal
    trust: str | None = None  # an observation's trust label
    turn: int = 0  # the model turn it belongs to (0: before the first), as the queue and proposals number it

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _answered(e: Mapping[str, Any]) -> str:
    calls = ", ".join(str(c.get("name", "?")) for c in e.get("tool_calls") or [] if isinstance(c, dict))
    tokens = f" ({e.get('prompt_tokens', 0)} in, {e.get('completion_tokens', 0)} out)"
    return f"model {e.get('model', '')} answered{tokens}" + (f" with calls: {calls}" if calls else "")


def _proposed(e: Mapping[str, Any]) -> str:
    args = str(e.get("arguments") or "")
    return f"proposed {e.get('tool') or ''} " + (args if len(args) <= 120 else args[:119] + "…")


def _observed(e: Mapping[str, Any]) -> str:
    tool = e.get("tool") or ""
    if e.get("error_kind") == PAUSED_KIND:  # waiting, not failed: the run resumes once answered
        return f"paused: {tool} waits for a person's answer (or its server's long task), not an error"
    return f"{'error' if e.get('is_error') else 'result'} from {tool} via {e.get('source', '?')}"


# One line per event kind: what happened, in words (the facts are shown beside it).
_TITLES: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "context_composed": lambda e: (
        f"request composed: {e.get('messages', '?')} messages, {e.get('tools', '?')} tools"
    ),
    "model_response": _answered,
    "tool_proposed": _proposed,
    "policy_allowed": lambda e: f"allowed {e.get('tool') or ''} (rule {e.get('rule', '?')})",
    "policy_denied": lambda e: (
        f"denied {e.get('tool') or ''}: {e.get('reason', '')} (rule {e.get('rule', '?')})"
    ),
    "tool_error": lambda e: f"refused {e.get('tool') or ''}: {e.get('error', '')}",
    "approval_requested": lambda e: f"approval requested for {e.get('tool') or ''}",
    "approval_granted": lambda e: f"approved {e.get('tool') or ''} by {e.get('reviewer', '?')}",
    "approval_denied": lambda e: (
        f"not approved {e.get('tool') or ''}: {e.get('status') or e.get('reason') or ''}"
    ),
    "tool_observation": _observed,
    "mcp_elicitation": lambda e: (
        f"question from server {e.get('server', '?')} ({e.get('tool') or 'no call'}): {e.get('outcome', '')}"
    ),
    "run_paused": lambda e: (
        f"run paused: waiting for {len(e.get('proposals') or []) + len(e.get('problems') or [])} decision(s) "
        "or answer(s)"
    ),
    "stop": lambda e: f"stop: {e.get('reason', '')}",
}
PAUSED_KIND = "input_pending"  # a call waiting for a person's answer (or a long task): paused, not failed


def _title(kind: str, e: Mapping[str, Any]) -> str:
    if kind in _TITLES:
        return _TITLES[kind](e)
    if kind.startswith("effect_"):
        return f"{kind.replace('_', ' ')}: {e.get('tool') or ''} {e.get('key', '')}"
    if kind in ("run_started", "run_resumed"):
        return f"{kind.replace('_', ' ')}: {e.get('agent') or e.get('workflow') or e.get('design') or ''}"
    return kind.replace("_", " ")


def _safe_title(kind: str, e: Mapping[str, Any]) -> str:
    """The event's line, or its kind where a field has a type its line cannot take (the facts
    beside it show the fields as written)."""
    try:
        return _title(kind, e)
    except (TypeError, ValueError, AttributeError):
        return kind.replace("_", " ")


def timeline(events: Iterable[Mapping[str, Any]]) -> list[TimelineItem]:
    """The run's events in order, each with its model turn: turn N starts at the run's Nth model
    response (across resumed parts), as the queue and proposal pages number them (step N-1)."""
    items = []
    turn = 0
    for e in events:
        kind = str(e.get("kind", ""))
        if kind == "model_response":
            turn += 1
        rule = e.get("rule") if kind in ("policy_allowed", "policy_denied") else None
        proposal = e.get("proposal_id") if kind.startswith("approval_") else None
        trust = e.get("trust") if kind == "tool_observation" else None
        items.append(
            TimelineItem(
                int(number(e.get("seq")) or 0),
                str(e.get("ts", "")),
                kind,
                _category(kind, e),
                _safe_title(kind, e),
                {k: shallow(v) for k, v in e.items() if k not in _SKIP},
                str(rule) if rule else None,
                str(proposal) if proposal else None,
                str(trust) if trust else None,
                turn,
            )
        )
    return items


def run_totals(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Tokens, cost and prefix reuse of one run (every part, resumed parts included)."""
    responses = [e for e in events if e.get("kind") == "model_response"]
    stats, kinds = trace_stats(events), Counter(e.get("kind") for e in events)
    tokens = ("prompt_tokens", "completion_tokens", "cached_tokens")
    return {
        "model_calls": len(responses),
        **{k: sum(int(number(e.get(k)) or 0) for e in responses) for k in tokens},
        "cost_usd": round(sum(number(e.get("cost_usd")) or 0.0 for e in responses), 6),
        "prefix_reuse_mean": stats["prefix_reuse_mean"],
        "prefix_reuse_min": stats["prefix_reuse_min"],
        "tool_calls": kinds["tool_proposed"],
        "denied": kinds["policy_denied"],
        "approvals": kinds["approval_requested"],
    }


def parse_day(text: str) -> str:
    """A filter bound: an ISO date or date-time, else ``""`` (ignored)."""
    text = text.strip()
    try:
        datetime.fromisoformat(text)  # "" too is refused
    except ValueError:
        return ""
    return text


class StoredTraceIndex(RunIndex):
    """A deployment's runs (every worker's), from its trace store: a list reads the ``SCAN`` newest
    of the tenants its reader may see."""

    SCAN = 2000

    def __init__(self, store: Any) -> None:
        self.store = store

    def runs(self, flt: RunFilter | None = None, *, limit: int = 500) -> list[RunSummary]:
        out = []
        visible = flt.visible if flt is not None else None  # read before the scan is cut
        for head in self.store.runs(self.SCAN, tenants=visible):
            run_id = str(head["run_id"])
            if not valid_run_id(run_id):
                continue
            summary = _summary(run_id, head)
            if flt is None or flt.matches(summary):
                out.append(summary)
        return out[:limit]

    def events(self, run_id: str) -> list[dict[str, Any]]:
        if not valid_run_id(run_id):
            return []
        return [e for e in self.store.events(run_id) if isinstance(e, dict)]
