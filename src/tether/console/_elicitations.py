"""Pending elicitations (X5): the question, attributed to the asking server, and a form built
from its flat schema; an answer is converted without guessing and validated against the stored
schema before anything is stored. URL-mode requests (never paused: the traces recorded them)
are listed with the URL's host as given, as registered (punycode) and decoded.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tether.console._render import hidden_chars, names_in, reorders
from tether.console._runs import SCANNED_RUNS, RunFilter, nests_deeper, shallow
from tether.console._sources import ConsoleSources
from tether.console._users import Denied, Hidden, Principal
from tether.core._confusables import check_name
from tether.core.types import secret_arguments
from tether.errors import ApprovalError
from tether.mcp._answers import answer_question
from tether.mcp._config import offered_name
from tether.mcp._elicitation import check_schema, validate_answer
from tether.trace._sanitize import Redactor, redact_value

__all__ = [
    "PENDING_SHOWN",
    "FormField",
    "answer",
    "domain_view",
    "form_fields",
    "parse_form",
    "pending",
    "url_requests",
]

_INT = re.compile(r"^[+-]?\d{1,18}$")
_NUM = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_INPUT_TYPE = {"email": "email", "uri": "url", "date": "date"}
PENDING_SHOWN = 200  # pending questions a page or API answer lists: the newest the reader may see
URL_RUNS = 50  # the newest runs the reader may see whose URL requests are listed
PREFILLED = 60  # the longest default a form fills in (longer runs past what a text box shows)
# What a field asks for when its name, title or description says a password or another secret:
# the server, not tether, asks, and its answer goes to the server.
_ASKS_SECRET = re.compile(
    r"pass(?:word|phrase|code)|\bpin\b|one[- ]?time|\b(?:otp|totp|2fa|mfa)\b|secret|api[ _-]?key"
    r"|token|credential|private[ _-]?key|recovery|security code|cvv|card number",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class FormField:
    name: str
    kind: str  # string | number | integer | boolean | array (a multi-select)
    label: str
    description: str
    required: bool
    input_type: str  # text | email | url | date | number | select | multiselect | boolean
    options: list[tuple[str, str]] = field(default_factory=list)  # (value, label)
    attrs: dict[str, Any] = field(default_factory=dict)  # minlength, maxlength, min, max, step
    default: Any = None

    @property
    def default_text(self) -> str:
        if self.default is None:
            return ""
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        return str(self.default)

    @property
    def prefill(self) -> str:
        """The default the form fills in: only one a text box shows as it is sent (``shows_whole``);
        any other is withheld, shown beside the field (``withheld``) for the reviewer to type."""
        text = self.default_text
        return text if self.input_type in ("select", "multiselect", "boolean") or shows_whole(text) else ""

    @property
    def withheld(self) -> str:
        """The server's default when it is not filled in (``prefill``), else ``""``."""
        return self.default_text if self.default_text and not self.prefill else ""

    @property
    def asks_secret(self) -> bool:
        """Whether the field's name, title or description asks for a password or another secret."""
        return any(_ASKS_SECRET.search(text) for text in (self.name, self.label, self.description))


def shows_whole(text: str) -> bool:
    """Whether a one-line text box shows ``text`` as it will be sent: short enough to be seen at
    once, no hidden character (an ``<input>``'s value cannot flag one), nothing a browser would
    reorder, no line break (which a text box drops) and no run, lead or trail of spaces."""
    return (
        len(text) <= PREFILLED
        and not hidden_chars(text)
        and not reorders(text)
        and "\n" not in text
        and "\t" not in text
        and text == text.strip()
        and "  " not in text
    )


def _option(value: Any, label: Any) -> tuple[str, str]:
    """A choice as (value sent, label shown): a label other than its value says the value too, so
    a server cannot title a choice as another (``Keep my money`` sending ``transfer_all``)."""
    sent, shown = str(value), str(label)
    return sent, shown if shown == sent else f"{shown} [sends {sent}]"


