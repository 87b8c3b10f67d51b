"""Elicitation (X5): a server asks the person a question. One handler for both protocol eras.

The gate declines a server not opted in; takes URL mode only from a consenting interactive person
(http(s) only); accepts only flat forms of primitives and refuses credential-shaped questions;
shows the question attributed and validates the answer; with nobody to ask, stores a durable
pause (``tether mcp resume``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict
from urllib.parse import urlsplit

import anyio
import jsonschema

from tether.mcp._config import ElicitationConfig
from tether.mcp._pauses import Pause, PauseStore, question_key
from tether.trace._sanitize import sanitize

if TYPE_CHECKING:
    import mcp_types as types

__all__ = [
    "Answer",
    "CallInfo",
    "ConsoleResponder",
    "ElicitationGate",
    "ElicitationPrompt",
    "GateHooks",
    "RequestGate",
    "Responder",
    "ScriptedResponder",
    "check_schema",
    "choices",
    "credential_shaped",
    "validate_answer",
]

Action = Literal["accept", "decline", "cancel"]
_PRIMITIVES = {"string", "number", "integer", "boolean"}
_TOP_KEYS = {"type", "properties", "required", "title", "description", "$schema"}
_PROP_KEYS = {
    "type",
    "title",
    "description",
    "default",
    "minLength",
    "maxLength",
    "format",
    "enum",
    "enumNames",
    "oneOf",
    "minimum",
    "maximum",
}
_ARRAY_KEYS = {"type", "title", "description", "default", "items", "minItems", "maxItems"}
_FORMATS = {"email", "uri", "date", "date-time"}
MAX_PROPERTIES = 20
MAX_MESSAGE = 2000
MAX_FIELD_SHOWN = 8000  # of one field's line (its choices, its description) shown to a person

_CREDENTIAL = re.compile(
    r"pass(word|wd|phrase|code)|\bpins?\b|\bpin[ _-]?code|\btoken|api[ _-]?key|apikey|\bsecret|"
    r"private[ _-]?key|ssh[ _-]?key|credential|\botp\b|one[ _-]?time[ _-]?code|2fa|mfa[ _-]?code|"
    r"(credit|debit|bank)[ _-]?card|card[ _-]?(number|no\b|num)|\bcvv|\bcvc|security[ _-]?code|"
    r"account[ _-]?(number|no\b|num)|\biban\b|routing[ _-]?number|sort[ _-]?code|\bssn\b|"
    r"social[ _-]?security|session[ _-]?(id|cookie)|\bcookie",
    re.IGNORECASE,
)


def check_schema(schema: Any) -> str | None:
    """Why a requested schema is not a flat object of primitives, or ``None`` if it is."""
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        return "the schema must be an object"
    if extra := set(schema) - _TOP_KEYS:
        return f"unsupported schema keys: {', '.join(sorted(extra))}"
    props = schema.get("properties")
    if not isinstance(props, Mapping) or not props:
        return "the schema must list properties"
    if len(props) > MAX_PROPERTIES:
        return f"too many fields ({len(props)} > {MAX_PROPERTIES})"
    for name, prop in props.items():
        if not isinstance(prop, Mapping):
            return f"field {name!r} is not a schema"
        kind = prop.get("type")
        if kind == "array":
            if (problem := _check_multi_select(str(name), prop)) is not None:
                return problem
            continue
        if kind not in _PRIMITIVES:
            return (
                f"field {name!r} has type {kind!r}: only string, number, integer, boolean "
                "or a multi-select array of string choices (no nesting)"
            )
        if extra := set(prop) - _PROP_KEYS:
            return f"field {name!r} uses unsupported keys: {', '.join(sorted(extra))}"
        if "format" in prop and (kind != "string" or prop["format"] not in _FORMATS):
            return f"field {name!r} has unsupported format {prop['format']!r}"
        if "enum" in prop and (
            kind != "string"
            or not isinstance(prop["enum"], list)
            or not all(isinstance(x, str) for x in prop["enum"])
        ):
            return f"field {name!r}: enum must be a list of strings"
        one: Any = prop.get("oneOf")
        if "oneOf" in prop and (
            kind != "string" or not _titled(one) or not all(isinstance(o.get("const"), str) for o in one)
        ):
            return f"field {name!r}: oneOf is allowed only as titled string constants"
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) and r in props for r in required):
        return "required must list existing fields"
    return None


def _check_multi_select(name: str, prop: Mapping[str, Any]) -> str | None:
    """A multi-select field (2025-11-25): string choices as ``items.enum`` or ``items.anyOf``."""
    if extra := set(prop) - _ARRAY_KEYS:
        return f"field {name!r} uses unsupported keys: {', '.join(sorted(extra))}"
    items = prop.get("items")
    if not isinstance(items, Mapping):
        return f"field {name!r}: an array must give its choices in items"
    if "enum" in items:
        choices = items["enum"]
        if set(items) - {"type", "enum"} or items.get("type", "string") != "string":
            return f"field {name!r}: items may only be a list of string choices"
    elif "anyOf" in items:
        if set(items) - {"anyOf"} or not _titled(items["anyOf"]):
            return f"field {name!r}: items.anyOf must be a list of titled string constants"
        choices = [o.get("const") for o in items["anyOf"]]
    else:
        return f"field {name!r}: an array must list its choices (items.enum or items.anyOf)"
    if not isinstance(choices, list) or not choices or not all(isinstance(c, str) for c in choices):
        return f"field {name!r}: the choices must be a non-empty list of strings"
    for key in ("minItems", "maxItems"):
        if key in prop and (not isinstance(prop[key], int) or isinstance(prop[key], bool) or prop[key] < 0):
            return f"field {name!r}: {key} must be a non-negative integer"
    default = prop.get("default")
    if default is not None and (not isinstance(default, list) or not set(default) <= set(choices)):
        return f"field {name!r}: the default must be a list of the choices"
    return None


def _titled(options: Any) -> bool:
    return isinstance(options, list) and all(
        isinstance(o, Mapping) and set(o) <= {"const", "title"} for o in options
    )


def choices(prop: Mapping[str, Any]) -> list[str] | None:
    """The choices of a single- or multi-select field, or ``None``."""
    source = prop.get("items", prop) if prop.get("type") == "array" else prop
    if isinstance(source.get("enum"), list):
        return [str(c) for c in source["enum"]]
    for key in ("oneOf", "anyOf"):
        if isinstance(source.get(key), list):
            return [str(o.get("const")) for o in source[key] if isinstance(o, Mapping)]
    return None


# "do not give us your pin": a term under a negation is a warning, not something asked for.
_NEGATED = re.compile(r"\b(do not|don't|dont|never|not|no|without|avoid|instead of)\b[^.;:!?()]{0,60}$", re.I)


def credential_shaped(message: str, schema: Mapping[str, Any] | None) -> str | None:
    """What makes this question ask for a credential, or ``None``: judged by a field's name,
    title, ``password`` format or ``writeOnly`` flag, and the message (never a description)."""
    for name, prop in ((schema or {}).get("properties") or {}).items():
        if isinstance(prop, Mapping) and (prop.get("format") == "password" or prop.get("writeOnly")):
            return f"field {name!r} is a password field"
        texts = [str(name)]
        if isinstance(prop, Mapping) and prop.get("title"):
            texts.append(str(prop["title"]))
        for text in texts:
            if found := _asks(_words(text)):
                return f"field {name!r} asks for {found!r}"
    found = _asks(message)
    return f"message asks for {found!r}" if found else None


def _words(name: str) -> str:
    """``cardNumber``, ``card_number`` and ``card-number`` alike, as words."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name).replace("_", " ").replace("-", " ")


