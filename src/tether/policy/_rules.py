"""Policy as composition: small rules, each doing one thing, evaluated in order.

A rule returns a ``Decision`` or ``None`` (no opinion). The first ``deny`` wins; an
``approve`` (needs approval) is kept unless a later rule denies; no opinion from anyone
means allow.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from tether.core._names import SEPARATOR, folded, name_set, offered_name
from tether.core.types import Decision, ProposedCall
from tether.policy._destinations import destination_of, destinations_of
from tether.policy._provenance_decoding import self_decoded
from tether.policy._trusted import Catalog, TrustedContext
from tether.tools._contract import Effect, ToolSpec

HARNESS_SOURCE = "harness"  # ToolSpec.source of the host's own context tools

__all__ = [
    "Allowlist",
    "Decision",
    "EffectApproval",
    "Egress",
    "Policy",
    "ProposedCall",
    "RoleRequirement",
    "Rule",
    "TargetOwnership",
    "destination_of",
    "judged_as_received",
]


class Rule(Protocol):
    @property
    def name(self) -> str: ...

    def check(self, call: ProposedCall, context: TrustedContext) -> Decision | None: ...


@dataclass(frozen=True)
class Allowlist:
    """Only named tools may run; ``deny`` wins over ``allow``. ``allow=None`` allows every offered tool.

    ``allow`` names the tools of sources (local functions, MCP servers). Harness tools (TODO,
    skills, tool search, subagents: ``ToolSpec.source == "harness"``) exist only when the agent's
    context configuration enables them, so ``allow`` does not have to repeat them; ``deny`` (and
    every other rule: roles, effects, custom rules) applies to them like to any tool.
    """

    allow: frozenset[str] | None = None
    deny: frozenset[str] = frozenset()
    name: str = "allowlist"

    def __post_init__(self) -> None:
        if self.allow is not None:
            object.__setattr__(self, "allow", name_set(self.allow, what="allow"))
        object.__setattr__(self, "deny", frozenset(folded(n) for n in name_set(self.deny, what="deny")))

    def permits(self, tool_name: str, *, harness: bool = False, remote_name: str = "") -> bool:
        """``deny`` matches any name a deployer may write for the tool (``rule_names``: a deployer
        who writes ``delete_order`` for ``erp__delete_order`` gets the denial); ``allow`` only the
        offered name, so no other source's tool of that name is allowed by it."""
        if self.deny and not self.deny.isdisjoint(folded(n) for n in rule_names(tool_name, remote_name)):
            return False
        return self.allow is None or harness or tool_name in self.allow

    def check(self, call: ProposedCall, context: TrustedContext) -> Decision | None:
        spec = call.spec
        if not self.permits(spec.name, harness=spec.source == HARNESS_SOURCE, remote_name=spec.remote_name):
            return Decision("deny", self.name, "tool_not_allowed", {"tool": call.spec.name})
        return None


def rule_names(name: str, remote_name: str = "") -> tuple[str, ...]:
    """The names ``deny`` and ``roles`` may give a tool: the offered name, the source's own name
    for it and ``server__tool`` where the offered name had to be made to fit (``files__read.file``
    offered as ``files__read_file_<sha>``): the server is the prefix whose ``offered_name`` for the
    source's name is the offered name, so no other server's ``server__tool`` matches."""
    names = [name]
    if remote_name:
        names.append(remote_name)
        at = name.find(SEPARATOR)
        while at > 0:
            if offered_name(name[:at], remote_name) == name:
                names.append(f"{name[:at]}{SEPARATOR}{remote_name}")
            at = name.find(SEPARATOR, at + 1)
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class RoleRequirement:
    """A tool runs only for a context holding one of the roles it requires (``{tool: roles}``). A
    requirement named by the offered name and one named by the source's own name for the tool
    (``delete_order`` for ``erp__delete_order``) both apply."""

    required: Mapping[str, frozenset[str]]
    name: str = "roles"

    def __post_init__(self) -> None:
        by_name: dict[str, frozenset[str]] = {}
        for tool, roles in self.required.items():
            key = folded(tool)
            # Two spellings of one name (``Delete_Order``, ``delete_order``): a role both accept.
            by_name[key] = by_name[key] & frozenset(roles) if key in by_name else frozenset(roles)
        object.__setattr__(self, "required", by_name)

    def check(self, call: ProposedCall, context: TrustedContext) -> Decision | None:
        for key in dict.fromkeys(folded(n) for n in rule_names(call.spec.name, call.spec.remote_name)):
            needed = self.required.get(key)
            if needed is not None and not (needed & context.roles):
                return Decision(
                    "deny", self.name, "role_missing", {"tool": call.spec.name, "roles": sorted(needed)}
                )
        return None


