"""The provenance index of a run: its observations labelled, and what the run itself wrote.

``index_for`` builds the ``ProvenanceIndex`` a rule reads from a run state (its objective,
its observations with their positions, and the arguments of every call that reached its
tool); ``make_labeler`` is the host hook that labels each observation as it arrives, so a
checkpoint keeps the labels (``observation_segments`` restores them). The rules that read
the index are in ``_provenance_rules``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import weakref
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from tether.core.types import CallRecord
from tether.policy._provenance import ProvenanceIndex
from tether.policy._provenance_declarations import ToolRules
from tether.policy._provenance_decoding import decoded
from tether.policy._provenance_labels import (
    ERROR,
    Directory,
    Segment,
    SourceLabel,
    TrustConfig,
    label_observation,
    least_trusted,
    normalise,
    split_values,
)
from tether.policy._provenance_text import Written
from tether.policy._provenance_values import find_links
from tether.policy._rules import HARNESS_SOURCE

__all__ = [
    "ERROR",
    "REACHED",
    "RECALLED",
    "SENT",
    "RunIndex",
    "calls_before",
    "history",
    "index_for",
    "least_read",
    "make_labeler",
    "observation_segments",
    "recalled_segments",
    "writes_per_rules",
]


def _error_segments(obs: Any) -> list[Segment]:
    text = obs.text if isinstance(obs.text, str) else ""
    label = SourceLabel(obs.tool, obs.source, ERROR, call_id=obs.call_id)
    return [Segment(text, normalise(text), label, False)] if text.strip() else []


def observation_segments(obs: Any, config: TrustConfig, own: Iterable[str] = ()) -> list[Segment]:
    """Segments of one observation: the labels the host attached, or labelled now. An error's
    text is one segment of the ``ERROR`` class, whatever was cached."""
    if obs.is_error:
        return _error_segments(obs)
    cached = obs.meta.get("provenance") if isinstance(getattr(obs, "meta", None), dict) else None
    if isinstance(cached, list):
        restored = [_segment(item) for item in cached]
        if all(seg is not None for seg in restored):
            return [seg for seg in restored if seg is not None]
    return label_observation(obs.tool, obs.source, obs.data, obs.text, config, own=own, call_id=obs.call_id)


def make_labeler(config: TrustConfig, own: Iterable[str] = ()) -> Callable[[Any], Any]:
    """A ``Host(labeler=...)`` hook: attaches labelled segments (``meta["provenance"]``) and a
    summary of the sources an observation holds (``meta["sources"]``: record, author, trust).
    ``own``: the user's own identities (for ``self_naming`` fields)."""
    mine = list(own)

    def label(obs: Any) -> Any:
        segments = (
            _error_segments(obs)
            if obs.is_error
            else label_observation(
                obs.tool, obs.source, obs.data, obs.text, config, own=mine, call_id=obs.call_id
            )
        )
        sources = sorted({(s.label.record_id or "", s.label.author or "", s.label.trust) for s in segments})
        summary = [{"record_id": r or None, "author": a or None, "trust": t} for r, a, t in sources]
        return dataclasses.replace(obs, meta={**obs.meta, "provenance": segments, "sources": summary})

    return label


def _segment(item: Any) -> Segment | None:
    """A segment, or one restored from a checkpoint (where it became a plain mapping)."""
    if isinstance(item, Segment):
        return item
    try:
        return Segment(
            item["raw"],
            item["text"],
            SourceLabel(**item["label"]),
            bool(item["whole"]),
            item["field_name"],
            str(item.get("naming", "")),
        )
    except (TypeError, KeyError, AttributeError):
        return None


RELAYS = "relays"
"""Key of an observation's data naming the call ids whose output it repeats (a page of a stored
output): it is no more trusted than they are."""
RELAYS_TRUST = "relays_trust"
"""Key of an observation's data naming the least trusted class of what it relays from outside
the run (a subagent's answer: what its child run read, ``least_read``)."""


RECALLED = "recalled_memory"
"""The class of a claim the run recalled from memory (``RunState.memory``): text a store kept,
which an earlier run's hook or an import may have taken from anyone's page, shown to the model
as untrusted (``chokepoint._labels.memory_line``). Outside ``TRUST_ORDER``: no rule trusts it."""


