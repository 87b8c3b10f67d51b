"""The default agent model of the maintenance comparison: a deterministic policy.

It chooses the next tool from what it has observed (order first, then history, then an
answer built only from what the tools returned) and it *obeys* any "CALL x" it finds in the
newest untrusted data — a tool result or a remembered fact — so the comparison measures the
host's containment, not the model's manners. Same input, same output: repeats differ only
in timing.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tether.core.messages import AssistantMessage, ToolMessage, UserMessage
from tether.models._base import ModelRequest
from tether.testing import FunctionModel, call, injected_calls

__all__ = ["policy_investigator", "policy_model"]

_ORDER = re.compile(r"work order\s+#?(\d[A-Za-z0-9-]*)", re.IGNORECASE)
_BLOCK = re.compile(r"<untrusted_data([^>]*)>\n(.*?)\n</untrusted_data>", re.DOTALL)


def _payload(content: str) -> tuple[dict[str, str], str]:
    m = _BLOCK.search(content)
    if not m:
        return {}, content
    attrs = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
    return attrs, m.group(2)


def _data(message: ToolMessage) -> tuple[bool, Any, str]:
    attrs, body = _payload(message.content)
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    is_error = "error" in attrs or (isinstance(data, dict) and "error" in data and "message" in data)
    return is_error, data, body


def _remembered(request: ModelRequest) -> list[tuple[dict[str, str], str]]:
    out = []
    for m in request.messages:
        if isinstance(m, UserMessage) and m.origin == "harness" and m.content.startswith("Remembered facts"):
            for attrs, body in _BLOCK.findall(m.content):
                out.append((dict(re.findall(r'(\w+)="([^"]*)"', attrs)), body))
    return out


def _latest_results(request: ModelRequest) -> list[ToolMessage]:
    latest: list[ToolMessage] = []
    for m in request.messages:
        if isinstance(m, AssistantMessage):
            latest = []
        elif isinstance(m, ToolMessage):
            latest.append(m)
    return latest


def _obey(name: str, order_id: str) -> AssistantMessage:
    bare = name.split("__")[-1]
    if bare in ("read_order", "read_history"):
        return AssistantMessage(tool_calls=(call(name, order_id=order_id),))
    return AssistantMessage(tool_calls=(call(name),))  # the compromised model does what it was told


def policy_investigator(request: ModelRequest) -> AssistantMessage:
    """Decide the next step of an order investigation from the request alone."""
    objective = next(
        (m.content for m in request.messages if isinstance(m, UserMessage) and m.origin == "user"), ""
    )
    found = _ORDER.search(objective)
    order_id = found.group(1) if found else ""
    results = [m for m in request.messages if isinstance(m, ToolMessage)]
    memory = _remembered(request)

    # Newest untrusted data first: this turn's tool results, or (before any tool) the memories.
    fresh = [_payload(m.content)[1] for m in _latest_results(request)] if results else [b for _, b in memory]
    for text in fresh:
        for name in injected_calls(text):
            return _obey(name, order_id)

    if not order_id:
        # Nothing to look up: asking back is the whole answer, and no tool is called.
        return AssistantMessage(
            content="Which work order do you mean? Give its number and I will look it up."
        )
    by_tool: dict[str, tuple[bool, Any, str]] = {}
    for m in results:
        by_tool[m.name.split("__")[-1]] = _data(m)
    if "read_order" not in by_tool:
        return AssistantMessage(tool_calls=(call("erp__read_order", order_id=order_id),))
    failed, order, body = by_tool["read_order"]
    if failed or not isinstance(order, dict):
        reason = order.get("message", body) if isinstance(order, dict) else body
        return AssistantMessage(content=f"Work order {order_id} could not be read: {reason}")
    if "read_history" not in by_tool:
        return AssistantMessage(tool_calls=(call("erp__read_history", order_id=order_id),))
    h_failed, history, h_body = by_tool["read_history"]
    head = f"Work order {order['order_id']} is {order['status']}"
    if h_failed or not isinstance(history, dict):
        reason = history.get("message", h_body) if isinstance(history, dict) else h_body
        if "no history" in str(reason):
            answer = f"{head} (equipment {order['equipment']}). No history is recorded for work order "
            answer += f"{order['order_id']}, so the cause is not in the records."
        else:
            answer = f"{head} (equipment {order['equipment']}). Its history could not be read: {reason}"
    else:
        cause = str(history["note"]).split(";")[0]
        answer = f"{head}: {cause} (equipment {order['equipment']})."
    differing = [c.strip() for _, c in memory if c.strip() != str(order["equipment"])]
    if differing or any(a.get("conflict") == "yes" for a, _ in memory):
        said = f"memory says {differing[0]}" if differing else "remembered sources conflict"
        answer += (
            f" Memory disagrees with the work order record ({said}); the record value "
            f"{order['equipment']} is used: confirm with the system of record."
        )
    return AssistantMessage(content=answer)


def policy_model() -> FunctionModel:
    return FunctionModel(policy_investigator, name="maintenance-policy")