@dataclass(frozen=True)
class TargetOwnership:
    """The call's target must exist in the trusted catalog and belong to the context's tenant (T4)."""

    catalog: Catalog
    name: str = "tenant_scope"

    def check(self, call: ProposedCall, context: TrustedContext) -> Decision | None:
        target = call.spec.target
        if target is None:
            return None
        target_id = call.arguments.get(target.argument)
        if not isinstance(target_id, str):
            return Decision("deny", self.name, "target_missing", {"argument": target.argument})
        owner = self.catalog.owner(target.kind, target_id)
        if owner is None:
            return Decision("deny", self.name, "target_unknown", {"kind": target.kind, "id": target_id})
        if owner != context.tenant:
            # The foreign owner is not echoed: the decision must not leak other tenants' data.
            return Decision("deny", self.name, "cross_tenant", {"kind": target.kind, "id": target_id})
        return None


@dataclass(frozen=True)
class Egress:
    """Destinations of sending tools must be on the allowlist (T8). Subdomains must be listed too.

    A destination that clients could read as another host (``destination_of`` raises) is refused
    as ``egress_ambiguous``."""

    allowed: frozenset[str]
    name: str = "egress"

    def __post_init__(self) -> None:
        allowed = name_set(self.allowed, what="egress")
        object.__setattr__(self, "allowed", frozenset(d.lower() for d in allowed))

    def check(self, call: ProposedCall, context: TrustedContext) -> Decision | None:
        names = call.spec.egress_arguments
        if not names:
            if call.spec.effect is Effect.SEND:
                return Decision("deny", self.name, "egress_undeclared", {"tool": call.spec.name})
            return None
        found = 0
        for arg in names:
            raw = received(call, arg)
            # Absent, null or an empty list names no destination here; a send where no declared
            # argument names one goes where the tool's default goes, unchecked: ``egress_missing``.
            for v in raw if isinstance(raw, list) else [] if raw is None else [raw]:
                if not isinstance(v, str) or not v.strip():
                    return Decision("deny", self.name, "egress_missing", {"argument": arg})
                try:
                    dests = destinations_of(v)  # a mailto: URI's every address
                except ValueError:
                    # Not one unambiguous host: the tool's client might reach another one than we see.
                    return Decision("deny", self.name, "egress_ambiguous", {"argument": arg})
                for dest in dests:
                    if dest not in self.allowed:
                        return Decision("deny", self.name, "egress_not_allowed", {"destination": dest})
                found += 1
        if not found:
            return Decision("deny", self.name, "egress_missing", {"argument": names[0]})
        return None


_VERDICT_RANK = {"allow": 0, "approve": 1, "deny": 2}


def judged_as_received(
    policy: Policy, call: ProposedCall, context: TrustedContext, received: Mapping[str, Any] | None
) -> Decision:
    """``policy``'s decision on ``call``, and, where the tool's own validators change what its
    function receives (``received``: a value decoded, stripped, lower-cased, one argument filled
    from another), on that too: the stricter of the two, for a value is judged as the tool gets
    it. A decision on both that asks a reviewer says what the tool receives (its secret
    arguments left out). What the tool receives includes what it may decode on its own, unasked
    (``self_decoded``: a base64 text a store keeps decoded)."""
    received = self_decoded(call.arguments if received is None else received) or received
    if received is None or dict(received) == call.arguments:
        return policy.check(call, context)
    reshaped = frozenset(k for k in {*call.arguments, *received} if call.arguments.get(k) != received.get(k))
    decision = policy.check(replace(call, reshaped=reshaped), context)
    other = policy.check(replace(call, arguments=dict(received)), context)
    if other is not None and _VERDICT_RANK[other.verdict] > _VERDICT_RANK[decision.verdict]:
        decision = other
    if decision.verdict == "allow":
        return decision
    secret = set(call.spec.secret_arguments)
    changed = {k: v for k, v in received.items() if k not in secret and call.arguments.get(k, None) != v}
    return replace(decision, details={**decision.details, "received": changed})