def recalled_segments(state: Any) -> list[Segment]:
    """The records the run recalled before its first call, one free-text segment each, of the
    ``RECALLED`` class. The model read them as it reads a tool's text: a value one gives, or a
    query, sum or lookup it chose, is text someone chose (``steering``, ``selected_by``). A
    record is read as ``chokepoint._labels.memory_line`` shows it: its claim, the subject it is
    kept under (read below the subject an agent recalls) and the source it names
    (``system/record``), each written by whoever kept it."""
    found = []
    for record in getattr(state, "memory", None) or []:
        src = getattr(record, "source", None)
        origin = f"{src.system}/{src.record}" if src is not None else "unknown"
        shown = (
            getattr(record, "claim", None),
            getattr(record, "subject", None),
            origin if src is not None else None,
        )
        text = "\n".join(piece for piece in shown if isinstance(piece, str) and piece.strip())
        if not text:
            continue
        rid = str(getattr(record, "id", "") or "")
        label = SourceLabel("memory", origin, RECALLED, record_id=rid or None, call_id=f"memory:{rid}")
        found.append(Segment(text, normalise(text), label, False))
    return found


def least_read(observations: Iterable[Any]) -> str | None:
    """The least trusted class among ``observations`` (a child run's, whose answer relays what
    it read): the labels the host attached, and the classes they relay in turn; None when they
    hold no label (nothing read). An error's message is ``ERROR`` text whatever was cached, as
    ``observation_segments`` reads it (releases up to 19cb230 cached no label for it). An
    observation the host did not label (a host without a labeler) counts as ``least_trusted``
    of nothing: what it holds is unknown."""
    classes: set[str] = set()
    for obs in observations:
        cached = obs.meta.get("provenance") if isinstance(getattr(obs, "meta", None), dict) else None
        restored = [_segment(item) for item in cached] if isinstance(cached, list) else [None]
        if obs.is_error:
            classes.update(seg.label.trust for seg in _error_segments(obs))
        elif all(seg is not None for seg in restored):
            classes.update(seg.label.trust for seg in restored if seg is not None)
        else:
            classes.add(least_trusted(()))
        carried = obs.data.get(RELAYS_TRUST) if isinstance(obs.data, Mapping) else None
        if isinstance(carried, str) and obs.source == HARNESS_SOURCE:
            classes.add(carried)
    return least_trusted(classes) if classes else None


def _as_relayed(obs: Any, found: list[Segment], earlier: Mapping[str, list[Segment]]) -> list[Segment]:
    """``found`` (the segments of ``obs``), each no more trusted than the observations ``obs``
    relays (``RELAYS``) and the class it carries (``RELAYS_TRUST``, a subagent's answer): its
    class becomes the least trusted of its own and theirs. Decided here, from the run, whatever
    labels the host cached; a relay of a call the run does not hold (or none named) changes
    nothing."""
    if getattr(obs, "source", None) != HARNESS_SOURCE:
        # Only the host's own tools relay (read_output): a tool's data that names ``relays``
        # would otherwise choose the classes its own text takes.
        return found
    named = obs.data.get(RELAYS) if isinstance(obs.data, Mapping) else None
    ids = [named] if isinstance(named, str) else named if isinstance(named, list) else []
    relayed = {seg.label.trust for i in ids if isinstance(i, str) for seg in earlier.get(i, ())}
    carried = obs.data.get(RELAYS_TRUST) if isinstance(obs.data, Mapping) else None
    if isinstance(carried, str):
        relayed.add(carried)
    if not relayed:
        return found
    out = []
    for seg in found:
        trust = least_trusted({seg.label.trust, *relayed})
        out.append(
            seg
            if trust == seg.label.trust
            else dataclasses.replace(seg, label=dataclasses.replace(seg.label, trust=trust))
        )
    return out


