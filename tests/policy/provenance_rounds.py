"""The provenance rounds' one run: a scripted model makes the given turns of calls on a host
whose policy is the rules given; the result is each denied call's problems, in order."""

from __future__ import annotations

from typing import Any

from tether import Agent, Host, TrustedContext
from tether.core.messages import AssistantMessage
from tether.policy._provenance_rules import ProvenancePolicy, ProvenanceRules, make_labeler
from tether.testing import FunctionModel
from tether.trace._events import EventKind

CTX = TrustedContext(tenant="acme", user="emma")


async def _run(
    tools: list[Any], rules: ProvenanceRules, request: str, *turns: tuple[Any, ...]
) -> list[list[str]]:
    steps = list(turns)
    model = FunctionModel(
        lambda _: AssistantMessage(tool_calls=steps.pop(0)) if steps else AssistantMessage(content="done")
    )
    host = Host(policy=ProvenancePolicy(rules), on_denied="continue", labeler=make_labeler(rules.config))
    host.add_tools(*tools)
    async with host:
        result = await host.run(Agent("act", model), request, context=CTX)
    denied = [e for e in result.events if e.kind is EventKind.POLICY_DENIED]
    return [[p["problem"] for p in e.data["details"]["problems"]] for e in denied]
