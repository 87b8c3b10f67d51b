"""Test doubles shipped with tether, for tests, demos and scripts.

- model stand-ins: ``ScriptedModel`` (replays turns), ``FunctionModel`` (a function of the
  request), and helpers to write them: ``call``, ``final``, ``tool_results``,
  ``injected_calls`` (what a compromised model obeys), ``estimate_tokens``;
- a chat-completions server on 127.0.0.1 for the OpenAI-compatible backend: ``FakeChatServer``
  with ``Reply``, ``Received``, ``scripted`` and ``tool_loop_responder``
  (``python -m tether_testing.fake_server`` runs it as a process).

For approvals without a database file, see ``tether.policy.MemoryApprovalStore``.
"""

from tether_testing.fake_server import FakeChatServer, Received, Reply, scripted, tool_loop_responder
from tether.testing.models import (
    FunctionModel,
    ModelFunction,
    ScriptedModel,
    Turn,
    call,
    estimate_tokens,
    final,
    injected_calls,
    tool_results,
)

__all__ = [
    "FakeChatServer",
    "FunctionModel",
    "ModelFunction",
    "Received",
    "Reply",
    "ScriptedModel",
    "Turn",
    "call",
    "estimate_tokens",
    "final",
    "injected_calls",
    "scripted",
    "tool_loop_responder",
    "tool_results",
]