def index_for(
    state: Any,
    config: TrustConfig,
    directory: Directory | Mapping[str, Iterable[str]] | Iterable[str] = (),
    own: Iterable[str] = (),
    writes: Callable[[str], bool] | None = None,
    targets: Callable[[str], Iterable[str]] | None = None,
) -> ProvenanceIndex:
    """The provenance index of a run state: the user's request (the objective, or the request
    a parent run handed a child run), the observations so far (each with
    its position in the run) and every value the run wrote (the arguments of each call that
    ran, with the number of observations made before it). ``writes(tool)`` says which tools
    write — store what they are given; by default every tool does. A read-only tool keeps
    nothing, so what it returns is its own data even where it repeats an argument (a lookup
    by name returns the record under its name). ``targets(tool)``: the arguments that name the
    record a tool acts on (``Written.target``)."""
    # What the run recalled from memory came before any tool ran: before every observation.
    segments: list[Segment] = recalled_segments(state)
    positions: list[int] = [-1] * len(segments)
    mine = list(own)
    # What the runs before it did (``RunState.inherited_*``: its parent's history when it started
    # this child run, a workflow's earlier nodes) is its history too, in the order observed.
    observations = sorted(history(state, "observations"), key=_observed)
    by_call: dict[str, list[Segment]] = {}
    aliases = _aliases(observations)
    for i, obs in enumerate(observations):
        found = _as_relayed(obs, observation_segments(obs, config, mine), by_call)
        by_call.setdefault(obs.call_id, []).extend(found)
        if aliases[i] != obs.call_id:  # a call id used again: this call's, not the first's
            found = [
                dataclasses.replace(g, label=dataclasses.replace(g.label, call_id=aliases[i])) for g in found
            ]
        segments.extend(found)
        positions.extend([i] * len(found))
    ids = frozenset(k for source in (*config.sources.values(), config.default) for k in source.record_id)
    written, reads = _writes(state, observations, aliases, writes, targets, ids)
    # The user's own words: a child run (a subagent, a workflow node) carries its parent's
    # request, since its objective was written by a model or built from data it read.
    # The day it was asked (the run's start: a resumed run's first), the year of a day it names
    # without one.
    request, started = getattr(state, "request", None), getattr(state, "started_at", None)
    return ProvenanceIndex(
        request if isinstance(request, str) else getattr(state, "objective", "") or "",
        segments=segments,
        directory=directory,
        positions=positions,
        writes=written,
        reads=reads,
        assigned=config.assigned,
        asked_on=started.date() if isinstance(started, datetime) else None,
    )


# What of a run grows as it goes and changes its index (``history``: inherited, then its own).
_GROWING = ("inherited_observations", "observations", "inherited_calls", "calls")


class RunIndex:
    """A rule's provenance index of the run it checks (``build``: ``index_for`` as the rule
    calls it), built again for another run or when its history (``_GROWING``) has grown. The run
    is held weakly: a new run that reuses an old one's ``id()`` never sees a stale index; one that
    cannot be (None, a plain dict) is never kept."""

    def __init__(self, build: Callable[[Any], ProvenanceIndex]) -> None:
        self._build = build
        self._kept: tuple[Callable[[], Any], tuple[int, ...], ProvenanceIndex] | None = None

    def __call__(self, state: Any) -> ProvenanceIndex:
        sizes = tuple(len(getattr(state, name, None) or []) for name in _GROWING)
        kept = self._kept
        if kept is not None and kept[0]() is state and kept[1] == sizes:
            return kept[2]
        index = self._build(state)
        with contextlib.suppress(TypeError):
            self._kept = (weakref.ref(state), sizes, index)
        return index


def writes_per_rules(tools: Mapping[str, ToolRules]) -> Callable[[str], bool]:
    """``index_for``'s ``writes`` for declared ``tools``: whether a tool stores what it is given
    (any tool not declared as a read)."""

    def writes(tool: str) -> bool:
        rules = tools.get(tool)
        return rules is None or rules.effect != "read"

    return writes


def _writes(
    state: Any,
    observations: list[Any],
    aliases: list[str],
    writes: Callable[[str], bool] | None,
    targets: Callable[[str], Iterable[str]] | None,
    ids: frozenset[str] = frozenset(),
) -> tuple[list[Written], dict[str, tuple[int, list[str]]]]:
    """What the calls of ``state`` that reached their tools wrote (``index_for``), each at the
    number of observations made before it, and the calls whose results were observed (with
    their argument leaves)."""
    written: list[Written] = []
    reads: dict[str, tuple[int, list[str]]] = {}
    calls = history(state, "calls")
    seen_at = _positions(calls, observations)
    answers = {i for i, obs in enumerate(observations) if _answer(obs)}
    # Calls the model proposed together ran together: a write among them may have stored its
    # value before another's read returned, whichever result came first.
    turns = _turns(state)
    began: dict[int, int] = {}
    for record, seen in zip(calls, seen_at, strict=True):
        if (turn := turns.get(record.call_id)) is not None and seen is not None:
            began[turn] = min(began.get(turn, seen), seen)
    after = 0  # observations made before the call: after the last one of a call before it
    for record, seen in zip(calls, seen_at, strict=True):
        at = after if seen is None else seen  # a call that crashed has no observation of its own
        after = max(after, at + 1 if seen is not None else after)
        if (turn := turns.get(record.call_id)) is not None:
            at = min(at, began.get(turn, at))
        if record.status not in REACHED:
            continue
        call_id = record.call_id if seen is None else aliases[seen]  # ``_aliases``
        leaves = _leaves(record.arguments)
        aimed, declared, fields = _aimed(
            record.arguments, targets(record.tool) if targets is not None else (), ids
        )
        if seen is not None:
            reads[call_id] = (seen, leaves)
        # A write: any later read may return it. A read keeps nothing, but what it returns may
        # repeat what it was asked (a search echoes its query): an echo into that call alone.
        echo = "" if writes is None or writes(record.tool) else call_id
        if seen in answers:
            written.append(Written(" ".join(map(normalise, leaves)), seen, echo=call_id, answer=True))
        if echo and seen is None:
            continue
        for leaf in (form for value in leaves for form in (value, *decoded(value))):
            text = normalise(leaf)
            if text:
                links = frozenset(link.key for link in find_links(leaf))
                target = not echo and text in aimed
                # What the record was changed to: the call's other values (another record's id
                # inside it too: ``vendor={"id": …}``), never its targets' ids nor field names.
                kept = declared | fields | {text}
                given = tuple(v for v in leaves if normalise(v) not in kept) if target else ()
                written.append(Written(text, at, links, echo, target=target, given=given))
    return written, reads


