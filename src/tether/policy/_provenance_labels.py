"""Provenance labelling: what each piece of a tool observation is and where it came from.

The labelling half of provenance (``_provenance`` holds the tracing half, ``ProvenanceIndex``):
the labels themselves (``SourceLabel``, ``Segment``, ``Origin``), the application's trust
configuration (``SourceTrust``, ``TrustConfig``), the normal form values are compared in
(``normalise``, ``split_values``), the host's curated context (``Directory``), and the split
of one tool result into labelled segments (``label_observation``). See ``_provenance`` for
the model as a whole.
"""

from __future__ import annotations

import ast
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import yaml

from tether.policy._provenance_schema import branch_of
from tether.policy._provenance_values import compose, unescaped

__all__ = [
    "ASSIGNED",
    "DATA_KEY",
    "DIRECTORY",
    "ERROR",
    "EXTRACTOR",
    "MIN_CONTAINED",
    "MIXED",
    "MODEL",
    "SHAPE_KINDS",
    "TRUST_ORDER",
    "USER",
    "USER_WORD",
    "Directory",
    "Origin",
    "Segment",
    "SourceLabel",
    "SourceTrust",
    "TrustConfig",
    "label_observation",
    "least_trusted",
    "normalise",
    "one_space",
    "shape_kind",
    "split_values",
    "trust_parts",
]


DATA_KEY = "key"
"""Field name of a mapping key that is data (a hotel's name keying its reviews)."""

MIN_CONTAINED = 5
"""Shortest value (after normalisation) that may count as contained in longer text."""

USER = "user"
USER_WORD = "user:word"  # a single word of the request that the request does not use as a name
DIRECTORY = "directory"
MODEL = "model"  # composed by the model: traced nowhere
EXTRACTOR = "quarantined_extractor"
"""The tool name of a plan's extracted values (``planexec``): a copy of a value taken from
earlier results, labelled with its sources' least trusted class. It neither mentions a value
nor shows where the system assigned it; its sources, in the same run, do."""


@dataclass(frozen=True, slots=True)
class SourceLabel:
    """Where one segment of an observation came from."""

    tool: str
    server: str
    trust: str
    path: str = ""  # field path inside the result, e.g. "[2].body"
    record_id: str | None = None
    author: str | None = None
    call_id: str = ""

    def describe(self) -> str:
        parts = [f"{self.tool}@{self.server}", self.trust]
        if self.record_id is not None:
            parts.append(f"record {self.record_id}")
        if self.path:
            parts.append(f"field {self.path}")
        if self.author:
            parts.append(f"by {self.author}")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        """The label as traced: every field but ``call_id``."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "call_id"}


@dataclass(frozen=True, slots=True)
class Segment:
    """A labelled piece of an observation: a structured leaf (``whole``) or free text."""

    raw: str
    text: str  # normalised
    label: SourceLabel
    whole: bool
    field_name: str = ""
    naming: str = ""  # "whole": names its record by its whole value; "word": by one of its words
    own: bool = False  # its record's author (``SourceTrust.author``) is one of the user's identities


Kind = Literal["user", "host", "tool", "nowhere"]
Match = Literal["exact", "contained", "word", "template"]


@dataclass(frozen=True, slots=True)
class Origin:
    """One origin of one value. ``trust`` is the class policy rules reason about:
    ``user``, ``directory``, ``model`` (nowhere), or a tool segment's trust class."""

    kind: Kind
    trust: str
    match: Match
    label: SourceLabel | None = None

    def describe(self) -> str:
        if self.kind == "user":
            return f"the user's request ({self.match})"
        if self.kind == "host":
            return "trusted host context (directory)"
        if self.kind == "nowhere":
            return "nowhere: composed by the model"
        assert self.label is not None
        return f"{self.label.describe()} ({self.match})"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "trust": self.trust, "match": self.match}
        if self.label is not None:
            out["source"] = self.label.to_json()
        return out


