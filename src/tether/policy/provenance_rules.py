"""Policy rules over provenance, declared per tool and argument.

A rule says, for one argument of one tool, which origins are enough (``allow``), which
need a reviewer (``approve``) and what happens otherwise (``deny`` or ``approve``) — e.g.
"the recipient of send_money must come from the user or the trusted payee directory;
from a bank record it needs approval; anything else is denied", "the body may come from
anywhere, but links inside it must come from the user". Three checks apply per tool:

* **anchor** (on by default for side-effecting tools): at least one argument must be
  traceable to the user's request, trusted host context, or a record the user named — a
  side effect built only from tool output and model composition is someone else's intent;
* **no_flow**: values of the listed trust classes (``private``) must not be carried out in
  any argument without approval;
* per-argument rules, each element of a list checked on its own.

Every decision carries the provenance of each argument, so the reviewer sees where each
value came from. No rule here knows any scenario or benchmark task: rules are data.
"""

from __future__ import annotations

import dataclasses
import re
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tether._names import name_set
from tether.policy.provenance import (
    USER,
    Origin,
    ProvenanceIndex,
    Segment,
    SourceLabel,
    TrustConfig,
    label_observation,
    split_values,
)
from tether.policy.rules import Allowlist, Decision, Policy, ProposedCall, Rule
from tether.policy.trusted import TrustedContext

__all__ = [
    "ArgumentRule",
    "ProvenancePolicy",
    "ProvenanceRules",
    "ToolRules",
    "index_for",
    "make_labeler",
    "observation_segments",
    "rules_from_dict",
]