def _asks(text: str) -> str | None:
    for m in _CREDENTIAL.finditer(text):
        if not _NEGATED.search(text[: m.start()]):
            return m.group(0).lower()
    return None


def validate_answer(schema: Mapping[str, Any], content: Any) -> list[str]:
    """Problems with an answer (empty list: valid). No extra fields, no coercion."""
    if not isinstance(content, Mapping):
        return ["the answer must be an object"]
    # NaN compares false with every bound (it passed ``minimum``/``maximum``) and no JSON holds it.
    if unwritable := [str(k) for k, v in content.items() if _not_finite(v)]:
        return [f"{k}: not a finite number (NaN and infinities are no answer)" for k in unwritable]
    strict = {**schema, "additionalProperties": False}
    from referencing import Registry

    # An empty registry: nothing referenced is ever fetched (check_schema already forbids $ref).
    validator = jsonschema.Draft202012Validator(strict, format_checker=_format_checker(), registry=Registry())
    problems = []
    for err in sorted(validator.iter_errors(dict(content)), key=lambda e: list(e.absolute_path)):
        where = ".".join(str(p) for p in err.absolute_path) or "(answer)"
        problems.append(f"{where}: {err.message}")
    return problems


# RFC 3339 (``date-time``) and an absolute RFC 3986 URI (``uri``): jsonschema checks these two of
# the formats a question may use only with optional packages, and without them let any text by.
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:[^\s\x00-\x1f\x7f<>\"{}|\\^`]+")


