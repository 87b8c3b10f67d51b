"""Provenance by construction ("reference mode"): the model passes values from tool results by
reference, so where an argument came from is known, not guessed by string matching.

**Handles.** Every leaf of a labelled tool observation gets a handle, ``<prefix>.<n>``: the
prefix is a short digest of the observation (call id, tool, time, text), ``n`` the leaf's place
among the observation's labelled segments. Each link, e-mail address and account number inside
a longer leaf gets ``<prefix>.<n>.<k>`` too: it has its leaf's provenance.
``References.labeler`` attaches the handle table to ``Observation.meta["references"]`` (it
survives checkpoints with the run state) and appends a listing to the text the model reads,
one line per handle, tab-separated::

    [references: to pass a value below, write {"$ref": "<handle>"} in its place]
    q3xk2a.0	[0].id	"5"
    q3xk2a.1	[0].recipient	"CH9300762011623852957"

A preview longer than ``preview`` characters is cut and ends with ``…`` (the handle still
resolves to the whole value).

**Arguments.** In a proposed call, wherever a value may stand:

* ``{"$ref": "<handle>"}`` is the exact value of that leaf (a number stays a number);
* ``{"$concat": ["Dinner at ", {"$ref": "<handle>"}]}`` is a string joined from literal parts
  and referenced leaves (the only composition whose parts keep their provenance);
* anything else is a literal. An object with a ``$ref`` or ``$concat`` key and anything else
  beside it, a handle that is not a string or a ``$concat`` that is not a list of strings and
  references is ``malformed_reference``; a handle no observation of this run holds is
  ``unknown_reference`` (``PolicyError``: the model is told and may try again; nothing runs).

The host resolves references before the schema check and before policy
(``ReferencePolicy.resolve_references``, called by ``HostCore.decide``): the schema and every
rule judge the resolved value, which is exactly what the tool receives.

**Judgement** (``ReferenceRule``). For each argument a tool's declaration restricts (roles
``destination``, ``target``, ``name``, ``profile``, ``secret``), each leaf of the resolved value
— the leaves of its JSON structure, never the decoded contents of a string — has classes:

* ``user`` when the whole value is in the request, ``directory`` when it is a directory entry
  (whether written literally or referenced);
* for a reference, exactly the referenced segment's trust class, and ``named:<class>`` when
  its record is one the user named (``ProvenanceIndex.record_named_by_user``), unless the
  record's naming field holds text the run itself wrote from other sources;
* for a ``$concat``, ``template`` when the declaration allows templates, the literal parts are
  the user's own text around one ``{placeholder}`` of the request and the single reference is
  a whole structured field of one line and at most ``TEMPLATE_FILL_MAX`` characters (a name,
  not someone's body text) that the run did not write;
* else ``model`` (composed). A literal is never traced to tool results.

A leaf without an allowed class needs approval (or is denied: ``otherwise``). **Writes keep
their taint**: each leaf of every argument of a side-effecting call is recorded with its
classes; a segment later read back that equals (or, for 5+ characters, contains as a whole)
a string the run wrote has the classes that string had when written, not its source's.
How each call was resolved is held per run state in memory; a call the rule did not see
resolved (a run resumed from its checkpoint by another process) counts as written from
nowhere, so a resume can only make read-back values less trusted, never more.
A segment that holds a string the run wrote beside other text keeps only the classes all its
parts share. Dates, amounts, options, links inside content and confidential flows are left to
``ProvenanceRules``, which runs beside this rule on the same resolved values.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import re
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.errors import PolicyError
from tether.policy._provenance import ProvenanceIndex
from tether.policy._provenance_declarations import ArgumentRule, ToolRules, among_keys, declared_rules
from tether.policy._provenance_labels import (
    DIRECTORY,
    MODEL,
    USER,
    Directory,
    Segment,
    TrustConfig,
    normalise,
)
from tether.policy._provenance_rules import (
    ProvenancePolicy,
    ProvenanceRules,
    classes_of,
    index_for,
    make_labeler,
    observation_segments,
)
from tether.policy._provenance_run import RunIndex, writes_per_rules
from tether.policy._provenance_values import find_handles, find_links
from tether.policy._rules import Decision, ProposedCall, Rule
from tether.policy._trusted import TrustedContext

__all__ = [
    "CONCAT",
    "LISTING_HEAD",
    "REF",
    "Listed",
    "ReferencePolicy",
    "ReferenceRule",
    "References",
    "listed_handles",
]

REF = "$ref"
CONCAT = "$concat"
LISTING_HEAD = '[references: to pass a value below, write {"$ref": "<handle>"} in its place]'
TEMPLATE_FILL_MAX = 80
"""Longest field (characters, one line) that may fill a template: a name, not a body."""
SOURCED_ROLES = frozenset({"destination", "target", "name", "profile", "secret"})
_RANK = {"allow": 0, "approve": 1, "deny": 2}
_HANDLE = re.compile(r"^[a-z2-7]{6}\.\d+(?:\.\d+)?$")


# -- handles -------------------------------------------------------------------------------


def _prefix(obs: Any) -> str:
    seed = "\0".join((obs.call_id, obs.tool, obs.observed_at.isoformat(), obs.text))
    digest = hashlib.blake2b(seed.encode("utf-8", "surrogatepass"), digest_size=5).digest()
    return base64.b32encode(digest).decode("ascii").lower()[:6]


def _typed_leaves(data: Any) -> dict[str, list[Any]]:
    """The scalar leaves of a structured result by path, in the path form labels use."""
    out: dict[str, list[Any]] = {}

    def walk(v: Any, path: str) -> None:
        if isinstance(v, Mapping):
            for k, item in v.items():
                walk(item, f"{path}.{k}" if path else str(k))
        elif isinstance(v, list | tuple):
            for i, item in enumerate(v):
                walk(item, f"{path}[{i}]")
        elif v is not None and not isinstance(v, bool):
            out.setdefault(path, []).append(v)

    if data is not None and not isinstance(data, str):
        walk(data, "")
    return out


def _pointers(text: str) -> list[str]:
    """The links, e-mail addresses and account numbers inside a longer text, as they are written
    there (each one a value the model may pass by handle without copying it)."""
    low = text.casefold()
    out: list[str] = []
    for found in [link.raw for link in find_links(text)] + find_handles(text):
        i = low.find(found)
        if i < 0 or len(found) == len(text.strip()):
            continue  # folded beyond recognition, or the whole text (the leaf's own handle)
        original = text[i : i + len(found)]
        if original not in out:
            out.append(original)
    return out


def _preview(value: Any, limit: int) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True, slots=True)
class Listed:
    """One line of a handle listing as the model reads it. ``value`` is ``None`` when the
    preview was cut (``complete`` is then false)."""

    handle: str
    path: str
    value: Any
    complete: bool


def listed_handles(text: str) -> list[Listed]:
    """The handles listed in an observation's text (the format ``References.labeler`` writes)."""
    out: list[Listed] = []
    listing = False
    for line in text.splitlines():
        if line.strip() == LISTING_HEAD:
            listing = True
            continue
        if not listing:
            continue
        parts = line.split("\t")
        if len(parts) != 3 or not _HANDLE.match(parts[0]):
            listing = False
            continue
        handle, path, preview = parts
        try:
            out.append(Listed(handle, path, json.loads(preview), True))
        except ValueError:
            out.append(Listed(handle, path, None, False))
    return out