# -- configuration -------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceTrust:
    """How to label one tool's results.

    ``default``: trust class of every leaf not named in ``fields``; ``fields``: class by
    field name (the last key of the leaf's path); ``record_id``: field names that identify
    a record; ``author``: field names naming who wrote a record; ``naming``: fields by which
    the user can name a record (whole value in the request); ``self_naming``: fields that
    name a record by one of their words, only in records whose author is one of the user's
    own identities (text the user wrote).
    """

    default: str = "third_party"
    fields: Mapping[str, str] = field(default_factory=dict)
    record_id: tuple[str, ...] = ("id_", "id")
    author: tuple[str, ...] = ()
    naming: tuple[str, ...] = ()
    self_naming: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SourceTrust:
        unknown = set(data) - {"default", "fields", "record_id", "author", "naming", "self_naming"}
        if unknown:
            raise ValueError(f"unknown source trust keys: {sorted(unknown)}")
        return cls(
            default=str(data.get("default", "third_party")),
            fields={str(k): str(v) for k, v in (data.get("fields") or {}).items()},
            record_id=tuple(data.get("record_id", ("id_", "id"))),
            author=tuple(data.get("author", ())),
            naming=tuple(data.get("naming", ())),
            self_naming=tuple(data.get("self_naming", ())),
        )


ASSIGNED = frozenset({"system", "address"})
"""Default classes of values the system assigns (ids, times, senders): data that names or
counts things but carries no words anyone chose to steer a reader."""


@dataclass(frozen=True)
class TrustConfig:
    """Trust classes per source (tool), configurable by the application. ``assigned``: the
    classes whose values the system assigns (an id, a timestamp, a sender's address); every
    other class is text someone chose, which can steer a model that reads it."""

    sources: Mapping[str, SourceTrust] = field(default_factory=dict)
    default: SourceTrust = field(default_factory=SourceTrust)
    assigned: frozenset[str] = ASSIGNED

    def for_tool(self, tool: str) -> SourceTrust:
        return self.sources.get(tool, self.default)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrustConfig:
        sources = {str(k): SourceTrust.from_dict(v or {}) for k, v in (data.get("sources") or {}).items()}
        default = SourceTrust.from_dict(data.get("default") or {})
        assigned = data.get("assigned")
        if assigned is not None and (
            not isinstance(assigned, list | tuple) or not all(isinstance(a, str) for a in assigned)
        ):
            raise ValueError("trust.assigned must be a list of class names")
        return cls(
            sources=sources,
            default=default,
            assigned=frozenset(assigned) if assigned is not None else ASSIGNED,
        )


TRUST_ORDER = ("system", "listing", "contacts", "address", "internal", "third_party", "web")
"""Order of integrity, most trusted first, for a value copied from several sources (an
extracted value, a page of a stored output). A class not listed (``private``, a deployment's
own) has no rank: copied together with any other class it makes a class of its own
(``least_trusted``). Confidentiality is followed separately: a copy's source observation stays
in the run, so its private values are still found inside any argument that carries them."""

ERROR = "tool_error"
"""The class of a tool's error message: text its server or author chose (an MCP server's error,
a message naming what was asked), never the tool's data, so never a trusted field of it; outside
``TRUST_ORDER``, it is the least trusted class a copy can take."""

MIXED = "+"
"""Joins the classes of a copy that no one class ranks (``least_trusted``): ``private+web``."""


def least_trusted(classes: Iterable[str]) -> str:
    """The least trusted of ``classes`` by ``TRUST_ORDER`` (a tool's error message, ``ERROR``,
    below them all); ``third_party`` when there is none. Where a class outside the order stands
    beside another, neither ranks the copy: it is all of them joined (``private+web``), a class
    no rule names, so no rule that trusts one of them (``private``: the user's own data) trusts
    a copy that may be the other's (a web page's)."""
    found = {part for c in classes for part in trust_parts(c)}
    if not found:
        return "third_party"
    if ERROR in found:
        return ERROR  # below every class, whoever's data
    if len(found) > 1 and not found <= set(TRUST_ORDER):
        return MIXED.join(sorted(found))
    return max(found, key=lambda c: TRUST_ORDER.index(c) if c in TRUST_ORDER else len(TRUST_ORDER))


def trust_parts(trust: str) -> frozenset[str]:
    """The classes a (``least_trusted``) class is made of: itself, or those it joins."""
    return frozenset(trust.split(MIXED)) if MIXED in trust else frozenset({trust})


# -- normalisation -------------------------------------------------------------------------

_WS = re.compile(r"[ \t\r\n]+")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def normalise(value: str) -> str:
    """The form values are compared in: canonically composed (``compose``: NFC, but a Kelvin
    or an Ångström sign stays), ASCII letters in lower case, spaced once (``one_space``). A
    zero-width, full-width or look-alike character, a quote or a trailing dot stays, and no other
    letter is folded (``ß``, the Kelvin sign): it matches what a tool receives as the same text."""
    return one_space(compose(value).translate(_ASCII_LOWER))


