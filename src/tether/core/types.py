"""Shared value types at the bottom of tether: this module imports nothing of tether's.
Older import paths (``tether.core.messages``, ``tether.tools._contract`` …) re-export them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal, Protocol
from xml.sax.saxutils import quoteattr

__all__ = [
    "CallRecord",
    "Decision",
    "Effect",
    "GateOutcome",
    "Observation",
    "ProposedCall",
    "StopReason",
    "Target",
    "ToolCall",
    "ToolContext",
    "ToolOutput",
    "ToolSpec",
    "Trust",
    "Verdict",
    "secret_arguments",
    "wrap_untrusted",
]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call proposed by the model. ``arguments`` is the raw JSON text, unparsed."""

    id: str
    name: str
    arguments: str

    def wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


class StopReason(StrEnum):
    ACCEPTED = "accepted"
    POLICY_DENIED = "policy_denied"
    APPROVAL_REQUIRED = "approval_required"
    APPROVAL_DENIED = "approval_denied"
    BUDGET = "budget"
    DEADLINE = "deadline"
    MAX_STEPS = "max_steps"
    REPETITION = "repetition"
    DEPENDENCY_UNAVAILABLE = "dependency_unavailable"
    INVALID_HANDOFF = "invalid_handoff"
    MODEL_ERROR = "model_error"
    TRUNCATED = "truncated"  # the final answer was cut at the output-token limit
    MODEL_REFUSED = "model_refused"  # the provider refused or filtered the final answer
    INTERNAL_ERROR = "internal_error"
    INTERRUPTED = "interrupted"  # stopped from outside (SIGINT, SIGTERM to ``tether run``)


class Effect(StrEnum):
    READ = "read"
    WRITE = "write"
    SEND = "send"
    PURCHASE = "purchase"
    DELETE = "delete"

    @property
    def side_effecting(self) -> bool:
        return self is not Effect.READ


@dataclass(frozen=True, slots=True)
class Target:
    """Which argument names the object a call acts on, and its kind in the trusted catalog."""

    argument: str
    kind: str


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the host knows about a tool, whatever its source (local function, MCP server)."""

    name: str
    description: str
    parameters: dict[str, Any]
    effect: Effect
    source: str = "local"
    target: Target | None = None
    # the argument(s) holding a destination (url, e-mail, host): one name or several ("to", "cc")
    egress_argument: str | tuple[str, ...] | None = None
    timeout_s: float = 30.0
    max_result_chars: int = 20_000
    idempotent: bool = False
    needs_approval: bool | None = None  # None: decided by effect and policy
    remote_name: str = ""  # the name at the source (MCP tool name before namespacing)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def egress_arguments(self) -> tuple[str, ...]:
        """The arguments holding destinations: ``egress_argument`` as a tuple."""
        e = self.egress_argument
        return () if e is None else (e,) if isinstance(e, str) else tuple(e)

    @property
    def secret_arguments(self) -> frozenset[str]:
        """The arguments the contract declares secret (``secret_arguments(self.parameters)``)."""
        return secret_arguments(self.parameters)

    def wire(self) -> dict[str, Any]:
        """The chat-completions function definition the model reads."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def secret_arguments(parameters: dict[str, Any]) -> frozenset[str]:
    """Top-level arguments a tool's JSON Schema declares secret: ``writeOnly: true`` or
    ``format: "password"`` (what pydantic writes for ``SecretStr``; MCP servers can say the same),
    or listed under the schema's ``x-secret-arguments``. A name alone never makes a secret."""
    props = parameters.get("properties")
    if not isinstance(props, dict):
        return frozenset()
    found = {
        str(name)
        for name, prop in props.items()
        if isinstance(prop, dict) and (prop.get("writeOnly") is True or prop.get("format") == "password")
    }
    listed = parameters.get("x-secret-arguments")
    if isinstance(listed, list):
        found.update(str(n) for n in listed if isinstance(n, str) and n in props)
    return frozenset(found)


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Host-side facts handed to a tool: never model-supplied."""

    run_id: str
    tenant: str
    roles: frozenset[str]
    user: str | None
    call_id: str
    idempotency_key: str | None = None
    now: datetime | None = None


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool's structured result. ``text`` is what enters the context (before wrapping)."""

    text: str
    data: Any = None
    is_error: bool = False
    error_kind: str | None = None
    truncated: bool = False
    meta: dict[str, Any] = field(default_factory=dict)


