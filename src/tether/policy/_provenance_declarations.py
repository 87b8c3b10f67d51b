"""Declarations of provenance rules: one role and one source list per tool argument.

Every argument of every side-effecting tool is declared with a **role** and where its value
may come from; an undeclared argument is a configuration error at load time
(``check_declarations``) and a denial at call time. Roles:

* ``destination`` — who receives (recipient, participants, channel, url): ``from`` classes
  such as ``user`` (the whole value is in the request), ``directory`` (curated host
  context), ``named:address`` (an address field of a record the user named);
* ``target`` — the record acted on (an event id, a file id), ``name`` — what a new thing is
  called (a title, a file name), ``profile`` — facts about the user, ``secret`` — a
  password: each with ``from`` classes, never ``any``;
* ``date`` — the calendar day must be one the request (``user``) or a named record
  (``named:<class>``) states, or the same day as another argument (``same_day_as``);
* ``amount`` — at most the largest figure the request (``user``) or a named record's
  declared fields (``named``) state; with ``cumulative`` the run's executed calls of the
  tool count towards it (no splitting into small payments); ``currency`` (a code such as
  ``EUR``, or the argument that carries it) makes only the request's figures in that currency,
  or in none, bound it (``provenance_dates.bounding``);
* ``option`` — an enumerated flag: ``safe`` values pass, others only when the request
  contains a phrase declared for that value (``requested_by``), else approval; likewise a
  tool with an effect and no arguments at all (marking mail as read) runs only when the
  request contains one of the tool's declared ``requested_by`` phrases;
* ``content`` — free text: any origin, but links, e-mail addresses and account numbers
  inside it must come from ``links_from`` classes (default: user, directory); the tool's
  ``no_flow`` classes may not leave in it (a whole field of such a source inside the
  value), and with ``no_relay`` it may not repeat
  text of those classes verbatim (``RELAY_SPAN`` characters or more: a forwarded body, a
  ransom note written by someone else) — both need a reviewer.

A class that is not enough may still be listed under ``approve`` (a reviewer decides);
``otherwise`` says what happens to the rest (``approve`` by default, ``deny`` for secrets).
``from: any`` is a declaration too, allowed for dates and content only and only with a
written ``why``. No rule here knows any scenario or benchmark task: rules are data.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tether.core._names import SEPARATOR, folded, name_set
from tether.policy._provenance_labels import USER, shape_kind, split_values

__all__ = [
    "RELAY_SPAN",
    "ROLES",
    "ArgumentRule",
    "ToolRules",
    "among_keys",
    "check_declarations",
    "declared_rules",
    "key_name",
    "rules_from_dict",
]

_KEY_SEPARATORS = re.compile(r"[\s_-]+")


@functools.lru_cache(maxsize=4096)
def key_name(key: object) -> str:
    """A key inside an argument as the readers of a tool's arguments match it to the field it
    fills: case-insensitively (Go's ``encoding/json``, Jackson's and .NET's case-insensitive
    options; Go folds the Kelvin sign to ``k`` and ``ſ`` to ``s``), by an alias in camel or
    snake case (pydantic's alias generators with ``populate_by_name``): NFKC, case-folded,
    without format characters, ``_``, ``-`` or spaces. A declared ``keys`` entry names every
    key that folds to it, so ``{"id": mine, "ID": theirs}`` has both judged."""
    return _KEY_SEPARATORS.sub("", folded(str(key)))


def among_keys(key: object, keys: tuple[str, ...], above: tuple[object, ...] = ()) -> bool:
    """Whether ``key`` is one of ``keys`` as a server reads it (``key_name``), alone or, with the
    keys of the mappings it stands in since the last list (``above``, outermost first), as a
    server that flattens nested objects names it: ``{"user": {"name": x}}`` is ``user_name``. A
    key written as a path is read as its steps (``_steps``), as servers that set a value at a
    dotted path or a bracketed or indexed one read it: ``user.name``, ``user[name]``, and after a
    list index only what follows it (``files.0.id``, ``files[0][id]``, ``files_0_id`` is ``id``)."""
    if not keys:
        return False
    names, path = _key_names(keys), [*above[-3:], key]
    if any(key_name("".join(map(str, path[i:]))) in names for i in range(len(path))):
        return True
    steps = [step for k in path for step in _steps(k)]
    while _INDEX in steps:  # a list's element: its path starts again after the index
        steps = steps[steps.index(_INDEX) + 1 :]
    steps = steps[-4:]
    return any(key_name("".join(steps[i:])) in names for i in range(len(steps)))


_PATH_MARKS = re.compile(r"[.\[\]]+")
_UNDERSCORED_INDEX = re.compile(r"(?:^|_)(\d+)(?=_|$)")
_INDEX = "\x00"  # a list index inside a key written as a path


def _steps(key: object) -> list[str]:
    """``key`` written as a path (``user.name``, ``files[0][id]``, ``files_0_id``): its steps,
    each list index as ``_INDEX``; a key that is no path is one step."""
    out: list[str] = []
    for chunk in _PATH_MARKS.split(str(key)):
        pieces = _UNDERSCORED_INDEX.split(chunk)  # text, then each index and the text after it
        out += [_INDEX if i % 2 or p.isdigit() else p for i, p in enumerate(pieces) if p]
    return out


@functools.lru_cache(maxsize=256)
def _key_names(keys: tuple[str, ...]) -> frozenset[str]:
    return frozenset(map(key_name, keys))


Otherwise = Literal["deny", "approve"]
Role = Literal["destination", "target", "name", "profile", "secret", "date", "amount", "option", "content"]
ROLES: tuple[str, ...] = (
    "destination",
    "target",
    "name",
    "profile",
    "secret",
    "date",
    "amount",
    "option",
    "content",
)
_SOURCED = frozenset({"destination", "target", "name", "profile", "secret"})
RELAY_SPAN = 40
"""Characters of third-party text repeated verbatim that make a value a relay (``no_relay``)."""
_KEYS = {
    "role",
    "from",
    "approve",
    "otherwise",
    "why",
    "links_from",
    "same_day_as",
    "bound",
    "fields",
    "cumulative",
    "safe",
    "requested_by",
    "keys",
    "kind",
    "fill_from",
    "currency",
}


# One token that holds a digit or a joiner of any script (``Q3-Report.pdf``, ``/home/ann/x``,
# ``1AbC9xYz``, ``Draft\u2010Final``: a dash is a joiner, whatever its code point): a character
# that is no letter, digit or space (a dash, a dot, a slash, an underscore, a combining mark).
_IDENTIFIER = re.compile(r"(?=\S*(?:\d|[^\w\s]|_))\S+")


# Digits with what groups them (``1,000``, ``1.000,00``, ``1'000``, ``1 000``): a number to a
# reader that drops the separators, as a lax validator or a tool's own parsing may.
_GROUPED = re.compile(r"[+-]?[\d.,'_ ]*\d[\d.,'_ ]*", re.ASCII)


def read_as_number(value: Any) -> bool:
    """Whether some reader of ``value`` takes it for a number: a JSON number (``NaN`` and
    infinities too), or a string that ``float`` or ``Decimal`` reads (``" 100"``, ``"100.000"``,
    ``"1_00"``, ``"1e2"``: a lax validator such as a FastMCP server's coerces each to an
    integer) or that writes digits with what groups them. Wider than ``figure``, which reads
    only what every reader reads alike: where a value multiplies a figure, any number counts."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, int | float):
        return True
    if not isinstance(value, str):
        return False
    try:
        float(value)
    except ValueError:
        return bool(_GROUPED.fullmatch(value.strip()))
    return True


@dataclass(frozen=True)
class ArgumentRule:
    """Where one argument's value may come from (see the module docstring for the roles)."""

    argument: str
    role: Role
    allow: frozenset[str] = frozenset()  # the ``from`` classes
    approve: frozenset[str] = frozenset()
    otherwise: Otherwise = "approve"
    any: bool = False
    why: str = ""
    links_from: frozenset[str] | None = None
    same_day_as: str | None = None
    bound: frozenset[str] = frozenset()
    fields: tuple[str, ...] = ("amount",)
    cumulative: bool = False
    safe: frozenset[str] = frozenset()  # option values, JSON-encoded
    requested_by: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    keys: tuple[str, ...] = ()  # check only the leaves under these keys (attachments)
    kind: str | None = None  # the kind of destination (mailbox, account, link, channel, member…)
    fill_from: tuple[str, ...] = ()  # fields whose whole values may fill the user's template
    currency: str | None = None  # an amount's currency: a code, or the argument that names it

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"{self.argument}: unknown role {self.role!r}; roles: {list(ROLES)}")
        if self.otherwise not in ("deny", "approve"):
            raise ValueError(f"{self.argument}: otherwise must be deny or approve, not {self.otherwise!r}")
        if self.any and self.role not in ("date", "content"):
            raise ValueError(f"{self.argument}: a {self.role} argument cannot come from anywhere")
        if self.any and self.role == "date" and not self.why:
            raise ValueError(f"{self.argument}: 'from: any' needs a written 'why'")
        if self.role in _SOURCED and not self.allow and not self.approve:
            raise ValueError(f"{self.argument}: a {self.role} argument needs 'from' classes")
        if self.role == "date" and not self.any and not self.allow and not self.same_day_as:
            raise ValueError(f"{self.argument}: a date needs 'from' classes, 'same_day_as' or 'from: any'")
        if self.role == "amount" and not self.bound:
            raise ValueError(f"{self.argument}: an amount needs a 'bound' (user, named)")
        if self.currency is not None and self.role != "amount":
            raise ValueError(f"{self.argument}: only an amount has a 'currency'")
        if self.bound - {USER, "named"}:
            raise ValueError(f"{self.argument}: bound classes are user and named")
        if "template" in self.allow and not self.fill_from:
            raise ValueError(f"{self.argument}: 'template' needs 'fill_from' (the fields that may fill it)")

    @property
    def restricts(self) -> bool:
        """Whether the rule limits the value itself (content and ``from: any`` do not)."""
        return not self.any and self.role != "content"

    def under_key(self, key: object, above: tuple[object, ...] = ()) -> bool:
        """Whether a mapping's ``key`` (inside the mappings keyed ``above``) is one of the rule's
        ``keys`` as a server reads its arguments (``among_keys``): ``File_ID`` and ``fileId``
        are ``file_id`` to many, and so is ``{"file": {"id": …}}`` to one that flattens it."""
        return among_keys(key, self.keys, above)

    def says_wanted(self, elements: Iterable[Any]) -> bool:
        """Whether these values of the argument tie the call to what the user asked: a value the
        rule restricts (traced to the request or a record), never free text, a date from
        anywhere or an option declared ``safe`` (any injection may pick those)."""
        values = list(elements)
        if self.role == "option":
            return any(json.dumps(v) not in self.safe for v in values)
        return self.restricts and bool(values)

    def cased(self, value: str) -> bool:
        """Whether a tool tells this argument's value apart by case: a target written as an
        identifier (one token holding a digit or a joiner: a path, a file name, an id) does; a
        name in words ("Hotel Alpha"), an address or an account (whose case names nothing) not."""
        token = value.strip()
        return (
            self.role == "target"
            and _IDENTIFIER.fullmatch(token) is not None
            and shape_kind(token) not in ("mailbox", "account")
        )

    def choices(self, value: Any, schema: Any = None) -> list[Any]:
        """What an option argument chooses, judged one by one: every value ``split_values``
        finds, and every flag the tool receives inside a list or a mapping, also one a string
        encodes as JSON (``{"visibility": "private", "public_link": true}`` chooses ``true``,
        which is as much a choice as the string beside it)."""
        found: list[Any] = list(split_values(value, schema))

        def flags(v: Any) -> None:
            if isinstance(v, bool):
                found.append(v)
            elif isinstance(v, Mapping):
                for item in v.values():
                    flags(item)
            elif isinstance(v, list | tuple):
                for item in v:
                    flags(item)
            elif isinstance(v, str) and v.strip()[:1] in "[{":
                try:
                    flags(json.loads(v))
                except ValueError:
                    return

        if isinstance(value, Mapping | list | tuple | str):
            flags(value)
        return found

    def composed(self, value: Any) -> bool:
        """Whether an amount's value holds a record (a mapping, or a list inside the value) of two
        numbers or more, anywhere below it: a line's quantity and unit price, an amount and a
        count. What the tool pays is what it makes of them, multiplied or added, which no bound
        on their sum tells, whichever of them ``keys`` names. A number is what any reader takes
        for one (``read_as_number``: a quantity of ``"100.000"`` or ``"1_00"`` is no figure, but
        a hundred to the tool that multiplies by it). A list of figures (installments), or of
        records of one figure each, is their sum."""

        def numbers(v: Any) -> int:
            if isinstance(v, Mapping | list | tuple):
                return sum(map(numbers, v.values() if isinstance(v, Mapping) else v))
            return int(read_as_number(v))

        def walk(v: Any, top: bool) -> bool:
            if not isinstance(v, Mapping | list | tuple):
                return False
            if (isinstance(v, Mapping) or not top) and numbers(v) >= 2:
                return True
            return any(walk(item, False) for item in (v.values() if isinstance(v, Mapping) else v))

        return self.role == "amount" and walk(value, True)

    @classmethod
    def from_dict(cls, argument: str, data: Mapping[str, Any]) -> ArgumentRule:
        if not isinstance(data, Mapping):
            raise ValueError(f"rule for {argument!r} must be a mapping with a role")
        unknown = set(data) - _KEYS
        if unknown:
            raise ValueError(f"unknown keys in rule for {argument!r}: {sorted(unknown)}")
        if "role" not in data:
            raise ValueError(f"rule for {argument!r} has no role; roles: {list(ROLES)}")
        role = str(data["role"])
        sources = data.get("from", "any" if role == "content" else ())
        links = data.get("links_from")
        requested = data.get("requested_by") or {}
        return cls(
            argument,
            role=role,  # type: ignore[arg-type]
            allow=frozenset() if sources == "any" else name_set(sources, what=f"{argument}.from"),
            approve=name_set(data.get("approve", ()), what=f"{argument}.approve"),
            otherwise=data.get("otherwise", "deny" if role == "secret" else "approve"),
            any=sources == "any",
            why=str(data.get("why", "")),
            links_from=name_set(links, what=f"{argument}.links_from") if links is not None else None,
            same_day_as=data.get("same_day_as"),
            bound=frozenset(data.get("bound", ())),
            fields=tuple(data.get("fields", ("amount",))),
            cumulative=bool(data.get("cumulative", False)),
            safe=frozenset(json.dumps(v) for v in data.get("safe", ())),
            # YAML keys true/false arrive as booleans, so they encode like the values they name.
            requested_by={json.dumps(k): tuple(map(str, v)) for k, v in requested.items()},
            keys=tuple(data.get("keys", ())),
            kind=str(data["kind"]) if data.get("kind") is not None else None,
            fill_from=tuple(map(str, data.get("fill_from", ()))),
            currency=str(data["currency"]) if data.get("currency") is not None else None,
        )