def _format_checker() -> jsonschema.FormatChecker:
    """jsonschema's checks, with ``date-time`` and ``uri`` always checked (by the standard library)."""
    checker = jsonschema.FormatChecker()
    checker.checks("date-time")(_is_date_time)
    checker.checks("uri")(_is_uri)
    return checker


def _is_date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True  # a format applies to strings only (the type says the rest)
    if not _DATE_TIME.fullmatch(value):
        return False
    try:
        datetime.fromisoformat(value[:10] + "T" + value[11:].upper().replace("Z", "+00:00"))
    except ValueError:  # a month 13, an hour 25
        return False
    return True


def _is_uri(value: object) -> bool:
    return not isinstance(value, str) or bool(_URI.fullmatch(value))


def _not_finite(value: Any) -> bool:
    """Whether a NaN or an infinity is anywhere in ``value`` (read without recursion: an answer
    given as JSON may nest as deep as its parser took)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


async def store_answer(
    store: Any, pause_id: str, action: str, content: dict[str, Any] | None, *, actor: str
) -> Pause:
    """Validate an answer to a pending question against its stored schema and record it once
    in ``store``; nothing runs. Raises ``ApprovalError``; an invalid answer changes nothing."""
    from tether.errors import ApprovalError

    pause = await store.get(pause_id)
    if pause.status == "task":
        raise ApprovalError(
            "not_a_question",
            f"pause {pause_id} waits on task {pause.task_id} of server {pause.server}, not on a person: "
            f"resume run {pause.run_id} (tether resume; a worker resumes it by itself)",
        )
    if pause.status != "pending":
        raise ApprovalError("not_pending", f"pause {pause_id} is {pause.status}, not pending")
    if action not in ("accept", "decline", "cancel"):
        raise ApprovalError("invalid_answer", "action must be accept, decline or cancel")
    if action == "accept":
        if (problem := check_schema(pause.schema)) is not None:
            raise ApprovalError("invalid_answer", f"the stored question is not answerable: {problem}")
        if problems := validate_answer(pause.schema, content):
            raise ApprovalError("invalid_answer", "; ".join(problems))
    else:
        content = None
    return await store.answer(pause_id, action, content, actor=actor)  # type: ignore[no-any-return]


@dataclass
class CallInfo:
    """The call during which a server asks (filled by the source, read by the gates)."""

    run_id: str
    call_id: str
    tool: str
    arguments: dict[str, Any]
    pause_id: str | None = None
    questions: int = 0
    samples: int = 0  # sampling requests made during this call
    elicitations: list[dict[str, Any]] = field(default_factory=list)


class GateHooks(TypedDict, total=False):
    """What a gate is given by its source: the call a request belongs to (known when one is in
    flight), every call in flight, and its trace."""

    current_call: Callable[[], CallInfo | None]
    calls_in_flight: Callable[[], list[CallInfo]]
    on_event: Callable[[dict[str, Any]], None]


@dataclass(eq=False)
class RequestGate:
    """A gate on one server's requests, with its source's ``GateHooks`` (default: none)."""

    server: str
    current_call: Callable[[], CallInfo | None] = field(default=lambda: None, kw_only=True)
    # ``None``: not known (a gate used on its own); a request is then charged to ``current_call``.
    calls_in_flight: Callable[[], list[CallInfo]] | None = field(default=None, kw_only=True)
    on_event: Callable[[dict[str, Any]], None] = field(default=lambda _event: None, kw_only=True)


@dataclass(frozen=True, slots=True)
class ElicitationPrompt:
    """What the person sees: the question, attributed to the server that asks."""

    server: str
    tool: str | None
    mode: Literal["form", "url"]
    message: str
    schema: dict[str, Any] | None = None
    url: str | None = None
    domain: str | None = None

    def render(self) -> str:
        """The text a person reads, everything the server wrote escaped (no fake prompts)."""
        asker = f"MCP server '{self.server}'" + (f" (tool {self.tool})" if self.tool else "")
        lines = [f"{asker} asks:", f"  {sanitize(self.message)}"]
        if self.mode == "url":
            domain = self.domain or ""
            try:
                ascii_domain = domain.encode("idna").decode("ascii")
            except UnicodeError:
                ascii_domain = "(not a valid domain name)"
            lines += [f"  URL:    {sanitize(self.url or '')}", f"  domain: {sanitize(domain)}"]
            if ascii_domain != domain:
                lines.append(f"  domain as registered (IDNA): {ascii_domain}")
        else:
            for name, prop in (self.schema or {}).get("properties", {}).items():
                req = " (required)" if name in (self.schema or {}).get("required", []) else ""
                desc = f" - {prop.get('description')}" if prop.get("description") else ""
                options = choices(prop)
                if prop.get("type") == "array":
                    kind = f"any of {options}" if options else "list"
                    bounds = [f"{k} {prop[k]}" for k in ("minItems", "maxItems") if k in prop]
                    kind += f" ({', '.join(bounds)})" if bounds else ""
                else:
                    kind = f"{prop.get('type')}" + (f" one of {options}" if options else "")
                lines.append(_shown(sanitize(f"  {name}: {kind}{req}{desc}")))
        return "\n".join(lines)


def _shown(line: str) -> str:
    """A field as a person reads it, cut past ``MAX_FIELD_SHOWN``: a description and choices of
    megabytes filled the terminal of the person asked (the question itself is cut at
    ``MAX_MESSAGE``); an answer is still checked against the whole field."""
    if len(line) <= MAX_FIELD_SHOWN:
        return line
    return f"{line[:MAX_FIELD_SHOWN]} [cut by the host: {len(line)} characters in all]"


@dataclass(frozen=True, slots=True)
class Answer:
    action: Action
    content: dict[str, Any] | None = None


class Responder(Protocol):
    """A person (or a stand-in for one) who answers elicitations."""

    interactive: bool

    async def ask(self, prompt: ElicitationPrompt, problems: list[str]) -> Answer: ...

    async def consent_url(self, prompt: ElicitationPrompt) -> bool: ...


@dataclass
class ScriptedResponder:
    """Answers from a list, in order; records every prompt it was shown (for tests, demos)."""

    answers: list[Answer] = field(default_factory=list)
    url_consent: bool = False
    interactive: bool = True
    shown: list[ElicitationPrompt] = field(default_factory=list)

    async def ask(self, prompt: ElicitationPrompt, problems: list[str]) -> Answer:
        self.shown.append(prompt)
        return self.answers.pop(0) if self.answers else Answer("cancel")

    async def consent_url(self, prompt: ElicitationPrompt) -> bool:
        self.shown.append(prompt)
        return self.url_consent


class ConsoleResponder:
    """Asks on the terminal: a JSON object to accept, ``decline`` or ``cancel``."""

    interactive = True

    def __init__(self, read: Callable[[str], str] = input, write: Callable[[str], None] = print) -> None:
        self._read, self._write = read, write

    async def ask(self, prompt: ElicitationPrompt, problems: list[str]) -> Answer:
        if problems:
            self._write("Answer rejected: " + "; ".join(problems))
        self._write(prompt.render())
        raw = (
            await anyio.to_thread.run_sync(self._read, "answer (JSON object | decline | cancel): ")
        ).strip()
        if raw in ("decline", "cancel"):
            return Answer(raw)  # type: ignore[arg-type]
        try:
            return Answer("accept", json.loads(raw))
        except ValueError:
            return Answer("accept", {"_unparsable": raw})

    async def consent_url(self, prompt: ElicitationPrompt) -> bool:
        self._write(prompt.render())
        raw = await anyio.to_thread.run_sync(self._read, f"open this URL on {prompt.domain}? (yes/no): ")
        return raw.strip().lower() == "yes"


@dataclass(eq=False)
class ElicitationGate(RequestGate):
    """The elicitation callback for one server."""

    config: ElicitationConfig
    responder: Responder | None = field(default=None, kw_only=True)
    pauses: PauseStore | None = field(default=None, kw_only=True)

    def _event(self, outcome: str, **data: Any) -> None:
        self.on_event({"server": self.server, "outcome": outcome, **data})
        if (call := self.current_call()) is not None:
            by = "person" if outcome in ("accept", "decline", "cancel") and "reason" not in data else "host"
            if data.get("answered_by") == "resume":
                by = "person (on resume)"
            record = {"outcome": outcome, "by": by}
            if "reason" in data:
                record["reason"] = str(data["reason"])
            call.elicitations.append(record)

    def _past_share(self, call: CallInfo | None) -> str | None:
        """Why a question is refused before anyone sees it: it counts against each call it may
        belong to (the one in flight, or every one of several), and one past its share of
        questions refuses it; with no call in flight it belongs to none (a server's question
        between calls was asked of the person without any cap)."""
        calls = [call] if call is not None else []
        if call is None and self.calls_in_flight is not None:
            calls = self.calls_in_flight()
            if not calls:
                return "a question outside any tool call"
        limit = self.config.max_questions_per_call
        for each in calls:
            each.questions += 1
        if any(each.questions > limit for each in calls):
            return f"more than {limit} questions in one call"
        return None

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult | types.ErrorData:
        import mcp_types as types

        call = self.current_call()
        tool = call.tool if call else None
        message = str(getattr(params, "message", ""))[:MAX_MESSAGE]
        if not self.config.enabled:
            self._event(
                "declined", tool=tool, reason="elicitation not enabled for this server", message=message
            )
            return types.ElicitResult(action="decline")
        if (why := self._past_share(call)) is not None:
            self._event("refused", tool=tool, reason=why, message=message)
            return types.ElicitResult(action="decline")
        if isinstance(params, types.ElicitRequestURLParams):
            return await self._url(params, tool, message)
        schema = dict(params.requested_schema)
        if (problem := check_schema(schema)) is not None:
            self._event("refused", tool=tool, reason=f"schema_not_flat: {problem}", message=message)
            return types.ElicitResult(action="decline")
        if (cred := credential_shaped(message, schema)) is not None:
            self._event("refused", tool=tool, reason=f"credential_shaped: {cred}", message=message)
            return types.ElicitResult(action="decline")
        prompt = ElicitationPrompt(self.server, tool, "form", message, schema)
        if self.pauses is not None and call is not None:
            stored = await self.pauses.take_answer(
                question_key(self.server, call.tool, call.arguments, message, schema), call.run_id
            )
            if stored is not None:
                self._event(stored.action or "cancel", tool=tool, pause_id=stored.id, answered_by="resume")
                return types.ElicitResult(action=stored.action or "cancel", content=stored.answer)  # type: ignore[arg-type]
        if self.responder is None or not self.responder.interactive:
            return await self._pause(prompt, call)
        problems: list[str] = []
        for _ in range(self.config.max_answer_attempts):
            answer = await self.responder.ask(prompt, problems)
            if answer.action != "accept":
                self._event(answer.action, tool=tool, message=message)
                return types.ElicitResult(action=answer.action)
            if not (problems := validate_answer(schema, answer.content)):
                self._event("accept", tool=tool, message=message, fields=sorted(answer.content or {}))
                return types.ElicitResult(action="accept", content=dict(answer.content or {}))
        self._event("cancel", tool=tool, reason="no valid answer: " + "; ".join(problems), message=message)
        return types.ElicitResult(action="cancel")

    async def url_required(self, data: Any, tool: str | None) -> bool:
        """Handle a ``-32042`` error's URLs as URL elicitations: whether every one was accepted."""
        import mcp_types as types
        from pydantic import ValidationError

        try:
            required = types.ElicitationRequiredErrorData.model_validate(data)
        except ValidationError:
            self._event("refused", tool=tool, reason="url_required error without valid elicitations")
            return False
        if not required.elicitations or not self.config.enabled:
            self._event("declined", tool=tool, reason="elicitation not enabled for this server")
            return False
        for params in required.elicitations[: self.config.max_questions_per_call]:
            message = str(params.message)[:MAX_MESSAGE]
            if (await self._url(params, tool, message)).action != "accept":
                return False
        return len(required.elicitations) <= self.config.max_questions_per_call

    async def _url(self, params: Any, tool: str | None, message: str) -> types.ElicitResult:
        import mcp_types as types

        url = str(params.url)
        parts = urlsplit(url)
        domain = (parts.hostname or "").lower()
        prompt = ElicitationPrompt(self.server, tool, "url", message, url=url, domain=domain)
        if not self.config.url_mode:
            self._event("declined", tool=tool, reason="url mode not enabled for this server", url=url)
            return types.ElicitResult(action="decline")
        if parts.scheme not in ("https", "http") or not domain:
            self._event("refused", tool=tool, reason="url must be http(s) with a host", url=url)
            return types.ElicitResult(action="decline")
        if self.responder is None or not self.responder.interactive:
            self._event("declined", tool=tool, reason="url mode needs an interactive person", url=url)
            return types.ElicitResult(action="decline")
        if not await self.responder.consent_url(prompt):
            self._event("declined", tool=tool, reason="the person did not consent", url=url)
            return types.ElicitResult(action="decline")
        self._event("accept", tool=tool, url=url, domain=domain)
        return types.ElicitResult(action="accept")

    async def _pause(self, prompt: ElicitationPrompt, call: CallInfo | None) -> types.ElicitResult:
        import mcp_types as types

        if self.pauses is None or call is None:
            self._event("declined", tool=prompt.tool, reason="no person to ask and no pause store")
            return types.ElicitResult(action="decline")
        pause = await self.pauses.create(
            run_id=call.run_id,
            server=self.server,
            tool=call.tool,
            arguments=call.arguments,
            message=prompt.message,
            schema=prompt.schema or {},
        )
        call.pause_id = pause.id
        self._event("paused", tool=prompt.tool, pause_id=pause.id, message=prompt.message)
        # Cancel (not decline): nobody chose; the call is re-run with the answer on resume.
        return types.ElicitResult(action="cancel")
