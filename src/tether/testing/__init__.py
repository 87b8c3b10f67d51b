"""Test doubles shipped with tether, for tests, demos and scripts.

- model stand-ins: ``ScriptedModel`` (replays turns), ``FunctionModel`` (a function of the
  request), and helpers to write them: ``call``, ``final``, ``tool_results``,
  ``injected_calls`` (what a compromised model obeys), ``estimate_tokens``.

They are pure Python and the harness itself uses some (a scripted model named in an agent file,
the evaluation runner's injected model), so they stay in the library. The chat-completions server
on 127.0.0.1 that tether's own backend tests use is not shipped: it is ``tether_testing`` in
tether's repository (``pip install -e testing``).

For approvals without a database file, see ``tether.policy.MemoryApprovalStore``.
"""

from tether.testing._models import (
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
    "FunctionModel",
    "ModelFunction",
    "ScriptedModel",
    "Turn",
    "call",
    "estimate_tokens",
    "final",
    "injected_calls",
    "tool_results",
]