@dataclass(frozen=True, slots=True)
class _Target:
    segment: Segment
    value: Any


@dataclass
class _Resolution:
    """How one call's arguments were resolved: references and joins by leaf path."""

    refs: dict[str, Segment] = field(default_factory=dict)
    concats: dict[str, list[str | Segment]] = field(default_factory=dict)


class _PerRun:
    """Values held per run state, by identity and weakly (run states are unhashable dataclasses;
    a new state that reuses an old one's ``id()`` never sees the old value)."""

    def __init__(self) -> None:
        self._items: dict[int, tuple[weakref.ref[Any], Any]] = {}

    def get(self, state: Any) -> Any:
        item = self._items.get(id(state))
        return item[1] if item is not None and item[0]() is state else None

    def set(self, state: Any, value: Any) -> None:
        key = id(state)
        try:
            ref = weakref.ref(state, lambda _: self._items.pop(key, None))
        except TypeError:
            return  # not weakly referenceable (None, a plain dict): nothing is kept
        self._items[key] = (ref, value)


class References:
    """The handles of a run's observations and the resolution of references in arguments."""

    def __init__(self, config: TrustConfig, own: Iterable[str] = (), *, preview: int = 80) -> None:
        self.config = config
        self.own = list(own)
        self.preview = preview
        # Per run state (held weakly): call id -> how its arguments were resolved; the handle table.
        self._runs = _PerRun()
        self._tables = _PerRun()

    # -- labelling ------------------------------------------------------------------------

    def labeler(self, inner: Callable[[Any], Any] | None = None) -> Callable[[Any], Any]:
        """A ``Host(labeler=...)`` hook: ``inner`` (default ``make_labeler``) labels, then every
        labelled leaf gets a handle, listed after the observation's text."""
        label = inner or make_labeler(self.config, self.own)

        def attach(obs: Any) -> Any:
            obs = label(obs)
            if obs.is_error:
                return obs
            segments = observation_segments(obs, self.config, self.own)
            if not segments:
                return obs
            typed = _typed_leaves(obs.data)
            prefix = _prefix(obs)
            values: list[Any] = []
            inner: dict[str, list[str]] = {}
            lines = [LISTING_HEAD]
            for n, seg in enumerate(segments):
                candidates = [v for v in typed.get(seg.label.path, ()) if str(v) == seg.raw]
                value = candidates[0] if candidates else seg.raw
                values.append(value)
                path = (seg.label.path or "(text)").replace("\t", " ").replace("\n", " ")
                lines.append(f"{prefix}.{n}\t{path}\t{_preview(value, self.preview)}")
                parts = _pointers(seg.raw) if isinstance(value, str) else []
                if parts:
                    inner[str(n)] = parts
                    lines += [
                        f"{prefix}.{n}.{k}\t{path} (inside)\t{_preview(p, self.preview)}"
                        for k, p in enumerate(parts)
                    ]
            meta = {**obs.meta, "references": {"prefix": prefix, "values": values, "inner": inner}}
            return dataclasses.replace(obs, text=obs.text + "\n\n" + "\n".join(lines), meta=meta)

        return attach

    def _table(self, state: Any) -> dict[str, list[_Target]]:
        observations = list(getattr(state, "observations", None) or [])
        cached: tuple[int, dict[str, list[_Target]]] | None = self._tables.get(state)
        if cached is not None and cached[0] == len(observations):
            return cached[1]
        table: dict[str, list[_Target]] = {}
        for obs in observations:
            refs = obs.meta.get("references") if isinstance(getattr(obs, "meta", None), dict) else None
            if not isinstance(refs, Mapping) or obs.is_error:
                continue
            segments = observation_segments(obs, self.config, self.own)
            values = list(refs.get("values") or [])
            if len(values) != len(segments):
                continue  # a table that does not match its labels resolves nothing
            inner = refs.get("inner") or {}
            for n, (seg, value) in enumerate(zip(segments, values, strict=True)):
                table.setdefault(f"{refs.get('prefix')}.{n}", []).append(_Target(seg, value))
                for k, part in enumerate(inner.get(str(n)) or []):
                    table.setdefault(f"{refs.get('prefix')}.{n}.{k}", []).append(_Target(seg, part))
        self._tables.set(state, (len(observations), table))
        return table

    # -- resolution -----------------------------------------------------------------------

    def resolve(self, call_id: str, arguments: Mapping[str, Any], state: Any) -> dict[str, Any]:
        """``arguments`` with every reference replaced by the value it names. Raises
        ``PolicyError`` (``malformed_reference``, ``unknown_reference``, ``ambiguous_reference``)."""
        table = self._table(state)
        record = _Resolution()

        def target(handle: Any) -> _Target:
            if not isinstance(handle, str):
                raise PolicyError(
                    "malformed_reference", f"a {REF} names a handle as a string, not {handle!r}"
                )
            found = table.get(handle, [])
            if not found:
                raise PolicyError(
                    "unknown_reference",
                    f"no tool result of this run has the handle {handle!r}; use a handle listed "
                    "after a tool result, or write the value itself",
                    handle=handle,
                )
            first = found[0]
            if any(t.value != first.value or t.segment.label != first.segment.label for t in found[1:]):
                raise PolicyError(
                    "ambiguous_reference", f"the handle {handle!r} names two values", handle=handle
                )
            return first

        def walk(v: Any, path: str) -> Any:
            if isinstance(v, Mapping):
                if REF in v or CONCAT in v:
                    if len(v) != 1:
                        raise PolicyError(
                            "malformed_reference",
                            f"{path}: a reference object has exactly one key, {REF} or {CONCAT}",
                        )
                    if REF in v:
                        t = target(v[REF])
                        record.refs[path] = t.segment
                        return t.value
                    parts = v[CONCAT]
                    if not isinstance(parts, list) or not parts:
                        raise PolicyError("malformed_reference", f"{path}: {CONCAT} takes a non-empty list")
                    pieces: list[str | Segment] = []
                    text: list[str] = []
                    for part in parts:
                        if isinstance(part, str):
                            pieces.append(part)
                            text.append(part)
                        elif isinstance(part, Mapping) and set(part) == {REF}:
                            t = target(part[REF])
                            pieces.append(t.segment)
                            text.append(str(t.value))
                        else:
                            raise PolicyError(
                                "malformed_reference",
                                f"{path}: {CONCAT} parts are strings or {{{REF!r}: handle}}",
                            )
                    record.concats[path] = pieces
                    return "".join(text)
                return {k: walk(item, f"{path}.{k}") for k, item in v.items()}
            if isinstance(v, list):
                return [walk(item, f"{path}[{i}]") for i, item in enumerate(v)]
            return v

        resolved = {k: walk(v, k) for k, v in arguments.items()}
        # A state that cannot be held weakly keeps no record: every leaf is then a literal.
        runs = self._runs.get(state)
        if runs is None:
            runs = {}
            self._runs.set(state, runs)
        runs[call_id] = record
        return resolved

    def resolution(self, state: Any, call_id: str) -> _Resolution:
        runs = self._runs.get(state) or {}
        return runs.get(call_id) or _Resolution()