def one_space(text: str) -> str:
    """``text`` with each run of spaces, tabs and line breaks one space, trimmed: the one reading
    of spacing wherever values are compared (``normalise``; a mention, ``Steering.unfolded``)."""
    return _WS.sub(" ", text).strip(" ")


def _structured(schema: Any) -> bool:
    """Whether a JSON Schema admits an object or an array (no schema: it may)."""
    if not isinstance(schema, Mapping):
        return True
    kind = schema.get("type")
    if kind is None:
        alternatives = [*schema.get("anyOf", ()), *schema.get("oneOf", ())]
        return not alternatives or any(_structured(alt) for alt in alternatives)
    kinds = {kind} if isinstance(kind, str) else set(kind)
    return bool(kinds & {"object", "array"})


def _child(schema: Any, key: str | None) -> Any:
    schema = branch_of(schema, [] if key is None else {})  # an optional object's object
    if not isinstance(schema, Mapping):
        return None
    if key is None:
        items = schema.get("items")
        return items if isinstance(items, Mapping) else None
    props = schema.get("properties")
    if isinstance(props, Mapping) and key in props:
        return props[key]
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, Mapping) else None


def _declared(schema: Any, key: str) -> bool:
    schema = branch_of(schema, {})
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    return isinstance(props, Mapping) and key in props


def split_values(value: Any, schema: Any = None) -> list[str]:
    """The scalar values a tool receives in one argument, judged one by one: every leaf of a
    list or mapping, every key that is data (not a property the schema declares), and a
    string always whole, as it is. A string that itself encodes a list or mapping
    (``"['a@b.com']"``) is decoded *in addition* when the schema lets the parameter be
    structured — never instead of the raw string, which is what the tool receives. A decoding
    is read only while its nodes and the text its nested decodings parse stay within a few
    times its length, which no decoding without aliases exceeds: YAML aliases that expand a
    short string into millions of nodes ("billion laughs") leave the raw string alone judged."""
    out: list[str] = []

    def walk(v: Any, node: Any, budget: list[int] | None, into: list[str]) -> None:
        if budget is not None:
            _spend(budget, 1)
        if isinstance(v, Mapping):
            for k, item in v.items():
                if not _declared(node, str(k)):
                    into.append(str(k))
                walk(item, _child(node, str(k)), budget, into)
        elif isinstance(v, list | tuple | set | frozenset):
            for item in v:
                walk(item, _child(node, None), budget, into)
        elif isinstance(v, bool) or v is None:
            return
        elif isinstance(v, str):
            into.append(v)
            s = v.strip()
            if s[:1] in "[{" and s[-1:] in "]}" and _structured(node):
                inner = budget or [4 * len(s) + 64]
                found: list[str] = []
                try:
                    _spend(inner, len(s))  # the parse itself
                    decoded = _decode(s)
                    if decoded is not None:
                        walk(decoded, None, inner, found)
                except (_TooLarge, RecursionError):
                    if budget is not None:
                        raise
                    return  # larger than its text: only the raw string is judged
                into.extend(found)
        else:
            into.append(str(v))

    walk(value, schema, None, out)
    return out


def _spend(budget: list[int], n: int) -> None:
    budget[0] -= n
    if budget[0] < 0:
        raise _TooLarge


def _decode(text: str) -> Any:
    for loader in (json.loads, ast.literal_eval, yaml.safe_load):
        try:
            value = loader(text)
        except Exception:
            continue
        if isinstance(value, list | dict):
            return value
    return None


_TOKEN = re.compile(r"[^\W\d_]+|\d+")  # letters apart from digits: "19T12" as "19", "t", "12"
_LITERALS = frozenset({"null", "none", "true", "false"})


def renders(text: str, data: Any) -> bool:
    """Whether ``text`` is a rendering of ``data`` (JSON, YAML, a table of it): every word it
    holds, as written or once read back as JSON, a Python literal or YAML (escapes undone), is
    a word of the data's values or of a key some value stands under (not of a key with only a
    null or a flag under it: a text that repeats one is labelled too). A text with a word of its
    own says more than the data, and so does one that reads back as more nodes than ``_NODES``
    (YAML aliases, nested deep)."""
    try:
        words = _words(data) | _LITERALS
        if _tokens(text) <= words:
            return True
        for loader in (json.loads, ast.literal_eval, _load_yaml):
            try:
                parsed = loader(text)
            except Exception:
                continue
            if isinstance(parsed, Mapping | list):
                # And no word of the text is left out of the parse: a ``#`` comment (YAML, a
                # Python literal) is read by the model, never by the parse.
                keys: set[str] = set()
                return _words(parsed, keys) <= words and _tokens(unescaped(text)) <= words | keys
    except _TooLarge:
        pass
    return False