@dataclass(frozen=True)
class ToolRules:
    """The provenance rules of one tool: one ``ArgumentRule`` per argument, and the trust
    classes (``no_flow``) whose values may not leave in any argument without approval."""

    tool: str
    arguments: Mapping[str, ArgumentRule] = field(default_factory=dict)
    no_flow: frozenset[str] = frozenset()
    effect: str | None = None
    no_relay: frozenset[str] = frozenset()
    requested_by: tuple[str, ...] = ()  # a tool with an effect and no arguments: the phrases that ask for it

    @property
    def cumulative_amounts(self) -> list[ArgumentRule]:
        """The amount arguments that count towards one sum with the run's other payments."""
        return [r for r in self.arguments.values() if r.role == "amount" and r.cumulative]

    @classmethod
    def from_dict(cls, tool: str, data: Mapping[str, Any]) -> ToolRules:
        unknown = set(data) - {"arguments", "no_flow", "no_relay", "effect", "requested_by"}
        if unknown:
            raise ValueError(f"unknown keys for tool {tool!r}: {sorted(unknown)}")
        args = {a: ArgumentRule.from_dict(a, r) for a, r in (data.get("arguments") or {}).items()}
        return cls(
            tool,
            args,
            name_set(data.get("no_flow", ()), what=f"{tool}.no_flow"),
            data.get("effect"),
            name_set(data.get("no_relay", ()), what=f"{tool}.no_relay"),
            tuple(map(str, data.get("requested_by", ()))),
        )