# -- the rule -------------------------------------------------------------------------------


def _leaves(
    value: Any, path: str, keys: tuple[str, ...] = (), under: bool = False, above: tuple[object, ...] = ()
) -> Iterator[tuple[str, Any]]:
    """(path, scalar) for every leaf of a JSON value; with ``keys``, only leaves under those keys
    (however a server spells or flattens them: ``among_keys``)."""
    if isinstance(value, Mapping):
        for k, item in value.items():
            inside = under or among_keys(k, keys, above)
            yield from _leaves(item, f"{path}.{k}", keys, inside, (*above, k))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{path}[{i}]", keys, under)
    elif value is not None and not isinstance(value, bool) and (under or not keys):
        yield path, value


class ReferenceRule:
    """A ``Rule``: restricted arguments hold literals from the request, directory entries or
    references to segments of allowed classes (see the module docstring). What a referenced
    segment is worth — its label, or what the run wrote into it when it echoes a write — is the
    run's provenance index's answer (``ProvenanceIndex.segment_origins``): one owner of taint."""

    name = "references"

    def __init__(
        self,
        references: References,
        tools: Mapping[str, ToolRules],
        *,
        directory: Directory | Mapping[str, Iterable[str]] | Iterable[str] = (),
    ) -> None:
        self.references = references
        self.tools = dict(tools)
        self.directory = directory if isinstance(directory, Directory) else Directory(directory)
        writes = writes_per_rules(self.tools)

        def build(state: Any) -> ProvenanceIndex:
            refs = self.references
            return index_for(state, refs.config, self.directory, refs.own, writes)

        self._index = RunIndex(build)

    def check(self, call: ProposedCall, context: TrustedContext) -> Decision | None:
        spec = call.spec
        rules = declared_rules(self.tools, spec.name, spec.remote_name)
        state = call.state
        record = self.references.resolution(state, call.call_id)
        index = self._index(state)
        verdict = "allow"
        problems: list[dict[str, Any]] = []
        shown: dict[str, list[dict[str, Any]]] = {}
        for arg, value in call.arguments.items():
            rule = rules.arguments.get(arg) if rules is not None else None
            if rule is None or rule.role not in SOURCED_ROLES or not rule.restricts:
                continue
            judged = {p for p, _ in _leaves(value, arg, rule.keys)} if rule.keys else None
            for path, leaf in _leaves(value, arg):
                if judged is not None and path not in judged:
                    continue  # declared keys: only the leaves under them are restricted
                classes = self._classes(index, record, path, leaf, rule)
                how = "reference" if path in record.refs else "join" if path in record.concats else "literal"
                shown.setdefault(arg, []).append(
                    {"value": str(leaf)[:200], "as": how, "classes": sorted(classes)}
                    | ({"source": record.refs[path].label.describe()} if path in record.refs else {})
                )
                if classes & rule.allow:
                    continue
                v = "approve" if classes & rule.approve else rule.otherwise
                problems.append(
                    {"argument": arg, "problem": "unreferenced_origin", "as": how, "classes": sorted(classes)}
                )
                if _RANK[v] > _RANK[verdict]:
                    verdict = v
        if verdict == "allow":
            return None
        return Decision(
            "deny" if verdict == "deny" else "approve",
            self.name,
            "unreferenced_origin",
            {"tool": spec.name, "problems": problems, "provenance": shown},
        )

    def _classes(
        self, index: ProvenanceIndex, record: _Resolution, path: str, leaf: Any, rule: ArgumentRule
    ) -> set[str]:
        text = leaf if isinstance(leaf, str) else json.dumps(leaf)
        # The value itself: in the request as a whole, or a directory entry of its kind.
        classes = {
            o.trust
            for o in index.trace(text, rule.kind, cased=rule.cased(text))
            if o.kind in ("user", "host")
        }
        classes &= {USER, DIRECTORY}
        if path in record.refs:
            classes |= classes_of(index, index.segment_origins(record.refs[path]))
        elif (
            path in record.concats
            and "template" in rule.allow
            and self._template(index, record.concats[path], text, rule)
        ):
            classes.add("template")
        return classes or {MODEL}

    def _template(
        self, index: ProvenanceIndex, pieces: list[str | Segment], text: str, rule: ArgumentRule
    ) -> bool:
        refs = [p for p in pieces if isinstance(p, Segment)]
        if len(refs) != 1 or not refs[0].whole or index.written(refs[0]):
            return False
        if len(refs[0].raw) > TEMPLATE_FILL_MAX or "\n" in refs[0].raw:
            return False  # a fill is a name, not a body someone wrote
        literal = "".join(p for p in pieces if isinstance(p, str))
        request = normalise(index.objective)
        return (
            bool(normalise(literal))
            and all(normalise(p) in request for p in pieces if isinstance(p, str) and normalise(p))
            and index.fills_template(text, rule.fill_from)
        )


class ReferencePolicy(ProvenancePolicy):
    """``ProvenancePolicy`` in reference mode: references are resolved before the schema check
    (``resolve_references``, called by the host's gate) and ``ReferenceRule`` runs before the
    provenance rules, so both judge the resolved value."""

    def __init__(
        self,
        rules: ProvenanceRules,
        references: References,
        *,
        allow: Iterable[str] | None = None,
        deny: Iterable[str] = (),
        extra: Iterable[Rule] = (),
    ) -> None:
        super().__init__(rules, allow=allow, deny=deny, extra=extra)
        self.references = references
        self.reference_rule = ReferenceRule(references, rules.tools, directory=rules.directory)
        self.rules = (self.allowlist, self.reference_rule, *self.rules[1:])

    def resolve_references(self, call_id: str, arguments: Mapping[str, Any], state: Any) -> dict[str, Any]:
        return self.references.resolve(call_id, arguments, state)