class _TooLarge(Exception):
    pass


_NODES = 200_000


def _words(value: Any, keys: set[str] | None = None) -> set[str]:
    """The words (``_tokens``) of every scalar of ``value`` but null and booleans, and of every
    key some such scalar stands under (of every key at all, into ``keys``). Raises
    ``_TooLarge`` past ``_NODES`` nodes."""
    budget = [_NODES]

    def walk(v: Any) -> set[str]:
        budget[0] -= 1
        if budget[0] < 0:
            raise _TooLarge
        if isinstance(v, Mapping):
            out: set[str] = set()
            for k, item in v.items():
                if keys is not None:
                    keys.update(_tokens(str(k)))
                if below := walk(item):
                    out |= _tokens(str(k)) | below
            return out
        if isinstance(v, list | tuple | set | frozenset):
            return {w for item in v for w in walk(item)}
        return set() if v is None or isinstance(v, bool) else _tokens(str(v))

    return walk(value)


def _tokens(text: str) -> set[str]:
    """The words of ``text``, case-folded, format characters (zero-width, soft hyphen) left out
    as the host's cleaning leaves them out of one side and an escape keeps them in the other."""
    if not text.isascii():
        text = "".join(c for c in text if unicodedata.category(c) != "Cf")
    return set(_TOKEN.findall(text.casefold()))


def _load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


# -- curated host context ---------------------------------------------------------------------

_EMAIL_SHAPE = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
_ACCOUNT_SHAPE = re.compile(r"[a-z]{2}\d{2}[a-z0-9]{10,30}")
_LINK_SHAPE = re.compile(r"(?:[a-z][a-z0-9+.-]*://)?[^\s/@]+\.[^\s/@]+(?:/\S*)?")
SHAPE_KINDS = ("mailbox", "account", "link")


def shape_kind(value: str) -> str:
    """The kind of destination a value is shaped as: ``mailbox`` (an e-mail address),
    ``account`` (IBAN-shaped), ``link``, or ``name`` (anything else: a person, a channel)."""
    v = normalise(value)
    if _EMAIL_SHAPE.fullmatch(v):
        return "mailbox"
    if _ACCOUNT_SHAPE.fullmatch(v.replace(" ", "")):
        return "account"
    if _LINK_SHAPE.fullmatch(v) and not v.replace(".", "").isdigit():
        return "link"
    return "name"


_PLAIN_NAME = re.compile(r"[^\x00-\x1f\x7f<>{}\[\]]{1,100}")


def _well_formed(kind: str, text: str) -> bool:
    """Whether an entry is a plain value of its kind, fit to vouch: an address, an account or a
    link of that shape; for any other kind (a member, a channel) a short name on one line with
    no link, address or markup inside — a name that carries a link or an instruction was chosen
    to be read, and vouches for nothing."""
    if kind in SHAPE_KINDS:
        return shape_kind(text) == kind
    if not _PLAIN_NAME.fullmatch(text) or "@" in text:
        return False
    from tether.policy._provenance_values import find_links

    return not find_links(text)


class Directory:
    """What the deployment vouches for, by kind: each entry vouches for one kind of
    destination only (a mailbox for a mailbox, a channel for a channel, a link for a link).
    Built from a mapping ``{kind: [entries]}``, or from plain entries whose kind is their
    shape (``shape_kind``). Entries that outsiders can create (a channel anyone may open)
    do not belong here: they are third-party data."""

    def __init__(self, entries: Mapping[str, Iterable[str]] | Iterable[str] = ()) -> None:
        self.kinds: dict[str, set[str]] = {}
        if isinstance(entries, Mapping):
            for kind, values in entries.items():
                if isinstance(values, str):
                    raise TypeError(f"directory kind {kind!r}: a list of entries, not a string")
                for v in values:
                    self._add(str(kind), v)
        else:
            for v in entries:
                self._add(shape_kind(v), v)

    def _add(self, kind: str, value: str) -> None:
        text = normalise(value)
        if text and _well_formed(kind, text):
            self.kinds.setdefault(kind, set()).add(text)

    def __bool__(self) -> bool:
        return bool(self.kinds)

    def __contains__(self, text: object) -> bool:
        return any(text in values for values in self.kinds.values())

    def vouches(self, text: str, kind: str | None = None) -> bool:
        """Whether the normalised ``text`` is an entry of ``kind`` (by default, the kind its
        shape says; a ``name`` is vouched for by an entry of any kind that is not a shape)."""
        kind = kind or shape_kind(text)
        if kind == "name":
            return any(text in v for k, v in self.kinds.items() if k not in SHAPE_KINDS)
        return text in self.kinds.get(kind, ())

    def entries(self, kind: str) -> set[str]:
        return self.kinds.get(kind, set())