def received(call: ProposedCall, argument: str) -> Any:
    """What the tool gets for ``argument``: the call's value, or the schema's default when the
    call leaves it out (a default destination is a destination too)."""
    if argument in call.arguments:
        return call.arguments[argument]
    props = call.spec.parameters.get("properties")
    prop = props.get(argument) if isinstance(props, dict) else None
    return prop.get("default") if isinstance(prop, dict) else None


@dataclass(frozen=True)
class EffectApproval:
    """Side-effecting calls need approval unless their effect is listed as automatic."""

    automatic: frozenset[Effect] = frozenset({Effect.READ})
    name: str = "effect"

    def __post_init__(self) -> None:
        effects = name_set(self.automatic, what="automatic_effects")  # Effect is a str enum
        object.__setattr__(self, "automatic", frozenset(Effect(e) for e in effects))

    def check(self, call: ProposedCall, context: TrustedContext) -> Decision | None:
        spec = call.spec
        needs = spec.needs_approval if spec.needs_approval is not None else spec.effect not in self.automatic
        if needs:
            return Decision("approve", self.name, "approval_required", {"effect": str(spec.effect)})
        return None


class Policy:
    """The host's rules, evaluated in order: allowlist → roles → tenant scope → egress → effect → extra
    rules. ``roles`` maps a tool name to the roles of which the context must hold one."""

    def __init__(
        self,
        *,
        allow: Iterable[str] | None = None,
        deny: Iterable[str] = (),
        catalog: Catalog | None = None,
        egress: Iterable[str] | None = None,
        automatic_effects: Iterable[Effect] = (Effect.READ,),
        rules: Iterable[Rule] = (),
        roles: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        # A bare string is a TypeError (name_set): allow="read_order" must not mean its letters.
        self.allowlist = Allowlist(
            name_set(allow, what="Policy.allow") if allow is not None else None,
            name_set(deny, what="Policy.deny"),
        )
        chain: list[Rule] = [self.allowlist]
        if roles:
            chain.append(RoleRequirement({tool: frozenset(r) for tool, r in roles.items()}))
        if catalog is not None:
            chain.append(TargetOwnership(catalog))
        chain.append(Egress(name_set(egress if egress is not None else (), what="Policy.egress")))
        automatic = name_set(automatic_effects, what="Policy.automatic_effects")  # Effect is a str enum
        chain.append(EffectApproval(frozenset(Effect(e) for e in automatic)))
        chain.extend(rules)
        self.rules: tuple[Rule, ...] = tuple(chain)

    def unchecked_targets(self, specs: Iterable[ToolSpec]) -> list[str]:
        """Tools that declare a target although no rule checks targets (no catalog): their tenant
        ownership is not checked, which a deployer should hear at start."""
        if any(isinstance(rule, TargetOwnership) for rule in self.rules):
            return []
        return sorted(spec.name for spec in specs if spec.target is not None)

    def permits_tool(self, name: str, remote_name: str = "") -> bool:
        """Whether a tool may be offered to the model at all."""
        return self.allowlist.permits(name, remote_name=remote_name)

    def check(self, call: ProposedCall, context: TrustedContext) -> Decision:
        pending: Decision | None = None
        for rule in self.rules:
            decision = rule.check(call, context)
            if decision is None:
                continue
            if decision.verdict == "deny":
                return decision
            if decision.verdict == "approve" and pending is None:
                pending = decision
        if pending is None:
            return Decision("allow", "policy", "allowed")
        masked = call.spec.secret_arguments
        if masked:
            # Recorded with the proposal: a reviewer's page and the API mask these values.
            pending = replace(pending, details={**pending.details, "masked_arguments": sorted(masked)})
        return pending