def _positions(calls: list[Any], observations: list[Any]) -> list[int | None]:
    """The position of each call's own observation among ``observations`` (None for a call that
    has none: refused, or crashed). A call id the model used again in a later turn (a backend
    that numbers each turn's calls from ``call_0``) names two calls: each record takes the next
    observation of its id, in order, never the first call's (a write placed at an earlier call's
    result was judged as made before the text that chose it had been read)."""
    slots: dict[str, list[int]] = {}
    for i, obs in enumerate(observations):
        slots.setdefault(obs.call_id, []).append(i)
    out: list[int | None] = []
    for record in calls:
        mine = slots.get(record.call_id) if record.status in _OBSERVED else None
        out.append(mine.pop(0) if mine else None)
    return out


def _aliases(observations: list[Any]) -> list[str]:
    """Each observation's call id, as the index tells calls apart: a call id the model used
    again (``_positions``) names another call each time, so its later results are labelled
    ``<id>\x00<n>``: a lookup's echo, what steered it and a task's answer are that call's."""
    count: dict[str, int] = {}
    out: list[str] = []
    for obs in observations:
        n = count[obs.call_id] = count.get(obs.call_id, -1) + 1
        out.append(obs.call_id if n == 0 else f"{obs.call_id}\x00{n}")
    return out


_OBSERVED = frozenset({"ok", "error"})  # the statuses of a call recorded with its observation


def _aimed(
    arguments: Any, names: Iterable[str], ids: frozenset[str] = frozenset()
) -> tuple[set[str], set[str], set[str]]:
    """What names the records a call acts on, normalised: the values of its arguments ``names``
    (``role: target``), and, in any object it was given (its arguments too, and an object sent
    as JSON text), the value of a key that names a record's id (``SourceTrust.record_id``, or
    a name ending in ``_id``/``Id``): an edit given ``changes={"id": "inv-1", "vendor": …}``
    changes invoice inv-1. Then, of those, the values of ``names`` (never what such a record
    was changed to), and the keys of those objects (its field names, not values it was given)."""
    if not isinstance(arguments, Mapping):
        return set(), set(), set()
    targets = {normalise(leaf) for name in names for leaf in split_values(arguments.get(name))}
    aimed, fields = set(targets), set[str]()

    def walk(v: Any, depth: int) -> None:
        if isinstance(v, str) and depth and v.strip()[:1] == "{":
            try:
                v = json.loads(v)
            except ValueError:
                return
        if isinstance(v, Mapping):
            keys = [k for k, item in v.items() if _id_key(str(k), ids) and _id_value(item)]
            if keys:
                aimed.update(normalise(str(v[k])) for k in keys)
                fields.update(normalise(str(k)) for k in v)
            for item in v.values():
                walk(item, depth + 1)
        elif isinstance(v, list | tuple):
            for item in v:
                walk(item, depth + 1)

    walk(arguments, 0)
    return aimed, targets, fields


def _id_key(key: str, ids: frozenset[str]) -> bool:
    """Whether an object's ``key`` names a record's id: a source's id field, or ``*_id``/``*Id``."""
    return key in ids or key.lower().endswith("_id") or (key.endswith("Id") and len(key) > 2)