# -- labelling -----------------------------------------------------------------------------


def label_observation(
    tool: str,
    server: str,
    data: Any,
    text: str,
    config: TrustConfig,
    *,
    own: Iterable[str] = (),
    call_id: str = "",
) -> list[Segment]:
    """Split one tool result into labelled segments. Structured ``data`` gives one segment per
    leaf, and its ``text`` one more where that text is no rendering of the data (``renders``);
    without data the whole text is one segment of the least trusted of the tool's default class
    and its ``fields``' classes. ``own``: the user's own identities, for ``self_naming`` fields."""
    source = config.for_tool(tool)
    mine = {normalise(o) for o in own if normalise(o)}
    named = {*source.fields, *source.record_id, *source.author, *source.naming, *source.self_naming}
    segments: list[Segment] = []

    def leaf(
        raw: str, path: str, key: str, record: str | None, author: str | None, field_name: str | None = None
    ) -> None:
        trust = source.fields.get(key, source.default)
        naming = ""
        if record is not None and key in source.naming:
            naming = "whole"
        elif record is not None and key in source.self_naming and author is not None:
            naming = "word" if normalise(author) in mine else ""
        label = SourceLabel(tool, server, trust, path, record, author, call_id)
        name = key if field_name is None else field_name
        by_user = author is not None and normalise(author) in mine
        segments.append(Segment(raw, normalise(raw), label, True, name, naming, by_user))

    def walk(v: Any, path: str, key: str, record: str | None, author: str | None) -> None:
        if isinstance(v, Mapping):
            rec = record
            for k in source.record_id:
                if k in v and isinstance(v[k], str | int) and not isinstance(v[k], bool):
                    rec = str(v[k]) if record is None else f"{record}/{v[k]}"  # a part: not another
                    break
            else:
                if any(k in v for k in (*source.naming, *source.self_naming)):
                    rec = f"@{path or '.'}"  # a record without an id: the mapping itself
            auth = author
            for k in source.author:
                if isinstance(v.get(k), str):
                    auth = v[k]
                    break
            for k, item in v.items():
                k = str(k)
                flag = item is None or isinstance(item, bool)
                digit = any(c.isdigit() for c in k)
                if not k.isidentifier() or (k not in named and (flag or digit)):
                    # A key that is data (a hotel's name, an e-mail address) is a leaf too, and so is
                    # one of no named field with a flag under it ({"Dave_is_lead": true}) or a digit
                    # in it (a code someone chose, {"XJ7741QZ": ...}: no field's name).
                    leaf(k, f"{path}.{k}" if path else k, key, rec, auth, field_name=DATA_KEY)
                walk(item, f"{path}.{k}" if path else k, k, rec, auth)
        elif isinstance(v, list | tuple):
            for i, item in enumerate(v):
                walk(item, f"{path}[{i}]", key, record, author)
        elif v is not None and not isinstance(v, bool):
            leaf(str(v), path, key, record, author)

    if data is not None and not isinstance(data, str):
        walk(data, "", "", None, None)
        if text.strip() and not renders(text, data):
            # Text beside the data that says more than the data does (an MCP server's text block
            # beside its structured content): what the model reads, of no field the configuration
            # classes, so of the default class or the least trusted of the data's, if less.
            trust = least_trusted({source.default, *(seg.label.trust for seg in segments)})
            label = SourceLabel(tool, server, trust, call_id=call_id)
            segments.append(Segment(text, normalise(text), label, False))
    else:
        raw, fields = (data if isinstance(data, str) else text), source.fields.values()  # text, or data cut
        label = SourceLabel(tool, server, least_trusted({source.default, *fields}), call_id=call_id)
        segments.append(Segment(raw, normalise(raw), label, False))
    return segments