def declared_rules(rules: Mapping[str, ToolRules], name: str, remote: str | None = "") -> ToolRules | None:
    """The rules declared for the tool the host names ``name``: under that name, or under its
    source's own name for it (``remote``), unless that name is itself one the host gives a
    server's tool (``notes__append``): a tool another server calls so is not that tool, and takes
    none of its rules (undeclared, it is denied)."""
    found = rules.get(name)
    if found is None and remote and SEPARATOR not in remote:
        found = rules.get(remote)
    return found


def check_declarations(rules: Mapping[str, ToolRules], specs: Iterable[Any]) -> None:
    """Every argument of every side-effecting tool must be declared, every declared argument
    must exist, and a tool with arguments must restrict at least one of them (its decisive
    arguments). Raises ``ValueError`` listing every problem."""
    problems: list[str] = []
    for spec in specs:
        declared = declared_rules(rules, spec.name, getattr(spec, "remote_name", None))
        params = set((spec.parameters or {}).get("properties", {}))
        if declared is None:
            if spec.effect.side_effecting:
                problems.append(f"{spec.name}: side-effecting tool without rules")
            continue
        extra = set(declared.arguments) - params
        if extra:
            problems.append(f"{spec.name}: declared arguments the tool does not have: {sorted(extra)}")
        if not spec.effect.side_effecting:
            continue
        if declared.effect == "read":  # its writes would go untraced (``_writes``): undeclared
            problems.append(f"{spec.name}: declared a read, but its effect is {spec.effect.value}")
        missing = params - set(declared.arguments)
        if missing:
            problems.append(f"{spec.name}: undeclared arguments: {sorted(missing)}")
        if params and not any(r.restricts for r in declared.arguments.values()):
            problems.append(f"{spec.name}: no argument is restricted (declare its decisive arguments)")
        if not params and not declared.requested_by:
            problems.append(f"{spec.name}: an effect without arguments needs 'requested_by' phrases")
        for r in declared.arguments.values():
            if r.same_day_as is not None and r.same_day_as not in declared.arguments:
                problems.append(f"{spec.name}.{r.argument}: same_day_as names no argument")
    if problems:
        raise ValueError("; ".join(problems))


def rules_from_dict(data: Mapping[str, Any]) -> dict[str, ToolRules]:
    """Tool rules from a declaration's ``tools`` mapping."""
    return {str(name): ToolRules.from_dict(str(name), spec or {}) for name, spec in data.items()}
