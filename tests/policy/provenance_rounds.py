"""The provenance rounds' one run: a scripted model makes the given turns of calls on a host
whose policy is the rules given; the result is each denied call's problems, in order."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from tether import Agent, Host, TrustedContext
from tether.core.messages import AssistantMessage
from tether.core.types import CallRecord, Observation
from tether.policy._provenance_rules import ProvenancePolicy, ProvenanceRules, make_labeler
from tether.testing import FunctionModel
from tether.trace._events import EventKind

CTX = TrustedContext(tenant="acme", user="emma")


class LabelledRun:
    """A run state as the rules read it: the request and the observations so far, each labelled
    by the trust configuration ``trust`` (for rules checked directly, with no host)."""

    def __init__(self, trust: Any, objective: str) -> None:
        self.objective = objective
        self.observations: list[Observation] = []
        self.calls: list[CallRecord] = []
        self._label = make_labeler(trust)

    def observe(self, tool: str, data: Any) -> LabelledRun:
        call_id = f"c{len(self.observations)}"
        obs = Observation(call_id, tool, "test", datetime.now(UTC), json.dumps(data), data)
        self.observations.append(self._label(obs))
        return self


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