Trust = Literal["untrusted", "trusted"]

_CLOSE = "</untrusted_data"


def _neutralise(text: str) -> str:
    # Case-insensitive: a model may treat </UNTRUSTED_DATA> as the end of the block too.
    if "</" not in text:  # no closing tag of any case (lowercasing never makes "<" or "/")
        return text
    out, low, i = [], text.lower(), 0
    while True:
        j = low.find(_CLOSE, i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j] + "<\\/untrusted_data")
        i = j + len(_CLOSE)


_ATTR_SPECIAL = frozenset("&<>\"'\n\r\t")


def _quoteattr(value: str) -> str:
    """``quoteattr(value)``; a value with nothing to escape (the usual label) is only quoted."""
    return quoteattr(value) if _ATTR_SPECIAL.intersection(value) else f'"{value}"'


def wrap_untrusted(text: str, **labels: str) -> str:
    attrs = " ".join(f"{k}={_quoteattr(v)}" for k, v in labels.items() if v)
    return f"<untrusted_data {attrs}>\n{_neutralise(text)}\n</untrusted_data>"


@dataclass(frozen=True, slots=True)
class Observation:
    """One tool result as the host records it. ``trust`` is always ``untrusted`` for tool output."""

    call_id: str
    tool: str
    source: str
    observed_at: datetime
    text: str
    data: Any = None
    is_error: bool = False
    error_kind: str | None = None
    trust: Trust = "untrusted"
    meta: dict[str, Any] = field(default_factory=dict)

    def render(self) -> str:
        """The tool message content the model reads."""
        labels = {
            "source": self.source,
            "tool": self.tool,
            "observed_at": self.observed_at.isoformat(timespec="seconds"),
            "trust": self.trust,
        }
        if self.is_error:
            labels["error"] = self.error_kind or "error"
        return wrap_untrusted(self.text, **labels)


Verdict = Literal["allow", "deny", "approve"]


@dataclass(frozen=True, slots=True)
class ProposedCall:
    """A call as rules see it. ``state`` is the run so far (objective, observations), for rules
    that reason about where argument values came from; it is host data, never model output."""

    call_id: str
    spec: ToolSpec
    arguments: dict[str, Any]
    state: Any = None
    # The host's other tools, for rules that read the run's other calls as their tools took them
    # (a turn-mate's arguments as its validators leave them, the record a tool writes).
    tools: ToolCatalog | None = None
    # Arguments the tool's validators change (judged again as received): a store keeps those as
    # received, so their pieces are joined with the run's earlier ones in that judgment alone.
    reshaped: frozenset[str] = frozenset()


class ToolCatalog(Protocol):
    """The tools a host offers, by the name it gives them: each one's spec, and what its function
    receives for given arguments where its own validators change them (else ``None``)."""

    def spec_of(self, name: str) -> ToolSpec | None: ...

    def received_of(self, name: str, arguments: dict[str, Any]) -> dict[str, Any] | None: ...


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    rule: str
    reason: str
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def allowed(self) -> bool:
        return self.verdict == "allow"


@dataclass(frozen=True, slots=True)
class GateOutcome:
    """What the gate decided for one proposed call."""

    call: ToolCall
    status: Literal["allow", "deny", "reject", "unknown", "approve"]
    spec: ToolSpec | None = None
    arguments: dict[str, Any] | None = None
    decision: Decision | None = None
    error: str = ""
    proposal_id: str | None = None  # the approved proposal an "allow" executes (its stored arguments)
    error_reason: str = ""  # machine-readable reason of a "reject" (e.g. ``duplicate_key``)

    def decided(self, status: Literal["allow", "deny", "approve"], decision: Decision) -> GateOutcome:
        """This outcome with the policy's verdict (``dataclasses.replace`` without its generic
        field walk: the gate does this once per call)."""
        return GateOutcome(
            self.call,
            status,
            self.spec,
            self.arguments,
            decision,
            self.error,
            self.proposal_id,
            self.error_reason,
        )


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One proposed call and what the host did with it."""

    call_id: str
    tool: str
    arguments: Any
    status: str  # "ok" | "error" | "denied" | "rejected" | "crashed"
    reason: str = ""