def _id_value(v: Any) -> bool:
    """Whether ``v`` can be a record's id: a string or an integer (not a flag)."""
    return isinstance(v, str | int) and not isinstance(v, bool) and str(v).strip() != ""


ANSWER = "subagent_run"
"""Key of a harness observation's data that makes it a model's answer to the call's task (a
subagent's conclusion, ``SubtaskResult.as_tool_result``): it holds nothing of its own."""


def _answer(obs: Any) -> bool:
    """Whether ``obs`` is a model's answer to the task its call gave (``ANSWER``): what it holds
    is what the run that gave the task had, or what the child read (found there, in the history)."""
    data = getattr(obs, "data", None)
    return obs.source == HARNESS_SOURCE and isinstance(data, Mapping) and ANSWER in data and not obs.is_error


def _turns(state: Any) -> dict[str, int]:
    """The run's own calls by the model turn that proposed them (the assistant messages of its
    trajectory); an id used twice (or by a run before it) says nothing of when its call ran."""
    found: dict[str, int] = {}
    twice: set[str] = set()
    for turn, message in enumerate(getattr(state, "trajectory", None) or []):
        for proposed in getattr(message, "tool_calls", None) or ():
            call_id = getattr(proposed, "id", None)
            if isinstance(call_id, str):
                if call_id in found:
                    twice.add(call_id)
                found[call_id] = turn
    inherited = {getattr(c, "call_id", None) for c in getattr(state, "inherited_calls", None) or []}
    return {k: v for k, v in found.items() if k not in twice and k not in inherited}


def _leaves(arguments: Any) -> list[str]:
    """The values a call was given, leaf by leaf: never the names of its arguments."""
    if isinstance(arguments, Mapping):
        return [leaf for value in arguments.values() for leaf in split_values(value)]
    return split_values(arguments)


def history(state: Any, kind: str) -> list[Any]:
    """The run's inherited ``observations`` or ``calls`` (a parent's, a subagent's, an earlier
    workflow node's: what the runs of the same request did before), then its own."""
    return [*(getattr(state, f"inherited_{kind}", None) or []), *(getattr(state, kind, None) or [])]


def calls_before(state: Any, call_id: str, tools: Any = None) -> list[Any]:
    """What may have run, or will run, before or beside the proposed call ``call_id``: the calls
    of the request so far (``history``), then those its own model turn proposed before it. Every
    call of a turn is decided before any of them runs, so the ones the policy lets through (or
    sends to a reviewer) run beside it: they are kept as ``proposed``, with the arguments the
    model wrote, unless a record of this run shows what became of them (a refusal, or a result),
    or as their tools will receive them where ``tools`` (a ``ToolCatalog``) says their validators
    change them (a base64 piece a store decodes is the digits it keeps, as its record will say).
    A call id the model used twice names no one call: its call is counted whatever was recorded."""
    once = _turns(state)
    recorded = {getattr(r, "call_id", None) for r in history(state, "calls")}
    mates: list[Any] = []
    for message in reversed(getattr(state, "trajectory", None) or []):
        proposed = list(getattr(message, "tool_calls", None) or ())
        ids = [getattr(p, "id", None) for p in proposed]
        if call_id in ids:
            for p in proposed[: ids.index(call_id)]:
                if p.id not in once or p.id not in recorded:
                    arguments = _arguments(p.arguments)
                    received = tools.received_of(p.name, arguments) if tools is not None else None
                    mates.append(
                        CallRecord(p.id, p.name, arguments if received is None else received, "proposed")
                    )
            break
    return [*(_as_received(r) for r in history(state, "calls")), *mates]


def _as_received(record: Any) -> Any:
    """A call record with the arguments its tool received: a crashed call checkpointed by a
    release before 395fbec carries the model's argument text (a run paused before an upgrade)."""
    if isinstance(record, CallRecord) and isinstance(record.arguments, str):
        return dataclasses.replace(record, arguments=_arguments(record.arguments))
    return record


def _arguments(text: Any) -> Any:
    """A proposal's arguments as a tool would receive them: its JSON text read (else nothing)."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return {}


def _observed(obs: Any) -> float:
    when = getattr(obs, "observed_at", None)
    return when.timestamp() if isinstance(when, datetime) else 0.0


REACHED = frozenset({"ok", "error", "crashed"})  # a call that reached its tool (it may have written)
SENT = REACHED | {"proposed"}  # or of the same turn, decided before it and not refused: it runs
