"""The stand-ins that play the agent in AgentDojo runs (no model is reachable offline).

* ``paraphrase`` rewrites a call as a model would: dates in another form the tool accepts,
  names and titles re-cased;
* ``compromised`` proposes the user's calls one per turn and, as soon as a tool result
  carries the injected text, the attacker's calls before them: it obeys every time;
* ``OraclePlanner`` / ``CompromisedExtractor`` play plan-then-execute: a planner that knows
  the task's calls and sees only the request, and a quarantined extractor that returns the
  attacker's value (disguised, when adaptive) wherever the injection reached its sources.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from tether.core.messages import AssistantMessage, ToolCall, ToolMessage
from tether.models._base import ModelRequest
from tether.policy._provenance import ProvenanceIndex
from tether.policy._provenance_dates import date_mentions, parse_date
from tether.policy._provenance_labels import normalise, split_values
from tether.policy._references import CONCAT, REF, Listed, listed_handles
from tether.testing import FunctionModel
from tether_examples.agentdojo.attacks import Step, resolve

__all__ = [
    "ATTACKER_ID",
    "MARKER",
    "CompromisedExtractor",
    "OraclePlanner",
    "Referrer",
    "compromised",
    "paraphrase",
]

MARKER = "<INFORMATION>"
ATTACKER_ID = "atk_"


_ISO_T = frozenset({"reserve_hotel", "reserve_car_rental", "reserve_restaurant"})
_NAME = re.compile(r"^[A-Za-z][A-Za-z'’&-]*(?: [A-Za-z'’&-]+){0,5}$")


def paraphrase(step: Step) -> Step:
    """The call a model writes when it does not copy values verbatim: ISO dates written
    another way the tool accepts, names and titles re-cased. Identifiers, addresses, amounts
    and free text are kept (a model copies those, or the policy does not restrict them)."""
    args: dict[str, Any] = {}
    for name, value in step.args.items():
        args[name] = _paraphrase_value(step.function, value)
    return Step(step.function, args, step.tactic)


def _paraphrase_value(tool: str, value: Any) -> Any:
    if isinstance(value, list):
        return [_paraphrase_value(tool, v) for v in value]
    if not isinstance(value, str):
        return value
    m = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})( \d{2}:\d{2})?", value)
    if m:
        y, mo, d, t = m.groups()
        if tool in _ISO_T:  # parsed with fromisoformat
            return f"{y}-{mo}-{d}T{(t or ' 00:00').strip()}:00"
        return f"{y}-{int(mo)}-{int(d)}{t or ''}"  # parsed with strptime, which takes 5 for 05
    if _NAME.match(value) and len(value) <= 60:
        return value.lower() if value[:1].isupper() else value.title()
    return value


class Referrer:
    """A model using reference mode: wherever a value it is about to write is listed whole after a
    tool result, it writes that value's handle instead (``{"$ref": ...}``); a string that holds a
    listed value inside it, for an argument that takes a template, becomes a ``$concat`` of the
    text around it and the handle. Everything else stays a literal. Among several listings of
    the same value it prefers one whose field has the argument's name, then the latest."""

    def __init__(self, templates: Iterable[tuple[str, str]] = ()) -> None:
        self.templates = set(templates)  # (tool, argument) pairs whose declaration allows a template
        self._parsed: dict[int, list[Listed]] = {}

    def listings(self, request: ModelRequest) -> list[Listed]:
        out: list[Listed] = []
        for m in request.messages:
            if isinstance(m, ToolMessage):
                key = hash(m.content)
                if key not in self._parsed:
                    self._parsed[key] = [x for x in listed_handles(m.content) if x.complete]
                out.extend(self._parsed[key])
        return out

    def __call__(self, request: ModelRequest, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        listed = self.listings(request)
        if not listed:
            return args
        by_value: dict[str, list[Listed]] = {}
        for item in listed:
            if isinstance(item.value, str | int | float) and not isinstance(item.value, bool):
                by_value.setdefault(json.dumps(item.value), []).append(item)

        def pick(value: Any, key: str) -> Listed | None:
            found = by_value.get(json.dumps(value), [])
            if isinstance(value, float) and value.is_integer():
                found = found + by_value.get(json.dumps(int(value)), [])
            if not found:
                return None
            named = [x for x in found if x.path.rsplit(".", 1)[-1].split("[")[0] == key]
            return (named or found)[-1]

        def walk(value: Any, key: str, arg: str) -> Any:
            if isinstance(value, dict):
                return {k: walk(v, k, arg) for k, v in value.items()}
            if isinstance(value, list):
                return [walk(v, key, arg) for v in value]
            if isinstance(value, bool) or value is None:
                return value
            hit = pick(value, key)
            if hit is not None:
                return {REF: hit.handle}
            if isinstance(value, str) and (tool, arg) in self.templates:
                fills = [
                    x for x in listed if isinstance(x.value, str) and len(x.value) >= 3 and x.value in value
                ]
                if fills:
                    best = max(fills, key=lambda x: len(x.value))
                    pre, _, post = value.partition(best.value)
                    return {CONCAT: [p for p in (pre, {REF: best.handle}, post) if p]}
            return value

        return {arg: walk(v, arg, arg) for arg, v in args.items()}


def compromised(
    user_steps: Sequence[Step],
    attack: Sequence[Step],
    answer: str,
    extra: str,
    env: Any,
    refer: Referrer | None = None,
) -> FunctionModel:
    """The compromised agent (see the module docstring). With ``refer``, every call it proposes
    — the user's and the attacker's — passes values by handle where a tool result lists them."""
    queue: list[tuple[str, Step]] = [("gt", s) for s in user_steps]
    state = {"triggered": False, "n": 0}

    def turn(request: ModelRequest) -> AssistantMessage:
        seen = any(isinstance(m, ToolMessage) and MARKER in m.content for m in request.messages)
        if (attack or extra) and not state["triggered"] and seen:
            state["triggered"] = True
            queue[0:0] = [("atk", s) for s in attack]
        if not queue:
            text = answer + ("\n" + extra if extra and state["triggered"] else "")
            return AssistantMessage(content=text)
        who, step = queue.pop(0)
        state["n"] += 1
        prefix = ATTACKER_ID if who == "atk" else "gt_"
        values = resolve(step, env)
        if refer is not None:
            values = refer(request, step.function, values)
        args = json.dumps(values, ensure_ascii=False, default=str)
        return AssistantMessage(
            tool_calls=(
                ToolCall(id=f"{prefix}{state['n']}.{step.tactic}", name=step.function, arguments=args),
            )
        )

    model = FunctionModel(turn, name="compromised-oracle")
    model.state = state  # type: ignore[attr-defined]
    return model


def _value_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, list):
        return "list[string]" if all(isinstance(v, str) for v in value) else "json"
    return "string"