Otherwise = Literal["deny", "approve"]
_RANK = {"allow": 0, "approve": 1, "deny": 2}
_URL = re.compile(
    r"(?:https?://)?(?:www\.)?[a-z0-9][a-z0-9-]*(?:\.[a-z0-9-]+)*\.(?:com|org|net|io|ly|dev|edu|gov|info|co|de|ch|uk|fr)"
    r"(?:/[^\s'\"<>)]*)?",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class ArgumentRule:
    """Where one argument's value may come from. Classes: ``user``, ``directory``, ``model``
    (composed, traced nowhere) and the trust classes of tool sources (``system``, ``web``…)."""

    argument: str
    allow: frozenset[str] = frozenset()
    approve: frozenset[str] = frozenset()
    otherwise: Otherwise = "deny"
    links_from: frozenset[str] | None = None  # URLs inside the value must come from these
    any: bool = False  # no restriction on origin (links_from may still apply)

    @classmethod
    def from_dict(cls, argument: str, data: Mapping[str, Any] | str) -> ArgumentRule:
        if data == "any":
            return cls(argument, any=True)
        if not isinstance(data, Mapping):
            raise ValueError(f"rule for {argument!r} must be 'any' or a mapping")
        unknown = set(data) - {"allow", "approve", "otherwise", "links_from", "any"}
        if unknown:
            raise ValueError(f"unknown keys in rule for {argument!r}: {sorted(unknown)}")
        otherwise = data.get("otherwise", "deny")
        if otherwise not in ("deny", "approve"):
            raise ValueError(f"otherwise must be deny or approve, not {otherwise!r}")
        links = data.get("links_from")
        return cls(
            argument,
            allow=name_set(data.get("allow", ()), what=f"{argument}.allow"),
            approve=name_set(data.get("approve", ()), what=f"{argument}.approve"),
            otherwise=otherwise,
            links_from=name_set(links, what=f"{argument}.links_from") if links is not None else None,
            any=bool(data.get("any", False)),
        )


@dataclass(frozen=True)
class ToolRules:
    """The provenance rules of one tool. ``anchor=None``: required when the tool has effects."""

    tool: str
    arguments: Mapping[str, ArgumentRule] = field(default_factory=dict)
    anchor: bool | None = None
    no_flow: frozenset[str] = frozenset()

    @classmethod
    def from_dict(cls, tool: str, data: Mapping[str, Any]) -> ToolRules:
        unknown = set(data) - {"arguments", "anchor", "no_flow", "effect", "egress_argument"}
        if unknown:
            raise ValueError(f"unknown keys for tool {tool!r}: {sorted(unknown)}")
        args = {a: ArgumentRule.from_dict(a, r) for a, r in (data.get("arguments") or {}).items()}
        return cls(tool, args, data.get("anchor"), name_set(data.get("no_flow", ()), what=f"{tool}.no_flow"))


# -- the index of a run -------------------------------------------------------------------


def observation_segments(obs: Any, config: TrustConfig, directory: Iterable[str] = ()) -> list[Segment]:
    """Segments of one observation: the labels the host attached, or labelled now."""
    cached = obs.meta.get("provenance") if isinstance(getattr(obs, "meta", None), dict) else None
    if isinstance(cached, list):
        restored = [_segment(item) for item in cached]
        if all(seg is not None for seg in restored):
            return [seg for seg in restored if seg is not None]
    if obs.is_error:
        return []
    return label_observation(
        obs.tool, obs.source, obs.data, obs.text, config, directory=directory, call_id=obs.call_id
    )


def make_labeler(config: TrustConfig, directory: Iterable[str] = ()) -> Callable[[Any], Any]:
    """A ``Host(labeler=...)`` hook: attaches labelled segments (``meta["provenance"]``) and a
    summary of the sources an observation holds (``meta["sources"]``: record, author, trust)."""
    known = list(directory)

    def label(obs: Any) -> Any:
        segments = (
            []
            if obs.is_error
            else label_observation(
                obs.tool, obs.source, obs.data, obs.text, config, directory=known, call_id=obs.call_id
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
            item["raw"], item["text"], SourceLabel(**item["label"]), bool(item["whole"]), item["field_name"]
        )
    except (TypeError, KeyError):
        return None


def index_for(state: Any, config: TrustConfig, directory: Iterable[str] = ()) -> ProvenanceIndex:
    """The provenance index of a run state (objective + observations so far)."""
    directory = list(directory)
    segments: list[Segment] = []
    for obs in getattr(state, "observations", []) or []:
        segments.extend(observation_segments(obs, config, directory))
    return ProvenanceIndex(getattr(state, "objective", "") or "", segments=segments, directory=directory)


# -- the rule -------------------------------------------------------------------------------


def _classes(origins: Sequence[Origin]) -> set[str]:
    return {o.trust for o in origins}


class ProvenanceRules:
    """A ``Rule``: checks each proposed call against its tool's provenance rules."""

    name = "provenance"

    def __init__(
        self,
        tools: Mapping[str, ToolRules],
        config: TrustConfig,
        *,
        directory: Iterable[str] = (),
        anchor_classes: Iterable[str] = (USER,),
    ) -> None:
        self.tools = dict(tools)
        self.config = config
        self.directory = list(directory)
        self.anchor_classes = name_set(anchor_classes, what="anchor_classes")
        self._cache: tuple[Callable[[], Any], int, ProvenanceIndex] | None = None

    def _index(self, state: Any) -> ProvenanceIndex:
        # Rebuilt when the run or its observations change; the run is held weakly so a new
        # run that happens to reuse an old one's id() can never see a stale index.
        n = len(getattr(state, "observations", []) or [])
        if self._cache is not None and self._cache[0]() is state and self._cache[1] == n:
            return self._cache[2]
        index = index_for(state, self.config, self.directory)
        try:
            ref: Callable[[], Any] = weakref.ref(state)
        except TypeError:  # not weak-referenceable (None, a plain dict): do not cache
            return index
        self._cache = (ref, n, index)
        return index

    def check(self, call: ProposedCall, context: TrustedContext) -> Decision | None:
        spec = call.spec
        rules = self.tools.get(spec.name) or self.tools.get(spec.remote_name) or ToolRules(spec.name)
        needs_anchor = rules.anchor if rules.anchor is not None else spec.effect.side_effecting
        if not rules.arguments and not needs_anchor and not rules.no_flow:
            return None
        index = self._index(call.state)
        verdict = "allow"
        problems: list[dict[str, Any]] = []
        shown: dict[str, list[dict[str, Any]]] = {}
        anchored = False

        def worse(v: str, problem: dict[str, Any]) -> None:
            nonlocal verdict
            problems.append(problem)
            if _RANK[v] > _RANK[verdict]:
                verdict = v

        for arg, value in call.arguments.items():
            rule = rules.arguments.get(arg)
            for element in split_values(value):
                origins = index.trace(element)
                classes = _classes(origins)
                # A whole field of a record the user named ("the Introductory meeting") also
                # carries the class ``named:<trust>``, so rules may accept it specifically.
                named = {
                    f"named:{o.trust}"
                    for o in origins
                    if o.kind == "tool"
                    and o.match == "exact"
                    and o.label
                    and index.record_named_by_user(o.label)
                }
                classes |= named
                shown.setdefault(arg, []).append(
                    {
                        "value": element[:200],
                        "origins": [o.describe() for o in origins[:5]] + sorted(named),
                    }
                )
                if named or classes & self.anchor_classes or index.user_overlap(element):
                    anchored = True
                if rules.no_flow:
                    leaked = index.contained_segments(element, rules.no_flow)
                    if leaked:
                        worse(
                            "approve",
                            {
                                "argument": arg,
                                "problem": "confidential_flow",
                                "from": leaked[0].label.describe(),
                            },
                        )
                if rule is None:
                    continue
                if rule.links_from is not None:
                    for link in _URL.findall(element):
                        link_classes = _classes(index.trace(link))
                        if not link_classes & rule.links_from:
                            worse(
                                "approve",
                                {
                                    "argument": arg,
                                    "problem": "untrusted_link",
                                    "link": link,
                                    "origins": sorted(link_classes),
                                },
                            )
                if rule.any or classes & rule.allow:
                    continue
                v = "approve" if classes & rule.approve else rule.otherwise
                worse(v, {"argument": arg, "problem": "untrusted_origin", "origins": sorted(classes)})
        if needs_anchor and not anchored:
            worse("approve", {"problem": "unanchored", "detail": "no argument traces to the user"})
        if verdict == "allow":
            return None
        reason = problems[0]["problem"] if problems else "provenance"
        return Decision(
            "deny" if verdict == "deny" else "approve",
            self.name,
            reason,
            {"tool": spec.name, "problems": problems, "provenance": shown},
        )


class ProvenancePolicy(Policy):
    """Allowlist, then provenance rules, then any extra rules. Unlike ``Policy`` it does not
    ask approval for every effect: the provenance rules decide which calls need a reviewer."""

    def __init__(
        self,
        rules: ProvenanceRules,
        *,
        allow: Iterable[str] | None = None,
        deny: Iterable[str] = (),
        extra: Iterable[Rule] = (),
    ) -> None:
        super().__init__(allow=allow, deny=deny)
        self.provenance = rules
        self.allowlist = Allowlist(frozenset(allow) if allow is not None else None, frozenset(deny))
        self.rules = (self.allowlist, rules, *extra)


def rules_from_dict(data: Mapping[str, Any]) -> dict[str, ToolRules]:
    """Tool rules from a declaration's ``tools`` mapping."""
    return {str(name): ToolRules.from_dict(str(name), spec or {}) for name, spec in data.items()}
