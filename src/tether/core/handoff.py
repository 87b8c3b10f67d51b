"""Handoffs: live state passed between agents or contexts without copying the conversation.

A handoff crosses a boundary, so its text is untrusted data (SPEC H1, H2, P1). ``validate_handoff``
checks schema, version, permissions, evidence, artifacts and unsupported claims, and raises
``HandoffError`` listing every problem, each prefixed by a stable code. Every ``done`` item is
``{claim, cites}``: ``resolve`` is asked about each cited call as about each evidence reference;
``resolve_from_trace`` answers both from the run's own record.

    size:exceeded            raw input larger than ``MAX_HANDOFF_BYTES`` (nothing else is checked)
    json:invalid             not parseable JSON / not UTF-8 / not an object (nothing else is checked)
    json:duplicate_key K     the same key twice in one JSON object
    json:non_finite C        NaN, Infinity or -Infinity in the JSON text
    missing:F                a required field is absent (``missing:blocked`` is the dangerous one)
    extra:F                  a field the schema does not know
    invalid:F (type)         a field of the wrong type or shape
    version:unsupported (V)  a version other than ``HANDOFF_VERSION``
    evidence:malformed R     a reference that is not ``scheme:path#version``
    evidence:unversioned R   a reference without a version fragment (``#latest`` is not a version)
    evidence:unresolved R    ``resolve(ref)`` returned False
    done:uncited N           done item N is not ``{claim, cites}`` with at least one cited call id
    done:unbacked N C        done item N cites call C, which the run did not make or which failed
    permissions:read_exceeds_run (P) / permissions:write_exceeds_run (P)
    artifact:path_escape P   absolute path, drive, ``..`` or a symlink leaving ``artifact_root``
    artifact:invalid_path P  empty path or one containing NUL
    artifact:unverified P    no ``artifact_root`` was given, so the checksum cannot be checked
    artifact:missing P       no regular file at the path
    artifact:unreadable P    the file exists but could not be read
    artifact:checksum_mismatch P
    claim:unsupported F      a claim of passing tests / verification / approval with no report

Values echoed into problems are escaped and truncated (a problem list cannot forge log lines);
the parsed model keeps every string verbatim: validation is not sanitisation."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from tether.errors import HandoffError

__all__ = [
    "HANDOFF_VERSION",
    "MAX_HANDOFF_BYTES",
    "Artifact",
    "CallCitation",
    "DoneItem",
    "EvidenceRef",
    "Handoff",
    "HandoffGrants",
    "artifact_for",
    "claim_check",
    "done_from_trace",
    "evidence_from_trace",
    "resolve_from_trace",
    "validate_handoff",
]

HANDOFF_VERSION = 1
MAX_HANDOFF_BYTES = 64 * 1024

_STRICT = ConfigDict(frozen=True, extra="forbid", strict=True)

_SCHEME = r"[A-Za-z][A-Za-z0-9+.-]*"
_PATH = r"[^#\s]+"
# A version must name a fixed state: it needs a digit, so moving pointers like "latest" fail.
_VERSION = r"[A-Za-z0-9._:+-]*[0-9][A-Za-z0-9._:+-]*"
_REF = re.compile(rf"(?P<scheme>{_SCHEME}):(?P<slashes>//)?(?P<path>{_PATH})(?:#(?P<version>[^#]*))?")
_VERSION_RE = re.compile(_VERSION)

# Claims a successor would act on ("not verified" is not one); each needs a report artifact or ref.
_CLAIM = re.compile(
    r"(?<!not )(?<!never )\b(?:tests?\s+(?:(?:have|has|all)\s+)?pass(?:ed|es|ing)?|verified|approved)\b",
    re.IGNORECASE,
)
_REPORT_MARK = "report"

_M = TypeVar("_M", bound=BaseModel)


class EvidenceRef(BaseModel):
    """A versioned reference (``mcp:erp/orders/742#v18``); validates from and serialises to its string."""

    model_config = _STRICT

    scheme: str = Field(pattern=rf"^{_SCHEME}$")
    path: str = Field(pattern=rf"^{_PATH}$")
    version: str = Field(pattern=rf"^{_VERSION}$")
    hierarchical: bool = False  # written with "//" after the scheme

    @model_validator(mode="before")
    @classmethod
    def _parse(cls, data: Any) -> Any:
        if not isinstance(data, str):
            return data
        match = _REF.fullmatch(data)
        if match is None or not data.isprintable():
            raise PydanticCustomError("evidence_malformed", "not a scheme:path#version reference")
        version = match["version"]
        if not version or not _VERSION_RE.fullmatch(version):
            raise PydanticCustomError("evidence_unversioned", "reference lacks a #version fragment")
        return {
            "scheme": match["scheme"],
            "path": match["path"],
            "version": version,
            "hierarchical": match["slashes"] is not None,
        }

    @model_serializer
    def _serialise(self) -> str:
        return str(self)

    def __str__(self) -> str:
        slashes = "//" if self.hierarchical else ""
        return f"{self.scheme}:{slashes}{self.path}#{self.version}"


class DoneItem(BaseModel):
    """One thing the run did, and the ids of the calls that did it."""

    model_config = _STRICT

    claim: str = Field(min_length=1)
    cites: list[str] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _cited(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not data.get("cites"):
            raise PydanticCustomError("done_uncited", "a done item must cite the calls that did it")
        return data


@dataclass(frozen=True, slots=True)
class CallCitation:
    """A done item's reference to a call of the run, as ``resolve`` receives it."""

    call_id: str

    def __str__(self) -> str:
        return f"call:{self.call_id}"


class HandoffGrants(BaseModel):
    """What the successor may read and write; never wider than the run's own permissions."""

    model_config = _STRICT

    read: list[str]
    write: list[str]


class Artifact(BaseModel):
    """A file under the artifact root, pinned by its sha256 (lowercase hex)."""

    model_config = _STRICT

    path: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Handoff(BaseModel):
    """The state one agent leaves for the next (SPEC H1). Build it with ``validate_handoff``."""

    model_config = _STRICT

    version: int = HANDOFF_VERSION
    objective: str = Field(min_length=1)
    done: list[DoneItem]
    evidence: list[EvidenceRef]
    decisions: list[str] = Field(default_factory=list)
    blocked: list[str]
    permissions: HandoffGrants
    artifacts: list[Artifact] = Field(default_factory=list)
    next: str
    stop_reason: str = Field(min_length=1)

    @field_validator("version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value != HANDOFF_VERSION:
            raise PydanticCustomError("version_unsupported", "unsupported handoff version")
        return value

    def to_json(self) -> str:
        """Canonical JSON for traces: sorted keys, no whitespace, ASCII-only (no raw line breaks)."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def artifact_for(path: Path, root: Path) -> Artifact:
    """Pin the file at ``path`` (absolute, or relative to ``root``) as an Artifact. Raises
    ValueError if it lies outside ``root``, OSError if it cannot be read."""
    root_resolved = root.resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root_resolved):
        raise ValueError(f"{path} is outside the artifact root {root}")
    return Artifact(path=target.relative_to(root_resolved).as_posix(), sha256=_sha256(target))


def validate_handoff(
    data: Mapping[str, Any] | str | bytes,
    *,
    run_permissions: HandoffGrants,
    resolve: Callable[[EvidenceRef | CallCitation], bool],
    artifact_root: Path | None,
    claims_require_report: bool = True,
) -> Handoff:
    """Validate an untrusted handoff and return it, or raise HandoffError listing every problem.

    ``resolve`` is called once per well-formed evidence reference and once per cited call (a
    ``CallCitation``; a resolver that knows nothing of calls refuses them: fail closed)."""
    problems: list[str] = []
    raw = _load(data, problems)
    handoff: Handoff | None = None
    try:
        handoff = Handoff.model_validate(raw)
    except ValidationError as exc:
        problems.extend(_schema_problems(exc))

    # Semantic checks run on whatever parts are well-formed, so one bad field hides nothing else.
    problems.extend(_permission_problems(raw.get("permissions"), run_permissions))
    evidence = [ref for _, ref in _indexed_items(EvidenceRef, raw.get("evidence"))]
    problems.extend(f"evidence:unresolved {_show(str(ref))}" for ref in evidence if not resolve(ref))
    for index, item in _indexed_items(DoneItem, raw.get("done")):
        problems.extend(
            f"done:unbacked {index} {_show(cite)}" for cite in item.cites if not resolve(CallCitation(cite))
        )
    artifacts = [a for _, a in _indexed_items(Artifact, raw.get("artifacts"))]
    problems.extend(p for a in artifacts if (p := _artifact_problem(a, artifact_root)))
    if claims_require_report:
        problems.extend(_claim_problems(raw, artifacts, evidence))

    if problems or handoff is None:
        raise HandoffError(problems)
    return handoff


def _load(data: Mapping[str, Any] | str | bytes, problems: list[str]) -> dict[str, Any]:
    """Size-cap and strictly parse the input; fatal problems raise at once."""
    if isinstance(data, Mapping):
        try:
            size = len(json.dumps(data, default=repr).encode())
        except (TypeError, ValueError, RecursionError):
            raise HandoffError(["json:invalid (not serialisable)"]) from None
        _check_size(size)
        return dict(data)

    raw_bytes = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
    _check_size(len(raw_bytes))
    try:
        text = raw_bytes.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError:
        raise HandoffError(["json:invalid (not UTF-8)"]) from None

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                problems.append(f"json:duplicate_key {_show(key)}")
            out[key] = value
        return out

    def constant(name: str) -> None:
        problems.append(f"json:non_finite {name}")

    try:
        parsed = json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except (json.JSONDecodeError, RecursionError) as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        raise HandoffError([*problems, f"json:invalid ({reason})"]) from None
    if not isinstance(parsed, dict):
        raise HandoffError([*problems, "json:invalid (not an object)"])
    return parsed


def _check_size(size: int) -> None:
    if size > MAX_HANDOFF_BYTES:
        raise HandoffError([f"size:exceeded ({size} > {MAX_HANDOFF_BYTES} bytes)"])


def _schema_problems(exc: ValidationError) -> list[str]:
    problems: list[str] = []
    for error in exc.errors():
        loc = ".".join(str(part) for part in error["loc"])
        kind = error["type"]
        if kind == "missing":
            problems.append(f"missing:{loc}")
        elif kind == "extra_forbidden":
            problems.append(f"extra:{_show(loc)}")
        elif error["loc"][:1] == ("version",):
            problems.append(f"version:unsupported ({_show(repr(error['input']))})")
        elif kind == "done_uncited" or (error["loc"][:1] == ("done",) and error["loc"][-1:] == ("cites",)):
            problems.append(f"done:uncited {error['loc'][1] if len(error['loc']) > 1 else ''}".rstrip())
        elif kind in ("evidence_malformed", "evidence_unversioned"):
            problems.append(f"evidence:{kind.removeprefix('evidence_')} {_show(str(error['input']))}")
        else:
            problems.append(f"invalid:{_show(loc)} ({kind})")
    return problems


def _permission_problems(raw: Any, run: HandoffGrants) -> list[str]:
    try:
        granted = HandoffGrants.model_validate(raw)
    except ValidationError:
        return []  # already reported as a schema problem
    problems = [f"permissions:read_exceeds_run ({_show(p)})" for p in granted.read if p not in run.read]
    problems += [f"permissions:write_exceeds_run ({_show(p)})" for p in granted.write if p not in run.write]
    return problems


def _indexed_items(model: type[_M], raw: Any) -> list[tuple[int, _M]]:
    if not isinstance(raw, list):
        return []
    items: list[tuple[int, _M]] = []
    for index, item in enumerate(raw):
        try:
            items.append((index, model.model_validate(item)))
        except ValidationError:
            continue  # already reported as a schema problem
    return items


def _artifact_problem(artifact: Artifact, root: Path | None) -> str | None:
    shown = _show(artifact.path)
    if not artifact.path or "\x00" in artifact.path:
        return f"artifact:invalid_path {shown}"
    relative = PurePosixPath(artifact.path.replace("\\", "/"))
    windows = PureWindowsPath(artifact.path)
    if relative.is_absolute() or windows.drive or windows.root or ".." in relative.parts:
        return f"artifact:path_escape {shown}"
    if root is None:
        return f"artifact:unverified {shown}"
    root_resolved = root.resolve()
    target = (root_resolved / relative).resolve()
    if not target.is_relative_to(root_resolved):
        return f"artifact:path_escape {shown}"  # a symlink pointing out of the root
    if not target.is_file():
        return f"artifact:missing {shown}"
    try:
        digest = _sha256(target)
    except OSError:
        return f"artifact:unreadable {shown}"
    if digest != artifact.sha256:
        return f"artifact:checksum_mismatch {shown}"
    return None


def _claim_problems(
    raw: Mapping[str, Any], artifacts: list[Artifact], evidence: list[EvidenceRef]
) -> list[str]:
    if any(_REPORT_MARK in path.lower() for path in [a.path for a in artifacts] + [r.path for r in evidence]):
        return []
    problems: list[str] = []
    for field in ("done", "decisions"):
        texts = raw.get(field)
        if not isinstance(texts, list):
            continue
        for index, text in enumerate(texts):
            if isinstance(text, dict):
                text = text.get("claim")
            if isinstance(text, str) and _CLAIM.search(text):
                problems.append(f"claim:unsupported {field}.{index}")
    return problems


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _show(value: str, limit: int = 120) -> str:
    """Render untrusted text for a problem string: one line, escaped, bounded."""
    escaped = "".join(
        ch if ch.isprintable() else (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        for ch in value[:limit]
    )
    return escaped + ("…" if len(value) > limit else "")


# -- handoffs built from, and checked against, the run's own record --------------------------


def _succeeded(state: Any) -> dict[str, Any]:
    last = {c.call_id: c.status for c in getattr(state, "calls", ())}
    return {
        o.call_id: o
        for o in getattr(state, "observations", ())
        if not o.is_error and last.get(o.call_id) == "ok"
    }


def resolve_from_trace(ref: EvidenceRef | CallCitation, state: Any) -> bool:
    """Whether the run backs ``ref``: a cited call exists and succeeded; an evidence reference was
    returned by a successful observation. Use it as ``Agent(resolve_evidence=...)``."""
    ok = _succeeded(state)
    if isinstance(ref, CallCitation):
        return ref.call_id in ok
    wanted = str(ref)
    return any(isinstance(o.data, dict) and o.data.get("ref") == wanted for o in ok.values())


def done_from_trace(
    state: Any, describe: Callable[[str, Any], str | None] | None = None
) -> list[dict[str, Any]]:
    """One ``done`` item per successful call, citing it. ``describe(tool, arguments)`` words the
    claim (None skips the call); by default ``"<tool> <arguments> returned a result"``."""
    ok = _succeeded(state)
    items: list[dict[str, Any]] = []
    for c in getattr(state, "calls", ()):
        if c.call_id not in ok or any(i["cites"] == [c.call_id] for i in items):
            continue
        claim = (
            describe(c.tool, c.arguments) if describe else f"{c.tool} {_args(c.arguments)} returned a result"
        )
        if claim:
            items.append({"claim": claim, "cites": [c.call_id]})
    return items


def evidence_from_trace(state: Any) -> list[str]:
    """The versioned references that successful observations returned, in order, once each."""
    refs: list[str] = []
    for o in _succeeded(state).values():
        ref = o.data.get("ref") if isinstance(o.data, dict) else None
        if isinstance(ref, str) and ref not in refs:
            refs.append(ref)
    return refs


# First-person past-tense side effects ("we've cancelled the order"); the passive ("order 742 was
# closed") is how an answer reports a tool result, so it is left alone. The apostrophe and hyphen
# as models write them too: typographic (U+2019 "we’ve", U+02BC), non-breaking (U+2011 "e‑mailed").
_ACTION = re.compile(
    r"\b(?:i|we)(?:['\u2019\u02bc]ve|\s+have)?\s+(?:(?:just|now|already|successfully|also)\s+)?"
    r"(?P<verb>e[-\u2010\u2011]?mailed|sent|messaged|notified|called|phoned|texted|posted|published|submitted|filed|"
    r"created|updated|changed|modified|deleted|removed|cancell?ed|closed|booked|scheduled|ordered|"
    r"purchased|bought|paid|refunded|transferred|issued|approved|escalated|assigned|wrote|written|saved)\b",
    re.IGNORECASE,
)


# What follows "called" when it reports a tool call, not a phone call: "I called read_order",
# "we called the `read_order` tool".
_CALLED_TOOL = re.compile(r"\s+(?:the\s+)?[`'\"\u2018\u201c]?(?P<tool>[A-Za-z_][\w.-]*)")


def _names_a_read(found: re.Match[str], effects: Mapping[str, Any]) -> bool:
    """Whether ``found`` reports calling a read-only tool by its name ("I called read_order"):
    how models describe their work, not a claim of a side effect."""
    if found.group("verb").lower() != "called":
        return False
    tool = _CALLED_TOOL.match(found.string, found.end())
    return tool is not None and tool.group("tool") in effects and str(effects[tool.group("tool")]) == "read"


def claim_check(effects: Callable[[], Mapping[str, Any]]) -> Callable[[Any, str], str | None]:
    """A ``verify`` hook rejecting a final answer that claims an action ("I e-mailed the buyer")
    unless the run made a successful side-effecting call. ``effects()`` maps tool names to their
    effects, read when the answer comes (tools of servers started later count)."""

    def verify(state: Any, answer: str) -> str | None:
        known = effects()
        found = next((m for m in _ACTION.finditer(answer or "") if not _names_a_read(m, known)), None)
        if found is None:
            return None
        calls = getattr(state, "calls", ())
        if any(c.status == "ok" and str(known.get(c.tool, "write")) != "read" for c in calls):
            return None
        return (
            f"the answer says {found.group(0)!r} but no side-effecting call succeeded in this run: "
            "state only what the tool results show"
        )

    return verify


def _args(arguments: Any) -> str:
    if isinstance(arguments, str):
        text = arguments
        try:
            arguments = json.loads(text)
        except ValueError:
            return text[:80]
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)[:80]