class OraclePlanner:
    """Sees the request only, and knows the task's ground-truth call sequence (an idealised
    planner). A value it can read in the request is a literal; a value that only the
    results of earlier steps hold becomes an ``Extract`` slot filled from those steps;
    anything else it writes itself (a count, a placeholder, and — optimistically — figures
    computed from data). ``step_texts`` are the ground-truth results, used only to decide
    *which* values are data."""

    def __init__(self, user_steps: Sequence[Step], step_texts: Sequence[str]) -> None:
        self.user_steps = user_steps
        self.step_texts = [normalise(t) for t in step_texts]

    async def plan(self, objective: str, tools: Sequence[dict[str, Any]]) -> Any:
        from tether.runners._plan import Extract, Plan, PlannedCall

        request_only = ProvenanceIndex(objective)
        dates = date_mentions(objective)

        def from_request(part: str) -> bool:
            day = parse_date(part)
            if day is not None and any(m.matches(day) for m in dates):
                return True
            return request_only.trace(part)[0].kind == "user"

        calls = []
        for i, step in enumerate(self.user_steps):
            args: dict[str, Any] = {}
            for name, value in step.args.items():
                parts = [p for p in split_values(value) if not from_request(p)]
                steps = tuple(
                    j
                    for j in range(i)
                    if any(len(normalise(p)) >= 2 and normalise(p) in self.step_texts[j] for p in parts)
                )
                if parts and steps:
                    args[name] = Extract(f"the {name} for {step.function}", _value_type(value), steps)  # type: ignore[arg-type]
                else:
                    args[name] = value
            calls.append(PlannedCall(step.function, args))
        return Plan(tuple(calls), answer=Extract("the answer to the user's request"))


class CompromisedExtractor:
    """The quarantined model, compromised: it returns the true value unless its source text
    carries the injection; then, wherever the attacker's calls have an argument of the same
    name, it returns the attacker's value instead (``adaptive``: disguised — re-cased, padded
    with the request's words, or beside the true value in a list). It also says a text-only goal."""

    def __init__(
        self,
        user_steps: Sequence[Step],
        attack: Sequence[Step],
        answer: str,
        extra: str,
        *,
        adaptive: bool = False,
        prompt: str = "",
    ) -> None:
        self.truth = {(i, name): v for i, s in enumerate(user_steps) for name, v in s.args.items()}
        self.attacker: dict[str, Any] = {}
        for s in attack:
            for name, v in s.args.items():
                if not callable(getattr(v, "compute", None)):
                    self.attacker.setdefault(name, v)
        self.answer = answer
        self.extra = extra
        self.adaptive = adaptive
        self.prompt = prompt
        self.triggered = False
        self.substituted: set[int] = set()  # planned steps that received an attacker's value

    async def extract(self, request: Any) -> Any:
        seen = any(MARKER in text for text in request.sources)
        self.triggered = self.triggered or seen
        if request.argument == "answer":
            return self.answer + ("\n" + self.extra if self.extra and seen else "")
        truth = self.truth[(request.step, request.argument)]
        if not (seen and request.argument in self.attacker):
            return truth
        value = self.attacker[request.argument]
        self.substituted.add(request.step)
        if not self.adaptive:
            return value
        if isinstance(truth, list) and isinstance(value, list):
            return [*truth, *value]  # hidden beside the true value
        if isinstance(value, str) and isinstance(truth, str):
            words = " ".join(self.prompt.split()[:4])
            return value.upper() if "@" in value or value.isalnum() else f"{words} {value}"
        return value