def _titled(choices: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [_option(o["const"], o.get("title") or o["const"]) for o in choices]


# What a browser's form does not send back as written: it reads a CR in an attribute as a line
# feed and a NUL as U+FFFD, and sends every line break as CR LF. A field name or choice holding
# one sends another's (a lone surrogate never gets here: the pause store holds UTF-8 only), and
# an empty choice is sent as the form's "no choice".
_UNSENT = re.compile(r"[\r\n\x00]")


def _unsendable(schema: Mapping[str, Any]) -> str | None:
    """Why a browser's form cannot send this flat schema's field names and choices as written
    (``_UNSENT``, an empty choice), or ``None``: then the field or choice drawn is the one sent."""
    for name, prop in schema["properties"].items():
        items = prop.get("items") or {}
        choices = [*prop.get("enum", []), *items.get("enum", [])]
        choices += [o.get("const") for o in (*prop.get("oneOf", []), *items.get("anyOf", []))]
        if "" in choices:  # sent as the form's "no choice" (its ``—``): the answer leaves it out
            return (
                f"field {str(name)!r}: an empty choice, which a browser's form sends as no answer:"
                " answer it through the API"
            )
        for text in (str(name), *(str(c) for c in choices)):
            if _UNSENT.search(text):
                return (
                    f"field {str(name)!r}: its name or a choice holds a line break or a NUL, which a"
                    " browser's form sends as other text: answer or decline it through the API"
                )
    return None


def form_fields(schema: dict[str, Any]) -> list[FormField]:
    """The form of a validated flat schema. Raises ``ApprovalError`` if the schema is not flat, or
    if its form would send other field names or choices than it draws (``_unsendable``)."""
    problem = check_schema(schema) or _unsendable(schema)
    if problem is not None:
        raise ApprovalError("invalid_schema", problem)
    required = set(schema.get("required", []))
    out = []
    for name, prop in schema["properties"].items():
        kind = prop["type"]
        attrs: dict[str, Any] = {}
        options: list[tuple[str, str]] = []
        input_type = {"number": "number", "integer": "number", "array": "multiselect"}.get(kind, "boolean")
        if kind == "string" and "enum" in prop:
            names = prop.get("enumNames") or prop["enum"]
            options, input_type = [_option(v, n) for v, n in zip(prop["enum"], names, strict=False)], "select"
        elif kind == "string" and "oneOf" in prop:
            options, input_type = _titled(prop["oneOf"]), "select"
        elif kind == "string":
            input_type = _INPUT_TYPE.get(prop.get("format", ""), "text")
            attrs = {k.lower(): prop[k] for k in ("minLength", "maxLength") if k in prop}
        elif kind in ("number", "integer"):
            attrs = {"step": "1" if kind == "integer" else "any"}
            attrs.update({k[:3]: prop[k] for k in ("minimum", "maximum") if k in prop})
        elif kind == "array":  # a multi-select: choices in items.enum or items.anyOf
            items = prop["items"]
            choices = [{"const": str(v)} for v in items["enum"]] if "enum" in items else items["anyOf"]
            options = _titled(choices)
        label, description = str(prop.get("title") or name), str(prop.get("description") or "")
        out.append(
            FormField(
                str(name),
                kind,
                label,
                description,
                name in required,
                input_type,
                options,
                attrs,
                prop.get("default"),
            )
        )
    return out


def parse_form(
    schema: dict[str, Any], form: Mapping[str, str | list[str]]
) -> tuple[dict[str, Any], list[str]]:
    """Typed content from form strings, and the problems (conversion, then schema validation): an
    empty field is left out, a number read only if written as one, a boolean is ``true`` or
    ``false``, a multi-select the list of its chosen values."""
    content: dict[str, Any] = {}
    problems: list[str] = []
    fields = form_fields(schema)
    for f in fields:
        given = form.get(f.name, "")
        chosen = given if isinstance(given, list) else [given] if given else []
        if f.kind == "array":
            if chosen:
                content[f.name] = chosen
            continue
        if len(chosen) > 1:
            problems.append(f"{f.name}: one value, not {len(chosen)}")
            continue
        raw = chosen[0] if chosen else ""
        if raw == "":
            continue
        if f.kind == "string":
            content[f.name] = raw
        elif f.kind in ("integer", "number"):
            text = raw.strip()
            if _INT.match(text):
                content[f.name] = int(text)
            elif f.kind == "number" and _NUM.match(text) and math.isfinite(float(text)):
                content[f.name] = float(text)
            else:
                what = "number" if f.kind == "number" else "whole number"
                problems.append(f"{f.name}: {raw!r} is not a {what}")
        elif raw in ("true", "false"):
            content[f.name] = raw == "true"
        else:
            problems.append(f"{f.name}: choose yes or no")
    unknown = sorted(set(form) - {f.name for f in fields})
    if unknown:
        problems.append(f"fields not in the question: {', '.join(unknown)}")
    if not problems:
        problems = validate_answer(schema, content)
    return content, problems


async def _tenant_of(sources: ConsoleSources, run_id: str) -> str | None:
    """The tenant of a question's run: its owner as its page and its resume read it
    (``ConsoleSources.run_owner``), one rule for who sees a run and what it asks. A run the
    console knows that names no tenant is no tenant's: only a grant of every tenant sees it and
    its questions alike (its questions went to the host's tenant, whose people could not open its
    page). Only a run the console holds nothing of is the MCP host's own (its config's tenant)."""
    known, tenant = await sources.run_owner(run_id)
    if known:
        return tenant
    return sources.mcp_config.host.tenant if sources.mcp_config is not None else None


async def _secret_arguments(sources: ConsoleSources, server: str, tool: str) -> frozenset[str]:
    """The arguments the paused tool declares secret in its pinned input schema."""
    pins = await sources.pins(server)
    pin = pins.get(tool) or next((p for name, p in pins.items() if offered_name(server, name) == tool), None)
    schema = pin.definition.get("inputSchema") if pin is not None else None
    return secret_arguments(schema) if isinstance(schema, dict) else frozenset()


async def _redactor(sources: ConsoleSources, pause: Any) -> tuple[Redactor, frozenset[str]]:
    """The redactor of the paused call's declared secrets, and their names."""
    masked = await _secret_arguments(sources, pause.server, pause.tool)
    redactor = Redactor()
    redactor.declare(pause.tool, masked)
    redactor.learn(pause.tool, pause.arguments)
    return redactor, masked


def _length(value: Any) -> int:
    """A secret argument's length as said in its place (0: nested past what can be written)."""
    try:
        return len(str(value))
    except RecursionError:
        return 0


async def _view(sources: ConsoleSources, pause: Any, tenant: str | None) -> dict[str, Any]:
    # The call's declared secrets are never shown: not as arguments, nor anywhere in the server's
    # text (its message, and its form's titles, descriptions, defaults, choices and field names).
    # What the model (the arguments) and the server (the form) wrote may nest hundreds deep: each
    # is shown cut past ``SHOWN_DEPTH`` levels (``shallow``), the arguments cut named (flagged).
    redactor, masked = await _redactor(sources, pause)
    given = pause.arguments if isinstance(pause.arguments, dict) else {}
    deep = sorted(str(k) for k, v in given.items() if k not in masked and nests_deeper(v))
    arguments = {
        k: f"[secret, {_length(v)} characters]" if k in masked else shallow(v) for k, v in given.items()
    }
    arguments = redact_value(arguments, redactor, keys=True)
    message = redactor.text(pause.message)
    # The form as shown; an answer is checked on the stored one.
    schema = redact_value(shallow(pause.schema), redactor, keys=True)
    try:
        fields, problem = form_fields(schema), None
    except ApprovalError as err:
        fields, problem = [], str(err)
    return {
        "id": pause.id,
        "created_at": pause.created_at,
        "run_id": pause.run_id,
        "tenant": tenant,
        "server": pause.server,
        "tool": pause.tool,
        "arguments": arguments,
        "masked_arguments": sorted(masked),
        "message": message,
        "schema": schema,
        "status": pause.status,
        "action": pause.action,
        "answered_by": pause.answered_by,
        "answer": redact_value(shallow(pause.answer), redactor, keys=True),  # what was stored, once answered
        "deep_arguments": deep,
        # Look-alike names anywhere the reviewer reads: the question, the arguments, the form.
        "names": names_in(message, arguments, schema),
        "fields": fields,
        "schema_problem": problem,
    }


async def pending(sources: ConsoleSources, principal: Principal) -> list[dict[str, Any]]:
    """The newest ``PENDING_SHOWN`` pending questions the principal may see, oldest first. Chosen
    by their runs' tenants (each run's looked up once) before any is read whole: another
    tenant's pauses cost a page neither a view, nor a pin look-up, nor a parse of their text."""
    if sources.open_pauses is None:
        return []
    store = sources.open_pauses()
    try:
        tenants: dict[str, str | None] = {}
        chosen: list[str] = []
        for pause_id, run_id in reversed(await store.pending_runs()):
            if run_id not in tenants:
                tenants[run_id] = await _tenant_of(sources, run_id)
            if principal.sees(tenants[run_id]):
                chosen.append(pause_id)
                if len(chosen) >= PENDING_SHOWN:
                    break
        pauses = await store.pending(chosen) if chosen else []
    finally:
        store.close()
    views = [await _view(sources, p, tenants[p.run_id]) for p in pauses]
    return [v for v in views if principal.sees(v["tenant"])]


async def get(sources: ConsoleSources, principal: Principal, pause_id: str) -> dict[str, Any]:
    """One question the principal may see. Raises ``Hidden`` (unknown, or another tenant's: its
    run's tenant is checked before it is viewed, its pins looked up or its text searched)."""
    return await _view(sources, *await _visible(sources, principal, pause_id))


async def _visible(sources: ConsoleSources, principal: Principal, pause_id: str) -> tuple[Any, str | None]:
    """The pause and its run's tenant, if the principal may see it. Raises ``Hidden``."""
    if sources.open_pauses is None:
        raise Hidden("question")
    store = sources.open_pauses()
    try:
        try:
            pause = await store.get(pause_id)
        except ApprovalError:
            raise Hidden("question") from None
    finally:
        store.close()
    tenant = await _tenant_of(sources, pause.run_id)
    if not principal.sees(tenant):
        raise Hidden("question")
    return pause, tenant


async def answer(
    sources: ConsoleSources, principal: Principal, pause_id: str, action: str, content: dict[str, Any] | None
) -> dict[str, Any]:
    """Validate and store an answer (accept / decline / cancel), audited. Raises ``Hidden``,
    ``Denied``, ``ApprovalError`` (``invalid_answer``, ``not_pending``)."""
    pause, shown_tenant = await _visible(sources, principal, pause_id)
    actor, tenant = principal.actor, shown_tenant or ""
    redactor, _ = await _redactor(sources, pause)
    if not principal.may(tenant, "reviewer"):
        raise Denied("not_reviewer", f"{principal.name} may not answer for this tenant")
    assert sources.open_pauses is not None
    store = sources.open_pauses()
    try:  # checked and audited in the one home of a person's answer, as the CLI's are
        stored = await answer_question(
            store,
            pause_id,
            action,
            content,
            answered_by=f"console:{principal.name}",
            actor=actor,
            audit=sources.users,
            tenant=tenant,
            redact=redactor.text,
        )
    finally:
        store.close()
    return {"id": stored.id, "status": stored.status, "action": stored.action, "run_id": stored.run_id}


def domain_view(url: str) -> dict[str, Any]:
    """The host of ``url`` as written, as registered (IDNA) and decoded, with its look-alike check."""
    url = url[:2048]  # a name's host comes first; a longer URL is not read further
    check = check_name(url)
    try:
        scheme = urlsplit(url).scheme
    except ValueError:
        scheme = ""
    # The last two labels: what a registrar sold (approximate: no public-suffix list is consulted).
    return {
        "url": url,
        "scheme": scheme,
        "raw": check.host,
        "ascii": check.ascii,
        "unicode": check.unicode,
        "registered_ascii": ".".join(check.ascii.split(".")[-2:]) if check.ascii else "",
        "registered_unicode": ".".join(check.unicode.split(".")[-2:]) if check.unicode else "",
        "internationalised": check.internationalised or not check.host.isascii(),
        "suspicious": check.suspicious,
        "problems": list(check.problems),
    }


async def url_requests(
    sources: ConsoleSources, principal: Principal, *, limit: int = 50
) -> list[dict[str, Any]]:
    """URL-mode elicitations recorded in traces (newest first), with their domains decoded."""
    out: list[dict[str, Any]] = []
    # The principal's most recent runs (a page load stays cheap): those hidden from it dropped
    # first (``seen_runs``), so newer runs it may not see never leave it fewer of its own.
    runs = await sources.runs(RunFilter(visible=principal.tenants("viewer")), limit=SCANNED_RUNS)
    for run in await sources.seen_runs(principal, runs, URL_RUNS):
        asked = await sources.scan(run.run_id, ["mcp_elicitation"], lambda e: bool(e.get("url")), limit)
        for e in asked:
            out.append(
                {
                    "run_id": run.run_id,
                    "tenant": run.tenant,
                    "ts": e.get("ts", ""),
                    "server": e.get("server", ""),
                    "tool": e.get("tool"),
                    "outcome": e.get("outcome", ""),
                    "reason": e.get("reason", ""),
                    "domain": domain_view(str(e["url"])),
                }
            )
        if len(out) >= limit:
            break
    return out[:limit]
